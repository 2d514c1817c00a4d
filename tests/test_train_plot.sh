#!/usr/bin/env bash
# scripts/plot.py turns a run's JSONL metrics (step and epoch records) into a PNG, and names the
# line of a metrics file that is not JSON.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$CONVOY_BIN/train" synth --out "$tmp/data" --files 4 --per-file 32 --size 8 --classes 3
cat > "$tmp/net.toml" <<'TOML'
[[layer]]
type = "flatten"
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
TOML
"$CONVOY_BIN/train" --config "$tmp/net.toml" --data "$tmp/data" --val "$tmp/data" --epochs 3 --batch 16 \
  --threads 1 --log-every 2 --metrics "$tmp/run.jsonl" 2>/dev/null >/dev/null
grep -q '"kind":"step"' "$tmp/run.jsonl"
[[ $(grep -c '"kind":"epoch"' "$tmp/run.jsonl") -eq 3 ]]
/usr/bin/python3 "$CONVOY_SRC/scripts/plot.py" "$tmp/run.jsonl" "$tmp/run.png" --title test
[[ $(head -c 8 "$tmp/run.png" | od -An -tx1 | tr -d ' \n') == "89504e470d0a1a0a" ]] || { echo "not a PNG"; exit 1; }
# A broken metrics file is reported with its line.
printf '{"kind":"step","global_step":1,"loss":1}\nnot json\n' > "$tmp/bad.jsonl"
if /usr/bin/python3 "$CONVOY_SRC/scripts/plot.py" "$tmp/bad.jsonl" "$tmp/bad.png" 2>"$tmp/err"; then
  echo "a broken metrics file was accepted"; exit 1
fi
grep -q "bad.jsonl:2: not JSON" "$tmp/err"
echo ok
