#!/usr/bin/python3
"""make bench-quant — issue 64's speed targets for quantized weights, mha against ggml in one run.

mha: build/bench_quant (perf/bench_quant.c), llama3-8b's attention layer with each weight type:
a decode step at batch 1 and context 1 (step1), 8 sequences stepping at context 1 (step8), and
a 1 × 2048 causal prefill; f32 and bf16 engines on float weights, the block types quantized at
load (mha_config.weight_type). ggml: llama.cpp's test-backend-ops from llama-cpp-python's
sdist (perf/.ggml/test-backend-ops; make bench-quant builds it), `perf -o MUL_MAT -b CPU` on the
same types at n = 1 and n = 8: the layer's products q and o (m 4096 × k 4096), k and v (1024 ×
4096), and the issue's 4096 × 14336; the Makefile's patch adds the first two shapes to its perf
cases and takes its thread count from GGML_N_THREADS (it would use half the CPUs).

Each round runs ggml's cases once and mha's (type, workload) pairs once, which goes first
alternating between rounds. Per figure: the median of the rounds (min–max). Time per weight:
mha's step over the layer's 41.9M weights; ggml's layer = 2·t(4096×4096) + 2·t(1024×4096) over
the same weights. GB/s: the type's own bytes of the layer over that time. Ratios are taken
round by round (a type's step over the bf16 engine's step of the same round; ggml's time over
mha's), then their median and range. Both sides read the same weights again and again (ggml's
perf mode repeats the product in one graph; mha steps one engine unless --layers): where a
layer's weights fit the last-level cache neither reads memory.

Writes the log to perf/results/bench-quant-HOST-DATETIME.txt.
usage: perf/bench_quant.py [--rounds N (3)] [--threads T (2)] [--steps S (20)] [--iters I (1)]
       [--layers L (1)] [--qprec bf16|f32] [--types f32,bf16,...] [--no-ggml] [--no-14336]"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MHA = os.path.join(ROOT, "build/bench_quant")
GGML = os.path.join(ROOT, "perf/.ggml/test-backend-ops")
TYPES = ["f32", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k"]
GGML_NAME = {"f32": "f32", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1", "q4_k": "q4_K",
             "q6_k": "q6_K"}
BYTES_PER_WEIGHT = {"f32": 4.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
                    "q4_k": 144 / 256, "q6_k": 210 / 256}
N_WEIGHTS = 2 * 4096 * 4096 + 2 * 1024 * 4096  # Wq, Wo; Wk, Wv
# issue 64 item 4: a step's time over the bf16 engine's step (step1; step8 for q4_k), the
# prefill's over the bf16 engine's, ggml's time per weight over mha's
STEP1_MAX = {"q8_0": 0.55, "q4_0": 0.33, "q4_1": 0.33, "q4_k": 0.33}
STEP8_MAX = {"q4_k": 0.5}
PREFILL_MAX = 1.1
GGML_OVER_MHA_MIN = {"q8_0": 1.0, "q4_k": 1.0, "q6_k": 1.0, "q4_0": 1.25, "q4_1": 1.25}
LINE = re.compile(r"MUL_MAT\(type_a=(\w+),type_b=f32,m=(\d+),n=(\d+),k=(\d+),bs=\[1,1\],nr=\[1,1\],.*?"
                  r"(\d+) runs -\s+([\d.]+) us/run")


def log(f, *a):
    s = " ".join(str(x) for x in a)
    print(s)
    f.write(s + "\n")
    f.flush()


def cpu_line():
    info, flags = {}, set()
    with open("/proc/cpuinfo") as c:
        for line in c:
            k, _, v = line.partition(":")
            k = k.strip()
            if k in ("model name", "cpu family", "model") and k not in info:
                info[k] = v.strip()
            elif k == "flags" and not flags:
                flags = set(v.split())
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
           if f in flags]
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model {info.get('model', '?')}), "
            f"{os.cpu_count()} CPUs, {' '.join(isa)}")


def run_ggml(args, f, rnd):
    """{(type, m, n, k): [us, ...]} from one run of test-backend-ops's perf mode"""
    types = "|".join(GGML_NAME[t] for t in args.types)
    ks = "4096" if args.no_14336 else "4096|14336"
    regex = rf"type_a=({types}),type_b=f32,m=(1024|4096),n=(1|8),k=({ks}),bs=\[1,1\],nr=\[1,1\],"
    env = dict(os.environ, GGML_N_THREADS=str(args.threads))
    p = subprocess.run([GGML, "perf", "-o", "MUL_MAT", "-b", "CPU", "-p", regex], env=env,
                       capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        m = LINE.search(line)
        if m:
            t, mm, n, k, runs, us = m.groups()
            if int(mm) == 1024 and int(k) != 4096:
                continue
            key = (t.lower(), int(mm), int(n), int(k))
            out.setdefault(key, []).append(float(us))
            log(f, f"ggml round={rnd} type={t.lower()} m={mm} n={n} k={k} us={us} runs={runs}")
    if p.returncode != 0 or not out:
        log(f, f"ggml round={rnd}: test-backend-ops exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return {k: sum(v) / len(v) for k, v in out.items()}  # a case listed twice (q4_K 4096²): their mean


def run_mha(args, f, rnd):
    """({(type, work): ms}, {(type, work): reason}, {type: setup line})"""
    cmd = [MHA, "--round", str(rnd), "--threads", str(args.threads), "--steps", str(args.steps), "--iters",
           str(args.iters), "--layers", str(args.layers), "--qprec", args.qprec, "--types", ",".join(args.types)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    ms, na, setup = {}, {}, {}
    for line in p.stdout.splitlines():
        log(f, line)
        kv = dict(re.findall(r"(\w+)=((?<=reason=).*|\S+)", line))
        if " setup " in line:
            setup[kv["type"]] = kv
        elif "ms" in kv:
            ms[(kv["type"], kv["work"])] = float(kv["ms"])
        elif kv.get("status") == "n/a":
            na[(kv["type"], kv["work"])] = kv.get("reason", "")
    if p.returncode != 0:
        log(f, f"bench_quant exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return ms, na, setup


def table(f, title, cols):
    """a markdown table's title, header and rule"""
    log(f, "")
    log(f, title)
    log(f, "| " + " | ".join(cols) + " |")
    log(f, "|" + " --- |" * len(cols))


def layer_us(g, gt, n):
    """ggml's time for the layer's four products (q, o: 4096 × 4096; k, v: 1024 × 4096), or None"""
    qo, kv = g.get((gt, 4096, n, 4096)), g.get((gt, 1024, n, 4096))
    return None if qo is None or kv is None else 2 * qo + 2 * kv


def stat(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return statistics.median(xs), min(xs), max(xs)


def fmt(s, digits=3):
    if s is None:
        return "n/a"
    m, lo, hi = s
    g = lambda x: f"{x:.{digits}g}"
    return f"{g(m)} ({g(lo)}–{g(hi)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--qprec", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--no-ggml", action="store_true")
    ap.add_argument("--no-14336", action="store_true", help="leave out ggml's 4096 × 14336 cases")
    args = ap.parse_args()
    args.types = args.types.split(",")
    if any(t not in TYPES for t in args.types):
        sys.exit(f"bench_quant.py: --types takes {','.join(TYPES)}")
    if not os.access(MHA, os.X_OK):
        sys.exit("bench_quant.py: build/bench_quant is not built (make bench-quant builds it)")
    ggml = not args.no_ggml and os.access(GGML, os.X_OK)
    os.makedirs(os.path.join(ROOT, "perf/results"), exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M")
    path = os.path.join(ROOT, f"perf/results/bench-quant-{platform.node() or 'host'}-{stamp}.txt")
    with open(path, "w") as f:
        log(f, f"bench_quant: {cpu_line()}")
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        log(f, f"git {rev.stdout.strip()}; {args.rounds} rounds, {args.threads} threads, {args.steps} steps, "
               f"{args.iters} prefill iters, {args.layers} layers, block types in a {args.qprec} engine; ggml "
               + ("test-backend-ops" if ggml else "n/a (perf/.ggml/test-backend-ops not built)"))
        log(f, f"load average before: {open('/proc/loadavg').read().strip()}")
        rounds = []
        for r in range(args.rounds):
            g = {}
            if ggml and r % 2 == 0:
                g = run_ggml(args, f, r)
            m, na, setup = run_mha(args, f, r)
            if ggml and r % 2 == 1:
                g = run_ggml(args, f, r)
            rounds.append((m, g, na))
            log(f, f"load average after round {r}: {open('/proc/loadavg').read().strip()}")
        report(f, args, rounds, setup, ggml)
    print(f"bench_quant.py: wrote {os.path.relpath(path, ROOT)}")


def report(f, args, rounds, setup, ggml):
    works = ("step1", "step8", "prefill")
    med = {(t, w): stat([m.get((t, w)) for m, _, _ in rounds]) for t in args.types for w in works}
    ratio = {}
    for t in args.types:
        for w in works:
            ratio[(t, w)] = stat([m[(t, w)] / m[("bf16", w)] for m, _, _ in rounds
                                  if (t, w) in m and ("bf16", w) in m])
    reason = {}
    for _, _, na in rounds:
        reason.update(na)
    # ggml's layer (n = 1; n = 8) over mha's step (1 row; 8 rows), round by round
    over = {(t, w): stat([layer_us(g, GGML_NAME[t].lower(), n) / 1e3 / m[(t, w)] for m, g, _ in rounds
                          if layer_us(g, GGML_NAME[t].lower(), n) is not None and (t, w) in m])
            for t in args.types for w, n in (("step1", 1), ("step8", 8))}

    table(f, "mha, llama3-8b's attention layer (medians of the rounds, min–max; ps/weight and GB/s of the medians; "
             "ratios: over the bf16 engine's, round by round)",
          ["type", "engine", "held MB", "err vs f32", "step1 ms", "ps/weight", "GB/s", "step1 / bf16", "step8 ms",
           "step8 / bf16", "prefill 2048 ms", "prefill / bf16"])
    for t in args.types:
        s = setup.get(t, {})
        if med[(t, "step1")] is None:
            why = reason.get((t, "step1"), s.get("reason", "not run"))
            log(f, f"| {t} | {s.get('precision', '?')} | — | — | n/a ({why}) | | | | | | | |")
            continue
        ms1 = med[(t, "step1")][0]
        ps = ms1 * 1e9 / N_WEIGHTS
        gbs = BYTES_PER_WEIGHT[t] * N_WEIGHTS / ms1 / 1e6
        held = int(s.get("held", 0)) / 1e6
        pf = fmt(med[(t, "prefill")]) if med[(t, "prefill")] else \
            f"n/a ({reason.get((t, 'prefill'), 'not run')})"
        log(f, f"| {t} | {s.get('precision', '?')} {s.get('kernel', '')} | {held:.1f} | {s.get('err', '?')} | "
               f"{fmt(med[(t, 'step1')])} | {ps:.1f} | {gbs:.1f} | {fmt(ratio[(t, 'step1')])} | "
               f"{fmt(med[(t, 'step8')])} | {fmt(ratio[(t, 'step8')])} | {pf} | {fmt(ratio[(t, 'prefill')])} |")

    if ggml:
        table(f, "ggml test-backend-ops perf MUL_MAT, µs per product (medians of the rounds, min–max); "
                 "layer = 2·(4096×4096) + 2·(1024×4096)",
              ["type", "n", "4096×4096 µs", "1024×4096 µs", "layer ps/weight", "layer GB/s", "4096×14336 ps/weight",
               "4096×14336 GB/s"])
        for t in args.types:
            gt = GGML_NAME[t].lower()
            for n in (1, 8):
                qo = stat([g.get((gt, 4096, n, 4096)) for _, g, _ in rounds])
                kv = stat([g.get((gt, 1024, n, 4096)) for _, g, _ in rounds])
                lay = stat([layer_us(g, gt, n) for _, g, _ in rounds])
                big = stat([g.get((gt, 4096, n, 14336)) for _, g, _ in rounds])
                lps = f"{lay[0] * 1e6 / N_WEIGHTS:.1f}" if lay else "n/a"
                lgb = f"{BYTES_PER_WEIGHT[t] * N_WEIGHTS / lay[0] / 1e3:.1f}" if lay else "n/a"
                bps = f"{big[0] * 1e6 / (4096 * 14336):.1f}" if big else "n/a"
                bgb = f"{BYTES_PER_WEIGHT[t] * 4096 * 14336 / big[0] / 1e3:.1f}" if big else "n/a"
                log(f, f"| {t} | {n} | {fmt(qo)} | {fmt(kv)} | {lps} | {lgb} | {bps} | {bgb} |")

        table(f, "The same products, time per weight: mha's step (1 row; 8 rows) against ggml's layer (n = 1; "
                 "n = 8), ggml / mha round by round (above 1: mha faster)",
              ["type", "mha step1 ps/weight", "ggml n=1 ps/weight", "ggml / mha", "mha step8 ps/weight",
               "ggml n=8 ps/weight", "ggml / mha", "target"])
        for t in args.types:
            gt = GGML_NAME[t].lower()
            cells = []
            for w, n in (("step1", 1), ("step8", 8)):
                mps = med[(t, w)]
                gl = stat([layer_us(g, gt, n) for _, g, _ in rounds])
                cells += [f"{mps[0] * 1e9 / N_WEIGHTS:.1f}" if mps else "n/a",
                          f"{gl[0] * 1e6 / N_WEIGHTS:.1f}" if gl else "n/a", fmt(over[(t, w)])]
            tgt = f"≥ {GGML_OVER_MHA_MIN[t]}" if t in GGML_OVER_MHA_MIN else "—"
            log(f, f"| {t} | {' | '.join(cells)} | {tgt} |")

    log(f, "")
    log(f, "Issue 64 item 4's targets:")
    checks = [(t, "step1", STEP1_MAX[t]) for t in args.types if t in STEP1_MAX]
    checks += [(t, "step8", STEP8_MAX[t]) for t in args.types if t in STEP8_MAX]
    checks += [(t, "prefill", PREFILL_MAX) for t in args.types if t not in ("f32", "bf16")]
    for t, w, lim in checks:
        r = ratio[(t, w)]
        if r is None:
            verdict = f"n/a ({reason.get((t, w), 'not measured')})"
        else:
            verdict = ("met" if r[0] <= lim else "not met") + f" (median {r[0]:.3f}, {r[1]:.3f}–{r[2]:.3f})"
        log(f, f"- {t} {w} / bf16 engine's ≤ {lim}: {verdict}")
    if ggml:
        for t in args.types:
            if t not in GGML_OVER_MHA_MIN:
                continue
            for w, n in (("step1", 1), ("step8", 8)):
                rr = over[(t, w)]
                lim = GGML_OVER_MHA_MIN[t]
                verdict = f"n/a ({reason.get((t, w), 'not measured')})" if rr is None else \
                    ("met" if rr[0] >= lim else "not met") + f" (median {rr[0]:.3f}, {rr[1]:.3f}–{rr[2]:.3f})"
                log(f, f"- {t} ggml n={n} / mha {w}, time per weight, ≥ {lim}: {verdict}")


if __name__ == "__main__":
    main()
