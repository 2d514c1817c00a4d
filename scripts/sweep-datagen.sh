#!/usr/bin/env bash
# Runs datagen over a grid of hosts x ranks x threads per rank x --gpu-resize x repeats, each attempt
# under a timeout with retries, one CSV row per attempt; a rerun resumes where the CSV stops.
set -euo pipefail
SWEEP_NAME="sweep-datagen"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/sweep_lib.sh
source "$here/sweep_lib.sh"

usage() {
  cat <<EOF
Usage: scripts/sweep-datagen.sh [options] -- <datagen arguments: --input ... --size ... [...]>

Grid (comma lists):
  --ranks LIST        MPI ranks in all (default 1)
  --threads LIST      OpenMP threads per rank (default 1)
  --hosts LIST        hosts to spread the ranks over (default: every host of the Slurm/LSF
                      allocation, or as many as there are ranks; 1 outside one)
  --gpu-resize LIST   off, on or off,on (default off)
  --repeats N         runs of each grid point (default 3)
Each run:
  --timeout S         seconds before an attempt is killed (default 3600)
  --retries N         further attempts after a failed or timed-out one (default 2)
  --retry-failed      also rerun points whose attempts were all used up by an earlier sweep
  --warmup            one unrecorded run first (the grid's first point), so the input is in the
                      page cache for every recorded run and not only the later ones
Files:
  --csv FILE          results, one row per attempt (default sweep-datagen.csv)
  --scratch DIR       datagen's output folder and the attempt logs (default FILE.d); on a
                      cluster it must be on a file system every host sees
  --datagen PATH      the datagen binary (default \$CONVOY_BIN/datagen, else build/datagen)
  --dry-run           print the command of every attempt that would run, run nothing
Environment: SWEEP_MPIRUN (mpirun), SWEEP_MPI_ARGS (default --bind-to none), SWEEP_EXPORT (variables
sent to remote ranks with -x), SWEEP_KILL_AFTER (seconds between TERM and KILL, default 10).
EOF
}

ranks_list=1 threads_list=1 hosts_list="" gpu_list=off repeats=3 timeout_s=3600 retries=2
retry_failed=0 csv=sweep-datagen.csv scratch="" datagen="" dry_run=0 warmup=0
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks_list=${2:?--ranks needs a list}; shift 2 ;;
    --threads) threads_list=${2:?--threads needs a list}; shift 2 ;;
    --hosts) hosts_list=${2:?--hosts needs a list}; shift 2 ;;
    --gpu-resize) gpu_list=${2:?--gpu-resize needs off, on or off,on}; shift 2 ;;
    --repeats) repeats=${2:?--repeats needs a number}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    --retries) retries=${2:?--retries needs a number}; shift 2 ;;
    --retry-failed) retry_failed=1; shift ;;
    --warmup) warmup=1; shift ;;
    --csv) csv=${2:?--csv needs a file}; shift 2 ;;
    --scratch) scratch=${2:?--scratch needs a folder}; shift 2 ;;
    --datagen) datagen=${2:?--datagen needs a path}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) sweep_die "unknown option '$1' (datagen's own arguments go after --; see --help)" ;;
  esac
done
dg_args=("$@")
[ "${#dg_args[@]}" -gt 0 ] || sweep_die "no datagen arguments after -- (at least --input and --size)"
for a in "${dg_args[@]}"; do
  case $a in
    --output|--output=*|--threads|--threads=*|--gpu-resize)
      sweep_die "datagen argument '$a' is set by the sweep itself; leave it out" ;;
  esac
done
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || sweep_die "--repeats: '$repeats' is not a positive integer"
[[ "$retries" =~ ^[0-9]+$ ]] || sweep_die "--retries: '$retries' is not a number"
[[ "$timeout_s" =~ ^[0-9]+([.][0-9]+)?$ ]] || sweep_die "--timeout: '$timeout_s' is not a number of seconds"

