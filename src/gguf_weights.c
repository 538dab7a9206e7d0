/* gguf_weights.c — a GGUF layer's attention weights as mha_set_weights takes them (mha_io.h,
 * docs/gguf.md): the projections where they lie in the mapping (F32 as floats; F16, BF16 and
 * the block types as mha_weights.type and .blocks), biases and QK-norm weights as floats, and
 * what llama.cpp's converter did to arch llama undone: its Q and K rows (weights and biases)
 * moved back from ggml's RoPE order to HF's, whole rows of blocks at a time, into memory the
 * result owns. Gemma's norms need nothing here: the file holds 1 + w, which the layer's config
 * reads with weight_offset 0 (gguf_model.c).
 *
 * Sizes: every tensor was checked by the reader (its bytes inside the file) and against the
 * config (mha_gguf_layer_tensors: dims of the config's widths, each at most MHA_MAX_WIDTH);
 * the one allocation is sized from those, with overflow-checked sums, before anything is
 * copied. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bgemm.h"
#include "config.h"
#include "gguf.h"
#include "status.h"

enum { ALIGN = 64 };

/* A region of the result's storage: its bytes (rounded to ALIGN), where it goes. */
typedef struct region { size_t bytes, at; } region;

/* n rounded up to ALIGN, added to *total (0 on overflow). */
static int reserve(size_t *total, size_t n, region *r)
{
    const size_t rounded = (n + (ALIGN - 1)) & ~(size_t)(ALIGN - 1);
    if (rounded < n || *total + rounded < *total)
        return 0;
    r->bytes = n, r->at = *total;
    *total += rounded;
    return 1;
}

/* Element i of a 1-D float tensor (F32, F16, BF16: what mha_gguf_layer_tensors lets through). */
static float vector_at(const mha_gguf_tensor *t, int64_t i)
{
    const uint8_t *p = t->data;
    if (t->type == MHA_GGML_F32)
        return mha_gguf_f32_at(t, i);
    const uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    return t->type == MHA_GGML_F16 ? mha_f16_float(h) : mha_bf16_float(h);
}

/* HF's row r of a matrix whose rows llama.cpp permuted per head of dk rows (docs/gguf.md): the
 * file's row. HF row h·dk + j·dk/2 + i lies in file row h·dk + 2i + j. */
static int64_t file_row(int64_t r, int dk)
{
    const int64_t h = r / dk, c = r % dk, half = dk / 2, j = c / half, i = c % half;
    return h * dk + 2 * i + j;
}

/* A float tensor (F32, F16, BF16) of n elements from element `first`: the first element that is
 * not finite, or -1. Weights of NaN or infinity poison every output row: refused where the
 * tensor can be named. */
static int64_t first_nonfinite(const mha_gguf_tensor *t, int64_t first, int64_t n)
{
    const uint8_t *p = (const uint8_t *)t->data;
    for (int64_t e = first; e < first + n; e++) {
        if (t->type == MHA_GGML_F32) {
            const uint32_t u = (uint32_t)p[4 * e] | (uint32_t)p[4 * e + 1] << 8 | (uint32_t)p[4 * e + 2] << 16 |
                               (uint32_t)p[4 * e + 3] << 24;
            if ((u & 0x7f800000u) == 0x7f800000u)
                return e;
        } else {
            const uint16_t h = (uint16_t)(p[2 * e] | p[2 * e + 1] << 8);
            if (t->type == MHA_GGML_F16 ? (h & 0x7c00u) == 0x7c00u : (h & 0x7f80u) == 0x7f80u)
                return e;
        }
    }
    return -1;
}

static int is_float_type(int type)
{
    return type == MHA_GGML_F32 || type == MHA_GGML_F16 || type == MHA_GGML_BF16;
}

/* One projection: rows [row0, row0 + rows) of tensor t (a fused QKV's share, or the whole), and
 * whether its rows are permuted per head of dk. */
