#!/usr/bin/env bash
# Writes that fail part-way (a file-size limit standing in for a full disk: RLIMIT_FSIZE with SIGXFSZ
# ignored, so write() returns EFBIG): a clear error, non-zero exit, nothing half-written under a final name.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_hostile_disk_full.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
dg="$bin/datagen"
train="$bin/train"

limited() {  # limited <KiB> <command...>: runs the command with every file it writes capped at KiB
  local kib=$1 tmp=${TMPDIR:-/tmp} pid rc=0
  shift
  # PMIx keeps its data store in hash tables, not in shared-memory files the limit would also cap.
  # A ThreadSanitizer build (scripts/test.sh --tsan) writes a 512 KiB file, $TMPDIR/tsan.rodata.<pid>,
  # at start-up and maps it, and the limit would cut it short (SIGBUS when it is read); it goes
  # without that mapping, an optimisation, when the name is taken, so the name is taken for it (exec
  # keeps the pid).
  (trap '' XFSZ; ulimit -f "$kib"; : > "$tmp/tsan.rodata.$BASHPID"; PMIX_MCA_gds=hash exec "$@") &
  pid=$!
  wait "$pid" || rc=$?
  rm -f "$tmp/tsan.rodata.$pid"
  return "$rc"
}
failed_cleanly() {  # failed_cleanly <rc> <stderr file>
  [ "$1" -ne 0 ] || { echo "a write past the limit went unnoticed"; exit 1; }
  [ "$1" -lt 128 ] || { echo "killed by a signal ($1)"; cat "$2"; exit 1; }
  if grep -qE "terminate called|Aborted|Segmentation fault|core dumped|what\(\):" "$2"; then
    echo "crash output:"; cat "$2"; exit 1
  fi
  [ -s "$2" ] || { echo "no error message"; exit 1; }
}

# datagen: every batch file (1000 x 32x32 RGB = 3 MB) is over a 1500 KiB limit that the index,
# run file and rejects list stay under, so the failure comes in the batch-file writes themselves.
"$dg" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar"
args=(--input "$work/t10k.tar" --size 32 --channels 3 --per-file 1000 --seed 3 --threads 1)
"$dg" "${args[@]}" --output "$work/ref" 2> /dev/null
rc=0
limited 1500 "$dg" "${args[@]}" --output "$work/full" 2> "$work/dg.err" || rc=$?
failed_cleanly "$rc" "$work/dg.err"
echo "datagen on a full disk: $(tail -n 1 "$work/dg.err")"
grep -q "batch_.*write failed" "$work/dg.err" || { echo "the error does not name the batch file write"; cat "$work/dg.err"; exit 1; }
[ ! -e "$work/full/dataset.json" ] || { echo "dataset.json written by a failed run"; exit 1; }
# Whatever batch files it left must be whole: a rerun keeps those that verify and ends
# batch files byte-identical to an uninterrupted run.
"$dg" "${args[@]}" --output "$work/full" 2> /dev/null
"$dg" verify "$work/full" > /dev/null
for f in "$work/ref"/*.cvb; do  # dataset.json differs only in its timings
  cmp "$f" "$work/full/$(basename "$f")" || { echo "rerun after a full disk differs: $(basename "$f")"; exit 1; }
done

# train: a checkpoint (fc weights and optimiser state, > 64 KiB) that cannot be written whole must
# leave the previous good checkpoint in place, untouched.
cat > "$work/net.toml" <<'TOML'
[train]
lr = 0.02
[[layer]]
type = "conv"
filters = 16
kernel = 3
pad = 1
[[layer]]
type = "relu"
[[layer]]
type = "flatten"
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
TOML
"$train" synth --out "$work/data" --files 4 --per-file 20 --size 16 --classes 4 2> /dev/null
targs=(--config "$work/net.toml" --data "$work/data" --batch 20 --seed 5 --threads 1 --log-every 0)
"$train" "${targs[@]}" --epochs 1 --checkpoint "$work/run.ckpt" 2> /dev/null
[ "$(stat -c %s "$work/run.ckpt")" -gt 65536 ] || { echo "checkpoint too small for this test"; exit 1; }
cp "$work/run.ckpt" "$work/good.ckpt"
rc=0
limited 64 "$train" --resume "$work/run.ckpt" --epochs 2 --threads 1 2> "$work/train.err" || rc=$?
failed_cleanly "$rc" "$work/train.err"
echo "train on a full disk: $(tail -n 1 "$work/train.err")"
grep -q "run.ckpt.*write failed" "$work/train.err" || { echo "the error does not name the checkpoint write"; cat "$work/train.err"; exit 1; }
cmp "$work/good.ckpt" "$work/run.ckpt" || { echo "the good checkpoint was replaced by a failed write"; exit 1; }
"$train" eval --checkpoint "$work/run.ckpt" --data "$work/data" --threads 1 > /dev/null 2>&1 ||
  { echo "the checkpoint left behind does not load"; exit 1; }
leftover=$(ls -A "$work" | grep -v -E '^(t10k\.tar|ref|full|data|net\.toml|run\.ckpt|good\.ckpt|dg\.err|train\.err)$' || true)
[ -z "$leftover" ] || { echo "temporary files left behind: $leftover"; exit 1; }
echo ok
