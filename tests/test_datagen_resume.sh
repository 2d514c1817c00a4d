#!/usr/bin/env bash
# datagen killed (SIGKILL) part-way through a run, then rerun with the same command (here under
# mpirun -np 2): it keeps the batch files whose checksums verify, redoes the rest, and ends
# byte-identical to an uninterrupted run; dataset.json never appears before the end.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_datagen_resume.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

"$bin/datagen" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar"
args=(--input "$work/t10k.tar" --size 96 --channels 3 --per-file 100 --seed 5 --threads 1)

"$bin/datagen" "${args[@]}" --output "$work/ref" 2> "$work/ref.log"
total=$(ls "$work/ref"/batch_*.cvb | wc -l)

"$bin/datagen" "${args[@]}" --output "$work/out" 2> "$work/killed.log" &
pid=$!
for _ in $(seq 1 2000); do
  n=$(ls "$work/out" 2>/dev/null | grep -c '^batch_.*\.cvb$' || true)
  [ "$n" -ge 5 ] && break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null || { echo "the run ended before it could be killed"; exit 1; }
wait "$pid" 2>/dev/null || true
done_files=$(ls "$work/out" | grep -c '^batch_.*\.cvb$' || true)
echo "killed with $done_files of $total batch files written"
[ "$done_files" -lt "$total" ] || { echo "the kill came too late to test anything"; exit 1; }
[ ! -e "$work/out/dataset.json" ] || { echo "dataset.json exists after the kill"; exit 1; }

"${mpi[@]}" "$bin/datagen" "${args[@]}" --output "$work/out" 2> "$work/resume.log"
for f in "$work/ref"/batch_*.cvb; do
  cmp "$f" "$work/out/$(basename "$f")" || { echo "$(basename "$f") differs after resume"; exit 1; }
done
[ "$(ls "$work/out"/batch_*.cvb | wc -l)" -eq "$total" ]
ls "$work/out" | grep -q '\.tmp\.' && { echo "temporary files left behind"; exit 1; }
/usr/bin/python3 - "$work/ref/dataset.json" "$work/out/dataset.json" "$done_files" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a.pop("timings"), b.pop("timings")
assert a == b, "dataset.json differs beyond timings"
assert tb["kept_files"] == int(sys.argv[3]), tb  # every file renamed into place is whole
PY
"$bin/datagen" verify "$work/out"
echo ok
