# scripts/iteration_model.py on synthetic metrics files: per-step figures from the timed epochs, the
# all-reduce cost, and the exposed part with no overlap, full overlap and partial overlap, computed by hand.
import json

import pytest

import iteration_model as im

# One rank of 100 images a step; each timed epoch 10 steps. Per step: t_h2d 0.1, t_fwd 1, t_bwd 2,
# t_update 0.2, nothing exposed, t_iter 3.5 s, so t_io (the rest) 0.2 s. Two buckets of 1 GB on the wire.
STEP = {"t_h2d": 0.1, "t_fwd": 1.0, "t_bwd": 2.0, "t_update": 0.2, "t_comm_exposed": 0.0}


def plan(ranks=1, ready=(0.5, 1.0), overlap=True, bucket_updates=False, elements=(5e8, 5e8), nbytes=(1e9, 1e9),
         grad_comm="bf16"):
    return {"kind": "comm_plan", "ranks": ranks, "local_batch": 100, "params": sum(elements), "grad_comm": grad_comm,
            "overlap": overlap, "bucket_updates": bucket_updates, "bucket_elements": list(elements),
            "bucket_bytes": list(nbytes), "bucket_ready_flops": list(ready)}


def epoch(n, ranks=1, steps=10, t_iter=3.5, **over):
    phases = dict(STEP, **over)
    images = steps * 100 * ranks
    rec = {"kind": "epoch", "epoch": n, "images": images, "train_seconds": steps * t_iter,
           "images_per_second": images / (steps * t_iter)}
    rec.update({k: v * steps for k, v in phases.items()})
    return rec


def write(tmp_path, name, *records):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def base(tmp_path, **plan_kw):
    # Epoch 1 carries the set-up (slow, and left out); epoch 2 is timed.
    return im.load_run(write(tmp_path, "m.jsonl", plan(**plan_kw), epoch(1, t_iter=9.0), epoch(2)))


def link(intra=1.0, inter=1.0, latency=0.0, flat=False, between="as-run"):
    return im.Link(intra_busbw=intra * 1e9, inter_busbw=inter * 1e9, latency=latency, flat_ring=flat,
                   between_nodes=between)


def test_per_step_figures_from_the_timed_epochs(tmp_path):
    run = base(tmp_path)
    assert run.epochs == [2]
    assert run.t_iter == pytest.approx(3.5)
    assert run.t_bwd == pytest.approx(2.0)
    assert run.t_io == pytest.approx(0.2)  # 3.5 - (0.1 + 1 + 2 + 0.2)
    assert run.ready == [0.5, 1.0] and run.ready_source == "FLOPs"


def test_one_gpu_predicts_the_run_itself(tmp_path):
    p = im.predict(base(tmp_path), 1, 1, link())
    assert p.t_iter == pytest.approx(3.5)
    assert p.images_per_second == pytest.approx(100 / 3.5)


def test_allreduce_cost_ring_and_hierarchical():
    assert im.allreduce_seconds(1e9, 2, 1, link(intra=1)) == pytest.approx(1.0)  # 2 (1/2) 1 GB / 1 GB/s
    assert im.allreduce_seconds(1e9, 4, 1, link(intra=1)) == pytest.approx(1.5)
    assert im.allreduce_seconds(1e9, 1, 4, link(inter=1)) == pytest.approx(1.5)
    # 2 GPUs x 2 nodes: 2 (1/2) 1 GB / 10 GB/s inside, 2 (1/2) 1 GB / 1 GB/s between the nodes.
    assert im.allreduce_seconds(1e9, 2, 2, link(intra=10, inter=1)) == pytest.approx(1.1)
    assert im.allreduce_seconds(1e9, 2, 2, link(intra=10, inter=1, flat=True)) == pytest.approx(1.5)
    assert im.allreduce_seconds(1e9, 2, 1, link(intra=1, latency=0.5)) == pytest.approx(1.5)
    assert im.allreduce_seconds(1e9, 1, 1, link()) == 0.0


