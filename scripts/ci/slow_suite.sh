#!/usr/bin/env bash
# The slow suite (label slow) for .ci/run, in two halves within a deadline:
# CI stops at 90 minutes, and on a slow machine the whole .ci/run once went
# past them (2026-12-06: the slow suite 1,207 s with its fetch and build, 1,172 s
# of tests, in a run that timed out), so that nothing else it proved counted.
# The slow tests are dealt into two halves (the longest first, then by name);
# SEED (.ci/run: the commit) picks which half runs first. The second half runs when what it should take (1.5 times
# the first half's time) ends before the deadline; else its tests are named as
# not run, and the run does not fail for them. A test that runs and fails
# fails the run (SW_TEST_STRICT as set by the caller).
#
#   bash scripts/ci/slow_suite.sh DEADLINE SEED
#
# DEADLINE: the time (seconds since the epoch) by which the suite must have
# ended. Each half runs through scripts/test.sh inside scripts/ci/tmp_check.sh.
# SW_SLOW_SUITE_DRY=1 prints the two halves and runs nothing.
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
# The longest ones (CI's run of 2026-12-06: 291, 270, 254, 228, 116, 112 and
# 111 s) are dealt out first, one to each half in turn, then the others by name,
# so that the halves take about as long.
heavy=(test_compose test_greedy_lowbit test_netns test_multi_slow test_kaggle
    test_relay_restart_wan test_netns_relays)
order=()
for t in "${heavy[@]}"; do
    [[ " ${names[*]} " == *" $t "* ]] && order+=("$t")
done
for t in "${names[@]}"; do
    [[ " ${heavy[*]} " == *" $t "* ]] || order+=("$t")
done
# the seed's last hex digit picks the half that runs first
first=0
[[ ${seed: -1} =~ [0-9a-fA-F] ]] && first=$((16#${seed: -1} % 2))
halves=("" "")
for i in "${!order[@]}"; do
    h=$(((i + first) % 2))
    halves[h]="${halves[h]}${halves[h]:+|}${order[i]}"
done

if [ "${SW_SLOW_SUITE_DRY:-0}" = 1 ]; then
    echo "first half: ${halves[0]//|/ }"
    echo "second half: ${halves[1]//|/ }"
    exit 0
fi

run_half() {
    SW_TEST_LABELS=slow SW_CTEST_ARGS="-R ^($1)\$" \
        bash "$here/scripts/ci/tmp_check.sh" "slow suite" bash "$here/scripts/test.sh"
}

# The longer half took about 700 s of wall time on CI's machine (2026-12-06: its
# tests' times at -j 2 summed to 1,330 s): less than 900 s left, none starts.
now=$(date +%s)
if [ $((deadline - now)) -lt 900 ]; then
    echo "slow_suite: NOT RUN: $((deadline - now)) s left before CI's deadline, under 900 s; not run: ${names[*]}"
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
