#!/usr/bin/env bash
# Every numeric flag of train and of its subcommands (eval, synth, bench-loader) is checked at parse
# time: a value out of its range is refused in one line naming the flag, never ignored, never a
# crash; an explicit 0 where 0 means nothing is refused, not taken for "the config's".
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_cli_ranges.XXXXXX")
trap 'rm -rf "$work"' EXIT

# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"

"$train" synth --out "$work/data" --files 2 --per-file 20 --size 8 --classes 4 2> /dev/null
# The test net with a batch of 20 in its recipe, so that the run below needs no --batch.
config="$work/net.toml"
sed 's/^\[train\]$/[train]\nbatch = 20/' "${CONVOY_SRC:?}/tests/data/small_conv_bn.toml" > "$config"
grep -q '^batch = 20$' "$config" || fail "the config has no batch = 20"
"$train" --config "$config" --data "$work/data" --epochs 1 --threads 1 --log-every 0 --checkpoint "$work/run.ckpt" 2> /dev/null
run=("$train" --config "$config" --data "$work/data" --threads 1 --log-every 0)

# The upper ends are those a config's [train] epochs and batch may have.
for bad in "--epochs 0" "--epochs -1" "--epochs 1.5" "--epochs 100001" "--batch 0" "--batch -20" "--batch 1048577" \
  "--seed -1" "--threads -1" "--readers -1" "--prefetch -1" "--shuffle-files 0" "--log-every -1" \
  "--checkpoint-every -1" "--stop-after 0" "--stop-after -3" "--cudnn-workspace 8"; do
  # shellcheck disable=SC2086
  refused_one_line "${bad%% *}" "${run[@]}" $bad
done
# A flag that only means something with another: --checkpoint-every without --checkpoint.
refused_one_line "--checkpoint-every" "${run[@]}" --checkpoint-every 5

ev=("$train" eval --checkpoint "$work/run.ckpt" --data "$work/data" --threads 1)
for bad in "--batch 0" "--batch -1" "--batch 1048577" "--threads -1" "--readers -1"; do
  # shellcheck disable=SC2086
  refused_one_line "${bad%% *}" "${ev[@]}" $bad
done

syn=("$train" synth --out "$work/s")
for bad in "--files 0" "--files -2" "--per-file 0" "--last -1" "--size 0" "--size -1" "--size 100000" \
  "--channels 2" "--classes 0" "--classes -3" "--seed -1"; do
  # shellcheck disable=SC2086
  refused_one_line "${bad%% *}" "${syn[@]}" $bad
done
refused_one_line "--last" "${syn[@]}" --per-file 16 --last 17
[ ! -e "$work/s" ] || fail "a refused synth left $work/s behind"

lb=("$train" bench-loader --data "$work/data" --epochs 1)
for bad in "--batch 0" "--readers -1" "--prefetch -1" "--shuffle-files 0" "--epochs 0" "--crop -1" "--pad -1" \
  "--eval-resize -1" "--rank -1" "--ranks 0" "--step-us -1" "--seed -1"; do
  # shellcheck disable=SC2086
  refused_one_line "${bad%% *}" "${lb[@]}" $bad
done

# The edges of the ranges are accepted.
"$train" synth --out "$work/edge" --files 1 --per-file 3 --last 3 --size 1 --channels 3 --classes 1 2> /dev/null \
  || fail "synth at the lower edges was refused"
"${run[@]}" --epochs 1 --batch 1 --readers 1 --prefetch 0 --shuffle-files 1 --stop-after 1 --seed 0 2> /dev/null \
  || fail "train at the lower edges was refused"
"${ev[@]}" --batch 1 --readers 1 > /dev/null 2>&1 || fail "eval at the lower edges was refused"
echo ok
