#!/usr/bin/env bash
# Strong scaling (global batch fixed) and weak scaling (per-rank batch fixed) of train over 1, 2, 4, ...
# ranks, one rank per GPU, each attempt under a timeout with retries, one CSV row per attempt; resumable.
set -euo pipefail
SWEEP_NAME="sweep-train"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/sweep_lib.sh
source "$here/sweep_lib.sh"

usage() {
  cat <<EOF
Usage: scripts/sweep-train.sh --config FILE --data DIR --batch B [options] [-- <more train arguments>]

  --config FILE       net and recipe (TOML)
  --data DIR          training dataset (datagen output); its dataset.json gives the image count
  --batch B           strong scaling: the global batch at every rank count;
                      weak scaling: the batch of each rank (global batch B x ranks)
Grid (comma lists):
  --ranks LIST        ranks, one per GPU (default 1,2,4)
  --mode LIST         strong, weak or strong,weak (default strong,weak)
  --repeats N         runs of each grid point (default 3)
Each run:
  --epochs E          epochs per run (default 2)
  --warmup-epochs W   leading epochs left out of the timed figures (default 1; all epochs are timed
                      when there are no more than W)
  --device D          passed to train as --device D (default: train's own default)
  --per-host G        ranks per host (default: the GPUs nvidia-smi lists here with a GPU device,
                      otherwise every rank on one host)
  --timeout S         seconds before an attempt is killed (default 7200)
  --retries N         further attempts after a failed or timed-out one (default 2)
  --retry-failed      also rerun points whose attempts were all used up by an earlier sweep
Files:
  --csv FILE          results, one row per attempt (default sweep-train.csv)
  --scratch DIR       metrics files and attempt logs (default FILE.d)
  --train PATH        the train binary (default \$CONVOY_BIN/train, else build/train)
  --dry-run           print the command of every attempt that would run, run nothing
Environment: NCCL_NVLS_ENABLE is always 0; NCCL_DEBUG defaults to WARN; every NCCL_*, OMP_NUM_THREADS,
CUDA_DEVICE_ORDER and CUDA_DEVICE_MAX_CONNECTIONS set here travels to remote ranks. SWEEP_MPIRUN, SWEEP_MPI_ARGS, SWEEP_KILL_AFTER
as for sweep-datagen.sh.
EOF
}

config="" data="" batch="" ranks_list=1,2,4 mode_list=strong,weak repeats=3 epochs=2 warmup=1
device="" per_host="" timeout_s=7200 retries=2 retry_failed=0 csv=sweep-train.csv scratch="" train=""
dry_run=0
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=${2:?--config needs a file}; shift 2 ;;
    --data) data=${2:?--data needs a folder}; shift 2 ;;
    --batch) batch=${2:?--batch needs a number}; shift 2 ;;
    --ranks|--gpus) ranks_list=${2:?--ranks needs a list}; shift 2 ;;
    --mode) mode_list=${2:?--mode needs strong, weak or strong,weak}; shift 2 ;;
    --repeats) repeats=${2:?--repeats needs a number}; shift 2 ;;
    --epochs) epochs=${2:?--epochs needs a number}; shift 2 ;;
    --warmup-epochs) warmup=${2:?--warmup-epochs needs a number}; shift 2 ;;
    --device) device=${2:?--device needs a name}; shift 2 ;;
    --per-host) per_host=${2:?--per-host needs a number}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    --retries) retries=${2:?--retries needs a number}; shift 2 ;;
    --retry-failed) retry_failed=1; shift ;;
    --csv) csv=${2:?--csv needs a file}; shift 2 ;;
    --scratch) scratch=${2:?--scratch needs a folder}; shift 2 ;;
    --train) train=${2:?--train needs a path}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) sweep_die "unknown option '$1' (train's other arguments go after --; see --help)" ;;
  esac
done
tr_args=("$@")
for a in "${tr_args[@]}"; do
  case $a in
    --config|--config=*|--data|--data=*|--batch|--batch=*|--epochs|--epochs=*|--metrics|--metrics=*|--device|--device=*)
      sweep_die "train argument '$a' is set by the sweep itself; use the sweep's option" ;;
  esac
