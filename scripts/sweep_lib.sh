# Shell functions shared by the sweep scripts and the Slurm/LSF job scripts: scheduler host lists,
# the mpirun line, one timed attempt under `timeout`, and the CSV that is replaced whole per row.
# Sourced, never run; callers set SWEEP_NAME (the prefix of every message) and use `set -euo pipefail`.
# shellcheck shell=bash

sweep_die() { echo "${SWEEP_NAME:-sweep}: error: $*" >&2; exit 2; }
sweep_log() { echo "${SWEEP_NAME:-sweep}: $*" >&2; }

# The commands as a shell would read them back, so a dry run can be pasted into a terminal.
sweep_quote() {
  local out="" a
  for a in "$@"; do out+="${out:+ }$(printf '%q' "$a")"; done
  printf '%s\n' "$out"
}

# sweep_int_list <option name> <comma list> <result array name>: positive integers only.
sweep_int_list() {
  local opt=$1 text=$2 item items
  local -n into=$3
  into=()
  IFS=',' read -r -a items <<< "$text"
  [ "${#items[@]}" -gt 0 ] || sweep_die "$opt: empty list"
  for item in "${items[@]}"; do
    [[ "$item" =~ ^[1-9][0-9]*$ ]] || sweep_die "$opt: '$item' is not a positive integer (list: $text)"
    into+=("$item")
  done
}

# Hosts of the scheduler allocation, one per line, in allocation order, each once. Nothing when the
# script runs outside an allocation (then every rank runs on this machine).
sweep_scheduler_hosts() {
  if [ -n "${SLURM_JOB_NODELIST:-}" ]; then
    command -v scontrol > /dev/null || sweep_die "SLURM_JOB_NODELIST is set but scontrol is not on PATH"
    scontrol show hostnames "$SLURM_JOB_NODELIST"
  elif [ -n "${LSB_DJOB_HOSTFILE:-}" ]; then
    [ -r "$LSB_DJOB_HOSTFILE" ] || sweep_die "LSB_DJOB_HOSTFILE=$LSB_DJOB_HOSTFILE cannot be read"
    awk 'NF && !seen[$1]++ { print $1 }' "$LSB_DJOB_HOSTFILE"
  elif [ -n "${LSB_HOSTS:-}" ]; then
    tr ' ' '\n' <<< "$LSB_HOSTS" | awk 'NF && !seen[$1]++ { print $1 }'
  fi
}

# Which scheduler the hosts came from, for the log and the CSV.
sweep_scheduler_name() {
  if [ -n "${SLURM_JOB_NODELIST:-}" ]; then echo slurm
  elif [ -n "${LSB_DJOB_HOSTFILE:-}${LSB_HOSTS:-}" ]; then echo lsf
  else echo local; fi
}

