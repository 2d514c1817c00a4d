#!/usr/bin/env bash
# train tune-batch and --batch auto on the CPU backend: the sweep prints its table, chooses a power of
# two within the samples each rank is dealt and within the memory bound, scales the lr as stated;
# a resumed run keeps the batch and lr it chose, and refuses --batch auto for a batch set by hand;
# on 2 ranks every rank trains at rank 0's choice, and data too small for a batch of 1 per rank is
# refused in one line.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_batch_auto.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"
mpi=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

# tiny_fc ([train] batch = 30, lr = 0.05) at a constant lr, so that the steps' lr is the scaled one.
config="$work/tiny.toml"
sed 's/^\[train\]$/[train]\nschedule = "constant"/' "${CONVOY_SRC:?}/tests/data/tiny_fc.toml" > "$config"
grep -q '^schedule = "constant"$' "$config" || fail "the config has no constant schedule"
# 44 samples: sizes 1 to 32 (8 for the runs: 1 to 8).
"$train" synth --out "$work/data" --files 2 --per-file 22 --size 28 --classes 10 2> /dev/null
"$train" synth --out "$work/small" --files 2 --per-file 4 --size 28 --classes 10 2> /dev/null
"$train" synth --out "$work/pair" --files 2 --per-file 2 --size 28 --classes 10 2> /dev/null
"$train" synth --out "$work/one" --files 1 --per-file 1 --size 28 --classes 10 2> /dev/null

# The table's rows ("   batch  images/s  memory"), the chosen size, and the bound it stayed within.
"$train" tune-batch --config "$config" --data "$work/data" --threads 1 > "$work/tune.txt" 2> "$work/tune.err" \
  || { cat "$work/tune.err"; fail "tune-batch failed"; }
cat "$work/tune.txt"
grep -q '^ *batch *images/s *memory$' "$work/tune.txt" || fail "no table header"
rows=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9.]+$/' "$work/tune.txt" | awk '{print $1}' | tr '\n' ' ')
[ "$rows" = "1 2 4 8 16 32 " ] || fail "rows $rows, not the powers of two up to the 44 samples"
chosen=$(sed -n 's/^chosen batch: \([0-9]*\) per rank.*/\1/p' "$work/tune.txt")
[ -n "$chosen" ] || fail "no choice"
case " $rows" in *" $chosen "*) ;; *) fail "chose $chosen, not a size of the table" ;; esac
# The fastest row, or a smaller one within 1 %.
best=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9.]+$/ && $2 > b {b = $2} END {print b}' "$work/tune.txt")
mine=$(awk -v n="$chosen" '$1 == n && $2 ~ /^[0-9.]+$/ {print $2}' "$work/tune.txt")
awk -v m="$mine" -v b="$best" 'BEGIN {exit !(m >= 0.99 * b)}' || fail "chose $chosen at $mine images/s; the best is $best"
bound=$(sed -n 's/.*on the CPU at most \([0-9]*\), whose step.*/\1/p' "$work/tune.txt")
[ -n "$bound" ] || fail "no memory bound"
[ "$chosen" -le "$bound" ] || fail "the choice $chosen is above the memory bound $bound"
grep -qF "seed 002's HPL-derived batch: 2^nint(log2(1638400 / 25088)) = 2^6 -> 64" "$work/tune.txt" \
  || fail "no HPL size for 28x28 grey fp32 images"
want_lr=$(awk -v n="$chosen" 'BEGIN {printf "%g", 0.05 * n / 30}')
grep -qF "with --batch auto: lr = config lr x chosen global batch / config batch = 0.05 x $chosen / 30 = $want_lr" \
  "$work/tune.txt" || fail "no lr rule for $chosen (want $want_lr)"

# --batch auto trains at its choice with the lr scaled, and the checkpoint keeps both.
run=("$train" --config "$config" --data "$work/small" --threads 1 --log-every 1 --epochs 2)
"${run[@]}" --batch auto --stop-after 1 --checkpoint "$work/auto.ckpt" 2> "$work/auto.err" \
  || { cat "$work/auto.err"; fail "--batch auto run failed"; }
