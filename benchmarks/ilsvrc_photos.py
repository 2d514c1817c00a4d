#!/usr/bin/env python3
# Makes an ILSVRC-shaped set of JPEGs cut from real photographs (photo_jpegs.py's cut), on all cores,
# in the two layouts the benchmarks read: datagen's tar of per-class tars, and a folder tree for
# torchvision's ImageFolder; a training set and, if asked, a validation set. Same bytes for any --jobs.
"""An ILSVRC-shaped set of JPEGs (500x375, a quarter 375x500) cut from photographs.

    ilsvrc_photos.py SRC_DIR OUT_DIR [IMAGES] [--classes N] [--jobs N] [--quality 90] [--seed 1]
                     [--by-photo | --regions WxH [--window LO HI] [--spill F] [--ceiling N]]
                     [--val-per-class N] [--layout both|tar|folder]

Writes OUT_DIR/train.tar (nXXXXXXXX.tar members, each holding nXXXXXXXX_<i>.JPEG) and
OUT_DIR/folder/train/nXXXXXXXX/nXXXXXXXX_<i>.JPEG, the same IMAGES images (default 64,000) in both;
with --val-per-class N also OUT_DIR/val.tar and OUT_DIR/folder/val, N images of each class in the
same layouts (datagen takes val.tar with `--classes` of the training set's list; ImageFolder reads
folder/val). --layout leaves one layout out.

What a class is:
- default (100 classes): image g of the whole set is cut from photograph g mod P, wherever it falls:
  the classes say nothing about the pixels (a set for throughput alone).
- --by-photo: class c is cut from photograph c alone (a set a net learns in a few hundred steps).
- --regions WxH: each photograph is cut into W x H tiles (W across, H down) and each tile is a
  class, P x W x H of them (--classes takes the first N): class c is tile c div P of photograph
  c mod P, so that fewer classes still span every photograph. Each image of a class is a window
  inside its tile (the tile widened by --spill of its width and height on each side, within the
  photograph), the window's side a uniform fraction in [LO, HI] (--window, default 0.4 0.8) of the
  largest window of the image's shape the tile holds, resized to 500x375 or 375x500 with Lanczos.
  The knobs that make the set harder: more tiles (more classes, and neighbours alike), a smaller
  --window (less of a tile in each image), a larger --spill (neighbouring classes share pixels: a
  window in the overlap may be of either class). `--ceiling N` prints, instead of making the set, the
  best top-1 that the windows' places allow (tile_windows.py, a Monte Carlo over N windows): for the
  30 photographs of pack_photos.sh in 3x2 tiles, --spill 0.25 / 0.3 / 0.35 / 0.4 allow 95.7 / 90.0 /
  82.6 / 74.2 %; a net gets less where the tiles themselves look alike (skies, gradients).

Image g of the training set draws from the random stream "SEED:g" (the set of earlier runs, for
the default and --by-photo), image g of the validation set from "SEED:val:g": the two sets never
share a window, and each is a function of the photographs and the flags alone.
"""
import argparse
import multiprocessing
import os
import random
import sys
import tarfile
import time

from photo_jpegs import cut, encode, load_photos
from tile_windows import Tiles

BLOCK = tarfile.BLOCKSIZE
MTIME = 1_700_000_000  # fixed, so that the tars do not depend on when they were made
photos = []            # filled before the workers fork, which then share it without copying
opts = None
tiles = None           # with --regions


def member(name, size):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = size, MTIME, 0o644
    return ti.tobuf(tarfile.USTAR_FORMAT)


def padding(size):
    return b"\0" * (-size % BLOCK)


def wnid(c):
    return f"n{c:08d}"