# sweep_mpirun_line <result array> <ranks> <hosts to use> <hostfile path> <all hosts...>
# Local (no hosts): mpirun -np N. In an allocation: a hostfile of the first <hosts to use> hosts with
# ceil(N / hosts) slots each, filled in order. Open MPI binds a rank to one core by default, which
# would put all OpenMP threads of a rank on that core, hence --bind-to none unless SWEEP_MPI_ARGS says
# otherwise. Every variable named in SWEEP_EXPORT travels to remote ranks with -x.
sweep_mpirun_line() {
  local -n line=$1
  local ranks=$2 nhosts=$3 hostfile=$4
  shift 4
  local all=("$@") v extra
  # PMIx's shared-memory data store (gds ds21, Open MPI 4.1's default) guards the job's data with a
  # lock each rank takes to read it; a rank killed while it holds that lock (its PMIx_Get calls in
  # MPI_Init) leaves its node's PMIx server (mpirun or an orted) waiting for ever, after mpirun has
  # ended every rank, so the launch, and a Slurm job with it, lasts until its time limit (openpmix
  # issue 1233). The hash store keeps the data in the server and answers ranks over their socket: no
  # lock a rank can take with it. mpirun and the orteds it starts through srun inherit this.
  export PMIX_MCA_gds=${PMIX_MCA_gds:-hash}
  line=("${SWEEP_MPIRUN:-mpirun}" -np "$ranks")
  if [ "${#all[@]}" -gt 0 ]; then
    [ "$nhosts" -le "${#all[@]}" ] || sweep_die "$nhosts hosts asked for, the allocation has ${#all[@]}"
    local ppn=$(( (ranks + nhosts - 1) / nhosts )) i
    : > "$hostfile"
    for ((i = 0; i < nhosts; i++)); do echo "${all[$i]} slots=$ppn" >> "$hostfile"; done
    line+=(--hostfile "$hostfile" --map-by slot)
  fi
  if [ -n "${SWEEP_MPI_ARGS+x}" ]; then
    read -r -a extra <<< "$SWEEP_MPI_ARGS"
    line+=("${extra[@]}")
  else
    line+=(--bind-to none)
  fi
  for v in $(tr ' ' '\n' <<< "${SWEEP_EXPORT:-}" | awk 'NF && !seen[$0]++'); do line+=(-x "$v"); done
}

# sweep_attempt <timeout s> <log file> <command...>: runs one attempt; sets ATTEMPT_RC, ATTEMPT_WALL
# (seconds, harness clock, includes the launch) and ATTEMPT_STATUS (ok | timeout | failed).
# mpirun must get exactly one TERM: a second one makes it exit at once without taking its ranks
# down, and the ranks live in process groups of their own. So `timeout --foreground` signals mpirun
# alone (KILL after SWEEP_KILL_AFTER seconds), the attempt runs in a session of its own, and whatever
# is left in that session afterwards (a hung rank mpirun lost) is killed. Remote ranks go with their
# orted when mpirun's connection drops.
sweep_attempt() {
  local limit=$1 log=$2
  shift 2
  local t0 t1 rc=0 sid
  t0=$(date +%s.%N)
  # The CSV lock stays with the sweep: an attempt that outlives it must not keep the next one out.
  if [ -n "${SWEEP_LOCK_FD:-}" ]; then
    setsid timeout --foreground --kill-after="${SWEEP_KILL_AFTER:-10}" "$limit" "$@" > "$log" 2>&1 < /dev/null {SWEEP_LOCK_FD}>&- &
  else
    setsid timeout --foreground --kill-after="${SWEEP_KILL_AFTER:-10}" "$limit" "$@" > "$log" 2>&1 < /dev/null &
  fi
  sid=$!
  trap 'pkill -TERM -s "$sid" 2> /dev/null; exit 130' INT TERM
  wait "$sid" || rc=$?
  trap - INT TERM
  pkill -KILL -s "$sid" 2> /dev/null || true
  t1=$(date +%s.%N)
  ATTEMPT_RC=$rc
  ATTEMPT_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  if [ "$rc" -eq 0 ]; then ATTEMPT_STATUS=ok
  elif [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && awk -v w="$ATTEMPT_WALL" -v l="$limit" 'BEGIN { exit !(w >= l) }'; }; then
    ATTEMPT_STATUS=timeout
  else ATTEMPT_STATUS=failed; fi
}

