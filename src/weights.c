/* weights.c — copy and pack weights once, at mha_set_weights, into the panels the GEMM reads
 * in place: per KV head g one (d, (group + 2)·dkp) matrix [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1}
 * | …], each part starting on a panel boundary (zero columns up to dkp), and Wo (qd, d). Without GQA
 * (group 1) that is [Wq_h | Wk_h | Wv_h]: x_b · W is a single GEMM for Q, K and V. bf16 engines
 * hold the same matrices in bf16 B panels (bgemm.h); engines holding blocks, in panels of MHA_QP
 * outputs (quant.h), as stored or quantized here. */
#include "weights.h"

#include "bgemm.h"
#include "gemm.h"
#include "qgemm.h"
#include "quant.h"
#include "status.h"

#include <string.h>

/* Matrix m (MHA_W_Q …) of w handed as another type than floats: one mha reads, its blocks
 * given in TORCH layout, its rows whole blocks, and one this engine takes (any, held as
 * floats; held as blocks, floats or its own type). */
static mha_status typed_check(const mha_weights *w, int m, const mha_dims *dims, char *why, size_t why_len)
{
    static const char *const names[MHA_W_COUNT] = {"w_q", "w_k", "w_v", "w_o"};
    const mha_weight_type t = w->type[m], held = dims->wtype[m];
    const char *name = mha_weight_type_name(t);
    if (t == MHA_WEIGHT_F32)
        return MHA_OK;
    if (!name)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "%s: type %d is not one mha reads (f32, f16, bf16, q8_0, "
                          "q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)", names[m], (int)t);
    if (!w->blocks[m])
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "%s: type %s with blocks[%d] NULL", names[m], name, m);
    if (w->layout != MHA_LAYOUT_TORCH)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "%s: type %s needs MHA_LAYOUT_TORCH (a row of blocks per "
                          "output, as GGUF stores it)", names[m], name);
    const mha_qtype *q = mha_qtype_of(t);
    const int in = m == MHA_W_O ? dims->qd : dims->d;
    if (q && in % q->qk)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "%s: type %s has blocks of %d inputs; its rows have %d",
                          names[m], name, q->qk, in);
    if (held != MHA_WEIGHT_F32 && q && t != held)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "%s: type %s, but the engine holds %s (weight_type[%d]): "
                          "requantizing would round twice; hand floats, or hold it as %s or f32", names[m], name,
                          mha_weight_type_name(held), m, name);
    return MHA_OK;
}

mha_status mha_weights_check(const mha_weights *w, const mha_dims *dims, char *why, size_t why_len)
{
    if (dims->mla.kv_lora_rank)
        return mha_errorf(why, why_len, MHA_ERR_CONFIG, "an MLA engine (model.mla) takes mha_set_mla_weights");
    if (dims->dv != dims->dk) /* the projections take V of head_dim features */
        return mha_errorf(why, why_len, MHA_ERR_CONFIG, "v_head_dim %d differs from head_dim %d: such an engine runs "
                          "mha_core_forward only (no projections)", dims->dv, dims->dk);
    if (!w)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "weights are NULL");
    const int given[MHA_W_COUNT] = {w->w_q || w->type[MHA_W_Q], w->w_k || w->type[MHA_W_K], w->w_v || w->type[MHA_W_V],
                                    w->w_o || w->type[MHA_W_O]}; /* a typed matrix: blocks checked below */
    if (!given[MHA_W_Q] || !given[MHA_W_K] || !given[MHA_W_V] || !given[MHA_W_O])
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "w_q %s, w_k %s, w_v %s, w_o %s: all four are needed",
                          given[MHA_W_Q] ? "set" : "NULL", given[MHA_W_K] ? "set" : "NULL",
                          given[MHA_W_V] ? "set" : "NULL", given[MHA_W_O] ? "set" : "NULL");
    if (w->layout != MHA_LAYOUT_XW && w->layout != MHA_LAYOUT_TORCH)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "layout %d is neither MHA_LAYOUT_XW nor MHA_LAYOUT_TORCH",
                          (int)w->layout);
    for (int m = 0; m < MHA_W_COUNT; m++) {
        mha_status st = typed_check(w, m, dims, why, why_len);
        if (st != MHA_OK)
            return st;
    }
    const int qkv = !!w->b_q + !!w->b_k + !!w->b_v;
    if (dims->bias ? qkv != 3 : qkv + !!w->b_o != 0) /* with bias, b_o may be absent (Qwen2) */
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG,
                          "biases b_q %s, b_k %s, b_v %s, b_o %s; the config has bias %d (%s)", w->b_q ? "set" : "NULL",
                          w->b_k ? "set" : "NULL", w->b_v ? "set" : "NULL", w->b_o ? "set" : "NULL", dims->bias,
                          dims->bias ? "b_q, b_k, b_v needed, b_o optional" : "all NULL");
    const mha_qk_norm_kind kind = dims->qk_norm.kind;
    const int norm = kind != MHA_QK_NORM_NONE;
    if (!!w->q_norm != norm || !!w->k_norm != norm)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "q_norm %s, k_norm %s; the config has qk_norm %s (%s)",
                          w->q_norm ? "set" : "NULL", w->k_norm ? "set" : "NULL",
                          kind == MHA_QK_NORM_FULL ? "full" : norm ? "head" : "none",
                          kind == MHA_QK_NORM_FULL ? "both needed, n_heads·d_k and n_kv_heads·d_k"
                          : norm                   ? "both needed, d_k each"
                                                   : "both NULL");
    if (!!w->sinks != !!dims->sinks)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "sinks %s; the config has sinks %d (%s)",
                          w->sinks ? "set" : "NULL", dims->sinks, dims->sinks ? "n_heads logits needed" : "NULL");
    return mha_errorf(why, why_len, MHA_OK, "%s", "");
}