def test_no_overlap_exposes_every_allreduce(tmp_path):
    # Both 1 s all-reduces after the 2 s backward pass: 2 s exposed.
    p = im.predict(base(tmp_path, overlap=False), 2, 1, link(intra=1))
    assert p.t_comm == pytest.approx(2.0)
    assert p.t_comm_exposed == pytest.approx(2.0)
    assert p.t_iter == pytest.approx(5.5)
    assert p.images_per_second == pytest.approx(200 / 5.5)


def test_full_overlap_hides_the_allreduces(tmp_path):
    # Ready at 0.2 and 0.4 s, 0.25 s each: done at 0.45 and 0.7 s, inside the 2 s backward pass.
    p = im.predict(base(tmp_path, ready=(0.1, 0.2)), 2, 1, link(intra=4))
    assert p.t_comm == pytest.approx(0.5)
    assert p.t_comm_exposed == pytest.approx(0.0)
    assert p.images_per_second == pytest.approx(200 / 3.5)


def test_partial_overlap(tmp_path):
    # Ready at 1 and 2 s, 1 s each: the first ends at 2 s, the second starts at 2 and ends at 3: 1 s exposed.
    run = base(tmp_path)
    p = im.predict(run, 2, 1, link(intra=1))
    assert p.t_comm_exposed == pytest.approx(1.0)
    assert p.t_iter == pytest.approx(4.5)
    # Across 2 nodes of 2 GPUs, 1.1 s each: ends at 2.1 and 3.2 s, 1.2 s exposed.
    p = im.predict(run, 2, 2, link(intra=10, inter=1))
    assert p.t_comm_exposed == pytest.approx(1.2)
    assert p.images_per_second == pytest.approx(400 / 4.7)
    # A queue: ready at 0.2 and 0.4 s, 1 s each: ends at 1.2, then 2.2 s: 0.2 s exposed.
    p = im.predict(base(tmp_path, ready=(0.1, 0.2)), 2, 1, link(intra=1))
    assert p.t_comm_exposed == pytest.approx(0.2)


def test_latency_and_the_verdicts_allreduce(tmp_path):
    # The verdict's all-reduce takes 0.5 s from the start; the buckets 0.75 s each, ready at 1 and 2 s:
    # ends at 1.75 and 2.75 s.
    p = im.predict(base(tmp_path), 2, 1, link(intra=4, latency=0.5))
    assert p.t_comm_exposed == pytest.approx(0.75)


def test_between_nodes_the_wire_train_chooses(tmp_path):
    # 2 nodes of 1 GPU at 1 GB/s, 0.1 s an all-reduce; buckets of 5e8 gradients ready at 1 and 2 s, after the
    # verdict's all-reduce (ends at 0.1 s). As run (bf16, 1 GB): 1.1 s each, ends 2.1, 3.2: 1.2 s exposed.
    run = base(tmp_path)
    assert im.predict(run, 1, 2, link(latency=0.1)).t_comm_exposed == pytest.approx(1.2)
    # auto: fp8, 0.5 GB (the scales ride on the verdict): 0.6 s each, ends 1.6, 2.6: 0.6 s exposed.
    assert im.predict(run, 1, 2, link(latency=0.1, between="auto")).t_comm_exposed == pytest.approx(0.6)
    assert im.predict(run, 1, 2, link(latency=0.1, between="fp8")).t_comm_exposed == pytest.approx(0.6)
    # int4: 0.5625 bytes a gradient, 0.28 GB: 0.38 s each, ends 1.38, 2.38; fp8-int4 0.78125: 0.49 s.
    assert im.predict(run, 1, 2, link(latency=0.1, between="int4")).t_comm_exposed == pytest.approx(0.38125)
    assert im.predict(run, 1, 2, link(latency=0.1, between="fp8-int4")).t_comm_exposed == pytest.approx(0.490625)
    # One node keeps the run's own wire, whatever --between-nodes says.
    assert im.predict(run, 2, 1, link(latency=0.1, between="fp8")).t_comm_exposed == pytest.approx(1.2)
    # A run that sent fp32 stays fp32 under auto: 2 GB, 2.1 s each: ends 3.1, 5.2: 3.2 s exposed.
    fp32 = im.load_run(write(tmp_path, "f.jsonl", plan(nbytes=(2e9, 2e9), grad_comm="fp32"), epoch(2)))
    assert im.predict(fp32, 1, 2, link(latency=0.1, between="auto")).t_comm_exposed == pytest.approx(3.2)


