#!/usr/bin/env bash
# A one-node Slurm cluster from Debian's packages (munged, slurmctld, slurmd) started in a temporary
# folder: scripts/slurm/datagen.sbatch and train.sbatch submitted for real and compared with direct
# runs, and a sweep-datagen.sh grid inside an salloc allocation. Daemons that cannot start fail it.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
export PATH=$PATH:/usr/sbin:/sbin
# Settings of an outer Slurm job (a CI runner inside Slurm) or the caller's job-script knobs must not
# reach this cluster's jobs: sbatch and salloc pass the whole environment on. The sanitizer runs'
# report folder must.
for v in $(compgen -e); do
  case $v in
    CONVOY_SANITIZER_*) ;;
    SLURM_* | SBATCH_* | SALLOC_* | SRUN_* | SQUEUE_* | SINFO_* | SCONTROL_* | CONVOY_*) unset "$v" ;;
  esac
done
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in munged munge slurmctld slurmd sbatch salloc srun scontrol squeue scancel sinfo; do
  command -v "$tool" > /dev/null || fail "$tool is not installed (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)"
done

# Unix socket paths (munge's, slurmstepd's in the spool folder) must stay under 108 bytes.
base=${TMPDIR:-/tmp}
[ "${#base}" -le 40 ] || base=/tmp
work=$(mktemp -d "$base/convoy_slurm.XXXXXX")
node=$(hostname -s)
user=$(id -un)
export SLURM_CONF=$work/etc/slurm.conf
munged_pid="" ctld_pid="" slurmd_pid=""

# Stops a daemon this test started: TERM, then KILL after 10 s.
stop() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2> /dev/null || return 0
  for i in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
}
daemon_logs() {
  local d f
  for d in munged slurmctld slurmd; do
    f=$work/log/$d.log
    [ -s "$f" ] || f=$work/log/$d.stderr
    [ -s "$f" ] || continue
    echo "--- last lines of $d's log:" >&2
    tail -n 25 "$f" >&2
  done
}
cleanup() {
  local rc=$? i
  trap - EXIT
  # A reader that went away (| head) must not stop the clean-up half-way.
  trap '' PIPE
  if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2> /dev/null; then
    # Jobs first, so no job step outlives slurmd; the user's jobs of this cluster only (SLURM_CONF).
    timeout 10 scancel --user="$user" 2> /dev/null || true
    for i in $(seq 30); do [ -z "$(timeout 5 squeue -h -o %i 2> /dev/null)" ] && break; sleep 0.5; done
  fi
  stop "$slurmd_pid"
  stop "$ctld_pid"
  stop "$munged_pid"
  [ "$rc" -eq 0 ] || daemon_logs || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- The cluster -------------------------------------------------------------------------------
mkdir -p "$work/etc" "$work/log" "$work/state" "$work/spool" "$work/tmp" "$work/munge"
# munged serves every user, so it insists that all can reach its socket; the key stays 0600.
chmod 755 "$work" "$work/munge"
# The node as slurmd finds it (CPUs, sockets, cores, threads, memory), so nothing is made up.
hw=$(slurmd -C 2>&1 | head -n 1) || fail "slurmd -C failed: $hw"
[[ "$hw" == NodeName=* ]] || fail "slurmd -C printed no node line: $hw"
hw=${hw#NodeName=* }
cpus=$(grep -o 'CPUs=[0-9]*' <<< "$hw" | cut -d= -f2)
mem=$(grep -o 'RealMemory=[0-9]*' <<< "$hw" | cut -d= -f2)
[ "${cpus:-0}" -ge 2 ] || fail "this machine has ${cpus:-no} CPU(s); the jobs ask for 2 tasks of 1 CPU"
# Another copy of this test may run beside this one. Its jobs must get other ids: srun --mpi=pmix
# names a step's PMIx namespace after the job and step ids alone, Open MPI its shared-memory files
# in /dev/shm after that namespace, and two steps named alike on one host crash or hang each other.
# Job ids start at the controller's port x 1000, which no other running copy holds (ports < 65536
# keep them under Slurm's MaxJobId, 67043328). Open MPI's session folders go to this test's folder.
export TMPDIR=$work/tmp
read -r ctld_port slurmd_port < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
# With NoInAddrAny the daemons (and srun) bind to the address the host name resolves to, not to
# 127.0.0.1 as such; where that is not 127.0.0.1 they listen on every address instead, since srun
# must be reachable at the address slurmd sees it come from (127.0.0.1).
comm=""
if [ "$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 { print $1 }')" = 127.0.0.1 ]; then
  comm="CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
fi
: > "$work/etc/plugstack.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=convoytest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
FirstJobId=$((ctld_port * 1000))
$comm
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
TmpFS=$work/tmp
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
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
DefMemPerCPU=$((mem / cpus))
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=5
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node $hw State=UNKNOWN
PartitionName=convoy Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

# A key of its own and a socket of its own: nothing of the machine's munge is used or touched.
head -c 1024 /dev/urandom > "$work/munge/munge.key"
chmod 600 "$work/munge/munge.key"
munged --foreground --key-file="$work/munge/munge.key" --socket="$work/munge/munge.sock" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" --log-file="$work/log/munged.log" \
  > "$work/log/munged.stderr" 2>&1 &
munged_pid=$!
for _ in $(seq 100); do munge -S "$work/munge/munge.sock" -n > /dev/null 2>&1 && break; sleep 0.1; done
munge -S "$work/munge/munge.sock" -n > /dev/null || fail "munged did not answer within 10 s"

started=$SECONDS
slurmctld -D -i > "$work/log/slurmctld.stderr" 2>&1 &
ctld_pid=$!
slurmd -D -N "$node" > "$work/log/slurmd.stderr" 2>&1 &
slurmd_pid=$!
# Up means the node registered and is idle; a daemon that exits, or 30 s without it, fails here.
state=""
while [ "$state" != idle ]; do
  kill -0 "$ctld_pid" 2> /dev/null || fail "slurmctld exited during start-up"
  kill -0 "$slurmd_pid" 2> /dev/null || fail "slurmd exited during start-up"
  [ $((SECONDS - started)) -lt 30 ] || fail "node $node not idle 30 s after start (state '${state}')"
  sleep 0.3
  state=$(timeout 5 sinfo -h -n "$node" -o %T 2> /dev/null || true)
done
echo "cluster up in $((SECONDS - started)) s: node $node, $hw"

# wait_job <id> <limit s> <output file>: waits for the job to end; anything but COMPLETED (exit 0),
# or still running at the limit (then cancelled), fails with the job's output.
wait_job() {
  local id=$1 limit=$2 out=$3 t0=$SECONDS info state=""
  while :; do
    info=$(timeout 10 scontrol show job -o "$id" 2> /dev/null || true)
    state=$(grep -o 'JobState=[A-Z_]*' <<< "$info" | cut -d= -f2 || true)
    case $state in
      COMPLETED) return 0 ;;
      PENDING | CONFIGURING | RUNNING | COMPLETING | "") ;;
      *) fail "job $id ended $state:
