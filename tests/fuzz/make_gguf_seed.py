#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/gguf/gguf_py_small.gguf with the reference writer
(the `gguf` package from llama.cpp), so that the fuzzer starts from a file an
independent implementation produced and test_gguf checks that our reader
agrees with it. Run once with a Python that has `gguf` and `numpy`:

    python3 tests/fuzz/make_gguf_seed.py

The output is committed; the tests do not need Python.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf", "gguf_py_small.gguf")
w = GGUFWriter(out, arch="llama")
w.add_block_count(2)
w.add_context_length(128)
w.add_uint8("seed.u8", 7)
w.add_int16("seed.i16", -300)
w.add_int64("seed.i64", -(1 << 35))
w.add_float32("seed.f32", 0.25)
w.add_float64("seed.f64", -2.5)
w.add_bool("seed.bool", True)
w.add_string("seed.str", "héllo")
w.add_array("seed.arr_str", ["<s>", "</s>", "a", "bc"])
w.add_array("seed.arr_f32", [1.0, 2.0, 3.0])
w.add_tensor("tok_embd.weight", np.arange(32 * 3, dtype=np.float32).reshape(3, 32))
w.add_tensor("norm.weight", np.full(32, 0.5, dtype=np.float16))
# one raw Q8_0 row of 64 elements: 2 blocks of (f16 d, 32 x i8)
w.add_tensor("blk.0.q8.weight", np.arange(68, dtype=np.uint8).reshape(1, 68),
             raw_dtype=GGMLQuantizationType.Q8_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(out, os.path.getsize(out), file=sys.stderr)
