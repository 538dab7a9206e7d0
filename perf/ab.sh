#!/usr/bin/env bash
# ab.sh — compare two mha builds on one config, alternating, so that both see the same noise.
# usage: perf/ab.sh BIN_A BIN_B CONFIG [ROUNDS] [extra mha run options]
# Prints each round's medians and, at the end, the median of each build's medians and B/A.
set -euo pipefail
a=$1 b=$2 cfg=$3 rounds=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
ms() { local bin=$1; shift; "$bin" run "$cfg" --json --check 0 "$@" | sed -n 's/.*"\(step_\)\{0,1\}median_ms":\([0-9.e+-]*\).*/\2/p'; }
ta=() tb=()
for r in $(seq "$rounds"); do
  x=$(ms "$a" "$@"); y=$(ms "$b" "$@")
  ta+=("$x"); tb+=("$y")
  echo "round $r: A $x ms, B $y ms"
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
ma=$(med "${ta[@]}"); mb=$(med "${tb[@]}")
echo "median of medians: A $ma ms, B $mb ms, B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b/a}')"
