#!/usr/bin/env python3
# The PyTorch ImageFolder + DataLoader side of imagenet_scale.sh (images/s) and of convergence_resnet18.sh
# (validation top-1 after every epoch under a convoy config's recipe): PIL decode, RandomResizedCrop, flip.
"""The loader side in its strongest usual form: worker processes with persistent workers, pinned
memory and deep prefetch, uint8 tensors out of the workers (a quarter of the bytes of float32) with
the normalisation done on the GPU; torchvision's ResNet-18 in channels_last with bf16 autocast, fused
SGD and torch.compile.

Throughput (imagenet_scale.sh): compilation and the first steps are timed apart; images/s is over
whole epochs after them, and "loader wait" is the share of that time the training loop spent blocked
on the next batch. Prints one JSON line.

    python3 benchmarks/torch_imagefolder.py --data DIR/folder/train [--epochs 2] [--warmup-steps 30]
    python3 benchmarks/torch_imagefolder.py --data DIR/folder/train --device cpu --steps 3 --no-compile

Convergence (convergence_resnet18.sh): `--epoch-log FILE --val DIR/folder/val` trains --epochs whole
epochs and evaluates on --val after each (eval mode, the eager model: Resize(eval_resize) then
CenterCrop(crop), torchvision's Resize(256) + CenterCrop(224) by default), writing `epoch,test_top1,
train_seconds` lines to FILE and `epoch E/N: test top-1 A` on stderr as each ends (the format
time_to_accuracy.py reads from pytorch_train.py). `--config C` takes the recipe of a convoy config as
train does (pytorch_train.py's reading: SGD's momentum, Nesterov and weight decay, the lr of each step
from train's schedule, label_smoothing, weight_decay_norm/bias, zero_init_residual; [train] epochs and
batch as defaults; [data] crop, scale, ratio, flip and eval_resize); a --batch other than the
config's scales its lr by the ratio, as torchvision's recipe scales it by batch / 256. The first
steps that compile the model are undone before the first epoch, so every epoch trains as the
schedule says; they count in the time since launch, not in train_seconds.

    python3 benchmarks/torch_imagefolder.py --data D/folder/train --val D/folder/val --config C \\
        --epochs 16 --seed 1 --epoch-log epochs.csv
"""
import argparse
import json
import os
import signal
import sys
import time

import PIL
import torch
import torch.nn.functional as F
import torchvision
from torchvision import datasets, transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_train  # noqa: E402  (the config's recipe and schedule, read as train reads them)

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# Without --config: torchvision's ResNet recipe at a constant lr, 224 px crops, eval 256 then 224.
PLAIN = {"net": {"name": "resnet18"}, "train": {"lr": 0.1, "momentum": 0.9, "nesterov": False, "weight_decay": 1e-4,
                                                "schedule": "constant", "batch": 256, "epochs": 2},
         "data": {"crop": 224, "flip": True, "eval_resize": 256}}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="an ImageFolder root: one folder of JPEGs per class")
    ap.add_argument("--val", help="an ImageFolder root of the validation images (with --epoch-log)")
    ap.add_argument("--config",
                    help="a convoy config: its recipe and [data] crops (default: torchvision's, lr constant)")
    ap.add_argument("--epoch-log", metavar="FILE", help="evaluate on --val after every epoch; write epoch,test_top1,"
                                                        "train_seconds lines")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, help="default: the config's, else 256")
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--prefetch-factor", type=int, default=4)
    ap.add_argument("--epochs", type=int, help="timed epochs, after the warm-up steps (default: the config's, else 2)")
    ap.add_argument("--warmup-steps", type=int, help="steps before the timed ones (compilation, autotuning); "
                                                     "default 30, with --epoch-log 3 and undone")
    ap.add_argument("--steps", type=int, default=0, help="at most this many steps per phase (0: whole epochs)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast (a CPU smoke run)")
    ap.add_argument("--init", choices=["torchvision", "config"], default="torchvision",
                    help="the model's own initialisation, or the config's [net] init rule as train draws it")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.epoch_log and not args.val:
        ap.error("--epoch-log needs --val")
    if args.config:
        with open(args.config, "rb") as f:
            args.cfg = tomllib.load(f)
    else:
        args.cfg = PLAIN
    return args


def recipe(args):
    """The [train] table with train's defaults, its lr scaled to --batch; (recipe, [data] table)."""
    r = dict(pytorch_train.RECIPE_DEFAULTS, **args.cfg.get("train", {}))
    if r["ema"]:  # an average of the weights changes what is evaluated: refused, not left out
        sys.exit("torch_imagefolder: [train] ema has no PyTorch twin here")
    batch = args.batch or r["batch"]
    r["lr"] *= batch / r["batch"]
    r["batch"], r["epochs"] = batch, args.epochs or r["epochs"]
    return r, args.cfg.get("data", {})


