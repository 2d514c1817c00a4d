#!/usr/bin/env bash
# train --resume as a user types it: a resumed run checkpoints to the file it resumed from (at its
# end, at --stop-after and on SIGINT), `--resume run.ckpt` alone continues with the checkpoint's data,
# and every input that differs from what the checkpoint was made from is refused in one line naming it.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_resume_cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"

# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"
ckpt_step() {  # ckpt_step <checkpoint>: its global step, from its JSON header
  /usr/bin/python3 - "$1" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
print(json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])["global_step"])
PY
}

# 300 samples of 8x8: 15 steps an epoch at batch 20; another set of 100; one of 300 other images;
# the first set's files listed in another order (the same samples, another order).
"$train" synth --out "$work/data" --files 12 --per-file 25 --size 8 --classes 4 2> /dev/null
"$train" synth --out "$work/small" --files 4 --per-file 25 --size 8 --classes 4 2> /dev/null
"$train" synth --out "$work/reseeded" --files 12 --per-file 25 --size 8 --classes 4 --seed 2 2> /dev/null
cp -r "$work/data" "$work/reordered"
/usr/bin/python3 - "$work/reordered/dataset.json" << 'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
files = meta["files"]
files[0], files[1] = files[1], files[0]
json.dump(meta, open(sys.argv[1], "w"), indent=1)
PY

args=(--config "$config" --data "$work/data" --epochs 3 --batch 20 --seed 5 --threads 1 --log-every 0)
"$train" "${args[@]}" --checkpoint "$work/full.ckpt" 2> /dev/null
"$train" "${args[@]}" --checkpoint "$work/run.ckpt" --stop-after 10 2> /dev/null
[ "$(ckpt_step "$work/run.ckpt")" -eq 10 ] || fail "the first part did not stop at step 10"

# Finding 3: resumed with --data and no --checkpoint, the run writes to the checkpoint it resumed from.
"$train" --resume "$work/run.ckpt" --data "$work/data" --threads 1 --log-every 0 --stop-after 20 2> "$work/r.err" \
  || { cat "$work/r.err"; fail "resuming with --data failed"; }
[ "$(ckpt_step "$work/run.ckpt")" -eq 20 ] || fail "a resumed run stopped at step 20 left its checkpoint at $(ckpt_step "$work/run.ckpt")"

# The README's pattern: --resume alone takes data, config and the checkpoint path from the checkpoint
# and ends as the uninterrupted run did, byte for byte.
"$train" --resume "$work/run.ckpt" --threads 1 --log-every 0 2> "$work/r.err" \
  || { cat "$work/r.err"; fail "--resume alone failed"; }
cmp "$work/full.ckpt" "$work/run.ckpt" || fail "resumed alone, the run differs from the uninterrupted one"

# Resumed one step before an epoch's end, the epoch's images/s counts the one step's samples it
# timed, not the 300 of the whole epoch (the checkpoint's carried sums).
"$train" "${args[@]}" --checkpoint "$work/late.ckpt" --stop-after 14 2> /dev/null
"$train" --resume "$work/late.ckpt" --threads 1 --log-every 0 --metrics "$work/late.jsonl" 2> /dev/null
/usr/bin/python3 - "$work/late.jsonl" << 'PY' || fail "the resumed epoch's images/s is not over the images it timed"
import json, sys
first = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "epoch"][0]
assert first["epoch"] == 1 and first["images"] == 20, first
assert abs(first["images_per_second"] * first["train_seconds"] - 20) < 1e-6, first
PY

# SIGINT during a resumed run (extended by --epochs): the checkpoint holds the step it stopped after.
"$train" "${args[@]}" --checkpoint "$work/sig.ckpt" --stop-after 10 2> /dev/null
"$train" --resume "$work/sig.ckpt" --epochs 100000 --threads 1 --log-every 1 --metrics "$work/sig.jsonl" 2> "$work/sig.err" &
pid=$!
for _ in $(seq 1 600); do
  [[ -s "$work/sig.jsonl" ]] && [[ $(wc -l < "$work/sig.jsonl") -ge 20 ]] && break
  sleep 0.05
