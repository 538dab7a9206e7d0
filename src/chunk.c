/* chunk.c — the chunk step of each precision (mha_attention_chunk: the strategy tables here run
 * mha_attention_chunk_f32, _bf16 or _stream), and what packs its operands: a KV head's Kᵀ and
 * V into the panels its chunks read (pack_kv, pack_kv16) and a query block's queries, once for
 * its chunks (block_queries).
 *
 * A chunk: the keys [c0, c0 + n) of m query rows, their scores, each row's logits and masked
 * exp by attention.c's row math (mha_attention_chunk_row), and E · V left unnormalised for the
 * merge. The forward's query blocks, the core's and a step's prefill and decode chunks all run
 * it: one source of a chunk's bits in each precision. float32: BLIS's microkernel on the
 * panels (mha_gemm_in_place), or the table's decode tiles (and rows_scores on K's rows in
 * place) with the microkernel's sums; bf16: the bf16 kernel 32 rows at a time (chunk16), all
 * rows with E in float32 for the attention weights, or bf16 decode's tiles on K's and V's rows
 * (chunk_rows16); bf16 on the float32 stream: the table's stream_rows16 on operands rounded to
 * bf16, the bf16 kernel's bits (values_padding puts its padding's + 0 back), an int8 cache's
 * chunk by chunk_stream_scaled. */
#include "attention.h"

#include "isa/isa.h"

#include <string.h>

/* bf16: the tile of room past V's kl keys in s->v16 zeroed (mha_attention_v16_ps). */
static void v16_room(const mha_fwd *f, const mha_scratch *s, int kl)
{
    const size_t vps = mha_attention_v16_ps(kl), room = mha_bk_kp(kl);
    for (int j = 0; j < f->dv; j += MHA_BT_N) /* the tile of room past V's keys: zeros */
        memset(s->v16 + (size_t)(j / MHA_BT_N) * vps + room * MHA_BT_N, 0, MHA_BT_K * MHA_BT_N * sizeof(mha_bf16));
}

/* float32: Kᵀ into the panels the scores read; V read where the forward projects it. */
void mha_attention_pack_kv_f32(const mha_fwd *f, const mha_scratch *s, int kl, mha_mat km, mha_mat vm)
{
    const mha_kernel *k = f->kernel;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    mha_pack_panels(k, f->dk, kl, km, 1, s->kt);
    if (vm.p != mha_mat_at(k, qkv, 0, 2 * f->dkp)) /* the core's V: rows vm.ld apart */
        mha_mat_set_rows(k, qkv, kl, 2 * f->dkp, f->dv, vm.p, vm.ld);
}

/* bf16: the group's Kᵀ and V (kl keys of dk and dv features, rows of km and vm) into B
 * panels, once for every query head of the group. */
void mha_attention_pack_kv_bf16(const mha_fwd *f, const mha_scratch *s, int kl, mha_mat km, mha_mat vm)
{
    const mha_kernel *k = f->kernel;
    mha_bk_pack_b(k, km, 1, f->dk, kl, s->kt16, mha_attention_kt16_ps(f));
    mha_bk_pack_b(k, vm, 0, kl, f->dv, s->v16, mha_attention_v16_ps(kl));
    v16_room(f, s, kl);
}

/* bf16 on the float32 stream: kl keys' Kᵀ in s->kt's panels and V in the Q/K/V scratch's V
 * columns, each element as the bf16 B panels hold it (rounded; padding zero). */
static void round_kv(const mha_fwd *f, const mha_scratch *s, int kl)
{
    const mha_kernel *k = f->kernel;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    k->isa->round_bf16_floats(s->kt, (int)((size_t)f->dk * mha_round_up((size_t)kl, (size_t)k->bw)));
    for (int c = 0; c < f->dv; c += k->bw) /* a panel's kl rows are contiguous */
        k->isa->round_bf16_floats(mha_mat_at(k, qkv, 0, 2 * f->dkp + c), kl * k->bw);
}

