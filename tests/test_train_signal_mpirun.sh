#!/usr/bin/env bash
# SIGINT or SIGTERM to mpirun alone (a terminal's Ctrl-C, `timeout`, a scheduler), once or twice, at
# 5 moments of a 2-rank run: every run that had begun training leaves a checkpoint whose resume ends
# byte-identical to an uninterrupted run. A sixth run's mpirun gives its ranks no time at all between
# SIGTERM and SIGKILL: what is left must still resume byte-identical (the weaker guarantee).
set -euo pipefail
train=${CONVOY_BIN:?}/train
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_signal_mpirun.XXXXXX")
kill_spread=1  # each trial starts afresh, so spread the five over the whole run
# shellcheck source=tests/kill_moments.sh
source "${CONVOY_SRC:?}/tests/kill_moments.sh"
# shellcheck source=tests/rank_death.sh
source "${CONVOY_SRC:?}/tests/rank_death.sh"
seen=""  # every rank started, as <pid>/<start time>: none may outlive the test
cleanup() {
  local r
  for r in $seen; do if rank_alive "$r"; then kill -9 "${r%/*}" 2> /dev/null || true; fi; done
  rm -rf "$work"
}
trap cleanup EXIT

config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"
"$train" synth --out "$work/data" --files 40 --per-file 50 --size 16 --classes 4 2> /dev/null
# 3 epochs of 100 steps (10 samples per rank and step); a progress line (and metrics record) per step.
args=(--config "$config" --data "$work/data" --epochs 3 --batch 20 --seed 5 --threads 1 --log-every 1)
mpi_extra=()  # more mpirun arguments for one trial

start=$(now)
"${mpi[@]}" "$train" "${args[@]}" --checkpoint "$work/full.ckpt" > "$work/full.log" 2>&1 || { cat "$work/full.log"; exit 1; }
span=$(elapsed "$start")
start=$(now)
"${mpi[@]}" "$train" --resume "$work/full.ckpt" --data "$work/data" --threads 1 --checkpoint "$work/again.ckpt" > /dev/null 2>&1
fixed=$(elapsed "$start")
echo "uninterrupted 2-rank run: $span s; a resume with nothing to do: $fixed s"

# run_and_signal <log> <seconds> <how> <command...>: runs the command under mpirun -np 2 and signals
# mpirun alone that many seconds after the start. how: INT or TERM (once: a terminal's Ctrl-C,
# `timeout --foreground`, a scheduler), INT+INT (Ctrl-C twice: mpirun exits at once and leaves
# the ranks), timeout-INT or timeout-TERM (`timeout -s SIG seconds mpirun ...`, which signals mpirun
# and then its process group, so mpirun may get the signal twice). Waits for mpirun and then for
# every rank it started, within the bound. Sets rc (mpirun's status, 124 for timeout's).
run_and_signal() {
  local log=$1 at=$2 how=$3 job mpirun_pid="" t
  shift 3
  case $how in
    timeout-*) timeout -s "${how#timeout-}" "$at" "${mpi[@]}" "${mpi_extra[@]}" "$@" > "$log" 2>&1 & ;;
    *) "${mpi[@]}" "${mpi_extra[@]}" "$@" > "$log" 2>&1 & ;;
  esac
  job=$!
  t=$(now)
  while alive "$job"; do
    if [[ $how == timeout-* ]]; then mpirun_pid=$(pgrep -P "$job" | head -n 1 || true); else mpirun_pid=$job; fi
    [ -z "$mpirun_pid" ] || seen+=" $(children_of "$mpirun_pid")"
    if [[ $how != timeout-* ]] && ! before "$t" "$at"; then
      kill -"${how%%+*}" "$job" 2> /dev/null || true
      if [[ $how == *+* ]]; then sleep 0.2; kill -"${how#*+}" "$job" 2> /dev/null || true; fi
      break
    fi
    sleep 0.02
  done
  t=$(now)
  while alive "$job" && before "$t" "$bound"; do
    [ -z "$mpirun_pid" ] || seen+=" $(children_of "$mpirun_pid")"
    # shellcheck disable=SC2086
    if ! before "$t" 5 && ! any_alive $seen && grep -q "$pmix_mark" "$log"; then
      echo "  mpirun hangs in its PMIx finalize, every rank gone: a rank died in its PMIx handshake" \
           "(an Open MPI/PMIx bug, docs/ROBUSTNESS.md); mpirun killed"
      pkill -9 -P "$job" 2> /dev/null || true
      kill -9 "$job" 2> /dev/null || true
      break
    fi
    sleep 0.05
  done
  if alive "$job"; then echo "mpirun still running $bound s after the signal"; tail -n 20 "$log"; exit 1; fi
  rc=0
  wait "$job" 2> /dev/null || rc=$?
  # The ranks may outlive an mpirun that exited at once; they must still end by themselves.
  # shellcheck disable=SC2086
  while any_alive $seen && before "$t" "$bound"; do sleep 0.05; done
  # shellcheck disable=SC2086
  if any_alive $seen; then echo "a rank still runs $bound s after the signal to mpirun"; tail -n 20 "$log"; exit 1; fi
}

