# The PyTorch baseline of the convoy-vs-PyTorch benchmark (pytorch_train.py) on the CPU: its
# learning-rate schedule is train's step for step, its crops per sample are windows of each padded
# image, and its throughput, loss-curve and per-epoch evaluation runs end well.
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
import tomllib

import pytest

from conftest import BIN, SRC, TRAIN, run_tool, synth

SCRIPT = os.path.join(SRC, "benchmarks", "pytorch_train.py")
SMALL = os.path.join(SRC, "tests", "data", "small_conv_bn.toml")

# [train] tables for small_conv_bn.toml's layers: its own (one-cycle), and each other schedule.
RECIPES = {
    "onecycle": "lr = 0.02\n",
    "cosine-warmup": 'lr = 0.1\nschedule = "cosine"\nwarmup_epochs = 1.5\nmin_lr = 0.001\n',
    "step": 'lr = 0.1\nschedule = "step"\nstep_epochs = 1\ngamma = 0.5\nwarmup_epochs = 0.5\n',
    "constant": 'lr = 0.03\nschedule = "constant"\n',
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """4 files of 8 RGB 16x16 images for training and 8 for validation."""
    d = tmp_path_factory.mktemp("baseline")
    return (synth(d / "train", files=4, per_file=8, size=16, channels=3, classes=4, seed=5),
            synth(d / "val", files=1, per_file=8, size=16, channels=3, classes=4, seed=6))


def run_script(*args):
    pytest.importorskip("torch")
    env = dict(os.environ, OMP_NUM_THREADS="2",
               PYTHONPATH=os.pathsep.join([os.path.join(BIN, "python"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def with_recipe(tmp_path, recipe):
    text = open(SMALL).read()
    head, tail = text.split("[data]", 1)
    path = tmp_path / "net.toml"
    path.write_text(head.split("[train]")[0] + "[train]\n" + recipe + "[data]" + tail)
    return str(path)


@pytest.mark.parametrize("name", RECIPES)
def test_learning_rate_is_trains(name, tiny, tmp_path):
    pytest.importorskip("torch")
    config = with_recipe(tmp_path, RECIPES[name])
    metrics = tmp_path / "m.jsonl"
    run_tool(TRAIN, "--config", config, "--data", tiny[0], "--device", "cpu", "--epochs", 3, "--batch", 6,
             "--log-every", 1, "--metrics", metrics)
    got = [r["lr"] for r in map(json.loads, open(metrics)) if r["kind"] == "step"]
    spec = importlib.util.spec_from_file_location("pytorch_train", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    r = dict(script.RECIPE_DEFAULTS, **tomllib.load(open(config, "rb"))["train"])
    per_epoch = 32 // 6
    assert len(got) == 3 * per_epoch
    want = [script.lr_at(r, k, len(got), per_epoch) for k in range(len(got))]
    assert want == pytest.approx(got, rel=1e-6, abs=1e-12)


@pytest.mark.smoke
def test_loss_curve_on_trains_batches(tiny, tmp_path):
    curve = tmp_path / "loss.csv"
    row = run_script("--config", SMALL, "--data", tiny[0], "--val", tiny[1], "--epochs", 2, "--batch", 8,
                     "--loss-curve", curve, "--loss-steps", 6)
    rows = list(csv.reader(open(curve)))
    assert rows[0] == ["step", "loss"]
    assert [int(s) for s, _ in rows[1:]] == list(range(1, 7))
    assert all(math.isfinite(float(v)) and float(v) > 0 for _, v in rows[1:])
    assert row["steps"] == 6 and row["epochs"] == 1.5 and row["model"] == "config layers"


@pytest.mark.smoke
def test_torchvision_resnet_throughput_row(tiny):
    pytest.importorskip("torchvision")
    row = run_script("--config", SMALL, "--data", tiny[0], "--val", tiny[1], "--model", "resnet18", "--epochs", 1,
                     "--batch", 16, "--bf16", "--channels-last")
    assert row["model"] == "torchvision resnet18"
    assert row["impl"].endswith("eager bf16 channels_last, torchvision resnet18")
    assert row["steps"] == 2 and row["batch"] == 16 and row["images_per_s"] > 0
    assert 0 < row["compile_seconds"] <= row["setup_seconds"]
    assert 0 <= row["test_accuracy"] <= 1


def load_script():
    spec = importlib.util.spec_from_file_location("pytorch_train", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_crop_per_sample_is_a_window_of_each_padded_image():
    torch = pytest.importorskip("torch")
    script = load_script()
    n = 64
    x = (torch.arange(n * 36, dtype=torch.int64).view(n, 6, 6, 1) % 251 + 1).to(torch.uint8)  # no zero inside
    y = torch.arange(n)
    xb, yb = next(script.resident_batches(x, y, {"crop": 6, "pad": 2}, n, 1, torch.Generator().manual_seed(1), True))
    padded = torch.nn.functional.pad(x, (0, 0, 2, 2, 2, 2))
    corners = set()
    for img, k in zip(xb, yb.tolist()):
        at = [(i, j) for i in range(5) for j in range(5) if torch.equal(padded[k, i:i + 6, j:j + 6], img)]
        assert at, f"sample {k}: not a 6x6 window of its padded image"
        corners.add(at[0])
    assert len(corners) > 10  # drawn per sample, not one window for the batch


@pytest.mark.smoke
def test_epoch_log_with_flip_and_stop(tiny, tmp_path):
    config = with_recipe(tmp_path, "lr = 0.02\neval_flip = true\n")
    log = tmp_path / "epochs.csv"
    row = run_script("--config", config, "--data", tiny[0], "--val", tiny[1], "--epochs", 3, "--batch", 8,
                     "--crop-per-sample", "--epoch-log", log)
    rows = list(csv.DictReader(open(log)))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3] and row["steps"] == 12
    seconds = [float(r["train_seconds"]) for r in rows]
    assert 0 < seconds[0] < seconds[1] < seconds[2] <= row["seconds"] + 0.01
    assert float(rows[-1]["test_top1"]) == row["test_accuracy"]
    # Stopped at the first epoch that reaches the accuracy; the schedule's length stays the whole run's.
    row = run_script("--config", config, "--data", tiny[0], "--val", tiny[1], "--epochs", 3, "--batch", 8,
                     "--epoch-log", log, "--stop-at-accuracy", 0)
    assert len(list(csv.DictReader(open(log)))) == 1 and row["steps"] == 4 and row["epochs"] == 1
