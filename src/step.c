/* step.c — one decoding step on the paged KV cache (step.h).
 *
 * Three phases, each a set of tasks (scheduler.c), after the new tokens are packed once into
 * the GEMM's A panels: (1) per KV head and block of rows, the new
 * tokens' K|V (one GEMM over every sequence's rows, so the weights are read once per step,
 * not once per sequence) rotated at their positions and stored in the cache, and the group's
 * Q rotated into z; (2) per sequence and KV head, either (prefill: more than
 * MHA_DECODE_MAX_NEW new tokens) the context's K and V gathered from the cache into the worker's
 * panel scratch, Kᵀ packed once, and the forward's attention (mha_attention_rows) for each
 * query head of the group, with query i at position n_past + i; or (decode) per chunk of
 * MHA_KV_CHUNK keys, the forward's chunks: float32 dot products and value updates read
 * straight from the cache blocks in the microkernel's sums, each key and value row once for
 * all queries of the group; bf16 the same tiles on the cache's elements with the bf16
 * kernels' sums where the kernel sums even first, else the chunk gathered into the kernel's
 * panels and the forward's own chunk step; then the chunks merged in order by the forward's rule
 * (flash-decoding: long contexts spread over the workers; the result independent of how many
 * there are, and of how the sequence's steps were cut); (3) the output projection over all
 * rows. bf16 (engine and cache): the rows are packed to bf16 A panels and every product of
 * the forward runs on its bf16 kernel; K and V are rounded to bf16 as they are stored and
 * gathered straight into the kernel's B panels. An int8 cache (either engine): V stored with a
 * scale and zero point per token and KV head (a bf16 engine reads the int8 values themselves,
 * exact in bf16, and the chunk applies the parameters; a float32 engine's tiles read each value
 * back, q·scale + zero, as they load it); K per feature over groups of MHA_KV_GROUP slots with a zero point, the group
 * still filling kept at full precision (the step's new K in j->k_full, the earlier ones of its
 * group in the cache's open-group pool) until complete: each query reads Kᵀ as its own group sees it
 * (k_view: the groups before as stored, its own at full precision) into the panels or the
 * decode tiles' rows, then k_commit stores what the step completed. Prefill and decode read
 * the same values. An int8 cache's scores are float32 products in either engine (a bf16
 * engine's on its queries unrounded: K is not rounded to bf16 on top of int8; its
 * probabilities and V are bf16's). QK-norm runs before RoPE;
 * the logits and the sink are the forward's (mha_attention_logits, mha_softmax_sink). */
#include "step.h"

#include <math.h>
#include <string.h>

#include "isa/isa.h"
#include "rope.h"

/* The sequence of row r, walking forward from sequence q (rows only grow). */
static int seq_of(const mha_step_job *j, int r, int q)
{
    while (r >= j->row0[q + 1])
        q++;
    return q;
}

/* The position of row r, which belongs to sequence q. */
static int pos_of(const mha_step_job *j, int r, int q)
{
    return j->step->n_past[q] + (r - j->row0[q]);
}

/* The first key a step's rows of sequence q may see: the window's start for its first new
 * token (its later tokens' windows start later), 0 without a window. */
static int first_key(const mha_step_job *j, int q)
{
    const int n_past = j->step->n_past[q];
    return mha_visible_keys(n_past, 1, j->f.window, n_past + j->step->n_new[q]).lo;
}

/* Where row r0 of the step's packed rows starts (A panels in the engine's precision). */
static const float *packed_rows(const mha_step_job *j, int r0)
{
    const mha_products *p = j->f.prod;
    return (const float *)(const void *)((const char *)j->f.xpack + (size_t)r0 * p->a_row(j->f.d) * p->esz);
}

int mha_step_panel(const mha_step_job *j)
{
    return j->f.prod->a_panel(j->f.kernel);
}

void mha_step_pack_rows(const mha_step_job *j, int r0, int r1)
{
    const mha_kernel *k = j->f.kernel;
    j->f.prod->pack_a(k, mha_mat_rows(k, j->step->x, j->f.d), r0, r1 - r0, j->f.d, (void *)packed_rows(j, r0));
}

/* Row i of the Q/K/V scratch (the step's row `row`), K at dkp and V at 2·dkp, into slot `slot`
 * of a cache block: K transposed (feature c at c · block_size + slot), V as a row (MLA: no V,
 * it is read from K); unscaled types (the type's put) a panel's run at a time. Scaled (int8):
 * V's whole row, through the worker's s->k8 (its scale is over all d_k features); K kept at
 * full precision in j->k_full until its group is complete (k_commit). */
static void store_kv(const mha_step_job *j, mha_mat qkv, int i, int row, int block, int g, int slot,
                     const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const mha_kv_cache *c = j->cache;
    const mha_kv_traits *kv = mha_kv_traits_of(c->type);
    const int dk = j->f.dk, dkp = j->f.dkp, bs = c->block_size;
    const size_t kt = mha_kv_kt_at(c, block, g) + (size_t)slot, v = c->mla ? 0 : mha_kv_v_at(c, block, g, slot);
    if (kv->scaled) { /* (never MLA) */
        float *full = j->k_full + ((size_t)row * j->f.kvh + g) * dk, *par = mha_kv_v_params(c, block, g) + 2 * (size_t)slot;
        mha_mat_get_rows(k, mha_mat_sub(k, qkv, i, 0), 1, dkp, dk, full, dk);
        mha_mat_get_rows(k, mha_mat_sub(k, qkv, i, 0), 1, 2 * dkp, dk, s->k8, dk); /* V's row, whole */
        kv->quantize(s->k8, 1, dk, 0, c->data, v, 1, &par[0], &par[1]);
        return;
    }
    for (int c0 = 0; c0 < dk; c0 += k->bw) {
        const int n = dk - c0 < k->bw ? dk - c0 : k->bw;
        kv->put(mha_mat_at(k, qkv, i, dkp + c0), n, c->data, kt + (size_t)c0 * bs, (size_t)bs);
        if (!c->mla)
            kv->put(mha_mat_at(k, qkv, i, 2 * dkp + c0), n, c->data, v + (size_t)c0, 1);
    }
}

/* ---- int8 K: per feature over groups of MHA_KV_GROUP slots, the group still filling at full
 * precision (a query sees the groups before its own as stored, its own at full precision, so
 * every (query, key) pair has one value however the steps were cut) ---- */

/* Sequence q's K row of KV head g at position p at full precision: the step's own (p >= n_past)
 * or, for the group holding n_past, the cache's open-group entry's. */
static const float *k_full_row(const mha_step_job *j, int q, int g, int p)
{
    const int n_past = j->step->n_past[q], dk = j->f.dk;
    if (p >= n_past)
        return j->k_full + ((size_t)(j->row0[q] + p - n_past) * j->f.kvh + g) * dk;
    const int t0 = mha_kv_group_of(j->cache->block_size, n_past).t;
    return j->tails[q] + ((size_t)g * MHA_KV_GROUP + (size_t)(p - t0)) * dk;
}

/* Group grp of (q, g), which this step completes, quantized from its full rows: per feature c
 * over the group's slots (the type's quantize, its parameters float16 values); into kt (feature
 * c of the group's slot u at kt[c · ld + u]) and the parameters (scales, then zero points) as
 * floats into params or as the cache holds them into half (one of the two). */
static void quantize_k_group(const mha_step_job *j, int q, int g, mha_kv_group grp, int8_t *kt, size_t ld, float *params,
                             mha_f16 *half)
{
    const mha_kv_traits *kv = mha_kv_traits_of(j->cache->type);
    const int dk = j->f.dk;
    const float *rows[MHA_KV_GROUP];
    for (int u = 0; u < grp.n; u++)
        rows[u] = k_full_row(j, q, g, grp.t + u);
    for (int c = 0; c < dk; c++) {
        float x[MHA_KV_GROUP], scale, zero;
        for (int u = 0; u < grp.n; u++)
            x[u] = rows[u][c];
        kv->quantize(x, 1, grp.n, 1, kt, (size_t)c * ld, 1, &scale, &zero);
        if (params)
            params[c] = scale, params[dk + c] = zero;
        else
            half[c] = mha_f16_round(scale), half[dk + c] = mha_f16_round(zero); /* exact */
    }
}

