#!/usr/bin/env python3
# What the link between (simulated) nodes carries: NCCL all-reduce times and bus bandwidth at the
# sizes a training step sends, one process a GPU started by mpirun (through simnode.sh for simulated nodes).
"""NCCL all-reduces of bf16 buffers of each --mb size, timed after one warm-up, as nccl-tests reports
them: algorithm bandwidth (bytes / time) and bus bandwidth (that x 2 (n - 1) / n, what each rank's link
carries in a ring). Rank 0 prints one JSON line per size.

    mpirun -np 4 -x SIM_NODES=4 -x NCCL_IB_DISABLE=1 -x NCCL_NET=Socket -x NCCL_SOCKET_IFNAME=lo \\
        benchmarks/simnode.sh python3 benchmarks/allreduce_link.py --mb 16.8 35 102
    mpirun -np 2 python3 benchmarks/allreduce_link.py --device cpu --mb 1 --iters 2    (a smoke run: gloo, fp32)
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

from pytorch_ddp import world


def time_all_reduce(buf, iters):
    """Milliseconds an all-reduce of buf takes, the mean over iters after a warm-up and a barrier."""
    sync = torch.cuda.synchronize if buf.is_cuda else (lambda: None)
    dist.all_reduce(buf)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    return (time.perf_counter() - t0) * 1e3 / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, nargs="+", default=[16.8, 35.1, 102.0], help="sizes in MB (1e6 bytes)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    rank, size, local = world()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device, dtype = torch.device("cuda", local), torch.bfloat16
        dist.init_process_group("nccl", rank=rank, world_size=size, device_id=device)
    else:
        device, dtype = torch.device("cpu"), torch.float32
        dist.init_process_group("gloo", rank=rank, world_size=size)
    width = torch.tensor([], dtype=dtype).element_size()
    for mb in args.mb:
        elems = max(1, int(mb * 1e6) // width)
        ms = time_all_reduce(torch.ones(elems, dtype=dtype, device=device), args.iters)
        alg = elems * width / (ms * 1e-3) / 1e9
        if rank == 0:
            print(json.dumps({"ranks": size, "sim_nodes": int(os.environ.get("SIM_NODES", 1)), "mb": mb,
                              "dtype": str(dtype).replace("torch.", ""), "ms": round(ms, 3),
                              "algbw_gbs": round(alg, 3), "busbw_gbs": round(alg * 2 * (size - 1) / size, 3)}),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
