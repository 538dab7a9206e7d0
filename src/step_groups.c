/* step_groups.c — an int8 cache's K groups in a step: K per feature over groups of
 * MHA_KV_GROUP slots, the group still filling kept at full precision (the step's new K in
 * j->k_full, the earlier ones of its group in the cache's open-group pool, j->tails) until
 * complete. Each query reads Kᵀ as its own group sees it (k_view: the groups before as stored,
 * its own at full precision), so every (query, key) pair has one value however the steps were
 * cut; k_commit stores what the step completed (a prefill: store_groups before its rows
 * attend, keep_tail after). Where the table has integer scores, a query scores the groups
 * before its own on their codes (mha_step_int8_scores). */
#include "step_parts.h"

#include <string.h>

#include "isa/isa.h"

/* Sequence seq's K row of KV head g at position p at full precision: the step's own (p >= n_past)
 * or, for the group holding n_past, the cache's open-group entry's. */
static const float *k_full_row(const mha_step_job *j, int seq, int g, int p)
{
    const int n_past = j->step->n_past[seq], dk = j->f.dk;
    if (p >= n_past)
        return j->k_full + ((size_t)(j->row0[seq] + p - n_past) * j->f.kvh + g) * dk;
    const int t0 = mha_kv_group_of(j->cache->block_size, n_past).t;
    return j->tails[seq] + ((size_t)g * MHA_KV_GROUP + (size_t)(p - t0)) * dk;
}

/* Group grp of (seq, g), which this step completes, quantized from its full rows: per feature c
 * over the group's slots (the type's quantize, its parameters float16 values); into kt (feature
 * c of the group's slot u at kt[c · ld + u]) and the parameters (scales, then zero points) as
 * floats into params or as the cache holds them into half (one of the two). */
