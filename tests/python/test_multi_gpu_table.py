# benchmarks/multi_gpu_table.py on a hand-made OUTDIR: the simulated-node table's ratio, backward pass and
# exposed all-reduce over epochs 2 on, and convoy against DDP's JSON line.
import json
import os
import subprocess
import sys

from conftest import SRC

TABLE = os.path.join(SRC, "benchmarks", "multi_gpu_table.py")


def metrics(path, *epochs):
    # Each epoch: (images, seconds, steps so far, t_bwd and t_comm_exposed in seconds over the epoch).
    recs = [{"kind": "comm_plan", "ranks": 2}]
    for images, secs, step, bwd, exposed in epochs:
        recs.append({"kind": "epoch", "images": images, "train_seconds": secs, "global_step": step, "t_bwd": bwd,
                     "t_comm_exposed": exposed, "input_stall": 0.01, "comm_bytes_per_step": 11.2e6})
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_nodes_table_row(tmp_path):
    # Epoch 1 (the set-up) is left out; epochs 2-3: 20 steps, 10,240 images in 0.2 s (one node) and 0.25 s.
    metrics(tmp_path / "weak-resnet18-jpeg-2.jsonl", (5120, 9.0, 10, 1.0, 0.0), (5120, 0.1, 20, 0.064, 0.0),
            (5120, 0.1, 30, 0.064, 0.0))
    metrics(tmp_path / "nodes-resnet18-2x1.jsonl", (5120, 9.0, 10, 1.0, 1.0), (5120, 0.125, 20, 0.069, 0.007),
            (5120, 0.125, 30, 0.069, 0.007))
    (tmp_path / "ddp-resnet18-2x1.log").write_text('warm-up\n{"images_per_s": 25600.0, "hook": "bf16", '
                                                   '"ms_per_step": 20.0, "compile_seconds": 30}\n')
    (tmp_path / "steps.tsv").write_text("weak-resnet18-jpeg-2\tok\t9\nnodes-resnet18-2x1\tok\t9\n"
                                        "ddp-resnet18-2x1\tok\t50\n")
    out = subprocess.run([sys.executable, TABLE, str(tmp_path)], capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| resnet18 | 2x1 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # 51,200 against 40,960 img/s: 80 %; backward 6.40 / 6.90 ms, 0.7 ms exposed; 1.60x DDP's 25,600.
    assert cells[2:10] == ["51,200", "40,960", "80.0 %", "6.40 / 6.90", "0.7", "11.2", "25,600", "1.60x"], row
