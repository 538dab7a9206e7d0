/* forward.c — the forward's tasks (scheduler.c runs them): the query input packed once per
 * sequence, one KV head of one sequence (the group task), QK-norm's sums over the whole
 * projection, and one block of output rows, on the packed GEMM. A step projects its rows with
 * the same functions (mha_attention_project, mha_attention_norm_part: step.c).
 *
 * Group task (a KV head and the query heads that read it; one head without GQA): K|V =
 * x_b · [Wk_g | Wv_g] into the worker's panel-form scratch (V is then already in the form the
 * A·V GEMM reads; without GQA one GEMM gives Q|K|V), QK-norm and RoPE on K, Kᵀ packed once
 * for every query head of the group; per query head its Q (QK-norm, RoPE), then for each
 * query block (mha_attention_rows, attention.c): scores = Q_blk · Kᵀ · scale (1/sqrt(d_k) by
 * default) up to the block's last visible key, their logits (softcap, ALiBi), a masked exp per
 * row (softmax without its division), Z_blk = E · V written straight into the head's columns
 * of Z, the head's sink merged in, and each Z row divided by its sum: d_k divisions, not
 * seq_kv. */
#include "attention.h"

#include "rope.h"

#include <string.h>

int mha_attention_packed_rows(const mha_fwd *f, int b)
{
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    return f->call->fused && kl > ql ? kl : ql;
}

void mha_attention_pack_rows(const mha_fwd *f, int b, int r0, int r1)
{
    const mha_kernel *k = f->kernel;
    const mha_mat x = mha_mat_rows(k, f->call->q + (size_t)b * f->call->seq_q * f->d, f->d);
    char *xp = (char *)(f->buf.xpack + (size_t)b * f->buf.xpack_stride);
    /* r0 is a multiple of MHA_PACK_BLOCK, so of every A panel's rows */
    f->prod->pack_a(k, x, r0, r1 - r0, f->d, xp + (size_t)r0 * f->prod->a_row(f->d) * f->prod->esz);
}

void mha_attention_project(const mha_fwd *f, const mha_scratch *s, int m, const float *x, const float *xp, int g,
                           int wcol, int ccol, int n)
{
    if (m <= 0)
        return;
    const mha_kernel *k = f->kernel;
    const size_t width = (size_t)(f->group + 2) * f->dkp;
    const float *bias = f->bqkv + (size_t)g * width;
    mha_mat c = mha_mat_sub(k, mha_mat_panels(k, s->qkv, f->rows), 0, ccol);
    /* wcol is a multiple of dkp, so of every kind's panels */
    const mha_gemm_ctx gc = mha_fwd_gemm(f, s);
    f->prod->gemm(&gc, m, n, f->d, xp, mha_mat_rows(k, x, f->d), f->wqkv, g * (int)width + wcol,
                  f->has_bias ? bias + wcol : NULL, c);
}

/* QK-norm (of query head `head`, or is_k: of KV head `head`; ss as mha_attention_norm_rows),
 * then the rotary embedding, of rows [0, rows) of the scratch columns starting at col (Q at
 * 0, K at dkp). */
static void norm_rotate(const mha_fwd *f, const mha_scratch *s, int rows, int col, int pos0, int is_k, int head,
                        const double *ss)
{
    mha_attention_norm_rows(f, mha_mat_panels(f->kernel, s->qkv, f->rows), rows, col, is_k, head, ss);
    if (f->rope != MHA_ROPE_NONE && rows > 0)
        mha_rope_rows(f->kernel, mha_mat_panels(f->kernel, s->qkv, f->rows), rows, col, pos0, f->rope, f->rope_dim,
                      f->rope_cos, f->rope_sin);
}

/* Query head h of sequence b of a forward: key j at position j, query i at i + seq_kv - seq_q. */
static void attend(const mha_fwd *f, int b, int h, const mha_scratch *s, int ql, int kl)
{
    float *attn = f->call->attn ? f->call->attn + ((size_t)b * f->h + h) * f->call->seq_q * f->call->seq_kv : NULL;
    const mha_queries q = {.q = mha_mat_panels(f->kernel, s->qkv, f->rows)};
    float *z = f->buf.z + (size_t)b * f->call->seq_q * f->qd + (size_t)h * f->dk;
    mha_attention_rows(f, h, s, q, ql, kl, f->call->seq_kv - f->call->seq_q, z, f->qd, f->sinks, attn, NULL, NULL);
}

