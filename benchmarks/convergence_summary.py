#!/usr/bin/env python3
# convergence_resnet18.sh's table and chart: each run's validation top-1 by epoch and by seconds since
# launch, merged from the output folders of the calls that ran its parts (time_to_accuracy.py reads them).
"""Final validation top-1, its gap to PyTorch's and convoy's time to PyTorch's final accuracy.

    convergence_summary.py DIR [DIR...] [--md FILE] [--json FILE] [--plot FILE.png]

Each DIR is an OUTDIR of benchmarks/convergence_resnet18.sh: runs/<kind>-sN folders (kind convoy-whole,
convoy-square or torch, N the seed; train's metrics.jsonl or torch_imagefolder.py's epochs.csv, and the
stamps.log of time_to_accuracy.py) and steps.tsv (the seconds of making the set and the batch files).
A run found in several DIRs is taken from the last. The target is PyTorch's mean final top-1 over its
complete runs. Of each run: its final top-1, the seconds since launch at the end of its last epoch's
evaluation, and the first epoch at the target with its seconds since launch (set-up counted: start-up,
compilation, every evaluation before it) and its training seconds (the steps alone). PyTorch's time to
its final accuracy is, per run, that first epoch at the target, or its last epoch where it ends below
the target (where it got its final accuracy). Per kind: the means, the gap of the mean final top-1 to
PyTorch's in points, and PyTorch's time over the kind's both ways; for convoy also with datagen's
seconds for that kind's training and validation files added to its time.
"""
import argparse
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from time_to_accuracy import fmt, mean, ratio, read_run  # noqa: E402

KINDS = ("torch", "convoy-whole", "convoy-square")
LABELS = {"torch": "PyTorch (ImageFolder + DataLoader, JPEGs)", "convoy-whole": "convoy, whole images (v2 JPEG files)",
          "convoy-square": "convoy, centre squares (v1 JPEG files)"}
GAP_POINTS, SPEEDUP = 0.5, 2.5  # issue 36's bars: within 0.5 points, >= 2.5x shorter


def find_runs(dirs):
    """{(kind, seed): (folder, Run)} over the dirs, later ones winning."""
    found = {}
    for d in dirs:
        top = os.path.join(d, "runs")
        for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            m = re.fullmatch(r"(torch|convoy-whole|convoy-square)-s(\d+)", name)
            if m and os.path.exists(os.path.join(top, name, "stamps.log")):
                kind, seed = m.group(1), int(m.group(2))
                found[kind, seed] = read_run(os.path.join(top, name), "torch" if kind == "torch" else "convoy", seed)
    return found


def datagen_seconds(dirs):
    """{kind: seconds of datagen's training and validation runs} from the dirs' steps.tsv (the last)."""
    secs = {}
    for d in dirs:
        path = os.path.join(d, "steps.tsv")
        rows = list(csv.reader(open(path), delimiter="\t")) if os.path.exists(path) else []
        got = {}
        for name, status, s in (r for r in rows if len(r) == 3):
            m = re.fullmatch(r"datagen-(whole|square)-(train|val)", name)
            if m and status == "ok":
                got.setdefault("convoy-" + m.group(1), {})[m.group(2)] = float(s)
        secs.update({k: v["train"] + v["val"] for k, v in got.items() if set(v) == {"train", "val"}})
    return secs


def run_figures(kind, r, target):
    last = r.epochs[-1] if r.epochs else None
    hit = r.first_reaching(target) if target is not None else None
    if kind == "torch" and hit is None and r.complete():
        hit = last  # it ends below the target: its final accuracy is where it ends
    return {"kind": kind, "seed": r.seed, "epochs_run": len(r.epochs), "planned": r.planned, "status": r.status,
            "complete": r.complete(), "final_top1": last.top1 if last else None,
            "wall_seconds": last.wall_seconds if last else None, "train_seconds": last.train_seconds if last else None,
            "epoch_at_target": hit.epoch if hit else None, "wall_to_target": hit.wall_seconds if hit else None,
            "train_to_target": hit.train_seconds if hit else None,
            "curve": [[e.epoch, e.top1, e.wall_seconds, e.train_seconds] for e in r.epochs]}


def kind_figures(rows, datagen):
    done = [r for r in rows if r["complete"]]
    hits = [r for r in rows if r["wall_to_target"] is not None]
    f = {"runs": len(rows), "complete": len(done), "mean_final_top1": mean([r["final_top1"] for r in done]),
         "reached": len(hits), "mean_wall_to_target": mean([r["wall_to_target"] for r in hits]),
         "mean_train_to_target": mean([r["train_to_target"] for r in hits]), "datagen_seconds": datagen}
    f["mean_wall_to_target_with_datagen"] = (f["mean_wall_to_target"] + datagen
                                             if f["mean_wall_to_target"] is not None and datagen is not None else None)
    return f


