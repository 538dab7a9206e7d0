/* avx2.c — the AVX2 table (AVX2, FMA, F16C: AMD Zen 1-3, Intel Haswell and later client parts):
 * 8-lane packing through 8 × 8 register transposes, the few-row products streamed past
 * haswell's microkernel with its sums, RoPE, softmax, decode tiles, bf16 rounding and packing, and
 * the bf16 products as FMA on widened bf16 (avx2-bf16: the sums of the model, even first, bit
 * for bit, as fma-bf16 and ref-bf16). */
#include "isa.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "exp_poly.h"
#include "kvcache.h"
#include "loops.h"

#define AVX2 "avx2,fma,f16c"

/* MXCSR bits of the bf16 instructions' behaviour: denormal inputs read as zero (DAZ),
 * denormal results flushed to zero (FTZ). */
#define DAZ_FTZ 0x8040u

/* All-ones in the first n lanes of 8 (n <= 0: none, n >= 8: all): AVX2's masked loads and
 * stores read and write only those. */
static inline __attribute__((target(AVX2))) __m256i first8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n elements (n >= 8: all 8) of a row at x, lanes from n on zero. Masked loads and stores only
 * where a vector is short: AMD's vmaskmovps store is microcoded (Zen 1: one per ~12 cycles,
 * where a plain store takes one), and a full mask costs it as much as a short one. */
static inline __attribute__((always_inline, target(AVX2))) __m256 load8_n(const float *x, int n)
{
    return n >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, first8(n));
}

/* The first n lanes of v (n >= 8: all 8) to x, nothing past them. */
static inline __attribute__((always_inline, target(AVX2))) void store8_n(float *x, int n, __m256 v)
{
    if (n >= 8)
        _mm256_storeu_ps(x, v);
    else
        _mm256_maskstore_ps(x, first8(n), v);
}

/* r[i] (8 rows of 8) becomes its transpose. */
static inline __attribute__((target(AVX2))) void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

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
__attribute__((target(AVX2))) static void pack_rows_avx2(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw,
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
 * their rows (avx512.c says why). */
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
     * a whole panel of C not read without a test per row: the scores' product of the
     * bert-base-512 core (k = d_k = 64, 384 cycles of FMAs a pass) ran 1.055× and then 1.025×
     * as fast (Zen 4, session 37) */
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

/* Every CPU: measured on Zen 1, the bert-base-512 core took 0.94× the time of packing A (the
 * forced table on Intel's AVX-512 hosts not measured apart). */
static int stream_in_place_avx2(void)
{
    return 1;
}

__attribute__((target(AVX2))) static void stream_rows_avx2(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                          mha_mat a, mha_mat b, float beta, mha_mat c)
{
    mha_stream_walk(k, m, n, kk, alpha, a, b, beta, c, 16, 6, stream_pass);
}

/* Under DAZ and FTZ, as the bf16 kernels sum (alpha 1: a sum times one is itself); then the
 * padding's + 0 and alpha in the caller's mode, 8 lanes at a time (per element: the bits of
 * epilogue_block's multiply). */
__attribute__((target(AVX2))) static void stream_rows16_avx2(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                            int pad, mha_mat a, mha_mat b, mha_mat c)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    stream_rows_avx2(k, m, n, kk, 1.0f, a, b, 0.0f, c);
    _mm_setcsr(csr);
    if (!pad && alpha == 1.0f)
        return;
    const __m256 va = _mm256_set1_ps(alpha), zero = _mm256_setzero_ps();
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j += 8) {
            float *y = c.p + (ptrdiff_t)i * c.ld + j;
            __m256 x = load8_n(y, n - j);
            if (pad)
                x = _mm256_add_ps(x, zero);
            store8_n(y, n - j, _mm256_mul_ps(x, va));
        }
}

/* 8 floats rounded to bf16 as mha_bf16_round does: each in the low half of its 32-bit lane. */
static inline __attribute__((always_inline, target(AVX2))) __m256i round_lanes(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i top = _mm256_srli_epi32(u, 16);
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(top, _mm256_set1_epi32(1))), 16);
    const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    /* NaN: |u| > 0x7f800000 as signed integers (both are below 2^31) */
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i out = _mm256_blendv_epi8(r, _mm256_and_si256(top, _mm256_set1_epi32(0x8000)), tiny);
    return _mm256_blendv_epi8(out, _mm256_or_si256(top, _mm256_set1_epi32(0x0040)), nan);
}

/* The floats of 8 lanes' bf16 roundings (round_bf16_floats' bits). */
static inline __attribute__((always_inline, target(AVX2))) __m256 rounded8(__m256 x)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(round_lanes(x), 16));
}

/* rounded8's bits for lanes in [0, 1] (exp'd probabilities: no sign, NaN or carry into the
 * exponent's top to test), in half its operations: nearest even on the bits, + 0 below the
 * normal range. */
static inline __attribute__((always_inline, target(AVX2))) __m256 rounded8_unit(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd),
                                       _mm256_set1_epi32((int)0xffff0000u));
    const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), u);
    return _mm256_castsi256_ps(_mm256_andnot_si256(tiny, r));
}

/* 8 rounded lanes (low halves) as 8 contiguous bf16. */
static inline __attribute__((target(AVX2))) __m128i narrow8(__m256i r)
{
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* ---- softmax: 8 lanes; a tail runs through a padded copy so it gets the same arithmetic ---- */

/* Each step over the U vectors of x. */
#define EACH _Pragma("GCC unroll 8") for (int q = 0; q < U; q++)

/* mha_exp_poly in 8 lanes, on U <= 4 vectors in place, each step over all of them before the
 * next: the polynomial is one chain of dependent FMAs, and on Zen 1 four exps so written ran
 * 1.45× as fast as four written one after the other (18.3 cycles a vector against 26.6, a
 * loop over an L1 row; RESULTS.md, Machine F, session 25).
 * clamp 0: the softmax's x = s − max <= 0 (or a lane the caller zeroes): no clamp to
 * [MHA_EXP_LO, MHA_EXP_HI], the same bits, two operations fewer. Above MHA_EXP_LO the clamps
 * change nothing; below it, or NaN, the range mask zeroes whatever the lane computed. bf16:
 * the bf16 engines' polynomial (MHA_EXP_B*), x reduced by MHA_LN2 in one FMA. */
static inline __attribute__((always_inline, target(AVX2))) void exp8_n(__m256 *x, const int U, const int clamp,
                                                                      const int bf16)
{
    __m256 in_range[4], n[4], y[4], t[4];
    EACH in_range[q] = _mm256_cmp_ps(x[q], _mm256_set1_ps(MHA_EXP_LO), _CMP_GE_OQ);
    if (clamp)
        EACH x[q] = _mm256_min_ps(_mm256_max_ps(x[q], _mm256_set1_ps(MHA_EXP_LO)), _mm256_set1_ps(MHA_EXP_HI));
    EACH n[q] = _mm256_round_ps(_mm256_mul_ps(x[q], _mm256_set1_ps(MHA_LOG2E)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (bf16) {
        EACH x[q] = _mm256_fnmadd_ps(n[q], _mm256_set1_ps(MHA_LN2), x[q]);
        EACH y[q] = _mm256_fmadd_ps(_mm256_set1_ps(MHA_EXP_B4), x[q], _mm256_set1_ps(MHA_EXP_B3));
        EACH y[q] = _mm256_fmadd_ps(y[q], x[q], _mm256_set1_ps(MHA_EXP_B2));
        EACH y[q] = _mm256_fmadd_ps(y[q], x[q], _mm256_set1_ps(MHA_EXP_B1));
        EACH y[q] = _mm256_fmadd_ps(y[q], x[q], _mm256_set1_ps(1.0f));
    } else {
        EACH x[q] = _mm256_fnmadd_ps(n[q], _mm256_set1_ps(MHA_LN2_HI), x[q]);
        EACH x[q] = _mm256_fnmadd_ps(n[q], _mm256_set1_ps(MHA_LN2_LO), x[q]);
        EACH y[q] = _mm256_fmadd_ps(_mm256_set1_ps(MHA_EXP_P0), x[q], _mm256_set1_ps(MHA_EXP_P1));
        EACH y[q] = _mm256_fmadd_ps(y[q], x[q], _mm256_set1_ps(MHA_EXP_P2));
        EACH y[q] = _mm256_fmadd_ps(y[q], x[q], _mm256_set1_ps(MHA_EXP_P3));
        EACH y[q] = _mm256_fmadd_ps(y[q], x[q], _mm256_set1_ps(MHA_EXP_P4));
        EACH t[q] = _mm256_add_ps(x[q], _mm256_set1_ps(1.0f));
        EACH y[q] = _mm256_fmadd_ps(y[q], _mm256_mul_ps(x[q], x[q]), t[q]);
    }
    EACH {
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n[q]), _mm256_set1_epi32(127)), 23);
        x[q] = _mm256_and_ps(_mm256_mul_ps(y[q], _mm256_castsi256_ps(e)), in_range[q]);
    }
}

