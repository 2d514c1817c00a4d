#!/usr/bin/python3
# Plots a sweep CSV from sweep-datagen.sh or sweep-train.sh: speed-up and efficiency against the ideal
# line, and the per-phase breakdown as stacked bars (PNG), plus a Markdown table of the medians.
"""Usage: plot_sweep.py SWEEP.csv [--out PREFIX] [--title TEXT] [--time run|wall] [--args-hash H] [--by ...]

Writes PREFIX-speedup.png, PREFIX-efficiency.png and PREFIX-phases.png (PREFIX defaults to the CSV's
name without .csv) and prints the table on stdout. Only attempts with status ok count; repeats are
reduced to their median, and the error bars span the fastest and slowest repeat.
"""
import argparse
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

DATAGEN_PHASES = ["read", "decode", "resize", "encode", "write", "wait"]
TRAIN_PHASES = ["t_io", "t_h2d", "t_fwd", "t_bwd", "t_update", "t_comm"]


def fail(msg):
    sys.exit(f"plot_sweep: error: {msg}")


def load(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if not rows:
        fail(f"{path}: no rows")
    cols = rows[0].keys()
    if {"threads", "gpu_resize", "run_s"} <= cols:
        kind = "datagen"
    elif {"mode", "img_per_s", "t_comm"} <= cols:
        kind = "train"
    else:
        fail(f"{path}: neither a sweep-datagen nor a sweep-train CSV (header: {','.join(cols)})")
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        fail(f"{path}: no attempt with status ok among {len(rows)} rows")
    return kind, ok


def pick_sweep(rows, wanted, path):
    """Rows of one set of fixed tool arguments (args_hash): the one asked for, else the one with the
    most good rows. Mixing them would compare runs of different work."""
    counts = {}
    for r in rows:
        counts[r["args_hash"]] = counts.get(r["args_hash"], 0) + 1
    chosen = wanted or max(counts, key=counts.get)
    if chosen not in counts:
        fail(f"{path}: no good rows with args_hash {chosen} (there are: {', '.join(sorted(counts))})")
    if len(counts) > 1:
        others = ", ".join(f"{h} ({n} rows)" for h, n in sorted(counts.items()) if h != chosen)
        print(f"plot_sweep: plotting args_hash {chosen}; left out {others} (--args-hash picks)", file=sys.stderr)
    return [r for r in rows if r["args_hash"] == chosen]


OUTSIDE = "outside the phases"


def with_outside(phases, elapsed):
    """Adds the part of the elapsed time no phase covers: serial work, start-up, imbalance the tool
    does not time. A tall one is where scaling is lost."""
    phases[OUTSIDE] = max(0.0, elapsed - sum(phases.values()))
    return phases


def datagen_phases(row):
    """Phase seconds per worker: the CSV holds sums over threads and ranks."""
    workers = int(row["ranks"]) * int(row["threads"])
    out = {p: float(row[p + "_s"] or 0.0) / workers for p in DATAGEN_PHASES}
    if row["other_phases"] not in ("", "-"):
        for item in row["other_phases"].split(";"):
            name, value = item.split("=")
            out[name] = float(value) / workers
    return with_outside(out, float(row["run_s"]))


def train_phases(row):
    """Seconds per timed epoch on rank 0."""
    n = int(row["timed_epochs"])
    out = {p[2:]: float(row[p] or 0.0) / n for p in TRAIN_PHASES}
    return with_outside(out, float(row["time_s"]) / n)


class Point:
    """One grid point: its repeats reduced to median / min / max time and mean phases."""

    def __init__(self, times, phases):
        self.time = statistics.median(times)
        self.tmin, self.tmax = min(times), max(times)
        self.runs = len(times)
        names = []
        for p in phases:
            names += [k for k in p if k not in names]
        self.phases = {k: statistics.median(p.get(k, 0.0) for p in phases) for k in names}


def group(rows, kind, time_col, by):
    """{(line, x, label): Point}, with the time for the same work at every x; per line the family whose
    one-core point is its baseline (datagen: the --gpu-resize setting) and a sort key.
    datagen lines are one per threads-per-rank or one per rank count (by: threads | ranks | auto, auto
    taking the dimension with fewer values, so a threads-only sweep is one line, not one per point)."""
    if kind == "datagen" and by == "auto":
        by = "threads" if len({r["threads"] for r in rows}) <= len({r["ranks"] for r in rows}) else "ranks"
    buckets, family, order = {}, {}, {}
    for r in rows:
        if kind == "datagen":
            n = int(r[by])
            line = f"{n} thread(s)/rank" if by == "threads" else f"{n} rank(s)"
            line += ", GPU resize" if r["gpu_resize"] == "on" else ""
            line += f", {r['hosts']} hosts" if int(r["hosts"]) > 1 else ""
            x = int(r["ranks"]) * int(r["threads"])
            label = f"{r['ranks']}r x {r['threads']}t" + (" gpu" if r["gpu_resize"] == "on" else "")
            label += f" {r['hosts']}h" if int(r["hosts"]) > 1 else ""
            t = float(r[time_col])
            ph = datagen_phases(r)
            family[line] = r["gpu_resize"]
            order[line] = (r["gpu_resize"], int(r["hosts"]), n)
        else:
            line = f"{r['mode']} scaling"
            x = int(r["ranks"])
            label = f"{r['mode']} {r['ranks']}"
            # Every run trains on the whole dataset each epoch (weak runs take fewer, bigger steps), so
            # time per image compares across rank counts.
            t = float(r["time_s"]) / int(r["images"]) if time_col == "run_s" else float(r["wall_s"])
            ph = train_phases(r)
            family[line] = line
            order[line] = (r["mode"],)
        b = buckets.setdefault((line, x, label), ([], []))
        b[0].append(t)
        b[1].append(ph)
    return {k: Point(*v) for k, v in buckets.items()}, family, order


def baselines(points, family):
    """Per line: (time, x) of its baseline. For datagen the one-core run (1 rank x 1 thread) of the same
    family, so every thread count shares one axis of speed-up over one core; otherwise, and when no
    one-core run exists, the line's own smallest point."""
    lines = {}
    for (line, x, label), p in points.items():
        lines.setdefault(line, []).append((x, label, p))
    for v in lines.values():
        v.sort(key=lambda e: e[0])
    base = {}
    for line, pts in lines.items():
        ones = [p for (l2, x, _), p in points.items() if x == 1 and family[l2] == family[line]]
        base[line] = (ones[0].time, 1) if ones else (pts[0][2].time, pts[0][0])
    return lines, base


def plot_scaling(lines, base, order, kind, out, title):
    xlabel = "cores (ranks x threads)" if kind == "datagen" else "ranks (GPUs)"
    xs_all = sorted({x for v in lines.values() for x, _, _ in v})
    table = []
    fig_s, ax_s = plt.subplots(figsize=(7, 5))
    fig_e, ax_e = plt.subplots(figsize=(7, 5))
    for line, pts in sorted(lines.items(), key=lambda kv: order[kv[0]]):
        base_t, base_x = base[line]
        xs = [x for x, _, _ in pts]
        sp = [base_t / p.time for _, _, p in pts]
        lo = [s - base_t / p.tmax for s, (_, _, p) in zip(sp, pts)]
        hi = [base_t / p.tmin - s for s, (_, _, p) in zip(sp, pts)]
        eff = [s / (x / base_x) for s, x in zip(sp, xs)]
        ax_s.errorbar(xs, sp, yerr=[lo, hi], marker="o", capsize=3, label=line)
        ax_e.plot(xs, [100 * e for e in eff], marker="o", label=line)
        for (x, label, p), s, e in zip(pts, sp, eff):
            table.append((line, label, x, p, s, e))
    base_x = min(bx for _, bx in base.values())
    ideal_x = [x for x in xs_all if x >= base_x]
    ax_s.plot(ideal_x, [x / base_x for x in ideal_x], "k--", label="ideal")
    ax_e.axhline(100, color="k", linestyle="--", label="ideal")
    ax_e.set_ylim(bottom=0)
    for ax, fig, name, ylabel in ((ax_s, fig_s, "speedup", "speed-up"),
                                  (ax_e, fig_e, "efficiency", "parallel efficiency (%)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs_all)
        ax.set_xticklabels([str(x) for x in xs_all])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {ylabel}")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(f"{out}-{name}.png", dpi=120)
        plt.close(fig)
    return table


def plot_phases(points, line_order, kind, out, title):
    order = sorted(points.items(), key=lambda kv: (line_order[kv[0][0]], kv[0][1]))
    names = []
    for _, p in order:
        names += [k for k in p.phases if k not in names]
    labels = [k[2] for k, _ in order]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(order) + 2), 5))
    bottom = [0.0] * len(order)
    names = [n for n in names if n != OUTSIDE] + [OUTSIDE]
    for name in names:
        vals = [p.phases.get(name, 0.0) for _, p in order]
        style = {"color": "lightgray", "hatch": "//"} if name == OUTSIDE else {}
        ax.bar(labels, vals, bottom=bottom, label=name, **style)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds per worker (summed phases / cores)" if kind == "datagen" else "seconds per epoch (rank 0)")
    ax.set_title(f"{title}: time by phase")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right")
    fig.tight_layout()
    fig.savefig(f"{out}-phases.png", dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--out", help="prefix of the PNG files (default: the CSV name without .csv)")
    ap.add_argument("--title", help="title of the plots (default: the CSV name)")
    ap.add_argument("--time", choices=["run", "wall"], default="run",
                    help="run: the tool's own timing (datagen's seconds, train's training seconds); "
                         "wall: the harness clock around mpirun, launch included")
    ap.add_argument("--args-hash", help="plot the rows of this args_hash (default: the most common)")
    ap.add_argument("--by", choices=["auto", "threads", "ranks"], default="auto",
                    help="datagen: one line per threads-per-rank or per rank count (auto: the one with fewer lines)")
    a = ap.parse_args()
    stem = a.csv[:-4] if a.csv.endswith(".csv") else a.csv
    out, title = a.out or stem, a.title or stem.rsplit("/", 1)[-1]
    kind, rows = load(a.csv)
    rows = pick_sweep(rows, a.args_hash, a.csv)
    points, family, order = group(rows, kind, "run_s" if a.time == "run" else "wall_s", a.by)
    lines, base = baselines(points, family)
    table = plot_scaling(lines, base, order, kind, out, title)
    plot_phases(points, order, kind, out, title)
    unit = "s" if kind == "datagen" or a.time == "wall" else "us/image"
    scale = 1.0 if unit == "s" else 1e6
    print(f"| line | point | {'cores' if kind == 'datagen' else 'ranks'} | runs | median {unit} | min-max {unit} | speed-up | efficiency |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for line, label, x, p, s, e in table:
        print(f"| {line} | {label} | {x} | {p.runs} | {p.time * scale:.4g} | {p.tmin * scale:.4g}-{p.tmax * scale:.4g} "
              f"| {s:.2f} | {100 * e:.0f} % |")
    print(f"plot_sweep: wrote {out}-speedup.png, {out}-efficiency.png, {out}-phases.png", file=sys.stderr)


if __name__ == "__main__":
    main()
