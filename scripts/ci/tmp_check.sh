#!/usr/bin/env bash
# Runs a command and fails when it left anything in /tmp, or in $TMPDIR when
# that is set (where the tests put their folders: tests/sw_test.c), (docs/testing.md:
# a passing suite leaves nothing there). What the tests may leave there is named
# sw* or shardwire* (sw_test_log's swtest.XXXXXX folders and anything a test
# names itself); anything new of that kind after the command is reported.
#
#   bash scripts/ci/tmp_check.sh WHAT COMMAND [ARGS...]
#
# Exits with the command's status when it failed, 1 when it passed but left
# files (one line naming WHAT, then the files), else 0. .ci/run wraps each
# suite in it; scripts/ci/mutations.py claims shows it failing.
set -uo pipefail
if [ $# -lt 2 ]; then
    echo "usage: bash scripts/ci/tmp_check.sh WHAT COMMAND [ARGS...]" >&2
    exit 2
fi
what=$1
shift
dirs=(/tmp)
if [ -n "${TMPDIR:-}" ] && [ -d "$TMPDIR" ] && [ "$(cd "$TMPDIR" && pwd -P)" != "$(cd /tmp && pwd -P)" ]; then
    dirs+=("$TMPDIR")
fi
ours() { find "${dirs[@]}" -mindepth 1 -maxdepth 1 \( -name 'sw*' -o -name 'shardwire*' \) | sort; }
before=$(ours)
"$@"
rc=$?
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
left=$(comm -13 <(echo "$before") <(ours))
if [ -n "$left" ]; then
    echo "tmp_check: the $what left files in ${dirs[*]} (docs/testing.md says a passing suite leaves nothing):" >&2
    echo "$left" >&2
    exit 1
fi
