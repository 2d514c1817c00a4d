# The Fashion-MNIST time-to-accuracy benchmark on the CPU: configs/fmnist95.toml builds and trains in train and
# in pytorch_train.py's twin of its layers, and time_to_accuracy.py reads the runs' times to a top-1 back right.
import importlib.util
import json
import os
import subprocess
import sys
import time
import tomllib

import pytest

from conftest import SRC, TRAIN, run_tool, synth

CONFIG = os.path.join(SRC, "configs", "fmnist95.toml")
TTA = os.path.join(SRC, "benchmarks", "time_to_accuracy.py")
BASELINE = os.path.join(SRC, "benchmarks", "pytorch_train.py")


def test_config_is_resnet20_in_train():
    out = run_tool(TRAIN, "--config", CONFIG, "--print-net")
    # Zhong et al.'s ResNet-20: 0.27 M parameters, 31 M multiply-adds at 28 px.
    assert "total: 272186 parameters, 62.565 MFLOPs per image (forward)" in out
    types = [line.split()[1] for line in out.splitlines()[2:-1]]
    # 1 + 9 x 2 convolutions 3x3 and 2 shortcut convolutions; a residual join per block.
    assert types.count("conv") == 21 and types.count("batch_norm") == 21 and types.count("add") == 9


def test_config_trains_with_its_recipe(tmp_path):
    """Its [data] (pad 4, crop 28, flip) and [train] (eval_flip) keys on gray 28 px data of 10 classes."""
    data = synth(tmp_path / "d", files=2, per_file=16, size=28, channels=1, classes=10, seed=3)
    metrics = tmp_path / "m.jsonl"
    run_tool(TRAIN, "--config", CONFIG, "--data", data, "--val", data, "--device", "cpu", "--threads", 1,
             "--epochs", 1, "--batch", 16, "--log-every", 0, "--metrics", metrics)
    epochs = [r for r in map(json.loads, open(metrics)) if r["kind"] == "epoch"]
    assert len(epochs) == 1 and 0 <= epochs[0]["test_top1"] <= 1 and epochs[0]["train_seconds"] > 0


def test_pytorch_twin_has_trains_parameters():
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("pytorch_train", BASELINE)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    cfg = tomllib.load(open(CONFIG, "rb"))
    model = script.TomlNet(cfg["layer"], (1, 28, 28), 10)
    assert sum(p.numel() for p in model.parameters()) == 272186
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    r = dict(script.RECIPE_DEFAULTS, **cfg["train"])
    assert r["eval_flip"] and r["epochs"] == 60 and r["lr"] == 0.1 and r["schedule"] == "onecycle"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def convoy_run(folder, epochs, ends, planned, status):
    """train's metrics (with the records that are not epochs) and its stamped epoch lines, with decoys."""
    recs = [{"kind": "comm_plan", "params": 1}]
    for e, (top1, secs) in enumerate(epochs, 1):
        recs.append({"kind": "step", "epoch": e, "step": 1, "loss": 1.0})
        recs.append({"kind": "epoch", "epoch": e, "test_top1": top1, "train_seconds": secs, "seconds": secs + 1})
    write(folder / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in recs))
    lines = ["0.300\ttrain: loader: 2 reader(s)"]
    for e, t in enumerate(ends, 1):
        lines += [f"{t - 3:.3f}\ttrain: epoch {e} step 5/10 loss 0.5000 lr 0.1 900 img/s",
                  f"{t:.3f}\ttrain: epoch {e}/{planned}: loss 0.3 train acc 0.9 | test loss 0.2 top-1 0.9",
                  f"{t + 1:.3f}\ttrain: epoch {e} breakdown: t_io 0.00 s"]
    write(folder / "stamps.log", "\n".join(lines + [f"{ends[-1] + 2:.3f}\t# exit {status}"]) + "\n")


def torch_run(folder, rows, ends, planned, status):
    write(folder / "epochs.csv", "epoch,test_top1,train_seconds\n" +
          "".join(f"{e},{top1},{secs}\n" for e, (top1, secs) in enumerate(rows, 1)))
    lines = [f"{t:.3f}\tepoch {e}/{planned}: test top-1 {rows[e - 1][0]}" for e, t in enumerate(ends, 1)]
    lines += ['140.000\t{"impl": "pytorch"}', f"141.000\t# exit {status}"]
    write(folder / "stamps.log", "\n".join(lines) + "\n")