/* Scores j..j+7, all before visible, and in *vis all-ones lanes where each is visible: the
 * mask's 8 bytes widened, no copy. */
static inline __attribute__((always_inline, target(AVX2))) __m256 load8_whole(const float *s, const uint8_t *mask,
                                                                              int j, __m256 *vis)
{
    __m256i off = _mm256_setzero_si256(); /* lanes whose mask byte is 0 */
    if (mask)
        off = _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(mask + j))), off);
    *vis = _mm256_castsi256_ps(_mm256_xor_si256(off, _mm256_set1_epi32(-1)));
    return _mm256_loadu_ps(s + j);
}

/* Scores j..j+7 (0 past visible), and in *vis all-ones lanes where each is visible. */
__attribute__((target(AVX2))) static __m256 load8(const float *s, const uint8_t *mask, int j, int visible, __m256 *vis)
{
    int left = visible - j < 8 ? visible - j : 8;
    if (left == 8)
        return load8_whole(s, mask, j, vis);
    float buf[8] = {0};
    int32_t on[8] = {0};
    memcpy(buf, s + j, (size_t)left * sizeof *buf);
    for (int i = 0; i < left; i++)
        on[i] = (mask == NULL || mask[j + i] != 0) ? -1 : 0;
    *vis = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(const void *)on));
    return _mm256_loadu_ps(buf);
}

/* Where softmax_row_as stores the entries: s as they are, s as the floats of their bf16
 * roundings, or those bf16 in their places in a row of A tiles (then s is not written). */
enum { EXP_FLOATS, EXP_ROUNDED, EXP_TILES };

