#!/usr/bin/env python3
# A table of train runs' phase times a step, from the --metrics files of a folder (comm_variants.sh's
# runs): where a step's time goes beside another layout or variant of the same net.
"""step_phases.py DIR: Markdown on stdout, a row per DIR/*.jsonl (sorted by name). Over each run's epochs
2 to the last (epoch 1 holds the set-up and the graphs' capture; alone when it is the only one): images/s,
and rank 0's forward, backward, exposed all-reduce, update and idle milliseconds a step (steps = the
epochs' samples over the global batch, ranks x the comm plan's local batch), the input stall and the
megabytes a step puts on the wire."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from iteration_model import per_step  # noqa: E402

PHASES = ("t_fwd", "t_bwd", "t_comm_exposed", "t_update", "t_idle")


def records(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def figures(path, phases=PHASES):
    """(images/s, {phase: seconds a step}, input stall, MB on the wire a step) over the run's epochs 2 to the
    last (its only one where it has one); None where it wrote no epoch or plan, images/s 0 where it timed no
    step."""
    recs = records(path)
    plans = [r for r in recs if r.get("kind") == "comm_plan"]
    epochs = [r for r in recs if r.get("kind") == "epoch"]
    if not epochs or not plans:
        return None
    timed = epochs[1:] or epochs
    steps, images_per_second, per = per_step(timed, plans[0]["local_batch"] * plans[0]["ranks"], phases)
    if steps <= 0:
        return 0.0, {}, 0.0, 0.0
    seconds = sum(e["train_seconds"] for e in timed)
    stall = sum(e.get("input_stall", 0.0) * e["train_seconds"] for e in timed) / seconds
    wire = sum(e.get("comm_bytes_per_step", 0.0) for e in timed) / len(timed) / 1e6
    return images_per_second, per, stall, wire


def row(path):
    """The run's figures, or None where it wrote no epoch."""
    f = figures(path)
    if f is None:
        return None
    images_per_second, per, stall, wire = f
    if images_per_second <= 0:
        return ["-"] + [""] * 8
    return ([f"{images_per_second:,.0f}"] + [f"{1000.0 * per[p]:.2f}" for p in PHASES] +
            [f"{100 * stall:.2f}", f"{wire:.1f}"])


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    print("| run | img/s | fwd ms | bwd ms | exposed comm ms | update ms | idle ms | input stall % | MB on the wire |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in sorted(os.listdir(argv[1])):
        if not name.endswith(".jsonl"):
            continue
        r = row(os.path.join(argv[1], name))
        cells = r if r else ["no epoch written"] + [""] * 8
        print(f"| {name[:-6]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
