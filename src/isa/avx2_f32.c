/* avx2_f32.c — the avx2 table's float32 operations outside the softmax: A and Bᵀ packed 8
 * lanes at a time through 8 × 8 register transposes, the few-row products streamed past
 * haswell's microkernel with its sums (and the bf16 products on that stream), and RoPE. */
#include <immintrin.h>

#include "avx2.h"
#include "loops.h"

/* ---- float32 packing ---- */

/* One group of a panel: up to 8 rows by n <= 8 columns through a register transpose. A group
 * that is the whole panel (gw == pw, haswell's A panels of 6) stores all 8 lanes of a column
 * while they end within the group's n columns: the lanes past gw land on the next columns'
 * first rows, which their own stores write after. */
static inline __attribute__((always_inline, target(AVX2))) void pack_group(const float *const *src, int gw, int have,
                                                                          ptrdiff_t off, int n, float *dst, int pw)
{
    __m256 v[8];
    for (int r = 0; r < 8; r++)
        v[r] = r < gw && r < have ? load8_n(src[r] + off, n) : _mm256_setzero_ps();
    transpose8(v);
    for (int t = 0; t < n; t++)
        store8_n(dst + (size_t)t * pw, gw == pw && t * pw + 8 <= n * pw ? 8 : gw, v[t]);
}

/* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc), into panels of pw rows: dst[panel][p][r].
 * Eight rows by eight columns at a time. */
__attribute__((target(AVX2))) void mha_pack_rows_avx2(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw,
                                                     float *restrict dst)
{
    mha_pack_walk(a, w, i0, rows, p0, kc, pw, dst, 8, pack_group);
}

/* ---- few rows ---- */

/* Up to MHA_STREAM_ROWS rows (any number for the attention's products: stream_in_place) with
 * haswell's B panels of 16 columns: B streamed once from memory, R rows × 16 columns of
 * accumulators per pass over a chunk of k (R = 6, 4, 2, 1: the microkernel's 6 × 16 tile holds
 * 12 accumulators, as these do), the other passes reading the chunk again from cache. The sums
 * are haswell's microkernel's, bit for bit for beta 0 and 1: one FMA chain per element over
 * each chunk of k->kc in k order, then c = alpha·acc, + beta·c by FMA for the first chunk, c +
 * alpha·acc for the others. The next chunk of B comes into L2 over the passes in proportion to
 * their rows (avx512_f32.c says why). */
static inline __attribute__((always_inline, target(AVX2))) void
stream_pass(const int R, mha_ahead *pf, int i0, int p0, int p1, int j0, int nj, float alpha, mha_mat a,
            const float *bp, float beta, mha_mat c)
{
    const int w = 16;
    __m256 acc0[6], acc1[6];
    for (int r = 0; r < R; r++)
        acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int p = p0; p < p1;) { /* A's columns are contiguous within one of its panels */
        const int in_panel = w - p % w, np = p1 - p < in_panel ? p1 - p : in_panel;
        const float *x = a.p + (ptrdiff_t)i0 * a.ld + (ptrdiff_t)(p / w) * a.ps + p % w;
        const float *bq = bp + (ptrdiff_t)p * w;
        for (int q = 0; q < np; q++, bq += w) {
            for (pf->credit += pf->share; pf->credit >= pf->per; pf->credit -= pf->per, pf->at += 64)
                _mm_prefetch(pf->at, _MM_HINT_T1);
            const __m256 b0 = _mm256_load_ps(bq), b1 = _mm256_load_ps(bq + 8);
            for (int r = 0; r < R; r++) {
                const __m256 xr = _mm256_broadcast_ss(x + (ptrdiff_t)r * a.ld + q);
                acc0[r] = _mm256_fmadd_ps(xr, b0, acc0[r]);
                acc1[r] = _mm256_fmadd_ps(xr, b1, acc1[r]);
            }
        }
        p += np;
    }
    /* C's rows from here without mha_mat_at's division by k->bw (j0 starts a panel of w), and
     * a whole panel of C not read without a test per row: with k = d_k (64 in the attention's
     * scores) a pass is a few hundred cycles of FMAs, and the division and the tests would be a
     * share of it */
    float *cr = c.p + (ptrdiff_t)(j0 / w) * c.ps + (ptrdiff_t)i0 * c.ld;
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    if (p0 == 0 && beta == 0.0f && nj == w) {
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            _mm256_storeu_ps(cr + (ptrdiff_t)r * c.ld, _mm256_mul_ps(va, acc0[r]));
            _mm256_storeu_ps(cr + (ptrdiff_t)r * c.ld + 8, _mm256_mul_ps(va, acc1[r]));
        }
        return;
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        float *cp = cr + (ptrdiff_t)r * c.ld;
        __m256 t0 = _mm256_mul_ps(va, acc0[r]), t1 = _mm256_mul_ps(va, acc1[r]);
        if (p0 > 0) {
            t0 = _mm256_add_ps(load8_n(cp, nj), t0);
            t1 = _mm256_add_ps(load8_n(cp + 8, nj - 8), t1);
        } else if (beta != 0.0f) {
            t0 = _mm256_fmadd_ps(vb, load8_n(cp, nj), t0);
            t1 = _mm256_fmadd_ps(vb, load8_n(cp + 8, nj - 8), t1);
        }
        store8_n(cp, nj, t0);
        store8_n(cp + 8, nj - 8, t1);
    }
}

