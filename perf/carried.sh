#!/bin/bash
# perf/carried.sh — on a machine that cannot install the build's packages, from a checkout of
# the commit perf/carry.sh packed: the suite on every kernel table and bf16 kernel the CPU runs
# (release, then ASan/UBSan), the loops, the attention cores against the peers that are there,
# the int8 cache's decode step against the bf16 cache's, and the bert-base-512 layer, each
# stage within what is left of BUDGET seconds (a stage that would not fit is skipped, and
# says so). Logs and the new CSVs go to OUTDIR. A PyTorch of that machine's python3 stands in
# for perf/.venv's when perf/.venv has none.
# usage: perf/carried.sh TARBALL [BUDGET (600)] [OUTDIR (build/carried)]
set -u
tarball=$(realpath "${1:?usage: perf/carried.sh TARBALL [BUDGET] [OUTDIR]}") || exit 2
budget=${2:-600}
out=${3:-build/carried}
mkdir -p "$out" && out=$(realpath "$out") || exit 2
cd "$(dirname "$0")/.."
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
log() { echo "== $* (t=$(($(date +%s) - t0))s)"; }
# stage NAME SECONDS COMMAND...: COMMAND under a timeout of SECONDS if that much is left, else
# status 125 and a line that says it was skipped
stage() {
  local name=$1 secs=$2
  shift 2
  if [ "$(left)" -lt "$secs" ]; then
    log "$name: skipped, $(left) s left of $budget"
    return 125
  fi
  log "$name"
  timeout "$secs" "$@"
}
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('.carry')" "$tarball" || exit 1
mkdir -p build && cp -a .carry/build/. build/
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -e perf/.venv/bin/python ] && python3 -c 'import torch' 2>/dev/null; then
  mkdir -p perf/.venv/bin # a wrapper: a symlink to a venv's python would lose its venv
  printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" >perf/.venv/bin/python
  chmod +x perf/.venv/bin/python
fi
start=$(mktemp) # the CSVs newer than this are this run's
{ lscpu; build/mha info; } >"$out/machine.txt" 2>&1
grep -E '^(Model name|CPU\(s\)|isa|tables|bf16) ' "$out/machine.txt"
stage "loops, 1 and 2 threads" 60 sh -c 'build/ceiling 1; build/ceiling 2' | tee "$out/ceiling.txt"
suites='@(engine|step|core|trained|mla|bgemm)/*'
stage "the suite, auto table" 300 build/tests/mha_tests --jobs "$(nproc)" >"$out/tests.log" 2>&1
echo "rc=$? (the suite)" >>"$out/tests.log"
# every table the CPU runs with each of its bf16 kernels (mha info's "tables" lines: NAME needs
# ...; runs here; BLIS ...; bf16 K1 K2 ...)
mapfile -t runs < <(awk '/^tables/ { t = 1; sub(/^tables/, "") } /^[a-z]/ { t = 0 }
  t && /runs here/ { k = $0; sub(/.*; bf16 /, "", k); print $1, k }' "$out/machine.txt")
for line in "${runs[@]}"; do
  isa=${line%% *}
  for bk in ${line#* }; do
    stage "engine suites, isa $isa, bf16 kernel $bk" 120 \
      env MHA_TEST_ISA="$isa" MHA_TEST_BF16_KERNEL="$bk" build/tests/mha_tests --jobs "$(nproc)" --filter "$suites" \
      >>"$out/tests.log" 2>&1
    echo "rc=$? ($isa $bk)" >>"$out/tests.log"
  done
done
grep -E '^\[FAIL\]|^rc=' "$out/tests.log" # rc 124: out of time, 125: skipped
stage "the suite under ASan/UBSan" 300 env LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 build/debug/tests/mha_tests --jobs "$(nproc)" >"$out/asan.log" 2>&1
echo "rc=$? (the ASan/UBSan suite)" >>"$out/asan.log"
grep -E '^\[FAIL\]|Synthesis|^rc=|ERROR: |runtime error' "$out/asan.log" | head
stage "bench-core, 2 threads, 2 rounds" 300 python3 perf/bench_core.py --threads 2 --rounds 2 2>&1 | tail -48
log "decode step, 16 x 2048, 2 threads, bf16 engine: the bf16 cache, then int8 (context 1: the projections)"
for r in 1 2 3; do
  for ctx in 2048 1; do
    for kv in auto int8; do
      [ "$(left)" -lt 90 ] && break 3
      echo "round $r, context $ctx, cache $kv: $(timeout 30 build/decode_step bf16 8 $ctx 10 2 16 auto $kv | tail -1)"
    done
  done
done | tee "$out/decode_step.txt"
stage "the bert-base-512 layer (perf/bench.py t1)" 150 python3 perf/bench.py --shapes t1 --rounds 3 2>&1 | tail -6
find perf/results -newer "$start" -name '*.csv' -exec cp {} "$out/" \;
rm -f "$start"
log "done: $out"
