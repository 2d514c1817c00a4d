#!/usr/bin/env python3
# The iteration-time model of a data-parallel training step (t_iter = t_io + t_h2d + t_f + t_b + t_u + t_comm, of
# t_comm only the part the backward pass does not hide): from one run's metrics, images/s at other GPU and node counts.
"""Predicts a training step's time and images/s at G GPUs a node and M nodes from one measured run.

    iteration_model.py m.jsonl --gpus 1,2,4 --nodes 1,2 --intra-busbw 250 --link-gbps 25 \
        [--profile-metrics mp.jsonl] [--measured 2x1=m2.jsonl --measured 1x2=m2n.jsonl] [--fit 1x2=m2n.jsonl]

m.jsonl is `train --metrics`'s file of one run (1 GPU, or N GPUs of one node): its "comm_plan" record (the
all-reduce buckets' bytes on the wire, in the order they are sent, and where in the backward pass each is
ready) and its epoch records (per-step phase times). The model, per step:

    t_iter = t_io + t_h2d + t_fwd + t_bwd + t_comm_exposed + t_update

t_io is what the run's step spent beyond its GPU phases (waiting for the input or the host: train_seconds /
steps less the other phases); t_h2d, t_fwd and t_bwd are taken from the run as they are (the batch per GPU
stays the same: weak scaling). One all-reduce of b bytes (a bucket) over G GPUs a node and M nodes takes

    T(b) = alpha + 2 (G - 1) / G * b / B_intra + 2 (M - 1) / M * b / B_inter

a hierarchical all-reduce: a ring reduce-scatter and all-gather inside each node (each GPU sends (G-1)/G of b
each way) and, between them, the all-reduce of the nodes' shards over the nodes' link, which one node's G
GPUs share (its shards add up to b); B_intra and B_inter are all-reduce bus bandwidths as nccl-tests reports
them (busbw = 2 (n-1)/n x bytes / time), B_inter of one rank a node over the link. G = 1 or M = 1 leaves
the plain ring of 2 (n-1)/n * b / B. (--flat-ring: NCCL's ring through all G*M ranks instead, every edge
at the link's rate: 2 (n-1)/n * b / B_inter for M > 1.)

Across nodes the buckets carry the wire train chooses there (--between-nodes; default auto, as `train
--grad-comm auto` on GPUs that sum fp8: a byte a gradient, unless the run sent fp32), whatever the base
run sent inside its node, in the buckets train plans for that wire (--bucket-mb; its default is 32 MiB of
fp32 gradients for fp8, int4 and fp8-int4, 8 for bf16 and fp32): the base run's buckets merged by train's rule. fp8's scales (the
buckets' largest magnitudes of the step before) ride on the verdict's all-reduce, so its buckets cost what
their bytes do.

The buckets go out one after another on one stream (train's GradientSync): bucket i, ready at r_i = f_i *
t_bwd after the backward pass starts, starts at max(r_i, end of bucket i-1); what ends after the backward
pass is exposed: t_comm_exposed = max(0, end of the last bucket - t_bwd). A run without overlap (the CPU
backend) sends its one all-reduce after the backward pass. With per-bucket updates, bucket i's share of the
update (t_u x its elements / all) follows its all-reduce on a stream of its own; t_update is what of them
ends after the last all-reduce (or the backward pass). f_i: the bucket's ready share of the backward pass,
from `train --profile`'s per-node backward seconds ("bucket_ready_profile" in an epoch record) where a run
gives it, else from the nodes' FLOPs ("bucket_ready_flops" in the comm_plan record).

--measured GxM=FILE sets a run of G GPUs a node on M nodes beside its prediction (images/s and the error;
its t_comm_exposed in brackets). --fit GxM=FILE instead takes the link's bus bandwidth (between the nodes for
M > 1, else inside the node) that makes the prediction at GxM that run's images/s: what the link moves while
the GPUs compute, which can be well below what an all-reduce benchmark on idle GPUs reports (NCCL's sockets
on loopback between four simulated nodes: 3.37 GB/s and 346 us an all-reduce idle, about 2.07 GB/s during
training). A fit says nothing of its own configuration; it is a test of the model at the others.
"""
import argparse
import json
import sys
from dataclasses import dataclass, field, replace