/* A matrix as the caller hands it: the map x ↦ x·W from `in` inputs to `out` outputs, floats
 * (XW or TORCH) or rows of another type (TORCH). */
typedef struct source {
    const float *f;
    const unsigned char *rows;
    mha_weight_type type;
    mha_layout layout;
    size_t in, out;
} source;

static source source_of(const mha_weights *w, int m, size_t in, size_t out)
{
    const float *const f[MHA_W_COUNT] = {w->w_q, w->w_k, w->w_v, w->w_o};
    return (source){f[m], w->blocks[m], w->type[m], w->layout, in, out};
}

/* Inputs [i0, i0 + n) of output o as floats (i0 a multiple of the type's block). */
static void source_floats(const source *s, size_t o, size_t i0, size_t n, float *y)
{
    if (s->type != MHA_WEIGHT_F32) {
        const size_t row = mha_weight_row_bytes(s->type, (int64_t)s->in);
        mha_weight_row_floats(s->type, s->rows + o * row + mha_weight_row_bytes(s->type, (int64_t)i0), (int64_t)n, y);
    } else if (s->layout == MHA_LAYOUT_XW) {
        for (size_t i = 0; i < n; i++)
            y[i] = s->f[(i0 + i) * s->out + o];
    } else {
        memcpy(y, s->f + o * s->in + i0, n * sizeof *y);
    }
}

/* Inputs read at a time: whole blocks of every type. */
enum { CHUNK = 256 };

/* One packed matrix of d input rows: float panels of bw columns, or bf16 B panels (its rows
 * padded with zeros to whole k tiles, panel stride ps). */
typedef struct packed {
    float *f;
    mha_bf16 *h;
    size_t d, bw, ps;
} packed;

static void put(const packed *m, size_t i, size_t j, float x)
{
    if (m->h)
        m->h[mha_bk_b_index((int)i, (int)j, m->ps)] = mha_bf16_round(x);
    else
        m->f[(j / m->bw) * m->d * m->bw + i * m->bw + j % m->bw] = x;
}

/* Column j of m: output o of s (s NULL: zeros), then (bf16) the padding rows. */
static void put_column(const packed *m, size_t j, const source *s, size_t o)
{
    float y[CHUNK] = {0};
    for (size_t i0 = 0; i0 < m->d; i0 += CHUNK) {
        const size_t n = m->d - i0 < CHUNK ? m->d - i0 : CHUNK;
        if (s)
            source_floats(s, o, i0, n, y);
        for (size_t i = 0; i < n; i++)
            put(m, i0 + i, j, y[i]);
    }
    for (size_t i = m->d; m->h && i < mha_bk_kp((int)m->d); i++)
        put(m, i, j, 0.0f);
}

/* Lane `lane` of a panel of block type q (kk inputs): output o of s as stored when it is of
 * that type, else quantized from its floats a block at a time (s NULL: zeros). */
static void put_qcolumn(const mha_qtype *q, unsigned char *panel, int kk, int lane, const source *s, size_t o)
{
    if (!s || s->type == q->type) {
        mha_qpanel_put(q, panel, kk, lane, s ? s->rows + o * mha_weight_row_bytes(q->type, kk) : NULL);
        return;
    }
    float y[CHUNK];
    unsigned char block[CHUNK]; /* a block's bytes (at most Q6_K's 210) */
    for (int b = 0; b < kk / q->qk; b++) {
        source_floats(s, o, (size_t)b * q->qk, (size_t)q->qk, y);
        mha_quantize_row(q->type, y, block, q->qk);
        mha_qpanel_put(q, panel + (size_t)b * MHA_QP * q->bytes, q->qk, lane, block);
    }
}