void mha_attention_pack_kv_stream(const mha_fwd *f, const mha_scratch *s, int kl, mha_mat km, mha_mat vm)
{
    if (f->call->attn) { /* the weights' chunks are the bf16 kernel's */
        mha_attention_pack_kv_bf16(f, s, kl, km, vm);
        return;
    }
    mha_attention_pack_kv_f32(f, s, kl, km, vm);
    round_kv(f, s, kl);
}

void mha_attention_pack_kv16_bf16(const mha_fwd *f, const mha_scratch *s, int kl, const mha_bf16 *k16, ptrdiff_t ldk,
                                  const mha_bf16 *v16, ptrdiff_t ldv)
{
    const mha_kernel *k = f->kernel;
    mha_bk_pack_b_bf16(k, k16, ldk, 1, f->dk, kl, s->kt16, mha_attention_kt16_ps(f));
    mha_bk_pack_b_bf16(k, v16, ldv, 0, kl, f->dv, s->v16, mha_attention_v16_ps(kl));
    v16_room(f, s, kl);
}

/* Widened (exact; a denormal bf16 stays one, and the stream's DAZ reads it as zero, as the
 * kernels do). */
void mha_attention_pack_kv16_stream(const mha_fwd *f, const mha_scratch *s, int kl, const mha_bf16 *k16,
                                    ptrdiff_t ldk, const mha_bf16 *v16, ptrdiff_t ldv)
{
    const mha_kernel *k = f->kernel;
    const int w = k->bw, dk = f->dk, dv = f->dv;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    for (int j0 = 0; j0 < kl; j0 += w) { /* Kᵀ: a panel of w keys (dk × w) at a time, key by key */
        float *panel = s->kt + (size_t)j0 * dk;
        for (int j = 0; j < w; j++) {
            const mha_bf16 *src = j0 + j < kl ? k16 + (ptrdiff_t)(j0 + j) * ldk : NULL;
            for (int c = 0; c < dk; c++)
                panel[(size_t)c * w + j] = src ? mha_bf16_float(src[c]) : 0.0f;
        }
    }
    for (int j = 0; j < kl; j++) /* V: each key's row, a panel's columns at a time */
        for (int c0 = 0; c0 < dv; c0 += w) {
            float *dst = mha_mat_at(k, qkv, j, 2 * f->dkp + c0);
            const mha_bf16 *src = v16 + (ptrdiff_t)j * ldv + c0;
            for (int c = 0; c < w && c0 + c < dv; c++)
                dst[c] = mha_bf16_float(src[c]);
        }
}

/* Whether every key of the chunk (n from position c0) is in an int8 cache's stored groups
 * (kv->i8): its products would all be replaced. */
static int int8_stored_chunk(const mha_kv_view *kv, int c0, int n)
{
    return kv->i8 && c0 + n <= kv->i8->own;
}

/* An int8 cache's stored groups (kv->i8, a step's prefill): the scores of the rows [i0, i0 + m)
 * of the block r (at sc, ld apart) against the chunk's keys before kv->i8->own (n from position
 * c0) replaced by their integer scores (mha_int8_keys), the queries gathered as rows
 * MHA_INT8_ROWS at a time into s->k8. */
static void int8_stored_scores(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                               int i0, int m, int c0, int n, float *sc, ptrdiff_t ld)
{
    if (!kv->i8 || c0 >= kv->i8->own)
        return;
    const int k1 = c0 + n < kv->i8->own ? c0 + n : kv->i8->own, dk = f->dk;
    float *q = s->k8 + mha_int8_keys_room(dk);
    for (int a = i0; a < i0 + m; a += MHA_INT8_ROWS) {
        const int rows = i0 + m - a < MHA_INT8_ROWS ? i0 + m - a : MHA_INT8_ROWS;
        mha_mat_get_rows(f->kernel, mha_mat_sub(f->kernel, r->q, a, 0), rows, 0, dk, q, dk);
        kv->i8->scores(kv->i8, q, rows, c0, k1, sc + (a - i0) * ld, (size_t)ld, s);
    }
}

/* Row `row` of the block r: its position, its query head, the keys of the chunk's n from c0
 * that it sees. */
static int row_pos(const mha_chunk_rows *r, int row)
{
    return r->pos0 + row % r->period;
}

