/* neon_f32.c — the neon table's float32 operations outside the softmax: A and Bᵀ packed 4
 * lanes at a time through 4 × 4 register transposes, and RoPE. */
#include <arm_neon.h>

#include "loops.h"
#include "neon.h"

/* ---- float32 packing ---- */

/* One group of a panel: up to 4 rows by n <= 4 columns through a register transpose, gw
 * lanes of each column stored (cortexa57's panels of 12 and 8 and generic's of 4 and 16 are
 * whole groups of 4: gw is 4 but in a panel narrower than 4). */
static inline __attribute__((always_inline)) void pack_group(const float *const *src, int gw, int have, ptrdiff_t off,
                                                             int n, float *dst, int pw)
{
    float32x4_t v[4];
    if (gw == 4 && have >= 4 && n == 4) { /* a whole group: nothing to test per row or column */
        for (int r = 0; r < 4; r++)
            v[r] = vld1q_f32(src[r] + off);
        transpose4(v);
        for (int t = 0; t < 4; t++)
            vst1q_f32(dst + (size_t)t * pw, v[t]);
        return;
    }
    for (int r = 0; r < 4; r++)
        v[r] = r < gw && r < have ? load4_n(src[r] + off, n) : vdupq_n_f32(0.0f);
    transpose4(v);
    for (int t = 0; t < n; t++)
        store4_n(dst + (size_t)t * pw, gw, v[t]);
}

/* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc), into panels of pw rows: dst[panel][p][r].
 * Four rows by four columns at a time. */
void mha_pack_rows_neon(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst)
{
    mha_pack_walk(a, w, i0, rows, p0, kc, pw, dst, 4, pack_group);
}

/* ---- few rows ---- */

/* Up to MHA_STREAM_ROWS rows with cortexa57's B panels of 8 columns: B streamed once from
 * memory, R rows × 8 columns of accumulators per pass over a chunk of k (R = 8, 4, 2, 1), the
 * other passes reading the chunk again from cache; the next chunk of B comes into L2 over the
 * passes in proportion to their rows (avx512_f32.c says why). The sums are BLIS's armv8a
 * 8 × 12 microkernel's, bit for bit for beta 0 and 1: one FMA chain per element over each chunk
 * of k->kc in k order (four k of a row loaded at once and taken by lane), then its epilogue,
 * which differs between a whole tile and an edge one. gemm.c gives it Cᵀ: tiles of 8 columns
 * (a B panel) by 12 rows (an A panel, from the product's row 0). A whole tile (8 columns, 12
 * rows) ends with c = alpha·acc + beta·c in one FMA (beta·c rounded first; beta 0: c not
 * read); an edge tile sums into a buffer, alpha·acc rounded, then c = beta·c + that (beta 0:
 * that). A later chunk of k is beta 1. So whole or edge is a question of the row's panel and
 * the column's: m, the product's rows, comes with the walk's prefetch (mha_ahead). */
static inline __attribute__((always_inline)) void stream_pass(const int R, mha_ahead *pf, int i0, int p0, int p1,
                                                              int j0, int nj, float alpha, mha_mat a, const float *bp,
                                                              float beta, mha_mat c)
{
    const int w = 8, m = pf->m;
    float32x4_t acc0[8], acc1[8];
    for (int r = 0; r < R; r++)
        acc0[r] = acc1[r] = vdupq_n_f32(0.0f);
    for (int p = p0; p < p1;) { /* A's columns are contiguous within one of its panels */
        const int in_panel = w - p % w, np = p1 - p < in_panel ? p1 - p : in_panel;
        const float *x = a.p + (ptrdiff_t)i0 * a.ld + (ptrdiff_t)(p / w) * a.ps + p % w;
        const float *bq = bp + (ptrdiff_t)p * w;
        int q = 0;
        for (; q + 4 <= np; q += 4, bq += 4 * w) {
            float32x4_t xa[8];
            for (int r = 0; r < R; r++)
                xa[r] = vld1q_f32(x + (ptrdiff_t)r * a.ld + q);
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                for (pf->credit += pf->share; pf->credit >= pf->per; pf->credit -= pf->per, pf->at += 64)
                    __builtin_prefetch(pf->at, 0, 2);
                const float32x4_t b0 = vld1q_f32(bq + l * w), b1 = vld1q_f32(bq + l * w + 4);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    acc0[r] = fma_lane(acc0[r], b0, xa[r], l);
                    acc1[r] = fma_lane(acc1[r], b1, xa[r], l);
                }
            }
        }
        for (; q < np; q++, bq += w) {
            for (pf->credit += pf->share; pf->credit >= pf->per; pf->credit -= pf->per, pf->at += 64)
                __builtin_prefetch(pf->at, 0, 2);
            const float32x4_t b0 = vld1q_f32(bq), b1 = vld1q_f32(bq + 4);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const float32x4_t xr = vld1q_dup_f32(x + (ptrdiff_t)r * a.ld + q);
                acc0[r] = vfmaq_f32(acc0[r], xr, b0);
                acc1[r] = vfmaq_f32(acc1[r], xr, b1);
            }
        }
        p += np;
    }
    /* C's rows from here without mha_mat_at's division by k->bw (j0 starts a panel of w) */
    float *cr = c.p + (ptrdiff_t)(j0 / w) * c.ps + (ptrdiff_t)i0 * c.ld;
    const float32x4_t zero = vdupq_n_f32(0.0f);
    const float b = p0 > 0 ? 1.0f : beta;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float *cp = cr + (ptrdiff_t)r * c.ld;
        const int i = i0 + r, whole = nj == w && i / 12 * 12 + 12 <= m;
        float32x4_t t0, t1;
        if (b == 0.0f) /* c not read: alpha·acc + 0, whole tile or buffer alike */
            t0 = vfmaq_n_f32(zero, acc0[r], alpha), t1 = vfmaq_n_f32(zero, acc1[r], alpha);
        else {
            float32x4_t c0 = load4_n(cp, nj), c1 = load4_n(cp + 4, nj - 4);
            if (b != 1.0f)
                c0 = vmulq_n_f32(c0, b), c1 = vmulq_n_f32(c1, b);
            if (whole)
                t0 = vfmaq_n_f32(c0, acc0[r], alpha), t1 = vfmaq_n_f32(c1, acc1[r], alpha);
            else
                t0 = vaddq_f32(c0, vfmaq_n_f32(zero, acc0[r], alpha)),
                t1 = vaddq_f32(c1, vfmaq_n_f32(zero, acc1[r], alpha));
        }
        store4_n(cp, nj, t0);
        store4_n(cp + 4, nj - 4, t1);
    }
}

