#!/usr/bin/env bash
# datagen touches only files it made: a folder holding files of the user's is refused with one
# line naming the folder and a file, and nothing in it is deleted or overwritten (names that merely
# contain ".tmp" included); its own temporaries are recognised exactly. Two runs into one folder at
# once: the second is refused at once with one line (also under mpirun, every rank exiting), and
# the first finishes sound.
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_datagen_output.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
dg="$bin/datagen"
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

"$dg" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" --out "$work/t10k.tar"
args=(--input "$work/t10k.tar" --size 28 --channels 1 --per-file 2500)

# refused_keeping DIR WORDS: the run into DIR fails with one line holding WORDS, and every file that
# was in DIR is still there, unchanged.
refused_keeping() {
  local dir=$1 words=$2
  (cd "$dir" && find . -type f | sort | xargs md5sum) > "$work/before.txt"
  if "$dg" "${args[@]}" --output "$dir" > "$work/out.txt" 2> "$work/err.txt"; then
    echo "datagen accepted $dir"; exit 1
  fi
  [ "$(wc -l < "$work/err.txt")" -eq 1 ] || { echo "not one line:"; cat "$work/err.txt"; exit 1; }
  grep -qF -- "$words" "$work/err.txt" || { echo "no '$words' in: $(cat "$work/err.txt")"; exit 1; }
  (cd "$dir" && md5sum --quiet -c "$work/before.txt") || { echo "files in $dir were changed"; exit 1; }
}

mkdir -p "$work/tmpnames"
echo "the user's backup" > "$work/tmpnames/dataset.json.tmp.backup-2024"
echo "the user's old index" > "$work/tmpnames/index.tsv.tmp.old"
refused_keeping "$work/tmpnames" "$work/tmpnames: holds files datagen did not make"

mkdir -p "$work/own"
for f in index.tsv rejects.tsv mean_image.png; do echo "the user's $f" > "$work/own/$f"; done
refused_keeping "$work/own" "$work/own: holds files datagen did not make"

# A batch file of unknown origin in a folder without datagen's run file.
mkdir -p "$work/batches"
echo "not a batch file" > "$work/batches/batch_00000.cvb"
refused_keeping "$work/batches" "holds files datagen did not make"

# A folder of datagen's own: its temporaries (name.tmp.PID, as a killed run leaves them) are removed,
# a user's file beside them is left alone, and the run resumes into it.
"$dg" "${args[@]}" --output "$work/ours" 2> /dev/null
echo "x" > "$work/ours/batch_00001.cvb.tmp.12345"
echo "x" > "$work/ours/dataset.json.tmp.999"
echo "notes" > "$work/ours/dataset.json.tmp.notes"
echo "notes" > "$work/ours/README"
"$dg" "${args[@]}" --output "$work/ours" 2> /dev/null
[ ! -e "$work/ours/batch_00001.cvb.tmp.12345" ] && [ ! -e "$work/ours/dataset.json.tmp.999" ] ||
  { echo "datagen's own temporaries were left"; exit 1; }
[ "$(cat "$work/ours/dataset.json.tmp.notes")" = notes ] && [ "$(cat "$work/ours/README")" = notes ] ||
  { echo "a user's file in a datagen folder was touched"; exit 1; }
"$dg" verify "$work/ours"

# Two runs at once. The first is stopped (SIGSTOP) once it has claimed the folder, so that the
# second surely starts while it runs; the second must be refused at once, alone and under mpirun.
slow=(--input "$work/t10k.tar" --size 64 --channels 3 --per-file 500 --threads 1)
"$dg" "${slow[@]}" --output "$work/both" 2> "$work/first.log" &
first=$!
for _ in $(seq 1 1000); do
  [ -e "$work/both/datagen_run.json" ] && break
  sleep 0.01
done
kill -STOP "$first"
for launcher in "" "${mpi[*]}"; do
  start=$(date +%s)
  if $launcher "$dg" "${slow[@]}" --output "$work/both" > "$work/out.txt" 2> "$work/second.log"; then
    echo "a second run into a folder in use was accepted ($launcher)"; exit 1
  fi
  [ $(($(date +%s) - start)) -lt 20 ] || { echo "the second run was not refused at once"; exit 1; }
  grep -qF "$work/both: is in use by another datagen run" "$work/second.log" ||
    { echo "unclear refusal ($launcher): $(cat "$work/second.log")"; exit 1; }
  [ "$(grep -c "in use by another datagen run" "$work/second.log")" -eq 1 ] ||
    { echo "the refusal is not one line ($launcher)"; cat "$work/second.log"; exit 1; }
done
kill -CONT "$first"
wait "$first" || { echo "the first run failed:"; cat "$work/first.log"; exit 1; }
"$dg" verify "$work/both"
echo ok
