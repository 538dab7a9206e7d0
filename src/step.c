/* step.c — one decoding step on the paged KV cache (step.h).
 *
 * Three phases, each a set of tasks (scheduler.c), after the new tokens are packed once into
 * the GEMM's A panels: (1) per KV head and block of rows, the new
 * tokens' K|V (one GEMM over every sequence's rows, so the weights are read once per step,
 * not once per sequence) rotated at their positions and stored in the cache, and the group's
 * Q rotated into z; (2) per sequence and KV head, either (prefill: more than
 * MHA_DECODE_ROWS new tokens) the context's K and V gathered from the cache into the worker's
 * panel scratch, Kᵀ packed once, and the forward's attention (mha_attention_rows) for each
 * query head of the group, with query i at position n_past + i; or (decode) per chunk of
 * MHA_DECODE_CHUNK keys, dot products and value updates read straight from the cache blocks,
 * each key and value row once for all queries of the group, then the chunks merged in order
 * with their maxima and sums (flash-decoding: long contexts spread over the workers, the
 * result independent of how many there are); (3) the output projection over all rows. */
#include "step.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "config.h"
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

/* The position of row r, which belongs to sequence q. */
static int pos_of(const mha_step_job *j, int r, int q)
{
    return j->step->n_past[q] + (r - j->row0[q]);
}

/* The first key a step's rows of sequence q may see: the window's start for its first new
 * token (its later tokens' windows start later), 0 without a window. */
static int first_key(const mha_step_job *j, int q)
{
    const int lo = j->step->n_past[q] - j->f.window + 1;
    return j->f.window > 0 && lo > 0 ? lo : 0;
}

void mha_step_pack_rows(const mha_step_job *j, int r0, int r1)
{
    const mha_kernel *k = j->f.kernel;
    mha_gemm_pack_a(k, mha_mat_rows(k, j->step->x, j->f.d), r0, r1 - r0, 0, j->f.d, j->f.xpack + (size_t)r0 * j->f.d, 1);
}