static int row_head(const mha_chunk_rows *r, int row)
{
    return r->head0 + row / r->period;
}

static mha_key_span row_keys(const mha_fwd *f, const mha_chunk_rows *r, int row, int c0, int n)
{
    return mha_keys_within(mha_visible_keys(row_pos(r, row), r->causal, f->window, c0 + n), c0, n);
}

/* Row `row` of the block r (its position, query head and mask) against the chunk's n keys
 * from c0, its scores at sc: mha_attention_chunk_row over the keys it sees. Returns the sum. */
static float block_row(const mha_fwd *f, const mha_chunk_rows *r, int row, int c0, int n, float *sc, const float *vs,
                       float *mx, mha_bf16 *p, int rounded, float *zs)
{
    return mha_attention_chunk_row(f, sc, n, row_keys(f, r, row, c0, n), row_pos(r, row), c0, row_head(r, row),
                                   r->mask ? r->mask + (size_t)(row % r->period) * f->call->seq_kv : NULL, vs, mx, p,
                                   rounded, zs);
}

/* Whether rows [first, first + m) of the block r all see the whole chunk (n keys from c0)
 * through no mask; if so, their logits (scores m rows ld apart at sc), so that a table's
 * softmax_rows can take them together. */
static int whole_rows_logits(const mha_fwd *f, const mha_chunk_rows *r, int first, int m, int c0, int n, float *sc,
                             ptrdiff_t ld)
{
    if (r->mask)
        return 0;
    for (int i = 0; i < m; i++) {
        const mha_key_span in = row_keys(f, r, first + i, c0, n);
        if (in.lo != 0 || in.hi != n)
            return 0;
    }
    for (int i = 0; i < m; i++)
        mha_attention_logits(f, sc + i * ld, (mha_key_span){0, n}, row_pos(r, first + i), c0, row_head(r, first + i));
    return 1;
}

/* bf16 without the attention weights: rows [i0, i0 + 32) of the chunk at a time through their
 * scores, their probabilities (rounded into s->p16 as each row is exp'd) and their A·V, so the
 * score rows and probabilities stay in L1 between the products; Q from r->q16 (packed once
 * for the block) or packed here. Each row's bits are its own: the same whatever the blocking. */
static void chunk16(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv, int b0,
                    int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum, ptrdiff_t st)
{
    const mha_kernel *k = f->kernel;
    const int kq = (int)(mha_bk_kp(f->dk) / MHA_BT_K), kn = (int)(mha_bk_kp(n) / MHA_BT_K);
    const float *vs = kv->vs ? kv->vs + 2 * (size_t)b0 : NULL;
    float zs[2 * MHA_BT_M]; /* int8: the rows' V zero sums */
    for (int i0 = 0; i0 < r->m; i0 += 2 * MHA_BT_M) {
        const int m = r->m - i0 < 2 * MHA_BT_M ? r->m - i0 : 2 * MHA_BT_M;
        float *sb = r->scored ? sc + (size_t)i0 * ld : sc; /* the block's score rows */
        if (!kv->vs)
            mha_bgemm(f->bk, k, m, n, f->dk, f->scale, r->q16 ? r->q16 + mha_bk_a_row(i0, kq) : NULL,
                      r->q16 ? r->q : mha_mat_sub(k, r->q, i0, 0), /* packed Q: r->q unread (and NULL) */
                      kv->kt16 + (size_t)(b0 / MHA_BT_N) * kv->kps, kv->kps, 0.0f, mha_mat_rows(k, sb, ld), s->apack16);
        else if (!r->scored) { /* an int8 cache: float32 scores (mha_kv_view), its stored groups' integer */
            if (!int8_stored_chunk(kv, c0, n))
                mha_gemm(k, m, n, f->dk, f->scale, mha_mat_sub(k, r->q, i0, 0), mha_mat_sub(k, kv->kt, 0, b0), 0.0f,
                         mha_mat_rows(k, sb, ld), s->apack);
            int8_stored_scores(f, s, r, kv, i0, m, c0, n, sb, ld);
        }
        if (!vs && whole_rows_logits(f, r, r->first + i0, m, c0, n, sb, ld))
            f->attn->exp_rows16(f, sb, ld, m, n, &mx[i0 * st], &sum[i0 * st], st, s->p16);
        else
            for (int i = 0; i < m; i++)
                sum[(i0 + i) * st] = block_row(f, r, r->first + i0 + i, c0, n, sb + i * ld, vs, &mx[(i0 + i) * st],
                                               s->p16 + mha_bk_a_row(i, kn), 0, &zs[i]);
        mha_bgemm(f->bk, k, m, f->dv, n, 1.0f, s->p16, mha_mat_rows(k, sb, ld), kv->v16 + mha_bk_b_index(b0, 0, 0),
                  kv->vps, 0.0f, mha_mat_sub(k, zc, i0, 0), NULL);
        for (int i = 0; vs && i < m; i++)
            mha_attention_v_zero(mha_mat_at(k, zc, i0 + i, 0), f->dv, zs[i]);
    }
}

