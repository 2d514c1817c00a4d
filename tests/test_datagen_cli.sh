#!/usr/bin/env bash
# datagen's command line: bad flags and inputs refused with one clear line before any work;
# verify (sound, and a flipped byte found), inspect, preview, classes; a JPEG-encoded dataset.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_datagen_cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
dg="$bin/datagen"

refused() {  # refused <words expected in the error> <datagen args...>
  local words=$1
  shift
  if "$dg" "$@" > "$work/out.txt" 2> "$work/err.txt"; then echo "accepted: $*"; exit 1; fi
  grep -q -- "$words" "$work/err.txt" || { echo "no '$words' in: $(cat "$work/err.txt")"; exit 1; }
}

refused "Usage" 
"$dg" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" --classes-out "$work/classes.txt"
refused "not an IDX file" idx2tar --images "$fm/t10k-labels-idx1-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" --out "$work/x.tar"
[ ! -e "$work/x.tar" ] || { echo "a failed idx2tar left a tar behind"; exit 1; }

common=(--output "$work/ds" --per-file 3000)
ok=(--input "$work/t10k.tar" "${common[@]}" --size 28 --channels 1 --classes "$work/classes.txt")
in=(--input "$work/t10k.tar" "${common[@]}")
refused "--channels: 2 not in {1,3}" "${in[@]}" --size 28 --channels 2
refused "--size: Value 0 not in range" "${in[@]}" --size 0
refused "--gpu-resize makes square samples only" "${in[@]}" --size 28 --resize short --gpu-resize
refused "--resize: must be crop, squash or short:S" "${in[@]}" --size 28 --resize stretch
refused "--encoding: png not in" "${in[@]}" --size 28 --encoding png
refused "--quality" "${in[@]}" --size 28 --encoding jpeg --quality 101
refused "missing.tar: input cannot be read" --input "$work/missing.tar" "${common[@]}" --size 28
refused "nope.txt" "${in[@]}" --size 28 --classes "$work/nope.txt"
refused "--input is required" "${common[@]}" --size 28
refused "not expected" "${ok[@]}" --bogus
refused "--gpu-route" "${ok[@]}" --gpu-route sometimes
refused "--gpu-min-saving: must be at least 0" "${ok[@]}" --gpu-min-saving -1
# --gpu-resize without CUDA in the build, or without a device, is refused before any work.
if ! "$dg" --input "$work/t10k.tar" --output "$work/gpu" --size 28 --channels 1 --gpu-resize > "$work/out.txt" 2> "$work/err.txt"; then
  grep -qE -- "--gpu-resize: (this datagen was built without CUDA|no CUDA device)" "$work/err.txt" ||
    { echo "unclear --gpu-resize refusal: $(cat "$work/err.txt")"; exit 1; }
  [ "$(wc -l < "$work/err.txt")" -eq 1 ] || { echo "--gpu-resize refusal is not one line"; exit 1; }
  [ ! -e "$work/gpu" ] || { echo "a refused --gpu-resize run created its output folder"; exit 1; }
fi
[ ! -e "$work/ds" ] || { echo "refused runs created the output folder"; exit 1; }

"$dg" "${ok[@]}" --timeline "$work/timeline.json" 2> "$work/run.log"
grep -q "phases" "$work/run.log" || { echo "no per-phase breakdown"; exit 1; }
grep -qE "steps, wall seconds on rank 0: exec [0-9.]+, MPI init [0-9.]+, index [0-9.]+, .*finish [0-9.]+" "$work/run.log" ||
  { echo "no start-up and end steps on the phase line"; exit 1; }
# The timeline: Chrome trace events, one track per decoding and writer thread, the start-up steps
# on the main thread, a span for every sample's decode, and the same steps in dataset.json.
/usr/bin/python3 - "$work/timeline.json" "$work/ds/dataset.json" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
spans = collections.Counter(e["name"] for e in events if e["ph"] == "X")
assert any(n.startswith("main") for n in names.values()) and any(n.startswith("writer") for n in names.values()), names
for step in ("exec", "index", "broadcast", "plan", "set-up", "reduce", "finish"):
    assert spans[step] == 1, (step, spans)
