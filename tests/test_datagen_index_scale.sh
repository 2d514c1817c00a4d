#!/usr/bin/env bash
# benchmarks/index_scale.sh at a few thousand members: its ILSVRC-layout tar of tiny JPEGs indexes
# to the members and classes it was made with (the inner tar's name is the class), its figures are
# printed, and the whole dataset made from the saved index verifies.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_index_scale.XXXXXX")
trap 'rm -rf "$work"' EXIT

INDEX_WORK=$work DATAGEN=$bin/datagen "$src/benchmarks/index_scale.sh" --classes 3 --per-class 1000 --full --keep \
  >"$work/report.txt" 2>"$work/err.txt" || { cat "$work/err.txt"; exit 1; }
cat "$work/report.txt"
for line in "members: 3000 (3 inner tars of 1000" "index seconds: " "plan seconds: " "peak RSS: " \
  "RSS per sample: " "index.tsv: " "whole run (--size 8, index reused): "; do
  grep -q "^$line" "$work/report.txt" || { echo "no '$line' in the report"; exit 1; }
done

# --index-only leaves the index and the run's identity, nothing else.
[ "$(ls "$work/base.out" | tr '\n' ' ')" = "datagen_run.json index.tsv " ] || { ls "$work/base.out"; exit 1; }
grep -q "plan of 1 batch files in .* s; --index-only: stopping before decoding" "$work/base.log" || exit 1

tsv=$work/train.out/index.tsv
[ "$(grep -c '^class' "$tsv")" = 3 ] || { echo "not 3 classes"; exit 1; }
grep -q $'^class\tn00000002$' "$tsv" || { echo "no class n00000002"; exit 1; }
grep -q $'^entries\t3000$' "$tsv" || { echo "not 3000 entries"; exit 1; }
grep -q $'\t2\tn00000002.tar/n00000002_01000.JPEG$' "$tsv" || { echo "the last member is not class 2"; exit 1; }
"$bin/datagen" verify "$work/train.out"
# The full run reused the index that --index-only saved.
grep -q "reusing it" "$work/full.log" || { echo "the full run scanned again"; exit 1; }
/usr/bin/python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["num_samples"] == 3000' \
  "$work/train.out/dataset.json"
echo "index_scale: ok"