done
[ -n "$config" ] || sweep_die "--config is required"
[ -n "$data" ] || sweep_die "--data is required"
[[ "$batch" =~ ^[1-9][0-9]*$ ]] || sweep_die "--batch is required (a positive integer)"
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || sweep_die "--repeats: '$repeats' is not a positive integer"
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || sweep_die "--epochs: '$epochs' is not a positive integer"
[[ "$warmup" =~ ^[0-9]+$ ]] || sweep_die "--warmup-epochs: '$warmup' is not a number"
[[ "$retries" =~ ^[0-9]+$ ]] || sweep_die "--retries: '$retries' is not a number"
[[ "$timeout_s" =~ ^[0-9]+([.][0-9]+)?$ ]] || sweep_die "--timeout: '$timeout_s' is not a number of seconds"
sweep_int_list --ranks "$ranks_list" RANKS
IFS=',' read -r -a MODES <<< "$mode_list"
for m in "${MODES[@]}"; do [[ "$m" == strong || "$m" == weak ]] || sweep_die "--mode: '$m' is neither strong nor weak"; done

mapfile -t ALL_HOSTS < <(sweep_scheduler_hosts)
scheduler=$(sweep_scheduler_name)
max_ranks=$(printf '%s\n' "${RANKS[@]}" | sort -n | tail -n 1)
if [ -z "$per_host" ]; then
  if [ "$device" != cpu ] && command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    per_host=$(nvidia-smi -L | grep -c '^GPU')
  fi
  [ -n "$per_host" ] && [ "$per_host" -gt 0 ] || per_host=$max_ranks
fi
[[ "$per_host" =~ ^[1-9][0-9]*$ ]] || sweep_die "--per-host: '$per_host' is not a positive integer"
host_limit=${#ALL_HOSTS[@]}
[ "$host_limit" -gt 0 ] || host_limit=1

if [ -z "$train" ]; then
  if [ -n "${CONVOY_BIN:-}" ]; then train=$CONVOY_BIN/train; else train=$(cd "$here/.." && pwd)/build/train; fi
fi
if [ "$dry_run" -eq 0 ]; then
  [ -x "$train" ] || sweep_die "$train: no train binary there (build it, or pass --train)"
  [ -r "$config" ] || sweep_die "$config: cannot read the config"
  [ -r "$data/dataset.json" ] || sweep_die "$data: no dataset.json (not a datagen output folder)"
  command -v python3 > /dev/null || sweep_die "python3 is needed to read dataset.json and the metrics"
fi

# NCCL's NVLink SHARP (multicast) path is off on every machine this is measured on.
export NCCL_NVLS_ENABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# CUDA_VISIBLE_DEVICES stays behind: each host's scheduler sets its own.
SWEEP_EXPORT="${SWEEP_EXPORT:-} $(env | sed -n 's/^\(NCCL_[A-Za-z0-9_]*\|CUDA_DEVICE_ORDER\|CUDA_DEVICE_MAX_CONNECTIONS\|OMP_NUM_THREADS\)=.*/\1/p' | sort | tr '\n' ' ')"
export SWEEP_EXPORT

[ -n "$scratch" ] || scratch=$csv.d
mkdir -p "$scratch/logs"
metrics=$scratch/metrics.jsonl
hash=$(sweep_args_hash "$config" "$data" "$epochs" "$warmup" "${tr_args[@]}")

header="mode,ranks,device,batch_global,args_hash,repeat,retry,status,exit_code,hosts,ranks_per_host,batch_per_rank,wall_s,epochs,timed_epochs,time_s,images,img_per_s,t_io,t_h2d,t_fwd,t_bwd,t_update,t_comm,test_top1,train_loss,scheduler,started_utc,log"
key_columns=6
declare -A DONE_OK=() DONE_N=()
sweep_load_progress "$csv" "$header" "$key_columns" "$dry_run"

# Figures from train's metrics file: per-epoch records of rank 0; timed epochs are those after the
# warm-up. Throughput counts the dataset's samples once per timed epoch over the training seconds
# (evaluation excluded).
read_metrics() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, warmup, data = sys.argv[1], int(sys.argv[2]), sys.argv[3]
recs = [json.loads(l) for l in open(path) if l.strip()]
ep = sorted((r for r in recs if r.get("kind") == "epoch"), key=lambda r: r["epoch"])
if not ep:
    sys.exit("no epoch records in " + path)
timed = [r for r in ep if r["epoch"] > warmup] or ep
n = json.load(open(data + "/dataset.json"))["num_samples"] * len(timed)
s = sum(r["train_seconds"] for r in timed)
ph = [sum(r.get(k, 0.0) for r in timed) for k in ("t_io", "t_h2d", "t_fwd", "t_bwd", "t_update", "t_comm_exposed")]
last = ep[-1]
print(",".join([str(len(ep)), str(len(timed)), f"{s:.6g}", str(n), f"{n / s:.6g}" if s > 0 else ""]
               + [f"{v:.6g}" for v in ph]
               + [f"{last.get('test_top1', '')}", f"{last.get('train_loss', '')}"]))
PY
}

