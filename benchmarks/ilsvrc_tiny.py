#!/usr/bin/env python3
# Writes an ILSVRC-layout train tar of tiny JPEGs for measuring datagen's index at scale: an outer
# tar of per-class tars nXXXXXXXX.tar, each holding nXXXXXXXX_NNNNN.JPEG members of a few hundred bytes.
#
#   ilsvrc_tiny.py OUT.tar [--classes 1000] [--per-class 1280] [--member-folder]
#
# The JPEGs are a handful of 16x16 images made once with PIL and repeated, so a million members take
# seconds to write; the bytes depend on the arguments alone (fixed names, times and pixels).
import argparse
import io
import os
import random
import sys
import tarfile
import time

from PIL import Image

BLOCK = tarfile.BLOCKSIZE
MTIME = 1_700_000_000


def tiny_jpegs(count=8, side=16):
    rng = random.Random(1)
    out = []
    for _ in range(count):
        img = Image.new("RGB", (side, side))
        r, g, b = rng.randrange(256), rng.randrange(256), rng.randrange(256)  # a colour ramp: few bytes
        img.putdata([(r, (g + 8 * (i % side)) % 256, (b + 8 * (i // side)) % 256) for i in range(side * side)])
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=50, optimize=True)  # Huffman tables of its own: small
        out.append(buf.getvalue())
    return out


def header(name, size):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = size, MTIME, 0o644
    return ti.tobuf(tarfile.USTAR_FORMAT)


def padding(size):
    return b"\0" * (-size % BLOCK)


def class_tar(c, per_class, jpegs, folder):
    """The bytes of class c's inner tar, end-of-archive blocks included."""
    wnid = f"n{c:08d}"
    parts = []
    for i in range(per_class):
        data = jpegs[(c + i) % len(jpegs)]
        name = f"{wnid}_{i + 1:05d}.JPEG"
        parts += [header(f"{wnid}/{name}" if folder else name, len(data)), data, padding(len(data))]
    parts.append(b"\0" * (2 * BLOCK))
    return wnid, b"".join(parts)


def main():
    ap = argparse.ArgumentParser(description="an ILSVRC-layout tar of per-class tars of tiny JPEGs")
    ap.add_argument("out")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--per-class", type=int, default=1280)
    ap.add_argument("--member-folder", action="store_true", help="members as nXXXXXXXX/nXXXXXXXX_NNNNN.JPEG")
    opts = ap.parse_args()
    if opts.classes < 1 or opts.per_class < 1:
        sys.exit("need at least one class and one image per class")
    t0 = time.perf_counter()
    jpegs = tiny_jpegs()
    tmp = opts.out + ".tmp"
    with open(tmp, "wb") as out:
        for c in range(opts.classes):
            wnid, body = class_tar(c, opts.per_class, jpegs, opts.member_folder)
            out.write(header(f"{wnid}.tar", len(body)))
            out.write(body)
            out.write(padding(len(body)))
        end = out.tell() + 2 * BLOCK
        out.write(b"\0" * (2 * BLOCK + (-end % tarfile.RECORDSIZE)))
        size = out.tell()
    os.replace(tmp, opts.out)
    members = opts.classes * opts.per_class
    print(f"{opts.out}: {members} JPEGs ({min(map(len, jpegs))}-{max(map(len, jpegs))} bytes) in {opts.classes} "
          f"inner tars, {size / 1e6:.0f} MB, in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