/* Kᵀ of positions [t0, t1) of group grp of (q, g) as stored (mha_kv_k_value, scale_rows): from
 * the cache when the group was complete before the step, else quantized here (into s->k8's
 * room) as k_commit will store it; float32 into dst (feature c of position t0 + u at
 * dst[c · ld + u]). */
static void k_stored(const mha_step_job *j, int q, int g, mha_kv_group grp, int t0, int t1, float *dst, size_t ld,
                     const mha_scratch *s)
{
    const mha_kv_cache *c = j->cache;
    const int dk = j->f.dk, bs = c->block_size;
    const int8_t *kt;
    float *params = s->k8 + (size_t)MHA_KV_GROUP * dk; /* its parameters as floats, then its values */
    size_t ldk;
    if (grp.t + grp.n <= j->step->n_past[q]) {
        const int block = j->step->blocks[(size_t)q * j->step->max_blocks + grp.t / bs], slot = grp.t % bs;
        const mha_f16 *half = mha_kv_k_params(c, block, g, slot);
        kt = mha_kv_i8(c) + mha_kv_kt_at(c, block, g) + (size_t)slot, ldk = (size_t)bs;
        for (int f = 0; f < 2 * dk; f++)
            params[f] = mha_f16_float(half[f]);
    } else {
        int8_t *v = (int8_t *)(void *)(params + 2 * (size_t)dk);
        quantize_k_group(j, q, g, grp, v, MHA_KV_GROUP, params, NULL);
        kt = v, ldk = MHA_KV_GROUP;
    }
    j->f.kernel->isa->scale_rows[j->cache->type](kt + (t0 - grp.t), ldk, dk, t1 - t0, params, params + dk, dst, ld);
}

/* Kᵀ of keys [k0, k1) of (q, g) as a query whose group starts at `own` sees them: a group
 * before its own as stored, its own (and the later ones, which it does not see) at full
 * precision; float32 into dst (feature c of key k0 + u at dst[c · ld + u]). */
static void k_view(const mha_step_job *j, int q, int g, int own, int k0, int k1, float *dst, size_t ld,
                   const mha_scratch *s)
{
    const int dk = j->f.dk;
    for (int t = k0; t < k1;) {
        const mha_kv_group grp = mha_kv_group_of(j->cache->block_size, t);
        const int e = grp.t + grp.n < k1 ? grp.t + grp.n : k1;
        if (grp.t < own)
            k_stored(j, q, g, grp, t, e, dst + (t - k0), ld, s);
        else
            for (int u = t; u < e; u++) {
                const float *row = k_full_row(j, q, g, u);
                for (int f = 0; f < dk; f++)
                    dst[(size_t)f * ld + (size_t)(u - k0)] = row[f];
            }
        t = e;
    }
}

/* Prefill: Kᵀ of keys [k0, k1) of (q, g) as a query of the group at `own` sees them, into the
 * float32 microkernel's panels (s->kt, key t at column t), a group at a time through s->k8: an
 * int8 cache's scores are float32 products in either engine (a bf16 engine's on its queries
 * unrounded: mha_kv_view.vs). */
static void k_view_panels(const mha_step_job *j, int q, int g, int own, int k0, int k1, const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const int dk = j->f.dk;
    const mha_mat ktm = mha_mat_panels(k, s->kt, dk);
    for (int t = k0, e; t < k1; t = e) {
        const mha_kv_group grp = mha_kv_group_of(j->cache->block_size, t);
        e = grp.t + grp.n < k1 ? grp.t + grp.n : k1;
        k_view(j, q, g, own, t, e, s->k8, MHA_KV_GROUP, s);
        for (int f = 0; f < dk; f++) {
            const float *x = s->k8 + (size_t)f * MHA_KV_GROUP - t;
            for (int u = t; u < e;) { /* runs up to each panel's edge */
                const int run = k->bw - u % k->bw < e - u ? k->bw - u % k->bw : e - u;
                memcpy(mha_mat_at(k, ktm, f, u), x + u, (size_t)run * sizeof *x);
                u += run;
            }
        }
    }
}

/* After the step's attention of (q, g): each group its new tokens complete quantized into the
 * cache, the new tokens of the group still filling into its open-group entry (rows from the
 * group's start; the earlier ones are there already). */
static void k_commit(const mha_step_job *j, int q, int g)
{
    const mha_kv_cache *c = j->cache;
    const int n_past = j->step->n_past[q], ctx = n_past + j->step->n_new[q], bs = c->block_size, dk = j->f.dk;
    const int32_t *table = j->step->blocks + (size_t)q * j->step->max_blocks;
    for (int t = n_past; t < ctx;) {
        const mha_kv_group grp = mha_kv_group_of(bs, t);
        if (grp.t + grp.n <= ctx) {
            const int block = table[grp.t / bs], slot = grp.t % bs;
            quantize_k_group(j, q, g, grp, mha_kv_i8(c) + mha_kv_kt_at(c, block, g) + (size_t)slot, (size_t)bs, NULL,
                             mha_kv_k_params(c, block, g, slot));
        } else
            for (int u = t; u < ctx; u++)
                memcpy(j->tails[q] + ((size_t)g * MHA_KV_GROUP + (size_t)(u - grp.t)) * dk,
                       k_full_row(j, q, g, u), (size_t)dk * sizeof(float));
        t = grp.t + grp.n;
    }
}

void mha_step_norm_sums(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const float *x = j->step->x + (size_t)r0 * j->f.d;
    const float *xp = r0 % mha_step_panel(j) == 0 ? packed_rows(j, r0) : NULL;
    mha_attention_norm_part(&j->f, s, g, r1 - r0, x, xp, (size_t)r0, r1 - r0, x, xp, (size_t)r0);
}

void mha_step_project(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const mha_step *st = j->step;
    const int d = f->d, dk = f->dk, dkp = f->dkp, m = r1 - r0, bs = j->cache->block_size;
    const float *x = st->x + (size_t)r0 * d;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const int first = seq_of(j, r0, 0);

    /* K and V of the new rows: one GEMM into scratch columns [dkp, 3·dkp), K's QK-norm, then
     * row by row RoPE at the row's position and a copy into its cache slot */
    /* these rows in A panels (mha_step_pack_rows) where they start one; else packed here */
    const float *xp = r0 % mha_step_panel(j) == 0 ? packed_rows(j, r0) : NULL;
    const double *kss = f->k_ss ? f->k_ss + (size_t)r0 * f->kvh : NULL;
    const double *qss = f->q_ss ? f->q_ss + (size_t)r0 * f->kvh : NULL;
    if (f->k_saved) { /* QK-norm full: K projected by mha_step_norm_sums, V here */
        mha_attention_project(f, s, m, x, xp, g, 2 * dkp, 2 * dkp, dkp);
        mha_mat_set_rows(k, qkv, m, dkp, dk, f->k_saved + (size_t)r0 * f->kvh * dk + (size_t)g * dk, (ptrdiff_t)f->kvh * dk);
    } else
        mha_attention_project(f, s, m, x, xp, g, dkp, dkp, 2 * dkp);
    mha_attention_norm_rows(f, qkv, m, dkp, 1, g, kss);
    for (int i = 0, q = first; i < m; i++) {
        q = seq_of(j, r0 + i, q);
        const int pos = pos_of(j, r0 + i, q);
        if (f->rope != MHA_ROPE_NONE)
            mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, dkp, pos, f->rope, f->rope_dim, f->rope_cos, f->rope_sin);
        const mha_kv_run at = mha_kv_run_at(st->blocks + (size_t)q * st->max_blocks, bs, pos, pos + 1);
        store_kv(j, qkv, i, r0 + i, at.block, g, at.slot, s);
    }
    /* Q of each query head of the group (QK-norm full: already in z), rotated, into its
     * columns of z */
    for (int h = 0; h < f->group; h++) {
        float *z = f->z + (size_t)r0 * f->qd + (size_t)(g * f->group + h) * dk;
        if (f->k_saved)
            mha_mat_set_rows(k, qkv, m, 0, dk, z, f->qd);
        else
            mha_attention_project(f, s, m, x, xp, g, h == 0 ? 0 : (h + 2) * dkp, 0, dkp);
        mha_attention_norm_rows(f, qkv, m, 0, 0, g * f->group + h, qss);
        for (int i = 0, q = first; i < m && f->rope != MHA_ROPE_NONE; i++) {
            q = seq_of(j, r0 + i, q);
            mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, 0, pos_of(j, r0 + i, q), f->rope, f->rope_dim, f->rope_cos,
                          f->rope_sin);
        }
        mha_mat_get_rows(k, qkv, m, 0, dk, z, f->qd);
    }
}

