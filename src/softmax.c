/* softmax.c — masked row softmax in two passes (max; exp and sum) against a running max, so
 * that a row can come in chunks (online softmax); the caller rescales and normalises.
 *
 * A scalar expf per score costs more than the GEMMs at S = 512, so exp is a Cephes-style
 * polynomial evaluated 16 (AVX-512) or 8 (AVX2) lanes at a time; the generic version runs
 * the same polynomial one lane at a time. Relative error of the exp: about 2 ulp.
 * Each implementation is chosen at engine creation from the CPU's features. */
#include "softmax.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define EXP_HI 88.3762626647949f
#define EXP_LO -87.3365447504019f  /* exp(EXP_LO) = FLT_MIN; below it the result is 0 */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500E-4f
#define P1 1.3981999507E-3f
#define P2 8.3334519073E-3f
#define P3 4.1665795894E-2f
#define P4 1.6666665459E-1f
#define P5 5.0000001201E-1f

static int visible_at(const uint8_t *mask, int j)
{
    return mask == NULL || mask[j] != 0;
}

/* ---- generic: the same polynomial, one lane at a time ---- */

static float exp_poly(float x)
{
    /* below FLT_MIN: flush, as the vector versions do; NaN too (their in-range compare is
     * false for NaN), which also keeps NaN away from the float-to-int conversion below */
    if (!(x >= EXP_LO))
        return 0.0f;
    x = x > EXP_HI ? EXP_HI : x;
    float n = rintf(x * LOG2E);
    x = x - n * LN2_HI - n * LN2_LO;
    float y = ((((P0 * x + P1) * x + P2) * x + P3) * x + P4) * x + P5;
    y = y * x * x + x + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

float mha_softmax_row_generic(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io)
{
    /* pass 1: max over the visible entries and the running max */
    float mx = *max_io;
    for (int j = 0; j < visible; j++)
        if (visible_at(mask, j) && s[j] > mx)
            mx = s[j];
    *max_io = mx;
    if (mx == -INFINITY) { /* nothing visible: a zero row, never NaN */
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    /* pass 2: exp(s - max) where visible, 0 elsewhere, and the sum */
    float sum = 0.0f;
    for (int j = 0; j < visible; j++) {
        float e = visible_at(mask, j) ? exp_poly(s[j] - mx) : 0.0f;
        s[j] = e;
        sum += e;
    }
    for (int j = visible; j < n; j++)
        s[j] = 0.0f;
    return sum;
}

/* ---- AVX-512: 16 lanes, tails and masks as k-registers ---- */

__attribute__((target("avx512f"))) static __m512 exp16(__m512 x)
{
    __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), x);
    __m512 y = _mm512_set1_ps(P0);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(P1));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(P2));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(P3));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(P4));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(P5));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(in_range, y, _mm512_castsi512_ps(e));
}

/* Lanes j..j+15 that are below `visible` and not hidden by the explicit mask. */
__attribute__((target("avx512f"))) static __mmask16 lanes16(const uint8_t *mask, int j, int visible)
{
    int left = visible - j;
    __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
    if (mask) {
        uint8_t bytes[16] = {0};
        memcpy(bytes, mask + j, (size_t)(left >= 16 ? 16 : left));
        __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)bytes));
        k &= _mm512_test_epi32_mask(m, m);
    }
    return k;
}

