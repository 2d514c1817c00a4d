#!/usr/bin/env bash
# sweep-datagen.sh and sweep-train.sh on a 400-image Fashion-MNIST tar: grid rows, resume, a hung run
# killed by the timeout and retried (no process left), failures used up and --retry-failed, plots.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_harness_sweep.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset SLURM_JOB_NODELIST SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_JOB_ID LSB_DJOB_HOSTFILE LSB_HOSTS LSB_DJOB_NUMPROC
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
fail() { echo "FAIL: $*" >&2; exit 1; }
rows() { tail -n +2 "$1" | wc -l; }
col() {  # col <csv> <column name>: that column of every data row
  awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } { print $c }' "$1"
}

fm=/usr/share/datasets/fashion-mnist
/usr/bin/python3 - "$fm" "$work" <<'PY'
import gzip, sys
fm, w, n = sys.argv[1], sys.argv[2], 400
img = gzip.open(f"{fm}/t10k-images-idx3-ubyte.gz").read()
lab = gzip.open(f"{fm}/t10k-labels-idx1-ubyte.gz").read()
open(f"{w}/img.idx", "wb").write(img[:4] + n.to_bytes(4, "big") + img[8:16] + img[16:16 + n * 784])
open(f"{w}/lab.idx", "wb").write(lab[:4] + n.to_bytes(4, "big") + lab[8:8 + n])
PY
"$bin/datagen" idx2tar --images "$work/img.idx" --labels "$work/lab.idx" --out "$work/t.tar" 2> /dev/null
dg=(--input "$work/t.tar" --size 28 --channels 1 --per-file 100)
sweep_dg() { "$src/scripts/sweep-datagen.sh" --datagen "$bin/datagen" --timeout 60 "$@"; }

# 1. The 2 x 2 grid: one ok row per point with datagen's own figures.
csv=$work/dg.csv
sweep_dg --warmup --ranks 1,2 --threads 1,2 --repeats 1 --csv "$csv" -- "${dg[@]}" 2> "$work/sweep1.log"
[ "$(rows "$csv")" -eq 4 ] || fail "expected 4 rows (the warm-up unrecorded), got $(rows "$csv")"
grep -q "warm-up run: ok" "$work/sweep1.log" || fail "the warm-up run should be reported"
[ "$(col "$csv" status | sort -u)" = ok ] || fail "not every run is ok: $(col "$csv" status | tr '\n' ' ')"
[ "$(paste -d: <(col "$csv" ranks) <(col "$csv" threads) | sort | tr '\n' ' ')" = "1:1 1:2 2:1 2:2 " ] ||
  fail "grid points differ: $(paste -d: <(col "$csv" ranks) <(col "$csv" threads) | tr '\n' ' ')"
[ "$(col "$csv" images | sort -u)" = 400 ] || fail "images column should be 400"
awk -F, 'NR > 1 && !($15 > 0 && $11 >= $12 && $17 > 0 && $11 > 0) { bad = 1 } END { exit bad }' "$csv" ||
  fail "img/s, wall >= run seconds and decode time should hold in every row"

# 2. A rerun does nothing; more repeats add only the missing ones; other datagen arguments are new rows.
sweep_dg --ranks 1,2 --threads 1,2 --repeats 1 --csv "$csv" -- "${dg[@]}" 2> "$work/sweep2.log"
[ "$(rows "$csv")" -eq 4 ] || fail "a rerun added rows"
grep -q "0 attempt(s) run, 4 point(s) already" "$work/sweep2.log" || fail "rerun should report 4 points done"
sweep_dg --ranks 1 --threads 1,2 --repeats 2 --csv "$csv" -- "${dg[@]}" 2> /dev/null
[ "$(rows "$csv")" -eq 6 ] || fail "repeat 2 of two points should add 2 rows, CSV has $(rows "$csv")"
[ "$(col "$csv" repeat | sort | uniq -c | awk '{ print $1 ":" $2 }' | tr '\n' ' ')" = "4:1 2:2 " ] ||
  fail "repeat counts differ"
sweep_dg --ranks 1 --threads 1 --repeats 1 --csv "$csv" -- "${dg[@]}" --seed 5 2> /dev/null
[ "$(rows "$csv")" -eq 7 ] || fail "other datagen arguments should make a new row"

# 3. A hung first attempt is killed at the timeout, recorded, retried; nothing survives it. The sleeps
# carry this test's pid, so another copy of this test running beside it cannot be taken for a leftover.
nap1=$((1000000 + $$)) nap2=$((2000000 + $$))
cat > "$work/hang-once.sh" <<EOF
#!/usr/bin/env bash
if [ ! -e "$work/hung" ]; then touch "$work/hung"; exec sleep $nap1; fi
exec "$bin/datagen" "\$@"
EOF
chmod +x "$work/hang-once.sh"
"$src/scripts/sweep-datagen.sh" --datagen "$work/hang-once.sh" --ranks 1 --threads 1 --repeats 1 --timeout 3 \
  --retries 1 --csv "$work/hang.csv" -- "${dg[@]}" 2> "$work/hang.log"