/* Entries j .. j + 7 (a vector within one k tile's 32) stored as `out` says; n of them. */
static inline __attribute__((always_inline, target(AVX2))) void store_exps(float *s, mha_bf16 *d, int j, int n,
                                                                          __m256 e, const int out)
{
    if (out == EXP_FLOATS) {
        store8_n(s + j, n, e);
        return;
    }
    const __m256 r = rounded8_unit(e);
    if (out == EXP_ROUNDED) {
        store8_n(s + j, n, r);
        return;
    }
    const __m128i h = narrow8(_mm256_srli_epi32(_mm256_castps_si256(r), 16));
    mha_bf16 *o = d + (size_t)(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K;
    if (n >= 8)
        _mm_storeu_si128((__m128i *)(void *)o, h);
    else {
        mha_bf16 tmp[8];
        _mm_storeu_si128((__m128i *)(void *)tmp, h);
        memcpy(o, tmp, (size_t)n * sizeof *tmp);
    }
}

/* Softmax pass 2's steps of 32 entries up to end (a multiple of 32, all visible), the four
 * exps step by step together (exp8_n): exp(s[j] − max), 0 where masked, stored as `out` says
 * (store_exps: one k tile's row of 32 a step). Returns their
 * sum, in lanes, added in order of j. Inlined with mask NULL or not: the unmasked loop tests
 * nothing. */
static inline __attribute__((always_inline, target(AVX2))) __m256 exp_steps(float *s, const uint8_t *mask, int end,
                                                                           __m256 vmx, mha_bf16 *d, const int out,
                                                                           const int bf16)
{
    __m256 vsum = _mm256_setzero_ps();
    for (int j0 = 0; j0 < end; j0 += 32) {
        __m256 e[4], on[4];
        for (int q = 0; q < 4; q++)
            e[q] = _mm256_sub_ps(load8_whole(s, mask, j0 + 8 * q, &on[q]), vmx);
        exp8_n(e, 4, 0, bf16);
        for (int q = 0; q < 4; q++) {
            if (mask)
                e[q] = _mm256_and_ps(e[q], on[q]);
            store_exps(s, d, j0 + 8 * q, 8, e[q], out);
            vsum = _mm256_add_ps(vsum, e[q]);
        }
    }
    return vsum;
}

/* Pass 1: the larger of max_in and the visible entries' max, the entry max's first operand
 * (a NaN one returns the second, the max so far: skipped, as ref skips it). */
static inline __attribute__((always_inline, target(AVX2))) float row_max(const float *restrict s, int visible,
                                                                        const uint8_t *restrict mask, float max_in)
{
    __m256 vmax = _mm256_set1_ps(max_in), ninf = _mm256_set1_ps(-INFINITY), vis;
    int j1 = 0;
    if (!mask) { /* whole vectors (load8's blend would keep every lane), 32 lanes a step into
                  * four accumulators: one max chain would wait on its own latency */
        __m256 m1 = vmax, m2 = vmax, m3 = vmax;
        for (; j1 + 32 <= visible; j1 += 32) {
            vmax = _mm256_max_ps(_mm256_loadu_ps(s + j1), vmax);
            m1 = _mm256_max_ps(_mm256_loadu_ps(s + j1 + 8), m1);
            m2 = _mm256_max_ps(_mm256_loadu_ps(s + j1 + 16), m2);
            m3 = _mm256_max_ps(_mm256_loadu_ps(s + j1 + 24), m3);
        }
        vmax = _mm256_max_ps(_mm256_max_ps(vmax, m1), _mm256_max_ps(m2, m3));
        for (; j1 + 8 <= visible; j1 += 8)
            vmax = _mm256_max_ps(_mm256_loadu_ps(s + j1), vmax);
    }
    for (int j = j1; j < visible; j += 8) {
        __m256 x = load8(s, mask, j, visible, &vis);
        vmax = _mm256_max_ps(_mm256_blendv_ps(ninf, x, vis), vmax);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float mx = -INFINITY;
    for (int i = 0; i < 8; i++)
        mx = lanes[i] > mx ? lanes[i] : mx;
    return mx;
}

/* Pass 2: exp(s − mx) where visible, 0 elsewhere, and the sum in order of j: 32 entries a step
 * (exp_steps), then 8. The sum is of the entries unrounded whatever `out` stores (EXP_ROUNDED:
 * softmax_row_rounded; EXP_TILES: softmax_row16, zeros in d past visible up to n rounded to the
 * k tile); bf16: the bf16 engines' exp (every `out` but EXP_FLOATS; softmax_row_bf16 for that
 * one). mx −∞: nothing visible, zeros, sum 0. */
static inline __attribute__((always_inline, target(AVX2))) float exp_pass(float *restrict s, int n, int visible,
                                                                         const uint8_t *restrict mask, float mx,
                                                                         mha_bf16 *d, const int out, const int bf16)
{
    const int kp = (int)mha_bk_kp(n);
    if (mx == -INFINITY) {
        if (out == EXP_TILES)
            for (int t = 0; t < kp; t += MHA_BT_K)
                memset(d + (size_t)(t / MHA_BT_K) * MHA_BT_ELEMS, 0, MHA_BT_K * sizeof *d);
        else
            memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    const __m256 vmx = _mm256_set1_ps(mx);
    const int j0 = visible / 32 * 32;
    __m256 vis, vsum = mask ? exp_steps(s, mask, j0, vmx, d, out, bf16) : exp_steps(s, NULL, j0, vmx, d, out, bf16);
    for (int j = j0; j < visible; j += 8) {
        __m256 x = load8(s, mask, j, visible, &vis);
        __m256 e = _mm256_sub_ps(x, vmx);
        exp8_n(&e, 1, 0, bf16);
        e = _mm256_and_ps(e, vis);
        store_exps(s, d, j, visible - j, e, out);
        vsum = _mm256_add_ps(vsum, e);
    }
    if (out == EXP_TILES)
        for (int j = visible; j < kp; j++)
            d[(size_t)(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K] = 0;
    else
        for (int j = visible; j < n; j++)
            s[j] = 0.0f;
    float lanes[8];
    _mm256_storeu_ps(lanes, vsum);
    return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

static inline __attribute__((always_inline, target(AVX2))) float softmax_row_as(float *restrict s, int n, int visible,
                                                                               const uint8_t *restrict mask,
                                                                               float *max_io, mha_bf16 *d, const int out,
                                                                               const int bf16)
{
    *max_io = row_max(s, visible, mask, *max_io);
    return exp_pass(s, n, visible, mask, *max_io, d, out, bf16);
}

__attribute__((target(AVX2))) static float softmax_row_avx2(float *restrict s, int n, int visible,
                                                             const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_FLOATS, 0);
}

/* mha_rows_walk's bodies: a whole row's max, and its exps as each table entry stores them
 * (floats; floats of their bf16 roundings; bf16 into the A panels at d). */
static inline __attribute__((always_inline, target(AVX2))) float whole_row_max(const float *s, int n)
{
    return row_max(s, n, NULL, -INFINITY);
}
static inline __attribute__((always_inline, target(AVX2))) float exps_floats(float *s, int n, float mx, mha_bf16 *d)
{
    return exp_pass(s, n, n, NULL, mx, d, EXP_FLOATS, 0);
}
static inline __attribute__((always_inline, target(AVX2))) float exps_rounded(float *s, int n, float mx, mha_bf16 *d)
{
    return exp_pass(s, n, n, NULL, mx, d, EXP_ROUNDED, 1);
}
static inline __attribute__((always_inline, target(AVX2))) float exps_tiles(float *s, int n, float mx, mha_bf16 *d)
{
    return exp_pass(s, n, n, NULL, mx, d, EXP_TILES, 1);
}

__attribute__((target(AVX2))) static void softmax_rows_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                                                            ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_floats);
}

__attribute__((target(AVX2))) static void merge_row_avx2(float *restrict z, float a, const float *restrict zc, float b,
                                                         int n)
{
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(z + j, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(z + j), va),
                                              _mm256_mul_ps(_mm256_loadu_ps(zc + j), vb)));
    for (; j < n; j++)
        z[j] = z[j] * a + zc[j] * b;
}

__attribute__((target(AVX2))) static void scale_row_avx2(float *z, const float *x, float s, int n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(z + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), vs));
    for (; j < n; j++)
        z[j] = x[j] * s;
}

__attribute__((target(AVX2))) static float softmax_row_bf16_avx2(float *restrict s, int n, int visible,
                                                                  const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_FLOATS, 1);
}

__attribute__((target(AVX2))) static float softmax_row_rounded_avx2(float *restrict s, int n, int visible,
                                                                     const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_ROUNDED, 1);
}

__attribute__((target(AVX2))) static void softmax_rows_rounded_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                                    float *sum, ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_rounded);
}

__attribute__((target(AVX2))) static float softmax_row16_avx2(float *restrict s, int n, int visible,
                                                               const uint8_t *restrict mask, float *max_io, mha_bf16 *d)
{
    return softmax_row_as(s, n, visible, mask, max_io, d, EXP_TILES, 1);
}

__attribute__((target(AVX2))) static void softmax_rows16_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                              float *sum, ptrdiff_t st, mha_bf16 *d)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, d, whole_row_max, exps_tiles);
}

/* Logit softcapping: cap · tanh(s / cap), 8 lanes, both of mha_tanh_poly's branches blended;
 * 32 entries a step, their exps step by step together (exp8_n), then 8. */
static inline __attribute__((always_inline, target(AVX2))) void softcap_vecs(float *s, int n, float cap, const int U)
{
    const __m256 vc = _mm256_set1_ps(cap), sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 x[4], z[4], e[4];
    EACH {
        x[q] = _mm256_div_ps(load8_n(s + 8 * q, n - 8 * q), vc);
        z[q] = _mm256_andnot_ps(sign, x[q]);
        e[q] = _mm256_add_ps(z[q], z[q]);
    }
    exp8_n(e, U, 1, 0);
    EACH {
        const __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e[q], one)));
        const __m256 zz = _mm256_mul_ps(z[q], z[q]);
        __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(MHA_TANH_P0), zz, _mm256_set1_ps(MHA_TANH_P1));
        p = _mm256_fmadd_ps(p, zz, _mm256_set1_ps(MHA_TANH_P2));
        p = _mm256_fmadd_ps(p, zz, _mm256_set1_ps(MHA_TANH_P3));
        p = _mm256_fmadd_ps(p, zz, _mm256_set1_ps(MHA_TANH_P4));
        const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, zz), z[q], z[q]);
        const __m256 far = _mm256_cmp_ps(z[q], _mm256_set1_ps(MHA_TANH_SPLIT), _CMP_GT_OQ);
        const __m256 t = _mm256_or_ps(_mm256_blendv_ps(small, big, far), _mm256_and_ps(x[q], sign));
        store8_n(s + 8 * q, n - 8 * q, _mm256_mul_ps(t, vc));
    }
}

