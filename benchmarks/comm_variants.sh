#!/usr/bin/env bash
# One net trained on one host's GPUs in several layouts (one node, simulated nodes over NCCL's sockets)
# and under several variants (environment, train flags), each run's phase times a step in one table.
#
#   benchmarks/comm_variants.sh OUTDIR
#
# LAYOUTS (default "1 4 4x1"): N is N GPUs of one node; MxG is M simulated nodes of G GPUs each
# (simnode.sh: NCCL's socket transport on loopback between them). VARIANTS (default "default||"): runs
# separated by ';', each "NAME|VAR=VALUE ...|train flags ...", e.g.
#   VARIANTS="default||;conn32|CUDA_DEVICE_MAX_CONNECTIONS=32|;fp8||--grad-comm fp8"
# Every layout runs every variant, in that order, for each net of NETS (default "resnet18"; configs in
# CONFIG_DIR, default configs/). DATA (default: `train synth` of FILES x 256 samples of SIZE px, 1,000
# classes, raw, made once in /dev/shm/comm_variants) is read by every run; BATCH_PER_GPU (256) samples a
# GPU, EPOCHS_PER_GPU (4): 1 + that x GPUs epochs, so every layout times the same steps after the first
# epoch (set-up and the graphs' capture). TRAIN_ARGS (default "--precision bf16"; --device cpu for a
# smoke run) go to every run. Writes OUTDIR/NAME.jsonl and .log per run, then table.md
# (benchmarks/step_phases.py); exits 1 naming the runs that failed. Needs train (TRAIN, else on PATH, else build/train) and mpirun.
set -uo pipefail
(($# == 1)) || { echo "usage: $0 OUTDIR" >&2; exit 2; }
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
train=${TRAIN:-$(command -v train 2>/dev/null || echo "$here/build/train")}
read -r -a nets <<<"${NETS:-resnet18}"
read -r -a layouts <<<"${LAYOUTS:-1 4 4x1}"
read -r -a train_args <<<"${TRAIN_ARGS:---precision bf16}"
IFS=';' read -r -a variants <<<"${VARIANTS:-default||}"
per_gpu=${BATCH_PER_GPU:-256} epochs_per_gpu=${EPOCHS_PER_GPU:-4} configs=${CONFIG_DIR:-$here/configs}
data=${DATA:-/dev/shm/comm_variants}
mpi=(mpirun --bind-to none --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
export NCCL_NVLS_ENABLE=0
sim_env=(-x NCCL_IB_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo -x NCCL_NVLS_ENABLE=0)

if [ ! -r "$data/dataset.json" ]; then
  "$train" synth --out "$data" --files "${FILES:-64}" --per-file 256 --size "${SIZE:-224}" --channels 3 \
    --classes 1000 --encoding raw > "$out/synth.log" 2>&1 || { cat "$out/synth.log" >&2; exit 1; }
fi

# run NET LAYOUT VARIANT: one mpirun, its metrics in OUTDIR/NET_LAYOUT_NAME.jsonl.
run() {
  local net=$1 layout=$2 name vars flags nodes=1 gpus launch=() envs=() v
  IFS='|' read -r name vars flags <<<"$3"
  if [[ $layout == *x* ]]; then nodes=${layout%x*} gpus=$((${layout%x*} * ${layout#*x})); else gpus=$layout; fi
  ((nodes > 1)) && launch=(-x SIM_NODES="$nodes" "${sim_env[@]}")
  for v in $vars; do envs+=(-x "$v"); done
  local tag="${net}_${layout}_${name}"
  # shellcheck disable=SC2086
  "${mpi[@]}" -np "$gpus" "${launch[@]}" "${envs[@]}" "$here/benchmarks/simnode.sh" "$train" \
    --config "$configs/$net.toml" --data "$data" --batch $((per_gpu * gpus)) --epochs $((1 + epochs_per_gpu * gpus)) \
    --log-every 0 --metrics "$out/$tag.jsonl" "${train_args[@]}" $flags > "$out/$tag.log" 2>&1
  local rc=$?
  echo "$tag: exit $rc" >&2
  [ "$rc" -eq 0 ] || failed+=("$tag")
}

{
  date -u +%Y-%m-%dT%H:%MZ
  echo "$(hostname), $(nproc) cores, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs"
  echo "convoy: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "nets: ${nets[*]}; layouts: ${layouts[*]}; variants: ${VARIANTS:-default||}; train args: ${train_args[*]}"
} > "$out/machine.txt"
rm -f "$out"/*.jsonl
failed=()
for net in "${nets[@]}"; do
  for layout in "${layouts[@]}"; do
    for variant in "${variants[@]}"; do run "$net" "$layout" "$variant"; done
  done
done
python3 "$here/benchmarks/step_phases.py" "$out" > "$out/table.md" && cat "$out/table.md"
((${#failed[@]} == 0)) || { echo "failed (see their logs in $out): ${failed[*]}" >&2; exit 1; }
