#!/usr/bin/env python3
# PyTorch DistributedDataParallel at its best on one or more GPUs, one process a GPU started by mpirun or
# torchrun: the baseline of convoy's multi-GPU and multi-node runs (benchmarks/multi_gpu.sh).
"""torchvision's ResNet-18 or ResNet-50 under DDP, timed as it runs fastest: the model in channels_last
with bf16 autocast, torch.compile (DDP's graph breaks at its buckets), fused SGD, gradients as bucket
views, and the gradients all-reduced in bf16 by DDP's own compression hook (`--hook bf16`, the default;
`--hook none` sends them in fp32; `--hook powersgd` sends rank-`--powersgd-rank` approximations with error
feedback, DDP's PowerSGD hook, from the third step on). The data is on the GPU before timing: each rank holds POOL batches
of random 256 px uint8 images and takes from them a random 224 px window and a flip per sample, so no
loader is in the timed loop (PyTorch's best case, as benchmarks/pytorch_train.py on one GPU).

    mpirun -np 4 python3 benchmarks/pytorch_ddp.py --model resnet50 --batch-per-gpu 256
    mpirun -np 4 -x SIM_NODES=2 -x NCCL_IB_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo \\
        benchmarks/simnode.sh python3 benchmarks/pytorch_ddp.py --model resnet18
    mpirun -np 2 python3 benchmarks/pytorch_ddp.py --device cpu --model resnet18 --batch-per-gpu 4 \\
        --size 64 --crop 56 --warmup 1 --steps 2 --no-compile --hook none     (a smoke run, gloo)

Warm-up steps (compilation, cuDNN's autotuning, NCCL's set-up) run first and are timed apart; then
`--steps` steps are timed between two barriers. Rank 0 prints one JSON line: images_per_s over all
ranks, ms per step, compile and set-up seconds, the world size and simulated nodes (SIM_NODES).
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

MEAN = torch.tensor([0.485, 0.456, 0.406]) * 255
STD = torch.tensor([0.229, 0.224, 0.225]) * 255


def world():
    """(rank, size, local rank) from Open MPI's environment or torchrun's."""
    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", 0)))
    size = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", 1)))
    local = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("LOCAL_RANK", 0)))
    return rank, size, local


def batches(args, device, gen):
    """POOL batches of uint8 images and their labels, resident on the device."""
    shape = (args.pool, args.batch_per_gpu, 3, args.size, args.size)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).to(device)
    labels = torch.randint(0, args.classes, (args.pool, args.batch_per_gpu), generator=gen).to(device)
    return images, labels


def sample(images, labels, step, args, mean, std):
    """One batch: a 224 px window at a random place, a flip per sample, normalised, channels_last."""
    i = step % args.pool
    y, x = torch.randint(0, args.size - args.crop + 1, (2,)).tolist()
    b = images[i, :, :, y:y + args.crop, x:x + args.crop]
    flip = torch.rand(b.shape[0], device=b.device) < 0.5
    b = torch.where(flip[:, None, None, None], b.flip(3), b)
    b = (b.float() - mean) / std
    if args.channels_last:
        b = b.contiguous(memory_format=torch.channels_last)
    return b, labels[i]


def model_and_optimizer(args, device, local):
    model = getattr(torchvision.models, args.model)(num_classes=args.classes).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = DDP(model, device_ids=[local] if device.type == "cuda" else None, gradient_as_bucket_view=True,
              bucket_cap_mb=args.bucket_mb)
    if args.hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif args.hook == "powersgd":
        # From the third step: PowerSGD needs two plain steps first with error feedback and warm start.
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    kw = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-5, **kw)
    net = torch.compile(ddp) if args.compile else ddp
    return net, opt


def train_step(net, opt, x, y, args, device):
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16):
        loss = F.cross_entropy(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=["resnet18", "resnet50"])
    ap.add_argument("--batch-per-gpu", type=int, default=256)
    ap.add_argument("--steps", type=int, default=80, help="timed steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (compilation)")
    ap.add_argument("--hook", default="bf16", choices=["bf16", "none", "powersgd"],
                    help="DDP's gradient compression hook")
    ap.add_argument("--powersgd-rank", type=int, default=4, help="--hook powersgd's matrix approximation rank")
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    ap.add_argument("--size", type=int, default=256, help="stored image side")
    ap.add_argument("--crop", type=int, default=224, help="trained crop side")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--pool", type=int, default=4, help="batches held on the device")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    if args.crop > args.size:
        ap.error(f"--crop {args.crop} is larger than --size {args.size}")
    if args.device == "cpu" and args.hook == "bf16":
        ap.error("--hook bf16 needs CUDA and NCCL; give --hook none or powersgd with --device cpu")

    rank, size, local = world()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        torch.backends.cudnn.benchmark = True
    else:
        device = torch.device("cpu")
    t0 = time.perf_counter()
    # device_id binds the communicator to this GPU at once (and is unknown to the CPU's gloo)
    kw = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=size, **kw)
    gen = torch.Generator().manual_seed(1000 + rank)
    torch.manual_seed(1000 + rank)
    images, labels = batches(args, device, gen)
    mean, std = MEAN.view(1, 3, 1, 1).to(device), STD.view(1, 3, 1, 1).to(device)
    net, opt = model_and_optimizer(args, device, local)

    step = 0
    t_first = time.perf_counter()
    for _ in range(max(1, args.warmup)):
        train_step(net, opt, *sample(images, labels, step, args, mean, std), args, device)
        if step == 0:
            sync(device)
            compile_s = time.perf_counter() - t_first
        step += 1
    sync(device)
    setup_s = time.perf_counter() - t0
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step(net, opt, *sample(images, labels, step, args, mean, std), args, device)
        step += 1
    sync(device)
    secs = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({
            "model": args.model, "world": size, "sim_nodes": int(os.environ.get("SIM_NODES", 1)),
            "batch_per_gpu": args.batch_per_gpu, "hook": args.hook,
            "powersgd_rank": args.powersgd_rank if args.hook == "powersgd" else None, "compile": args.compile,
            "bf16": args.bf16,
            "channels_last": args.channels_last, "steps": args.steps,
            "images_per_s": round(args.steps * args.batch_per_gpu * size / secs, 1),
            "ms_per_step": round(1000 * secs / args.steps, 2), "compile_seconds": round(compile_s, 1),
            "setup_seconds": round(setup_s, 1), "last_loss": round(float(loss), 4),
            "torch": torch.__version__, "host": socket.gethostname(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
