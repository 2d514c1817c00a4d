#!/usr/bin/env bash
# The README's "A short tour" block, run as written, top to bottom, in an empty folder where `build`
# is the build folder and `configs` the project's: every command must succeed, and what it says it
# makes must be there.
set -euo pipefail
bin=${CONVOY_BIN:?}
src=${CONVOY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d "${TMPDIR:-/tmp}/convoy_readme_tour.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }

# The first sh block after the heading, as it stands in the README.
awk '/^## A short tour/ { on = 1; next } on && /^```sh/ { take = 1; next } take && /^```/ { exit } take' \
  "$src/README.md" > "$work/tour.sh"
[ "$(grep -c 'build/' "$work/tour.sh")" -ge 10 ] || fail "the tour block was not found in README.md"
ln -s "$bin" "$work/build"
ln -s "$src/configs" "$work/configs"
(cd "$work" && bash -euo pipefail tour.sh) > "$work/out.log" 2>&1 || {
  tail -30 "$work/out.log" >&2
  fail "the README's tour stopped at an error (above)"
}

samples() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_samples"])' "$1"; }
[ "$(samples "$work/data/train/dataset.json")" = 3000 ] || fail "data/train does not hold the 3,000 images"
[ "$(samples "$work/data/val/dataset.json")" = 1000 ] || fail "data/val does not hold the 1,000 images"
[ -s "$work/grid.png" ] || fail "no grid.png"
[ "$(grep -c '^test accuracy: ' "$work/out.log")" = 3 ] || fail "expected three 'test accuracy:' lines (train, resume, eval)"
grep -q 'epoch 3/3' "$work/out.log" || fail "the resumed run did not train its third epoch"
# The eval line equals the last epoch's --val figure: one evaluation path.
acc=$(grep '^test accuracy: ' "$work/out.log" | tail -2 | sort -u | wc -l)
[ "$acc" = 1 ] || fail "train eval and the resumed run's --val disagree: $(grep '^test accuracy: ' "$work/out.log" | tr '\n' ' ')"
grep -q 'parameters' "$work/out.log" || fail "--print-net printed no summary"
echo "ok: the README's tour runs as written"
