/* avx512_softmax.c — the avx512 table's softmax rows (float32, the bf16 engines', and rounded
 * straight into bf16 A tiles), the merge rule's row loops and the logit softcap: 16 lanes,
 * tails and masks as k-registers, the exp of exp_poly.h. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx512.h"
#include "exp_poly.h"
#include "loops.h"

/* ---- softmax: 16 lanes, tails and masks as k-registers ---- */

/* mha_exp_poly on 16 lanes with FMA; 2^n applied by vscalefps (y·2^n rounded once: the
 * multiply by 2^n's bits it replaces, bit for bit). clamp 0: the caller's x are at most 0
 * (or NaN), as a softmax's x − max: the range clamps are left out (a lane below MHA_EXP_LO is
 * zeroed all the same), not the bits of any lane. bf16: the bf16 engines' polynomial
 * (MHA_EXP_B*), x reduced by MHA_LN2 in one FMA. */
static inline __attribute__((always_inline, target(AVX512))) __m512 exp16_lanes(__m512 x, const int clamp,
                                                                               const int bf16)
{
    const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MHA_EXP_LO), _CMP_GE_OQ);
    if (clamp)
        x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(MHA_EXP_LO)), _mm512_set1_ps(MHA_EXP_HI));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(MHA_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 y;
    if (bf16) {
        x = _mm512_fnmadd_ps(n, _mm512_set1_ps(MHA_LN2), x);
        y = _mm512_fmadd_ps(_mm512_set1_ps(MHA_EXP_B4), x, _mm512_set1_ps(MHA_EXP_B3));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_B2));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_B1));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
    } else {
        x = _mm512_fnmadd_ps(n, _mm512_set1_ps(MHA_LN2_HI), x);
        x = _mm512_fnmadd_ps(n, _mm512_set1_ps(MHA_LN2_LO), x);
        y = _mm512_fmadd_ps(_mm512_set1_ps(MHA_EXP_P0), x, _mm512_set1_ps(MHA_EXP_P1));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_P2));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_P3));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_P4));
        y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    }
    return _mm512_maskz_scalef_ps(in_range, y, n);
}

__attribute__((target(AVX512))) static __m512 exp16(__m512 x)
{
    return exp16_lanes(x, 1, 0);
}

/* Lanes j..j+15 that are below `visible` and not hidden by the explicit mask. */
__attribute__((target(AVX512))) static __mmask16 lanes16(const uint8_t *mask, int j, int visible)
{
    int left = visible - j;
    __mmask16 k = first16(left);
    if (mask) {
        uint8_t bytes[16] = {0};
        memcpy(bytes, mask + j, (size_t)(left >= 16 ? 16 : left));
        __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)bytes));
        k &= _mm512_test_epi32_mask(m, m);
    }
    return k;
}

/* Pass 1 of softmax_row: the larger of *max_io and the visible entries' max; without a mask,
 * 64 lanes per step into four accumulators (one max chain would wait on its own latency). The
 * entry is max's first operand: where it is NaN, the instruction returns the second, the max
 * so far (a NaN is skipped, as ref's comparison skips it). */
static inline __attribute__((always_inline, target(AVX512))) float softmax_max(const float *restrict s, int visible,
                                                                              const uint8_t *restrict mask,
                                                                              float max_in)
{
    __m512 vmax = _mm512_set1_ps(max_in), m1 = vmax, m2 = vmax, m3 = vmax;
    int j0 = 0;
    if (!mask)
        for (; j0 + 64 <= visible; j0 += 64) {
            vmax = _mm512_max_ps(_mm512_loadu_ps(s + j0), vmax);
            m1 = _mm512_max_ps(_mm512_loadu_ps(s + j0 + 16), m1);
            m2 = _mm512_max_ps(_mm512_loadu_ps(s + j0 + 32), m2);
            m3 = _mm512_max_ps(_mm512_loadu_ps(s + j0 + 48), m3);
        }
    vmax = _mm512_max_ps(_mm512_max_ps(vmax, m1), _mm512_max_ps(m2, m3));
    for (int j = j0; j < visible; j += 16) {
        __mmask16 k = lanes16(mask, j, visible);
        vmax = _mm512_mask_max_ps(vmax, k, _mm512_maskz_loadu_ps(k, s + j), vmax);
    }
    return _mm512_reduce_max_ps(vmax);
}

/* Pass 2's 16 entries from j: exp(s − max) where visible and not masked, else 0 (bf16: the
 * bf16 engines' exp). */
static inline __attribute__((always_inline, target(AVX512))) __m512 exp_lanes(const int bf16, const float *s, int j,
                                                                             int visible, const uint8_t *mask,
                                                                             __m512 vmx)
{
    const __mmask16 k = j < visible ? lanes16(mask, j, visible) : 0;
    return _mm512_maskz_mov_ps(k, exp16_lanes(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vmx), 0, bf16));
}

