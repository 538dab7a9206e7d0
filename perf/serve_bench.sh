#!/bin/sh
# serve_bench.sh — `make serve-bench`: the two ways to split 2 CPUs in a server (1 worker ×
# 2 OpenMP threads, 2 workers × 1 thread), each with libgomp's default and passive waiting,
# at one offered load: 90% of the lower of the two splits' closed-loop capacities; then the
# 1 × 2 split at 20% of that load, where workers are mostly idle, with both wait policies.
# usage: perf/serve_bench.sh BINARY [SECONDS_PER_RUN] [extra serve_bench options]
set -eu
bin=$1
secs=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
cap12=$("$bin" --workers 1 --threads 2 --calibrate "$@")
cap21=$("$bin" --workers 2 --threads 1 --calibrate "$@")
rate=$(awk -v a="$cap12" -v b="$cap21" 'BEGIN { m = a < b ? a : b; printf "%.1f", 0.9 * m }')
echo "closed-loop capacity: 1 × 2 $cap12 req/s, 2 × 1 $cap21 req/s; offered load $rate req/s (Poisson), $secs s per run"
"$bin" --header
low=$(awk -v r="$rate" 'BEGIN { printf "%.1f", r / 4.5 }')
for run in "1 2 $rate" "2 1 $rate" "1 2 $low"; do
  set -- $run
  env -u OMP_WAIT_POLICY "$bin" --workers "$1" --threads "$2" --rate "$3" --duration "$secs"
  OMP_WAIT_POLICY=passive "$bin" --workers "$1" --threads "$2" --rate "$3" --duration "$secs"
done
