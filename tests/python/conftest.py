# Shared fixtures of the Python module's tests: the built tools, and small synthetic datasets made
# once per session with `train synth`.
import os
import shutil
import subprocess
import sys

import pytest

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CONVOY_BIN", os.path.join(SRC, "build"))
TRAIN = os.path.join(BIN, "train")
sys.path.insert(0, os.path.join(SRC, "scripts"))

# The module beside the tools (ctest also sets PYTHONPATH to it).
sys.path.insert(0, os.path.join(BIN, "python"))


def pytest_configure(config):
    config.addinivalue_line("markers", "smoke: runs an example end to end on the CPU, a few seconds")
    config.addinivalue_line("markers", "perf: compares throughput with `train bench-loader`")


def run_tool(*args, **kw):
    """Runs a built tool; its output, or a failure naming the command and its stderr."""
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def synth(folder, **kw):
    """`train synth` into folder; keyword arguments are its flags (files=8 -> --files 8)."""
    args = [TRAIN, "synth", "--out", folder]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), v]
    run_tool(*args)
    return str(folder)


@pytest.fixture(scope="session")
def raw_data(tmp_path_factory):
    """7 raw RGB files of 12x12 images, the last one shorter."""
    return synth(tmp_path_factory.mktemp("raw") / "d", files=7, per_file=40, last=23, size=12, channels=3,
                 classes=5, seed=2)


@pytest.fixture(scope="session")
def even_data(tmp_path_factory):
    """6 equal raw gray files: every rank of 1, 2 or 3 is dealt a full share."""
    return synth(tmp_path_factory.mktemp("even") / "d", files=6, per_file=30, size=10, channels=1, classes=3, seed=4)


@pytest.fixture(scope="session")
def jpeg_data(tmp_path_factory):
    """9 JPEG RGB files of 32x32 images, the last one shorter."""
    return synth(tmp_path_factory.mktemp("jpeg") / "d", files=9, per_file=36, last=17, size=32, channels=3,
                 classes=6, encoding="jpeg", seed=3)


@pytest.fixture()
def copy_of(tmp_path):
    def copy(folder):
        dst = tmp_path / "copy"
        shutil.copytree(folder, dst)
        return str(dst)
    return copy
