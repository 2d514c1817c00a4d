#!/usr/bin/env bash
# SIGTERM, SIGHUP (terminal closed), SIGPIPE (the reader of train's output gone) and SIGUSR1 (a
# scheduler's warning before its time limit) during training write a checkpoint and exit 128 + the
# signal; resuming from it ends with a checkpoint byte-identical to an uninterrupted run's (same
# weights, optimiser state, position). A SIGHUP ignored (nohup) stays ignored.
set -euo pipefail
train="$CONVOY_BIN/train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
config="${CONVOY_SRC:?}/tests/data/small_conv_bn.toml"
"$train" synth --out "$tmp/data" --files 40 --per-file 50 --size 16 --classes 4
args=(--config "$config" --data "$tmp/data" --epochs 6 --batch 20 --seed 5 --threads 1 --log-every 1)

"$train" "${args[@]}" --checkpoint "$tmp/full.ckpt" 2>/dev/null

# Waits until the run that writes <metrics> is well into training (but before it ends).
well_into() {
  for _ in $(seq 1 600); do
    [[ -s "$1" ]] && [[ $(wc -l < "$1") -ge 15 ]] && return
    sleep 0.05
  done
}

# stopped_by <signal> <name>: signals a run once it is well into training; it must exit 128 +
# the signal with a checkpoint whose resume ends byte-identical to the uninterrupted run.
stopped_by() {
  local sig=$1 name=$2 pid rc=0
  "$train" "${args[@]}" --checkpoint "$tmp/$name.ckpt" --metrics "$tmp/$name.jsonl" 2>"$tmp/$name.err" &
  pid=$!
  well_into "$tmp/$name.jsonl"
  kill -"$sig" "$pid"
  wait "$pid" || rc=$?
  check_stop "$sig" "$name" "$rc"
}

# check_stop <signal> <name> <status>
check_stop() {
  local sig=$1 name=$2 rc=$3 num
  num=$(kill -l "$sig")
  if [[ $rc -eq 0 ]]; then
    echo "SKIP-like: the run ended before the $sig arrived"; cat "$tmp/$name.err"; exit 1
  fi
  [[ $rc -eq $((128 + num)) ]] || { echo "expected exit $((128 + num)) after $sig, got $rc"; cat "$tmp/$name.err"; exit 1; }
  [[ -f "$tmp/$name.ckpt" ]] || { echo "no checkpoint written on $sig"; exit 1; }
  "$train" --resume "$tmp/$name.ckpt" --data "$tmp/data" --threads 1 --log-every 0 --checkpoint "$tmp/$name.ckpt" 2>/dev/null
  cmp "$tmp/full.ckpt" "$tmp/$name.ckpt" || { echo "run resumed after $sig differs from the uninterrupted one"; exit 1; }
}

stopped_by TERM term
grep -q "stopped by signal 15" "$tmp/term.err" || { echo "no stop message"; cat "$tmp/term.err"; exit 1; }
stopped_by HUP hup
stopped_by USR1 usr1

# The reader of train's output goes away (`train ... | head`): the next line it writes gets SIGPIPE.
rc=0
{ "$train" "${args[@]}" --checkpoint "$tmp/pipe.ckpt" 2>&1 || echo "status $?" > "$tmp/pipe.status"; } | head -n 30 > /dev/null
[[ -s "$tmp/pipe.status" ]] && rc=$(cut -d' ' -f2 "$tmp/pipe.status")
: > "$tmp/pipe.err"
check_stop PIPE pipe "$rc"

# nohup: a SIGHUP ignored by the caller stays ignored, and the run ends as an uninterrupted one.
(trap '' HUP; exec "$train" "${args[@]}" --checkpoint "$tmp/nohup.ckpt" --metrics "$tmp/nohup.jsonl" 2>/dev/null) &
pid=$!
well_into "$tmp/nohup.jsonl"
kill -HUP "$pid"
wait "$pid" || { echo "a run whose SIGHUP was ignored did not end normally"; exit 1; }
cmp "$tmp/full.ckpt" "$tmp/nohup.ckpt" || { echo "a run whose SIGHUP was ignored differs from the uninterrupted one"; exit 1; }

# eval of the final checkpoint prints the accuracy line the demo looks for.
"$train" eval --checkpoint "$tmp/full.ckpt" --data "$tmp/data" --threads 1 2>/dev/null | grep -Eq '^test accuracy: 0\.[0-9]{4}$'
echo "ok"
