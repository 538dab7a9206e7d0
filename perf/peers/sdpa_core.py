#!/usr/bin/python3
"""The attention core as the peers run it, on given Q, K, V (batch, heads, seq, d_k): PyTorch
2.x's torch.nn.functional.scaled_dot_product_attention (peer "torch"), AMD's zentorch op
torch.ops.zentorch.zentorch_sdpa (peer "zentorch", from the venv with zentorch and the torch it
matches; GQA as given, its own), and OpenVINO's
ScaledDotProductAttention op compiled alone for "CPU" (peer "openvino", INFERENCE_PRECISION_HINT
f32 or bf16, INFERENCE_NUM_THREADS, the LATENCY hint). GQA: torch with enable_gqa, OpenVINO with
K and V repeated over the group beforehand (outside the timing: its op takes equal heads).
Causal is bottom-right aligned as mha's (a query block at the end of the keys), so seq_q <
seq_kv gives the decode shape. Prints {"median_ms", "min_ms", "max_ms", "precision"}.
usage: sdpa_core.py torch|zentorch|openvino B H KVH SQ SKV DK CAUSAL THREADS ITERS WARMUP f32|bf16"""
import json
import sys
import time

import torch

peer = sys.argv[1]
b, h, kvh, sq, skv, dk, causal, threads, iters, warmup = map(int, sys.argv[2:12])
prec = sys.argv[12]
torch.manual_seed(0)
dtype = torch.bfloat16 if prec == "bf16" else torch.float32
q = torch.rand(b, h, sq, dk) * 2 - 1
k = torch.rand(b, kvh, skv, dk) * 2 - 1
v = torch.rand(b, kvh, skv, dk) * 2 - 1
# bottom-right causal: query i sees keys j <= i + skv - sq (PyTorch's is_causal is top-left)
mask = None
if causal and sq != skv:
    mask = torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + (skv - sq)


def timed(fn):
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times


if peer == "torch":
    torch.set_num_threads(threads)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.no_grad():
        times = timed(lambda: sdpa(q, k, v, attn_mask=mask, is_causal=bool(causal) and mask is None,
                                   enable_gqa=kvh != h))
    ran = str(dtype).replace("torch.", "")
elif peer == "zentorch":
    import zentorch  # noqa: F401 (registers torch.ops.zentorch)

    torch.set_num_threads(threads)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    zmask = None if mask is None else torch.zeros(sq, skv, dtype=dtype).masked_fill(~mask, float("-inf"))
    with torch.no_grad():
        times = timed(lambda: torch.ops.zentorch.zentorch_sdpa(q, k, v, 0.0, bool(causal) and zmask is None,
                                                               attn_mask=zmask))
    ran = str(dtype).replace("torch.", "")
else:
    import openvino as ov
    import openvino.opset13 as ops

    if kvh != h:
        k, v = k.repeat_interleave(h // kvh, dim=1), v.repeat_interleave(h // kvh, dim=1)
    pq, pk, pv = (ops.parameter([b, h, n, dk], ov.Type.f32) for n in (sq, skv, skv))
    args = [pq, pk, pv]
    if mask is not None:
        args.append(ops.constant(mask.numpy()))
    node = ops.scaled_dot_product_attention(*args, causal=bool(causal) and mask is None)
    model = ov.Model([node], [pq, pk, pv])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": prec,
                                                     "INFERENCE_NUM_THREADS": str(threads),
                                                     "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    inputs = [q.numpy(), k.numpy(), v.numpy()]
    times = timed(lambda: request.infer(inputs))
    ran = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1], "precision": ran}))
