#!/usr/bin/env bash
# A signal that stops train at an epoch's last step (which must stop at once) leaves a checkpoint
# that owes that epoch's end, and the resumed run makes it (evaluation, line, record) before
# anything else; one that comes during an epoch's evaluation stops the run at that epoch's end.
# Either way the two runs' metrics hold each epoch's record once, with the uninterrupted run's
# figures, and the resumed run ends byte-identical to it: at the first, a middle and the last
# epoch's end, on 2 ranks (the signal to one), in an epoch of one step, with [train] ema and
# accumulate, with [data] progressive.
# --checkpoint-every at an epoch's end checkpoints after that end. Each stop is put at its exact
# step by stalling a write or a read (tests/io_fault_shim.c). A stalled read runs with one reader:
# with more, another reader may read ahead into the next epoch first, and the stall would then be
# that read-ahead, which the epoch does not wait for.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_epoch_end_stop.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"
# shellcheck source=tests/io_faults.sh
source "${CONVOY_SRC:?}/tests/io_faults.sh"
# shellcheck source=tests/rank_death.sh
source "${CONVOY_SRC:?}/tests/rank_death.sh"  # mpi, rank_pid
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"

# 300 samples of 8x8: 15 steps an epoch at batch 20, 3 epochs; a validation set of its own.
"$train" synth --out "$work/data" --files 12 --per-file 25 --size 8 --classes 4 2> /dev/null
"$train" synth --out "$work/val" --files 2 --per-file 25 --size 8 --classes 4 --seed 2 2> /dev/null
args=(--config "$config" --data "$work/data" --val "$work/val" --epochs 3 --batch 20 --seed 5 --threads 1
  --log-every 0)
ref=full  # the uninterrupted run the cases compare with: $work/$ref.ckpt, $work/$ref.jsonl
"$train" "${args[@]}" --checkpoint "$work/full.ckpt" --metrics "$work/full.jsonl" 2> /dev/null

ckpt_at() {  # ckpt_at <checkpoint>: "<epoch> <step> <global step>" from its JSON header
  /usr/bin/python3 - "$1" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
at = 8 + 8 * (7 if raw[7:8] == b"2" else 5)  # the sizes of the JSON and the arrays (4, or 6 with an average)
info = json.loads(raw[at:at + struct.unpack_from("<Q", raw, 8)[0]])
print(info["epoch"], info["step"], info["global_step"])
PY
}

# same_epochs <metrics>: one epoch record an epoch, in order, with the uninterrupted run's figures.
same_epochs() {
  /usr/bin/python3 - "$work/$ref.jsonl" "$1" << 'PY' || fail "$1: the epoch records are not the uninterrupted run's"
import json, sys
def epochs(path):
    return [r for r in map(json.loads, open(path)) if r["kind"] == "epoch"]
want, got = epochs(sys.argv[1]), epochs(sys.argv[2])
assert [r["epoch"] for r in got] == [r["epoch"] for r in want], [r["epoch"] for r in got]
for w, g in zip(want, got):
    for key in ("global_step", "train_loss", "train_acc", "test_loss", "test_top1", "test_top5", "train_side"):
        assert w.get(key) == g.get(key), (g["epoch"], key, w.get(key), g.get(key))
PY
}

