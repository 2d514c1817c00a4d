#!/usr/bin/env bash
# Damaged JPEGs and PNGs (cut at many points, baseline and progressive, junk appended, bytes
# flipped): datagen refuses what PIL refuses (python3-pil, image.load(), LOAD_TRUNCATED_IMAGES off)
# and keeps what PIL decodes, with a reason in rejects.tsv for each refusal, on the whole-image
# decode (--resize squash) and on the centre-square decode (--resize crop). One exception, by
# design: a PNG whose IDAT bytes or CRC are damaged may be refused where PIL keeps it, because
# libpng checks the IDAT chunk's CRC and PIL does not.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_datagen_damaged.XXXXXX")
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 "$src/tests/damaged_images.py" "$work"
for resize in squash crop; do
  "$bin/datagen" --input "$work/img" --output "$work/$resize" --size 32 --resize "$resize" --threads 2 \
    --per-file 256 2> "$work/$resize.log" || { cat "$work/$resize.log"; exit 1; }
  /usr/bin/python3 - "$work/verdicts.tsv" "$work/$resize/rejects.tsv" "$resize" <<'PY'
import sys
verdicts = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
refused = {}
for line in open(sys.argv[2]):
    _, member, reason = line.rstrip("\n").split("\t")
    refused[member] = reason
    assert reason, member
wrong = []
for member, pil, where in verdicts:
    mine = "refused" if member in refused else "ok"
    if mine == pil or (pil == "ok" and where == "idat") or "over the limit" in refused.get(member, ""):
        continue  # the IDAT CRC (see above); datagen's own --max-pixels and --max-aspect
    wrong.append("%s: PIL %s, datagen %s %s" % (member, pil, mine, refused.get(member, "")))
assert not wrong, "%s: %d of %d verdicts differ from PIL's:\n%s" % (
    sys.argv[3], len(wrong), len(verdicts), "\n".join(wrong[:40]))
for name in ("damaged/cut30_baseline.jpg", "damaged/cut2_progressive.jpg"):
    assert name in refused, "%s kept (%s)" % (name, sys.argv[3])
print("%s: %d verdicts as PIL's (%d refused)" % (sys.argv[3], len(verdicts), len(refused)))
PY
done
echo ok
