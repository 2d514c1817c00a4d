# Shell functions shared by the sweep scripts and the Slurm/LSF job scripts: scheduler host lists,
# the mpirun line, one timed attempt under `timeout`, and the CSV that is replaced whole per row.
# Sourced, never run; callers set SWEEP_NAME (the prefix of every message) and use `set -euo pipefail`.

sweep_die() { echo "${SWEEP_NAME:-sweep}: error: $*" >&2; exit 2; }
sweep_log() { echo "${SWEEP_NAME:-sweep}: $*" >&2; }

# The commands as a shell would read them back, so a dry run can be pasted into a terminal.
sweep_quote() {
  local out="" a
  for a in "$@"; do out+="${out:+ }$(printf '%q' "$a")"; done
  printf '%s\n' "$out"
}

# sweep_int_list <option name> <comma list> <result array name>: positive integers only.
sweep_int_list() {
  local opt=$1 text=$2 item items
  local -n into=$3
  into=()
  IFS=',' read -r -a items <<< "$text"
  [ "${#items[@]}" -gt 0 ] || sweep_die "$opt: empty list"
  for item in "${items[@]}"; do
    [[ "$item" =~ ^[1-9][0-9]*$ ]] || sweep_die "$opt: '$item' is not a positive integer (list: $text)"
    into+=("$item")
  done
}

# Hosts of the scheduler allocation, one per line, in allocation order, each once. Nothing when the
# script runs outside an allocation (then every rank runs on this machine).
sweep_scheduler_hosts() {
  if [ -n "${SLURM_JOB_NODELIST:-}" ]; then
    command -v scontrol > /dev/null || sweep_die "SLURM_JOB_NODELIST is set but scontrol is not on PATH"
    scontrol show hostnames "$SLURM_JOB_NODELIST"
  elif [ -n "${LSB_DJOB_HOSTFILE:-}" ]; then
    [ -r "$LSB_DJOB_HOSTFILE" ] || sweep_die "LSB_DJOB_HOSTFILE=$LSB_DJOB_HOSTFILE cannot be read"
    awk 'NF && !seen[$1]++ { print $1 }' "$LSB_DJOB_HOSTFILE"
  elif [ -n "${LSB_HOSTS:-}" ]; then
    tr ' ' '\n' <<< "$LSB_HOSTS" | awk 'NF && !seen[$1]++ { print $1 }'
  fi
}

# Which scheduler the hosts came from, for the log and the CSV.
sweep_scheduler_name() {
  if [ -n "${SLURM_JOB_NODELIST:-}" ]; then echo slurm
  elif [ -n "${LSB_DJOB_HOSTFILE:-}${LSB_HOSTS:-}" ]; then echo lsf
  else echo local; fi
}

# sweep_mpirun_line <result array> <ranks> <hosts to use> <hostfile path> <all hosts...>
# Local (no hosts): mpirun -np N. In an allocation: a hostfile of the first <hosts to use> hosts with
# ceil(N / hosts) slots each, filled in order. Open MPI binds a rank to one core by default, which
# would put all OpenMP threads of a rank on that core, hence --bind-to none unless SWEEP_MPI_ARGS says
# otherwise. Every variable named in SWEEP_EXPORT travels to remote ranks with -x.
sweep_mpirun_line() {
  local -n line=$1
  local ranks=$2 nhosts=$3 hostfile=$4
  shift 4
  local all=("$@") v extra
  line=("${SWEEP_MPIRUN:-mpirun}" -np "$ranks")
  if [ "${#all[@]}" -gt 0 ]; then
    [ "$nhosts" -le "${#all[@]}" ] || sweep_die "$nhosts hosts asked for, the allocation has ${#all[@]}"
    local ppn=$(( (ranks + nhosts - 1) / nhosts )) i
    : > "$hostfile"
    for ((i = 0; i < nhosts; i++)); do echo "${all[$i]} slots=$ppn" >> "$hostfile"; done
    line+=(--hostfile "$hostfile" --map-by slot)
  fi
  if [ -n "${SWEEP_MPI_ARGS+x}" ]; then
    read -r -a extra <<< "$SWEEP_MPI_ARGS"
    line+=("${extra[@]}")
  else
    line+=(--bind-to none)
  fi
  for v in ${SWEEP_EXPORT:-}; do line+=(-x "$v"); done
}

