/* gemm.c — the Goto loops around BLIS's microkernel, for the shapes attention has.
 *
 * B always arrives packed: weights at mha_set_weights, Kᵀ and V once per head. A is packed
 * here, mb rows × kc at a time, into panels of aw rows. For every output element the sum
 * over k runs in the same order whatever m and n are blocked into, so results do not depend
 * on how many rows a call covers or which worker makes it. */
#include "gemm.h"

#include <immintrin.h>
#include <string.h>

#include "simd.h"

size_t mha_gemm_apack_floats(const mha_kernel *k)
{
    return (size_t)k->mb * (size_t)k->kc;
}

/* A rows [i0, i0 + rows), columns [p0, p0 + kc) into panels of aw rows: dst[panel][p][r].
 * Portable version; pack_a_avx512 below does the same 16 columns at a time. */
static void pack_a_scalar(const mha_kernel *k, mha_mat a, int i0, int rows, int p0, int kc, float *restrict dst)
{
    const int aw = k->aw, w = k->bw;
    for (int r0 = 0; r0 < rows; r0 += aw, dst += (size_t)aw * kc) {
        const int nr = rows - r0 < aw ? rows - r0 : aw;
        for (int r = 0; r < nr; r++) {
            const float *src = a.p + (ptrdiff_t)(i0 + r0 + r) * a.ld;
            /* walk the columns a panel of w at a time: within one they are contiguous */
            for (int p = 0; p < kc;) {
                const int col = p0 + p, in_panel = w - col % w, n = kc - p < in_panel ? kc - p : in_panel;
                const float *s = src + (ptrdiff_t)(col / w) * a.ps + col % w;
                for (int t = 0; t < n; t++)
                    dst[(size_t)(p + t) * aw + r] = s[t];
                p += n;
            }
        }
        for (int r = nr; r < aw; r++) /* pad the last panel with zero rows */
            for (int p = 0; p < kc; p++)
                dst[(size_t)p * aw + r] = 0.0f;
    }
}

/* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc), into panels of pw rows (pw ≤ 64):
 * dst[panel][p][r]. Sixteen rows by sixteen columns at a time through a register transpose. */
__attribute__((target("avx512f"))) static void pack_rows_avx512(mha_mat a, int w, int i0, int rows, int p0, int kc,
                                                               int pw, float *restrict dst)
{
    for (int r0 = 0; r0 < rows; r0 += pw, dst += (size_t)pw * kc)
        for (int g = 0; g < pw; g += 16) { /* a group of up to 16 rows of the panel */
            const int gw = pw - g < 16 ? pw - g : 16, have = rows - r0 - g;
            const __mmask16 store = (__mmask16)((1u << gw) - 1u);
            const float *src[16];
            for (int r = 0; r < gw && r < have; r++)
                src[r] = a.p + (ptrdiff_t)(i0 + r0 + g + r) * a.ld;
            for (int p = 0; p < kc;) {
                const int col = p0 + p, in_panel = w - col % w;
                int n = kc - p < in_panel ? kc - p : in_panel;
                n = n < 16 ? n : 16;
                const __mmask16 load = (__mmask16)((1u << n) - 1u);
                const ptrdiff_t off = (ptrdiff_t)(col / w) * a.ps + col % w;
                __m512 v[16];
                for (int r = 0; r < 16; r++)
                    v[r] = r < gw && r < have ? _mm512_maskz_loadu_ps(load, src[r] + off) : _mm512_setzero_ps();
                mha_transpose16(v);
                for (int t = 0; t < n; t++)
                    _mm512_mask_storeu_ps(dst + (size_t)(p + t) * pw + g, store, v[t]);
                p += n;
            }
        }
}

static void pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int p0, int kc, float *restrict dst)
{
    if (k->aw <= 64 && k->avx512)
        pack_rows_avx512(a, k->bw, i0, rows, p0, kc, k->aw, dst);
    else
        pack_a_scalar(k, a, i0, rows, p0, kc, dst);
}

