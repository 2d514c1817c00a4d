# Shell functions of the tests that start a Slurm cluster from Debian's packages
# (test_slurm_cluster.sh: one node; test_slurm_nodes.sh: nodes in network namespaces). Sourced.
# shellcheck shell=bash

# Settings of an outer Slurm job (a CI runner inside Slurm) or the caller's job-script knobs must not
# reach the test cluster's jobs: sbatch and salloc pass the whole environment on. The sanitizer
# runs' report folder must.
slurm_clean_env() {
  local v
  for v in $(compgen -e); do
    case $v in
      CONVOY_SANITIZER_*) ;;
      SLURM_* | SBATCH_* | SALLOC_* | SRUN_* | SQUEUE_* | SINFO_* | SCONTROL_* | CONVOY_*) unset "$v" ;;
    esac
  done
  export PATH=$PATH:/usr/sbin:/sbin
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
}

fail() { echo "FAIL: $*" >&2; exit 1; }

# slurm_need_tools <tool...>: each must be on PATH; scripts/setup.sh installs them.
slurm_need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" > /dev/null ||
      fail "$tool is not installed (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)"
  done
}

# SLURM_CLIENT: the command prefix that reaches the controller (empty: this shell's network; the
# namespace test runs the clients inside the controller's namespace).
SLURM_CLIENT=()

# slurm_stop <pid>: stops a daemon this test started: TERM, then KILL after 10 s.
slurm_stop() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2> /dev/null || return 0
  for i in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
}

# slurm_show_logs <log file...>: the last lines of each daemon log that has any (its stderr file,
# NAME.stderr beside NAME.log, where the log itself is empty), for a failure.
slurm_show_logs() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || f=${f%.log}.stderr
    [ -s "$f" ] || continue
    echo "--- last lines of $(basename "$f"):" >&2
    tail -n 25 "$f" >&2
  done
}

# slurm_cancel_all <user>: cancels the user's jobs of this cluster (SLURM_CONF) and waits up to 15 s
# for them to leave the queue, so no job step outlives slurmd.
slurm_cancel_all() {
  timeout 10 "${SLURM_CLIENT[@]}" scancel --user="$1" 2> /dev/null || true
  for _ in $(seq 30); do
    [ -z "$(timeout 5 "${SLURM_CLIENT[@]}" squeue -h -o %i 2> /dev/null)" ] && break
    sleep 0.5
  done
}

# slurm_start_munged <folder> <log folder> [command prefix...]: a key of its own and a socket of its
# own (<folder>/munge.sock), so nothing of the machine's munge is used or touched. Sets MUNGED_PID.
slurm_start_munged() {
  local dir=$1 log=$2
  shift 2
  mkdir -p "$dir"
  # munged serves every user, so it insists that all can reach its socket; the key stays 0600.
  chmod 755 "$dir" "$(dirname "$dir")"
  head -c 1024 /dev/urandom > "$dir/munge.key"
  chmod 600 "$dir/munge.key"
  "$@" munged --foreground --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" --log-file="$log/munged.log" \
    > "$log/munged.stderr" 2>&1 &
  MUNGED_PID=$!
  for _ in $(seq 100); do munge -S "$dir/munge.sock" -n > /dev/null 2>&1 && break; sleep 0.1; done
  munge -S "$dir/munge.sock" -n > /dev/null || fail "munged did not answer within 10 s"
}