# A CSV field: quoted only when it holds a comma, a quote or a newline (only the free-text columns
# at the end of a row can).
sweep_csv_field() {
  local f=$1
  if [[ "$f" == *[,\"$'\n']* ]]; then f=${f//\"/\"\"}; printf '"%s"' "$f"; else printf '%s' "$f"; fi
}

# sweep_csv_open <csv> <header>: creates the CSV with its header, or checks that an existing one has
# the same header (a different one means another tool or version wrote it: resuming would mix rows).
# Takes an exclusive lock for the life of the script so two sweeps never write one CSV.
sweep_csv_open() {
  local csv=$1 header=$2
  mkdir -p "$(dirname "$csv")"
  exec {SWEEP_LOCK_FD}> "$csv.lock"
  flock -n "$SWEEP_LOCK_FD" || sweep_die "$csv: another sweep is writing it (lock $csv.lock is held)"
  if [ -e "$csv" ]; then
    local have
    have=$(head -n 1 "$csv")
    [ "$have" = "$header" ] || sweep_die "$csv: its header differs from this sweep's; pick another --csv
  have: $have
  want: $header"
  else
    printf '%s\n' "$header" > "$csv.tmp"
    sync "$csv.tmp"
    mv -f "$csv.tmp" "$csv"
  fi
}

# sweep_csv_append <csv> <row>: the old rows plus the new one go to a temporary file that is synced
# and renamed over the CSV, so a kill at any moment leaves either the old file or the new one, never
# half a row. Copying is cheap at sweep sizes (hundreds of rows).
sweep_csv_append() {
  local csv=$1 row=$2
  cp "$csv" "$csv.tmp"
  printf '%s\n' "$row" >> "$csv.tmp"
  sync "$csv.tmp"
  mv -f "$csv.tmp" "$csv"
}

# sweep_csv_progress <csv> <key columns> : prints "key<TAB>ok<TAB>attempts" per key already in the CSV
# (ok: 1 when some attempt succeeded; attempts: rows recorded for it). Key columns come first in every
# row and never need quoting, so splitting on commas is safe for them.
sweep_csv_progress() {
  awk -F, -v k="$2" 'NR > 1 {
      key = $1; for (i = 2; i <= k; i++) key = key "," $i
      n[key]++; if ($(k + 2) == "ok") ok[key] = 1
    } END { for (key in n) printf "%s\t%d\t%d\n", key, (key in ok), n[key] }' "$1"
}

# A short fingerprint of argument lists, so rows made with other fixed arguments are not taken for
# this sweep's rows.
sweep_args_hash() { printf '%s\0' "$@" | cksum | cut -d' ' -f1; }

# ---- Job scripts (scripts/slurm/, scripts/lsf/) --------------------------------------------------
# The scheduler-specific files hold the resource requests and the knob list; the steps are here, so
# Slurm and LSF jobs run the same commands. CONVOY_DRY_RUN=1 prints the commands instead.

# job_run <command...>: runs it, or in a dry run prints it as a shell line after "+ ".
job_run() {
  if [ "${CONVOY_DRY_RUN:-0}" = 1 ]; then echo "+ $(sweep_quote "$@")"; else "$@"; fi
}

# Ranks the allocation was granted: Slurm tasks, LSF slots, else $1 (outside any scheduler).
job_scheduler_ranks() {
  if [ -n "${SLURM_NTASKS:-}" ]; then echo "$SLURM_NTASKS"
  elif [ -n "${LSB_DJOB_NUMPROC:-}" ]; then echo "$LSB_DJOB_NUMPROC"
  else echo "$1"; fi
}

# job_launch_line <result array> <ranks> <threads per rank or 0>: mpirun over the allocation's hosts
# (hostfile), or srun when CONVOY_LAUNCHER=srun inside Slurm. srun, unlike mpirun, leaves a step's
# other tasks running when one dies, and ranks waiting on the dead one (in MPI_Init, a collective)
# would hold the allocation until its time limit: --kill-on-bad-exit ends the step with it.
job_launch_line() {
  local -n launch=$1
  local ranks=$2 threads=$3 hosts nh
  mapfile -t hosts < <(sweep_scheduler_hosts)
  nh=${#hosts[@]}
  [ "$nh" -gt 0 ] || nh=1
  [ "$ranks" -ge "$nh" ] || nh=$ranks
  case ${CONVOY_LAUNCHER:-mpirun} in
    mpirun)
      local hostfile="${TMPDIR:-/tmp}/convoy-hosts.$$"
      trap "rm -f '$hostfile'" EXIT
      sweep_mpirun_line launch "$ranks" "$nh" "$hostfile" "${hosts[@]}"
      if [ "${#hosts[@]}" -gt 0 ]; then echo "# hostfile $hostfile: $(paste -sd' ' "$hostfile")"; fi ;;
    srun)
      [ -n "${SLURM_JOB_ID:-}" ] || sweep_die "CONVOY_LAUNCHER=srun needs a Slurm job"
      launch=(srun --ntasks="$ranks" --nodes="$nh" --mpi="${CONVOY_SRUN_MPI:-pmix}" --kill-on-bad-exit=1)
      [ "$threads" -le 0 ] || launch+=(--cpus-per-task="$threads") ;;
    *) sweep_die "CONVOY_LAUNCHER=${CONVOY_LAUNCHER}: mpirun or srun" ;;
  esac
}

