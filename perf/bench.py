#!/usr/bin/python3
"""make bench — mha against its peers on a fixed matrix of shapes, in one run.

For every shape, rounds alternate mha and each installed peer (so they share the machine's
noise): PyTorch nn.MultiheadAttention at its default setup, with BLIS held to the sub-config
mha's table runs (BLIS_ARCH_TYPE: skx on avx512, haswell or zen3 on avx2; never skx where the
CPU lacks AVX-512, which would be SIGILL) and with that plus glibc keeping freed memory
(GLIBC_TUNABLES); the reference numpy class as written (float64) and in float32 on
the shapes where it finishes in seconds. bf16: mha --precision bf16, PyTorch 1.13's module
converted to bf16; from perf/.venv (make bench PEERS=1) PyTorch 2.x's
scaled_dot_product_attention layer (perf/peers/sdpa_layer.py) and OpenVINO's CPU plugin
running that layer converted (perf/peers/openvino_mha.py), and from perf/.venv-zentorch (make
bench-core installs it) that layer compiled by torch.compile(backend="zentorch") (AMD's compiled
layer; on a CPU without AVX-512 zentorch leaves it to PyTorch's inductor), each in float32 and
bf16. Machine ceilings: the FMA loop (build/ceiling) and
one large BLIS sgemm with mha's kernel (build/sgemm_ceiling); where the CPU has AMX, the
tdpbf16ps loop (build/ceiling) and each bf16 row's share of it. Prints a table and writes it
to perf/results/bench-HOST-DATETIME.csv. A missing peer gets "n/a" in its columns; the driver
never fails for that. GFLOP/s: 8·B·S·d² + 4·B·S²·d, only unmasked work for causal/ragged.
--isa NAME runs mha on that kernel table (make bench ISA=avx2) and holds the peers to it where
they can be: PyTorch 2.x by ATEN_CPU_CAPABILITY (its own kernels) with MKL_ENABLE_INSTRUCTIONS
and ONEDNN_MAX_CPU_ISA (its GEMMs), PyTorch 1.13 by BLIS_ARCH_TYPE; OpenVINO cannot be, so it is left out of a forced run below the CPU's best.
--shapes t1,t2 runs only the shapes whose names start with those tags.
usage: perf/bench.py [--rounds N] [--quick] [--isa auto|avx512|avx2|ref] [--shapes TAGS]"""
import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
PY = "/usr/bin/python3"
VENV = os.path.join(ROOT, "perf/.venv/bin/python")  # PyTorch 2.x, OpenVINO (make bench PEERS=1)
VENV_ZENTORCH = os.path.join(ROOT, "perf/.venv-zentorch/bin/python")  # zentorch (make bench-core)

# name, d, h, B, S, threads, mask ("none", "causal"), lengths or None, iters
SHAPES = [
    ("t1 bert S=512", 768, 12, 8, 512, 2, "none", None, 5),
    ("t2 bert S=128", 768, 12, 8, 128, 2, "none", None, 10),
    ("t2 bert S=128 1T", 768, 12, 8, 128, 1, "none", None, 10),
    ("t3 B=1 S=2048", 1024, 16, 1, 2048, 2, "none", None, 3),
    ("t4 causal S=512", 768, 12, 8, 512, 2, "causal", None, 5),
    ("t4 ragged half", 768, 12, 8, 512, 2, "none", [512, 64, 448, 128, 384, 192, 320, 0], 5),
    ("t5 long S=8192", 1024, 16, 1, 8192, 2, "none", None, 1),
    ("t6 decode S=1 1T", 256, 4, 1, 1, 1, "none", None, 200),
]


def flops(d, b, s, mask, lengths):
    total = 0.0
    for i in range(b):
        n = lengths[i % len(lengths)] if lengths else s
        attn = n * (n + 1) / 2 if mask == "causal" else n * n
        total += 8.0 * n * d * d + 4.0 * attn * d
    return total


