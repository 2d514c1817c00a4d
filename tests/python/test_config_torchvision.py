# The shipped ResNet, GoogLeNet and MobileNetV2 configs against torchvision's models: the parameters
# and running statistics that `train --print-net` builds have torchvision's state_dict names, shapes,
# order and total, and every layer named as a torchvision module has that module's output shape.
import math
import re
import tomllib

import pytest

from conftest import SRC, TRAIN, run_tool

# configs/<file>, the torchvision model, the arguments it is built with, and how the config's names
# differ from torchvision's.
CASES = [
    ("resnet18.toml", "resnet18", {}, {".down.conv": ".downsample.0", ".down.bn": ".downsample.1"}),
    ("resnet50.toml", "resnet50", {}, {}),
    ("googlenet.toml", "googlenet", {"aux_logits": False, "init_weights": True}, {}),
    ("mobilenet_v2.toml", "mobilenet_v2", {}, {}),
]
# torchvision's figures for 1000 classes (its weights' num_params).
TOTALS = {"resnet50": 25557032, "googlenet": 6624904, "mobilenet_v2": 3504872}


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


def module_shapes(net, side):
    """{module name: (c, h, w)} of every torchvision module with a 4-d output, for one image of side px."""
    import torch

    shapes = {}
    hooks = [
        m.register_forward_hook(lambda m, i, o, name=name: shapes.__setitem__(name, tuple(o.shape[1:])))
        for name, m in net.named_modules()
        if name
    ]
    with torch.no_grad():
        net.eval()(torch.zeros(1, 3, side, side))
    for h in hooks:
        h.remove()
    return {k: v for k, v in shapes.items() if len(v) == 3}


@pytest.mark.parametrize("config,model,kwargs,renames", CASES, ids=[c[1] for c in CASES])
def test_config_matches_torchvision(config, model, kwargs, renames):
    torchvision = pytest.importorskip("torchvision")
    path = f"{SRC}/configs/{config}"
    ours = []
    for name, shape in convoy_state(path):
        for a, b in renames.items():
            name = name.replace(a, b)
        ours.append((name, shape))
    net = getattr(torchvision.models, model)(**kwargs)
    theirs = [(k, tuple(v.shape)) for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")]
    assert ours == theirs
    total = sum(p.numel() for p in net.parameters())
    assert f"total: {total} parameters" in run_tool(TRAIN, "--config", path, "--print-net")
    if model in TOTALS:
        assert total == TOTALS[model]
    # Output shapes (strides, paddings, GoogLeNet's pools in ceil mode), where the names agree: every
    # convolution and batch norm, and GoogLeNet's pools and inception blocks (the concats).
    side = tomllib.load(open(path, "rb"))["net"]["input"][1]
    rows, printed = printed_net(path)
    for a, b in renames.items():
        printed = {k.replace(a, b): v for k, v in printed.items()}
        rows = [(r[0].replace(a, b),) + r[1:] for r in rows]
    theirs = module_shapes(net, side)
    assert {r[0] for r in rows if r[1] in ("conv", "batch_norm")} <= set(theirs)
    common = sorted(set(printed) & set(theirs))
    assert {k: printed[k] for k in common} == {k: theirs[k] for k in common}