# make-data: one datagen run over the whole allocation, or a sweep-datagen.sh grid inside it.
job_datagen() {
  local src=$1 bin=${CONVOY_BIN:-$1/build} extra=() args sweep=()
  : "${CONVOY_INPUT:?CONVOY_INPUT: the tar archive or folder of images to read}"
  read -r -a extra <<< "${CONVOY_DATAGEN_ARGS:-}"
  args=(--input "$CONVOY_INPUT" --size "${CONVOY_SIZE:-256}" --channels "${CONVOY_CHANNELS:-3}"
        --per-file "${CONVOY_PER_FILE:-1024}" --seed "${CONVOY_SEED:-1}")
  [ -z "${CONVOY_CLASSES:-}" ] || args+=(--classes "$CONVOY_CLASSES")
  args+=("${extra[@]}")
  if [ -n "${CONVOY_SWEEP_ARGS:-}" ]; then
    read -r -a sweep <<< "$CONVOY_SWEEP_ARGS"
    [ "${CONVOY_DRY_RUN:-0}" != 1 ] || sweep+=(--dry-run)
    sweep_log "$(sweep_scheduler_name) job: sweep-datagen.sh ${CONVOY_SWEEP_ARGS}"
    "$src/scripts/sweep-datagen.sh" --datagen "$bin/datagen" "${sweep[@]}" -- "${args[@]}"
    return
  fi
  : "${CONVOY_OUTPUT:?CONVOY_OUTPUT: the dataset folder to write (on a file system every node sees)}"
  local ranks threads
  ranks=${CONVOY_RANKS:-$(job_scheduler_ranks 1)}
  threads=${CONVOY_THREADS:-${SLURM_CPUS_PER_TASK:-0}}
  job_launch_line LAUNCH "$ranks" "$threads"
  sweep_log "$(sweep_scheduler_name) job: datagen, $ranks rank(s) x ${threads/#0/auto} thread(s)"
  job_run "${LAUNCH[@]}" "$bin/datagen" "${args[@]}" --output "$CONVOY_OUTPUT" --threads "$threads"
}

# GPUs this host shows, or nothing when nvidia-smi is absent or finds none.
job_local_gpus() {
  if command -v nvidia-smi > /dev/null; then nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true; fi
}

