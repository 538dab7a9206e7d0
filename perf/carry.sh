#!/bin/bash
# perf/carry.sh — the suite and the benchmarks for a machine that cannot install the build's
# packages (a lent or air-gapped x86-64 Linux box with python3; glibc 2.36 or newer): builds
# here the release and the ASan/UBSan test binaries, `mha`, libmha.so and the benchmark
# drivers, and packs them with the shared libraries they load (glibc's own left out) into
# OUT.tar.xz (about 25 MB). There, from a checkout of the same commit, `perf/carried.sh
# OUT.tar.xz [BUDGET]` runs the suite on every table and bf16 kernel (release and ASan/UBSan),
# the loops and the benchmarks within BUDGET seconds; by hand:
#
#   python3 -c "import tarfile; tarfile.open('OUT.tar.xz').extractall('.carry')"
#   mkdir -p build && cp -a .carry/build/. build/ && export LD_LIBRARY_PATH=$PWD/.carry/lib
#   build/tests/mha_tests --jobs 16                    # the suite on the CPU's best table
#   MHA_TEST_ISA=avx512 MHA_TEST_BF16_KERNEL=fma-bf16 build/tests/mha_tests --filter '@(engine|step|core|trained|mla|bgemm)/*'
#   LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp build/debug/tests/mha_tests --jobs 16   # ASan/UBSan
#
# With no gnuplot there, the plots of scale::writes_every_point_with_consistent_speedup_and_efficiency
# are noted as skipped. perf/RESULTS.md, Machine G, has a run. usage: perf/carry.sh [OUT (build/carry)]
set -eu
out=${1:-build/carry}
cd "$(dirname "$0")/.."
make -s -j"$(nproc)" all build/tests/mha_tests
make -s -j"$(nproc)" DEBUG=1 build/debug/tests/mha_tests build/debug/mha
blis=/usr/lib/$(gcc -print-multiarch)/blis-serial
libs="-lyaml -fopenmp -lm -lpthread"
gcc -O2 -fopenmp perf/ceiling.c -o build/ceiling
gcc -O2 -fopenmp -isystem /usr/include/"$(gcc -print-multiarch)"/blis-serial perf/sgemm_ceiling.c "$blis/libblis.a" -lm -lpthread -o build/sgemm_ceiling
for p in decode_step chunk_step; do
  gcc -O2 -Iinclude perf/$p.c build/libmha.a "$blis/libblis.a" $libs -o build/$p
done
gcc -O2 -std=c11 -Iinclude -Isrc perf/ukernel_rate.c build/libmha.a "$blis/libblis.a" $libs -o build/ukernel_rate
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/tests" "$tmp/build/debug/tests" "$tmp/lib"
cp -a build/mha build/libmha.so* build/ceiling build/sgemm_ceiling build/decode_step build/chunk_step build/ukernel_rate "$tmp/build/"
cp build/tests/mha_tests "$tmp/build/tests/"
cp -a build/debug/mha build/debug/libmha.so* "$tmp/build/debug/"
cp build/debug/tests/mha_tests "$tmp/build/debug/tests/"
# the shared libraries they load, but glibc's and the compiler runtime's (newer there is fine)
for b in build/mha build/tests/mha_tests build/debug/mha build/debug/tests/mha_tests; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libresolv|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$tmp/lib/"; done
strip --strip-debug "$tmp"/build/* "$tmp"/build/tests/* "$tmp"/build/debug/* "$tmp"/build/debug/tests/* "$tmp"/lib/* 2>/dev/null || true
mkdir -p "$(dirname "$out")"
tar -C "$tmp" -cf - build lib | xz -T0 -6 > "$out.tar.xz.part"
mv "$out.tar.xz.part" "$out.tar.xz"
echo "perf/carry.sh: $out.tar.xz ($(du -h "$out.tar.xz" | cut -f1)), commit $(git rev-parse --short HEAD)"