# sweep_attempt <timeout s> <log file> <command...>: runs one attempt; sets ATTEMPT_RC, ATTEMPT_WALL
# (seconds, harness clock, includes the launch) and ATTEMPT_STATUS (ok | timeout | failed).
# mpirun must get exactly one TERM: a second one makes it exit at once without taking its ranks
# down, and the ranks live in process groups of their own. So `timeout --foreground` signals mpirun
# alone (KILL after SWEEP_KILL_AFTER seconds), the attempt runs in a session of its own, and whatever
# is left in that session afterwards (a hung rank mpirun lost) is killed. Remote ranks go with their
# orted when mpirun's connection drops.
sweep_attempt() {
  local limit=$1 log=$2
  shift 2
  local t0 t1 rc=0 sid
  t0=$(date +%s.%N)
  setsid timeout --foreground --kill-after="${SWEEP_KILL_AFTER:-10}" "$limit" "$@" > "$log" 2>&1 < /dev/null &
  sid=$!
  trap 'pkill -TERM -s "$sid" 2> /dev/null; exit 130' INT TERM
  wait "$sid" || rc=$?
  trap - INT TERM
  pkill -KILL -s "$sid" 2> /dev/null || true
  t1=$(date +%s.%N)
  ATTEMPT_RC=$rc
  ATTEMPT_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  if [ "$rc" -eq 0 ]; then ATTEMPT_STATUS=ok
  elif [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && awk -v w="$ATTEMPT_WALL" -v l="$limit" 'BEGIN { exit !(w >= l) }'; }; then
    ATTEMPT_STATUS=timeout
  else ATTEMPT_STATUS=failed; fi
}

# A CSV field: quoted only when it holds a comma, a quote or a newline (only the free-text columns
# at the end of a row can).
sweep_csv_field() {
  local f=$1
  if [[ "$f" == *[,\"$'\n']* ]]; then f=${f//\"/\"\"}; printf '"%s"' "$f"; else printf '%s' "$f"; fi
}

# sweep_csv_open <csv> <header>: creates the CSV with its header, or checks that an existing one has
# the same header (a different one means another tool or version wrote it: resuming would mix rows).
# Takes an exclusive lock for the life of the script so two sweeps never write one CSV.
sweep_csv_open() {
  local csv=$1 header=$2
  mkdir -p "$(dirname "$csv")"
  exec {SWEEP_LOCK_FD}> "$csv.lock"
  flock -n "$SWEEP_LOCK_FD" || sweep_die "$csv: another sweep is writing it (lock $csv.lock is held)"
  if [ -e "$csv" ]; then
    local have
    have=$(head -n 1 "$csv")
    [ "$have" = "$header" ] || sweep_die "$csv: its header differs from this sweep's; pick another --csv
  have: $have
  want: $header"
  else
    printf '%s\n' "$header" > "$csv.tmp"
    sync "$csv.tmp"
    mv -f "$csv.tmp" "$csv"
  fi
}

# sweep_csv_append <csv> <row>: the old rows plus the new one go to a temporary file that is synced
# and renamed over the CSV, so a kill at any moment leaves either the old file or the new one, never
# half a row. Copying is cheap at sweep sizes (hundreds of rows).
sweep_csv_append() {
  local csv=$1 row=$2
  cp "$csv" "$csv.tmp"
  printf '%s\n' "$row" >> "$csv.tmp"
  sync "$csv.tmp"
  mv -f "$csv.tmp" "$csv"
}

# sweep_csv_progress <csv> <key columns> : prints "key<TAB>ok<TAB>attempts" per key already in the CSV
# (ok: 1 when some attempt succeeded; attempts: rows recorded for it). Key columns come first in every
# row and never need quoting, so splitting on commas is safe for them.
sweep_csv_progress() {
  awk -F, -v k="$2" 'NR > 1 {
      key = $1; for (i = 2; i <= k; i++) key = key "," $i
      n[key]++; if ($(k + 2) == "ok") ok[key] = 1
    } END { for (key in n) printf "%s\t%d\t%d\n", key, (key in ok), n[key] }' "$1"
}

# A short fingerprint of argument lists, so rows made with other fixed arguments are not taken for
# this sweep's rows.
sweep_args_hash() { printf '%s\0' "$@" | cksum | cut -d' ' -f1; }