/* Every CPU: reading A in place skips the pass that packs it, which on the AVX2 parts tried
 * (Zen 1) outweighs what the microkernel gains from packed A; Intel's AVX-512 hosts, which run
 * this table only when it is forced, are taken as the same. */
int mha_stream_in_place_avx2(void)
{
    return 1;
}

__attribute__((target(AVX2))) void mha_stream_rows_avx2(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                       mha_mat a, mha_mat b, float beta, mha_mat c)
{
    mha_stream_walk(k, m, n, kk, alpha, a, b, beta, c, 16, 6, stream_pass);
}

/* Under DAZ and FTZ, as the bf16 kernels sum (alpha 1: a sum times one is itself); then the
 * padding's + 0 and alpha in the caller's mode, 8 lanes at a time (per element: the bits of
 * epilogue_block's multiply). */
__attribute__((target(AVX2))) void mha_stream_rows16_avx2(const mha_kernel *k, const mha_product16 *p)
{
    const int m = p->m, n = p->n;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    mha_stream_rows_avx2(k, m, n, p->kk, 1.0f, p->a, p->b, 0.0f, p->c);
    _mm_setcsr(csr);
    if (!p->pad && p->alpha == 1.0f)
        return;
    const __m256 va = _mm256_set1_ps(p->alpha), zero = _mm256_setzero_ps();
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j += 8) {
            float *y = p->c.p + (ptrdiff_t)i * p->c.ld + j;
            __m256 x = load8_n(y, n - j);
            if (p->pad)
                x = _mm256_add_ps(x, zero);
            store8_n(y, n - j, _mm256_mul_ps(x, va));
        }
}

/* ---- RoPE ---- */

/* Eight pairs at a time: products and the difference or sum each rounded once, as ref. */
__attribute__((target(AVX2))) void mha_rope_halves_avx2(float *a, float *b, const float *c, const float *s,
                                                       float sign, int n)
{
    const __m256 sg = _mm256_set1_ps(sign);
    for (int j = 0; j < n; j += 8) {
        const __m256 x = load8_n(a + j, n - j), y = load8_n(b + j, n - j);
        const __m256 cj = load8_n(c + j, n - j), sn = _mm256_mul_ps(sg, load8_n(s + j, n - j));
        store8_n(a + j, n - j, _mm256_sub_ps(_mm256_mul_ps(x, cj), _mm256_mul_ps(y, sn)));
        store8_n(b + j, n - j, _mm256_add_ps(_mm256_mul_ps(y, cj), _mm256_mul_ps(x, sn)));
    }
}

/* Four pairs (eight floats) at a time: cos and sin duplicated per pair, the pair swapped, the
 * even lanes' sine negated: x·c + y·(−s') rounds as x·c − y·s'. */
__attribute__((target(AVX2))) void mha_rope_pairs_avx2(float *x, const float *c, const float *s, float sign, int n)
{
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256 sg = _mm256_setr_ps(-sign, sign, -sign, sign, -sign, sign, -sign, sign);
    for (int j = 0; j < n; j += 4) {
        const __m256 v = load8_n(x + 2 * j, 2 * (n - j));
        const __m256 cj = _mm256_permutevar8x32_ps(load8_n(c + j, n - j), dup);
        const __m256 sj = _mm256_mul_ps(sg, _mm256_permutevar8x32_ps(load8_n(s + j, n - j), dup));
        const __m256 swapped = _mm256_permute_ps(v, 0xB1);
        store8_n(x + 2 * j, 2 * (n - j), _mm256_add_ps(_mm256_mul_ps(v, cj), _mm256_mul_ps(swapped, sj)));
    }
}