[ "$(col "$work/hang.csv" status | tr '\n' ' ')" = "timeout ok " ] || fail "statuses: $(col "$work/hang.csv" status | tr '\n' ' ')"
[ "$(col "$work/hang.csv" retry | tr '\n' ' ')" = "0 1 " ] || fail "retry column should be 0 then 1"
[ "$(col "$work/hang.csv" exit_code | head -n 1)" = 124 ] || fail "a timed-out attempt records exit 124"
awk -F, 'NR == 2 && $11 < 3 { exit 1 }' "$work/hang.csv" || fail "the timed-out attempt should have run 3 s"
# A rank that ignores TERM: mpirun is killed after SWEEP_KILL_AFTER, the rank with the attempt's session.
cat > "$work/hang-hard.sh" <<EOF
#!/usr/bin/env bash
trap '' TERM
exec sleep $nap2
EOF
chmod +x "$work/hang-hard.sh"
SWEEP_KILL_AFTER=1 "$src/scripts/sweep-datagen.sh" --datagen "$work/hang-hard.sh" --ranks 2 --threads 1 --repeats 1 \
  --timeout 2 --retries 0 --csv "$work/hard.csv" -- "${dg[@]}" 2> /dev/null
[ "$(col "$work/hard.csv" status)" = timeout ] || fail "a rank ignoring TERM should end as a timeout"
sleep 0.5
if pgrep -f "^sleep ($nap1|$nap2)\$" > /dev/null; then fail "a hung rank outlived its attempt: $(pgrep -af "^sleep ($nap1|$nap2)\$")"; fi

# The sweep itself stopped mid-attempt (TERM): the attempt's processes go with it, no row is written
# for it, and the next sweep runs it from the start.
rm -f "$work/hung"
"$src/scripts/sweep-datagen.sh" --datagen "$work/hang-once.sh" --ranks 1 --threads 1 --repeats 1 --timeout 60 \
  --csv "$work/stop.csv" -- "${dg[@]}" 2> /dev/null &
sweep_pid=$!
for _ in $(seq 100); do [ -e "$work/hung" ] && break; sleep 0.1; done
[ -e "$work/hung" ] || fail "the attempt never started"
sleep 0.5
kill -TERM "$sweep_pid"
wait "$sweep_pid" && fail "a stopped sweep should not exit 0"
[ "$(rows "$work/stop.csv")" -eq 0 ] || fail "an interrupted attempt left a row"
sleep 0.3
if pgrep -f "^sleep $nap1\$" > /dev/null; then fail "the stopped sweep left its attempt running"; fi
"$src/scripts/sweep-datagen.sh" --datagen "$work/hang-once.sh" --ranks 1 --threads 1 --repeats 1 --timeout 60 \
  --csv "$work/stop.csv" -- "${dg[@]}" 2> /dev/null
[ "$(col "$work/stop.csv" status)" = ok ] || fail "the resumed sweep should finish the point"

# 4. An attempt that always fails uses up its retries; a rerun leaves it; --retry-failed tries again.
printf '#!/bin/sh\necho broken >&2\nexit 3\n' > "$work/broken.sh"
chmod +x "$work/broken.sh"
bad=("$src/scripts/sweep-datagen.sh" --datagen "$work/broken.sh" --ranks 1 --threads 1 --repeats 1 --retries 1
     --csv "$work/bad.csv")
"${bad[@]}" -- "${dg[@]}" 2> /dev/null
[ "$(col "$work/bad.csv" status | tr '\n' ' ')" = "failed failed " ] || fail "two failed attempts expected"
[ "$(col "$work/bad.csv" exit_code | sort -u)" = 3 ] || fail "exit code 3 should be recorded"
"${bad[@]}" -- "${dg[@]}" 2> "$work/bad2.log"
[ "$(rows "$work/bad.csv")" -eq 2 ] || fail "a used-up point should not rerun by default"
grep -q -- "--retry-failed reruns it" "$work/bad2.log" || fail "the rerun should say how to retry"
"${bad[@]}" --retry-failed -- "${dg[@]}" 2> /dev/null
[ "$(col "$work/bad.csv" retry | tr '\n' ' ')" = "0 1 2 3 " ] || fail "--retry-failed should add attempts 2 and 3"
grep -q broken "$(tail -n 1 "$work/bad.csv" | awk -F, '{ print $NF }')" || fail "the attempt log should hold datagen's stderr"

