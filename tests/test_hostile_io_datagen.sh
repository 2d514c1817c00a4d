#!/usr/bin/env bash
# datagen meeting I/O errors (EIO on reading an input or writing a batch file or dataset.json) and
# short reads, injected by an LD_PRELOAD shim: one line naming the file, no complete-looking output, a clean rerun.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_hostile_io_datagen.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/io_faults.sh
source "${CONVOY_SRC:?}/tests/io_faults.sh"
dg="$bin/datagen"
fm=/usr/share/datasets/fashion-mnist

# 1200 PNGs in a plain tar (read in place with pread) and as .tar.gz (streamed, twice: for the
# index and for the samples).
"$dg" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" 2> /dev/null
/usr/bin/python3 - "$work" <<'PY'
import gzip, sys, tarfile
work = sys.argv[1]
src = tarfile.open(f"{work}/t10k.tar")
with tarfile.open(f"{work}/in.tar", "w", format=tarfile.USTAR_FORMAT) as out:
    for i, m in enumerate(src):
        if i == 1200:
            break
        out.addfile(m, src.extractfile(m))
open(f"{work}/in.tar.gz", "wb").write(gzip.compress(open(f"{work}/in.tar", "rb").read()))
PY
rm "$work/t10k.tar"
samples=1200
opts=(--size 16 --channels 3 --per-file 200 --seed 3 --threads 2)
run() {  # run <input> <output folder>
  "$dg" --input "$1" "${opts[@]}" --output "$2"
}

# The reference run, counting its reads of the tar: one pread per sample, the rest are the scan's.
count_calls in.tar pread run "$work/in.tar" "$work/ref"
tar_reads=$counted
scan_reads=$((tar_reads - samples))
[ "$scan_reads" -gt 4 ] || { echo "only $scan_reads reads in the scan of the tar"; exit 1; }
count_calls in.tar.gz pread run "$work/in.tar.gz" "$work/gz-count"
gz_reads=$counted
count_calls batch_ pwrite run "$work/in.tar" "$work/write-count"
batch_writes=$counted

same_meta() {  # dataset.json of two runs, which differ only in their timings
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for j in (a, b):
    j.pop("timings")
sys.exit(a != b)
PY
}
# The output of an uninterrupted run: batch files and every other file byte-identical (the .tar.gz
# runs name another input, so only their batch files are compared).
same_as_ref() {  # same_as_ref <case> <folder> [batch]
  local f
  for f in "$work/ref"/*; do
    case $(basename "$f") in
      dataset.json) [ "${3:-}" = batch ] || same_meta "$f" "$2/dataset.json" || { echo "$1: dataset.json differs"; exit 1; } ;;
      batch_*) cmp -s "$f" "$2/$(basename "$f")" || { echo "$1: $(basename "$f") differs from the uninterrupted run's"; exit 1; } ;;
      *) [ "${3:-}" = batch ] || cmp -s "$f" "$2/$(basename "$f")" || { echo "$1: $(basename "$f") differs"; exit 1; } ;;
    esac
  done
}
# After a failure: no dataset.json, nothing temporary, and each batch file under its final name whole.
nothing_looks_complete() {  # nothing_looks_complete <case> <folder>
  local f
  [ ! -e "$2/dataset.json" ] || { echo "$1: dataset.json written by a failed run"; exit 1; }
  no_temporaries "$2"
  for f in "$2"/batch_*.cvb; do
    [ -e "$f" ] || continue
    cmp -s "$f" "$work/ref/$(basename "$f")" || { echo "$1: $(basename "$f") is under its final name but not whole"; exit 1; }
  done
}

# eio_case <case> <input> <path part> <op> <nth> [batch]: the run fails cleanly, and a rerun without
# the fault completes with the uninterrupted run's output.
eio_case() {
  local what=$1 input=$2 out=$work/$1 rc=0
  with_fault "$3" "$4" "$5" eio run "$input" "$out" 2> "$work/err" || rc=$?
  failed_cleanly "$what" "$rc" "$work/err"
  nothing_looks_complete "$what" "$out"
  run "$input" "$out" 2> "$work/rerun.err" || { echo "$what: the rerun failed"; cat "$work/rerun.err"; exit 1; }
  same_as_ref "$what (rerun)" "$out" "${6:-}"
  rm -rf "$out"
}
# short_case <case> <input> <path part> <op> <nth> [batch]: a short transfer changes nothing.
short_case() {
  local what=$1 input=$2 out=$work/$1 rc=0
  with_fault "$3" "$4" "$5" short run "$input" "$out" 2> "$work/err" || rc=$?
  completed_cleanly "$what" "$rc" "$work/err"
  same_as_ref "$what" "$out" "${6:-}"
  rm -rf "$out"
}

# Reading the tar: its first bytes (compression sniffing), the middle of the scan, the middle of
# the samples (read by two threads).
eio_case tar-eio-head "$work/in.tar" in.tar pread 1
eio_case tar-eio-scan "$work/in.tar" in.tar pread $((scan_reads / 2))
eio_case tar-eio-sample "$work/in.tar" in.tar pread $((scan_reads + samples / 2))
short_case tar-short-head "$work/in.tar" in.tar pread 1
short_case tar-short-scan "$work/in.tar" in.tar pread $((scan_reads / 2))
short_case tar-short-sample "$work/in.tar" in.tar pread $((scan_reads + samples / 2))
# The .tar.gz: a read in the second pass, after the index was saved; a short one in the first.
eio_case gz-eio-stream "$work/in.tar.gz" in.tar.gz pread $((gz_reads - 1)) batch
short_case gz-short-stream "$work/in.tar.gz" in.tar.gz pread 2 batch
# Writing the batch files: the first write, one in the middle, an fsync, a short write (the rest then
# goes through the page cache, a direct write having to start aligned); and reading a written file's
# header back (short).
eio_case batch-eio-first-write "$work/in.tar" batch_ pwrite 1
eio_case batch-eio-write "$work/in.tar" batch_ pwrite $((batch_writes / 2))
eio_case batch-eio-fsync "$work/in.tar" batch_ fsync 3
short_case batch-short-write "$work/in.tar" batch_ pwrite 1
short_case batch-short-header "$work/in.tar" batch_ pread 1
# dataset.json, written last: every batch file is whole, the rerun keeps them all.
eio_case meta-eio-write "$work/in.tar" dataset.json write 1
echo ok