/* The few queries on K's and V's rows (mha_attention_ops.few_rows): rows_scores16 and decode_values16, the
 * kernel's chunk sums as bf16 decode reads a cache (the rows' queries bf16 values: rounded
 * by core_few_rows). */
static void chunk_rows16(const mha_fwd *f, const mha_chunk_rows *r, const mha_kv_view *kv, int b0, int c0, int n,
                         float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum, ptrdiff_t st)
{
    const mha_isa *isa = f->kernel->isa;
    const int m = r->m, dv = f->dv;
    const mha_rows_ahead va = {(const char *)(kv->vr16 + (size_t)b0 * dv), (size_t)dv * sizeof(mha_bf16),
                               (size_t)dv * sizeof(mha_bf16)};
    const mha_score_rows rows_q = {r->q.p, m, f->dk, f->scale, sc, (size_t)ld, f->kernel->beta_fused};
    isa->rows_scores16(&rows_q, &(mha_key_rows){kv->kr + (ptrdiff_t)b0 * kv->krl, kv->krl, n, &va}, f->bk->order);
    for (int i = 0; i < m; i++) {
        sum[i * st] = block_row(f, r, r->first + i, c0, n, sc + i * ld, NULL, &mx[i * st], NULL, 1, NULL);
        memset(mha_mat_at(f->kernel, zc, i, 0), 0, (size_t)dv * sizeof(float));
    }
    const void *v[1] = {kv->vr16 + (size_t)b0 * dv};
    const mha_value_rows rows = {sc, (size_t)ld, m, dv, zc.p, (size_t)zc.ld};
    isa->decode_values16(&rows, 1, v, &n, MHA_KV_BF16, NULL, f->bk->order);
}

const mha_bf16 *mha_attention_block_queries_f32(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                                const mha_kv_view *kv)
{
    (void)f, (void)s, (void)r, (void)kv; /* read in place */
    return NULL;
}

const mha_bf16 *mha_attention_block_queries_bf16(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                                 const mha_kv_view *kv)
{
    if (f->call->attn || kv->vs) /* the weights' chunks pack Q in their scores' product; an int8 cache's
                                  * scores are float32 products and integer ones on the queries unrounded */
        return NULL;
    if (r->q16_rows)
        mha_bk_copy_a(r->q16_rows, r->q16_ld, r->m, f->dk, s->q16);
    else
        mha_bk_pack_a(f->kernel, r->q, 0, r->m, f->dk, s->q16);
    return s->q16;
}

/* Whether a chunk of view kv runs on the float32 stream (mha_attention_chunk_stream): its
 * float32 panels filled (not a few queries' rows or a decode chunk's bf16 panels), and not
 * the attention weights, which keep the bf16 kernel's chunks. */
static int stream_chunks(const mha_fwd *f, const mha_kv_view *kv)
{
    return kv->kt.p && !f->call->attn;
}

const mha_bf16 *mha_attention_block_queries_stream(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                                   const mha_kv_view *kv)
{
    return stream_chunks(f, kv) ? NULL : mha_attention_block_queries_bf16(f, s, r, kv);
}

