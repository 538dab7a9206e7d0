#!/usr/bin/env bash
# emulated.sh — `make test-emulated`: the suite on an emulated CPU of another ISA (QEMU's user
# mode; default `max`, TCG's own: AVX2 and no AVX-512; EPYC for an AMD one, with warnings on
# stderr about features TCG lacks), so an AVX-512 host tests what an AVX2-only machine runs: the
# auto table, and the avx512 table reported skipped. Criterion re-executes
# its binary for each test, so the binary runs under a binfmt_misc handler for one file
# extension only (registered here, removed on exit; needs root). Slow: TCG emulates the
# vector code (the whole suite takes many minutes, and the heaviest tests can exceed their
# timeouts); not part of .ci/run. Left out: the cli and contract suites (they run build/mha,
# which runs on the host CPU, not the emulated one) and two tests that QEMU itself breaks
# (errors::library_prints_nothing sees QEMU's warnings; a fork after libgomp's threads in
# embedding::engines_work_in_a_child_after_the_parent_used_one).
# usage: tests/emulated.sh BUILD_DIR [QEMU_CPU] [criterion args]
set -euo pipefail
B=$1
CPU=${2:-max}
shift $(( $# >= 2 ? 2 : 1 ))
command -v qemu-x86_64 >/dev/null || { echo "emulated.sh: qemu-x86_64 missing (apt-get install qemu-user)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "emulated.sh: registering a binfmt_misc handler needs root" >&2; exit 2; }
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
name=mhaemu$$
cleanup() { [ -e "/proc/sys/fs/binfmt_misc/$name" ] && echo -1 > "/proc/sys/fs/binfmt_misc/$name"; rm -f "$B/tests/mha_tests.$name"; }
trap cleanup EXIT INT TERM
echo ":$name:E::$name::$(command -v qemu-x86_64):" > /proc/sys/fs/binfmt_misc/register
cp "$B/tests/mha_tests" "$B/tests/mha_tests.$name"
export QEMU_CPU="$CPU"
export OMP_WAIT_POLICY=passive # two test processes share the cores: idle workers sleep (make test does too)
echo "emulated CPU $CPU: the suite, then the engine suites once per table"
quiet() { grep -v "TCG doesn't support" || true; } # QEMU's notes on features TCG lacks
rc=0 # every part runs; the status is the worst of them
"$B/tests/mha_tests.$name" --jobs 2 --filter '!(cli/*|contract/*|errors/library_prints_nothing|embedding/engines_work_in_a_child_after_the_parent_used_one)' "$@" 2>&1 | quiet || rc=1
for isa in avx512 avx2 ref; do
  echo "engine suites on isa $isa (MHA_TEST_ISA=$isa), emulated CPU $CPU"
  MHA_TEST_ISA=$isa "$B/tests/mha_tests.$name" --jobs 2 --filter '@(engine/*|step/*|shared_weights/*|embedding/!(engines_work_in_a_child_after_the_parent_used_one))' 2>&1 | quiet || rc=1
done
exit $rc
