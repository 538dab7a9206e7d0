#!/usr/bin/python3
"""PyTorch decode step as a peer: an HF-style decoder attention layer (q/k/v/o nn.Linear without
bias, llama3 RoPE, repeat_kv, matmul + softmax) over a static KV cache tensor, one new token per
sequence per step. Prints {"median_ms", "min_ms", "max_ms", "p99_ms"} of the step.
usage: torch_decode.py D HEADS KV_HEADS SEQS CONTEXT STEPS THREADS [eager|sdpa] [f32|bf16]
The cache holds random K and V for CONTEXT positions (prefill is not timed); step k writes
position CONTEXT + k and attends to positions 0 .. CONTEXT + k, as mha_step_forward does.
eager (default): HF's eager path, repeat_kv then matmul + softmax; sdpa (PyTorch >= 2.5):
torch.nn.functional.scaled_dot_product_attention on the cache's KV heads with enable_gqa.
bf16: the layers, the cache and the new tokens in torch.bfloat16 (RoPE frequencies float32)."""
import json
import math
import sys
import time

import torch

d, h, kvh, seqs, ctx, steps, threads = map(int, sys.argv[1:8])
mode = sys.argv[8] if len(sys.argv) > 8 else "eager"
dtype = torch.bfloat16 if len(sys.argv) > 9 and sys.argv[9] == "bf16" else torch.float32
torch.set_num_threads(threads)
torch.manual_seed(0)
dk, rep = d // h, h // kvh
q_proj, k_proj = torch.nn.Linear(d, d, bias=False), torch.nn.Linear(d, kvh * dk, bias=False)
v_proj, o_proj = torch.nn.Linear(d, kvh * dk, bias=False), torch.nn.Linear(d, d, bias=False)
# llama3 RoPE frequencies (theta 500000, factor 8, bands 1..4 over 8192), as HF computes them
inv = 1.0 / (500000.0 ** (torch.arange(0, dk, 2, dtype=torch.int64).float() / dk))
wavelen = 2 * math.pi / inv
inv_l = torch.where(wavelen > 8192 / 1.0, inv / 8, inv)
smooth = (8192 / wavelen - 1) / (4 - 1)
mid = ~(wavelen < 8192 / 4) * ~(wavelen > 8192 / 1)
inv = torch.where(mid, (1 - smooth) * inv_l / 8 + smooth * inv_l, inv_l)
K = torch.rand(seqs, kvh, ctx + steps, dk) * 2 - 1   # the static cache
V = torch.rand(seqs, kvh, ctx + steps, dk) * 2 - 1
K, V = K.to(dtype), V.to(dtype)
for m in (q_proj, k_proj, v_proj, o_proj):
    m.to(dtype)


def rope(x, pos):
    f = pos * inv
    cos, sin = torch.cat((f, f)).cos().to(dtype), torch.cat((f, f)).sin().to(dtype)
    x1, x2 = x[..., : dk // 2], x[..., dk // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


times = []
with torch.no_grad():
    for k in range(steps):
        x = (torch.rand(seqs, 1, d) * 2 - 1).to(dtype)
        pos = ctx + k
        t0 = time.perf_counter()
        q = rope(q_proj(x).view(seqs, 1, h, dk).transpose(1, 2), pos)
        kn = rope(k_proj(x).view(seqs, 1, kvh, dk).transpose(1, 2), pos)
        vn = v_proj(x).view(seqs, 1, kvh, dk).transpose(1, 2)
        K[:, :, pos:pos + 1] = kn
        V[:, :, pos:pos + 1] = vn
        if mode == "sdpa":
            z = torch.nn.functional.scaled_dot_product_attention(q, K[:, :, : pos + 1], V[:, :, : pos + 1], enable_gqa=True)
        else:
            keys = K[:, :, : pos + 1][:, :, None].expand(seqs, kvh, rep, pos + 1, dk).reshape(seqs, h, pos + 1, dk)
            vals = V[:, :, : pos + 1][:, :, None].expand(seqs, kvh, rep, pos + 1, dk).reshape(seqs, h, pos + 1, dk)
            z = torch.softmax(q @ keys.transpose(2, 3) / math.sqrt(dk), dim=-1) @ vals
        o_proj(z.transpose(1, 2).reshape(seqs, 1, d))
        times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1],
                  "p99_ms": times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)]}))