# Training on a GPU queue: one rank per GPU (the job asks for one task or slot per GPU), NCCL and
# MPI environment set; or a sweep-train.sh strong/weak scaling sweep inside the allocation.
job_train() {
  local src=$1 bin=${CONVOY_BIN:-$1/build} extra=() sweep=()
  : "${CONVOY_CONFIG:?CONVOY_CONFIG: the net and recipe (TOML)}"
  : "${CONVOY_DATA:?CONVOY_DATA: the training dataset folder}"
  read -r -a extra <<< "${CONVOY_TRAIN_ARGS:-}"
  export NCCL_NVLS_ENABLE=0
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  export CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}
  [ -z "${SLURM_CPUS_PER_TASK:-}" ] || export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
  SWEEP_EXPORT="${SWEEP_EXPORT:-} NCCL_NVLS_ENABLE NCCL_DEBUG CUDA_DEVICE_ORDER${OMP_NUM_THREADS:+ OMP_NUM_THREADS}"
  SWEEP_EXPORT+="${CUDA_DEVICE_MAX_CONNECTIONS:+ CUDA_DEVICE_MAX_CONNECTIONS}"
  local device=${CONVOY_DEVICE:-cuda} gpus
  gpus=$(job_local_gpus)
  local ranks=${CONVOY_RANKS:-$(job_scheduler_ranks "${gpus:-1}")}
  [ "$ranks" -gt 0 ] || ranks=1
  if [ -n "${CONVOY_SWEEP_ARGS:-}" ]; then
    read -r -a sweep <<< "$CONVOY_SWEEP_ARGS"
    [ "${CONVOY_DRY_RUN:-0}" != 1 ] || sweep+=(--dry-run)
    local host_arg=()
    [ -z "${CONVOY_RANKS_PER_HOST:-}" ] || host_arg=(--per-host "$CONVOY_RANKS_PER_HOST")
    [ -z "${CONVOY_BATCH:-}" ] || sweep=(--batch "$CONVOY_BATCH" "${sweep[@]}")
    [ -z "${CONVOY_EPOCHS:-}" ] || sweep=(--epochs "$CONVOY_EPOCHS" "${sweep[@]}")
    [ -z "${CONVOY_VAL:-}" ] || extra+=(--val "$CONVOY_VAL")
    sweep_log "$(sweep_scheduler_name) job: sweep-train.sh ${CONVOY_SWEEP_ARGS}"
    SWEEP_EXPORT=$SWEEP_EXPORT "$src/scripts/sweep-train.sh" --train "$bin/train" --config "$CONVOY_CONFIG" \
      --data "$CONVOY_DATA" --device "$device" "${host_arg[@]}" "${sweep[@]}" -- "${extra[@]}"
    return
  fi
  local args=(--config "$CONVOY_CONFIG" --data "$CONVOY_DATA" --device "$device")
  [ -z "${CONVOY_VAL:-}" ] || args+=(--val "$CONVOY_VAL")
  [ -z "${CONVOY_EPOCHS:-}" ] || args+=(--epochs "$CONVOY_EPOCHS")
  [ -z "${CONVOY_BATCH:-}" ] || args+=(--batch "$CONVOY_BATCH")
  [ -z "${CONVOY_METRICS:-}" ] || args+=(--metrics "$CONVOY_METRICS")
  if [ -n "${CONVOY_CHECKPOINT:-}" ]; then
    args+=(--checkpoint "$CONVOY_CHECKPOINT")
    # A requeued or resubmitted job carries on from where the last one stopped.
    [ ! -e "$CONVOY_CHECKPOINT" ] || args+=(--resume "$CONVOY_CHECKPOINT")
  fi
  export SWEEP_EXPORT
  job_launch_line LAUNCH "$ranks" 0
  sweep_log "$(sweep_scheduler_name) job: train, $ranks rank(s), device $device, NCCL_NVLS_ENABLE=0"
  job_run "${LAUNCH[@]}" "$bin/train" "${args[@]}" "${extra[@]}"
}


# Opens the CSV (not in a dry run) and loads which points are done into the caller's associative
# arrays DONE_OK and DONE_N (key -> rows that succeeded / rows in all).
sweep_load_progress() {  # CSV HEADER KEY_COLUMNS DRY_RUN
  if [ "$4" -eq 0 ]; then sweep_csv_open "$1" "$2"; fi
  if [ -e "$1" ]; then
    local key ok n
    while IFS=$'\t' read -r key ok n; do DONE_OK[$key]=$ok; DONE_N[$key]=$n; done \
      < <(sweep_csv_progress "$1" "$3")
  fi
}
