#!/usr/bin/env bash
# Batch files that are sound by themselves but not the ones dataset.json lists (another dataset's file
# copied in, two files swapped) and named pipes in place of files: every way `train` reads data
# (training, --val, `train eval`, `train bench-loader`) refuses them with one line naming the file,
# and none hangs.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_wrong_file.XXXXXX")
trap 'rm -rf "$work"' EXIT
train="$bin/train"

crashed() {  # a crash or abort leaves one of these behind in stderr
  grep -qE "terminate called|Aborted|Segmentation fault|core dumped|stack trace|what\(\):|AddressSanitizer" "$1"
}
refused_one_line() {  # refused_one_line <words expected> <command...>: non-zero exit within 60 s, one clear line
  local words=$1
  shift
  local rc=0
  timeout 60 "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" -ne 124 ] || { echo "hung: $*"; exit 1; }
  [ "$rc" -ne 0 ] || { echo "accepted: $*"; exit 1; }
  [ "$rc" -lt 128 ] || { echo "killed by a signal ($rc): $*"; cat "$work/err.txt"; exit 1; }
  if crashed "$work/err.txt"; then echo "crash output from: $*"; cat "$work/err.txt"; exit 1; fi
  grep -q -- "$words" "$work/err.txt" || { echo "no '$words' in: $(cat "$work/err.txt")"; exit 1; }
  local lines
  lines=$(grep -c 'error' "$work/err.txt" || true)
  [ "$lines" -eq 1 ] || { echo "not one error line ($lines) from: $*"; cat "$work/err.txt"; exit 1; }
}

cat > "$work/net.toml" << 'TOML'
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
synth() {  # synth <folder> <seed>: 4 files of 16 grey 8x8 samples
  "$train" synth --out "$1" --files 4 --per-file 16 --size 8 --channels 1 --classes 2 --seed "$2" > /dev/null
}
synth "$work/good" 1
synth "$work/other" 2
targs=(--config "$work/net.toml" --epochs 1 --batch 8 --threads 1 --readers 2 --log-every 0)
"$train" "${targs[@]}" --data "$work/good" --checkpoint "$work/net.ckpt" 2> /dev/null ||
  { echo "training on the pristine dataset failed"; exit 1; }

# Every reader of data, on one dataset folder: refused, naming <file> and <words>.
all_refuse() {  # all_refuse <dataset> <file> <words>
  local ds=$1 file=$2 words=$3
  refused_one_line "$file: .*$words" "$train" "${targs[@]}" --data "$ds"
  refused_one_line "$file: .*$words" "$train" "${targs[@]}" --data "$work/good" --val "$ds"
  refused_one_line "$file: .*$words" "$train" eval --checkpoint "$work/net.ckpt" --data "$ds" --threads 1
  refused_one_line "$file: .*$words" "$train" bench-loader --data "$ds" --batch 8 --epochs 1 --readers 2
}

# Another dataset's file of the same shape, count and size.
cp -r "$work/good" "$work/mixed"
cp "$work/other/batch_00002.cvb" "$work/mixed/batch_00002.cvb"
all_refuse "$work/mixed" "$work/mixed/batch_00002.cvb" "dataset.json"

# Two files of the dataset swapped.
cp -r "$work/good" "$work/swapped"
mv "$work/swapped/batch_00001.cvb" "$work/swapped/tmp"
mv "$work/swapped/batch_00003.cvb" "$work/swapped/batch_00001.cvb"
mv "$work/swapped/tmp" "$work/swapped/batch_00003.cvb"
all_refuse "$work/swapped" "$work/swapped/batch_0000[13].cvb" "dataset.json"

# A named pipe in place of a batch file: it would block its reader forever.
cp -r "$work/good" "$work/fifo"
rm "$work/fifo/batch_00000.cvb"
mkfifo "$work/fifo/batch_00000.cvb"
all_refuse "$work/fifo" "$work/fifo/batch_00000.cvb" "not a regular file"
echo "wrong files and named pipes refused by every reader"
