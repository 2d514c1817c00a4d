#!/usr/bin/env python3
# Time to a test accuracy, convoy's train against PyTorch: `stamp` runs a command and writes each line it
# prints with the seconds since its launch; `summary` reads the runs' epoch records and stamps back.
"""Time to a test accuracy for benchmarks/fmnist_time_to_accuracy.sh.

    time_to_accuracy.py stamp LOG [--timeout S] -- CMD [ARG...]
    time_to_accuracy.py summary WORK [--target 0.945] [--goal 0.95] [--json FILE]

`stamp` runs CMD with its stdout and stderr joined, and writes every line to LOG as `SECONDS<TAB>line`,
SECONDS counted from just before the launch; its exit status is CMD's (124 when --timeout ended it: a
SIGTERM, then a SIGKILL 10 s later). The last line is `SECONDS<TAB># exit STATUS`.

`summary` reads the runs under WORK: folders `convoy-sN` (train's `--metrics` file `metrics.jsonl` and
`stamps.log`) and `torch-sN` (pytorch_train.py's `--epoch-log` file `epochs.csv` and `stamps.log`), N the
seed. An epoch ends, in a stamps log, at its line `epoch E/N:` (train's epoch line; pytorch_train.py's
evaluation line): the seconds since launch there are its time with set-up counted (start-up, data
loading, cuDNN's choices, compilation, every evaluation up to it). Its training time leaves set-up and
evaluation out: train's `train_seconds` of the epochs up to it, summed (the first epoch keeps cuDNN's
algorithm choice and the graph capture, which run inside its first steps), or pytorch_train.py's timed
loop up to it (its compile and warm-up steps run before). Prints a Markdown table: each run's final test
top-1, the first epoch at --target and its two times; each side's mean; and PyTorch's mean time over
convoy's, both ways. `--json` also writes the figures.
"""
import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

EPOCH_LINE = re.compile(r"\bepoch (\d+)/(\d+): ")


@dataclass
class Epoch:
    epoch: int
    top1: float
    train_seconds: float  # training alone, up to and including this epoch
    wall_seconds: float | None  # since launch, at the end of this epoch's evaluation


@dataclass
class Run:
    side: str  # "convoy" or "torch"
    seed: int
    epochs: list = field(default_factory=list)
    planned: int | None = None  # the run's epochs, from its epoch lines
    status: int | None = None  # its exit status, from the stamps log

    def first_reaching(self, target):
        return next((e for e in self.epochs if e.top1 >= target), None)

    def complete(self):
        return self.planned is not None and len(self.epochs) == self.planned and self.status == 0


def stamp(log, timeout, cmd):
    """Runs cmd, stamping its lines into log; its exit status."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "w") as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                             errors="replace")
        timed_out = threading.Event()

        def stop():
            timed_out.set()
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

        timer = threading.Timer(timeout, stop) if timeout else None
        if timer:
            timer.start()
        for line in p.stdout:
            out.write(f"{time.monotonic() - t0:.3f}\t{line.rstrip(chr(10))}\n")
            out.flush()
        rc = p.wait()
        if timer:
            timer.cancel()
        rc = 124 if timed_out.is_set() else rc
        out.write(f"{time.monotonic() - t0:.3f}\t# exit {rc}\n")
    return rc


def read_stamps(path):
    """({epoch: seconds since launch}, planned epochs or None, exit status or None) of a stamps log."""
    ends, planned, status = {}, None, None
    if not os.path.exists(path):
        return ends, planned, status
    for line in open(path, errors="replace"):
        t, _, text = line.rstrip("\n").partition("\t")
        if text.startswith("# exit "):
            status = int(text[len("# exit "):])
            continue
        m = EPOCH_LINE.search(text)
        if m:
            ends.setdefault(int(m.group(1)), float(t))
            planned = int(m.group(2))
    return ends, planned, status


def convoy_epochs(path):
    """(epoch, test top-1, training seconds of that epoch) of train's --metrics file."""
    if not os.path.exists(path):
        return []
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [(r["epoch"], r["test_top1"], r["train_seconds"]) for r in rows
            if r.get("kind") == "epoch" and "test_top1" in r]


def torch_epochs(path):
    """(epoch, test top-1, training seconds up to it) of pytorch_train.py's --epoch-log file."""
    if not os.path.exists(path):
        return []
    return [(int(r["epoch"]), float(r["test_top1"]), float(r["train_seconds"])) for r in csv.DictReader(open(path))]


def read_run(folder, side, seed):
    ends, planned, status = read_stamps(os.path.join(folder, "stamps.log"))
    run = Run(side, seed, planned=planned, status=status)
    if side == "convoy":
        total = 0.0
        for epoch, top1, seconds in convoy_epochs(os.path.join(folder, "metrics.jsonl")):
            total += seconds
            run.epochs.append(Epoch(epoch, top1, total, ends.get(epoch)))
    else:
        for epoch, top1, seconds in torch_epochs(os.path.join(folder, "epochs.csv")):
            run.epochs.append(Epoch(epoch, top1, seconds, ends.get(epoch)))
    return run


