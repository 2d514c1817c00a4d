#!/usr/bin/python3
# Groups a ResNet step's kernels, as Nsight Compute's raw CSV lists them, into the table of
# docs/perf/HISTORY.md: milliseconds per step, share, and the DRAM bytes each group moves per second.
"""usage: benchmarks/ncu_breakdown.py NCU.csv [STEPS]

NCU.csv from (STEPS steps, default 2: a set of one batch, --epochs 2)
    ncu --clock-control none --csv --page raw \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \\
        train --config configs/resnet50.toml --data S --precision bf16 --epochs 2 --device cuda \\
        --log-every 0 --no-cuda-graph > NCU.csv
"""
import collections
import csv
import re
import sys

GROUPS = [
    ("convolutions and the fc (cuDNN's and cuBLAS's kernels)", r"xmma|cutlass|nvjet|cublas|splitK|gemm|convolve|subsample_pixels|nhwcToNchw"),
    ("batch norm backward, input gradient (`input_grad`)", r"input_grad"),
    ("batch norm backward, sums (`GradTerms`)", r"GradTerms"),
    ("batch norm forward, sums (`MomentTerms`)", r"MomentTerms"),
    ("batch norm, finishing the sums (`finish_sums`)", r"finish_sums"),
    ("batch norm forward, normalise (+ReLU) (`normalise`)", r"normalise<"),
    ("residual add (+ReLU), batch norm applied as it reads (`add_affine`)", r"add_affine"),
    ("residual add backward, with the deferred batch norms' gradient sums (`relu_grad_pair`, `relu_grad_sums`)", r"relu_grad_(pair|sums)"),
    ("residual adds and gradient sums (`elementwise::map`)", r"elementwise::map"),
    ("max pooling", r"max_(fwd|bwd)"),
    ("input normalisation (`normalize_*`)", r"normalize(_pixels|_nchw|_patches)?<"),
    ("the rest (filter-gradient widening, SGD, loss, metrics, ...)", r"."),
]


def number(text):
    return float(text.replace(",", ""))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    steps = int(sys.argv[2]) if len(sys.argv) == 3 else 2
    with open(sys.argv[1], encoding="utf-8") as f:
        rows = list(csv.reader(line for line in f if not line.startswith("==")))
    head = rows[0]
    name, ns = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    read, write = head.index("dram__bytes_read.sum"), head.index("dram__bytes_write.sum")
    time, moved = collections.Counter(), collections.Counter()
    for r in rows[2:]:  # rows[1] holds the units
        if len(r) <= ns:
            continue
        group = next(g for g, pattern in GROUPS if re.search(pattern, r[name]))
        time[group] += number(r[ns])
        moved[group] += number(r[read]) + number(r[write])
    total = sum(time.values())
    print("| kernels | ms per step | share | DRAM traffic |\n| --- | --- | --- | --- |")
    for group, _ in GROUPS:
        if time[group]:
            print(f"| {group} | {time[group] / steps / 1e6:.1f} | {100 * time[group] / total:.1f} % | "
                  f"{moved[group] / time[group] / 1e3:.1f} TB/s |")
    print(f"| everything, per step | {total / steps / 1e6:.1f} | | |")


if __name__ == "__main__":
    main()
