#!/bin/sh
# perf/check_bounds.sh — what `mha run --check` measures on every attention layer of a trained
# model, for the bounds of src/cli/check.c (issue 64): SmolLM2-135M-Instruct's GGUF file
# (make gguf-file), each layer's projections as stored (Q4_1) and, through perf/gguf_floats.c's
# dequantized copy, quantized at load to q8_0 and q4_0 (q4_k and q6_k need d_model a multiple
# of 256: 576 is not) or held as f32; precision f32 and bf16; a forward, and a decode block with
# the precision's own cache and an int8 one; --check over 1, 2, 4, ... rows; the block weights
# multiplying float32 activations or int16 ones (ACTS; f32 weights take f32 only). Two input sets:
#   short: each layer's own real-text input (tests/data/gguf_layers_x.npy, 12 tokens);
#   long:  the trained golden's two sequences (tests/data/smollm2_trained_x.npy, 128 and 80
#          tokens of real text, layer 26's inputs) through every layer: longer contexts.
# Prints one line per run: set layer precision cache weights activations rows error (cache "-": a
# forward).
# Usage: [LAYERS="0 5"] [ACTS="f32 int16"] perf/check_bounds.sh short|long [DIR] (build/mha and
# build/libmha.a built; LAYERS: only those, default all 30; ACTS: weights.activations, default f32).
set -eu
set_=${1:?short or long}
dir=${2:-build/check_bounds}
mha=${MHA:-build/mha}
gguf=tests/.gguf/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$dir"
[ -x "$dir/gguf_floats" ] || cc -std=c11 -O2 -Iinclude perf/gguf_floats.c build/libmha.a -fopenmp -lblis -lm \
    -o "$dir/gguf_floats"
if [ "$set_" = short ]; then
    rows="1 2 4 12" fwd="--causal" lens=""
    cat > "$dir/dec_short.yaml" <<YAML
decode: { seqs: 1, context: 8, new: 1, steps: 4, block_size: 16, prefill_chunk: 8 }
run: { warmup: 0 }
YAML
else
    rows="1 4 16 64 256" fwd="--causal" lens="--lengths tests/data/smollm2_trained_lengths.npy"
    cat > "$dir/dec_long.yaml" <<YAML
decode: { seqs: 2, context: 64, new: 1, steps: 64, block_size: 16, prefill_chunk: 24 }
run: { warmup: 0 }
YAML
fi
cat > "$dir/model.yaml" <<YAML
model: { d_model: 576, heads: 9, kv_heads: 3, head_dim: 64, bias: false, rope: { style: neox, theta: 100000 } }
run: { warmup: 0, iters: 1 }
YAML
{ cat "$dir/model.yaml" | sed '$d'; cat "$dir/dec_$set_.yaml"; } > "$dir/model_dec_$set_.yaml"
# the short inputs: layer l's (1, 12, 576) rows of gguf_layers_x.npy
python3 - "$dir" <<'PY'
import os, struct, sys
d = sys.argv[1]
src = open("tests/data/gguf_layers_x.npy", "rb").read()
hl = struct.unpack("<H", src[8:10])[0]
data, per = src[10 + hl:], 12 * 576 * 4
for l in range(30):
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 12, 576), }"
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    open("%s/x%d.npy" % (d, l), "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode()
                                            + data[l * per:(l + 1) * per])
PY
err() { sed -n 's/.*"check_rel_error":\([^,}]*\).*/\1/p'; }
for l in ${LAYERS:-$(seq 0 29)}; do
    [ -s "$dir/w$l.safetensors" ] || "$dir/gguf_floats" "$gguf" "$l" "$dir/w$l.safetensors"
    x="$dir/x$l.npy"
    [ "$set_" = long ] && x=tests/data/smollm2_trained_x.npy
    for prec in f32 bf16; do
        for kv in - "$prec" int8; do
            for act in ${ACTS:-f32}; do
                for wt in q4_1 q8_0 q4_0 f32; do
                    # f32 weights multiply float32 activations: int16 on them is refused (exit 2)
                    [ "$act" != f32 ] && [ "$wt" = f32 ] && continue
                    if [ "$wt" = q4_1 ]; then src="--weights $gguf --layer $l" cfg=""
                    else src="--weights $dir/w$l.safetensors --prefix model.layers.$l.self_attn. --weights-type $wt"
                         cfg="$dir/model.yaml"; fi
                    if [ "$kv" = - ]; then mode="$fwd --iters 1 --warmup 0"
                    else mode="--kv-cache $kv"
                         cfg="$dir/model_dec_$set_.yaml"; [ "$wt" = q4_1 ] && cfg="$dir/dec_$set_.yaml"; fi
                    for r in $rows; do
                        # shellcheck disable=SC2086
                        e=$("$mha" run $cfg $src --input "$x" $lens --precision "$prec" $mode --threads 1 --json \
                            --activations "$act" --check "$r" 2>/dev/null | err)
                        echo "$set_ $l $prec $kv $wt $act $r $e"
                    done
                done
            done
        done
    done
done
