/* weights.c — copy and pack weights once, at mha_set_weights, into the panels the GEMM reads
 * in place: per KV head g one (d, (group + 2)·dkp) matrix [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1}
 * | …], each part starting on a panel boundary (zero columns up to dkp), and Wo. Without GQA
 * (group 1) that is [Wq_h | Wk_h | Wv_h]: x_b · W is a single GEMM for Q, K and V. */
#include "weights.h"

#include "gemm.h"

#include <string.h>

mha_status mha_weights_check(const mha_weights *w, int bias)
{
    if (!w || !w->w_q || !w->w_k || !w->w_v || !w->w_o)
        return MHA_ERR_INVALID_ARG;
    if (w->layout != MHA_LAYOUT_XW && w->layout != MHA_LAYOUT_TORCH)
        return MHA_ERR_INVALID_ARG;
    int qkv = !!w->b_q + !!w->b_k + !!w->b_v;
    if (bias ? qkv != 3 : qkv + !!w->b_o != 0) /* with bias, b_o may be absent (Qwen2) */
        return MHA_ERR_INVALID_ARG;
    return MHA_OK;
}

/* Element (i, o) of the map x ↦ x·W from d inputs to n outputs, i = input, o = output. */
static float at(const float *w, mha_layout layout, size_t d, size_t n, size_t i, size_t o)
{
    return layout == MHA_LAYOUT_XW ? w[i * n + o] : w[o * d + i];
}

void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_kernel *k, int dkp,
                      const mha_arena_views *v)
{
    const size_t d = (size_t)dims->d, dk = (size_t)dims->dk, g_n = (size_t)dims->group;
    const size_t kvd = (size_t)dims->kvh * dk, width = (g_n + 2) * (size_t)dkp;
    const size_t bw = (size_t)k->bw, dp = mha_round_up(d, bw);

    /* KV head g: the (d, (group + 2)·dkp) matrix [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1} | …],
     * each part dkp wide (zero columns after d_k), panel by panel */
    for (size_t g = 0; g < (size_t)dims->kvh; g++) {
        float *dst = v->wqkv + g * d * width;
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
                src = w->w_q, bias = w->b_q, n = d, o = head * dk + c;
            }
            float *col = dst + (j / bw) * d * bw + j % bw;
            for (size_t i = 0; i < d; i++)
                col[i * bw] = c < dk ? at(src, w->layout, d, n, i, o) : 0.0f;
            bdst[j] = c < dk && bias ? bias[o] : 0.0f;
        }
    }
    for (size_t j = 0; j < dp; j++) {
        float *col = v->wo + (j / bw) * d * bw + j % bw;
        for (size_t i = 0; i < d; i++)
            col[i * bw] = j < d ? at(w->w_o, w->layout, d, d, i, j) : 0.0f;
    }
    if (w->b_o)
        memcpy(v->bo, w->b_o, d * sizeof(float));
    else
        memset(v->bo, 0, d * sizeof(float));
}