void mha_step_project(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const mha_step *st = j->step;
    const int d = f->d, dk = f->dk, dkp = f->dkp, m = r1 - r0;
    const float *x = st->x + (size_t)r0 * d;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const int first = seq_of(j, r0, 0);

    /* K and V of the new rows: one GEMM into scratch columns [dkp, 3·dkp), then row by row
     * RoPE at the row's position and a copy into its cache slot */
    const float *xp = f->xpack + (size_t)r0 * d; /* these rows in A panels (mha_step_pack_rows) */
    mha_attention_project(f, s, m, x, xp, g, dkp, dkp, 2 * dkp);
    for (int i = 0, q = first; i < m; i++) {
        q = seq_of(j, r0 + i, q);
        const int pos = pos_of(j, r0 + i, q);
        if (f->rope != MHA_ROPE_NONE)
            mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, dkp, pos, f->rope, f->rope_dim, f->rope_cos, f->rope_sin);
        const int block = st->blocks[(size_t)q * st->max_blocks + pos / j->cache->block_size];
        const int slot = pos % j->cache->block_size, bs = j->cache->block_size;
        float *kt = mha_kv_kt(j->cache, block, g);
        for (int c = 0; c < dk; c++) /* K transposed into the block */
            kt[(size_t)c * bs + slot] = *mha_mat_at(k, qkv, i, dkp + c);
        from_panels(k, qkv, i, 2 * dkp, mha_kv_v(j->cache, block, g, slot), dk);
    }
    /* Q of each query head of the group, rotated, into its columns of z */
    for (int h = 0; h < f->group; h++) {
        mha_attention_project(f, s, m, x, xp, g, h == 0 ? 0 : (h + 2) * dkp, 0, dkp);
        float *z = f->z + (size_t)r0 * d + (size_t)(g * f->group + h) * dk;
        for (int i = 0, q = first; i < m; i++) {
            q = seq_of(j, r0 + i, q);
            if (f->rope != MHA_ROPE_NONE)
                mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, 0, pos_of(j, r0 + i, q), f->rope, f->rope_dim,
                              f->rope_cos, f->rope_sin);
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
    const int bs = j->cache->block_size;
    /* the context's V, position by position from its blocks, into the scratch; its Kᵀ
     * straight into the panels the score GEMM reads (dk × ctx, zero columns to the panel's
     * end): feature c of a block's slots is a contiguous run in the cache. Keys before the
     * window are never read by the attention (it starts on the panel holding the first
     * visible key), so they are not gathered either. */
    const mha_mat ktm = mha_mat_panels(k, s->kt, dk);
    for (int t0 = first_key(j, q) / k->bw * k->bw; t0 < ctx;) {
        const int block = table[t0 / bs], slot = t0 % bs, n = ctx - t0 < bs - slot ? ctx - t0 : bs - slot;
        const float *kt = mha_kv_kt(j->cache, block, g) + slot;
        for (int c = 0; c < dk; c++) /* row c of Kᵀ: runs up to each panel's edge */
            for (int t = 0; t < n;) {
                const int col = t0 + t, run = k->bw - col % k->bw < n - t ? k->bw - col % k->bw : n - t;
                memcpy(mha_mat_at(k, ktm, c, col), kt + (size_t)c * bs + t, (size_t)run * sizeof *kt);
                t += run;
            }
        for (int t = 0; t < n; t++)
            to_panels(k, qkv, t0 + t, 2 * dkp, mha_kv_v(j->cache, block, g, slot + t), dk);
        t0 += n;
    }
    for (int c = 0; c < dk; c++) /* the last panel's columns past ctx */
        for (int t = ctx; t < (int)mha_round_up((size_t)ctx, (size_t)k->bw); t++)
            *mha_mat_at(k, ktm, c, t) = 0.0f;
    float *z = f->z + (size_t)j->row0[q] * f->d;
    for (int h = g * f->group; h < (g + 1) * f->group; h++) {
        for (int i = 0; i < n_new; i++) /* its Q (rotated in phase 1), then Z over it */
            to_panels(k, qkv, i, 0, z + (size_t)i * f->d + (size_t)h * dk, dk);
        mha_attention_rows(f, h, s, n_new, ctx, n_past, z, NULL);
    }
}

/* ---- decode: attention straight from the cache, in chunks of keys ---- */

/* sc[qi · CHUNK + t] = scale · Σ_c q[qi][c] · kt[c · ld + t] for t < n slots of one block:
 * the queries' scores against a run of slots, feature by feature. */
static void scores_scalar(const float *restrict q, int nq, int dk, const float *restrict kt, int ld, int n, float scale,
                          float *restrict sc)
{
    for (int qi = 0; qi < nq; qi++)
        for (int t = 0; t < n; t++) {
            float acc = 0.0f;
            for (int c = 0; c < dk; c++)
                acc += q[(size_t)qi * dk + c] * kt[(size_t)c * ld + t];
            sc[(size_t)qi * MHA_DECODE_CHUNK + t] = acc * scale;
        }
}

/* 16 slots at a time, 8 queries per pass: 8 accumulators, one Kᵀ row load per feature. */
__attribute__((target("avx512f"))) static void scores_avx512(const float *restrict q, int nq, int dk,
                                                             const float *restrict kt, int ld, int n, float scale,
                                                             float *restrict sc)
{
    for (int t = 0; t < n; t += 16) {
        const __mmask16 m = n - t >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - t)) - 1u);
        for (int q0 = 0; q0 < nq; q0 += 8) {
            const int nb = nq - q0 < 8 ? nq - q0 : 8;
            __m512 acc[8];
            for (int r = 0; r < 8; r++)
                acc[r] = _mm512_setzero_ps();
            for (int c = 0; c < dk; c++) {
                const __m512 krow = _mm512_maskz_loadu_ps(m, kt + (size_t)c * ld + t);
                for (int r = 0; r < 8; r++)
                    if (r < nb)
                        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)(q0 + r) * dk + c]), krow, acc[r]);
            }
            for (int r = 0; r < nb; r++)
                _mm512_mask_storeu_ps(sc + (size_t)(q0 + r) * MHA_DECODE_CHUNK + t, m,
                                      _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
        }
    }
}

