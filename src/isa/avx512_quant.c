/* avx512_quant.c — the avx512 table's quantized-weight operations (qkernels.h): a panel's 16
 * outputs are one vector's lanes, so a group dequantizes with one conversion and one FMA per
 * input, and a row's sums are its own FMA chain per lane, as ref's. */
#include "avx512.h"
#include "qkernels.h"
#include "qgemm.h" /* the packed activations */

#include <string.h>

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

Q512_INLINE __m512i sbytes16(const unsigned char *p)
{
    return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}

Q512_INLINE __m512 negated(__m512 x)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* A group's factors for the 16 outputs: d and m (Q6_K: d0, m0 for its first 16 inputs, d1, m1
 * for the next). Q4_K's scale and min of group j as mha_q4k_scale_min unpacks them. */
typedef struct factors {
    __m512 d0, m0, d1, m1;
} factors;

Q512_INLINE factors factors_of(int type, const unsigned char *b, int grp)
{
    factors f;
    if (type == MHA_QT_Q8_0) {
        f.d0 = halves(b), f.m0 = _mm512_setzero_ps();
    } else if (type == MHA_QT_Q4_0) {
        f.d0 = halves(b), f.m0 = _mm512_mul_ps(_mm512_set1_ps(-8.0f), f.d0);
    } else if (type == MHA_QT_Q5_0) {
        f.d0 = halves(b), f.m0 = _mm512_mul_ps(_mm512_set1_ps(-16.0f), f.d0);
    } else if (type == MHA_QT_Q4_1 || type == MHA_QT_Q5_1) {
        f.d0 = halves(b), f.m0 = halves(b + MHA_Q4_1_M); /* Q5_1's m at the same place */
    } else if (type == MHA_QT_Q4_K || type == MHA_QT_Q5_K) { /* the same scales, d and dmin */
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
        f.d0 = _mm512_mul_ps(halves(b), _mm512_cvtepi32_ps(sc));
        f.m0 = negated(_mm512_mul_ps(halves(b + MHA_Q4_K_DMIN), _mm512_cvtepi32_ps(mn)));
    } else { /* Q6_K */
        const __m512 d = halves(b), m32 = _mm512_set1_ps(-32.0f);
        const unsigned char *sc = b + MHA_Q6_K_SC + 2 * grp * MHA_QP;
        f.d0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sbytes16(sc)));
        f.d1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sbytes16(sc + MHA_QP)));
        f.m0 = _mm512_mul_ps(m32, f.d0), f.m1 = _mm512_mul_ps(m32, f.d1);
        return f;
    }
    f.d1 = f.d0, f.m1 = f.m0;
    return f;
}

/* Inputs 4c … 4c + 3 of a block as integers: two bytes of nibble pairs, with the top bits
 * (bits 2: Q6_K's, byte c holding the four inputs' at bits 0, 2, 4, 6; bits 1: the 5-bit
 * types', byte c / 2 holding eight inputs' at bits 0..7) moved to bit 4 and up. */
Q512_INLINE void quad_ints(const unsigned char *b, int type, int c, __m512i v[4])
{
    const __m512i low4 = _mm512_set1_epi32(0xF);
    const unsigned char *nib = b + mha_q_nib_at(type);
    const __m512i x = bytes16(nib + 2 * c * MHA_QP), y = bytes16(nib + (2 * c + 1) * MHA_QP);
    v[0] = _mm512_and_si512(x, low4), v[1] = _mm512_srli_epi32(x, 4);
    v[2] = _mm512_and_si512(y, low4), v[3] = _mm512_srli_epi32(y, 4);
    if (mha_q_hi_bits(type) == 2) { /* v | (h' & 0x30): one ternary-logic op each */
        const __m512i h = bytes16(b + mha_q_hi_at(type) + c * MHA_QP), top2 = _mm512_set1_epi32(0x30);
        v[0] = _mm512_ternarylogic_epi32(v[0], _mm512_slli_epi32(h, 4), top2, 0xF8);
        v[1] = _mm512_ternarylogic_epi32(v[1], _mm512_slli_epi32(h, 2), top2, 0xF8);
        v[2] = _mm512_ternarylogic_epi32(v[2], h, top2, 0xF8);
        v[3] = _mm512_ternarylogic_epi32(v[3], _mm512_srli_epi32(h, 2), top2, 0xF8);
    } else if (mha_q_hi_bits(type) == 1) {
        const __m512i top1 = _mm512_set1_epi32(0x10);
        const __m512i h = _mm512_srlv_epi32(bytes16(b + mha_q_hi_at(type) + (c / 2) * MHA_QP),
                                            _mm512_set1_epi32(4 * (c & 1)));
        v[0] = _mm512_ternarylogic_epi32(v[0], _mm512_slli_epi32(h, 4), top1, 0xF8);
        v[1] = _mm512_ternarylogic_epi32(v[1], _mm512_slli_epi32(h, 3), top1, 0xF8);
        v[2] = _mm512_ternarylogic_epi32(v[2], _mm512_slli_epi32(h, 2), top1, 0xF8);
        v[3] = _mm512_ternarylogic_epi32(v[3], _mm512_slli_epi32(h, 1), top1, 0xF8);
    }
}

