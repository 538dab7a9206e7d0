#!/usr/bin/python3
"""Writes the golden cases in tests/data/ from PyTorch's nn.MultiheadAttention.

Run with Debian's interpreter (/usr/bin/python3, python3-torch and python3-numpy); the files
are committed so the test suite needs neither. Each case is a weights file (safetensors,
written here byte by byte), inputs and lengths (.npy) and the expected output (.npy).
Shapes are small (d=32, h=4) to keep the repository light.

Cases and their reference:
  mha_self       nn.MultiheadAttention, self-attention with biases        torch float32
  mha_keypad     + key_padding_mask from lengths (rows past a length: 0)  torch float32
  mha_causal     + causal attn_mask                                       torch float32
  mha_causal_pad causal and key padding together                          torch float32
  mha_cross      cross-attention, key padding on the keys                 torch float32
  proj_f16       q_proj/k_proj/v_proj/o_proj as F16 under a prefix        float64, rounded weights
  xw_bf16        W_q.. / b_q.. in x·W layout (reference class), BF16      float64, rounded weights
mha's padding semantics differ from torch's in one way: torch computes every query row and
only masks keys; mha writes 0 for query rows past a sequence's length. The expected outputs
here zero those rows.
"""
import json
import os
import struct

import numpy as np
import torch

D, H = 32, 4
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def write_safetensors(path, tensors):
    """tensors: list of (name, np.ndarray, dtype string) in file order."""
    header, blobs, offset = {}, [], 0
    for name, arr, dtype in tensors:
        if dtype == "F32":
            raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        elif dtype == "F16":
            raw = np.ascontiguousarray(arr, dtype="<f2").tobytes()
        elif dtype == "BF16":
            raw = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raise ValueError(dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt", "written_by": "tests/gen_golden.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rounded(arr, dtype):
    """The float32 values a reader of the stored dtype gets back."""
    t = torch.from_numpy(np.asarray(arr, dtype=np.float32))
    return (t.half() if dtype == "F16" else t.bfloat16()).float().numpy()


def save(name, arr):
    np.save(os.path.join(HERE, name), arr)


def zero_padded_rows(out, lengths):
    out = out.copy()
    for b, n in enumerate(lengths):
        out[b, n:] = 0
    return out


def mha_module(seed):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True)
    with torch.no_grad():  # non-zero biases, so they are really tested
        m.in_proj_bias.uniform_(-0.5, 0.5)
        m.out_proj.bias.uniform_(-0.5, 0.5)
    return m.eval()


def mha_weights(m):
    sd = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    return [(k, sd[k], "F32") for k in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")]


def main():
    os.makedirs(HERE, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    x = torch.rand(2, 7, D, generator=g) * 2 - 1
    kv = torch.rand(2, 9, D, generator=g) * 2 - 1
    q5 = torch.rand(2, 5, D, generator=g) * 2 - 1
    lengths = np.array([7, 4], dtype=np.int64)
    kv_lengths = np.array([9, 6], dtype=np.int32)
    pad = torch.arange(7)[None, :] >= torch.from_numpy(lengths)[:, None]
    kv_pad = torch.arange(9)[None, :] >= torch.from_numpy(kv_lengths.astype(np.int64))[:, None]
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)

    m = mha_module(1)
    write_safetensors(os.path.join(HERE, "mha.safetensors"), mha_weights(m))
    save("x.npy", x.numpy())
    save("kv.npy", kv.numpy())
    save("q5.npy", q5.numpy())
    save("lengths.npy", lengths)
    save("kv_lengths.npy", kv_lengths)
    with torch.no_grad():
        save("mha_self_out.npy", m(x, x, x, need_weights=False)[0].numpy())
        out = m(x, x, x, key_padding_mask=pad, need_weights=False)[0].numpy()
        save("mha_keypad_out.npy", zero_padded_rows(out, lengths))
        save("mha_causal_out.npy", m(x, x, x, attn_mask=causal, need_weights=False)[0].numpy())
        out = m(x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=False)[0].numpy()
        save("mha_causal_pad_out.npy", zero_padded_rows(out, lengths))
        save("mha_cross_out.npy", m(q5, kv, kv, key_padding_mask=kv_pad, need_weights=False)[0].numpy())

    # nn.Linear per projection, F16, under a prefix; reference in float64 from the rounded weights
    m2 = mha_module(2)
    sd = {k: v.detach().numpy() for k, v in m2.state_dict().items()}
    w_in, b_in = sd["in_proj_weight"], sd["in_proj_bias"]
    tensors, parts = [], {}
    for i, p in enumerate("qkv"):
        parts[p + "_proj.weight"] = w_in[i * D:(i + 1) * D]
        parts[p + "_proj.bias"] = b_in[i * D:(i + 1) * D]
    parts["o_proj.weight"], parts["o_proj.bias"] = sd["out_proj.weight"], sd["out_proj.bias"]
    prefix = "model.layers.0.self_attn."
    for name in ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                 "v_proj.weight", "v_proj.bias", "o_proj.weight", "o_proj.bias"):
        tensors.append((prefix + name, parts[name], "F16"))
    write_safetensors(os.path.join(HERE, "proj_f16.safetensors"), tensors)
    m2d = mha_module(2).double()
    with torch.no_grad():
        r = lambda n: torch.from_numpy(rounded(parts[n], "F16")).double()
        m2d.in_proj_weight.copy_(torch.cat([r("q_proj.weight"), r("k_proj.weight"), r("v_proj.weight")]))
        m2d.in_proj_bias.copy_(torch.cat([r("q_proj.bias"), r("k_proj.bias"), r("v_proj.bias")]))
        m2d.out_proj.weight.copy_(r("o_proj.weight"))
        m2d.out_proj.bias.copy_(r("o_proj.bias"))
        save("proj_f16_out.npy", m2d(x.double(), x.double(), x.double(), need_weights=False)[0].float().numpy())

    # the reference class's names, x·W layout (W = torch weight transposed), BF16
    m3 = mha_module(3)
    sd = {k: v.detach().numpy() for k, v in m3.state_dict().items()}
    w_in, b_in = sd["in_proj_weight"], sd["in_proj_bias"]
    xw = {"W_q": w_in[:D].T, "W_k": w_in[D:2 * D].T, "W_v": w_in[2 * D:].T, "W_o": sd["out_proj.weight"].T,
          "b_q": b_in[:D], "b_k": b_in[D:2 * D], "b_v": b_in[2 * D:], "b_o": sd["out_proj.bias"]}
    write_safetensors(os.path.join(HERE, "xw_bf16.safetensors"), [(k, v, "BF16") for k, v in xw.items()])
    m3d = mha_module(3).double()
    with torch.no_grad():
        r = lambda n: torch.from_numpy(rounded(xw[n], "BF16")).double()
        m3d.in_proj_weight.copy_(torch.cat([r("W_q").T, r("W_k").T, r("W_v").T]))
        m3d.in_proj_bias.copy_(torch.cat([r("b_q"), r("b_k"), r("b_v")]))
        m3d.out_proj.weight.copy_(r("W_o").T)
        m3d.out_proj.bias.copy_(r("b_o"))
        out = m3d(x.double(), x.double(), x.double(), attn_mask=causal, key_padding_mask=pad, need_weights=False)[0]
        save("xw_bf16_out.npy", zero_padded_rows(out.float().numpy(), lengths))


if __name__ == "__main__":
    main()
