# What the I/O-fault tests share, sourced at their start (after setting $work): runs under the
# LD_PRELOAD shim of tests/io_fault_shim.c, and the checks every injected fault must pass.
shim=${CONVOY_BIN:?}/libconvoy_io_fault.so
[ -e "$shim" ] || { echo "$shim is missing (it is built with the tests)"; exit 1; }
fault_log=$work/fault.log

# with_fault <path part> <op> <nth> <eio|short> <command...>: the command with the Nth matching call
# faulted (0: none, only counted); what the shim saw goes to $fault_log.
with_fault() {
  local path=$1 op=$2 nth=$3 mode=$4
  shift 4
  rm -f "$fault_log"
  # An ASan build wants its runtime first among the libraries; the shim must come first to see the calls.
  CONVOY_FAULT_PATH=$path CONVOY_FAULT_OP=$op CONVOY_FAULT_NTH=$nth CONVOY_FAULT_MODE=$mode CONVOY_FAULT_LOG=$fault_log \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$shim "$@"
}

# count_calls <path part> <op> <command...>: runs the command (which must succeed) and sets $counted
# to its matching calls.
count_calls() {
  with_fault "$1" "$2" 0 eio "${@:3}" 2> "$work/count.err" || { echo "counting run failed: ${*:3}"; cat "$work/count.err"; exit 1; }
  counted=$(awk '$1 == "calls" { n += $2 } END { print n + 0 }' "$fault_log" 2> /dev/null || echo 0)
  [ "$counted" -gt 0 ] || { echo "no $2 calls on '$1' in: ${*:3}"; exit 1; }
}

# The file the fault hit, as the program named it when it opened it.
faulted_path() { sed -n 's/^fault [a-z]* [a-z]* call [0-9]* //p' "$fault_log"; }

crashed() { grep -qE "terminate called|Aborted|Segmentation fault|core dumped|what\(\):|AddressSanitizer|runtime error" "$1"; }

# failed_cleanly <case> <status> <stderr>: the EIO fired; the run failed (status 1..127, no crash)
# with exactly one error line, which names the file the fault hit and the error.
failed_cleanly() {
  local what=$1 rc=$2 err=$3 path lines
  path=$(faulted_path)
  [ -n "$path" ] || { echo "$what: the fault was never injected"; exit 1; }
  [ "$rc" -ne 0 ] || { echo "$what: the failed call on $path went unnoticed (exit 0)"; cat "$err"; exit 1; }
  [ "$rc" -lt 128 ] || { echo "$what: killed by a signal ($rc)"; cat "$err"; exit 1; }
  if crashed "$err"; then echo "$what: crash output:"; cat "$err"; exit 1; fi
  lines=$(grep -cE '^[a-z]+(\[[0-9]+\])?: (error|warning): ' "$err" || true)
  [ "$lines" -eq 1 ] || { echo "$what: $lines error or warning lines, not one"; cat "$err"; exit 1; }
  grep -E ': error: ' "$err" | grep -qF -- "$path" || { echo "$what: the error does not name $path"; cat "$err"; exit 1; }
  # Said as what it is: not as damaged data or a member not found.
  grep -E ': error: ' "$err" | grep -qF 'Input/output error' || { echo "$what: the error does not say EIO"; cat "$err"; exit 1; }
  echo "$what: $(grep -E ': error: ' "$err" | sed "s|$work/||g")"
}

# completed_cleanly <case> <status> <stderr>: the fault (a short read or write) fired, and the run
# went on as if it had not: status 0, no error or warning.
completed_cleanly() {
  local what=$1 rc=$2 err=$3
  [ -n "$(faulted_path)" ] || { echo "$what: the fault was never injected"; exit 1; }
  [ "$rc" -eq 0 ] || { echo "$what: a short transfer was taken for an error (status $rc)"; cat "$err"; exit 1; }
  if grep -qE '^[a-z]+(\[[0-9]+\])?: (error|warning): ' "$err" || crashed "$err"; then
    echo "$what: a short transfer gave:"; cat "$err"; exit 1
  fi
  echo "$what: completed"
}

no_temporaries() {  # no_temporaries <folder>: nothing left under a temporary name
  local left
  left=$(find "$1" -name '*.tmp.*' | sed "s|$work/||")
  [ -z "$left" ] || { echo "temporary files left behind: $left"; exit 1; }
}
