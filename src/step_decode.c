/* step_decode.c — a step's decode (a sequence with at most MHA_DECODE_MAX_NEW new tokens):
 * attention straight from the cache, its context cut into the forward's chunks of
 * MHA_KV_CHUNK keys (one unit each: flash-decoding spreads long contexts over the workers),
 * each key and value row read once for all the group's queries in register tiles (the
 * microkernel's sums, or the bf16 kernel's where the table's tiles sum in its order; else the
 * chunk gathered into the kernel's panels and the forward's own chunk step), then the chunks
 * merged in order by the forward's rule: the result independent of the workers and of how the
 * sequence's steps were cut. */
#include "step_parts.h"

#include <math.h>
#include <string.h>

#include "isa/isa.h"

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

int mha_step_chunks(const mha_step_job *j, int seq)
{
    const int ctx = j->step->n_past[seq] + j->step->n_new[seq];
    return (ctx + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK;
}

int mha_step_first_chunk(const mha_step_job *j, int seq)
{
    return mha_step_first_key(j, seq) / MHA_KV_CHUNK;
}

/* Partial results of query qi (head-in-group major, then row) of chunk c of (seq, g):
 * Z (dk floats, unnormalised), then the running max and the sum. */
static float *partial_of(const mha_step_job *j, int seq, int g, int c, int qi)
{
    const size_t per_query = (size_t)j->f.dk + 2, per_chunk = mha_step_partial_floats(j->f.group, j->f.dk);
    return j->partial + (((size_t)seq * j->f.kvh + g) * j->max_chunks + c) * per_chunk + (size_t)qi * per_query;
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

/* The keys [k0, k1) of (seq, g) in place in the cache (any type): a run per block; int8: its V
 * scales' line prefetched (it lies past the block's values: read after the scores). An MLA
 * cache's V goes to vbuf (mla_v_chunk puts it there: the chunk's keys × kv_lora elements of
 * the cache's type; NULL for any other cache). */
static void cache_runs(const mha_step_job *j, int seq, int g, int k0, int k1, void *vbuf, chunk_src *src)
{
    const mha_kv_cache *cache = j->cache;
    const int bs = cache->block_size;
    const size_t esz = mha_kv_elem_size(cache->type);
    const int scaled = mha_kv_traits_of(cache->type)->scaled;
    const int32_t *table = j->step->blocks + (size_t)seq * j->step->max_blocks;
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

/* int8: the end of the step's rows from i0 (of sequence seq) that see the keys before k1 alike:
 * every row when k1 is at most the first row's group's start (they all see those keys as
 * stored), else the rows of i0's group. */
static int view_rows_end(const mha_step_job *j, int seq, int k1, int i0)
{
    const int n_new = j->step->n_new[seq], n_past = j->step->n_past[seq], bs = j->cache->block_size;
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
 * place, its runs' group parameters; type F32: Kᵀ read back or an int8 cache's K at full
 * precision, chunk_kt_scaled's): float32 decode_scores[type] in
 * the microkernel's passes of KC (one unless dk > KC), or with bf16 (a bf16 engine on an
 * unscaled cache) decode_scores16 (qv rounded already). Each run's Kᵀ read once for every
 * query, slots of several runs at once, the runs' value rows given to be prefetched (by the
 * first pass; not an MLA cache's, which mla_v_chunk writes after the scores). */
static void chunk_scores(const mha_step_job *j, int seq, int i0, int i1, const float *qv, float *sc, const chunk_src *src,
                         int bf16, mha_kv_type type, const void *const *kt, const mha_f16 *const *kp, int ld)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[seq], dk = f->dk, kc = f->kernel->kc, all = i1 - i0 == n_new;
    const mha_isa *isa = f->kernel->isa;
    const void *const *vr = j->cache->mla ? NULL : src->v;
    for (int jh = 0; jh < (all ? 1 : f->group); jh++) {
        const int nq = all ? f->group * n_new : i1 - i0;
        const float *qh = qv + (size_t)(jh * n_new + i0) * dk;
        float *sh = sc + (size_t)(jh * n_new + i0) * MHA_KV_CHUNK;
        if (bf16)
            isa->decode_scores16(&(mha_score_rows){qh, nq, dk, f->scale, sh, MHA_KV_CHUNK, f->kernel->beta_fused},
                                 &(mha_key_runs){.runs = src->runs, .ld = ld, .n = src->n, .kt = kt, .vr = src->v},
                                 f->bk->order);
        else
            for (int c0 = 0; c0 < dk; c0 += kc) {
                const int c1 = c0 + kc < dk ? c0 + kc : dk;
                const mha_score_rows rows = {qh, nq, dk, f->scale, sh, MHA_KV_CHUNK, f->kernel->beta_fused};
                const mha_key_runs keys = {.runs = src->runs, .ld = ld, .n = src->n, .kt = kt, .vr = c0 ? NULL : vr,
                                           .kp = kp};
                isa->decode_scores[type](&rows, c0, c1, &keys);
            }
    }
}

/* int8: Kᵀ of the keys [k0, k1) of (seq, g) as the rows from i0 see it (k_view; the rows they
 * are: view_rows_end), float32 into s->kt, key t at column t − k0 of rows n apart (the decode
 * tiles' rows). */
static void chunk_kt_scaled(const mha_step_job *j, int seq, int g, int k0, int k1, int i0, const mha_scratch *s)
{
    const int own = mha_kv_group_of(j->cache->block_size, j->step->n_past[seq] + i0).t;
    mha_step_k_view(j, seq, g, own, k0, k1, s->kt, (size_t)(k1 - k0), s);
}

/* int8: the end of the keys from k0 (to k1 at most) that every row sees as the cache holds them
 * and the tiles may read there: those in groups stored before the step, when blocks hold whole
 * groups (so runs are, and the end is a multiple of 16 from the chunk's start); k0 if none. */
static int k_stored_end(const mha_step_job *j, int seq, int k0, int k1)
{
    const int bs = j->cache->block_size, e = mha_kv_group_of(bs, j->step->n_past[seq]).t;
    return bs % MHA_KV_GROUP ? k0 : e < k0 ? k0 : e < k1 ? e : k1;
}

/* int8: float32 scores of the rows [i0, i1) (rows that see the keys alike: view_rows_end) on the
 * keys [a, k1) of (seq, g) as they see them (chunk_kt_scaled), into sc (key a's column). */
static void scores_viewed(const mha_step_job *j, int seq, int g, int a, int k1, int i0, int i1, const float *qv,
                          float *sc, const mha_scratch *s)
{
    chunk_src part;
    cache_runs(j, seq, g, a, k1, NULL, &part);
    const void *kt[MHA_KV_CHUNK];
    for (int r = 0, t = 0; r < part.runs; t += part.n[r++])
        kt[r] = s->kt + t;
    chunk_kt_scaled(j, seq, g, a, k1, i0, s);
    chunk_scores(j, seq, i0, i1, qv, sc, &part, 0, MHA_KV_F32, kt, NULL, k1 - a);
}

/* int8: the scores of the keys [k0, k1) of the chunk (sc: key k0's column) where the engine's
 * table has integer scores (mha_kernel.int8_scores). A key in a group stored before its query's
 * own: the integer scores; those stored before the step (to k_stored_end) where the cache
 * holds them, every row at once, the value rows prefetched; the rest group by group
 * (mha_step_int8_scores). A key of the query's own group (or a later one, which it does not
 * see): float32 products on K at full precision (chunk_kt_scaled), a pass per set of rows that
 * see the keys alike. A key's score is its own either way: the split changes no bit. */
void mha_step_scores_integer(const mha_step_job *j, int seq, int g, int k0, int k1, const float *qv, float *sc,
                             const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const int e = k_stored_end(j, seq, k0, k1), n_new = j->step->n_new[seq], n_past = j->step->n_past[seq];
    chunk_src part;
    if (e > k0) {
        cache_runs(j, seq, g, k0, e, NULL, &part);
        f->kernel->int8_scores->run(&(mha_score_rows){qv, f->group * n_new, f->dk, f->scale, sc, MHA_KV_CHUNK, 0},
                                    &(mha_key_runs){.runs = part.runs, .ld = part.ld, .n = part.n, .kt = part.kt,
                                                    .vr = part.v, .kp = part.kp});
    }
    for (int i0 = 0, i1; i0 < n_new && e < k1; i0 = i1) {
        i1 = view_rows_end(j, seq, k1, i0);
        const int own = mha_kv_group_of(j->cache->block_size, n_past + i0).t, all = i1 - i0 == n_new;
        const int se = own < e ? e : own < k1 ? own : k1; /* the stored groups' end */
        for (int jh = 0; se > e && jh < (all ? 1 : f->group); jh++)
            mha_step_int8_scores(j, seq, g, qv + (size_t)(jh * n_new + i0) * f->dk, all ? f->group * n_new : i1 - i0,
                                 e, se, sc + (size_t)(jh * n_new + i0) * MHA_KV_CHUNK + (e - k0), MHA_KV_CHUNK, n_past,
                                 s);
        if (se < k1) /* its own group's keys at full precision */
            scores_viewed(j, seq, g, se, k1, i0, i1, qv, sc + (se - k0), s);
    }
}

/* int8 on a table without integer scores: float32 products on K as each row sees it, those in
 * groups stored before the step (to k_stored_end) where the cache holds them, every row at
 * once (decode_scores[INT8]: each value made as it loads); the rest on Kᵀ as each row's group
 * sees it, a pass per set of rows that see it alike (chunk_kt_scaled). A key's score is its own
 * sum either way: the split changes no bit. */
void mha_step_scores_float(const mha_step_job *j, int seq, int g, int k0, int k1, const float *qv, float *sc,
                           const mha_scratch *s)
{
    const int e = k_stored_end(j, seq, k0, k1), n_new = j->step->n_new[seq];
    if (e > k0) {
        chunk_src part;
        cache_runs(j, seq, g, k0, e, NULL, &part);
        chunk_scores(j, seq, 0, n_new, qv, sc, &part, 0, part.type, part.kt, part.kp, part.ld);
    }
    for (int i0 = 0, i1; i0 < n_new && e < k1; i0 = i1) { /* read back */
        i1 = view_rows_end(j, seq, k1, i0);
        scores_viewed(j, seq, g, e, k1, i0, i1, qv, sc + (e - k0), s);
    }
}

/* The worker's decode scratch (s->dec) for the nq queries of a task: their scores against a
 * chunk (nq × MHA_KV_CHUNK), the queries (nq × dk), a chunk's partials (nq × (dk + 2)), the
 * V zero sums (nq). */
static float *dec_scores(const mha_scratch *s)
{
    return s->dec;
}

static float *dec_queries(const mha_step_job *j, int seq, const mha_scratch *s)
{
    return s->dec + (size_t)j->f.group * j->step->n_new[seq] * MHA_KV_CHUNK;
}

static float *dec_partials(const mha_step_job *j, int seq, const mha_scratch *s)
{
    return dec_queries(j, seq, s) + (size_t)j->f.group * j->step->n_new[seq] * j->f.dk;
}

/* int8 in a bf16 engine: a chunk's V zero sums of the task's queries (mha_attention_chunk_row). */
static float *dec_zero_sums(const mha_step_job *j, int seq, const mha_scratch *s)
{
    return dec_partials(j, seq, s) + (size_t)j->f.group * j->step->n_new[seq] * ((size_t)j->f.dk + 2);
}

/* The regions of KV head g in chunk c's blocks, whole (Kᵀ, V and an int8 cache's parameters:
 * the block's bytes of the head, contiguous), for the worker's previous unit's tiles to
 * prefetch while they sum its values from cache: the whole regions, not Kᵀ alone, as the next
 * unit reads its values and parameters right after its scores. */
static void chunk_regions(const mha_step_job *j, int seq, int g, int c, mha_prefetch *pf)
{
    const mha_kv_cache *cache = j->cache;
    const int bs = cache->block_size, ctx = j->step->n_past[seq] + j->step->n_new[seq];
    const int k0 = c * MHA_KV_CHUNK, k1 = k0 + MHA_KV_CHUNK < ctx ? k0 + MHA_KV_CHUNK : ctx;
    const size_t esz = mha_kv_elem_size(cache->type);
    const int32_t *table = j->step->blocks + (size_t)seq * j->step->max_blocks;
    pf->n = 0, pf->bytes = cache->head_elems * esz;
    for (mha_kv_run r = mha_kv_run_at(table, bs, k0, k1); r.n; r = mha_kv_run_at(table, bs, r.t + r.n, k1))
        pf->at[pf->n++] = (const char *)cache->data + mha_kv_kt_at(cache, r.block, g) * esz;
}

/* What a unit's values prefetch: the next unit's regions into pf (NULL: no next unit). */
static const mha_prefetch *next_regions(const mha_step_job *j, int seq, mha_chunk_at next, mha_prefetch *pf)
{
    if (next.c < 0)
        return NULL;
    chunk_regions(j, seq, next.g, next.c, pf);
    return pf;
}

/* The decode tiles (mha_step_ops.chunk, one entry per engine and cache family below): the
 * chunk's scores and A·V in register tiles, read in place from the cache blocks, each key and
 * value row once for every query of the group, and the forward's softmax of the chunk
 * (mha_attention_chunk_row) in between; into the chunk's partials p (partial_of). float32
 * engines: the microkernel's sums (decode_scores, decode_values). bf16 engines (their kernel
 * summing in an order of the tiles): the bf16 kernels' sums on the cache's own elements
 * (decode_scores16, decode_values16), the queries and probabilities rounded to bf16 as the
 * kernels' A panels round them. An int8 cache's K as mha_step_ops.scores reads it (integer scores
 * and float32 products in either engine, on the queries unrounded); its V read back as loaded (float32), or its
 * values themselves with their parameters applied by the softmax (bf16): the forward's chunk
 * step, bit for bit. Here, what the families share: the chunk's runs (and the next unit's
 * regions, which the values prefetch into L2 as they sum: pf), the rows' softmax and the two
 * ways of summing the values. */
static const mha_prefetch *tile_runs(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next,
                                     const mha_scratch *s, chunk_src *src, mha_prefetch *ahead)
{
    const mha_prefetch *pf = next_regions(j, seq, next, ahead);
    cache_runs(j, seq, g, k0, k1, s->qkv, src);
    return pf;
}

/* An unscaled cache's scores (chunk_scores of every row at once; bf16: decode_scores16 on the
 * queries rounded already), then an MLA chunk's V into the scratch (mla_v_chunk). */
static void tile_scores(const mha_step_job *j, int seq, const float *qv, float *sc, const chunk_src *src, int bf16,
                        const mha_scratch *s)
{
    chunk_scores(j, seq, 0, j->step->n_new[seq], qv, sc, src, bf16, src->type, src->kt, NULL, src->ld);
    if (j->cache->mla)
        mla_v_chunk(j, src, s->qkv);
}

/* Per query: the keys it sees in the chunk, their logits exp'd against the chunk's max and the
 * sum (mha_attention_chunk_row, with vs, rounded and zs as it takes them) into its partials,
 * whose Z is zeroed for the values. */
static void tile_rows(const mha_step_job *j, int seq, int g, int k0, int k1, float *sc, float *p, const float *vs,
                      int rounded, float *zs)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[seq], n_past = j->step->n_past[seq], dk = f->dk, nq = f->group * n_new;
    const size_t ps = (size_t)dk + 2; /* partial_of's stride between queries */
    for (int qi = 0; qi < nq; qi++) {
        const int pos = n_past + qi % n_new;
        const mha_key_span in = mha_keys_within(mha_visible_keys(pos, 1, f->window, k1), k0, k1 - k0);
        float *row = sc + (size_t)qi * MHA_KV_CHUNK, *pq = p + (size_t)qi * ps;
        pq[dk + 1] = mha_attention_chunk_row(f, row, k1 - k0, in, pos, k0, g * f->group + qi / n_new, NULL, vs,
                                             &pq[dk], NULL, rounded, zs ? &zs[qi] : NULL);
        memset(pq, 0, (size_t)dk * sizeof *pq);
    }
}

/* float32 Z = E · V over the chunk's n keys, each value row read once for every query: run by
 * run (decode_values of the cache's type: an int8 cache's rows read back as loaded), the walk
 * over pf stepped as they go; an MLA chunk's V panel by panel in the scratch (mla_v_panel), in
 * order as one run (each tile's accumulators held over all its keys) with no walk: in cache. */
static void tile_values(const mha_step_job *j, int seq, int n, const float *sc, float *p, const chunk_src *src,
                        const mha_prefetch *pf, const mha_scratch *s)
{
    const mha_isa *isa = j->f.kernel->isa;
    const int nq = j->f.group * j->step->n_new[seq];
    const size_t ps = (size_t)j->f.dk + 2;
    if (j->cache->mla) {
        for (int x0 = 0; x0 < src->vw; x0 += MHA_MLA_VPANEL) {
            const int cols = src->vw - x0 < MHA_MLA_VPANEL ? src->vw - x0 : MHA_MLA_VPANEL;
            const mha_value_rows rows = {sc, MHA_KV_CHUNK, nq, cols, p + x0, ps};
            isa->decode_values[MHA_KV_F32](&rows, mla_v_panel(s->qkv, x0), NULL, n, NULL, NULL);
        }
        return;
    }
    mha_prefetch_walk walk = {.pf = pf, .per = MHA_VALUES_PREFETCH};
    for (int r = 0, t = 0; r < src->runs; t += src->n[r++]) {
        const mha_value_rows rows = {sc + t, MHA_KV_CHUNK, nq, src->vw, p, ps};
        isa->decode_values[src->type](&rows, src->v[r], src->vs[r], src->n[r], src->next[r], pf ? &walk : NULL);
    }
}

/* bf16 Z = E · V (decode_values16 over the runs; an MLA chunk's V, in order in the scratch, as
 * one run), then each query's V zero sum (zs: an int8 cache's, or NULL). */
static void tile_values16(const mha_step_job *j, int seq, int n, const float *sc, float *p, const chunk_src *src,
                          const float *zs, const mha_prefetch *pf)
{
    const mha_fwd *f = &j->f;
    const int nq = f->group * j->step->n_new[seq], dk = f->dk;
    const size_t ps = (size_t)dk + 2;
    const mha_value_rows rows = {sc, MHA_KV_CHUNK, nq, src->vw, p, ps};
    f->kernel->isa->decode_values16(&rows, j->cache->mla ? 1 : src->runs, src->v, j->cache->mla ? &n : src->n,
                                    src->type, pf, f->bk->order);
    for (int qi = 0; zs && qi < nq; qi++)
        mha_attention_v_zero(p + (size_t)qi * ps, dk, zs[qi]);
}

/* bf16 decode on kernels that sum otherwise (no table tiles for their order): the chunk's K
 * and V in the bf16 kernel's panels (s->kt16, s->v16 of vps), then the forward's own chunk
 * step (mha_attention_chunk) on every query of the group as one block, whatever the engine's
 * q_block (chunk16 runs them 32 at a time, each row's bits its own, from the queries packed
 * once a run in s->q16): the forward's roundings and sums, so decode and prefill agree bit for
 * bit; into p as above. vs: NULL, or an int8 cache's V parameters: then the scores are in sc
 * already (mha_step_ops.scores': the forward's integer scores and float32 products' sums) and the chunk
 * starts at their logits. */
static void decode_chunk_bf16(const mha_step_job *j, int seq, int g, int k0, int k1, float *qv, float *sc, float *p,
                              const mha_scratch *s, size_t vps, const float *vs)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, n_new = j->step->n_new[seq];
    const size_t ps = (size_t)dk + 2;
    const mha_kv_view kv = {.kt16 = s->kt16, .v16 = s->v16, .kps = mha_attention_kt16_ps(f), .vps = vps, .vs = vs};
    const mha_chunk_rows rows = {.m = f->group * n_new, .pos0 = j->step->n_past[seq], .period = n_new, .causal = 1,
                                 .head0 = g * f->group, .q = mha_mat_rows(k, qv, dk), .q16 = vs ? NULL : s->q16,
                                 .scored = vs != NULL};
    mha_attention_chunk(f, s, &rows, &kv, 0, k0, k1 - k0, sc, MHA_KV_CHUNK, mha_mat_rows(k, p, (ptrdiff_t)ps), p + dk,
                        p + dk + 1, (ptrdiff_t)ps);
}

