#!/usr/bin/env python3
# The Python way to do datagen's per-image work on every core: a multiprocessing pool of PIL workers,
# each reading JPEGs from a folder tree and doing what datagen does to each (decode with PIL's own
# DCT scaling, the centred square, resized to SIZE with the box filter, to bytes). Nothing is
# written. The time counts from before the pool starts to after it ends, as a user waits for it.
#
#   pil_pool.py FOLDER [SIZE] [--processes N] [--limit N]      (SIZE default 256)
#
# Prints one line: "PIL pool: N processes, M images in S s: R images/s".
import argparse
import io
import multiprocessing
import os
import time

from PIL import Image

size = 256


def work(path):
    with open(path, "rb") as f:
        img = Image.open(io.BytesIO(f.read()))
    img.draft("RGB", (size, size))  # PIL's DCT scaling, as datagen's
    img = img.convert("RGB")
    w, h = img.size
    side = min(w, h)
    x, y = (w - side) // 2, (h - side) // 2
    img = img.crop((x, y, x + side, y + side))
    img = img.resize((size, size), Image.BOX if side > size else Image.BILINEAR, reducing_gap=None)
    return len(img.tobytes())


def main():
    global size
    ap = argparse.ArgumentParser(description="datagen's per-image work in a pool of PIL processes")
    ap.add_argument("folder")
    ap.add_argument("size", nargs="?", type=int, default=256)
    ap.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--limit", type=int, default=0)
    opts = ap.parse_args()
    size = opts.size
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(opts.folder) for f in fs
                   if f.lower().endswith((".jpg", ".jpeg")))
    if opts.limit:
        paths = paths[:opts.limit]
    if not paths:
        raise SystemExit(f"{opts.folder}: no JPEGs")
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(opts.processes) as pool:
        done = sum(1 for _ in pool.imap_unordered(work, paths, chunksize=64))
    secs = time.perf_counter() - start
    print(f"PIL pool: {opts.processes} processes, {done} images in {secs:.2f} s: {done / secs:.1f} images/s")


if __name__ == "__main__":
    main()
