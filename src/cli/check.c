/* check.c — what --check holds a run to: the floats its reference multiplies by (the weights as
 * the engine means them) and the bound of each (precision, cache, weight type, rows). Pure
 * functions, no printing: tests/test_check.c calls them directly. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Matrix m's outputs and inputs (Wq, Wk, Wv: outputs of d_model inputs; Wo: d_model outputs). */
static void matrix_shape(const cli_problem *p, int m, size_t *out, size_t *in)
{
    const size_t d = (size_t)p->d, qd = (size_t)p->h * p->dk, kvd = (size_t)p->kvh * p->dk;
    *out = m == MHA_W_O ? d : m == MHA_W_Q ? qd : kvd;
    *in = m == MHA_W_O ? qd : d;
}

/* Floats of matrix m (out × in, rows of inputs) through block type t: the engine's quantizer
 * at load (per output, along its inputs: src/weights.c) then ggml's dequantization. */
static mha_status round_trip(mha_weight_type t, const float *rows, size_t out, size_t in, float *dst)
{
    const int64_t n = (int64_t)(out * in);
    const size_t bytes = mha_weight_bytes(t, n);
    void *q = bytes ? malloc(bytes) : NULL;
    mha_status st = q ? mha_weights_quantize(t, rows, n, q) : bytes ? MHA_ERR_NOMEM : MHA_ERR_INVALID_ARG;
    if (st == MHA_OK)
        st = mha_weights_to_floats(t, q, n, dst);
    free(q);
    return st;
}

/* t's name as weights.type spells it ("q4_1"): ggml's, lowercased (cli_weight_type_name's table
 * lives with the option parsing, which prints; this file must not link it). */
static const char *type_name(mha_weight_type t, char *buf, size_t n)
{
    const char *g = mha_ggml_type_name((int)t);
    size_t i = 0;
    for (; g && g[i] && i + 1 < n; i++)
        buf[i] = (char)tolower((unsigned char)g[i]);
    buf[i] = '\0';
    return buf;
}

/* a (rows × cols) into b (cols × rows). */
static void transpose(const float *a, size_t rows, size_t cols, float *b)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            b[c * rows + r] = a[r * cols + c];
}

mha_status cli_ref_weights_make(const cli_problem *p, const mha_config *cfg, cli_ref_weights *r)
{
    memset(r, 0, sizeof *r);
    r->w = p->w;
    if (p->mla.kv_lora_rank) /* an MLA model's weights are floats, held as floats */
        return MHA_OK;
    const float **f[MHA_W_COUNT] = {&r->w.w_q, &r->w.w_k, &r->w.w_v, &r->w.w_o};
    size_t total = 0, shape[MHA_W_COUNT][2], widest = 0;
    int given = 0, quantized = 0; /* matrices whose floats come from the file's blocks, from the engine's */
    for (int m = 0; m < MHA_W_COUNT; m++) {
        matrix_shape(p, m, &shape[m][0], &shape[m][1]);
        const size_t n = shape[m][0] * shape[m][1];
        if (p->w.type[m] != MHA_WEIGHT_F32 || cfg->weight_type[m] != MHA_WEIGHT_F32)
            total += n, widest = n > widest ? n : widest;
        given += p->w.type[m] != MHA_WEIGHT_F32;
        quantized += p->w.type[m] == MHA_WEIGHT_F32 && cfg->weight_type[m] != MHA_WEIGHT_F32;
    }
    if (!total)
        return MHA_OK; /* the problem's own floats */
    float *tmp = NULL;
    r->buf = malloc(total * sizeof *r->buf);
    if (!r->buf || (quantized && !(tmp = malloc(2 * widest * sizeof *tmp))))
        return free(tmp), cli_ref_weights_free(r), MHA_ERR_NOMEM;
    mha_status st = MHA_OK;
    float *at = r->buf;
    for (int m = 0; m < MHA_W_COUNT && st == MHA_OK; m++) {
        const size_t out = shape[m][0], in = shape[m][1], n = out * in;
        const mha_weight_type src = p->w.type[m], held = cfg->weight_type[m];
        if (src == MHA_WEIGHT_F32 && held == MHA_WEIGHT_F32)
            continue;
        if (src != MHA_WEIGHT_F32) /* blocks (TORCH rows only): what the file means */
            st = mha_weights_to_floats(src, p->w.blocks[m], (int64_t)n, at);
        else if (p->w.layout == MHA_LAYOUT_XW) { /* to rows of inputs, through the blocks, and back */
            transpose(*f[m], in, out, tmp);
            if ((st = round_trip(held, tmp, out, in, tmp + widest)) == MHA_OK)
                transpose(tmp + widest, out, in, at);
        } else
            st = round_trip(held, *f[m], out, in, at);
        *f[m] = at, r->w.type[m] = MHA_WEIGHT_F32, r->w.blocks[m] = NULL;
        at += n;
    }
    free(tmp);
    if (st != MHA_OK)
        return cli_ref_weights_free(r), st;
    /* what the reference is, in the check's line: the types of Wq/Wk/Wv/Wo, one when alike */
    const mha_weight_type *t = given ? p->w.type : cfg->weight_type;
    char types[64], n[MHA_W_COUNT][16];
    if (t[0] == t[1] && t[1] == t[2] && t[2] == t[3])
        snprintf(types, sizeof types, "%s", type_name(t[0], n[0], sizeof n[0]));
    else
        snprintf(types, sizeof types, "%s/%s/%s/%s", type_name(t[0], n[0], sizeof n[0]),
                 type_name(t[1], n[1], sizeof n[1]), type_name(t[2], n[2], sizeof n[2]),
                 type_name(t[3], n[3], sizeof n[3]));
    snprintf(r->what, sizeof r->what,
             given ? "the file's %s weights dequantized (what the file means)"
                   : "the weights quantized to %s and dequantized (what the engine holds)", types);
    return MHA_OK;
}