/* The rows' logits and unnormalised softmax against the chunk (scores in sc, ld apart; E
 * left there in float32, rounded: as the floats of its bf16 rounding): the attention-weights,
 * float32 and float32-stream chunks' row pass. Rows that all see the whole chunk through no
 * mask (a forward's but for causal blocks' diagonal chunks) go together (exp_rows,
 * exp_rows_rounded: the table's rows functions where it has them), the same bits as row by
 * row. */
static void chunk_rows(const mha_fwd *f, const mha_chunk_rows *r, int c0, int n, float *sc, ptrdiff_t ld, float *mx,
                       float *sum, ptrdiff_t st, int rounded)
{
    if (whole_rows_logits(f, r, r->first, r->m, c0, n, sc, ld)) {
        (rounded ? f->attn->exp_rows_rounded : f->attn->exp_rows)(f, sc, ld, r->m, n, mx, sum, st);
        return;
    }
    for (int i = 0; i < r->m; i++)
        sum[i * st] = block_row(f, r, r->first + i, c0, n, sc + i * ld, NULL, &mx[i * st], NULL, rounded, NULL);
}

void mha_attention_chunk_f32(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                             int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                             ptrdiff_t st)
{
    const mha_kernel *k = f->kernel;
    const int m = r->m, dk = f->dk, dv = f->dv;
    const mha_mat sm = mha_mat_rows(k, sc, ld);
    if (kv->kr) { /* K's rows in place, the same sums (r->q rows dk apart); V's rows brought in meanwhile */
        const mha_rows_ahead va = {(const char *)(kv->vp + (size_t)b0 * dv), (size_t)dv * sizeof(float),
                                   (size_t)dv * sizeof(float)};
        const mha_score_rows rows = {r->q.p, m, dk, f->scale, sc, (size_t)ld, k->beta_fused};
        k->isa->rows_scores(&rows, &(mha_key_rows){kv->kr + (ptrdiff_t)b0 * kv->krl, kv->krl, n, kv->vp ? &va : NULL});
    } else if (kv->ktp) { /* the decode tiles on plain queries (r->q rows dk apart): a panel a run */
        const void *kt[MHA_KV_CHUNK / MHA_TILE_KEYS];
        int len[MHA_KV_CHUNK / MHA_TILE_KEYS], runs = 0;
        for (int j = 0; j < n; j += MHA_TILE_KEYS, runs++) /* b0 starts a panel */
            kt[runs] = kv->ktp + (size_t)(b0 + j) * dk, len[runs] = n - j < MHA_TILE_KEYS ? n - j : MHA_TILE_KEYS;
        const mha_score_rows rows = {r->q.p, m, dk, f->scale, sc, (size_t)ld, k->beta_fused};
        const mha_key_runs keys = {.runs = runs, .ld = MHA_TILE_KEYS, .n = len, .kt = kt};
        k->isa->decode_scores[MHA_KV_F32](&rows, 0, dk, &keys);
    } else if (!int8_stored_chunk(kv, c0, n))
        mha_gemm_in_place(k, m, n, dk, f->scale, r->q, mha_mat_sub(k, kv->kt, 0, b0), 0.0f, sm, s->apack);
    int8_stored_scores(f, s, r, kv, 0, m, c0, n, sc, ld);
    chunk_rows(f, r, c0, n, sc, ld, mx, sum, st, 0);
    /* Z (m, dv) = E (m, n) · V (n, dv) */
    if (kv->vp) { /* key by key in order from zero: the microkernel's sums over the chunk; K's rows
                   * of the next chunk brought into L2 meanwhile, so memory does not idle between
                   * chunks */
        mha_prefetch next = {.bytes = (size_t)dk * sizeof(float)};
        for (int t = b0 + n; kv->kr && t < kv->kl && next.n < MHA_KV_CHUNK; t++)
            next.at[next.n++] = kv->kr + (ptrdiff_t)t * kv->krl;
        mha_prefetch_walk walk = {.pf = &next, .per = MHA_VALUES_PREFETCH};
        for (int i = 0; i < m; i++)
            memset(zc.p + i * zc.ld, 0, (size_t)dv * sizeof *zc.p);
        const mha_value_rows rows = {sc, (size_t)ld, m, dv, zc.p, (size_t)zc.ld};
        k->isa->decode_values[MHA_KV_F32](&rows, kv->vp + (size_t)b0 * dv, NULL, n, NULL, next.n ? &walk : NULL);
    } else
        mha_gemm_in_place(k, m, dv, n, 1.0f, sm, mha_mat_sub(k, kv->v, b0, 0), 0.0f, zc, s->apack);
}

