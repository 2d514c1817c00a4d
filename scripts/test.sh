#!/usr/bin/env bash
# Sets up if needed, builds, and runs the whole test suite with ctest. GPU tests (label gpu) report
# as skipped where no GPU is present. Extra arguments go to ctest (e.g. -L gpu, -R BatchFile).
#
# scripts/test.sh --sanitize [ctest arguments]: every CPU test again, built with AddressSanitizer
# and UndefinedBehaviorSanitizer in build-asan/ (CUDA off); about 3 minutes on 2 cores, so none is
# left out (CONVOY_SANITIZE_EXCLUDE, a ctest regex, leaves some out). Any sanitizer report fails
# the run, also one from a tool that a test expected to fail anyway.
#
# scripts/test.sh --tsan [ctest arguments]: every CPU test again, built with clang and
# ThreadSanitizer in build-tsan/ (CUDA off), OpenMP through LLVM's libomp and its archer tool;
# 3 to 4 minutes on 2 cores with the build, so none is left out (CONVOY_SANITIZE_EXCLUDE applies
# here too). Any TSan report fails the run, the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_MCA_btl_vader_single_copy_mechanism=none
jobs=$(nproc 2>/dev/null || echo 2)

mode=${1:-}
case "$mode" in
  --sanitize | --tsan) shift ;;
  *)
    scripts/setup.sh
    exec ctest --test-dir build --output-on-failure --timeout 1200 -j"$jobs" "$@"
    ;;
esac
exclude=()
[ -z "${CONVOY_SANITIZE_EXCLUDE:-}" ] || exclude=(-E "$CONVOY_SANITIZE_EXCLUDE")

if [ "$mode" = --sanitize ]; then
  build=build-asan
  CONVOY_BUILD_DIR=$build CONVOY_CMAKE_ARGS="-DCONVOY_SANITIZE=ON -DCONVOY_CUDA=OFF" scripts/setup.sh
else
  build=build-tsan
  # Compiler names, not paths: setup.sh installs clang first where it is missing.
  CONVOY_BUILD_DIR=$build CONVOY_CMAKE_ARGS="-DCONVOY_TSAN=ON -DCONVOY_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++" \
    scripts/setup.sh
fi
reports=$(pwd)/$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
# Reports also go to files (ASan's and TSan's whole report; for all three, the summary line, by the
# hook in cmake/sanitizer_report_hook.cpp), so that a tool's exit status, which a test may expect to
# be non-zero, or a test's discarding of stderr cannot hide them.
export CONVOY_SANITIZER_LOG=$reports/summaries
if [ "$mode" = --sanitize ]; then
  # No leak checks: Open MPI's plugins keep allocations past MPI_Finalize and are unloaded by then,
  # so their leaks cannot even be told apart by library (the fuzz targets, without MPI, do check for
  # leaks).
  export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=0:exitcode=86:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:print_summary=1:halt_on_error=1:exitcode=87"
else
  # libomp is not instrumented; archer, LLVM's OMPT tool beside it, tells TSan of its barriers,
  # tasks and locks. ignore_noninstrumented_modules=1, which archer asks for (it warns on every
  # process's stderr without it), makes TSan overlook the memory accesses its interceptors see
  # (memcpy, free, ...) when called from inside a library not built with TSan: libomp's own
  # bookkeeping, Open MPI's and OpenBLAS's threads, the codecs, libstdc++. The locks and waits they
  # take still order convoy's accesses, and all of convoy's own code is instrumented. A process goes
  # on after a report, so that one run lists every race it meets.
  archer=$(dirname "$(readlink -f "$(command -v clang++)")")/../lib/libarcher.so
  [ -f "$archer" ] || { echo "test.sh: no $archer (Debian: libomp-dev)" >&2; exit 1; }
  export OMP_TOOL_LIBRARIES=$archer
  export TSAN_OPTIONS="log_path=$reports/tsan:exitcode=88:halt_on_error=0:second_deadlock_stack=1:ignore_noninstrumented_modules=1"
  # libomp goes on without a tool it cannot load, and archer turns itself off where it finds no
  # TSan, both silently; TSan would then not see the order that OpenMP's barriers give, and report
  # races that are none.
  started=$(ARCHER_OPTIONS=verbose=1 "$build/train" --config configs/fmnist.toml --print-net 2>&1) || true
  if ! grep -q "Archer detected OpenMP application with TSan" <<< "$started"; then
    echo "test.sh: libomp did not start archer ($archer) in a TSan build:" >&2
    echo "$started" >&2
    exit 1
  fi
fi
status=0
ctest --test-dir "$build" --output-on-failure --timeout 1200 -j"$jobs" -L cpu "${exclude[@]}" "$@" || status=$?
if compgen -G "$reports/*" > /dev/null; then
  echo "sanitizer reports:"
  for f in "$reports"/*; do
    echo "== $f"
    head -n 60 "$f"
  done
  status=1
fi
exit $status