def loaders(args, aug, batch, cuda):
    """(training loader, validation loader or None, classes)."""
    crop = aug.get("crop", 0) or 224
    rrc = transforms.RandomResizedCrop(crop, scale=tuple(aug.get("scale", (0.08, 1.0))),
                                       ratio=tuple(aug.get("ratio", (3 / 4, 4 / 3))))
    flip = [transforms.RandomHorizontalFlip()] if aug.get("flip", False) else []
    ds = datasets.ImageFolder(args.data, transform=transforms.Compose([rrc, *flip, transforms.PILToTensor()]))
    procs = {"persistent_workers": True, "prefetch_factor": args.prefetch_factor} if args.workers > 0 else {}
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True,
                                     num_workers=args.workers, pin_memory=cuda, **procs)
    if len(dl) == 0:
        sys.exit(f"{args.data}: fewer images than one batch of {batch}")
    if not args.val:
        return dl, None, ds.classes
    resize = [transforms.Resize(aug["eval_resize"])] if aug.get("eval_resize") else []
    vs = datasets.ImageFolder(args.val, transform=transforms.Compose(
        [*resize, transforms.CenterCrop(crop), transforms.PILToTensor()]))
    if vs.classes != ds.classes:
        sys.exit(f"{args.val}: its class folders are not those of {args.data}")
    vl = torch.utils.data.DataLoader(vs, batch_size=batch, shuffle=False, num_workers=args.workers,
                                     pin_memory=cuda, **procs)
    return dl, vl, ds.classes


class Steps:
    """The model, its optimiser and one training step; the evaluation pass."""

    def __init__(self, args, r, classes, crop, dev):
        self.dev, self.cuda, self.bf16 = dev, dev.type == "cuda", not args.fp32
        self.model, _ = pytorch_train.build_model(args.cfg, argparse.Namespace(model="auto", init=args.init),
                                                  (3, crop, crop), classes)
        self.model = self.model.to(dev, memory_format=torch.channels_last)
        # fused where this torch and device have it: what a tuned GPU run uses
        self.opt, self.opt_label = pytorch_train.make_optimizer(pytorch_train.param_groups(self.model, r), r, dev)
        self.step_model = self.model if args.no_compile else torch.compile(self.model)
        self.smoothing, self.flip = r["label_smoothing"], r["eval_flip"]
        self.mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=dev).view(1, 3, 1, 1) * 255

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def inputs(self, x):
        x = x.to(self.dev, non_blocking=True).float().sub_(self.mean).div_(self.std)
        return x.contiguous(memory_format=torch.channels_last)

    def autocast(self):
        return torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.bf16)

    def step(self, x, y, lr=None):
        if lr is not None:
            for g in self.opt.param_groups:
                g["lr"] = lr
        x, y = self.inputs(x), y.to(self.dev, non_blocking=True)
        with self.autocast():
            loss = F.cross_entropy(self.step_model(x), y, label_smoothing=self.smoothing)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()

    @torch.no_grad()
    def accuracy(self, loader):
        """Top-1 of the eager model in eval mode (compiling the evaluation too would add a compilation
        and change no figure); with [train] eval_flip each image scored by the mean of its and its
        mirror's softmax, as train scores it."""
        self.model.eval()
        correct = total = 0
        with self.autocast():
            for x, y in loader:
                x, y = self.inputs(x), y.to(self.dev, non_blocking=True)
                out = self.model(x).float().softmax(1)
                if self.flip:
                    out = out + self.model(x.flip(3)).float().softmax(1)
                correct += (out.argmax(1) == y).sum().item()
                total += len(y)
        self.model.train()
        return correct / max(1, total)


def throughput(args, s, dl, steps_per_epoch, warmup):
    """imagenet_scale.sh's figures: warm-up steps (kept), then timed epochs and the model alone."""

    def run(steps):
        """Runs up to `steps` steps of a fresh pass over the loader; returns (steps, images, seconds,
        seconds blocked on the loader, seconds to the first batch, seconds of the first step)."""
        s.sync()
        t0 = time.perf_counter()
        wait = first_batch = first_step = 0.0
        n = images = 0
        it = iter(dl)
        while n < steps:
            t = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waited = time.perf_counter() - t
            wait += waited
            if n == 0:
                first_batch = waited
            s.step(x, y)
            if n == 0:
                s.sync()
                first_step = time.perf_counter() - t - waited
            n += 1
            images += x.shape[0]
        s.sync()
        return n, images, time.perf_counter() - t0, wait, first_batch, first_step

    w_steps, _, w_secs, _, w_first_batch, compile_seconds = run(warmup)
    epochs = [run(steps_per_epoch) for _ in range(args.epochs)]
    steps = sum(e[0] for e in epochs)
    images = sum(e[1] for e in epochs)
    seconds = sum(e[2] for e in epochs)
    wait = sum(e[3] for e in epochs)

    # What the model alone does on one batch held on the device: the rate a loader would have to reach.
    x, y = next(iter(dl))
    model_only = None
    if steps:
        k = min(20, steps_per_epoch)
        s.sync()
        t = time.perf_counter()
        for _ in range(k):
            s.step(x, y)
        s.sync()
        model_only = k * x.shape[0] / (time.perf_counter() - t)
    return {"compile_seconds": round(compile_seconds, 2), "warmup_steps": w_steps,
            "warmup_seconds": round(w_secs, 2), "warmup_first_batch_seconds": round(w_first_batch, 2),
            "epochs": len(epochs), "steps": steps, "images": images, "seconds": round(seconds, 2),
            "images_per_s": round(images / seconds, 1) if seconds else None,
            "epoch_images_per_s": [round(e[1] / e[2], 1) for e in epochs if e[2]],
            "first_batch_seconds": [round(e[4], 3) for e in epochs],
            "loader_wait_pct": round(100 * wait / seconds, 2) if seconds else None,
            "model_only_images_per_s": round(model_only, 1) if model_only else None}