Q512_INLINE void dequant_group(int type, const unsigned char *b, int grp, float *restrict w)
{
    const factors f = factors_of(type, b, grp);
    if (type == MHA_QT_Q8_0) {
        for (int i = 0; i < MHA_QG; i++) {
            const __m512i q = sbytes16(b + MHA_Q8_0_Q + i * MHA_QP);
            _mm512_storeu_ps(w + i * MHA_QP, _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), f.d0, f.m0));
        }
        return;
    }
    for (int c = 0; c < MHA_QG / 4; c++) {
        __m512i v[4];
        quad_ints(b, type, grp * MHA_QG / 4 + c, v);
        const __m512 d = c < MHA_QG / 8 ? f.d0 : f.d1, m = c < MHA_QG / 8 ? f.m0 : f.m1;
        for (int i = 0; i < 4; i++)
            _mm512_storeu_ps(w + (4 * c + i) * MHA_QP, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[i]), d, m));
    }
}

#define DEQUANT_OF(name, type)                                                                                        \
    static Q512 void dequant_##name(const unsigned char *b, int grp, float *restrict w)                                \
    {                                                                                                                 \
        dequant_group(type, b, grp, w);                                                                               \
    }
MHA_QTYPE_LIST(DEQUANT_OF)
#undef DEQUANT_OF

/* ---- a group as bf16 B-panel pairs (block weights in a bf16 engine: mha_qbf16_ops) ---- */

#define Q512BF_INLINE __attribute__((target(AVX512 ",f16c,avx512bf16"), always_inline)) static inline

/* Inputs 2p and 2p + 1 of 16 outputs as one row of a B panel, bf16 pairs with the even input in
 * each lane's low half. AVX512_BF16's rounding is mha_bf16_round (bgemm.h) for every float. */
Q512BF_INLINE __m512i bf16_pair_hw(__m512 even, __m512 odd)
{
    static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(order), (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

/* The same in integer steps: mha_bf16_round's bits for finite floats that are not denormal. Every
 * weight q·D + M of finite factors is one (a multiple of float16's least step, 2^-24, or zero);
 * the group checks its factors first. */
Q512_INLINE __m512i bf16_pair_int(__m512 even, __m512 odd)
{
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i ue = _mm512_castps_si512(even), uo = _mm512_castps_si512(odd);
    const __m512i re = _mm512_add_epi32(_mm512_add_epi32(ue, half), _mm512_and_si512(_mm512_srli_epi32(ue, 16), one));
    const __m512i ro = _mm512_add_epi32(_mm512_add_epi32(uo, half), _mm512_and_si512(_mm512_srli_epi32(uo, 16), one));
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(re, 16), ro);
}

/* Whether any lane is infinite or NaN (fpclass: QNaN, +inf, −inf, SNaN). */
Q512_INLINE int not_finite(__m512 x)
{
    return _mm512_fpclass_ps_mask(x, 0x99) != 0;
}

/* A group's weights, of factors f, two inputs at a time through PAIR. */
#define DEQUANT16_BODY(PAIR)                                                                                          \
    if (type == MHA_QT_Q8_0) {                                                                                        \
        for (int i = 0; i < MHA_QG; i += 2) {                                                                         \
            const __m512 e = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sbytes16(b + MHA_Q8_0_Q + i * MHA_QP)), f.d0, f.m0);  \
            const __m512 o =                                                                                          \
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(sbytes16(b + MHA_Q8_0_Q + (i + 1) * MHA_QP)), f.d0, f.m0);         \
            _mm512_storeu_si512(dst + i * MHA_QP, PAIR(e, o));                                                        \
        }                                                                                                             \
        return;                                                                                                       \
    }                                                                                                                 \
    for (int c = 0; c < MHA_QG / 4; c++) {                                                                            \
        __m512i v[4];                                                                                                 \
        quad_ints(b, type, grp * MHA_QG / 4 + c, v);                                                                  \
        const __m512 d = c < MHA_QG / 8 ? f.d0 : f.d1, m = c < MHA_QG / 8 ? f.m0 : f.m1;                              \
        __m512 w[4];                                                                                                  \
        for (int i = 0; i < 4; i++)                                                                                   \
            w[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[i]), d, m);                                                   \
        _mm512_storeu_si512(dst + 4 * c * MHA_QP, PAIR(w[0], w[1]));                                                  \
        _mm512_storeu_si512(dst + (4 * c + 2) * MHA_QP, PAIR(w[2], w[3]));                                            \
    }

