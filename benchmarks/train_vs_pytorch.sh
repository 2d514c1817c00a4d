#!/usr/bin/env bash
# Side by side on one GPU: convoy's train (CUDA backend, streaming from the batch files) and the
# PyTorch baseline (benchmarks/pytorch_train.py: eager and torch.compile, data resident on the
# GPU) on the same TOML config and the same batch files. Prints a Markdown table. For convoy,
# "input stall" is t_io (the host waiting for the loader) + unhidden t_h2d, as a share of training
# time; "GPU idle" is the time the GPU itself had nothing to run (unhidden t_h2d + t_idle), smaller
# because the host queues up to two steps ahead. "after set-up" leaves out what runs once: for
# convoy the first epoch (cuDNN's algorithm choice, the graph capture, the first read of every
# file), for PyTorch the three warm-up steps its script runs before timing (autotuning, compilation);
# the plain images/s keeps convoy's first epoch in. "with set-up" adds what runs before the first
# step, for convoy the GPU set-up (context, handles, arena, weights), for PyTorch the warm-up steps,
# to the whole training time: the figure a user waits for.
#
#   benchmarks/train_vs_pytorch.sh CONFIG TRAIN_DIR VAL_DIR [EPOCHS] [BATCH]
#   e.g. benchmarks/train_vs_pytorch.sh configs/fmnist.toml data/fmnist-train data/fmnist-t10k 15 128
# Environment: TRAIN (default build/train), PYTHON (default python3), CONVOY_ARGS (extra train flags),
# CONVOY_VARIANTS (several sets of train flags separated by ';', one convoy row each, e.g.
# "--precision tf32;--precision bf16"; CONVOY_ARGS goes with each),
# TORCH_MODES (default "eager compile"; also bf16, compile-bf16, and bf16-cl, compile-bf16-cl with
# channels_last, the layout convoy's --precision bf16 uses), LOG_DIR (keep convoy's log and metrics there).
set -euo pipefail
config=$1 train_dir=$2 val_dir=$3 epochs=${4:-} batch=${5:-}
train=${TRAIN:-build/train}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

args=(--config "$config" --data "$train_dir" --val "$val_dir")
[ -n "$epochs" ] && args+=(--epochs "$epochs")
[ -n "$batch" ] && args+=(--batch "$batch")

# convoy: img/s over the training part of every epoch (evaluation excluded, as for PyTorch).
: >"$work/rows.jsonl"
IFS=';' read -r -a variants <<< "${CONVOY_VARIANTS:-}"
[ "${#variants[@]}" -gt 0 ] || variants=("")
for variant in "${variants[@]}"; do
  flags="${CONVOY_ARGS:-} $variant"
  # shellcheck disable=SC2086
  "$train" "${args[@]}" --device cuda --metrics "$work/convoy.jsonl" --log-every 0 $flags >"$work/convoy.out" 2>"$work/convoy.err" \
    || { cat "$work/convoy.err" >&2; exit 1; }
  if [ -n "${LOG_DIR:-}" ]; then
    mkdir -p "$LOG_DIR"
    tag=$(echo "$variant" | tr -c 'A-Za-z0-9_\n-' '_')
    for f in "$work"/convoy.*; do cp "$f" "$LOG_DIR/$(basename "$f" | sed "s/^convoy/convoy${tag:+_$tag}/")"; done
  fi
  "$python" - "$work/convoy.jsonl" "$train_dir/dataset.json" "$config" "$flags" >>"$work/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ep = [r for r in rows if r.get("kind") == "epoch"]
n = json.load(open(sys.argv[2]))["num_samples"]
secs = sum(r["train_seconds"] for r in ep)
later = ep[1:] or ep
steady = len(later) * n / sum(r["train_seconds"] for r in later)
setup = sum(r.get("gpu_setup_seconds", 0.0) for r in rows if r.get("kind") == "setup")
stall = sum(r["t_io"] + r["t_h2d"] for r in ep)
# What the GPU itself waited: the batch's copy not hidden, and the host not having queued the step.
idle = sum(r["t_h2d"] + r.get("t_idle", 0.0) for r in ep)
print(json.dumps({"impl": "convoy " + (sys.argv[4] or "").strip(), "config": sys.argv[3].split("/")[-1],
                  "epochs": len(ep), "images_per_s": round(len(ep) * n / secs, 1), "seconds": round(secs, 2),
                  "steady_images_per_s": round(steady, 1), "setup_seconds": round(setup, 2),
                  "test_accuracy": round(ep[-1].get("test_top1", float("nan")), 4),
                  "input_stall_pct": round(100 * stall / secs, 2), "gpu_idle_pct": round(100 * idle / secs, 2)}))
PY
  rm -f "$work/convoy.jsonl"
done
for mode in ${TORCH_MODES-eager compile}; do
  extra=()
  [ "$mode" = compile ] && extra+=(--compile)
  [ "$mode" = bf16 ] && extra+=(--bf16)
  [ "$mode" = compile-bf16 ] && extra+=(--compile --bf16)
  [ "$mode" = bf16-cl ] && extra+=(--bf16 --channels-last)
  [ "$mode" = compile-bf16-cl ] && extra+=(--compile --bf16 --channels-last)
  "$python" "$here/pytorch_train.py" "${args[@]}" "${extra[@]}" >>"$work/rows.jsonl"
done

"$python" - "$work/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
torch = [r for r in rows if not r["impl"].startswith("convoy")]
base = torch[0]["images_per_s"] if torch else None
print("| implementation | config | epochs | images/s | vs PyTorch eager | images/s after set-up | vs PyTorch eager "
      "| images/s with set-up | set-up (s) | time (s) | test accuracy | input stall | GPU idle |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    steady = r.get("steady_images_per_s", r["images_per_s"])  # PyTorch's timed loop starts after set-up
    ratio = f"{r['images_per_s'] / base:.2f}x" if base else ""
    sratio = f"{steady / base:.2f}x" if base else ""
    setup = r.get("setup_seconds", 0.0)
    whole = r["images_per_s"] * r["seconds"] / (r["seconds"] + setup)
    stall = f"{r['input_stall_pct']:.2f} %" if "input_stall_pct" in r else ""
    idle = f"{r['gpu_idle_pct']:.2f} %" if "gpu_idle_pct" in r else ""
    print(f"| {r['impl']} | {r['config']} | {r['epochs']} | {r['images_per_s']:.0f} | {ratio} | {steady:.0f} | {sratio} "
          f"| {whole:.0f} | {setup:.2f} | {r['seconds']:.1f} | {r['test_accuracy']:.4f} | {stall} | {idle} |")
PY