def warm_up(s, x, y, steps, lr):
    """Runs `steps` steps on one batch (compilation, cuDNN's choices), then puts the weights and the
    optimiser back as they were; the seconds it took."""
    state = {k: v.clone() for k, v in s.model.state_dict().items()}
    s.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        s.step(x, y, lr)
    s.sync()
    s.model.load_state_dict(state)
    s.opt.state.clear()
    return time.perf_counter() - t0


def convergence(args, s, r, dl, vl, steps_per_epoch, warmup):
    """--epoch-log: every epoch at the schedule's lr of each step (train's lr_at over epochs x steps),
    then the validation top-1; one CSV line and one stderr line each."""
    total = args.epochs * steps_per_epoch
    x, y = next(iter(dl))
    compile_seconds = warm_up(s, x, y, warmup, pytorch_train.lr_at(r, 0, total, steps_per_epoch))
    log = open(args.epoch_log, "w")
    log.write("epoch,test_top1,train_seconds\n")
    log.flush()
    train_seconds, images, top1 = 0.0, 0, None
    for epoch in range(1, args.epochs + 1):
        s.sync()
        t0 = time.perf_counter()
        k = (epoch - 1) * steps_per_epoch
        for n, (x, y) in enumerate(dl):
            if n == steps_per_epoch:
                break
            s.step(x, y, pytorch_train.lr_at(r, k + n, total, steps_per_epoch))
            images += x.shape[0]
        s.sync()
        train_seconds += time.perf_counter() - t0
        top1 = s.accuracy(vl)
        log.write(f"{epoch},{top1:.4f},{train_seconds:.3f}\n")
        log.flush()
        print(f"epoch {epoch}/{args.epochs}: test top-1 {top1:.4f}", file=sys.stderr, flush=True)
    return {"compile_seconds": round(compile_seconds, 2), "warmup_steps": warmup, "epochs": args.epochs,
            "steps": total, "images": images, "train_seconds": round(train_seconds, 2),
            "images_per_s": round(images / train_seconds, 1) if train_seconds else None,
            "val_images": len(vl.dataset), "test_top1": top1, "lr": r["lr"], "schedule": r["schedule"],
            "label_smoothing": r["label_smoothing"]}


def main():
    args = parse_args()
    # A SIGTERM (a time limit) ends the run through Python's exit, which stops the loader's workers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = True
    if not args.no_compile and not hasattr(torch, "compile"):
        sys.exit(f"torch {torch.__version__} has no torch.compile: --no-compile")

    r, aug = recipe(args)
    args.epochs = r["epochs"]
    dl, vl, classes = loaders(args, aug, r["batch"], cuda)
    steps_per_epoch = min(len(dl), args.steps) if args.steps else len(dl)
    warmup = args.warmup_steps if args.warmup_steps is not None else 3 if args.epoch_log else 30
    if args.steps:
        warmup = min(warmup, args.steps)
    s = Steps(args, r, len(classes), aug.get("crop", 0) or 224, dev)
    setup_seconds = time.perf_counter() - t_start
    figures = convergence(args, s, r, dl, vl, steps_per_epoch, warmup) if args.epoch_log else \
        throughput(args, s, dl, steps_per_epoch, warmup)

    print(json.dumps({
        "impl": "pytorch ImageFolder + DataLoader", "torch": torch.__version__, "torchvision": torchvision.__version__,
        "pillow": PIL.__version__, "device": str(dev), "gpu": torch.cuda.get_device_name() if cuda else None,
        "images_in_set": len(dl.dataset), "classes": len(classes), "batch": r["batch"], "workers": args.workers,
        "prefetch_factor": args.prefetch_factor, "compile": not args.no_compile, "bf16": not args.fp32,
        "optimizer": s.opt_label, "config": os.path.basename(args.config) if args.config else None,
        "seed": args.seed, "cpus": len(os.sched_getaffinity(0)), "setup_seconds": round(setup_seconds, 2),
        **figures}), flush=True)


if __name__ == "__main__":
    main()
