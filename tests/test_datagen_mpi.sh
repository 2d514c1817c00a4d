#!/usr/bin/env bash
# datagen under mpirun: np 1, 2, 3 x threads 1, 2 give byte-identical batch files, and dataset.json
# differs only in its "timings"; the samples are the Fashion-MNIST images with their labels.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_datagen_mpi.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
mpi=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

"$bin/datagen" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" --classes-out "$work/classes.txt"
[ "$(wc -l < "$work/classes.txt")" -eq 10 ] || { echo "classes.txt should list 10 classes"; exit 1; }

run() {  # run <name> <np or 0 for no mpirun> <threads>
  local cmd=("$bin/datagen" --input "$work/t10k.tar" --output "$work/$1" --size 28 --channels 1
             --classes "$work/classes.txt" --per-file 700 --seed 7 --threads "$3")
  if [ "$2" -eq 0 ]; then "${cmd[@]}" 2> "$work/$1.log"; else "${mpi[@]}" -np "$2" "${cmd[@]}" 2> "$work/$1.log"; fi
}

run ref 0 1
! grep -q "MPI init [1-9]" "$work/ref.log" || { echo "a run without mpirun started MPI"; cat "$work/ref.log"; exit 1; }
n=$(ls "$work/ref"/batch_*.cvb | wc -l)
[ "$n" -eq 15 ] || { echo "expected 15 batch files, got $n"; exit 1; }
for np in 1 2 3; do
  for t in 1 2; do
    run "np${np}_t${t}" "$np" "$t"
    for f in "$work/ref"/batch_*.cvb; do
      cmp "$f" "$work/np${np}_t${t}/$(basename "$f")" || { echo "np $np threads $t: $(basename "$f") differs"; exit 1; }
    done
    [ "$(ls "$work/np${np}_t${t}"/batch_*.cvb | wc -l)" -eq "$n" ] || { echo "np $np: file count differs"; exit 1; }
    # One progress display for the whole job: rank 0 counts every rank's images.
    grep -q "progress 10000/10000 images" "$work/np${np}_t${t}.log" || { echo "np $np: no job-wide progress"; exit 1; }
    /usr/bin/python3 - "$work/ref/dataset.json" "$work/np${np}_t${t}/dataset.json" "$np" "$t" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a.pop("timings"), b.pop("timings")
assert a == b, "dataset.json differs beyond timings"
assert tb["ranks"] == int(sys.argv[3]) and tb["threads"] == int(sys.argv[4]), tb
PY
  done
done

# Whole images (--resize short:S, batch-file format v2), raw and JPEG: ranks and threads give the
# same bytes too.
for enc in raw jpeg; do
  v2=(--input "$work/t10k.tar" --size 20 --resize short --max-side 24 --channels 1 --classes "$work/classes.txt"
      --per-file 2500 --seed 7 --encoding "$enc")
  "$bin/datagen" "${v2[@]}" --output "$work/v2_ref_$enc" --threads 1 2> /dev/null
  "${mpi[@]}" -np 3 "$bin/datagen" "${v2[@]}" --output "$work/v2_np3_$enc" --threads 2 2> /dev/null
  for f in "$work/v2_ref_$enc"/batch_*.cvb; do
    cmp "$f" "$work/v2_np3_$enc/$(basename "$f")" || { echo "v2 $enc np 3: $(basename "$f") differs"; exit 1; }
  done
  "$bin/datagen" verify "$work/v2_np3_$enc" > /dev/null || { echo "v2 $enc np 3 does not verify"; exit 1; }
done

# Fewer batch files than ranks: one line says how many ranks idle and which --per-file deals evenly.
"${mpi[@]}" -np 3 "$bin/datagen" --input "$work/t10k.tar" --output "$work/few" --size 8 --channels 1 \
  --classes "$work/classes.txt" --per-file 5000 --threads 1 2> "$work/few.log"
grep -q "3 ranks and 2 batch files of 5000 samples: .* work only 67 % of the run; --per-file 3334 deals them evenly" \
  "$work/few.log" || { echo "no line about the idle rank"; cat "$work/few.log"; exit 1; }
! grep -q "deals them evenly" "$work/np3_t1.log" || { echo "15 files for 3 ranks is even"; exit 1; }

# The samples are the right images: compare against the IDX files, slot by slot, via the sample ids
# and the saved index (each PNG's name holds its IDX position).
/usr/bin/python3 - "$work/ref" "$fm" <<'PY'
import gzip, json, sys, struct
import numpy as np
d, fm = sys.argv[1], sys.argv[2]
meta = json.load(open(f"{d}/dataset.json"))
assert meta["num_samples"] == 10000 and meta["class_counts"] == [1000] * 10, meta["class_counts"]
assert abs(meta["mean"][0] - 73.15) < 0.05 and abs(meta["std"][0] - 89.87) < 0.05, (meta["mean"], meta["std"])
imgs = np.frombuffer(gzip.open(f"{fm}/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28)
labels = np.frombuffer(gzip.open(f"{fm}/t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)
lines = open(f"{d}/index.tsv").read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith("entries\t")) + 1
paths = [l.split("\t")[4] for l in lines[start:]]
seen = set()
for f in meta["files"]:
    raw = open(f"{d}/{f['name']}", "rb").read()
    count, h, w, c = struct.unpack_from("<IIII", raw, 16)
    lab_off, ids_off = struct.unpack_from("<QQ", raw, 40)
    img_off = struct.unpack_from("<Q", raw, 64)[0]
    labs = np.frombuffer(raw, np.int32, count, lab_off)
    ids = np.frombuffer(raw, np.int64, count, ids_off)
    px = np.frombuffer(raw, np.uint8, count * 784, img_off).reshape(count, 28, 28)
    for k in range(count):
        pos = int(paths[ids[k]].split("/")[1].split(".")[0])
        assert labs[k] == labels[pos], (f["name"], k)
        assert (px[k] == imgs[pos]).all(), (f["name"], k)
        seen.add(pos)
assert len(seen) == 10000
PY
echo "ok"
