/* avx2_quant.c — the avx2 table's quantized-weight operations (qkernels.h): a panel's 16
 * outputs are two vectors' lanes; the same conversions, FMAs and chains as ref's. */
#include "avx2.h"
#include "qkernels.h"

#define Q2 __attribute__((target(AVX2)))
#define Q2_INLINE __attribute__((target(AVX2), always_inline)) static inline

Q2_INLINE __m256 halves8(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

Q2_INLINE __m256i bytes8(const unsigned char *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

Q2_INLINE __m256i sbytes8(const unsigned char *p)
{
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

Q2_INLINE __m256 negated8(__m256 x)
{
    return _mm256_xor_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
}

/* Lanes [h, h + 8) of a group's pairs (pairs: avx512_quant.c). */
Q2_INLINE void pairs8(const unsigned char *nib, const unsigned char *hi, int c0, int h, __m256 d0, __m256 m0,
                      __m256 d1, __m256 m1, float *restrict w)
{
    const __m256i low4 = _mm256_set1_epi32(0xF), low2 = _mm256_set1_epi32(3);
    for (int c = 0; c < MHA_QG / 2; c++) {
        const __m256i v = bytes8(nib + (c0 + c) * MHA_QP + h);
        __m256i lo = _mm256_and_si256(v, low4), up = _mm256_srli_epi32(v, 4);
        if (hi) {
            const __m256i t = _mm256_srli_epi32(bytes8(hi + ((c0 + c) / 2) * MHA_QP + h), 4 * ((c0 + c) & 1));
            lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(t, low2), 4));
            up = _mm256_or_si256(up, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(t, 2), low2), 4));
        }
        const __m256 d = c < MHA_QG / 4 ? d0 : d1, m = c < MHA_QG / 4 ? m0 : m1;
        _mm256_storeu_ps(w + 2 * c * MHA_QP + h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), d, m));
        _mm256_storeu_ps(w + (2 * c + 1) * MHA_QP + h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(up), d, m));
    }
}

static Q2 void dequant_q8_0(const unsigned char *b, int grp, float *restrict w)
{
    (void)grp;
    for (int h = 0; h < MHA_QP; h += 8) {
        const __m256 d = halves8(b + 2 * h), zero = _mm256_setzero_ps();
        for (int i = 0; i < MHA_QG; i++)
            _mm256_storeu_ps(w + i * MHA_QP + h,
                             _mm256_fmadd_ps(_mm256_cvtepi32_ps(sbytes8(b + MHA_Q8_0_Q + i * MHA_QP + h)), d, zero));
    }
}

static Q2 void dequant_q4_0(const unsigned char *b, int grp, float *restrict w)
{
    (void)grp;
    for (int h = 0; h < MHA_QP; h += 8) {
        const __m256 d = halves8(b + 2 * h), m = _mm256_mul_ps(_mm256_set1_ps(-8.0f), d);
        pairs8(b + MHA_Q4_0_NIB, NULL, 0, h, d, m, d, m, w);
    }
}

static Q2 void dequant_q4_1(const unsigned char *b, int grp, float *restrict w)
{
    (void)grp;
    for (int h = 0; h < MHA_QP; h += 8) {
        const __m256 d = halves8(b + 2 * h), m = halves8(b + MHA_Q4_1_M + 2 * h);
        pairs8(b + MHA_Q4_1_NIB, NULL, 0, h, d, m, d, m, w);
    }
}

static Q2 void dequant_q4_k(const unsigned char *b, int grp, float *restrict w)
{
    const unsigned char *q = b + MHA_Q4_K_SC;
    const __m256i low6 = _mm256_set1_epi32(63), low4 = _mm256_set1_epi32(0xF);
    for (int h = 0; h < MHA_QP; h += 8) {
        __m256i sc, mn;
        if (grp < 4) {
            sc = _mm256_and_si256(bytes8(q + grp * MHA_QP + h), low6);
            mn = _mm256_and_si256(bytes8(q + (grp + 4) * MHA_QP + h), low6);
        } else {
            const __m256i a = bytes8(q + (grp + 4) * MHA_QP + h);
            sc = _mm256_or_si256(_mm256_and_si256(a, low4),
                                 _mm256_slli_epi32(_mm256_srli_epi32(bytes8(q + (grp - 4) * MHA_QP + h), 6), 4));
            mn = _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                 _mm256_slli_epi32(_mm256_srli_epi32(bytes8(q + grp * MHA_QP + h), 6), 4));
        }
        const __m256 d = _mm256_mul_ps(halves8(b + 2 * h), _mm256_cvtepi32_ps(sc));
        const __m256 m = negated8(_mm256_mul_ps(halves8(b + MHA_Q4_K_DMIN + 2 * h), _mm256_cvtepi32_ps(mn)));
        pairs8(b + MHA_Q4_K_NIB, NULL, grp * MHA_QG / 2, h, d, m, d, m, w);
    }
}

