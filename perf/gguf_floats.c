/* gguf_floats.c — a GGUF layer's attention projections dequantized (what the file means) into a
 * safetensors file of F32 tensors with HF's names (model.layers.N.self_attn.{q,k,v,o}_proj.weight,
 * (out, in), Q/K rows in HF's order), so that `mha run --weights-type T` can quantize them at
 * load: perf/check_bounds.sh measures --check on them. Usage: gguf_floats M.gguf LAYER OUT. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"
#include "mha_io.h"

int main(int argc, char **argv)
{
    char err[1024];
    mha_gguf *g = NULL;
    mha_config cfg;
    mha_gguf_weights w;
    if (argc != 4)
        return fprintf(stderr, "usage: gguf_floats M.gguf LAYER OUT.safetensors\n"), 2;
    const int l = atoi(argv[2]);
    mha_config_init(&cfg);
    if (mha_gguf_open(argv[1], &g, err, sizeof err) != MHA_OK || mha_gguf_layer_config(g, l, &cfg, err, sizeof err) ||
        mha_gguf_layer_weights(g, l, &cfg, &w, err, sizeof err))
        return fprintf(stderr, "%s\n", err), 1;
    const int64_t d = cfg.d_model, dk = cfg.head_dim ? cfg.head_dim : d / cfg.n_heads;
    const int64_t kvh = cfg.n_kv_heads ? cfg.n_kv_heads : cfg.n_heads;
    const int64_t outs[4] = {cfg.n_heads * dk, kvh * dk, kvh * dk, d}, ins[4] = {d, d, d, cfg.n_heads * dk};
    const float *fl[4] = {w.w.w_q, w.w.w_k, w.w.w_v, w.w.w_o};
    static const char *names[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    float *m[4];
    char header[1024];
    size_t hn = 0, off = 0;
    hn += (size_t)snprintf(header + hn, sizeof header - hn, "{");
    for (int i = 0; i < 4; i++) {
        const int64_t n = outs[i] * ins[i];
        if (!(m[i] = malloc((size_t)n * sizeof *m[i])))
            return 1;
        if (w.w.type[i] == MHA_WEIGHT_F32)
            memcpy(m[i], fl[i], (size_t)n * sizeof *m[i]);
        else if (mha_weights_to_floats(w.w.type[i], w.w.blocks[i], n, m[i]) != MHA_OK)
            return fprintf(stderr, "%s: dequantize\n", names[i]), 1;
        hn += (size_t)snprintf(header + hn, sizeof header - hn,
                               "%s\"model.layers.%d.self_attn.%s.weight\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                               "\"data_offsets\":[%zu,%zu]}", i ? "," : "", l, names[i], (long long)outs[i],
                               (long long)ins[i], off, off + (size_t)n * 4);
        off += (size_t)n * 4;
    }
    hn += (size_t)snprintf(header + hn, sizeof header - hn, "}");
    while (hn % 8)
        header[hn++] = ' ';
    FILE *f = fopen(argv[3], "wb");
    const unsigned long long len = hn;
    if (!f || fwrite(&len, 8, 1, f) != 1 || fwrite(header, 1, hn, f) != hn)
        return 1;
    for (int i = 0; i < 4; i++)
        if (fwrite(m[i], 4, (size_t)(outs[i] * ins[i]), f) != (size_t)(outs[i] * ins[i]))
            return 1;
    fclose(f);
    mha_gguf_weights_free(&w);
    mha_gguf_close(g);
    return 0;
}
