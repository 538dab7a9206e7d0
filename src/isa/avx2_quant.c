/* avx2_quant.c — the avx2 table's quantized-weight operations (qkernels.h): a panel's 16
 * outputs are two vectors' lanes (halves h = 0, 8); the same conversions, FMAs and chains as
 * ref's, in avx512_quant.c's shape. */
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

/* A group's factors for outputs [h, h + 8) (avx512_quant.c's factors). */
typedef struct factors {
    __m256 d0, m0, d1, m1;
} factors;

Q2_INLINE factors factors_of(int type, const unsigned char *b, int grp, int h)
{
    factors f;
    if (type == MHA_QT_Q8_0) {
        f.d0 = halves8(b + 2 * h), f.m0 = _mm256_setzero_ps();
    } else if (type == MHA_QT_Q4_0) {
        f.d0 = halves8(b + 2 * h), f.m0 = _mm256_mul_ps(_mm256_set1_ps(-8.0f), f.d0);
    } else if (type == MHA_QT_Q5_0) {
        f.d0 = halves8(b + 2 * h), f.m0 = _mm256_mul_ps(_mm256_set1_ps(-16.0f), f.d0);
    } else if (type == MHA_QT_Q4_1 || type == MHA_QT_Q5_1) {
        f.d0 = halves8(b + 2 * h), f.m0 = halves8(b + MHA_Q4_1_M + 2 * h); /* Q5_1's m at the same place */
    } else if (type == MHA_QT_Q4_K || type == MHA_QT_Q5_K) { /* the same scales, d and dmin */
        const unsigned char *q = b + MHA_Q4_K_SC + h;
        const __m256i low6 = _mm256_set1_epi32(63), low4 = _mm256_set1_epi32(0xF);
        __m256i sc, mn;
        if (grp < 4) {
            sc = _mm256_and_si256(bytes8(q + grp * MHA_QP), low6);
            mn = _mm256_and_si256(bytes8(q + (grp + 4) * MHA_QP), low6);
        } else {
            const __m256i a = bytes8(q + (grp + 4) * MHA_QP);
            sc = _mm256_or_si256(_mm256_and_si256(a, low4),
                                 _mm256_slli_epi32(_mm256_srli_epi32(bytes8(q + (grp - 4) * MHA_QP), 6), 4));
            mn = _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                 _mm256_slli_epi32(_mm256_srli_epi32(bytes8(q + grp * MHA_QP), 6), 4));
        }
        f.d0 = _mm256_mul_ps(halves8(b + 2 * h), _mm256_cvtepi32_ps(sc));
        f.m0 = negated8(_mm256_mul_ps(halves8(b + MHA_Q4_K_DMIN + 2 * h), _mm256_cvtepi32_ps(mn)));
    } else { /* Q6_K */
        const __m256 d = halves8(b + 2 * h), m32 = _mm256_set1_ps(-32.0f);
        const unsigned char *sc = b + MHA_Q6_K_SC + 2 * grp * MHA_QP + h;
        f.d0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sbytes8(sc)));
        f.d1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sbytes8(sc + MHA_QP)));
        f.m0 = _mm256_mul_ps(m32, f.d0), f.m1 = _mm256_mul_ps(m32, f.d1);
        return f;
    }
    f.d1 = f.d0, f.m1 = f.m0;
    return f;
}

/* Inputs 4c … 4c + 3 of a block for outputs [h, h + 8) as integers (avx512_quant.c's quad_ints). */
Q2_INLINE void quad_ints(const unsigned char *b, int type, int c, int h, __m256i v[4])
{
    const __m256i low4 = _mm256_set1_epi32(0xF);
    const unsigned char *nib = b + mha_q_nib_at(type);
    const __m256i x = bytes8(nib + 2 * c * MHA_QP + h), y = bytes8(nib + (2 * c + 1) * MHA_QP + h);
    v[0] = _mm256_and_si256(x, low4), v[1] = _mm256_srli_epi32(x, 4);
    v[2] = _mm256_and_si256(y, low4), v[3] = _mm256_srli_epi32(y, 4);
    if (mha_q_hi_bits(type) == 2) {
        const __m256i t = bytes8(b + mha_q_hi_at(type) + c * MHA_QP + h), top2 = _mm256_set1_epi32(0x30);
        v[0] = _mm256_or_si256(v[0], _mm256_and_si256(_mm256_slli_epi32(t, 4), top2));
        v[1] = _mm256_or_si256(v[1], _mm256_and_si256(_mm256_slli_epi32(t, 2), top2));
        v[2] = _mm256_or_si256(v[2], _mm256_and_si256(t, top2));
        v[3] = _mm256_or_si256(v[3], _mm256_and_si256(_mm256_srli_epi32(t, 2), top2));
    } else if (mha_q_hi_bits(type) == 1) {
        const __m256i top1 = _mm256_set1_epi32(0x10);
        const __m256i t = _mm256_srlv_epi32(bytes8(b + mha_q_hi_at(type) + (c / 2) * MHA_QP + h),
                                            _mm256_set1_epi32(4 * (c & 1)));
        v[0] = _mm256_or_si256(v[0], _mm256_and_si256(_mm256_slli_epi32(t, 4), top1));
        v[1] = _mm256_or_si256(v[1], _mm256_and_si256(_mm256_slli_epi32(t, 3), top1));
        v[2] = _mm256_or_si256(v[2], _mm256_and_si256(_mm256_slli_epi32(t, 2), top1));
        v[3] = _mm256_or_si256(v[3], _mm256_and_si256(_mm256_slli_epi32(t, 1), top1));
    }
}