# slurm_node_hw: this machine as slurmd finds it (CPUs, sockets, cores, threads, memory), so nothing
# is made up: the words after NodeName=... of `slurmd -C`. Sets NODE_HW, NODE_CPUS, NODE_MEM.
slurm_node_hw() {
  local hw
  hw=$(slurmd -C 2>&1 | head -n 1) || fail "slurmd -C failed: $hw"
  [[ "$hw" == NodeName=* ]] || fail "slurmd -C printed no node line: $hw"
  NODE_HW=${hw#NodeName=* }
  NODE_CPUS=$(grep -o 'CPUs=[0-9]*' <<< "$NODE_HW" | cut -d= -f2)
  NODE_MEM=$(grep -o 'RealMemory=[0-9]*' <<< "$NODE_HW" | cut -d= -f2)
  [ "${NODE_CPUS:-0}" -ge 2 ] || fail "this machine has ${NODE_CPUS:-no} CPU(s); the jobs ask for 2 tasks of 1 CPU"
}

# slurm_conf_common <work folder> <user>: prints the slurm.conf lines both tests share (authentication
# through the test's munged, state in the work folder, no cgroups or systemd, no accounting) and
# writes the empty plugstack.conf they name (not the machine's).
slurm_conf_common() {
  local work=$1 user=$2
  cat <<EOF
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.sock
StateSaveLocation=$work/state
SlurmctldPidFile=$work/slurmctld.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$work/etc/plugstack.conf
# No cgroups and no systemd: processes tracked by their parent ids, tasks not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((NODE_MEM / NODE_CPUS))
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=5
MailProg=/bin/true
EOF
  : > "$work/etc/plugstack.conf"
}

# slurm_job_state <id>: PENDING, RUNNING, COMPLETED, FAILED, ...; nothing when the controller does
# not answer.
slurm_job_state() {
  timeout 10 "${SLURM_CLIENT[@]}" scontrol show job -o "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' |
    cut -d= -f2 || true
}

# slurm_wait_job <id> <limit s> <output file>: waits for the job to end; anything but COMPLETED
# (exit 0), or still running at the limit (then cancelled), fails with the job's output.
slurm_wait_job() {
  local id=$1 limit=$2 out=$3 t0=$SECONDS state=""
  while :; do
    state=$(slurm_job_state "$id")
    case $state in
      COMPLETED) return 0 ;;
      PENDING | CONFIGURING | RUNNING | COMPLETING | "") ;;
      *) fail "job $id ended $state:
$(timeout 10 "${SLURM_CLIENT[@]}" scontrol show job -o "$id" 2> /dev/null)
--- its output:
$(cat "$out" 2> /dev/null)" ;;
    esac
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      timeout 10 "${SLURM_CLIENT[@]}" scancel "$id" 2> /dev/null || true
      fail "job $id still $state after $limit s, cancelled:
$(timeout 10 "${SLURM_CLIENT[@]}" scontrol show job -o "$id" 2> /dev/null)
--- its output:
$(cat "$out" 2> /dev/null)"
    fi
    sleep 0.3
  done
}

# slurm_fmnist_tar <bin folder> <work folder>: <work>/t.tar, the first 300 test images of
# Fashion-MNIST as a tar archive of PNGs.
slurm_fmnist_tar() {
  local fm=/usr/share/datasets/fashion-mnist
  /usr/bin/python3 - "$fm" "$2" <<'PY'
import gzip, sys
fm, w, n = sys.argv[1], sys.argv[2], 300
img = gzip.open(f"{fm}/t10k-images-idx3-ubyte.gz").read()
lab = gzip.open(f"{fm}/t10k-labels-idx1-ubyte.gz").read()
open(f"{w}/img.idx", "wb").write(img[:4] + n.to_bytes(4, "big") + img[8:16] + img[16:16 + n * 784])
open(f"{w}/lab.idx", "wb").write(lab[:4] + n.to_bytes(4, "big") + lab[8:8 + n])
PY
  "$1/datagen" idx2tar --images "$2/img.idx" --labels "$2/lab.idx" --out "$2/t.tar" 2> /dev/null
}

# slurm_same_dataset <reference folder> <job folder> <ranks>: the job's batch files byte-identical to
# the reference's, dataset.json equal beyond timings, and timings record <ranks> ranks of one MPI
# job (not single-rank runs that a launcher started side by side).
slurm_same_dataset() {
  local ref=$1 got=$2 ranks=$3 n f
  n=$(ls "$ref"/batch_*.cvb | wc -l)
  [ "$(ls "$got"/batch_*.cvb | wc -l)" -eq "$n" ] || fail "$got: another number of batch files than $ref"
  for f in "$ref"/batch_*.cvb; do
    cmp "$f" "$got/$(basename "$f")" || fail "$got/$(basename "$f") differs from the reference run's"
  done
  /usr/bin/python3 - "$ref/dataset.json" "$got/dataset.json" "$ranks" <<'PY' || fail "$got/dataset.json"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a.pop("timings"), b.pop("timings")
assert a == b, "dataset.json differs beyond timings"
assert tb["ranks"] == int(sys.argv[3]) and tb["threads"] == 1, tb
PY
}
