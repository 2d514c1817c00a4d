#!/usr/bin/env bash
# A Slurm cluster of three nodes, each a network namespace this test creates (veth pairs on a bridge,
# 10.213.0.0/24): datagen.sbatch and train.sbatch run across the nodes and match one-node runs, a
# rank killed on one node ends its job, and a sweep spans 1 to 3 nodes.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
source "$src/tests/slurm_lib.sh"
slurm_clean_env
slurm_need_tools munged munge slurmctld slurmd sbatch srun scontrol squeue scancel sinfo ip unshare nsenter gdb
[ "$(id -u)" -eq 0 ] || fail "creating network namespaces (ip netns add) needs root; run as root, as CI does"

nodes=3
# Every name this test leaves on the machine carries the prefix, the test's process id and that
# process's start time (clock ticks after boot, which tell a reused id apart): the namespaces
# (prefix-PID-START-ctl, prefix-PID-START-n1, ...) and the work folder (prefix.PID-START.XXXXXX).
prefix=convoy-nodes
# proc_start <pid>: field 22 of /proc/PID/stat, counted after the command name's closing parenthesis.
proc_start() { sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f20; }
run_id=$$-$(proc_start $$)
tag=$prefix-$run_id
base=${TMPDIR:-/tmp}
# Unix socket paths (munge's, slurmstepd's in the spool folders) must stay under 108 bytes.
[ "${#base}" -le 40 ] || base=/tmp
user=$(id -un)
work="" ctl_pid="" munged_pid="" gdb_pid=""
slurmd_pids=()

# ns_procs_kill <namespace>: kills whatever still runs in it (job steps, ranks, daemons), by id, and
# waits up to 5 s for them to go.
ns_procs_kill() {
  local pids i
  pids=$(ip netns pids "$1" 2> /dev/null || true)
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -KILL $pids 2> /dev/null || true
  for i in $(seq 50); do
    [ -z "$(ip netns pids "$1" 2> /dev/null)" ] && return 0
    sleep 0.1
  done
}
# ns_remove <namespace>: the namespace and its interfaces (a veth end goes with either side).
ns_remove() {
  ns_procs_kill "$1"
  ip netns delete "$1" 2> /dev/null || true
}

