#!/usr/bin/env python3
"""Writes the seed corpora of the text-input fuzz targets, each in its target's
input layout (see the comment at the top of each tests/fuzz/fuzz_*.c):

  corpus/chat/       fuzz_chat: the six template families by name, the real
                     templates of tests/fixtures/tokenizer/chat_templates.json,
                     with system/user/assistant/tool messages;
  corpus/tokenizer/  fuzz_tokenizer: strings of the SmolLM2 corpus fixture
                     (tests/fixtures/tokenizer/smollm2_corpus.json) with each
                     flag combination, ChatML text with special tokens, and an
                     id-array input;
  corpus/keys/       fuzz_keys: an allow-list with comments and names, CURVE
                     secret and public key files (fixed bytes, not secrets of
                     anything), a literal public key, a cluster key, and the
                     same secret readable by others (to be refused).

The wire seeds (corpus/wire/) come from tests/unit/test_wire.c, which also
checks them; the GGUF seeds: make_gguf_seed.py (llama.cpp's writer), test_gguf's
synthetic writer (synthetic.gguf) and fuzz_gguf.c's mksplit recipe (split3.bin). Run from anywhere:

    python3 tests/fuzz/make_text_seeds.py

Deterministic: the same files every run. The output is committed.
"""
import hashlib
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")

Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data):
    assert len(data) % 4 == 0
    out = []
    for i in range(0, len(data), 4):
        v = struct.unpack(">I", data[i:i + 4])[0]
        chunk = []
        for _ in range(5):
            chunk.append(Z85[v % 85])
            v //= 85
        out.extend(reversed(chunk))
    return "".join(out)


def fixed_bytes(label, n=32):
    return hashlib.sha256(label.encode()).digest()[:n]


def reset(name):
    d = os.path.join(CORPUS, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def chat_seeds():
    d = reset("chat")
    msgs = [(4, "You are a helpful assistant."),   # role byte 4 -> system (4 % 4)
            (1, "Write a haiku about networks."),  # user
            (2, "Packets drift like leaves"),      # assistant
            (1, "Another, about relays, in 日本語 🙂"),
            (3, "{\"result\": 42}")]               # tool

    def seed(template, messages, add_gen):
        fields = [template] + [bytes([r]) + c.encode() for r, c in messages]
        return b"\0".join(fields) + b"\0" + bytes([add_gen])

    for i, fam in enumerate(["chatml", "llama3", "llama2"]):
        write(d, f"family_{fam}.bin", seed(bytes([i]), msgs[:2], 1))
        write(d, f"family_{fam}_long.bin", seed(bytes([i]), msgs, 0))
    # family bytes 3-5 (llama3.1, qwen3, gemma): their own messages (a think block, a
    # trailing backslash, leading and trailing blanks), as first written by hand
    write(d, "family_llama3.1.bin", b'\x03\x00\x00 sys \x00\x01q\x00\x03say "x"\\\n\x00\x01')
    write(d, "family_qwen3.bin", b'\x04\x00\x01What is 2+2?\x00\x02<think>\nadd\n</think>\n\n4.'
          b'\x00\x03{"r": 4}\x00\x01')
    write(d, "family_gemma.bin", b'\x05\x00\x00Be brief.\x00\x01  Hi \x00\x02Hello\x00\x01Bye\x01')
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "chat_templates.json")) as f:
        templates = json.load(f)["templates"]
    for t in templates:
        write(d, f"template_{t['name']}.bin", seed(t["template"].encode(), msgs[:3], 1))


def tokenizer_seeds():
    d = reset("tokenizer")
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2_corpus.json")) as f:
        cases = json.load(f)["cases"]
    # every 5th corpus string (20 of 100), cycling through the four flag combinations
    for k, case in enumerate(cases[::5]):
        write(d, f"corpus_{k:02d}.bin", bytes([k % 4]) + case["text"].encode())
    chatml = ("<|im_start|>system\nYou are SmolLM.<|im_end|>\n<|im_start|>user\n"
              "Hi there!<|im_end|>\n<|im_start|>assistant\n")
    write(d, "chatml_special.bin", bytes([1]) + chatml.encode())
    write(d, "chatml_plain.bin", bytes([0]) + chatml.encode())
    # ids path: flag 4 folds ids into range, flag 8 asks for special pieces
    ids = [1, 2, 504, 3300, 28, 49151, 49152, -1, 17]
    write(d, "ids.bin", bytes([4 | 8]) + struct.pack("<%di" % len(ids), *ids))
    write(d, "invalid_utf8.bin", bytes([0]) + b"ok \xff\xfe \xc3( \xe2\x82 end")


def keys_seeds():
    d = reset("keys")
    # byte 0: bits 0-1 parser (0 allow-list, 1 secret, 2 public, 3 cluster), bit 2 others may read
    pubs = [z85(fixed_bytes(f"seed public {i}")) for i in range(3)]
    allow = ("# relay allow-list\n"
             f"{pubs[0]} head\n"
             f"{pubs[1]} tail   # the tail's laptop\n"
             f"{pubs[2]}\n"
             "\n")
    write(d, "allow.bin", bytes([0]) + allow.encode())
    roles = ("# roles and names\n"
             f"{pubs[0]} node head\n"
             f"{pubs[1]} client gateway   # a named client\n"
             f"{pubs[2]} client\n")
    write(d, "allow_roles.bin", bytes([0]) + roles.encode())
    bound = ("# node keys bound to a role\n"
             f"{pubs[0]} head head\n"
             f"{pubs[1]} stage tail   # a middle or tail only\n"
             f"{pubs[2]} client\n")
    write(d, "allow_bound.bin", bytes([0]) + bound.encode())
    write(d, "allow_empty.bin", bytes([0]) + b"# nobody\n")
    secret = "# shardwire CURVE secret key\n" + z85(fixed_bytes("seed secret")) + "\n"
    write(d, "secret.bin", bytes([1]) + secret.encode())
    write(d, "secret_others_read.bin", bytes([1 | 4]) + secret.encode())
    write(d, "public_file.bin", bytes([2]) + ("# public key\n" + pubs[0] + "\n").encode())
    write(d, "public_literal.bin", bytes([2]) + pubs[1].encode())
    write(d, "cluster.bin", bytes([3]) + (z85(fixed_bytes("seed cluster")) + "\n").encode())
    # the ZeroMQ documentation's test server secret key: must be refused
    write(d, "secret_test_key.bin", bytes([1]) + b"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\n")


if __name__ == "__main__":
    chat_seeds()
    tokenizer_seeds()
    keys_seeds()
    for name in ("chat", "tokenizer", "keys"):
        print(f"{name}: {len(os.listdir(os.path.join(CORPUS, name)))} seeds")