/* A query's partials (at pq) marked for the merge to skip: no key of the chunk, or merged
 * already (fold_chunk). */
static void skip_partials(float *pq, int dk)
{
    pq[dk] = -INFINITY, pq[dk + 1] = 0.0f;
}

/* Chunk c of (seq, g) into the partials at p (partial_of's layout for one chunk); next: the unit
 * this worker runs next (next.c < 0: none). The queries are in the scratch (dec_queries). */
static void decode_chunk(const mha_step_job *j, int seq, int g, int c, mha_chunk_at next, float *p,
                         const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_step *st = j->step;
    const int n_new = st->n_new[seq], ctx = st->n_past[seq] + n_new;
    const int dk = f->dk, nq = f->group * n_new;
    const int k0 = c * MHA_KV_CHUNK, k1 = k0 + MHA_KV_CHUNK < ctx ? k0 + MHA_KV_CHUNK : ctx;
    if (k1 <= mha_step_first_key(j, seq)) { /* the whole chunk is before every query's window */
        for (int qi = 0; qi < nq; qi++)
            skip_partials(p + (size_t)qi * (dk + 2), dk);
        return;
    }
    j->ops->chunk(j, seq, g, k0, k1, next, p, mha_step_v_params(j, s), s);
}

/* The step's decode chunks (mha_step_ops.chunk): float32 engines' tiles on a float32 cache
 * (an MLA one's too). */
