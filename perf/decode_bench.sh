#!/bin/sh
# decode_bench.sh — `make decode-bench`: a Llama-3-8B-shaped decode step (d 4096, 32 heads over
# 8 KV heads of 128, llama3 RoPE; 16 sequences with 2048 cached tokens, one new token each) in
# mha (configs/llama3-8b-decode.yaml) and in PyTorch (perf/peers/torch_decode.py: HF-style
# layer over a static cache tensor), alternating for ROUNDS rounds next to the machine's read
# bandwidth (perf/bandwidth.c), 2 threads. A step moves the weights and the cache once:
# bytes = 4·(2·d² + 2·d·kvh·dk) + 4·2·seqs·kvh·(context + k)·dk.
# usage: perf/decode_bench.sh BUILD_DIR [ROUNDS]
set -eu
B=$1
ROUNDS=${2:-3}
PY=/usr/bin/python3
bytes=$(awk 'BEGIN { d = 4096; kvd = 1024; s = 16; ctx = 2048 + 16; printf "%.0f", 4 * (2 * d * d + 2 * d * kvd) + 4 * 2 * s * kvd * ctx }')
echo "decode step, llama3-8b shape, 16 sequences × 2048 cached tokens, 2 threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "bytes moved per step: $bytes"
for r in $(seq "$ROUNDS"); do
  bw=$("$B/bandwidth" 2 | awk '{print $2}')
  mha=$("$B/mha" run configs/llama3-8b-decode.yaml --json --check 0 | sed -n 's/.*"step_median_ms":\([0-9.e+-]*\).*"step_p99_ms":\([0-9.e+-]*\).*/\1 \2/p')
  if $PY -c 'import torch' 2>/dev/null; then
    torch=$($PY perf/peers/torch_decode.py 4096 32 8 16 2048 32 2 | sed -n 's/.*"median_ms": \([0-9.e+-]*\).*/\1/p')
  else
    torch="n/a"
  fi
  set -- $mha
  awk -v r="$r" -v bw="$bw" -v m="$1" -v p99="$2" -v t="$torch" -v b="$bytes" 'BEGIN {
    gbs = b / (m / 1e3) / 1e9
    printf "round %d: read bandwidth %.1f GB/s; mha step median %.2f ms (p99 %.2f), %.1f GB/s = %.0f%% of it; PyTorch %s ms", r, bw, m, p99, gbs, 100 * gbs / bw, t
    if (t != "n/a") printf " (%.1f× mha)", t / m
    printf "\n" }'
done
