#!/usr/bin/env bash
# Installs convoy's Debian packages (only those missing) and builds a Release build in build/.
# Idempotent: a second run installs nothing and rebuilds only what changed. Arguments name the
# targets to build (default: everything, tests included), e.g. `scripts/setup.sh datagen train`;
# the Python module lands in build/python/ (PYTHONPATH=build/python /usr/bin/python3 -c 'import convoy').
# CONVOY_BUILD_DIR picks another build folder, CONVOY_CMAKE_ARGS adds CMake options (clang and
# libomp are for the fuzz targets in fuzz/, which need libFuzzer; clang-format and clang-tidy for
# scripts/check_style.sh; munge and Slurm for the one-node cluster of tests/test_slurm_cluster.sh, which
# starts its own daemons and leaves the system's alone; gdb for tests/test_slurm_nodes.sh, which stops
# a rank at a chosen moment of MPI_Init to kill it there).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git
  libarchive-dev zlib1g-dev libbz2-dev liblzma-dev libzstd-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  libopencv-core-dev libopencv-imgproc-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libgtest-dev
  python3 python3-numpy python3-matplotlib python3-crc32c python3-pil zstd
  python3-dev pybind11-dev python3-pybind11 python3-pytest python3-torch python3-torchvision
  dataset-fashion-mnist
  clang libclang-rt-14-dev libomp-dev clang-format clang-tidy
  munge slurmctld slurmd slurm-client gdb
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# CUDA is optional: build the CUDA code when nvcc is there (on PATH or in /usr/local/cuda).
cuda_args=()
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args+=("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
fi

jobs=$(nproc 2>/dev/null || echo 2)
build=${CONVOY_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" ${CONVOY_CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j"$jobs" "${targets[@]}"
echo "setup: $build/ is up to date (${*:-all targets})"
