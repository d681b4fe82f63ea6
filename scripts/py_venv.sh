#!/usr/bin/env bash
# Makes (once) a Python virtual environment with the packages the gateway's
# tests and examples use (the official `openai` client from PyPI) and prints
# the path of its python. Idempotent and quiet when everything is there.
#
#   py=$(bash scripts/py_venv.sh)        # $SW_VENV, default build/venv
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${SW_VENV:-$here/build/venv}
want='openai>=1.40,<2'
if [ ! -x "$venv/bin/python" ]; then
    echo "py_venv: creating $venv" >&2
    python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
    echo "py_venv: installing $want from PyPI into $venv" >&2
    "$venv/bin/pip" install --disable-pip-version-check -q "$want" >&2
fi
echo "$venv/bin/python"