void mha_attention_chunk_bf16(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                              int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                              ptrdiff_t st)
{
    const mha_kernel *k = f->kernel;
    if (kv->kr) {
        chunk_rows16(f, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st);
        return;
    }
    if (!f->call->attn) {
        chunk16(f, s, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st);
        return;
    }
    /* the attention weights keep E in float32 (a forward's: never an int8 cache's V, kv->vs),
     * rounded as the values' product packs it; b0 is a multiple of the chunk, so of the 16-key
     * panels */
    const mha_mat sm = mha_mat_rows(k, sc, ld);
    mha_bgemm(f->bk, k, r->m, n, f->dk, f->scale, NULL, r->q, kv->kt16 + (size_t)(b0 / MHA_BT_N) * kv->kps, kv->kps,
              0.0f, sm, s->apack16);
    chunk_rows(f, r, c0, n, sc, ld, mx, sum, st, 0);
    mha_bgemm(f->bk, k, r->m, f->dv, n, 1.0f, NULL, sm, kv->v16 + mha_bk_b_index(b0, 0, 0), kv->vps, 0.0f, zc,
              s->apack16);
}

/* The bf16 kernels' A·V sums end on the key padding up to the k tile: + 0 × V of the keys
 * [b0 + n, b0 + kp(n)) (+ 0 past kv->kl, the panels' room). That changes a sum only where it is
 * −0 and one of those products is + 0 (V's sign bit clear; finite V). */
static void values_padding(const mha_fwd *f, const mha_kv_view *kv, int b0, int n, int m, mha_mat zc)
{
    const mha_kernel *k = f->kernel;
    const int end = (int)mha_bk_kp(n);
    for (int i = 0; i < m; i++)
        for (int c = 0; c < f->dv; c++) {
            float *z = mha_mat_at(k, zc, i, c);
            if (*z != 0.0f || !signbit(*z))
                continue;
            for (int j = n; j < end; j++)
                if (b0 + j >= kv->kl || !signbit(*mha_mat_at(k, kv->v, b0 + j, c))) {
                    *z = 0.0f;
                    break;
                }
        }
}

/* An int8 cache's chunk on the float32 stream (kv->vs; v: the values themselves, as floats):
 * chunk16's, 32 rows at a time, with its products on the stream: the scores float32 products
 * on the queries unrounded (its stored groups' integer: int8_stored_scores), each row's E times its keys' V scales rounded in place, A·V by
 * stream_rows16 (the bf16 kernel's sums: the values are exact in bf16), then the zero
 * points' sums. */
static void chunk_stream_scaled(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                const mha_kv_view *kv, int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc,
                                float *mx, float *sum, ptrdiff_t st)
{
    const mha_kernel *k = f->kernel;
    const float *vs = kv->vs + 2 * (size_t)b0;
    float zs[2 * MHA_BT_M]; /* the rows' V zero sums */
    for (int i0 = 0; i0 < r->m; i0 += 2 * MHA_BT_M) {
        const int m = r->m - i0 < 2 * MHA_BT_M ? r->m - i0 : 2 * MHA_BT_M;
        float *sb = sc + (size_t)i0 * ld;
        const mha_mat zb = mha_mat_sub(k, zc, i0, 0);
        if (!int8_stored_chunk(kv, c0, n))
            mha_gemm_in_place(k, m, n, f->dk, f->scale, mha_mat_sub(k, r->q, i0, 0), mha_mat_sub(k, kv->kt, 0, b0),
                              0.0f, mha_mat_rows(k, sb, ld), s->apack);
        int8_stored_scores(f, s, r, kv, i0, m, c0, n, sb, ld);
        for (int i = 0; i < m; i++)
            sum[(i0 + i) * st] = block_row(f, r, r->first + i0 + i, c0, n, sb + i * ld, vs, &mx[(i0 + i) * st], NULL, 1,
                                           &zs[i]);
        const mha_product16 ev = {.m = m, .n = f->dv, .kk = n, .alpha = 1.0f, .a = mha_mat_rows(k, sb, ld),
                                  .b = mha_mat_sub(k, kv->v, b0, 0), .c = zb};
        k->isa->stream_rows16(k, &ev);
        if (n % MHA_BT_K)
            values_padding(f, kv, b0, n, m, zb);
        for (int i = 0; i < m; i++)
            mha_attention_v_zero(mha_mat_at(k, zb, i, 0), f->dv, zs[i]);
    }
}