/* Column j of KV head g's [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1} | …]: which matrix (MHA_W_*;
 * -1: a padding column after d_k) and its output. */
static int qkv_column(const mha_dims *dims, int dkp, size_t g, size_t j, size_t *o)
{
    const size_t part = j / (size_t)dkp, c = j % (size_t)dkp, dk = (size_t)dims->dk;
    if (c >= dk)
        return -1;
    if (part == 1 || part == 2) { /* K or V of this group */
        *o = g * dk + c;
        return part == 1 ? MHA_W_K : MHA_W_V;
    }
    *o = (g * (size_t)dims->group + (part == 0 ? 0 : part - 2)) * dk + c; /* Q of head 0, or of head part − 2 */
    return MHA_W_Q;
}

void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_kernel *k, int dkp,
                      const mha_arena_views *v)
{
    const size_t d = (size_t)dims->d, qd = (size_t)dims->qd, kvd = (size_t)dims->kvh * (size_t)dims->dk;
    const size_t width = ((size_t)dims->group + 2) * (size_t)dkp;
    const size_t bw = (size_t)k->bw, dp = mha_round_up(d, v->wo16 ? MHA_BT_N : dims->quant ? MHA_QP : bw);
    const source src[MHA_W_COUNT] = {source_of(w, MHA_W_Q, d, qd), source_of(w, MHA_W_K, d, kvd),
                                     source_of(w, MHA_W_V, d, kvd), source_of(w, MHA_W_O, qd, d)};
    const mha_qmat qkv = mha_qmat_qkv(dims, dkp, v->wqkvq), om = mha_qmat_o(dims, v->woq);
    const float *const bias[MHA_W_COUNT] = {w->b_q, w->b_k, w->b_v, w->b_o};

    /* KV head g: the (d, (group + 2)·dkp) matrix [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1} | …],
     * each part dkp wide (zero columns after d_k), column by column */
    for (size_t g = 0; g < (size_t)dims->kvh; g++) {
        const packed m = {v->wqkv ? v->wqkv + g * d * width : NULL,
                          v->wqkv16 ? v->wqkv16 + g * mha_bk_kp(dims->d) * width : NULL, d, bw, mha_bk_ps(dims->d)};
        for (size_t j = 0; j < width; j++) {
            size_t o = 0;
            const int mat = qkv_column(dims, dkp, g, j, &o);
            const source *s = mat >= 0 ? &src[mat] : NULL;
            if (dims->quant) {
                const mha_qtype *t;
                const unsigned char *panel = mha_qmat_panel(&qkv, (int)(g * width + j / MHA_QP * MHA_QP), &t);
                if (panel) /* else padding, held nowhere */
                    put_qcolumn(t, (unsigned char *)panel, dims->d, (int)(j % MHA_QP), s, o);
            } else {
                put_column(&m, j, s, o);
            }
            v->bqkv[g * width + j] = mat >= 0 && bias[mat] ? bias[mat][o] : 0.0f;
        }
    }
    /* Wo: qd rows (the heads' outputs) to d columns */
    const packed mo = {v->wo, v->wo16, qd, bw, mha_bk_ps(dims->qd)};
    for (size_t j = 0; j < dp; j++) {
        const source *s = j < d ? &src[MHA_W_O] : NULL;
        if (dims->quant) {
            const mha_qtype *t;
            const unsigned char *panel = mha_qmat_panel(&om, (int)(j / MHA_QP * MHA_QP), &t);
            put_qcolumn(t, (unsigned char *)panel, dims->qd, (int)(j % MHA_QP), s, j);
        } else {
            put_column(&mo, j, s, j);
        }
    }
    if (w->b_o)
        memcpy(v->bo, w->b_o, d * sizeof(float));
    else
        memset(v->bo, 0, d * sizeof(float));
    /* QK-norm's factors, as HF multiplies: w, or (1 + w) in float32 (Gemma) */
    const float offset = (float)dims->qk_norm.weight_offset;
    const int nq = mha_qk_norm_len(dims->qk_norm.kind, dims->h, dims->dk);
    const int nk = mha_qk_norm_len(dims->qk_norm.kind, dims->kvh, dims->dk);
    for (int c = 0; v->qk_norm && c < nq; c++)
        v->qk_norm[c] = offset + w->q_norm[c];
    for (int c = 0; v->qk_norm && c < nk; c++)
        v->qk_norm[nq + c] = offset + w->k_norm[c];
    if (v->sinks)
        memcpy(v->sinks, w->sinks, (size_t)dims->h * sizeof(float));
}
