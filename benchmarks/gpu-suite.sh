#!/usr/bin/env bash
# Every GPU test and GPU benchmark in one go, for a GPU host that has the built binaries on PATH
# (datagen, train, gpu_test_*, gpu_resize_bench), python3 with PyTorch, and Fashion-MNIST's IDX files.
#
#   benchmarks/gpu-suite.sh OUTDIR [FMNIST_DIR]     (FMNIST_DIR default /usr/share/datasets/fashion-mnist)
#
# Writes OUTDIR/machine.txt, gpu_tests.log, fmnist.md, resnet18.md, resize_bench.log and the tools'
# logs; prints the tables last. Steps are independent: one that fails is reported and the rest run.
set -uo pipefail
out=$1
fm=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")/.." && pwd)
work=${CONVOY_SUITE_WORK:-$(mktemp -d)}
mkdir -p "$out" "$work"
export NCCL_NVLS_ENABLE=0
# The tests that run the trainer find it here, not beside a build folder the host does not have.
if [ -z "${CONVOY_TRAIN:-}" ] && command -v train >/dev/null; then export CONVOY_TRAIN=$(command -v train); fi
step() { echo "== $*" >&2; }

{ date -u; hostname; nvidia-smi -L; nproc; python3 -c 'import torch; print("torch", torch.__version__)'; } >"$out/machine.txt" 2>&1

step "GPU tests"
: >"$out/gpu_tests.log"
for t in $(compgen -c gpu_test_ | sort -u); do
  echo "### $t" >>"$out/gpu_tests.log"
  timeout 300 "$t" >>"$out/gpu_tests.log" 2>&1 && echo "$t: passed" || echo "$t: FAILED ($?)"
done | tee "$out/gpu_tests.summary"

step "Fashion-MNIST: convoy vs PyTorch (15 epochs, batch 128)"
for split in train t10k; do
  datagen idx2tar --images "$fm/$split-images-idx3-ubyte.gz" --labels "$fm/$split-labels-idx1-ubyte.gz" \
    --out "$work/fmnist-$split.tar" --classes-out "$work/classes.txt" 2>>"$out/datagen.log"
  datagen --input "$work/fmnist-$split.tar" --output "$work/fmnist-$split" --size 28 --channels 1 \
    --classes "$work/classes.txt" 2>>"$out/datagen.log"
done
TRAIN=train timeout 420 "$here/benchmarks/train_vs_pytorch.sh" "$here/configs/fmnist.toml" "$work/fmnist-train" \
  "$work/fmnist-t10k" 15 128 >"$out/fmnist.md" 2>"$out/fmnist.err" || echo "fmnist benchmark failed: $(tail -3 "$out/fmnist.err")"

step "ResNet-18 at 224 px on synthetic data (throughput)"
train synth --out "$work/synth224" --files 8 --per-file 256 --size 224 --channels 3 --classes 1000 2>>"$out/train.log"
TRAIN=train TORCH_MODES="eager compile-bf16" timeout 420 "$here/benchmarks/train_vs_pytorch.sh" \
  "$here/configs/resnet18.toml" "$work/synth224" "$work/synth224" 2 256 >"$out/resnet18.md" 2>"$out/resnet18.err" \
  || echo "resnet18 benchmark failed: $(tail -3 "$out/resnet18.err")"

step "GPU resize kernel vs CPU resize"
timeout 300 gpu_resize_bench --threads 1 4 8 16 --shape 2500x1900 500x375 --images 512 >"$out/resize_bench.log" 2>&1

cat "$out/machine.txt" "$out/gpu_tests.summary" "$out/fmnist.md" "$out/resnet18.md"
tail -10 "$out/resize_bench.log"
