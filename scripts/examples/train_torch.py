#!/usr/bin/env python3
# Trains a torchvision ResNet with PyTorch DDP on convoy batch files read by the convoy module:
# one process per GPU under torchrun or mpirun, or one CPU process for a smoke test.
"""Train a torchvision ResNet on a convoy dataset folder through the `convoy` Python module.

    PYTHONPATH=build/python torchrun --nproc-per-node 8 scripts/examples/train_torch.py \\
        --data data/train --val data/val --arch resnet50 --batch 128 --crop 224 --random-resized-crop
    mpirun -np 8 -x MASTER_ADDR=host0 -x PYTHONPATH=build/python python3 scripts/examples/train_torch.py ...
    PYTHONPATH=build/python python3 scripts/examples/train_torch.py --data data/train --device cpu --steps 2

--batch is per process (the global batch is --batch x processes), as convoy.Loader's batch_size.
Rank and world size come from torchrun's RANK/WORLD_SIZE/LOCAL_RANK or Open MPI's OMPI_COMM_WORLD_*;
MASTER_ADDR/MASTER_PORT default to this host and a free port when there is one process. Each sample's
crop and flip, the order and the sharding are those `train` uses for the same --seed and flags.
Prints one line per epoch with the images per second of all processes together.
"""
import argparse
import inspect
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

import convoy


def world_from_env():
    """(rank, world size, local rank) from torchrun or Open MPI, else a single process."""
    for r, w, l in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")):
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w]), int(os.environ.get(l, os.environ[r]))
    return 0, 1, 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GpuNormalize(torch.nn.Module):
    """uint8 NHWC batches to normalised float NCHW in channels_last memory, on the model's device."""

    def __init__(self, mean, std, channels_out):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("inv_std", 1.0 / torch.tensor(std, dtype=torch.float32).clamp_min(1e-6).view(1, -1, 1, 1))
        self.channels_out = channels_out

    def forward(self, images):
        # NHWC permuted to NCHW is already channels_last in memory; the float ops keep that layout.
        x = (images.permute(0, 3, 1, 2).float() - self.mean) * self.inv_std
        if x.shape[1] != self.channels_out:  # gray datasets into a 3-channel stem
            x = x.expand(-1, self.channels_out, -1, -1)
        return x.contiguous(memory_format=torch.channels_last)


def make_optimizer(params, args, device):
    kw = dict(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay, nesterov=True)
    accepted = inspect.signature(torch.optim.SGD).parameters
    # One fused kernel over all parameters where this torch has it; else the multi-tensor path.
    if device.type == "cuda" and "fused" in accepted:
        return torch.optim.SGD(params, fused=True, **kw), "fused"
    if "foreach" in accepted:
        return torch.optim.SGD(params, foreach=True, **kw), "foreach"
    return torch.optim.SGD(params, **kw), "plain"


