#!/usr/bin/env python3
"""PyTorch baseline for convoy's side-by-side benchmark: trains the net of a convoy TOML config on
convoy batch files, with the same recipe (optimizer, schedule, augmentation, normalisation).

The whole dataset is moved to the GPU first (PyTorch's best case: no loader in the timed loop).
Prints one JSON line: images/s, seconds, final test accuracy.

    python3 scripts/bench/pytorch_train.py --config configs/fmnist.toml \
        --data data/fmnist-train --val data/fmnist-t10k --epochs 15 [--compile] [--bf16]
"""
import argparse
import json
import os
import sys
import time

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import batches  # noqa: E402


class TomlNet(nn.Module):
    """The [[layer]] list of a convoy config as a PyTorch module (inputs = residual joins)."""

    def __init__(self, layers, in_shape, classes):
        super().__init__()
        self.layers = layers
        self.mods = nn.ModuleDict()  # keyed by layer name with "." as "_" (ModuleDict refuses dots)
        shapes = {}
        prev = "data"
        shapes["data"] = in_shape
        for i, spec in enumerate(layers):
            name = spec.get("name", f"{spec['type']}{i + 1}")
            spec["name"] = name
            ins = spec.get("inputs", [prev])
            ins = [ins] if isinstance(ins, str) else ins
            spec["_in"] = ins
            c, h, w = shapes[ins[0]]
            t = spec["type"]
            if t == "conv":
                k, s, p, g = spec.get("kernel", 3), spec.get("stride", 1), spec.get("pad", 0), spec.get("groups", 1)
                self.mods[name.replace(".", "_")] = nn.Conv2d(c, spec["filters"], k, s, p, groups=g, bias=spec.get("bias", True))
                out = (spec["filters"], (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
            elif t in ("max_pool", "avg_pool"):
                k = spec.get("kernel", 2)
                s, p = spec.get("stride", k), spec.get("pad", 0)
                self.mods[name.replace(".", "_")] = (nn.MaxPool2d if t == "max_pool" else nn.AvgPool2d)(k, s, p)
                out = (c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
            elif t == "global_avg_pool":
                self.mods[name.replace(".", "_")] = nn.AdaptiveAvgPool2d(1)
                out = (c, 1, 1)
            elif t == "fc":
                units = classes if spec["units"] == "classes" else spec["units"]
                self.mods[name.replace(".", "_")] = nn.Linear(c * h * w, units, bias=spec.get("bias", True))
                out = (units, 1, 1)
            elif t == "batch_norm":
                self.mods[name.replace(".", "_")] = nn.BatchNorm2d(c, eps=spec.get("eps", 1e-5), momentum=spec.get("momentum", 0.1))
                out = (c, h, w)
            elif t == "dropout":
                self.mods[name.replace(".", "_")] = nn.Dropout(spec.get("p", 0.5))
                out = (c, h, w)
            elif t == "flatten":
                out = (c * h * w, 1, 1)
            else:  # relu, add, softmax_xent
                out = (c, h, w)
            shapes[name] = out
            prev = name

    def forward(self, x):
        vals = {"data": x}
        out = x
        for spec in self.layers:
            t, name = spec["type"], spec["name"]
            a = vals[spec["_in"][0]]
            if t == "softmax_xent":
                out = a.flatten(1)
                break
            if t == "relu":
                out = F.relu(a)
            elif t == "add":
                out = a + vals[spec["_in"][1]]
            elif t == "flatten":
                out = a.flatten(1)
            elif t == "fc":
                out = self.mods[name.replace(".", "_")](a.flatten(1))
            elif t == "batch_norm" and a.dim() == 2:
                out = self.mods[name.replace(".", "_")](a[:, :, None, None])[:, :, 0, 0]
            else:
                out = self.mods[name.replace(".", "_")](a)
            vals[name] = out
        return out


def load(folder, device):
    ds = batches.Dataset(folder, verify=False)
    images, labels, _ = ds.arrays()
    x = torch.from_numpy(np.ascontiguousarray(images)).to(device)  # uint8 NHWC
    y = torch.from_numpy(labels.astype(np.int64)).to(device)
    return ds, x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    with open(args.config, "rb") as f:
        cfg = tomllib.load(f)
    tr, aug = cfg.get("train", {}), cfg.get("data", {})
    epochs = args.epochs or tr.get("epochs", 15)
    batch = args.batch or tr.get("batch", 128)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")

    ds, xtr, ytr = load(args.data, dev)
    _, xva, yva = load(args.val, dev)
    h, w, c = ds.shape
    crop, pad, flip = aug.get("crop", 0) or h, aug.get("pad", 0), aug.get("flip", False)
    mean = torch.tensor(ds.mean, device=dev, dtype=torch.float32).view(1, c, 1, 1)
    std = torch.tensor(ds.std, device=dev, dtype=torch.float32).view(1, c, 1, 1)

    model = TomlNet(cfg["layer"], (c, crop, crop), len(ds.classes)).to(dev)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if tr.get("optimizer", "sgd") == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=tr.get("lr", 0.05), momentum=tr.get("momentum", 0.9),
                              nesterov=tr.get("nesterov", True), weight_decay=tr.get("weight_decay", 5e-4))
    else:
        cls = torch.optim.AdamW if tr["optimizer"] == "adamw" else torch.optim.Adam
        opt = cls(model.parameters(), lr=tr.get("lr", 1e-3), weight_decay=tr.get("weight_decay", 0))
    steps_per_epoch = (len(ytr) + batch - 1) // batch
    sched = None
    if tr.get("schedule", "onecycle") == "onecycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=tr.get("lr", 0.05), total_steps=epochs * steps_per_epoch,
                                                    pct_start=tr.get("pct_start", 0.3))
    step_model = torch.compile(model) if args.compile else model

    def prep(xb, train):
        x = xb.permute(0, 3, 1, 2).float()
        if train and pad:
            x = F.pad(x, (pad, pad, pad, pad))
        if train and (pad or crop < h):
            i, j = np.random.randint(0, x.shape[2] - crop + 1), np.random.randint(0, x.shape[3] - crop + 1)
            x = x[:, :, i:i + crop, j:j + crop]
        elif crop < h:
            o = (h - crop) // 2
            x = x[:, :, o:o + crop, o:o + crop]
        if train and flip:
            m = torch.rand(x.shape[0], device=x.device) < 0.5
            x = torch.where(m[:, None, None, None], x.flip(3), x)
        x = (x - mean) / std
        return x.contiguous(memory_format=torch.channels_last) if args.channels_last else x

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=args.bf16):
            for k in range(0, len(yva), 1000):
                out = step_model(prep(xva[k:k + 1000], False))
                correct += (out.argmax(1) == yva[k:k + 1000]).sum().item()
        model.train()
        return correct / len(yva)

    # Warm-up (cuDNN autotuning, compilation) outside the timed loop, then restore the start state.
    torch.cuda.synchronize()
    w0 = time.perf_counter()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for k in range(3):
        with torch.autocast("cuda", torch.bfloat16, enabled=args.bf16):
            loss = F.cross_entropy(step_model(prep(xtr[:batch], True)), ytr[:batch])
        loss.backward()
        opt.zero_grad(set_to_none=True)
    model.load_state_dict(state)
    opt.state.clear()
    torch.cuda.synchronize()
    warmup_seconds = time.perf_counter() - w0

    t0 = time.perf_counter()
    for epoch in range(epochs):
        perm = torch.randperm(len(ytr), device=dev)
        for k in range(steps_per_epoch):
            idx = perm[k * batch:(k + 1) * batch]
            with torch.autocast("cuda", torch.bfloat16, enabled=args.bf16):
                loss = F.cross_entropy(step_model(prep(xtr[idx], True)), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched:
                sched.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    acc = evaluate()
    mode = "torch.compile" if args.compile else "eager"
    print(json.dumps({"impl": f"pytorch {torch.__version__} {mode}" + (" bf16" if args.bf16 else "")
                      + (" channels_last" if args.channels_last else ""),
                      "config": os.path.basename(args.config), "epochs": epochs, "batch": batch,
                      "images_per_s": round(epochs * len(ytr) / seconds, 1), "seconds": round(seconds, 2),
                      "setup_seconds": round(warmup_seconds, 2),
                      "test_accuracy": round(acc, 4), "gpu": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
