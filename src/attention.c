/* attention.c — one KV head of one sequence, and one block of output rows, on the packed GEMM.
 *
 * Group task (a KV head and the query heads that read it; one head without GQA): K|V =
 * x_b · [Wk_g | Wv_g] into the worker's panel-form scratch (V is then already in the form the
 * A·V GEMM reads; without GQA one GEMM gives Q|K|V), QK-norm and RoPE on K, Kᵀ packed once
 * for every query head of the group; per query head its Q (QK-norm, RoPE), then for each
 * query block: scores = Q_blk · Kᵀ · scale (1/sqrt(d_k) by default) up to the block's last
 * visible key, their logits (softcap, ALiBi), a masked exp per row (softmax without its
 * division), Z_blk = E · V written straight into the head's columns of Z, the head's sink
 * merged in, and each Z row divided by its sum: d_k divisions, not seq_kv.
 * Keys go in the fixed chunks of MHA_KV_CHUNK counted from position 0 (mha_attention_chunk):
 * each chunk's scores exp'd against the chunk's own max, its E · V summed on its own, then
 * merged into Z in key order by mha_softmax_merge, so the working set stays in L2 however
 * long the row, and a row's bits depend on its position and keys alone: decode runs the same
 * chunks and the same merge. (With the attention weights wanted, one chunk of whole rows.) */
#include "attention.h"

#include "isa/isa.h"
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
    char *xp = (char *)(f->xpack + (size_t)b * f->xpack_stride);
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
    const float beta = f->has_bias ? 1.0f : 0.0f;
    if (f->has_bias)
        mha_mat_fill_rows(k, c, m, n, bias + wcol);
    /* wcol is a multiple of dkp, so of every kind's panels */
    f->prod->gemm(f, s, m, n, f->d, xp, mha_mat_rows(k, x, f->d), f->wqkv, g * (int)width + wcol, beta, c);
}

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

void mha_attention_logits(const mha_fwd *f, float *row, mha_key_span in, int pos, int c0, int head)
{
    if (f->softcap > 0.0f && in.hi > in.lo)
        f->kernel->isa->softcap_row(row + in.lo, in.hi - in.lo, f->softcap);
    if (f->alibi) {
        const float slope = f->alibi[head];
        for (int j = in.lo; j < in.hi; j++) {
            const int dist = pos > c0 + j ? pos - (c0 + j) : c0 + j - pos;
            row[j] -= slope * (float)dist;
        }
    }
    for (int j = 0; j < in.lo; j++)
        row[j] = -INFINITY; /* before the window: exp gives 0 */
}

float mha_attention_chunk_row(const mha_fwd *f, float *row, int n, mha_key_span in, int pos, int c0, int head,
                              const uint8_t *mask, const float *vs, float *mx, mha_bf16 *p, int rounded, float *zs)
{
    const mha_isa *isa = f->kernel->isa;
    mha_attention_logits(f, row, in, pos, c0, head);
    *mx = -INFINITY;
    if (p && !vs && isa->softmax_row16) /* exp'd and rounded in one pass */
        return isa->softmax_row16(row, n, in.hi, mask, mx, p);
    if (rounded && !p && !vs && isa->softmax_row_rounded)
        return isa->softmax_row_rounded(row, n, in.hi, mask, mx);
    const float sum = (f->bk ? isa->softmax_row_bf16 : isa->softmax_row)(row, n, in.hi, mask, mx);
    if (vs) { /* int8: the zero points' sum in 8 lanes, then each key's V scale, after the sum */
        float z[8] = {0};
        int j = 0;
        for (; j + 8 <= in.hi; j += 8)
            for (int l = 0; l < 8; l++) {
                z[l] += row[j + l] * vs[2 * (j + l) + 1];
                row[j + l] *= vs[2 * (j + l)];
            }
        for (; j < in.hi; j++) {
            z[j % 8] += row[j] * vs[2 * j + 1];
            row[j] *= vs[2 * j];
        }
        *zs = ((z[0] + z[4]) + (z[1] + z[5])) + ((z[2] + z[6]) + (z[3] + z[7]));
    }
    if (p)
        mha_bk_pack_a_row(f->kernel, row, 0, n, p);
    else if (rounded)
        isa->round_bf16_floats(row, n);
    return sum;
}

void mha_attention_v_zero(float *z, int n, float zs)
{
    for (int c = 0; c < n; c++)
        z[c] += zs;
}

void mha_alibi_slopes(int h, float max_bias, float *slopes)
{
    int n = 1;
    while (n * 2 <= h)
        n *= 2;
    const float m0 = (float)pow(2.0, -(double)max_bias / n), m1 = (float)pow(2.0, -(double)max_bias / (2.0 * n));
    for (int i = 0; i < h; i++)
        slopes[i] = i < n ? powf(m0, (float)(i + 1)) : powf(m1, (float)(2 * (i - n) + 1));
}