# A run that was killed (SIGKILL, a lost CI runner) cannot clean up after itself; its namespaces and
# work folder stay behind. Those of a run whose process is gone are removed now; those of a running
# copy of this test are left alone.
clean_leftovers() {
  local ns id pid
  for ns in $(ip netns list | awk '{ print $1 }' | grep -E "^$prefix-[0-9]+-[0-9]+-" || true); do
    id=${ns#"$prefix"-}
    id=${id%-*}
    pid=${id%-*}
    [ "$pid-$(proc_start "$pid")" != "$id" ] || continue
    echo "removing namespace $ns, left by an earlier run (process $pid) that did not clean up" >&2
    ns_remove "$ns"
    rm -rf "$base/$prefix.$id".* "/tmp/$prefix.$id".*
  done
}

cleanup() {
  local rc=$? i
  trap - EXIT
  # A reader that went away (| head) must not stop the clean-up half-way.
  trap '' PIPE
  # gdb runs in this shell's namespaces, not a node's; KILL detaches it from a stopped rank.
  [ -z "$gdb_pid" ] || kill -KILL "$gdb_pid" 2> /dev/null || true
  if [ -n "$ctl_pid" ] && kill -0 "$ctl_pid" 2> /dev/null; then slurm_cancel_all "$user"; fi
  for i in "${slurmd_pids[@]}"; do slurm_stop "$i"; done
  slurm_stop "$ctl_pid"
  slurm_stop "$munged_pid"
  if [ "$rc" -ne 0 ] && [ -n "$work" ]; then
    slurm_show_logs "$work/log/munged.log" "$work/log/slurmctld.log" "$work"/log/slurmd.*.log || true
  fi
  ns_remove "$tag-ctl"
  for i in $(seq "$nodes"); do ns_remove "$tag-n$i"; done
  [ -z "$work" ] || rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
clean_leftovers

# ---- The network ---------------------------------------------------------------------------------
# One namespace for the controller (munged, slurmctld, and the client commands: the login node) with
# the bridge, one per node with a veth pair whose other end is on that bridge. Nothing is added to
# the machine's own network namespace, and the namespaces route nothing but 10.213.0.0/24: no packet
# can reach an address this test did not assign.
work=$(mktemp -d "$base/$prefix.$run_id.XXXXXX")
chmod 755 "$work"
ctl=$tag-ctl
ctl_host=cv$$ctl
node_names=()
ip netns add "$ctl"
ip -n "$ctl" link set lo up
ip -n "$ctl" link add br0 type bridge
ip -n "$ctl" addr add 10.213.0.1/24 dev br0
ip -n "$ctl" link set br0 up
for i in $(seq "$nodes"); do
  ns=$tag-n$i
  node_names+=("cv$$n$i")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ctl" link add "veth$i" type veth peer name eth0 netns "$ns"
  ip -n "$ctl" link set "veth$i" master br0 up
  ip -n "$ns" addr add "10.213.0.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
done
# Host names: each namespace gets its own (a UTS namespace), and names resolve from a hosts file of
# this cluster alone, never through DNS: both files are bind-mounted in a mount namespace of each
# command's own (unshare's propagation is private), so nothing of the machine's /etc changes.
# nsenter, not `ip netns exec`: that mounts a new /sys, without the cgroup file system slurmd reads.
mkdir -p "$work/etc"
{
  echo "127.0.0.1 localhost"
  echo "10.213.0.1 $ctl_host"
  for i in $(seq "$nodes"); do echo "10.213.0.$((10 + i)) ${node_names[$((i - 1))]}"; done
} > "$work/etc/hosts"
sed 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf > "$work/etc/nsswitch.conf"
# in_ns <result array> <namespace> <host name>: the command prefix that runs a command there.
in_ns() {
  local -n run=$1
  run=(nsenter --net="/run/netns/$2" unshare --uts --mount sh -c
    'mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/nsswitch.conf" /etc/nsswitch.conf &&
     hostname "$1" && shift && exec "$@"' "$work/etc" "$3")
}
in_ns CTL_RUN "$ctl" "$ctl_host"
SLURM_CLIENT=("${CTL_RUN[@]}")

# ---- The cluster ---------------------------------------------------------------------------------
mkdir -p "$work/log" "$work/state" "$work/tmp"
for n in "${node_names[@]}"; do mkdir -p "$work/spool/$n" "$work/tmp/$n"; done
slurm_node_hw
export SLURM_CONF=$work/etc/slurm.conf
# Each copy of this test has host names of its own, after which Open MPI names its shared-memory
# files and session folders; job ids of their own too (at most 10 jobs a run), as srun's PMIx
# namespace holds only the job and step ids.
{
  echo "ClusterName=convoynodes"
  echo "SlurmctldHost=$ctl_host(10.213.0.1)"
  echo "FirstJobId=$(($$ * 10))"
  # Every node has its own spool folder, pid file and log (%n: the node's name).
  echo "SlurmdSpoolDir=$work/spool/%n"
  echo "SlurmdPidFile=$work/spool/%n/slurmd.pid"
  echo "SlurmdLogFile=$work/log/slurmd.%n.log"
  # Node-local temporary space, as /tmp on real nodes: srun's PMIx plugin makes its folder of a job
  # step there, named by the step alone, and the nodes of one step would otherwise share it.
  echo "TmpFS=$work/tmp/%n"
  slurm_conf_common "$work" "$user"
  for i in $(seq "$nodes"); do
    n=${node_names[$((i - 1))]}
    echo "NodeName=$n NodeAddr=10.213.0.$((10 + i)) NodeHostname=$n $NODE_HW State=UNKNOWN"
  done
  echo "PartitionName=convoy Nodes=$(IFS=,; echo "${node_names[*]}") Default=YES MaxTime=INFINITE State=UP"
} > "$SLURM_CONF"
export TMPDIR=$work/tmp

started=$SECONDS
slurm_start_munged "$work/munge" "$work/log" "${CTL_RUN[@]}"
munged_pid=$MUNGED_PID
"${CTL_RUN[@]}" slurmctld -D -i > "$work/log/slurmctld.stderr" 2>&1 &
ctl_pid=$!
for i in $(seq "$nodes"); do
  n=${node_names[$((i - 1))]}
  in_ns NODE_RUN "$tag-n$i" "$n"
  "${NODE_RUN[@]}" slurmd -D > "$work/log/slurmd.$n.stderr" 2>&1 &
  slurmd_pids+=($!)
done
# Up means every node registered and is idle; a daemon that exits, or 30 s without it, fails here.
idle=0
while [ "$idle" -lt "$nodes" ]; do
  kill -0 "$ctl_pid" 2> /dev/null || fail "slurmctld exited during start-up"
  for i in "${!slurmd_pids[@]}"; do
    kill -0 "${slurmd_pids[$i]}" 2> /dev/null || fail "slurmd of ${node_names[$i]} exited during start-up"
  done
  [ $((SECONDS - started)) -lt 30 ] || fail "$idle of $nodes nodes idle 30 s after start:
$(timeout 5 "${SLURM_CLIENT[@]}" sinfo -N 2>&1)"
  sleep 0.3
  idle=$(timeout 5 "${SLURM_CLIENT[@]}" sinfo -h -N -o %T 2> /dev/null | grep -c '^idle$' || true)
done
echo "cluster up in $((SECONDS - started)) s: nodes ${node_names[*]} (10.213.0.11-$((10 + nodes))), each $NODE_HW"

# tx_bytes <node index>: bytes sent from that node's veth end so far.
tx_bytes() { ip netns exec "$tag-n$1" cat /sys/class/net/eth0/statistics/tx_bytes; }
# submit <output prefix> <sbatch arguments...>: prints the job id (knobs come from the environment).
submit() {
  local out=$1 id
  shift
  id=$(cd "$src" && timeout 30 "${SLURM_CLIENT[@]}" sbatch --parsable --output="$work/$out-%j.out" "$@" \
    2> "$work/sbatch.err") || fail "sbatch $*: $(cat "$work/sbatch.err")"
  echo "${id%%;*}"
}
# ran_on <job id> <node index>: that node's slurmd started a step of the job (srun or mpirun's orted).
ran_on() { grep -q "launch task StepId=$1\." "$work/log/slurmd.${node_names[$(($2 - 1))]}.log"; }

# ---- datagen.sbatch on 2 nodes x 2 ranks (mpirun) against a one-node run -------------------------
slurm_fmnist_tar "$bin" "$work"
"$bin/datagen" --input "$work/t.tar" --output "$work/direct" --size 28 --channels 1 --per-file 50 --seed 1 \
  --threads 2 2> "$work/direct.log" || fail "direct datagen run failed: $(cat "$work/direct.log")"
t0=$SECONDS
id=$(CONVOY_BIN="$bin" CONVOY_INPUT="$work/t.tar" CONVOY_OUTPUT="$work/dg" CONVOY_SIZE=28 CONVOY_CHANNELS=1 \
  CONVOY_PER_FILE=50 submit dg --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 scripts/slurm/datagen.sbatch)
slurm_wait_job "$id" 120 "$work/dg-$id.out"
grep -q "slurm job: datagen, 4 rank(s) x 1 thread(s)" "$work/dg-$id.out" || fail "datagen job output: $(cat "$work/dg-$id.out")"
grep -q "# hostfile .*: ${node_names[0]} slots=2 ${node_names[1]} slots=2\$" "$work/dg-$id.out" ||
  fail "2-node hostfile: $(cat "$work/dg-$id.out")"
ran_on "$id" 2 || fail "datagen job $id: no step on the second node"
slurm_same_dataset "$work/direct" "$work/dg" 4
echo "datagen.sbatch, 2 nodes x 2 ranks (mpirun): identical to a one-node run, $((SECONDS - t0)) s"

# ---- A rank that dies ends its job, under either launcher ---------------------------------------
# in_first_pmix_get <pid> <mark file>: starts gdb (gdb_pid), which attaches to the stopped rank,
# runs it to its first PMIx_Get (inside MPI_Init) and, where PMIx keeps the job's data in its
# shared-memory store (gds ds21 or ds12), on until the rank holds that store's read lock, a lock in
# memory it shares with its node's PMIx server; there gdb creates the mark file and keeps the rank
# stopped (a sleep inside gdb: nothing forked that could outlive it). Without a shared store the
# rank stops on its way out of PMIx_Get instead.
in_first_pmix_get() {
  printf '%s\n' 'set breakpoint pending on' 'handle SIGSTOP nostop noprint nopass' 'break PMIx_Get' \
    continue delete 'tbreak pmix_ds21_lock_rd_get' 'tbreak pmix_ds12_lock_rd_get' finish finish \
    "python open('$2', 'w').close()" 'python import time; time.sleep(120)' > "$work/gdb.cmd"
  gdb -p "$1" -batch -x "$work/gdb.cmd" > "$work/gdb.log" 2>&1 &
  gdb_pid=$!
}

# kill_a_rank <launcher> <moment>: datagen.sbatch on 2 nodes x 2 ranks; a rank of this job on the
# second node is SIGKILLed at the moment named: "start", as soon as it has exec'd datagen, or
# "pmix-get", in its first PMIx_Get inside MPI_Init, holding the data store's read lock. Either
# leaves the others waiting in MPI_Init for it. The job must end (FAILED) within 30 s, not at its
# time limit.
kill_a_rank() {
  local launcher=$1 moment=$2 t0=$SECONDS id victim="" p killed state=RUNNING out mark
  id=$(CONVOY_BIN="$bin" CONVOY_INPUT="$work/t.tar" CONVOY_OUTPUT="$work/dg-$launcher-$moment" CONVOY_SIZE=28 \
    CONVOY_CHANNELS=1 CONVOY_PER_FILE=50 CONVOY_LAUNCHER=$launcher submit "death-$launcher-$moment" --nodes=2 \
    --ntasks-per-node=2 --cpus-per-task=1 --time=5 scripts/slurm/datagen.sbatch)
  out=$work/death-$launcher-$moment-$id.out
  # The victim must be a rank of this job: a rank of the previous one may still be on its way out.
  while [ -z "$victim" ]; do
    [ $((SECONDS - t0)) -lt 60 ] || fail "no datagen rank of job $id started on ${node_names[1]} within 60 s: $(cat "$out")"
    for p in $(ip netns pids "$tag-n2"); do
      [ "$(cat "/proc/$p/comm" 2> /dev/null)" = datagen ] &&
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "SLURM_JOB_ID=$id" && victim=$p && break
    done
    [ -n "$victim" ] || sleep 0.02
  done
  if [ "$moment" = pmix-get ]; then
    # Stopped at once, still in the dynamic loader, so that gdb cannot miss its first PMIx_Get.
    kill -STOP "$victim"
    mark=$work/mark-$id
    in_first_pmix_get "$victim" "$mark"
    while [ ! -e "$mark" ]; do
      [ $((SECONDS - t0)) -lt 90 ] || fail "rank $victim of job $id never reached PMIx_Get: $(cat "$work/gdb.log")"
      sleep 0.05
    done
  fi
  kill -KILL "$victim"
  killed=$SECONDS
  if [ -n "$gdb_pid" ]; then
    kill -KILL "$gdb_pid" 2> /dev/null || true
    wait "$gdb_pid" 2> /dev/null || true
    gdb_pid=""
  fi
  while [ $((SECONDS - killed)) -lt 30 ]; do
    state=$(slurm_job_state "$id")
    case $state in PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.3 ;; *) break ;; esac
  done
  [ "$state" = FAILED ] || fail "job $id ($launcher) is $state 30 s after one of its ranks was killed at $moment (FAILED expected):
$(cat "$out")
--- processes left on ${node_names[1]}:
$(for p in $(ip netns pids "$tag-n2"); do ps -o pid=,stat=,wchan:22=,args= -p "$p" | cut -c1-150; done)"
  local where=""
  if [ "$moment" = pmix-get ]; then
    where=" (no shared store: after its PMIx_Get)"
    ! grep -q 'hit Temporary breakpoint .* pmix_ds[12][12]_lock_rd_get' "$work/gdb.log" ||
      where=" (holding the shared store's read lock)"
  fi
  echo "datagen.sbatch ($launcher), a rank killed on ${node_names[1]} at $moment$where: job FAILED $((SECONDS - killed)) s later"
}
kill_a_rank srun start
kill_a_rank mpirun start
kill_a_rank mpirun pmix-get

# ---- train.sbatch (CPU, mpirun): 2 nodes x 1 rank against 1 node x 2 ranks ------------------------
# train_job <name> <sbatch arguments...>: 2 epochs of tiny_fc from the datagen job's dataset.
train_job() {
  local name=$1 id
  shift
  id=$(CONVOY_BIN="$bin" CONVOY_CONFIG="$src/tests/data/tiny_fc.toml" CONVOY_DATA="$work/dg" \
    CONVOY_VAL="$work/dg" CONVOY_DEVICE=cpu CONVOY_EPOCHS=2 CONVOY_CHECKPOINT="$work/$name.ckpt" \
    CONVOY_METRICS="$work/$name.jsonl" CONVOY_TRAIN_ARGS="--threads 1 --seed 3" submit "$name" \
    --partition=convoy --gpus-per-node=0 --cpus-per-task=1 --time=5 "$@" scripts/slurm/train.sbatch)
  slurm_wait_job "$id" 120 "$work/$name-$id.out"
  grep -q "slurm job: train, 2 rank(s), device cpu" "$work/$name-$id.out" || fail "$name job output: $(cat "$work/$name-$id.out")"
  echo "$id"
}
t0=$SECONDS
tx0=$(tx_bytes 2)
id1=$(train_job one --nodes=1 --ntasks-per-node=2)
tx1=$(( $(tx_bytes 2) - tx0 ))
grep -q "# hostfile .*: ${node_names[0]} slots=2\$" "$work/one-$id1.out" || fail "1-node hostfile: $(cat "$work/one-$id1.out")"
# Open MPI's TCP traffic, launch and ranks, kept to the cluster's link as a cluster user with several
# interfaces would (docs/HARNESS.md); the job's environment reaches every node.
tx0=$(tx_bytes 2)
id2=$(OMPI_MCA_btl_tcp_if_include=10.213.0.0/24 OMPI_MCA_oob_tcp_if_include=10.213.0.0/24 \
  train_job two --nodes=2 --ntasks-per-node=1)
tx2=$(( $(tx_bytes 2) - tx0 ))
grep -q "# hostfile .*: ${node_names[0]} slots=1 ${node_names[1]} slots=1\$" "$work/two-$id2.out" ||
  fail "2-node hostfile: $(cat "$work/two-$id2.out")"
ran_on "$id2" 2 || fail "train job $id2: no step on the second node"
cmp "$work/one.ckpt" "$work/two.ckpt" || fail "the 2-node checkpoint differs from the 1-node one"
acc=$(grep '^test accuracy:' "$work/one-$id1.out")
[ -n "$acc" ] && [ "$(grep '^test accuracy:' "$work/two-$id2.out")" = "$acc" ] ||
  fail "test accuracy: 2 nodes '$(grep '^test accuracy:' "$work/two-$id2.out")', 1 node '$acc'"
# The gradients crossed the link: the bytes train says rank 1 put on the wire (its metrics: bytes a
# step, per rank, times the steps) left through the second node's veth, which carried less than
# that while the 1-node job ran.
wire=$(/usr/bin/python3 - "$work/two.jsonl" <<'PY'
import json, sys
total, step = 0.0, 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "epoch":
        total += r["comm_bytes_per_step"] * (r["global_step"] - step)
        step = r["global_step"]
print(int(total))
PY
)
[ "$wire" -gt 0 ] && [ "$tx2" -ge "$wire" ] && [ "$tx1" -lt "$wire" ] ||
  fail "bytes sent by ${node_names[1]}: $tx2 during the 2-node job, $tx1 during the 1-node one; train counts $wire on the wire"
echo "train.sbatch (CPU, mpirun): 2 nodes x 1 rank identical to 1 node x 2 ranks, $acc; node 2 sent" \
  "$tx2 bytes ($wire of gradients; $tx1 during the 1-node job), $((SECONDS - t0)) s"

# ---- A nodes grid: sweep-datagen.sh inside a 3-node allocation --------------------------------------
t0=$SECONDS
id=$(CONVOY_BIN="$bin" CONVOY_INPUT="$work/t.tar" CONVOY_SIZE=28 CONVOY_CHANNELS=1 CONVOY_PER_FILE=50 \
  CONVOY_SWEEP_ARGS="--ranks $nodes --hosts $(seq -s, "$nodes") --threads 1 --repeats 1 --retries 0 --timeout 60 --csv $work/sweep.csv" \
  submit sweep --nodes="$nodes" --ntasks-per-node=1 --cpus-per-task=1 --time=5 scripts/slurm/datagen.sbatch)
slurm_wait_job "$id" 120 "$work/sweep-$id.out"
rows=$(awk -F, 'NR > 1 { print $1 ":" $2 ":" $8 ":" $10 ":" $14 ":" $23 }' "$work/sweep.csv" | tr '\n' ' ')
[ "$rows" = "1:3:ok:3:300:slurm 2:3:ok:2:300:slurm 3:3:ok:1:300:slurm " ] ||
  fail "sweep rows (hosts:ranks:status:ranks_per_host:images:scheduler) are '$rows':
$(cat "$work/sweep.csv")
--- the job's output:
$(cat "$work/sweep-$id.out")"
[ "$(paste -sd' ' "$work/sweep.csv.d/hostfile.3.1")" = "${node_names[*]/%/ slots=1}" ] ||
  fail "the 3-host point's hostfile: $(cat "$work/sweep.csv.d/hostfile.3.1")"
ran_on "$id" 3 || fail "sweep job $id: no step on the third node"
echo "sweep-datagen.sh over 1, 2, 3 nodes in one allocation: 3 points ok, $((SECONDS - t0)) s"
echo "slurm nodes: ok"