$info
--- its output:
$(cat "$out" 2> /dev/null)" ;;
    esac
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      timeout 10 scancel "$id" 2> /dev/null || true
      fail "job $id still $state after $limit s, cancelled:
$info
--- its output:
$(cat "$out" 2> /dev/null)"
    fi
    sleep 0.3
  done
}

# ---- Input and direct runs -----------------------------------------------------------------------
fm=/usr/share/datasets/fashion-mnist
/usr/bin/python3 - "$fm" "$work" <<'PY'
import gzip, sys
fm, w, n = sys.argv[1], sys.argv[2], 300
img = gzip.open(f"{fm}/t10k-images-idx3-ubyte.gz").read()
lab = gzip.open(f"{fm}/t10k-labels-idx1-ubyte.gz").read()
open(f"{w}/img.idx", "wb").write(img[:4] + n.to_bytes(4, "big") + img[8:16] + img[16:16 + n * 784])
open(f"{w}/lab.idx", "wb").write(lab[:4] + n.to_bytes(4, "big") + lab[8:8 + n])
PY
"$bin/datagen" idx2tar --images "$work/img.idx" --labels "$work/lab.idx" --out "$work/t.tar" 2> /dev/null
"$bin/datagen" --input "$work/t.tar" --output "$work/direct" --size 28 --channels 1 --per-file 100 --seed 1 \
  --threads 2 2> "$work/direct.log" || fail "direct datagen run failed: $(cat "$work/direct.log")"

# ---- datagen.sbatch: 2 tasks x 1 CPU, datagen started by srun --mpi=pmix --------------------------
# Submitted from the repository root without CONVOY_SRC: Slurm runs a spooled copy of the script,
# which finds the repository through the submit folder.
t0=$SECONDS
id=$(cd "$src" && env CONVOY_BIN="$bin" CONVOY_INPUT="$work/t.tar" CONVOY_OUTPUT="$work/job-dg" \
  CONVOY_SIZE=28 CONVOY_CHANNELS=1 CONVOY_PER_FILE=100 CONVOY_LAUNCHER=srun \
  timeout 30 sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --output="$work/dg-%j.out" scripts/slurm/datagen.sbatch 2> "$work/sbatch.err") || fail "sbatch datagen.sbatch: $(cat "$work/sbatch.err")"
id=${id%%;*}
wait_job "$id" 120 "$work/dg-$id.out"
grep -q "slurm job: datagen, 2 rank(s) x 1 thread(s)" "$work/dg-$id.out" || fail "datagen job output: $(cat "$work/dg-$id.out")"
n=$(ls "$work/direct"/batch_*.cvb | wc -l)
[ "$(ls "$work/job-dg"/batch_*.cvb | wc -l)" -eq "$n" ] || fail "the job wrote another number of batch files"
for f in "$work/direct"/batch_*.cvb; do
  cmp "$f" "$work/job-dg/$(basename "$f")" || fail "$(basename "$f") of the datagen job differs from the direct run's"
