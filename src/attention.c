/* attention.c — what every attention path shares: a chunk row's math, the merge rule, and the
 * query-block loop.
 *
 * Keys go in the fixed chunks of MHA_KV_CHUNK counted from position 0 (mha_attention_chunk,
 * chunk.c): each chunk's scores exp'd against the chunk's own max, its E · V summed on its own,
 * then merged into Z in key order by mha_softmax_merge, so the working set stays in L2 however
 * long the row, and a row's bits depend on its position and keys alone: decode runs the same
 * chunks and the same merge. (With the attention weights wanted, one chunk of whole rows.)
 * Here, each the one source of its bits for the forward, the core and a step alike: a chunk
 * row's logits and masked exp (softcap, ALiBi, the window; an int8 cache's V zero points),
 * QK-norm's rows and sums of squares, ALiBi's slopes, the merge rule and the sink, and the
 * query blocks (mha_attention_block, mha_attention_rows). The forward's tasks are in
 * forward.c, the core's in core.c, the chunk step of each precision in chunk.c. */
#include "attention.h"

#include "isa/isa.h"

#include <string.h>

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
    const mha_attention_ops *o = f->attn;
    mha_attention_logits(f, row, in, pos, c0, head);
    *mx = -INFINITY;
    if (!vs) /* exp'd, and rounded where asked, in one pass where the table can */
        return p ? o->exp_row16(f, row, n, in.hi, mask, mx, p)
               : rounded ? o->exp_row_rounded(f, row, n, in.hi, mask, mx) : o->exp_row(row, n, in.hi, mask, mx);
    const float sum = o->exp_row(row, n, in.hi, mask, mx);
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
        f->kernel->isa->round_bf16_floats(row, n);
    return sum;
}

/* The exp forms a table lacks (mha_attention_exp_ops): its parts in turn, or its rows one by
 * one, the same bits as its one-pass functions would give. */
static float exp_row16_parts(const mha_fwd *f, float *restrict s, int n, int visible, const uint8_t *restrict mask,
                             float *max_io, mha_bf16 *p)
{
    const float sum = f->attn->exp_row(s, n, visible, mask, max_io);
    mha_bk_pack_a_row(f->kernel, s, 0, n, p);
    return sum;
}

static float exp_row_rounded_parts(const mha_fwd *f, float *restrict s, int n, int visible,
                                   const uint8_t *restrict mask, float *max_io)
{
    const float sum = f->attn->exp_row(s, n, visible, mask, max_io);
    f->kernel->isa->round_bf16_floats(s, n);
    return sum;
}

static void exp_rows_each(const mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st)
{
    for (int i = 0; i < m; i++) {
        mx[i * st] = -INFINITY;
        sum[i * st] = f->attn->exp_row(s + i * ld, n, n, NULL, &mx[i * st]);
    }
}

static void exp_rows_rounded_each(const mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                                  ptrdiff_t st)
{
    for (int i = 0; i < m; i++) {
        mx[i * st] = -INFINITY;
        sum[i * st] = f->attn->exp_row_rounded(f, s + i * ld, n, n, NULL, &mx[i * st]);
    }
}

static void exp_rows16_each(const mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                            ptrdiff_t st, mha_bf16 *d)
{
    const int kt = (int)(mha_bk_kp(n) / MHA_BT_K);
    for (int i = 0; i < m; i++) {
        mx[i * st] = -INFINITY;
        sum[i * st] = f->attn->exp_row16(f, s + i * ld, n, n, NULL, &mx[i * st], d + mha_bk_a_row(i, kt));
    }
}

/* The table's own one-pass forms, through the engine's signatures. */
static float exp_row16_table(const mha_fwd *f, float *restrict s, int n, int visible, const uint8_t *restrict mask,
                             float *max_io, mha_bf16 *p)
{
    return f->kernel->isa->softmax_row16(s, n, visible, mask, max_io, p);
}

static float exp_row_rounded_table(const mha_fwd *f, float *restrict s, int n, int visible,
                                   const uint8_t *restrict mask, float *max_io)
{
    return f->kernel->isa->softmax_row_rounded(s, n, visible, mask, max_io);
}

static void exp_rows_table(const mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st)
{
    f->kernel->isa->softmax_rows(s, ld, m, n, mx, sum, st);
}

