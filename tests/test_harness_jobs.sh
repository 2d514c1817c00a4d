#!/usr/bin/env bash
# The Slurm and LSF job scripts: rendered in dry-run mode under faked allocations (hosts, ranks,
# threads, launcher, NCCL env, resume, sweep mode) and run for real on this machine outside any.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_harness_jobs.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset SLURM_JOB_NODELIST SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_JOB_ID LSB_DJOB_HOSTFILE LSB_HOSTS LSB_DJOB_NUMPROC
unset CONVOY_SRC CONVOY_RANKS CONVOY_THREADS CONVOY_SWEEP_ARGS CONVOY_DRY_RUN
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 TMPDIR=$work
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect <file> <fixed string>
  grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks: $2
--- it holds:
$(cat "$1")"
}

# A scontrol that expands this job's node list, as Slurm's would.
mkdir -p "$work/fakebin"
cat > "$work/fakebin/scontrol" <<'EOF'
#!/bin/sh
[ "$1 $2 $3" = "show hostnames node[01-02]" ] || { echo "unexpected: $*" >&2; exit 1; }
echo node01; echo node02
EOF
chmod +x "$work/fakebin/scontrol"
slurm_env=(env PATH="$work/fakebin:$PATH" SLURM_JOB_ID=42 SLURM_JOB_NODELIST='node[01-02]' SLURM_NTASKS=8
           SLURM_CPUS_PER_TASK=4 CONVOY_DRY_RUN=1 CONVOY_BIN=/opt/convoy/bin)

# Slurm make-data: 8 ranks over both nodes, 4 threads each, the hostfile from the node list.
"${slurm_env[@]}" CONVOY_INPUT=/data/in.tar CONVOY_OUTPUT=/data/out CONVOY_SIZE=64 \
  CONVOY_DATAGEN_ARGS="--encoding jpeg" bash "$src/scripts/slurm/datagen.sbatch" > "$work/s-dg.txt" 2>&1
expect "$work/s-dg.txt" "node01 slots=4 node02 slots=4"
expect "$work/s-dg.txt" "+ mpirun -np 8 --hostfile $work/convoy-hosts."
expect "$work/s-dg.txt" "--map-by slot --bind-to none /opt/convoy/bin/datagen --input /data/in.tar --size 64 --channels 3 --per-file 1024 --seed 1 --encoding jpeg --output /data/out --threads 4"
"${slurm_env[@]}" CONVOY_LAUNCHER=srun CONVOY_INPUT=/data/in.tar CONVOY_OUTPUT=/data/out \
  bash "$src/scripts/slurm/datagen.sbatch" > "$work/s-dg-srun.txt" 2>&1
expect "$work/s-dg-srun.txt" "+ srun --ntasks=8 --nodes=2 --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=4 /opt/convoy/bin/datagen"
[ "$(grep -c '^+ ' "$work/s-dg.txt")" -eq 1 ] || fail "one datagen run expected"
ls "$work"/convoy-hosts.* > /dev/null 2>&1 && fail "the job left its hostfile behind"

# Slurm train: one rank per task, NCCL env sent to every rank, resume when the checkpoint exists.
touch "$work/ckpt"
"${slurm_env[@]}" CONVOY_CONFIG=configs/resnet18.toml CONVOY_DATA=/data/train CONVOY_VAL=/data/val \
  CONVOY_CHECKPOINT="$work/ckpt" CONVOY_TRAIN_ARGS="--log-every 50" bash "$src/scripts/slurm/train.sbatch" > "$work/s-tr.txt" 2>&1
expect "$work/s-tr.txt" "+ mpirun -np 8 --hostfile"
expect "$work/s-tr.txt" "-x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x CUDA_DEVICE_ORDER -x OMP_NUM_THREADS /opt/convoy/bin/train --config configs/resnet18.toml --data /data/train --device cuda --val /data/val --checkpoint $work/ckpt --resume $work/ckpt --log-every 50"
expect "$work/s-tr.txt" "NCCL_NVLS_ENABLE=0"

# LSF: hosts from LSB_DJOB_HOSTFILE (one line per slot) and from LSB_HOSTS.
printf 'cpu1\ncpu1\ncpu1\ncpu2\ncpu2\ncpu2\n' > "$work/lsb.hosts"
env -u CONVOY_BIN LSB_DJOB_HOSTFILE="$work/lsb.hosts" LSB_DJOB_NUMPROC=6 CONVOY_DRY_RUN=1 CONVOY_INPUT=/data/in.tar \
  CONVOY_OUTPUT=/data/out bash "$src/scripts/lsf/datagen.lsf" > "$work/l-dg.txt" 2>&1
expect "$work/l-dg.txt" "cpu1 slots=3 cpu2 slots=3"
expect "$work/l-dg.txt" "+ mpirun -np 6 --hostfile"
expect "$work/l-dg.txt" "--output /data/out --threads 0"
expect "$work/l-dg.txt" "$src/build/datagen"
env LSB_HOSTS="gpu7 gpu7 gpu7 gpu7 gpu9 gpu9 gpu9 gpu9" LSB_DJOB_NUMPROC=8 CONVOY_DRY_RUN=1 CUDA_DEVICE_MAX_CONNECTIONS=32 \
  CONVOY_CONFIG=c.toml CONVOY_DATA=/data/train CONVOY_EPOCHS=3 CONVOY_BATCH=512 \
  bash "$src/scripts/lsf/train.lsf" > "$work/l-tr.txt" 2>&1
