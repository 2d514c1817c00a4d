#!/usr/bin/env bash
# A tar of 400 small PNGs, plain and compressed (gzip, bzip2, xz, zstd), each cut in the middle:
# datagen keeps exactly the members whose bytes lie before the cut, names the archive and the member
# where reading stopped, and exits 2.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_hostile_cut.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

"$bin/datagen" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" 2> /dev/null

# The fixtures, and for each cut file the members that must survive it (one name a line), worked
# out independently of datagen: Python's tarfile for the layout, and what each cut file still
# yields from Python's decompressors and the zstd tool.
/usr/bin/python3 - "$work" <<'PY'
import bz2, gzip, lzma, subprocess, sys, tarfile, zlib
work = sys.argv[1]
src = tarfile.open(f"{work}/t10k.tar")
with tarfile.open(f"{work}/full.tar", "w", format=tarfile.USTAR_FORMAT) as out:
    for i, m in enumerate(src):
        if i == 400:
            break
        out.addfile(m, src.extractfile(m))
raw = open(f"{work}/full.tar", "rb").read()
members = tarfile.open(f"{work}/full.tar").getmembers()
assert len(members) == 400

def survivors(name, available, padded):
    keep = [m.name for m in members
            if m.offset_data + ((m.size + 511) // 512 * 512 if padded else m.size) <= available]
    assert 50 < len(keep) < 350, (name, len(keep))  # the cut falls well inside the archive
    open(f"{work}/{name}.expect", "w").write("".join(k + "\n" for k in keep))

# Uncompressed: members of a tar are read in place, so a member is whole when its data is.
open(f"{work}/cut.tar", "wb").write(raw[: len(raw) // 2 + 700])
survivors("cut.tar", len(raw) // 2 + 700, False)

# Compressed: the tar is streamed, and a member counts once its data and padding are through.
# bzip2 decodes only whole blocks: level 1 makes them 100 kB, so some lie wholly before the cut.
def zstd(*args, data):
    return subprocess.run(["zstd", "-q", "-c", *args], input=data, capture_output=True).stdout
gz = zlib.compressobj(6, zlib.DEFLATED, 31)
formats = {
    "gz": (gz.compress(raw) + gz.flush(), lambda d: zlib.decompressobj(31).decompress(d)),
    "bz2": (bz2.compress(raw, 1), lambda d: bz2.BZ2Decompressor().decompress(d)),
    "xz": (lzma.compress(raw), lambda d: lzma.LZMADecompressor().decompress(d)),
    "zst": (zstd("-3", data=raw), lambda d: zstd("-d", data=d)),
}
for ext, (data, decompress) in formats.items():
    assert decompress(data) == raw, ext
    cut = data[: len(data) // 2]
    open(f"{work}/cut.tar.{ext}", "wb").write(cut)
    survivors(f"cut.tar.{ext}", len(decompress(cut)), True)

# Two streams back to back (cat a.gz b.gz, pbzip2, multi-stream xz and zstd) are one tar, as the
# command-line tools read them; xz streams may have NUL padding between them.
split = members[150].offset
for ext, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress),
                      ("zst", lambda d: zstd(data=d))):
    pad = b"\0" * 8 if ext == "xz" else b""
    open(f"{work}/multi.tar.{ext}", "wb").write(compress(raw[:split]) + pad + compress(raw[split:]))
PY

check() {  # check <cut file> <output folder> <rc> <stderr file>
  local cut=$1 out=$2 rc=$3 log=$4
  [ "$rc" -eq 2 ] || { echo "$cut: exit status $rc, expected 2 (incomplete)"; cat "$log"; exit 1; }
  if grep -qE "terminate called|Aborted|Segmentation fault|what\(\):" "$log"; then cat "$log"; exit 1; fi
  # The kept members, in index order, are exactly those before the cut.
  awk -F'\t' 'seen { print $5 } /^entries\t/ { seen = 1 }' "$out/index.tsv" > "$out.kept"
  diff -q "$work/$(basename "$cut").expect" "$out.kept" > /dev/null ||
    { echo "$cut: kept members differ from those before the cut"; diff "$work/$(basename "$cut").expect" "$out.kept" | head; exit 1; }
  local n first last
  n=$(wc -l < "$out.kept")
  first=$(tar tf "$work/full.tar" | sed -n "$((n + 1))p")
  last=$(tail -n 1 "$out.kept")
  # One line, naming the archive and the member where reading stopped (or the last one before it).
  local errors
  errors=$(grep -c "^datagen: error: " "$log" || true)
  [ "$errors" -eq 1 ] || { echo "$cut: expected one error line, got $errors"; cat "$log"; exit 1; }
  grep -E "^datagen: error: incomplete input: $cut: archive (is truncated( or damaged)? in member '$first'|ends or is damaged after member '$last')" "$log" > /dev/null ||
    { echo "$cut: the error does not name the archive and the member where reading stopped"; cat "$log"; exit 1; }
  /usr/bin/python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["num_samples"] == int(sys.argv[2])' \
    "$out/dataset.json" "$n"
  "$bin/datagen" verify "$out" > /dev/null
  echo "$(basename "$cut"): kept $n of 400 members, stopped at $first"
}

args=(--size 16 --channels 1 --per-file 64 --seed 3 --threads 2)
for cut in cut.tar cut.tar.gz cut.tar.bz2 cut.tar.xz cut.tar.zst; do
  rc=0
  "$bin/datagen" --input "$work/$cut" --output "$work/$cut.out" "${args[@]}" 2> "$work/$cut.log" || rc=$?
  check "$work/$cut" "$work/$cut.out" "$rc" "$work/$cut.log"
done

for ext in gz bz2 xz zst; do
  "$bin/datagen" --input "$work/multi.tar.$ext" --output "$work/multi.$ext" "${args[@]}" 2> "$work/multi.log" ||
    { echo "multi.tar.$ext: refused or incomplete"; cat "$work/multi.log"; exit 1; }
  /usr/bin/python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["num_samples"] == 400' "$work/multi.$ext/dataset.json"
done

# Under mpirun every rank streams the cut file on its own and stops at the same member; the job's
# exit status still says the run was incomplete, and the batch files match the one-process run.
rc=0
"${mpi[@]}" "$bin/datagen" --input "$work/cut.tar.gz" --output "$work/mpi.out" "${args[@]}" 2> "$work/mpi.log" || rc=$?
[ "$rc" -eq 2 ] || { echo "mpirun: exit status $rc, expected 2"; cat "$work/mpi.log"; exit 1; }
for f in "$work/cut.tar.gz.out"/batch_*.cvb; do
  cmp "$f" "$work/mpi.out/$(basename "$f")" || { echo "$(basename "$f") differs under mpirun"; exit 1; }
done

# A rerun of the same command keeps the dataset and says again that it is incomplete.
rc=0
"$bin/datagen" --input "$work/cut.tar.gz" --output "$work/cut.tar.gz.out" "${args[@]}" 2> "$work/rerun.log" || rc=$?
check "$work/cut.tar.gz" "$work/cut.tar.gz.out" "$rc" "$work/rerun.log"
echo ok
