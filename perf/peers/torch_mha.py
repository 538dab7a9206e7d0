#!/usr/bin/python3
"""PyTorch's nn.MultiheadAttention as a peer: prints {"median_ms", "min_ms", "max_ms"} for
one shape. usage: torch_mha.py D H B S THREADS ITERS WARMUP CAUSAL LENGTHS(comma list or -)
[f32|bf16] [module|sdpa|zentorch]
bf16: the module converted with .to(torch.bfloat16), inputs in bf16 (CPU autocast breaks the
fast path in 1.13). sdpa (PyTorch >= 2.0): sdpa_layer.Layer, projections as nn.Linear and
torch.nn.functional.scaled_dot_product_attention (causal: is_causal; padding: a boolean mask).
zentorch (from perf/.venv-zentorch): that layer through torch.compile(backend="zentorch"), AMD's
compiled layer (compiled in the warm-up; zentorch optimizes only where the CPU has AVX-512 and
otherwise leaves the graph to PyTorch's inductor, which it says on stderr).
Fast path: eval mode, no_grad, need_weights=False, batch_first. bias=True (PyTorch 1.13's
bias=False fails in eval mode, pytorch#97128). The environment (OMP_NUM_THREADS,
BLIS_NUM_THREADS, BLIS_ARCH_TYPE, GLIBC_TUNABLES) is the setup being measured."""
import json
import sys
import time

import torch

d, h, b, s, threads, iters, warmup, causal = map(int, sys.argv[1:9])
lengths = None if sys.argv[9] == "-" else [int(x) for x in sys.argv[9].split(",")]
torch.set_num_threads(threads)
torch.manual_seed(0)
mode = sys.argv[11] if len(sys.argv) > 11 else "module"
if mode in ("sdpa", "zentorch"):
    from sdpa_layer import Layer, padding_mask
    m = Layer(d, h, causal).eval()
    keep = padding_mask(b, s, lengths)
    run = lambda: m(x, keep)
else:
    m = torch.nn.MultiheadAttention(d, h, bias=True, batch_first=True).eval()
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1) if causal else None
    pad = None
    if lengths:
        pad = torch.arange(s)[None, :] >= torch.tensor([lengths[i % len(lengths)] for i in range(b)])[:, None]
    run = lambda: m(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)
x = torch.rand(b, s, d) * 2 - 1
if len(sys.argv) > 10 and sys.argv[10] == "bf16":
    m, x = m.to(torch.bfloat16), x.to(torch.bfloat16)
if mode == "zentorch":
    import zentorch  # noqa: F401 (registers the backend)
    layer = torch.compile(m, backend="zentorch")
    run = lambda: layer(x, keep)
    warmup = max(warmup, 2)  # the first call compiles
times = []
with torch.no_grad():
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        run()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1]}))