static void exp_rows_rounded_table(const mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                                   ptrdiff_t st)
{
    f->kernel->isa->softmax_rows_rounded(s, ld, m, n, mx, sum, st);
}

static void exp_rows16_table(const mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                             ptrdiff_t st, mha_bf16 *d)
{
    f->kernel->isa->softmax_rows16(s, ld, m, n, mx, sum, st, d);
}

void mha_attention_exp_ops(mha_attention_ops *ops, const mha_isa *isa, int bf16)
{
    /* softmax_rows has the float32 exp: a bf16 engine's rows go one by one */
    ops->exp_row = bf16 ? isa->softmax_row_bf16 : isa->softmax_row;
    ops->exp_rows = bf16 ? exp_rows_each : exp_rows_table;
    ops->exp_row16 = isa->softmax_row16 ? exp_row16_table : exp_row16_parts;
    ops->exp_rows16 = isa->softmax_rows16 ? exp_rows16_table : exp_rows16_each;
    ops->exp_row_rounded = isa->softmax_row_rounded ? exp_row_rounded_table : exp_row_rounded_parts;
    ops->exp_rows_rounded = isa->softmax_rows_rounded ? exp_rows_rounded_table : exp_rows_rounded_each;
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

float mha_softmax_end(const mha_isa *isa, float *z, float *m, float *s, const float *sink, int dk)
{
    const float a = sink ? mha_softmax_sink(isa, z, m, s, *sink, dk) : 1.0f;
    const float inv = *s > 0.0f ? 1.0f / *s : 0.0f;
    isa->scale_row(z, z, inv, dk);
    return inv * a;
}

void mha_attention_block(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
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
    const mha_bf16 *q16 = kv_end > kv_begin ? f->attn->block_queries(f, s, r, kv) : NULL;
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
    for (int i = 0; i < m; i++)
        sum[i] = mha_softmax_end(k->isa, z + (size_t)i * zd, &mx[i], &sum[i],
                                 sinks ? &sinks[r->head0 + i / r->period] : NULL, dv);
}

void mha_attention_rows(const mha_fwd *f, int h, const mha_scratch *s, mha_queries q, int ql, int kl, int off, float *z,
                        ptrdiff_t ldz, const float *sinks, float *attn, const float *vs, const mha_int8_keys *i8)
{
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, dkp = f->dkp, qb = f->q_block;
    const ptrdiff_t lds = f->ld_scores;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const mha_kv_view kv = {.kt = mha_mat_panels(k, s->kt, dk), .v = mha_mat_sub(k, qkv, 0, 2 * dkp),
                            .kt16 = s->kt16, .v16 = s->v16, .kps = mha_attention_kt16_ps(f),
                            .vps = mha_attention_v16_ps(kl), .vs = vs, .kl = kl, .i8 = i8};
    const float *sum = s->state; /* mha_attention_block's state: its rows' factors first */

    /* query blocks (with the attention weights wanted: one chunk of whole rows, from the panel
     * holding the block's first key) */
    for (int r0 = 0; r0 < ql; r0 += qb) {
        const int r1 = r0 + qb < ql ? r0 + qb : ql, m = r1 - r0;
        int kv_begin;
        const int kv_end =
            mha_attention_block_keys(f, r0 + off, r1 - 1 + off, kl, attn ? k->bw : MHA_KV_CHUNK, &kv_begin);
        const int step = attn ? kv_end - kv_begin : MHA_KV_CHUNK;
        const ptrdiff_t ld = attn || lds < MHA_KV_CHUNK ? lds : MHA_KV_CHUNK;
        const mha_chunk_rows rows = {.m = m, .pos0 = r0 + off, .period = m, .causal = f->call->causal, .head0 = h,
                                     .q = q.q16 ? q.q : mha_mat_sub(k, q.q, r0, 0),
                                     .q16_rows = q.q16 ? q.q16 + r0 * q.ld16 : NULL, .q16_ld = q.ld16,
                                     .mask = f->call->mask ? f->call->mask + (size_t)r0 * f->call->seq_kv : NULL};
        mha_attention_block(f, s, &rows, &kv, kv_begin, kv_end, step, s->scores, ld, z + (size_t)r0 * ldz, ldz, sinks,
                            s->state);
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
