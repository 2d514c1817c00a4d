#!/usr/bin/env bash
# One core, side by side on the same JPEGs in memory: TurboJPEG's decode alone (the floor), libjpeg's
# entropy decoding alone, datagen's decode + resize, and the PIL script, for each tar given.
# Usage: benchmarks/datagen_vs_pil.sh A.tar [B.tar ...]; ROUNDS (3), SIZE (256), LIMIT (400),
# DATAGEN (build/datagen), PYTHON (python3 with Pillow). Rounds take turns over the tars, so a busy
# spell on the machine does not fall on one tar only; each line names its round and the 1-minute load.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3} size=${SIZE:-256} limit=${LIMIT:-400}
datagen=${DATAGEN:-build/datagen} python=${PYTHON:-python3}
(($#)) || { echo "usage: $0 A.tar [B.tar ...]" >&2; exit 2; }
for r in $(seq 1 "$rounds"); do
  for tar in "$@"; do
    echo "== round $r, $tar, load $(cut -d' ' -f1 /proc/loadavg)"
    taskset -c 0 "$datagen" bench-decode --input "$tar" --size "$size" --channels 3 --limit "$limit" --repeat 5
    taskset -c 0 "$python" benchmarks/decode_pil.py "$tar" "$size" "$limit" box
  done
done
