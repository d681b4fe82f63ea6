#!/usr/bin/env bash
# The slow suite (label slow) for .ci/run, in two halves within a deadline:
# CI stops at 90 minutes, and on a slow machine the whole .ci/run once went
# past them (2026-12-06: the slow suite 1,207 s with its fetch and build, 1,172 s
# of tests, in a run that timed out), so that nothing else it proved counted.
# The slow tests (sorted by name) are split into the even and the odd ones; SEED (.ci/run: the commit) picks which
# half runs first. The second half runs when what it should take (1.5 times
# the first half's time) ends before the deadline; else its tests are named as
# not run, and the run does not fail for them. A test that runs and fails
# fails the run (SW_TEST_STRICT as set by the caller).
#
#   bash scripts/ci/slow_suite.sh DEADLINE SEED
#
# DEADLINE: the time (seconds since the epoch) by which the suite must have
# ended. Each half runs through scripts/test.sh inside scripts/ci/tmp_check.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -ne 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
    echo "usage: bash scripts/ci/slow_suite.sh DEADLINE SEED (DEADLINE: seconds since the epoch)" >&2
    exit 2
fi
deadline=$1
seed=$2
build=${SW_BUILD_DIR:-$here/build}
if [ ! -f "$build/CTestTestfile.cmake" ]; then
    echo "slow_suite: $build is not a configured build (run scripts/test.sh first)" >&2
    exit 1
fi
mapfile -t names < <(cd "$build" && ctest -N -L slow | sed -n 's/^ *Test *#[0-9]*: \(test_[A-Za-z0-9_]*\)$/\1/p' | sort)
if [ "${#names[@]}" -eq 0 ]; then
    echo "slow_suite: ctest lists no test with the label slow in $build" >&2
    exit 1
fi
# the seed's last hex digit picks the half that runs first
first=0
[[ ${seed: -1} =~ [0-9a-fA-F] ]] && first=$((16#${seed: -1} % 2))
halves=("" "")
for i in "${!names[@]}"; do
    h=$(((i + first) % 2))
    halves[h]="${halves[h]}${halves[h]:+|}${names[i]}"
done

run_half() {
    SW_TEST_LABELS=slow SW_CTEST_ARGS="-R ^($1)\$" \
        bash "$here/scripts/ci/tmp_check.sh" "slow suite" bash "$here/scripts/test.sh"
}

now=$(date +%s)
if [ $((deadline - now)) -lt 600 ]; then
    echo "slow_suite: NOT RUN: $((deadline - now)) s left before CI's deadline, under 600 s; not run: ${names[*]}"
    exit 0
fi
t0=$now
echo "slow_suite: first half ($((deadline - now)) s left): ${halves[0]//|/ }"
run_half "${halves[0]}"
now=$(date +%s)
took=$((now - t0))
need=$((took * 3 / 2))
if [ $((now + need)) -gt "$deadline" ]; then
    echo "slow_suite: the first half took $took s; the second would end past CI's deadline ($((deadline - now)) s left, $need s wanted); not run: ${halves[1]//|/ }"
    exit 0
fi
echo "slow_suite: second half ($((deadline - now)) s left, the first took $took s): ${halves[1]//|/ }"
run_half "${halves[1]}"
echo "slow_suite: all ${#names[@]} slow tests ran in $(($(date +%s) - t0)) s"
