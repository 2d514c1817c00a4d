#!/usr/bin/env bash
# datagen's index at ImageNet scale: makes an ILSVRC-layout tar of tiny JPEGs (ilsvrc_tiny.py), runs
# `datagen --index-only` on it (scan, index.tsv, plan; nothing decoded) and prints the index and plan
# seconds, the peak RSS and the memory per sample, measured against the same run on 1,000 members.
#
#   benchmarks/index_scale.sh [--classes 1000] [--per-class 1280] [--member-folder] [--full] [--keep]
#
# --full also makes the whole dataset (--size 8) from the saved index, for the whole run's peak RSS.
# The tars go to a fresh folder under $TMPDIR or /tmp (INDEX_WORK to choose), removed at the end
# unless --keep. DATAGEN picks the binary (default: build/datagen, else datagen on PATH); PYTHON
# the interpreter (with PIL).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
classes=1000 per_class=1280 full=0 keep=0 gen_args=()
while (($#)); do
  case $1 in
    --classes) classes=$2; shift 2 ;;
    --per-class) per_class=$2; shift 2 ;;
    --member-folder) gen_args+=(--member-folder); shift ;;
    --full) full=1; shift ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--classes N] [--per-class M] [--member-folder] [--full] [--keep]" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-/usr/bin/python3}
datagen=${DATAGEN:-}
if [ -z "$datagen" ]; then
  datagen=$here/../build/datagen
  [ -x "$datagen" ] || datagen=$(command -v datagen)
fi
work=${INDEX_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/index_scale.XXXXXX")}
mkdir -p "$work"
((keep)) || trap 'rm -rf "$work"' EXIT

# measure NAME cmd...: runs cmd with its stderr in NAME.log, its peak RSS (KiB) and CPU seconds (user
# + system) in NAME.rss, by /usr/bin/time -v where there is one, else by the kernel's account of a
# finished child.
measure() {
  local name=$1
  shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v -o "$work/$name.time" "$@" 2>"$work/$name.log"
    awk -F': ' '/Maximum resident set size/ { rss = $2 } /(User|System) time/ { cpu += $2 }
                END { print rss, cpu }' "$work/$name.time" >"$work/$name.rss"
  else
    "$python" -c 'import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_maxrss} {u.ru_utime + u.ru_stime}\n")
sys.exit(code)' "$work/$name.rss" "$@" 2>"$work/$name.log"
  fi
}

# index NAME TAR: datagen --index-only on TAR into NAME.out
index() {
  measure "$1" "$datagen" --input "$2" --output "$work/$1.out" --size 8 --index-only
}

"$python" "$here/ilsvrc_tiny.py" "$work/base.tar" --classes 1 --per-class 1000 "${gen_args[@]}" 2>/dev/null
start=$(date +%s%N)
"$python" "$here/ilsvrc_tiny.py" "$work/train.tar" --classes "$classes" --per-class "$per_class" "${gen_args[@]}"
made=$(date +%s%N)
index base "$work/base.tar"
index train "$work/train.tar"
if ((full)); then
  measure full "$datagen" --input "$work/train.tar" --output "$work/train.out" --size 8
fi

"$python" - "$work" "$classes" "$per_class" "$full" "$(((made - start) / 1000000))" <<'PY'
import os, re, sys
work, classes, per_class = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
full, made = sys.argv[4] == "1", int(sys.argv[5]) / 1e3

def read(name):
    log = open(f"{work}/{name}.log").read()
    idx = re.search(r"index of (\d+) images in ([\d.]+) s", log)
    plan = re.search(r"plan of \d+ batch files in ([\d.]+) s", log)
    done = re.search(r"wrote .* in ([\d.]+) s \((\d+) images/s\)", log)
    rss, cpu = open(f"{work}/{name}.rss").read().split()
    return {"members": int(idx.group(1)), "index_s": float(idx.group(2)), "plan_s": plan and float(plan.group(1)),
            "rss_kib": int(rss), "cpu_s": float(cpu), "done": done}

base, train = read("base"), read("train")
n = train["members"]
assert n == classes * per_class, f"indexed {n} members, made {classes * per_class}"
per_sample = (train["rss_kib"] - base["rss_kib"]) * 1024 / max(1, n - base["members"])
tsv = os.path.getsize(f"{work}/train.out/index.tsv")
tar = os.path.getsize(f"{work}/train.tar")
print(f"members: {n} ({classes} inner tars of {per_class}; tar of {tar / 1e6:.0f} MB made in {made:.1f} s)")
print(f"index seconds: {train['index_s']:.2f} (the whole --index-only run: {train['cpu_s']:.2f} s of CPU)")
print(f"plan seconds: {train['plan_s']:.2f}")
print(f"peak RSS: {train['rss_kib'] / 1024:.1f} MiB ({base['rss_kib'] / 1024:.1f} MiB for {base['members']} members)")
print(f"RSS per sample: {per_sample:.0f} bytes")
print(f"index.tsv: {tsv / 1e6:.1f} MB ({tsv / n:.0f} bytes per entry)")
if full:
    f = read("full")
    print(f"whole run (--size 8, index reused): {float(f['done'].group(1)):.2f} s, {f['done'].group(2)} images/s, "
          f"peak RSS {f['rss_kib'] / 1024:.1f} MiB")
PY
