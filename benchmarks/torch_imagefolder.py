#!/usr/bin/env python3
# The PyTorch baseline for imagenet_scale.sh: a folder of JPEGs through torchvision's ImageFolder and
# a DataLoader (PIL decode, RandomResizedCrop, flip) into ResNet-18 on one GPU. Prints one JSON line.
"""The loader side in its strongest usual form: worker processes with persistent workers, pinned
memory and deep prefetch, uint8 tensors out of the workers (a quarter of the bytes of float32) with
the normalisation done on the GPU; the model in channels_last with bf16 autocast, fused SGD and
torch.compile. Compilation and the first steps are timed apart; images/s is over whole epochs after
them, and "loader wait" is the share of that time the training loop spent blocked on the next batch.

    python3 benchmarks/torch_imagefolder.py --data DIR/folder/train [--epochs 2] [--warmup-steps 30]
    python3 benchmarks/torch_imagefolder.py --data DIR/folder/train --device cpu --steps 3 --no-compile
"""
import argparse
import json
import os
import time

import PIL
import torch
import torch.nn.functional as F
import torchvision
from torchvision import datasets, transforms

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="an ImageFolder root: one folder of JPEGs per class")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--prefetch-factor", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs, after the warm-up steps")
    ap.add_argument("--warmup-steps", type=int, default=30, help="untimed steps first (compilation, autotuning)")
    ap.add_argument("--steps", type=int, default=0, help="at most this many steps per phase (0: whole epochs)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    t_start = time.perf_counter()
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = True

    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = datasets.ImageFolder(args.data, transform=tf)
    procs = {"persistent_workers": True, "prefetch_factor": args.prefetch_factor} if args.workers > 0 else {}
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, drop_last=True,
                                     num_workers=args.workers, pin_memory=cuda, **procs)
    steps_per_epoch = len(dl)
    if args.steps:
        steps_per_epoch = min(steps_per_epoch, args.steps)
    warmup = min(args.warmup_steps, args.steps) if args.steps else args.warmup_steps

    model = torchvision.models.resnet18(num_classes=len(ds.classes)).to(dev, memory_format=torch.channels_last)
    # fused=True is what a tuned GPU run uses; older PyTorch and its CPU builds may lack it.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, **({"fused": True} if cuda else {}))
    step_model = model if args.no_compile else torch.compile(model)
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1) * 255

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def step(x, y):
        x = x.to(dev, non_blocking=True).float().sub_(mean).div_(std).contiguous(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(step_model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    def run(steps):
        """Runs up to `steps` steps of a fresh pass over the loader; returns (steps, images, seconds,
        seconds blocked on the loader, seconds to the first batch, seconds of the first step)."""
        sync()
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
            step(x, y)
            if n == 0:
                sync()
                first_step = time.perf_counter() - t - waited
            n += 1
            images += x.shape[0]
        sync()
        return n, images, time.perf_counter() - t0, wait, first_batch, first_step

    setup_seconds = time.perf_counter() - t_start
    w_steps, _, w_secs, _, w_first_batch, compile_seconds = run(warmup)
    epochs = []
    for _ in range(args.epochs):
        epochs.append(run(steps_per_epoch))
    steps = sum(e[0] for e in epochs)
    images = sum(e[1] for e in epochs)
    seconds = sum(e[2] for e in epochs)
    wait = sum(e[3] for e in epochs)

    # What the model alone does on one batch held on the device: the rate a loader would have to reach.
    x, y = next(iter(dl))
    model_only = None
    if steps:
        k = min(20, steps_per_epoch)
        sync()
        t = time.perf_counter()
        for _ in range(k):
            step(x, y)
        sync()
        model_only = k * x.shape[0] / (time.perf_counter() - t)

    print(json.dumps({
        "impl": "pytorch ImageFolder + DataLoader", "torch": torch.__version__, "torchvision": torchvision.__version__,
        "pillow": PIL.__version__, "device": str(dev), "gpu": torch.cuda.get_device_name() if cuda else None,
        "images_in_set": len(ds), "classes": len(ds.classes), "batch": args.batch, "workers": args.workers,
        "prefetch_factor": args.prefetch_factor, "compile": not args.no_compile, "cpus": len(os.sched_getaffinity(0)),
        "setup_seconds": round(setup_seconds, 2), "compile_seconds": round(compile_seconds, 2),
        "warmup_steps": w_steps, "warmup_seconds": round(w_secs, 2), "warmup_first_batch_seconds": round(w_first_batch, 2),
        "epochs": len(epochs), "steps": steps, "images": images, "seconds": round(seconds, 2),
        "images_per_s": round(images / seconds, 1) if seconds else None,
        "epoch_images_per_s": [round(e[1] / e[2], 1) for e in epochs if e[2]],
        "first_batch_seconds": [round(e[4], 3) for e in epochs],
        "loader_wait_pct": round(100 * wait / seconds, 2) if seconds else None,
        "model_only_images_per_s": round(model_only, 1) if model_only else None}), flush=True)


if __name__ == "__main__":
    main()
