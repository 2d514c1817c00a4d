#!/usr/bin/env bash
# Whole datagen runs, CPU resize against --gpu-resize (routed image by image, the default, and with
# --gpu-route always), over thread counts, on synthetic JPEG tars (large 2400x1800, ImageNet-sized
# 500x375, and 64x64 thumbnails enlarged to 256, where the resize is most of the work; made with
# python3 + Pillow + numpy). Prints CSV; wall_s is the whole process.
# usage: datagen_gpu_sweep.sh DATAGEN WORKDIR [THREADS...]   (threads default: 1 4 8 16)
# env: LARGE_COUNT (default 256), IMAGENET_COUNT (default 2048), THUMB_COUNT (default 8000) images in
# the tars; REPEATS (default 1) rounds of every point, the modes interleaved (in reverse order every
# other round, so that none always goes first); OUT_ROOT (default WORKDIR) for the outputs, e.g.
# /dev/shm so that the disk is not what is measured; SETS (default "large:256 large:640
# imagenet:256 thumbs:256") the image sets and sizes; MODES (default "off on always").
set -euo pipefail
dg=${1:?usage: datagen_gpu_sweep.sh DATAGEN WORKDIR [THREADS...]}
work=${2:?usage: datagen_gpu_sweep.sh DATAGEN WORKDIR [THREADS...]}
shift 2
threads=("$@")
((${#threads[@]})) || threads=(1 4 8 16)
mkdir -p "$work"

# Smooth gradients plus noise and a few edges: photographs' JPEG sizes, not white noise's.
[ -e "$work/large.tar" ] && [ -e "$work/imagenet.tar" ] && [ -e "$work/thumbs.tar" ] ||  # or made elsewhere
python3 - "$work" "${LARGE_COUNT:-256}" "${IMAGENET_COUNT:-2048}" "${THUMB_COUNT:-8000}" <<'PY'
import io, os, sys, tarfile
import numpy as np
from PIL import Image
work = sys.argv[1]
rng = np.random.default_rng(1)
def make(path, count, w, h):
    if os.path.exists(path):
        return
    y, x = np.mgrid[0:2 * h, 0:2 * w].astype(np.float32)
    base = np.stack([127 + 100 * np.sin(x * 0.011 + c) * np.cos(y * 0.007 - c) for c in range(3)], -1)
    base = (base + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
    with tarfile.open(path + ".part", "w") as tar:
        for i in range(count):
            oy, ox = rng.integers(0, h), rng.integers(0, w)
            img = base[oy:oy + h, ox:ox + w].copy()
            img[h // 3: h // 2, w // 4: w // 2] = rng.integers(0, 255, 3)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, "JPEG", quality=90)
            info = tarfile.TarInfo(f"c{i % 4}/img{i:05d}.JPEG")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)
    os.rename(path + ".part", path)
make(os.path.join(work, "large.tar"), int(sys.argv[2]), 2400, 1800)
make(os.path.join(work, "imagenet.tar"), int(sys.argv[3]), 500, 375)
make(os.path.join(work, "thumbs.tar"), int(sys.argv[4]), 64, 64)
PY

out_root=${OUT_ROOT:-$work}
mkdir -p "$out_root"
echo "images,size,threads,repeat,gpu_resize,seconds,wall_s,img_per_s,decode_s,resize_s,gpu_stage_s,gpu_upload_s,gpu_kernel_s,gpu_download_s,gpu_wait_s,gpu_images,cpu_images"
for set in ${SETS:-large:256 large:640 imagenet:256 thumbs:256}; do
  name=${set%%:*} size=${set##*:}
  for t in "${threads[@]}"; do
   for rep in $(seq 1 "${REPEATS:-1}"); do
    modes=(${MODES:-off on always})
    ((rep % 2)) || modes=($(printf '%s\n' "${modes[@]}" | tac))
    for g in "${modes[@]}"; do
      out="$out_root/out_${name}_${size}_${t}_$g"
      rm -rf "$out"
      args=(--input "$work/$name.tar" --output "$out" --size "$size" --threads "$t" --per-file 256)
      [ "$g" = off ] || args+=(--gpu-resize)
      [ "$g" = always ] && args+=(--gpu-route always)
      start=$(date +%s%N)
      "$dg" "${args[@]}" 2> "$out.log" || { echo "datagen failed, see $out.log" >&2; exit 1; }
      wall=$(($(date +%s%N) - start))  # ns
      python3 - "$out/dataset.json" "$name" "$size" "$t" "$rep" "$g" "$wall" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
t = m["timings"]; p = t["phases"]; s = t["seconds"]
g = [p.get(k, 0.0) for k in ("gpu_stage", "gpu_upload", "gpu_kernel", "gpu_download", "gpu_wait")]
print(",".join(sys.argv[2:7] + [f"{s:.3f}", f"{int(sys.argv[7]) * 1e-9:.3f}", f"{m['num_samples'] / s:.0f}",
               f"{p['decode']:.3f}", f"{p['resize']:.3f}"] + [f"{v:.3f}" for v in g] +
               [f"{p.get(k, 0):.0f}" for k in ("gpu_images", "cpu_images")]))
PY
    done
    off="$out_root/out_${name}_${size}_${t}_off"
    for g in "${modes[@]}"; do  # the samples must be the CPU run's, byte for byte
      out="$out_root/out_${name}_${size}_${t}_$g"
      [ "$g" != off ] && [ -d "$off" ] || continue
      for f in "$off"/*.cvb; do
        cmp -s "$f" "$out/${f##*/}" || { echo "$out/${f##*/} differs from the CPU run's" >&2; exit 1; }
      done
    done
    rm -rf "$out_root/out_${name}_${size}_${t}_"{off,on,always}  # up to gigabytes each
   done
  done
done
