#!/usr/bin/env bash
# Style checks, CI's "style" step: every tracked C, C++ and CUDA source as .clang-format lays it out, and
# no function in datagen/, input/, train/ or shared/ over 100 lines. Needs no GPU; under a minute on 2
# cores.
#
# Function length is clang-tidy's readability-function-size (LineThreshold), over a compilation database
# that CMake writes when it configures build-style/ (CONVOY_STYLE_BUILD_DIR; nothing is built). A
# function's length is the line of its closing brace less the line of its opening brace, the way that
# check counts it. The .cu files are parsed as CUDA by clang, host side only, with the include paths and
# definitions of their library's C++ files; where no CUDA toolkit is found they are left out, said once.
# Each violation is one line, `file:line: function is N lines (name)`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
max_lines=100
build=${CONVOY_STYLE_BUILD_DIR:-build-style}
jobs=$(nproc 2>/dev/null || echo 2)
status=0

for tool in clang-format clang-tidy; do
  command -v "$tool" >/dev/null || { echo "check_style: no $tool (scripts/setup.sh installs it)" >&2; exit 2; }
done

# ---- layout: clang-format's own verdict, one line per place it would change ----
mapfile -t sources < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' '*.c')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
format_log="$work/format.log"
# One process at a time: parallel ones would interleave their messages (and the whole tree takes a second).
if ! printf '%s\0' "${sources[@]}" | xargs -0 clang-format --dry-run -Werror 2>"$format_log"; then
  grep -E '^[^ ].*: error: ' "$format_log" | sed "s|^$PWD/||"
  echo "check_style: $(grep -cE '^[^ ].*: error: ' "$format_log") places in" \
    "$(grep -E '^[^ ].*: error: ' "$format_log" | cut -d: -f1 | sort -u | wc -l) files are not as .clang-format" \
    "lays them out (clang-format -i FILE rewrites a file)"
  status=1
fi

# ---- function length ----
# The toolkit is the directory with bin/nvcc and include/cuda.h: an nvcc on PATH may be a wrapper script
# elsewhere (/usr/local/bin/nvcc), so the places a toolkit is usually named come first.
cuda_path=""
nvcc_dir=""
if command -v nvcc >/dev/null; then
  # nvcc names its own directory (_HERE_) even when called through a wrapper script.
  here=$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1)
  [ -n "$here" ] || here=$(dirname "$(readlink -f "$(command -v nvcc)")")
  nvcc_dir=$(dirname "$here")
fi
for candidate in "${CUDA_PATH:-}" "${CUDA_HOME:-}" /usr/local/cuda "$nvcc_dir"; do
  if [ -n "$candidate" ] && [ -x "$candidate/bin/nvcc" ] && [ -f "$candidate/include/cuda.h" ]; then
    cuda_path=$(readlink -f "$candidate")
    break
  fi
done
cmake_args=(-DCONVOY_TESTS=OFF -DCONVOY_PYTHON=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
[ -z "$cuda_path" ] || cmake_args+=("-DCMAKE_CUDA_COMPILER=$cuda_path/bin/nvcc")
cmake -S . -B "$build" "${cmake_args[@]}" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; exit 2; }

# clang 14's CUDA wrapper header still includes the texture headers that CUDA 12 removed; two empty
# stand-ins let it parse the .cu files against a newer toolkit (nothing here uses textures).
mkdir -p "$work/cuda-stub"
: >"$work/cuda-stub/__clang_cuda_texture_intrinsics.h"
: >"$work/cuda-stub/texture_fetch_functions.h"

# A database of the files to check: the C++ files as CMake compiles them, and each .cu file with the
# command of a C++ file of the same library, as CUDA (nvcc's own command lines are not clang's).
python3 - "$build/compile_commands.json" "$work" "$cuda_path" >"$work/files.txt" <<'PY' || exit 2
import json, os, re, shlex, sys
db, work, cuda = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
root = os.getcwd() + "/"
scope = re.compile(r"^(datagen|input|train|shared)/")
library = lambda e: re.search(r"CMakeFiles/[^/]+\.dir/", e.get("output", "") or e["command"]).group(0)
cpp = {library(e): e for e in db if e["file"].endswith(".cpp")}
out = []
for e in db:
    rel = os.path.relpath(e["file"], root)
    if not scope.match(rel):
        continue
    if e["file"].endswith(".cpp"):
        out.append(e)
    elif e["file"].endswith(".cu") and cuda and library(e) in cpp:
        args = shlex.split(cpp[library(e)]["command"])
        keep, skip = [], False
        for a in args[1:]:
            if skip:
                skip = False
            elif a in ("-o", "-c"):
                skip = True
            else:
                keep.append(a)
        command = ["clang++"] + keep + ["-isystem", work + "/cuda-stub", "--cuda-host-only", "--cuda-path=" + cuda,
                                         "-x", "cuda", "-c", e["file"]]
        out.append({"directory": e["directory"], "file": e["file"], "command": shlex.join(command)})
json.dump(out, open(work + "/compile_commands.json", "w"))
print("\n".join(e["file"] for e in out))
PY
if [ -z "$cuda_path" ]; then
  n=$(git ls-files 'datagen/*.cu' 'train/*.cu' 'shared/*.cu' | wc -l)
  echo "check_style: no CUDA toolkit found: the $n .cu files are not checked for function length"
fi

config="{Checks: '-*,readability-function-size', CheckOptions: [{key: readability-function-size.LineThreshold, \
value: $max_lines}]}"
tidy_log="$work/tidy.log"
# clang-tidy exits non-zero only when a file does not parse; the lengths come from its warnings.
if ! xargs -d '\n' -n 4 -P "$jobs" clang-tidy -p "$work" --quiet --config="$config" \
    --header-filter="^$PWD/(datagen|input|train|shared)/" <"$work/files.txt" >"$tidy_log" 2>"$work/tidy.err"; then
  grep -E 'error:' "$tidy_log" "$work/tidy.err" | head -n 20 >&2
  echo "check_style: clang-tidy could not parse every file (above)" >&2
  status=1
fi
long=$(awk -v root="$PWD/" '
  / warning: function .* exceeds recommended size/ {
    split($0, p, ":"); file = p[1]; line = p[2]
    name = $0; sub(/^.* function \047/, "", name); sub(/\047 exceeds.*$/, "", name)
  }
  / note: [0-9]+ lines including whitespace and comments/ && file != "" {
    n = $0; sub(/^.* note: /, "", n); sub(/ lines.*$/, "", n)
    sub("^" root, "", file)
    printf "%s:%s: function is %s lines (%s)\n", file, line, n, name
    file = ""
  }' "$tidy_log" | sort -u -t: -k1,1 -k2,2n)
if [ -n "$long" ]; then
  echo "$long"
  echo "check_style: functions in datagen/, input/, train/ and shared/ over $max_lines lines: $(wc -l <<<"$long")"
  status=1
fi
[ "$status" -ne 0 ] || echo "check_style: ok"
exit $status