/* bf16 on the float32 stream: the queries rounded (or widened) into s->q16's floats, scores and
 * A·V by the table's stream_rows16 on kt and v (pack_kv_stream's), E rounded in place: the
 * bf16 kernel's sums, bit for bit (its padding's + 0: stream_rows16 and values_padding); an
 * int8 cache's chunk by chunk_stream_scaled. The attention weights and the bf16 panels of a
 * decode chunk go the bf16 kernel's way. */
void mha_attention_chunk_stream(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                                int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                                ptrdiff_t st)
{
    const mha_kernel *k = f->kernel;
    const int m = r->m, dk = f->dk;
    if (!stream_chunks(f, kv)) {
        mha_attention_chunk_bf16(f, s, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st);
        return;
    }
    if (kv->vs) {
        chunk_stream_scaled(f, s, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st);
        return;
    }
    float *q = (float *)(void *)s->q16;
    if (r->q16_rows)
        for (int i = 0; i < m; i++)
            for (int c = 0; c < dk; c++)
                q[(size_t)i * dk + c] = mha_bf16_float(r->q16_rows[i * r->q16_ld + c]);
    else {
        mha_mat_get_rows(k, r->q, m, 0, dk, q, dk);
        k->isa->round_bf16_floats(q, m * dk);
    }
    const mha_product16 qk = {.m = m, .n = n, .kk = dk, .alpha = f->scale, .pad = dk % MHA_BT_K != 0,
                              .a = mha_mat_rows(k, q, dk), .b = mha_mat_sub(k, kv->kt, 0, b0),
                              .c = mha_mat_rows(k, sc, ld)};
    k->isa->stream_rows16(k, &qk);
    chunk_rows(f, r, c0, n, sc, ld, mx, sum, st, 1);
    const mha_product16 ev = {.m = m, .n = f->dv, .kk = n, .alpha = 1.0f, .a = mha_mat_rows(k, sc, ld),
                              .b = mha_mat_sub(k, kv->v, b0, 0), .c = zc};
    k->isa->stream_rows16(k, &ev);
    if (n % MHA_BT_K)
        values_padding(f, kv, b0, n, m, zc);
}

/* The chunk's n keys that rows [g0, g0 + m) of the block r see any of: up to the last any sees. */
static int group_keys(const mha_fwd *f, const mha_chunk_rows *r, int g0, int m, int c0, int n)
{
    int hi = 0;
    for (int i = g0; i < g0 + m && hi < n; i++) {
        const int h = row_keys(f, r, r->first + i, c0, n).hi;
        hi = h > hi ? h : hi;
    }
    return hi;
}

/* A causal block's chunk on its diagonal, where its rows see ever more of the chunk's keys:
 * each group of rows (mha_attention_ops.group_rows) against the keys up to the last its rows
 * see (at least one; bf16: to that key's k tile, which the bf16 kernel reads to anyway, within
 * the chunk: no padding to mend), not the block's — a query block of 96 rows would compute
 * about 48 keys a row that none of them sees.
 * Each row's scores and exps are the same; its A·V ends short of keys its E holds 0 for (a sum
 * of 0 × V, V finite, changes only where the sum is −0: then the group's end decides; an
 * infinite V of a key the row does not see reached it as NaN, now only within its group). Not
 * for the few queries' rows on K's rows or decode tiles, scores given, attention weights (whole
 * rows of E) or a chunk given an int8 cache's V parameters or integer scores; the few queries
 * on panels (a group's heads' rows, their positions repeating every MHA_DECODE_MAX_NEW rows at
 * most) see the whole chunk in their first group. Returns whether it ran the chunk. */
