#!/usr/bin/env bash
# A one-node Slurm cluster from Debian's packages (munged, slurmctld, slurmd) started in a temporary
# folder: scripts/slurm/datagen.sbatch and train.sbatch submitted for real and compared with direct
# runs, and a sweep-datagen.sh grid inside an salloc allocation. Daemons that cannot start fail it.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
source "$src/tests/slurm_lib.sh"
slurm_clean_env
slurm_need_tools munged munge slurmctld slurmd sbatch salloc srun scontrol squeue scancel sinfo

# Unix socket paths (munge's, slurmstepd's in the spool folder) must stay under 108 bytes.
base=${TMPDIR:-/tmp}
[ "${#base}" -le 40 ] || base=/tmp
work=$(mktemp -d "$base/convoy_slurm.XXXXXX")
node=$(hostname -s)
user=$(id -un)
export SLURM_CONF=$work/etc/slurm.conf
munged_pid="" ctld_pid="" slurmd_pid=""

cleanup() {
  local rc=$?
  trap - EXIT
  # A reader that went away (| head) must not stop the clean-up half-way.
  trap '' PIPE
  # Jobs first, so no job step outlives slurmd.
  if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2> /dev/null; then slurm_cancel_all "$user"; fi
  slurm_stop "$slurmd_pid"
  slurm_stop "$ctld_pid"
  slurm_stop "$munged_pid"
  [ "$rc" -eq 0 ] || slurm_show_logs "$work/log/munged.log" "$work/log/slurmctld.log" "$work/log/slurmd.log" || true
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- The cluster -------------------------------------------------------------------------------
mkdir -p "$work/etc" "$work/log" "$work/state" "$work/spool" "$work/tmp"
slurm_node_hw
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
cat > "$SLURM_CONF" <<EOF
ClusterName=convoytest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
FirstJobId=$((ctld_port * 1000))
$comm
SlurmdSpoolDir=$work/spool
SlurmdPidFile=$work/slurmd.pid
SlurmdLogFile=$work/log/slurmd.log
TmpFS=$work/tmp
$(slurm_conf_common "$work" "$user")
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node $NODE_HW State=UNKNOWN
PartitionName=convoy Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

slurm_start_munged "$work/munge" "$work/log"
munged_pid=$MUNGED_PID

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
echo "cluster up in $((SECONDS - started)) s: node $node, $NODE_HW"

# ---- Input and direct runs -----------------------------------------------------------------------
slurm_fmnist_tar "$bin" "$work"
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
slurm_wait_job "$id" 120 "$work/dg-$id.out"
grep -q "slurm job: datagen, 2 rank(s) x 1 thread(s)" "$work/dg-$id.out" || fail "datagen job output: $(cat "$work/dg-$id.out")"
slurm_same_dataset "$work/direct" "$work/job-dg" 2
n=$(ls "$work/direct"/batch_*.cvb | wc -l)
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
slurm_wait_job "$id" 120 "$work/tr-$id.out"
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
