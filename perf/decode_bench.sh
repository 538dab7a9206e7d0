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
# PART mla (or all, the default): DeepSeek-V3's MLA layer (issue 34), alternating in each round:
# mha's decode step through the latent cache (perf/decode_step.c, 16 sequences × 4096 cached,
# one new token each; f32, and bf16 weights and cache), its attention phase (the step less a
# step at context 1: the projections alone) against vLLM's two CPU MLA decode ops on the same
# work (perf/peers/mla_decode.py, from perf/.venv-vllm: make bench-core installs it; n/a
# without), as GFLOP/s and shares of the machine's loops (build/ceiling 2); then a 2048-token
# causal prefill of the layer (mha run on configs/deepseek-v3-attn.yaml at seq_len 2048).
# usage: perf/decode_bench.sh BUILD_DIR [ROUNDS] [ISA] [all|llama|mla]
set -eu
B=$1
ROUNDS=${2:-3}
ISA=${3:-auto}
PART=${4:-all}
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
llama_part() {
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
}

# The MLA step's bytes: the weights (q_a, q_b, kv_a, kv_b, o: 187,432,960 elements) and each
# cached token's latent row (576: K, and V its first 512 from the same lines).
mla_bytes() { awk -v e="$1" 'BEGIN { printf "%.0f", e * (187432960 + 16 * 4096 * 576) }'; }
mla_part() {
  loops=$("$B/ceiling" 2)
  loop() { printf '%s\n' "$loops" | awk -v k="$1" '$1 == k && $2 == 2 { print $3 }'; }
  fma=$(loop avx512); [ -n "$fma" ] || fma=$(loop avx2)
  dp=$(loop avx512_bf16); amx=$(loop amx_bf16)
  flop=$(awk 'BEGIN { printf "%.0f", 2 * 16 * 128 * 4096 * (576 + 512) }')
  vpy=perf/.venv-vllm/bin/python
  echo "MLA decode step, DeepSeek-V3 layer (d 7168, 128 heads, latent 512 + rope 64), 16 sequences × 4096 cached, 2 threads; mha isa $isa"
  echo "loops (2 threads, GFLOP/s): FMA ${fma:-n/a}, vdpbf16ps ${dp:-n/a}, AMX tdpbf16ps ${amx:-n/a}; attention phase $flop FLOP; bytes per step: f32 $(mla_bytes 4), bf16 $(mla_bytes 2)"
  for r in $(seq "$ROUNDS"); do
    for prec in f32 bf16; do
      step=$("$B/decode_step" "$prec" mla 4096 10 2 16 "$isa")
      proj=$("$B/decode_step" "$prec" mla 1 10 2 16 "$isa")
      peer() { # OP: the op's median ms, or n/a
        if [ -x "$vpy" ] && { [ "$prec" = bf16 ] || [ "$1" = vllm ]; }; then
          "$vpy" perf/peers/mla_decode.py 16 4096 128 2 5 1 "$prec" "$1" 2>/dev/null |
            sed -n 's/.*"median_ms": \([0-9.e+-]*\).*/\1/p' | awk '{ printf "%.1f\n", $1 }' | grep . || echo n/a
        else echo n/a; fi
      }
      vl=$(peer vllm); sg=$(peer sglang)
      awk -v r="$r" -v p="$prec" -v s="$step" -v pr="$proj" -v vl="$vl" -v sg="$sg" -v f="$flop" -v fma="$fma" \
          -v dp="$dp" -v amx="$amx" -v b="$(mla_bytes $([ "$prec" = bf16 ] && echo 2 || echo 4))" 'BEGIN {
        kernel = s; sub(/.*, isa [^ ]* \(/, "", kernel); sub(/\).*/, "", kernel); ms = s; sub(/.*median /, "", ms); ms += 0
        spread = s; sub(/.*\(min /, "", spread); sub(/\).*/, "", spread)
        pm = pr; sub(/.*median /, "", pm); pm += 0
        at = ms - pm; g = f / at / 1e6
        printf "round %d %s: mha (%s) step median %.1f ms (min %s), %.1f GB/s; projections alone %.1f ms; attention phase %.1f ms = %.0f GFLOP/s", r, p, kernel, ms, spread, b / ms / 1e6, pm, at, g
        if (p == "f32" && fma) printf " (%.0f%% of the FMA loop)", 100 * g / fma
        if (p == "bf16" && dp) printf " (%.0f%% of the vdpbf16ps loop", 100 * g / dp
        if (p == "bf16" && amx) printf ", %.0f%% of the AMX loop", 100 * g / amx
        if (p == "bf16" && dp) printf ")"
        printf "; vLLM mla_decode_kvcache %s", vl; if (vl != "n/a") printf " ms (%.2f× mha)", vl / at
        if (p == "bf16") { printf "; SGLang decode_attention_cpu %s", sg; if (sg != "n/a") printf " ms (%.2f× mha)", sg / at }
        printf "\n" }'
    done
  done
  cfg=$(mktemp /tmp/mla-prefill-XXXXXX.yaml)
  sed 's/seq_len: 512/seq_len: 2048/; s/warmup: 1, iters: 3/warmup: 1, iters: 2/' configs/deepseek-v3-attn.yaml >"$cfg"
  for r in $(seq "$ROUNDS"); do
    for prec in f32 bf16; do
      "$B/mha" run "$cfg" --json --check 0 --precision "$prec" --isa "$isa" |
        sed -n 's/.*"kernel":"\([^"]*\)".*"median_ms":\([0-9.e+-]*\).*"gflops":\([0-9.e+-]*\).*/\1 \2 \3/p' |
        awk -v r="$r" -v p="$prec" -v fma="$fma" -v amx="$amx" '{
          printf "round %d MLA prefill, 1 × 2048 causal, %s: mha (%s) median %.0f ms, %.0f GFLOP/s", r, p, $1, $2, $3
          if (p == "f32" && fma) printf " (%.0f%% of the FMA loop)", 100 * $3 / fma
          if (p == "bf16" && amx) printf " (%.0f%% of the AMX loop)", 100 * $3 / amx
          printf "\n" }'
    done
  done
  rm -f "$cfg"
}

case $PART in
  all) llama_part; mla_part ;;
  llama) llama_part ;;
  mla) mla_part ;;
  *) echo "decode_bench.sh: PART is all, llama or mla, not $PART" >&2; exit 2 ;;
esac
