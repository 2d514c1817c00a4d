# Throughput of the convoy module against `train bench-loader` on the same JPEG files and flags,
# both measured here, interleaved, so that a busy machine slows both alike.
import os
import re
import time

import pytest

import convoy
from conftest import TRAIN, run_tool, synth

EPOCHS, ROUNDS, MAX_ROUNDS, BATCH, READERS = 5, 3, 6, 128, 2
FLAGS = dict(crop=56, pad=0, flip=True, seed=1)


def python_epochs(data):
    """(img/s, CPU us/img) of each epoch after the first, iterating as a training loop does."""
    loader = convoy.Loader(data, BATCH, readers=READERS, **FLAGS)
    out = []
    for e in range(EPOCHS):
        wall, cpu = time.perf_counter(), time.process_time()
        loader.set_epoch(e)
        n = 0
        for images, labels in loader:
            n += len(labels)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if e > 0:
            out.append((n / wall, 1e6 * cpu / n))
    return out


def bench_epochs(data):
    out = run_tool(TRAIN, "bench-loader", "--data", data, "--mode", "raw", "--mirror", "--batch", BATCH,
                   "--readers", READERS, "--crop", FLAGS["crop"], "--seed", FLAGS["seed"], "--epochs", EPOCHS)
    figures = re.findall(r"raw epoch (\d+): .*: (\d+) img/s, .*, ([\d.]+) CPU us/img", out)
    assert len(figures) == EPOCHS, out
    return [(float(ips), float(us)) for e, ips, us in figures if int(e) > 0]


@pytest.mark.perf
def test_python_keeps_up_with_bench_loader(tmp_path):
    data = synth(tmp_path / "jpeg64", files=16, per_file=256, size=64, channels=3, classes=10, encoding="jpeg")
    py, cc = [], []
    for rounds in range(1, MAX_ROUNDS + 1):
        cc += bench_epochs(data)
        py += python_epochs(data)
        # The best epoch of each: the one least disturbed by whatever else the machine ran. CPU time
        # per image counts the Python side's own overhead (a copy, a conversion) even when the cores
        # are shared; the wall-clock rate also counts waits. Rounds go on past ROUNDS only while the
        # wall-clock figure falls short, which more epochs of a module that is truly slower cannot mend.
        py_ips, cc_ips = max(r for r, _ in py), max(r for r, _ in cc)
        py_us, cc_us = min(u for _, u in py), min(u for _, u in cc)
        # With several times more runnable threads than cores (other builds and tests), which
        # process gets the cores in an epoch is luck, and no number of rounds makes wall-clock rates
        # comparable; the CPU time per image still is.
        load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
        crowded = load > cores + READERS + 1
        if rounds >= ROUNDS and (crowded or py_ips / cc_ips >= 0.9):
            break
    print(f"\nconvoy module: {py_ips:.0f} img/s, {py_us:.1f} CPU us/img; bench-loader: {cc_ips:.0f} img/s, "
          f"{cc_us:.1f} CPU us/img; ratio {py_ips / cc_ips:.3f} (wall), {cc_us / py_us:.3f} (CPU); "
          f"best of {len(py)} epochs each; load {load:.1f} on {cores} cores"
          + (": the wall-clock ratio is not held to 90 %" if crowded else ""))
    assert cc_us / py_us >= 0.9, "the module spends over 10 % more CPU per image than bench-loader"
    if not crowded:
        assert py_ips / cc_ips >= 0.9, "the module's best epoch is under 90 % of bench-loader's"
