#!/usr/bin/env bash
# Fashion-MNIST time to accuracy on one GPU, in one call: convoy's train and PyTorch at its best train the
# same net and recipe (configs/fmnist95.toml) on the same batch files, seeds taking turns, then a table.
#
#   benchmarks/fmnist_time_to_accuracy.sh OUTDIR [FMNIST_DIR]
#   benchmarks/fmnist_time_to_accuracy.sh --smoke OUTDIR [FMNIST_DIR]
#
# FMNIST_DIR holds Fashion-MNIST's four IDX files (default /usr/share/datasets/fashion-mnist, Debian's
# dataset-fashion-mnist); `datagen idx2tar` and `datagen --size 28 --channels 1` make the training and test
# batch files from them. For each seed, convoy (`train --val` the test set, `--metrics` per epoch) and then
# PyTorch (benchmarks/pytorch_train.py --model config: the config's layers, init and recipe with train's lr
# schedule, fused SGD, torch.compile, bf16 autocast, channels_last, the training set on the GPU with a crop
# and flip drawn per sample there; `--epoch-log`) train and evaluate on the test set after every epoch, each
# under benchmarks/time_to_accuracy.py's `stamp` (its lines with the seconds since launch). PyTorch stops at
# the first epoch that reaches TARGET (its lr schedule still the whole run's): its time to TARGET is all the
# comparison needs, and the call stays short; TORCH_STOP=0 trains it to the end. Last,
# `time_to_accuracy.py summary` prints each run's final test top-1, convoy's mean, each side's time to
# TARGET with set-up counted and training alone, and PyTorch's over convoy's.
#
# --smoke: the whole pipeline on the CPU in a minute or two (512 training and 256 test images, 2 epochs of
# 4 steps, seeds 1 and 2, PyTorch eager in fp32, TARGET 0.1); the figures mean nothing.
#
# Needs train and datagen (on PATH, as on the GPU host after `source .gpu/rt/env.sh`, else build/) and a
# python3 with PyTorch. Writes OUTDIR/summary.md, OUTDIR/summary.json and OUTDIR/runs.tgz (every run's
# stamps log, metrics or epoch log); the batch files go to WORK (default a fresh folder under /tmp,
# removed at the end). Environment: CONFIG (configs/fmnist95.toml), SEEDS ("1 2 3"), TARGET (0.945), GOAL
# (0.95: convoy's mean final top-1 to meet), EPOCHS (the config's), CONVOY_ARGS ("--precision bf16"),
# TORCH_ARGS ("--compile-mode reduce-overhead --bf16 --channels-last": torch.compile with CUDA graphs, 3.2x
# the default mode's images/s for this net at batch 128 on an H200), TORCH_SEEDS (the seeds PyTorch
# trains, default SEEDS), TORCH_STOP (1), BUDGET (seconds for all the runs, 400:
# each run gets what is left of it and one cut short is shown as such; data making comes before it),
# TRAIN, DATAGEN, PYTHON, WORK.
set -euo pipefail
smoke=0
if [ "${1:-}" = --smoke ]; then smoke=1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [--smoke] OUTDIR [FMNIST_DIR]" >&2; exit 2; }
out=$1 fm=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")/.." && pwd)
tool() { command -v "$1" 2>/dev/null || echo "$here/build/$1"; }
train=${TRAIN:-$(tool train)} datagen=${DATAGEN:-$(tool datagen)} python=${PYTHON:-python3}
config=${CONFIG:-$here/configs/fmnist95.toml}
if [ "$smoke" = 1 ]; then
  seeds=${SEEDS:-1 2} target=${TARGET:-0.1} epochs=${EPOCHS:-2} first_train=512 first_test=256
  convoy_args=${CONVOY_ARGS:---device cpu} torch_args=${TORCH_ARGS:---device cpu}
else
  seeds=${SEEDS:-1 2 3} target=${TARGET:-0.945} epochs=${EPOCHS:-} first_train='' first_test=''
  convoy_args=${CONVOY_ARGS:---device cuda --precision bf16} torch_args=${TORCH_ARGS:---compile-mode reduce-overhead --bf16 --channels-last}
