#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time.
# Usage: fuzz/run.sh [seconds per target, default 60] [build folder, default build-fuzz]
# Exit status 1 when a target crashed, leaked or hit undefined behaviour; its input is kept as
# <build>/<target>-crash-* (or -leak-, -timeout-, -oom-) and its log as <build>/<target>.log.
set -euo pipefail
seconds=${1:-60}
src=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$src/build-fuzz}
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cxx" ] && [ -n "$cc" ] || { echo "fuzz/run.sh: clang is needed (Debian: clang libclang-rt-14-dev libomp-dev)" >&2; exit 1; }
cmake -S "$src/fuzz" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" > /dev/null
targets=(fuzz_archive_index fuzz_image_decode fuzz_batch_file fuzz_net_config fuzz_checkpoint)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

# Seeds: the corpora kept in fuzz/corpus/<target> (net configs, small checkpoints, earlier runs'
# corpora reduced, every input that once found a bug), copied so that a run's additions stay out of
# the source tree; then real batch files, a tar of images (one inside an inner tar) plain and
# compressed the four ways datagen decompresses itself, an index.tsv, and the images themselves,
# made by the tools when they are there.
corpus=$build/corpus
rm -rf "$corpus"
mkdir -p "$corpus"/{archive_index,image_decode,batch_file,net_config,checkpoint}
for kept in "$src"/fuzz/corpus/*/; do
  cp -R "$kept". "$corpus/$(basename "$kept")/"
done
tools=${CONVOY_BIN:-$src/build}
if [ -x "$tools/train" ] && [ -x "$tools/datagen" ]; then
  seed=$(mktemp -d)
  "$tools/train" synth --out "$seed/ds" --files 1 --per-file 3 --size 8 --channels 3 --classes 2 2> /dev/null
  cp "$seed"/ds/*.cvb "$corpus/batch_file/raw.cvb"
  "$tools/train" synth --out "$seed/jp" --files 1 --per-file 2 --size 8 --channels 3 --classes 2 --encoding jpeg 2> /dev/null
  cp "$seed"/jp/*.cvb "$corpus/batch_file/jpeg.cvb"
  "$tools/datagen" preview "$seed/ds" --out "$corpus/image_decode/grid.png" --count 3 2> /dev/null
  /usr/bin/python3 - "$seed" "$corpus" <<'PY'
import bz2, io, lzma, sys, tarfile
from PIL import Image
seed, corpus = sys.argv[1:3]
img = Image.new("RGB", (12, 9))
img.putdata([(x * 20, y * 25, (x * y) % 256) for y in range(9) for x in range(12)])
jpg, gray = io.BytesIO(), io.BytesIO()
img.save(jpg, "JPEG", quality=80)
img.convert("L").save(gray, "JPEG", quality=60, progressive=True)
for name, data in (("rgb.jpg", jpg.getvalue()), ("gray_progressive.jpg", gray.getvalue())):
    open(f"{corpus}/image_decode/{name}", "wb").write(data)
def tar(members, mode="w"):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode, format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()
png = open(f"{corpus}/image_decode/grid.png", "rb").read()
inner = tar([("a.jpg", jpg.getvalue()), ("b.png", png)])
members = [("cls/x.jpg", jpg.getvalue()), ("n01.tar", inner), ("README", b"not an image\n")]
plain = tar(members)
open(f"{corpus}/archive_index/seed.tar", "wb").write(plain)
open(f"{corpus}/archive_index/seed.tar.gz", "wb").write(tar(members, "w:gz"))
open(f"{corpus}/archive_index/seed.tar.bz2", "wb").write(bz2.compress(plain, 1))
open(f"{corpus}/archive_index/seed.tar.xz", "wb").write(lzma.compress(plain))
PY
  ! command -v zstd > /dev/null || zstd -q -c "$corpus/archive_index/seed.tar" > "$corpus/archive_index/seed.tar.zst"
  "$tools/datagen" --input "$corpus/archive_index/seed.tar" --output "$seed/idx" --size 8 2> /dev/null || true
  [ -f "$seed/idx/index.tsv" ] && cp "$seed/idx/index.tsv" "$corpus/archive_index/index.tsv"
  rm -rf "$seed"
fi

status=0
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  echo "== $target for ${seconds}s on $(ls "$corpus/$name" | wc -l) seeds"
  dict=()
  [ ! -f "$src/fuzz/$name.dict" ] || dict=(-dict="$src/fuzz/$name.dict")
  rc=0
  "$build/$target" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 \
    "${dict[@]}" -artifact_prefix="$build/$target-" "$corpus/$name" > "$build/$target.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$target failed (exit $rc):"
    tail -n 60 "$build/$target.log"
    status=1
  else
    grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$build/$target.log" || tail -n 3 "$build/$target.log"
  fi
done
exit $status