static Q2 void dequant_q6_k(const unsigned char *b, int grp, float *restrict w)
{
    const __m256 m32 = _mm256_set1_ps(-32.0f);
    const unsigned char *sc = b + MHA_Q6_K_SC + 2 * grp * MHA_QP;
    for (int h = 0; h < MHA_QP; h += 8) {
        const __m256 d = halves8(b + 2 * h);
        const __m256 d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sbytes8(sc + h)));
        const __m256 d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sbytes8(sc + MHA_QP + h)));
        pairs8(b + MHA_Q6_K_NIB, b + MHA_Q6_K_HI, grp * MHA_QG / 2, h, d0, _mm256_mul_ps(m32, d0), d1,
               _mm256_mul_ps(m32, d1), w);
    }
}

/* rows (≤ 6) of one panel's 16 outputs: two vectors a row, constants where inlined. */
Q2_INLINE void tile_rows(const float *restrict w, int kc, const float *a, ptrdiff_t lda, const int rows,
                         float *restrict acc, ptrdiff_t ld)
{
    __m256 s[6][2];
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < 2; h++)
            s[r][h] = _mm256_loadu_ps(acc + r * ld + 8 * h);
    for (int i = 0; i < kc; i++) {
        const __m256 w0 = _mm256_loadu_ps(w + i * MHA_QP), w1 = _mm256_loadu_ps(w + i * MHA_QP + 8);
        for (int r = 0; r < rows; r++) {
            const __m256 x = _mm256_broadcast_ss(a + r * lda + i);
            s[r][0] = _mm256_fmadd_ps(w0, x, s[r][0]);
            s[r][1] = _mm256_fmadd_ps(w1, x, s[r][1]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(acc + r * ld + 8 * h, s[r][h]);
}

static Q2 void tile_avx2(const float *restrict w, ptrdiff_t wps, int kc, int np, const float *a, ptrdiff_t lda,
                         int rows, float *restrict acc, ptrdiff_t ld)
{
    for (int p = 0; p < np; p++)
        for (int r = 0; r < rows; r += 6) {
            const float *ar = a + r * lda;
            float *c = acc + r * ld + p * MHA_QP;
            switch (rows - r < 6 ? rows - r : 6) {
            case 1: tile_rows(w + p * wps, kc, ar, lda, 1, c, ld); break;
            case 2: tile_rows(w + p * wps, kc, ar, lda, 2, c, ld); break;
            case 3: tile_rows(w + p * wps, kc, ar, lda, 3, c, ld); break;
            case 4: tile_rows(w + p * wps, kc, ar, lda, 4, c, ld); break;
            case 5: tile_rows(w + p * wps, kc, ar, lda, 5, c, ld); break;
            default: tile_rows(w + p * wps, kc, ar, lda, 6, c, ld); break;
            }
        }
}

static void few_avx2(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const float *a, ptrdiff_t lda,
                    int rows, float *restrict acc, ptrdiff_t ld)
{
    mha_qfew_by_groups(&mha_qk_avx2, t, p, np, kk, a, lda, rows, acc, ld);
}

const mha_qkernels mha_qk_avx2 = {
    .dequant = {[MHA_QT_Q8_0] = dequant_q8_0, [MHA_QT_Q4_0] = dequant_q4_0, [MHA_QT_Q4_1] = dequant_q4_1,
                [MHA_QT_Q4_K] = dequant_q4_k, [MHA_QT_Q6_K] = dequant_q6_k},
    .tile = tile_avx2,
    .few = few_avx2,
};