void mha_step_chunk_tiles(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                          const mha_scratch *s)
{
    (void)vs; /* no V parameters */
    mha_prefetch ahead;
    chunk_src src;
    const mha_prefetch *pf = tile_runs(j, seq, g, k0, k1, next, s, &src, &ahead);
    float *sc = dec_scores(s);
    tile_scores(j, seq, dec_queries(j, seq, s), sc, &src, 0, s);
    tile_rows(j, seq, g, k0, k1, sc, p, NULL, 0, NULL);
    tile_values(j, seq, k1 - k0, sc, p, &src, pf, s);
}

/* float32 engines on an int8 cache: K read as mha_step_ops.scores reads it; V's rows read back as
 * loaded, with their parameters (src's vs). */
void mha_step_chunk_tiles_scaled(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p,
                                 float *vs, const mha_scratch *s)
{
    (void)vs; /* V's parameters applied as loaded */
    mha_prefetch ahead;
    chunk_src src;
    const mha_prefetch *pf = tile_runs(j, seq, g, k0, k1, next, s, &src, &ahead);
    float *sc = dec_scores(s);
    j->ops->scores(j, seq, g, k0, k1, dec_queries(j, seq, s), sc, s);
    tile_rows(j, seq, g, k0, k1, sc, p, NULL, 0, NULL);
    tile_values(j, seq, k1 - k0, sc, p, &src, pf, s);
}

