# Writes a folder of damaged JPEGs and PNGs (cut at many points, baseline and progressive, junk
# appended, bytes flipped) and PIL's verdict on each, for tests/test_datagen_damaged_images.sh.
import io
import os
import struct
import sys

import numpy as np
from PIL import Image, ImageFile, PngImagePlugin

assert not ImageFile.LOAD_TRUNCATED_IMAGES  # PIL's default, the verdict datagen matches


def picture(rng, w, h):
    ramp = np.linspace(0, 255, w)[None, :, None] * np.ones((h, 1, 3))
    return (ramp + rng.integers(0, 60, (h, w, 3))).clip(0, 255).astype(np.uint8)


def jpeg(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", quality=85, **kw)
    return b.getvalue()


def png(im):
    b = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "made for a test")
    im.save(b, "PNG", pnginfo=info)
    return b.getvalue()


def pil_verdict(data):
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
        return "ok"
    except Exception:  # noqa: BLE001 - any refusal counts
        return "refused"


def idat_spans(data):
    """Byte ranges of IDAT chunks (data and CRC), where libpng checks a CRC that PIL does not."""
    spans, at = [], 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            spans.append((at + 8, at + 12 + length))
        at += 12 + length
    return spans


def cases(data, step):
    n = len(data)
    for pct in range(1, 100, 2):
        yield "cut%02d" % pct, data[: n * pct // 100], (n * pct // 100, n)
    for c in (1, 2, 3, 13):
        yield "cutend%d" % c, data[:-c], (n - c, n)
    yield "junk", data + b"junk" * 8, None
    yield "junkmarker", data + b"\xff\xd8\xff\xe0junk", None
    for p in range(3, n, step):
        for x in (0xFF, 0x55):
            d = bytearray(data)
            d[p] ^= x
            yield "flip%05d_%02x" % (p, x), bytes(d), (p, p + 1)


def main(out):
    rng = np.random.default_rng(3)
    os.makedirs(out + "/img/damaged", exist_ok=True)
    rgb = Image.fromarray(picture(rng, 96, 72))
    tall = Image.fromarray(picture(rng, 48, 80))
    sources = {
        "base": jpeg(rgb),
        "prog": jpeg(rgb, progressive=True),
        "gray": jpeg(rgb.convert("L")),
        "tall": jpeg(tall),
        "tallprog": jpeg(tall, progressive=True),
        "p444": jpeg(rgb, progressive=True, subsampling=0),
        "png": png(rgb),
        "pngpal": png(rgb.convert("P")),
    }
    with open(out + "/verdicts.tsv", "w") as v:
        for name, data in sources.items():
            ext = "png" if name.startswith("png") else "jpg"
            spans = idat_spans(data) if ext == "png" else []
            for tag, d, hit in cases(data, max(1, len(data) // 90)):
                member = "damaged/%s_%s.%s" % (name, tag, ext)
                with open(out + "/img/" + member, "wb") as f:
                    f.write(d)
                in_idat = hit is not None and any(a < hit[1] and hit[0] < b for a, b in spans)
                v.write("%s\t%s\t%s\n" % (member, pil_verdict(d), "idat" if in_idat else "-"))
        # The two cases by name: a baseline JPEG cut at 30 %, a progressive one at 2 %.
        big = Image.fromarray(picture(rng, 400, 300))
        for name, data in (("cut30_baseline", jpeg(big)), ("cut2_progressive", jpeg(big, progressive=True))):
            pct = 30 if "baseline" in name else 2
            member = "damaged/%s.jpg" % name
            with open(out + "/img/" + member, "wb") as f:
                f.write(data[: len(data) * pct // 100])
            v.write("%s\t%s\t-\n" % (member, pil_verdict(data[: len(data) * pct // 100])))


if __name__ == "__main__":
    main(sys.argv[1])
