#!/bin/sh
# decode_bench.sh — `make decode-bench`: a Llama-3-8B-shaped decode step (d 4096, 32 heads over
# 8 KV heads of 128, llama3 RoPE; 16 sequences with 2048 cached tokens, one new token each) in
# mha (configs/llama3-8b-decode.yaml) and in PyTorch (perf/peers/torch_decode.py: HF-style
# layer over a static cache tensor; Debian's 1.13 eager, and PyTorch 2.x from perf/.venv eager
# and with scaled_dot_product_attention, where installed), in float32 and in bf16 (mha: bf16
# weights and KV cache; PyTorch: layers and cache in torch.bfloat16), alternating for ROUNDS
# rounds next to the machine's read bandwidth (perf/bandwidth.c), 2 threads. A step moves the
# weights and the cache once: bytes = E·(2·d² + 2·d·kvh·dk) + E·2·seqs·kvh·(context + k)·dk,
# E = 4 bytes (f32) or 2 (bf16).
# usage: perf/decode_bench.sh BUILD_DIR [ROUNDS]
set -eu
B=$1
ROUNDS=${2:-3}
PY=/usr/bin/python3
bytes() { awk -v e="$1" 'BEGIN { d = 4096; kvd = 1024; s = 16; ctx = 2048 + 16; printf "%.0f", e * (2 * d * d + 2 * d * kvd) + e * 2 * s * kvd * ctx }'; }
echo "decode step, llama3-8b shape, 16 sequences × 2048 cached tokens, 2 threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "bytes moved per step: f32 $(bytes 4), bf16 $(bytes 2)"
for r in $(seq "$ROUNDS"); do
  bw=$("$B/bandwidth" 2 | awk '{print $2}')
  for prec in f32 bf16; do
    mha=$("$B/mha" run configs/llama3-8b-decode.yaml --json --check 0 --precision "$prec" |
          sed -n 's/.*"kernel":"\([^"]*\)".*"step_median_ms":\([0-9.e+-]*\).*"step_p99_ms":\([0-9.e+-]*\).*/\1 \2 \3/p')
    peer() { # PYTHON MODE: the peer's median step in ms, or n/a
      if [ -x "$1" ] && "$1" -c 'import torch' 2>/dev/null; then
        "$1" perf/peers/torch_decode.py 4096 32 8 16 2048 32 2 "$2" "$prec" | sed -n 's/.*"median_ms": \([0-9.e+-]*\).*/\1/p'
      else echo n/a; fi
    }
    torch=$(peer "$PY" eager)
    torch2=$(peer perf/.venv/bin/python eager)
    sdpa=$(peer perf/.venv/bin/python sdpa)
    set -- $mha
    awk -v r="$r" -v p="$prec" -v k="$1" -v bw="$bw" -v m="$2" -v p99="$3" -v t="$torch" -v t2="$torch2" -v sd="$sdpa" \
        -v b="$(bytes $([ "$prec" = bf16 ] && echo 2 || echo 4))" 'BEGIN {
      gbs = b / (m / 1e3) / 1e9
      printf "round %d %s: read bandwidth %.1f GB/s; mha (%s) step median %.2f ms (p99 %.2f), %.1f GB/s = %.0f%% of it", r, p, bw, k, m, p99, gbs, 100 * gbs / bw
      printf "; PyTorch 1.13 eager %s", t; if (t != "n/a") printf " ms (%.1f× mha)", t / m
      printf "; PyTorch 2.x eager %s", t2; if (t2 != "n/a") printf " ms (%.1f× mha)", t2 / m
      printf "; PyTorch 2.x SDPA %s", sd; if (sd != "n/a") printf " ms (%.2f× mha)", sd / m
      printf "\n" }'
  done
done