def test_regroup_follows_trains_bucket_plan():
    # ResNet-18's 12 bf16 buckets (8 MiB) regrouped at fp8's 32 MiB: a bucket closes once it holds half of
    # what is left (at least 2 MiB of gradients); train's own plan there begins 4771940, 2492416, 1771008,
    # 1213952 and then splits inside the 303872 bucket, which the model cannot (590848 + 387648 in train).
    elements = [52324, 2359296, 1024, 2359296, 133120, 2359296, 1771008, 1213952, 443136, 303872, 147968, 83520]
    ready = [0.0, 0.06, 0.06, 0.13, 0.13, 0.19, 0.29, 0.42, 0.52, 0.65, 0.81, 1.0]
    merged, when = im.regroup(elements, ready, 32)
    assert merged == [4771940, 2492416, 1771008, 1213952, 747008, 231488]
    assert when == [0.13, 0.19, 0.29, 0.42, 0.65, 1.0]
    assert sum(merged) == sum(elements)
    assert im.regroup(elements, ready, 8) == (elements, ready)


def test_between_nodes_the_buckets_train_sends_there(tmp_path):
    # Four bf16 buckets of 1e6 gradients; across nodes fp8 at 32 MiB: [2e6, 1e6, 1e6], each ready with its last.
    run = base(tmp_path, elements=(1e6,) * 4, nbytes=(2e6,) * 4, ready=(0.25, 0.5, 0.75, 1.0))
    across = im.between_nodes_run(run, link(between="auto"))
    assert across.bucket_elements == [2e6, 1e6, 1e6]
    assert across.ready == [0.5, 0.75, 1.0]
    assert across.bucket_bytes == [2e6, 1e6, 1e6]
    # With the run's own bf16 wire the buckets stay as they were; a smaller --bucket-mb cannot be had.
    assert im.between_nodes_run(run, link(between="as-run")).bucket_elements == [1e6] * 4
    with pytest.raises(im.BadInput, match="--bucket-mb 4"):
        im.between_nodes_run(run, im.Link(1e9, 1e9, between_nodes="auto", bucket_mb=4))


def test_bucket_updates_leave_the_last_buckets_update(tmp_path):
    # The update (0.2 s) in halves after each all-reduce: after 2 s, 2.1; after 3 s, 3.1: 0.1 s after the comm.
    p = im.predict(base(tmp_path, bucket_updates=True), 2, 1, link(intra=1))
    assert p.t_update == pytest.approx(0.1)
    assert p.t_iter == pytest.approx(0.2 + 0.1 + 1 + 2 + 1 + 0.1)
    # Hidden all-reduces: both halves end (0.55 and 0.8 s) inside the backward pass.
    p = im.predict(base(tmp_path, bucket_updates=True, ready=(0.1, 0.2)), 2, 1, link(intra=4))
    assert p.t_update == pytest.approx(0.0)
    assert p.t_iter == pytest.approx(3.3)
    # One rank updates at once.
    assert im.predict(base(tmp_path, bucket_updates=True), 1, 1, link()).t_update == pytest.approx(0.2)


def test_whole_update_from_a_run_with_bucket_updates(tmp_path):
    # 2 ranks: the measured t_update (0.05 s) is the last bucket's, a quarter of the elements.
    path = write(tmp_path, "m2.jsonl", plan(ranks=2, bucket_updates=True, elements=(3e8, 1e8)),
                 epoch(2, ranks=2, t_update=0.05, t_iter=3.35))
    assert im.full_update_seconds(im.load_run(path)) == pytest.approx(0.2)


def test_profile_shares_replace_the_flops(tmp_path):
    prof = write(tmp_path, "p.jsonl", plan(), dict(epoch(2), bucket_ready_profile=[0.1, 0.2]))
    run = im.load_run(write(tmp_path, "m.jsonl", plan(), epoch(2)), ready_from=[prof])
    assert run.ready == [0.1, 0.2] and run.ready_source == "profile"


