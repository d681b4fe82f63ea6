#!/usr/bin/env python3
"""Writes the Kaggle notebooks of deploy/kaggle/ (head.ipynb, node.ipynb,
client.ipynb) from the cells below, so the three share one source:

    python3 deploy/kaggle/notebooks.py           # rewrite the notebooks
    python3 deploy/kaggle/notebooks.py --check   # exit 1 when they differ (the test runs it)

Each notebook: installs the Debian packages, builds shardwire with the
notebook's own nvcc for its GPU (T4 = sm_75) with NCCL from PyPI's CUDA 12
wheel, puts the node on both T4s (RULE_HEAD, RULE_NODE), fetches the model from the
Hugging Face hub, reads its keys from Kaggle Secrets (the values of the
kaggle-secrets.txt that `shardwire cluster init` wrote for it), starts its
process and keeps printing a status line so that Kaggle does not stop the
session as idle. docs/deploy.md ("Kaggle") has the walk-through.

Test hooks (tests/slow/test_kaggle.c; environment variables, all optional):
SW_NB_SRC (a local checkout instead of git clone), SW_NB_BUILD_DIR,
SW_NB_CPU=1 (CPU_ONLY), SW_NB_CUDA=EMU (build on the CPU emulation of the CUDA
runtime: its GPUs are SW_CUDA_EMU_DEVICES), SW_NB_MODEL / SW_NB_DRAFT_MODEL (model
paths), SW_NB_LAYERS, SW_NB_EXTRA (more node arguments), SW_NB_RUN_S (end the
status loop after that many seconds), SW_NB_STOP_FILE (end it when the file
appears), SW_NB_STATUS_S, SW_NB_OUT_DIR, SW_NB_PROMPT, SW_NB_N, SW_NB_CHAT, SW_NB_GREEDY.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

PARAMS_NODE = '''# Parameters: edit for your cluster (docs/deploy.md, "Kaggle").
import os
NODE_NAME = "{name}"   # its name in `shardwire cluster init --nodes ...`
LAYERS = "{layers}"    # this node's layers (Qwen2.5-Coder-1.5B has 28)
MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M"  # hub ORG/NAME[:FILE|:TAG], or a path
{draft}REPO = "https://github.com/YOUR-ORG/shardwire.git"   # your shardwire repository
CUDA_ARCH = "75"     # the notebook's GPU: T4 = 75
BACKEND = "auto"     # auto: both T4s ({rule}); or cuda:0, cuda:0,1, cpu
{draft_backend}CPU_ONLY = False     # True: build without CUDA and run on the CPU (when the CUDA build fails)
STATUS_EVERY_S = 60  # a status line this often keeps the session from idling out

# Test hooks (tests/slow/test_kaggle*.c): a local checkout, a CPU or emulated-GPU build, local files.
SRC = os.environ.get("SW_NB_SRC", "")
CPU_ONLY = CPU_ONLY or os.environ.get("SW_NB_CPU") == "1"
EMU = os.environ.get("SW_NB_CUDA") == "EMU"  # the CPU emulation of the CUDA runtime (tests/cudaemu/)
MODEL = os.environ.get("SW_NB_MODEL", MODEL)
{draft_env}LAYERS = os.environ.get("SW_NB_LAYERS", LAYERS)
EXTRA = os.environ.get("SW_NB_EXTRA", "").split()
OUT_DIR = os.environ.get("SW_NB_OUT_DIR") or ("/kaggle/working" if os.path.isdir("/kaggle/working") else os.getcwd())
'''

PARAMS_CLIENT = '''# Parameters: edit for your cluster (docs/deploy.md, "Kaggle").
import os
CLIENT_NAME = "client"   # its name in `shardwire cluster init --clients ...` (default: client)
EXPECT = "head,tail"     # the nodes to wait for: every name of --nodes
PROMPT = "Write a Python function that checks whether a number is prime."
N_PREDICT = 256
CHAT = True              # apply the model's chat template
GREEDY = False           # True: greedy decoding (else run's sampling defaults, docs/api.md)
REPO = "https://github.com/YOUR-ORG/shardwire.git"   # your shardwire repository

# Test hooks (tests/slow/test_kaggle.c).
SRC = os.environ.get("SW_NB_SRC", "")
EMU = os.environ.get("SW_NB_CUDA") == "EMU"  # the test's emulated-GPU build, shared with the nodes
CPU_ONLY = not EMU       # the client runs no model: no CUDA needed
PROMPT = os.environ.get("SW_NB_PROMPT", PROMPT)
N_PREDICT = int(os.environ.get("SW_NB_N", N_PREDICT))
CHAT = os.environ.get("SW_NB_CHAT", "1" if CHAT else "0") == "1"
GREEDY = os.environ.get("SW_NB_GREEDY", "1" if GREEDY else "0") == "1"
OUT_DIR = os.environ.get("SW_NB_OUT_DIR") or ("/kaggle/working" if os.path.isdir("/kaggle/working") else os.getcwd())
'''

INSTALL = '''# 1. The Debian/Ubuntu packages shardwire builds with (only the missing ones).
import subprocess
PKGS = ["build-essential", "cmake", "pkg-config", "git", "ca-certificates", "libzmq3-dev",
        "libprotobuf-c-dev", "protobuf-c-compiler", "libsodium-dev", "libjansson-dev",
        "libcurl4-openssl-dev", "libmicrohttpd-dev"]
def installed(p):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
    return "install ok installed" in r.stdout
missing = [p for p in PKGS if not installed(p)]
if missing:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env)
print("packages:", ("installed " + " ".join(missing)) if missing else "all present")
'''

BUILD = '''# 2. Build with this notebook's own nvcc, for its GPU (CPU_ONLY: without CUDA). NCCL
# (GPU to GPU inside the node) comes from PyPI's CUDA 12 wheel, as CI builds it.
import fcntl, glob, sys
src = SRC or "/kaggle/working/shardwire"
if not SRC and not os.path.isdir(src):
    subprocess.run(["git", "clone", "--depth", "1", REPO, src], check=True)
build = os.environ.get("SW_NB_BUILD_DIR") or os.path.join(src, "build-kaggle")
os.makedirs(build, exist_ok=True)
NCCL_LIB = ""
flags = ["-DSW_CUDA=OFF"] if CPU_ONLY else ["-DSW_CUDA=EMU"] if EMU else ["-DSW_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=" + CUDA_ARCH]
if not CPU_ONLY and not EMU:
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "nvidia-nccl-cu12"], capture_output=True, text=True)
    import site  # where pip put it: the site folders (also the user's) and sys.path
    roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
    inc = [d for p in roots for d in glob.glob(os.path.join(p, "nvidia", "nccl", "include"))]
    if r.returncode == 0 and inc:
        flags.append("-DSW_NCCL_INCLUDE=" + inc[0])
        NCCL_LIB = os.path.join(os.path.dirname(inc[0]), "lib")
        print("NCCL:", inc[0])
    else:
        print("NCCL: not installed (" + (r.stderr.strip()[-200:] or "no nccl.h") + "): the GPUs exchange by peer copies")
env = dict(os.environ, PATH=os.environ["PATH"] + ":/usr/local/cuda/bin")
with open(os.path.join(build, ".lock"), "w") as lock:  # notebooks sharing a folder take turns
    fcntl.flock(lock, fcntl.LOCK_EX)
    for cmd in (["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", *flags],
                ["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", {targets}]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:])
            raise RuntimeError("build failed: " + " ".join(cmd) + (
                "" if CPU_ONLY else " (set CPU_ONLY = True to run on the CPU: docs/deploy.md, Kaggle)"))
BIN = os.path.join(build, "bin")
print("built", ", ".join({targets_py}), "in", BIN,
      "(CUDA off)" if CPU_ONLY else "(emulated CUDA)" if EMU else "(CUDA sm_" + CUDA_ARCH + ")")
'''

MODEL = '''# 3. The model{s}: from the Hugging Face hub into its cache (a path is used as it is).
# With layers, only this node's part is downloaded: the header and the tensors of
# its layers (a partial file; docs/deploy.md, "Models from Hugging Face").
# A gated or private repository: add a Kaggle secret HF_TOKEN (optional, never printed).
def hf_token():
    if os.environ.get("HF_TOKEN"):
        return
    try:
        from kaggle_secrets import UserSecretsClient
        os.environ["HF_TOKEN"] = UserSecretsClient().get_secret("HF_TOKEN").strip()
        print("HF_TOKEN: from the Kaggle secret")
    except Exception:
        pass  # no such secret (or not on Kaggle): public models need none
def fetch(spec, layers=None):
    if not spec or os.path.exists(spec):
        return spec
    hf_token()
    cmd = [BIN + "/shardwire", "pull", spec] + (["--layers", layers] if layers else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd[1:]) + " failed (see above)")
    return r.stdout.strip()
model = fetch(MODEL, LAYERS)
{draft}print("model:", model{draft_print})
'''

KEYS_NODE = '''# 4. Keys from Kaggle Secrets (Add-ons > Secrets): the labels and values of
# {name_hint}/kaggle-secrets.txt, written by `shardwire cluster init`. Never printed.
import re, tempfile
from kaggle_secrets import UserSecretsClient
secrets = UserSecretsClient()
def secret(label):
    try:
        return secrets.get_secret(label).strip()
    except Exception as e:
        raise RuntimeError(f"Kaggle secret {{label}} is missing: add it from {{NODE_NAME}}/kaggle-secrets.txt "
                         f"(shardwire cluster init) and attach it to this notebook ({{e}})")
keys = tempfile.mkdtemp(prefix="shardwire-keys-")  # mode 0700
def put(name, value):
    path = os.path.join(keys, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (value + "\\n").encode())
    os.close(fd)
    return path
RELAY = secret("SHARDWIRE_RELAY")
own = "SHARDWIRE_KEY_" + re.sub(r"[^A-Z0-9]", "_", NODE_NAME.upper())
key_flags = ["--key", put("node.key", secret(own)), "--relay-key", secret("SHARDWIRE_RELAY_PUB"),
             "--cluster-key", put("cluster.key", secret("SHARDWIRE_CLUSTER_KEY"))]
{access}print("keys: from Kaggle secrets into", keys, "| relay", RELAY)
'''

KEYS_CLIENT = '''# 3. Keys from Kaggle Secrets (Add-ons > Secrets): the labels and values of
# client/kaggle-secrets.txt, written by `shardwire cluster init`. Never printed.
import re, tempfile
from kaggle_secrets import UserSecretsClient
secrets = UserSecretsClient()
def secret(label):
    try:
        return secrets.get_secret(label).strip()
    except Exception as e:
        raise RuntimeError(f"Kaggle secret {label} is missing: add it from {CLIENT_NAME}/kaggle-secrets.txt "
                         f"(shardwire cluster init) and attach it to this notebook ({e})")
keys = tempfile.mkdtemp(prefix="shardwire-keys-")  # mode 0700
def put(name, value):
    path = os.path.join(keys, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (value + "\\n").encode())
    os.close(fd)
    return path
RELAY = secret("SHARDWIRE_RELAY")
own = "SHARDWIRE_KEY_" + re.sub(r"[^A-Z0-9]", "_", CLIENT_NAME.upper())
key_flags = ["--relay", RELAY, "--key", put("client.key", secret(own)),
             "--relay-key", secret("SHARDWIRE_RELAY_PUB"),
             "--access-key", put("access.key", secret("SHARDWIRE_ACCESS_KEY"))]
print("keys: from Kaggle secrets into", keys, "| relay", RELAY)
'''

START = '''# 5. Start the node on its GPUs. It dials out to the relay and retries until it answers:
# the relay, the nodes and the client may start in any order.
def gpu_count():
    if CPU_ONLY:
        return 0
    if EMU:
        return int(os.environ.get("SW_CUDA_EMU_DEVICES", "1"))
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for l in r.stdout.splitlines() if l.startswith("GPU ")) if r.returncode == 0 else 0
gpus = gpu_count()
if CPU_ONLY:
    BACKEND = {cpu_only}"cpu"
{draft_rule}if BACKEND == "auto":  # {rule}
    BACKEND = "cpu" if gpus == 0 else {auto_backend}
log_path = os.path.join(OUT_DIR, "shardwire-" + NODE_NAME + ".log")
cmd = [BIN + "/shardwire-node", "--model", model, "--layers", LAYERS, "--relay", RELAY,
       "--name", NODE_NAME, "--backend", BACKEND, *key_flags, {draft_flags}*EXTRA]
node_env = dict(os.environ, LD_LIBRARY_PATH=":".join(p for p in (NCCL_LIB, os.environ.get("LD_LIBRARY_PATH", "")) if p))
log = open(log_path, "a")
proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=node_env)
print("started", NODE_NAME, "(pid", proc.pid, ") layers", LAYERS, "on", BACKEND, f"({{gpus}} GPU(s))"{draft_print_start},
      "| log", log_path)
'''

LOOP = '''# 6. Keep the session alive: one status line every STATUS_EVERY_S seconds until the node
# exits (or, in the test, SW_NB_RUN_S seconds pass or SW_NB_STOP_FILE appears).
import datetime, time
run_s = float(os.environ.get("SW_NB_RUN_S", 12 * 3600))  # Kaggle ends a session after 12 h
every = float(os.environ.get("SW_NB_STATUS_S", STATUS_EVERY_S))
stop_file = os.environ.get("SW_NB_STOP_FILE", "")
def last_line():
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:160] if lines else "(no output yet)"
    except OSError:
        return "(no log)"
t0 = next_line = time.time()
while proc.poll() is None and time.time() - t0 < run_s and not (stop_file and os.path.exists(stop_file)):
    if time.time() >= next_line:
        up = int(time.time() - t0)
        print(f"[{datetime.datetime.now():%H:%M:%S}] {NODE_NAME}: running {up // 60} min {up % 60} s | {last_line()}", flush=True)
        next_line += every
    time.sleep(0.5)
rc = proc.poll()
if rc is None:
    proc.terminate()
    proc.wait(30)
    print(NODE_NAME, "stopped after", int(time.time() - t0), "s")
elif rc != 0:
    raise RuntimeError(f"{NODE_NAME} exited with {rc}: {last_line()} (whole log: {log_path})")
'''

CLIENT_RUN = '''# 4. Wait for the cluster (any start order works), then generate through it.
import json
st = subprocess.run([BIN + "/shardwire", "status", *key_flags, "--expect", EXPECT,
                     "--connect-timeout-s", "600"], capture_output=True, text=True)
print(st.stdout.strip() or st.stderr.strip())
if st.returncode != 0:
    raise RuntimeError("the nodes " + EXPECT + " did not all come: is every node notebook running?")
cmd = [BIN + "/shardwire", "run", *key_flags, *(["--greedy"] if GREEDY else []), "-p", PROMPT,
       "-n", str(N_PREDICT), "--json", "--connect-timeout-s", "120", *(["--chat"] if CHAT else [])]
r = subprocess.run(cmd, capture_output=True, text=True)
if r.returncode != 0:
    raise RuntimeError("shardwire run failed: " + r.stderr.strip())
result = json.loads(r.stdout)
with open(os.path.join(OUT_DIR, "shardwire-run.json"), "w") as f:
    f.write(r.stdout)
print(result["text"])
print(f"\\n{result['n_gen']} tokens, {result['decode_tok_s']:.1f} tok/s, first token after {result['ttft_ms']:.0f} ms, "
      f"{result['rounds']} rounds, {result['accepted']}/{result['drafted']} drafts accepted")
'''


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text.strip("\n").splitlines(True)}


def code(text):
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": text.strip("\n").splitlines(True)}


# The two-GPU rule of docs/deploy.md ("Kaggle"), in the notebooks' words.
RULE_HEAD = "the layers on cuda:0 and the drafter on cuda:1; without a drafter the layers over cuda:0,1"
RULE_NODE = "the layers over cuda:0,1"

ORDER = ("Start order: any. The relay, the node notebooks and the client may come up in any "
         "order: every process dials out to the relay and retries until it answers, and the client "
         "waits until the whole pipeline is there (`shardwire status --expect`).")


def node_nb(head):
    name = "head" if head else "tail"
    title = ("# shardwire: the head node (layers from 0, owns the sessions, drafts)" if head else
             "# shardwire: a middle or tail node")
    intro = f"""{title}

