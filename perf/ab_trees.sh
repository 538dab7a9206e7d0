#!/usr/bin/env bash
# ab_trees.sh — two built trees of mha (say, a refactor and the commit before it) timed on the
# same workloads in alternating rounds, so both see the machine's noise alike: the forward
# (bert-base-512 f32 and bf16), the attention core (causal 2048, GQA 32/8, d_k 128, f32 and
# bf16) and decode steps (llama3-8b's layer, 16 sequences at context 2048, f32, bf16 and an
# int8 cache). Per workload: the median of each tree's per-round medians, and B/A's median with
# its min–max over rounds (each round's B over the same round's A).
# usage: perf/ab_trees.sh TREE_A TREE_B [ROUNDS (5)] [THREADS (2)]
# Each tree must have been built (make all); perf/decode_step.c is built here from each tree.
set -euo pipefail
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd) rounds=${3:-5} threads=${4:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in "$a" "$b"; do
  make -C "$t" --no-print-directory build/decode_step >/dev/null
done

cat > "$tmp/core.yaml" <<EOF
name: "causal 2048, GQA 32/8, d_k 128"
model: { d_model: 16, heads: 32, kv_heads: 8, head_dim: 128, bias: false }
batch: { size: 1, seq_len: 2048, kv_len: 2048, mask: causal }
threads: { count: $threads }
run: { warmup: 1, iters: 3, seed: 42 }
EOF

# name | how to get one median in ms from tree $1
workloads=(
  "forward bert-base-512 f32|run $a/configs/bert-base-512.yaml --iters 5 --threads $threads"
  "forward bert-base-512 bf16|run $a/configs/bert-base-512.yaml --iters 5 --threads $threads --precision bf16"
  "core causal 2048 f32|run $tmp/core.yaml --core"
  "core causal 2048 bf16|run $tmp/core.yaml --core --precision bf16"
  "decode f32|step f32 8 2048 20 $threads 16"
  "decode bf16|step bf16 8 2048 20 $threads 16"
  "decode int8 cache (f32)|step f32 8 2048 20 $threads 16 auto int8"
)

one() { # tree, spec: prints the median ms
  local tree=$1 kind=${2%% *} args=${2#* }
  if [ "$kind" = run ]; then
    # shellcheck disable=SC2086
    "$tree/build/mha" run $args --json --check 0 | sed -n 's/.*"median_ms":\([0-9.e+-]*\).*/\1/p'
  else
    # shellcheck disable=SC2086
    "$tree/build/decode_step" $args | sed -n 's/.*: median \([0-9.]*\) ms.*/\1/p'
  fi
}

med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

echo "A: $a ($(git -C "$a" rev-parse --short HEAD))  B: $b ($(git -C "$b" rev-parse --short HEAD)); $rounds rounds, $threads threads"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p')"
printf '%-28s %12s %12s %24s\n' workload "A ms" "B ms" "B/A median (min–max)"
for w in "${workloads[@]}"; do
  name=${w%%|*} spec=${w#*|}
  ta=() tb=() ratio=()
  for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then x=$(one "$a" "$spec"); y=$(one "$b" "$spec"); else y=$(one "$b" "$spec"); x=$(one "$a" "$spec"); fi
    ta+=("$x") tb+=("$y") ratio+=("$(awk -v x="$x" -v y="$y" 'BEGIN {printf "%.4f", y / x}')")
  done
  lo=$(printf '%s\n' "${ratio[@]}" | sort -g | head -1) hi=$(printf '%s\n' "${ratio[@]}" | sort -g | tail -1)
  printf '%-28s %12s %12s %24s\n' "$name" "$(med "${ta[@]}")" "$(med "${tb[@]}")" "$(med "${ratio[@]}") ($lo–$hi)"
done
