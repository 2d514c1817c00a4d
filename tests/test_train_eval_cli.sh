#!/usr/bin/env bash
# `train eval` evaluates as --val does: with the training data's mean and std (not the evaluated
# set's), and a set whose class names differ from the training data's (the same classes in another
# order) is refused in one line by both, as is one of another image shape.
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_eval_cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"

# shellcheck source=tests/refusal.sh
source "${CONVOY_SRC:?}/tests/refusal.sh"
edit_meta() {  # edit_meta <dataset folder> <python statement on `meta`>
  /usr/bin/python3 - "$1/dataset.json" "$2" << 'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(meta, open(sys.argv[1], "w"), indent=1)
PY
}
figures() {  # figures <stderr of eval>: its "loss L top-1 T top-5 F" part
  sed -n 's/.* samples, \(loss .*\) (.*/\1/p' "$1"
}

"$train" synth --out "$work/train" --files 8 --per-file 25 --size 8 --classes 4 2> /dev/null
"$train" synth --out "$work/test" --files 2 --per-file 25 --size 8 --classes 4 --seed 3 2> /dev/null
"$train" --config "$config" --data "$work/train" --epochs 2 --batch 20 --threads 1 --log-every 0 \
  --checkpoint "$work/run.ckpt" 2> /dev/null

"$train" eval --checkpoint "$work/run.ckpt" --data "$work/test" --threads 1 > /dev/null 2> "$work/plain.err"
plain=$(figures "$work/plain.err")
[ -n "$plain" ] || { cat "$work/plain.err"; fail "no figures from eval"; }

# The same batch files with other statistics in dataset.json: the figures must not move, as the net
# sees the samples normalised with the training data's mean and std.
cp -r "$work/test" "$work/shifted"
edit_meta "$work/shifted" 'meta["mean"] = [m + 40 for m in meta["mean"]]; meta["std"] = [s * 2 for s in meta["std"]]'
"$train" eval --checkpoint "$work/run.ckpt" --data "$work/shifted" --threads 1 > /dev/null 2> "$work/shifted.err"
shifted=$(figures "$work/shifted.err")
[ "$shifted" = "$plain" ] || fail "eval normalised with the evaluated set's statistics: '$shifted' against '$plain'"

# The same classes in another order: refused by eval as by --val, naming dataset.json.
cp -r "$work/test" "$work/swapped"
edit_meta "$work/swapped" 'c = meta["classes"]; c[0], c[1] = c[1], c[0]; n = meta["class_counts"]; n[0], n[1] = n[1], n[0]'
refused_one_line "$work/swapped/dataset.json: class names differ from the training data's" \
  "$train" eval --checkpoint "$work/run.ckpt" --data "$work/swapped" --threads 1
refused_one_line "$work/swapped/dataset.json: class names differ from the training data's" \
  "$train" --config "$config" --data "$work/train" --val "$work/swapped" --epochs 1 --threads 1 --log-every 0

# Another image shape: refused by both, naming dataset.json.
"$train" synth --out "$work/big" --files 1 --per-file 25 --size 12 --classes 4 2> /dev/null
refused_one_line "$work/big/dataset.json: image shape" \
  "$train" eval --checkpoint "$work/run.ckpt" --data "$work/big" --threads 1
refused_one_line "$work/big/dataset.json: image shape" \
  "$train" --config "$config" --data "$work/train" --val "$work/big" --epochs 1 --threads 1 --log-every 0
echo ok