/* Pass 2's step: the 64 visible entries from j exp'd against vmx into e (0 where the mask hides
 * one), each 16 added to its own sum (acc): a masked row sums as the same row with -inf there
 * and no mask. The unmasked step tests nothing. */
static inline __attribute__((always_inline, target(AVX512))) void exp64(const int bf16, const float *s, int j,
                                                                       const uint8_t *mask, __m512 vmx, __m512 e[4],
                                                                       __m512 acc[4])
{
    if (mask)
        for (int q = 0; q < 4; q++)
            e[q] = exp_lanes(bf16, s, j + 16 * q, j + 64, mask, vmx);
    else
        for (int q = 0; q < 4; q++)
            e[q] = exp16_lanes(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16 * q), vmx), 0, bf16);
    for (int q = 0; q < 4; q++)
        acc[q] = _mm512_add_ps(acc[q], e[q]);
}

/* Pass 2: the entries exp(s − mx) where visible, 0 elsewhere; returns their sum (0 when mx is
 * −∞). Both passes 2 below sum them in one order, with a mask or without (four sums over 64
 * lanes a step, then 16 lanes at a time into their sum), so softmax_row16's sum is
 * softmax_row_bf16's. bf16: the bf16 engines' exp. */
static inline __attribute__((always_inline, target(AVX512))) float exp_pass(const int bf16, float *restrict s, int n,
                                                                           int visible, const uint8_t *restrict mask,
                                                                           float mx)
{
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}, e[4];
    int j0 = 0;
    for (; j0 + 64 <= visible; j0 += 64) {
        exp64(bf16, s, j0, mask, vmx, e, acc);
        for (int q = 0; q < 4; q++)
            _mm512_storeu_ps(s + j0 + 16 * q, e[q]);
    }
    __m512 vsum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    for (int j = j0; j < visible; j += 16) {
        const __m512 ej = exp_lanes(bf16, s, j, visible, mask, vmx);
        _mm512_mask_storeu_ps(s + j, first16(visible - j), ej);
        vsum = _mm512_add_ps(vsum, ej);
    }
    for (int j = visible; j < n; j++)
        s[j] = 0.0f;
    return _mm512_reduce_add_ps(vsum);
}

__attribute__((target(AVX512))) float mha_softmax_row_avx512(float *restrict s, int n, int visible,
                                                            const uint8_t *restrict mask, float *max_io)
{
    *max_io = softmax_max(s, visible, mask, *max_io);
    return exp_pass(0, s, n, visible, mask, *max_io);
}

/* mha_rows_walk's bodies: a whole row's max, and its float32 exps in place. */
static inline __attribute__((always_inline, target(AVX512))) float whole_row_max(const float *s, int n)
{
    return softmax_max(s, n, NULL, -INFINITY);
}
static inline __attribute__((always_inline, target(AVX512))) float exps_floats(float *s, int n, float mx, mha_bf16 *d)
{
    (void)d;
    return exp_pass(0, s, n, n, NULL, mx);
}

__attribute__((target(AVX512))) void mha_softmax_rows_avx512(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                             float *sum, ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_floats);
}

__attribute__((target(AVX512))) void mha_merge_row_avx512(float *restrict z, float a, const float *restrict zc,
                                                          float b, int n)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first16(n - j);
        _mm512_mask_storeu_ps(z + j, k, _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, z + j), va),
                                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(k, zc + j), vb)));
    }
}

__attribute__((target(AVX512))) void mha_scale_row_avx512(float *z, const float *x, float s, int n)
{
    const __m512 vs = _mm512_set1_ps(s);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first16(n - j);
        _mm512_mask_storeu_ps(z + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), vs));
    }
}

__attribute__((target(AVX512))) float mha_softmax_row_bf16_avx512(float *restrict s, int n, int visible,
                                                                 const uint8_t *restrict mask, float *max_io)
{
    *max_io = softmax_max(s, visible, mask, *max_io);
    return exp_pass(1, s, n, visible, mask, *max_io);
}

/* softmax_row_bf16's entries rounded by vcvtne2ps2bf16 straight into a row of A tiles (two
 * 16-lane halves make one 32-wide tile row): its bits are mha_bf16_round's for these entries
 * (finite, not negative, no denormal: exp16 flushes below FLT_MIN), so a CPU with AVX512_BF16
 * only. Zeros past `visible` up to n rounded to the k tile. The pass after the max. */