__attribute__((target(AVX2))) static void softcap_row_avx2(float *s, int n, float cap)
{
    int j = 0;
    for (; j + 32 <= n; j += 32)
        softcap_vecs(s + j, 32, cap, 4);
    for (; j < n; j += 8)
        softcap_vecs(s + j, n - j, cap, 1);
}

/* int8 cache elements to float32, 8 at a time; a tail through a padded copy. */
__attribute__((target(AVX2))) static __m256 i8_load8(const int8_t *src, int n)
{
    int64_t bytes = 0;
    memcpy(&bytes, src, (size_t)(n < 8 ? n : 8));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes)));
}

__attribute__((target(AVX2))) static void i8_scale_rows_avx2(const void *from, size_t ld_src, int rows, int n,
                                                             const float *row_scales, const float *row_zeros,
                                                             float *restrict dst, size_t ld_dst)
{
    const int8_t *src = from;
    for (int r = 0; r < rows; r++, src += ld_src, dst += ld_dst) {
        const __m256 rs = _mm256_set1_ps(row_scales[r]), rz = _mm256_set1_ps(row_zeros ? row_zeros[r] : 0.0f);
        for (int t = 0; t < n; t += 8) {
            const __m256 x = _mm256_mul_ps(i8_load8(src + t, n - t), rs);
            store8_n(dst + t, n - t, row_zeros ? _mm256_add_ps(x, rz) : x);
        }
    }
}

/* ---- RoPE ---- */

