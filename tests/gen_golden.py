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
Decoder cases, after HF transformers' LlamaAttention / Qwen2Attention / MistralAttention
(q_proj..o_proj as nn.Linear, view + transpose per head, the rotary embedding of
modeling_rope_utils, apply_rotary_pos_emb with rotate_half, repeat_kv, softmax in float32,
causal and sliding-window masks), written out here in torch (transformers is not a Debian
package); each with its YAML config tests/data/NAME.yaml:
  llama_gqa      8 heads / 2 KV heads, RoPE neox theta 500000, llama3 scaling   torch float32
  qwen2_bias     q/k/v biases, no o_proj bias, RoPE yarn, ragged lengths         torch float32
  mistral_window 1 KV head (MQA), RoPE neox, sliding window 5                   torch float32
  gptj_partial   RoPE gptj (interleaved pairs) on 8 of 16 features, linear ×2   torch float32
 torch computes every query row and
only masks keys; mha writes 0 for query rows past a sequence's length. The expected outputs
here zero those rows.
PyTorch bf16 goldens, NAME_bf16_out.npy, for mha_self, mha_causal_pad and the four decoder
cases: the same module and inputs converted to torch.bfloat16 (nn.MultiheadAttention
.to(torch.bfloat16); the decoder layers as HF runs a bf16 model: projections, RoPE with cos
and sin cast to bf16, scores and A·V in bf16, softmax in float32 then bf16), the output
widened to float32. mha --precision bf16 is compared with them and with the float32 goldens
(tests/test_cli.c says the tolerances).
"""
import copy
import json
import math
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
        m16, x16 = copy.deepcopy(m).to(torch.bfloat16), x.to(torch.bfloat16)
        save("mha_self_bf16_out.npy", m16(x16, x16, x16, need_weights=False)[0].float().numpy())
        out = m16(x16, x16, x16, attn_mask=causal, key_padding_mask=pad, need_weights=False)[0].float().numpy()
        save("mha_causal_pad_bf16_out.npy", zero_padded_rows(out, lengths))
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


# ---- decoder attention, after HF transformers ----

def rope_inv_freq(dim, base, scaling):
    """modeling_rope_utils: _compute_default / linear / llama3 / yarn parameters."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    attention_factor = 1.0
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(is_medium, smoothed, inv_freq_llama)
    elif kind == "yarn":
        factor, old = scaling["factor"], scaling["original_max_position_embeddings"]
        beta_fast, beta_slow = scaling.get("beta_fast", 32), scaling.get("beta_slow", 1)
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

        def correction_dim(rot):
            return (dim * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(base))
        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        keep = 1 - ramp
        inv_freq = interpolation * (1 - keep) + extrapolation * keep
    return inv_freq, attention_factor


