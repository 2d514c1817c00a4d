#!/usr/bin/env python3
# Makes a tar of ImageNet-sized JPEGs cut from real photographs (any folder of large JPEG or PNG
# images, e.g. Debian's plasma-workspace-wallpapers), for `datagen bench-decode` on photographic
# content instead of synthetic patterns. Usage: photo_jpegs.py SRC_DIR OUT.tar [COUNT] [QUALITY] [SEED]
# ilsvrc_photos.py and pack_photos.sh use its functions, so every set is cut the same way.
import io
import os
import random
import sys
import tarfile

from PIL import Image


def sources(root):
    # The same wallpaper ships in many sizes: keep the largest file of each folder, and any
    # loose image.
    best = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                p = os.path.join(d, f)
                key = d.split("/contents")[0] if "/contents" in d else p
                if key not in best or os.path.getsize(p) > os.path.getsize(best[key]):
                    best[key] = p
    return sorted(best.values())


def load_photos(root, min_side=1000):
    """The photographs of root (see sources) with at least min_side pixels on the short side, as RGB."""
    images = []
    for p in sources(root):
        im = Image.open(p)
        if min(im.size) >= min_side:
            images.append(im.convert("RGB"))
    if not images:
        sys.exit(f"{root}: no image of at least {min_side} pixels on its short side")
    return images


def shape(rng):
    """ImageNet's most common shapes: 500x375 landscape, a quarter of them 375x500 portrait."""
    return (375, 500) if rng.random() < 0.25 else (500, 375)


def encode(im, box, size, quality):
    """The window box of im resized to size with Lanczos, as JPEG bytes."""
    buf = io.BytesIO()
    im.crop(box).resize(size, Image.LANCZOS).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def cut(im, rng, quality):
    """One ImageNet-shaped JPEG (its bytes) cut from the photograph im, drawing from rng."""
    w, h = shape(rng)
    # a random window of 1.5x to 4x the output, shrunk to it, as a photo downscaled for the web
    f = rng.uniform(1.5, min(4.0, im.width / w, im.height / h))
    cw, ch = int(w * f), int(h * f)
    x, y = rng.randrange(im.width - cw + 1), rng.randrange(im.height - ch + 1)
    return encode(im, (x, y, x + cw, y + ch), (w, h), quality)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: photo_jpegs.py SRC_DIR OUT.tar [COUNT] [QUALITY] [SEED]")
    src, out = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    quality = int(sys.argv[4]) if len(sys.argv) > 4 else 90
    rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    images = load_photos(src)
    tmp = out + ".tmp"
    total = 0
    with tarfile.open(tmp, "w") as tar:
        for i in range(count):
            data = cut(images[i % len(images)], rng, quality)
            ti = tarfile.TarInfo(f"c{i % 10}/photo_{i:05d}.JPEG")  # a class folder each, for the labels
            ti.size = len(data)
            total += ti.size
            tar.addfile(ti, io.BytesIO(data))
    os.replace(tmp, out)
    print(f"{out}: {count} JPEGs at quality {quality} from {len(images)} photographs, "
          f"{total / count / 1024:.1f} KiB and {total / (count * 500 * 375):.2f} bytes per pixel on average")


if __name__ == "__main__":
    main()