/* Eight pairs at a time: products and the difference or sum each rounded once, as ref. */
__attribute__((target(AVX2))) static void rope_halves_avx2(float *a, float *b, const float *c, const float *s,
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
__attribute__((target(AVX2))) static void rope_pairs_avx2(float *x, const float *c, const float *s, float sign, int n)
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

/* ---- decode tiles: float32, and bf16 or int8 widened in registers ---- */

/* n elements (1..8) of a cache row at x as float32 lanes, lanes from n on zero: float32 as it
 * is, bf16 widened (a shift), int8 converted (exact); a short bf16 or int8 run through a
 * zeroed copy (no read past it). */
static inline __attribute__((always_inline, target(AVX2))) __m256 load_elems(const mha_kv_type type, const char *x,
                                                                            int n)
{
    if (type == MHA_KV_F32)
        return load8_n((const float *)(const void *)x, n);
    __m128i raw;
    if (n >= 8)
        raw = type == MHA_KV_BF16 ? _mm_loadu_si128((const __m128i *)(const void *)x) : _mm_loadl_epi64((const __m128i *)(const void *)x);
    else {
        _Alignas(16) char tmp[16] = {0};
        memcpy(tmp, x, (size_t)n * mha_kv_elem_size(type));
        raw = _mm_load_si128((const __m128i *)(const void *)tmp);
    }
    if (type == MHA_KV_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
}

/* Scores of nb <= R queries for nv <= V slot vectors (of any blocks), R · V <= 8
 * accumulators, each score one FMA chain over the features [c0, c1) from zero, then scale ·
 * sum (+ sc when c0 > 0): the microkernel's sums. One Kᵀ row load per feature and vector for
 * all queries; the next tile's vectors (pf, npf of them; else this tile's again) prefetched
 * row by row as it goes. full: nb = R, nv = V and every vector 8 slots wide, so no lane or
 * row is tested in the loop (the accumulators stay in registers). */
static inline __attribute__((always_inline, target(AVX2))) void
scores_tile(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *restrict q,
            int nb, int dk, int c0, int c1, const mha_slot_vec *v, int nv, const mha_slot_vec *pf, int npf, int ld,
            float scale, float *restrict sc, size_t sc_ld)
{
    if (full)
        nb = R, nv = V;
    const mha_f16 *kp[8]; /* scaled (int8 K): each vector's group parameters, float16 */
    for (int j = 0; j < V; j++)
        kp[j] = scaled && j < nv ? v[j].kp : NULL;
    const char *pfp[8];
    for (int j = 0; j < V; j++)
        pfp[j] = j < npf ? pf[j].kt : v[j < nv ? j : 0].kt;
    /* the vectors' value rows (when given): a line each feature from the first, till done */
    size_t vbytes[8];
    for (int j = 0; j < V; j++)
        vbytes[j] = j < nv && v[j].v ? (size_t)(full ? 8 : v[j].lanes) * (size_t)dk * mha_kv_elem_size(type) : 0;
    __m256 acc[8];
    for (int i = 0; i < R * V; i++)
        acc[i] = _mm256_setzero_ps();
    for (int c = c0; c < c1; c++) {
        const size_t at = (size_t)c * ld * mha_kv_elem_size(type), line = (size_t)(c - c0) * 64;
        __m256 krow[8];
        for (int j = 0; j < V; j++) {
            if (line < vbytes[j])
                _mm_prefetch(v[j].v + line, _MM_HINT_T0);
            _mm_prefetch(pfp[j] + at, _MM_HINT_T0);
            krow[j] = j >= nv ? _mm256_setzero_ps() : load_elems(type, v[j].kt + at, full ? 8 : v[j].lanes);
            if (scaled && j < nv) /* q·scale + zero, scale_rows' value */
                krow[j] = _mm256_add_ps(_mm256_mul_ps(krow[j], _mm256_set1_ps(_cvtsh_ss(kp[j][c]))),
                                        _mm256_set1_ps(_cvtsh_ss(kp[j][dk + c])));
        }
        for (int r = 0; r < R; r++)
            if (r < nb) {
                const __m256 x = _mm256_set1_ps(q[(size_t)r * dk + c]);
                for (int j = 0; j < V; j++)
                    acc[r * V + j] = _mm256_fmadd_ps(x, krow[j], acc[r * V + j]);
            }
    }
#pragma GCC unroll 8 /* constant indices: a loop over acc would keep it in memory, stored every feature */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r >= nb || j >= nv)
                continue;
            float *y = sc + (size_t)r * sc_ld + v[j].out;
            __m256 x = _mm256_mul_ps(acc[r * V + j], _mm256_set1_ps(scale));
            if (c0 > 0)
                x = _mm256_add_ps(x, load8_n(y, v[j].lanes));
            store8_n(y, v[j].lanes, x);
        }
}

/* R queries × V slot vectors over the vector list, each tile prefetching the next where ahead. */
static inline __attribute__((always_inline, target(AVX2))) void
scores_tiles(const mha_kv_type type, const int scaled, const int R, const int V, const float *restrict q, int nb, int dk,
             int c0, int c1, const mha_slot_vec *v, int nv, int ld, float scale, float *restrict sc, size_t sc_ld,
             int ahead)
{
    ahead = ahead && mha_scores_fit_l1(c1 - c0, V, 8 * mha_kv_elem_size(type));
    if (type != MHA_KV_F32 && ahead) /* the first tile's Kᵀ: nothing prefetched it */
        for (int j = 0; j < V && j < nv; j++)
            for (size_t off = 0; off < (size_t)(c1 - c0) * ld * mha_kv_elem_size(type); off += 64)
                _mm_prefetch(v[j].kt + (size_t)c0 * ld * mha_kv_elem_size(type) + off, _MM_HINT_T0);
    mha_scores_walk(type, scaled, R, V, 8, q, nb, dk, c0, c1, v, nv, ld, scale, sc, sc_ld, ahead, scores_tile);
}

/* Slot vectors of 8 from every block of the chunk: 1 query × 8 vectors, 2 × 4, up to 4 × 2,
 * more 8 × 1 at a time (8 independent chains). */
static inline __attribute__((always_inline, target(AVX2))) void
scores(const mha_kv_type type, const int scaled, const float *restrict q, int nq, int dk, int c0, int c1, int runs,
       const void *const *kt, const void *const *vr, const mha_f16 *const *kp, const int *n, int ld, float scale,
       float *restrict sc, size_t sc_ld)
{
    mha_slot_vec v[MHA_KV_CHUNK];
    const int nv = mha_slot_vecs(runs, kt, vr, (size_t)dk * mha_kv_elem_size(type), kp, dk, n, 8, mha_kv_elem_size(type), v);
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *qq = q + (size_t)q0 * dk;
        float *sq = sc + (size_t)q0 * sc_ld;
        if (nb == 1)
            scores_tiles(type, scaled, 1, 8, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb == 2)
            scores_tiles(type, scaled, 2, 4, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4)
            scores_tiles(type, scaled, 4, 2, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else
            scores_tiles(type, scaled, 8, 1, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
    }
}

/* rows_scores: four queries as the lanes of an xmm register (their features transposed into
 * qt, 4 a feature), J keys a tile, each key's feature broadcast: J accumulators, one FMA chain
 * per score in feature order (Zen 1 runs two 128-bit FMAs a cycle, the 256-bit rate, and
 * nothing is transposed but the queries); swap: in the order c ^ 1, each pair's odd feature
 * first (dk even). The next tile's rows prefetched a line a row every 16 features, and (v)
 * this tile's value rows (rows t on of v) into L2 as often. */
enum { ROWS_KEYS = 12 };

static inline __attribute__((always_inline, target(AVX2))) void keys_tile(const int J, const int swap,
                                                                         const float *restrict qt, int dk,
                                                                         const float *restrict k, ptrdiff_t ld, int nq,
                                                                         float scale, float *restrict sc, size_t sc_ld,
                                                                         const mha_rows_ahead *v, int t)
{
    __m128 acc[ROWS_KEYS];
    for (int u = 0; u < J; u++)
        acc[u] = _mm_setzero_ps();
    for (int c = 0; c < dk; c++) {
        if (c % 16 == 0) {
            const size_t line = (size_t)c / 16 * 64;
            for (int u = 0; u < J; u++) {
                _mm_prefetch((const char *)(k + (ptrdiff_t)(J + u) * ld + c), _MM_HINT_T0);
                if (v && line < v->bytes)
                    _mm_prefetch(v->at + (size_t)(t + u) * v->ld + line, _MM_HINT_T1);
            }
        }
        const __m128 qc = _mm_load_ps(qt + 4 * c);
        for (int u = 0; u < J; u++)
            acc[u] = _mm_fmadd_ps(qc, _mm_broadcast_ss(k + (ptrdiff_t)u * ld + (c ^ swap)), acc[u]);
    }
    _Alignas(16) float out[ROWS_KEYS][4];
    for (int u = 0; u < J; u++)
        _mm_store_ps(out[u], _mm_mul_ps(acc[u], _mm_set1_ps(scale)));
    for (int r = 0; r < nq; r++)
        for (int u = 0; u < J; u++)
            sc[(size_t)r * sc_ld + u] = out[u][r];
}

static inline __attribute__((always_inline, target(AVX2))) void rows_scores_as(const int swap, const float *restrict q,
                                                                              int nq, int dk, const float *restrict k,
                                                                              ptrdiff_t ld, int n, float scale,
                                                                              float *restrict sc, size_t sc_ld,
                                                                              const mha_rows_ahead *v)
{
    _Alignas(16) float qt[4 * MHA_ROWS_SCORES_DK];
    for (int r0 = 0; r0 < nq; r0 += 4) {
        const int nr = nq - r0 < 4 ? nq - r0 : 4;
        for (int c = 0; c < dk; c++) /* lanes past the last query: zeros, their scores unstored */
            for (int r = 0; r < 4; r++)
                qt[4 * c + r] = r < nr ? q[(size_t)(r0 + r) * dk + (c ^ swap)] : 0.0f;
        float *s = sc + (size_t)r0 * sc_ld;
        int t = 0;
        const mha_rows_ahead *pv = v && v->at && r0 == 0 ? v : NULL; /* the first pass prefetches */
        for (; t + ROWS_KEYS <= n; t += ROWS_KEYS)
            keys_tile(ROWS_KEYS, swap, qt, dk, k + (ptrdiff_t)t * ld, ld, nr, scale, s + t, sc_ld, pv, t);
        for (; t + 4 <= n; t += 4)
            keys_tile(4, swap, qt, dk, k + (ptrdiff_t)t * ld, ld, nr, scale, s + t, sc_ld, pv, t);
        for (; t < n; t++)
            keys_tile(1, swap, qt, dk, k + (ptrdiff_t)t * ld, ld, nr, scale, s + t, sc_ld, pv, t);
    }
}

__attribute__((target(AVX2))) void mha_rows_scores_avx2(const float *restrict q, int nq, int dk,
                                                        const float *restrict k, ptrdiff_t ld, int n, float scale,
                                                        float *restrict sc, size_t sc_ld, const mha_rows_ahead *v)
{
    rows_scores_as(0, q, nq, dk, k, ld, n, scale, sc, sc_ld, v);
}

/* Under DAZ and FTZ with scale 1, as decode_scores16 sums (a sum times one is itself), then
 * its finish in the caller's mode. */
__attribute__((target(AVX2))) void mha_rows_scores16_avx2(const float *restrict q, int nq, int dk,
                                                          const float *restrict k, ptrdiff_t ld, int n, float scale,
                                                          float *restrict sc, size_t sc_ld, mha_bk_order order,
                                                          const mha_rows_ahead *v)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    if (order == MHA_BK_ODD_FIRST)
        rows_scores_as(1, q, nq, dk, k, ld, n, 1.0f, sc, sc_ld, v);
    else
        rows_scores_as(0, q, nq, dk, k, ld, n, 1.0f, sc, sc_ld, v);
    _mm_setcsr(csr);
    mha_scores16_finish(sc, sc_ld, nq, 1, &n, dk, scale);
}

__attribute__((target(AVX2))) static void decode_scores_avx2(const float *restrict q, int nq, int dk, int c0, int c1,
                                                            int runs, const void *const *kt, const void *const *vr,
                                                            const mha_f16 *const *kp, const int *n, int ld, float scale,
                                                            float *restrict sc, size_t sc_ld)
{
    (void)kp; /* unscaled */
    scores(MHA_KV_F32, 0, q, nq, dk, c0, c1, runs, kt, vr, NULL, n, ld, scale, sc, sc_ld);
}

__attribute__((target(AVX2))) static void decode_scores8_avx2(const float *restrict q, int nq, int dk, int c0, int c1,
                                                             int runs, const void *const *kt, const void *const *vr,
                                                             const mha_f16 *const *kp, const int *n, int ld, float scale,
                                                             float *restrict sc, size_t sc_ld)
{
    scores(MHA_KV_INT8, 1, q, nq, dk, c0, c1, runs, kt, vr, kp, n, ld, scale, sc, sc_ld);
}

/* The sums under FTZ, as the bf16 kernels run (scale 1: a sum times one is itself), then
 * the padding's + 0 and the scale in the caller's mode. */
__attribute__((target(AVX2))) static void decode_scores16_avx2(const float *restrict q, int nq, int dk, int runs,
                                                              const void *const *kt, const void *const *vr,
                                                              const int *n, int ld, float scale, float *restrict sc,
                                                              size_t sc_ld, mha_bk_order order)
{
    (void)order; /* even first only */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    scores(MHA_KV_BF16, 0, q, nq, dk, 0, dk, runs, kt, vr, NULL, n, ld, 1.0f, sc, sc_ld);
    _mm_setcsr(csr);
    mha_scores16_finish(sc, sc_ld, nq, runs, n, dk, scale);
}

/* Z of nb <= R queries, features [c0, c0 + 8·V) (the last vector's first nl lanes), over the
 * value rows of `runs` runs (run r: n[r] rows at v[r]; its probabilities follow the previous
 * runs' in e), with R · V <= 8 accumulators, key by key in order (an FMA per key and feature:
 * the microkernel's A·V sums); the next run's rows (the last run: next's, or none) prefetched
 * row by row as it goes, and a step of the walk w (or NULL) a key. full: nb = R and nl = 8
 * (nothing tested in the loop). scaled: key
 * t's row times vs[2t] plus vs[2t + 1] as it is loaded (an int8 cache's scale and zero point,
 * each rounded: scale_rows' values). */
static inline __attribute__((always_inline, target(AVX2))) void
values_tile_as(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *e,
               size_t e_ld, int nb, int runs, const void *const *v, const float *vs, const int *n, const void *next,
               int dk, int c0, int nl, float *p, size_t ps, mha_prefetch_walk *w)
{
    if (full)
        nb = R, nl = 8;
    const size_t esz = mha_kv_elem_size(type), row = (size_t)dk * esz;
    const size_t pf0 = (size_t)c0 * esz, pf1 = (size_t)(c0 + 8 * V < dk ? c0 + 8 * V : dk) * esz;
    __m256 acc[8];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < V; j++) {
            const float *y = p + (size_t)(r < nb ? r : 0) * ps + c0 + 8 * j;
            acc[r * V + j] = load8_n(y, j == V - 1 ? nl : 8);
        }
    mha_prefetch_walk wl = w ? *w : (mha_prefetch_walk){0}; /* in registers while the tile runs */
    for (int u = 0, t0 = 0; u < runs; t0 += n[u++]) {
        const char *vu = (const char *)v[u] + (size_t)c0 * esz, *nx = u + 1 < runs ? v[u + 1] : next;
        const float *eu = e + t0;
        for (int t = 0; t < n[u]; t++) {
            if (nx)
                for (size_t off = pf0; off < pf1; off += 64)
                    _mm_prefetch(nx + (size_t)t * row + off, _MM_HINT_T0);
            if (w)
                mha_prefetch_step(&wl);
            __m256 b[4];
            const __m256 s = scaled ? _mm256_set1_ps(vs[2 * (t0 + t)]) : _mm256_setzero_ps();
            const __m256 z = scaled ? _mm256_set1_ps(vs[2 * (t0 + t) + 1]) : _mm256_setzero_ps();
            for (int j = 0; j < V; j++) {
                b[j] = load_elems(type, vu + (size_t)t * row + (size_t)(8 * j) * esz, j == V - 1 ? nl : 8);
                b[j] = scaled ? _mm256_add_ps(_mm256_mul_ps(b[j], s), z) : b[j];
            }
            for (int r = 0; r < R; r++)
                if (r < nb) {
                    const __m256 x = _mm256_set1_ps(eu[(size_t)r * e_ld + t]);
                    for (int j = 0; j < V; j++)
                        acc[r * V + j] = _mm256_fmadd_ps(x, b[j], acc[r * V + j]);
                }
        }
    }
#pragma GCC unroll 8 /* as scores_tile's */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r < nb)
                store8_n(p + (size_t)r * ps + c0 + 8 * j, j == V - 1 ? nl : 8, acc[r * V + j]);
        }
    if (w)
        *w = wl;
}