static inline __attribute__((always_inline, target(AVX512 ",avx512bf16"))) float
exp_pass16(const float *restrict s, int n, int visible, const uint8_t *restrict mask, float mx, mha_bf16 *d)
{
    const int kp = (int)mha_bk_kp(n);
    if (mx == -INFINITY)
        visible = 0;
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}, e[4];
    int j0 = 0;
    for (; j0 + 64 <= visible; j0 += 64) {
        exp64(1, s, j0, mask, vmx, e, acc);
        mha_bf16 *t = d + (size_t)(j0 / MHA_BT_K) * MHA_BT_ELEMS; /* j0 starts a tile row */
        _mm512_storeu_si512(t, (__m512i)_mm512_cvtne2ps_pbh(e[1], e[0]));
        _mm512_storeu_si512(t + MHA_BT_ELEMS, (__m512i)_mm512_cvtne2ps_pbh(e[3], e[2]));
    }
    __m512 vsum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    for (int j = j0; j < kp; j += 16) { /* past `visible`: zeros (kp is whole tiles: 16 lanes fit) */
        const __m512 ej = exp_lanes(1, s, j, visible, mask, vmx);
        _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K),
                            (__m256i)_mm512_cvtneps_pbh(ej));
        vsum = _mm512_add_ps(vsum, ej);
    }
    return mx == -INFINITY ? 0.0f : _mm512_reduce_add_ps(vsum);
}

__attribute__((target(AVX512 ",avx512bf16"))) static float softmax_row16_bf16(float *restrict s, int n, int visible,
                                                                              const uint8_t *restrict mask,
                                                                              float *max_io, mha_bf16 *d)
{
    *max_io = softmax_max(s, visible, mask, *max_io);
    return exp_pass16(s, n, visible, mask, *max_io, d);
}

/* mha_rows_walk's body for softmax_row16_bf16's rows: their exps into the A panels at d. */
static inline __attribute__((always_inline, target(AVX512 ",avx512bf16"))) float exps_tiles(float *s, int n, float mx,
                                                                                          mha_bf16 *d)
{
    return exp_pass16(s, n, n, NULL, mx, d);
}

__attribute__((target(AVX512 ",avx512bf16"))) static void softmax_rows16_bf16(float *s, ptrdiff_t ld, int m, int n,
                                                                              float *mx, float *sum, ptrdiff_t st,
                                                                              mha_bf16 *d)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, d, whole_row_max, exps_tiles);
}

/* Without AVX512_BF16: softmax_row_bf16, then the row rounded into the tiles as
 * mha_bk_pack_a_row does. */
__attribute__((target(AVX512))) float mha_softmax_row16_avx512(float *restrict s, int n, int visible,
                                                              const uint8_t *restrict mask, float *max_io,
                                                              mha_bf16 *d)
{
    if (__builtin_cpu_supports("avx512bf16"))
        return softmax_row16_bf16(s, n, visible, mask, max_io, d);
    const float sum = mha_softmax_row_bf16_avx512(s, n, visible, mask, max_io);
    mha_round_into_tiles_avx512(s, 0, n, d);
    const int kp = (int)mha_bk_kp(n);
    if (n < kp)
        memset(d + (size_t)(n / MHA_BT_K) * MHA_BT_ELEMS + n % MHA_BT_K, 0, (size_t)(kp - n) * sizeof *d);
    return sum;
}

__attribute__((target(AVX512))) void mha_softmax_rows16_avx512(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                               float *sum, ptrdiff_t st, mha_bf16 *d)
{
    if (__builtin_cpu_supports("avx512bf16")) {
        softmax_rows16_bf16(s, ld, m, n, mx, sum, st, d);
        return;
    }
    const int kt = (int)(mha_bk_kp(n) / MHA_BT_K);
    for (int i = 0; i < m; i++) {
        mx[i * st] = -INFINITY;
        sum[i * st] = mha_softmax_row16_avx512(s + i * ld, n, n, NULL, &mx[i * st], d + mha_bk_a_row(i, kt));
    }
}

/* Logit softcapping: cap · tanh(s / cap), 16 lanes, both of mha_tanh_poly's branches blended. */
__attribute__((target(AVX512))) void mha_softcap_row_avx512(float *s, int n, float cap)
{
    const __m512 vc = _mm512_set1_ps(cap), sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first16(n - j);
        const __m512 x = _mm512_div_ps(_mm512_maskz_loadu_ps(k, s + j), vc), z = _mm512_andnot_ps(sign, x);
        const __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f),
                                                            _mm512_add_ps(exp16(_mm512_add_ps(z, z)), one)));
        const __m512 zz = _mm512_mul_ps(z, z);
        __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(MHA_TANH_P0), zz, _mm512_set1_ps(MHA_TANH_P1));
        p = _mm512_fmadd_ps(p, zz, _mm512_set1_ps(MHA_TANH_P2));
        p = _mm512_fmadd_ps(p, zz, _mm512_set1_ps(MHA_TANH_P3));
        p = _mm512_fmadd_ps(p, zz, _mm512_set1_ps(MHA_TANH_P4));
        const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, zz), z, z);
        const __mmask16 far = _mm512_cmp_ps_mask(z, _mm512_set1_ps(MHA_TANH_SPLIT), _CMP_GT_OQ);
        const __m512 t = _mm512_or_ps(_mm512_mask_blend_ps(far, small, big), _mm512_and_ps(x, sign));
        _mm512_mask_storeu_ps(s + j, k, _mm512_mul_ps(t, vc));
    }
}
