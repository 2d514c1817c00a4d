#!/usr/bin/env bash
# train synth writes a dataset as docs/FORMAT.md describes one: batch files named as datagen names
# them (the first name FORMAT.md gives), each listed in dataset.json, and `datagen verify` passes.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_synth_names.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

first=$(grep -o 'batch_[0-9]*\.cvb' "$src/docs/FORMAT.md" | head -1)
[ "$first" = batch_00000.cvb ] || fail "FORMAT.md's first batch-file name is '$first'"
"$bin/train" synth --out "$work/d" --files 3 --per-file 8 --size 8 2> /dev/null
for b in 0 1 2; do
  name=$(printf 'batch_%05d.cvb' "$b")
  [ -f "$work/d/$name" ] || fail "train synth wrote $(ls "$work/d" | tr '\n' ' '), not $name"
done
listed=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(f["name"] for f in json.load(open(sys.argv[1]))["files"]))' \
  "$work/d/dataset.json")
[ "$listed" = "batch_00000.cvb batch_00001.cvb batch_00002.cvb" ] || fail "dataset.json lists '$listed'"
"$bin/datagen" verify "$work/d" > /dev/null || fail "datagen verify refused train synth's dataset"
echo "ok: train synth names its files as FORMAT.md and datagen do"
