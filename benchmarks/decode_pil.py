#!/usr/bin/env python3
# The same per-image work as datagen (decode, short side to SIZE with an antialiased resize,
# centre crop) done with PIL on one core: the comparison for `datagen bench-decode`. Also prints
# PIL's decode alone, which shows how much of PIL's time its resize and conversions take.
import sys
import tarfile
import time

from PIL import Image
import io


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: decode_pil.py ARCHIVE.tar [SIZE] [LIMIT] [box|bilinear]  (the filter to shrink; box: datagen's)")
    path, size = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 256
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    blobs = []
    with tarfile.open(path) as tar:
        for m in tar:
            if m.isfile() and m.name.lower().endswith((".jpg", ".jpeg")):
                blobs.append(tar.extractfile(m).read())
                if len(blobs) >= limit:
                    break
    filt = Image.BILINEAR if len(sys.argv) > 4 and sys.argv[4] == "bilinear" else Image.BOX
    def decode(b):
        img = Image.open(io.BytesIO(b))
        img.draft("RGB", (size, size))  # PIL's own DCT scaling, as fair as it gets
        return img.convert("RGB")

    best = best_decode = 0.0
    for _ in range(3):
        # the decode alone first, to show where PIL's time goes
        start = time.perf_counter()
        for b in blobs:
            decode(b)
        best_decode = max(best_decode, len(blobs) / (time.perf_counter() - start))
        start = time.perf_counter()
        for b in blobs:
            img = decode(b)
            w, h = img.size
            side = min(w, h)
            img = img.crop(((w - side) // 2, (h - side) // 2, (w - side) // 2 + side, (h - side) // 2 + side))
            # datagen's filters: box (area) weights to shrink, bilinear to enlarge
            img = img.resize((size, size), filt if side > size else Image.BILINEAR, reducing_gap=None)
            img.tobytes()
        best = max(best, len(blobs) / (time.perf_counter() - start))
    print(f"PIL decode + resize ({'bilinear' if filt == Image.BILINEAR else 'box'}), one core: {best:.1f} images/s "
          f"({len(blobs)} JPEGs)")
    print(f"PIL decode alone, one core: {best_decode:.1f} images/s")


if __name__ == "__main__":
    main()