done
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 130 ] || { cat "$work/sig.err"; fail "expected exit 130 after SIGINT, got $rc"; }
stopped=$(sed -n 's/.*stopped by signal 2 after step \([0-9]*\).*/\1/p' "$work/sig.err")
[ -n "$stopped" ] || { cat "$work/sig.err"; fail "no stop line"; }
[ "$stopped" -gt 20 ] || fail "stopped after step $stopped, before 20 steps of the resumed run"
[ "$(ckpt_step "$work/sig.ckpt")" -eq "$stopped" ] \
  || fail "stopped by SIGINT after step $stopped, the checkpoint holds step $(ckpt_step "$work/sig.ckpt")"

# Finding 4: inputs that differ from the checkpoint's are refused by name, before any training.
"$train" "${args[@]}" --checkpoint "$work/part.ckpt" --stop-after 20 2> /dev/null
cp "$work/part.ckpt" "$work/part.orig"
resume=("$train" --resume "$work/part.ckpt" --threads 1 --log-every 0)
refused_one_line "--data $work/small: not the dataset $work/part.ckpt was trained on (100 samples, the checkpoint's has 300)" \
  "${resume[@]}" --data "$work/small"
refused_one_line "--data $work/reseeded: not the dataset $work/part.ckpt was trained on" "${resume[@]}" --data "$work/reseeded"
refused_one_line "--data $work/reordered: not the dataset $work/part.ckpt was trained on" "${resume[@]}" --data "$work/reordered"
refused_one_line "--batch 40 differs from the checkpoint's 20" "${resume[@]}" --batch 40
refused_one_line "--seed 6 differs from the checkpoint's 5" "${resume[@]}" --seed 6
refused_one_line "--shuffle-files 2 differs from the checkpoint's 4" "${resume[@]}" --shuffle-files 2
sed 's/lr = 0.02/lr = 0.03/' "$config" > "$work/other.toml"
refused_one_line "--config $work/other.toml" "${resume[@]}" --config "$work/other.toml"
refused_one_line "--val $work/data" "${resume[@]}" --val "$work/data"
refused_one_line "--epochs 1" "${resume[@]}" --epochs 1
refused_one_line "--stop-after 20: $work/part.ckpt is already at step 20" "${resume[@]}" --stop-after 20
# On 3 ranks, which do not divide the global batch of 20 a resumed run keeps: one line from train
# (mpirun adds its own notice of the exit status), no abort.
rc=0
mpirun -np 3 --oversubscribe "${resume[@]}" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
[ "$rc" -ne 0 ] || fail "a checkpoint of global batch 20 was resumed on 3 ranks"
[ "$(grep -c '^train' "$work/err.txt")" -eq 1 ] || { cat "$work/err.txt"; fail "not one line from train on 3 ranks"; }
grep -q "^train: error: $work/part.ckpt: --batch 20 does not split over 3 ranks" "$work/err.txt" \
  || { cat "$work/err.txt"; fail "the refusal on 3 ranks does not name the batch and the ranks"; }
if grep -q MPI_ABORT "$work/err.txt"; then cat "$work/err.txt"; fail "the refusal aborted the job"; fi
cmp "$work/part.ckpt" "$work/part.orig" || fail "a refused resume changed the checkpoint"

# The arithmetic is kept: a run made with --precision fp32 resumes in fp32 (and fp32 gradient
# all-reduces) with the flags left out, which its record says, and another one given is refused.
"$train" "${args[@]}" --precision fp32 --checkpoint "$work/fp32.ckpt" --stop-after 5 2> /dev/null
refused_one_line "--precision tf32 differs from the checkpoint's fp32" "$train" --resume "$work/fp32.ckpt" --threads 1 \
  --precision tf32
refused_one_line "--grad-comm bf16 (bf16) differs from the checkpoint's fp32" "$train" --resume "$work/fp32.ckpt" \
  --threads 1 --grad-comm bf16
"$train" --resume "$work/fp32.ckpt" --threads 1 --log-every 0 --stop-after 10 --grad-comm auto 2> "$work/r.err" \
  || { cat "$work/r.err"; fail "resuming an fp32 run with --grad-comm auto failed"; }