/* Few rows: c[i][j] = alpha · Σ_p a[i][p] · b[p][j] + beta · c[i][j], B read panel by panel.
 * Cloned per ISA; C11 mode forbids FMA contraction, so every clone gives the same bits. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void gemv_rows(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta, mha_mat c)
{
    enum { MAXW = 64 };
    const int w = k->bw;
    float acc[MAXW];
    for (int i = 0; i < m; i++)
        for (int j0 = 0; j0 < n; j0 += w) {
            const float *bp = b.p + (ptrdiff_t)(j0 / w) * b.ps;
            const int nj = n - j0 < w ? n - j0 : w;
            for (int t = 0; t < w; t++)
                acc[t] = 0.0f;
            for (int p = 0; p < kk;) { /* A's columns are contiguous within one of its panels */
                const int in_panel = w - p % w, np = kk - p < in_panel ? kk - p : in_panel;
                const float *x = a.p + (ptrdiff_t)i * a.ld + (ptrdiff_t)(p / w) * a.ps + p % w;
                for (int q = 0; q < np; q++) {
                    const float *row = bp + (ptrdiff_t)(p + q) * w;
                    for (int t = 0; t < w; t++)
                        acc[t] += x[q] * row[t];
                }
                p += np;
            }
            float *cp = mha_mat_at(k, c, i, j0);
            for (int t = 0; t < nj; t++)
                cp[t] = beta == 0.0f ? alpha * acc[t] : alpha * acc[t] + beta * cp[t];
        }
}

/* Up to MHA_STREAM_ROWS rows on AVX-512 with B panels of 32 columns (k->stream): B streamed
 * once from memory, R rows × 32 columns of accumulators per pass over a chunk of k (R = 12, 8, 4,
 * 2, 1: a register tile of the rows that exist; the microkernel would compute whole panels
 * of aw rows), the other passes reading that chunk again from cache. The sums are the
 * microkernel's, bit for bit for beta 0 and 1 (the engine's): one FMA chain per element over
 * each chunk of k->kc in k order, then c = alpha·acc, + beta·c by FMA for the first chunk
 * (beta = 0: c not read), c + alpha·acc for the others. (BLIS's edge tiles round beta·c
 * separately for other betas.)
 *
 * Prefetch: while the passes compute on one chunk, the next chunk of B (the rest of this
 * panel, or the next panel's first) comes into L2, its lines spread over every pass in
 * proportion to the pass's rows, so memory is read at an even pace the whole time.
 * Prefetching only in the first pass (32 rows ahead) left memory idle during the others:
 * 16 rows, 2 threads, 64 MB of B each, alternating in one process: 0.84-0.89× the time. */
typedef struct ahead {
    const char *at;            /* the next line of the next chunk */
    long credit, share, per;   /* a line each time credit, growing by share per row of a
                                * pass, reaches per */
} ahead;

static inline __attribute__((always_inline, target("avx512f"))) void
stream_pass(const mha_kernel *k, const int R, ahead *pf, int i0, int p0, int p1, int j0, int nj, float alpha, mha_mat a,
            const float *bp, float beta, mha_mat c)
{
    const int w = 32;
    __m512 acc0[12], acc1[12];
    for (int r = 0; r < R; r++)
        acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int p = p0; p < p1;) { /* A's columns are contiguous within one of its panels */
        const int in_panel = w - p % w, np = p1 - p < in_panel ? p1 - p : in_panel;
        const float *x = a.p + (ptrdiff_t)i0 * a.ld + (ptrdiff_t)(p / w) * a.ps + p % w;
        const float *bq = bp + (ptrdiff_t)p * w;
        for (int q = 0; q < np; q++, bq += w) {
            for (pf->credit += pf->share; pf->credit >= pf->per; pf->credit -= pf->per, pf->at += 64)
                _mm_prefetch(pf->at, _MM_HINT_T1);
            const __m512 b0 = _mm512_load_ps(bq), b1 = _mm512_load_ps(bq + 16);
            for (int r = 0; r < R; r++) {
                const __m512 xr = _mm512_set1_ps(x[(ptrdiff_t)r * a.ld + q]);
                acc0[r] = _mm512_fmadd_ps(xr, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(xr, b1, acc1[r]);
            }
        }
        p += np;
    }
    const __mmask16 m0 = nj >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nj) - 1u);
    const __mmask16 m1 = nj >= 32 ? (__mmask16)0xFFFF : nj <= 16 ? 0 : (__mmask16)((1u << (nj - 16)) - 1u);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < R; r++) {
        float *cp = mha_mat_at(k, c, i0 + r, j0);
        __m512 t0 = _mm512_mul_ps(va, acc0[r]), t1 = _mm512_mul_ps(va, acc1[r]);
        if (p0 > 0) {
            t0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cp), t0);
            t1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cp + 16), t1);
        } else if (beta != 0.0f) {
            t0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cp), t0);
            t1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cp + 16), t1);
        }
        _mm512_mask_storeu_ps(cp, m0, t0);
        _mm512_mask_storeu_ps(cp + 16, m1, t1);
    }
}