static int chunk_groups(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                        int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                        ptrdiff_t st)
{
    const int g = f->attn->group_rows, align = f->attn->group_keys;
    if (r->m <= g || r->scored || f->call->attn || kv->vs || kv->i8 || kv->kr || kv->ktp ||
        group_keys(f, r, 0, g, c0, n) == n)
        return 0; /* the first group sees the whole chunk already: the chunk whole */
    const mha_kernel *k = f->kernel;
    const int kq = (int)(mha_bk_kp(f->dk) / MHA_BT_K);
    for (int g0 = 0; g0 < r->m; g0 += g) {
        mha_chunk_rows gr = *r;
        gr.m = r->m - g0 < g ? r->m - g0 : g;
        gr.first = r->first + g0;
        if (r->q.p)
            gr.q = mha_mat_sub(k, r->q, g0, 0);
        if (r->q16)
            gr.q16 = r->q16 + mha_bk_a_row(g0, kq);
        if (r->q16_rows)
            gr.q16_rows = r->q16_rows + g0 * r->q16_ld;
        const int keys = (group_keys(f, r, g0, gr.m, c0, n) + align - 1) / align * align;
        f->attn->chunk(f, s, &gr, kv, b0, c0, keys < 1 ? 1 : keys < n ? keys : n, sc + g0 * ld, ld,
                       mha_mat_sub(k, zc, g0, 0), mx + g0 * st, sum + g0 * st, st);
    }
    return 1;
}

void mha_attention_chunk(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                         int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                         ptrdiff_t st)
{
    if (!chunk_groups(f, s, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st))
        f->attn->chunk(f, s, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st);
}

/* The strategies, each copied into an engine's ops by mha_attention_ops_of, which adds what
 * the table decides (few_rows, the exp forms). */
static const mha_attention_ops f32 = {.float_panels = 1, .pack_kv = mha_attention_pack_kv_f32,
                                      .block_queries = mha_attention_block_queries_f32,
                                      .few_fits = mha_attention_few_fits_f32,
                                      .pack_kv_few = mha_attention_pack_kv_few_f32, .chunk = mha_attention_chunk_f32};
static const mha_attention_ops bf16 = {.pack_kv = mha_attention_pack_kv_bf16, .pack_kv16 = mha_attention_pack_kv16_bf16,
                                       .block_queries = mha_attention_block_queries_bf16,
                                       .few_fits = mha_attention_few_fits_bf16,
                                       .pack_kv_few = mha_attention_pack_kv_few_bf16, .chunk = mha_attention_chunk_bf16};
/* bf16's, but the K/V packing and chunks on the float32 stream (the stream's chunks round
 * their queries themselves; the core's few queries are bf16's) */
static const mha_attention_ops bf16_stream = {.float_panels = 1, .pack_kv = mha_attention_pack_kv_stream,
                                              .pack_kv16 = mha_attention_pack_kv16_stream,
                                              .block_queries = mha_attention_block_queries_stream,
                                              .few_fits = mha_attention_few_fits_bf16,
                                              .pack_kv_few = mha_attention_pack_kv_few_bf16,
                                              .chunk = mha_attention_chunk_stream};

const mha_attention_ops *mha_attention_ops_of(mha_attention_ops *ops, const mha_bkernel *bk, const mha_kernel *k,
                                              int dk, int group)
{
    const int stream = bk && bk->order == MHA_BK_EVEN_FIRST && k->stream && k->isa->stream_rows16 && dk <= k->kc;
    *ops = !bk ? f32 : stream ? bf16_stream : bf16;
    ops->few_rows = mha_attention_few_rows(bk, k->isa, dk, group);
    ops->group_rows = bk ? 2 * MHA_BT_M : 2 * k->aw; /* 24 with blis-skx's A panels of 12 rows */
    ops->group_keys = bk ? MHA_BT_K : 1;
    mha_attention_exp_ops(ops, k->isa, bk != NULL);
    return ops;
}