def test_predicted_beside_measured(tmp_path, capsys):
    b = write(tmp_path, "m.jsonl", plan(), epoch(1, t_iter=9.0), epoch(2))
    # 2 GPUs measured at 40 img/s (2 x 100 images a step in 5 s); predicted 200 / 4.5 = 44.4: +11.1 %.
    m2 = write(tmp_path, "m2.jsonl", plan(ranks=2), epoch(2, ranks=2, t_iter=5.0, t_comm_exposed=1.5))
    assert im.main([b, "--gpus", "1", "--intra-busbw", "1", "--measured", f"2x1={m2}"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("| 2 x 1 "))
    assert "| 44 | 40 | +11.1 % |" in line
    assert "1000.00 (1500.00)" in line  # exposed ms, predicted (measured)
    assert "largest error: 11.1 %" in out


@pytest.mark.parametrize("records, args, says", [
    ([epoch(2)], [], "no comm_plan record"),
    ([plan()], [], "no epoch record"),
    ([plan(), epoch(2)], ["--nodes", "2"], "--inter-busbw or --link-gbps: needed"),
    ([plan(), epoch(2)], ["--measured", "2by1=x"], "--measured: '2by1=x' is not GxM=FILE"),
    ([plan(), epoch(2)], ["--gpus", "0"], "--gpus: '0': counts start at 1"),
    ([plan(ready=(1.0,)), epoch(2)], [], "1 ready shares for 2 buckets"),
])
def test_bad_input_is_one_line(tmp_path, capsys, records, args, says):
    path = write(tmp_path, "m.jsonl", *records)
    assert im.main([path] + args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_a_measured_run_of_other_ranks_is_refused(tmp_path, capsys):
    b = write(tmp_path, "m.jsonl", plan(), epoch(2))
    m2 = write(tmp_path, "m2.jsonl", plan(ranks=2), epoch(2, ranks=2))
    assert im.main([b, "--link-gbps", "25", "--measured", f"2x2={m2}"]) == 2
    assert f"{m2}: a run of 2 rank(s), given as 2x2" in capsys.readouterr().err


def test_fit_finds_the_bandwidth_that_gives_the_measured_rate(tmp_path):
    # Partial overlap above: 1 s all-reduces (1 GB/s inside the node) give t_iter 4.5 s, 200 / 4.5 img/s.
    run = base(tmp_path)
    fitted = im.fit_bandwidth(run, 2, 1, link(intra=50, inter=7), 200 / 4.5)
    assert fitted.intra_busbw == pytest.approx(1e9, rel=1e-6)
    assert fitted.inter_busbw == 7e9
    # 2 nodes of 1 GPU: the same 1 s all-reduces at 1 GB/s between the nodes.
    fitted = im.fit_bandwidth(run, 1, 2, link(intra=50, inter=7), 200 / 4.5)
    assert fitted.inter_busbw == pytest.approx(1e9, rel=1e-6) and fitted.intra_busbw == 50e9
    # Faster than the run with no all-reduce at all: no bandwidth gives it.
    assert im.fit_bandwidth(run, 2, 1, link(), 200 / 3.0) is None


def test_fit_from_the_command_line(tmp_path, capsys):
    b = write(tmp_path, "m.jsonl", plan(), epoch(2))
    m2 = write(tmp_path, "m2.jsonl", plan(ranks=2), epoch(2, ranks=2, t_iter=4.5))
    assert im.main([b, "--gpus", "2", "--fit", f"2x1={m2}", "--measured", f"2x1={m2}"]) == 0
    out = capsys.readouterr().out
    assert "bus bandwidth intra 1 GB/s" in out
    line = next(row for row in out.splitlines() if row.startswith("| 2 x 1 "))
    assert line.endswith("| 44 | 44 | +0.0 % |") or line.endswith("| 44 | 44 | -0.0 % |"), line
    fast = write(tmp_path, "fast.jsonl", plan(ranks=2), epoch(2, ranks=2, t_iter=3.0))
    assert im.main([b, "--fit", f"2x1={fast}"]) == 2
    assert f"{fast}: 67 img/s is beyond the model at any bandwidth" in capsys.readouterr().err
