# What the command-line refusal tests share, sourced at their start after $work is set: fail(), and
# refused_one_line, which runs a command that must be refused in one line saying what it names.
fail() { echo "FAIL: $*"; exit 1; }
refused_one_line() {  # refused_one_line <words expected> <command...>: non-zero exit, one line with the words
  local words=$1
  shift
  local rc=0
  "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" -ne 0 ] || fail "accepted: $*"
  [ "$rc" -lt 128 ] || { cat "$work/err.txt"; fail "killed by a signal ($rc): $*"; }
  grep -qF -- "$words" "$work/err.txt" || fail "no '$words' in: $(cat "$work/err.txt") (from: $*)"
  local lines
  lines=$(grep -cv '^Run with --help' "$work/err.txt" || true)
  [ "$lines" -eq 1 ] || { cat "$work/err.txt"; fail "not one line ($lines) from: $*"; }
}