__attribute__((target("avx512f"))) float mha_softmax_row_avx512(float *restrict s, int n, int visible,
                                                               const uint8_t *restrict mask, float *max_io)
{
    /* pass 1: max over the visible entries and the running max; without a mask, 64 lanes
     * per step into four accumulators (one max chain would wait on its own latency) */
    __m512 vmax = _mm512_set1_ps(*max_io), m1 = vmax, m2 = vmax, m3 = vmax;
    int j0 = 0;
    if (!mask)
        for (; j0 + 64 <= visible; j0 += 64) {
            vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j0));
            m1 = _mm512_max_ps(m1, _mm512_loadu_ps(s + j0 + 16));
            m2 = _mm512_max_ps(m2, _mm512_loadu_ps(s + j0 + 32));
            m3 = _mm512_max_ps(m3, _mm512_loadu_ps(s + j0 + 48));
        }
    vmax = _mm512_max_ps(_mm512_max_ps(vmax, m1), _mm512_max_ps(m2, m3));
    for (int j = j0; j < visible; j += 16) {
        __mmask16 k = lanes16(mask, j, visible);
        vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, s + j));
    }
    float mx = _mm512_reduce_max_ps(vmax);
    *max_io = mx;
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    /* pass 2: exp(s - max) where visible, 0 elsewhere, and the sum (four sums likewise) */
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps(), s1 = vsum, s2 = vsum, s3 = vsum;
    j0 = 0;
    if (!mask)
        for (; j0 + 64 <= visible; j0 += 64) {
            __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j0), vmx));
            __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j0 + 16), vmx));
            __m512 e2 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j0 + 32), vmx));
            __m512 e3 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j0 + 48), vmx));
            _mm512_storeu_ps(s + j0, e0);
            _mm512_storeu_ps(s + j0 + 16, e1);
            _mm512_storeu_ps(s + j0 + 32, e2);
            _mm512_storeu_ps(s + j0 + 48, e3);
            vsum = _mm512_add_ps(vsum, e0), s1 = _mm512_add_ps(s1, e1);
            s2 = _mm512_add_ps(s2, e2), s3 = _mm512_add_ps(s3, e3);
        }
    vsum = _mm512_add_ps(_mm512_add_ps(vsum, s1), _mm512_add_ps(s2, s3));
    for (int j = j0; j < visible; j += 16) {
        __mmask16 k = lanes16(mask, j, visible);
        __mmask16 tail = visible - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (visible - j)) - 1u);
        __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vmx)));
        _mm512_mask_storeu_ps(s + j, tail, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    for (int j = visible; j < n; j++)
        s[j] = 0.0f;
    return _mm512_reduce_add_ps(vsum);
}

/* ---- AVX2: 8 lanes; a tail runs through a padded copy so it gets the same arithmetic ---- */

__attribute__((target("avx2,fma"))) static __m256 exp8(__m256 x)
{
    __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), x);
    __m256 y = _mm256_set1_ps(P0);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P1));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P2));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P3));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P4));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P5));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), in_range);
}

/* Scores j..j+7 (0 past visible), and in *vis all-ones lanes where each is visible. */
__attribute__((target("avx2,fma"))) static __m256 load8(const float *s, const uint8_t *mask, int j,
                                                        int visible, __m256 *vis)
{
    int left = visible - j < 8 ? visible - j : 8;
    if (left == 8 && mask == NULL) {
        *vis = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        return _mm256_loadu_ps(s + j);
    }
    float buf[8] = {0};
    int32_t on[8] = {0};
    memcpy(buf, s + j, (size_t)left * sizeof *buf);
    for (int i = 0; i < left; i++)
        on[i] = visible_at(mask, j + i) ? -1 : 0;
    *vis = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(const void *)on));
    return _mm256_loadu_ps(buf);
}

__attribute__((target("avx2,fma"))) float mha_softmax_row_avx2(float *restrict s, int n, int visible,
                                                             const uint8_t *restrict mask, float *max_io)
{
    /* pass 1: max over the visible entries and the running max */
    __m256 vmax = _mm256_set1_ps(*max_io), ninf = _mm256_set1_ps(-INFINITY), vis;
    for (int j = 0; j < visible; j += 8) {
        __m256 x = load8(s, mask, j, visible, &vis);
        vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(ninf, x, vis));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float mx = -INFINITY;
    for (int i = 0; i < 8; i++)
        mx = lanes[i] > mx ? lanes[i] : mx;
    *max_io = mx;
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    /* pass 2: exp(s - max) where visible, 0 elsewhere, and the sum */
    __m256 vmx = _mm256_set1_ps(mx), vsum = _mm256_setzero_ps();
    for (int j = 0; j < visible; j += 8) {
        __m256 x = load8(s, mask, j, visible, &vis);
        __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(x, vmx)), vis);
        _mm256_storeu_ps(lanes, e);
        memcpy(s + j, lanes, (size_t)(visible - j < 8 ? visible - j : 8) * sizeof *s);
        vsum = _mm256_add_ps(vsum, e);
    }
    for (int j = visible; j < n; j++)
        s[j] = 0.0f;
    _mm256_storeu_ps(lanes, vsum);
    return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

mha_softmax_fn mha_softmax_select(const char **name)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        if (name) *name = "avx512";
        return mha_softmax_row_avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        if (name) *name = "avx2";
        return mha_softmax_row_avx2;
    }
    if (name) *name = "generic";
    return mha_softmax_row_generic;
}

int mha_softmax_supported(mha_softmax_fn fn)
{
    __builtin_cpu_init();
    if (fn == mha_softmax_row_avx512)
        return __builtin_cpu_supports("avx512f");
    if (fn == mha_softmax_row_avx2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return fn == mha_softmax_row_generic;
}