typedef struct matrix {
    const mha_gguf_tensor *t;
    int64_t row0, rows;
    int permuted;
    size_t row_bytes;
    region copy;        /* permuted, or F32 rows the mapping does not align for floats */
} matrix;

/* A float vector: n elements of t from element first (a fused bias's share), permuted or not. */
typedef struct vector {
    const mha_gguf_tensor *t;
    int64_t first, n;
    int permuted;
    region to;
} vector;

MHA_API mha_status mha_gguf_layer_weights(const mha_gguf *g, int layer, const mha_config *cfg,
                                          mha_gguf_weights *out, char *err, size_t err_len)
{
    if (!out)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "weights output is NULL");
    memset(out, 0, sizeof *out);
    if (!g || !cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle or config is NULL");
    mha_key_problem bad;
    if (mha_config_verify(cfg, &bad) != MHA_OK) {
        char why[200];
        mha_config_problem_text(&bad, why, sizeof why);
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: config: %s", g->info.path, why);
    }
    if (cfg->mla.kv_lora_rank || cfg->sinks)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: config: %s: no GGUF architecture mha reads has it",
                          g->info.path, cfg->sinks ? "sinks" : "mla");
    mha_gguf_model m;
    mha_gguf_layer t;
    mha_status st = mha_gguf_model_info(g, &m, err, err_len);
    if (st != MHA_OK || (st = mha_gguf_layer_tensors(g, layer, cfg, &t, err, err_len)) != MHA_OK)
        return st;
    const int dk = mha_config_head_dim(cfg), dv = mha_config_v_head_dim(cfg), h = cfg->n_heads;
    const int kvh = cfg->n_kv_heads ? cfg->n_kv_heads : h;
    const int permute = m.qk_permuted;
    if (permute && dk % 2)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: %s: head_dim %d is odd: llama.cpp's Q/K row order "
                          "(pairs of rows per head) cannot be undone", g->info.path, t.q ? t.q->name : "attn_q", dk);

    /* the four matrices and up to six vectors, then one allocation for what is copied */
    const int64_t qd = (int64_t)h * dk, kd = (int64_t)kvh * dk, vd = (int64_t)kvh * dv;
    matrix mx[MHA_W_COUNT] = {
        {t.q ? t.q : t.qkv, 0, qd, permute, 0, {0, 0}},
        {t.k ? t.k : t.qkv, t.k ? 0 : qd, kd, permute, 0, {0, 0}},
        {t.v ? t.v : t.qkv, t.v ? 0 : qd + kd, vd, 0, 0, {0, 0}},
        {t.o, 0, cfg->d_model, 0, 0, {0, 0}},
    };
    vector vec[6];
    int nv = 0;
    if (cfg->bias) {
        vec[nv++] = (vector){t.q_bias ? t.q_bias : t.qkv_bias, 0, qd, permute, {0, 0}};
        vec[nv++] = (vector){t.k_bias ? t.k_bias : t.qkv_bias, t.k_bias ? 0 : qd, kd, permute, {0, 0}};
        vec[nv++] = (vector){t.v_bias ? t.v_bias : t.qkv_bias, t.v_bias ? 0 : qd + kd, vd, 0, {0, 0}};
        if (t.o_bias)
            vec[nv++] = (vector){t.o_bias, 0, cfg->d_model, 0, {0, 0}};
    }
    const int i_norm = nv;
    if (cfg->qk_norm.kind != MHA_QK_NORM_NONE) {
        /* a norm of the whole projection (OLMo 2) would follow the rows' order; per head (Qwen3,
         * Gemma 3) it is one head's features: in both, arch llama never has one */
        const int full = permute && cfg->qk_norm.kind == MHA_QK_NORM_FULL;
        vec[nv++] = (vector){t.q_norm, 0, mha_config_qk_norm_len(cfg, 0), full, {0, 0}};
        vec[nv++] = (vector){t.k_norm, 0, mha_config_qk_norm_len(cfg, 1), full, {0, 0}};
    }
    size_t total = 0;
    int fits = 1;
    for (int i = 0; i < MHA_W_COUNT; i++) {
        matrix *x = &mx[i];
        x->row_bytes = (size_t)(x->t->bytes / (uint64_t)x->t->ne[1]);
        const size_t at = (size_t)x->row0 * x->row_bytes;
        const uintptr_t addr = (uintptr_t)((const uint8_t *)x->t->data + at);
        const int misaligned = x->t->type == MHA_GGML_F32 && addr % sizeof(float); /* general.alignment 1 or 2 */
        if (x->permuted || misaligned)
            fits &= reserve(&total, (size_t)x->rows * x->row_bytes, &x->copy);
        if (is_float_type(x->t->type)) {
            const int64_t e = first_nonfinite(x->t, x->row0 * x->t->ne[0], x->rows * x->t->ne[0]);
            if (e >= 0)
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: %s: element %lld (row %lld) is not finite: "
                                  "weights must be", g->info.path, x->t->name, (long long)e,
                                  (long long)(e / x->t->ne[0]));
        }
    }
    for (int i = 0; i < nv; i++) {
        fits &= reserve(&total, (size_t)vec[i].n * sizeof(float), &vec[i].to);
        const int64_t e = first_nonfinite(vec[i].t, vec[i].first, vec[i].n);
        if (e >= 0)
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: %s: element %lld is not finite: weights must be",
                              g->info.path, vec[i].t->name, (long long)e);
    }
    if (!fits)
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: layer %d: the weights' copies overflow a size",
                          g->info.path, layer);
    unsigned char *s = NULL;
    if (total && !(s = aligned_alloc(ALIGN, total)))
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: layer %d: out of memory for %zu bytes of weights",
                          g->info.path, layer, total);

    /* fill: matrices (permuted rows moved whole, blocks and all), then the vectors as floats */
    mha_weights w = {.layout = MHA_LAYOUT_TORCH};
    const float **fl[MHA_W_COUNT] = {&w.w_q, &w.w_k, &w.w_v, &w.w_o};
    for (int i = 0; i < MHA_W_COUNT; i++) {
        const matrix *x = &mx[i];
        const uint8_t *src = (const uint8_t *)x->t->data + (size_t)x->row0 * x->row_bytes;
        const void *where = src;
        if (x->copy.bytes) {
            unsigned char *dst = s + x->copy.at;
            for (int64_t r = 0; r < x->rows; r++)
                memcpy(dst + (size_t)r * x->row_bytes, src + (size_t)(x->permuted ? file_row(r, dk) : r) * x->row_bytes,
                       x->row_bytes);
            where = dst;
        }
        if (x->t->type == MHA_GGML_F32) {
            w.type[i] = MHA_WEIGHT_F32;
            *fl[i] = where;
        } else {
            w.type[i] = (mha_weight_type)x->t->type; /* ggml's numbers: mha_weight_type's */
            w.blocks[i] = where;
        }
    }
    const float **vp[6] = {&w.b_q, &w.b_k, &w.b_v, &w.b_o, &w.q_norm, &w.k_norm};
    for (int i = 0; i < nv; i++) {
        const vector *v = &vec[i];
        float *dst = (float *)(void *)(s + v->to.at);
        const int per = v->permuted ? dk : 0;
        for (int64_t e = 0; e < v->n; e++)
            dst[e] = vector_at(v->t, v->first + (per ? file_row(e, dk) : e));
        /* the biases are b_q, b_k, b_v and b_o when the file has it; then q_norm, k_norm */
        *vp[i < i_norm ? i : 4 + (i - i_norm)] = dst;
    }
    out->w = w;
    out->storage = s;
    out->storage_bytes = total;
    out->permuted = permute;
    return MHA_OK;
}

MHA_API void mha_gguf_weights_free(mha_gguf_weights *w)
{
    if (w) {
        free(w->storage);
        memset(w, 0, sizeof *w);
    }
}