Q512BF_INLINE void dequant16_hw(int type, const unsigned char *b, int grp, mha_bf16 *restrict dst)
{
    const factors f = factors_of(type, b, grp);
    DEQUANT16_BODY(bf16_pair_hw)
}

Q512_INLINE void dequant16_int(int type, const unsigned char *b, int grp, mha_bf16 *restrict dst)
{
    const factors f = factors_of(type, b, grp);
    if (not_finite(f.d0) || not_finite(f.m0) || not_finite(f.d1) || not_finite(f.m1)) {
        float w[MHA_QG * MHA_QP]; /* the floats, each rounded as mha_bf16_round (NaN, infinity) */
        dequant_group(type, b, grp, w);
        for (int i = 0; i < MHA_QG; i++)
            for (int o = 0; o < MHA_QP; o++)
                dst[i / 2 * 2 * MHA_QP + o * 2 + i % 2] = mha_bf16_round(w[i * MHA_QP + o]);
        return;
    }
    DEQUANT16_BODY(bf16_pair_int)
}
#undef DEQUANT16_BODY

#define DEQUANT16_OF(name, type)                                                                                      \
    static __attribute__((target(AVX512 ",f16c,avx512bf16"))) void dequant16_hw_##name(                               \
        const unsigned char *b, int grp, mha_bf16 *restrict dst)                                                      \
    {                                                                                                                 \
        dequant16_hw(type, b, grp, dst);                                                                              \
    }                                                                                                                 \
    static Q512 void dequant16_int_##name(const unsigned char *b, int grp, mha_bf16 *restrict dst)                     \
    {                                                                                                                 \
        dequant16_int(type, b, grp, dst);                                                                             \
    }
MHA_QTYPE_LIST(DEQUANT16_OF)
#undef DEQUANT16_OF

#define HW(name, index) MHA_QENTRY(dequant16_hw, name, index)
#define INT(name, index) MHA_QENTRY(dequant16_int, name, index)
const mha_qbf16_ops mha_qbf16_avx512_bf16 = {.name = "avx512-bf16", .needs = "avx512_bf16",
                                             .dequant = {MHA_QTYPE_LIST(HW)}};
const mha_qbf16_ops mha_qbf16_avx512 = {.name = "avx512", .needs = "", .dequant = {MHA_QTYPE_LIST(INT)}};
#undef HW
#undef INT

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

/* A decode step reads each panel once, from memory: the bytes of the group MHA_QPREFETCH_GROUPS
 * on asked for while this one computes (qkernels.h). */
Q512_INLINE void prefetch_ahead(const unsigned char *panel, int g, size_t group_bytes)
{
    for (size_t at = 0; at < group_bytes; at += 64)
        _mm_prefetch((const char *)panel + (size_t)(g + MHA_QPREFETCH_GROUPS) * group_bytes + at, _MM_HINT_T0);
}

/* Group g of np panels of type t: each panel's block holding it (b) and the group's factors (f),
 * the group MHA_QPREFETCH_GROUPS on asked for. */
