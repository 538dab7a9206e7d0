#!/bin/sh
# tsan.sh — `make test-tsan`: the engine's threads under ThreadSanitizer, where Criterion cannot
# run (it cannot start under TSan). The command runs every parallel path on 2 OpenMP threads
# (forwards f32 and bf16, a ragged batch, GQA with RoPE, a window, softcap, sinks and the
# QK-norm over whole rows that runs as tasks of its own, the core alone, MLA, and a decode
# block's chunked prefill and steps through the paged cache in f32, bf16 and int8, from
# generated tokens and from a file), then serve_bench embeds the library as a server does:
# worker threads with engines of their own, engines shared by more threads than there are
# engines (each moving between threads), and engines reading one packed copy of the weights;
# every response checked bit for bit against one computed before the load. LLVM's libomp
# tells TSan what OpenMP's barriers, tasks and dependencies order through its archer tool;
# TSan's first report fails the run. TSan sees accesses of up to 16 bytes: the vector tables'
# 32- and 64-byte loads and stores, and BLIS's microkernel (not instrumented), are invisible
# to it, so everything runs on the ref table (scalar C: a task that reads a head's output
# before the task that writes it is done is reported), the command's runs on the widest table
# too (its scalar state and control paths).
# usage: tests/tsan.sh BUILD_DIR (its mha and serve_bench built by clang with -fsanitize=thread)
set -eu
b=$1
archer=$(clang -print-resource-dir)/../../libarcher.so
[ -f "$archer" ] || { echo "tsan.sh: no libarcher.so beside clang's resource directory ($archer)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# libomp is not instrumented: what its own code does is left out, as archer asks (no
# suppression of libomp's frames instead: every task's stack holds one). tests/tsan.supp
# leaves out the one false report left by that (libomp reusing a finished task's storage),
# by the top frame, named there.
export OMP_TOOL_LIBRARIES="$archer" ARCHER_OPTIONS=verbose=1
supp=$(cd "$(dirname "$0")" && pwd)/tsan.supp
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ignore_noninstrumented_modules=1 suppressions=$supp"
export OMP_NUM_THREADS=2

# clang 14's TSan wants its shadow memory's fixed addresses free, which kernels randomising
# mmap with more than 28 bits do not leave ("unexpected memory mapping"): without address
# randomisation where the kernel allows it
norand=
if setarch "$(uname -m)" -R true 2>/dev/null; then norand="setarch $(uname -m) -R"; fi

run() { # a command; its output shown only when it fails or TSan reports
	echo "  $*"
	# shellcheck disable=SC2086 # norand: a command and its arguments, or nothing
	if ! $norand "$@" >"$tmp/out" 2>&1; then
		cat "$tmp/out"
		echo "tsan.sh: failed: $*" >&2
		exit 1
	fi
	grep -q 'Archer detected OpenMP application with TSan' "$tmp/out" || {
		cat "$tmp/out"
		echo "tsan.sh: archer did not attach (OMP_TOOL_LIBRARIES=$archer): OpenMP's ordering unknown to TSan" >&2
		exit 1
	}
}

cat >"$tmp/fwd.yaml" <<'EOF'
name: tsan-forward
model:   { d_model: 256, heads: 4, bias: true }
batch:   { size: 3, seq_len: 96, mask: causal }
threads: { count: 2 }
run:     { warmup: 0, iters: 2, seed: 1 }
EOF
cat >"$tmp/ragged.yaml" <<'EOF'
name: tsan-ragged
model:   { d_model: 128, heads: 2, bias: true }
batch:   { size: 5, seq_len: 80, mask: padding, lengths: [80, 1, 33, 17, 64] }
threads: { count: 2 }
run:     { warmup: 0, iters: 2, seed: 2 }
EOF
cat >"$tmp/gqa.yaml" <<'EOF'
name: tsan-gqa
model:   { d_model: 256, heads: 8, kv_heads: 2, bias: false, window: 40, rope: { style: neox, theta: 10000 },
           qk_norm: { kind: full }, softcap: 30, sinks: true }
batch:   { size: 1, seq_len: 130, mask: causal }
threads: { count: 2 }
run:     { warmup: 0, iters: 2, seed: 3 }
EOF
cat >"$tmp/decode.yaml" <<'EOF'
name: tsan-decode
model:  { d_model: 256, heads: 8, kv_heads: 2, bias: false, rope: { style: neox, theta: 10000 }, qk_norm: { kind: full } }
decode: { seqs: 3, context: 90, new: 1, steps: 6, block_size: 16, prefill_chunk: 32 }
threads: { count: 2 }
run:    { seed: 4 }
EOF
m=$b/mha
echo "mha under ThreadSanitizer ($m, 2 OpenMP threads, archer)"
run "$m" run "$tmp/fwd.yaml" --output "$tmp/x.npy" # tokens for the decode block: (3, 96, 256)
for isa in ref auto; do
	for p in f32 bf16; do
		run "$m" run "$tmp/fwd.yaml" --isa $isa --precision $p --check 8
		run "$m" run "$tmp/ragged.yaml" --isa $isa --precision $p --check 8
		run "$m" run "$tmp/gqa.yaml" --isa $isa --precision $p --check 8
		run "$m" run "$tmp/gqa.yaml" --isa $isa --precision $p --core --check 8
		run "$m" run "$tmp/decode.yaml" --isa $isa --precision $p --check 8
		run "$m" run "$tmp/decode.yaml" --isa $isa --precision $p --kv-cache int8 --check 8
	done
	run "$m" run configs/mla-small.yaml --isa $isa --iters 1 --warmup 0 --check 8
	run "$m" run "$tmp/decode.yaml" --isa $isa --input "$tmp/x.npy" --precision bf16 --kv-cache int8 --check 16
done

s=$b/serve_bench
serve() { run "$s" "$@" --isa ref --d 128 --heads 4 --max-len 96 --rate 40 --duration 1; }
echo "serve_bench under ThreadSanitizer ($s)"
serve --workers 2 --threads 1
serve --workers 1 --threads 2
serve --workers 3 --threads 1 --pool 2
serve --workers 2 --threads 1 --shared
serve --workers 3 --threads 2 --pool 2 --shared
echo "tsan.sh: no race reported"
