/* weights.c — copy and pack weights once, at mha_set_weights, so that every head task reads
 * one contiguous (d, 3·dk) block: x_b · [Wq_h | Wk_h | Wv_h] is then a single GEMM. */
#include "weights.h"

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

void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_arena_views *v)
{
    size_t d = (size_t)dims->d, dk = (size_t)dims->dk, h = (size_t)dims->h;
    const float *src[3] = {w->w_q, w->w_k, w->w_v};
    const float *bias[3] = {w->b_q, w->b_k, w->b_v};

    for (size_t hd = 0; hd < h; hd++) {
        float *dst = v->wqkv + hd * d * 3 * dk; /* (d, 3·dk) */
        for (size_t i = 0; i < d; i++)
            for (size_t p = 0; p < 3; p++)
                for (size_t c = 0; c < dk; c++)
                    dst[i * 3 * dk + p * dk + c] = at(src[p], w->layout, d, i, hd * dk + c);
        for (size_t p = 0; p < 3; p++)
            for (size_t c = 0; c < dk; c++)
                v->bqkv[hd * 3 * dk + p * dk + c] = bias[p] ? bias[p][hd * dk + c] : 0.0f;
    }
    for (size_t i = 0; i < d; i++)
        for (size_t o = 0; o < d; o++)
            v->wo[i * d + o] = at(w->w_o, w->layout, d, i, o);
    if (w->b_o)
        memcpy(v->bo, w->b_o, d * sizeof(float));
    else
        memset(v->bo, 0, d * sizeof(float));
}