class BadInput(Exception):
    """One line naming the file or flag and the problem."""


@dataclass
class Run:
    """One run's per-step figures (seconds, rank 0) and its all-reduce plan."""
    path: str
    ranks: int
    local_batch: int
    t_iter: float
    t_io: float  # the step's time beyond its GPU phases: input stall and host
    t_h2d: float
    t_fwd: float
    t_bwd: float
    t_update: float
    t_comm_exposed: float
    images_per_second: float
    bucket_bytes: list
    bucket_elements: list
    ready: list  # each bucket's ready share of the backward pass
    ready_source: str
    overlap: bool
    bucket_updates: bool
    epochs: list = field(default_factory=list)
    grad_comm: str = "bf16"  # the wire the run's all-reduces used


@dataclass
class Link:
    intra_busbw: float  # bytes/s
    inter_busbw: float  # bytes/s
    latency: float = 0.0  # seconds an all-reduce
    flat_ring: bool = False
    between_nodes: str = "auto"  # the wire across nodes: auto, as-run or one of WIRE_BYTES
    bucket_mb: float = 0.0  # train's --bucket-mb across nodes; 0: its default for that wire


@dataclass
class Prediction:
    gpus: int
    nodes: int
    t_io: float
    t_h2d: float
    t_fwd: float
    t_bwd: float
    t_comm: float  # every all-reduce's time, hidden or not
    t_comm_exposed: float
    t_update: float
    t_iter: float
    images_per_second: float


