#!/usr/bin/env bash
# One rank of a 2-rank datagen job SIGKILLed at 5 moments (start-up to the end): mpirun ends within
# a bound with a non-zero status, nothing looks complete that is not, and a rerun is byte-identical.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_rank_death_datagen.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
kill_spread=1  # each trial starts afresh, so spread the five over the whole run
# shellcheck source=tests/kill_moments.sh
source "${CONVOY_SRC:?}/tests/kill_moments.sh"
# shellcheck source=tests/rank_death.sh
source "${CONVOY_SRC:?}/tests/rank_death.sh"

"$bin/datagen" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" 2> /dev/null
cmd=("$bin/datagen" --input "$work/t10k.tar" --size 48 --channels 3 --per-file 100 --seed 5 --threads 1)

start=$(now)
"${mpi[@]}" "${cmd[@]}" --output "$work/ref" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
span=$(elapsed "$start")
total=$(ls "$work/ref" | grep -c '^batch_.*\.cvb$')
# A rerun with nothing left to do: the fixed cost of a run (MPI start-up, checking kept files).
start=$(now)
"${mpi[@]}" "${cmd[@]}" --output "$work/ref" > /dev/null 2>&1
fixed=$(elapsed "$start")
echo "uninterrupted 2-rank run: $total batch files in $span s; a rerun with nothing to do: $fixed s"

same_meta() {  # same_meta <dataset.json> <dataset.json>: equal but for the timings
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
a.pop("timings"), b.pop("timings")
sys.exit(a != b)
PY
}

# After the kill: every file under its final name is the uninterrupted run's, and dataset.json,
# which says the dataset is complete, is there only when it is.
check_left() {  # check_left <folder>
  local f name
  for f in "$1"/batch_*.cvb "$1/index.tsv"; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    cmp -s "$f" "$work/ref/$name" || { echo "$name under its final name differs from the uninterrupted run's"; exit 1; }
  done
  [ -e "$1/dataset.json" ] || return 0
  for f in "$work/ref"/batch_*.cvb; do
    [ -e "$1/$(basename "$f")" ] || { echo "dataset.json exists without $(basename "$f")"; exit 1; }
  done
  same_meta "$work/ref/dataset.json" "$1/dataset.json" || { echo "the dataset.json left differs from the uninterrupted run's"; exit 1; }
}

for i in "${!fractions[@]}"; do
  out=$work/out$i
  rank=$(((seed + i) % 2))
  at=$(moment "${fractions[$i]}" 1)
  echo "trial $((i + 1)): rank $rank, about $at s after the start"
  run_and_kill_rank "$work/killed$i.log" "$rank" "$at" "${cmd[@]}" --output "$out"
  n=$(ls "$out" 2> /dev/null | grep -c '^batch_.*\.cvb$' || true)
  # Status 0 says the job finished before the kill took (check_left holds it to that); a failure
  # without a kill is a failure of its own.
  if [ "$rc" -eq 0 ]; then
    [ -e "$out/dataset.json" ] || { echo "mpirun exited 0 after the kill, but there is no dataset.json"; exit 1; }
  elif [ "$killed" = 0 ]; then
    echo "mpirun failed with status $rc without a kill"; tail -n 20 "$work/killed$i.log"; exit 1
  fi
  check_left "$out"
  echo "  left $n of $total batch files$([ -e "$out/dataset.json" ] && echo ", and dataset.json: the run had finished its output")"

  "${mpi[@]}" "${cmd[@]}" --output "$out" > "$work/rerun$i.log" 2>&1 || {
    echo "the rerun failed"; tail -n 20 "$work/rerun$i.log"; exit 1; }
  [ "$(ls "$out" | grep -c '^batch_.*\.cvb$')" -eq "$total" ] || { echo "batch file count differs after the rerun"; exit 1; }
  ! ls "$out" | grep -q '\.tmp\.' || { echo "temporary files left behind after the rerun"; exit 1; }
  for f in "$work/ref"/batch_*.cvb; do
    cmp -s "$f" "$out/$(basename "$f")" || { echo "$(basename "$f") differs after the rerun"; exit 1; }
  done
  for name in index.tsv rejects.tsv mean_image.png datagen_run.json; do
    cmp "$work/ref/$name" "$out/$name" || { echo "$name differs after the rerun"; exit 1; }
  done
  same_meta "$work/ref/dataset.json" "$out/dataset.json" || { echo "dataset.json differs beyond timings after the rerun"; exit 1; }
  rm -rf "$out"
done
echo ok