done
/usr/bin/python3 - "$work/direct/dataset.json" "$work/job-dg/dataset.json" <<'PY' || fail "dataset.json of the job"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a.pop("timings"), b.pop("timings")
assert a == b, "dataset.json differs beyond timings"
# Two ranks of one MPI job, not two single-rank runs that srun started side by side.
assert tb["ranks"] == 2 and tb["threads"] == 1, tb
PY
echo "datagen.sbatch (srun --mpi=pmix, 2 ranks): $n batch files identical to a direct run, $((SECONDS - t0)) s"

# ---- train.sbatch: CPU backend, 2 ranks under mpirun (the script's default launcher) ---------------
t0=$SECONDS
# The script asks for a GPU partition and GPUs; the command line overrides both, as on a CPU queue.
id=$(cd "$src" && env CONVOY_BIN="$bin" CONVOY_CONFIG="$src/tests/data/tiny_fc.toml" CONVOY_DATA="$work/job-dg" \
  CONVOY_VAL="$work/job-dg" CONVOY_DEVICE=cpu CONVOY_EPOCHS=2 CONVOY_CHECKPOINT="$work/job.ckpt" \
  CONVOY_TRAIN_ARGS="--threads 1 --seed 3" \
  timeout 30 sbatch --parsable --partition=convoy --gpus-per-node=0 --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --time=5 --output="$work/tr-%j.out" scripts/slurm/train.sbatch 2> "$work/sbatch.err") || fail "sbatch train.sbatch: $(cat "$work/sbatch.err")"
id=${id%%;*}
wait_job "$id" 120 "$work/tr-$id.out"
grep -q "slurm job: train, 2 rank(s), device cpu" "$work/tr-$id.out" || fail "train job output: $(cat "$work/tr-$id.out")"
grep -q "# hostfile .*: $node slots=2" "$work/tr-$id.out" || fail "the train job's hostfile should be '$node slots=2'"
OMP_NUM_THREADS=1 timeout 60 mpirun -np 2 --bind-to none "$bin/train" --config "$src/tests/data/tiny_fc.toml" --data "$work/job-dg" \
  --device cpu --val "$work/job-dg" --epochs 2 --checkpoint "$work/direct.ckpt" --threads 1 --seed 3 \
  > "$work/direct-train.out" 2>&1 || fail "direct train run failed: $(cat "$work/direct-train.out")"
cmp "$work/job.ckpt" "$work/direct.ckpt" || fail "the train job's checkpoint differs from the direct run's"
acc=$(grep '^test accuracy:' "$work/direct-train.out")
[ -n "$acc" ] && [ "$(grep '^test accuracy:' "$work/tr-$id.out")" = "$acc" ] ||
  fail "test accuracy: job '$(grep '^test accuracy:' "$work/tr-$id.out")', direct '$acc'"
echo "train.sbatch (mpirun, 2 ranks, CPU): checkpoint identical to a direct run, $acc, $((SECONDS - t0)) s"

# ---- A sweep inside an allocation: hosts from SLURM_JOB_NODELIST through scontrol ------------------
t0=$SECONDS
rc=0
timeout -k 10 120 salloc --nodes=1 --ntasks=2 --cpus-per-task=1 --time=5 \
  "$src/scripts/sweep-datagen.sh" --datagen "$bin/datagen" --ranks 1,2 --threads 1 --repeats 1 --timeout 60 \
  --retries 0 --csv "$work/sweep.csv" -- --input "$work/t.tar" --size 28 --channels 1 --per-file 100 \
  > "$work/salloc.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "salloc with the sweep exited $rc$([ "$rc" -eq 124 ] && echo ' (timed out after 120 s)'):
$(cat "$work/salloc.out")"
grep -q "Granted job allocation" "$work/salloc.out" || fail "salloc granted nothing: $(cat "$work/salloc.out")"
rows=$(awk -F, 'NR > 1 { print $2 ":" $8 ":" $14 ":" $23 }' "$work/sweep.csv" | tr '\n' ' ')
[ "$rows" = "1:ok:300:slurm 2:ok:300:slurm " ] ||
  fail "sweep rows (ranks:status:images:scheduler) are '$rows':
$(cat "$work/sweep.csv")"
[ "$(cat "$work/sweep.csv.d/hostfile.1.2")" = "$node slots=2" ] || fail "the sweep's hostfile: $(cat "$work/sweep.csv.d/hostfile.1.2")"
echo "sweep-datagen.sh in salloc: 2 points ok, hosts from the allocation, $((SECONDS - t0)) s"
echo "slurm cluster: ok"
