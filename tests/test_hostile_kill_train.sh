#!/usr/bin/env bash
# train SIGKILLed at 5 random moments, each time resumed from its last checkpoint: the final
# checkpoint is byte-identical to an uninterrupted run's. CONVOY_KILL_SEED=N replays one seed.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_kill_train.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/kill_moments.sh
source "${CONVOY_SRC:?}/tests/kill_moments.sh"

config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"
"$train" synth --out "$work/data" --files 40 --per-file 50 --size 16 --classes 4 2> /dev/null
# 12 epochs of 100 steps; a checkpoint every 25 steps, so a kill loses at most 24 steps.
args=(--config "$config" --data "$work/data" --epochs 12 --batch 20 --seed 5 --threads 1)
every=(--checkpoint-every 25)

start=$(date +%s.%N)
"$train" "${args[@]}" "${every[@]}" --checkpoint "$work/full.ckpt" 2> "$work/full.log"
span=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
# A resume with nothing left to do: the fixed cost of a run (MPI start-up, loading, the last save).
start=$(date +%s.%N)
"$train" --resume "$work/full.ckpt" --data "$work/data" --threads 1 --checkpoint "$work/again.ckpt" 2> /dev/null
fixed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
cmp -s "$work/full.ckpt" "$work/again.ckpt" || { echo "resuming a finished run changed its checkpoint"; exit 1; }
echo "uninterrupted run: $span s; a resume with nothing to do: $fixed s"

# Each run goes on from the checkpoint the last one left; before the first checkpoint there is
# none, and the run starts over with the original command.
next_run() {
  if [ -e "$work/part.ckpt" ]; then
    cmd=("$train" --resume "$work/part.ckpt" --data "$work/data" --threads 1 "${every[@]}" --checkpoint "$work/part.ckpt")
  else
    cmd=("$train" "${args[@]}" "${every[@]}" --checkpoint "$work/part.ckpt")
  fi
}

done_steps=0
for i in "${!fractions[@]}"; do
  at=$(moment "${fractions[$i]}" "$(awk -v n="$done_steps" 'BEGIN { print 1 - n / 1200 }')")
  next_run
  "${cmd[@]}" 2> "$work/part.$i.log" &
  pid=$!
  sleep "$at"
  kill -9 "$pid" 2> /dev/null || true
  rc=0
  wait "$pid" 2> /dev/null || rc=$?
  step=$(grep -o 'at step [0-9]*' "$work/part.$i.log" | tail -n 1 || true)
  [ -z "$step" ] || done_steps=${step#at step }
  case $rc in
    137) echo "kill $((i + 1)) after $at s: ${cmd[1]} run, last checkpoint ${step:-none}" ;;
    0) echo "kill $((i + 1)) after $at s: the run had already finished" ;;
    *) echo "kill $((i + 1)): train failed with status $rc"; tail -n 5 "$work/part.$i.log"; exit 1 ;;
  esac
done

next_run
"${cmd[@]}" 2> "$work/part.end.log" || { echo "the last run failed"; tail -n 5 "$work/part.end.log"; exit 1; }
cmp "$work/full.ckpt" "$work/part.ckpt" || { echo "the killed and resumed run differs from the uninterrupted one"; exit 1; }
echo ok
