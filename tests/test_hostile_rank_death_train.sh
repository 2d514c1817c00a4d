#!/usr/bin/env bash
# One rank of a 2-rank train job SIGKILLed at 5 moments (start-up to the end): mpirun ends within a
# bound with a non-zero status, and --resume from the checkpoint left ends byte-identical.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_rank_death_train.XXXXXX")
trap 'rm -rf "$work"' EXIT
kill_spread=1  # each trial starts afresh, so spread the five over the whole run
# shellcheck source=tests/kill_moments.sh
source "${CONVOY_SRC:?}/tests/kill_moments.sh"
# shellcheck source=tests/rank_death.sh
source "${CONVOY_SRC:?}/tests/rank_death.sh"

config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"
"$train" synth --out "$work/data" --files 40 --per-file 50 --size 16 --classes 4 2> /dev/null
# 4 epochs of 100 steps (10 samples per rank and step); a checkpoint every 25 steps.
epochs=4
args=(--config "$config" --data "$work/data" --epochs "$epochs" --batch 20 --seed 5 --threads 1 --checkpoint-every 25)

start=$(now)
"${mpi[@]}" "$train" "${args[@]}" --checkpoint "$work/full.ckpt" > "$work/full.log" 2>&1 || { cat "$work/full.log"; exit 1; }
span=$(elapsed "$start")
# A resume with nothing left to do: the fixed cost of a run (MPI start-up, loading, the last save).
start=$(now)
"${mpi[@]}" "$train" --resume "$work/full.ckpt" --data "$work/data" --threads 1 --checkpoint "$work/again.ckpt" > /dev/null 2>&1
fixed=$(elapsed "$start")
cmp -s "$work/full.ckpt" "$work/again.ckpt" || { echo "resuming a finished run changed its checkpoint"; exit 1; }
echo "uninterrupted 2-rank run: $span s; a resume with nothing to do: $fixed s"

ckpt_step() {  # ckpt_step <checkpoint>: "<epoch> <global step>" from its JSON header
  /usr/bin/python3 - "$1" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
info = json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])
print(info["epoch"], info["global_step"])
PY
}

for i in "${!fractions[@]}"; do
  ckpt=$work/t$i.ckpt
  rank=$(((seed + i) % 2))
  at=$(moment "${fractions[$i]}" 1)
  echo "trial $((i + 1)): rank $rank, about $at s after the start"
  run_and_kill_rank "$work/killed$i.log" "$rank" "$at" "$train" "${args[@]}" --checkpoint "$ckpt"
  # Status 0 says the job finished before the kill took: its checkpoint must be the final one,
  # checked below. A failure without a kill is a failure of its own.
  if [ "$rc" -eq 0 ]; then
    if [ ! -e "$ckpt" ] || [ "$(ckpt_step "$ckpt" | cut -d' ' -f1)" -ne "$epochs" ]; then
      echo "mpirun exited 0 after the kill, but left no final checkpoint"; exit 1
    fi
  elif [ "$killed" = 0 ]; then
    echo "mpirun failed with status $rc without a kill"; tail -n 20 "$work/killed$i.log"; exit 1
  fi
  if [ -e "$ckpt" ]; then
    read -r epoch step < <(ckpt_step "$ckpt")
    # A checkpoint that claims the run complete must be the uninterrupted run's: rank 0 writes it
    # only after the last step's all-reduce, which needs both ranks.
    if [ "$epoch" -eq "$epochs" ]; then
      cmp -s "$work/full.ckpt" "$ckpt" || { echo "a checkpoint claiming completion differs from the uninterrupted run's"; exit 1; }
      echo "  left the final checkpoint: the run had finished before the kill"
    else
      echo "  left a checkpoint at step $step"
    fi
    cmd=("$train" --resume "$ckpt" --data "$work/data" --threads 1 --checkpoint-every 25 --checkpoint "$ckpt")
  else
    echo "  left no checkpoint"
    cmd=("$train" "${args[@]}" --checkpoint "$ckpt")
  fi
  "${mpi[@]}" "${cmd[@]}" > "$work/rerun$i.log" 2>&1 || { echo "the run after the kill failed"; tail -n 20 "$work/rerun$i.log"; exit 1; }
  cmp "$work/full.ckpt" "$ckpt" || { echo "the killed and resumed run differs from the uninterrupted one"; exit 1; }
done
echo ok
