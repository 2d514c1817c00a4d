#!/usr/bin/python3
# Draws the loss and accuracy curves of a train run from its JSONL metrics file (--metrics) to a
# PNG: step losses and per-epoch train/test loss on the left, train/test accuracy on the right.
"""usage: scripts/plot.py METRICS.jsonl [OUT.png] [--title TEXT]"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    steps, epochs = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not JSON: {e}")
            kind = record.get("kind")
            if kind == "step":
                steps.append(record)
            elif kind == "epoch":
                epochs.append(record)
    return steps, epochs


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("metrics")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    steps, epochs = read_metrics(a.metrics)
    if not steps and not epochs:
        sys.exit(f"{a.metrics}: no step or epoch records")
    out = a.out or a.metrics.rsplit(".", 1)[0] + ".png"

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.5))
    # Epoch records sit at the global step where the epoch ended, so both share one x axis.
    if steps:
        ax_loss.plot([s["global_step"] for s in steps], [s["loss"] for s in steps],
                     lw=0.8, alpha=0.6, label="train loss (step)")
    x = [e["global_step"] for e in epochs]
    if epochs:
        ax_loss.plot(x, [e["train_loss"] for e in epochs], "o-", label="train loss (epoch)")
        ax_acc.plot(x, [e["train_acc"] for e in epochs], "o-", label="train top-1")
    for key, label in (("test_loss", "test loss"),):
        pts = [(e["global_step"], e[key]) for e in epochs if key in e]
        if pts:
            ax_loss.plot(*zip(*pts), "s-", label=label)
    for key, label in (("test_top1", "test top-1"), ("test_top5", "test top-5")):
        pts = [(e["global_step"], e[key]) for e in epochs if key in e]
        if pts:
            ax_acc.plot(*zip(*pts), "s-", label=label)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("accuracy")
    ax_acc.grid(alpha=0.3)
    if epochs:
        ax_acc.legend(loc="lower right")
    fig.suptitle(a.title or a.metrics)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
