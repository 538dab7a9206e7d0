/* step.c — one decoding step on the paged KV cache (step.h).
 *
 * Three phases, each a set of tasks (scheduler.c): (1) per KV head and block of rows, the new
 * tokens' K|V (one GEMM over every sequence's rows, so the weights are read once per step,
 * not once per sequence) rotated at their positions and stored in the cache, and the group's
 * Q rotated into z; (2) per sequence and KV head, the context's K and V gathered from the
 * cache into the worker's panel scratch, Kᵀ packed once, and the forward's attention
 * (mha_attention_rows) for each query head of the group, with query i at position
 * n_past + i; (3) the output projection over all rows. */
#include "step.h"

#include <string.h>

#include "rope.h"

/* Row t of a panel matrix, columns [c0, c0 + n) (c0 a panel boundary) from / to a vector. */
static void to_panels(const mha_kernel *k, mha_mat m, int t, int c0, const float *src, int n)
{
    for (int c = 0; c < n; c += k->bw)
        memcpy(mha_mat_at(k, m, t, c0 + c), src + c, (size_t)(n - c < k->bw ? n - c : k->bw) * sizeof *src);
}

static void from_panels(const mha_kernel *k, mha_mat m, int t, int c0, float *dst, int n)
{
    for (int c = 0; c < n; c += k->bw)
        memcpy(dst + c, mha_mat_at(k, m, t, c0 + c), (size_t)(n - c < k->bw ? n - c : k->bw) * sizeof *dst);
}

/* The sequence of row r, walking forward from sequence q (rows only grow). */
static int seq_of(const mha_step_job *j, int r, int q)
{
    while (r >= j->row0[q + 1])
        q++;
    return q;
}

void mha_step_project(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const mha_step *st = j->step;
    const int d = f->d, dk = f->dk, dkp = f->dkp, width = (f->group + 2) * dkp, m = r1 - r0;
    const float *w = f->wqkv + (size_t)g * d * width, *bias = f->bqkv + (size_t)g * width;
    const float *x = st->x + (size_t)r0 * d;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const int first = seq_of(j, r0, 0);

    /* K and V of the new rows: one GEMM into scratch columns [dkp, 3·dkp), then row by row
     * RoPE at the row's position and a copy into its cache slot */
    mha_attention_project(f, s, m, x, NULL, w, bias, dkp, dkp, 2 * dkp);
    for (int i = 0, q = first; i < m; i++) {
        q = seq_of(j, r0 + i, q);
        const int pos = st->n_past[q] + (r0 + i - j->row0[q]);
        if (f->rope != MHA_ROPE_NONE)
            mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, dkp, pos, f->rope, f->rope_dim, f->rope_cos, f->rope_sin);
        const int block = st->blocks[(size_t)q * st->max_blocks + pos / j->cache->block_size];
        const int slot = pos % j->cache->block_size;
        from_panels(k, qkv, i, dkp, mha_kv_k(j->cache, block, g, slot), dk);
        from_panels(k, qkv, i, 2 * dkp, mha_kv_v(j->cache, block, g, slot), dk);
    }
    /* Q of each query head of the group, rotated, into its columns of z */
    for (int h = 0; h < f->group; h++) {
        mha_attention_project(f, s, m, x, NULL, w, bias, h == 0 ? 0 : (h + 2) * dkp, 0, dkp);
        float *z = f->z + (size_t)r0 * d + (size_t)(g * f->group + h) * dk;
        for (int i = 0, q = first; i < m; i++) {
            q = seq_of(j, r0 + i, q);
            if (f->rope != MHA_ROPE_NONE)
                mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, 0, st->n_past[q] + (r0 + i - j->row0[q]), f->rope,
                              f->rope_dim, f->rope_cos, f->rope_sin);
            from_panels(k, qkv, i, 0, z + (size_t)i * d, dk);
        }
    }
}

void mha_step_attend(const mha_step_job *j, int q, int g, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const mha_step *st = j->step;
    const int n_new = st->n_new[q], n_past = st->n_past[q], ctx = n_past + n_new, dk = f->dk, dkp = f->dkp;
    if (n_new == 0)
        return;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const int32_t *table = st->blocks + (size_t)q * st->max_blocks;
    /* the context's K and V, position by position from its blocks */
    for (int t = 0; t < ctx; t++) {
        const int block = table[t / j->cache->block_size], slot = t % j->cache->block_size;
        to_panels(k, qkv, t, dkp, mha_kv_k(j->cache, block, g, slot), dk);
        to_panels(k, qkv, t, 2 * dkp, mha_kv_v(j->cache, block, g, slot), dk);
    }
    mha_pack_panels(k, dk, ctx, mha_mat_sub(k, qkv, 0, dkp), 1, s->kt);
    float *z = f->z + (size_t)j->row0[q] * f->d;
    for (int h = g * f->group; h < (g + 1) * f->group; h++) {
        for (int i = 0; i < n_new; i++) /* its Q (rotated in phase 1), then Z over it */
            to_panels(k, qkv, i, 0, z + (size_t)i * f->d + (size_t)h * dk, dk);
        mha_attention_rows(f, h, s, n_new, ctx, n_past, z, NULL);
    }
}

void mha_step_out_rows(const mha_step_job *j, int r0, int r1, float *apack)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const ptrdiff_t d = f->d;
    mha_mat om = mha_mat_rows(k, f->out + (size_t)r0 * d, d);
    if (f->has_bias)
        mha_mat_fill_rows(k, om, r1 - r0, f->d, f->bo);
    mha_gemm(k, r1 - r0, f->d, f->d, 1.0f, mha_mat_rows(k, f->z + (size_t)r0 * d, d), mha_mat_panels(k, f->wo, f->d),
             f->has_bias ? 1.0f : 0.0f, om, apack);
}
