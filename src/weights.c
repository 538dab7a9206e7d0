/* weights.c — copy and pack weights once, at mha_set_weights, into the panels the GEMM reads
 * in place: per KV head g one (d, (group + 2)·dkp) matrix [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1}
 * | …], each part starting on a panel boundary (zero columns up to dkp), and Wo (qd, d). Without GQA
 * (group 1) that is [Wq_h | Wk_h | Wv_h]: x_b · W is a single GEMM for Q, K and V. bf16 engines
 * hold the same matrices in bf16 B panels (bgemm.h). */
#include "weights.h"

#include "bgemm.h"
#include "gemm.h"
#include "status.h"

#include <string.h>

mha_status mha_weights_check(const mha_weights *w, const mha_dims *dims, char *why, size_t why_len)
{
    if (dims->mla.kv_lora_rank)
        return mha_errorf(why, why_len, MHA_ERR_CONFIG, "an MLA engine (model.mla) takes mha_set_mla_weights");
    if (dims->dv != dims->dk) /* the projections take V of head_dim features */
        return mha_errorf(why, why_len, MHA_ERR_CONFIG, "v_head_dim %d differs from head_dim %d: such an engine runs "
                          "mha_core_forward only (no projections)", dims->dv, dims->dk);
    if (!w)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "weights are NULL");
    if (!w->w_q || !w->w_k || !w->w_v || !w->w_o)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "w_q %s, w_k %s, w_v %s, w_o %s: all four are needed",
                          w->w_q ? "set" : "NULL", w->w_k ? "set" : "NULL", w->w_v ? "set" : "NULL",
                          w->w_o ? "set" : "NULL");
    if (w->layout != MHA_LAYOUT_XW && w->layout != MHA_LAYOUT_TORCH)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "layout %d is neither MHA_LAYOUT_XW nor MHA_LAYOUT_TORCH",
                          (int)w->layout);
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

/* Element (i, o) of the map x ↦ x·W from d inputs to n outputs, i = input, o = output. */
static float at(const float *w, mha_layout layout, size_t d, size_t n, size_t i, size_t o)
{
    return layout == MHA_LAYOUT_XW ? w[i * n + o] : w[o * d + i];
}

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

/* Column j of m: col(i) for the d rows, then (bf16) the padding rows. */
#define PUT_COLUMN(m, j, value)                                                                  \
    do {                                                                                         \
        for (size_t i = 0; i < (m)->d; i++)                                                      \
            put((m), i, (j), (value));                                                           \
        for (size_t i = (m)->d; (m)->h && i < mha_bk_kp((int)(m)->d); i++)                       \
            put((m), i, (j), 0.0f);                                                              \
    } while (0)

void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_kernel *k, int dkp,
                      const mha_arena_views *v)
{
    const size_t d = (size_t)dims->d, dk = (size_t)dims->dk, qd = (size_t)dims->qd, g_n = (size_t)dims->group;
    const size_t kvd = (size_t)dims->kvh * dk, width = (g_n + 2) * (size_t)dkp;
    const size_t bw = (size_t)k->bw, dp = mha_round_up(d, v->wo16 ? MHA_BT_N : bw);
    const size_t ps = mha_bk_ps(dims->d);

    /* KV head g: the (d, (group + 2)·dkp) matrix [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1} | …],
     * each part dkp wide (zero columns after d_k), panel by panel */
    for (size_t g = 0; g < (size_t)dims->kvh; g++) {
        const packed m = {v->wqkv ? v->wqkv + g * d * width : NULL,
                          v->wqkv16 ? v->wqkv16 + g * mha_bk_kp(dims->d) * width : NULL, d, bw, ps};
        float *bdst = v->bqkv + g * width;
        for (size_t j = 0; j < width; j++) {
            const size_t part = j / (size_t)dkp, c = j % (size_t)dkp;
            const float *src, *bias;
            size_t n, o;
            if (part == 1 || part == 2) { /* K or V of this group */
                src = part == 1 ? w->w_k : w->w_v, bias = part == 1 ? w->b_k : w->b_v;
                n = kvd, o = g * dk + c;
            } else { /* Q of the group's head 0 (part 0) or head part - 2 */
                const size_t head = g * g_n + (part == 0 ? 0 : part - 2);
                src = w->w_q, bias = w->b_q, n = qd, o = head * dk + c;
            }
            PUT_COLUMN(&m, j, c < dk ? at(src, w->layout, d, n, i, o) : 0.0f);
            bdst[j] = c < dk && bias ? bias[o] : 0.0f;
        }
    }
    /* Wo: qd rows (the heads' outputs) to d columns */
    const packed mo = {v->wo, v->wo16, qd, bw, mha_bk_ps(dims->qd)};
    for (size_t j = 0; j < dp; j++)
        PUT_COLUMN(&mo, j, j < d ? at(w->w_o, w->layout, qd, d, i, j) : 0.0f);
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