void mha_step_project_mla(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_step *st = j->step;
    const int m = r1 - r0, dk = f->dk, dkp = f->dkp, bs = j->cache->block_size, first = seq_of(j, r0, 0);
    int pos[MHA_MLA_ROWS];
    for (int i = 0, q = first; i < m; i++) {
        q = seq_of(j, r0 + i, q);
        pos[i] = pos_of(j, r0 + i, q);
    }
    /* rows of 3·dkp in the scratch: K at dkp, V at 2·dkp, as store_kv reads them */
    float *kv = s->qkv;
    const ptrdiff_t ld = 3 * (ptrdiff_t)dkp;
    mha_mla_rows(f, st->x + (size_t)r0 * f->d, m, 0, pos, f->z + (size_t)r0 * f->qd, kv + dkp, ld, s);
    for (int i = 0, q = first; i < m; i++) {
        q = seq_of(j, r0 + i, q);
        memcpy(kv + i * ld + 2 * dkp, kv + i * ld + dkp, (size_t)dk * sizeof *kv);
        const mha_kv_run at = mha_kv_run_at(st->blocks + (size_t)q * st->max_blocks, bs, pos[i], pos[i] + 1);
        store_kv(j, mha_mat_rows(f->kernel, kv, ld), i, r0 + i, at.block, g, at.slot, s);
    }
}

void mha_step_out_mla(const mha_step_job *j, int r0, int r1, const mha_scratch *s)
{
    mha_mla_values(&j->f, r1 - r0, j->f.z + (size_t)r0 * j->f.qd, j->f.dk, j->f.call->out + (size_t)r0 * j->f.d, s);
}

/* float32 engines: the Kᵀ panels' columns past ctx, to the last panel's end, zero. */
static void zero_kt_past(const mha_step_job *j, int ctx, const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const mha_mat ktm = mha_mat_panels(k, s->kt, j->f.dk);
    for (int c = 0; c < j->f.dk; c++)
        for (int t = ctx; t < (int)mha_round_up((size_t)ctx, (size_t)k->bw); t++)
            *mha_mat_at(k, ktm, c, t) = 0.0f;
}

/* MLA float32 decode: a chunk's V (kv_lora features of up to MHA_KV_CHUNK keys) in panels of
 * MHA_MLA_VPANEL features, the chunk's key t at row t of each (rows as wide as the panel; the
 * last may be narrower): the value tiles read a panel of rows whose features all lie in a
 * few lines, and the transpose out of Kᵀ is the tables' pack_rows. Features x0.. of the
 * chunk's buffer v: */
enum { MHA_MLA_VPANEL = 64 };

static float *mla_v_panel(void *v, int x0)
{
    return (float *)v + (size_t)x0 * MHA_KV_CHUNK;
}

/* MLA: V of a run of n slots (the latent: the first `cols` features of its Kᵀ, kt, which is
 * all an MLA cache holds) into the chunk's buffer v as its keys at..at + n − 1, the same
 * values as a copy would hold: bf16 as rows of cols elements; float32 in the panels above,
 * 16 × 16 at a time (the table's pack_rows: its transpose). */
static void mla_v_rows(const mha_kernel *k, const mha_kv_cache *c, const void *kt, int n, int cols, void *v, int at)
{
    const size_t bs = (size_t)c->block_size;
    if (c->type == MHA_KV_BF16) {
        mha_bf16 *dst = (mha_bf16 *)v + (size_t)at * cols;
        for (int x = 0; x < cols; x++) /* Kᵀ's row x: feature x of the slots, contiguous */
            for (int u = 0; u < n; u++)
                dst[(size_t)u * cols + x] = ((const mha_bf16 *)kt)[x * bs + u];
        return;
    }
    for (int x0 = 0; x0 < cols; x0 += MHA_MLA_VPANEL) {
        const int w = cols - x0 < MHA_MLA_VPANEL ? cols - x0 : MHA_MLA_VPANEL;
        k->isa->pack_rows(mha_mat_rows(k, kt, (ptrdiff_t)bs), k->bw, x0, w, 0, n, w, mla_v_panel(v, x0) + (size_t)at * w);
    }
}

/* The context's V, position by position from its blocks, into the scratch; its Kᵀ straight
 * into the panels the score GEMM reads (dk × ctx, zero columns to the panel's end): feature c
 * of a block's slots is a contiguous run in the cache. Keys before the window are never read
 * by the attention (it starts on the panel holding the first visible key), so they are not
 * gathered either. An unscaled cache's elements as float32 (the type's floats: a float32
 * engine's own, or a bf16 engine's on the float32 stream, widened exactly). */
static void gather_f32(const mha_step_job *j, const int32_t *table, int g, int ctx, int t_begin, const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const mha_kv_cache *cache = j->cache;
    void (*floats)(const void *, size_t, int, float *) = mha_kv_traits_of(cache->type)->floats;
    const int dk = j->f.dk, dkp = j->f.dkp, bs = cache->block_size, w = k->bw;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, j->f.rows), ktm = mha_mat_panels(k, s->kt, dk);
    for (mha_kv_run r = mha_kv_run_at(table, bs, t_begin, ctx); r.n; r = mha_kv_run_at(table, bs, r.t + r.n, ctx)) {
        const size_t kt = mha_kv_kt_at(cache, r.block, g) + r.slot;
        for (int c = 0; c < dk; c++) /* row c of Kᵀ: runs up to each panel's edge */
            for (int t = 0; t < r.n;) {
                const int col = r.t + t, run = w - col % w < r.n - t ? w - col % w : r.n - t;
                floats(cache->data, kt + (size_t)c * bs + (size_t)t, run, mha_mat_at(k, ktm, c, col));
                t += run;
            }
        if (cache->mla) /* V: K's own rows, as just gathered */
            for (int c = 0; c < dk; c++)
                for (int u = 0; u < r.n; u++)
                    *mha_mat_at(k, qkv, r.t + u, 2 * dkp + c) = *mha_mat_at(k, ktm, c, r.t + u);
        else /* V: each key's row, a panel's columns at a time */
            for (int u = 0; u < r.n; u++)
                for (int c0 = 0; c0 < dk; c0 += w)
                    floats(cache->data, mha_kv_v_at(cache, r.block, g, r.slot + u) + (size_t)c0, dk - c0 < w ? dk - c0 : w,
                           mha_mat_at(k, qkv, r.t + u, 2 * dkp + c0));
    }
    zero_kt_past(j, ctx, s);
}

/* bf16 engines: the keys [t_begin, t_end) from a bf16 or int8 cache straight into the bf16
 * kernel's B panels (s->kt16, s->v16 of vps elements per panel, as the forward's
 * mha_attention_pack_kv_bf16 leaves them), key t at column / row t − base: Kᵀ key pairs of
 * each feature pair interleaved, V feature by feature; zeros in the padding (features past dk, keys past t_end, the tile of
 * room after V). int8: V's values themselves (exact in bf16), their scales into vs at t − base
 * (mha_kv_view's: the chunk applies them); Kᵀ is left to the scores (float32: k_view_panels or
 * the decode tiles). */