/* bf16 engines whose kernel sums as the table's bf16 tiles do, on a bf16 cache: those tiles
 * on the queries rounded as the kernels' A panels hold them, the probabilities rounded too. */
void mha_step_chunk_tiles16(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                            const mha_scratch *s)
{
    (void)vs; /* no V parameters */
    mha_prefetch ahead;
    chunk_src src;
    const mha_prefetch *pf = tile_runs(j, seq, g, k0, k1, next, s, &src, &ahead);
    float *sc = dec_scores(s), *qv = dec_queries(j, seq, s);
    j->f.kernel->isa->round_bf16_floats(qv, j->f.group * j->step->n_new[seq] * j->f.dk);
    tile_scores(j, seq, qv, sc, &src, 1, s);
    tile_rows(j, seq, g, k0, k1, sc, p, NULL, 1, NULL);
    tile_values16(j, seq, k1 - k0, sc, p, &src, NULL, pf);
}

/* The same on an int8 cache: float32 scores on the queries as they are (mha_step_ops.scores); the
 * chunk's V parameters, key by key, into vs for the softmax, which scales each probability and
 * sums the zero points' share of each row (zs) for after the values. */
void mha_step_chunk_tiles16_scaled(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p,
                                   float *vs, const mha_scratch *s)
{
    mha_prefetch ahead;
    chunk_src src;
    const mha_prefetch *pf = tile_runs(j, seq, g, k0, k1, next, s, &src, &ahead);
    float *sc = dec_scores(s), *zs = dec_zero_sums(j, seq, s);
    j->ops->scores(j, seq, g, k0, k1, dec_queries(j, seq, s), sc, s);
    for (int r = 0, t = 0; r < src.runs; t += src.n[r++])
        memcpy(vs + 2 * (size_t)t, src.vs[r], 2 * (size_t)src.n[r] * sizeof *vs);
    tile_rows(j, seq, g, k0, k1, sc, p, vs, 1, zs);
    tile_values16(j, seq, k1 - k0, sc, p, &src, zs, pf);
}