def read_runs(work):
    runs = []
    for name in sorted(os.listdir(work)):
        m = re.fullmatch(r"(convoy|torch)-s(\d+)", name)
        if m and os.path.isdir(os.path.join(work, name)):
            runs.append(read_run(os.path.join(work, name), m.group(1), int(m.group(2))))
    return sorted(runs, key=lambda r: (r.side != "convoy", r.seed))


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def side_figures(runs, target):
    """A side's means: final top-1 over its complete runs, the times to target over the runs reaching it."""
    hits = [r.first_reaching(target) for r in runs]
    return {"runs": len(runs), "complete": sum(r.complete() for r in runs),
            "mean_final_top1": mean([r.epochs[-1].top1 for r in runs if r.complete() and r.epochs]),
            "reached": sum(h is not None for h in hits),
            "mean_wall_seconds": mean([h.wall_seconds for h in hits if h]),
            "mean_train_seconds": mean([h.train_seconds for h in hits if h])}


def ratio(a, b):
    return a / b if a is not None and b else None


def summarise(runs, target, goal):
    sides = {s: side_figures([r for r in runs if r.side == s], target) for s in ("convoy", "torch")}
    c, t = sides["convoy"], sides["torch"]
    return {"target": target, "goal": goal, "sides": sides,
            "ratio_wall": ratio(t["mean_wall_seconds"], c["mean_wall_seconds"]),
            "ratio_train": ratio(t["mean_train_seconds"], c["mean_train_seconds"]),
            "runs": [run_figures(r, target) for r in runs]}


def run_figures(r, target):
    hit = r.first_reaching(target)
    return {"side": r.side, "seed": r.seed, "epochs_run": len(r.epochs), "planned": r.planned, "status": r.status,
            "complete": r.complete(), "final_top1": r.epochs[-1].top1 if r.epochs else None,
            "first_epoch": hit.epoch if hit else None, "wall_seconds": hit.wall_seconds if hit else None,
            "train_seconds": hit.train_seconds if hit else None}


def fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def print_table(s):
    pct = 100 * s["target"]
    print(f"| side | seed | epochs run | final test top-1 | first epoch at {pct:g} % "
          f"| time to it, set-up counted (s) | training time to it (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in s["runs"]:
        how = "" if r["complete"] else " (stopped)" if r["status"] == 0 else f" (exit {fmt(r['status'], 'd', '?')})"
        run = f"{r['epochs_run']}/{fmt(r['planned'], 'd', '?')}{how}"
        final = fmt(r["final_top1"], ".4f") + ("" if r["complete"] else " (not the end)")
        print(f"| {r['side']} | {r['seed']} | {run} | {final} | {fmt(r['first_epoch'], 'd', 'not reached')} "
              f"| {fmt(r['wall_seconds'])} | {fmt(r['train_seconds'])} |")
    print()
    for side, f in s["sides"].items():
        print(f"{side}: mean final test top-1 {fmt(f['mean_final_top1'], '.4f')} over {f['complete']} complete "
              f"of {f['runs']} runs; {f['reached']} reached {pct:g} %: mean time to it "
              f"{fmt(f['mean_wall_seconds'])} s set-up counted, {fmt(f['mean_train_seconds'])} s training")
    c = s["sides"]["convoy"]["mean_final_top1"]
    met = "n/a" if c is None or s["sides"]["convoy"]["complete"] < s["sides"]["convoy"]["runs"] else (
        "met" if c >= s["goal"] else "not met")
    print(f"convoy's mean final top-1 >= {100 * s['goal']:g} %: {met}")
    print(f"PyTorch's time to {pct:g} % over convoy's: {fmt(s['ratio_wall'])}x set-up counted, "
          f"{fmt(s['ratio_train'])}x training time")
    print("Set-up counted: seconds from launching the process to the end of the evaluation at that epoch. "
          "Training time: the steps alone (train's train_seconds; PyTorch's timed loop after its compile "
          "and warm-up steps), evaluation left out.")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stamp", help="run the command after --, stamping its lines")
    st.add_argument("log")
    st.add_argument("--timeout", type=float, help="seconds before the command is stopped")
    su = sub.add_parser("summary", help="the runs' time to accuracy")
    su.add_argument("work")
    su.add_argument("--target", type=float, default=0.945)
    su.add_argument("--goal", type=float, default=0.95, help="convoy's mean final top-1 to meet")
    su.add_argument("--json", metavar="FILE")
    cut = argv.index("--") if "--" in argv else len(argv)  # the command's own flags are not ours
    args = ap.parse_args(argv[:cut])
    if args.cmd == "stamp":
        if not argv[cut + 1:]:
            ap.error("stamp: no command after --")
        sys.exit(stamp(args.log, args.timeout, argv[cut + 1:]))
    runs = read_runs(args.work)
    if not runs:
        sys.exit(f"{args.work}: no convoy-sN or torch-sN run folders")
    s = summarise(runs, args.target, args.goal)
    print_table(s)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