def evaluate(model, normalize, loader, device, autocast):
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, correct, samples
    with torch.no_grad():
        for images, labels in loader:
            x = normalize(images.to(device, non_blocking=True))
            y = labels.to(device, non_blocking=True)
            with autocast():
                logits = model(x)
            sums += torch.stack([F.cross_entropy(logits.float(), y, reduction="sum").double(),
                                 (logits.argmax(1) == y).sum().double(), torch.tensor(float(y.numel()), device=device,
                                                                                      dtype=torch.float64)])
    dist.all_reduce(sums)
    model.train()
    loss, correct, n = sums.tolist()
    return loss / max(n, 1), correct / max(n, 1), int(n)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="convoy dataset folder (batch files + dataset.json)")
    ap.add_argument("--val", help="validation dataset folder (same classes)")
    ap.add_argument("--arch", default="resnet18", help="a torchvision.models ResNet: resnet18, resnet50, ...")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps in all (0: every epoch in full)")
    ap.add_argument("--batch", type=int, default=128, help="batch per process")
    ap.add_argument("--lr", type=float, default=0.1, help="peak learning rate (one-cycle schedule)")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--crop", type=int, default=0, help="output side (0: the stored size)")
    ap.add_argument("--pad", type=int, default=0)
    ap.add_argument("--no-flip", action="store_true")
    ap.add_argument("--random-resized-crop", action="store_true")
    ap.add_argument("--eval-resize", type=int, default=0)
    ap.add_argument("--readers", type=int, default=0, help="loader threads per process (0: the loader's choice)")
    ap.add_argument("--shuffle-files", type=int, default=4, help="shuffle window in batch files, as train's")
    ap.add_argument("--order", default="local", choices=["local", "global"],
                    help="how samples are dealt to processes, as train's --order")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"], help="bf16 autocast or plain fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    args = ap.parse_args(argv)

    rank, world, local_rank = world_from_env()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        if world > 1:
            os.environ["MASTER_PORT"] = "29500"
        else:
            os.environ["MASTER_PORT"] = str(free_port())
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        torch.backends.cudnn.benchmark = True
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)

    crops = dict(crop=args.crop, pad=args.pad, flip=not args.no_flip, random_resized_crop=args.random_resized_crop)
    train = convoy.Loader(args.data, args.batch, rank=rank, world_size=world, seed=args.seed,
                          readers=args.readers, window_files=args.shuffle_files, order=args.order, as_torch=True,
                          **crops)
    val = None
    if args.val:
        val = convoy.Loader(args.val, args.batch, rank=rank, world_size=world, train=False, drop_last=False,
                            crop=args.crop, eval_resize=args.eval_resize, readers=args.readers, as_torch=True)
        if val.classes != train.classes:
            sys.exit(f"{args.val}: class names differ from {args.data}'s")
    h, w, c = train.image_shape
    classes = len(train.classes)
    if rank == 0:
        print(f"{args.data}: {train.num_samples} samples, {classes} classes, {h}x{w}x{c} crops; {world} process(es) "
              f"x batch {args.batch}, {len(train)} steps per epoch, {train.readers} reader(s) each", flush=True)

    model = getattr(torchvision.models, args.arch)(num_classes=classes)
    model = model.to(device, memory_format=torch.channels_last)
    # The training data's statistics, for validation too, as the net is trained on them.
    normalize = GpuNormalize(train.mean, train.std, 3).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    net = torch.compile(ddp) if args.compile and hasattr(torch, "compile") else ddp
    if args.compile and net is ddp and rank == 0:
        print("torch.compile is not in this PyTorch; running eagerly", flush=True)
    opt, opt_kind = make_optimizer(model.parameters(), args, device)
    total = len(train) * args.epochs
    if args.steps:
        total = min(total, args.steps)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=max(1, total), pct_start=0.25)

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    if rank == 0:
        print(f"{args.arch} on {device}, {args.precision}, channels_last, SGD ({opt_kind})", flush=True)
    step = 0
    for epoch in range(args.epochs):
        if step >= total:
            break
        train.set_epoch(epoch)
        start = time.perf_counter()
        seen = steps_done = 0
        loss_sum = torch.zeros((), device=device)
        for images, labels in train:
            x = normalize(images.to(device, non_blocking=True))
            y = labels.to(device, non_blocking=True)
            with autocast():
                logits = net(x)
                loss = F.cross_entropy(logits.float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.detach()
            seen += y.numel()
            steps_done += 1
            step += 1
            if step >= total:
                break
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        loss_mean = loss_sum.item() / max(1, steps_done)
        line = (f"epoch {epoch}: {steps_done} steps, loss {loss_mean:.4f}, "
                f"{seen * world / seconds:.0f} images/s ({seconds:.2f} s)")
        if val is not None:
            # The bare model: ranks may hold different numbers of evaluation batches, and DDP's forward
            # could enter a collective that another rank never reaches.
            vl, vacc, vn = evaluate(model, normalize, val, device, autocast)
            line += f"; val loss {vl:.4f} top-1 {vacc:.4f} ({vn} samples)"
        if rank == 0:
            print(line, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
