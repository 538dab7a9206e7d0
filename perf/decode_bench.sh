#!/bin/sh
# decode_bench.sh — `make decode-bench`: a Llama-3-8B-shaped decode step (d 4096, 32 heads over
# 8 KV heads of 128, llama3 RoPE; 16 sequences with 2048 cached tokens, one new token each) in
# mha (configs/llama3-8b-decode.yaml) and in PyTorch (perf/peers/torch_decode.py: HF-style
# layer over a static cache tensor; Debian's 1.13 eager, and PyTorch 2.x from perf/.venv eager
# and with scaled_dot_product_attention, where installed), in float32 and in bf16 (mha: bf16
# weights and KV cache; PyTorch: layers and cache in torch.bfloat16), alternating for ROUNDS
# rounds next to the machine's read bandwidth (perf/bandwidth.c), 2 threads. A step moves the
# weights and the cache once: bytes = E·(2·d² + 2·d·kvh·dk) + E·2·seqs·kvh·(context + k)·dk,
# E = 4 bytes (f32) or 2 (bf16). Then mha with bf16 weights and an int8 KV cache (its cache
# 1 + 4/128 bytes an element: a float scale per 128), next to the bf16-cache step of the round.
# ISA: mha's kernel table (auto, avx512, avx2, ref); a table below the CPU's best holds PyTorch
# 2.x to it too (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA), like for like.
# usage: perf/decode_bench.sh BUILD_DIR [ROUNDS] [ISA]
set -eu
B=$1
ROUNDS=${2:-3}
ISA=${3:-auto}
table() { "$B/mha" run --json --iters 1 --warmup 0 --check 0 --isa "$1" | sed -n 's/.*"isa":"\([^"]*\)".*/\1/p'; }
isa=$(table "$ISA")
[ -n "$isa" ] || { echo "decode_bench.sh: mha cannot run isa $ISA here" >&2; exit 2; }
HOLD= # PyTorch 2.x held to the table: ATen's own kernels, and its GEMMs in MKL and oneDNN
if [ "$isa" != "$(table auto)" ]; then
  case $isa in
    avx2) HOLD="ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" ;;
    ref) HOLD="ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41" ;;
  esac
fi
PY=/usr/bin/python3
bytes() { awk -v e="$1" 'BEGIN { d = 4096; kvd = 1024; s = 16; ctx = 2048 + 16; printf "%.0f", e * (2 * d * d + 2 * d * kvd) + e * 2 * s * kvd * ctx }'; }
echo "decode step, llama3-8b shape, 16 sequences × 2048 cached tokens, 2 threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); mha isa $isa${HOLD:+, PyTorch 2.x with $HOLD}"
echo "bytes moved per step: f32 $(bytes 4), bf16 $(bytes 2)"
for r in $(seq "$ROUNDS"); do
  bw=$("$B/bandwidth" 2 | awk '{print $2}')
  for prec in f32 bf16; do
    mha=$("$B/mha" run configs/llama3-8b-decode.yaml --json --check 0 --precision "$prec" --isa "$isa" |
          sed -n 's/.*"kernel":"\([^"]*\)".*"step_median_ms":\([0-9.e+-]*\).*"step_p99_ms":\([0-9.e+-]*\).*/\1 \2 \3/p')
    peer() { # PYTHON MODE [ENV]: the peer's median step in ms, or n/a
      if [ -x "$1" ] && "$1" -c 'import torch' 2>/dev/null; then
        env ${3:-} "$1" perf/peers/torch_decode.py 4096 32 8 16 2048 32 2 "$2" "$prec" | sed -n 's/.*"median_ms": \([0-9.e+-]*\).*/\1/p'
      else echo n/a; fi
    }
    torch=$(peer "$PY" eager)
    torch2=$(peer perf/.venv/bin/python eager "$HOLD")
    sdpa=$(peer perf/.venv/bin/python sdpa "$HOLD")
    set -- $mha
    awk -v r="$r" -v p="$prec" -v k="$1" -v bw="$bw" -v m="$2" -v p99="$3" -v t="$torch" -v t2="$torch2" -v sd="$sdpa" \
        -v b="$(bytes $([ "$prec" = bf16 ] && echo 2 || echo 4))" 'BEGIN {
      gbs = b / (m / 1e3) / 1e9
      printf "round %d %s: read bandwidth %.1f GB/s; mha (%s) step median %.2f ms (p99 %.2f), %.1f GB/s = %.0f%% of it", r, p, bw, k, m, p99, gbs, 100 * gbs / bw
      printf "; PyTorch 1.13 eager %s", t; if (t != "n/a") printf " ms (%.1f× mha)", t / m
      printf "; PyTorch 2.x eager %s", t2; if (t2 != "n/a") printf " ms (%.1f× mha)", t2 / m
      printf "; PyTorch 2.x SDPA %s", sd; if (sd != "n/a") printf " ms (%.2f× mha)", sd / m
      printf "\n" }'
    [ "$prec" = bf16 ] && bf16_ms=$2
  done
  i8=$("$B/mha" run configs/llama3-8b-decode.yaml --json --check 0 --precision bf16 --kv-cache int8 --isa "$isa" |
       sed -n 's/.*"step_median_ms":\([0-9.e+-]*\).*"step_p99_ms":\([0-9.e+-]*\).*/\1 \2/p')
  set -- $i8
  awk -v r="$r" -v m="$1" -v p99="$2" -v b16="$bf16_ms" 'BEGIN {
    printf "round %d bf16 weights, int8 cache: mha step median %.2f ms (p99 %.2f), %.2f× the bf16-cache step\n", r, m, p99, m / b16 }'
done
