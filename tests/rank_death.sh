# What the rank-death tests share, sourced after tests/kill_moments.sh: run_and_kill_rank starts a
# 2-rank mpirun job, SIGKILLs one rank at a moment and waits for mpirun within a bound.
mpi=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
# mpirun must end the job this soon after a rank dies. It takes 1 to 2.5 s (the survivor gets
# SIGTERM, and SIGKILL 1 s later if still there), so anything near the bound is a hang.
bound=30
# Open MPI 4.1 with PMIx 4.2 (Debian 12): a rank killed inside the few milliseconds of its PMIx
# connect handshake (in MPI_Init) leaves mpirun, after it has ended every rank, hung in its own
# PMIx_server_finalize (docs/ROBUSTNESS.md). Its mark in mpirun's output:
pmix_mark='PMIX ERROR: UNREACHABLE in file .*ptl_base_connection_hdlr\.c'

alive() {  # alive <pid>: running, not a zombie
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2> /dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# The ranks are mpirun's children (one node, no orted); each one's rank is in its environment once
# it has exec'd the tool, which is also when it can first hold a collective.
rank_pid() {  # rank_pid <mpirun pid> <rank>
  local c
  for c in $(pgrep -P "$1" 2> /dev/null); do
    if tr '\0' '\n' < "/proc/$c/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$c"
      return
    fi
  done
}

# A rank as <pid>/<start time>, so that a pid reused after the rank's end is not taken for it.
children_of() {  # children_of <pid>
  local c
  for c in $(pgrep -P "$1" 2> /dev/null); do
    echo "$c/$(awk '{ print $22 }' "/proc/$c/stat" 2> /dev/null)"
  done
}
rank_alive() {  # rank_alive <pid>/<start time>
  alive "${1%/*}" && [ "$(awk '{ print $22 }' "/proc/${1%/*}/stat" 2> /dev/null)" = "${1#*/}" ]
}
any_alive() {  # any_alive <pid>/<start time>...
  local r
  for r in "$@"; do rank_alive "$r" && return 0; done
  return 1
}

now() { date +%s.%N; }
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }
before() { awk -v s="$1" -v e="$(now)" -v b="$2" 'BEGIN { exit !(e - s < b) }'; }  # before <start> <seconds>

# run_and_kill_rank <log> <rank> <seconds> <command...>: runs the command under mpirun -np 2 and
# SIGKILLs the given rank that many seconds after the start (or as soon as it has exec'd, when
# start-up is slower). Sets rc (mpirun's status), killed (1 when the kill was sent to a live rank,
# 0 when that rank had already ended) and waited (seconds from the kill to mpirun's end). Fails the
# test when mpirun outlives the bound or a rank outlives mpirun. A kill sent to a rank already on
# its way out of exit() does nothing: then mpirun ends with status 0, and the job has finished.
run_and_kill_rank() {
  local log=$1 rank=$2 at=$3 job start victim="" ranks t kill_at
  shift 3
  start=$(now)
  "${mpi[@]}" "$@" > "$log" 2>&1 &
  job=$!
  sleep "$at"
  while alive "$job"; do
    victim=$(rank_pid "$job" "$rank")
    [ -n "$victim" ] && break
    sleep 0.01
  done
  ranks=$(children_of "$job")
  killed=0
  if [ -n "$victim" ] && alive "$victim" && kill -9 "$victim" 2> /dev/null; then killed=1; fi
  t=$(now)
  kill_at=$(elapsed "$start")
  while alive "$job" && before "$t" "$bound"; do
    # Every rank mpirun has started, to check after its end that none is left.
    ranks+=" $(children_of "$job")"
    # shellcheck disable=SC2086
    if ! before "$t" 5 && ! any_alive $ranks && grep -q "$pmix_mark" "$log"; then
      echo "  mpirun hangs in its PMIx finalize, every rank gone: the rank died in its PMIx handshake" \
           "(an Open MPI/PMIx bug, docs/ROBUSTNESS.md); mpirun killed"
      kill -9 "$job" 2> /dev/null || true
      while alive "$job"; do sleep 0.05; done
      break
    fi
    sleep 0.05
  done
  if alive "$job"; then
    echo "mpirun still running $bound s after rank $rank (pid $victim) was killed: the job hangs"
    for t in $ranks; do
      if rank_alive "$t"; then kill -9 "${t%/*}" 2> /dev/null || true; fi
    done
    kill -9 "$job" 2> /dev/null || true
    wait "$job" 2> /dev/null || true
    tail -n 20 "$log"
    exit 1
  fi
  waited=$(elapsed "$t")
  rc=0
  wait "$job" 2> /dev/null || rc=$?
  # mpirun must not leave a rank behind, blocked in a collective with nobody to answer. One it has
  # just killed may take a moment to go.
  for t in $(echo "$ranks" | tr ' ' '\n' | sort -u); do
    for _ in 1 2 3 4 5 6 7 8 9 10; do rank_alive "$t" || break; sleep 0.2; done
    if rank_alive "$t"; then
      kill -9 "${t%/*}" 2> /dev/null || true
      echo "a rank (pid ${t%/*}) outlived mpirun after rank $rank was killed"
      tail -n 20 "$log"
      exit 1
    fi
  done
  if [ "$killed" = 1 ]; then
    echo "  killed rank $rank at $kill_at s; mpirun ended $waited s later with status $rc"
  else
    echo "  rank $rank had ended by $kill_at s; mpirun ended with status $rc"
  fi
}