Q512_INLINE void group_of_panels(const mha_qtype *t, const int type, const unsigned char *const *p, int np, int g,
                                 const unsigned char **b, factors *f)
{
    const int groups = t->qk / MHA_QG;
    const size_t block_bytes = MHA_QP * t->bytes;
    for (int j = 0; j < np; j++) {
        b[j] = p[j] + (size_t)(g / groups) * block_bytes;
        f[j] = factors_of(type, b[j], g % groups);
        prefetch_ahead(p[j], g, block_bytes / groups);
    }
}

/* few's chains (qkernels.h) for rows ≤ 2 and np ≤ 4 panels of one type: each group's factors,
 * then input by input (a pair of them for 4-bit types) every panel's weights in registers and
 * every row's FMA; the panels' chains interleave, so no FMA waits on the one before it. */
Q512_INLINE void few_run(const mha_qtype *t, const int type, const unsigned char *const *p, int kk, const float *a,
                         ptrdiff_t lda, float *restrict acc, ptrdiff_t ld, const int rows, const int np)
{
    const int groups = t->qk / MHA_QG;
    __m512 s[2][4];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++)
            s[r][j] = _mm512_loadu_ps(acc + r * ld + j * MHA_QP);
    for (int g = 0; g < kk / MHA_QG; g++) {
        const unsigned char *b[4];
        factors f[4];
        group_of_panels(t, type, p, np, g, b, f);
        const float *x = a + g * MHA_QG;
        if (type == MHA_QT_Q8_0) {
            for (int i = 0; i < MHA_QG; i++)
                for (int j = 0; j < np; j++) {
                    const __m512i q = sbytes16(b[j] + MHA_Q8_0_Q + i * MHA_QP);
                    const __m512 w = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), f[j].d0, f[j].m0);
                    for (int r = 0; r < rows; r++)
                        s[r][j] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[r * lda + i]), s[r][j]);
                }
            continue;
        }
        for (int c = 0; c < MHA_QG / 4; c++)
            for (int j = 0; j < np; j++) {
                __m512i v[4];
                quad_ints(b[j], type, g % groups * MHA_QG / 4 + c, v);
                const __m512 d = c < MHA_QG / 8 ? f[j].d0 : f[j].d1, m = c < MHA_QG / 8 ? f[j].m0 : f[j].m1;
                for (int i = 0; i < 4; i++) {
                    const __m512 w = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[i]), d, m);
                    for (int r = 0; r < rows; r++)
                        s[r][j] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[r * lda + 4 * c + i]), s[r][j]);
                }
            }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++)
            _mm512_storeu_ps(acc + r * ld + j * MHA_QP, s[r][j]);
}

/* few_run with its rows and panels constants (2 or 1; 4, 2 or 1). */
#define FEW_RUN(r, n) few_run(t, type, p + j, kk, a, lda, acc + j * MHA_QP, ld, r, n)
Q512_INLINE void few_type(const mha_qtype *t, const int type, const unsigned char *const *p, int np, int kk,
                          const float *a, ptrdiff_t lda, int rows, float *restrict acc, ptrdiff_t ld)
{
    for (int j = 0, n; j < np; j += n) {
        n = np - j >= 4 ? 4 : np - j >= 2 ? 2 : 1;
        if (rows == 2)
            n == 4 ? FEW_RUN(2, 4) : n == 2 ? FEW_RUN(2, 2) : FEW_RUN(2, 1);
        else
            n == 4 ? FEW_RUN(1, 4) : n == 2 ? FEW_RUN(1, 2) : FEW_RUN(1, 1);
    }
}
#undef FEW_RUN

#define FEW_OF(name, type)                                                                                            \
    static Q512 void few_##name(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const float *a,     \
                             ptrdiff_t lda, int rows, float *restrict acc, ptrdiff_t ld)                              \
    {                                                                                                                 \
        few_type(t, type, p, np, kk, a, lda, rows, acc, ld);                                                          \
    }
MHA_QTYPE_LIST(FEW_OF)
#undef FEW_OF

/* ---- the integer products (qkernels.h: mha_qdot16) on AVX512_VNNI and AVX512_VBMI ----
 * A panel's 16 outputs are the 16 lanes of vpdpwssd, each lane two weights of one output (int16)
 * against two activations. Two rows of nibble pairs (inputs 4m … 4m + 3 of 16 outputs) become,
 * by one byte permutation zeroing every other byte, each output's two bytes as words: their low
 * nibbles are inputs 4m and 4m + 2, their high ones 4m + 1 and 4m + 3, which is how the packed
 * activations lie (qgemm.h), so a lane's two activations are one broadcast dword. Top bits (the
 * 5-bit types, Q6_K) come to bit 4 by vpmultishiftqb from each output's byte; Q8_0's signed bytes
 * go to the words' high halves and shift down with their sign. */