# caught <pid>: whether the process handles SIGTERM yet (train's handlers come after its set-up).
caught() {
  local mask
  mask=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2> /dev/null) || return 1
  [ -n "$mask" ] && (((16#$mask >> 14) & 1))
}

# stop_in_stall <name> <signal> <path part> <op> <nth> [train flags...]: runs train with the nth
# matching call stalled, sends the signal while it waits (once train handles signals), then lets the
# call go on; sets rc to train's status.
stop_in_stall() {
  local name=$1 sig=$2 path=$3 op=$4 nth=$5 pid
  shift 5
  rm -f "$fault_log" "$work/release"
  CONVOY_FAULT_PATH=$path CONVOY_FAULT_OP=$op CONVOY_FAULT_NTH=$nth CONVOY_FAULT_MODE=stall \
    CONVOY_FAULT_STALL_MS=60000 CONVOY_FAULT_RELEASE=$work/release CONVOY_FAULT_LOG=$fault_log \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$shim \
    "$train" "${args[@]}" --checkpoint "$work/$name.ckpt" --metrics "$work/$name.jsonl" "$@" 2> "$work/$name.err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q '^fault' "$fault_log" 2> /dev/null && caught "$pid" && break
    sleep 0.02
  done
  grep -q '^fault' "$fault_log" 2> /dev/null || { cat "$work/$name.err"; fail "$name: the stall never came"; }
  kill -"$sig" "$pid"
  sleep 0.1
  touch "$work/release"
  rc=0
  wait "$pid" || rc=$?
}

# resumed <name>: resumes the run, which must end as the uninterrupted one did.
resumed() {
  "$train" --resume "$work/$1.ckpt" --threads 1 --log-every 0 --metrics "$work/$1.jsonl" \
    > "$work/$1.out" 2> "$work/$1.resumed.err" || { cat "$work/$1.resumed.err"; fail "$1: the resume failed"; }
  cmp "$work/$ref.ckpt" "$work/$1.ckpt" || fail "$1: the resumed run differs from the uninterrupted one"
  same_epochs "$work/$1.jsonl"
}

# expect_stop <name> <status> <"epoch step global step">: the stopped run's status and checkpoint.
expect_stop() {
  [ "$rc" -eq "$2" ] || { cat "$work/$1.err"; fail "$1: expected exit $2, got $rc"; }
  [ "$(ckpt_at "$work/$1.ckpt")" = "$3" ] || fail "$1: the checkpoint is at $(ckpt_at "$work/$1.ckpt"), not $3"
}

# SIGTERM at the first epoch's last step: the checkpoint after step 14 is stalled, so the signal is
# read after step 15. The run stops at once, its checkpoint at step 15 of epoch 1, the epoch's end
# owed; the resumed run makes it first.
stop_in_stall first TERM first.ckpt fsync 14 --checkpoint-every 1
expect_stop first 143 "0 15 15"
grep -q "stopped by signal 15 after step 15 (the last of its epoch" "$work/first.err" || { cat "$work/first.err"; fail "no stop line"; }
if grep -q "epoch 1/3: " "$work/first.err"; then fail "the run stopped at once still made the epoch's end"; fi
resumed first
grep -q "epoch 1/3: .* | test loss " "$work/first.resumed.err" || { cat "$work/first.resumed.err"; fail "no epoch 1 line on resume"; }
# That record times no training (the stopped run trained the epoch): no images, 0 images/s, not NaN.
/usr/bin/python3 - "$work/first.jsonl" << 'PY' || fail "the owed epoch's record claims images it did not time"
import json, sys
first = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "epoch"][0]
assert first["images"] == 0 and first["images_per_second"] == 0 and first["input_stall"] == 0, first
PY

# The same at a middle epoch's end (SIGUSR1, a scheduler's warning) and at the last epoch's: the
# resumed run evaluates it and, at the last, ends the run with its test accuracy.
stop_in_stall middle USR1 middle.ckpt fsync 29 --checkpoint-every 1
expect_stop middle 138 "1 15 30"
resumed middle
stop_in_stall last TERM last.ckpt fsync 44 --checkpoint-every 1
expect_stop last 143 "2 15 45"
resumed last
grep -Eq '^test accuracy: 0\.[0-9]{4}$' "$work/last.out" || fail "the resumed last epoch printed no test accuracy"

# SIGINT during the first epoch's evaluation (its first read of the validation set stalled): the
# epoch's record is written, and the run stops at its end without training another step.
stop_in_stall eval INT "$work/val/" pread 1 --readers 1
expect_stop eval 130 "1 0 15"
grep -q "epoch 1/3: .* | test loss " "$work/eval.err" || { cat "$work/eval.err"; fail "the evaluation under way was not finished"; }
resumed eval

# --checkpoint-every 15, the steps of an epoch: a checkpoint after each epoch's end (none was written
# but the last); killed while writing the second, the run resumes from the first.
count_calls every.ckpt fsync "$train" "${args[@]}" --checkpoint "$work/every.ckpt" --checkpoint-every 15
[ "$counted" -eq 3 ] || fail "--checkpoint-every 15 wrote $counted checkpoints in 3 epochs of 15 steps, not 3"
rm -f "$work/every.ckpt" "$work/every.jsonl"
stop_in_stall every KILL every.ckpt fsync 2 --checkpoint-every 15
expect_stop every 137 "1 0 15"
"$train" --resume "$work/every.ckpt" --threads 1 --log-every 0 2> /dev/null
cmp "$work/full.ckpt" "$work/every.ckpt" || fail "resumed from an epoch's end, the run differs from the uninterrupted one"

# On 2 ranks, SIGTERM to rank 1 alone at the first epoch's last step (rank 0 held writing the
# checkpoint after step 14): the ranks agree to stop at once after step 15, and rank 0's checkpoint
# owes the epoch's end; resumed on 2 ranks, the run ends as the uninterrupted 2-rank run does, and
# evaluates as it does (every rank with rank 0's running statistics, which the checkpoint holds).
args=(--config "$config" --data "$work/data" --val "$work/val" --epochs 3 --batch 20 --seed 5 --threads 1
  --log-every 0)
ref=two_full
"${mpi[@]}" "$train" "${args[@]}" --checkpoint "$work/two_full.ckpt" --metrics "$work/two_full.jsonl" 2> /dev/null
rm -f "$fault_log" "$work/release"
CONVOY_FAULT_PATH=two.ckpt CONVOY_FAULT_OP=fsync CONVOY_FAULT_NTH=14 CONVOY_FAULT_MODE=stall \
  CONVOY_FAULT_STALL_MS=60000 CONVOY_FAULT_RELEASE=$work/release CONVOY_FAULT_LOG=$fault_log \
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$shim \
  "${mpi[@]}" "$train" "${args[@]}" --checkpoint "$work/two.ckpt" --metrics "$work/two.jsonl" --checkpoint-every 1 \
  > "$work/two.err" 2>&1 &
job=$!
rank1=""
for _ in $(seq 1 600); do
  [ -n "$rank1" ] || rank1=$(rank_pid "$job" 1)
  grep -q '^fault' "$fault_log" 2> /dev/null && [ -n "$rank1" ] && caught "$rank1" && break
  sleep 0.02
done
if ! grep -q '^fault' "$fault_log" 2> /dev/null || [ -z "$rank1" ]; then cat "$work/two.err"; fail "two: the stall never came"; fi
kill -TERM "$rank1"
sleep 0.1
touch "$work/release"
rc=0
wait "$job" || rc=$?
[ "$rc" -ne 0 ] || { cat "$work/two.err"; fail "two: mpirun exited 0 though rank 1 was stopped by SIGTERM"; }
[ "$(ckpt_at "$work/two.ckpt")" = "0 15 15" ] || fail "two: the checkpoint is at $(ckpt_at "$work/two.ckpt"), not 0 15 15"
"${mpi[@]}" "$train" --resume "$work/two.ckpt" --threads 1 --log-every 0 --metrics "$work/two.jsonl" \
  > "$work/two.resumed.err" 2>&1 || { cat "$work/two.resumed.err"; fail "two: the resume failed"; }
cmp "$work/two_full.ckpt" "$work/two.ckpt" || fail "two: the resumed run differs from the uninterrupted one"
same_epochs "$work/two.jsonl"

# An epoch of one step ([train] ema and accumulate): the first step is the epoch's last. SIGTERM
# while the loader's first read stalls lands there; the resumed run evaluates the average.
"$train" synth --out "$work/one" --files 1 --per-file 20 --size 8 --classes 4 2> /dev/null
sed 's/^\[train\]/[train]\nema = 0.5\naccumulate = 2/' "$config" > "$work/ema.toml"
args=(--config "$work/ema.toml" --data "$work/one" --val "$work/val" --epochs 3 --batch 20 --seed 5 --threads 1
  --log-every 0)
ref=one_full
"$train" "${args[@]}" --checkpoint "$work/one_full.ckpt" --metrics "$work/one_full.jsonl" 2> /dev/null
stop_in_stall one TERM "$work/one/" pread 1 --readers 1
expect_stop one 143 "0 1 1"
resumed one

# [data] progressive (sides 32, 32, 64): stopped at the second epoch's last step, the resumed run's
# record of that epoch carries its side, as the uninterrupted run's does.
"$train" synth --out "$work/big" --files 4 --per-file 25 --size 64 --classes 4 2> /dev/null
cat > "$work/progressive.toml" << 'TOML'
[train]
lr = 0.02
[data]
crop = 64
random_resized_crop = true
progressive = { min_res = 32, max_res = 64, start_ramp = 1, end_ramp = 2 }
[[layer]]
type = "conv"
filters = 4
kernel = 3
stride = 2
pad = 1
[[layer]]
type = "relu"
[[layer]]
type = "global_avg_pool"
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
TOML
args=(--config "$work/progressive.toml" --data "$work/big" --val "$work/big" --epochs 3 --batch 20 --seed 5
  --threads 1 --log-every 0)
ref=big_full
"$train" "${args[@]}" --checkpoint "$work/big_full.ckpt" --metrics "$work/big_full.jsonl" 2> /dev/null
stop_in_stall big TERM big.ckpt fsync 9 --checkpoint-every 1
expect_stop big 143 "1 5 10"
resumed big
grep -q "epoch 3 trains at 64x64" "$work/big.resumed.err" || { cat "$work/big.resumed.err"; fail "no side line"; }
echo ok
