#!/usr/bin/env python3
"""Executes a Jupyter notebook top to bottom with nbclient, as Kaggle's "Run
all" does, and prints each cell's output. Exit 0 when every cell ran, 1 on the
first cell that failed (its error is printed). The executed notebook is written
to OUT when given. Needs nbclient and ipykernel (scripts/dev/py_venv.sh nbclient ipykernel).

    python scripts/deploy/run_notebook.py NOTEBOOK.ipynb [OUT.ipynb] [--timeout S]
"""
import sys

import nbclient
import nbformat


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    timeout = 1800
    if "--timeout" in sys.argv:
        timeout = int(sys.argv[sys.argv.index("--timeout") + 1])
        args = [a for a in args if a != str(timeout)]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    nb = nbformat.read(args[0], as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3")
    rc = 0
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        print(f"run_notebook: {args[0]}: a cell failed:\n{e}", file=sys.stderr)
        rc = 1
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                sys.stdout.write(out.get("text", ""))
            elif out.get("output_type") == "error":
                sys.stdout.write(f"[cell {i}] {out.get('ename')}: {out.get('evalue')}\n")
    if len(args) > 1:
        nbformat.write(nb, args[1])
    return rc


if __name__ == "__main__":
    sys.exit(main())
