#!/usr/bin/env python3
# PyTorch baseline for convoy's side-by-side benchmark: trains a convoy config's net and recipe on
# convoy batch files the way PyTorch runs fastest on one GPU, and optionally logs its loss curve.
"""PyTorch's best practice on convoy batch files, for comparison with convoy's `train`.

    python3 benchmarks/pytorch_train.py --config configs/resnet50.toml --data s224 --val s224 \\
        --epochs 3 --batch 256 --compile --bf16 --channels-last [--compile-mode max-autotune]

The net: torchvision's ResNet-18, ResNet-50, GoogLeNet or MobileNetV2 when the config's [net] name is
resnet18, resnet50, googlenet or mobilenet_v2 (`--model` picks one, or `config` for the config's own [[layer]] list, the default for other nets),
initialised by the config's [net] init rule as `train` does (kaiming: normal weights with std
sqrt(2 / fan_in), zero biases; default: PyTorch's uniform), unless `--init torchvision`. The recipe is
the config's [train] table with convoy's defaults (train/net_config.h): SGD with its momentum,
Nesterov and weight decay (fused on a GPU; `foreach` or plain where this torch has no fused SGD), or
Adam/AdamW, and the learning rate of each step from convoy's schedule (train/optimizer.cpp's lr_at);
label_smoothing, weight_decay_norm / weight_decay_bias and [net] zero_init_residual as `train` takes them.
Inputs are normalised by dataset.json's mean and std. What PyTorch does best, each a flag:
`--bf16` autocast, `--channels-last`, `--compile` (torch.compile's default mode; `--compile-mode
max-autotune` compiles that way instead and is a row of its own). PyTorch's best is all three.

The data is on the GPU before timing (PyTorch's best case: no loader in the timed loop): the whole
training set as uint8, a random window crop per batch and a flip per sample drawn on the GPU, one
epoch being floor(samples / batch) full batches as in `train`. Warm-up steps (compilation, cuDNN's
autotuning) run first and are timed apart, their updates undone: `compile_seconds` is the first
step, `setup_seconds` all of them; `images_per_s` is the steady rate after them. Prints one JSON line.

`--loss-curve FILE` trains on the batches convoy's `train --seed S` trains on instead: the first
`--loss-steps` (default 200) batches of the convoy module's loader for the same seed and [data] flags
(order, crops and flips as `train`'s; build/python on PYTHONPATH), all held on the GPU, and writes the
loss of each step as `step,loss` lines (step 1 first). With the same --seed, --epochs and --batch, the
learning rate of every step is convoy's too. convoy's curve over the same steps:

    build/train --config C --data D --epochs E --batch B --stop-after 200 --log-every 1 --metrics m.jsonl
    python3 -c 'import json, sys; print("step,loss"); [print("%d,%s" % (r["global_step"], r["loss"]))
        for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "step"]' m.jsonl >convoy.csv

The weights start from the same distributions, not the same values: the two curves can agree in
their course, not step by step. `--loss-log FILE` writes the same lines for an ordinary run (its own
device-resident batches of the same dataset), where the convoy module cannot be loaded.
`--crop-per-sample` draws the crop window of each sample apart, as `train` does (the default, one
window per batch, costs less and was the throughput rows' way). `--epoch-log FILE` evaluates on --val
after every epoch (with [train] eval_flip as `train` scores it) and writes `epoch,test_top1,
train_seconds` lines, the seconds being the timed loop's up to that epoch with the evaluations left
out, and a line `epoch E/N: test top-1 A` on stderr as each ends; `--stop-at-accuracy A` ends the run
after the first epoch that reaches A (the schedule stays the whole run's): the PyTorch side of
benchmarks/fmnist_time_to_accuracy.sh.
`--device cpu` runs anything here on the CPU (a smoke test with tiny settings).
"""
import argparse
import inspect
import json
import math
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


def repo_dir(sub):
    """<repo>/sub: the first folder upwards from this file that holds scripts/."""
    d = os.path.dirname(os.path.abspath(__file__))
    while not os.path.isdir(os.path.join(d, "scripts")) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return os.path.join(d, sub)


sys.path.insert(0, repo_dir("scripts"))
import batches  # noqa: E402