static void gather_bf16(const mha_step_job *j, const int32_t *table, int g, int t_begin, int t_end, int base,
                        size_t vps, const mha_scratch *s, float *vs)
{
    const mha_kv_cache *cache = j->cache;
    const mha_kv_traits *type = mha_kv_traits_of(cache->type);
    const int scaled = type->scaled;
    const size_t esz = mha_kv_elem_size(cache->type);
    const int dk = j->f.dk, bs = cache->block_size, n = t_end - base, n16 = (int)mha_round_up((size_t)n, MHA_BT_N);
    const int kp_dk = (int)mha_bk_kp(dk), dk16 = (int)mha_round_up((size_t)dk, MHA_BT_N);
    const int v_end = (int)mha_bk_kp(n) + MHA_BT_K;
    const size_t kps = mha_attention_kt16_ps(&j->f);
    const char *data = cache->data;
    const mha_isa *isa = j->f.kernel->isa;
    for (mha_kv_run r = mha_kv_run_at(table, bs, t_begin, t_end); r.n; r = mha_kv_run_at(table, bs, r.t + r.n, t_end)) {
        const int block = r.block, slot = r.slot, run = r.n, at = r.t - base;
        if (scaled) { /* a block's few parameters: 16 at a time, moves the compiler writes out, not a call */
            const float *par = mha_kv_v_params(cache, block, g) + 2 * (size_t)slot;
            float *to = vs + 2 * (size_t)at;
            int u = 0;
            for (; u + 16 <= 2 * run; u += 16)
                memcpy(to + u, par + u, 16 * sizeof *to);
            for (; u < 2 * run; u++)
                to[u] = par[u];
        }
        /* the next block's K and V, prefetched as this one is read (a block's K of one head and
         * its V are bs·dk elements each, in 64-byte lines: as many as this block's pairs, or
         * fewer for smaller elements) */
        const int next = mha_kv_run_at(table, bs, r.t + r.n, t_end).block; /* -1: none */
        const char *next_k = next < 0 ? NULL : data + mha_kv_kt_at(cache, next, g) * esz;
        const char *next_v = next < 0 || cache->mla ? NULL : data + mha_kv_v_at(cache, next, g, 0) * esz;
        /* Kᵀ (features × slots, bs apart): groups of 16 keys that start a panel, feature pairs
         * interleaved; the rest key by key */
        const size_t kt = mha_kv_kt_at(cache, block, g) + slot;
        int t = scaled ? run : 0;
        if (dk % 2 == 0)
            for (; t + MHA_BT_N <= run && (at + t) % MHA_BT_N == 0; t += MHA_BT_N) {
                mha_bf16 *dst = s->kt16 + mha_bk_b_index(0, at + t, kps);
                isa->interleave_pairs[cache->type](data + (kt + (size_t)t) * esz, (size_t)bs, dk / 2, dst,
                                                   next_k ? next_k + (size_t)t * dk * esz : NULL);
            }
        for (int c = 0; t < run && c < dk; c++)
            for (int u = t; u < run; u++)
                s->kt16[mha_bk_b_index(c, at + u, kps)] = type->bf16_at(data, kt + (size_t)c * bs + u);
        const int whole = dk / MHA_BT_N * MHA_BT_N;
        if (cache->mla) { /* V from Kᵀ's own rows: a feature's key pairs are 32-bit words, which
                           * a V panel holds 16 features abreast; the rest element by element */
            const int words = at % 2 == 0 && slot % 2 == 0 && bs % 2 == 0 ? run / 2 : 0;
            const float *w = (const float *)(const void *)(mha_kv_bf16(cache) + kt);
            for (int c = 0; c < whole && words; c += MHA_BT_N)
                isa->pack_rows(mha_mat_rows(j->f.kernel, w, bs / 2), j->f.kernel->bw, c, MHA_BT_N, 0, words, MHA_BT_N,
                               (float *)(void *)(s->v16 + mha_bk_b_index(at, c, vps)));
            for (int u = 0; u < run; u++)
                for (int c = u < 2 * words ? whole : 0; c < dk; c++)
                    s->v16[mha_bk_b_index(at + u, c, vps)] = type->bf16_at(data, kt + (size_t)c * bs + u);
            continue;
        }
        /* V (slots × features, dk apart): key pairs interleaved, 16 features at a time; the
         * features past the last 16 and an odd key element by element */
        const size_t v = mha_kv_v_at(cache, block, g, slot);
        const int pairs = at % 2 == 0 ? run / 2 : 0;
        for (int c = 0; c < whole && pairs; c += MHA_BT_N) {
            mha_bf16 *dst = s->v16 + mha_bk_b_index(at, c, vps);
            const char *pf = next_v ? next_v + (size_t)c / MHA_BT_N * pairs * 64 * esz / 2 : NULL;
            isa->interleave_pairs[cache->type](data + (v + (size_t)c) * esz, (size_t)dk, pairs, dst, pf);
        }
        for (int u = 0; u < run; u++)
            for (int c = u < 2 * pairs ? whole : 0; c < dk; c++)
                s->v16[mha_bk_b_index(at + u, c, vps)] = type->bf16_at(data, v + (size_t)u * dk + c);
    }
    for (int t = t_begin - base; !scaled && t < n16; t++) /* Kᵀ: features past dk; keys past t_end */
        for (int c = t < n ? dk : 0; c < kp_dk; c++)
            s->kt16[mha_bk_b_index(c, t, kps)] = 0;
    for (int t = t_begin - base; t < n; t++) /* V: columns past dk */
        for (int c = dk; c < dk16; c++)
            s->v16[mha_bk_b_index(t, c, vps)] = 0;
    for (int c0 = 0; c0 < dk16; c0 += MHA_BT_N) { /* V: rows past t_end, whole key pairs at once */
        int t = n;
        for (; t % 2; t++) /* an odd first one: its half of the pair */
            for (int c = c0; c < c0 + MHA_BT_N; c++)
                s->v16[mha_bk_b_index(t, c, vps)] = 0;
        memset(s->v16 + mha_bk_b_index(t, c0, vps), 0, (size_t)(v_end - t) * MHA_BT_N * sizeof(mha_bf16));
    }
}

/* A scaled cache: V of the keys [t_begin, ctx) into the scratch's V columns, key t at row t:
 * vs NULL (float32 engines), read back (q·scale + zero, as decode_values reads it); else (bf16
 * on the float32 stream) the values themselves (a scale of 1 and a zero of 0: exact), their
 * parameters into vs at t (mha_kv_view's: the chunk applies them). Kᵀ is left to
 * k_view_panels. */
static void gather_scaled(const mha_step_job *j, const int32_t *table, int g, int t_begin, int ctx, const mha_scratch *s,
                          float *vs)
{
    static const float unit[2] = {1.0f, 0.0f};
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const mha_kv_cache *cache = j->cache;
    const int dk = f->dk, dkp = f->dkp, bs = cache->block_size;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    for (mha_kv_run r = mha_kv_run_at(table, bs, t_begin, ctx); r.n; r = mha_kv_run_at(table, bs, r.t + r.n, ctx)) {
        const float *par = mha_kv_v_params(cache, r.block, g) + 2 * (size_t)r.slot;
        if (vs)
            memcpy(vs + 2 * (size_t)r.t, par, 2 * (size_t)r.n * sizeof *vs);
        for (int t = 0; t < r.n; t++) { /* a panel's run at a time */
            const float *p = vs ? unit : par + 2 * t;
            for (int c = 0; c < dk; c += k->bw)
                f->kernel->isa->scale_rows[cache->type](mha_kv_i8(cache) + mha_kv_v_at(cache, r.block, g, r.slot + t) + c,
                                                        0, 1, dk - c < k->bw ? dk - c : k->bw, p, p + 1,
                                                        mha_mat_at(k, qkv, r.t + t, 2 * dkp + c), 0);
        }
    }
}

/* float32: the context's Kᵀ into panels and V into the scratch's V columns; a scaled cache's V
 * read back (its Kᵀ left to k_view_panels). */
