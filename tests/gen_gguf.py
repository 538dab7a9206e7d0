#!/usr/bin/env python3
"""Writes the small GGUF files of tests/data/gguf/ with gguf-py, llama.cpp's own GGUF writer
(`make gguf-seeds` installs it into a venv of its own): an independent writer for the reader's
tests (tests/test_gguf.c) and the fuzz target's seeds (tests/fuzz/fuzz_gguf.c). The files are
committed; make test needs none of this.

Each file is a model of one architecture mha computes, a few layers of its attention tensors
only, in the metadata llama.cpp's converter writes for it (convert_hf_to_gguf.py), of a few
kilobytes so that libFuzzer mutates them whole (its max_len 65536):

  tiny_llama.gguf   llama: GQA 4/2 of 8, Q8_0 / Q4_0 / F16 / F32 projections, llama3's
                    rope_freqs.weight, and a metadata entry of every GGUF type (test.*: every
                    scalar type, an array of each, an array of strings; gguf-py writes no empty array)
  tiny_llama_v2.gguf  the same with the version field 2 (v2 and v3 files are alike when
                    little-endian)
  tiny_qwen2.gguf   qwen2: q, k, v biases, yarn scaling, per-layer head_count_kv array
  tiny_qwen3.gguf   qwen3: QK-norm per head, head_dim 32 of d_model 256 (K-quants' rows are
                    256 long at least), K-quant projections
                    (Q4_K, Q6_K) and Q4_1
  tiny_gemma2.gguf  gemma2: softcap, sliding window on even layers, head_dim 32 of d_model 32
                    over 2 heads, BF16
  tiny_gemma3.gguf  gemma3: QK-norm, sliding window pattern 6 (7 layers), rope.freq_base 1e6
                    with linear scaling 8
  tiny_olmo2.gguf   olmo2: QK-norm over the whole projection
  tiny_phi3.gguf    phi3: fused attn_qkv.weight, sliding window

Tensor values are seeded random numbers (quantized blocks: random bytes; their values play no
part in these tests).
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

RNG = np.random.default_rng(1234)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def add_weight(w, name, rows, cols, qtype):
    """A (rows, cols) weight (ggml's ne = {cols, rows}) of qtype."""
    if qtype == Q.F32:
        w.add_tensor(name, f32(rows, cols))
    elif qtype == Q.F16:
        w.add_tensor(name, f32(rows, cols).astype(np.float16))
    elif qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.BF16):
        w.add_tensor(name, gguf.quants.quantize(f32(rows, cols), qtype), raw_dtype=qtype)
    else:  # K-quants: gguf-py has no quantizer for them; the bytes only need the right length
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = RNG.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
        w.add_tensor(name, raw, raw_dtype=qtype)


def base(path, arch, layers, d, heads, kv_heads, eps=1e-5, theta=10000.0, name=None):
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name or f"tiny {arch}")
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_head_count(heads)
    if kv_heads is not None:
        w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_freq_base(theta)
    return w


def attention(w, layers, d, h, kvh, dk, types, bias=False, qk_norm=None, fused=False, first=0):
    for l in range(first, first + layers):
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", f32(d))
        if fused:
            add_weight(w, b + "attn_qkv.weight", (h + 2 * kvh) * dk, d, types[0])
        else:
            add_weight(w, b + "attn_q.weight", h * dk, d, types[0])
            add_weight(w, b + "attn_k.weight", kvh * dk, d, types[1])
            add_weight(w, b + "attn_v.weight", kvh * dk, d, types[2])
        add_weight(w, b + "attn_output.weight", d, h * dk, types[3])
        if bias:
            w.add_tensor(b + "attn_q.bias", f32(h * dk))
            w.add_tensor(b + "attn_k.bias", f32(kvh * dk))
            w.add_tensor(b + "attn_v.bias", f32(kvh * dk))
        if qk_norm == "head":
            w.add_tensor(b + "attn_q_norm.weight", f32(dk))
            w.add_tensor(b + "attn_k_norm.weight", f32(dk))
        elif qk_norm == "full":
            w.add_tensor(b + "attn_q_norm.weight", f32(h * dk))
            w.add_tensor(b + "attn_k_norm.weight", f32(kvh * dk))