#define Q8V __attribute__((target(AVX512 ",f16c,avx512vnni,avx512vbmi")))
#define Q8V_INLINE __attribute__((target(AVX512 ",f16c,avx512vnni,avx512vbmi"), always_inline)) static inline

/* vpermb's indices: bytes 4o … 4o + 3 of the result are output o's bytes of rows (a, b, c, d) of
 * the source (16 outputs a row). */
#define LANE(a, b, c, d, o) 16 * (a) + (o), 16 * (b) + (o), 16 * (c) + (o), 16 * (d) + (o)
#define LANES(a, b, c, d)                                                                                             \
    {LANE(a, b, c, d, 0),  LANE(a, b, c, d, 1),  LANE(a, b, c, d, 2),  LANE(a, b, c, d, 3),                          \
     LANE(a, b, c, d, 4),  LANE(a, b, c, d, 5),  LANE(a, b, c, d, 6),  LANE(a, b, c, d, 7),                          \
     LANE(a, b, c, d, 8),  LANE(a, b, c, d, 9),  LANE(a, b, c, d, 10), LANE(a, b, c, d, 11),                         \
     LANE(a, b, c, d, 12), LANE(a, b, c, d, 13), LANE(a, b, c, d, 14), LANE(a, b, c, d, 15)}
/* rows (0, 1) or (2, 1) in words' low bytes (even bytes kept); (0, 2) or (1, 3) in their high
 * bytes (odd kept); row k in every byte */
static const unsigned char lanes_low[2][64] __attribute__((aligned(64))) = {LANES(0, 0, 1, 1), LANES(2, 2, 3, 3)},
                           lanes_high[2][64] __attribute__((aligned(64))) = {LANES(0, 0, 2, 2), LANES(1, 1, 3, 3)},
                           lanes_one[4][64] __attribute__((aligned(64))) = {LANES(0, 0, 0, 0), LANES(1, 1, 1, 1),
                                                                            LANES(2, 2, 2, 2), LANES(3, 3, 3, 3)};
#undef LANES
#undef LANE
static const __mmask64 low_bytes = 0x5555555555555555ull, high_bytes = 0xAAAAAAAAAAAAAAAAull;

/* vpmultishiftqb's offsets: the words' low bytes (bytes 0, 2, 4, 6 of a qword: two lanes) take
 * bit e of their byte to bit 4, offset 8·p + e − 4 (mod 64). The 5-bit types' byte holds eight
 * inputs' top bits (inputs 4m, 4m + 2: bits 0, 2 of the low half, 4, 6 of the high; the odd
 * inputs one more); Q6_K's byte four inputs' two (bits 0, 4; 2, 6). */
#define SHIFTS(a, b, c, d) ((uint64_t)(a) | (uint64_t)(b) << 16 | (uint64_t)(c) << 32 | (uint64_t)(d) << 48)
static const uint64_t top1[2][2] = {{SHIFTS(60, 14, 28, 46), SHIFTS(61, 15, 29, 47)},
                                    {SHIFTS(0, 18, 32, 50), SHIFTS(1, 19, 33, 51)}},
                      top2[2] = {SHIFTS(60, 16, 28, 48), SHIFTS(62, 18, 30, 50)};
#undef SHIFTS

Q8V_INLINE __m512i lanes(const unsigned char *idx)
{
    return _mm512_load_si512(idx);
}

/* v | (bits at bit 4 of multishift(h) masked by top): one ternary-logic op */
Q8V_INLINE __m512i with_top(__m512i v, uint64_t shifts, __m512i h, int top)
{
    return _mm512_ternarylogic_epi32(v, _mm512_multishift_epi64_epi8(_mm512_set1_epi64((long long)shifts), h),
                                     _mm512_set1_epi16((short)top), 0xF8);
}

/* Chunk m (inputs 4m … 4m + 3 of group grp) of a panel's block as words: lo[o] the weights of
 * inputs 4m, 4m + 2 of output o (lane o), hi[o] those of 4m + 1, 4m + 3. */