sweep_int_list --ranks "$ranks_list" RANKS
sweep_int_list --threads "$threads_list" THREADS
IFS=',' read -r -a GPU <<< "$gpu_list"
for g in "${GPU[@]}"; do [[ "$g" == on || "$g" == off ]] || sweep_die "--gpu-resize: '$g' is neither on nor off"; done

mapfile -t ALL_HOSTS < <(sweep_scheduler_hosts)
scheduler=$(sweep_scheduler_name)
# Without --hosts, each point spreads over as many of the allocation's hosts as it has ranks for.
auto_hosts=0
if [ -z "$hosts_list" ]; then
  auto_hosts=1 hosts_list=${#ALL_HOSTS[@]}
  [ "$hosts_list" -gt 0 ] || hosts_list=1
fi
sweep_int_list --hosts "$hosts_list" HOSTS
for h in "${HOSTS[@]}"; do
  if [ "${#ALL_HOSTS[@]}" -eq 0 ]; then
    [ "$h" -eq 1 ] || sweep_die "--hosts $h: not inside a Slurm or LSF allocation, so only this one host"
  else
    [ "$h" -le "${#ALL_HOSTS[@]}" ] || sweep_die "--hosts $h: the $scheduler allocation has ${#ALL_HOSTS[@]} host(s)"
  fi
done

if [ -z "$datagen" ]; then
  if [ -n "${CONVOY_BIN:-}" ]; then datagen=$CONVOY_BIN/datagen; else datagen=$(cd "$here/.." && pwd)/build/datagen; fi
fi
if [ "$dry_run" -eq 0 ]; then
  [ -x "$datagen" ] || sweep_die "$datagen: no datagen binary there (build it, or pass --datagen)"
  if [[ " ${GPU[*]} " == *" on "* ]] && ! "$datagen" --help 2>&1 | grep -q -- --gpu-resize; then
    sweep_die "$datagen: this datagen has no --gpu-resize; sweep with --gpu-resize off"
  fi
  command -v python3 > /dev/null || sweep_die "python3 is needed to read dataset.json"
fi
[ -n "$scratch" ] || scratch=$csv.d
mkdir -p "$scratch/logs"
out=$scratch/out
hash=$(sweep_args_hash "${dg_args[@]}")

header="hosts,ranks,threads,gpu_resize,args_hash,repeat,retry,status,exit_code,ranks_per_host,wall_s,run_s,scan_s,images,img_per_s,read_s,decode_s,resize_s,encode_s,write_s,wait_s,other_phases,scheduler,started_utc,log"
key_columns=6
declare -A DONE_OK=() DONE_N=()
sweep_load_progress "$csv" "$header" "$key_columns" "$dry_run"

# Figures from dataset.json's "timings": the run as datagen timed it (without the launch) and the
# phase seconds summed over threads and ranks. Phases beyond the six named ones go to other_phases.
read_timings() {
  python3 - "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
t = m["timings"]
ph = dict(t.get("phases", {}))
named = [ph.pop(k, 0.0) for k in ("read", "decode", "resize", "encode", "write", "wait")]
n, s = m["num_samples"], t["seconds"]
other = ";".join(f"{k}={v:.6g}" for k, v in sorted(ph.items()))
print(",".join([f"{s:.6g}", f"{t.get('scan_seconds', 0.0):.6g}", str(n),
                f"{n / s:.6g}" if s > 0 else ""] + [f"{v:.6g}" for v in named] + [other or "-"]))
PY
}

if [ "$warmup" -eq 1 ] && [ "$dry_run" -eq 0 ]; then
  wh=${HOSTS[0]}
  [ "$auto_hosts" -eq 0 ] || [ "${RANKS[0]}" -ge "$wh" ] || wh=${RANKS[0]}
  sweep_mpirun_line MPI_LINE "${RANKS[0]}" "$wh" "$scratch/hostfile.warmup" "${ALL_HOSTS[@]}"
  warm=("${MPI_LINE[@]}" "$datagen" "${dg_args[@]}" --output "$out" --threads "${THREADS[0]}")
  [ "${GPU[0]}" = off ] || warm+=(--gpu-resize)
  rm -rf "$out"
  sweep_attempt "$timeout_s" "$scratch/logs/warmup.log" "${warm[@]}"
  rm -rf "$out"
  sweep_log "warm-up run: $ATTEMPT_STATUS (exit $ATTEMPT_RC) in ${ATTEMPT_WALL} s, not recorded"
fi

total=$(( repeats * ${#HOSTS[@]} * ${#RANKS[@]} * ${#THREADS[@]} * ${#GPU[@]} ))
index=0 ran=0 skipped=0 failed_points=0
for ((rep = 1; rep <= repeats; rep++)); do
  for grid_hosts in "${HOSTS[@]}"; do
    for np in "${RANKS[@]}"; do
      for t in "${THREADS[@]}"; do
        for g in "${GPU[@]}"; do
          index=$((index + 1))
          nh=$grid_hosts
          [ "$auto_hosts" -eq 0 ] || [ "$np" -ge "$nh" ] || nh=$np
          key="$nh,$np,$t,$g,$hash,$rep"
          what="hosts $nh ranks $np threads $t gpu-resize $g repeat $rep"
          if [ "$np" -lt "$nh" ]; then
            sweep_log "[$index/$total] $what: fewer ranks than hosts, not run"; continue
          fi
          have=${DONE_N[$key]:-0}
          if [ "${DONE_OK[$key]:-0}" -eq 1 ]; then skipped=$((skipped + 1)); continue; fi
          first=$have last=$((retries + 1))
          if [ "$have" -ge "$last" ]; then
            if [ "$retry_failed" -eq 0 ]; then
              sweep_log "[$index/$total] $what: all $have attempts failed in an earlier sweep (--retry-failed reruns it)"
              skipped=$((skipped + 1)); continue
            fi
            last=$((have + retries + 1))
          fi
          ppn=$(( (np + nh - 1) / nh ))
          sweep_mpirun_line MPI_LINE "$np" "$nh" "$scratch/hostfile.$nh.$ppn" "${ALL_HOSTS[@]}"
          cmd=("${MPI_LINE[@]}" "$datagen" "${dg_args[@]}" --output "$out" --threads "$t")
          [ "$g" = on ] && cmd+=(--gpu-resize)
          if [ "$dry_run" -eq 1 ]; then
            [ "${#ALL_HOSTS[@]}" -eq 0 ] || echo "# hostfile $scratch/hostfile.$nh.$ppn: $(paste -sd' ' "$scratch/hostfile.$nh.$ppn")"
            sweep_quote "${cmd[@]}"
            continue
          fi
          ok=0
          for ((retry = first; retry < last; retry++)); do
            log="$scratch/logs/h${nh}_n${np}_t${t}_g${g}_${hash}_r${rep}_a${retry}.log"
            started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
            rm -rf "$out"
            sweep_attempt "$timeout_s" "$log" "${cmd[@]}"
            status=$ATTEMPT_STATUS figures=""
            if [ "$status" = ok ]; then
              if ! figures=$(read_timings "$out/dataset.json" 2>> "$log"); then
                status=failed figures=""
                echo "sweep: $out/dataset.json missing or without timings after a clean exit" >> "$log"
              fi
            fi
            [ -n "$figures" ] || figures=",,,,,,,,,,-"
            row="$key,$retry,$status,$ATTEMPT_RC,$ppn,$ATTEMPT_WALL,$figures,$scheduler,$started,$(sweep_csv_field "$log")"
            sweep_csv_append "$csv" "$row"
            ran=$((ran + 1))
            rate=$(cut -d, -f4 <<< "$figures")
            sweep_log "[$index/$total] $what attempt $((retry + 1)): $status (exit $ATTEMPT_RC) in ${ATTEMPT_WALL} s${rate:+, $rate img/s}"
            if [ "$status" = ok ]; then ok=1; break; fi
          done
          rm -rf "$out"
          [ "$ok" -eq 1 ] || failed_points=$((failed_points + 1))
        done
      done
    done
  done
done
[ "$dry_run" -eq 1 ] && exit 0
sweep_log "$ran attempt(s) run, $skipped point(s) already in $csv, $failed_points point(s) without a good run"