# train/net_config.h's TrainRecipe defaults, for keys a config's [train] leaves out.
RECIPE_DEFAULTS = dict(epochs=15, batch=128, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4,
                       nesterov=True, beta1=0.9, beta2=0.999, adam_eps=1e-8, schedule="onecycle",
                       warmup_epochs=0.0, pct_start=0.3, div_factor=25.0, final_div_factor=1e4, step_epochs=30,
                       gamma=0.1, min_lr=0.0, weight_decay_norm=True, weight_decay_bias=True, label_smoothing=0.0,
                       eval_flip=False, ema=0.0)
WARMUP_STEPS = 3


def lr_at(r, step, total, per_epoch):
    """train/optimizer.cpp's lr_at: the learning rate of step `step` (0-based) of `total`."""
    def cos_anneal(start, end, frac):
        return end + (start - end) * 0.5 * (1 + math.cos(math.pi * min(max(frac, 0.0), 1.0)))
    if r["schedule"] == "onecycle":
        start = r["lr"] / r["div_factor"]
        end, up = start / r["final_div_factor"], max(1.0, r["pct_start"] * total - 1)
        if step <= up:
            return cos_anneal(start, r["lr"], step / up)
        return cos_anneal(r["lr"], end, (step - up) / max(1.0, total - 1 - up))
    warm = math.floor(r["warmup_epochs"] * per_epoch + 0.5)  # std::llround, not Python's round-half-even
    if step < warm:
        return r["lr"] * (step + 1) / warm
    if r["schedule"] == "step":
        return r["lr"] * r["gamma"] ** (step // (max(1, per_epoch) * r["step_epochs"]))
    if r["schedule"] == "cosine":
        return cos_anneal(r["lr"], r["min_lr"], (step - warm) / max(1, total - warm))
    return r["lr"]


class TomlNet(nn.Module):
    """The [[layer]] list of a convoy config as a PyTorch module (inputs = residual joins)."""

    def __init__(self, layers, in_shape, classes):
        super().__init__()
        self.layers = layers
        self.mods = nn.ModuleDict()  # keyed by layer name with "." as "_" (ModuleDict refuses dots)
        shapes = {"data": in_shape}
        prev = "data"
        for i, spec in enumerate(layers):
            spec.setdefault("name", f"{spec['type']}{i + 1}")
            ins = spec.get("inputs", [prev])
            spec["_in"] = [ins] if isinstance(ins, str) else ins
            mod, shapes[spec["name"]] = self.layer(spec, shapes[spec["_in"][0]], classes)
            if mod is not None:
                self.mods[spec["name"].replace(".", "_")] = mod
            prev = spec["name"]

    @staticmethod
    def layer(spec, in_shape, classes):
        """(module or None, output shape) of one [[layer]] table."""
        c, h, w = in_shape
        t = spec["type"]
        if t == "conv":
            k, s, p, g = spec.get("kernel", 3), spec.get("stride", 1), spec.get("pad", 0), spec.get("groups", 1)
            return (nn.Conv2d(c, spec["filters"], k, s, p, groups=g, bias=spec.get("bias", True)),
                    (spec["filters"], (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1))
        if t in ("max_pool", "avg_pool"):
            k = spec.get("kernel", 2)
            s, p = spec.get("stride", k), spec.get("pad", 0)
            return (nn.MaxPool2d if t == "max_pool" else nn.AvgPool2d)(k, s, p), (c, (h + 2 * p - k) // s + 1,
                                                                                (w + 2 * p - k) // s + 1)
        if t == "global_avg_pool":
            return nn.AdaptiveAvgPool2d(1), (c, 1, 1)
        if t == "fc":
            units = classes if spec["units"] == "classes" else spec["units"]
            return nn.Linear(c * h * w, units, bias=spec.get("bias", True)), (units, 1, 1)
        if t == "batch_norm":
            return nn.BatchNorm2d(c, eps=spec.get("eps", 1e-5), momentum=spec.get("momentum", 0.1)), (c, h, w)
        if t == "dropout":
            return nn.Dropout(spec.get("p", 0.5)), (c, h, w)
        if t == "flatten":
            return None, (c * h * w, 1, 1)
        return None, (c, h, w)  # relu, add, softmax_xent

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


# torchvision's nets that a shipped config equals (tests/python/test_config_torchvision.py).
TORCHVISION_NETS = ("resnet18", "resnet50", "googlenet", "mobilenet_v2")


def build_model(cfg, args, in_shape, classes):
    """(model, label): torchvision's ResNet or the config's layers, initialised as asked."""
    name = cfg.get("net", {}).get("name", "")
    kind = args.model if args.model != "auto" else name if name in TORCHVISION_NETS else "config"
    if kind == "config":
        model, label = TomlNet(cfg["layer"], in_shape, classes), "config layers"
    else:
        import torchvision
        # GoogLeNet as configs/googlenet.toml has it: no auxiliary heads, no input transform.
        extra = {"aux_logits": False, "transform_input": False, "init_weights": True} if kind == "googlenet" else {}
        model, label = getattr(torchvision.models, kind)(num_classes=classes, **extra), f"torchvision {kind}"
    if args.init == "config":
        init_like_convoy(model, cfg.get("net", {}).get("init", "default"))
    if cfg.get("net", {}).get("zero_init_residual", False):
        zero_init_residual(model)
    return model, label


@torch.no_grad()
def zero_init_residual(model):
    """[net] zero_init_residual: torchvision's (the last batch norm of each block) for its ResNets; for
    the config's layers, train/net.cpp's rule: of each add, the input deepest in the net, if a batch norm."""
    if not isinstance(model, TomlNet):
        for m in model.modules():
            last = getattr(m, "bn3", None) if hasattr(m, "conv3") else getattr(m, "bn2", None)
            if hasattr(m, "downsample") and last is not None:  # a BasicBlock or Bottleneck
                nn.init.zeros_(last.weight)
        return
    depth, types = {"data": 0}, {}
    for spec in model.layers:
        depth[spec["name"]] = 1 + max(depth[i] for i in spec["_in"])
        types[spec["name"]] = spec["type"]
        if spec["type"] == "add":
            deepest = max(spec["_in"], key=lambda i: depth[i])
            if types.get(deepest) == "batch_norm":
                nn.init.zeros_(model.mods[deepest.replace(".", "_")].weight)


@torch.no_grad()
def init_like_convoy(model, rule):
    """train/net.cpp's init_weights, drawn from torch's generator: batch norm 1 and 0; conv and fc
    weights normal with std sqrt(2 / fan_in) and zero biases (kaiming), or uniform +-1/sqrt(fan_in)."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.Conv2d, nn.Linear)):
            fan_in = m.weight[0].numel()
            if rule == "kaiming":
                m.weight.normal_(0, math.sqrt(2 / fan_in))
                if m.bias is not None:
                    m.bias.zero_()
            else:
                bound = 1 / math.sqrt(fan_in)
                m.weight.uniform_(-bound, bound)
                if m.bias is not None:
                    m.bias.uniform_(-bound, bound)


def param_groups(model, r):
    """The parameters, those without weight decay apart: batch norm's under weight_decay_norm = false,
    every bias under weight_decay_bias = false (train/optimizer.h's no_decay_mask)."""
    decay, none = [], []
    for m in model.modules():
        norm = isinstance(m, nn.modules.batchnorm._BatchNorm) and not r["weight_decay_norm"]
        for name, p in m.named_parameters(recurse=False):
            (none if norm or (name == "bias" and not r["weight_decay_bias"]) else decay).append(p)
    return [{"params": decay}] + ([{"params": none, "weight_decay": 0.0}] if none else [])


def make_optimizer(params, r, device):
    """(optimizer, label): the recipe's, fused where this torch and device have it."""
    if r["optimizer"] not in ("sgd", "adam", "adamw"):  # torch has no LARS: refused, not run as another
        sys.exit(f"pytorch_train: optimizer = \"{r['optimizer']}\" has no PyTorch twin here (sgd, adam, adamw)")
    if r["optimizer"] == "sgd":
        cls = torch.optim.SGD
        kw = dict(lr=r["lr"], momentum=r["momentum"], nesterov=r["nesterov"], weight_decay=r["weight_decay"])
    else:
        cls = torch.optim.AdamW if r["optimizer"] == "adamw" else torch.optim.Adam
        kw = dict(lr=r["lr"], betas=(r["beta1"], r["beta2"]), eps=r["adam_eps"], weight_decay=r["weight_decay"])
    accepted = inspect.signature(cls).parameters
    for how in ("fused", "foreach"):
        if how in accepted and (how != "fused" or device.type == "cuda"):
            return cls(params, **kw, **{how: True}), f"{r['optimizer']} {how}"
    return cls(params, **kw), r["optimizer"]


class Inputs:
    """uint8 NHWC batches on the device to the net's normalised float input."""

    def __init__(self, ds, device, channels_last, channels_in):
        c = ds.shape[2]
        std = np.where(ds.std > 1e-6, ds.std, 1.0)  # as train's Augmenter
        self.mean = torch.tensor(ds.mean, device=device, dtype=torch.float32).view(1, c, 1, 1)
        self.inv_std = torch.tensor(1 / std, device=device, dtype=torch.float32).view(1, c, 1, 1)
        self.channels_last, self.channels_in = channels_last, channels_in

    def __call__(self, x_u8):
        x = (x_u8.permute(0, 3, 1, 2).float() - self.mean) * self.inv_std
        if x.shape[1] != self.channels_in:  # a gray dataset into torchvision's 3-channel stem
            x = x.expand(-1, self.channels_in, -1, -1)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x.contiguous()


def crop_each(xb, crop, generator):
    """A crop x crop window of each image of the uint8 NHWC batch, its corner drawn per sample on
    the device (as train draws one per sample)."""
    n, h, w, _ = xb.shape
    dev = xb.device
    i = torch.randint(0, h - crop + 1, (n, 1, 1), device=dev, generator=generator)
    j = torch.randint(0, w - crop + 1, (n, 1, 1), device=dev, generator=generator)
    span = torch.arange(crop, device=dev)
    return xb[torch.arange(n, device=dev)[:, None, None], i + span[None, :, None], j + span[None, None, :]]


def resident_batches(x, y, aug, batch, steps, generator, per_sample=False):
    """Batches of the device-resident set, a random order per epoch: a window crop per batch (per
    sample with per_sample) after zero padding and a flip per sample, all drawn on the device.
    Yields (uint8 NHWC, labels)."""
    n, h, w, _ = x.shape
    crop, pad, flip = aug.get("crop", 0) or h, aug.get("pad", 0), aug.get("flip", False)
    per_epoch = n // batch
    for k in range(steps):
        if k % per_epoch == 0:
            perm = torch.randperm(n, device=x.device, generator=generator)
        idx = perm[(k % per_epoch) * batch:(k % per_epoch + 1) * batch]
        xb = x[idx]
        if pad:
            xb = F.pad(xb, (0, 0, pad, pad, pad, pad))
        if (pad or crop < h) and per_sample:
            xb = crop_each(xb, crop, generator)
        elif pad or crop < h:
            i, j = np.random.randint(0, xb.shape[1] - crop + 1), np.random.randint(0, xb.shape[2] - crop + 1)
            xb = xb[:, i:i + crop, j:j + crop]
        if flip:
            m = torch.rand(xb.shape[0], device=x.device, generator=generator) < 0.5
            xb = torch.where(m[:, None, None, None], xb.flip(2), xb)
        yield xb, y[idx]


def convoy_batches(args, aug, batch, steps, device):
    """The first `steps` training batches `train --seed` builds, from the convoy module, on the device;
    and the steps of one epoch."""
    try:
        import convoy
    except ImportError:
        sys.exit("--loss-curve reads the batches through the convoy module: PYTHONPATH=build/python")
    loader = convoy.Loader(args.data, batch, seed=args.seed, crop=aug.get("crop", 0), pad=aug.get("pad", 0),
                           flip=aug.get("flip", False), random_resized_crop=aug.get("random_resized_crop", False),
                           scale=tuple(aug.get("scale", (0.08, 1.0))), ratio=tuple(aug.get("ratio", (3 / 4, 4 / 3))))
    if len(loader) == 0:
        sys.exit(f"{args.data}: fewer samples than one batch of {batch}")
    out, epoch = [], 0
    while len(out) < steps:
        loader.set_epoch(epoch)
        for images, labels in loader:  # views of the loader's buffers: copied before the next batch
            out.append((torch.from_numpy(images).to(device, copy=True),
                        torch.from_numpy(labels.astype(np.int64)).to(device)))
            if len(out) == steps:
                break
        epoch += 1
    return out, len(loader)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One training step of the model, the optimiser and the schedule, and the evaluation pass."""

    def __init__(self, model, step_model, opt, inputs, args, device):
        self.model, self.step_model, self.opt, self.inputs = model, step_model, opt, inputs
        self.device, self.bf16 = device, args.bf16
        self.smoothing = 0.0

    def autocast(self):
        return torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16)

    def step(self, xb, yb, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr
        with self.autocast():
            loss = F.cross_entropy(self.step_model(self.inputs(xb)), yb, label_smoothing=self.smoothing)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def warm_up(self, xb, yb, lr):
        """Runs WARMUP_STEPS steps, then puts the weights and the optimiser back as they were;
        (seconds of the first step, seconds of all)."""
        state = {k: v.clone() for k, v in self.model.state_dict().items()}
        sync(self.device)
        t0 = time.perf_counter()
        first = None
        for _ in range(WARMUP_STEPS):
            self.step(xb, yb, lr)
            sync(self.device)
            first = first or time.perf_counter() - t0
        self.model.load_state_dict(state)
        self.opt.state.clear()
        return first, time.perf_counter() - t0

    @torch.no_grad()
    def accuracy(self, x, y, flip=False, chunk=1000):
        """Top-1 of the eager model (compiling the evaluation too would add to no figure here); with
        flip ([train] eval_flip) each image scored by the mean of its and its mirror's softmax, as train."""
        self.model.eval()
        correct = 0
        with self.autocast():
            for k in range(0, len(y), chunk):
                xb = self.inputs(x[k:k + chunk])
                out = self.model(xb).float().softmax(1)
                if flip:
                    out = out + self.model(xb.flip(3)).float().softmax(1)
                correct += (out.argmax(1) == y[k:k + chunk]).sum().item()
        self.model.train()
        return correct / max(1, len(y))


def load(folder, device):
    ds = batches.Dataset(folder, verify=False)
    images, labels, _ = ds.arrays()
    x = torch.from_numpy(np.ascontiguousarray(images)).to(device, copy=True)  # uint8 NHWC
    y = torch.from_numpy(labels.astype(np.int64)).to(device)
    return ds, x, y


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--epochs", type=int, help="default: the config's")
    ap.add_argument("--batch", type=int, help="default: the config's")
    ap.add_argument("--model", default="auto", choices=["auto", "config", *TORCHVISION_NETS],
                    help="one of torchvision's nets or the config's layers (auto: by the config's [net] name)")
    ap.add_argument("--init", default="config", choices=["config", "torchvision"],
                    help="the config's [net] init rule, as train draws it, or the model's own initialisation")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--compile-mode", help="torch.compile's mode, e.g. max-autotune (implies --compile)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--seed", type=int, default=1, help="as train's --seed (the --loss-curve batches)")
    ap.add_argument("--loss-curve", metavar="FILE", help="train on train's batches; write step,loss lines")
    ap.add_argument("--loss-steps", type=int, default=200, help="steps of --loss-curve")
    ap.add_argument("--loss-log", metavar="FILE", help="write the loss of each timed step as step,loss lines")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--crop-per-sample", action="store_true",
                    help="a crop window per sample, as train draws it (default: one per batch)")
    ap.add_argument("--epoch-log", metavar="FILE",
                    help="evaluate on --val after every epoch; write epoch,test_top1,train_seconds lines")
    ap.add_argument("--stop-at-accuracy", type=float, metavar="A",
                    help="with --epoch-log: stop after the first epoch whose test top-1 reaches A")
    args = ap.parse_args()
    if args.stop_at_accuracy is not None and not args.epoch_log:
        ap.error("--stop-at-accuracy needs --epoch-log")
    args.compile = args.compile or bool(args.compile_mode)
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch {torch.__version__} has no torch.compile")
    return args


def training_batches(args, aug, batch, epochs, dev):
    """(batches, steps, steps per epoch, the first batch): train's batches for --loss-curve, else the
    device-resident set's for `epochs` epochs."""
    if args.loss_curve:
        data, per_epoch = convoy_batches(args, aug, batch, args.loss_steps, dev)
        return data, len(data), per_epoch, data[0]
    _, x, y = load(args.data, dev)
    per_epoch = len(y) // batch
    if per_epoch == 0:
        sys.exit(f"{args.data}: fewer samples than one batch of {batch}")
    first = next(resident_batches(x, y, aug, batch, 1, None, args.crop_per_sample))
    data = resident_batches(x, y, aug, batch, epochs * per_epoch, torch.Generator(device=dev).manual_seed(args.seed),
                            args.crop_per_sample)
    return data, epochs * per_epoch, per_epoch, first


def main():
    args = parse_args()
    with open(args.config, "rb") as f:
        cfg = tomllib.load(f)
    r = dict(RECIPE_DEFAULTS, **cfg.get("train", {}))
    if r["ema"]:  # an average of the weights changes what is evaluated: refused, not left out
        sys.exit("pytorch_train: [train] ema has no PyTorch twin here")
    aug = cfg.get("data", {})
    epochs, batch = args.epochs or r["epochs"], args.batch or r["batch"]
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True

    ds = batches.Dataset(args.data, verify=False)
    h, w, c = ds.shape
    crop = aug.get("crop", 0) or h
    model, model_label = build_model(cfg, args, (c, crop, crop), len(ds.classes))
    model = model.to(dev, memory_format=torch.channels_last if args.channels_last else torch.contiguous_format)
    channels_in = next(m for m in model.modules() if isinstance(m, nn.Conv2d)).in_channels
    opt, opt_label = make_optimizer(param_groups(model, r), r, dev)
    step_model = torch.compile(model, mode=args.compile_mode) if args.compile else model
    trainer = Trainer(model, step_model, opt, Inputs(ds, dev, args.channels_last, channels_in), args, dev)
    trainer.smoothing = r["label_smoothing"]  # training steps only, as train's

    data, steps, per_epoch, first = training_batches(args, aug, batch, epochs, dev)
    total = epochs * per_epoch  # the schedule's length, as train's
    compile_seconds, setup_seconds = trainer.warm_up(*first, lr_at(r, 0, total, per_epoch))
    _, xva, yva = load(args.val, dev)
    evaluate = EpochLog(args, trainer, xva, yva, r["eval_flip"], epochs) if args.epoch_log else None
    losses = torch.zeros(steps, device=dev)  # filled on the device: no wait for the host per step
    t0 = time.perf_counter()
    for k, (xb, yb) in enumerate(data):
        losses[k] = trainer.step(xb, yb, lr_at(r, k, total, per_epoch))
        if evaluate and (k + 1) % per_epoch == 0 and evaluate.after_epoch((k + 1) // per_epoch, t0):
            steps = k + 1
            break
    sync(dev)
    seconds = time.perf_counter() - t0 - (evaluate.eval_seconds if evaluate else 0.0)
    if args.loss_curve or args.loss_log:
        with open(args.loss_curve or args.loss_log, "w") as f:
            f.write("step,loss\n" + "".join(f"{k + 1},{v:.6f}\n" for k, v in enumerate(losses[:steps].tolist())))
    acc = evaluate.last if evaluate and evaluate.last is not None else trainer.accuracy(xva, yva, r["eval_flip"])
    report(args, model_label, opt_label, steps, per_epoch, batch, seconds, compile_seconds, setup_seconds, acc)


class EpochLog:
    """--epoch-log: the test top-1 after each epoch and the training seconds up to it (the timed
    loop's, evaluation left out), one CSV line each, and a line `epoch E/N: test top-1 A` on stderr
    as it happens (benchmarks/time_to_accuracy.py stamps it with the time since launch)."""

    def __init__(self, args, trainer, x, y, flip, epochs):
        self.trainer, self.x, self.y, self.flip, self.epochs = trainer, x, y, flip, epochs
        self.stop_at, self.eval_seconds, self.last = args.stop_at_accuracy, 0.0, None
        self.f = open(args.epoch_log, "w")
        self.f.write("epoch,test_top1,train_seconds\n")
        self.f.flush()

    def after_epoch(self, epoch, t0):
        """Evaluates; true when the run should stop here."""
        sync(self.trainer.device)
        t = time.perf_counter()
        train_seconds = t - t0 - self.eval_seconds
        self.last = self.trainer.accuracy(self.x, self.y, self.flip)
        self.eval_seconds += time.perf_counter() - t
        self.f.write(f"{epoch},{self.last:.4f},{train_seconds:.3f}\n")
        self.f.flush()
        print(f"epoch {epoch}/{self.epochs}: test top-1 {self.last:.4f}", file=sys.stderr, flush=True)
        return self.stop_at is not None and self.last >= self.stop_at


def report(args, model_label, opt_label, steps, per_epoch, batch, seconds, compile_seconds, setup_seconds, acc):
    mode = "eager"
    if args.compile:
        mode = "torch.compile" + (f" {args.compile_mode}" if args.compile_mode else "")
    impl = (f"pytorch {torch.__version__} {mode}" + (" bf16" if args.bf16 else "")
            + (" channels_last" if args.channels_last else "") + f", {model_label}")
    print(json.dumps({"impl": impl, "config": os.path.basename(args.config), "model": model_label,
                      "optimizer": opt_label, "epochs": round(steps / per_epoch, 3), "steps": steps, "batch": batch,
                      "images_per_s": round(steps * batch / seconds, 1), "seconds": round(seconds, 2),
                      "compile_seconds": round(compile_seconds, 2), "setup_seconds": round(setup_seconds, 2),
                      "test_accuracy": round(acc, 4),
                      "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}))


if __name__ == "__main__":
    main()