/* Other bf16 engines: the chunk gathered into the kernel's panels and the forward's chunk
 * step. */
void mha_step_chunk_panels16(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p,
                             float *vs, const mha_scratch *s)
{
    (void)next; /* the gather reads its blocks once, in order: nothing to prefetch */
    float *sc = dec_scores(s), *qv = dec_queries(j, seq, s);
    const size_t vps = mha_attention_v16_ps(k1 - k0);
    mha_step_gather_panels16(j, j->step->blocks + (size_t)seq * j->step->max_blocks, g, k0, k1, k0, vps, s, vs);
    if (vs) /* a scaled cache: its scores (mha_step_ops.scores), then the chunk from its logits */
        j->ops->scores(j, seq, g, k0, k1, qv, sc, s);
    decode_chunk_bf16(j, seq, g, k0, k1, qv, sc, p, s, vps, vs);
}

/* Chunk c's partials (at p) merged into those of chunk c0 by the merge's rule, and chunk c's
 * marked as merged (the merge skips them). Where chunk c0 is the first chunk with a visible
 * key, its partials then hold what the merge would have after chunk c, bit for bit (the merge
 * of a first chunk is the chunk's own values times exp(0)). */
static void fold_chunk(const mha_step_job *j, int seq, int g, int c0, int c, const float *p)
{
    const int dk = j->f.dk, nq = j->f.group * j->step->n_new[seq];
    for (int qi = 0; qi < nq; qi++) {
        float *acc = partial_of(j, seq, g, c0, qi), *done = partial_of(j, seq, g, c, qi);
        const float *pq = p + (size_t)qi * (dk + 2);
        mha_softmax_merge(j->f.kernel->isa, acc, &acc[dk], &acc[dk + 1], pq, pq[dk], pq[dk + 1], dk);
        skip_partials(done, dk);
    }
}

