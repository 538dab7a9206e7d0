/* weights.c — copy and pack weights once, at mha_set_weights, into the panels the GEMM reads
 * in place: per head one (d, 3·dkp) matrix, so x_b · [Wq_h | Wk_h | Wv_h] is a single GEMM,
 * each of Q, K, V starting on a panel boundary (zero columns up to dkp), and Wo. */
#include "weights.h"

#include "gemm.h"

#include <string.h>

mha_status mha_weights_check(const mha_weights *w, int bias)
{
    if (!w || !w->w_q || !w->w_k || !w->w_v || !w->w_o)
        return MHA_ERR_INVALID_ARG;
    if (w->layout != MHA_LAYOUT_XW && w->layout != MHA_LAYOUT_TORCH)
        return MHA_ERR_INVALID_ARG;
    int given = !!w->b_q + !!w->b_k + !!w->b_v + !!w->b_o;
    if (given != (bias ? 4 : 0))
        return MHA_ERR_INVALID_ARG;
    return MHA_OK;
}

/* Element (i, o) of the map x ↦ x·W, i = input feature, o = output feature. */
static float at(const float *w, mha_layout layout, size_t d, size_t i, size_t o)
{
    return layout == MHA_LAYOUT_XW ? w[i * d + o] : w[o * d + i];
}

void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_kernel *k, int dkp,
                      const mha_arena_views *v)
{
    const size_t d = (size_t)dims->d, dk = (size_t)dims->dk, h = (size_t)dims->h, p3 = 3 * (size_t)dkp;
    const size_t bw = (size_t)k->bw, dp = mha_round_up(d, bw);
    const float *src[3] = {w->w_q, w->w_k, w->w_v};
    const float *bias[3] = {w->b_q, w->b_k, w->b_v};

    /* head hd: the (d, 3·dkp) matrix [Wq_h | 0 | Wk_h | 0 | Wv_h | 0], panel by panel */
    for (size_t hd = 0; hd < h; hd++) {
        float *dst = v->wqkv + hd * d * p3;
        for (size_t j = 0; j < p3; j++) {
            const size_t part = j / (size_t)dkp, c = j % (size_t)dkp;
            float *col = dst + (j / bw) * d * bw + j % bw;
            for (size_t i = 0; i < d; i++)
                col[i * bw] = c < dk ? at(src[part], w->layout, d, i, hd * dk + c) : 0.0f;
            v->bqkv[hd * p3 + j] = c < dk && bias[part] ? bias[part][hd * dk + c] : 0.0f;
        }
    }
    for (size_t j = 0; j < dp; j++) {
        float *col = v->wo + (j / bw) * d * bw + j % bw;
        for (size_t i = 0; i < d; i++)
            col[i * bw] = j < d ? at(w->w_o, w->layout, d, i, j) : 0.0f;
    }
    if (w->b_o)
        memcpy(v->bo, w->b_o, d * sizeof(float));
    else
        memset(v->bo, 0, d * sizeof(float));
}
