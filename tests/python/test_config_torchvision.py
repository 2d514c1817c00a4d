# The shipped ResNet configs against torchvision's models: the parameters and running statistics
# that `train --print-net` builds have torchvision's state_dict names, shapes, order and total.
import math
import re
import tomllib

import pytest

from conftest import SRC, TRAIN, run_tool

# configs/<file>, the torchvision model, and how the config's names differ from torchvision's.
CASES = [
    ("resnet18.toml", "resnet18", {".down.conv": ".downsample.0", ".down.bn": ".downsample.1"}),
    ("resnet50.toml", "resnet50", {}),
]


def printed_net(config):
    """`train --print-net`: the rows with parameters' layers as (name, type, first input, params), and
    every row's output shape (c, h, w) by name, the input's ("data") included."""
    rows, shapes = [], {}
    for line in run_tool(TRAIN, "--config", config, "--print-net").splitlines():
        f = line.split()
        if len(f) >= 3 and re.fullmatch(r"\d+x\d+x\d+", f[2]):
            shapes[f[0]] = tuple(int(v) for v in f[2].split("x"))
            if len(f) == 6:
                rows.append((f[0], f[1], f[3].split(",")[0], int(f[4])))
    return rows, shapes


def convoy_state(config):
    """[(name, shape)] of the weights and running statistics in the net's order, named as torchvision
    names them; each layer's shapes checked against the parameters train counts for it."""
    specs = {s["name"]: s for s in tomllib.load(open(config, "rb"))["layer"]}
    rows, shapes = printed_net(config)
    entries = []
    for name, kind, first_in, params in rows:
        spec, out, x = specs[name], shapes[name], shapes[first_in]
        if kind == "conv":
            k = spec.get("kernel", 3)
            mine = [("weight", (out[0], x[0] // spec.get("groups", 1), k, k))]
            mine += [("bias", (out[0],))] if spec.get("bias", True) else []
        elif kind == "batch_norm":
            # torchvision also counts batches (num_batches_tracked), which its fixed momentum ignores.
            mine = [(p, (out[0],)) for p in ("weight", "bias", "running_mean", "running_var")]
        elif kind == "fc":
            mine = [("weight", (out[0], math.prod(x)))] + ([("bias", (out[0],))] if spec.get("bias", True) else [])
        else:
            mine = []
        learned = sum(math.prod(s) for p, s in mine if not p.startswith("running_"))
        assert learned == params, f"{name}: shapes {mine} do not make train's {params} parameters"
        entries += [(f"{name}.{p}", s) for p, s in mine]
    return entries


@pytest.mark.parametrize("config,model,renames", CASES, ids=[c[1] for c in CASES])
def test_config_matches_torchvision(config, model, renames):
    torchvision = pytest.importorskip("torchvision")
    path = f"{SRC}/configs/{config}"
    ours = []
    for name, shape in convoy_state(path):
        for a, b in renames.items():
            name = name.replace(a, b)
        ours.append((name, shape))
    net = getattr(torchvision.models, model)()
    theirs = [(k, tuple(v.shape)) for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")]
    assert ours == theirs
    total = sum(p.numel() for p in net.parameters())
    assert f"total: {total} parameters" in run_tool(TRAIN, "--config", path, "--print-net")
    if model == "resnet50":
        assert total == 25557032