ckpt_step() {  # ckpt_step <checkpoint>: "<epoch> <global step>" from its JSON header
  /usr/bin/python3 - "$1" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
info = json.loads(raw[48:48 + struct.unpack_from("<Q", raw, 8)[0]])
print(info["epoch"], info["global_step"])
PY
}

# resume_matches <checkpoint> <log>: resumes from the checkpoint on 2 ranks; it must end
# byte-identical to the uninterrupted run.
resume_matches() {
  "${mpi[@]}" "$train" --resume "$1" --data "$work/data" --threads 1 --checkpoint "$1" > "$2" 2>&1 ||
    { echo "the resumed run failed"; tail -n 20 "$2"; exit 1; }
  cmp "$work/full.ckpt" "$1" || { echo "the interrupted and resumed run differs from the uninterrupted one"; exit 1; }
}

ways=(INT TERM INT+INT timeout-INT timeout-TERM)
for i in "${!fractions[@]}"; do
  how=${ways[$i]}
  ckpt=$work/t$i.ckpt
  at=$(moment "${fractions[$i]}" 0.85)  # within the work, seldom after its end
  echo "trial $((i + 1)): $how to mpirun about $at s after the start"
  # Rank 0 writes the metrics itself, so they show the steps done even when mpirun, which relays
  # the ranks' output, has gone first.
  run_and_signal "$work/run$i.log" "$at" "$how" "$train" "${args[@]}" --metrics "$work/m$i.jsonl" --checkpoint "$ckpt"
  if [ "$rc" -eq 0 ]; then
    echo "  the run had finished before the signal"
    cmp "$work/full.ckpt" "$ckpt" || { echo "mpirun exited 0 but its checkpoint is not the final one"; exit 1; }
    continue
  fi
  if [ ! -e "$ckpt" ]; then
    # A rank that had not yet set up its handlers (in start-up) ends at the signal, as it should:
    # there is nothing to save yet. Once a step is done, a checkpoint must follow.
    if grep -q '"kind":"step"' "$work/m$i.jsonl" 2> /dev/null; then
      echo "mpirun exited $rc after the training had begun, and no checkpoint was written"
      tail -n 20 "$work/run$i.log"
      exit 1
    fi
    echo "  the signal came in start-up: no step to save, no checkpoint"
    continue
  fi
  read -r epoch step < <(ckpt_step "$ckpt")
  echo "  mpirun exited $rc; checkpoint at epoch $epoch, step $step"
  resume_matches "$ckpt" "$work/resume$i.log"
done

# odls_base_sigkill_timeout 0: mpirun sends SIGTERM and SIGKILL at once, so no rank can reach a step
# boundary. The checkpoint left (the last one of --checkpoint-every, or the signal's if rank 0 was
# already writing it) must be whole and resume byte-identical.
echo "trial 6: INT to an mpirun that allows no time between SIGTERM and SIGKILL"
ckpt=$work/t5.ckpt
at=$(moment 0.6 1)
mpi_extra=(--mca odls_base_sigkill_timeout 0)
run_and_signal "$work/run5.log" "$at" INT "$train" "${args[@]}" --checkpoint-every 50 --metrics "$work/m5.jsonl" \
  --checkpoint "$ckpt"
if [ -e "$ckpt" ]; then
  read -r epoch step < <(ckpt_step "$ckpt")
  echo "  mpirun exited $rc; checkpoint at epoch $epoch, step $step"
  resume_matches "$ckpt" "$work/resume5.log"
else
  echo "  mpirun exited $rc; no checkpoint yet"
fi
# Rank 0 said so after its second step, naming the setting that gives the ranks time.
if grep -q '"global_step":2,' "$work/m5.jsonl" 2> /dev/null; then
  grep -q "warning: a step takes .* mpirun sends its ranks SIGKILL 0 s after their SIGTERM.*odls_base_sigkill_timeout" \
    "$work/run5.log" || { echo "no warning that mpirun's grace is too short"; tail -n 20 "$work/run5.log"; exit 1; }
fi
echo ok