Q8V_INLINE void chunk_words(int type, const unsigned char *b, int grp, int m, __m512i *lo, __m512i *hi)
{
    if (type == MHA_QT_Q8_0) { /* rows 4m … 4m + 3: (0, 2) and (1, 3), sign-extended */
        const __m512i x = _mm512_loadu_si512(b + MHA_Q8_0_Q + 4 * m * MHA_QP);
        *lo = _mm512_srai_epi16(_mm512_maskz_permutexvar_epi8(high_bytes, lanes(lanes_high[0]), x), 8);
        *hi = _mm512_srai_epi16(_mm512_maskz_permutexvar_epi8(high_bytes, lanes(lanes_high[1]), x), 8);
        return;
    }
    const int k_type = type == MHA_QT_Q4_K || type == MHA_QT_Q5_K || type == MHA_QT_Q6_K;
    const unsigned char *nib = b + mha_q_nib_at(type) + (k_type ? grp * MHA_QG / 2 * MHA_QP : 0);
    /* nibble rows 2m, 2m + 1: rows (0, 1) or (2, 3) of the four from 4·(m / 2) */
    const __m512i x = _mm512_loadu_si512(nib + 4 * (m / 2) * MHA_QP);
    const __m512i w = _mm512_maskz_permutexvar_epi8(low_bytes, lanes(lanes_low[m % 2]), x);
    *lo = _mm512_and_si512(w, _mm512_set1_epi16(0xF));
    *hi = _mm512_srli_epi16(w, 4);
    if (mha_q_hi_bits(type) == 1) { /* byte m / 2 of the group's four: inputs 8·(m / 2) … at bits 0 … 7 */
        const unsigned char *t = b + mha_q_hi_at(type) + (type == MHA_QT_Q5_K ? grp * 4 * MHA_QP : 0);
        const __m512i h = _mm512_permutexvar_epi8(lanes(lanes_one[m / 2]), _mm512_loadu_si512(t));
        *lo = with_top(*lo, top1[m % 2][0], h, 0x10);
        *hi = with_top(*hi, top1[m % 2][1], h, 0x10);
    } else if (mha_q_hi_bits(type) == 2) { /* Q6_K: byte m of the group's eight, four inputs' two bits */
        const unsigned char *t = b + MHA_Q6_K_HI + (8 * grp + 4 * (m / 4)) * MHA_QP;
        const __m512i h = _mm512_permutexvar_epi8(lanes(lanes_one[m % 4]), _mm512_loadu_si512(t));
        *lo = with_top(*lo, top2[0], h, 0x30);
        *hi = with_top(*hi, top2[1], h, 0x30);
    }
}

Q8V_INLINE __m512i dword_at(const unsigned char *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* rows (≤ 2; ≤ 4 with np ≤ 2; ≤ 8 with np 1) × np panels of one type: per group, each chunk's bytes once
 * for every row, the integer sums in lanes, then the float steps of mha_qdot16. */
Q8V_INLINE void dot_run(const mha_qtype *t, const int type, const unsigned char *const *p, int kk,
                        const unsigned char *x, size_t xs, float *restrict acc, ptrdiff_t ld, const int rows,
                        const int np)
{
    const int groups = t->qk / MHA_QG, halves = type == MHA_QT_Q6_K ? 2 : 1;
    const int offset = mha_q_offset(type);
    __m512 s[8][4];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++)
            s[r][j] = _mm512_loadu_ps(acc + r * ld + j * MHA_QP);
    for (int g = 0; g < kk / MHA_QG; g++) {
        const unsigned char *b[4];
        factors f[4];
        group_of_panels(t, type, p, np, g, b, f);
        for (int h = 0; h < halves; h++) {
            __m512i is[8][4];
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < np; j++)
                    is[r][j] = _mm512_setzero_si512();
            for (int m = h * 8 / halves; m < (h + 1) * 8 / halves; m++)
                for (int j = 0; j < np; j++) {
                    __m512i lo, hi;
                    chunk_words(type, b[j], g % groups, m, &lo, &hi);
                    for (int r = 0; r < rows; r++) {
                        const unsigned char *a = x + r * xs + 2 * (g * MHA_QG + 4 * m);
                        is[r][j] = _mm512_dpwssd_epi32(is[r][j], lo, dword_at(a));
                        is[r][j] = _mm512_dpwssd_epi32(is[r][j], hi, dword_at(a + 4));
                    }
                }
            for (int r = 0; r < rows; r++) {
                const unsigned char *row = x + r * xs;
                const __m512 d = _mm512_set1_ps(mha_a16_d(row, kk)[g]);
                const int32_t *sum = mha_a16_s(row, kk) + 2 * g;
                const int off_sum = halves == 2 ? offset * sum[h] : offset * (sum[0] + sum[1]);
                for (int j = 0; j < np; j++) {
                    const __m512 dd = _mm512_mul_ps(h ? f[j].d1 : f[j].d0, d);
                    if (mha_q_has_min(type)) {
                        s[r][j] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(is[r][j]), s[r][j]);
                        s[r][j] = _mm512_fmadd_ps(f[j].m0, _mm512_set1_ps(mha_a16_u(row, kk)[g]), s[r][j]);
                    } else {
                        const __m512i v = _mm512_sub_epi32(is[r][j], _mm512_set1_epi32(off_sum));
                        s[r][j] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(v), s[r][j]);
                    }
                }
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++)
            _mm512_storeu_ps(acc + r * ld + j * MHA_QP, s[r][j]);
}

