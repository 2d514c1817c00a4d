# benchmarks/step_phases.py's figures from metrics records, and benchmarks/comm_variants.sh run end to end
# on the CPU: every layout runs every variant, the variant's flags reach train, the table has a row each;
# benchmarks/allreduce_link.py on two CPU ranks.
import json
import os
import subprocess
import sys

import pytest

from conftest import SRC, TRAIN, synth

BENCH = os.path.join(SRC, "benchmarks")
sys.path.insert(0, BENCH)
import step_phases  # noqa: E402


def test_phases_are_over_the_epochs_after_the_first(tmp_path):
    recs = [{"kind": "comm_plan", "local_batch": 4, "ranks": 2},
            {"kind": "epoch", "images": 80, "train_seconds": 9.0, "t_fwd": 9.0, "t_bwd": 9.0},
            {"kind": "epoch", "images": 80, "train_seconds": 0.4, "t_fwd": 0.1, "t_bwd": 0.2, "t_comm_exposed": 0.05,
             "input_stall": 0.1, "comm_bytes_per_step": 2e6},
            {"kind": "epoch", "images": 80, "train_seconds": 0.4, "t_fwd": 0.1, "t_bwd": 0.2, "t_comm_exposed": 0.05,
             "input_stall": 0.3, "comm_bytes_per_step": 2e6}]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\nnot json\n")
    # 160 samples at a global batch of 8: 20 steps; 0.2 s of forward passes is 10 ms a step.
    assert step_phases.row(str(path)) == ["200", "10.00", "20.00", "5.00", "0.00", "0.00", "20.00", "2.0"]
    (tmp_path / "empty.jsonl").write_text(json.dumps(recs[0]) + "\n")
    assert step_phases.row(str(tmp_path / "empty.jsonl")) is None


@pytest.mark.smoke
def test_every_layout_runs_every_variant(tmp_path):
    data = synth(tmp_path / "d", files=4, per_file=16, size=28, channels=1, classes=10)
    env = dict(os.environ, TRAIN=TRAIN, NETS="fmnist", DATA=data, LAYOUTS="1 2x1",
               BATCH_PER_GPU="8", EPOCHS_PER_GPU="2", TRAIN_ARGS="--device cpu --threads 1",
               VARIANTS="default||;short|OMP_NUM_THREADS=1|--stop-after 12",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(["bash", os.path.join(BENCH, "comm_variants.sh"), str(tmp_path / "out")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    table = (tmp_path / "out" / "table.md").read_text().splitlines()
    names = [line.split(" | ")[0][2:] for line in table[2:]]
    assert names == ["fmnist_1_default", "fmnist_1_short", "fmnist_2x1_default", "fmnist_2x1_short"], table
    for line in table[2:]:
        assert "no epoch" not in line, line
    def epochs(name):
        recs = [json.loads(x) for x in open(tmp_path / "out" / f"{name}.jsonl")]
        return [r for r in recs if r.get("kind") == "epoch"], [r for r in recs if r.get("kind") == "comm_plan"]
    # 64 samples: at 1 GPU 8 steps an epoch, 3 epochs; --stop-after 12 ends the variant within its second.
    assert len(epochs("fmnist_1_default")[0]) == 3 and len(epochs("fmnist_1_short")[0]) == 1
    assert epochs("fmnist_2x1_default")[1][0]["ranks"] == 2 and len(epochs("fmnist_2x1_default")[0]) == 5


@pytest.mark.smoke
def test_allreduce_link_reports_each_size_once(tmp_path):
    # benchmarks/allreduce_link.py on 2 CPU ranks (gloo): one line a size from rank 0, bus bandwidth as
    # nccl-tests defines it (2 ranks: the algorithm bandwidth itself).
    pytest.importorskip("torch")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", MASTER_PORT="29547")
    p = subprocess.run(["mpirun", "-np", "2", sys.executable, os.path.join(BENCH, "allreduce_link.py"), "--device",
                        "cpu", "--mb", "0.5", "2", "--iters", "2"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert [r["mb"] for r in lines] == [0.5, 2.0], p.stdout
    for r in lines:
        assert r["ranks"] == 2 and r["dtype"] == "float32" and r["ms"] > 0, r
        assert r["busbw_gbs"] == pytest.approx(r["algbw_gbs"], rel=1e-2), r
