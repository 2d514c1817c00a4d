#!/usr/bin/env python3
# Sums a datagen --timeline file (Chrome trace-event JSON) into a few lines: the start-up until the
# first sample, the region, the tail after the last sample, and per kind of thread where its time went.
#
#   timeline_summary.py TIMELINE.json [--tracks]     (--tracks: one line per thread as well)
import json
import signal
import sys
from collections import defaultdict


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(sys.argv) < 2:
        sys.exit("usage: timeline_summary.py TIMELINE.json [--tracks]")
    doc = json.load(open(sys.argv[1]))
    names, spans = {}, defaultdict(list)
    for e in doc["traceEvents"]:
        key = (e["pid"], e.get("tid"))
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[key] = e["args"]["name"]
        elif e["ph"] == "X":
            spans[key].append((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6, e["name"]))
    every = [s for v in spans.values() for s in v]
    if not every:
        sys.exit("no spans")
    end = max(s[1] for s in every)
    sample = [s for s in every if s[2] in ("read", "decode", "resize", "encode", "stats")]
    first, last = min(s[0] for s in sample), max(s[1] for s in sample)
    ranks = len({k[0] for k in spans})
    print(f"{sys.argv[1]}: {ranks} rank(s), {len(spans)} threads, {end:.3f} s from the first process's start")
    print(f"  first sample begun at {first:.3f} s, last sample done at {last:.3f} s, then {end - last:.3f} s to the end")
    print("  steps (rank 0's main thread): " + ", ".join(
        f"{n} {sum(b - a for a, b, m in spans[(0, 0)] if m == n):.3f}"
        for n in ("exec", "MPI init", "index", "broadcast", "plan", "set-up", "drain", "reduce", "finish")))

    def kind(key):
        n = names.get(key, "")
        return "writer" if n.startswith("writer") else "decoding" if "decoding" in n else "other"

    steps = {"exec", "MPI init", "index", "broadcast", "plan", "set-up", "drain", "reduce", "finish"}
    by_kind = defaultdict(lambda: defaultdict(float))
    count = defaultdict(int)
    for key, v in spans.items():
        count[kind(key)] += 1
        for a, b, m in v:
            if m not in steps:
                by_kind[kind(key)][m] += b - a
    region = last - first
    for k, phases in sorted(by_kind.items()):
        busy = sum(t for m, t in phases.items() if m not in ("wait",))
        total = sorted(phases.items(), key=lambda x: -x[1])
        print(f"  {count[k]} {k} thread(s), {region:.3f} s between the first and last sample: " +
              ", ".join(f"{m} {t:.3f}" for m, t in total) +
              (f"; busy {100 * busy / (count[k] * region):.0f} % of that" if region > 0 else ""))
    if "--tracks" in sys.argv:
        for key in sorted(spans):
            v = spans[key]
            busy = sum(b - a for a, b, m in v if m != "wait")
            print(f"    rank {key[0]} {names.get(key, key[1])}: {len(v)} spans, busy {busy:.3f} s, "
                  f"from {min(a for a, _, _ in v):.3f} to {max(b for _, b, _ in v):.3f} s")


if __name__ == "__main__":
    main()
