#!/usr/bin/env bash
# ResNet-18 trained to the end by convoy and by PyTorch on the same ImageNet-shaped photo set, on one GPU
# host and in parts that each fit one call: validation top-1 against wall time, whole images against squares.
#
#   benchmarks/convergence_resnet18.sh OUTDIR [PHOTO_DIR]            (PHOTO_DIR default /usr/share/wallpapers)
#   PARTS=summary FROM="OUT1 OUT2 ..." benchmarks/convergence_resnet18.sh OUTDIR
#   benchmarks/convergence_resnet18.sh --smoke OUTDIR [PHOTO_DIR]
#
# The set: benchmarks/ilsvrc_photos.py cuts IMAGES training JPEGs (500x375, a quarter 375x500) and
# VAL_PER_CLASS validation JPEGs of each class from the photographs of PHOTO_DIR (on the GPU host, the
# copy benchmarks/pack_photos.sh makes), a class per tile of each photograph (SET_ARGS, default
# "--regions 3x2 --spill 0.3": 180 classes from 30 photographs, windows reaching 30 % of a tile past it;
# a larger --spill makes the set harder, see ilsvrc_photos.py), the same bytes in every call. The recipe:
# configs/resnet18.toml (torchvision's: SGD, momentum 0.9, lr 0.1 x BATCH / 256, weight decay 1e-4, lr
# / 10 at each third of the run) plus label_smoothing 0.1, scaled to EPOCHS by scaled_config.py, with
# torchvision's RandomResizedCrop 224 + flip in training and Resize(256) + CenterCrop(224) in
# evaluation: OUTDIR/config.toml, the one config both sides read.
#
# PARTS (default "convoy-whole convoy-square torch summary"), each run once per seed of SEEDS ("1 2"):
#   convoy-whole   datagen to JPEG batch files of whole images (--resize short:SHORT --max-side MAX_SIDE,
#                  format v2) for training and validation, then `train --config --data --val --seed
#                  --metrics` (evaluated every epoch)
#   convoy-square  the same from the centre-square files (--resize crop --size SQUARE, format v1)
#   torch          benchmarks/torch_imagefolder.py --epoch-log: ImageFolder + DataLoader over the JPEGs
#                  themselves (PIL, torchvision's transforms), torch.compile, bf16, channels_last, fused
#                  SGD, the same config; evaluated every epoch on folder/val
#   summary        convergence_summary.py over OUTDIR and the OUTDIRs in FROM: summary.md,
#                  summary.json, curves.png (validation top-1 against seconds since launch)
# Each run is under time_to_accuracy.py's `stamp` (every line with its seconds since launch). A call
# makes the set and the batch files its parts need once, then runs; everything it does stays within
# BUDGET seconds (default 540; one part a call gives the part all of it): each run gets what is left
# divided by the runs still to come, a run past its share is stopped (SIGTERM) and keeps the epochs it
# finished, shown as cut short. Parts of a study may run in different calls on fresh machines: each
# call writes its OUTDIR, and a last `PARTS=summary FROM="..."` (here, or on the host) merges them.
#
# --smoke: every part on the CPU in about a minute (SET_ARGS "--regions 2x2 --classes 16", 256 training
# and 64 validation images, 32 px crops, 2 epochs of 8 steps, train's CPU backend, PyTorch eager in
# fp32 with 2 workers); the figures mean nothing.
#
# Needs train and datagen (on PATH, as on the GPU host after `source .gpu/rt/env.sh`, else build/) and a
# python3 with PyTorch, torchvision, Pillow and matplotlib. Environment: PARTS, SEEDS, EPOCHS (16), BUDGET,
# FROM, IMAGES (64000), VAL_PER_CLASS (50), SET_ARGS, SET_SEED (1), BATCH (256), CROP (224), SHORT (375:
# the photos' own short side, so the files keep every pixel PyTorch crops from),
# MAX_SIDE (512), SQUARE (256), LABEL_SMOOTHING (0.1), CONFIG (configs/resnet18.toml), CONVOY_ARGS ("--device
# cuda --precision bf16"), TORCH_ARGS (none: torch_imagefolder.py's defaults), DATAGEN_ARGS (none), TRAIN,
# DATAGEN, PYTHON, WORK (the set and batch files; default a fresh folder under TMPDIR or /tmp, removed
# at the end).
set -uo pipefail
smoke=0
if [ "${1:-}" = --smoke ]; then smoke=1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [--smoke] OUTDIR [PHOTO_DIR]" >&2; exit 2; }
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd) photos=${2:-/usr/share/wallpapers}
here=$(cd "$(dirname "$0")/.." && pwd)
tool() { command -v "$1" 2>/dev/null || echo "$here/build/$1"; }
absolute() { case $1 in */*) realpath -m "$1" ;; *) echo "$1" ;; esac; }
train=$(absolute "${TRAIN:-$(tool train)}") datagen=$(absolute "${DATAGEN:-$(tool datagen)}")
python=$(absolute "${PYTHON:-python3}") config=$(realpath "${CONFIG:-$here/configs/resnet18.toml}")
parts=${PARTS:-convoy-whole convoy-square torch summary} seeds=${SEEDS:-1 2}
if [ "$smoke" = 1 ]; then
  epochs=${EPOCHS:-2} images=${IMAGES:-256} per_class=${VAL_PER_CLASS:-4}
  set_args=${SET_ARGS:---regions 2x2 --classes 16}
  batch=${BATCH:-32} crop=${CROP:-32} short=${SHORT:-40} max_side=${MAX_SIDE:-64} square=${SQUARE:-40}
  convoy_args=${CONVOY_ARGS:---device cpu} torch_args=${TORCH_ARGS:---device cpu --no-compile --fp32 --workers 2}
  budget=${BUDGET:-240} run_min=5
else
  epochs=${EPOCHS:-16} images=${IMAGES:-64000} per_class=${VAL_PER_CLASS:-50}
  set_args=${SET_ARGS:---regions 3x2 --spill 0.3}
  batch=${BATCH:-256} crop=${CROP:-224} short=${SHORT:-375} max_side=${MAX_SIDE:-512} square=${SQUARE:-256}
  convoy_args=${CONVOY_ARGS:---device cuda --precision bf16} torch_args=${TORCH_ARGS:-}
  budget=${BUDGET:-540} run_min=30
fi
for p in $parts; do
  case $p in convoy-whole | convoy-square | torch | summary) ;;
    *) echo "PARTS: '$p' is none of convoy-whole, convoy-square, torch, summary" >&2; exit 2 ;;
  esac
done
has() { [[ " $parts " == *" $1 "* ]]; }
runs_in() { for p in $parts; do [ "$p" != summary ] && echo "$p"; done; }
kinds=$(runs_in)
if [ -n "$kinds" ] && [ ! -d "$photos" ]; then echo "$photos: no such folder (PHOTO_DIR)" >&2; exit 2; fi
if [ -n "${WORK:-}" ]; then
  work=$(realpath -m "$WORK") && mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/convergence.XXXXXX") && trap 'rm -rf "$work"' EXIT
fi
export NCCL_NVLS_ENABLE=0
reserve=$([ "$smoke" = 1 ] && echo 5 || echo 15)  # what the summary needs after the last run
t_end=$((SECONDS + budget - reserve)) step_min=5
mkdir -p "$out/runs"
[ -n "$kinds" ] && : >"$out/steps.tsv"
# shellcheck source=benchmarks/budget_steps.sh
source "$here/benchmarks/budget_steps.sh"

if [ -n "$kinds" ]; then
  {
    date -u +%Y-%m-%dT%H:%MZ
    echo "$(hostname), $(nproc) cores, $(nvidia-smi -L 2>/dev/null | head -1 || true)"
    "$python" -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision",
      torchvision.__version__, "Pillow", PIL.__version__)' 2>&1
    echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
    echo "parts: ${kinds//$'\n'/ }; seeds: $seeds; epochs: $epochs;" \
      "images: $images + $per_class per class for validation;" \
      "set: $set_args; batch $batch, crop $crop; whole: short:$short max-side $max_side; square: $square"
    echo "convoy: train $convoy_args; PyTorch: torch_imagefolder.py $torch_args"
  } >"$out/machine.txt"
fi

# The set, in the layouts this call's parts read: datagen's tars, ImageFolder's tree.
prepare_set() {
  local layout=both
  has torch || layout=tar
  has convoy-whole || has convoy-square || layout=folder
  # shellcheck disable=SC2086
  step set 400 "$python" "$here/benchmarks/ilsvrc_photos.py" "$photos" "$work/set" "$images" $set_args \
    --val-per-class "$per_class" --seed "${SET_SEED:-1}" --layout "$layout" || return 1
  "$python" "$here/benchmarks/scaled_config.py" "$config" "$out/config.toml" --epochs "$epochs" --batch "$batch" \
    --crop "$crop" --label-smoothing "${LABEL_SMOOTHING:-0.1}"
}

# datagen_pair KIND FLAGS...: the training and validation batch files of one kind, val with train's classes.
datagen_pair() {
  local kind=$1
  shift
  # shellcheck disable=SC2086
  step "datagen-$kind-train" 200 "$datagen" --input "$work/set/train.tar" --output "$work/train-$kind" \
    --encoding jpeg "$@" ${DATAGEN_ARGS:-} || return 1
  "$datagen" classes "$work/train-$kind" --out "$work/classes-$kind.txt" || return 1
  # shellcheck disable=SC2086
  step "datagen-$kind-val" 60 "$datagen" --input "$work/set/val.tar" --output "$work/val-$kind" \
    --classes "$work/classes-$kind.txt" --encoding jpeg "$@" ${DATAGEN_ARGS:-}
}

ready=""
if [ -n "$kinds" ] && prepare_set; then
  for k in $kinds; do
    case $k in
      convoy-whole) datagen_pair whole --resize "short:$short" --max-side "$max_side" && ready+=" $k" ;;
      convoy-square) datagen_pair square --resize crop --size "$square" && ready+=" $k" ;;
      torch) ready+=" $k" ;;
    esac
  done
fi

# run NAME RUNS_LEFT CMD...: CMD under stamp in OUTDIR/runs/NAME, within its share of what is left.
run() {
  local name=$1 runs_left=$2
  shift 2
  local limit=$(((t_end - SECONDS) / runs_left)) rc=0
  rm -rf "$out/runs/$name" && mkdir -p "$out/runs/$name"
  if [ "$limit" -lt "$run_min" ]; then
    echo "$name: not run, $((t_end - SECONDS)) s of the budget of $budget s left for $runs_left run(s)" |
      tee "$out/runs/$name/not_run.txt" >&2
    return
  fi
  echo "== $name (at most $limit s)" >&2
  (cd "$out/runs/$name" && "$python" "$here/benchmarks/time_to_accuracy.py" stamp stamps.log --timeout "$limit" \
    -- "$@") || rc=$?
  echo "== $name: exit $rc, $(tail -1 "$out/runs/$name/stamps.log" | cut -f1) s" >&2
}

n_seeds=$(echo "$seeds" | wc -w)
left=$(($(echo "$ready" | wc -w) * n_seeds))
for k in $ready; do
  for s in $seeds; do
    case $k in
      convoy-*)
        # shellcheck disable=SC2086
        run "$k-s$s" "$left" "$train" --config "$out/config.toml" --data "$work/train-${k#convoy-}" \
          --val "$work/val-${k#convoy-}" --seed "$s" --log-every 0 --metrics metrics.jsonl $convoy_args ;;
      torch)
        # shellcheck disable=SC2086
        run "torch-s$s" "$left" "$python" "$here/benchmarks/torch_imagefolder.py" --data "$work/set/folder/train" \
          --val "$work/set/folder/val" --config "$out/config.toml" --seed "$s" --epoch-log epochs.csv $torch_args ;;
    esac
    left=$((left - 1))
  done
done

if has summary; then
  # shellcheck disable=SC2086
  "$python" "$here/benchmarks/convergence_summary.py" ${FROM:-} "$out" --md "$out/summary.md" \
    --json "$out/summary.json" --plot "$out/curves.png" || { echo "convergence_summary.py failed" >&2; exit 1; }
  cat "$out/summary.md"
fi
for k in $kinds; do
  case " $ready " in
    *" $k "*) ;;
    *) echo "$k: its data could not be made (see $out/steps.tsv and the logs)" >&2; exit 1 ;;
  esac
done
