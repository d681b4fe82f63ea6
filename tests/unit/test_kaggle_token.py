#!/usr/bin/env python3
"""test_kaggle_token.py - the Kaggle notebooks' model cell (deploy/kaggle/notebooks.py) reads
an optional Kaggle secret HF_TOKEN for gated or private repositories and hands it to
`shardwire pull` in its environment, never printing it:

  - the secret present, HF_TOKEN unset: pull sees the secret's value;
  - no such secret (Kaggle's client raises): pull runs without a token, no error;
  - HF_TOKEN already in the environment: it wins over the secret;
  - a local model path: nothing is pulled and no secret is read;
  - the cell's output never contains the token.

The cell runs as the notebook runs it, with a stand-in kaggle_secrets module and a stand-in
`shardwire` program that records the HF_TOKEN it was given.
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import types

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "deploy", "kaggle"))
import notebooks  # noqa: E402

failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += 0 if ok else 1


def model_cell():
    for cell in notebooks.node_nb(False):
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and "def fetch(" in src:
            return src
    raise SystemExit("test_kaggle_token: no cell defines fetch() in node.ipynb")


def run(secret, env_token, model, tmp):
    """Runs the cell; (token pull saw or None if pull did not run, secret reads, output)."""
    seen = os.path.join(tmp, "seen")
    if os.path.exists(seen):
        os.remove(seen)
    reads = []

    class Client:
        def get_secret(self, label):
            reads.append(label)
            if secret is None:
                raise RuntimeError(f"No user secrets exist for label {label!r}")
            return secret + "\n"
    sys.modules["kaggle_secrets"] = types.SimpleNamespace(UserSecretsClient=Client)
    os.environ.pop("HF_TOKEN", None)
    if env_token:
        os.environ["HF_TOKEN"] = env_token
    out = io.StringIO()
    ns = {"os": os, "subprocess": subprocess, "BIN": tmp, "MODEL": model, "LAYERS": "0:14"}
    with contextlib.redirect_stdout(out):
        exec(model_cell(), ns)
    token = open(seen).read().strip() if os.path.exists(seen) else None
    return token, reads, out.getvalue()


def main():
    with tempfile.TemporaryDirectory(prefix="sw-kaggle-token-") as tmp:
        shim = os.path.join(tmp, "shardwire")
        with open(shim, "w") as f:
            f.write(f'#!/bin/sh\nprintf "%s" "${{HF_TOKEN:-none}}" > {tmp}/seen\n'
                    f'echo {tmp}/model.gguf\n')
        os.chmod(shim, 0o755)
        hub = "org/gated-GGUF:Q4_K_M"

        token, reads, out = run("hf_secret123", None, hub, tmp)
        check(token == "hf_secret123", f"the secret reaches pull (pull saw {token!r})")
        check(reads == ["HF_TOKEN"], f"one secret read, HF_TOKEN ({reads})")
        check("hf_secret123" not in out, "the cell's output does not show the token")

        token, reads, out = run(None, None, hub, tmp)
        check(token == "none", f"no secret: pull runs without a token (saw {token!r})")

        token, reads, out = run("hf_secret123", "hf_env456", hub, tmp)
        check(token == "hf_env456", f"HF_TOKEN in the environment wins (pull saw {token!r})")
        check(reads == [], "and the secret is not read")

        local = os.path.join(tmp, "local.gguf")
        open(local, "w").close()
        token, reads, out = run("hf_secret123", None, local, tmp)
        check(token is None and reads == [], "a local path: nothing pulled, no secret read")
    os.environ.pop("HF_TOKEN", None)
    print(f"{failures} failed" if failures else "the notebooks hand an HF_TOKEN secret to pull")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
