#!/usr/bin/env bash
# train --resume on another number of ranks: a checkpoint from 2 ranks resumed on 1, and one from 1
# rank resumed on 3, mid-epoch, keep the global batch and train for the rest of the epoch the global
# batches the uninterrupted run trained (each step's loss, the global batch's, and the epoch's loss
# over every sample agree to rounding: tiny_fc has no batch norm); the next epoch follows the new
# ranks' plan. What cannot carry over (a global batch the ranks do not divide, a mid-epoch checkpoint
# of an older train) is refused in one line.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_elastic.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --oversubscribe --bind-to none)
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"

# 370 samples in 10 files of 37: at the config's global batch of 30, 12 steps an epoch (10 samples
# skipped), and every share of 2 or 3 ranks starts or ends inside a file.
"$train" synth --out "$work/data" --files 10 --per-file 37 --size 28 --classes 10 2> /dev/null
args=(--config "${CONVOY_SRC:?}/tests/data/tiny_fc.toml" --data "$work/data" --epochs 2 --seed 5 --threads 1
  --log-every 1)

# same_losses <uninterrupted.jsonl> <resumed.jsonl> <first global step>: the resumed run's step losses
# from that step to the end of the first epoch are the uninterrupted run's, and so is the first
# epoch's loss over all its samples (the steps before the resume carried in the checkpoint).
same_losses() {
  /usr/bin/python3 - "$@" << 'PY'
import json, sys
full, resumed, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
def records(path, kind):
    return [r for r in map(json.loads, open(path)) if r["kind"] == kind]
want = {r["global_step"]: r["loss"] for r in records(full, "step") if r["epoch"] == 1}
got = {r["global_step"]: r["loss"] for r in records(resumed, "step") if r["epoch"] == 1}
assert sorted(got) == list(range(first, 13)), sorted(got)
for s in got:
    assert abs(got[s] - want[s]) <= 1e-5 * max(1.0, abs(want[s])), (s, got[s], want[s])
we, ge = records(full, "epoch")[0], records(resumed, "epoch")[0]
assert we["epoch"] == ge["epoch"] == 1 and we["global_step"] == ge["global_step"] == 12, (we, ge)
assert abs(we["train_loss"] - ge["train_loss"]) <= 1e-5 * max(1.0, abs(we["train_loss"])), (we, ge)
assert abs(we["train_acc"] - ge["train_acc"]) <= 1e-9, (we, ge)
assert ge["images"] == 30 * (13 - first), ge
# The next epoch is the new ranks' own: 12 more steps.
assert records(resumed, "epoch")[1]["global_step"] == 24, records(resumed, "epoch")
PY
}

# 2 ranks -> 1 rank after step 5.
"${mpi[@]}" -np 2 "$train" "${args[@]}" --metrics "$work/full2.jsonl" 2> "$work/full2.err" \
  || { cat "$work/full2.err"; fail "the 2-rank run failed"; }
"${mpi[@]}" -np 2 "$train" "${args[@]}" --checkpoint "$work/two.ckpt" --stop-after 5 2> /dev/null
"$train" --resume "$work/two.ckpt" --threads 1 --log-every 1 --metrics "$work/on1.jsonl" 2> "$work/on1.err" \
  || { cat "$work/on1.err"; fail "the 2-rank checkpoint did not resume on 1 rank"; }
same_losses "$work/full2.jsonl" "$work/on1.jsonl" 6 || fail "resumed on 1 rank, the rest of the epoch differs"

# 1 rank -> 3 ranks after step 4 (--resume alone: data and config from the checkpoint).
"$train" "${args[@]}" --metrics "$work/full1.jsonl" 2> /dev/null
"$train" "${args[@]}" --checkpoint "$work/one.ckpt" --stop-after 4 2> /dev/null
"${mpi[@]}" -np 3 "$train" --resume "$work/one.ckpt" --threads 1 --log-every 1 --metrics "$work/on3.jsonl" \
  2> "$work/on3.err" || { cat "$work/on3.err"; fail "the 1-rank checkpoint did not resume on 3 ranks"; }
same_losses "$work/full1.jsonl" "$work/on3.jsonl" 5 || fail "resumed on 3 ranks, the rest of the epoch differs"

# A checkpoint of 3 ranks mid-way through the 1-rank plan's epoch carries that plan on: resumed on 2
# ranks, the epoch still ends as the 1-rank run's.
"$train" "${args[@]}" --checkpoint "$work/chain.ckpt" --stop-after 3 2> /dev/null
"${mpi[@]}" -np 3 "$train" --resume "$work/chain.ckpt" --threads 1 --log-every 0 --stop-after 7 2> /dev/null
"${mpi[@]}" -np 2 "$train" --resume "$work/chain.ckpt" --threads 1 --log-every 1 --metrics "$work/chain.jsonl" \
  2> "$work/chain.err" || { cat "$work/chain.err"; fail "the twice-resumed run failed"; }
same_losses "$work/full1.jsonl" "$work/chain.jsonl" 8 || fail "resumed twice, the rest of the epoch differs"

# The global batch is kept: 30 does not split over 4 ranks, and --batch may not change it. One line
# from train (mpirun adds its own notice of the exit status); the checkpoint left as it was.
mpi_refused() {  # mpi_refused <words expected> <ranks> <train arguments...>
  local words=$1 ranks=$2 rc=0
  shift 2
  "${mpi[@]}" -np "$ranks" "$train" "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" -ne 0 ] || fail "accepted on $ranks ranks: $*"
  [ "$(grep -c '^train' "$work/err.txt")" -eq 1 ] || { cat "$work/err.txt"; fail "not one line from train: $*"; }
  grep -qF -- "$words" "$work/err.txt" || { cat "$work/err.txt"; fail "no '$words' in the refusal of: $*"; }
  if grep -q MPI_ABORT "$work/err.txt"; then cat "$work/err.txt"; fail "the refusal aborted the job"; fi
}
cp "$work/one.ckpt" "$work/one.orig"
mpi_refused "--batch 30 does not split over 4 ranks" 4 --resume "$work/one.ckpt" --threads 1
mpi_refused "--batch 10 differs from the checkpoint's 30" 3 --resume "$work/one.ckpt" --batch 10 --threads 1
cmp "$work/one.ckpt" "$work/one.orig" || fail "a refused resume changed the checkpoint"

# A mid-epoch checkpoint of an older train (no plan_ranks in its record), whose epochs dealt whole
# files to ranks: its epoch cannot be continued with the samples it had left, and is refused by name.
"$train" "${args[@]}" --checkpoint "$work/mid.ckpt" --stop-after 3 2> /dev/null
/usr/bin/python3 - "$work/mid.ckpt" "$work/old.ckpt" "${CONVOY_SRC:?}/scripts" << 'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[3])
import batches
raw = open(sys.argv[1], "rb").read()
sizes = struct.unpack_from("<5Q", raw, 8)
info = json.loads(raw[48:48 + sizes[0]])
del info["plan_ranks"]
text = json.dumps(info).encode()
body = raw[:8] + struct.pack("<5Q", len(text), *sizes[1:]) + text + raw[48 + sizes[0]:-4]
open(sys.argv[2], "wb").write(body + struct.pack("<I", batches.crc32c(body)))
PY
refused_one_line "$work/old.ckpt: saved mid-epoch by an older train" "$train" --resume "$work/old.ckpt" --threads 1
echo ok