__attribute__((target("avx512f"))) static void stream_rows(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                          mha_mat a, mha_mat b, float beta, mha_mat c)
{
    for (int j0 = 0; j0 < n; j0 += 32) {
        const float *bp = b.p + (ptrdiff_t)(j0 / 32) * b.ps;
        const int nj = n - j0 < 32 ? n - j0 : 32;
        for (int p0 = 0; p0 < kk; p0 += k->kc) {
            const int p1 = kk - p0 < k->kc ? kk : p0 + k->kc;
            /* the next chunk: rows p1 .. of this panel, or the first of the next panel */
            const int more = p1 < kk ? kk - p1 : j0 + 32 < n ? kk : 0;
            const float *next = p1 < kk ? bp + (ptrdiff_t)p1 * 32 : more ? bp + b.ps : bp;
            const long lines = (long)(more < k->kc ? more : k->kc) * 2; /* 128-byte rows */
            /* pass of R rows: lines·R/m of them over its p1 - p0 rows */
            ahead pf = {.at = (const char *)next, .per = (long)(p1 - p0) * m};
            int i0 = 0;
            for (; i0 + 12 <= m; i0 += 12)
                pf.share = lines * 12, stream_pass(k, 12, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c);
            if (m - i0 >= 8)
                pf.share = lines * 8, stream_pass(k, 8, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c), i0 += 8;
            if (m - i0 >= 4)
                pf.share = lines * 4, stream_pass(k, 4, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c), i0 += 4;
            if (m - i0 >= 2)
                pf.share = lines * 2, stream_pass(k, 2, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c), i0 += 2;
            if (m - i0 >= 1)
                pf.share = lines, stream_pass(k, 1, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c);
        }
    }
}

/* The loops over one block of A (mb rows × kc, already in panels at ap, panel stride aps)
 * and the columns of B: C[i0 .., ..] (+)= alpha · A_blk · B[p0 .., ..]. */
static void gemm_block(const mha_kernel *k, int i0, int mb, int n, int p0, int kc, float alpha, const float *ap,
                       ptrdiff_t aps, mha_mat b, float beta, mha_mat c)
{
    const int aw = k->aw, w = k->bw;
    for (int j0 = 0; j0 < n; j0 += k->nb) {
        const int nb = n - j0 < k->nb ? n - j0 : k->nb;
        /* the B block (kc × nb) stays in cache while every A panel passes over it */
        for (int r0 = 0; r0 < mb; r0 += aw) {
            const float *a = ap + (ptrdiff_t)(r0 / aw) * aps;
            const int rows = mb - r0 < aw ? mb - r0 : aw;
            for (int jj = j0; jj < j0 + nb; jj += w) {
                const float *bp = b.p + (ptrdiff_t)(jj / w) * b.ps + (ptrdiff_t)p0 * w;
                const int cols = n - jj < w ? n - jj : w;
                mha_kernel_tile(k, rows, cols, kc, alpha, a, bp, beta, mha_mat_at(k, c, i0 + r0, jj), c.ld);
            }
        }
    }
}

