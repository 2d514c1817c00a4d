#!/usr/bin/env bash
# The whole path on the embedded data set: Fashion-MNIST (Debian's dataset-fashion-mnist) -> tar of
# PNGs -> datagen under mpirun -np 2 -> train (GPU when there is one, else CPU) -> test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh datagen train

data=${CONVOY_DATA:-data}
fm=/usr/share/datasets/fashion-mnist
mkdir -p "$data"

for split in train t10k; do
  tar_out="$data/fmnist-$split.tar"
  [ -f "$tar_out" ] || build/datagen idx2tar --images "$fm/$split-images-idx3-ubyte.gz" \
    --labels "$fm/$split-labels-idx1-ubyte.gz" --out "$tar_out" --classes-out "$data/classes.txt"
done

mpi=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
for split in train t10k; do
  "${mpi[@]}" build/datagen --input "$data/fmnist-$split.tar" --output "$data/fmnist-$split" \
    --size 28 --channels 1 --classes "$data/classes.txt"
done

# On a GPU the reference recipe (15 epochs); on the CPU backend one epoch (one-cycle schedule over
# it) keeps the whole demo, set-up included, within 15 minutes on two cores.
if [ "$(build/train --gpus 2>/dev/null || echo 0)" -gt 0 ]; then epochs=${CONVOY_EPOCHS:-15}; else epochs=${CONVOY_EPOCHS:-1}; fi
build/train --config configs/fmnist.toml --data "$data/fmnist-train" --val "$data/fmnist-t10k" \
  --epochs "$epochs" --device auto | tee "$data/train.log"
echo "demo: finished in $(( $(date +%s) - start )) s"
