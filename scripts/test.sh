#!/usr/bin/env bash
# Sets up if needed, builds, and runs the whole test suite with ctest. GPU tests (label gpu) report
# as skipped where no GPU is present. Extra arguments go to ctest (e.g. -L gpu, -R BatchFile).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export OMPI_MCA_btl_vader_single_copy_mechanism=none
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure --timeout 1200 -j"$jobs" "$@"