void mha_attention_group(const mha_fwd *f, int b, int g, const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    const int dk = f->dk, dkp = f->dkp, d = f->d;
    const float *xq = f->call->q + (size_t)b * f->call->seq_q * d;
    const float *xk = f->call->k + (size_t)b * f->call->seq_kv * d;
    const float *xv = f->call->v + (size_t)b * f->call->seq_kv * d;
    const float *xp = f->buf.xpack + (size_t)b * f->buf.xpack_stride;
    const int one_gemm = f->call->fused && f->group == 1 && !f->buf.k_saved; /* Q|K|V of the only head in one GEMM */
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const ptrdiff_t kd = (ptrdiff_t)f->kvh * dk;

    /* step 1: K and V of this KV head for the valid keys, into columns [dkp, 3·dkp) (QK-norm
     * full: K as mha_attention_norm_sums projected it) */
    if (f->buf.k_saved) {
        mha_attention_project(f, s, kl, f->call->fused ? xq : f->call->kv_shared ? xk : xv, f->call->fused ? xp : NULL, g, 2 * dkp,
                              2 * dkp, dkp);
        mha_mat_set_rows(k, qkv, kl, dkp, dk, f->buf.k_saved + (size_t)b * f->call->seq_kv * kd + (size_t)g * dk, kd);
    } else if (one_gemm)
        mha_attention_project(f, s, ql > kl ? ql : kl, xq, xp, g, 0, 0, 3 * dkp);
    else if (f->call->fused) /* self-attention: the packed query input is the keys' input too */
        mha_attention_project(f, s, kl, xq, xp, g, dkp, dkp, 2 * dkp);
    else if (f->call->kv_shared)
        mha_attention_project(f, s, kl, xk, NULL, g, dkp, dkp, 2 * dkp);
    else {
        mha_attention_project(f, s, kl, xk, NULL, g, dkp, dkp, dkp);
        mha_attention_project(f, s, kl, xv, NULL, g, 2 * dkp, 2 * dkp, dkp);
    }
    const double *kss = f->buf.k_ss ? f->buf.k_ss + (size_t)b * f->call->seq_kv * f->kvh : NULL;
    const double *qss = f->buf.q_ss ? f->buf.q_ss + (size_t)b * f->call->seq_q * f->kvh : NULL;
    norm_rotate(f, s, kl, dkp, 0, 1, g, kss); /* key j at position j */
    /* step 2: Kᵀ in panels (bf16: Kᵀ and V in bf16 B panels), once for every query head of the
     * group and every query block */
    if (kl > 0)
        f->attn->pack_kv(f, s, kl, mha_mat_sub(k, qkv, 0, dkp), mha_mat_sub(k, qkv, 0, 2 * dkp));
    /* step 3: each query head of the group: its Q (rotated; QK-norm full: from its columns of
     * z, read before its output goes there), then its attention */
    for (int j = 0; j < f->group; j++) {
        if (f->buf.k_saved)
            mha_mat_set_rows(k, qkv, ql, 0, dk,
                             f->buf.z + (size_t)b * f->call->seq_q * f->qd + (size_t)(g * f->group + j) * dk, f->qd);
        else if (!one_gemm)
            mha_attention_project(f, s, ql, xq, xp, g, j == 0 ? 0 : (j + 2) * dkp, 0, dkp);
        norm_rotate(f, s, ql, 0, f->call->seq_kv - f->call->seq_q, 0, g * f->group + j, qss); /* query i at i + seq_kv - seq_q */
        attend(f, b, g * f->group + j, s, ql, kl);
    }
}

void mha_attention_norm_part(const mha_fwd *f, const mha_scratch *s, int g, int kl, const float *xk, const float *xkp,
                             size_t k0, int ql, const float *xq, const float *xqp, size_t q0)
{
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, dkp = f->dkp;
    const ptrdiff_t kd = (ptrdiff_t)f->kvh * dk;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    mha_attention_project(f, s, kl, xk, xkp, g, dkp, dkp, dkp);
    mha_attention_sum_squares(f, qkv, kl, dkp, f->buf.k_ss + k0 * f->kvh + g, 0);
    mha_mat_get_rows(k, qkv, kl, dkp, dk, f->buf.k_saved + k0 * kd + (size_t)g * dk, kd);
    for (int j = 0; j < f->group; j++) {
        mha_attention_project(f, s, ql, xq, xqp, g, j == 0 ? 0 : (j + 2) * dkp, 0, dkp);
        mha_attention_sum_squares(f, qkv, ql, 0, f->buf.q_ss + q0 * f->kvh + g, j > 0);
        mha_mat_get_rows(k, qkv, ql, 0, dk, f->buf.z + q0 * f->qd + (size_t)(g * f->group + j) * dk, f->qd);
    }
}

void mha_attention_norm_sums(const mha_fwd *f, int b, int g, const mha_scratch *s)
{
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    const float *xq = f->call->q + (size_t)b * f->call->seq_q * f->d;
    const float *xp = f->buf.xpack + (size_t)b * f->buf.xpack_stride;
    /* K from the query input when fused (its packed rows too), else from the key input */
    mha_attention_norm_part(f, s, g, kl, f->call->fused ? xq : f->call->k + (size_t)b * f->call->seq_kv * f->d, f->call->fused ? xp : NULL,
                            (size_t)b * f->call->seq_kv, ql, xq, xp, (size_t)b * f->call->seq_q);
}

void mha_attention_out_rows(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const ptrdiff_t d = f->d, zd = f->qd;
    const int valid_end = r1 < ql ? r1 : ql;
    float *out = f->call->out + ((size_t)b * f->call->seq_q + r0) * d;
    const float *z = f->buf.z + ((size_t)b * f->call->seq_q + r0) * zd;

    if (valid_end > r0) { /* out (m, d) = Z (m, qd) · Wo (qd, d) (+ bo) */
        const int m = valid_end - r0;
        const mha_gemm_ctx gc = mha_fwd_gemm(f, s);
        f->prod->gemm(&gc, m, f->d, f->qd, NULL, mha_mat_rows(k, z, zd), f->wo, 0, f->has_bias ? f->bo : NULL,
                      mha_mat_rows(k, out, d));
    }
    const int zero_from = valid_end > r0 ? valid_end : r0;
    if (zero_from < r1)
        memset(f->call->out + ((size_t)b * f->call->seq_q + zero_from) * d, 0, (size_t)(r1 - zero_from) * d * sizeof(float));
}
