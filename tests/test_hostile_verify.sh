#!/usr/bin/env bash
# Corruption and bad usage: every single-byte flip and every truncation of a small batch file is caught by
# `datagen verify`; a damaged dataset.json and bad flags/configs get one line and a non-zero exit, never a crash.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_hostile_verify.XXXXXX")
trap 'rm -rf "$work"' EXIT
dg="$bin/datagen"
train="$bin/train"

crashed() {  # a crash or abort leaves one of these behind in stderr
  grep -qE "terminate called|Aborted|Segmentation fault|core dumped|stack trace|what\(\):|AddressSanitizer" "$1"
}
refused_one_line() {  # refused_one_line <words expected> <command...>: non-zero exit, one clear line
  local words=$1
  shift
  local rc=0
  "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" -ne 0 ] || { echo "accepted: $*"; exit 1; }
  [ "$rc" -lt 128 ] || { echo "killed by a signal ($rc): $*"; cat "$work/err.txt"; exit 1; }
  if crashed "$work/err.txt"; then echo "crash output from: $*"; cat "$work/err.txt"; exit 1; fi
  grep -q -- "$words" "$work/err.txt" || { echo "no '$words' in: $(cat "$work/err.txt")"; exit 1; }
  local lines
  lines=$(grep -cv '^Run with --help' "$work/err.txt" || true)
  [ "$lines" -eq 1 ] || { echo "not one line ($lines) from: $*"; cat "$work/err.txt"; exit 1; }
}

verify_refuses() {  # verify_refuses <file name>: verify fails, each problem on one line, the file named
  local rc=0
  "$dg" verify "$work/ds" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" -eq 1 ] || { echo "verify exit status $rc on a damaged $1"; cat "$work/err.txt"; exit 1; }
  if grep -qv '^datagen: verify: ' "$work/err.txt"; then echo "verify said more than its problems:"; cat "$work/err.txt"; exit 1; fi
  grep -q -- "$1" "$work/err.txt" || { echo "verify did not name $1: $(cat "$work/err.txt")"; exit 1; }
}

# One small batch file: 2 samples of 4x4 grey.
"$train" synth --out "$work/ds" --files 1 --per-file 2 --size 4 --channels 1 --classes 2 2> /dev/null
cvb=$(ls "$work/ds"/*.cvb)
name=$(basename "$cvb")
"$dg" verify "$work/ds" > /dev/null 2>&1 || { echo "the pristine dataset does not verify"; exit 1; }
cp "$cvb" "$work/pristine.cvb"
size=$(stat -c %s "$cvb")
echo "flipping each of $size bytes of $name"

for ((off = 0; off < size; off++)); do
  cp "$work/pristine.cvb" "$cvb"
  byte=$(od -An -tu1 -j "$off" -N1 "$cvb" | tr -d ' ')
  printf "\\$(printf '%03o' $((byte ^ 0x5a)))" | dd of="$cvb" bs=1 seek="$off" conv=notrunc 2> /dev/null
  verify_refuses "$name"
done
for ((len = 0; len < size; len++)); do
  cp "$work/pristine.cvb" "$cvb"
  truncate -s "$len" "$cvb"
  verify_refuses "$name"
done
cp "$work/pristine.cvb" "$cvb"
"$dg" verify "$work/ds" > /dev/null 2>&1

# A damaged dataset.json: cut short, and replaced by garbage.
cat > "$work/net.toml" <<'TOML'
[train]
lr = 0.02
[[layer]]
type = "flatten"
[[layer]]
type = "fc"
units = "classes"
[[layer]]
type = "softmax_xent"
TOML
targs=(--config "$work/net.toml" --epochs 1 --batch 2 --threads 1 --log-every 0)
"$train" "${targs[@]}" --data "$work/ds" 2> /dev/null || { echo "training on the pristine dataset failed"; exit 1; }
cp -r "$work/ds" "$work/cut"
head -c 20 "$work/ds/dataset.json" > "$work/cut/dataset.json"
refused_one_line "dataset.json" "$train" "${targs[@]}" --data "$work/cut"
refused_one_line "dataset.json" "$dg" verify "$work/cut"
printf '<html>502 Bad Gateway</html>' > "$work/cut/dataset.json"
refused_one_line "dataset.json" "$train" "${targs[@]}" --data "$work/cut"
rm "$work/cut/dataset.json"
refused_one_line "dataset.json" "$train" "${targs[@]}" --data "$work/cut"

# Bad flags and configs of train.
refused_one_line "epochs" "$train" "${targs[@]}" --data "$work/ds" --epochs abc
refused_one_line "bogus" "$train" "${targs[@]}" --data "$work/ds" --bogus
refused_one_line "missing.toml" "$train" --config "$work/missing.toml" --data "$work/ds"
printf '[train\nlr = = 1\n' > "$work/broken.toml"
refused_one_line "broken.toml" "$train" --config "$work/broken.toml" --data "$work/ds"
printf '[[layer]]\ntype = "warp_drive"\n' > "$work/unknown.toml"
refused_one_line "warp_drive" "$train" --config "$work/unknown.toml" --data "$work/ds"
refused_one_line "nowhere" "$train" "${targs[@]}" --data "$work/nowhere"
refused_one_line "no.ckpt" "$train" --resume "$work/no.ckpt" --data "$work/ds"
printf 'not a checkpoint' > "$work/junk.ckpt"
refused_one_line "junk.ckpt" "$train" --resume "$work/junk.ckpt" --data "$work/ds"
refused_one_line "junk.ckpt" "$train" eval --checkpoint "$work/junk.ckpt" --data "$work/ds"

# Bad flags of datagen.
refused_one_line "size" "$dg" --input "$work/x.tar" --output "$work/o" --size abc
refused_one_line "bogus" "$dg" verify "$work/ds" --bogus
refused_one_line "nowhere" "$dg" verify "$work/nowhere"
refused_one_line "nowhere" "$dg" inspect "$work/nowhere"
echo ok
