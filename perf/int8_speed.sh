#!/usr/bin/env bash
# int8_speed.sh — `make int8-speed`: issue 35's speed target for the int8 KV cache, measured as
# it is stated: a decode step with an int8 cache at most 0.75× the step with a bf16 cache, and
# its attention phase at most 0.6× the bf16 cache's, on the machine's best kernel table (auto),
# bf16 weights either way. The shape is make decode-bench's (llama3-8b's layer: 32 heads over 8
# KV heads of 128; SEQS sequences, one new token each, shuffled blocks of 16 slots) through
# perf/decode_step.c; the attention phase is a step at the context less a step at context 1
# (the projections alone), both caches' measured in the same round. Each round runs every
# (context, cache) pair once, the two caches in turn and which goes first alternating between
# rounds, so a noisy spell of a shared machine touches both alike. Prints each run, then per
# context the medians of the rounds' step medians (min–max), the int8 / bf16 ratios of the step
# and the phase (the median of the rounds' ratios, their range) and whether the targets hold.
# The ratio is the machine's: a step that waits on memory favours the int8 cache (0.58× the
# bytes of a bf16 cache's slot), one that waits on its arithmetic does not (perf/RESULTS.md,
# sessions 38–39, on a 2-vCPU Zen 4).
# usage: perf/int8_speed.sh BUILD_DIR [ROUNDS (7)] [THREADS (the CPUs this process may use)]
#                           [CONTEXTS ("2048 8192")] [SEQS (16)] [STEPS (20)]
set -euo pipefail
B=$1
ROUNDS=${2:-7}
THREADS=${3:-$(nproc)}
CONTEXTS=${4:-2048 8192}
SEQS=${5:-16}
STEPS=${6:-20}
STEP_MAX=0.75 PHASE_MAX=0.6
for n in "$ROUNDS" "$THREADS" "$SEQS" "$STEPS" $CONTEXTS; do
  case $n in '' | *[!0-9]* | 0*) echo "int8_speed.sh: '$n' is not a positive integer" >&2; exit 2 ;; esac
done
[ -x "$B/decode_step" ] || { echo "int8_speed.sh: $B/decode_step is not built (make int8-speed builds it)" >&2; exit 2; }

# one run: the median step in ms; the whole line goes to stderr so the log keeps the table,
# isa and kernel each run used
run() { # CONTEXT auto|int8
  local line
  line=$("$B/decode_step" bf16 8 "$1" "$STEPS" "$THREADS" "$SEQS" auto "$2")
  echo "$line" >&2
  printf '%s\n' "$line" | sed -n 's/.*: median \([0-9.]*\) ms.*/\1/p'
}

echo "int8_speed: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs usable;" \
     "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "decode_step bf16 8 CONTEXT $STEPS $THREADS $SEQS auto auto|int8: $ROUNDS rounds, contexts 1 $CONTEXTS"
declare -A ms
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="auto int8"; else order="int8 auto"; fi
  for c in 1 $CONTEXTS; do
    for kv in $order; do
      ms[$r,$c,$kv]=$(run "$c" "$kv")
      [ -n "${ms[$r,$c,$kv]}" ] || { echo "int8_speed.sh: decode_step printed no median (context $c, kv $kv)" >&2; exit 1; }
    done
  done
done 2>&1

# the median of its arguments (numbers), then the lowest and the highest
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s %s", m, v[1], v[NR] }'; }
echo
echo "| context | bf16 cache step, ms | int8 cache step, ms | step int8 / bf16 (≤ $STEP_MAX) | phase int8 / bf16 (≤ $PHASE_MAX) |"
echo "|---|---|---|---|---|"
met=1
for c in $CONTEXTS; do
  b=() i=() sr=() pr=()
  for r in $(seq "$ROUNDS"); do
    b+=("${ms[$r,$c,auto]}") i+=("${ms[$r,$c,int8]}")
    sr+=("$(awk -v x="${ms[$r,$c,int8]}" -v y="${ms[$r,$c,auto]}" 'BEGIN { printf "%.4f", x / y }')")
    pr+=("$(awk -v x="${ms[$r,$c,int8]}" -v x1="${ms[$r,1,int8]}" -v y="${ms[$r,$c,auto]}" -v y1="${ms[$r,1,auto]}" \
            'BEGIN { printf "%.4f", (y > y1 ? (x - x1) / (y - y1) : 1e9) }')")
  done
  # the row; awk's status says whether both targets hold
  awk -v b="$(stats "${b[@]}")" -v i="$(stats "${i[@]}")" -v s="$(stats "${sr[@]}")" -v p="$(stats "${pr[@]}")" \
      -v c="$c" -v smax="$STEP_MAX" -v pmax="$PHASE_MAX" 'BEGIN {
    split(b, B, " "); split(i, I, " "); split(s, S, " "); split(p, P, " ")
    printf "| %d | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) | %.3f (%.3f–%.3f) %s | %.3f (%.3f–%.3f) %s |\n", c, B[1], B[2], B[3],
           I[1], I[2], I[3], S[1], S[2], S[3], S[1] <= smax ? "met" : "**not met**", P[1], P[2], P[3],
           P[1] <= pmax ? "met" : "**not met**"
    exit !(S[1] <= smax && P[1] <= pmax) }' || met=0
done
echo
if [ "$met" = 1 ]; then echo "int8_speed: issue 35's speed target met at every context"
else echo "int8_speed: issue 35's speed target not met (the medians of the rounds' ratios above)"; fi
