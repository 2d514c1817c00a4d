#!/usr/bin/env bash
# SIGTERM during training writes a checkpoint and exits 143; resuming from it ends with a
# checkpoint byte-identical to an uninterrupted run's (same weights, optimiser state, position).
set -euo pipefail
train="$CONVOY_BIN/train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"
"$train" synth --out "$tmp/data" --files 40 --per-file 50 --size 16 --classes 4
args=(--config "$config" --data "$tmp/data" --epochs 12 --batch 20 --seed 5 --threads 1 --log-every 1)

"$train" "${args[@]}" --checkpoint "$tmp/full.ckpt" 2>/dev/null

"$train" "${args[@]}" --checkpoint "$tmp/part.ckpt" --metrics "$tmp/part.jsonl" 2>"$tmp/part.err" &
pid=$!
# Signal it once it is well into training (but before it ends).
for _ in $(seq 1 600); do
  [[ -s "$tmp/part.jsonl" ]] && [[ $(wc -l < "$tmp/part.jsonl") -ge 15 ]] && break
  sleep 0.05
done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
if [[ $rc -eq 0 ]]; then
  echo "SKIP-like: the run ended before the signal arrived"; cat "$tmp/part.err"; exit 1
fi
[[ $rc -eq 143 ]] || { echo "expected exit 143 after SIGTERM, got $rc"; cat "$tmp/part.err"; exit 1; }
grep -q "stopped by signal 15" "$tmp/part.err" || { echo "no stop message"; cat "$tmp/part.err"; exit 1; }
[[ -f "$tmp/part.ckpt" ]] || { echo "no checkpoint written on SIGTERM"; exit 1; }

"$train" --resume "$tmp/part.ckpt" --data "$tmp/data" --threads 1 --log-every 0 --checkpoint "$tmp/part.ckpt" 2>/dev/null
cmp "$tmp/full.ckpt" "$tmp/part.ckpt" || { echo "resumed run differs from the uninterrupted one"; exit 1; }

# eval of the final checkpoint prints the accuracy line the demo looks for.
"$train" eval --checkpoint "$tmp/full.ckpt" --data "$tmp/data" --threads 1 2>/dev/null | grep -Eq '^test accuracy: 0\.[0-9]{4}$'
echo "ok"