Run this notebook on Kaggle with a GPU (T4) and Internet on. It builds shardwire
for the notebook's GPU, fetches the model, reads its keys from Kaggle Secrets, starts
the node and prints a status line every minute until the node stops.

Before: on your machine, `shardwire cluster init --relay HOST:PORT --nodes head,tail --out keys`
(the relay on a small VM: docs/deploy.md). Add the secrets of `keys/{'head' if head else 'NODE'}/kaggle-secrets.txt`
to this notebook (Add-ons > Secrets), set the parameters below and run all cells.
{'' if head else 'For a middle node, set NODE_NAME and LAYERS to its name and range.'}

{ORDER}"""
    draft = 'DRAFT_MODEL = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M"  # its drafter; "" = n-gram drafts\n'
    rule = RULE_HEAD if head else RULE_NODE
    params = PARAMS_NODE.format(
        name=name, layers="0:14" if head else "14:28", draft=draft if head else "", rule=rule,
        draft_backend=('DRAFT_BACKEND = "auto"  # auto: cuda:1 with two GPUs, else the layers\' '
                       'first device; or cuda:N, cpu\n') if head else "",
        draft_env='DRAFT_MODEL = os.environ.get("SW_NB_DRAFT_MODEL", DRAFT_MODEL)\n' if head else "")
    cells = [md(intro), code(params), code(INSTALL),
             code(BUILD.format(targets='"shardwire", "shardwire-node"',
                               targets_py='["shardwire", "shardwire-node"]')),
             code(MODEL.format(s="s" if head else "",
                               draft="draft = fetch(DRAFT_MODEL)\n" if head else "",
                               draft_print=', "| draft:", draft or "n-gram"' if head else "")),
             code(KEYS_NODE.format(
                 name_hint="head" if head else "NODE",
                 access=('key_flags += ["--access-key", put("access.key", secret("SHARDWIRE_ACCESS_KEY"))]\n'
                         if head else ""))),
             code(START.format(
                 rule=rule,
                 cpu_only="DRAFT_BACKEND = " if head else "",
                 draft_rule=('if DRAFT_BACKEND == "auto":  # the drafter on the second T4\n'
                             '    DRAFT_BACKEND = "cpu" if gpus == 0 else "cuda:1" if gpus > 1 and draft else "cuda:0"\n'
                             if head else ""),
                 auto_backend=('"cuda:0" if gpus == 1 or draft else "cuda:0,1"' if head else
                               '"cuda:0" if gpus == 1 else "cuda:0,1"'),
                 draft_flags=('*(["--draft-model", draft, "--draft-backend", DRAFT_BACKEND] if draft else []), '
                              if head else ""),
                 draft_print_start=', "| draft on", DRAFT_BACKEND if draft else "(n-gram)"' if head else "")),
             code(LOOP)]
    return cells


def client_nb():
    intro = f"""# shardwire: a client of the cluster

Runs on Kaggle without a GPU. It builds the `shardwire` client, reads its keys from Kaggle
Secrets (the values of `keys/client/kaggle-secrets.txt` from `shardwire cluster init`), waits
until every node is connected and generates through the cluster.

{ORDER}"""
    return [md(intro), code(PARAMS_CLIENT), code(INSTALL),
            code(BUILD.format(targets='"shardwire"', targets_py='["shardwire"]')),
            code(KEYS_CLIENT), code(CLIENT_RUN)]


def notebook(cells):
    return {"cells": cells,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 4}


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for fname, cells in (("head.ipynb", node_nb(True)), ("node.ipynb", node_nb(False)),
                         ("client.ipynb", client_nb())):
        text = json.dumps(notebook(cells), indent=1, ensure_ascii=False) + "\n"
        path = os.path.join(HERE, fname)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != text:
            stale.append(fname)
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    if check and stale:
        print("deploy/kaggle: " + ", ".join(stale) + " differ from notebooks.py: run python3 "
              "deploy/kaggle/notebooks.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
