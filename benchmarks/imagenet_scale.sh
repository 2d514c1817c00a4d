#!/usr/bin/env bash
# ImageNet-scale run on one GPU host, in one go: an ILSVRC-shaped set of real-photo JPEGs, datagen to raw and
# JPEG batch files, the loader alone, ResNet-18 (and ResNet-50) from both, and a PyTorch DataLoader baseline.
#
#   benchmarks/imagenet_scale.sh PHOTO_DIR OUTDIR [IMAGES]      (IMAGES default 64000, in 100 classes)
#
# Needs datagen and train on PATH (source .gpu/rt/env.sh) and python3 with PyTorch, torchvision and Pillow;
# PHOTO_DIR holds large photographs (benchmarks/pack_photos.sh makes such a folder). Writes one log per step,
# the training metrics, machine.txt and table.md to OUTDIR, and prints the table last. The images and
# batch files (about 0.28 MB per image) go to SCALE_WORK (default: a new folder under TMPDIR or /tmp),
# removed at the end unless SCALE_KEEP=1. Every step has its own time limit and the whole run stops
# starting steps when SCALE_BUDGET seconds (default 540) are spent, so it fits a 10-minute slot.
# A step that fails or runs out of time is reported and the others still run.
# TRAIN_ARGS and LOADER_ARGS add flags to every `train` run and to `train bench-loader` (default none).
set -uo pipefail
(($# >= 2)) || { echo "usage: $0 PHOTO_DIR OUTDIR [IMAGES]" >&2; exit 2; }
photos=$1 images=${3:-64000}
mkdir -p "$2" || exit 1
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=${SCALE_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/imagenet_scale.XXXXXX")}
mkdir -p "$work" || exit 1
export NCCL_NVLS_ENABLE=0
# The table and the clean-up need this much after the last step.
reserve=20
t_end=$((SECONDS + ${SCALE_BUDGET:-540} - reserve))
read -r -a train_args <<<"${TRAIN_ARGS:-}"
read -r -a loader_args <<<"${LOADER_ARGS:-}"

{
  date -u
  hostname
  echo "nproc: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo
  nvidia-smi -L
  free -g
  df -h "$work" "$out"
  "$python" -c 'import sys, torch, torchvision, PIL; print("python", sys.version.split()[0], "torch", torch.__version__,
    "torchvision", torchvision.__version__, "Pillow", PIL.__version__)'
  echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "images: $images; work: $work; TRAIN_ARGS: ${TRAIN_ARGS:-}; LOADER_ARGS: ${LOADER_ARGS:-}"
} >"$out/machine.txt" 2>&1

: >"$out/steps.tsv"
step_min=15
# shellcheck source=benchmarks/budget_steps.sh
source "$here/benchmarks/budget_steps.sh"

# A rough need: both layouts of the JPEGs, the raw batch files at 256 px and the JPEG ones.
need_gb=$((images * 280 / 1000000))
avail_gb=$(df -P -BG "$work" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
if [ -n "$avail_gb" ] && ((avail_gb < need_gb)); then
  echo "warning: $work has ${avail_gb} GB free, the run needs about ${need_gb} GB" | tee -a "$out/machine.txt" >&2
fi

# 1. The images, in both layouts; the time limit assumes 16 cores.
rm -rf "$work/train.tar" "$work/folder"
step gen 200 "$python" "$here/benchmarks/ilsvrc_photos.py" "$photos" "$work" "$images"
du -sb "$work/train.tar" "$work/folder" >"$out/gen.du" 2>/dev/null

# 2. Batch files. datagen would resume an earlier output instead of remaking it, so that goes first.
# JPEG comes before raw throughout: it is the comparison with PyTorch, and raw's 12 GB may not fit.
for enc in jpeg raw; do
  rm -rf "${work:?}/$enc"
  extra=()
  [ "$enc" = jpeg ] && extra=(--encoding jpeg)
  step "datagen-$enc" 120 datagen --input "$work/train.tar" --output "$work/$enc" --size 256 "${extra[@]}"
  du -sb "$work/$enc" >"$out/datagen-$enc.du" 2>/dev/null
done

# 3. The loader alone, no net.
for enc in jpeg raw; do
  step "loader-$enc" 90 train bench-loader --data "$work/$enc" --mode raw --crop 224 --epochs 2 "${loader_args[@]}"
done

# 4-5. ResNet-18 in bf16, then PyTorch's loader on the same images; random-resized-crop variants after.
rrc=$out/resnet18-rrc.toml
if grep -q '^\[data\]' "$here/configs/resnet18.toml"; then
  sed '/^\[data\]/a random_resized_crop = true' "$here/configs/resnet18.toml" >"$rrc"
else
  { cat "$here/configs/resnet18.toml"; printf '\n[data]\nrandom_resized_crop = true\n'; } >"$rrc"
fi
r18() {  # r18 NAME DATA CONFIG
  rm -f "$out/$1.jsonl"
  step "$1" 120 train --config "$3" --data "$work/$2" --precision bf16 --epochs 3 --metrics "$out/$1.jsonl" "${train_args[@]}"
}
r18 r18-jpeg jpeg "$here/configs/resnet18.toml"
step torch 240 "$python" "$here/benchmarks/torch_imagefolder.py" --data "$work/folder/train"
r18 r18-jpeg-rrc jpeg "$rrc"
r18 r18-raw raw "$here/configs/resnet18.toml"
r18 r18-raw-rrc raw "$rrc"
# The GPU's own rate: ResNet-18 on 8,192 synthetic 224 px samples held in the page cache, which the
# loader serves by copying; no loader can feed the net faster than this.
rm -rf "${work:?}/synth" "$out/r18-synth.jsonl"
step synth 60 train synth --out "$work/synth" --files 16 --per-file 512 --size 224 --channels 3 --classes 100
r18 r18-synth synth "$here/configs/resnet18.toml"
if [ -f "$here/configs/resnet50.toml" ]; then
  rm -f "$out/r50-jpeg.jsonl"
  step r50-jpeg 180 train --config "$here/configs/resnet50.toml" --data "$work/jpeg" --precision bf16 --epochs 3 \
    --metrics "$out/r50-jpeg.jsonl" "${train_args[@]}"
else
  printf 'r50-jpeg\tskipped (no configs/resnet50.toml)\t0\n' >>"$out/steps.tsv"
fi

# 6. The table.
PYTHONPATH="$here/benchmarks" "$python" - "$out" "$images" "$here/configs/resnet18.toml" >"$out/table.md" <<'PY'
import json, os, re, sys

from budget_steps import Steps

out, images, r18_config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
run = Steps(out)
steps, text = run.steps, run.text


def du(name):
    m = re.match(r"(\d+)", text(name, ".du"))
    return int(m.group(1)) if m else None


def gb(n):
    return f"{n / 1e9:.2f} GB" if n is not None else ""


def status(name):
    return run.status(name, 0)


def config_batch(path):
    m = re.search(r"^batch\s*=\s*(\d+)", open(path).read(), re.M) if os.path.exists(path) else None
    return int(m.group(1)) if m else 256


def training(name, config):
    """Images/s after epoch 1 (mean over epochs 2..), input stall over the same epochs, peak RSS."""
    recs = []
    for line in text(name, ".jsonl").splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    ep = [r for r in recs if r.get("kind") == "epoch"]
    batch, rates, prev = config_batch(config), [], 0
    for r in ep:
        steps_in = r.get("global_step", 0) - prev
        prev = r.get("global_step", prev)
        if "images_per_second" in r:
            rates.append(r["images_per_second"])
        elif r.get("train_seconds") and steps_in > 0:
            rates.append(steps_in * batch / r["train_seconds"])
        else:
            rates.append(None)
    if not ep:  # no metrics: the trainer's own epoch lines
        log = text(name)
        rates = [float(m.group(1)) for m in re.finditer(r"epoch \d+/\d+:.*\(train [\d.]+ s, ([\d.]+) img/s\)", log)]
        secs = [float(m.group(1)) for m in re.finditer(r"epoch \d+/\d+:.*\(train ([\d.]+) s, [\d.]+ img/s\)", log)]
        t_io = [float(m.group(1)) for m in re.finditer(r"epoch \d+ breakdown: t_io ([\d.]+) s", log)]
        ep = [{"train_seconds": a, "t_io": b} for a, b in zip(secs, t_io)]
    later = [x for x in rates[1:] if x is not None]
    note = ""
    if not later and rates and rates[0] is not None:
        later, note = rates[:1], " (epoch 1 only)"
    ips = f"{sum(later) / len(later):,.0f}{note}" if later else ""
    detail = []
    tail = ep[1:] or ep
    secs = sum(r.get("train_seconds", 0) for r in tail)
    if tail and secs and all("t_io" in r for r in tail):
        detail.append(f"input stall {100 * sum(r['t_io'] for r in tail) / secs:.2f} %")
    elif tail and secs and all("input_stall" in r for r in tail):
        detail.append(f"input stall {100 * sum(r['input_stall'] * r['train_seconds'] for r in tail) / secs:.2f} %")
    rss = [r["peak_rss_bytes"] for r in ep if "peak_rss_bytes" in r]
    if rss:
        detail.append(f"peak RSS {max(rss) / 2**30:.1f} GiB")
    return ips, ", ".join(detail), (sum(later) / len(later) if later and not note else None)


rows = []
g = re.search(r"in ([\d.]+) s \((\d+) images/s", text("gen"))
rows.append((f"{images:,} JPEGs cut from photographs (tar + folder tree)", f"{int(g.group(2)):,}" if g else "",
             f"train.tar {gb(du('gen'))}" if du("gen") else "", status("gen")))
for enc in ("raw", "jpeg"):
    m = re.findall(r"in [\d.]+ s \((\d+) images/s\)", text(f"datagen-{enc}"))
    rows.append((f"datagen --size 256, {enc}", f"{int(m[-1]):,}" if m else "", gb(du(f"datagen-{enc}")),
                 status(f"datagen-{enc}")))
for enc in ("raw", "jpeg"):
    log = text(f"loader-{enc}")
    m = re.search(r"^\s*raw: median\s+([\d.]+)\s*img/s(.*)$", log, re.M | re.I)
    detail = []
    if m:
        detail.append(re.sub(r"^[\s,]*|\s*\(\d.*$", "", m.group(2).split(";")[0]))  # "N MB/s with R reader(s)"
    # Lines the loader may print for JPEG data: one core's plain decode rate, and the loader against it.
    plain = re.search(r"^.*plain.*decode.*?([\d.]+)\s*img/s", log, re.M | re.I)
    if plain:
        detail.append(f"plain decode {float(plain.group(1)):,.0f} img/s per core")
    pct = [l for l in log.splitlines() if re.search(r"plain.*decode", l, re.I) and "%" in l]
    if pct:
        detail.append(re.sub(r"^\s*raw:\s*", "", pct[-1].strip()))
    rows.append((f"loader alone (bench-loader), {enc}, crop 224", f"{float(m.group(1)):,.0f}" if m else "",
                 "; ".join(d for d in detail if d).replace("|", "/"), status(f"loader-{enc}")))
r18 = {}
for name, label in (("r18-raw", "raw"), ("r18-jpeg", "JPEG"), ("r18-raw-rrc", "raw + RandomResizedCrop"),
                    ("r18-jpeg-rrc", "JPEG + RandomResizedCrop"),
                    ("r18-synth", "8,192 synthetic samples in the page cache: the GPU's own rate")):
    ips, detail, r18[name] = training(name, r18_config)
    rows.append((f"convoy ResNet-18 bf16, {label} (after epoch 1)", ips, detail, status(name)))
if "r50-jpeg" in steps and not steps["r50-jpeg"][0].startswith("skipped (no"):
    ips, detail, _ = training("r50-jpeg", r18_config.replace("resnet18", "resnet50"))
    rows.append(("convoy ResNet-50 bf16, JPEG (after epoch 1)", ips, detail, status("r50-jpeg")))
tj = {}
for line in text("torch").splitlines():
    if line.startswith("{"):
        try:
            tj = json.loads(line)
        except ValueError:
            pass
torch_ips = tj.get("images_per_s")
detail = []
if tj.get("loader_wait_pct") is not None:
    detail.append(f"loader wait {tj['loader_wait_pct']:.1f} %")
if "compile_seconds" in tj:
    detail.append(f"compile {tj['compile_seconds']:.0f} s apart")
if tj.get("model_only_images_per_s"):
    detail.append(f"model alone {tj['model_only_images_per_s']:,.0f} img/s")
mode = "torch.compile" if tj.get("compile", True) else "eager"
rows.append((f"PyTorch ImageFolder + DataLoader ({tj.get('workers', 15)} workers, PIL), ResNet-18 {mode} bf16",
             f"{torch_ips:,.0f}" if torch_ips else "", ", ".join(detail), status("torch")))
for name, label in (("r18-jpeg", "JPEG"), ("r18-jpeg-rrc", "JPEG + RandomResizedCrop"),
                    ("r18-synth", "in-memory synthetic data (the bound)")):
    ratio = f"{r18[name] / torch_ips:.2f}x" if r18.get(name) and torch_ips else ""
    rows.append((f"convoy {label} / PyTorch (ResNet-18)", ratio, "", ""))

print(f"ImageNet-scale run: {images:,} images, {open(os.path.join(out, 'machine.txt')).readline().strip()}\n")
print("| what | images/s | detail | step |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
cat "$out/table.md"

# Only what this script made, in case SCALE_WORK names a folder that holds more.
if [ "${SCALE_KEEP:-0}" != 1 ]; then
  rm -rf "$work/train.tar" "$work/train.tar.tmp" "$work/folder" "$work/raw" "$work/jpeg" "$work/synth"
  rmdir "$work" 2>/dev/null
fi
