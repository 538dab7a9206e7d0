/* avx512_quant.c — the avx512 table's quantized-weight operations (qkernels.h): a panel's 16
 * outputs are one vector's lanes, so a group dequantizes with one conversion and one FMA per
 * input, and a row's sums are its own FMA chain per lane, as ref's. */
#include "avx512.h"
#include "qkernels.h"

#define Q512 __attribute__((target(AVX512 ",f16c")))
#define Q512_INLINE __attribute__((target(AVX512 ",f16c"), always_inline)) static inline

Q512_INLINE __m512 halves(const unsigned char *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* The 16 outputs' bytes of one field row, widened. */
Q512_INLINE __m512i bytes16(const unsigned char *p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}

Q512_INLINE __m512 negated(__m512 x)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* Inputs c0·2 … of a group from its pairs at nib (c0 the group's first pair), the top bits
 * of Q6_K from hi (NULL: none). */
Q512_INLINE void pairs(const unsigned char *nib, const unsigned char *hi, int c0, __m512 d0, __m512 m0, __m512 d1,
                       __m512 m1, float *restrict w)
{
    const __m512i low4 = _mm512_set1_epi32(0xF), low2 = _mm512_set1_epi32(3);
    for (int c = 0; c < MHA_QG / 2; c++) {
        const __m512i v = bytes16(nib + (c0 + c) * MHA_QP);
        __m512i lo = _mm512_and_si512(v, low4), up = _mm512_srli_epi32(v, 4);
        if (hi) {
            const __m512i h = _mm512_srli_epi32(bytes16(hi + ((c0 + c) / 2) * MHA_QP), 4 * ((c0 + c) & 1));
            lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(h, low2), 4));
            up = _mm512_or_si512(up, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2), low2), 4));
        }
        const __m512 d = c < MHA_QG / 4 ? d0 : d1, m = c < MHA_QG / 4 ? m0 : m1;
        _mm512_storeu_ps(w + 2 * c * MHA_QP, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m));
        _mm512_storeu_ps(w + (2 * c + 1) * MHA_QP, _mm512_fmadd_ps(_mm512_cvtepi32_ps(up), d, m));
    }
}

static Q512 void dequant_q8_0(const unsigned char *b, int grp, float *restrict w)
{
    (void)grp;
    const __m512 d = halves(b), zero = _mm512_setzero_ps();
    for (int i = 0; i < MHA_QG; i++) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b + MHA_Q8_0_Q + i * MHA_QP));
        _mm512_storeu_ps(w + i * MHA_QP, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d, zero));
    }
}

static Q512 void dequant_q4_0(const unsigned char *b, int grp, float *restrict w)
{
    (void)grp;
    const __m512 d = halves(b), m = _mm512_mul_ps(_mm512_set1_ps(-8.0f), d);
    pairs(b + MHA_Q4_0_NIB, NULL, 0, d, m, d, m, w);
}

static Q512 void dequant_q4_1(const unsigned char *b, int grp, float *restrict w)
{
    (void)grp;
    const __m512 d = halves(b), m = halves(b + MHA_Q4_1_M);
    pairs(b + MHA_Q4_1_NIB, NULL, 0, d, m, d, m, w);
}

/* Q4_K's scale and min of group j (mha_q4k_scale_min) for the 16 outputs. */
static Q512 void dequant_q4_k(const unsigned char *b, int grp, float *restrict w)
{
    const unsigned char *q = b + MHA_Q4_K_SC;
    const __m512i low6 = _mm512_set1_epi32(63), low4 = _mm512_set1_epi32(0xF);
    __m512i sc, mn;
    if (grp < 4) {
        sc = _mm512_and_si512(bytes16(q + grp * MHA_QP), low6);
        mn = _mm512_and_si512(bytes16(q + (grp + 4) * MHA_QP), low6);
    } else {
        const __m512i a = bytes16(q + (grp + 4) * MHA_QP);
        sc = _mm512_or_si512(_mm512_and_si512(a, low4),
                             _mm512_slli_epi32(_mm512_srli_epi32(bytes16(q + (grp - 4) * MHA_QP), 6), 4));
        mn = _mm512_or_si512(_mm512_srli_epi32(a, 4),
                             _mm512_slli_epi32(_mm512_srli_epi32(bytes16(q + grp * MHA_QP), 6), 4));
    }
    const __m512 d = _mm512_mul_ps(halves(b), _mm512_cvtepi32_ps(sc));
    const __m512 m = negated(_mm512_mul_ps(halves(b + MHA_Q4_K_DMIN), _mm512_cvtepi32_ps(mn)));
    pairs(b + MHA_Q4_K_NIB, NULL, grp * MHA_QG / 2, d, m, d, m, w);
}

