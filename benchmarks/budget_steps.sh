# Sourced by the host benchmarks that run many steps within one time budget (imagenet_scale.sh,
# datagen_node.sh): `step`, each step's log, and steps.tsv, which their tables read.
#
# The sourcing script sets `out` (its output folder), `t_end` (the SECONDS by which steps must end)
# and optionally `step_min` (a step with less time left than this is skipped; default 10). Steps whose
# names match the extended regex STEP_SKIP (from the environment) are skipped and recorded so.

# step NAME LIMIT CMD...: runs CMD under its limit (cut to what the budget has left), output to
# OUTDIR/NAME.log, and records "NAME status seconds" (wall clock of the whole command) in steps.tsv.
step() {
  local name=$1 limit=$2 left=$((t_end - SECONDS)) rc status t0 secs
  shift 2
  ((limit > left)) && limit=$left
  if [ -n "${STEP_SKIP:-}" ] && [[ $name =~ ^(${STEP_SKIP})$ ]]; then
    printf '%s\tskipped (STEP_SKIP)\t0\n' "$name" >>"$out/steps.tsv"
    echo "== $name: skipped (STEP_SKIP)" >&2
    return 1
  fi
  if ((limit < ${step_min:-10})); then
    printf '%s\tskipped (out of time)\t0\n' "$name" >>"$out/steps.tsv"
    echo "== $name: skipped, out of time" >&2
    return 1
  fi
  echo "== $name (at most $limit s)" >&2
  echo "\$ $*" >"$out/$name.log"
  t0=${EPOCHREALTIME/,/.}
  timeout -k 10 "$limit" "$@" >>"$out/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.3f", b - a }')
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after $limit s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\n' "$name" "$status" "$secs" >>"$out/steps.tsv"
  echo "== $name: $status, $secs s" >&2
  [ "$rc" = 0 ] || tail -3 "$out/$name.log" | sed 's/^/   /' >&2
  return "$rc"
}