def time_to(runs, target):
    """Mean seconds since launch and training seconds of complete runs to target; a run that ends below it
    counts its end (where it got its final accuracy)."""
    hits = [r.first_reaching(target) or r.epochs[-1] for r in runs if r.complete() and r.epochs]
    return mean([h.wall_seconds for h in hits]), mean([h.train_seconds for h in hits])


def common_speedup(f, found, kind, target):
    """PyTorch's time over the kind's to the lower of the two mean final top-1s, the accuracy both reach:
    where the kind ends a little below PyTorch, the time to PyTorch's own final accuracy is undefined."""
    if f["mean_final_top1"] is None or target is None:
        return
    common = min(target, f["mean_final_top1"])
    tw, tt = time_to([r for (k, _), r in found.items() if k == "torch"], common)
    kw, kt = time_to([r for (k, _), r in found.items() if k == kind], common)
    f.update({"common_top1": common, "common_wall": kw, "common_train": kt, "torch_common_wall": tw,
              "torch_common_train": tt, "speedup_common_wall": ratio(tw, kw), "speedup_common_train": ratio(tt, kt)})


def summarise(dirs):
    found = find_runs(dirs)
    if not found:
        sys.exit(f"{', '.join(dirs)}: no runs/<kind>-sN folders")
    torch_done = [r.epochs[-1].top1 for (k, _), r in found.items() if k == "torch" and r.complete() and r.epochs]
    target = mean(torch_done)
    datagen = datagen_seconds(dirs)
    rows = [run_figures(k, r, target) for (k, _), r in sorted(found.items(), key=lambda x: (KINDS.index(x[0][0]),
                                                                                            x[0][1]))]
    kinds = {k: kind_figures([r for r in rows if r["kind"] == k], datagen.get(k)) for k in KINDS
             if any(r["kind"] == k for r in rows)}
    t = kinds.get("torch", {})
    for k, f in kinds.items():
        if k == "torch":
            continue
        all_reached = f["reached"] == f["runs"] and f["complete"] == f["runs"]
        f["gap_points"] = (100 * (f["mean_final_top1"] - target)
                           if f["mean_final_top1"] is not None and target is not None else None)
        f["speedup_wall"] = ratio(t.get("mean_wall_to_target"), f["mean_wall_to_target"]) if all_reached else None
        f["speedup_train"] = ratio(t.get("mean_train_to_target"), f["mean_train_to_target"]) if all_reached else None
        f["speedup_wall_with_datagen"] = (ratio(t.get("mean_wall_to_target"), f["mean_wall_to_target_with_datagen"])
                                          if all_reached else None)
        f["gap_met"] = None if f["gap_points"] is None else abs(f["gap_points"]) <= GAP_POINTS
        f["speedup_met"] = None if f["speedup_wall"] is None else f["speedup_wall"] >= SPEEDUP
        common_speedup(f, found, k, target)
    return {"target": target, "kinds": kinds, "runs": rows}


def pct(v):
    return fmt(None if v is None else 100 * v, ".2f")