fi
goal=${GOAL:-0.95} budget=${BUDGET:-400} torch_seeds=${TORCH_SEEDS:-$seeds}
# Each run starts in its own folder: paths given relative to here are made absolute first.
absolute() { case $1 in */*) realpath -m "$1" ;; *) echo "$1" ;; esac; }
train=$(absolute "$train") datagen=$(absolute "$datagen") python=$(absolute "$python") config=$(realpath "$config")
for split in train t10k; do for f in "$split-images-idx3-ubyte.gz" "$split-labels-idx1-ubyte.gz"; do
  [ -f "$fm/$f" ] || { echo "$fm/$f: missing (FMNIST_DIR must hold Fashion-MNIST's IDX files)" >&2; exit 2; }
done; done
mkdir -p "$out"
if [ -n "${WORK:-}" ]; then
  work=$(realpath -m "$WORK") && mkdir -p "$work"
else
  work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
fi
export NCCL_NVLS_ENABLE=0
stamp() { "$python" "$here/benchmarks/time_to_accuracy.py" stamp "$@"; }

# The batch files: test set and training set through the same class list.
datagen_failed() { echo "datagen failed:" >&2; tail -3 "$work/datagen.log" >&2; exit 1; }
for split in train t10k; do
  n=$first_train; [ "$split" = t10k ] && n=$first_test
  "$datagen" idx2tar --images "$fm/$split-images-idx3-ubyte.gz" --labels "$fm/$split-labels-idx1-ubyte.gz" \
    --out "$work/fmnist-$split.tar" --classes-out "$work/classes.txt" ${n:+--first "$n"} 2>>"$work/datagen.log" \
    || datagen_failed
  "$datagen" --input "$work/fmnist-$split.tar" --output "$work/fmnist-$split" --size 28 --channels 1 \
    --classes "$work/classes.txt" 2>>"$work/datagen.log" || datagen_failed
done
echo "data made in $SECONDS s" >&2

mkdir -p "$work/runs"
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
run() {  # run NAME CMD...: the command under stamp in its run folder, within what is left of the budget
  local name=$1; shift
  local limit; limit=$(left)
  mkdir -p "$work/runs/$name"
  if [ "$limit" -lt 5 ]; then echo "$name: not run, the budget of $budget s is spent" >&2; return; fi
  local rc=0
  (cd "$work/runs/$name" && stamp stamps.log --timeout "$limit" -- "$@") || rc=$?
  echo "$name: exit $rc, $(tail -1 "$work/runs/$name/stamps.log" | cut -f1) s" >&2
}
for s in $seeds; do
  # shellcheck disable=SC2086
  run "convoy-s$s" "$train" --config "$config" --data "$work/fmnist-train" --val "$work/fmnist-t10k" --seed "$s" \
    ${epochs:+--epochs "$epochs"} --log-every 0 --metrics metrics.jsonl $convoy_args
  [[ " $torch_seeds " == *" $s "* ]] || continue
  stop=()
  [ "${TORCH_STOP:-1}" = 1 ] && stop=(--stop-at-accuracy "$target")
  # shellcheck disable=SC2086
  run "torch-s$s" "$python" "$here/benchmarks/pytorch_train.py" --config "$config" --data "$work/fmnist-train" \
    --val "$work/fmnist-t10k" --seed "$s" ${epochs:+--epochs "$epochs"} --crop-per-sample --epoch-log epochs.csv \
    "${stop[@]}" $torch_args
done

{
  echo "# Fashion-MNIST time to $target: $(basename "$config"), seeds $seeds"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(hostname), $(nvidia-smi -L 2>/dev/null | head -1 || true), $(nproc) cores," \
    "$("$python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
  echo "convoy: train $convoy_args; PyTorch: pytorch_train.py $torch_args --crop-per-sample" \
    "$([ "${TORCH_STOP:-1}" = 1 ] && echo "--stop-at-accuracy $target")"
  echo
  "$python" "$here/benchmarks/time_to_accuracy.py" summary "$work/runs" --target "$target" --goal "$goal" \
    --json "$out/summary.json" || echo "(no summary: time_to_accuracy.py failed, exit $?)"
  echo
  echo "PyTorch's own rows (compile and warm-up seconds, steady images/s):"
  for f in "$work"/runs/torch-s*/stamps.log; do grep -h $'^[0-9.]*\t{' "$f" | cut -f2- || true; done
} >"$out/summary.md"
tar czf "$out/runs.tgz" -C "$work" runs datagen.log
cat "$out/summary.md"