void mha_step_gather_f32(const mha_step_job *j, int q, int g, int t_begin, int ctx, const mha_scratch *s, float *vs)
{
    (void)vs; /* V read back: its parameters applied */
    const int32_t *table = j->step->blocks + (size_t)q * j->step->max_blocks;
    if (mha_kv_traits_of(j->cache->type)->scaled)
        gather_scaled(j, table, g, t_begin, ctx, s, NULL);
    else
        gather_f32(j, table, g, ctx, t_begin, s);
}

void mha_step_gather_bf16(const mha_step_job *j, int q, int g, int t_begin, int ctx, const mha_scratch *s, float *vs)
{
    gather_bf16(j, j->step->blocks + (size_t)q * j->step->max_blocks, g, t_begin, ctx, 0, mha_attention_v16_ps(ctx), s,
                vs);
}

/* bf16 on the float32 stream: an unscaled cache's context as gather_f32 leaves it (its bf16
 * elements are what the bf16 panels would hold); a scaled one's V values as floats and their
 * parameters in vs (gather_scaled; what the bf16 panels would hold, exact). */
void mha_step_gather_stream(const mha_step_job *j, int q, int g, int t_begin, int ctx, const mha_scratch *s, float *vs)
{
    const int32_t *table = j->step->blocks + (size_t)q * j->step->max_blocks;
    if (mha_kv_traits_of(j->cache->type)->scaled)
        gather_scaled(j, table, g, t_begin, ctx, s, vs);
    else
        gather_f32(j, table, g, ctx, t_begin, s);
}

/* A scaled cache in a bf16 engine: the room for V's parameters beside its values (the chunks
 * apply them); else NULL. */
static float *v_params(const mha_step_job *j, const mha_scratch *s)
{
    return j->f.bk && mha_kv_traits_of(j->cache->type)->scaled ? s->kvs : NULL;
}

/* The step's rows [i0, i1) of sequence q for each query head of KV head g: the forward's
 * attention (its Q, rotated in phase 1, from z; Z written over it) over the gathered context;
 * vs: NULL, or an int8 cache's V parameters (bf16 engines). */
static void attend_rows(const mha_step_job *j, int q, int g, int i0, int i1, const mha_scratch *s, const float *vs)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const int n_past = j->step->n_past[q], ctx = n_past + j->step->n_new[q], dk = f->dk;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    float *z = f->z + (size_t)(j->row0[q] + i0) * f->qd;
    for (int h = g * f->group; h < (g + 1) * f->group; h++) {
        mha_mat_set_rows(k, qkv, i1 - i0, 0, dk, z + (size_t)h * dk, f->qd);
        mha_attention_rows(f, h, s, (mha_queries){.q = qkv}, i1 - i0, ctx, n_past + i0, z + (size_t)h * dk, f->qd,
                           f->sinks, NULL, vs);
    }
}

void mha_step_attend(const mha_step_job *j, int q, int g, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_step *st = j->step;
    const int n_new = st->n_new[q], n_past = st->n_past[q], ctx = n_past + n_new;
    if (n_new == 0)
        return;
    /* from the chunk holding the first visible key: the forward's chunks start there */
    const int t_begin = first_key(j, q) / MHA_KV_CHUNK * MHA_KV_CHUNK;
    const int scaled = mha_kv_traits_of(j->cache->type)->scaled;
    float *vs = v_params(j, s);
    f->prod->step_gather(j, q, g, t_begin, ctx, s, vs);
    if (!scaled) {
        attend_rows(j, q, g, 0, n_new, s, NULL);
        return;
    }
    /* int8: Kᵀ of the groups before the last as stored, then the rows group by group from the
     * last, each group turned to full precision for its own rows (the later groups, full by
     * then, are past them) */
    const int bs = j->cache->block_size, last = mha_kv_group_of(bs, ctx - 1).t;
    zero_kt_past(j, ctx, s);
    k_view_panels(j, q, g, last, t_begin, ctx, s);
    for (int b = ctx, a; b > n_past; b = a) {
        const mha_kv_group grp = mha_kv_group_of(bs, b - 1);
        a = grp.t > n_past ? grp.t : n_past;
        if (grp.t != last)
            k_view_panels(j, q, g, grp.t, grp.t > t_begin ? grp.t : t_begin, grp.t + grp.n, s);
        attend_rows(j, q, g, a - n_past, b - n_past, s, vs);
    }
    k_commit(j, q, g);
}

/* ---- decode: attention straight from the cache, in chunks of keys ---- */

int mha_step_chunks(const mha_step_job *j, int q)
{
    const int ctx = j->step->n_past[q] + j->step->n_new[q];
    return (ctx + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK;
}

int mha_step_first_chunk(const mha_step_job *j, int q)
{
    return first_key(j, q) / MHA_KV_CHUNK;
}

/* Partial results of query qi (head-in-group major, then row) of chunk c of (q, g):
 * Z (dk floats, unnormalised), then the running max and the sum. */
static float *partial_of(const mha_step_job *j, int q, int g, int c, int qi)
{
    const size_t per_query = (size_t)j->f.dk + 2, per_chunk = mha_step_partial_floats(j->f.group, j->f.dk);
    return j->partial + (((size_t)q * j->f.kvh + g) * j->max_chunks + c) * per_chunk + (size_t)qi * per_query;
}

/* Where decode tiles read a chunk's keys: runs of slots, run r with n[r] slots of a block, Kᵀ
 * at kt[r] (feature c of slot t at element c · ld + t) and V at v[r] (slot t's vw values at
 * element t · vw: the cache's d_k, or an MLA cache's latent, kv_lora, read out of Kᵀ into the
 * worker's scratch; float32 MLA reads it in mla_v_panel's panels there instead); next[r]:
 * what to prefetch while run r is read (NULL: nothing); an int8 cache's K parameters of the
 * group holding the run's first slot at kp[r] and V parameters of the run's slots at vs[r]
 * (mha_kv_v_params' pairs). type: the cache's. */
typedef struct chunk_src {
    mha_kv_type type;
    int runs, ld, vw;
    const void *kt[MHA_KV_CHUNK], *v[MHA_KV_CHUNK], *next[MHA_KV_CHUNK];
    const mha_f16 *kp[MHA_KV_CHUNK];
    const float *vs[MHA_KV_CHUNK];
    int n[MHA_KV_CHUNK];
} chunk_src;

/* The keys [k0, k1) of (q, g) in place in the cache (any type): a run per block; int8: its V
 * scales' line prefetched (it lies past the block's values: read after the scores). An MLA
 * cache's V goes to vbuf (mla_v_chunk puts it there: the chunk's keys × kv_lora elements of
 * the cache's type; NULL for any other cache). */
static void cache_runs(const mha_step_job *j, int q, int g, int k0, int k1, void *vbuf, chunk_src *src)
{
    const mha_kv_cache *cache = j->cache;
    const int bs = cache->block_size;
    const size_t esz = mha_kv_elem_size(cache->type);
    const int scaled = mha_kv_traits_of(cache->type)->scaled;
    const int32_t *table = j->step->blocks + (size_t)q * j->step->max_blocks;
    const char *data = cache->data;
    src->type = cache->type, src->runs = 0, src->ld = bs, src->vw = cache->mla ? cache->mla : cache->dk;
    for (mha_kv_run u = mha_kv_run_at(table, bs, k0, k1); u.n; u = mha_kv_run_at(table, bs, u.t + u.n, k1)) {
        const int r = src->runs++;
        const mha_kv_run next = mha_kv_run_at(table, bs, u.t + u.n, k1);
        src->kt[r] = data + (mha_kv_kt_at(cache, u.block, g) + (size_t)u.slot) * esz;
        if (cache->mla) {
            src->v[r] = (char *)vbuf + (size_t)(u.t - k0) * (size_t)src->vw * esz;
            src->next[r] = NULL;
        } else {
            src->v[r] = data + mha_kv_v_at(cache, u.block, g, u.slot) * esz;
            src->next[r] = next.n ? data + mha_kv_v_at(cache, next.block, g, 0) * esz : NULL;
        }
        src->n[r] = u.n;
        src->kp[r] = NULL, src->vs[r] = NULL;
        if (scaled) {
            src->kp[r] = mha_kv_k_params(cache, u.block, g, u.slot);
            src->vs[r] = mha_kv_v_params(cache, u.block, g) + 2 * (size_t)u.slot;
            __builtin_prefetch(src->vs[r]);
        }
    }
}

/* MLA: the chunk's V out of its runs' Kᵀ into v (the buffer cache_runs was given), as
 * mla_v_rows places it. After the scores: their first pass has brought the chunk into cache. */
static void mla_v_chunk(const mha_step_job *j, const chunk_src *src, void *v)
{
    for (int r = 0, t = 0; r < src->runs; t += src->n[r++])
        mla_v_rows(j->f.kernel, j->cache, src->kt[r], src->n[r], src->vw, v, t);
}

/* int8: the end of the step's rows from i0 (of sequence q) that see the keys before k1 alike:
 * every row when k1 is at most the first row's group's start (they all see those keys as
 * stored), else the rows of i0's group. */
static int view_rows_end(const mha_step_job *j, int q, int k1, int i0)
{
    const int n_new = j->step->n_new[q], n_past = j->step->n_past[q], bs = j->cache->block_size;
    if (k1 <= mha_kv_group_of(bs, n_past).t)
        return n_new;
    const int own = mha_kv_group_of(bs, n_past + i0).t;
    int i1 = i0 + 1;
    while (i1 < n_new && mha_kv_group_of(bs, n_past + i1).t == own)
        i1++;
    return i1;
}

/* The chunk's scores into sc for the step's rows [i0, i1) of every query head of the group
 * (query qi = head jh, row i at qv[qi · dk]; all rows: one pass for every query), Kᵀ at kt[r]
 * for src's runs, elements of `type`, rows ld apart (kp: NULL, or a scaled cache's Kᵀ in
 * place, its runs' group parameters; type F32: Kᵀ read back): float32 decode_scores[type] in
 * the microkernel's passes of KC (one unless dk > KC), or with bf16 (a bf16 engine on an
 * unscaled cache) decode_scores16 (qv rounded already). Each run's Kᵀ read once for every
 * query, slots of several runs at once, the runs' value rows given to be prefetched (by the
 * first pass; not an MLA cache's, which mla_v_chunk writes after the scores). */
static void chunk_scores(const mha_step_job *j, int q, int i0, int i1, const float *qv, float *sc, const chunk_src *src,
                         int bf16, mha_kv_type type, const void *const *kt, const mha_f16 *const *kp, int ld)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[q], dk = f->dk, kc = f->kernel->kc, all = i1 - i0 == n_new;
    const mha_isa *isa = f->kernel->isa;
    const void *const *vr = j->cache->mla ? NULL : src->v;
    for (int jh = 0; jh < (all ? 1 : f->group); jh++) {
        const int nq = all ? f->group * n_new : i1 - i0;
        const float *qh = qv + (size_t)(jh * n_new + i0) * dk;
        float *sh = sc + (size_t)(jh * n_new + i0) * MHA_KV_CHUNK;
        if (bf16)
            isa->decode_scores16(qh, nq, dk, src->runs, kt, src->v, src->n, ld, f->scale, sh, MHA_KV_CHUNK,
                                 f->bk->order);
        else
            for (int c0 = 0; c0 < dk; c0 += kc) {
                const int c1 = c0 + kc < dk ? c0 + kc : dk;
                isa->decode_scores[type](qh, nq, dk, c0, c1, src->runs, kt, c0 ? NULL : vr, kp, src->n, ld, f->scale, sh,
                                         MHA_KV_CHUNK);
            }
    }
}

