#!/usr/bin/python3
"""OpenVINO's CPU plugin as a peer: sdpa_layer.Layer converted with openvino.convert_model and
compiled for "CPU" with INFERENCE_PRECISION_HINT f32 or bf16 (bf16 runs on AMX or AVX512_BF16
where the CPU has them), INFERENCE_NUM_THREADS and the LATENCY hint. Prints {"median_ms",
"min_ms", "max_ms", "precision"} (the precision the plugin reports it ran).
usage: openvino_mha.py D H B S THREADS ITERS WARMUP CAUSAL LENGTHS(comma list or -) [f32|bf16]"""
import json
import sys
import time

import openvino as ov
import torch

from sdpa_layer import Layer, padding_mask

d, h, b, s, threads, iters, warmup, causal = map(int, sys.argv[1:9])
lengths = None if sys.argv[9] == "-" else [int(x) for x in sys.argv[9].split(",")]
prec = sys.argv[10] if len(sys.argv) > 10 else "f32"
torch.manual_seed(0)
layer = Layer(d, h, causal).eval()
x = torch.rand(b, s, d) * 2 - 1
keep = padding_mask(b, s, lengths)
with torch.no_grad():
    model = ov.convert_model(layer, example_input=(x, keep) if keep is not None else (x,))
core = ov.Core()
compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": prec, "INFERENCE_NUM_THREADS": str(threads),
                                             "PERFORMANCE_HINT": "LATENCY"})
request = compiled.create_infer_request()
inputs = [x.numpy()] + ([keep.numpy()] if keep is not None else [])
times = []
for i in range(warmup + iters):
    t0 = time.perf_counter()
    request.infer(inputs)
    if i >= warmup:
        times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print(json.dumps({"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1],
                  "precision": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}))