Q2_INLINE void dequant_group(int type, const unsigned char *b, int grp, float *restrict w)
{
    for (int h = 0; h < MHA_QP; h += 8) {
        const factors f = factors_of(type, b, grp, h);
        if (type == MHA_QT_Q8_0) {
            for (int i = 0; i < MHA_QG; i++) {
                const __m256i q = sbytes8(b + MHA_Q8_0_Q + i * MHA_QP + h);
                _mm256_storeu_ps(w + i * MHA_QP + h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), f.d0, f.m0));
            }
            continue;
        }
        for (int c = 0; c < MHA_QG / 4; c++) {
            __m256i v[4];
            quad_ints(b, type, grp * MHA_QG / 4 + c, h, v);
            const __m256 d = c < MHA_QG / 8 ? f.d0 : f.d1, m = c < MHA_QG / 8 ? f.m0 : f.m1;
            for (int i = 0; i < 4; i++)
                _mm256_storeu_ps(w + (4 * c + i) * MHA_QP + h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v[i]), d, m));
        }
    }
}

#define DEQUANT_OF(name, type)                                                                                        \
    static Q2 void dequant_##name(const unsigned char *b, int grp, float *restrict w)                                \
    {                                                                                                                 \
        dequant_group(type, b, grp, w);                                                                               \
    }
MHA_QTYPE_LIST(DEQUANT_OF)
#undef DEQUANT_OF


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

/* few's chains for rows ≤ 2 and np ≤ 2 panels, avx512_quant.c's few_run on half vectors: four
 * chains a row interleaved (two panels, two halves); with 16 registers the factors may live
 * in L1, read as the FMAs' operands. */
Q2_INLINE void few_run(const mha_qtype *t, const int type, const unsigned char *const *p, int kk, const float *a,
                       ptrdiff_t lda, float *restrict acc, ptrdiff_t ld, const int rows, const int np)
{
    const int groups = t->qk / MHA_QG;
    const size_t block_bytes = MHA_QP * t->bytes;
    __m256 s[2][2][2]; /* [row][panel][half] */
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++)
            for (int h = 0; h < 2; h++)
                s[r][j][h] = _mm256_loadu_ps(acc + r * ld + j * MHA_QP + 8 * h);
    for (int g = 0; g < kk / MHA_QG; g++) {
        const float *x = a + g * MHA_QG;
        const unsigned char *b[2];
        factors f[2][2];
        for (int j = 0; j < np; j++) {
            b[j] = p[j] + (size_t)(g / groups) * block_bytes;
            for (int h = 0; h < 2; h++)
                f[j][h] = factors_of(type, b[j], g % groups, 8 * h);
        }
        if (type == MHA_QT_Q8_0) {
            for (int i = 0; i < MHA_QG; i++)
                for (int j = 0; j < np; j++)
                    for (int h = 0; h < 2; h++) {
                        const __m256i q = sbytes8(b[j] + MHA_Q8_0_Q + i * MHA_QP + 8 * h);
                        const __m256 w = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), f[j][h].d0, f[j][h].m0);
                        for (int r = 0; r < rows; r++)
                            s[r][j][h] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(x + r * lda + i), s[r][j][h]);
                    }
            continue;
        }
        for (int c = 0; c < MHA_QG / 4; c++)
            for (int j = 0; j < np; j++)
                for (int h = 0; h < 2; h++) {
                    __m256i v[4];
                    quad_ints(b[j], type, g % groups * MHA_QG / 4 + c, 8 * h, v);
                    const factors *fj = &f[j][h];
                    const __m256 d = c < MHA_QG / 8 ? fj->d0 : fj->d1, m = c < MHA_QG / 8 ? fj->m0 : fj->m1;
                    for (int i = 0; i < 4; i++) {
                        const __m256 w = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v[i]), d, m);
                        for (int r = 0; r < rows; r++)
                            s[r][j][h] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(x + r * lda + 4 * c + i), s[r][j][h]);
                    }
                }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++)
            for (int h = 0; h < 2; h++)
                _mm256_storeu_ps(acc + r * ld + j * MHA_QP + 8 * h, s[r][j][h]);
}

#define FEW_RUN(r, n) few_run(t, type, p + j, kk, a, lda, acc + j * MHA_QP, ld, r, n)
Q2_INLINE void few_type(const mha_qtype *t, const int type, const unsigned char *const *p, int np, int kk,
                        const float *a, ptrdiff_t lda, int rows, float *restrict acc, ptrdiff_t ld)
{
    for (int j = 0, n; j < np; j += n) {
        n = np - j >= 2 ? 2 : 1;
        if (rows == 2)
            n == 2 ? FEW_RUN(2, 2) : FEW_RUN(2, 1);
        else
            n == 2 ? FEW_RUN(1, 2) : FEW_RUN(1, 1);
    }
}
#undef FEW_RUN

#define FEW_OF(name, type)                                                                                            \
    static Q2 void few_##name(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const float *a,     \
                             ptrdiff_t lda, int rows, float *restrict acc, ptrdiff_t ld)                              \
    {                                                                                                                 \
        few_type(t, type, p, np, kk, a, lda, rows, acc, ld);                                                          \
    }
MHA_QTYPE_LIST(FEW_OF)
#undef FEW_OF

#define DEQUANT(name, index) MHA_QENTRY(dequant, name, index)
#define FEW(name, index) MHA_QENTRY(few, name, index)
const mha_qkernels mha_qk_avx2 = {
    .dequant = {MHA_QTYPE_LIST(DEQUANT)},
    .tile = tile_avx2,
    .few = {MHA_QTYPE_LIST(FEW)},
    .dot16 = {&mha_qdot16_avx2_vnni, &mha_qdot16_avx2, &mha_qdot16_ref, NULL},
};
#undef DEQUANT
#undef FEW
