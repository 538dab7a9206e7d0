/* step_prefill.c — a step's prefill (a sequence with more than MHA_DECODE_MAX_NEW new
 * tokens): its context's K and V gathered from the cache into the worker's panels, as the
 * engine's chunks read them (float32 panels, an int8 cache's V read back; bf16 B panels, an
 * int8 cache's V values with their parameters beside them), Kᵀ packed once, then the
 * forward's attention (mha_attention_rows) for each query head of the group, query i at
 * position n_past + i. */
#include "step_parts.h"

#include <string.h>

#include "isa/isa.h"

/* float32 engines: the Kᵀ panels' columns past ctx, to the last panel's end, zero. */
static void zero_kt_past(const mha_step_job *j, int ctx, const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const mha_mat ktm = mha_mat_panels(k, s->kt, j->f.dk);
    for (int c = 0; c < j->f.dk; c++)
        for (int t = ctx; t < (int)mha_round_up((size_t)ctx, (size_t)k->bw); t++)
            *mha_mat_at(k, ktm, c, t) = 0.0f;
}

/* The context's V, position by position from its blocks, into the scratch; its Kᵀ straight
 * into the panels the score GEMM reads (dk × ctx, zero columns to the panel's end): feature c
 * of a block's slots is a contiguous run in the cache. Keys before the window are never read
 * by the attention (it starts on the panel holding the first visible key), so they are not
 * gathered either. An unscaled cache's elements as float32 (the type's floats: a float32
 * engine's own, or a bf16 engine's on the float32 stream, widened exactly). */
static void gather_f32(const mha_step_job *j, const int32_t *table, int g, int t_begin, int ctx, const mha_scratch *s)
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
void mha_step_gather_panels16(const mha_step_job *j, const int32_t *table, int g, int t_begin, int t_end, int base,
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
/* The step's gathers (mha_step_ops.gather), one per kind of panels and cache family. */
void mha_step_gather_floats(const mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs)
{
    (void)vs; /* an unscaled cache: no V parameters */
    gather_f32(j, j->step->blocks + (size_t)seq * j->step->max_blocks, g, t_begin, ctx, s);
}

void mha_step_gather_scaled(const mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs)
{
    gather_scaled(j, j->step->blocks + (size_t)seq * j->step->max_blocks, g, t_begin, ctx, s, vs);
}

void mha_step_gather_bf16(const mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs)
{
    mha_step_gather_panels16(j, j->step->blocks + (size_t)seq * j->step->max_blocks, g, t_begin, ctx, 0,
                             mha_attention_v16_ps(ctx), s, vs);
}

/* The step's rows [i0, i1) of sequence seq for each query head of KV head g: the forward's
 * attention (its Q, rotated in phase 1, from z; Z written over it) over the gathered context;
 * vs: NULL, or an int8 cache's V parameters (bf16 engines); i8: NULL, or its stored K groups. */
static void attend_rows(const mha_step_job *j, int seq, int g, int i0, int i1, const mha_scratch *s, const float *vs,
                        const mha_int8_keys *i8)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const int n_past = j->step->n_past[seq], ctx = n_past + j->step->n_new[seq], dk = f->dk;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    float *z = f->buf.z + (size_t)(j->row0[seq] + i0) * f->qd;
    for (int h = g * f->group; h < (g + 1) * f->group; h++) {
        mha_mat_set_rows(k, qkv, i1 - i0, 0, dk, z + (size_t)h * dk, f->qd);
        mha_attention_rows(f, h, s, (mha_queries){.q = qkv}, i1 - i0, ctx, n_past + i0, z + (size_t)h * dk, f->qd,
                           f->sinks, NULL, vs, i8);
    }
}

/* The step's attention of its rows over the gathered context (mha_step_ops.attend): all rows
 * at once on an unscaled cache. */
void mha_step_attend_rows(const mha_step_job *j, int seq, int g, int t_begin, const mha_scratch *s, const float *vs)
{
    (void)t_begin, (void)vs; /* Kᵀ and V gathered whole; no V parameters */
    attend_rows(j, seq, g, 0, j->step->n_new[seq], s, NULL, NULL);
}

/* mha_int8_keys.scores in a step's prefill: every group before the rows' own is in the cache by
 * then (mha_step_attend_groups stores the step's first). */
static void prefill_int8_scores(const mha_int8_keys *i8, const float *q, int nq, int k0, int k1, float *sc, size_t ld,
                                const mha_scratch *s)
{
    const mha_step_job *j = i8->job;
    mha_step_int8_scores(j, i8->seq, i8->g, q, nq, k0, k1, sc, ld,
                         j->step->n_past[i8->seq] + j->step->n_new[i8->seq], s);
}

/* An int8 cache: the groups the step completes stored first (this task alone reads them in this
 * step), Kᵀ of the groups before the last as stored (not where the table has integer scores:
 * theirs replace the chunks' products on those keys, prefill_int8_scores), then the rows group
 * by group from the last, each group turned to full precision for its own rows (the later
 * groups, full by then, are past them). */
void mha_step_attend_groups(const mha_step_job *j, int seq, int g, int t_begin, const mha_scratch *s, const float *vs)
{
    const int n_past = j->step->n_past[seq], ctx = n_past + j->step->n_new[seq];
    const int bs = j->cache->block_size, last = mha_kv_group_of(bs, ctx - 1).t, ints = j->f.kernel->int8_scores != NULL;
    mha_int8_keys i8 = {.scores = prefill_int8_scores, .job = j, .seq = seq, .g = g};
    mha_step_k_store_groups(j, seq, g);
    zero_kt_past(j, ctx, s);
    mha_step_k_view_panels(j, seq, g, last, ints && last > t_begin ? last : t_begin, ctx, s);
    for (int b = ctx, a; b > n_past; b = a) {
        const mha_kv_group grp = mha_kv_group_of(bs, b - 1);
        a = grp.t > n_past ? grp.t : n_past;
        if (grp.t != last)
            mha_step_k_view_panels(j, seq, g, grp.t, grp.t > t_begin ? grp.t : t_begin, grp.t + grp.n, s);
        i8.own = grp.t;
        attend_rows(j, seq, g, a - n_past, b - n_past, s, vs, ints ? &i8 : NULL);
    }
    mha_step_k_keep_tail(j, seq, g);
}

void mha_step_attend(const mha_step_job *j, int seq, int g, const mha_scratch *s)
{
    const int n_new = j->step->n_new[seq], ctx = j->step->n_past[seq] + n_new;
    if (n_new == 0)
        return;
    /* from the chunk holding the first visible key: the forward's chunks start there */
    const int t_begin = mha_step_first_key(j, seq) / MHA_KV_CHUNK * MHA_KV_CHUNK;
    float *vs = mha_step_v_params(j, s);
    j->ops->gather(j, seq, g, t_begin, ctx, s, vs);
    j->ops->attend(j, seq, g, t_begin, s, vs);
}