n=$(sed -n 's/.*--batch auto: batch \([0-9]*\) (\1 per rank), lr = .*/\1/p' "$work/auto.err")
[ -n "$n" ] || { cat "$work/auto.err"; fail "no --batch auto line"; }
grep -q "chosen batch: $n per rank" "$work/auto.err" || fail "the log's table does not choose $n"
lr=$(awk -v n="$n" 'BEGIN {printf "%.5f", 0.05 * n / 30}')
grep -q "epoch 1 step 1/[0-9]* loss [0-9.]* lr $lr " "$work/auto.err" || { cat "$work/auto.err"; fail "no step at lr $lr"; }
grep -q "batch $n ($n per rank)" "$work/auto.err" || fail "the run is not at batch $n"
# Resumed (with or without --batch auto): no second sweep, the same batch and lr.
for again in "--batch auto" ""; do
  # shellcheck disable=SC2086
  "$train" --resume "$work/auto.ckpt" --threads 1 --log-every 1 --stop-after 2 --checkpoint "$work/again.ckpt" $again \
    2> "$work/resume.err" || { cat "$work/resume.err"; fail "resume ($again) failed"; }
  ! grep -q "batch sweep" "$work/resume.err" || fail "a resumed run ($again) swept again"
  grep -q "batch $n ($n per rank)" "$work/resume.err" || fail "the resumed run ($again) left batch $n"
  grep -q "epoch [0-9]* step [0-9]*/[0-9]* loss [0-9.]* lr $lr " "$work/resume.err" || { cat "$work/resume.err"; fail "resumed ($again) not at lr $lr"; }
  rm -f "$work/again.ckpt"
done
# A checkpoint whose batch was set by hand, resumed with --batch auto; a value that is neither.
"${run[@]}" --batch 8 --stop-after 1 --checkpoint "$work/hand.ckpt" 2> /dev/null
refused_one_line "--batch auto: $work/hand.ckpt was trained at a batch of 8" \
  "$train" --resume "$work/hand.ckpt" --batch auto --threads 1
refused_one_line "(or auto)" "${run[@]}" --batch automatic

# Two ranks: each trains at rank 0's choice, at most the 2 samples each is dealt of 4.
"${mpi[@]}" "$train" --config "$config" --data "$work/pair" --threads 1 --log-every 0 --epochs 1 --batch auto \
  > "$work/mpi.out" 2>&1 || { cat "$work/mpi.out"; fail "2-rank --batch auto failed"; }
per=$(sed -n 's/.*--batch auto: batch \([0-9]*\) (\([0-9]*\) per rank).*/\2/p' "$work/mpi.out")
[ -n "$per" ] || { cat "$work/mpi.out"; fail "no choice on 2 ranks"; }
[ "$per" -le 2 ] || fail "2 ranks chose $per per rank, more than the 2 samples each is dealt"
[ "$(grep -c "this rank trains at $per per rank" "$work/mpi.out")" -eq 2 ] || { cat "$work/mpi.out"; fail "the ranks differ"; }
grep -q "all-reduce over 2 ranks included" "$work/mpi.out" || fail "the 2-rank sweep did not time the all-reduce"
# One sample for two ranks: not even a batch of 1 each. One line from train (mpirun adds its own).
rc=0
"${mpi[@]}" "$train" tune-batch --config "$config" --data "$work/one" --threads 1 > "$work/one.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "tune-batch on 2 ranks took one sample"
[ "$(grep -c 'error:' "$work/one.out")" -eq 1 ] || { cat "$work/one.out"; fail "not one error line"; }
grep -q "error: $work/one: --batch auto: too few samples for a batch of 1 on each of 2 ranks" "$work/one.out" \
  || { cat "$work/one.out"; fail "no refusal naming the data"; }
echo ok
