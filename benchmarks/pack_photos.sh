#!/usr/bin/env bash
# Copies the largest photographs of a folder (e.g. /usr/share/wallpapers), re-encoded as JPEG, to a
# small folder that can be carried to a host that lacks them (the GPU host has no internet).
#
#   benchmarks/pack_photos.sh SRC_DIR OUT_DIR [MAX_MB]     (MAX_MB default 24; PYTHON default python3)
#
# Each photo is shrunk to at most 2400 px on its long side and saved at quality 92; the largest go
# first, and the copy stops before the total passes MAX_MB. Photos left with under 1000 px on the
# short side are skipped, since photo_jpegs.py would not cut from them.
set -uo pipefail
(($# >= 2)) || { echo "usage: $0 SRC_DIR OUT_DIR [MAX_MB]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$2" || exit 1
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" - "$1" "$2" "${3:-24}" <<'PY'
import io
import os
import sys

from PIL import Image

from photo_jpegs import sources

src, out, max_mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
limit, total, kept = max_mb * 1e6, 0, 0


def pixels(p):
    with Image.open(p) as im:  # reads the header only
        return im.width * im.height


for p in sorted(sources(src), key=lambda p: (-pixels(p), p)):
    im = Image.open(p).convert("RGB")
    im.thumbnail((2400, 2400), Image.LANCZOS)
    if min(im.size) < 1000:
        continue
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=92)
    if total + buf.tell() > limit:
        break
    # The wallpaper's folder names it; the file names inside are only its sizes.
    name = (p.split("/contents")[0] if "/contents" in p else os.path.splitext(p)[0]).rstrip("/").split("/")[-1]
    with open(os.path.join(out, name + ".jpg"), "wb") as f:
        f.write(buf.getvalue())
    total += buf.tell()
    kept += 1
print(f"{out}: {kept} photographs, {total / 1e6:.1f} MB")
PY
