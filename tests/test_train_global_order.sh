#!/usr/bin/env bash
# train --order global: the global batches are the same at any number of ranks, so uninterrupted runs
# on 1, 2 and 3 ranks train alike, and a checkpoint resumed on other ranks (2 -> 1, 1 -> 3) trains on
# as the uninterrupted run on the new ranks does, through the rest of its epoch and the next; each
# step's loss agrees to float summation order (tiny_fc has no batch norm), within a tolerance that
# local order's other batches exceed at every step. The checkpoint records the order, and a resume
# in the other order is refused in one line.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_global_order.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --oversubscribe --bind-to none)
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"

# 370 samples in 10 files of 37: at the config's global batch of 30, 12 steps an epoch (10 samples
# skipped); 2 epochs.
"$train" synth --out "$work/data" --files 10 --per-file 37 --size 28 --classes 10 2> /dev/null
args=(--config "${CONVOY_SRC:?}/tests/data/tiny_fc.toml" --data "$work/data" --epochs 2 --seed 5 --threads 1
  --log-every 1)
run() {  # run <ranks> <train arguments...>
  local ranks=$1
  shift
  if [ "$ranks" -eq 1 ]; then "$train" "$@"; else "${mpi[@]}" -np "$ranks" "$train" "$@"; fi
}

# compare <want.jsonl> <got.jsonl> <first global step> same|differs: from that step to the end (step
# 24), each step's loss in got is want's (relative 3e-4: 1, 2 and 3 ranks and the resumed runs were
# measured at most 1.3e-5 apart), and so is each epoch's loss and accuracy over its samples;
# "differs": every step's loss is further from want's than that (local order's batches at 2 and 3
# ranks: 6e-3 and more).
compare() {
  /usr/bin/python3 - "$@" << 'PY'
import json, sys
want_path, got_path, first, verdict = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tol = 3e-4
def records(path, kind):
    return [r for r in map(json.loads, open(path)) if r["kind"] == kind]
want = {r["global_step"]: r["loss"] for r in records(want_path, "step")}
got = {r["global_step"]: r["loss"] for r in records(got_path, "step")}
assert sorted(got) == list(range(first, 25)), sorted(got)
close = [abs(got[s] - want[s]) <= tol * max(1.0, abs(want[s])) for s in got]
if verdict == "differs":
    assert not any(close), [(s, got[s], want[s]) for s in got if abs(got[s] - want[s]) <= tol * max(1.0, abs(want[s]))]
    sys.exit(0)
assert all(close), [(s, got[s], want[s]) for s in got]
for we, ge in zip(records(want_path, "epoch"), records(got_path, "epoch")):
    assert we["epoch"] == ge["epoch"] and we["global_step"] == ge["global_step"], (we, ge)
    assert abs(we["train_loss"] - ge["train_loss"]) <= tol * max(1.0, abs(we["train_loss"])), (we, ge)
    assert abs(we["train_acc"] - ge["train_acc"]) <= 1e-9, (we, ge)
assert [e["global_step"] for e in records(got_path, "epoch")] == [12, 24], records(got_path, "epoch")
PY
}
order_of() {  # order_of <checkpoint>: the sample order its record names
  /usr/bin/python3 - "$1" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
print(json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])["order"])
PY
}

for ranks in 1 2 3; do
  run "$ranks" "${args[@]}" --order global --metrics "$work/full$ranks.jsonl" 2> "$work/full$ranks.err" \
    || { cat "$work/full$ranks.err"; fail "the uninterrupted $ranks-rank run failed"; }
done
compare "$work/full1.jsonl" "$work/full2.jsonl" 1 same || fail "2 ranks train otherwise than 1 in global order"
compare "$work/full1.jsonl" "$work/full3.jsonl" 1 same || fail "3 ranks train otherwise than 1 in global order"
# The tolerance tells another order apart: local order's 3 ranks train other global batches.
run 3 "${args[@]}" --metrics "$work/local3.jsonl" 2> /dev/null
compare "$work/full3.jsonl" "$work/local3.jsonl" 1 differs || fail "local order's losses pass for global order's"

# 2 ranks -> 1 rank after step 5 (--resume alone: the order from the checkpoint).
run 2 "${args[@]}" --order global --checkpoint "$work/two.ckpt" --stop-after 5 2> /dev/null
[ "$(order_of "$work/two.ckpt")" = global ] || fail "the checkpoint does not record global order"
"$train" --resume "$work/two.ckpt" --threads 1 --log-every 1 --metrics "$work/on1.jsonl" 2> "$work/on1.err" \
  || { cat "$work/on1.err"; fail "the 2-rank checkpoint did not resume on 1 rank"; }
compare "$work/full1.jsonl" "$work/on1.jsonl" 6 same || fail "resumed on 1 rank, the run differs from the 1-rank one"

# 1 rank -> 3 ranks after step 4, --order given again.
"$train" "${args[@]}" --order global --checkpoint "$work/one.ckpt" --stop-after 4 2> /dev/null
run 3 --resume "$work/one.ckpt" --order global --threads 1 --log-every 1 --metrics "$work/on3.jsonl" \
  2> "$work/on3.err" || { cat "$work/on3.err"; fail "the 1-rank checkpoint did not resume on 3 ranks"; }
compare "$work/full3.jsonl" "$work/on3.jsonl" 5 same || fail "resumed on 3 ranks, the run differs from the 3-rank one"

# A resume in the other order is refused in one line, the checkpoint left as it was.
"$train" "${args[@]}" --order global --checkpoint "$work/g.ckpt" --stop-after 3 2> /dev/null
"$train" "${args[@]}" --checkpoint "$work/l.ckpt" --stop-after 3 2> /dev/null
[ "$(order_of "$work/l.ckpt")" = local ] || fail "the checkpoint does not record local order"
cp "$work/g.ckpt" "$work/g.orig"
refused_one_line "--order local differs from the checkpoint's global" "$train" --resume "$work/g.ckpt" --order local
refused_one_line "--order global differs from the checkpoint's local" "$train" --resume "$work/l.ckpt" --order global
cmp "$work/g.ckpt" "$work/g.orig" || fail "a refused resume changed the checkpoint"
refused_one_line "--order: sideways not in {local,global}" "$train" "${args[@]}" --order sideways
echo ok