/* int8: Kᵀ of the keys [k0, k1) of (q, g) as the rows from i0 see it (k_view; the rows they
 * are: view_rows_end), float32 into s->kt, key t at column t − k0 of rows n apart (the decode
 * tiles' rows). */
static void chunk_kt_scaled(const mha_step_job *j, int q, int g, int k0, int k1, int i0, const mha_scratch *s)
{
    const int own = mha_kv_group_of(j->cache->block_size, j->step->n_past[q] + i0).t;
    k_view(j, q, g, own, k0, k1, s->kt, (size_t)(k1 - k0), s);
}

/* int8: the end of the keys from k0 (to k1 at most) that every row sees as the cache holds them
 * and the tiles may read there: those in groups stored before the step, when blocks hold whole
 * groups (so runs are, and the end is a multiple of 16 from the chunk's start); k0 if none. */
static int k_stored_end(const mha_step_job *j, int q, int k0, int k1)
{
    const int bs = j->cache->block_size, e = mha_kv_group_of(bs, j->step->n_past[q]).t;
    return bs % MHA_KV_GROUP ? k0 : e < k0 ? k0 : e < k1 ? e : k1;
}

/* int8: the scores of the keys [k0, k1) of the chunk (sc: key k0's column): those in groups
 * stored before the step (to k_stored_end) where the cache holds them, every row at once; the
 * rest on Kᵀ as each row's group sees it, a pass per set of rows that see it alike
 * (chunk_kt_scaled). A key's score is its own sum either way: the split changes no bit. */
static void scores_scaled(const mha_step_job *j, int q, int g, int k0, int k1, const float *qv, float *sc,
                          const mha_scratch *s)
{
    const int e = k_stored_end(j, q, k0, k1), n_new = j->step->n_new[q];
    chunk_src part; /* the runs of [k0, e), then of [e, k1) */
    if (e > k0) {
        cache_runs(j, q, g, k0, e, NULL, &part);
        chunk_scores(j, q, 0, n_new, qv, sc, &part, 0, part.type, part.kt, part.kp, part.ld);
    }
    if (e == k1)
        return;
    cache_runs(j, q, g, e, k1, NULL, &part);
    const void *kt[MHA_KV_CHUNK];
    for (int r = 0, t = 0; r < part.runs; t += part.n[r++])
        kt[r] = s->kt + t;
    for (int i0 = 0, i1; i0 < n_new; i0 = i1) {
        i1 = view_rows_end(j, q, k1, i0);
        chunk_kt_scaled(j, q, g, e, k1, i0, s);
        chunk_scores(j, q, i0, i1, qv, sc + (e - k0), &part, 0, MHA_KV_F32, kt, NULL, k1 - e); /* read back */
    }
}

/* The worker's decode scratch (s->dec) for the nq queries of a task: their scores against a
 * chunk (nq × MHA_KV_CHUNK), the queries (nq × dk), a chunk's partials (nq × (dk + 2)), the
 * V zero sums (nq). */
static float *dec_scores(const mha_scratch *s)
{
    return s->dec;
}

static float *dec_queries(const mha_step_job *j, int q, const mha_scratch *s)
{
    return s->dec + (size_t)j->f.group * j->step->n_new[q] * MHA_KV_CHUNK;
}

static float *dec_partials(const mha_step_job *j, int q, const mha_scratch *s)
{
    return dec_queries(j, q, s) + (size_t)j->f.group * j->step->n_new[q] * j->f.dk;
}

/* int8 in a bf16 engine: a chunk's V zero sums of the task's queries (mha_attention_chunk_row). */
static float *dec_zero_sums(const mha_step_job *j, int q, const mha_scratch *s)
{
    return dec_partials(j, q, s) + (size_t)j->f.group * j->step->n_new[q] * ((size_t)j->f.dk + 2);
}

/* The chunk's scores and A·V in register tiles, read in place from the cache blocks (src),
 * each key and value row once for every query of the group, and the forward's softmax of the
 * chunk (mha_attention_chunk_row) in between; into the chunk's partials p (partial_of).
 * float32 engines: the microkernel's sums (decode_scores, decode_values; an int8 cache's
 * Kᵀ as scores_scaled reads it, its values as its decode_values does). bf16 engines (their kernel
 * summing in an order of the tiles): the bf16 kernels' sums on the cache's own elements
 * (decode_scores16, decode_values16), the queries and probabilities rounded to bf16 as the
 * kernels' A panels round them; an int8 cache's scores as a float32 engine's (scores_scaled, on
 * the queries unrounded) and its V parameters gathered into vs: the forward's chunk step, bit for
 * bit; bf16: which (the engine's step_chunk says); pf: what the values prefetch into L2 as
 * they sum (the next unit's regions, or NULL). */