/usr/bin/python3 - "$work/fp32.ckpt" << 'PY' || fail "the resumed fp32 run's checkpoint does not record fp32"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
info = json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])
assert info["global_step"] == 10 and info["precision"] == "fp32" and info["grad_comm"] == "fp32", info
PY
# So are the input fold, cuDNN's algorithm choice and workspace and the all-reduce's buckets.
"$train" "${args[@]}" --input-fold blocks --cudnn-algos measure --cudnn-workspace 64 --bucket-mb 2 \
  --checkpoint "$work/kept.ckpt" --stop-after 5 2> /dev/null
for flag in "--input-fold none:--input-fold none differs from the checkpoint's blocks" \
  "--cudnn-algos heuristic:--cudnn-algos heuristic differs from the checkpoint's measure" \
  "--cudnn-workspace 1024:--cudnn-workspace 1024 differs from the checkpoint's 64" \
  "--bucket-mb 8:--bucket-mb 8.0 differs from the checkpoint's 2.0"; do
  # shellcheck disable=SC2086
  refused_one_line "${flag#*:}" "$train" --resume "$work/kept.ckpt" --threads 1 ${flag%%:*}
done
"$train" --resume "$work/kept.ckpt" --threads 1 --log-every 0 --stop-after 10 --cudnn-workspace 64 2> "$work/r.err" \
  || { cat "$work/r.err"; fail "resuming with the recorded --cudnn-workspace given again failed"; }
/usr/bin/python3 - "$work/kept.ckpt" << 'PY' || fail "the resumed run's checkpoint does not record its arithmetic"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
info = json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])
assert info["global_step"] == 10, info
assert (info["input_fold"], info["cudnn_algos"], info["cudnn_workspace_mb"], info["bucket_mb"]) == ("blocks", "measure", 64, 2.0), info
PY

# A checkpoint that could not be written is refused before the first step, not after the last.
refused_one_line "$work/nowhere/run.ckpt" "$train" "${args[@]}" --checkpoint "$work/nowhere/run.ckpt"
refused_one_line "$work/nowhere/run.ckpt" "${resume[@]}" --checkpoint "$work/nowhere/run.ckpt"

# The checkpoint's data changed where it lies: refused, naming the folder.
cp -r "$work/data" "$work/moving"
"$train" --config "$config" --data "$work/moving" --epochs 3 --batch 20 --seed 5 --threads 1 --log-every 0 \
  --checkpoint "$work/moving.ckpt" --stop-after 5 2> /dev/null
rm -rf "$work/moving"
cp -r "$work/reseeded" "$work/moving"
refused_one_line "$work/moving" "$train" --resume "$work/moving.ckpt" --threads 1

# Flags given again that agree are accepted (the harness's requeue pattern), with a copy of the config.
cp "$config" "$work/same.toml"
"$train" --resume "$work/part.ckpt" --config "$work/same.toml" --data "$work/data" --batch 20 --seed 5 --epochs 3 \
  --shuffle-files 4 --threads 1 --log-every 0 --stop-after 25 2> "$work/r.err" \
  || { cat "$work/r.err"; fail "a resume with agreeing flags was refused"; }
[ "$(ckpt_step "$work/part.ckpt")" -eq 25 ] || fail "the agreeing resume did not reach step 25"
# --checkpoint names another file: the one resumed from is left as it was.
cp "$work/part.ckpt" "$work/part.orig"
"$train" --resume "$work/part.ckpt" --checkpoint "$work/elsewhere.ckpt" --threads 1 --log-every 0 --stop-after 30 2> /dev/null
cmp "$work/part.ckpt" "$work/part.orig" || fail "--checkpoint elsewhere still wrote the resumed checkpoint"
[ "$(ckpt_step "$work/elsewhere.ckpt")" -eq 30 ] || fail "--checkpoint elsewhere was not written"

# A fresh run, or a resume to another file, never writes over an existing checkpoint: run again
# without --resume (as after a crash), the run it holds would be lost.
cp "$work/part.ckpt" "$work/part.orig"
refused_one_line "--resume $work/part.ckpt" "$train" "${args[@]}" --checkpoint "$work/part.ckpt"
cmp "$work/part.ckpt" "$work/part.orig" || fail "a fresh run wrote over an existing checkpoint"
refused_one_line "$work/elsewhere.ckpt" "$train" --resume "$work/part.ckpt" --checkpoint "$work/elsewhere.ckpt" \
  --threads 1
echo ok
