#!/usr/bin/env bash
# datagen against plain TurboJPEG decoders on a small machine, whole processes timed: real photos in
# ILSVRC layout to SIZE px raw batch files (128 by default, where TurboJPEG's DCT-scaled decode at 1/2
# is the floor), one datagen thread on one core against one decoder on that core, and datagen's
# threads on all cores (2 by default) against as many decoders at once. Rounds take turns, so that a
# busy spell of the machine falls on every measurement alike; the table gives each round and the median.
#
#   benchmarks/datagen_cpu_bar.sh OUTDIR [IMAGES]        (IMAGES default 4000)
#
# Environment: DATAGEN (default build/datagen, else datagen on PATH), PHOTOS (large photographs:
# default /work/photos-carry, else /usr/share/wallpapers), CPU_BAR_WORK (where the photos' tar and the
# outputs go; a train.tar of IMAGES there is reused), SIZE (128), THREADS (cores: 2), ROUNDS (3),
# DECODE_SECONDS (each decoder measurement, 3), BASELINE (another datagen binary, measured the same way in the
# same rounds, for before/after). Writes OUTDIR/table.md, runs.tsv, one log and timeline per datagen run.
set -uo pipefail
(($# >= 1)) || { echo "usage: $0 OUTDIR [IMAGES]" >&2; exit 2; }
images=${2:-4000}
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
datagen=${DATAGEN:-$here/build/datagen}
[ -x "$datagen" ] || datagen=$(command -v datagen) || { echo "no datagen: set DATAGEN" >&2; exit 2; }
photos=${PHOTOS:-/work/photos-carry}
[ -d "$photos" ] || photos=/usr/share/wallpapers
work=${CPU_BAR_WORK:-${TMPDIR:-/tmp}/datagen_cpu_bar}
size=${SIZE:-128} threads=${THREADS:-2} rounds=${ROUNDS:-3} secs=${DECODE_SECONDS:-3}
mkdir -p "$work" || exit 1
cpus=$(taskset -pc $$ | sed 's/.*: //')
core=$(echo "$cpus" | tr ',-' '\n\n' | head -1)

{
  date -u
  hostname
  echo "nproc: $(nproc); this script may run on CPUs $cpus; one-core runs on CPU $core"
  grep -m1 'model name' /proc/cpuinfo
  echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "datagen: $datagen${BASELINE:+; baseline: $BASELINE}"
  echo "images: $images, size $size, threads $threads, rounds $rounds"
} >"$out/machine.txt"

if ! tar -tf "$work/train.tar" >/dev/null 2>&1 || [ "$(cat "$work/images" 2>/dev/null)" != "$images" ]; then
  /usr/bin/python3 "$here/benchmarks/ilsvrc_photos.py" "$photos" "$work" "$images" --classes 40 >"$out/gen.log" 2>&1 ||
    { cat "$out/gen.log" >&2; exit 1; }
  rm -rf "$work/folder"
  echo "$images" >"$work/images"
fi
tar="$work/train.tar"

# now(): seconds since the epoch, to the microsecond.
now() { echo "${EPOCHREALTIME/,/.}"; }

# decoders N [taskset args...]: images/s of N plain decoders at once.
decoders() {
  local n=$1
  shift
  "$@" "$datagen" bench-decode --input "$tar" --size "$size" --concurrent "$n" --limit "$images" \
    --seconds "$secs" 2>&1 | tee -a "$out/decoders.log" | sed -n 's/^images\/s in all: \([0-9.]*\).*/\1/p'
}

# datagen_run NAME BINARY THREADS [taskset args...]: images/s of the whole datagen process (its
# CPU seconds, user + system, go to NAME.cpu: a steadier figure than wall time on a busy machine).
datagen_run() {
  local name=$1 bin=$2 t=$3 t0 t1 timeline=()
  shift 3
  rm -rf "$work/out-$name"
  "$bin" --help 2>&1 | grep -q -- --timeline && timeline=(--timeline "$out/$name.timeline.json")
  t0=$(now)
  /usr/bin/time -o "$out/$name.cpu" -f "%U %S" "$@" "$bin" --input "$tar" --output "$work/out-$name" --size "$size" \
    --threads "$t" "${timeline[@]}" >"$out/$name.log" 2>&1 || { echo "failed: see $out/$name.log" >&2; echo 0; return; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" -v n="$images" 'BEGIN { printf "%.1f", n / (b - a) }'
}

printf 'round\tload\tdecoder_1\tdatagen_1\tdecoders_%s\tdatagen_%s\tbaseline_1\tbaseline_%s\tidentical\n' \
  "$threads" "$threads" "$threads" >"$out/runs.tsv"
for r in $(seq "$rounds"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  d1=$(decoders 1 taskset -c "$core")
  g1=$(datagen_run "r$r-1" "$datagen" 1 taskset -c "$core")
  dn=$(decoders "$threads")
  gn=$(datagen_run "r$r-$threads" "$datagen" "$threads")
  b1="" bn=""
  if [ -n "${BASELINE:-}" ]; then
    b1=$(datagen_run "r$r-base-1" "$BASELINE" 1 taskset -c "$core")
    bn=$(datagen_run "r$r-base-$threads" "$BASELINE" "$threads")
  fi
  same=yes
  for f in "$work/out-r$r-1"/*.cvb; do cmp -s "$f" "$work/out-r$r-$threads/$(basename "$f")" || same=no; done
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$load" "$d1" "$g1" "$dn" "$gn" "$b1" "$bn" "$same" >>"$out/runs.tsv"
  echo "round $r (load $load): 1 decoder $d1, datagen 1 thread $g1; $threads decoders $dn, datagen $threads threads $gn" \
    "${BASELINE:+; baseline $b1, $bn}; identical: $same" >&2
  rm -rf "$work"/out-r"$r"-*
done

/usr/bin/python3 - "$out" "$threads" "$images" "$size" >"$out/table.md" <<'PY'
import csv, os, statistics, sys

out, threads, images, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = list(csv.DictReader(open(os.path.join(out, "runs.tsv")), delimiter="\t"))
num = lambda r, k: float(r[k]) if r.get(k) else None
base = any(r.get("baseline_1") for r in rows)
print(f"datagen CPU bar: {images:,} photos to {size} px raw, whole processes timed; "
      f"{open(os.path.join(out, 'machine.txt')).readline().strip()}\n")
head = ["round", "load", "1 decoder", "datagen 1 thread, 1 core", "ratio", f"{threads} decoders",
        f"datagen {threads} threads", "ratio"] + (["before: 1 thread", "before: ratio", f"before: {threads} threads",
                                                    "before: ratio"] if base else []) + ["identical"]
print("| " + " | ".join(head) + " |")
print("|" + " --- |" * len(head))
ratios = {k: [] for k in ("r1", "rn", "b1", "bn")}
for r in rows:
    d1, g1, dn, gn = (num(r, k) for k in ("decoder_1", "datagen_1", f"decoders_{threads}", f"datagen_{threads}"))
    cells = [r["round"], r["load"], f"{d1:,.0f}", f"{g1:,.0f}", f"{100 * g1 / d1:.0f} %", f"{dn:,.0f}", f"{gn:,.0f}",
             f"{100 * gn / dn:.0f} %"]
    ratios["r1"].append(g1 / d1), ratios["rn"].append(gn / dn)
    if base:
        b1, bn = num(r, "baseline_1"), num(r, f"baseline_{threads}")
        cells += [f"{b1:,.0f}", f"{100 * b1 / d1:.0f} %", f"{bn:,.0f}", f"{100 * bn / dn:.0f} %"]
        ratios["b1"].append(b1 / d1), ratios["bn"].append(bn / dn)
    print("| " + " | ".join(cells + [r["identical"]]) + " |")
med = lambda v: f"{100 * statistics.median(v):.0f} %" if v else ""
print(f"\nMedians: datagen 1 thread / 1 decoder {med(ratios['r1'])} (target 85 %), "
      f"datagen {threads} threads / {threads} decoders {med(ratios['rn'])} (target 80 %)" +
      (f"; before: {med(ratios['b1'])} and {med(ratios['bn'])}" if base else "") + ".")


def cpu(name):
    try:
        return sum(float(x) for x in open(os.path.join(out, name + ".cpu")).read().split()[-2:])
    except (OSError, ValueError):
        return None


parts = []
for label, suffix in ((f"1 thread", "1"), (f"{threads} threads", threads), ("before, 1 thread", "base-1"),
                      (f"before, {threads} threads", f"base-{threads}")):
    v = [c for c in (cpu(f"r{r['round']}-{suffix}") for r in rows) if c]
    if v:
        parts.append(f"{label} {statistics.median(v):.2f} s")
print("CPU seconds of the datagen process (user + system), medians: " + ", ".join(parts) + ".")
PY
cat "$out/table.md"