static void decode_chunk_tiles(const mha_step_job *j, int q, int g, int k0, int k1, int bf16, float *qv, float *sc,
                               float *p, const chunk_src *src, float *vs, const mha_prefetch *pf, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const int scaled = mha_kv_traits_of(src->type)->scaled;
    const int n_new = j->step->n_new[q], n_past = j->step->n_past[q], dk = f->dk, nq = f->group * n_new;
    const int n = k1 - k0;
    const mha_isa *isa = f->kernel->isa;
    if (bf16 && !scaled) /* int8: float32 scores on the queries as they are (chunk_scores) */
        isa->round_bf16_floats(qv, nq * dk);
    /* int8: K read where the cache holds it for the keys in groups stored before the step (so
     * every row sees them as stored) when the runs are whole groups (blocks of a multiple of
     * MHA_KV_GROUP slots); the rest read back as each row sees it */
    if (scaled)
        scores_scaled(j, q, g, k0, k1, qv, sc, s);
    else
        chunk_scores(j, q, 0, n_new, qv, sc, src, bf16, src->type, src->kt, NULL, src->ld);
    if (j->cache->mla)
        mla_v_chunk(j, src, s->qkv);
    /* int8 in a bf16 engine: the chunk's V parameters, key by key, and the rows' zero sums */
    for (int r = 0, t = 0; scaled && bf16 && r < src->runs; t += src->n[r++])
        memcpy(vs + 2 * (size_t)t, src->vs[r], 2 * (size_t)src->n[r] * sizeof *vs);
    float *zs = scaled && bf16 ? dec_zero_sums(j, q, s) : NULL;
    /* per query: the keys it sees in this chunk, their logits, exp'd against the chunk's max,
     * the sum */
    const size_t ps = (size_t)dk + 2; /* partial_of's stride between queries */
    for (int qi = 0; qi < nq; qi++) {
        const int pos = n_past + qi % n_new;
        const mha_key_span in = mha_keys_within(mha_visible_keys(pos, 1, f->window, k1), k0, n);
        float *row = sc + (size_t)qi * MHA_KV_CHUNK, *pq = p + (size_t)qi * ps;
        pq[dk + 1] = mha_attention_chunk_row(f, row, n, in, pos, k0, g * f->group + qi / n_new, NULL, vs, &pq[dk], NULL,
                                             bf16, zs ? &zs[qi] : NULL);
        memset(pq, 0, (size_t)dk * sizeof *pq);
    }
    /* Z = E · V: each value row read once for every query; an MLA chunk's V lies in order in
     * the scratch (mla_v_chunk), so as one run: each tile's accumulators held over all its keys,
     * not stored and reloaded at every block (the same sums, key by key); float32: panel by
     * panel (mla_v_panel) */
    const int vruns = j->cache->mla ? 1 : src->runs, *vn = j->cache->mla ? &n : src->n;
    mha_prefetch_walk walk = {.pf = pf, .per = MHA_VALUES_PREFETCH}, *w = pf ? &walk : NULL; /* float32 values */
    if (bf16) {
        isa->decode_values16(sc, MHA_KV_CHUNK, nq, vruns, src->v, vn, src->type, src->vw, p, ps, pf, f->bk->order);
        for (int qi = 0; zs && qi < nq; qi++)
            mha_attention_v_zero(p + (size_t)qi * ps, dk, zs[qi]);
    } else if (j->cache->mla)
        for (int x0 = 0; x0 < src->vw; x0 += MHA_MLA_VPANEL)
            isa->decode_values[MHA_KV_F32](sc, MHA_KV_CHUNK, nq, mla_v_panel(s->qkv, x0), NULL, n,
                                           src->vw - x0 < MHA_MLA_VPANEL ? src->vw - x0 : MHA_MLA_VPANEL, p + x0, ps,
                                           NULL, NULL); /* no walk: DeepSeek-V3's step 1.015× with it (Zen 4) */
    else
        for (int r = 0, t = 0; r < vruns; t += vn[r++])
            isa->decode_values[src->type](sc + t, MHA_KV_CHUNK, nq, src->v[r], src->vs[r], vn[r], src->vw, p, ps,
                                          src->next[r], w);
}

/* bf16 decode on kernels that sum otherwise (no table tiles for their order): the chunk's K
 * and V in the bf16 kernel's panels (s->kt16, s->v16 of vps), then the forward's own chunk
 * step (mha_attention_chunk) on every query of the group as one block, whatever the engine's
 * q_block (chunk16 runs them 32 at a time, each row's bits its own, from the queries packed
 * once a run in s->q16): the forward's roundings and sums, so decode and prefill agree bit for
 * bit; into p as above. vs: NULL, or an int8 cache's V parameters: then the scores are in sc
 * already (scores_scaled's float32 tiles, the forward's float32 products' sums) and the chunk
 * starts at their logits. */
static void decode_chunk_bf16(const mha_step_job *j, int q, int g, int k0, int k1, float *qv, float *sc, float *p,
                              const mha_scratch *s, size_t vps, const float *vs)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, n_new = j->step->n_new[q];
    const size_t ps = (size_t)dk + 2;
    const mha_kv_view kv = {.kt16 = s->kt16, .v16 = s->v16, .kps = mha_attention_kt16_ps(f), .vps = vps, .vs = vs};
    const mha_chunk_rows rows = {.m = f->group * n_new, .pos0 = j->step->n_past[q], .period = n_new, .causal = 1,
                                 .head0 = g * f->group, .q = mha_mat_rows(k, qv, dk), .q16 = vs ? NULL : s->q16,
                                 .scored = vs != NULL};
    mha_attention_chunk(f, s, &rows, &kv, 0, k0, k1 - k0, sc, MHA_KV_CHUNK, mha_mat_rows(k, p, (ptrdiff_t)ps), p + dk,
                        p + dk + 1, (ptrdiff_t)ps);
}

/* Whether bf16 decode runs the table's tiles on the cache itself: the table has them and the
 * engine's kernel sums as they do. */
static int bf16_tiles(const mha_fwd *f)
{
    return f->bk && f->kernel->isa->decode_scores16 && (f->kernel->isa->decode16_orders >> f->bk->order & 1u);
}

/* The regions of KV head g in chunk c's blocks, whole (Kᵀ, V and an int8 cache's parameters:
 * the block's bytes of the head, contiguous), for the worker's previous unit's tiles to
 * prefetch while they sum its values from cache (Zen 4, bf16 engines, against Kᵀ alone: the
 * attention phase 0.87× over a bf16 cache, 0.93× over an int8 one). */
static void chunk_regions(const mha_step_job *j, int q, int g, int c, mha_prefetch *pf)
{
    const mha_kv_cache *cache = j->cache;
    const int bs = cache->block_size, ctx = j->step->n_past[q] + j->step->n_new[q];
    const int k0 = c * MHA_KV_CHUNK, k1 = k0 + MHA_KV_CHUNK < ctx ? k0 + MHA_KV_CHUNK : ctx;
    const size_t esz = mha_kv_elem_size(cache->type);
    const int32_t *table = j->step->blocks + (size_t)q * j->step->max_blocks;
    pf->n = 0, pf->bytes = cache->head_elems * esz;
    for (mha_kv_run r = mha_kv_run_at(table, bs, k0, k1); r.n; r = mha_kv_run_at(table, bs, r.t + r.n, k1))
        pf->at[pf->n++] = (const char *)cache->data + mha_kv_kt_at(cache, r.block, g) * esz;
}

/* A query's partials (at pq) marked for the merge to skip: no key of the chunk, or merged
 * already (fold_chunk). */
static void skip_partials(float *pq, int dk)
{
    pq[dk] = -INFINITY, pq[dk + 1] = 0.0f;
}

/* Chunk c of (q, g) into the partials at p (partial_of's layout for one chunk); next: the unit
 * this worker runs next (next.c < 0: none). The queries are in the scratch (dec_queries). */