def run_json(cmd, env=None):
    """Runs cmd; returns its last output line parsed as JSON, or None if it failed."""
    e = dict(os.environ)
    e.update(env or {})
    try:
        out = subprocess.run(cmd, capture_output=True, env=e, cwd=ROOT, timeout=1800).stdout
        return json.loads(out.decode().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def mha_config(path, name, d, h, b, s, threads, mask, lengths, iters):
    lines = [f"name: {json.dumps(name)}", f"model: {{ d_model: {d}, heads: {h}, bias: true }}"]
    batch = f"batch: {{ size: {b}, seq_len: {s}, mask: {'padding' if lengths else mask}"
    if lengths:
        batch += f", lengths: [{', '.join(map(str, lengths))}]"
    lines += [batch + " }", f"threads: {{ count: {threads} }}", f"run: {{ warmup: 2, iters: {iters}, seed: 42 }}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def have_module(name, python=PY):
    if not os.path.exists(python):
        return False
    return subprocess.run([python, "-c", f"import {name}"], capture_output=True).returncode == 0


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="only the first two shapes, one round")
    ap.add_argument("--isa", default="auto", help="mha's kernel table (auto, avx512, avx2, ref)")
    ap.add_argument("--shapes", default="", help="comma-separated tags (t1, t2, ...): only those shapes")
    args = ap.parse_args()
    shapes = SHAPES[:2] if args.quick else SHAPES
    if args.shapes:
        tags = args.shapes.split(",")
        shapes = [sh for sh in shapes if sh[0].split()[0] in tags]
        if not shapes:
            ap.error(f"--shapes {args.shapes}: no shape has those tags ({', '.join(sorted({sh[0].split()[0] for sh in SHAPES}))})")
    rounds = 1 if args.quick else args.rounds
    torch_ok, numpy_ok = have_module("torch"), have_module("numpy")
    torch2_ok, ov_ok = have_module("torch", VENV), have_module("openvino", VENV)
    zen_ok = have_module("zentorch", VENV_ZENTORCH)
    # the table mha runs, and what it means for the peers
    probe = run_json([os.path.join(BUILD, "mha"), "run", "--json", "--iters", "1", "--warmup", "0", "--check", "0",
                      "--isa", args.isa]) or {}
    isa, arch = probe.get("isa", "n/a"), probe.get("blis_arch", "n/a")
    auto = (run_json([os.path.join(BUILD, "mha"), "run", "--json", "--iters", "1", "--warmup", "0", "--check", "0"])
            or {}).get("isa")
    forced = isa != auto  # a table below the CPU's best: hold the peers to it
    blis_ids = {"skx": "0", "haswell": "3", "zen3": "6", "zen2": "7", "zen": "8"}  # BLIS 0.9's arch_t
    # ATen's own kernels by ATEN_CPU_CAPABILITY; its GEMMs run in MKL and oneDNN, held by theirs
    peer_isa = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
                "ref": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                        "ONEDNN_MAX_CPU_ISA": "SSE41"}}.get(isa, {}) if forced else {}
    if forced:
        ov_ok = False

    ceil = [l.split() for l in subprocess.run([os.path.join(BUILD, "ceiling"), "2"], capture_output=True,
                                              text=True).stdout.splitlines()]
    loops = {}
    for l in ceil:
        if l and l[0] in ("avx512", "avx2") and l[1].isdigit():
            loops.setdefault(l[0], {})[int(l[1])] = float(l[2])
    amx = {int(l[1]): float(l[2]) for l in ceil if len(l) > 2 and l[0] == "amx_bf16" and l[1].isdigit()}
    sg = {}
    for t in (1, 2):
        r = subprocess.run([os.path.join(BUILD, "sgemm_ceiling"), "2048", str(t)], capture_output=True, text=True).stdout.split()
        sg[t] = float(r[2]) if r else None
    fma = loops.get("avx2" if isa in ("avx2", "ref") else "avx512") or loops.get("avx2", {})  # the table's loop
    print(f"machine: {platform.node()}, FMA peak {fma} GFLOP/s by threads ({'AVX2' if isa in ('avx2', 'ref') else 'widest'} "
          f"FMA loop, the isa's ceiling); AMX tdpbf16ps loop "
          f"{amx or 'n/a (no AMX here)'}; BLIS sgemm 2048³ {sg} GFLOP/s")
    print(f"mha: isa {isa} (BLIS {arch}){' forced below the CPU auto ' + str(auto) if forced else ''}; PyTorch 2.x "
          f"{' '.join(k + '=' + v for k, v in peer_isa.items()) if peer_isa else 'at its default ISA'}; PyTorch 1.13 BLIS "
          f"{arch if arch in blis_ids else 'default only'}{'; OpenVINO left out (no way to hold it to ' + isa + ')' if forced else ''}")
    print(f"peers: torch {'yes' if torch_ok else 'n/a (install python3-torch: make bench PEERS=1)'}, "
          f"numpy {'yes' if numpy_ok else 'n/a'}, perf/.venv: PyTorch 2.x {'yes' if torch2_ok else 'n/a'}, "
          f"OpenVINO {'yes' if ov_ok else 'n/a'} (make bench PEERS=1), zentorch's compiled layer "
          f"{'yes' if zen_ok else 'n/a'} (perf/.venv-zentorch: make bench-core)")

    setups = {} if forced else {"torch default": {}}  # BLIS's own choice may be wider than the table
    if arch in blis_ids:
        setups[f"torch {arch}"] = {"BLIS_ARCH_TYPE": blis_ids[arch]}
        setups[f"torch {arch}+tunables"] = {"BLIS_ARCH_TYPE": blis_ids[arch], "GLIBC_TUNABLES":
                                            "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"}
    rows = []
    tmp = tempfile.mkdtemp(prefix="mha-bench-")
    for name, d, h, b, s, t, mask, lengths, iters in shapes:
        cfg = os.path.join(tmp, "shape.yaml")
        mha_config(cfg, name, d, h, b, s, t, mask, lengths, iters)
        fl = flops(d, b, s, mask, lengths)
        res = {"mha": []}
        rss = None
        thr = {"OMP_NUM_THREADS": str(t), "BLIS_NUM_THREADS": str(t)}
        for r in range(rounds):
            out = run_json([os.path.join(BUILD, "mha"), "run", cfg, "--json", "--check", "0", "--isa", args.isa])
            if out:
                res["mha"].append(out["median_ms"])
                rss = out.get("peak_rss_mb", rss)
                res.setdefault("mha min", []).append(out["min_ms"])
                res.setdefault("mha max", []).append(out["max_ms"])
            o = run_json([os.path.join(BUILD, "mha"), "run", cfg, "--json", "--check", "0", "--precision", "bf16",
                          "--isa", args.isa])
            res.setdefault("mha bf16", []).append(o["median_ms"] if o else None)
            kernel_bf16 = o["kernel"] if o else "n/a"
            if s <= 2048:  # S=8192: PyTorch would hold a 4 GiB score tensor
                cmd = [PY, os.path.join(ROOT, "perf/peers/torch_mha.py"), str(d), str(h), str(b), str(s), str(t),
                       str(max(1, min(iters, 5))), "1", "1" if mask == "causal" else "0",
                       ",".join(map(str, lengths)) if lengths else "-"]
                for setup, env in setups.items() if torch_ok else ():
                    o = run_json(cmd, dict(thr, **env))
                    res.setdefault(setup, []).append(o["median_ms"] if o else None)
                if torch_ok:
                    o = run_json(cmd + ["bf16"], dict(thr, **peer_isa))  # the module in bf16 (oneDNN: held)
                    res.setdefault("torch bf16", []).append(o["median_ms"] if o else None)
                for prec in ("f32", "bf16"):  # perf/.venv's peers, each in both precisions
                    if torch2_ok:
                        o = run_json([VENV] + cmd[1:] + [prec, "sdpa"], dict(thr, **peer_isa))
                        res.setdefault(f"torch2 sdpa {prec}", []).append(o["median_ms"] if o else None)
                    if ov_ok:
                        o = run_json([VENV, os.path.join(ROOT, "perf/peers/openvino_mha.py")] + cmd[2:] + [prec], thr)
                        res.setdefault(f"openvino {prec}", []).append(o["median_ms"] if o else None)
                    if zen_ok:
                        o = run_json([VENV_ZENTORCH] + cmd[1:] + [prec, "zentorch"], dict(thr, **peer_isa))
                        res.setdefault(f"zentorch {prec}", []).append(o["median_ms"] if o else None)
            if numpy_ok and fl <= 6e9 and r == 0:
                for dt in ("float64", "float32"):
                    o = run_json([PY, os.path.join(ROOT, "perf/peers/numpy_mha.py"), str(d), str(h), str(b), str(s),
                                     dt, "1", "1" if mask == "causal" else "0"], thr)
                    res.setdefault(f"numpy {dt}", []).append(o["median_ms"] if o else None)
        m = median(res["mha"])
        peak = fma.get(t)
        row = {"shape": name, "isa": isa, "blis_arch": arch, "d": d, "heads": h, "batch": b, "seq": s, "threads": t, "mask": "padding" if lengths else mask,
               "mha_median_ms": m, "mha_min_ms": min(res.get("mha min", [0]) or [0]),
               "mha_max_ms": max(res.get("mha max", [0]) or [0]),
               "gflops": fl / (m * 1e6) if m else None, "pct_fma_peak": 100 * fl / (m * 1e6) / peak if m and peak else None,
               "peak_rss_mb": rss}
        mb = median([v for v in res.get("mha bf16", []) if v])
        row["mha_bf16_ms"], row["bf16_kernel"] = mb, kernel_bf16
        row["mha f32 / bf16"] = m / mb if m and mb else None
        row["bf16 pct_amx_peak"] = 100 * fl / (mb * 1e6) / amx[t] if mb and amx.get(t) and kernel_bf16 == "amx-bf16" else None
        best = best16 = None
        for peer in list(setups) + ["torch2 sdpa f32", "openvino f32", "zentorch f32", "numpy float64", "numpy float32"]:
            v = median(res.get(peer, []))
            row[f"{peer} ms"] = v
            row[f"{peer} / mha"] = v / m if v and m else None
            if not peer.startswith("numpy") and v:
                best = v if best is None else min(best, v)
        for peer in ("torch bf16", "torch2 sdpa bf16", "openvino bf16", "zentorch bf16"):  # against mha in bf16
            v = median(res.get(peer, []))
            row[f"{peer} ms"] = v
            row[f"{peer} / mha bf16"] = v / mb if v and mb else None
            if v:
                best16 = v if best16 is None else min(best16, v)
        row["peer best / mha"] = best / m if best and m else None
        row["bf16 peer best / mha bf16"] = best16 / mb if best16 and mb else None
        rows.append(row)
        fmt = lambda v, f="{:.3f}": "n/a" if v is None else f.format(v)
        print(f"{name:18s} mha {fmt(m)} ms ({fmt(row['mha_min_ms'])}–{fmt(row['mha_max_ms'])}) "
              f"{fmt(row['gflops'], '{:.1f}')} GFLOP/s {fmt(row['pct_fma_peak'], '{:.0f}')}% of peak, "
              f"best peer {fmt(best)} ms = {fmt(row['peer best / mha'], '{:.2f}')}× mha "
              f"(torch2 sdpa {fmt(row.get('torch2 sdpa f32 ms'))}, openvino {fmt(row.get('openvino f32 ms'))}, "
              f"zentorch {fmt(row.get('zentorch f32 ms'))}), "
              f"numpy64 {fmt(row.get('numpy float64 ms'))} ms, RSS {fmt(rss, '{:.0f}')} MiB; "
              f"bf16: mha {fmt(mb)} ms on {kernel_bf16} ({fmt(row['mha f32 / bf16'], '{:.2f}')}× f32, "
              f"{fmt(row['bf16 pct_amx_peak'], '{:.0f}')}% of the AMX loop), "
              f"best bf16 peer {fmt(best16)} ms = {fmt(row['bf16 peer best / mha bf16'], '{:.2f}')}× mha bf16 "
              f"(torch 1.13 {fmt(row.get('torch bf16 ms'))}, torch2 sdpa {fmt(row.get('torch2 sdpa bf16 ms'))}, "
              f"openvino {fmt(row.get('openvino bf16 ms'))}, zentorch {fmt(row.get('zentorch bf16 ms'))})", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(ROOT, "perf/results"), exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M")  # a later run never overwrites one
    path = os.path.join(ROOT, "perf/results", f"bench-{platform.node()}-{stamp}.csv")
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows({k: "n/a" if v is None else v for k, v in r.items()} for r in rows)
    os.replace(path + ".tmp", path)
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