static void axpy_scalar(float *restrict y, float a, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

__attribute__((target("avx512f"))) static void axpy_avx512(float *restrict y, float a, const float *restrict x, int n)
{
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

int mha_step_chunks(const mha_step_job *j, int q)
{
    const int ctx = j->step->n_past[q] + j->step->n_new[q];
    return (ctx + MHA_DECODE_CHUNK - 1) / MHA_DECODE_CHUNK;
}

/* Partial results of query qi (head-in-group major, then row) of chunk c of (q, g):
 * Z (dk floats, unnormalised), then the running max and the sum. */
static float *partial_of(const mha_step_job *j, int q, int g, int c, int qi)
{
    const size_t per_query = (size_t)j->f.dk + 2, per_chunk = (size_t)j->f.group * MHA_DECODE_ROWS * per_query;
    return j->partial + (((size_t)q * j->f.kvh + g) * j->max_chunks + c) * per_chunk + (size_t)qi * per_query;
}

void mha_step_decode_chunk(const mha_step_job *j, int q, int g, int c, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_step *st = j->step;
    const mha_kv_cache *cache = j->cache;
    const int n_new = st->n_new[q], n_past = st->n_past[q], ctx = n_past + n_new;
    const int dk = f->dk, d = f->d, G = f->group, nq = G * n_new, W = f->window;
    const int k0 = c * MHA_DECODE_CHUNK, k1 = k0 + MHA_DECODE_CHUNK < ctx ? k0 + MHA_DECODE_CHUNK : ctx, n = k1 - k0;
    const int32_t *table = st->blocks + (size_t)q * st->max_blocks;
    const int avx512 = f->kernel->avx512;
    const float scale = 1.0f / sqrtf((float)dk);
    float *sc = s->dec, *qv = s->dec + (size_t)nq * MHA_DECODE_CHUNK; /* (nq, chunk) scores; (nq, dk) queries */
    if (k1 <= first_key(j, q)) { /* the whole chunk is before every query's window */
        for (int qi = 0; qi < nq; qi++) {
            float *p = partial_of(j, q, g, c, qi);
            p[dk] = -INFINITY, p[dk + 1] = 0.0f; /* the merge skips it */
        }
        return;
    }

    /* the group's queries, rotated in phase 1, from z: query qi = head jh, row i */
    const float *z = f->z + (size_t)j->row0[q] * d;
    for (int jh = 0; jh < G; jh++)
        for (int i = 0; i < n_new; i++)
            memcpy(qv + (size_t)(jh * n_new + i) * dk, z + (size_t)i * d + (size_t)(g * G + jh) * dk, (size_t)dk * sizeof *qv);
    /* scores, block by block: each block's Kᵀ read once for every query of the group */
    const int bs = cache->block_size;
    for (int t = k0; t < k1;) {
        const int slot = t % bs, n_run = bs - slot < k1 - t ? bs - slot : k1 - t;
        const float *kt = mha_kv_kt(cache, table[t / bs], g) + slot;
        if (t + n_run < k1) /* the next block's Kᵀ on its way while this one is used */
            for (size_t off = 0; off < (size_t)dk * bs; off += 16)
                _mm_prefetch((const char *)(mha_kv_kt(cache, table[(t + n_run) / bs], g) + off), _MM_HINT_T0);
        float *out = sc + (t - k0);
        if (avx512)
            scores_avx512(qv, nq, dk, kt, bs, n_run, scale, out);
        else
            scores_scalar(qv, nq, dk, kt, bs, n_run, scale, out);
        t += n_run;
    }
    /* per query: the keys it sees in this chunk (causal from its position, the window), exp
     * against the chunk's max, the sum */
    for (int qi = 0; qi < nq; qi++) {
        const int pos = n_past + qi % n_new;
        const int hi = pos + 1 < k1 ? pos + 1 : k1, lo = W > 0 && pos - W + 1 > k0 ? pos - W + 1 : k0;
        const int visible = hi - k0 < 0 ? 0 : hi - k0, hidden = lo - k0 > visible ? visible : lo - k0;
        float *row = sc + (size_t)qi * MHA_DECODE_CHUNK;
        for (int t = 0; t < hidden; t++)
            row[t] = -INFINITY;
        float mx = -INFINITY;
        const float sum = f->softmax(row, n, visible, NULL, &mx);
        float *p = partial_of(j, q, g, c, qi);
        memset(p, 0, (size_t)dk * sizeof *p);
        p[dk] = mx, p[dk + 1] = sum;
    }
    /* Z += e · V: each value row read once for every query */
    for (int t = k0; t < k1; t++) {
        const float *vr = mha_kv_v(cache, table[t / bs], g, t % bs);
        if (t + 8 < k1) /* a few rows ahead */
            for (int off = 0; off < dk; off += 16)
                _mm_prefetch((const char *)(mha_kv_v(cache, table[(t + 8) / bs], g, (t + 8) % bs) + off), _MM_HINT_T0);
        for (int qi = 0; qi < nq; qi++) {
            const float e = sc[(size_t)qi * MHA_DECODE_CHUNK + (t - k0)];
            if (e != 0.0f) {
                float *p = partial_of(j, q, g, c, qi);
                if (avx512)
                    axpy_avx512(p, e, vr, dk);
                else
                    axpy_scalar(p, e, vr, dk);
            }
        }
    }
}

void mha_step_decode_merge(const mha_step_job *j, int q, int g)
{
    const mha_fwd *f = &j->f;
    const int n_new = j->step->n_new[q], dk = f->dk, d = f->d, G = f->group, chunks = mha_step_chunks(j, q);
    float *z = f->z + (size_t)j->row0[q] * d;
    for (int qi = 0; qi < G * n_new; qi++) {
        const int jh = qi / n_new, i = qi % n_new;
        float *zr = z + (size_t)i * d + (size_t)(g * G + jh) * dk;
        float m = -INFINITY;
        for (int c = 0; c < chunks; c++) {
            const float mc = partial_of(j, q, g, c, qi)[dk];
            m = mc > m ? mc : m;
        }
        memset(zr, 0, (size_t)dk * sizeof *zr);
        if (m == -INFINITY)
            continue; /* no visible key: a zero row */
        float sum = 0.0f;
        for (int c = 0; c < chunks; c++) { /* in chunk order: the same sums whatever ran them */
            const float *p = partial_of(j, q, g, c, qi);
            if (p[dk] == -INFINITY)
                continue;
            const float w = expf(p[dk] - m);
            sum += p[dk + 1] * w;
            for (int t = 0; t < dk; t++)
                zr[t] += p[t] * w;
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int t = 0; t < dk; t++)
            zr[t] *= inv;
    }
}

void mha_step_out_rows(const mha_step_job *j, int r0, int r1, int c0, int c1, float *apack)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const ptrdiff_t d = f->d;
    mha_mat om = mha_mat_rows(k, f->out + (size_t)r0 * d + c0, d);
    if (f->has_bias)
        mha_mat_fill_rows(k, om, r1 - r0, c1 - c0, f->bo + c0);
    mha_gemm(k, r1 - r0, c1 - c0, f->d, 1.0f, mha_mat_rows(k, f->z + (size_t)r0 * d, d),
             mha_mat_sub(k, mha_mat_panels(k, f->wo, f->d), 0, c0), f->has_bias ? 1.0f : 0.0f, om, apack);
}