void mha_stream_rows_neon(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                          mha_mat c)
{
    mha_stream_walk(k, m, n, kk, alpha, a, b, beta, c, 8, 8, stream_pass);
}

/* ---- RoPE ---- */

/* Four pairs at a time: products and the difference or sum each rounded once, as ref (vmulq
 * and vsubq/vaddq: the build contracts nothing into an FMA). */
void mha_rope_halves_neon(float *a, float *b, const float *c, const float *s, float sign, int n)
{
    const float32x4_t sg = vdupq_n_f32(sign);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float32x4_t x = vld1q_f32(a + j), y = vld1q_f32(b + j);
        const float32x4_t cj = vld1q_f32(c + j), sn = vmulq_f32(sg, vld1q_f32(s + j));
        vst1q_f32(a + j, vsubq_f32(vmulq_f32(x, cj), vmulq_f32(y, sn)));
        vst1q_f32(b + j, vaddq_f32(vmulq_f32(y, cj), vmulq_f32(x, sn)));
    }
    if (j < n) {
        const float32x4_t x = load4_n(a + j, n - j), y = load4_n(b + j, n - j);
        const float32x4_t cj = load4_n(c + j, n - j), sn = vmulq_f32(sg, load4_n(s + j, n - j));
        store4_n(a + j, n - j, vsubq_f32(vmulq_f32(x, cj), vmulq_f32(y, sn)));
        store4_n(b + j, n - j, vaddq_f32(vmulq_f32(y, cj), vmulq_f32(x, sn)));
    }
}

/* Four pairs (two vectors of two) at a time: cos and sin duplicated per pair (zip), the pair
 * swapped (rev64), the even lanes' sine negated: x·c + y·(−s') rounds as x·c − y·s'. */
static inline __attribute__((always_inline)) void rope_pairs4(float *x, const float *c, const float *s,
                                                              float32x4_t sg, int n)
{
    const float32x4_t cj = load4_n(c, n), sj = load4_n(s, n);
    const float32x4_t v0 = load4_n(x, 2 * n), v1 = load4_n(x + 4, 2 * n - 4);
    const float32x4_t c0 = vzip1q_f32(cj, cj), c1 = vzip2q_f32(cj, cj);
    const float32x4_t s0 = vmulq_f32(sg, vzip1q_f32(sj, sj)), s1 = vmulq_f32(sg, vzip2q_f32(sj, sj));
    store4_n(x, 2 * n, vaddq_f32(vmulq_f32(v0, c0), vmulq_f32(vrev64q_f32(v0), s0)));
    store4_n(x + 4, 2 * n - 4, vaddq_f32(vmulq_f32(v1, c1), vmulq_f32(vrev64q_f32(v1), s1)));
}

void mha_rope_pairs_neon(float *x, const float *c, const float *s, float sign, int n)
{
    const float sg4[4] = {-sign, sign, -sign, sign};
    const float32x4_t sg = vld1q_f32(sg4);
    int j = 0;
    for (; j + 4 <= n; j += 4)
        rope_pairs4(x + 2 * j, c + j, s + j, sg, 4);
    if (j < n)
        rope_pairs4(x + 2 * j, c + j, s + j, sg, n - j);
}