def rotary_cos_sin(inv_freq, attention_factor, positions, interleaved):
    """LlamaRotaryEmbedding.forward: freqs = inv_freq ⊗ positions in float32, cat(freqs, freqs)
    (GPT-J: each frequency repeated for its pair), cos and sin times the attention factor."""
    freqs = inv_freq[:, None].float() @ positions[None, :].float()  # (r/2, S)
    freqs = freqs.transpose(0, 1)
    emb = torch.repeat_interleave(freqs, 2, dim=-1) if interleaved else torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):  # GPT-J
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary(x, cos, sin, rotary_dim, interleaved):
    """apply_rotary_pos_emb on the first rotary_dim features (the rest pass, as GPT-NeoX/GPT-J)."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    rot = rot * cos + (rotate_every_two(rot) if interleaved else rotate_half(rot)) * sin
    return torch.cat((rot, rest), dim=-1)


def repeat_kv(x, n_rep):
    b, kvh, s, dk = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kvh, n_rep, s, dk).reshape(b, kvh * n_rep, s, dk)


def decoder_attention(x, p, lengths=None):
    """One HF decoder attention layer (eager path) over a right-padded batch."""
    B, S, d = x.shape
    h, kvh = p["heads"], p["kv_heads"]
    dk = d // h
    q = p["q_proj"](x).view(B, S, h, dk).transpose(1, 2)
    k = p["k_proj"](x).view(B, S, kvh, dk).transpose(1, 2)
    v = p["v_proj"](x).view(B, S, kvh, dk).transpose(1, 2)
    r = p.get("rotary_dim", dk)
    inv_freq, att = rope_inv_freq(r, p["theta"], p.get("scaling", {}))
    cos, sin = rotary_cos_sin(inv_freq, att, torch.arange(S), p.get("interleaved", False))
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # HF: computed in float32, applied in the model's dtype
    q = apply_rotary(q, cos, sin, r, p.get("interleaved", False))
    k = apply_rotary(k, cos, sin, r, p.get("interleaved", False))
    k, v = repeat_kv(k, h // kvh), repeat_kv(v, h // kvh)
    scores = q @ k.transpose(2, 3) / math.sqrt(dk)
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    hidden = j > i  # causal
    if p.get("window"):
        hidden = hidden | (j <= i - p["window"])  # Mistral: sees i - W < j <= i
    mask = hidden[None, None, :, :].expand(B, 1, S, S).clone()
    if lengths is not None:
        mask = mask | (torch.arange(S)[None, None, None, :] >= torch.tensor(lengths)[:, None, None, None])
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    probs = torch.nan_to_num(probs)  # rows with no visible key (none here)
    out = (probs @ v).transpose(1, 2).reshape(B, S, d)
    out = p["o_proj"](out).float()
    return zero_padded_rows(out.detach().numpy(), lengths) if lengths is not None else out.detach().numpy()


def decoder_case(name, seed, d, heads, kv_heads, bias, x, lengths=None, **rope):
    torch.manual_seed(seed)
    dk = d // heads
    lin = lambda i, o, b: torch.nn.Linear(i, o, bias=b)
    p = {"heads": heads, "kv_heads": kv_heads,
         "q_proj": lin(d, d, bias), "k_proj": lin(d, kv_heads * dk, bias), "v_proj": lin(d, kv_heads * dk, bias),
         "o_proj": lin(d, d, False)}  # o_proj without bias, as Llama, Mistral and Qwen2
    if bias:
        with torch.no_grad():
            for n in ("q_proj", "k_proj", "v_proj"):
                p[n].bias.uniform_(-0.5, 0.5)
    p.update(rope)
    prefix = "model.layers.0.self_attn."
    tensors = []
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        tensors.append((prefix + n + ".weight", p[n].weight.detach().numpy(), "F32"))
        if bias and n != "o_proj":
            tensors.append((prefix + n + ".bias", p[n].bias.detach().numpy(), "F32"))
    write_safetensors(os.path.join(HERE, name + ".safetensors"), tensors)
    with torch.no_grad():
        save(name + "_out.npy", decoder_attention(x, p, lengths))
        p16 = {k: copy.deepcopy(v).to(torch.bfloat16) if isinstance(v, torch.nn.Module) else v for k, v in p.items()}
        save(name + "_bf16_out.npy", decoder_attention(x.to(torch.bfloat16), p16, lengths))


def decoder_cases():
    g = torch.Generator().manual_seed(11)
    x64 = torch.rand(2, 12, 64, generator=g) * 2 - 1
    x128 = torch.rand(2, 12, 128, generator=g) * 2 - 1
    save("x64.npy", x64.numpy())
    save("x128.npy", x128.numpy())
    save("lengths12.npy", np.array([12, 7], dtype=np.int32))
    decoder_case("llama_gqa", 21, 128, 8, 2, False, x128, theta=500000.0,
                 scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64})
    decoder_case("qwen2_bias", 22, 64, 4, 2, True, x64, lengths=[12, 7], theta=1000000.0,
                 scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})
    decoder_case("mistral_window", 23, 64, 4, 1, False, x64, theta=10000.0, window=5)
    decoder_case("gptj_partial", 24, 64, 4, 4, False, x64, theta=10000.0, rotary_dim=8, interleaved=True,
                 scaling={"rope_type": "linear", "factor": 2.0})


if __name__ == "__main__":
    main()
    decoder_cases()