def read_records(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise BadInput(f"{path}: line {n} is not JSON ({e.msg})")
    return out


def timed_epochs(epochs, first):
    """The epoch records from epoch `first` on (the first carries the set-up), or the last when none is."""
    kept = [e for e in epochs if e.get("epoch", 0) >= first]
    return kept or epochs[-1:]


PHASES = ("t_h2d", "t_fwd", "t_bwd", "t_update", "t_comm_exposed")


def per_step(epochs, global_batch, phases=PHASES):
    """(steps, images/s, {phase: seconds a step}) over these epoch records at this global batch; steps is
    0 where they trained no images or took no time."""
    images = sum(e["images"] for e in epochs)
    seconds = sum(e["train_seconds"] for e in epochs)
    steps = images / global_batch
    if steps <= 0 or seconds <= 0:
        return 0, 0.0, {}
    return steps, images / seconds, {k: sum(e.get(k, 0.0) for e in epochs) / steps for k in phases}


def load_run(path, first_epoch=2, ready_from=None):
    """The run's comm_plan and its timed epochs summed into per-step figures."""
    records = read_records(path)
    plans = [r for r in records if r.get("kind") == "comm_plan"]
    if not plans:
        raise BadInput(f"{path}: no comm_plan record (written by train --metrics since the iteration model)")
    plan = plans[-1]
    epochs = [r for r in records if r.get("kind") == "epoch"]
    if not epochs:
        raise BadInput(f"{path}: no epoch record (the run ended before its first epoch)")
    used = timed_epochs(epochs, first_epoch)
    ranks, batch = int(plan["ranks"]), int(plan["local_batch"])
    steps, images_per_second, per = per_step(used, ranks * batch)
    if steps <= 0:
        raise BadInput(f"{path}: its timed epochs trained no images")
    seconds = sum(e["train_seconds"] for e in used)
    t_iter = seconds / steps
    gpu = per["t_h2d"] + per["t_fwd"] + per["t_bwd"] + per["t_update"] + per["t_comm_exposed"]
    ready, source = plan["bucket_ready_flops"], "FLOPs"
    for rec in [r for src in (ready_from or []) for r in read_records(src)] + records:
        if rec.get("kind") == "epoch" and rec.get("bucket_ready_profile"):
            ready, source = rec["bucket_ready_profile"], "profile"
    if len(ready) != len(plan["bucket_bytes"]):
        raise BadInput(f"{path}: {len(ready)} ready shares for {len(plan['bucket_bytes'])} buckets "
                       "(the profile run's bucket plan differs)")
    return Run(path=path, ranks=ranks, local_batch=batch, t_iter=t_iter, t_io=max(0.0, t_iter - gpu),
               t_h2d=per["t_h2d"], t_fwd=per["t_fwd"], t_bwd=per["t_bwd"], t_update=per["t_update"],
               t_comm_exposed=per["t_comm_exposed"], images_per_second=images_per_second,
               bucket_bytes=[float(b) for b in plan["bucket_bytes"]],
               bucket_elements=[float(e) for e in plan["bucket_elements"]], ready=[float(f) for f in ready],
               ready_source=source, overlap=bool(plan["overlap"]), bucket_updates=bool(plan["bucket_updates"]),
               epochs=[e["epoch"] for e in used], grad_comm=plan.get("grad_comm", "bf16"))


def allreduce_seconds(nbytes, gpus, nodes, link):
    """T(b) above: hierarchical (or --flat-ring) all-reduce of nbytes over gpus a node and nodes."""
    if gpus * nodes == 1:
        return 0.0
    if link.flat_ring and nodes > 1:
        n = gpus * nodes
        return link.latency + 2 * (n - 1) / n * nbytes / link.inter_busbw
    t = link.latency
    if gpus > 1:
        t += 2 * (gpus - 1) / gpus * nbytes / link.intra_busbw
    if nodes > 1:
        t += 2 * (nodes - 1) / nodes * nbytes / link.inter_busbw
    return t


def full_update_seconds(run):
    """The whole update's time: the run's t_update where it ran as one (one rank, or no bucket updates);
    from a run with bucket updates, whose t_update is only the last bucket's (the rest hidden), scaled by
    the elements."""
    if run.ranks == 1 or not run.bucket_updates or not run.bucket_elements:
        return run.t_update
    return run.t_update * sum(run.bucket_elements) / run.bucket_elements[-1]


def bucket_ends(run, costs, latency):
    """When each bucket's all-reduce ends, from the backward pass's start: one after another on one stream,
    each from its bucket's ready time on (or from the backward pass's end, without overlap), after the
    all-reduce of the verdict on the loss that begins the backward pass."""
    end, ends = latency, []
    for ready, cost in zip(run.ready, costs):
        end = max(ready * run.t_bwd if run.overlap else run.t_bwd, end) + cost
        ends.append(end)
    return ends


# Bytes a gradient as an all-reduce's: int4's all-to-all and all-gather send 0.5625 each way, fp8-int4 a byte
# there and 0.5625 back; the model charges them a ring's rate and one latency a bucket, as the others.
WIRE_BYTES = {"fp8": 1, "bf16": 2, "fp32": 4, "int4": 0.5625, "fp8-int4": 0.78125}
DEFAULT_BUCKET_MB = {"fp8": 32.0, "bf16": 8.0, "fp32": 8.0, "int4": 32.0, "fp8-int4": 32.0}  # train's --bucket-mb


def wire_between_nodes(run, link):
    """The gradients' wire once the ranks span nodes: --between-nodes as given; auto is train's --grad-comm
    auto on GPUs that sum fp8 (fp8, unless the run sent fp32); as-run the run's own."""
    if link.between_nodes == "as-run":
        return run.grad_comm
    if link.between_nodes == "auto":
        return "fp32" if run.grad_comm == "fp32" else "fp8"
    return link.between_nodes


def regroup(elements, ready, bucket_mb):
    """Buckets merged as train plans them at bucket_mb MiB of fp32 gradients (bucket_plan.cpp: a bucket
    closes once it holds half of what is left, within bucket_mb / 16 to bucket_mb), each ready when its last
    member is: (elements, ready shares). The members are the base run's buckets, so a boundary train would
    draw inside one of them falls at its end."""
    most = max(1, int(bucket_mb * (1 << 20)) // 4)
    least = max(1, most // 16)
    left = sum(elements)
    out_e, out_r = [], []
    open_e, open_r = 0, 0.0
    for e, r in zip(elements, ready):
        if open_e and open_e + e > most:
            out_e.append(open_e), out_r.append(open_r)
            open_e = 0
        open_e, open_r = open_e + e, r
        left -= e
        if open_e >= min(max(left // 2, least), most):
            out_e.append(open_e), out_r.append(open_r)
            open_e = 0
    if open_e:
        out_e.append(open_e), out_r.append(open_r)
    return out_e, out_r


def between_nodes_run(run, link):
    """The run as its step goes across nodes: the wire there and, where that wire's bucket size differs
    from the base run's (train's defaults: 32 MiB for fp8, 8 for bf16 and fp32), the buckets regrouped."""
    wire = wire_between_nodes(run, link)
    mb, base_mb = link.bucket_mb or DEFAULT_BUCKET_MB[wire], DEFAULT_BUCKET_MB[run.grad_comm]
    elements, ready = run.bucket_elements, run.ready
    if mb > base_mb:
        elements, ready = regroup([int(e) for e in elements], ready, mb)
    elif mb < base_mb:
        raise BadInput(f"--bucket-mb {mb:g}: below the base run's {base_mb:g} MiB buckets, which the model cannot split")
    return replace(run, bucket_elements=[float(e) for e in elements], ready=list(ready),
                   bucket_bytes=[float(e) * WIRE_BYTES[wire] for e in elements])


def bucket_costs(run, gpus, nodes, link):
    """Each bucket's all-reduce seconds: its bytes on the wire the step sends at this layout (across
    nodes, run is between_nodes_run's)."""
    return [allreduce_seconds(b, gpus, nodes, link) for b in run.bucket_bytes]


def comm_timeline(run, gpus, nodes, link):
    """(all-reduce seconds in all, exposed seconds, update seconds after the comm) for one step."""
    u_all = full_update_seconds(run)
    if gpus * nodes == 1:
        return 0.0, 0.0, u_all
    costs = bucket_costs(run, gpus, nodes, link)
    ends = bucket_ends(run, costs, link.latency)
    comm_done = max([run.t_bwd] + ends)
    if not run.bucket_updates:
        return sum(costs), comm_done - run.t_bwd, u_all
    # Each bucket's share of the update follows its all-reduce, one after another on one stream.
    total, u_end = sum(run.bucket_elements), 0.0
    for e, elems in zip(ends, run.bucket_elements):
        u_end = max(u_end, e) + u_all * elems / total
    return sum(costs), comm_done - run.t_bwd, max(0.0, u_end - comm_done)


def predict(run, gpus, nodes, link):
    if nodes > 1:
        run = between_nodes_run(run, link)
    t_comm, exposed, t_u = comm_timeline(run, gpus, nodes, link)
    t_iter = run.t_io + run.t_h2d + run.t_fwd + run.t_bwd + exposed + t_u
    return Prediction(gpus=gpus, nodes=nodes, t_io=run.t_io, t_h2d=run.t_h2d, t_fwd=run.t_fwd, t_bwd=run.t_bwd,
                      t_comm=t_comm, t_comm_exposed=exposed, t_update=t_u, t_iter=t_iter,
                      images_per_second=gpus * nodes * run.local_batch / t_iter)


def fit_bandwidth(run, gpus, nodes, link, measured_img_s):
    """The link whose bus bandwidth (between the nodes for nodes > 1, else inside the node) makes the
    predicted images/s at gpus x nodes the measured: a bisection on a log scale, as the prediction only
    grows with the bandwidth. None where no bandwidth from 10 MB/s to 100 TB/s reaches it."""
    between = nodes > 1

    def with_bw(bw):
        return replace(link, intra_busbw=link.intra_busbw if between else bw,
                       inter_busbw=bw if between else link.inter_busbw)

    lo, hi = 1e7, 1e14
    if not (predict(run, gpus, nodes, with_bw(lo)).images_per_second <= measured_img_s
            <= predict(run, gpus, nodes, with_bw(hi)).images_per_second):
        return None
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        if predict(run, gpus, nodes, with_bw(mid)).images_per_second < measured_img_s:
            lo = mid
        else:
            hi = mid
    return with_bw((lo * hi) ** 0.5)


def error(predicted, measured):
    return (predicted - measured) / measured


def int_list(text, flag):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise BadInput(f"{flag}: {text!r} is not a comma-separated list of counts")
    if any(v < 1 for v in values):
        raise BadInput(f"{flag}: {text!r}: counts start at 1")
    return values


def measured_spec(text):
    """--measured GxM=FILE: G GPUs a node, M nodes."""
    shape, sep, path = text.partition("=")
    g, x, m = shape.partition("x")
    if not sep or not x or not path or not g.isdigit() or not m.isdigit() or int(g) < 1 or int(m) < 1:
        raise BadInput(f"--measured: {text!r} is not GxM=FILE (G GPUs a node, M nodes, e.g. 2x1=m.jsonl)")
    return int(g), int(m), path


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("metrics", help="train --metrics file of the run the model starts from")
    p.add_argument("--gpus", default="1,2", help="GPUs a node to predict, comma-separated (default 1,2)")
    p.add_argument("--nodes", default="1", help="nodes to predict, comma-separated (default 1)")
    p.add_argument("--intra-busbw", type=float, default=250.0,
                   help="all-reduce bus bandwidth inside a node, GB/s (default 250: NVLink)")
    p.add_argument("--inter-busbw", type=float, help="all-reduce bus bandwidth between nodes, GB/s")
    p.add_argument("--link-gbps", type=float,
                   help="the link between nodes as a line rate in Gb/s (bus bandwidth = rate / 8 GB/s)")
    p.add_argument("--latency-us", type=float, default=0.0, help="fixed cost of one all-reduce, us (default 0)")
    p.add_argument("--flat-ring", action="store_true", help="one ring through every rank across the nodes")
    p.add_argument("--between-nodes", choices=["auto", "as-run", *WIRE_BYTES], default="auto",
                   help="the gradients' wire once the ranks span nodes (default auto: train's --grad-comm auto on GPUs "
                        "that sum fp8, fp8 unless the run sent fp32; as-run: the run's own)")
    p.add_argument("--bucket-mb", type=float, default=0.0,
                   help="train's --bucket-mb across nodes (default: its default for that wire, 32 for fp8, 8 for bf16 "
                        "and fp32); the base run's buckets are merged up to it")
    p.add_argument("--profile-metrics", action="append", default=[],
                   help="a train --profile run's metrics: its buckets' ready shares (else the FLOPs')")
    p.add_argument("--measured", action="append", default=[], metavar="GxM=FILE",
                   help="a measured run of G GPUs a node on M nodes, to set beside its prediction")
    p.add_argument("--fit", metavar="GxM=FILE",
                   help="a measured run whose images/s sets the link's bus bandwidth (between the nodes for M > 1, "
                        "else inside): the bandwidth the link moves while the GPUs compute")
    p.add_argument("--first-epoch", type=int, default=2,
                   help="epochs from this one on are timed (default 2: the first carries the set-up)")
    a = p.parse_args(argv)
    if a.inter_busbw is not None and a.link_gbps is not None:
        raise BadInput("--inter-busbw and --link-gbps: give one")
    inter = a.inter_busbw if a.inter_busbw is not None else (a.link_gbps / 8 if a.link_gbps is not None else None)
    for flag, v in (("--intra-busbw", a.intra_busbw), ("--inter-busbw/--link-gbps", inter)):
        if v is not None and not v > 0:
            raise BadInput(f"{flag}: {v} is not a bandwidth above 0")
    if a.latency_us < 0:
        raise BadInput(f"--latency-us: {a.latency_us} is below 0")
    if a.bucket_mb < 0:
        raise BadInput(f"--bucket-mb: {a.bucket_mb} is below 0")
    a.gpu_list, a.node_list = int_list(a.gpus, "--gpus"), int_list(a.nodes, "--nodes")
    a.measured = [measured_spec(m) for m in a.measured]
    a.fit = measured_spec(a.fit) if a.fit else None
    if inter is None and a.fit and a.fit[1] > 1:
        inter = 1.0  # set by the fit
    if inter is None and (max(a.node_list) > 1 or any(m > 1 for _, m, _ in a.measured)):
        raise BadInput("--inter-busbw or --link-gbps: needed for more than one node")
    a.link = Link(intra_busbw=a.intra_busbw * 1e9, inter_busbw=(inter or 0.0) * 1e9, latency=a.latency_us * 1e-6,
                  flat_ring=a.flat_ring, between_nodes=a.between_nodes, bucket_mb=a.bucket_mb)
    return a


def check_measured(mr, gpus, nodes, run):
    if mr.ranks != gpus * nodes:
        raise BadInput(f"{mr.path}: a run of {mr.ranks} rank(s), given as {gpus}x{nodes}")
    if mr.local_batch != run.local_batch:
        raise BadInput(f"{mr.path}: {mr.local_batch} a GPU, the base run {run.local_batch}")
    return mr


def ms(s):
    return f"{1e3 * s:.2f}"


def describe(run, link):
    inter = f"inter {link.inter_busbw / 1e9:g} GB/s" if link.inter_busbw else "no link between nodes given"
    bw = f"bus bandwidth intra {link.intra_busbw / 1e9:g} GB/s, {inter}"
    return (f"base {run.path}: {run.ranks} rank(s) x {run.local_batch}, epochs {run.epochs}, "
            f"{run.images_per_second:,.0f} img/s; {len(run.bucket_bytes)} buckets, {sum(run.bucket_bytes) / 1e6:.1f} "
            f"MB a step in {run.grad_comm} ({wire_between_nodes(run, link)} between nodes), ready shares from "
            f"{run.ready_source}; {bw}, {link.latency * 1e6:g} us an all-reduce"
            f"{', flat ring' if link.flat_ring else ', hierarchical'}\n"
            f"measured ms/step: t_io {ms(run.t_io)}, t_h2d {ms(run.t_h2d)}, t_fwd {ms(run.t_fwd)}, "
            f"t_bwd {ms(run.t_bwd)}, t_comm_exposed {ms(run.t_comm_exposed)}, t_update {ms(run.t_update)}, "
            f"t_iter {ms(run.t_iter)}")


HEADER = ("| GPUs x nodes | t_io | t_h2d | t_fwd | t_bwd | t_comm (all) | t_comm_exposed | t_update | t_iter "
          "| predicted img/s | measured img/s | error |")


def row(p, measured=None):
    meas = " | "
    if measured:
        err = error(p.images_per_second, measured.images_per_second)
        meas = f"{measured.images_per_second:,.0f} | {100 * err:+.1f} %"
    exposed = ms(p.t_comm_exposed) + (f" ({ms(measured.t_comm_exposed)})" if measured else "")
    return (f"| {p.gpus} x {p.nodes} | {ms(p.t_io)} | {ms(p.t_h2d)} | {ms(p.t_fwd)} | {ms(p.t_bwd)} | {ms(p.t_comm)} "
            f"| {exposed} | {ms(p.t_update)} | {ms(p.t_iter)} | {p.images_per_second:,.0f} | {meas} |")


def main(argv=None):
    try:
        a = parse_args(argv)
        run = load_run(a.metrics, a.first_epoch, a.profile_metrics)
        measured = {(g, m): check_measured(load_run(path, a.first_epoch), g, m, run) for g, m, path in a.measured}
        if a.fit:
            g, m, path = a.fit
            fitted = check_measured(load_run(path, a.first_epoch), g, m, run)
            a.link = fit_bandwidth(run, g, m, a.link, fitted.images_per_second)
            if a.link is None:
                raise BadInput(f"{path}: {fitted.images_per_second:,.0f} img/s is beyond the model at any bandwidth "
                               "(its other phases differ from the base run's)")
            print(f"fitted to {path} ({g}x{m}, {fitted.images_per_second:,.0f} img/s)")
    except BadInput as e:
        print(f"iteration_model.py: {e}", file=sys.stderr)
        return 2
    print(describe(run, a.link))
    print("ms a step (measured t_comm_exposed in brackets)\n")
    print(HEADER)
    print("|" + " --- |" * (HEADER.count("|") - 1))
    configs = [(g, m) for m in a.node_list for g in a.gpu_list]
    configs += [c for c in measured if c not in configs]
    worst = 0.0
    for g, m in configs:
        p = predict(run, g, m, a.link)
        mr = measured.get((g, m))
        if mr:
            worst = max(worst, abs(error(p.images_per_second, mr.images_per_second)))
        print(row(p, mr))
    if measured:
        print(f"\nlargest error: {100 * worst:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