def llama3_factors(dim, base_, factor=8.0, low=1.0, high=4.0, old=8192):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, in float32 as torch computes it."""
    freqs = (np.float32(1.0) / (np.float32(base_) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))))
    out = []
    for freq in freqs.astype(np.float32):
        wavelen = np.float32(2 * np.pi) / freq
        if wavelen < np.float32(old / high):
            out.append(1.0)
        elif wavelen > np.float32(old / low):
            out.append(factor)
        else:
            smooth = (np.float32(old) / wavelen - np.float32(low)) / np.float32(high - low)
            out.append(1 / ((1 - smooth) / np.float32(factor) + smooth))
    return np.array(out, dtype=np.float32)


def every_type(w):
    """One metadata entry of each GGUF value type, and arrays of them."""
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_uint64("test.u64", 2**63 - 1)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", -1.5e300)
    for name, vals, sub in [("u8", [1, 2, 255], V.UINT8), ("i8", [-1, 0, 1], V.INT8), ("u16", [65535], V.UINT16),
                            ("i16", [-2, 2], V.INT16), ("u32", [7, 8, 9], V.UINT32), ("i32", [-7], V.INT32),
                            ("f32", [0.5, -0.5], V.FLOAT32), ("bool", [True, False, True], V.BOOL),
                            ("string", ["a", "", "ccc"], V.STRING), ("u64", [2**64 - 1], V.UINT64),
                            ("i64", [-5, 5], V.INT64), ("f64", [3.25], V.FLOAT64)]:
        w.add_key_value(f"test.array.{name}", vals, V.ARRAY, sub_type=sub)


def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out):
    os.makedirs(out, exist_ok=True)
    p = lambda name: os.path.join(out, name)  # noqa: E731

    w = base(p("tiny_llama.gguf"), "llama", 2, 32, 4, 2, theta=500000.0)
    w.add_rope_dimension_count(8)
    every_type(w)
    attention(w, 2, 32, 4, 2, 8, (Q.Q8_0, Q.Q4_0, Q.F16, Q.F32))
    w.add_tensor("rope_freqs.weight", llama3_factors(8, 500000.0))
    write(w)
    with open(p("tiny_llama.gguf"), "rb") as f:
        data = bytearray(f.read())
    data[4:8] = (2).to_bytes(4, "little")
    with open(p("tiny_llama_v2.gguf"), "wb") as f:
        f.write(data)

    w = base(p("tiny_qwen2.gguf"), "qwen2", 2, 32, 4, [2, 1], eps=1e-6, theta=1e6)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(4.0)
    w.add_rope_scaling_orig_ctx_len(1024)
    attention(w, 1, 32, 4, 2, 8, (Q.F32, Q.F32, Q.F16, Q.Q8_0), bias=True)
    attention(w, 1, 32, 4, 1, 8, (Q.F16, Q.F16, Q.F16, Q.F16), bias=True, first=1)  # layer 1: one KV head
    write(w)

    w = base(p("tiny_qwen3.gguf"), "qwen3", 1, 256, 2, 1, eps=1e-6, theta=1e6)
    w.add_key_length(32)
    w.add_value_length(32)
    attention(w, 1, 256, 2, 1, 32, (Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q4_1), qk_norm="head")
    write(w)

    w = base(p("tiny_gemma2.gguf"), "gemma2", 3, 32, 2, 1, eps=1e-6)
    w.add_key_length(32)
    w.add_value_length(32)
    w.add_sliding_window(8)
    w.add_attn_logit_softcapping(50.0)
    attention(w, 3, 32, 2, 1, 32, (Q.BF16, Q.BF16, Q.BF16, Q.BF16))
    write(w)

    w = base(p("tiny_gemma3.gguf"), "gemma3", 7, 32, 2, 1, eps=1e-6, theta=1e6)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_sliding_window(6)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(8.0)
    attention(w, 7, 32, 2, 1, 16, (Q.Q8_0, Q.Q8_0, Q.Q8_0, Q.F16), qk_norm="head")
    write(w)

    w = base(p("tiny_olmo2.gguf"), "olmo2", 1, 32, 4, 4, eps=1e-6, theta=500000.0)
    attention(w, 1, 32, 4, 4, 8, (Q.F16, Q.F16, Q.F16, Q.F16), qk_norm="full")
    write(w)

    w = base(p("tiny_phi3.gguf"), "phi3", 2, 32, 4, 4, theta=10000.0)
    w.add_rope_dimension_count(8)
    w.add_sliding_window(2047)
    attention(w, 2, 32, 4, 4, 8, (Q.F16, None, None, Q.F16), fused=True)
    write(w)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gguf"))