void mha_attention_sum_squares(const mha_fwd *f, mha_mat qkv, int rows, int col, double *ss, int add)
{
    for (int i = 0; i < rows; i++) {
        double t = add ? ss[(size_t)i * f->kvh] : 0.0;
        for (int c = 0; c < f->dk; c++) {
            const float x = *mha_mat_at(f->kernel, qkv, i, col + c);
            t += (double)x * x;
        }
        ss[(size_t)i * f->kvh] = t;
    }
}

void mha_attention_norm_rows(const mha_fwd *f, mha_mat qkv, int rows, int col, int is_k, int head, const double *ss)
{
    const mha_kernel *k = f->kernel;
    const int dk = f->dk;
    const float *w = is_k ? f->k_norm : f->q_norm;
    if (!w)
        return;
    const int width = ss ? (is_k ? f->kvh * dk : f->qd) : dk; /* the features the mean is over */
    if (ss)
        w += (size_t)head * dk; /* this head's factors */
    for (int i = 0; i < rows; i++) {
        double sq = 0.0;
        if (ss)
            for (int g = 0; g < f->kvh; g++)
                sq += ss[(size_t)i * f->kvh + g];
        else
            mha_attention_sum_squares(f, mha_mat_sub(k, qkv, i, 0), 1, col, &sq, 0);
        const float r = mha_rms_factor(sq, width, f->norm_eps);
        for (int c = 0; c < dk; c++) {
            float *x = mha_mat_at(k, qkv, i, col + c);
            *x = *x * r * w[c];
        }
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
        else if (!r->scored) /* an int8 cache: float32 scores (mha_kv_view) */
            mha_gemm(k, m, n, f->dk, f->scale, mha_mat_sub(k, r->q, i0, 0), mha_mat_sub(k, kv->kt, 0, b0), 0.0f,
                     mha_mat_rows(k, sb, ld), s->apack);
        if (!vs && k->isa->softmax_rows16 && whole_rows_logits(f, r, r->first + i0, m, c0, n, sb, ld))
            k->isa->softmax_rows16(sb, ld, m, n, &mx[i0 * st], &sum[i0 * st], st, s->p16);
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

int mha_attention_few_fits_f32(const mha_fwd *f)
{
    return f->dk <= f->kernel->kc;
}

int mha_attention_few_fits_bf16(const mha_fwd *f)
{
    (void)f;
    return 1;
}

/* K's and V's rows of (sequence b, KV head g) in the core's tensors. */
static mha_mat core_k(const mha_fwd *f, const mha_core_io *io, int b, int g)
{
    return mha_mat_rows(f->kernel, (const float *)io->k + b * io->ks[0] + g * io->ks[1], io->ks[2]);
}
static mha_mat core_v(const mha_fwd *f, const mha_core_io *io, int b, int g)
{
    return mha_mat_rows(f->kernel, (const float *)io->v + b * io->vs[0] + g * io->vs[1], io->vs[2]);
}

/* Whether the core's few queries read K's rows (the table has the kernel for them: have): d_k
 * within its reach and a KV head with queries for its 4 lanes (a group of 4 or more). */
static int few_rows(const mha_fwd *f, int have)
{
    return have && f->dk <= MHA_ROWS_SCORES_DK && f->group >= 4;
}

/* K and V of (sequence b, KV head g), kl keys, into what the chunks read: float32 tensors by
 * pack_kv, bf16 ones (bf16 engines only) by pack_kv16. */
static void core_kv_by(const mha_fwd *f, const mha_scratch *s, const mha_core_io *io, int b, int g, int kl,
                       void (*pack_kv)(const mha_fwd *, const mha_scratch *, int, mha_mat, mha_mat),
                       void (*pack_kv16)(const mha_fwd *, const mha_scratch *, int, const mha_bf16 *, ptrdiff_t,
                                         const mha_bf16 *, ptrdiff_t))
{
    if (kl <= 0)
        return;
    if (io->bf16)
        pack_kv16(f, s, kl, (const mha_bf16 *)io->k + b * io->ks[0] + g * io->ks[1], io->ks[2],
                  (const mha_bf16 *)io->v + b * io->vs[0] + g * io->vs[1], io->vs[2]);
    else
        pack_kv(f, s, kl, core_k(f, io, b, g), core_v(f, io, b, g));
}

void mha_attention_pack_kv_few_f32(const mha_fwd *f, const mha_scratch *s, const mha_core_io *io, int b, int g, int kl,
                                   mha_kv_view *kv)
{
    const mha_kernel *k = f->kernel;
    const int dv = f->dv;
    const mha_mat km = core_k(f, io, b, g), vm = core_v(f, io, b, g); /* float32 tensors: float32 engines' */
    /* K read in place by rows_scores, or transposed into the decode tiles' panels */
    const int rows = few_rows(f, k->isa->rows_scores != NULL);
    if (kl > 0 && !rows)
        k->isa->pack_rows(km, k->bw, 0, kl, 0, f->dk, MHA_TILE_KEYS, s->kt);
    float *vc = s->qkv;
    for (int j = 0; vm.ld != dv && j < kl; j++)
        memcpy(vc + (size_t)j * dv, vm.p + j * vm.ld, (size_t)dv * sizeof *vc);
    *kv = (mha_kv_view){.ktp = rows ? NULL : s->kt, .vp = vm.ld == dv ? vm.p : vc, .kr = rows ? km.p : NULL,
                        .krl = km.ld, .kl = kl};
}

/* Whether a bf16 engine's few queries read K's and V's rows (few_rows; the decode tiles'
 * way: the table has rows_scores16 and value tiles, and they sum in the kernel's order: even
 * first, or odd first with d_k even) instead of the chunk's panels. */
static int few_rows16(const mha_fwd *f)
{
    const mha_isa *isa = f->kernel->isa;
    const mha_bk_order order = f->bk->order;
    return few_rows(f, isa->rows_scores16 && isa->decode_values16 && (isa->decode16_orders >> order & 1u) &&
                           (order == MHA_BK_EVEN_FIRST || (order == MHA_BK_ODD_FIRST && f->dk % 2 == 0)));
}

void mha_attention_pack_kv_few_bf16(const mha_fwd *f, const mha_scratch *s, const mha_core_io *io, int b, int g,
                                    int kl, mha_kv_view *kv)
{
    if (!few_rows16(f)) { /* the chunk's panels, as the caller's view says */
        core_kv_by(f, s, io, b, g, kl, mha_attention_pack_kv_bf16, mha_attention_pack_kv16_bf16);
        return;
    }
    /* K's rows as floats of their bf16 values (widened, or rounded) into s->kt; V's bf16 rows
     * dv apart, in place where the tensor holds them so, else copied (or rounded) into s->v16 */
    const int dk = f->dk, dv = f->dv;
    const mha_kv_traits *t16 = mha_kv_traits_of(MHA_KV_BF16);
    float *kr = s->kt;
    mha_bf16 *vc = s->v16;
    const mha_bf16 *vr = vc;
    if (io->bf16) {
        const mha_bf16 *k16 = (const mha_bf16 *)io->k + b * io->ks[0] + g * io->ks[1];
        const mha_bf16 *v16 = (const mha_bf16 *)io->v + b * io->vs[0] + g * io->vs[1];
        for (int j = 0; j < kl; j++)
            t16->floats(k16 + j * io->ks[2], 0, dk, kr + (size_t)j * dk);
        if (io->vs[2] == dv)
            vr = v16;
        else
            for (int j = 0; j < kl; j++)
                memcpy(vc + (size_t)j * dv, v16 + j * io->vs[2], (size_t)dv * sizeof *vc);
    } else {
        const mha_mat km = core_k(f, io, b, g), vm = core_v(f, io, b, g);
        for (int j = 0; j < kl; j++) {
            memcpy(kr + (size_t)j * dk, km.p + j * km.ld, (size_t)dk * sizeof *kr);
            t16->put(vm.p + j * vm.ld, dv, vc, (size_t)j * dv, 1);
        }
        f->kernel->isa->round_bf16_floats(kr, kl * dk);
    }
    *kv = (mha_kv_view){.kr = kr, .krl = dk, .vr16 = vr};
}

/* The few queries on K's and V's rows (few_rows16): rows_scores16 and decode_values16, the
 * kernel's chunk sums as bf16 decode reads a cache (the rows' queries bf16 values: rounded
 * by core_few_rows). */
static void chunk_rows16(const mha_fwd *f, const mha_chunk_rows *r, const mha_kv_view *kv, int b0, int c0, int n,
                         float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum, ptrdiff_t st)
{
    const mha_isa *isa = f->kernel->isa;
    const int m = r->m, dv = f->dv;
    const mha_rows_ahead va = {(const char *)(kv->vr16 + (size_t)b0 * dv), (size_t)dv * sizeof(mha_bf16),
                               (size_t)dv * sizeof(mha_bf16)};
    isa->rows_scores16(r->q.p, m, f->dk, kv->kr + (ptrdiff_t)b0 * kv->krl, kv->krl, n, f->scale, sc, (size_t)ld,
                       f->bk->order, &va);
    for (int i = 0; i < m; i++) {
        sum[i * st] = block_row(f, r, r->first + i, c0, n, sc + i * ld, NULL, &mx[i * st], NULL, 1, NULL);
        memset(mha_mat_at(f->kernel, zc, i, 0), 0, (size_t)dv * sizeof(float));
    }
    const void *v[1] = {kv->vr16 + (size_t)b0 * dv};
    isa->decode_values16(sc, (size_t)ld, m, 1, v, &n, MHA_KV_BF16, dv, zc.p, (size_t)zc.ld, NULL, f->bk->order);
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
                                  * scores are float32 products */
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
 * float32 and float32-stream chunks' row pass. float32 rows that all see the whole chunk
 * through no mask (a forward's but for causal blocks' diagonal chunks): the table's
 * softmax_rows, the same bits as row by row. */
static void chunk_rows(const mha_fwd *f, const mha_chunk_rows *r, int c0, int n, float *sc, ptrdiff_t ld, float *mx,
                       float *sum, ptrdiff_t st, int rounded)
{
    const mha_isa *isa = f->kernel->isa;
    if (rounded ? isa->softmax_rows_rounded != NULL : !f->bk) /* the per-row functions' rows together */
        if (whole_rows_logits(f, r, r->first, r->m, c0, n, sc, ld)) {
            (rounded ? isa->softmax_rows_rounded : isa->softmax_rows)(sc, ld, r->m, n, mx, sum, st);
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
        k->isa->rows_scores(r->q.p, m, dk, kv->kr + (ptrdiff_t)b0 * kv->krl, kv->krl, n, f->scale, sc, (size_t)ld,
                            kv->vp ? &va : NULL);
    } else if (kv->ktp) { /* the decode tiles on plain queries (r->q rows dk apart): a panel a run */
        const void *kt[MHA_KV_CHUNK / MHA_TILE_KEYS];
        int len[MHA_KV_CHUNK / MHA_TILE_KEYS], runs = 0;
        for (int j = 0; j < n; j += MHA_TILE_KEYS, runs++) /* b0 starts a panel */
            kt[runs] = kv->ktp + (size_t)(b0 + j) * dk, len[runs] = n - j < MHA_TILE_KEYS ? n - j : MHA_TILE_KEYS;
        k->isa->decode_scores[MHA_KV_F32](r->q.p, m, dk, 0, dk, runs, kt, NULL, NULL, len, MHA_TILE_KEYS, f->scale,
                                          sc, (size_t)ld);
    } else
        mha_gemm_in_place(k, m, n, dk, f->scale, r->q, mha_mat_sub(k, kv->kt, 0, b0), 0.0f, sm, s->apack);
    chunk_rows(f, r, c0, n, sc, ld, mx, sum, st, 0);
    /* Z (m, dv) = E (m, n) · V (n, dv) */
    if (kv->vp) { /* key by key in order from zero: the microkernel's sums over the chunk; K's rows
                   * of the next chunk brought into L2 meanwhile (Zen 4: the core's decode 0.77×) */
        mha_prefetch next = {.bytes = (size_t)dk * sizeof(float)};
        for (int t = b0 + n; kv->kr && t < kv->kl && next.n < MHA_KV_CHUNK; t++)
            next.at[next.n++] = kv->kr + (ptrdiff_t)t * kv->krl;
        mha_prefetch_walk walk = {.pf = &next, .per = MHA_VALUES_PREFETCH};
        for (int i = 0; i < m; i++)
            memset(zc.p + i * zc.ld, 0, (size_t)dv * sizeof *zc.p);
        k->isa->decode_values[MHA_KV_F32](sc, (size_t)ld, m, kv->vp + (size_t)b0 * dv, NULL, n, dv, zc.p, (size_t)zc.ld,
                                          NULL, next.n ? &walk : NULL);
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
 * on the queries unrounded, each row's E times its keys' V scales rounded in place, A·V by
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
        mha_gemm_in_place(k, m, n, f->dk, f->scale, mha_mat_sub(k, r->q, i0, 0), mha_mat_sub(k, kv->kt, 0, b0), 0.0f,
                          mha_mat_rows(k, sb, ld), s->apack);
        for (int i = 0; i < m; i++)
            sum[(i0 + i) * st] = block_row(f, r, r->first + i0 + i, c0, n, sb + i * ld, vs, &mx[(i0 + i) * st], NULL, 1,
                                           &zs[i]);
        k->isa->stream_rows16(k, m, f->dv, n, 1.0f, 0, mha_mat_rows(k, sb, ld), mha_mat_sub(k, kv->v, b0, 0), zb);
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
    k->isa->stream_rows16(k, m, n, dk, f->scale, dk % MHA_BT_K != 0, mha_mat_rows(k, q, dk),
                          mha_mat_sub(k, kv->kt, 0, b0), mha_mat_rows(k, sc, ld));
    chunk_rows(f, r, c0, n, sc, ld, mx, sum, st, 1);
    k->isa->stream_rows16(k, m, f->dv, n, 1.0f, 0, mha_mat_rows(k, sc, ld), mha_mat_sub(k, kv->v, b0, 0), zc);
    if (n % MHA_BT_K)
        values_padding(f, kv, b0, n, m, zc);
}

void mha_attention_chunk(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                         int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                         ptrdiff_t st)
{
    f->prod->chunk(f, s, r, kv, b0, c0, n, sc, ld, zc, mx, sum, st);
}

void mha_softmax_merge(const mha_isa *isa, float *restrict z, float *m, float *s, const float *restrict zc, float mc,
                       float sc, int dk)
{
    if (mc == -INFINITY)
        return;
    const float mn = mc > *m ? mc : *m, b = expf(mc - mn);
    if (*m == -INFINITY) {
        isa->scale_row(z, zc, b, dk);
        *s = sc * b;
    } else {
        const float a = expf(*m - mn);
        isa->merge_row(z, a, zc, b, dk);
        *s = *s * a + sc * b;
    }
    *m = mn;
}

float mha_softmax_sink(const mha_isa *isa, float *z, float *m, float *s, float sink, int dk)
{
    const float mn = sink > *m ? sink : *m, a = *m == -INFINITY ? 0.0f : expf(*m - mn);
    isa->scale_row(z, z, a, dk);
    *s = *s * a + expf(sink - mn);
    *m = mn;
    return a;
}

/* The keys [*begin, end) of a block of queries at positions p0 .. p1 (kl keys): from the chunk
 * (or with align, the multiple of align) holding p0's first visible key to p1's last one.
 * Returns end. */
static int block_keys(const mha_fwd *f, int p0, int p1, int kl, int align, int *begin)
{
    const int end = mha_visible_keys(p1, f->call->causal, f->window, kl).hi;
    const int b = mha_visible_keys(p0, f->call->causal, f->window, kl).lo / align * align;
    *begin = b > end ? end : b;
    return end;
}

/* One block of r->m rows (r->first 0) over the keys [kv_begin, kv_end), in chunks of step from
 * kv_begin (their scores in sc, ld apart): Z (z, rows zd apart) zeroed, the first chunk straight
 * into it (mha_softmax_merge would take it as it is), each later one into the state's cz, then
 * merged in key order; after every key, each row's head's sink, and each row / its sum (a row
 * with no visible key stays 0). st: the rows' sum and max, the chunk's, the chunk's Z (4·m +
 * m·dv floats); sum (st[i]) becomes what the attention weights are scaled by. The forward's
 * query blocks and the core's few queries alike: one source of these bits. */
static void attend_block(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                         int kv_begin, int kv_end, int step, float *sc, ptrdiff_t ld, float *z, ptrdiff_t zd,
                         const float *sinks, float *st)
{
    const mha_kernel *k = f->kernel;
    const int m = r->m, dv = f->dv;
    float *sum = st, *mx = sum + m, *csum = mx + m, *cmx = csum + m, *cz = cmx + m;
    for (int i = 0; i < m; i++) { /* no key yet: a zero row */
        memset(z + (size_t)i * zd, 0, (size_t)dv * sizeof *z);
        sum[i] = 0.0f, mx[i] = -INFINITY;
    }
    const mha_bf16 *q16 = kv_end > kv_begin ? f->prod->block_queries(f, s, r, kv) : NULL;
    for (int c0 = kv_begin; c0 < kv_end; c0 += step) {
        const int n = kv_end - c0 < step ? kv_end - c0 : step, first = c0 == kv_begin;
        mha_chunk_rows cr = *r;
        cr.q16 = q16;
        if (cr.mask)
            cr.mask += c0;
        mha_attention_chunk(f, s, &cr, kv, c0, c0, n, sc, ld, mha_mat_rows(k, first ? z : cz, first ? zd : dv),
                            first ? mx : cmx, first ? sum : csum, 1);
        for (int i = 0; !first && i < m; i++)
            mha_softmax_merge(k->isa, z + (size_t)i * zd, &mx[i], &sum[i], cz + (size_t)i * dv, cmx[i], csum[i], dv);
    }
    for (int i = 0; i < m; i++) {
        float *zr = z + (size_t)i * zd;
        const float a =
            sinks ? mha_softmax_sink(k->isa, zr, &mx[i], &sum[i], sinks[r->head0 + i / r->period], dv) : 1.0f;
        const float inv = sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f;
        k->isa->scale_row(zr, zr, inv, dv);
        sum[i] = inv * a;
    }
}

void mha_attention_rows(const mha_fwd *f, int h, const mha_scratch *s, mha_queries q, int ql, int kl, int off, float *z,
                        ptrdiff_t ldz, const float *sinks, float *attn, const float *vs)
{
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, dkp = f->dkp, qb = f->q_block;
    const ptrdiff_t lds = f->ld_scores;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const mha_kv_view kv = {.kt = mha_mat_panels(k, s->kt, dk), .v = mha_mat_sub(k, qkv, 0, 2 * dkp),
                            .kt16 = s->kt16, .v16 = s->v16, .kps = mha_attention_kt16_ps(f),
                            .vps = mha_attention_v16_ps(kl), .vs = vs, .kl = kl};
    const float *sum = s->state; /* attend_block's state: its rows' factors first */

    /* query blocks (with the attention weights wanted: one chunk of whole rows, from the panel
     * holding the block's first key) */
    for (int r0 = 0; r0 < ql; r0 += qb) {
        const int r1 = r0 + qb < ql ? r0 + qb : ql, m = r1 - r0;
        int kv_begin;
        const int kv_end = block_keys(f, r0 + off, r1 - 1 + off, kl, attn ? k->bw : MHA_KV_CHUNK, &kv_begin);
        const int step = attn ? kv_end - kv_begin : MHA_KV_CHUNK;
        const ptrdiff_t ld = attn || lds < MHA_KV_CHUNK ? lds : MHA_KV_CHUNK;
        const mha_chunk_rows rows = {.m = m, .pos0 = r0 + off, .period = m, .causal = f->call->causal, .head0 = h,
                                     .q = q.q16 ? q.q : mha_mat_sub(k, q.q, r0, 0),
                                     .q16_rows = q.q16 ? q.q16 + r0 * q.ld16 : NULL, .q16_ld = q.ld16,
                                     .mask = f->call->mask ? f->call->mask + (size_t)r0 * f->call->seq_kv : NULL};
        attend_block(f, s, &rows, &kv, kv_begin, kv_end, step, s->scores, ld, z + (size_t)r0 * ldz, ldz, sinks, s->state);
        if (attn)
            for (int i = r0; i < r1; i++) {
                float *row = attn + (size_t)i * f->call->seq_kv;
                const float *e = s->scores + (i - r0) * lds;
                memset(row, 0, (size_t)kv_begin * sizeof *row);
                for (int j = kv_begin; j < kv_end; j++)
                    row[j] = e[j - kv_begin] * sum[i - r0];
                memset(row + kv_end, 0, (size_t)(f->call->seq_kv - kv_end) * sizeof *row);
            }
    }
    if (attn && ql < f->call->seq_q)
        memset(attn + (size_t)ql * f->call->seq_kv, 0, (size_t)(f->call->seq_q - ql) * f->call->seq_kv * sizeof *attn);
}

/* Query head h of sequence b of a forward: key j at position j, query i at i + seq_kv - seq_q. */
static void attend(const mha_fwd *f, int b, int h, const mha_scratch *s, int ql, int kl)
{
    float *attn = f->call->attn ? f->call->attn + ((size_t)b * f->h + h) * f->call->seq_q * f->call->seq_kv : NULL;
    const mha_queries q = {.q = mha_mat_panels(f->kernel, s->qkv, f->rows)};
    mha_attention_rows(f, h, s, q, ql, kl, f->call->seq_kv - f->call->seq_q, f->z + (size_t)b * f->call->seq_q * f->qd + (size_t)h * f->dk,
                       f->qd, f->sinks, attn, NULL);
}

/* The core's tensors: the address of element offset off of p, in io's dtype. */
static const char *core_at(const mha_core_io *io, const void *p, ptrdiff_t off)
{
    return (const char *)p + off * (io->bf16 ? (ptrdiff_t)sizeof(mha_bf16) : (ptrdiff_t)sizeof(float));
}

/* n elements of a core tensor at element offset off as floats (bf16 widened: exact). */
static void core_get(const mha_core_io *io, const void *p, ptrdiff_t off, int n, float *dst)
{
    if (!io->bf16) {
        memcpy(dst, core_at(io, p, off), (size_t)n * sizeof *dst);
        return;
    }
    const mha_bf16 *restrict src = (const mha_bf16 *)p + off;
    uint32_t *restrict bits = (uint32_t *)(void *)dst; /* a float's bits: bf16 is its high half */
    for (int c = 0; c < n; c++)
        bits[c] = (uint32_t)src[c] << 16;
}

/* n floats into out at element offset off (bf16: rounded by the table, as mha_bf16_round; z
 * NULL: zeros). */
static void core_put(const mha_fwd *f, const mha_core_io *io, ptrdiff_t off, const float *z, int n)
{
    char *dst = (char *)core_at(io, io->out, off);
    if (!z) {
        memset(dst, 0, (size_t)n * (io->bf16 ? sizeof(mha_bf16) : sizeof(float)));
        return;
    }
    if (!io->bf16) {
        memcpy(dst, z, (size_t)n * sizeof *z);
        return;
    }
    f->kernel->isa->round_to_bf16(z, n, (mha_bf16 *)(void *)dst);
}


/* Whether the core's KV head of ql queries runs as core_few_rows: 1 to MHA_DECODE_MAX_NEW queries
 * (more amortise the per-head passes) whose softmax state and Z fit the A-packing region
 * (which no product of theirs uses: float32 reads Q in place, bf16 packs it into s->q16, sized
 * for group·MHA_DECODE_MAX_NEW rows); float32: one pass over the features (dk <= KC: the tiles'
 * sums are the microkernel's). */
static int core_few(const mha_fwd *f, int ql)
{
    const size_t m = (size_t)f->group * ql;
    return f->prod->few_fits(f) && ql >= 1 && ql <= MHA_DECODE_MAX_NEW && ql <= f->q_block &&
           m * (4 + 2 * (size_t)f->dk) <= mha_gemm_apack_floats(f->kernel);
}

/* A few queries of every head of KV head g as the rows of one pass over the keys (row r: query
 * head g·group + r / ql, query r % ql), as decode reads a cache: float32, K's rows read in
 * place by the table's rows_scores (or Kᵀ transposed once into the decode tiles' panels) and
 * V read in place (rows dv apart) or copied so, the tiles' scores and values (the
 * microkernel's sums); bf16, likewise on K's and V's rows through bf16 decode's tiles
 * (few_rows16), else K and V packed into the kernel's panels as for more queries; then
 * mha_attention_rows' chunks, logits, merge, sink and division: the same bits as it, with
 * one pass for the group's 1–4 rows per head. */
static void core_few_rows(const mha_fwd *f, const mha_core_io *io, int b, int g, const mha_scratch *s, int ql, int kl)
{
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, dv = f->dv, m = f->group * ql, off = f->call->seq_kv - f->call->seq_q, h0 = g * f->group;
    float *sc = s->dec, *q = sc + (size_t)m * MHA_KV_CHUNK; /* dec: (group·MHA_DECODE_MAX_NEW) × (chunk + dk) */
    float *z = s->apack + (size_t)m * (4 + dv); /* past attend_block's state in the apack region */
    mha_kv_view kv = {.kt16 = s->kt16, .v16 = s->v16, .kps = mha_attention_kt16_ps(f), .vps = mha_attention_v16_ps(kl)};
    f->prod->pack_kv_few(f, s, io, b, g, kl, &kv);
    for (int r = 0; r < m; r++)
        core_get(io, io->q, b * io->qs[0] + (h0 + r / ql) * io->qs[1] + (r % ql) * io->qs[2], dk, q + (size_t)r * dk);
    if (kv.kr && f->bk) /* bf16 on K's rows: the queries' bf16 values, as the kernel's A panels hold them */
        k->isa->round_bf16_floats(q, m * dk);
    /* mha_attention_rows' one query block of these ql queries */
    int kv_begin;
    const int kv_end = block_keys(f, off, ql - 1 + off, kl, MHA_KV_CHUNK, &kv_begin);
    const mha_chunk_rows rows = {.m = m, .pos0 = off, .period = ql, .causal = f->call->causal, .head0 = h0,
                                 .q = mha_mat_rows(k, q, dk), .mask = f->call->mask};
    attend_block(f, s, &rows, &kv, kv_begin, kv_end, MHA_KV_CHUNK, sc, MHA_KV_CHUNK, z, dv, io->sinks, s->apack);
    for (int r = 0; r < m; r++)
        core_put(f, io, b * io->os[0] + (h0 + r / ql) * io->os[1] + (r % ql) * io->os[2], z + (size_t)r * dv, dv);
}

int mha_attention_head_block(int group)
{
    int hb = group;
    while (hb > 16 && hb % 2 == 0)
        hb /= 2;
    return hb;
}

void mha_attention_core(const mha_fwd *f, const mha_core_io *io, int b, int g, int h0, int h1, const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    const int dv = f->dv;
    if (core_few(f, ql)) {
        if (h0 != g * f->group)
            return;
        h1 = (g + 1) * f->group;
        core_few_rows(f, io, b, g, s, ql, kl);
    } else {
        /* Kᵀ packed from K in place (bf16 engines: V too, into bf16 B panels; on the float32
         * stream, V into the Q/K/V scratch's V columns, rounded), once for the block's query
         * heads; float32 V copied into the columns the forward projects it to (the microkernel
         * reads B in panels); float32 Q read and out written in place; bf16 Q copied into the A
         * panels (or rounded into float rows by each chunk), bf16 out rounded from float rows in
         * the scratch (the Q/K/V region's Q columns, which bf16 engines' core does not use
         * otherwise) */
        core_kv_by(f, s, io, b, g, kl, f->prod->pack_kv, f->prod->pack_kv16);
        float *zf = s->qkv;
        for (int h = h0; h < h1; h++) {
            const ptrdiff_t qo = b * io->qs[0] + h * io->qs[1], oo = b * io->os[0] + h * io->os[1];
            const mha_queries q = io->bf16 ? (mha_queries){.q16 = (const mha_bf16 *)io->q + qo, .ld16 = io->qs[2]}
                                           : (mha_queries){.q = mha_mat_rows(k, (const float *)io->q + qo, io->qs[2])};
            mha_attention_rows(f, h, s, q, ql, kl, f->call->seq_kv - f->call->seq_q, io->bf16 ? zf : (float *)io->out + oo,
                               io->bf16 ? dv : io->os[2], io->sinks, NULL, NULL);
            for (int i = 0; io->bf16 && i < ql; i++)
                core_put(f, io, oo + i * io->os[2], zf + (size_t)i * dv, dv);
        }
    }
    for (int h = h0; h < h1; h++)
        for (int i = ql; i < f->call->seq_q; i++) /* rows past the query length */
            core_put(f, io, b * io->os[0] + h * io->os[1] + i * io->os[2], NULL, dv);
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
    const float *xp = f->xpack + (size_t)b * f->xpack_stride;
    const int one_gemm = f->call->fused && f->group == 1 && !f->k_saved; /* Q|K|V of the only head in one GEMM */
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const ptrdiff_t kd = (ptrdiff_t)f->kvh * dk;

    /* step 1: K and V of this KV head for the valid keys, into columns [dkp, 3·dkp) (QK-norm
     * full: K as mha_attention_norm_sums projected it) */
    if (f->k_saved) {
        mha_attention_project(f, s, kl, f->call->fused ? xq : f->call->kv_shared ? xk : xv, f->call->fused ? xp : NULL, g, 2 * dkp,
                              2 * dkp, dkp);
        mha_mat_set_rows(k, qkv, kl, dkp, dk, f->k_saved + (size_t)b * f->call->seq_kv * kd + (size_t)g * dk, kd);
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
    const double *kss = f->k_ss ? f->k_ss + (size_t)b * f->call->seq_kv * f->kvh : NULL;
    const double *qss = f->q_ss ? f->q_ss + (size_t)b * f->call->seq_q * f->kvh : NULL;
    norm_rotate(f, s, kl, dkp, 0, 1, g, kss); /* key j at position j */
    /* step 2: Kᵀ in panels (bf16: Kᵀ and V in bf16 B panels), once for every query head of the
     * group and every query block */
    if (kl > 0)
        f->prod->pack_kv(f, s, kl, mha_mat_sub(k, qkv, 0, dkp), mha_mat_sub(k, qkv, 0, 2 * dkp));
    /* step 3: each query head of the group: its Q (rotated; QK-norm full: from its columns of
     * z, read before its output goes there), then its attention */
    for (int j = 0; j < f->group; j++) {
        if (f->k_saved)
            mha_mat_set_rows(k, qkv, ql, 0, dk, f->z + (size_t)b * f->call->seq_q * f->qd + (size_t)(g * f->group + j) * dk,
                             f->qd);
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
    mha_attention_sum_squares(f, qkv, kl, dkp, f->k_ss + k0 * f->kvh + g, 0);
    mha_mat_get_rows(k, qkv, kl, dkp, dk, f->k_saved + k0 * kd + (size_t)g * dk, kd);
    for (int j = 0; j < f->group; j++) {
        mha_attention_project(f, s, ql, xq, xqp, g, j == 0 ? 0 : (j + 2) * dkp, 0, dkp);
        mha_attention_sum_squares(f, qkv, ql, 0, f->q_ss + q0 * f->kvh + g, j > 0);
        mha_mat_get_rows(k, qkv, ql, 0, dk, f->z + q0 * f->qd + (size_t)(g * f->group + j) * dk, f->qd);
    }
}

void mha_attention_norm_sums(const mha_fwd *f, int b, int g, const mha_scratch *s)
{
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    const float *xq = f->call->q + (size_t)b * f->call->seq_q * f->d;
    const float *xp = f->xpack + (size_t)b * f->xpack_stride;
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
    const float *z = f->z + ((size_t)b * f->call->seq_q + r0) * zd;

    if (valid_end > r0) { /* out (m, d) = Z (m, qd) · Wo (qd, d) (+ bo) */
        const int m = valid_end - r0;
        mha_mat om = mha_mat_rows(k, out, d);
        if (f->has_bias)
            mha_mat_fill_rows(k, om, m, f->d, f->bo);
        const float beta = f->has_bias ? 1.0f : 0.0f;
        f->prod->gemm(f, s, m, f->d, f->qd, NULL, mha_mat_rows(k, z, zd), f->wo, 0, beta, om);
    }
    const int zero_from = valid_end > r0 ? valid_end : r0;
    if (zero_from < r1)
        memset(f->call->out + ((size_t)b * f->call->seq_q + zero_from) * d, 0, (size_t)(r1 - zero_from) * d * sizeof(float));
}