def markdown(s):
    lines = [f"Target: PyTorch's mean final validation top-1, {pct(s['target'])} %.", "",
             "| run | seed | epochs | final val top-1 (%) | seconds since launch at the end | first epoch at the "
             "target | seconds since launch to it | training seconds to it |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in s["runs"]:
        how = "" if r["complete"] else f" (exit {fmt(r['status'], 'd', '?')}: cut short)"
        lines.append(f"| {r['kind']} | {r['seed']} | {r['epochs_run']}/{fmt(r['planned'], 'd', '?')}{how} "
                     f"| {pct(r['final_top1'])} | {fmt(r['wall_seconds'], '.1f')} "
                     f"| {fmt(r['epoch_at_target'], 'd', 'not reached')} | {fmt(r['wall_to_target'], '.1f')} "
                     f"| {fmt(r['train_to_target'], '.1f')} |")
    lines += ["", "| kind | complete runs | mean final val top-1 (%) | gap to PyTorch (points) | mean seconds to the "
              "target, since launch / training | datagen seconds (train + val) | PyTorch's time over it: since launch "
              "/ training / with datagen |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for k, f in s["kinds"].items():
        gap = fmt(f.get("gap_points"), "+.2f") if k != "torch" else ""
        speed = (f"{fmt(f['speedup_wall'])}x / {fmt(f['speedup_train'])}x / {fmt(f['speedup_wall_with_datagen'])}x"
                 if k != "torch" else "")
        lines.append(f"| {LABELS[k]} | {f['complete']}/{f['runs']} | {pct(f['mean_final_top1'])} | {gap} "
                     f"| {fmt(f['mean_wall_to_target'], '.1f')} / {fmt(f['mean_train_to_target'], '.1f')} "
                     f"({f['reached']} reached) | {fmt(f['datagen_seconds'], '.1f')} | {speed} |")
    lines.append("")
    for k in ("convoy-whole", "convoy-square"):
        f = s["kinds"].get(k)
        if f:
            verdict = lambda v: "n/a" if v is None else "met" if v else "not met"  # noqa: E731
            lines.append(f"{LABELS[k]}: final top-1 within {GAP_POINTS} points of PyTorch's: {verdict(f['gap_met'])}; "
                         f"time to PyTorch's final accuracy >= {SPEEDUP}x shorter: {verdict(f['speedup_met'])}")
            if f.get("common_top1") is not None:
                lines.append(f"{LABELS[k]}: to {pct(f['common_top1'])} %, the lower of the two mean final top-1s, "
                             f"{fmt(f['torch_common_wall'], '.1f')} s against {fmt(f['common_wall'], '.1f')} s since "
                             f"launch ({fmt(f['speedup_common_wall'])}x), {fmt(f['torch_common_train'], '.1f')} s "
                             f"against {fmt(f['common_train'], '.1f')} s training ({fmt(f['speedup_common_train'])}x)")
    w, q = s["kinds"].get("convoy-whole"), s["kinds"].get("convoy-square")
    if w and q and w["mean_final_top1"] is not None and q["mean_final_top1"] is not None:
        lines.append(f"Whole images over centre squares: {100 * (w['mean_final_top1'] - q['mean_final_top1']):+.2f} "
                     "points of final top-1.")
    lines += ["", "Seconds since launch: from starting the process to the end of that epoch's evaluation (start-up, "
              "compilation and the evaluations before it counted). Training seconds: the steps alone (train's "
              "train_seconds; torch_imagefolder.py's epochs after its undone compile steps). Making the JPEGs is "
              "left out of both sides; datagen's seconds are convoy's alone."]
    return "\n".join(lines) + "\n"


def plot(s, path):
    """Draws the curves to path; false where this Python has no matplotlib (the tables are still written)."""
    try:
        import matplotlib
    except ImportError:
        print(f"convergence_summary: no matplotlib in {sys.executable}: {path} not drawn", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {"torch": "tab:red", "convoy-whole": "tab:blue", "convoy-square": "tab:green"}
    fig, (by_time, by_epoch) = plt.subplots(1, 2, figsize=(13, 5))
    for r in s["runs"]:
        pts = [c for c in r["curve"] if c[2] is not None]
        style = dict(color=colours[r["kind"]], marker="o", markersize=3,
                     linestyle=["-", "--", ":", "-."][(r["seed"] - 1) % 4], label=f"{LABELS[r['kind']]}, seed {r['seed']}")
        by_time.plot([c[2] for c in pts], [100 * c[1] for c in pts], **style)
        by_epoch.plot([c[0] for c in r["curve"]], [100 * c[1] for c in r["curve"]], **style)
    for ax, xl in ((by_time, "seconds since launch"), (by_epoch, "epoch")):
        if s["target"] is not None:
            ax.axhline(100 * s["target"], color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel(xl)
        ax.set_ylabel("validation top-1 (%)")
        ax.grid(alpha=0.3)
    by_time.set_title("ResNet-18: validation top-1 against wall time")
    by_epoch.set_title("by epoch")
    by_epoch.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="convergence_resnet18.sh output folders, the later winning")
    ap.add_argument("--md", metavar="FILE", help="the tables (default: printed)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--plot", metavar="FILE", help="a PNG of the curves")
    args = ap.parse_args()
    s = summarise(args.dirs)
    drawn = plot(s, args.plot) if args.plot else False
    md = markdown(s)
    if args.md:
        machines = [open(os.path.join(d, "machine.txt")).read().strip() for d in args.dirs
                    if os.path.exists(os.path.join(d, "machine.txt"))]
        with open(args.md, "w") as f:
            f.write("# ResNet-18 to convergence: convoy against PyTorch\n\n" + "\n\n".join(machines) + "\n\n" + md)
            if drawn:
                f.write(f"\n![validation top-1 against seconds since launch]({os.path.basename(args.plot)})\n")
    else:
        print(md, end="")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=1)


if __name__ == "__main__":
    main()
