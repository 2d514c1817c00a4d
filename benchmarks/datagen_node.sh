#!/usr/bin/env bash
# datagen at node scale, in one go on one host: an ILSVRC-shaped set of real-photo JPEGs, the disk's
# write rate, the cores' decoding ceiling (one plain TurboJPEG decoder per core at once, decode only),
# one decoder alone, the same threads doing datagen's per-sample work with and without writing it,
# datagen at 1 x 1 (one core), 1 x N, N/4 x 4 and N x 1 ranks x threads, 1 x N with
# --gpu-resize and with --encoding jpeg, and a pool of N PIL processes doing datagen's resize and crop.
#
#   benchmarks/datagen_node.sh PHOTO_DIR OUTDIR [IMAGES]      (IMAGES default 64000, in 100 classes)
#
# Needs datagen and mpirun on PATH (on the GPU host: source .gpu/rt/env.sh) and python3 with Pillow.
# Writes one log per step, each datagen run's timeline (gzipped) and its summary, machine.txt,
# steps.tsv and table.md to OUTDIR, and prints the table last. The images (about 65 KB per image in
# the tar and the folder tree) and one run's batch files at a time (196 KB per image at 256 px raw,
# removed after each run) go to NODE_WORK (default: a new folder under TMPDIR or /tmp), removed at the
# end unless NODE_KEEP=1. Steps start only while NODE_BUDGET seconds (default 420) last; each has its
# own limit. A step that fails or runs out of time is reported and the others still run.
# NODE_CORES (default nproc) sets N; DATAGEN_ARGS adds flags to every datagen run; NODE_SWEEP adds
# 1 x N runs with other --writers and --files-in-memory ("4:8 8:8": 4 writers and 8 files, then 8 and 8).
set -uo pipefail
(($# >= 2)) || { echo "usage: $0 PHOTO_DIR OUTDIR [IMAGES]" >&2; exit 2; }
photos=$1 images=${3:-64000}
mkdir -p "$2" || exit 1
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=${NODE_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/datagen_node.XXXXXX")}
mkdir -p "$work" || exit 1
cores=${NODE_CORES:-$(nproc)}
quarter=$(((cores + 3) / 4))
size=256
reserve=15
t_end=$((SECONDS + ${NODE_BUDGET:-420} - reserve))
read -r -a dg_args <<<"${DATAGEN_ARGS:-}"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

{
  date -u
  hostname
  echo "nproc: $(nproc); cores used: $cores"
  grep -m1 'model name' /proc/cpuinfo
  nvidia-smi -L 2>/dev/null
  free -g
  df -h "$work" "$out"
  findmnt -no FSTYPE,SOURCE --target "$work" 2>/dev/null
  mpirun --version 2>/dev/null | head -1
  "$python" -c 'import sys, PIL; print("python", sys.version.split()[0], "Pillow", PIL.__version__)'
  echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "datagen: $(command -v datagen)"
  echo "images: $images; work: $work; DATAGEN_ARGS: ${DATAGEN_ARGS:-}"
} >"$out/machine.txt" 2>&1

: >"$out/steps.tsv"
# shellcheck source=benchmarks/budget_steps.sh
source "$here/benchmarks/budget_steps.sh"

# 1. The images: the tar of per-class tars, its folder tree (for the PIL pool), and a tar of the first
# classes only (about 8,000 images) for the one-core run.
rm -rf "$work/train.tar" "$work/folder" "$work/sub.tar"
step gen 240 "$python" "$here/benchmarks/ilsvrc_photos.py" "$photos" "$work" "$images"
"$python" - "$work/train.tar" "$work/sub.tar" "${SUB_IMAGES:-8000}" >>"$out/gen.log" 2>&1 <<'PY'
import sys, tarfile
src, dst, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = 0
with tarfile.open(src) as tin, open(dst, "wb") as out:
    for m in tin:  # inner tars, whole: header, data, padding
        if n >= want:
            break
        tin.fileobj.seek(m.offset)
        out.write(tin.fileobj.read(m.offset_data - m.offset + m.size + (-m.size % 512)))
        with tarfile.open(fileobj=tin.extractfile(m)) as inner:
            n += sum(1 for x in inner if x.isfile())
    out.write(b"\0" * 10240)
print(f"{dst}: the first {n} images")
PY
sub_images=$(sed -n 's/.*the first \([0-9]*\) images/\1/p' "$out/gen.log" | tail -1)
du -sb "$work/train.tar" "$work/folder" >"$out/gen.du" 2>/dev/null

# 2. The disk: 4 GiB written straight to it (O_DIRECT, as datagen writes where it can) and through the
# page cache with an fsync at the end.
step disk-direct 60 dd if=/dev/zero of="$work/dd.bin" bs=64M count=64 oflag=direct conv=fsync
rm -f "$work/dd.bin"
step disk-cached 60 dd if=/dev/zero of="$work/dd.bin" bs=64M count=64 conv=fsync
rm -f "$work/dd.bin"

# 3. The ceiling: one decoder per core at once over the tar's first 16,000 JPEGs, decode only at the
# DCT scale datagen uses for 256 px; then one decoder alone on the core of the one-core run.
step decoders 60 datagen bench-decode --input "$work/train.tar" --size "$size" --concurrent "$cores" --limit 16000 --seconds 5
step decoder-1 60 taskset -c 0 datagen bench-decode --input "$work/train.tar" --size "$size" --concurrent 1 --limit 2000 --seconds 5
# What any layout of datagen could reach here: one thread per core doing datagen's own per-sample
# work (centre square, resize, checksum), with no coordination at all; then each also writing its
# samples into a file of its own in NODE_WORK (memory when that is tmpfs).
step make-N 60 datagen bench-decode --input "$work/train.tar" --size "$size" --concurrent "$cores" --limit 16000 \
  --seconds 5 --work make
mkdir -p "$work/ceiling"
step make-write-N 60 datagen bench-decode --input "$work/train.tar" --size "$size" --concurrent "$cores" \
  --limit 16000 --seconds 5 --work make-write --write-dir "$work/ceiling"
step make-write-1 60 taskset -c 0 datagen bench-decode --input "$work/train.tar" --size "$size" --concurrent 1 \
  --limit 2000 --seconds 5 --work make-write --write-dir "$work/ceiling"
rm -rf "${work:?}/ceiling"

# 4. datagen runs, each into an empty folder, its batch files removed after it (a raw run is 12.5 GB).
dg() {  # dg NAME LIMIT INPUT [launcher...] -- [datagen flags...]
  local name=$1 limit=$2 input=$3 launcher=()
  shift 3
  while (($#)) && [ "$1" != -- ]; do launcher+=("$1"); shift; done
  shift
  rm -rf "${work:?}/out"
  step "$name" "$limit" "${launcher[@]}" datagen --input "$input" --output "$work/out" --size "$size" \
    --timeline "$out/$name.timeline.json" "${dg_args[@]}" "$@"
  du -sb "$work/out" >"$out/$name.du" 2>/dev/null
  rm -rf "${work:?}/out"
  if [ -s "$out/$name.timeline.json" ]; then
    "$python" "$here/benchmarks/timeline_summary.py" "$out/$name.timeline.json" >"$out/$name.summary" 2>&1
    gzip -f "$out/$name.timeline.json"
  fi
}
dg dg-1x1 90 "$work/sub.tar" taskset -c 0 -- --threads 1
dg dg-1xN 60 "$work/train.tar" -- --threads "$cores"
dg dg-4x4 60 "$work/train.tar" "${mpi[@]}" -np "$quarter" -- --threads 4
dg dg-Nx1 60 "$work/train.tar" "${mpi[@]}" -np "$cores" -- --threads 1
dg dg-1xN-gpu 60 "$work/train.tar" -- --threads "$cores" --gpu-resize
dg dg-1xN-jpeg 60 "$work/train.tar" -- --threads "$cores" --encoding jpeg
# 1 x N with other writer counts and files held in memory: NODE_SWEEP="WRITERS:FILES ..." (default none).
for wf in ${NODE_SWEEP:-}; do
  dg "dg-1xN-w${wf%%:*}-f${wf##*:}" 60 "$work/train.tar" -- --threads "$cores" --writers "${wf%%:*}" \
    --files-in-memory "${wf##*:}"
done

# 5. The PIL pool, one process per core, over the same images from the folder tree.
step pil 120 "$python" "$here/benchmarks/pil_pool.py" "$work/folder/train" "$size" --processes "$cores"

# 6. If time is left: 1 x N again, for the spread between two runs.
dg dg-1xN-again 60 "$work/train.tar" -- --threads "$cores"

# 7. The table.
PYTHONPATH="$here/benchmarks" "$python" - "$out" "$images" "${sub_images:-0}" "$cores" "$quarter" >"$out/table.md" <<'PY'
import os, re, sys

from budget_steps import Steps

out, images, sub_images, cores, quarter = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
run = Steps(out)
steps, text, ok, status = run.steps, run.text, run.ok, run.status


def dd_rate(name):  # GB/s from dd's last line
    m = re.search(r"copied, ([\d.]+) s, ([\d.]+) ([kMG]?B)/s", text(name))
    if not m:
        return None
    scale = {"kB": 1e-6, "MB": 1e-3, "GB": 1.0, "B": 1e-9}[m.group(3)]
    return float(m.group(2)) * scale


def decoders(name):
    m = re.search(r"images/s in all: ([\d.]+)", text(name))
    return float(m.group(1)) if m and ok(name) else None


rows = []
direct, cached = dd_rate("disk-direct"), dd_rate("disk-cached")
sample = size_bytes = 256 * 256 * 3
for name, label, rate in (("disk-direct", "disk write, O_DIRECT, 4 GiB", direct),
                          ("disk-cached", "disk write, page cache + fsync, 4 GiB", cached)):
    bound = f"{rate * 1e9 / sample:,.0f}" if rate else ""
    rows.append((label, bound, f"{rate:.2f} GB/s: bounds raw 256 px output to this many images/s" if rate else "",
                 status(name)))
ceiling, one = decoders("decoders"), decoders("decoder-1")
rows.append((f"{cores} TurboJPEG decoders at once (decode only, the ceiling)", f"{ceiling:,.0f}" if ceiling else "",
             f"{ceiling / cores:,.0f} per core, {100 * ceiling / (cores * one):.0f} % of {cores} x one alone"
             if ceiling and one else "", status("decoders")))
rows.append(("one TurboJPEG decoder alone (core 0)", f"{one:,.0f}" if one else "", "", status("decoder-1")))
for name, label in (("make-N", f"{cores} threads at once making samples as datagen does, nothing written"),
                    ("make-write-N", f"{cores} threads at once making samples and writing each to a file of its own"),
                    ("make-write-1", "one thread making samples and writing them (core 0)")):
    rate, ref = decoders(name), one if name.endswith("-1") else ceiling
    if name in steps:
        rows.append((label, f"{rate:,.0f}" if rate else "",
                     f"**{100 * rate / ref:.0f} % of {'one decoder' if ref is one else 'the ceiling'}**: "
                     "the most datagen reaches here" if rate and ref else "", status(name)))

rates = {}
for name, label, n, ref, ref_label in (
        ("dg-1x1", "datagen 1 rank x 1 thread, one core (taskset)", sub_images, one, "one decoder"),
        ("dg-1xN", f"datagen 1 x {cores}", images, ceiling, "the ceiling"),
        ("dg-4x4", f"datagen {quarter} x 4 (mpirun)", images, ceiling, "the ceiling"),
        ("dg-Nx1", f"datagen {cores} x 1 (mpirun)", images, ceiling, "the ceiling"),
        ("dg-1xN-gpu", f"datagen 1 x {cores} --gpu-resize", images, ceiling, "the ceiling"),
        ("dg-1xN-jpeg", f"datagen 1 x {cores} --encoding jpeg", images, ceiling, "the ceiling"),
        ("dg-1xN-again", f"datagen 1 x {cores}, again", images, ceiling, "the ceiling"),
        *((n, f"datagen 1 x {cores}, --writers {n.split('-')[2][1:]} --files-in-memory {n.split('-')[3][1:]}",
           images, ceiling, "the ceiling") for n in steps if re.match(r"dg-1xN-w\d+-f\d+$", n))):
    if name not in steps:
        continue
    secs = steps[name][1]
    rate = n / secs if ok(name) and secs > 0 else None
    rates[name] = rate
    own = re.findall(r"in ([\d.]+) s \((\d+) images/s\)", text(name))
    phase = re.search(r"steps, wall seconds on rank 0: (.*)", text(name))
    detail = []
    if rate and ref:
        detail.append(f"**{100 * rate / ref:.0f} % of {ref_label}**")
    if own:
        detail.append(f"datagen's own clock {own[-1][0]} s ({int(own[-1][1]):,} images/s)")
    if phase:
        detail.append("rank 0: " + phase.group(1))
    du = re.match(r"(\d+)", text(name, ".du"))
    if du:
        detail.append(f"{int(du.group(1)) / 1e9:.2f} GB")
    rows.append((f"{label}, {n:,} images, whole command", f"{rate:,.0f}" if rate else "", "; ".join(detail), status(name)))

m = re.search(r"in ([\d.]+) s: ([\d.]+) images/s", text("pil"))
pil = float(m.group(2)) if m and ok("pil") else None
rows.append((f"PIL pool, {cores} processes: decode (draft), centre square, box resize to 256", f"{pil:,.0f}" if pil else "",
             "", status("pil")))
for name, label in (("dg-1xN", f"1 x {cores}"), ("dg-4x4", f"{quarter} x 4"), ("dg-Nx1", f"{cores} x 1"),
                    ("dg-1xN-jpeg", f"1 x {cores} JPEG")):
    if rates.get(name) and pil:
        rows.append((f"datagen {label} / PIL pool", f"{rates[name] / pil:.2f}x", "target >= 4x", ""))

print(f"datagen at node scale: {images:,} real-photo JPEGs (ILSVRC layout) to 256 px; "
      f"{open(os.path.join(out, 'machine.txt')).readline().strip()}\n")
print("| what | images/s | detail | step |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
print("\nTargets: 1 x N, N/4 x 4 and N x 1 >= 85 % of the ceiling; one core >= 90 % of one decoder; >= 4x the PIL pool.")
PY
cat "$out/table.md"

if [ "${NODE_KEEP:-0}" != 1 ]; then
  rm -rf "$work/train.tar" "$work/train.tar.tmp" "$work/sub.tar" "$work/folder" "$work/out" "$work/dd.bin"
  rmdir "$work" 2>/dev/null
fi
