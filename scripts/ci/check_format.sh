#!/usr/bin/env bash
# Fails when a C/CUDA source differs from what .clang-format says.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
bad=0
while IFS= read -r f; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "not formatted: $f (run: clang-format -i $f)" >&2
        bad=1
    fi
done < <(git ls-files -co --exclude-standard -- '*.c' '*.h' '*.cu' '*.cuh')
exit $bad
