#!/usr/bin/env bash
# Sets up if needed, builds, and runs the whole test suite with ctest. GPU tests (label gpu) report
# as skipped where no GPU is present. Extra arguments go to ctest (e.g. -L gpu, -R BatchFile).
#
# scripts/test.sh --sanitize [ctest arguments]: every CPU test again, built with AddressSanitizer
# and UndefinedBehaviorSanitizer in build-asan/ (CUDA off); about 3 minutes on 2 cores, so none is
# left out (CONVOY_SANITIZE_EXCLUDE, a ctest regex, leaves some out). Any sanitizer report fails
# the run, also one from a tool that a test expected to fail anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_MCA_btl_vader_single_copy_mechanism=none
jobs=$(nproc 2>/dev/null || echo 2)

if [ "${1:-}" != "--sanitize" ]; then
  scripts/setup.sh
  exec ctest --test-dir build --output-on-failure --timeout 1200 -j"$jobs" "$@"
fi
shift
CONVOY_BUILD_DIR=build-asan CONVOY_CMAKE_ARGS="-DCONVOY_SANITIZE=ON -DCONVOY_CUDA=OFF" scripts/setup.sh
exclude=()
[ -z "${CONVOY_SANITIZE_EXCLUDE:-}" ] || exclude=(-E "$CONVOY_SANITIZE_EXCLUDE")
reports=$(pwd)/build-asan/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
# Reports also go to files (ASan's whole report; for both, the summary line, by the hook in
# cmake/sanitizer_report_hook.cpp), so that a tool's exit status, which a test may expect to be
# non-zero, or a test's discarding of stderr cannot hide them. No leak checks: Open MPI's plugins
# keep allocations past MPI_Finalize and are unloaded by then, so their leaks cannot even be told
# apart by library (the fuzz targets, without MPI, do check for leaks).
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=0:exitcode=86:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:print_summary=1:halt_on_error=1:exitcode=87"
export CONVOY_SANITIZER_LOG=$reports/summaries
status=0
ctest --test-dir build-asan --output-on-failure --timeout 1200 -j"$jobs" -L cpu "${exclude[@]}" "$@" || status=$?
if compgen -G "$reports/*" > /dev/null; then
  echo "sanitizer reports:"
  for f in "$reports"/*; do
    echo "== $f"
    head -n 60 "$f"
  done
  status=1
fi
exit $status