expect "$work/l-tr.txt" "gpu7 slots=4 gpu9 slots=4"
expect "$work/l-tr.txt" "+ mpirun -np 8 --hostfile"
expect "$work/l-tr.txt" "train --config c.toml --data /data/train --device cuda --epochs 3 --batch 512"
expect "$work/l-tr.txt" "-x CUDA_DEVICE_MAX_CONNECTIONS "  # set by the user: every rank's CUDA gets it

# Sweep mode inside an allocation: the whole grid rendered, hosts from the scheduler.
"${slurm_env[@]}" CONVOY_INPUT=/data/in.tar CONVOY_SWEEP_ARGS="--ranks 2,4 --threads 1,2 --hosts 1,2 --repeats 1 --csv $work/g.csv" \
  bash "$src/scripts/slurm/datagen.sbatch" > "$work/s-sweep.txt" 2>&1
[ "$(grep -c '^mpirun ' "$work/s-sweep.txt")" -eq 8 ] || fail "2 x 2 x 2 sweep commands expected: $(cat "$work/s-sweep.txt")"
expect "$work/s-sweep.txt" "hostfile.2.2: node01 slots=2 node02 slots=2"
expect "$work/s-sweep.txt" "mpirun -np 4 --hostfile $work/g.csv.d/hostfile.2.2 --map-by slot --bind-to none /opt/convoy/bin/datagen --input /data/in.tar"
[ -e "$work/g.csv" ] && fail "a dry run wrote the CSV"
# Without --hosts a point takes as many of the allocation's hosts as it has ranks, up to all of them.
env -u CONVOY_BIN PATH="$work/fakebin:$PATH" SLURM_JOB_NODELIST='node[01-02]' "$src/scripts/sweep-datagen.sh" --dry-run \
  --ranks 1,4 --repeats 1 --csv "$work/a.csv" -- --input /data/in.tar --size 8 > "$work/auto.txt" 2>&1
expect "$work/auto.txt" "hostfile.1.1: node01 slots=1"
expect "$work/auto.txt" "hostfile.2.2: node01 slots=2 node02 slots=2"
expect "$work/auto.txt" "$src/build/datagen --input /data/in.tar --size 8"
env LSB_HOSTS="gpu7 gpu7 gpu9 gpu9" LSB_DJOB_NUMPROC=4 CONVOY_DRY_RUN=1 CONVOY_CONFIG=c.toml CONVOY_DATA=/data/train \
  CONVOY_BATCH=256 CONVOY_RANKS_PER_HOST=2 CONVOY_SWEEP_ARGS="--ranks 1,2,4 --mode strong,weak --repeats 1 --csv $work/t.csv" \
  bash "$src/scripts/lsf/train.lsf" > "$work/l-sweep.txt" 2>&1
[ "$(grep -c '^mpirun ' "$work/l-sweep.txt")" -eq 6 ] || fail "3 ranks x 2 modes expected: $(cat "$work/l-sweep.txt")"
expect "$work/l-sweep.txt" "mpirun -np 4 --hostfile $work/t.csv.d/hostfile.2.2"
expect "$work/l-sweep.txt" "--epochs 2 --batch 1024 --metrics $work/t.csv.d/metrics.jsonl --device cuda"
expect "$work/l-sweep.txt" "--epochs 2 --batch 256 --metrics"

# A missing knob is named.
env CONVOY_DRY_RUN=1 bash "$src/scripts/slurm/datagen.sbatch" > "$work/miss.txt" 2>&1 && fail "no CONVOY_INPUT accepted"
expect "$work/miss.txt" "CONVOY_INPUT"

# For real on this machine: make-data with 2 ranks, then 1 epoch of training on the CPU over 2 ranks.
fm=/usr/share/datasets/fashion-mnist
/usr/bin/python3 - "$fm" "$work" <<'PY'
import gzip, sys
fm, w, n = sys.argv[1], sys.argv[2], 300
img = gzip.open(f"{fm}/t10k-images-idx3-ubyte.gz").read()
lab = gzip.open(f"{fm}/t10k-labels-idx1-ubyte.gz").read()
open(f"{w}/img.idx", "wb").write(img[:4] + n.to_bytes(4, "big") + img[8:16] + img[16:16 + n * 784])
open(f"{w}/lab.idx", "wb").write(lab[:4] + n.to_bytes(4, "big") + lab[8:8 + n])
PY
"$bin/datagen" idx2tar --images "$work/img.idx" --labels "$work/lab.idx" --out "$work/t.tar" 2> /dev/null
env CONVOY_BIN="$bin" CONVOY_INPUT="$work/t.tar" CONVOY_OUTPUT="$work/data" CONVOY_SIZE=28 CONVOY_CHANNELS=1 \
  CONVOY_PER_FILE=100 CONVOY_RANKS=2 CONVOY_THREADS=1 bash "$src/scripts/slurm/datagen.sbatch" > "$work/run-dg.txt" 2>&1 ||
  fail "datagen job failed: $(cat "$work/run-dg.txt")"
grep -q '"num_samples": *300' "$work/data/dataset.json" || fail "the job's dataset should hold 300 samples"
env CONVOY_BIN="$bin" CONVOY_CONFIG="$src/tests/data/tiny_fc.toml" CONVOY_DATA="$work/data" CONVOY_DEVICE=cpu CONVOY_EPOCHS=1 \
  CONVOY_RANKS=2 CONVOY_METRICS="$work/m.jsonl" CONVOY_TRAIN_ARGS="--threads 1" \
  bash "$src/scripts/lsf/train.lsf" > "$work/run-tr.txt" 2>&1 || fail "train job failed: $(cat "$work/run-tr.txt")"
grep -q '"kind":"epoch"' "$work/m.jsonl" || fail "the train job wrote no epoch record"
expect "$work/run-tr.txt" "2 rank(s)"
echo "harness jobs: ok"
