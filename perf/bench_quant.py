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

Each round runs ggml's cases once and mha's (type, workload) pairs twice: hot, one engine per
type stepped again and again, as test-backend-ops's perf mode repeats one product in a graph
(where the layer's weights fit the last-level cache neither side reads memory), and cold, the
steps going round as many engines as hold --cold MB of weights (600: above this VM's 480 MiB
L3), as a model's layers do, so that each step reads its weights from memory. Which part goes
first alternates between rounds. Per figure: the median of the rounds (min–max). Time per
weight: mha's step over the layer's 41.9M weights; ggml's layer = 2·t(4096×4096) +
2·t(1024×4096) over the same weights. GB/s: the type's own bytes of the layer over that time.
Ratios are taken round by round (a type's step over the bf16 engine's step of the same round;
ggml's time over mha's hot step), then their median and range. The step targets are checked
on the cold steps (the issue states them for steps bound by the weights' bytes), the ggml
targets on the hot ones (like for like with test-backend-ops).

Writes the log to perf/results/bench-quant-HOST-DATETIME.txt.
usage: perf/bench_quant.py [--rounds N (3)] [--threads T (2)] [--steps S (20)] [--iters I (1)]
       [--cold MB (600; 0: no cold steps)] [--qprec bf16|f32] [--activations f32|int16|bf16 (f32)]
       [--types f32,bf16,...] [--no-ggml]
       [--no-14336] [--quiet S (120: before each part, wait up to S s for the CPUs to be 90% idle)]
       [--max-others P (10: a part during which other processes used more than P% of the CPUs is
       dropped from the medians, and logged)]"""
import argparse
import datetime
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

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


def run_mha(args, f, rnd, cold):
    """({(type, work): ms}, {(type, work): reason}, {type: setup line}); cold: the steps only, through
    enough engines for args.cold MB of weights, their works named step1-cold and step8-cold"""
    cmd = [MHA, "--round", str(rnd), "--threads", str(args.threads), "--steps", str(args.steps), "--iters",
           str(0 if cold else args.iters), "--cold", str(args.cold if cold else 0), "--qprec", args.qprec,
           "--types", ",".join(args.types), "--activations", args.activations]
    p = subprocess.run(cmd, capture_output=True, text=True)
    ms, na, setup = {}, {}, {}
    for line in p.stdout.splitlines():
        log(f, line + (" (cold)" if cold else ""))
        kv = dict(re.findall(r"(\w+)=((?<=reason=).*|\S+)", line))
        work = kv.get("work", "") + ("-cold" if cold else "")
        if " setup " in line:
            setup[kv["type"]] = kv
        elif "ms" in kv:
            ms[(kv["type"], work)] = float(kv["ms"])
        elif kv.get("status") == "n/a":
            na[(kv["type"], work)] = kv.get("reason", "")
    if p.returncode != 0:
        log(f, f"bench_quant exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return ms, na, setup


def table(f, title, cols):
    """a markdown table's title, header and rule"""
    log(f, "")
    log(f, title)
    log(f, "| " + " | ".join(cols) + " |")
    log(f, "|" + " --- |" * len(cols))


def cpu_idle(seconds):
    """the CPUs' idle share over the next `seconds`, in %"""
    def ticks():
        with open("/proc/stat") as st:
            v = [int(x) for x in st.readline().split()[1:9]]
        return sum(v), v[3]
    a, i = ticks()
    time.sleep(seconds)
    b, j = ticks()
    return 100.0 * (j - i) / max(1, b - a)


def others_cpu(since=None):
    """a mark, or the share of the CPUs (%) that processes other than this one and its children
    used since the mark: /proc/stat's busy time less our own CPU time"""
    with open("/proc/stat") as st:
        v = [int(x) for x in st.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    own = sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
              for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    mark = ((sum(v) - v[3] - v[4]) / hz, own, time.time())
    if since is None:
        return mark
    busy, mine, wall = (mark[i] - since[i] for i in range(3))
    return max(0.0, 100.0 * (busy - mine) / (wall * (os.cpu_count() or 1)))


def wait_quiet(f, most):
    """waits until the CPUs are 90% idle over 3 s (others share this machine), at most `most` seconds"""
    t0 = time.time()
    while True:
        idle = cpu_idle(3)
        if idle >= 90 or time.time() - t0 >= most:
            log(f, f"{'quiet' if idle >= 90 else 'NOT quiet'}: CPUs {idle:.0f}% idle after {time.time() - t0:.0f} s; "
                   f"load {open('/proc/loadavg').read().strip()}")
            return


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
    ap.add_argument("--cold", type=int, default=600, help="MB of weights the cold steps go through (0: none)")
    ap.add_argument("--qprec", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--activations", choices=("f32", "int16", "bf16"), default="f32",
                    help="what mha's block types multiply (weight_activations): int16, integer products "
                         "on activations rounded per 32 inputs; bf16, the bf16 engine's products on the "
                         "weights dequantized into bf16 (--qprec bf16)")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--no-ggml", action="store_true")
    ap.add_argument("--max-others", type=float, default=10,
                    help="drop a part of a round in which other processes used more than this %% of the CPUs")
    ap.add_argument("--quiet", type=int, default=120,
                    help="before each part, wait up to this many seconds for the CPUs to be 90%% idle (0: not)")
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
        llc = subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True, text=True).stdout.strip()
        log(f, f"bench_quant: {cpu_line()}; L3 {int(llc or 0) >> 20} MiB as the OS reports it")
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        log(f, f"git {rev.stdout.strip()}; {args.rounds} rounds, {args.threads} threads, {args.steps} steps, "
               f"{args.iters} prefill iters, cold steps through {args.cold} MB of engines, block types in a "
               f"{args.qprec} engine on {args.activations} activations; ggml "
               + ("test-backend-ops" if ggml else "n/a (perf/.ggml/test-backend-ops not built)"))
        log(f, f"load average before: {open('/proc/loadavg').read().strip()}")
        rounds, setup = [], {"hot": {}, "cold": {}}
        for r in range(args.rounds):
            g, m, na = {}, {}, {}
            parts = ["ggml", "hot", "cold"] if r % 2 == 0 else ["cold", "hot", "ggml"]
            for part in parts:
                if (part == "ggml" and not ggml) or (part == "cold" and args.cold == 0):
                    continue
                if args.quiet > 0:
                    wait_quiet(f, args.quiet)
                t0 = others_cpu()
                if part == "ggml":
                    pg = run_ggml(args, f, r)
                else:
                    pm, pna, ps = run_mha(args, f, r, part == "cold")
                    setup[part] = ps
                busy = others_cpu(t0)
                keep = busy <= args.max_others
                log(f, f"round {r} {part}: other processes used {busy:.0f}% of the CPUs meanwhile: "
                       + ("kept" if keep else f"dropped (above --max-others {args.max_others:g}%)"))
                if keep and part == "ggml":
                    g = pg
                elif keep:
                    m.update(pm), na.update(pna)
                elif part != "ggml":
                    na.update({k: "disturbed: other processes busy in every round" for k in pm})
            rounds.append((m, g, na))
            log(f, f"load average after round {r}: {open('/proc/loadavg').read().strip()}")
        report(f, args, rounds, setup, ggml)
    print(f"bench_quant.py: wrote {os.path.relpath(path, ROOT)}")


def report(f, args, rounds, setup, ggml):
    works = ("step1", "step8", "prefill", "step1-cold", "step8-cold")
    med = {(t, w): stat([m.get((t, w)) for m, _, _ in rounds]) for t in args.types for w in works}
    # over the bf16 engine's, round by round
    ratio = {(t, w): stat([m[(t, w)] / m[("bf16", w)] for m, _, _ in rounds if (t, w) in m and ("bf16", w) in m])
             for t in args.types for w in works}
    reason = {}
    for _, _, na in rounds:
        reason.update(na)
    # ggml's layer (n = 1; n = 8) over mha's step (1 row; 8 rows; one engine, as test-backend-ops), round by round
    over = {(t, w): stat([layer_us(g, GGML_NAME[t].lower(), n) / 1e3 / m[(t, w)] for m, g, _ in rounds
                          if layer_us(g, GGML_NAME[t].lower(), n) is not None and (t, w) in m])
            for t in args.types for w, n in (("step1", 1), ("step8", 8))}

    def cell(t, w, gbs=False):
        if med[(t, w)] is None:
            return f"n/a ({reason.get((t, w), 'not run')})"
        out = fmt(med[(t, w)])
        if gbs:
            out += f", {BYTES_PER_WEIGHT[t] * N_WEIGHTS / med[(t, w)][0] / 1e6:.1f} GB/s"
        return out

    cold = setup["cold"]
    table(f, "mha, llama3-8b's attention layer, ms (medians of the rounds, min–max; GB/s: the type's bytes over the "
             "median; / bf16: over the bf16 engine's, round by round). hot: one engine stepped again and again; "
             f"cold: the steps go round engines holding {args.cold} MB of weights or more",
          ["type", "engine", "held MB", "err vs f32", "step1 hot", "step1 cold", "cold / bf16", "step8 hot",
           "step8 cold", "cold / bf16", "prefill 2048", "/ bf16"])
    for t in args.types:
        s = setup["hot"].get(t, {})
        if med[(t, "step1")] is None and med[(t, "step1-cold")] is None:
            why = reason.get((t, "step1"), s.get("reason", "not run"))
            log(f, f"| {t} | {s.get('precision', '?')} | — | — | n/a ({why}) | | | | | | | |")
            continue
        layers = cold.get(t, {}).get("layers", "?")
        log(f, f"| {t} | {s.get('precision', '?')} {s.get('kernel', '')} | {int(s.get('held', 0)) / 1e6:.1f} | "
               f"{s.get('err', '?')} | {cell(t, 'step1', True)} | {cell(t, 'step1-cold', True)} ({layers} engines) | "
               f"{fmt(ratio[(t, 'step1-cold')])} | {cell(t, 'step8')} | {cell(t, 'step8-cold')} | "
               f"{fmt(ratio[(t, 'step8-cold')])} | {cell(t, 'prefill')} | {fmt(ratio[(t, 'prefill')])} |")
    log(f, "hot steps over the bf16 engine's: " + "; ".join(
        f"{t} step1 {fmt(ratio[(t, 'step1')])}, step8 {fmt(ratio[(t, 'step8')])}" for t in args.types
        if t != "bf16" and ratio[(t, "step1")]))

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

        table(f, "The same products, time per weight: mha's hot step (1 row; 8 rows) against ggml's layer (n = 1; "
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
    log(f, "Issue 64 item 4's targets (steps: the cold figures, weights from memory):")
    checks = [(t, "step1-cold", STEP1_MAX[t], "bf16") for t in args.types if t in STEP1_MAX]
    checks += [(t, "step8-cold", STEP8_MAX[t], "bf16") for t in args.types if t in STEP8_MAX]
    checks += [(t, "prefill", PREFILL_MAX, "bf16") for t in args.types if t not in ("f32", "bf16")]
    if ggml:
        checks += [(t, w, GGML_OVER_MHA_MIN[t], "ggml") for t in args.types if t in GGML_OVER_MHA_MIN
                   for w in ("step1", "step8")]
    for t, w, lim, kind in checks:
        r = over[(t, w)] if kind == "ggml" else ratio[(t, w)]
        what = f"ggml's layer n={w[4]} / mha {w} (hot), time per weight, ≥ {lim}" if kind == "ggml" \
            else f"{w} / the bf16 engine's, ≤ {lim}"
        if r is None:
            verdict = f"n/a ({reason.get((t, w), 'not measured')})"
        else:
            ok = r[0] >= lim if kind == "ggml" else r[0] <= lim
            verdict = ("met" if ok else "not met") + f" (median {r[0]:.3f}, {r[1]:.3f}–{r[2]:.3f})"
        log(f, f"- {t} {what}: {verdict}")


if __name__ == "__main__":
    main()