static inline __attribute__((always_inline, target(AVX2))) void
values_tile(const mha_kv_type type, const int scaled, const int R, const int V, const float *e, size_t e_ld, int nb,
            int runs, const void *const *v, const float *vs, const int *n, const void *next, int dk, int c0, int nl,
            float *p, size_t ps, mha_prefetch_walk *w)
{
    if (nb == R && nl == 8)
        values_tile_as(type, scaled, R, V, 1, e, e_ld, nb, runs, v, vs, n, next, dk, c0, nl, p, ps, w);
    else
        values_tile_as(type, scaled, R, V, 0, e, e_ld, nb, runs, v, vs, n, next, dk, c0, nl, p, ps, w);
}

/* Register tiles of up to 2 queries × 32 features, 4 × 16 or 8 × 8, 8 features the last pass,
 * each over every run. */
static inline __attribute__((always_inline, target(AVX2))) void
values(const mha_kv_type type, const int scaled, const float *e, size_t e_ld, int nq, int runs, const void *const *v,
       const float *vs, const int *n, const void *next, int dk, float *p, size_t ps, mha_prefetch_walk *w)
{
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *eq = e + (size_t)q0 * e_ld;
        float *pq = p + (size_t)q0 * ps;
        const void *pf = q0 == 0 ? next : NULL;
        for (int c0 = 0; c0 < dk;) {
            const int left = dk - c0;
            if (nb <= 2 && left >= 32)
                values_tile(type, scaled, 2, 4, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 8, pq, ps, w), c0 += 32;
            else if (nb <= 4 && left >= 16)
                values_tile(type, scaled, 4, 2, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 8, pq, ps, w), c0 += 16;
            else
                values_tile(type, scaled, 8, 1, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, left < 8 ? left : 8, pq, ps,
                            w), c0 += 8;
        }
    }
}

__attribute__((target(AVX2))) static void decode_values_avx2(const float *e, size_t e_ld, int nq, const void *v,
                                                            const float *vs, int n, int dk, float *p, size_t ps,
                                                            const void *next, mha_prefetch_walk *w)
{
    (void)vs; /* unscaled */
    const void *vr[1] = {v};
    values(MHA_KV_F32, 0, e, e_ld, nq, 1, vr, NULL, &n, next, dk, p, ps, w);
}

__attribute__((target(AVX2))) static void decode_values8_avx2(const float *e, size_t e_ld, int nq, const void *v,
                                                             const float *vs, int n, int dk, float *p, size_t ps,
                                                             const void *next, mha_prefetch_walk *w)
{
    const void *vr[1] = {v};
    values(MHA_KV_INT8, 1, e, e_ld, nq, 1, vr, vs, &n, next, dk, p, ps, w);
}