static void decode_chunk(const mha_step_job *j, int q, int g, int c, mha_chunk_at next, float *p,
                         const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_step *st = j->step;
    const int n_new = st->n_new[q], ctx = st->n_past[q] + n_new;
    const int dk = f->dk, nq = f->group * n_new;
    const int k0 = c * MHA_KV_CHUNK, k1 = k0 + MHA_KV_CHUNK < ctx ? k0 + MHA_KV_CHUNK : ctx;
    if (k1 <= first_key(j, q)) { /* the whole chunk is before every query's window */
        for (int qi = 0; qi < nq; qi++)
            skip_partials(p + (size_t)qi * (dk + 2), dk);
        return;
    }
    f->prod->step_chunk(j, q, g, k0, k1, next, p, v_params(j, s), s);
}

/* What a unit's values prefetch: the next unit's regions into pf (NULL: no next unit). */
static const mha_prefetch *next_regions(const mha_step_job *j, int q, mha_chunk_at next, mha_prefetch *pf)
{
    if (next.c < 0)
        return NULL;
    chunk_regions(j, q, next.g, next.c, pf);
    return pf;
}

void mha_step_chunk_f32(const mha_step_job *j, int q, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                        const mha_scratch *s)
{
    (void)vs; /* V's parameters applied as loaded */
    mha_prefetch ahead;
    chunk_src src;
    /* MLA's values take no walk (decode_chunk_tiles) */
    const mha_prefetch *pf = j->cache->mla ? NULL : next_regions(j, q, next, &ahead);
    cache_runs(j, q, g, k0, k1, s->qkv, &src);
    decode_chunk_tiles(j, q, g, k0, k1, 0, dec_queries(j, q, s), dec_scores(s), p, &src, NULL, pf, s);
}

/* bf16: the table's tiles where they sum in the kernel's order (bf16_tiles), else the chunk
 * gathered into the kernel's panels and the forward's chunk step. */
void mha_step_chunk_bf16(const mha_step_job *j, int q, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                         const mha_scratch *s)
{
    float *sc = dec_scores(s), *qv = dec_queries(j, q, s);
    if (bf16_tiles(&j->f)) {
        mha_prefetch ahead;
        chunk_src src;
        const mha_prefetch *pf = next_regions(j, q, next, &ahead);
        cache_runs(j, q, g, k0, k1, s->qkv, &src);
        decode_chunk_tiles(j, q, g, k0, k1, 1, qv, sc, p, &src, vs, pf, s);
        return;
    }
    const size_t vps = mha_attention_v16_ps(k1 - k0);
    gather_bf16(j, j->step->blocks + (size_t)q * j->step->max_blocks, g, k0, k1, k0, vps, s, vs);
    if (vs) /* a scaled cache: the float32 tiles' scores (scores_scaled), then the chunk from its logits */
        scores_scaled(j, q, g, k0, k1, qv, sc, s);
    decode_chunk_bf16(j, q, g, k0, k1, qv, sc, p, s, vps, vs);
}

/* Chunk c's partials (at p) merged into those of chunk c0 by the merge's rule, and chunk c's
 * marked as merged (the merge skips them). Where chunk c0 is the first chunk with a visible
 * key, its partials then hold what the merge would have after chunk c, bit for bit (the merge
 * of a first chunk is the chunk's own values times exp(0)). */
static void fold_chunk(const mha_step_job *j, int q, int g, int c0, int c, const float *p)
{
    const int dk = j->f.dk, nq = j->f.group * j->step->n_new[q];
    for (int qi = 0; qi < nq; qi++) {
        float *acc = partial_of(j, q, g, c0, qi), *done = partial_of(j, q, g, c, qi);
        const float *pq = p + (size_t)qi * (dk + 2);
        mha_softmax_merge(j->f.kernel->isa, acc, &acc[dk], &acc[dk + 1], pq, pq[dk], pq[dk + 1], dk);
        skip_partials(done, dk);
    }
}

/* The queries of KV head g's query heads (query qi = head jh, row i), rotated in phase 1, from
 * z into the decode scratch; on the forward's chunks (decode_chunk_bf16; an int8 cache's scores
 * are float32 tiles') in A panels too. */
static void decode_queries(const mha_step_job *j, int q, int g, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[q], dk = f->dk, G = f->group;
    float *qv = dec_queries(j, q, s);
    const float *z = f->z + (size_t)j->row0[q] * f->qd;
    for (int jh = 0; jh < G; jh++)
        for (int i = 0; i < n_new; i++)
            memcpy(qv + (size_t)(jh * n_new + i) * dk, z + (size_t)i * f->qd + (size_t)(g * G + jh) * dk,
                   (size_t)dk * sizeof *qv);
    if (f->bk && !bf16_tiles(f) && !mha_kv_traits_of(j->cache->type)->scaled)
        mha_bk_pack_a(f->kernel, mha_mat_rows(f->kernel, qv, dk), 0, G * n_new, dk, s->q16);
}

void mha_step_decode_chunks(const mha_step_job *j, int q, int g0, int g1, int c0, int c1, const mha_scratch *s)
{
    /* a run from the first chunk with a visible key folds each later chunk into that one's
     * partials as it goes (from the scratch, in cache): the merge reads one chunk's, not all */
    const int fold = c0 == mha_step_first_chunk(j, q);
    for (int c = c0; c < c1; c++)
        for (int g = g0; g < g1; g++) {
            if (g1 - g0 > 1 || c == c0) /* one KV head's queries stay for its whole run */
                decode_queries(j, q, g, s);
            const mha_chunk_at next = g + 1 < g1 ? (mha_chunk_at){g + 1, c}
                                      : c + 1 < c1 ? (mha_chunk_at){g0, c + 1}
                                                   : (mha_chunk_at){g, -1};
            const int folded = fold && c > c0;
            float *p = folded ? dec_partials(j, q, s) : partial_of(j, q, g, c, 0);
            decode_chunk(j, q, g, c, next, p, s);
            if (folded)
                fold_chunk(j, q, g, c0, c, p);
        }
}

void mha_step_decode_merge(const mha_step_job *j, int q, int g)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[q], dk = f->dk, zd = f->qd, G = f->group, chunks = mha_step_chunks(j, q);
    float *z = f->z + (size_t)j->row0[q] * zd;
    for (int qi = 0; qi < G * n_new; qi++) {
        const int jh = qi / n_new, i = qi % n_new;
        float *zr = z + (size_t)i * zd + (size_t)(g * G + jh) * dk;
        float m = -INFINITY, sum = 0.0f;
        memset(zr, 0, (size_t)dk * sizeof *zr);
        for (int c = 0; c < chunks; c++) { /* in chunk order, by the forward's rule */
            const float *p = partial_of(j, q, g, c, qi);
            mha_softmax_merge(f->kernel->isa, zr, &m, &sum, p, p[dk], p[dk + 1], dk);
        }
        if (f->sinks) /* after every key, as the forward merges it */
            mha_softmax_sink(f->kernel->isa, zr, &m, &sum, f->sinks[g * G + jh], dk);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* no visible key: a zero row */
        f->kernel->isa->scale_row(zr, zr, inv, dk);
    }
    if (mha_kv_traits_of(j->cache->type)->scaled) /* every chunk of (q, g) has read the keys */
        k_commit(j, q, g);
}

void mha_step_out_rows(const mha_step_job *j, int r0, int r1, int c0, int c1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const ptrdiff_t d = f->d, zd = f->qd;
    const mha_mat om = mha_mat_rows(k, f->call->out + (size_t)r0 * d + c0, d), zm = mha_mat_rows(k, f->z + (size_t)r0 * zd, zd);
    const float beta = f->has_bias ? 1.0f : 0.0f;
    if (f->has_bias)
        mha_mat_fill_rows(k, om, r1 - r0, c1 - c0, f->bo + c0);
    f->prod->gemm(f, s, r1 - r0, c1 - c0, f->qd, NULL, zm, f->wo, c0, beta, om); /* c0: whole panels of either kind */
}
