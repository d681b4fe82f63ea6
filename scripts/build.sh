#!/usr/bin/env bash
# Configures and builds shardwire into $SW_BUILD_DIR (build/ by default).
# Extra arguments go to cmake's configure step. SW_BUILD_TARGETS (names
# separated by spaces) builds only those targets (scripts/demo.sh builds the
# four programs it runs; the default is everything, the tests included).
#
# Progress goes to stderr: on a terminal one line that counts up ("build:
# 42% gguf.c"), otherwise a line per stage (configure, 25 %, 50 %, 75 %,
# done). Warnings and errors are printed as they come. SW_BUILD_VERBOSE=1
# shows cmake's own output instead.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${SW_BUILD_DIR:-$here/build}
t0=$(date +%s)
echo "build: configuring $build" >&2
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=${SW_BUILD_TYPE:-Release} "$@" >/dev/null
targets=()
for t in ${SW_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
if [ "${SW_BUILD_VERBOSE:-0}" = 1 ]; then
    cmake --build "$build" -j "$(nproc)" "${targets[@]}"
    exit 0
fi
tty=0
[ -t 2 ] && tty=1
set +e
cmake --build "$build" -j "$(nproc)" "${targets[@]}" 2>&1 | awk -v tty="$tty" '
    # "[ 42%] Building C object engine/CMakeFiles/swengine.dir/gguf.c.o"
    /^\[ *[0-9]+%\] / {
        pct = $0; sub(/^\[ */, "", pct); sub(/%.*/, "", pct); pct += 0
        what = $NF; sub(/.*\//, "", what); sub(/\.o$/, "", what)
        if ($0 ~ /Building/) compiled++
        if (tty) {
            printf "\rbuild: %3d%% %-40.40s", pct, what > "/dev/stderr"
            shown = 1
        } else if (pct >= next_pct && compiled) {
            printf "build: %d%%\n", pct > "/dev/stderr"
            next_pct = (int(pct / 25) + 1) * 25
        }
        fflush()
        next
    }
    {
        if (shown) { printf "\r%60s\r", "" > "/dev/stderr"; shown = 0 }
        print > "/dev/stderr"
        fflush()
    }
    END {
        if (shown) printf "\r%60s\r", "" > "/dev/stderr"
        if (!compiled) printf "build: up to date\n" > "/dev/stderr"
        else printf "build: compiled %d files\n", compiled > "/dev/stderr"
    }'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    echo "build: failed (cmake --build exit $rc; SW_BUILD_VERBOSE=1 shows its whole output)" >&2
    exit "$rc"
fi
echo "build: done in $(($(date +%s) - t0)) s, programs in $build/bin" >&2