def test_summary_times_to_target(tmp_path):
    w = tmp_path / "runs"
    # Seed 1 reaches 94.5 % at epoch 2, dips under it at 3; seed 2 reaches it exactly at epoch 3.
    convoy_run(w / "convoy-s1", [(0.90, 10.0), (0.946, 9.0), (0.944, 9.5), (0.951, 9.0)], [15.5, 25, 35, 44], 4, 0)
    convoy_run(w / "convoy-s2", [(0.93, 8.0), (0.94, 8.0), (0.945, 8.0), (0.953, 8.0)], [12, 20, 28, 36], 4, 0)
    # PyTorch: seed 1 stopped once there (epoch 2 of 4); seed 2 ran to the end and never got there.
    torch_run(w / "torch-s1", [(0.91, 30.0), (0.95, 60.0)], [70, 100.5], 4, 0)
    torch_run(w / "torch-s2", [(0.92, 31.0), (0.93, 62.0), (0.94, 93.0), (0.944, 124.0)], [40, 72, 104, 136], 4, 0)
    out = subprocess.run([sys.executable, TTA, "summary", str(w), "--json", str(tmp_path / "s.json")],
                         capture_output=True, text=True, check=True).stdout
    s = json.load(open(tmp_path / "s.json"))
    runs = {(r["side"], r["seed"]): r for r in s["runs"]}
    c1, c2, t1, t2 = runs["convoy", 1], runs["convoy", 2], runs["torch", 1], runs["torch", 2]
    # Set-up counted: the stamp of the epoch line; training: train_seconds summed up to it.
    assert (c1["first_epoch"], c1["wall_seconds"], c1["train_seconds"]) == (2, 25.0, 19.0)
    assert (c2["first_epoch"], c2["wall_seconds"], c2["train_seconds"]) == (3, 28.0, 24.0)
    assert (t1["first_epoch"], t1["wall_seconds"], t1["train_seconds"]) == (2, 100.5, 60.0)
    assert t2["first_epoch"] is None and t2["complete"] and not t1["complete"] and c1["complete"]
    convoy, torch = s["sides"]["convoy"], s["sides"]["torch"]
    assert convoy["mean_final_top1"] == pytest.approx(0.952)
    assert (convoy["mean_wall_seconds"], convoy["mean_train_seconds"]) == (26.5, 21.5)
    # The stopped run has no final top-1; the one that never got there has no time.
    assert torch["mean_final_top1"] == pytest.approx(0.944) and torch["reached"] == 1
    assert s["ratio_wall"] == pytest.approx(100.5 / 26.5) and s["ratio_train"] == pytest.approx(60 / 21.5)
    assert "convoy's mean final top-1 >= 95 %: met" in out
    assert "| torch | 1 | 2/4 (stopped) | 0.9500 (not the end) | 2 | 100.50 | 60.00 |" in out
    assert "3.79x set-up counted, 2.79x training time" in out


def test_summary_of_a_run_cut_short(tmp_path):
    w = tmp_path / "runs"
    convoy_run(w / "convoy-s1", [(0.95, 5.0)], [9.0], 30, 124)
    torch_run(w / "torch-s1", [], [], 30, 124)
    out = subprocess.run([sys.executable, TTA, "summary", str(w)], capture_output=True, text=True, check=True).stdout
    assert "| convoy | 1 | 1/30 (exit 124) |" in out and "| torch | 1 | 0/? (exit 124) | - (not the end) |" in out
    assert "convoy's mean final top-1 >= 95 %: n/a" in out and "-x set-up counted" in out


def test_stamp_lines_exit_and_timeout(tmp_path):
    log = tmp_path / "stamps.log"
    child = "import time; print('a', flush=True); time.sleep(0.4); print('epoch 1/2: b')"
    rc = subprocess.run([sys.executable, TTA, "stamp", str(log), "--", sys.executable, "-c",
                         child + "; exit(3)"]).returncode
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    assert rc == 3 and [r[1] for r in rows] == ["a", "epoch 1/2: b", "# exit 3"]
    assert float(rows[1][0]) - float(rows[0][0]) >= 0.35
    t = time.monotonic()
    rc = subprocess.run([sys.executable, TTA, "stamp", str(log), "--timeout", "0.5", "--", "sleep", "20"]).returncode
    assert rc == 124 and time.monotonic() - t < 10 and log.read_text().endswith("\t# exit 124\n")
