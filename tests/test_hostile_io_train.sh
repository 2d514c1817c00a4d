#!/usr/bin/env bash
# train meeting I/O errors (EIO on reading a batch file, on writing or syncing a checkpoint) and short
# transfers, injected by an LD_PRELOAD shim: one line naming the file, never a partial checkpoint, an exact resume.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_hostile_io_train.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/io_faults.sh
source "${CONVOY_SRC:?}/tests/io_faults.sh"

config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"
"$train" synth --out "$work/data" --files 8 --per-file 50 --size 16 --classes 4 2> /dev/null
# 3 epochs of 20 steps, a checkpoint every 10 (not at an epoch's end): at steps 10, 30, 50 and 60.
args=(--config "$config" --data "$work/data" --epochs 3 --batch 20 --seed 5 --threads 1 --checkpoint-every 10)
count_calls batch_ pread "$train" "${args[@]}" --checkpoint "$work/ref.ckpt"
loader_reads=$counted
count_calls count.ckpt write "$train" "${args[@]}" --checkpoint "$work/count.ckpt"
checkpoint_writes=$counted
cmp -s "$work/ref.ckpt" "$work/count.ckpt" || { echo "two uninterrupted runs differ"; exit 1; }

# The checkpoint a run that failed after `step` must have left: the one an uninterrupted run writes
# at that step (a run stopped there writes the same bytes).
checkpoint_at() {  # checkpoint_at <step>: its path
  local at=$work/at-$1.ckpt
  [ -e "$at" ] || "$train" "${args[@]}" --stop-after "$1" --checkpoint "$at" 2> /dev/null
  echo "$at"
}

# After a failure the checkpoint under its final name is the last one the run reported, whole, or
# absent when it reported none; going on from it (or starting over) ends byte-identical to the
# uninterrupted run.
resumes_exactly() {  # resumes_exactly <case> <stderr of the failed run>
  local what=$1 step
  no_temporaries "$work"
  step=$(grep -o 'checkpoint .* at step [0-9]*' "$2" | tail -n 1 | sed 's/.* at step //' || true)
  if [ -z "$step" ]; then
    [ ! -e "$work/run.ckpt" ] || { echo "$what: a checkpoint appeared that the run never reported"; exit 1; }
    "$train" "${args[@]}" --checkpoint "$work/run.ckpt" 2> "$work/rerun.err" ||
      { echo "$what: the rerun failed"; cat "$work/rerun.err"; exit 1; }
  else
    cmp -s "$(checkpoint_at "$step")" "$work/run.ckpt" ||
      { echo "$what: run.ckpt is not the whole checkpoint of step $step"; exit 1; }
    "$train" --resume "$work/run.ckpt" --data "$work/data" --threads 1 --checkpoint-every 10 \
      --checkpoint "$work/run.ckpt" 2> "$work/rerun.err" || { echo "$what: the resume failed"; cat "$work/rerun.err"; exit 1; }
  fi
  cmp -s "$work/ref.ckpt" "$work/run.ckpt" || { echo "$what: the rerun ends with another checkpoint"; exit 1; }
  echo "$what: went on from ${step:+the checkpoint of step }${step:-the start} to the uninterrupted run's checkpoint"
}

eio_case() {  # eio_case <case> <path part> <op> <nth>
  local rc=0
  rm -f "$work/run.ckpt"
  with_fault "$2" "$3" "$4" eio "$train" "${args[@]}" --checkpoint "$work/run.ckpt" 2> "$work/err" || rc=$?
  failed_cleanly "$1" "$rc" "$work/err"
  resumes_exactly "$1" "$work/err"
}
short_case() {  # short_case <case> <path part> <op> <nth>
  local rc=0
  rm -f "$work/run.ckpt"
  with_fault "$2" "$3" "$4" short "$train" "${args[@]}" --checkpoint "$work/run.ckpt" 2> "$work/err" || rc=$?
  completed_cleanly "$1" "$rc" "$work/err"
  cmp -s "$work/ref.ckpt" "$work/run.ckpt" || { echo "$1: the final checkpoint differs"; exit 1; }
}

# The loader's reads of batch files: the first (nothing saved yet) and one in the middle of the run.
eio_case loader-eio-first batch_ pread 1
eio_case loader-eio-middle batch_ pread $((loader_reads / 2))
short_case loader-short-first batch_ pread 1
short_case loader-short-middle batch_ pread $((loader_reads / 2))
# Checkpoints: the second write (the first stays), the last one (the run's work is all done, yet
# it must not look finished), an fsync, and a short write.
eio_case checkpoint-eio-second run.ckpt write 2
eio_case checkpoint-eio-last run.ckpt write "$checkpoint_writes"
eio_case checkpoint-eio-fsync run.ckpt fsync 1
short_case checkpoint-short-write run.ckpt write 1
echo ok
