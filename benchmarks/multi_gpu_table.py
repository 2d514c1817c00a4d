#!/usr/bin/env python3
# The tables of benchmarks/multi_gpu.sh: weak and strong scaling, simulated nodes against one node, and
# PyTorch DDP beside convoy, from the runs' metrics files and pytorch_ddp.py's JSON lines in OUTDIR.
"""multi_gpu_table.py OUTDIR: Markdown on stdout. A convoy run's images/s and input stall are over its
epochs 2 to the last (the first holds the set-up and the graphs' capture); the backward pass, exposed
communication and bytes on the wire per step are the same epochs' means from rank 0's records."""
import json
import os
import re
import sys

from budget_steps import Steps


def epochs(run, name):
    recs = []
    for line in run.text(name, ".jsonl").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") == "epoch":
            recs.append(r)
    return recs


def convoy(run, name):
    """{ips, stall, bwd_ms, exposed_ms, wire_mb} over epochs 2.. (epoch 1 alone if that is all), or None."""
    ep = epochs(run, name)
    later = ep[1:] or ep
    secs = sum(r.get("train_seconds", 0) for r in later)
    if not later or not secs:
        return None
    steps = sum(r.get("global_step", 0) for r in later[-1:]) - (ep[0].get("global_step", 0) if len(ep) > 1 else 0)
    out = {"ips": sum(r["images"] for r in later) / secs,
           "stall": 100 * sum(r.get("input_stall", 0) * r["train_seconds"] for r in later) / secs}
    for phase, key in (("t_bwd", "bwd_ms"), ("t_comm_exposed", "exposed_ms")):
        if steps > 0 and all(phase in r for r in later):
            out[key] = 1000 * sum(r[phase] for r in later) / steps
    wire = [r["comm_bytes_per_step"] for r in later if r.get("comm_bytes_per_step")]
    if wire:
        out["wire_mb"] = wire[-1] / 1e6
    return out


def ddp(run, name):
    for line in reversed(run.text(name).splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def fmt(x, spec=",.0f"):
    return format(x, spec) if x is not None else ""


def names(run, pattern):
    return sorted((m.groups(), n) for n in run.steps for m in [re.fullmatch(pattern, n)] if m)


def weak_table(run):
    print("| net | files | GPUs | img/s | per GPU | weak scaling | input stall | step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = {}
    rows = names(run, r"weak-(\w+)-(\w+)-(\d+)")
    for (net, enc, n), name in sorted(rows, key=lambda x: (x[0][0], x[0][1], int(x[0][2]))):
        c, n = convoy(run, name), int(n)
        if n == 1 and c:
            base[(net, enc)] = c["ips"]
        b = base.get((net, enc))
        eff = f"{100 * c['ips'] / (n * b):.1f} %" if c and b else ""
        print(f"| {net} | {enc} | {n} | {fmt(c and c['ips'])} | {fmt(c and c['ips'] / n)} | {eff} | "
              f"{fmt(c and c['stall'], '.2f')} % | {run.status(name)} |")


def strong_table(run):
    rows = names(run, r"strong-(\w+)-(\d+)")
    if not rows:
        return
    print("\n| net | GPUs | global batch | img/s | strong scaling | input stall | step |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = {}
    for (net, n), name in sorted(rows, key=lambda x: (x[0][0], int(x[0][1]))):
        c, n = convoy(run, name), int(n)
        if n == 1 and c:
            base[net] = c["ips"]
        eff = f"{100 * c['ips'] / (n * base[net]):.1f} %" if c and base.get(net) else ""
        print(f"| {net} | {n} | {os.environ.get('STRONG_BATCH', 512)} | {fmt(c and c['ips'])} | {eff} | "
              f"{fmt(c and c['stall'], '.2f')} % | {run.status(name)} |")


def nodes_table(run):
    rows = names(run, r"nodes-(\w+)-(\d+)x(\d+)")
    if not rows:
        return
    print("\n| net | nodes x GPUs | one node img/s | simulated nodes img/s | ratio | backward ms/step, one node / "
          "simulated | exposed comm ms/step | MB/step on the wire | PyTorch DDP (bf16 hook) | convoy / DDP | step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (net, nodes, per), name in rows:
        n = int(nodes) * int(per)
        one, sim = convoy(run, f"weak-{net}-jpeg-{n}"), convoy(run, name)
        d = ddp(run, f"ddp-{net}-{nodes}x{per}")
        ratio = f"{100 * sim['ips'] / one['ips']:.1f} %" if one and sim else ""
        vs = f"{sim['ips'] / d['images_per_s']:.2f}x" if sim and d else ""
        bwd = f"{fmt(one and one.get('bwd_ms'), '.2f')} / {fmt(sim and sim.get('bwd_ms'), '.2f')}"
        print(f"| {net} | {nodes}x{per} | {fmt(one and one['ips'])} | {fmt(sim and sim['ips'])} | {ratio} | {bwd} | "
              f"{fmt(sim and sim.get('exposed_ms'), '.1f')} | {fmt(sim and sim.get('wire_mb'), '.1f')} | "
              f"{fmt(d and d['images_per_s'])} | {vs} | {run.status(name)} |")


def ddp_table(run):
    rows = names(run, r"ddp-(\w+)-(\w+)")
    if not rows:
        return
    print("\n| PyTorch DDP | GPUs | hook | img/s | ms/step | compile s | convoy JPEG img/s, same GPUs | convoy / DDP |"
          " step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (net, where), name in rows:
        d = ddp(run, name)
        layout = where.split("_")[0]  # ddp-NET-2x1_powersgd: another hook on the same layout
        conv = convoy(run, f"weak-{net}-jpeg-{layout}") if layout.isdigit() else convoy(run, f"nodes-{net}-{layout}")
        vs = f"{conv['ips'] / d['images_per_s']:.2f}x" if conv and d else ""
        print(f"| {net} | {where} | {d and d['hook'] or ''} | {fmt(d and d['images_per_s'])} | "
              f"{fmt(d and d['ms_per_step'], '.1f')} | {fmt(d and d['compile_seconds'], '.0f')} | "
              f"{fmt(conv and conv['ips'])} | {vs} | {run.status(name)} |")


def main():
    out = sys.argv[1]
    run = Steps(out)
    head = open(os.path.join(out, "machine.txt")).read().splitlines() if os.path.exists(
        os.path.join(out, "machine.txt")) else []
    print(f"multi_gpu.sh: {head[0] if head else ''}; " + "; ".join(l for l in head if l.startswith("GPU ")) + "\n")
    weak_table(run)
    strong_table(run)
    nodes_table(run)
    ddp_table(run)
    print("\n| step | status |\n| --- | --- |")
    for name in run.steps:
        print(f"| {name} | {run.status(name)} |")


if __name__ == "__main__":
    main()
