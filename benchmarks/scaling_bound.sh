#!/usr/bin/env bash
# One node's weak-scaling bound: N GPUs as train runs them (N ranks) beside what the same GPUs reach when
# they do not talk (N one-GPU runs at once, each with the readers a rank of N gets) and, with VARIANTS, when
# they meet but send no gradients (dev/variants/build.sh); all as % of N x one GPU alone, rounds taking turns.
#
#   benchmarks/scaling_bound.sh DATA OUTDIR
#
# DATA: a datagen output folder. NETS (default "resnet50 resnet18", configs in CONFIG_DIR, default configs/),
# GPUS (default: nvidia-smi's count), ROUNDS (2), EPOCHS (3; images/s over epochs 2 to the last),
# BATCH_PER_GPU (256), VARIANTS ("NAME=BINARY ...", each run on GPUS ranks as train is), TRAIN (the binary,
# default train on PATH), TRAIN_ARGS (every run; default "--precision bf16"), BOUND_BUDGET (seconds, default
# 540: no step starts after it). Writes each run's metrics and log, steps.tsv and table.md
# (benchmarks/scaling_bound_table.py) to OUTDIR.
set -uo pipefail
(($# == 2)) || { echo "usage: $0 DATA OUTDIR" >&2; exit 2; }
data=$1
[ -s "$data/dataset.json" ] || { echo "scaling_bound.sh: $data: no dataset.json (not a datagen output)" >&2; exit 2; }
mkdir -p "$2" || exit 1
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
read -r -a nets <<<"${NETS:-resnet50 resnet18}"
read -r -a variants <<<"${VARIANTS:-}"
read -r -a train_args <<<"${TRAIN_ARGS:---precision bf16}"
train=${TRAIN:-train} rounds=${ROUNDS:-2} epochs=${EPOCHS:-3} per_gpu=${BATCH_PER_GPU:-256} configs=${CONFIG_DIR:-$here/configs}
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
((gpus >= 2)) || { echo "scaling_bound.sh: needs 2 GPUs or more (GPUS=$gpus)" >&2; exit 2; }
for v in "${variants[@]}"; do
  [ -x "${v#*=}" ] || { echo "scaling_bound.sh: VARIANTS: ${v#*=}: not an executable" >&2; exit 2; }
done
# What choose_readers gives a rank of GPUS on this node: its share of the cores less the trainer's thread.
readers=$(($(nproc) / gpus - 1))
((readers < 2)) && readers=2
export NCCL_NVLS_ENABLE=0
mpi=(mpirun --bind-to none --oversubscribe -x NCCL_NVLS_ENABLE=0)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
touch "$out/steps.tsv"
t_end=$((SECONDS + ${BOUND_BUDGET:-540}))
# shellcheck source=benchmarks/budget_steps.sh
source "$here/benchmarks/budget_steps.sh"
{
  date -u
  nproc
  nvidia-smi -L
  echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "GPUs: $gpus; readers of an independent run: $readers; variants: ${variants[*]}"
} >"$out/machine.txt" 2>&1

# train_run NAME BINARY RANKS NET: one run of BINARY (train or a variant) on RANKS ranks.
train_run() {
  local name=$1 bin=$2 ranks=$3 net=$4
  rm -f "$out/$name.jsonl"
  step "$name" 150 "${mpi[@]}" -np "$ranks" "$bin" --config "$configs/$net.toml" --data "$data" \
    --batch $((per_gpu * ranks)) --epochs "$epochs" --metrics "$out/$name.jsonl" "${train_args[@]}"
}

# apart NAME NET: one one-GPU run a GPU, all at once, none talking to another.
apart() {
  local name=$1 net=$2 g
  ((t_end - SECONDS > 30)) || { printf '%s\tskipped (out of time)\t0\n' "$name" >>"$out/steps.tsv"; return; }
  for ((g = 0; g < gpus; g++)); do
    rm -f "$out/$name-g$g.jsonl"
    CUDA_VISIBLE_DEVICES=$g timeout -k 10 150 "$train" --config "$configs/$net.toml" --data "$data" \
      --batch "$per_gpu" --epochs "$epochs" --readers "$readers" --metrics "$out/$name-g$g.jsonl" \
      "${train_args[@]}" >"$out/$name-g$g.log" 2>&1 &
  done
  wait
  printf '%s\tdone\t0\n' "$name" >>"$out/steps.tsv"
}

for ((r = 1; r <= rounds; r++)); do
  for net in "${nets[@]}"; do
    train_run "$net-one-$r" "$train" 1 "$net"
    apart "$net-apart-$r" "$net"
    train_run "$net-train-$r" "$train" "$gpus" "$net"
    for v in "${variants[@]}"; do train_run "$net-${v%%=*}-$r" "${v#*=}" "$gpus" "$net"; done
  done
done
python3 "$here/benchmarks/scaling_bound_table.py" "$out" "$gpus" >"$out/table.md" && cat "$out/table.md"
