/* avx2_softmax.c — the avx2 table's softmax rows (float32, the bf16 engines', rounded to bf16
 * as floats or straight into bf16 A tiles), the merge rule's row loops and the logit softcap:
 * 8 lanes, four exps step by step together, the exp of exp_poly.h. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2.h"
#include "exp_poly.h"
#include "loops.h"

/* ---- softmax: 8 lanes; a tail runs through a padded copy so it gets the same arithmetic ---- */

/* Each step over the U vectors of x. */
#define EACH _Pragma("GCC unroll 8") for (int q = 0; q < U; q++)

/* mha_exp_poly in 8 lanes, on U <= 4 vectors in place, each step over all of them before the
 * next: the polynomial is one chain of dependent FMAs, so four chains interleaved keep the FMA
 * units busy through each other's latency, where four exps written one after the other leave
 * a core with a short window (Zen 1's) waiting on each chain in turn.
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

__attribute__((target(AVX2))) float mha_softmax_row_avx2(float *restrict s, int n, int visible,
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

__attribute__((target(AVX2))) void mha_softmax_rows_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                                                         ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_floats);
}

__attribute__((target(AVX2))) void mha_merge_row_avx2(float *restrict z, float a, const float *restrict zc, float b,
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

__attribute__((target(AVX2))) void mha_scale_row_avx2(float *z, const float *x, float s, int n)
{
    const __m256 vs = _mm256_set1_ps(s);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(z + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), vs));
    for (; j < n; j++)
        z[j] = x[j] * s;
}

__attribute__((target(AVX2))) float mha_softmax_row_bf16_avx2(float *restrict s, int n, int visible,
                                                               const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_FLOATS, 1);
}

__attribute__((target(AVX2))) float mha_softmax_row_rounded_avx2(float *restrict s, int n, int visible,
                                                                  const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_ROUNDED, 1);
}

__attribute__((target(AVX2))) void mha_softmax_rows_rounded_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                                 float *sum, ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_rounded);
}

__attribute__((target(AVX2))) float mha_softmax_row16_avx2(float *restrict s, int n, int visible,
                                                            const uint8_t *restrict mask, float *max_io, mha_bf16 *d)
{
    return softmax_row_as(s, n, visible, mask, max_io, d, EXP_TILES, 1);
}

__attribute__((target(AVX2))) void mha_softmax_rows16_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx,
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

__attribute__((target(AVX2))) void mha_softcap_row_avx2(float *s, int n, float cap)
{
    int j = 0;
    for (; j + 32 <= n; j += 32)
        softcap_vecs(s + j, 32, cap, 4);
    for (; j < n; j += 8)
        softcap_vecs(s + j, n - j, cap, 1);
}