void cli_ref_weights_free(cli_ref_weights *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* One row per (precision, cache, weights): the bound over a whole layer's rows, whether a few
 * rows get more room (per_rows), and what it rests on. Each was measured with
 * perf/check_bounds.sh on the 30 attention layers of SmolLM2-135M-Instruct's GGUF file (real
 * text: each layer's own 12 tokens, and two sequences of 128 and 80), the weights as stored
 * (Q4_1), quantized at load (q8_0, q4_0) and held as floats, a forward and a decode block,
 * --check over 1 to 256 rows (docs/precision.md, "The bounds of --check", has the table).
 *
 * The error over n sampled rows estimates the layer's: in bf16 one row's is up to 1.95x its
 * layer's (a row whose output is small next to the rounding of its products), 4 rows' up to
 * 1.9x, 16 rows' 1.36x, 64 rows' 1.15x — a spread that shrinks about as 1/sqrt(n). Where a bound
 * has little room over a whole layer (bf16 without an int8 cache) it is `bound · (1 +
 * 1/sqrt(n))` for n rows: twice the layer's at one row, within 6% of it from 256 rows. The
 * others are flat: their worst at any row count is well inside them. */
/* BLOCKS_I16, BLOCKS_B16: block weights on int16 or bf16 activations */
enum { FLOATS, BLOCKS, NONE, BLOCKS_I16, BLOCKS_B16 };
static const struct bound_row {
    mha_precision prec;
    int int8;           /* an int8 KV cache */
    int weights;        /* FLOATS, BLOCKS (any block type), BLOCKS_I16 or _B16 (on int16 or bf16 activations),
                         * NONE (--core) */
    double bound;
    int per_rows;       /* bound · (1 + 1/sqrt(rows)) */
    const char *path, *why;
} bound_rows[] = {
    /* --core: the attention core alone on unit-scale Q, K, V, held as the engine suites hold it */
    {MHA_PRECISION_F32, 0, NONE, 1e-4, 0, "float32", "the engine suites hold 1e-5"},
    {MHA_PRECISION_BF16, 0, NONE, 1e-2, 0, "bf16", "unit-scale data: measured worst 3.8e-3"},
    /* float32 products: 1e-4 is 24x the trained layers' worst at any row count (the engine
     * suites hold 1e-5 on unit-scale data) */
    {MHA_PRECISION_F32, 0, FLOATS, 1e-4, 0, "float32", "trained layers' worst 2.3e-6"},
    {MHA_PRECISION_F32, 0, BLOCKS, 1e-4, 0, "float32, block weights", "trained layers' worst 4.1e-6"},
    /* bf16 operands in every product, the weights rounded to bf16 as they are packed: weights
     * that are not bf16 values (a GGUF file's, dequantized) give 1.23e-2 over a whole layer,
     * 1.32e-2 over 4 rows; 1.5e-2 is 1.2x the layer's worst (bf16's 1e-2 holds for unit-scale
     * data and weights that are bf16 values: test_trained.c) */
    {MHA_PRECISION_BF16, 0, FLOATS, 1.5e-2, 1, "bf16",
     "trained layers' worst 1.23e-2 over a layer, 1.32e-2 over 4 rows"},
    /* blocks keep the projections' activations and sums in float32 (Q·Kᵀ and A·V take bf16):
     * the bf16 contract, 1e-2 over a whole layer (worst 9.1e-3), never above it; one row
     * measured 1.33e-2, under its 2e-2 */
    {MHA_PRECISION_BF16, 0, BLOCKS, 1e-2, 1, "bf16, block weights",
     "trained layers' worst 9.1e-3 over a layer, 1.33e-2 on one row"},
    /* K and V as int8: 2e-2 holds unit-scale data; trained layers stay within 1.2e-2 at any
     * row count (1.7x), one row's spread small next to the cache's rounding */
    {MHA_PRECISION_F32, 1, FLOATS, 2e-2, 0, "an int8 KV cache", "trained layers' worst 8.0e-3"},
    {MHA_PRECISION_F32, 1, BLOCKS, 2e-2, 0, "an int8 KV cache, block weights", "trained layers' worst 8.0e-3"},
    {MHA_PRECISION_BF16, 1, FLOATS, 2e-2, 0, "bf16, an int8 KV cache", "trained layers' worst 1.2e-2"},
    {MHA_PRECISION_BF16, 1, BLOCKS, 2e-2, 0, "bf16, an int8 KV cache, block weights", "trained layers' worst 8.1e-3"},
    /* block weights on int16 activations (weights.activations int16): each projection's inputs
     * rounded to 1/32767 of their group's max|x| per 32 inputs, the products exact in integers
     * (docs/quant.md). perf/check_bounds.sh with ACTS=int16 on the same layers, inputs and rows:
     * float32 2.6e-4 worst at any row count (layer 6, whose inputs carry channels 20x their rms;
     * its whole layer 2.4e-4, as test_gguf_layers measures against HF; the long set's layers
     * 1.3e-4), flat over rows; 1e-3 is 3.8x it, the room a model with coarser outliers than
     * SmolLM2's needs (the error grows with a group's max|x| over its inputs' rms). bf16 and an
     * int8 cache round far more than int16 does and keep their bounds: bf16 measures 9.2e-3 over
     * a layer and 1.33e-2 on one row (on float activations 9.1e-3 and 1.33e-2), an int8 cache 8.7e-3
     * (8.1e-3). */
    {MHA_PRECISION_F32, 0, BLOCKS_I16, 1e-3, 0, "float32, block weights on int16 activations",
     "trained layers' worst 2.6e-4"},
    {MHA_PRECISION_BF16, 0, BLOCKS_I16, 1e-2, 1, "bf16, block weights on int16 activations",
     "trained layers' worst 9.2e-3 over a layer, 1.33e-2 on one row"},
    {MHA_PRECISION_F32, 1, BLOCKS_I16, 2e-2, 0, "an int8 KV cache, block weights on int16 activations",
     "trained layers' worst 8.6e-3"},
    {MHA_PRECISION_BF16, 1, BLOCKS_I16, 2e-2, 0, "bf16, an int8 KV cache, block weights on int16 activations",
     "trained layers' worst 8.7e-3"},
    /* block weights on bf16 activations (a bf16 engine's own products on the weights dequantized
     * into bf16): the bits of the bf16 engine holding the dequantized floats (test_quant.c), so
     * the bounds of its FLOATS rows, measured on those weights */
    {MHA_PRECISION_BF16, 0, BLOCKS_B16, 1.5e-2, 1, "bf16, block weights on bf16 activations",
     "the bf16 engine on their floats: trained layers' worst 1.23e-2 over a layer, 1.32e-2 over 4 rows"},
    {MHA_PRECISION_BF16, 1, BLOCKS_B16, 2e-2, 0, "bf16, an int8 KV cache, block weights on bf16 activations",
     "the bf16 engine on their floats: trained layers' worst 1.2e-2"},
};

cli_bound cli_check_bound(mha_precision prec, mha_kv_type kv, const mha_weight_type *wt, mha_activations act,
                          int rows)
{
    int weights = wt ? FLOATS : NONE;
    for (int i = 0; wt && i < MHA_W_COUNT; i++)
        weights = wt[i] == MHA_WEIGHT_F32           ? weights
                  : act == MHA_ACTIVATIONS_INT16 ? BLOCKS_I16
                  : act == MHA_ACTIVATIONS_BF16  ? BLOCKS_B16
                                                 : BLOCKS;
    const int int8 = kv == MHA_KV_INT8, bf16 = prec == MHA_PRECISION_BF16 || kv == MHA_KV_BF16;
    const struct bound_row *r = &bound_rows[0];
    for (size_t i = 0; i < sizeof bound_rows / sizeof bound_rows[0]; i++)
        if ((bound_rows[i].prec == MHA_PRECISION_BF16) == bf16 && bound_rows[i].int8 == int8 &&
            bound_rows[i].weights == weights)
            r = &bound_rows[i];
    cli_bound b = {r->bound, r->path, ""};
    rows = rows > 1 ? rows : 1;
    if (r->per_rows) {
        b.bound = r->bound * (1 + 1 / sqrt(rows));
        snprintf(b.why, sizeof b.why, "%g over a layer x (1 + 1/sqrt(%d row%s)); %s", r->bound, rows,
                 rows == 1 ? "" : "s", r->why);
    } else
        snprintf(b.why, sizeof b.why, "%s", r->why);
    return b;
}