/* Under FTZ, as the bf16 kernels sum; then the key padding's + 0. */
__attribute__((target(AVX2))) static void decode_values16_avx2(const float *e, size_t e_ld, int nq, int runs,
                                                              const void *const *v, const int *n, mha_kv_type type,
                                                              int dk, float *p, size_t ps, const mha_prefetch *pf,
                                                              mha_bk_order order)
{
    (void)pf, (void)order; /* even first only */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    if (type == MHA_KV_INT8)
        values(MHA_KV_INT8, 0, e, e_ld, nq, runs, v, NULL, n, NULL, dk, p, ps, NULL);
    else
        values(MHA_KV_BF16, 0, e, e_ld, nq, runs, v, NULL, n, NULL, dk, p, ps, NULL);
    _mm_setcsr(csr);
    int keys = 0;
    for (int r = 0; r < runs; r++)
        keys += n[r];
    mha_values16_finish(p, ps, nq, keys, dk);
}

/* ---- bf16: rounding, packing, epilogue ---- */

/* Runs within one 8-wide quarter of a tile row, 8 lanes at a time. */
__attribute__((target(AVX2))) static void round_into_tiles_avx2(const float *src, int c, int n, mha_bf16 *d)
{
    for (int t = 0; t < n;) {
        const int e = c + t, run = 8 - e % 8 < n - t ? 8 - e % 8 : n - t;
        mha_bf16 *o = d + (size_t)(e / MHA_BT_K) * MHA_BT_ELEMS + e % MHA_BT_K;
        const __m128i h = narrow8(round_lanes(load8_n(src + t, run)));
        if (run == 8)
            _mm_storeu_si128((__m128i *)(void *)o, h);
        else {
            mha_bf16 tmp[8];
            _mm_storeu_si128((__m128i *)(void *)tmp, h);
            memcpy(o, tmp, (size_t)run * sizeof *tmp);
        }
        t += run;
    }
}

/* 8 lanes at a time: the rounded bits back in the high halves. */
__attribute__((target(AVX2))) static void round_bf16_floats_avx2(float *x, int n)
{
    for (int i = 0; i < n; i += 8)
        store8_n(x + i, n - i, rounded8(load8_n(x + i, n - i)));
}

__attribute__((target(AVX2))) static void round_to_bf16_avx2(const float *restrict x, int n, mha_bf16 *restrict d)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(d + i), narrow8(round_lanes(_mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        d[i] = mha_bf16_round(x[i]);
}

/* 16 int8 to 16 bf16: widened to int32 8 at a time, converted (exact), the floats' high halves
 * packed back in order. */
__attribute__((target(AVX2))) static inline __m256i bf16_of_i8(const int8_t *src)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)src);
    const __m256i lo = _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))), 16);
    const __m256i hi =
        _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)))), 16);
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

/* Two rows of 16 (bf16, or int8 converted: i8 a constant) into pairs: unpacklo/hi interleave
 * within 128-bit lanes (elements 0-3 | 8-11 and 4-7 | 12-15), the lane permutes put 0-7 and
 * 8-15 in order; a line of next per pf bytes a pair. */