/* C = beta · C, for k = 0 */
static void scale_c(const mha_kernel *k, int m, int n, float beta, mha_mat c)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float *cp = mha_mat_at(k, c, i, j);
            *cp = beta == 0.0f ? 0.0f : beta * *cp;
        }
}

void mha_gemm(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
              mha_mat c, float *apack)
{
    if (m <= 0 || n <= 0)
        return;
    if (kk <= 0) {
        scale_c(k, m, n, beta, c);
        return;
    }
    if (k->stream && m <= MHA_STREAM_ROWS) {
        stream_rows(k, m, n, kk, alpha, a, b, beta, c);
        return;
    }
    if (mha_gemm_few_rows(k, m)) {
        gemv_rows(k, m, n, kk, alpha, a, b, beta, c);
        return;
    }
    for (int i0 = 0; i0 < m; i0 += k->mb) {
        const int mb = m - i0 < k->mb ? m - i0 : k->mb;
        for (int p0 = 0; p0 < kk; p0 += k->kc) {
            const int kc = kk - p0 < k->kc ? kk - p0 : k->kc;
            pack_a(k, a, i0, mb, p0, kc, apack);
            gemm_block(k, i0, mb, n, p0, kc, alpha, apack, (ptrdiff_t)k->aw * kc, b, p0 == 0 ? beta : 1.0f, c);
        }
    }
}

void mha_gemm_prepacked(const mha_kernel *k, int m, int n, int kk, float alpha, const float *ap, mha_mat b,
                        float beta, mha_mat c)
{
    if (m <= 0 || n <= 0)
        return;
    if (kk <= 0) {
        scale_c(k, m, n, beta, c);
        return;
    }
    const ptrdiff_t aps = (ptrdiff_t)k->aw * kk; /* whole rows of k in each panel */
    for (int i0 = 0; i0 < m; i0 += k->mb) {
        const int mb = m - i0 < k->mb ? m - i0 : k->mb;
        for (int p0 = 0; p0 < kk; p0 += k->kc) {
            const int kc = kk - p0 < k->kc ? kk - p0 : k->kc;
            gemm_block(k, i0, mb, n, p0, kc, alpha, ap + (i0 / k->aw) * aps + (ptrdiff_t)p0 * k->aw, aps, b,
                       p0 == 0 ? beta : 1.0f, c);
        }
    }
}

void mha_pack_panels(const mha_kernel *k, int rows, int cols, mha_mat src, int transpose, float *dst)
{
    const int w = k->bw;
    /* the transpose's panels of w columns are panels of w rows of src: the A packing's form */
    if (transpose && w <= 64 && k->avx512) {
        pack_rows_avx512(src, w, 0, cols, 0, rows, w, dst);
        return;
    }
    const int padded = (int)mha_round_up((size_t)cols, (size_t)w);
    for (int j0 = 0; j0 < padded; j0 += w) {
        float *panel = dst + (size_t)j0 * rows; /* rows × w */
        for (int i = 0; i < rows; i++)
            for (int t = 0; t < w; t++) {
                const int j = j0 + t;
                panel[(size_t)i * w + t] = j >= cols ? 0.0f : transpose ? *mha_mat_at(k, src, j, i) : *mha_mat_at(k, src, i, j);
            }
    }
}

void mha_mat_fill_rows(const mha_kernel *k, mha_mat c, int rows, int cols, const float *v)
{
    const int w = k->bw;
    for (int j0 = 0; j0 < cols; j0 += w) {
        const int n = cols - j0 < w ? cols - j0 : w;
        for (int i = 0; i < rows; i++)
            memcpy(mha_mat_at(k, c, i, j0), v + j0, (size_t)n * sizeof *v);
    }
}

void mha_gemm_pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int p0, int kc, float *dst, int vector)
{
    if (vector)
        pack_a(k, a, i0, rows, p0, kc, dst);
    else
        pack_a_scalar(k, a, i0, rows, p0, kc, dst);
}