static Q512 void dequant_q6_k(const unsigned char *b, int grp, float *restrict w)
{
    const __m512 d = halves(b), m32 = _mm512_set1_ps(-32.0f);
    const unsigned char *sc = b + MHA_Q6_K_SC + 2 * grp * MHA_QP;
    const __m128i s0 = _mm_loadu_si128((const __m128i *)(const void *)sc);
    const __m128i s1 = _mm_loadu_si128((const __m128i *)(const void *)(sc + MHA_QP));
    const __m512 d0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s0)));
    const __m512 d1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s1)));
    pairs(b + MHA_Q6_K_NIB, b + MHA_Q6_K_HI, grp * MHA_QG / 2, d0, _mm512_mul_ps(m32, d0), d1,
          _mm512_mul_ps(m32, d1), w);
}

/* rows (≤ 8) × np (1 or 2) panels: constants where inlined, so the sums stay in registers. */
Q512_INLINE void tile_rows(const float *restrict w, ptrdiff_t wps, int kc, const int np, const float *a, ptrdiff_t lda,
                           const int rows, float *restrict acc, ptrdiff_t ld)
{
    __m512 s[8][2];
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++)
            s[r][p] = _mm512_loadu_ps(acc + r * ld + p * MHA_QP);
    for (int i = 0; i < kc; i++) {
        __m512 wv[2];
        for (int p = 0; p < np; p++)
            wv[p] = _mm512_loadu_ps(w + p * wps + i * MHA_QP);
        for (int r = 0; r < rows; r++) {
            const __m512 x = _mm512_set1_ps(a[r * lda + i]);
            for (int p = 0; p < np; p++)
                s[r][p] = _mm512_fmadd_ps(wv[p], x, s[r][p]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++)
            _mm512_storeu_ps(acc + r * ld + p * MHA_QP, s[r][p]);
}

#define TILE_CASE(n)                                                                                                  \
    case n:                                                                                                           \
        if (np == 2)                                                                                                  \
            tile_rows(w, wps, kc, 2, a, lda, n, acc, ld);                                                             \
        else                                                                                                          \
            tile_rows(w, wps, kc, 1, a, lda, n, acc, ld);                                                             \
        break;

static Q512 void tile_avx512(const float *restrict w, ptrdiff_t wps, int kc, int np, const float *a, ptrdiff_t lda,
                             int rows, float *restrict acc, ptrdiff_t ld)
{
    for (int r = 0; r < rows; r += 8, a += 8 * lda, acc += 8 * ld)
        switch (rows - r < 8 ? rows - r : 8) {
            TILE_CASE(1)
            TILE_CASE(2)
            TILE_CASE(3)
            TILE_CASE(4)
            TILE_CASE(5)
            TILE_CASE(6)
            TILE_CASE(7)
            TILE_CASE(8)
        }
}

const mha_qkernels mha_qk_avx512 = {
    .dequant = {[MHA_QT_Q8_0] = dequant_q8_0, [MHA_QT_Q4_0] = dequant_q4_0, [MHA_QT_Q4_1] = dequant_q4_1,
                [MHA_QT_Q4_K] = dequant_q4_k, [MHA_QT_Q6_K] = dequant_q6_k},
    .tile = tile_avx512,
};
