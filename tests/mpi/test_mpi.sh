#!/bin/sh
# test_mpi.sh — `make test-mpi`: the MPI runner on a ragged batch, 1, 2 and 3 ranks with one
# OpenMP thread each, against `mha run` on the whole batch (bitwise, the whole file); a
# malformed input and a rank that runs out of memory make every rank exit non-zero with the
# failing rank's message and leave no output file.
# usage: tests/mpi/test_mpi.sh BUILD_DIR
set -u
B=$1
dir=$(mktemp -d /tmp/mha-mpi-test-XXXXXX)
trap 'rm -rf "$dir"' EXIT
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
RUN="$B/mha-mpi run tests/data/golden.yaml --weights tests/data/mha.safetensors --threads 1 --iters 2 --warmup 1"
fails=0
check() { if [ "$1" = 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi; }

"$B/mpi_make_batch" "$dir/x.npy" "$dir/l.npy" 11 24 32 || exit 1
"$B/mha" run tests/data/golden.yaml --weights tests/data/mha.safetensors --input "$dir/x.npy" \
    --lengths "$dir/l.npy" --threads 1 --iters 1 --warmup 0 --check 0 --output "$dir/ref.npy" >/dev/null
check $? "mha run writes the single-process reference"

for np in 1 2 3; do
  $MPIRUN -np $np $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/y$np.npy" > "$dir/out$np.txt" 2>&1
  check $? "$np rank(s) run"
  cmp -s "$dir/ref.npy" "$dir/y$np.npy"
  check $? "$np rank(s): output bitwise identical to mha run"
  [ "$(grep -c '^  rank [0-9]*:' "$dir/out$np.txt")" = $np ]
  check $? "$np rank(s): one timing line per rank"
  grep -q '^  total: .* tokens/s' "$dir/out$np.txt"
  check $? "$np rank(s): a total line"
done
cat "$dir/out2.txt"
$MPIRUN -np 2 $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/yj.npy" --json > "$dir/j.txt" 2>&1
grep -q '"per_rank":\[{"rank":0' "$dir/j.txt" && grep -q '"tokens_per_s"' "$dir/j.txt"
check $? "--json prints one object with every rank"

# the attention variants' own weights reach every rank: gpt-oss's sinks, Qwen3's QK-norm, MLA's
# latent projections (HF goldens), 2 ranks, bitwise against mha run
for g in gptoss_sinks qwen3_qknorm mla_lora mla_qproj; do
  GA="tests/data/$g.yaml --weights tests/data/$g.safetensors --prefix model.layers.0.self_attn --input tests/data/${g}_x.npy"
  "$B/mha" run $GA --threads 1 --iters 1 --warmup 0 --check 0 --output "$dir/$g-ref.npy" >/dev/null
  $MPIRUN -np 2 $B/mha-mpi run $GA --threads 1 --iters 1 --warmup 0 --output "$dir/$g.npy" > "$dir/$g.txt" 2>&1
  check $? "$g: 2 ranks run"
  cmp -s "$dir/$g-ref.npy" "$dir/$g.npy"
  check $? "$g: 2 ranks bitwise identical to mha run"
done

# an MLA model's generated weights, broadcast from rank 0: 3 ranks bitwise against mha run
"$B/mpi_make_batch" "$dir/xm.npy" "$dir/lm.npy" 5 24 448 || exit 1
MA="configs/mla-small.yaml --input $dir/xm.npy --lengths $dir/lm.npy --threads 1 --iters 1 --warmup 0"
"$B/mha" run $MA --check 0 --output "$dir/mla-ref.npy" >/dev/null
$MPIRUN -np 3 $B/mha-mpi run $MA --output "$dir/mla.npy" > "$dir/mla.txt" 2>&1
check $? "MLA, generated weights: 3 ranks run"
cmp -s "$dir/mla-ref.npy" "$dir/mla.npy"
check $? "MLA, generated weights: 3 ranks bitwise identical to mha run"

# more ranks than sequences: the idle rank says so (it once printed "sequences 0..-1")
"$B/mpi_make_batch" "$dir/x2.npy" "$dir/l2.npy" 2 24 32 || exit 1
$MPIRUN -np 3 $RUN --input "$dir/x2.npy" --lengths "$dir/l2.npy" --output "$dir/y2r.npy" > "$dir/idle.txt" 2>&1
check $? "3 ranks, 2 sequences: runs"
grep -q 'rank [0-9]: idle (no sequences)' "$dir/idle.txt" && ! grep -q '\.\.-1' "$dir/idle.txt"
check $? "3 ranks, 2 sequences: the idle rank is reported as idle"

# two runs writing one output at once: each has its own temporary file (a fixed name once let
# them clobber each other); both succeed and the output is the reference
$MPIRUN -np 2 $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/same.npy" > "$dir/c1.txt" 2>&1 &
p1=$!
$MPIRUN -np 2 $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/same.npy" > "$dir/c2.txt" 2>&1
r2=$?
wait $p1
r1=$?
[ $r1 = 0 ] && [ $r2 = 0 ] && cmp -s "$dir/ref.npy" "$dir/same.npy" && ! ls "$dir" | grep -q 'same.npy.mpi-tmp'
check $? "two concurrent runs to one output: both succeed, output complete, no temporary left ($r1 $r2)"

# a leftover of a run that was killed outright (its PID gone) is removed by the next run; one of
# a live PID is not
dead=$(sh -c 'echo $$')
: > "$dir/ys.npy.mpi-tmp.$dead.abc"
: > "$dir/ys.npy.mpi-tmp.$$.def"
$MPIRUN -np 2 $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/ys.npy" > /dev/null 2>&1
[ $? = 0 ] && [ ! -e "$dir/ys.npy.mpi-tmp.$dead.abc" ] && [ -e "$dir/ys.npy.mpi-tmp.$$.def" ]
check $? "a dead run's temporary file is removed, a live one's kept"

# an output MPI-IO cannot replace (a FIFO) is refused before anything is written
mkfifo "$dir/pipe"
$MPIRUN -np 2 $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/pipe" > "$dir/fifo.txt" 2>&1
[ $? != 0 ] && [ -p "$dir/pipe" ] && grep -q "pipe: not a regular file" "$dir/fifo.txt"
check $? "a FIFO output is refused and stays a FIFO: $(grep mha-mpi "$dir/fifo.txt" | head -1)"

# an output that is a symbolic link: its target is replaced, the link stays
cp "$dir/ref.npy" "$dir/target.npy" && chmod 640 "$dir/target.npy" && ln -s target.npy "$dir/link.npy"
$MPIRUN -np 2 $RUN --input "$dir/x.npy" --lengths "$dir/l.npy" --output "$dir/link.npy" > /dev/null 2>&1
[ $? = 0 ] && [ -L "$dir/link.npy" ] && cmp -s "$dir/ref.npy" "$dir/target.npy" && [ "$(stat -c %a "$dir/target.npy")" = 640 ]
check $? "a symlinked output: the target is replaced with its mode kept, the link stays"

# a malformed input: every rank exits non-zero, rank 0 says why, nothing is written
head -c 1000 "$dir/x.npy" > "$dir/bad.npy"
$MPIRUN -np 2 sh -c "$RUN --input $dir/bad.npy --lengths $dir/l.npy --output $dir/bad-out.npy; \
  echo \"rank \$OMPI_COMM_WORLD_RANK exit \$?\" >> $dir/codes; exit 0" > "$dir/bad.txt" 2>&1
[ "$(grep -c 'exit [1-9]' "$dir/codes")" = 2 ]
check $? "malformed input: both ranks exit non-zero ($(tr '\n' ' ' < "$dir/codes"))"
grep -q "bad.npy" "$dir/bad.txt"
check $? "malformed input: the message names the file: $(grep mha-mpi "$dir/bad.txt" | head -1)"
[ ! -e "$dir/bad-out.npy" ] && ! ls "$dir" | grep -q 'bad-out.npy.mpi-tmp' 
check $? "malformed input: no output file left"

# one rank cannot allocate its shard: its message, every rank non-zero, no output
rm -f "$dir/codes"
"$B/mpi_make_batch" "$dir/big.npy" "$dir/bigl.npy" 2 32768 1024 sparse || exit 1
BIG="$B/mha-mpi run configs/long-context.yaml --threads 1 --iters 1 --warmup 0 --input $dir/big.npy"
$MPIRUN -np 1 sh -c "$BIG --output $dir/big-out.npy; echo \"rank 0 exit \$?\" >> $dir/codes" : \
        -np 1 sh -c "ulimit -v 600000; $BIG --output $dir/big-out.npy; echo \"rank 1 exit \$?\" >> $dir/codes" \
        > "$dir/oom.txt" 2>&1
[ "$(grep -c 'exit [1-9]' "$dir/codes")" = 2 ]
check $? "a rank out of memory: both ranks exit non-zero ($(tr '\n' ' ' < "$dir/codes"))"
grep -q "rank 1 of 2: .*memory" "$dir/oom.txt"
check $? "a rank out of memory: rank 1's message: $(grep mha-mpi "$dir/oom.txt" | head -1)"
[ ! -e "$dir/big-out.npy" ] && ! ls "$dir" | grep -q 'big-out.npy.mpi-tmp' 
check $? "a rank out of memory: no output file left"

[ $fails = 0 ] && echo "test-mpi: all passed" || echo "test-mpi: $fails failed"
[ $fails = 0 ]
