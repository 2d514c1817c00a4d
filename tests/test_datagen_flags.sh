#!/usr/bin/env bash
# Every flag of datagen and of its subcommands is checked when the command line is read: a value
# out of its range, or a flag that the rest of the command line would ignore, is refused with one
# line naming the flag, before any work (no output folder is made).
set -euo pipefail
bin=${CONVOY_BIN:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_datagen_flags.XXXXXX")
trap 'rm -rf "$work"' EXIT
fm=/usr/share/datasets/fashion-mnist
dg="$bin/datagen"
"$dg" idx2tar --images "$fm/t10k-images-idx3-ubyte.gz" --labels "$fm/t10k-labels-idx1-ubyte.gz" \
  --out "$work/t10k.tar" 2> /dev/null
"$dg" --input "$work/t10k.tar" --output "$work/ds" --size 8 --channels 1 --per-file 5000 2> /dev/null

failures=0
refused() {  # refused <flag named in the one line> <datagen args...>
  local flag=$1
  shift
  rm -rf "$work/out"
  if "$dg" "$@" > "$work/stdout.txt" 2> "$work/err.txt"; then
    echo "accepted: $*"; failures=$((failures + 1)); return
  fi
  if [ "$(wc -l < "$work/err.txt")" -ne 1 ] || ! grep -qF -- "$flag" "$work/err.txt"; then
    echo "not one line naming $flag for: $*"; sed 's/^/    /' "$work/err.txt"; failures=$((failures + 1))
  fi
  if [ -e "$work/out" ]; then echo "refused, yet made its output folder: $*"; failures=$((failures + 1)); fi
}

run=(--input "$work/t10k.tar" --output "$work/out" --size 8)
refused --size "${run[@]/8/0}"
refused --size --input "$work/t10k.tar" --output "$work/out" --size 99999999999
refused --channels "${run[@]}" --channels 2
refused --per-file "${run[@]}" --per-file 0
refused --per-file "${run[@]}" --per-file -1
refused --seed "${run[@]}" --seed -1
refused --threads "${run[@]}" --threads -1
refused --writers "${run[@]}" --writers -2
refused --files-in-memory "${run[@]}" --files-in-memory -1
refused --resize "${run[@]}" --resize stretch
refused --encoding "${run[@]}" --encoding png
refused --quality "${run[@]}" --encoding jpeg --quality 101
refused --quality "${run[@]}" --encoding jpeg --quality 0
refused --quality "${run[@]}" --quality 80  # raw output: --quality would be ignored
refused --max-pixels "${run[@]}" --max-pixels 0
refused --max-pixels "${run[@]}" --max-pixels -5
refused --max-aspect "${run[@]}" --max-aspect 0.5
refused --max-aspect "${run[@]}" --max-aspect nan
refused --gpu-route "${run[@]}" --gpu-route sometimes
refused --gpu-route "${run[@]}" --gpu-route always  # without --gpu-resize
refused --gpu-min-saving "${run[@]}" --gpu-min-saving 3  # without --gpu-resize
refused --gpu-min-saving "${run[@]}" --gpu-resize --gpu-min-saving -1
refused --gpu-min-saving "${run[@]}" --gpu-resize --gpu-min-saving nan
refused --timeline "${run[@]}" --timeline "$work/no/such/folder/t.json"
refused --input "${run[@]}" --input "$work/t10k.tar"  # the same input twice
refused --input "${run[@]}" --input "$work/./t10k.tar"
refused --bogus "${run[@]}" --bogus
refused --resize "${run[@]}" --resize short:0
refused --resize "${run[@]}" --resize short:x
refused --resize --input "$work/t10k.tar" --output "$work/out" --resize short  # no side: neither :S nor --size
refused --size "${run[@]}" --resize short:16  # two different short sides
refused --max-side "${run[@]}" --max-side 64  # without --resize short:S
refused --max-side "${run[@]}" --resize short:8 --max-side 4  # below the short side
refused --max-side "${run[@]}" --resize short:8 --max-side 0
refused --gpu-resize "${run[@]}" --resize short:8 --gpu-resize  # the GPU makes squares only

refused --count preview "$work/ds" --out "$work/p.png" --count 0
refused --count preview "$work/ds" --out "$work/p.png" --count -3
bench=(bench-decode --input "$work/t10k.tar")
refused --size "${bench[@]}" --size 0
refused --channels "${bench[@]}" --channels 2
refused --limit "${bench[@]}" --limit 0
refused --repeat "${bench[@]}" --repeat 0
refused --concurrent "${bench[@]}" --concurrent -1
refused --seconds "${bench[@]}" --concurrent 2 --seconds 0
refused --seconds "${bench[@]}" --seconds 2  # without --concurrent
refused --work "${bench[@]}" --work make  # without --concurrent
refused --write-dir "${bench[@]}" --concurrent 1 --write-dir "$work"  # without --work make-write
refused --resize "${bench[@]}" --resize short
[ "$failures" -eq 0 ] || { echo "$failures flag checks failed"; exit 1; }
echo ok
