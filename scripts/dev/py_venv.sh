#!/usr/bin/env bash
# Makes (once) a Python virtual environment with the packages the gateway's
# tests and examples use (the official `openai` client from PyPI) and prints
# the path of its python. Idempotent and quiet when everything is there.
#
#   py=$(bash scripts/dev/py_venv.sh)        # $SW_VENV, default build/venv
#   py=$(bash scripts/dev/py_venv.sh nbclient ipykernel)   # and these packages too
#                                        # (the Kaggle notebooks' test, scripts/deploy/run_notebook.py)
#   py=$(bash scripts/dev/py_venv.sh websocket-client:websocket)   # PACKAGE:MODULE when the
#                                        # module's name is not the package's (the web page's test)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
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
for arg in "$@"; do
    pkg=${arg%%:*}
    mod=${pkg%%[<>=]*}
    [ "$arg" != "$pkg" ] && mod=${arg#*:}
    if ! "$venv/bin/python" -c "import ${mod//-/_}" 2>/dev/null; then
        echo "py_venv: installing $pkg from PyPI into $venv" >&2
        "$venv/bin/pip" install --disable-pip-version-check -q "$pkg" >&2
    fi
done
echo "$venv/bin/python"
