#!/usr/bin/env bash
# A signal that stops train at an epoch's last step (SIGTERM, which must stop at once) leaves a
# checkpoint that owes that epoch's evaluation, and the resumed run makes it before anything else;
# one that comes during an epoch's evaluation stops the run at that epoch's end. Either way the two
# runs' metrics hold each epoch's record once, with the uninterrupted run's figures, and the
# resumed run ends byte-identical to it. The stop is put at the exact step by stalling a write.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_epoch_end_stop.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"
# shellcheck source=tests/io_faults.sh
source "${CONVOY_SRC:?}/tests/io_faults.sh"
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"

# 300 samples of 8x8: 15 steps an epoch at batch 20, 3 epochs; a validation set of its own.
"$train" synth --out "$work/data" --files 12 --per-file 25 --size 8 --classes 4 2> /dev/null
"$train" synth --out "$work/val" --files 2 --per-file 25 --size 8 --classes 4 --seed 2 2> /dev/null
args=(--config "$config" --data "$work/data" --val "$work/val" --epochs 3 --batch 20 --seed 5 --threads 1
  --log-every 0)
"$train" "${args[@]}" --checkpoint "$work/full.ckpt" --metrics "$work/full.jsonl" 2> /dev/null

ckpt_at() {  # ckpt_at <checkpoint>: "<epoch> <step> <global step>" from its JSON header
  /usr/bin/python3 - "$1" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
info = json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])
print(info["epoch"], info["step"], info["global_step"])
PY
}

# same_epochs <metrics>: one epoch record an epoch, in order, with the uninterrupted run's figures.
same_epochs() {
  /usr/bin/python3 - "$work/full.jsonl" "$1" << 'PY' || fail "$1: the epoch records are not the uninterrupted run's"
import json, sys
def epochs(path):
    return [r for r in map(json.loads, open(path)) if r["kind"] == "epoch"]
want, got = epochs(sys.argv[1]), epochs(sys.argv[2])
assert [r["epoch"] for r in got] == [1, 2, 3], [r["epoch"] for r in got]
for w, g in zip(want, got):
    for key in ("global_step", "train_loss", "train_acc", "test_loss", "test_top1", "test_top5"):
        assert w[key] == g[key], (g["epoch"], key, w[key], g[key])
PY
}

# stop_in_stall <name> <signal> <path part> <op> <nth> [train flags...]: runs train with the nth
# matching call stalled for 4 s, sends the signal while it waits, and sets rc to train's status.
stop_in_stall() {
  local name=$1 sig=$2 path=$3 op=$4 nth=$5 pid
  shift 5
  rm -f "$fault_log"
  CONVOY_FAULT_PATH=$path CONVOY_FAULT_OP=$op CONVOY_FAULT_NTH=$nth CONVOY_FAULT_MODE=stall \
    CONVOY_FAULT_STALL_MS=4000 CONVOY_FAULT_LOG=$fault_log \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$shim \
    "$train" "${args[@]}" --checkpoint "$work/$name.ckpt" --metrics "$work/$name.jsonl" "$@" 2> "$work/$name.err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q '^fault' "$fault_log" 2> /dev/null && break
    sleep 0.05
  done
  grep -q '^fault' "$fault_log" 2> /dev/null || { cat "$work/$name.err"; fail "$name: the stall never came"; }
  kill -"$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
}

# resumed <name>: resumes the run, which must end as the uninterrupted one did.
resumed() {
  "$train" --resume "$work/$1.ckpt" --threads 1 --log-every 0 --metrics "$work/$1.jsonl" \
    > "$work/$1.out" 2> "$work/$1.resumed.err" || { cat "$work/$1.resumed.err"; fail "$1: the resume failed"; }
  cmp "$work/full.ckpt" "$work/$1.ckpt" || fail "$1: the resumed run differs from the uninterrupted one"
  same_epochs "$work/$1.jsonl"
}

# SIGTERM at the first epoch's last step: the checkpoint after step 14 is stalled, so the signal is
# read after step 15. The run stops at once, its checkpoint at step 15 of epoch 1, the epoch's
# evaluation owed; the resumed run makes it first.
stop_in_stall last TERM last.ckpt fsync 14 --checkpoint-every 1
[ "$rc" -eq 143 ] || { cat "$work/last.err"; fail "expected exit 143 after SIGTERM, got $rc"; }
[ "$(ckpt_at "$work/last.ckpt")" = "0 15 15" ] || fail "the checkpoint is at $(ckpt_at "$work/last.ckpt"), not 0 15 15"
grep -q "stopped by signal 15 after step 15" "$work/last.err" || { cat "$work/last.err"; fail "no stop line"; }
resumed last
grep -q "epoch 1/3: " "$work/last.resumed.err" || { cat "$work/last.resumed.err"; fail "no epoch 1 line on resume"; }

# The same at the last epoch's last step: the resumed run evaluates it and ends the run.
stop_in_stall final TERM final.ckpt fsync 44 --checkpoint-every 1
[ "$rc" -eq 143 ] || { cat "$work/final.err"; fail "expected exit 143 after SIGTERM, got $rc"; }
[ "$(ckpt_at "$work/final.ckpt")" = "2 15 45" ] || fail "the checkpoint is at $(ckpt_at "$work/final.ckpt"), not 2 15 45"
resumed final
grep -Eq '^test accuracy: 0\.[0-9]{4}$' "$work/final.out" || fail "the resumed final epoch printed no test accuracy"

# SIGINT during the first epoch's evaluation (its first read of the validation set stalled): the
# epoch's record is written, the run stops at its end without training another step.
stop_in_stall eval INT "$work/val/" pread 1
[ "$rc" -eq 130 ] || { cat "$work/eval.err"; fail "expected exit 130 after SIGINT, got $rc"; }
[ "$(ckpt_at "$work/eval.ckpt")" = "1 0 15" ] || fail "the checkpoint is at $(ckpt_at "$work/eval.ckpt"), not 1 0 15"
resumed eval
echo ok
