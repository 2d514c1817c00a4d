# benchmarks/scaling_bound_table.py's shares of N x one GPU from metrics records, and benchmarks/scaling_bound.sh
# run end to end on the CPU: one GPU, the runs apart, train's ranks and a variant each get their row.
import json
import os
import subprocess
import sys

import pytest

from conftest import SRC, TRAIN, synth

BENCH = os.path.join(SRC, "benchmarks")
sys.path.insert(0, BENCH)
import scaling_bound_table  # noqa: E402


def write_run(path, ranks, images_per_second, fwd=0.01):
    plan = {"kind": "comm_plan", "local_batch": 10, "ranks": ranks}
    first = {"kind": "epoch", "images": 100, "train_seconds": 50.0, "t_fwd": 9.0}
    timed = {"kind": "epoch", "images": 100, "train_seconds": 100 / images_per_second, "t_fwd": fwd,
             "input_stall": 0.02}
    path.write_text("\n".join(json.dumps(r) for r in (plan, first, timed)) + "\n")


def test_shares_are_of_n_times_one_gpu_and_apart_runs_are_summed(tmp_path):
    write_run(tmp_path / "net-one-1.jsonl", 1, 100.0)
    write_run(tmp_path / "net-one-2.jsonl", 1, 300.0)  # the reference is the rounds' mean: 200
    write_run(tmp_path / "net-apart-1-g0.jsonl", 1, 190.0)
    write_run(tmp_path / "net-apart-1-g1.jsonl", 1, 170.0)
    write_run(tmp_path / "net-train-1.jsonl", 2, 300.0)
    write_run(tmp_path / "net-one_sync-1.jsonl", 2, 380.0)
    (tmp_path / "net-train-2.jsonl").write_text("")  # a run that wrote nothing has no row
    rows = scaling_bound_table.rows(scaling_bound_table.collect(str(tmp_path)), 2)
    assert [r[:5] for r in rows] == [["net", "one", "1", "100", "50.0"], ["net", "one", "2", "300", "150.0"],
                                     ["net", "apart", "1", "360", "90.0"], ["net", "train", "1", "300", "75.0"],
                                     ["net", "one_sync", "1", "380", "95.0"]]
    # 100 images at a global batch of 10 (one rank): 10 steps, 0.01 s of forward passes is 1 ms a step.
    assert rows[0][5] == "1.00" and rows[0][-1] == "2.00"


@pytest.mark.smoke
def test_every_kind_of_run_gets_its_row(tmp_path):
    data = synth(tmp_path / "d", files=4, per_file=16, size=28, channels=1, classes=10)
    env = dict(os.environ, TRAIN=TRAIN, NETS="fmnist", GPUS="2", ROUNDS="1", EPOCHS="2", BATCH_PER_GPU="8",
               TRAIN_ARGS="--device cpu --threads 1", VARIANTS=f"same={TRAIN}",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(["bash", os.path.join(BENCH, "scaling_bound.sh"), data, str(tmp_path / "out")], env=env,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    table = (tmp_path / "out" / "table.md").read_text().splitlines()
    assert [line.split(" | ")[1] for line in table[2:]] == ["one", "apart", "train", "same"], table
    plan = [json.loads(x) for x in open(tmp_path / "out" / "fmnist-same-1.jsonl")]
    assert [r["ranks"] for r in plan if r.get("kind") == "comm_plan"] == [2]
    assert (tmp_path / "out" / "fmnist-apart-1-g1.jsonl").stat().st_size > 0


def test_a_variant_that_is_not_a_binary_is_refused(tmp_path):
    data = synth(tmp_path / "d", files=1, per_file=4, size=28, channels=1, classes=10)
    env = dict(os.environ, GPUS="2", VARIANTS="x=/nonexistent/train")
    p = subprocess.run(["bash", os.path.join(BENCH, "scaling_bound.sh"), data, str(tmp_path / "out")], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "VARIANTS: /nonexistent/train: not an executable" in p.stderr


@pytest.mark.parametrize("name", ["sync_only", "one_sync", "rows_four_waves"])
def test_each_variant_patch_applies_to_this_tree(name):
    # dev/variants/build.sh applies them to a copy of the committed tree: they must follow gradient_sync.cu.
    with open(os.path.join(SRC, "dev", "variants", f"{name}.patch")) as f:
        p = subprocess.run(["patch", "-d", SRC, "-p1", "--dry-run", "--quiet"], stdin=f, capture_output=True,
                           text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
