#!/usr/bin/env bash
# Trains from a dataset that the page cache cannot hold: the run goes into a cgroup whose memory limit
# leaves less page cache than the dataset's size, after the cache is dropped, so every epoch reads its
# batch files from the disk. Prints the disk's read rate and the run's images/s and input stall.
#
#   benchmarks/page_cache.sh DATA OUTDIR CACHE_MB [train flags...]
#
# CACHE_MB: the page cache left to the run, above the process's own memory (its peak RSS from a first
# run with the cache warm, which also gives the figures to compare with). Needs root and cgroup v2
# with the memory controller; without them it drops the whole page cache every second instead, and
# says so. Writes OUTDIR/warm.jsonl, OUTDIR/cold.jsonl, OUTDIR/*.log and prints one table.
set -uo pipefail
(($# >= 3)) || { echo "usage: $0 DATA OUTDIR CACHE_MB [train flags...]" >&2; exit 2; }
data=$1 out=$2 cache_mb=$3
shift 3
mkdir -p "$out"
size_mb=$(du -sm "$data" | cut -f1)

# The disk's own rate: one large batch file read with O_DIRECT, past the page cache.
big=$(ls -S "$data"/*.cvb | head -1)
disk=$(dd if="$big" of=/dev/null bs=4M iflag=direct 2>&1 | awk '/copied/ { print $(NF-1), $NF }')

run() {  # run NAME [prefix...]: train with the given flags, metrics to OUTDIR/NAME.jsonl
  local name=$1
  shift
  rm -f "$out/$name.jsonl"
  "$@" train --data "$data" --metrics "$out/$name.jsonl" "${flags[@]}" >"$out/$name.log" 2>&1
}
flags=("$@")
run warm
rss_mb=$(python3 -c 'import json,sys; print(max(int(json.loads(l).get("peak_rss_bytes", 0)) for l in open(sys.argv[1]) if "epoch" in l) >> 20)' "$out/warm.jsonl")
limit_mb=$((rss_mb + cache_mb))

cg=/sys/fs/cgroup/convoy_page_cache
how=""
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
  { grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory >/sys/fs/cgroup/cgroup.subtree_control; } 2>/dev/null &&
  mkdir -p "$cg" && echo "${limit_mb}M" >"$cg/memory.max"; then
  how="cgroup v2 memory.max ${limit_mb} MiB (peak RSS ${rss_mb} MiB + ${cache_mb} MiB of page cache)"
  run cold sh -c "echo \$\$ >$cg/cgroup.procs && exec \"\$0\" \"\$@\""
  echo "$(cat "$cg/memory.events" 2>/dev/null | tr '\n' ' ')" >"$out/cgroup_events.txt"
  rmdir "$cg" 2>/dev/null
else
  how="no memory cgroup: the page cache dropped every second during the run"
  (while :; do echo 1 >/proc/sys/vm/drop_caches; sleep 1; done) &
  dropper=$!
  run cold
  kill "$dropper"
fi

python3 - "$out" "$size_mb" "$disk" "$how" <<'PY'
import json, sys
out, size_mb, disk, how = sys.argv[1:5]
print(f"dataset {int(size_mb):,} MiB; disk read (O_DIRECT, one batch file): {disk}; cold run: {how}\n")
print("| run | images/s after epoch 1 | input stall | peak RSS |")
print("| --- | --- | --- | --- |")
for name in ("warm", "cold"):
    try:
        ep = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if '"epoch"' in l]
    except OSError:
        ep = []
    ep = [r for r in ep if r.get("kind") == "epoch"]
    later = ep[1:] or ep
    if not later:
        print(f"| {name} | failed (see {name}.log) | | |")
        continue
    secs = sum(r["train_seconds"] for r in later)
    ips = sum(r["images_per_second"] * r["train_seconds"] for r in later) / secs
    stall = 100 * sum(r["t_io"] for r in later) / secs
    rss = max(r["peak_rss_bytes"] for r in ep) / 2**20
    print(f"| {name} | {ips:,.0f} | {stall:.2f} % | {rss:,.0f} MiB |")
PY