static inline __attribute__((always_inline, target(AVX2))) void
interleave_rows(const int i8, const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next, int pf)
{
    const size_t row = ld * (i8 ? 1 : sizeof(mha_bf16));
    const char *r = src;
    for (int p = 0; p < pairs; p++, r += 2 * row, dst += 2 * MHA_BT_N) {
        if (next)
            _mm_prefetch(next + (size_t)pf * p, _MM_HINT_T0);
        const __m256i a = i8 ? bf16_of_i8((const int8_t *)r) : _mm256_loadu_si256((const void *)r);
        const __m256i b = i8 ? bf16_of_i8((const int8_t *)(r + row)) : _mm256_loadu_si256((const void *)(r + row));
        const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
        _mm256_storeu_si256((void *)dst, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((void *)(dst + MHA_BT_N), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

__attribute__((target(AVX2))) static void interleave_pairs_avx2(const void *src, size_t ld, int pairs,
                                                                mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(0, src, ld, pairs, dst, next, 64);
}

__attribute__((target(AVX2))) static void interleave_pairs_i8_avx2(const void *src, size_t ld, int pairs,
                                                                   mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(1, src, ld, pairs, dst, next, 32);
}

/* B panels 8 k × 8 columns at a time: 8 source rows loaded (transposed: keys' rows of 8
 * features, turned by a register transpose), each k pair rounded and interleaved into 8 words
 * (half a 64-byte VNNI row). src's 8-column runs must not cross its panels. */
__attribute__((target(AVX2))) static void pack_b16_avx2(const mha_kernel *k, mha_mat src, int transpose, int kk, int n,
                                                       mha_bf16 *dst, size_t ps)
{
    if (k->bw % 8 != 0) {
        mha_isa_ref.pack_b16(k, src, transpose, kk, n, dst, ps);
        return;
    }
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j0 = 0; j0 < np; j0 += 8)
        for (int p0 = 0; p0 < kp; p0 += 8) {
            __m256 v[8];
            /* rows of src: k (features of the keys' rows when transposed) or columns */
            const int rows = transpose ? n - j0 : kk - p0, cols = transpose ? kk - p0 : n - j0;
            for (int r = 0; r < 8; r++)
                v[r] = r < rows && cols > 0 ? load8_n(transpose ? mha_mat_at(k, src, j0 + r, p0)
                                                                : mha_mat_at(k, src, p0 + r, j0), cols)
                                            : _mm256_setzero_ps();
            if (transpose)
                transpose8(v); /* v[r]: k p0 + r over the 8 columns */
            for (int r = 0; r < 8; r += 2) {
                const __m256i pair = _mm256_or_si256(round_lanes(v[r]), _mm256_slli_epi32(round_lanes(v[r + 1]), 16));
                _mm256_storeu_si256((__m256i *)(void *)(dst + mha_bk_b_index(p0 + r, j0, ps)), pair);
            }
        }
}

/* 8 lanes at a time: a multiply and an add, no FMA, so the bits are epilogue_block_ref's. */
__attribute__((target(AVX2))) static void epilogue_block_avx2(float *c0, float *c1, ptrdiff_t ldc, const float *acc,
                                                             int rows, int cols, float alpha, float beta)
{
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int g = 0; g < cols; g += 8) {
        float *cg = (g < 16 ? c0 + g : c1 + (g - 16));
        for (int i = 0; i < rows; i++) {
            float *c = cg + (ptrdiff_t)i * ldc;
            __m256 y = _mm256_mul_ps(va, load8_n(acc + i * 32 + g, cols - g));
            if (beta != 0.0f)
                y = _mm256_add_ps(y, _mm256_mul_ps(vb, load8_n(c, cols - g)));
            store8_n(c, cols - g, y);
        }
    }
}

/* ---- bf16 products: FMA on widened bf16, even element first (the model's sums) ---- */

/* A block is summed a chunk of KCH k tiles at a time: the chunk's B panels and A rows are
 * widened to float32 once (B's pairs split into their two k rows by a shift and a mask), then
 * every row group runs a plain float32 FMA kernel on them, 6 rows × 16 columns (haswell's
 * tile: 12 accumulators), the accumulators kept in acc between chunks. Each element's sum is
 * one FMA chain in increasing k, even element of a pair first: the model's, bit for bit (the
 * products are exact). Widening once per block instead of once per row group takes the
 * shifts off the FMA ports: B is used by every row of the block. */
enum { KCH = 4 };       /* k tiles per chunk: 128 k; widened B 2 × 8 KiB, A 32 × 512 bytes */

static inline __attribute__((always_inline, target(AVX2))) void
rows_tile(const int R, int r0, int kn, const float *restrict bw, const float (*restrict aw)[KCH * 32], float *acc,
          int col0, int first, const mha_bf16 *next)
{
    __m256 c0[6], c1[6];
    for (int r = 0; r < R; r++) {
        float *y = acc + (r0 + r) * 32 + col0;
        c0[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
        c1[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8);
    }
    for (int p = 0; p < kn; p++) {
        if (next && p % 2 == 0) /* one line of the next chunk's panel per pair row of this one */
            _mm_prefetch((const char *)(next + (size_t)p * 16), _MM_HINT_T0);
        const __m256 b0 = _mm256_load_ps(bw + (size_t)p * 16), b1 = _mm256_load_ps(bw + (size_t)p * 16 + 8);
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_broadcast_ss(&aw[r0 + r][p]);
            c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *y = acc + (r0 + r) * 32 + col0;
        _mm256_storeu_ps(y, c0[r]);
        _mm256_storeu_ps(y + 8, c1[r]);
    }
}

/* Under the instructions' DAZ and FTZ, as fma-bf16 (the caller's MXCSR comes back). pf: B
 * comes from memory (a few-row product reads it once): the first row group of each panel
 * prefetches the panel's next chunk (or the next block's first) while it computes, so the
 * widening finds it in cache. */
__attribute__((target(AVX2))) static void block_avx2(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                                                    size_t ps, float *acc, int pf)
{
    _Alignas(32) float bw[2][KCH * 32 * 16]; /* widened B: [panel][k][column] */
    _Alignas(32) float aw[32][KCH * 32];     /* widened A: [row][k] */
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    for (int t0 = 0; t0 < kt; t0 += KCH) {
        const int tn = kt - t0 < KCH ? kt - t0 : KCH, kn = tn * 32;
        for (int j = 0; j < npan; j++)
            for (int q = 0; q < tn * 16; q++) { /* pair row q of the chunk: k 2q and 2q + 1 */
                const mha_bf16 *bp = b + (size_t)j * ps + (size_t)t0 * MHA_BT_ELEMS + (size_t)q * 32;
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)bp);
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(bp + 16));
                float *even = bw[j] + (size_t)(2 * q) * 16, *odd = even + 16;
                _mm256_store_ps(even, _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)));
                _mm256_store_ps(even + 8, _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)));
                _mm256_store_ps(odd, _mm256_castsi256_ps(_mm256_and_si256(v0, hi)));
                _mm256_store_ps(odd + 8, _mm256_castsi256_ps(_mm256_and_si256(v1, hi)));
            }
        for (int r = 0; r < rows; r++) {
            const mha_bf16 *src = a + mha_bk_a_row(r, kt) + (size_t)t0 * MHA_BT_ELEMS;
            for (int t = 0; t < tn; t++)
                for (int h = 0; h < 4; h++) {
                    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)t * MHA_BT_ELEMS + 8 * h));
                    _mm256_store_ps(&aw[r][t * 32 + 8 * h],
                                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)));
                }
        }
        for (int j = 0; j < npan; j++) {
            const mha_bf16 *next = !pf ? NULL
                                   : t0 + KCH < kt ? b + (size_t)j * ps + (size_t)(t0 + KCH) * MHA_BT_ELEMS
                                                   : b + (size_t)(npan + j) * ps;
            int r0 = 0;
            for (; r0 + 6 <= rows; r0 += 6)
                rows_tile(6, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL);
            if (rows - r0 >= 4)
                rows_tile(4, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL), r0 += 4;
            if (rows - r0 >= 2)
                rows_tile(2, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL), r0 += 2;
            if (rows - r0 >= 1)
                rows_tile(1, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL);
        }
    }
    _mm_setcsr(csr);
}

static const mha_bkernel bk_avx2 = {.name = "avx2-bf16", .order = MHA_BK_EVEN_FIRST, .block = block_avx2};

/* ---- the table ---- */

/* Debian's BLIS picks haswell's kernels on Intel and zen3's on AMD. */
static const char *default_arch_avx2(void)
{
    return __builtin_cpu_is("amd") ? "zen3" : "haswell";
}

static const mha_bkernel *bf16_auto_avx2(void)
{
    return &bk_avx2;
}

const mha_isa mha_isa_avx2 = {
    .name = "avx2",
    .needs = "avx2 fma f16c",
    .archs = {"haswell", "zen3", "zen2", "zen", NULL},
    .default_arch = default_arch_avx2,
    .bf16 = {&bk_avx2, NULL},
    .bf16_auto = bf16_auto_avx2,
    .pack_rows = pack_rows_avx2,
    .stream_rows = stream_rows_avx2,
    .stream_bw = 16,
    .stream_arch = "haswell",
    .stream_in_place = stream_in_place_avx2,
    .stream_rows16 = stream_rows16_avx2,
    .rope_halves = rope_halves_avx2,
    .rope_pairs = rope_pairs_avx2,
    .softmax_row = softmax_row_avx2,
    .softmax_rows = softmax_rows_avx2,
    .merge_row = merge_row_avx2,
    .scale_row = scale_row_avx2,
    .softmax_row_bf16 = softmax_row_bf16_avx2,
    .softmax_row_rounded = softmax_row_rounded_avx2,
    .softmax_rows_rounded = softmax_rows_rounded_avx2,
    .softmax_row16 = softmax_row16_avx2,
    .softmax_rows16 = softmax_rows16_avx2,
    .softcap_row = softcap_row_avx2,
    .scale_rows = {[MHA_KV_INT8] = i8_scale_rows_avx2},
    .decode_scores = {[MHA_KV_F32] = decode_scores_avx2, [MHA_KV_INT8] = decode_scores8_avx2},
    .rows_scores = mha_rows_scores_avx2,
    .rows_scores16 = mha_rows_scores16_avx2,
    .decode_values = {[MHA_KV_F32] = decode_values_avx2, [MHA_KV_INT8] = decode_values8_avx2},
    .decode16_orders = 1u << MHA_BK_EVEN_FIRST,
    .decode_scores16 = decode_scores16_avx2,
    .decode_values16 = decode_values16_avx2,
    .round_into_tiles = round_into_tiles_avx2,
    .round_bf16_floats = round_bf16_floats_avx2,
    .round_to_bf16 = round_to_bf16_avx2,
    .pack_b16 = pack_b16_avx2,
    .interleave_pairs = {[MHA_KV_BF16] = interleave_pairs_avx2, [MHA_KV_INT8] = interleave_pairs_i8_avx2},
    .epilogue_block = epilogue_block_avx2,
};