assert spans["decode"] == 10000 and spans["write"] >= 4 and spans["fsync"] == 4, spans
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e["ph"] == "X")
steps = json.load(open(sys.argv[2]))["timings"]["steps"]
assert set(steps) >= {"exec", "mpi_init", "index", "files", "drain"}, steps
PY
grep -q "progress 10000/10000" "$work/run.log" || { echo "no final progress line"; exit 1; }
"$dg" verify "$work/ds"
"$dg" inspect "$work/ds" > "$work/inspect.txt"
grep -q "10000 in 4 batch files" "$work/inspect.txt" || { cat "$work/inspect.txt"; exit 1; }
grep -q "Ankle_boot" "$work/inspect.txt"
"$dg" preview "$work/ds" --out "$work/grid.png" --count 16
[ "$(head -c 4 "$work/grid.png" | tail -c 3)" = "PNG" ] || { echo "preview did not write a PNG"; exit 1; }
"$dg" classes "$work/ds" --out "$work/classes2.txt"
cmp "$work/classes.txt" "$work/classes2.txt"
# "-", a descriptor's name or a device or FIFO is written straight, not through a renamed temporary.
"$dg" classes "$work/ds" --out - | cmp - "$work/classes.txt" || { echo "classes --out - differs"; exit 1; }
"$dg" classes "$work/ds" --out /dev/stdout | cmp - "$work/classes.txt" || { echo "classes --out /dev/stdout differs"; exit 1; }
echo "first line" > "$work/appended.txt"
"$dg" classes "$work/ds" --out /dev/stdout >> "$work/appended.txt"
cmp "$work/appended.txt" <(echo "first line"; cat "$work/classes.txt") || { echo "--out /dev/stdout did not append after >>"; exit 1; }
mkfifo "$work/fifo"
cat "$work/fifo" > "$work/from-fifo.txt" &
timeout 30 "$dg" classes "$work/ds" --out "$work/fifo"
wait $!
cmp "$work/from-fifo.txt" "$work/classes.txt" || { echo "classes through a FIFO differs"; exit 1; }
[ -p "$work/fifo" ] || { echo "the FIFO was replaced"; exit 1; }
"$dg" classes "$work/ds" --out /dev/null
[ -c /dev/null ] || { echo "/dev/null is no longer a device"; exit 1; }
[ "$("$dg" preview "$work/ds" --out - --count 4 2> /dev/null | head -c 4 | tail -c 3)" = PNG ] ||
  { echo "preview --out - wrote no PNG to standard output"; exit 1; }

# A flipped byte anywhere in a batch file is found by verify, naming the file.
printf '\x01' | dd of="$work/ds/batch_00002.cvb" bs=1 seek=200000 conv=notrunc 2> /dev/null
refused "batch_00002.cvb" verify "$work/ds"
refused "different datagen run" "${in[@]}" --size 32 --channels 1 --classes "$work/classes.txt"

"$dg" --input "$work/t10k.tar" --output "$work/jpeg" --size 32 --channels 3 --encoding jpeg --quality 80 \
  --per-file 5000 2> /dev/null
"$dg" verify "$work/jpeg"
grep -q '"encoding": "jpeg"' "$work/jpeg/dataset.json"

# bench-decode: refuses a tar without JPEGs in one line; on JPEGs, gives every measurement a rate,
# the entropy decoding alone (libjpeg, error handler that returns instead of exiting) included.
refused "holds no RGB or gray JPEG images" bench-decode --input "$work/t10k.tar"
/usr/bin/python3 - "$work/jpegs.tar" <<'PY'
import io, sys, tarfile
from PIL import Image
with tarfile.open(sys.argv[1], "w") as tar:
    for i in range(6):
        img = Image.effect_noise((96 + 8 * i, 64), 40 + 10 * i).convert("RGB")
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=85, progressive=i % 2 == 1)
        info = tarfile.TarInfo(f"c{i % 2}/img{i}.jpg")
        info.size = buf.tell()
        buf.seek(0)
        tar.addfile(info, buf)
PY
"$dg" bench-decode --input "$work/jpegs.tar" --size 32 --limit 6 --repeat 1 > "$work/bench.txt"
# --concurrent: that many plain decoders at once, each with its rate, and their sum.
"$dg" bench-decode --input "$work/jpegs.tar" --size 32 --limit 6 --concurrent 2 --seconds 0.2 > "$work/ceiling.txt"
[ "$(grep -cE "^  decoder [01] \(cpu -?[0-9]+\): [0-9]+\.[0-9] images/s" "$work/ceiling.txt")" -eq 2 ] &&
  grep -qE "^images/s in all: [0-9]+\.[0-9]" "$work/ceiling.txt" || { cat "$work/ceiling.txt"; exit 1; }
grep -q "6 JPEGs" "$work/bench.txt" || { cat "$work/bench.txt"; exit 1; }
for what in "floor" "entropy decoding alone" "no resize" "(DCT scaling) + resize" "(full size) + resize"; do
  grep -F -- "$what" "$work/bench.txt" | grep -qE " [0-9]+\.[0-9] images/s" ||
    { echo "bench-decode gave no rate for '$what':"; cat "$work/bench.txt"; exit 1; }
done
echo ok
