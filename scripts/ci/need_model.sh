#!/bin/sh
# The check a fixture script makes before it writes models from a cached one
# (scripts/ci/emu_models.sh, scripts/ci/split_models.sh):
#
#   sh scripts/ci/need_model.sh FIXTURE MODEL.gguf || exit $?
#
# exits 0 when MODEL.gguf is there; else says so (and how to fetch it) on
# stderr and in $SW_TEST_SKIP_LOG, and exits 77 (CTest's skip), or 1 when
# SW_TEST_STRICT is set and not 0 (as tests/sw_test.c reads it).
[ -f "$2" ] && exit 0
why="$1: $2 is absent (run: bash scripts/fetch_model.sh)"
echo "$why" >&2
[ -n "${SW_TEST_SKIP_LOG:-}" ] && echo "$why" >>"$SW_TEST_SKIP_LOG"
[ "${SW_TEST_STRICT:-0}" != 0 ] && exit 1
exit 77
