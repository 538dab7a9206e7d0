#!/usr/bin/env bash
# decode_vs_vllm.sh — a decode step's attention phase against vLLM's CPU attention op on the
# same work, alternating round by round: build/decode_step (llama3-8b's layer, 16 sequences at
# context 2048, blocks of 32 slots in order, as perf/peers/vllm_core.py lays out vLLM's paged
# cache) minus its context-1 step (the projections), against vllm_core.py's decode shape
# (16 × 32 heads over 8 KV heads of 128, one query each, 2048 keys). Needs build/decode_step
# (make decode-step) and perf/.venv-vllm (make bench-core installs it).
# usage: perf/decode_vs_vllm.sh [ROUNDS (5)] [f32|bf16]
set -euo pipefail
rounds=${1:-5} prec=${2:-f32}
ms() { grep -o "median [0-9.]*" | cut -d' ' -f2; }
for i in $(seq "$rounds"); do
  a=$(build/decode_step "$prec" 8 2048 20 2 16 auto auto auto 32 in-order | ms)
  c=$(build/decode_step "$prec" 8 1 20 2 16 auto auto auto 32 in-order | ms)
  v=$(perf/.venv-vllm/bin/python perf/peers/vllm_core.py 16 32 8 1 2048 128 1 2 20 3 "$prec" |
      sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p')
  awk -v p="$prec" -v a="$a" -v c="$c" -v v="$v" \
    'BEGIN {printf "%s: step %.2f ms, context 1 %.2f, attention phase %.2f; vLLM op %.2f; vLLM / mha %.2f\n", p, a, c, a - c, v, v / (a - c)}'
done