def image(split, c, g):
    """Image g of the split (its number over the whole split), of class c, as JPEG bytes."""
    rng = random.Random(f"{opts.seed}:{g}" if split == "train" else f"{opts.seed}:{split}:{g}")
    if opts.regions:
        im = photos[c % len(photos)]
        box, out = tiles.window(im.size, c // len(photos), rng)
        return encode(im, box, out, opts.quality)
    return cut(photos[(c if opts.by_photo else g) % len(photos)], rng, opts.quality)


def work(task):
    """Cuts images [lo, hi) of class c of the split; writes them to the folder tree and returns them
    as the tar members (headers, data, padding) of a stretch of the class's tar."""
    split, c, lo, hi, first = task
    parts, size = [], 0
    for i in range(lo, hi):
        data = image(split, c, first + i)
        name = f"{wnid(c)}_{i}.JPEG"
        if opts.layout != "tar":
            with open(os.path.join(opts.out, "folder", split, wnid(c), name), "wb") as f:
                f.write(data)
        if opts.layout != "folder":
            parts += [member(name, len(data)), data, padding(len(data))]
        size += len(data)
    return c, b"".join(parts), size


def tasks_of(split, sizes):
    """The split's tasks: a few dozen images each, so that every core stays busy to the end, where
    whole classes (640 images) would leave most of them idle in the last round."""
    tasks, first = [], 0
    for c, n in enumerate(sizes):
        if opts.layout != "tar":
            os.makedirs(os.path.join(opts.out, "folder", split, wnid(c)), exist_ok=True)
        tasks += [(split, c, lo, min(n, lo + opts.chunk), first) for lo in range(0, n, opts.chunk)]
        first += n
    return tasks


def write_split(pool, split, sizes):
    """Cuts the split's images; writes OUT/<split>.tar (unless --layout folder). Their bytes."""
    tar_path = os.path.join(opts.out, f"{split}.tar")
    tmp = tar_path + ".tmp"
    tasks = tasks_of(split, sizes)
    total = 0
    os.makedirs(opts.out, exist_ok=True)
    with open(os.devnull if opts.layout == "folder" else tmp, "wb") as out:
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
    if opts.layout != "folder":
        os.replace(tmp, tar_path)
    return total


def regions(text):
    try:
        cols, rows = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not WxH, e.g. 2x2") from None
    if cols < 1 or rows < 1:
        raise argparse.ArgumentTypeError(f"'{text}': tiles across and down must be at least 1")
    return cols, rows


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("images", nargs="?", type=int, default=64000, help="training images (default 64000)")
    ap.add_argument("--classes", type=int, help="default 100; with --regions every tile of every photograph")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=64, help="images per task")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--by-photo", action="store_true",
                     help="cut class c from photo c only (a set a net can learn: loss curves), not from every "
                          "photo in turn")
    how.add_argument("--regions", type=regions, metavar="WxH", help="a class per tile of each photograph")
    ap.add_argument("--window", type=float, nargs=2, metavar=("LO", "HI"),
                    help="with --regions: the window's side, a fraction of the largest the tile holds (0.4 0.8)")
    ap.add_argument("--spill", type=float,
                    help="with --regions: how far windows reach past their tile, a fraction of its side (0)")
    ap.add_argument("--ceiling", type=int, metavar="N", help="with --regions: print the best top-1 the windows' "
                    "places allow (tile_windows.py), by N random windows, and make nothing")
    ap.add_argument("--val-per-class", type=int, default=0, help="validation images per class (0: none)")
    ap.add_argument("--layout", choices=["both", "tar", "folder"], default="both",
                    help="the tars, the ImageFolder tree or both")
    args = ap.parse_args()
    if not args.regions and (args.window or args.spill is not None or args.ceiling):
        ap.error("--window, --spill and --ceiling need --regions")
    args.window = args.window or [0.4, 0.8]
    args.spill = 0.0 if args.spill is None else args.spill
    lo, hi = args.window
    if not 0 < lo <= hi:
        ap.error(f"--window {lo:g} {hi:g}: needs 0 < LO <= HI")
    if args.spill < 0:
        ap.error(f"--spill {args.spill:g}: must be at least 0")
    if args.val_per_class < 0:
        ap.error("--val-per-class: must be at least 0")
    return args


def main():
    global opts, tiles
    opts = parse_args()
    t0 = time.perf_counter()
    photos.extend(load_photos(opts.src))
    t_load = time.perf_counter() - t0
    tiles = Tiles(opts.regions, opts.window, opts.spill) if opts.regions else None
    if opts.ceiling:
        top1 = tiles.ceiling(sorted({im.size for im in photos}), opts.ceiling)
        print(f"{opts.regions[0]}x{opts.regions[1]} tiles, window {opts.window[0]:g}-{opts.window[1]:g}, spill "
              f"{opts.spill:g}: the windows' places allow at most {100 * top1:.1f} % top-1 ({opts.ceiling} windows)")
        return
    most = len(photos) * tiles.count() if tiles else None
    if opts.classes is None:
        opts.classes = most or 100
    if most and opts.classes > most:
        sys.exit(f"--classes {opts.classes}: {len(photos)} photographs in {opts.regions[0]}x{opts.regions[1]} "
                 f"tiles make {most} classes")
    if opts.classes < 1 or opts.images < opts.classes:
        sys.exit("need at least one class and one image per class")

    sizes = [opts.images // opts.classes + (c < opts.images % opts.classes) for c in range(opts.classes)]
    with multiprocessing.get_context("fork").Pool(opts.jobs) as pool:
        total = write_split(pool, "train", sizes)
        val = write_split(pool, "val", [opts.val_per_class] * opts.classes) if opts.val_per_class else 0
    secs = time.perf_counter() - t0
    n = opts.images + opts.val_per_class * opts.classes
    kind = f", {opts.val_per_class * opts.classes} of them for validation" if opts.val_per_class else ""
    print(f"{opts.out}: {n} JPEGs{kind}, in {opts.classes} classes from {len(photos)} photographs, "
          f"{(total + val) / n / 1024:.1f} KiB each on average, in {secs:.1f} s ({n / secs:.0f} images/s, "
          f"{opts.jobs} processes; photos loaded in {t_load:.1f} s)")


if __name__ == "__main__":
    main()
