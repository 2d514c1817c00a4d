#!/usr/bin/env python3
# The table of benchmarks/scaling_bound.sh: each run's images/s as % of GPUS x one GPU alone (the mean
# of its rounds), with its step's phases, so that what talking costs stands beside what the host allows.
"""scaling_bound_table.py DIR GPUS: Markdown on stdout from DIR's NET-KIND-ROUND[-gG].jsonl metrics
(KIND: one, apart, train or a variant's name; apart's runs, one a GPU, are summed). Over epochs 2 to
the last: images/s, % of GPUS x one GPU, and the forward, backward, update and idle ms a step and
the input stall (apart's: the mean of its GPUs)."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_phases  # noqa: E402
from step_phases import records  # noqa: E402

NAME = re.compile(r"^(?P<net>.+)-(?P<kind>[^-]+)-(?P<round>\d+)(?:-g(?P<gpu>\d+))?\.jsonl$")
PHASES = ("t_fwd", "t_bwd", "t_update", "t_idle")
ORDER = {"one": 0, "apart": 1, "train": 2}


def figures(path):
    """(images/s, {phase: s a step}, input stall) over epochs 2 to the last; None without them."""
    recs = [r for r in records(path) if r.get("kind") == "epoch"]
    f = step_phases.figures(path, PHASES) if len(recs) > 1 else None
    return f[:3] if f and f[0] > 0 else None


def collect(folder):
    """{(net, kind, round): [figures of each process]}."""
    runs = {}
    for name in sorted(os.listdir(folder)):
        m = NAME.match(name)
        f = figures(os.path.join(folder, name)) if m else None
        if f:
            runs.setdefault((m["net"], m["kind"], int(m["round"])), []).append(f)
    return runs


def rows(runs, gpus):
    out = []
    for net in sorted({k[0] for k in runs}):
        one = [runs[k][0][0] for k in runs if k[0] == net and k[1] == "one"]
        ref = sum(one) / len(one) if one else 0.0
        keys = sorted((k for k in runs if k[0] == net), key=lambda k: (ORDER.get(k[1], 3), k[1], k[2]))
        for k in keys:
            procs = runs[k]
            ips = sum(p[0] for p in procs)
            scale = 1 if k[1] == "one" else gpus
            share = f"{100 * ips / (scale * ref):.1f}" if ref else "-"
            phases = [sum(p[1][ph] for p in procs) / len(procs) for ph in PHASES]
            stall = sum(p[2] for p in procs) / len(procs)
            out.append([net, k[1], str(k[2]), f"{ips:,.0f}", share] + [f"{1000 * t:.2f}" for t in phases] +
                       [f"{100 * stall:.2f}"])
    return out


def main(argv):
    if len(argv) != 3 or not os.path.isdir(argv[1]) or not argv[2].isdigit() or int(argv[2]) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    print("| net | run | round | img/s | % of N x one GPU | fwd ms | bwd ms | update ms | idle ms | input stall % |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows(collect(argv[1]), int(argv[2])):
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