/* dot_run with its rows and panels constants: rows 1–2 on up to 4 panels, 3–4 on up to 2, 5–8
 * on one (the sums of a pass in registers). */
#define DOT_RUN(r, n) dot_run(t, type, p + j, kk, x + (size_t)r0 * xs, xs, acc + r0 * ld + j * MHA_QP, ld, r, n)
Q8V_INLINE void dot_type(const mha_qtype *t, const int type, const unsigned char *const *p, int np, int kk,
                         const unsigned char *x, size_t xs, int rows, float *restrict acc, ptrdiff_t ld)
{
    for (int r0 = 0, rr; r0 < rows; r0 += rr) {
        rr = rows - r0 >= 8 ? 8 : rows - r0;
        for (int j = 0, n; j < np; j += n) {
            n = np - j >= 4 && rr <= 2 ? 4 : np - j >= 2 && rr <= 4 ? 2 : 1;
            switch (rr) {
            case 8: DOT_RUN(8, 1); break;
            case 7: DOT_RUN(7, 1); break;
            case 6: DOT_RUN(6, 1); break;
            case 5: DOT_RUN(5, 1); break;
            case 4: n == 2 ? DOT_RUN(4, 2) : DOT_RUN(4, 1); break;
            case 3: n == 2 ? DOT_RUN(3, 2) : DOT_RUN(3, 1); break;
            case 2: n == 4 ? DOT_RUN(2, 4) : n == 2 ? DOT_RUN(2, 2) : DOT_RUN(2, 1); break;
            default: n == 4 ? DOT_RUN(1, 4) : n == 2 ? DOT_RUN(1, 2) : DOT_RUN(1, 1);
            }
        }
    }
}
#undef DOT_RUN

#define DOT_OF(name, type)                                                                                            \
    static Q8V void dot_##name(const mha_qtype *t, const unsigned char *const *p, int np, int kk,                    \
                               const unsigned char *x, size_t xs, int rows, float *restrict acc, ptrdiff_t ld)        \
    {                                                                                                                 \
        dot_type(t, type, p, np, kk, x, xs, rows, acc, ld);                                                           \
    }
MHA_QTYPE_LIST(DOT_OF)
#undef DOT_OF

#define DOT(name, index) MHA_QENTRY(dot, name, index)
const mha_qdot16_ops mha_qdot16_avx512_vnni = {.name = "avx512-vnni", .needs = "avx512_vnni avx512vbmi",
                                      .dot = {MHA_QTYPE_LIST(DOT)}};
#undef DOT

#define DEQUANT(name, index) MHA_QENTRY(dequant, name, index)
#define FEW(name, index) MHA_QENTRY(few, name, index)
const mha_qkernels mha_qk_avx512 = {
    .dequant = {MHA_QTYPE_LIST(DEQUANT)},
    .bf16w = {&mha_qbf16_avx512_bf16, &mha_qbf16_avx512, NULL},
    .tile = tile_avx512,
    .few = {MHA_QTYPE_LIST(FEW)},
    .dot16 = {&mha_qdot16_avx512_vnni, &mha_qdot16_avx2_vnni, &mha_qdot16_avx2, &mha_qdot16_ref, NULL},
};
#undef DEQUANT
#undef FEW
