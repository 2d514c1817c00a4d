#!/usr/bin/env bash
# [train] accumulate on the command line: a global batch that ranks x k does not divide is refused
# in one line naming the key; tune-batch and --batch auto tune the micro-batch (sizes up to the
# samples a rank is dealt / k), scale the lr to the chosen size x k x ranks, and the run trains that
# global batch as k micro-batches; data too small for k micro-batches of 1 is refused in one line.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_accumulate.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"

# tiny_fc ([train] batch = 30, lr = 0.05) at a constant lr, as 4 micro-batches a step.
config="$work/tiny.toml"
sed 's/^\[train\]$/[train]\nschedule = "constant"\naccumulate = 4/' "${CONVOY_SRC:?}/tests/data/tiny_fc.toml" > "$config"
grep -q '^accumulate = 4$' "$config" || fail "the config does not accumulate"
# 8 samples: micro-batches of 1 and 2 (4 x 2 = 8 a step).
"$train" synth --out "$work/small" --files 2 --per-file 4 --size 28 --classes 10 2> /dev/null
"$train" synth --out "$work/three" --files 1 --per-file 3 --size 28 --classes 10 2> /dev/null

refused_one_line "--batch 30 does not split over 1 rank x 4 micro-batches ([train] accumulate = 4 in $config); give a multiple of 4" \
  "$train" --config "$config" --data "$work/small" --threads 1
refused_one_line "--batch 6 does not split over 1 rank x 4 micro-batches" \
  "$train" --config "$config" --data "$work/small" --threads 1 --batch 6
refused_one_line "--batch auto: too few samples for 4 micro-batches of 1 ([train] accumulate) on each of 1 rank" \
  "$train" --config "$config" --data "$work/three" --threads 1 --batch auto

"$train" tune-batch --config "$config" --data "$work/small" --threads 1 > "$work/tune.txt" 2> "$work/tune.err" \
  || { cat "$work/tune.err"; fail "tune-batch failed"; }
rows=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9.]+$/' "$work/tune.txt" | awk '{print $1}' | tr '\n' ' ')
[ "$rows" = "1 2 " ] || { cat "$work/tune.txt"; fail "rows $rows, not the micro-batches up to 8 / 4 samples"; }
grep -q "sizes 1 to 2 per rank and micro-batch, 4 of which (\[train\] accumulate) make a rank's batch" "$work/tune.txt" \
  || { cat "$work/tune.txt"; fail "the limit does not say the sizes are micro-batches"; }
chosen=$(sed -n 's/^chosen batch: \([0-9]*\) per rank x 4 micro-batches (\[train\] accumulate) (\([0-9]*\) in all on 1 rank).*/\1 \2/p' \
  "$work/tune.txt")
read -r micro global <<< "$chosen"
if [ -z "${micro:-}" ] || [ "$global" -ne $((4 * micro)) ]; then
  cat "$work/tune.txt"
  fail "no choice of micro-batch x 4"
fi
want_lr=$(awk -v n="$global" 'BEGIN {printf "%g", 0.05 * n / 30}')
grep -qF "with --batch auto: lr = config lr x chosen global batch / config batch = 0.05 x $global / 30 = $want_lr" \
  "$work/tune.txt" || { cat "$work/tune.txt"; fail "no lr rule for the global batch $global"; }

# --batch auto trains the chosen micro-batch x 4 as one step, at the lr scaled to it.
"$train" --config "$config" --data "$work/small" --threads 1 --log-every 1 --epochs 1 --batch auto \
  --checkpoint "$work/auto.ckpt" 2> "$work/auto.err" || { cat "$work/auto.err"; fail "--batch auto run failed"; }
line=$(sed -n 's/.*--batch auto: batch \([0-9]*\) (\([0-9]*\) per rank, as 4 micro-batches of \([0-9]*\)), lr = .*/\1 \2 \3/p' \
  "$work/auto.err")
read -r g per m <<< "$line"
if [ -z "${g:-}" ] || [ "$g" -ne "$per" ] || [ "$g" -ne $((4 * m)) ]; then
  cat "$work/auto.err"
  fail "no --batch auto line"
fi
grep -qF "batch $g ($g per rank, as 4 micro-batches of $m ([train] accumulate)), $((8 / g)) steps/epoch" \
  "$work/auto.err" || { cat "$work/auto.err"; fail "the run is not at batch $g as 4 micro-batches of $m"; }
lr=$(awk -v n="$g" 'BEGIN {printf "%.5f", 0.05 * n / 30}')
grep -q "epoch 1 step 1/[0-9]* loss [0-9.]* lr $lr " "$work/auto.err" || { cat "$work/auto.err"; fail "no step at lr $lr"; }
echo ok
