#!/usr/bin/env bash
# Scaling on one multi-GPU host in one go: weak and strong scaling over its GPUs, the same GPUs as
# simulated nodes over NCCL's sockets, and PyTorch DDP at its best beside each, from real-photo files.
#
#   benchmarks/multi_gpu.sh PHOTO_DIR OUTDIR [IMAGES]      (IMAGES default 64000, in 100 classes)
#
# Needs datagen and train on PATH (source .gpu/rt/env.sh), mpirun, and python3 with PyTorch and
# torchvision. Parts (PARTS, default "data weak strong nodes ddp"), each a set of steps:
#   data    ilsvrc_photos.py's JPEGs, datagen --size 256 to JPEG (and raw) batch files; kept in
#           MULTI_WORK (default /tmp/multi_gpu) and not remade when there, so a later call on the same
#           machine goes on from them
#   weak    train at 256 a GPU on 1, 2, 4, ... GPUs (GPU_COUNTS), one node, each net and encoding
#   strong  train at a global batch of STRONG_BATCH (512) on 1 GPU and on the most GPUs
#   nodes   the same runs as weak's JPEG ones on SIM_LAYOUTS (default "2x1 2x2 4x1", nodes x GPUs a
#           node, those that fit): each node's ranks get their own NCCL_HOSTID (simnode.sh) and NCCL
#           moves the gradients between nodes through its socket transport on loopback
#   ddp     benchmarks/pytorch_ddp.py (compile, fused SGD, channels_last, bf16; data on the GPU) on 1 GPU,
#           on all GPUs of one node and on SIM_LAYOUTS with DDP's bf16 compression hook (DDP_NODE_HOOKS, default
#           "bf16"; "bf16 powersgd" adds its PowerSGD hook, as ddp-NET-LAYOUT_powersgd); DDP_ONE_NODE=0 leaves
#           out the runs on 1 GPU and on one node's GPUs
# NETS (default "resnet50 resnet18", configs in CONFIG_DIR, default configs/), ENCODINGS ("jpeg raw"),
# EPOCHS (3; images/s and input stall are over epochs 2 to the last), BATCH_PER_GPU (256), SIZE (256,
# datagen's), GPUS (default: nvidia-smi's count), TRAIN_ARGS and DDP_ARGS add flags; every step has its own limit and no
# step starts once MULTI_BUDGET seconds (default 540) are spent. Writes one log per step, each run's
# metrics, machine.txt, steps.tsv and table.md (benchmarks/multi_gpu_table.py) to OUTDIR.
set -uo pipefail
(($# >= 2)) || { echo "usage: $0 PHOTO_DIR OUTDIR [IMAGES]" >&2; exit 2; }
photos=$1 images=${3:-64000}
mkdir -p "$2" || exit 1
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=${MULTI_WORK:-/tmp/multi_gpu}
mkdir -p "$work" || exit 1
parts=" ${PARTS:-data weak strong nodes ddp} "
read -r -a nets <<<"${NETS:-resnet50 resnet18}"
read -r -a encodings <<<"${ENCODINGS:-jpeg raw}"
read -r -a train_args <<<"${TRAIN_ARGS:-}"
read -r -a ddp_args <<<"${DDP_ARGS:-}"
read -r -a node_hooks <<<"${DDP_NODE_HOOKS:-bf16}"
epochs=${EPOCHS:-3} strong_batch=${STRONG_BATCH:-512} per_gpu=${BATCH_PER_GPU:-256} size=${SIZE:-256}
configs=${CONFIG_DIR:-$here/configs}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ -n "${GPU_COUNTS:-}" ]; then
  read -r -a counts <<<"$GPU_COUNTS"
else
  counts=() && for ((n = 1; n <= gpus; n *= 2)); do counts+=("$n"); done
fi
max=${counts[-1]:-1}
mpi=(mpirun --bind-to none --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
# The simulated link: NCCL's socket transport on loopback, never InfiniBand or NVLink multicast.
sim_env=(-x NCCL_IB_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo -x NCCL_NVLS_ENABLE=0)
reserve=15
t_end=$((SECONDS + ${MULTI_BUDGET:-540} - reserve))

{
  date -u
  hostname
  echo "nproc: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo
  nvidia-smi -L
  nvidia-smi topo -m 2>/dev/null
  free -g
  "$python" -c 'import sys, torch, torchvision; print("python", sys.version.split()[0], "torch", torch.__version__,
    "torchvision", torchvision.__version__, "nccl", torch.cuda.nccl.version())'
  mpirun --version 2>/dev/null | head -1
  echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "images: $images; GPU counts: ${counts[*]}; parts:$parts; epochs: $epochs; TRAIN_ARGS: ${TRAIN_ARGS:-}"
} >>"$out/machine.txt" 2>&1

touch "$out/steps.tsv"
step_min=15
# shellcheck source=benchmarks/budget_steps.sh
source "$here/benchmarks/budget_steps.sh"

make_data() {
  if [ ! -s "$work/train.tar" ]; then
    rm -rf "$work/train.tar" "$work/folder"
    step gen 240 "$python" "$here/benchmarks/ilsvrc_photos.py" "$photos" "$work" "$images" --jobs "$(nproc)"
  fi
  local enc extra
  for enc in "${encodings[@]}"; do
    [ -s "$work/$enc/dataset.json" ] && continue
    rm -rf "${work:?}/$enc"
    extra=()
    [ "$enc" = jpeg ] && extra=(--encoding jpeg)
    step "datagen-$enc" 150 datagen --input "$work/train.tar" --output "$work/$enc" --size "$size" "${extra[@]}"
  done
  rm -rf "$work/folder"  # ImageFolder's copy: no step here reads it
}

# run NAME RANKS GLOBAL_BATCH NET ENC [SIM_NODES]: one train run under mpirun, its metrics kept.
run() {
  local name=$1 ranks=$2 batch=$3 net=$4 enc=$5 nodes=${6:-1} launch=()
  ((nodes > 1)) && launch=(-x SIM_NODES="$nodes" "${sim_env[@]}" "$here/benchmarks/simnode.sh")
  rm -f "$out/$name.jsonl"
  step "$name" 150 "${mpi[@]}" -np "$ranks" "${launch[@]}" train --config "$configs/$net.toml" \
    --data "$work/$enc" --precision bf16 --batch "$batch" --epochs "$epochs" --metrics "$out/$name.jsonl" \
    "${train_args[@]}"
}

# ddp NAME RANKS NET HOOK [SIM_NODES]: PyTorch DDP on as many GPUs.
ddp() {
  local name=$1 ranks=$2 net=$3 hook=$4 nodes=${5:-1} launch=()
  ((nodes > 1)) && launch=(-x SIM_NODES="$nodes" "${sim_env[@]}" "$here/benchmarks/simnode.sh")
  step "$name" 240 "${mpi[@]}" -np "$ranks" -x TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "${launch[@]}" "$python" \
    "$here/benchmarks/pytorch_ddp.py" --model "$net" --batch-per-gpu "$per_gpu" --hook "$hook" "${ddp_args[@]}"
}

layouts() {  # the SIM_LAYOUTS that fit this host's GPUs, as "nodes gpus_a_node"
  local l
  for l in ${SIM_LAYOUTS:-2x1 2x2 4x1}; do
    (( ${l%x*} * ${l#*x} <= gpus )) && echo "${l%x*} ${l#*x}"
  done
}

[[ $parts == *" data "* ]] && make_data
if [[ $parts == *" weak "* ]]; then
  for net in "${nets[@]}"; do
    for enc in "${encodings[@]}"; do
      for n in "${counts[@]}"; do run "weak-$net-$enc-$n" "$n" $((per_gpu * n)) "$net" "$enc"; done
    done
  done
fi
if [[ $parts == *" strong "* ]]; then
  for net in "${nets[@]}"; do
    for n in 1 "$max"; do run "strong-$net-$n" "$n" "$strong_batch" "$net" jpeg; done
  done
fi
if [[ $parts == *" nodes "* ]]; then
  for net in "${nets[@]}"; do
    while read -r nodes per; do
      n=$((nodes * per))
      run "nodes-$net-${nodes}x$per" "$n" $((per_gpu * n)) "$net" jpeg "$nodes" </dev/null
    done < <(layouts)
  done
fi
if [[ $parts == *" ddp "* ]]; then
  for net in "${nets[@]}"; do
    if [ "${DDP_ONE_NODE:-1}" = 1 ]; then
      ddp "ddp-$net-1" 1 "$net" none
      ((max > 1)) && ddp "ddp-$net-$max" "$max" "$net" none
    fi
    while read -r nodes per; do
      for hook in "${node_hooks[@]}"; do
        suffix=$([ "$hook" = bf16 ] || echo "_$hook")
        ddp "ddp-$net-${nodes}x$per$suffix" $((nodes * per)) "$net" "$hook" "$nodes" </dev/null
      done
    done < <(layouts)
  done
fi

"$python" "$here/benchmarks/multi_gpu_table.py" "$out" >"$out/table.md"
cat "$out/table.md"
