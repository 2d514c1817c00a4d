#!/usr/bin/python3
# Draws convoy's and PyTorch's per-step training losses over the same steps on one chart and prints
# how far apart they are, beside how far apart two seeds of the same side are (the noise).
"""usage: benchmarks/loss_curves.py [--torch-name NAME] OUT.png LABEL CONVOY.jsonl[,...] TORCH.csv[,...] [LABEL ...]

convoy's runs from `train --metrics` JSONL (step records: --log-every 1), PyTorch's from
`pytorch_train.py --loss-log` CSV; several runs of a side (other seeds) comma-separated. Per net it
prints the mean loss of each run over steps 1-20, the middle 20 and the last 20, and the largest gap
between 20-step moving averages: convoy's first run against PyTorch's, and between the runs of each
side.
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from plot import read_metrics  # noqa: E402

WINDOW = 20


def convoy_losses(path):
    steps, _ = read_metrics(path)
    return [float(r["loss"]) for r in sorted(steps, key=lambda r: int(r["global_step"]))]


def torch_losses(path):
    with open(path, encoding="utf-8") as f:
        next(f)
        return [float(line.split(",")[1]) for line in f if line.strip()]


def moving(v):
    return [sum(v[max(0, k - WINDOW + 1):k + 1]) / (k + 1 - max(0, k - WINDOW + 1)) for k in range(len(v))]


def largest_gap(a, b):
    ma, mb = moving(a), moving(b)
    return max((abs(x - y) for x, y in zip(ma[WINDOW - 1:], mb[WINDOW - 1:])), default=float("nan"))


def summary(name, v):
    n = len(v)
    spans = [(0, WINDOW), (n // 2 - WINDOW // 2, n // 2 + WINDOW // 2), (n - WINDOW, n)]
    return name + " " + " / ".join(f"{sum(v[lo:hi]) / (hi - lo):.3f}" for lo, hi in spans)


def draw(ax, label, convoy, torch_runs):
    n = min(len(r) for r in convoy + torch_runs)
    convoy, torch_runs = [r[:n] for r in convoy], [r[:n] for r in torch_runs]
    print(f"{label}: {n} steps; mean loss over steps 1-{WINDOW}, the middle {WINDOW}, the last {WINDOW}:")
    for k, r in enumerate(convoy):
        print("  " + summary(f"convoy run {k + 1}:", r))
    for k, r in enumerate(torch_runs):
        print("  " + summary(f"torch run {k + 1}:", r))
    print(f"  largest gap of the {WINDOW}-step means: convoy against torch {largest_gap(convoy[0], torch_runs[0]):.3f}",
          end="")
    if len(convoy) > 1:
        print(f"; convoy's runs {largest_gap(convoy[0], convoy[1]):.3f}", end="")
    if len(torch_runs) > 1:
        print(f"; torch's runs {largest_gap(torch_runs[0], torch_runs[1]):.3f}", end="")
    print()
    steps = range(1, n + 1)
    for runs, color, name in ((convoy, "tab:blue", "convoy"), (torch_runs, "tab:orange", TORCH_NAME[0])):
        for k, r in enumerate(runs):
            ax.plot(steps, r, color=color, alpha=0.15, linewidth=0.7)
            ax.plot(steps, moving(r), color=color, linestyle="-" if k == 0 else "--",
                    label=f"{name}, run {k + 1} ({WINDOW}-step mean)")
    ax.set_title(label)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend(fontsize="small")


# The PyTorch runs' name in the legend (--torch-name: e.g. runs without torch.compile).
TORCH_NAME = ["PyTorch torch.compile"]


def main():
    args = sys.argv[1:]
    if args[:1] == ["--torch-name"] and len(args) > 1:
        TORCH_NAME[0], args = args[1], args[2:]
    if len(args) < 4 or (len(args) - 1) % 3:
        sys.exit(__doc__)
    out, groups = args[0], [args[k:k + 3] for k in range(1, len(args), 3)]
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 4.5), squeeze=False)
    for ax, (label, cpaths, tpaths) in zip(axes[0], groups):
        draw(ax, label, [convoy_losses(p) for p in cpaths.split(",")], [torch_losses(p) for p in tpaths.split(",")])
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
