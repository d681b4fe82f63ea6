#!/usr/bin/env bash
# cppcheck over the project's C sources; fails on any warning.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c')
cppcheck --quiet --error-exitcode=1 --std=c11 --inline-suppr \
    --enable=warning,portability --suppress=missingIncludeSystem \
    -I base -I engine -I engine/include -I hub -I net -I tests "${files[@]}"
