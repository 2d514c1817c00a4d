#!/usr/bin/env bash
# On 2 ranks a net with batch norm evaluates, and checkpoints, one set of running statistics on
# every rank (rank 0's): a run stopped anywhere (mid-epoch, at an epoch's end) and resumed reports
# each epoch's evaluation exactly as the uninterrupted run does and ends with its checkpoint; so
# does a run that writes checkpoints along the way, and one with [train] ema; and `train eval` of
# the final checkpoint on 2 ranks gives the last epoch's figures.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_rank_statistics.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"
# shellcheck source=tests/rank_death.sh
source "${CONVOY_SRC:?}/tests/rank_death.sh"  # mpi
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"

# 300 samples of 8x8: 15 steps an epoch at batch 20 (10 per rank), 3 epochs; a validation set.
"$train" synth --out "$work/data" --files 12 --per-file 25 --size 8 --classes 4 2> /dev/null
"$train" synth --out "$work/val" --files 2 --per-file 25 --size 8 --classes 4 --seed 2 2> /dev/null
args=(--data "$work/data" --val "$work/val" --epochs 3 --batch 20 --seed 5 --threads 1 --log-every 0)

# run <name> [train flags...]: a 2-rank run writing $work/<name>.ckpt and $work/<name>.jsonl.
run() {
  local name=$1
  shift
  "${mpi[@]}" "$train" "$@" --checkpoint "$work/$name.ckpt" --metrics "$work/$name.jsonl" > "$work/$name.err" 2>&1 ||
    { cat "$work/$name.err"; fail "$name: the run failed"; }
}

# same_epochs <reference metrics> <metrics>: one epoch record an epoch, with the reference's figures.
same_epochs() {
  /usr/bin/python3 - "$1" "$2" << 'PY' || fail "$2: the epoch records are not those of $1"
import json, sys
def epochs(path):
    return [r for r in map(json.loads, open(path)) if r["kind"] == "epoch"]
want, got = epochs(sys.argv[1]), epochs(sys.argv[2])
assert [r["epoch"] for r in got] == [r["epoch"] for r in want], [r["epoch"] for r in got]
for w, g in zip(want, got):
    for key in ("global_step", "train_loss", "train_acc", "test_loss", "test_top1", "test_top5"):
        assert w.get(key) == g.get(key), (g["epoch"], key, w.get(key), g.get(key))
PY
}

# stopped_and_resumed <reference> <name> <step> [train flags...]: stopped after <step> steps, then
# resumed on 2 ranks, the run reports and ends as <reference> did.
stopped_and_resumed() {
  local ref=$1 name=$2 step=$3
  shift 3
  run "$name" "$@" --stop-after "$step"
  run "$name" --resume "$work/$name.ckpt" --threads 1 --log-every 0
  same_epochs "$work/$ref.jsonl" "$work/$name.jsonl"
  cmp "$work/$ref.ckpt" "$work/$name.ckpt" || fail "$name: the resumed run ends unlike the uninterrupted one"
}

run full --config "$config" "${args[@]}"
# Mid-epoch (steps 7 and 22: the first and the second epoch), at the first epoch's end (15).
for step in 7 15 22; do stopped_and_resumed full "at$step" "$step" --config "$config" "${args[@]}"; done

# Checkpoints written along the way change nothing of what the run reports or ends with.
run every --config "$config" "${args[@]}" --checkpoint-every 4
same_epochs "$work/full.jsonl" "$work/every.jsonl"
cmp "$work/full.ckpt" "$work/every.ckpt" || fail "every: checkpoints along the way changed the run"

# The final checkpoint holds the statistics the last evaluation used: evaluated on 2 ranks, it
# gives the last epoch's figures.
"${mpi[@]}" "$train" eval --checkpoint "$work/full.ckpt" --data "$work/val" --threads 1 > /dev/null 2> "$work/eval.err" ||
  { cat "$work/eval.err"; fail "eval of the final checkpoint failed"; }
figures=$(sed -n 's/.* samples, loss \([0-9.]*\) top-1 \([0-9.]*\) .*/\1 \2/p' "$work/eval.err" | head -1)
want=$(/usr/bin/python3 -c '
import json, sys
last = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "epoch"][-1]
print("%.4f %.4f" % (last["test_loss"], last["test_top1"]))' "$work/full.jsonl")
[ "$figures" = "$want" ] || { cat "$work/eval.err"; fail "eval of the final checkpoint gives '$figures', the last epoch '$want'"; }

# [train] ema: the average's running statistics are evaluated, and checkpointed, as rank 0's too.
sed 's/^\[train\]/[train]\nema = 0.5/' "$config" > "$work/ema.toml"
run ema_full --config "$work/ema.toml" "${args[@]}"
stopped_and_resumed ema_full ema_at7 7 --config "$work/ema.toml" "${args[@]}"
echo ok
