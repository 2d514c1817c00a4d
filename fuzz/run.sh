#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time.
# Usage: fuzz/run.sh [seconds per target, default 60] [build folder, default build-fuzz]
set -euo pipefail
seconds=${1:-60}
src=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$src/build-fuzz}
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cxx" ] && [ -n "$cc" ] || { echo "fuzz/run.sh: clang is needed (Debian: clang-14 libclang-rt-14-dev)" >&2; exit 1; }
cmake -S "$src/fuzz" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" > /dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_archive_index fuzz_image_decode fuzz_batch_file

# Seeds: a real batch file, a tar of images and the images themselves, made by the tools if present.
corpus=$build/corpus
mkdir -p "$corpus"/{archive_index,image_decode,batch_file}
tools=${CONVOY_BIN:-$src/build}
if [ -x "$tools/train" ] && [ -x "$tools/datagen" ]; then
  seed=$(mktemp -d)
  "$tools/train" synth --out "$seed/ds" --files 1 --per-file 3 --size 8 --channels 3 --classes 2 2> /dev/null
  cp "$seed"/ds/*.cvb "$corpus/batch_file/"
  "$tools/train" synth --out "$seed/jp" --files 1 --per-file 2 --size 8 --channels 3 --classes 2 --encoding jpeg 2> /dev/null
  cp "$seed"/jp/*.cvb "$corpus/batch_file/"
  "$tools/datagen" preview "$seed/ds" --out "$corpus/image_decode/grid.png" --count 3 2> /dev/null
  (cd "$seed" && tar cf "$corpus/archive_index/seed.tar" ds && tar czf "$corpus/archive_index/seed.tar.gz" ds)
  rm -rf "$seed"
fi

status=0
for target in fuzz_archive_index fuzz_image_decode fuzz_batch_file; do
  echo "== $target for ${seconds}s"
  "$build/$target" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
    -artifact_prefix="$build/$target-" "$corpus/${target#fuzz_}" 2>&1 | tail -n 4 || status=1
done
exit $status
