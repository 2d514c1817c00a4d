#!/usr/bin/env python3
# Makes an ILSVRC-shaped training set of JPEGs cut from real photographs (photo_jpegs.py's cut), on
# all cores, in the two layouts the benchmarks read: datagen's tar of per-class tars, and a folder tree
# for torchvision's ImageFolder. Same bytes for any --jobs.
#
#   ilsvrc_photos.py SRC_DIR OUT_DIR [IMAGES] [--classes 100] [--jobs N] [--quality 90] [--seed 1] [--by-photo]
#
# Writes OUT_DIR/train.tar (nXXXXXXXX.tar members, each holding nXXXXXXXX_<i>.JPEG) and
# OUT_DIR/folder/train/nXXXXXXXX/nXXXXXXXX_<i>.JPEG, the same images in both.
import argparse
import multiprocessing
import os
import random
import sys
import tarfile
import time

from photo_jpegs import cut, load_photos

BLOCK = tarfile.BLOCKSIZE
MTIME = 1_700_000_000  # fixed, so that the tars do not depend on when they were made
photos = []            # filled before the workers fork, which then share it without copying
opts = None


def member(name, size):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = size, MTIME, 0o644
    return ti.tobuf(tarfile.USTAR_FORMAT)


def padding(size):
    return b"\0" * (-size % BLOCK)


def wnid(c):
    return f"n{c:08d}"


def work(task):
    """Cuts images [lo, hi) of class c; writes them to the folder tree and returns them as the tar
    members (headers, data, padding) of a stretch of the class's tar."""
    c, lo, hi, first = task
    parts, size = [], 0
    for i in range(lo, hi):
        g = first + i  # the image's number over the whole set: its photo and its random stream
        photo = photos[(c if opts.by_photo else g) % len(photos)]
        data = cut(photo, random.Random(f"{opts.seed}:{g}"), opts.quality)
        name = f"{wnid(c)}_{i}.JPEG"
        with open(os.path.join(opts.out, "folder", "train", wnid(c), name), "wb") as f:
            f.write(data)
        parts += [member(name, len(data)), data, padding(len(data))]
        size += len(data)
    return c, b"".join(parts), size


def main():
    global opts
    ap = argparse.ArgumentParser(description="an ILSVRC-shaped set of JPEGs cut from photographs")
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("images", nargs="?", type=int, default=64000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=64, help="images per task")
    ap.add_argument("--by-photo", action="store_true",
                    help="cut class c from photo c only (a set a net can learn: loss curves), not from every photo in turn")
    opts = ap.parse_args()
    if opts.images < opts.classes:
        sys.exit("need at least one image per class")
    t0 = time.perf_counter()
    photos.extend(load_photos(opts.src))
    t_load = time.perf_counter() - t0

    # Classes as even as can be; tasks of a few dozen images keep every core busy to the end,
    # where whole classes (640 images) would leave most of them idle in the last round.
    sizes = [opts.images // opts.classes + (c < opts.images % opts.classes) for c in range(opts.classes)]
    tasks, first = [], 0
    for c, n in enumerate(sizes):
        os.makedirs(os.path.join(opts.out, "folder", "train", wnid(c)), exist_ok=True)
        tasks += [(c, lo, min(n, lo + opts.chunk), first) for lo in range(0, n, opts.chunk)]
        first += n

    tar_path = os.path.join(opts.out, "train.tar")
    tmp = tar_path + ".tmp"
    total = 0
    with open(tmp, "wb") as out, multiprocessing.get_context("fork").Pool(opts.jobs) as pool:
        # Tasks come back in order, so each class's tar is written whole once its last stretch is in.
        current, held = None, []

        def flush():
            body = b"".join(held) + b"\0" * (2 * BLOCK)  # the class tar's end-of-archive blocks
            out.write(member(f"{wnid(current)}.tar", len(body)))
            out.write(body)
            out.write(padding(len(body)))

        for c, part, size in pool.imap(work, tasks):
            if c != current and held:
                flush()
                held = []
            current = c
            held.append(part)
            total += size
        flush()
        end = out.tell() + 2 * BLOCK
        out.write(b"\0" * (2 * BLOCK + (-end % tarfile.RECORDSIZE)))
    os.replace(tmp, tar_path)
    secs = time.perf_counter() - t0
    print(f"{opts.out}: {opts.images} JPEGs in {opts.classes} classes from {len(photos)} photographs, "
          f"{total / opts.images / 1024:.1f} KiB each on average, in {secs:.1f} s ({opts.images / secs:.0f} images/s, "
          f"{opts.jobs} processes; photos loaded in {t_load:.1f} s)")


if __name__ == "__main__":
    main()