static void quantize_k_group(const mha_step_job *j, int seq, int g, mha_kv_group grp, int8_t *kt, size_t ld, float *params,
                             mha_f16 *half)
{
    const mha_kv_traits *kv = mha_kv_traits_of(j->cache->type);
    const int dk = j->f.dk;
    const float *rows[MHA_KV_GROUP];
    for (int u = 0; u < grp.n; u++)
        rows[u] = k_full_row(j, seq, g, grp.t + u);
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

/* Kᵀ of positions [t0, t1) of group grp of (seq, g) as stored (mha_kv_k_value, scale_rows): from
 * the cache when the group was complete before the step, else quantized here (into s->k8's
 * room) as k_commit will store it; float32 into dst (feature c of position t0 + u at
 * dst[c · ld + u]). */
static void k_stored(const mha_step_job *j, int seq, int g, mha_kv_group grp, int t0, int t1, float *dst, size_t ld,
                     const mha_scratch *s)
{
    const mha_kv_cache *c = j->cache;
    const int dk = j->f.dk, bs = c->block_size;
    const int8_t *kt;
    float *params = s->k8 + (size_t)MHA_KV_GROUP * dk; /* its parameters as floats, then its values */
    size_t ldk;
    if (grp.t + grp.n <= j->step->n_past[seq]) {
        const int block = j->step->blocks[(size_t)seq * j->step->max_blocks + grp.t / bs], slot = grp.t % bs;
        const mha_f16 *half = mha_kv_k_params(c, block, g, slot);
        kt = mha_kv_i8(c) + mha_kv_kt_at(c, block, g) + (size_t)slot, ldk = (size_t)bs;
        for (int f = 0; f < 2 * dk; f++)
            params[f] = mha_f16_float(half[f]);
    } else {
        int8_t *v = (int8_t *)(void *)(params + 2 * (size_t)dk);
        quantize_k_group(j, seq, g, grp, v, MHA_KV_GROUP, params, NULL);
        kt = v, ldk = MHA_KV_GROUP;
    }
    j->f.kernel->isa->scale_rows[j->cache->type](kt + (t0 - grp.t), ldk, dk, t1 - t0, params, params + dk, dst, ld);
}

/* Kᵀ of keys [k0, k1) of (seq, g) as a query whose group starts at `own` sees them: a group
 * before its own as stored, its own (and the later ones, which it does not see) at full
 * precision; float32 into dst (feature c of key k0 + u at dst[c · ld + u]). */
void mha_step_k_view(const mha_step_job *j, int seq, int g, int own, int k0, int k1, float *dst, size_t ld,
                   const mha_scratch *s)
{
    const int dk = j->f.dk;
    for (int t = k0; t < k1;) {
        const mha_kv_group grp = mha_kv_group_of(j->cache->block_size, t);
        const int e = grp.t + grp.n < k1 ? grp.t + grp.n : k1;
        if (grp.t < own)
            k_stored(j, seq, g, grp, t, e, dst + (t - k0), ld, s);
        else
            for (int u = t; u < e; u++) {
                const float *row = k_full_row(j, seq, g, u);
                for (int f = 0; f < dk; f++)
                    dst[(size_t)f * ld + (size_t)(u - k0)] = row[f];
            }
        t = e;
    }
}

/* Prefill: Kᵀ of keys [k0, k1) of (seq, g) as a query of the group at `own` sees them, into the
 * float32 microkernel's panels (s->kt, key t at column t), a group at a time through s->k8: an
 * int8 cache's products are float32 in either engine (a bf16 engine's on its queries
 * unrounded: mha_kv_view.vs; the stored groups' scores then replaced by integer ones,
 * mha_kv_view.i8). */
void mha_step_k_view_panels(const mha_step_job *j, int seq, int g, int own, int k0, int k1, const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const int dk = j->f.dk;
    const mha_mat ktm = mha_mat_panels(k, s->kt, dk);
    for (int t = k0, e; t < k1; t = e) {
        const mha_kv_group grp = mha_kv_group_of(j->cache->block_size, t);
        e = grp.t + grp.n < k1 ? grp.t + grp.n : k1;
        mha_step_k_view(j, seq, g, own, t, e, s->k8, MHA_KV_GROUP, s);
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

/* int8: the integer scores (isa.h's int8_scores, the engine's kernel) of nq queries q (rows dk
 * apart) against the keys [k0, k1) of (seq, g), each in a group stored before the queries' own,
 * into sc (query qi's key k0 at sc[qi · ld]). The whole groups that end by `stored` (keys the
 * cache holds quantized) in place, a run a block, in one call; a group the step completed
 * quantized here (into s->k8) as k_commit stores it; a group the keys cut scored whole for
 * MHA_INT8_ROWS queries at a time beside them, the keys asked then copied. A score depends on
 * its query and its group alone: decode and prefill give it the same bits. */
void mha_step_int8_scores(const mha_step_job *j, int seq, int g, const float *q, int nq, int k0, int k1, float *sc,
                          size_t ld, int stored, const mha_scratch *s)
{
    const mha_kv_cache *c = j->cache;
    const int dk = j->f.dk, bs = c->block_size;
    const int32_t *table = j->step->blocks + (size_t)seq * j->step->max_blocks;
    const mha_int8_scores_ops *ops = j->f.kernel->int8_scores;
    mha_f16 *half = (mha_f16 *)(void *)s->k8; /* s->k8's layout: attention.h, MHA_INT8_ROWS */
    int8_t *codes = (int8_t *)(void *)(s->k8 + MHA_INT8_CODES_AT * (size_t)dk);
    float *part = s->k8 + MHA_INT8_PART_AT * (size_t)dk;
    const void *kt[MHA_KV_CHUNK];
    const mha_f16 *kp[MHA_KV_CHUNK];
    int n[MHA_KV_CHUNK], runs = 0, from = k0; /* the whole stored groups not scored yet: runs from `from` */
    for (int t = k0, e; t <= k1; t = e) {
        const mha_kv_group grp = mha_kv_group_of(bs, t);
        e = grp.t + grp.n < k1 ? grp.t + grp.n : k1;
        const int whole = t < k1 && t == grp.t && e == grp.t + grp.n, in_cache = grp.t + grp.n <= stored;
        if (whole && in_cache && runs < MHA_KV_CHUNK) { /* a run a block: this group, or onto the last run */
            const int block = table[grp.t / bs], slot = grp.t % bs;
            if (runs && slot)
                n[runs - 1] += grp.n;
            else
                kt[runs] = mha_kv_i8(c) + mha_kv_kt_at(c, block, g) + (size_t)slot,
                kp[runs] = mha_kv_k_params(c, block, g, slot), n[runs++] = grp.n;
            continue;
        }
        if (runs) /* the runs so far, then this group alone */
            ops->run(&(mha_score_rows){q, nq, dk, j->f.scale, sc + (from - k0), ld, 0},
                     &(mha_key_runs){.runs = runs, .ld = bs, .n = n, .kt = kt, .kp = kp});
        runs = 0, from = e;
        if (t == k1)
            break;
        const void *gk = codes;
        const mha_f16 *gp = half;
        int gld = MHA_KV_GROUP;
        if (in_cache) {
            const int block = table[grp.t / bs], slot = grp.t % bs;
            gk = mha_kv_i8(c) + mha_kv_kt_at(c, block, g) + (size_t)slot, gp = mha_kv_k_params(c, block, g, slot);
            gld = bs;
        } else
            quantize_k_group(j, seq, g, grp, codes, MHA_KV_GROUP, NULL, half);
        const mha_key_runs keys = {.runs = 1, .ld = gld, .n = &grp.n, .kt = &gk, .kp = &gp};
        if (whole) {
            ops->run(&(mha_score_rows){q, nq, dk, j->f.scale, sc + (t - k0), ld, 0}, &keys);
            continue;
        }
        for (int q0 = 0; q0 < nq; q0 += MHA_INT8_ROWS) {
            const int rows = nq - q0 < MHA_INT8_ROWS ? nq - q0 : MHA_INT8_ROWS;
            ops->run(&(mha_score_rows){q + (size_t)q0 * dk, rows, dk, j->f.scale, part, MHA_KV_GROUP, 0}, &keys);
            for (int i = 0; i < rows; i++)
                memcpy(sc + (size_t)(q0 + i) * ld + (t - k0), part + (size_t)i * MHA_KV_GROUP + (t - grp.t),
                       (size_t)(e - t) * sizeof *sc);
        }
    }
}

/* Each group the step's new tokens of (seq, g) complete (groups: 1) quantized into the cache, or
 * (groups: 0) the new tokens of the group still filling into its open-group entry (rows from
 * the group's start; the earlier ones are there already, which k_full_row reads until then). */
static void k_store(const mha_step_job *j, int seq, int g, int groups)
{
    const mha_kv_cache *c = j->cache;
    const int n_past = j->step->n_past[seq], ctx = n_past + j->step->n_new[seq], bs = c->block_size, dk = j->f.dk;
    const int32_t *table = j->step->blocks + (size_t)seq * j->step->max_blocks;
    for (int t = n_past; t < ctx;) {
        const mha_kv_group grp = mha_kv_group_of(bs, t);
        if (grp.t + grp.n <= ctx) {
            const int block = table[grp.t / bs], slot = grp.t % bs;
            if (groups)
                quantize_k_group(j, seq, g, grp, mha_kv_i8(c) + mha_kv_kt_at(c, block, g) + (size_t)slot, (size_t)bs,
                                 NULL, mha_kv_k_params(c, block, g, slot));
        } else if (!groups)
            for (int u = t; u < ctx; u++)
                memcpy(j->tails[seq] + ((size_t)g * MHA_KV_GROUP + (size_t)(u - grp.t)) * dk,
                       k_full_row(j, seq, g, u), (size_t)dk * sizeof(float));
        t = grp.t + grp.n;
    }
}

void mha_step_k_store_groups(const mha_step_job *j, int seq, int g)
{
    k_store(j, seq, g, 1);
}

void mha_step_k_commit(const mha_step_job *j, int seq, int g)
{
    k_store(j, seq, g, 1);
    k_store(j, seq, g, 0);
}

void mha_step_k_keep_tail(const mha_step_job *j, int seq, int g)
{
    k_store(j, seq, g, 0);
}