# 5. Refusals: a CSV another sweep holds, arguments the sweep owns (a CSV of another kind: in 7).
exec {lock}> "$csv.lock"
flock "$lock"
sweep_dg --ranks 1 --csv "$csv" -- "${dg[@]}" 2> "$work/e2.log" && fail "a locked CSV was written"
grep -q "another sweep is writing it" "$work/e2.log" || fail "wrong refusal: $(cat "$work/e2.log")"
exec {lock}>&-
sweep_dg --csv "$csv" -- "${dg[@]}" --threads 2 2> "$work/e3.log" && fail "--threads after -- was accepted"
grep -q "set by the sweep itself" "$work/e3.log" || fail "wrong refusal: $(cat "$work/e3.log")"

# 6. Plots of the datagen CSV: three PNGs and a table with the speed-up over one core.
/usr/bin/python3 "$src/scripts/plot_sweep.py" "$csv" --out "$work/dg" > "$work/dg-table.md" 2> /dev/null
for f in speedup efficiency phases; do
  [ "$(head -c 4 "$work/dg-$f.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "dg-$f.png is not a PNG"
done
grep -q '| 1 thread(s)/rank | 1r x 1t | 1 | 2 | .* | 1.00 | 100 % |' "$work/dg-table.md" ||
  fail "the one-core point should have 2 runs (the --seed 5 row is another sweep) and speed-up 1: $(cat "$work/dg-table.md")"

# 7. sweep-train: strong and weak over 1 and 2 ranks; the batch follows the mode.
cat > "$work/tiny.toml" <<'EOF'
[net]
name = "tiny"
input = [1, 28, 28]
[train]
batch = 32
optimizer = "sgd"
lr = 0.05
[[layer]]
name = "conv1"
type = "conv"
filters = 4
kernel = 3
pad = 1
[[layer]]
name = "relu1"
type = "relu"
[[layer]]
name = "pool1"
type = "max_pool"
kernel = 2
[[layer]]
name = "fc"
type = "fc"
units = 10
[[layer]]
name = "loss"
type = "softmax_xent"
EOF
"$bin/datagen" "${dg[@]}" --output "$work/data" 2> /dev/null
tcsv=$work/train.csv
"$src/scripts/sweep-train.sh" --train "$bin/train" --config "$work/tiny.toml" --data "$work/data" --batch 32 \
  --ranks 1,2 --repeats 1 --epochs 2 --timeout 120 --csv "$tcsv" -- --threads 1 2> "$work/train.log" ||
  fail "sweep-train failed: $(cat "$work/train.log")"
[ "$(col "$tcsv" status | sort -u)" = ok ] || fail "train statuses: $(col "$tcsv" status | tr '\n' ' ')"
[ "$(paste -d: <(col "$tcsv" mode) <(col "$tcsv" ranks) <(col "$tcsv" batch_global) <(col "$tcsv" batch_per_rank) | tr '\n' ' ')" = \
  "strong:1:32:32 strong:2:32:16 weak:1:32:32 weak:2:64:32 " ] || fail "batch sizes per mode differ"
[ "$(col "$tcsv" timed_epochs | sort -u)" = 1 ] || fail "with 2 epochs and 1 warm-up epoch, 1 epoch is timed"
[ "$(col "$tcsv" images | sort -u)" = 400 ] || fail "one timed epoch of 400 images"
awk -F, 'NR > 1 && !($18 > 0 && $21 > 0) { bad = 1 } END { exit bad }' "$tcsv" || fail "img/s and t_fwd should be positive"
"$src/scripts/sweep-train.sh" --train "$bin/train" --config "$work/tiny.toml" --data "$work/data" --batch 32 \
  --ranks 1,2 --repeats 1 --epochs 2 --csv "$tcsv" -- --threads 1 2> /dev/null
[ "$(rows "$tcsv")" -eq 4 ] || fail "the train rerun added rows"
/usr/bin/python3 "$src/scripts/plot_sweep.py" "$tcsv" --out "$work/tr" > "$work/tr-table.md" 2> /dev/null
[ -s "$work/tr-speedup.png" ] && [ -s "$work/tr-phases.png" ] || fail "train plots missing"
grep -q '| weak scaling | weak 2 | 2 | 1 |' "$work/tr-table.md" || fail "train table: $(cat "$work/tr-table.md")"
sweep_dg --ranks 1 --csv "$tcsv" -- "${dg[@]}" 2> "$work/e1.log" && fail "sweep-datagen wrote into a sweep-train CSV"
grep -q "header differs" "$work/e1.log" || fail "wrong refusal: $(cat "$work/e1.log")"
# Every row of every CSV has the header's number of fields.
for f in "$csv" "$work/hang.csv" "$work/hard.csv" "$work/bad.csv" "$work/stop.csv" "$tcsv"; do
  awk -F, 'NR == 1 { n = NF } NF != n { exit 1 }' "$f" || fail "$(basename "$f") has a row of the wrong width"
done
echo "harness sweep: ok"