total=$(( repeats * ${#MODES[@]} * ${#RANKS[@]} ))
index=0 ran=0 skipped=0 failed_points=0
for ((rep = 1; rep <= repeats; rep++)); do
  for mode in "${MODES[@]}"; do
    for np in "${RANKS[@]}"; do
      index=$((index + 1))
      if [ "$mode" = strong ]; then gb=$batch; else gb=$((batch * np)); fi
      pb=$(( gb / np ))
      key="$mode,$np,${device:-default},$gb,$hash,$rep"
      what="$mode ranks $np batch $gb repeat $rep"
      nh=$(( (np + per_host - 1) / per_host ))
      if [ "$nh" -gt "$host_limit" ]; then
        sweep_log "[$index/$total] $what: needs $nh host(s) at $per_host rank(s) each, there are $host_limit; not run"
        continue
      fi
      if [ "$mode" = strong ] && [ $((gb % np)) -ne 0 ]; then
        sweep_log "[$index/$total] $what: the global batch does not split evenly over $np ranks; not run"
        continue
      fi
      have=${DONE_N[$key]:-0}
      if [ "${DONE_OK[$key]:-0}" -eq 1 ]; then skipped=$((skipped + 1)); continue; fi
      first=$have last=$((retries + 1))
      if [ "$have" -ge "$last" ]; then
        if [ "$retry_failed" -eq 0 ]; then
          sweep_log "[$index/$total] $what: all $have attempts failed in an earlier sweep (--retry-failed reruns it)"
          skipped=$((skipped + 1)); continue
        fi
        last=$((have + retries + 1))
      fi
      ppn=$(( (np + nh - 1) / nh ))
      hosts_arg=()
      [ "${#ALL_HOSTS[@]}" -eq 0 ] || hosts_arg=("${ALL_HOSTS[@]}")
      sweep_mpirun_line MPI_LINE "$np" "$nh" "$scratch/hostfile.$nh.$ppn" "${hosts_arg[@]}"
      cmd=("${MPI_LINE[@]}" "$train" --config "$config" --data "$data" --epochs "$epochs" --batch "$gb"
           --metrics "$metrics")
      [ -z "$device" ] || cmd+=(--device "$device")
      cmd+=("${tr_args[@]}")
      if [ "$dry_run" -eq 1 ]; then
        [ "${#ALL_HOSTS[@]}" -eq 0 ] || echo "# hostfile $scratch/hostfile.$nh.$ppn: $(paste -sd' ' "$scratch/hostfile.$nh.$ppn")"
        echo "# env NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE NCCL_DEBUG=$NCCL_DEBUG"
        sweep_quote "${cmd[@]}"
        continue
      fi
      ok=0
      for ((retry = first; retry < last; retry++)); do
        log="$scratch/logs/${mode}_n${np}_b${gb}_${device:-default}_${hash}_r${rep}_a${retry}.log"
        started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
        rm -f "$metrics"
        sweep_attempt "$timeout_s" "$log" "${cmd[@]}"
        status=$ATTEMPT_STATUS figures=""
        if [ "$status" = ok ]; then
          if ! figures=$(read_metrics "$metrics" "$warmup" "$data" 2>> "$log"); then
            status=failed figures=""
            echo "sweep: $metrics missing or without epoch records after a clean exit" >> "$log"
          fi
        fi
        [ -n "$figures" ] || figures=",,,,,,,,,,,,"
        row="$key,$retry,$status,$ATTEMPT_RC,$nh,$ppn,$pb,$ATTEMPT_WALL,$figures,$scheduler,$started,$(sweep_csv_field "$log")"
        sweep_csv_append "$csv" "$row"
        ran=$((ran + 1))
        rate=$(cut -d, -f5 <<< "$figures")
        sweep_log "[$index/$total] $what attempt $((retry + 1)): $status (exit $ATTEMPT_RC) in ${ATTEMPT_WALL} s${rate:+, $rate img/s}"
        if [ "$status" = ok ]; then ok=1; break; fi
      done
      [ "$ok" -eq 1 ] || failed_points=$((failed_points + 1))
    done
  done
done
[ "$dry_run" -eq 1 ] && exit 0
sweep_log "$ran attempt(s) run, $skipped point(s) already in $csv, $failed_points point(s) without a good run"