/* The queries of KV head g's query heads (query qi = head jh, row i), rotated in phase 1, from
 * z into the decode scratch; on the forward's chunks (decode_chunk_bf16; an int8 cache's scores
 * are mha_step_ops.scores', on the queries unrounded) in A panels too. */
static void decode_queries(const mha_step_job *j, int seq, int g, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[seq], dk = f->dk, G = f->group;
    float *qv = dec_queries(j, seq, s);
    const float *z = f->buf.z + (size_t)j->row0[seq] * f->qd;
    for (int jh = 0; jh < G; jh++)
        for (int i = 0; i < n_new; i++)
            memcpy(qv + (size_t)(jh * n_new + i) * dk, z + (size_t)i * f->qd + (size_t)(g * G + jh) * dk,
                   (size_t)dk * sizeof *qv);
    if (j->ops->packed_queries)
        mha_bk_pack_a(f->kernel, mha_mat_rows(f->kernel, qv, dk), 0, G * n_new, dk, s->q16);
}

void mha_step_decode_chunks(const mha_step_job *j, int seq, int g0, int g1, int c0, int c1, const mha_scratch *s)
{
    /* a run from the first chunk with a visible key folds each later chunk into that one's
     * partials as it goes (from the scratch, in cache): the merge reads one chunk's, not all */
    const int fold = c0 == mha_step_first_chunk(j, seq);
    for (int c = c0; c < c1; c++)
        for (int g = g0; g < g1; g++) {
            if (g1 - g0 > 1 || c == c0) /* one KV head's queries stay for its whole run */
                decode_queries(j, seq, g, s);
            const mha_chunk_at next = g + 1 < g1 ? (mha_chunk_at){g + 1, c}
                                      : c + 1 < c1 ? (mha_chunk_at){g0, c + 1}
                                                   : (mha_chunk_at){g, -1};
            const int folded = fold && c > c0;
            float *p = folded ? dec_partials(j, seq, s) : partial_of(j, seq, g, c, 0);
            decode_chunk(j, seq, g, c, next, p, s);
            if (folded)
                fold_chunk(j, seq, g, c0, c, p);
        }
}

void mha_step_decode_merge(const mha_step_job *j, int seq, int g)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[seq], dk = f->dk, zd = f->qd, G = f->group, chunks = mha_step_chunks(j, seq);
    float *z = f->buf.z + (size_t)j->row0[seq] * zd;
    for (int qi = 0; qi < G * n_new; qi++) {
        const int jh = qi / n_new, i = qi % n_new;
        float *zr = z + (size_t)i * zd + (size_t)(g * G + jh) * dk;
        float m = -INFINITY, sum = 0.0f;
        memset(zr, 0, (size_t)dk * sizeof *zr);
        for (int c = 0; c < chunks; c++) { /* in chunk order, by the forward's rule */
            const float *p = partial_of(j, seq, g, c, qi);
            mha_softmax_merge(f->kernel->isa, zr, &m, &sum, p, p[dk], p[dk + 1], dk);
        }
        mha_softmax_end(f->kernel->isa, zr, &m, &sum, f->sinks ? &f->sinks[g * G + jh] : NULL, dk);
    }
    j->ops->commit(j, seq, g); /* every chunk of (seq, g) has read the keys */
}
