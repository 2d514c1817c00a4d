#!/usr/bin/env bash
# datagen SIGKILLed at 5 random moments of one run after another into the same folder, then rerun:
# byte-identical to an uninterrupted run. The seed is new each time; CONVOY_KILL_SEED=N replays one.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_kill_datagen.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
# shellcheck source=tests/kill_moments.sh
source "${CONVOY_SRC:?}/tests/kill_moments.sh"

"$bin/datagen" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" 2> /dev/null
args=(--input "$work/t10k.tar" --size 48 --channels 3 --per-file 100 --seed 5 --threads 2)

start=$(date +%s.%N)
"$bin/datagen" "${args[@]}" --output "$work/ref" 2> "$work/ref.log"
span=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
total=$(ls "$work/ref" | grep -c '^batch_.*\.cvb$')
# A rerun with nothing left to do: the fixed cost of a run (MPI start-up, checking kept files).
start=$(date +%s.%N)
"$bin/datagen" "${args[@]}" --output "$work/ref" 2> /dev/null
fixed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
echo "uninterrupted run: $total batch files in $span s; a rerun with nothing to do: $fixed s"

# What a kill may leave: whole files under their final names (each the same as the uninterrupted
# run's), temporaries, and dataset.json only once every batch file is in place.
check_folder() {
  local f name
  for f in "$work/out"/batch_*.cvb "$work/out/index.tsv"; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    cmp -s "$f" "$work/ref/$name" || { echo "$name under its final name differs from the uninterrupted run's"; exit 1; }
  done
  if [ -e "$work/out/dataset.json" ]; then
    for f in "$work/ref"/batch_*.cvb; do
      [ -e "$work/out/$(basename "$f")" ] || { echo "dataset.json exists without $(basename "$f")"; exit 1; }
    done
  fi
}

n=0
for i in "${!fractions[@]}"; do
  at=$(moment "${fractions[$i]}" "$(awk -v n="$n" -v t="$total" 'BEGIN { print 1 - n / t }')")
  "$bin/datagen" "${args[@]}" --output "$work/out" 2>> "$work/killed.log" &
  pid=$!
  sleep "$at"
  kill -9 "$pid" 2> /dev/null || true
  rc=0
  wait "$pid" 2> /dev/null || rc=$?
  n=$(ls "$work/out" 2> /dev/null | grep -c '^batch_.*\.cvb$' || true)
  case $rc in
    137) echo "kill $((i + 1)) after $at s: $n of $total batch files in place" ;;
    0) echo "kill $((i + 1)) after $at s: the run had already finished" ;;
    *) echo "kill $((i + 1)): datagen failed with status $rc"; tail -n 5 "$work/killed.log"; exit 1 ;;
  esac
  check_folder
done

"$bin/datagen" "${args[@]}" --output "$work/out" 2> "$work/resume.log"
check_folder
[ "$(ls "$work/out" | grep -c '^batch_.*\.cvb$')" -eq "$total" ] || { echo "batch file count differs"; exit 1; }
! ls "$work/out" | grep -q '\.tmp\.' || { echo "temporary files left behind"; exit 1; }
for name in rejects.tsv mean_image.png datagen_run.json; do
  cmp "$work/ref/$name" "$work/out/$name" || { echo "$name differs after the kills"; exit 1; }
done
/usr/bin/python3 - "$work/ref/dataset.json" "$work/out/dataset.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
a.pop("timings"), b.pop("timings")
assert a == b, "dataset.json differs beyond timings"
PY
"$bin/datagen" verify "$work/out" > /dev/null
echo ok
