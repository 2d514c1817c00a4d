#!/usr/bin/env bash
# Builds train once for each patch here, in a copy of the committed tree (the checkout is left alone):
# OUTDIR/train_<patch name>, for benchmarks/scaling_bound.sh's VARIANTS. Needs CUDA (nvcc).
#
#   dev/variants/build.sh OUTDIR [PATCH...]      (default: every dev/variants/*.patch)
set -euo pipefail
(($# >= 1)) || { echo "usage: $0 OUTDIR [PATCH...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1" && out=$(cd "$1" && pwd) && shift
patches=("$@")
((${#patches[@]})) || patches=("$here"/dev/variants/*.patch)
for p in "${patches[@]}"; do [ -s "$p" ] || { echo "build.sh: $p: no such patch" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git -C "$here" archive HEAD | tar x -C "$tmp/src"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" -DCONVOY_TESTS=OFF \
  -DCONVOY_PYTHON=OFF >/dev/null
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  patch -d "$tmp/src" -p1 --quiet < "$p"
  cmake --build "$tmp/build" -j"$(nproc)" --target train >/dev/null
  cp "$tmp/build/train" "$out/train_$name"
  patch -d "$tmp/src" -p1 -R --quiet < "$p"
  echo "$out/train_$name"
done
