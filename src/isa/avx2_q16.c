/* avx2_q16.c — the avx2 table's integer products (qkernels.h: mha_qdot16) on AVX2 alone, which
 * every AVX2 CPU runs (Zen 3 has no VNNI): a panel's weights as int16 pairs, each pair times two
 * of a row's int16 activations and summed into int32 (_mm256_madd_epi16), then ref's float chains.
 *
 * A 32-bit lane holds one output's weights of two inputs of one parity, 4m and 4m + 2 ("lo") or
 * 4m + 1 and 4m + 3 ("hi"), as the packed activations lie (qgemm.h), so a lane's two activations
 * are one broadcast dword. A panel's 16 outputs are two vectors, but not halves: two field rows
 * of 16 bytes, their 8-byte halves interleaved by one lane-crossing step (vpermq), give each
 * output's two bytes by one in-lane shuffle, which leaves A = outputs 0-3 | 8-11 and B = 4-7 |
 * 12-15 (lane order). The factors are read in that order too, and the sums are put back in
 * output order once, at the end. */
#include "avx2.h"
#include "qgemm.h"
#include "qkernels.h"

#include <stdint.h>
#include <string.h>

/* avx2_q16_vnni.c builds this file again with AVX-VNNI's sums (Q16_VNNI 1): one instruction for
 * the multiply, its pairs and the int32 sum. */
#ifndef Q16_VNNI
#define Q16_VNNI 0
#define Q16_TARGET AVX2
#define Q16_OPS mha_qdot16_avx2
#define Q16_NAME "avx2"
#define Q16_NEEDS ""
#endif

#define Q16 __attribute__((target(Q16_TARGET)))
#define Q16_INLINE __attribute__((target(Q16_TARGET), always_inline)) static inline

Q16_INLINE __m128i load16(const unsigned char *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

Q16_INLINE __m256i load32(const unsigned char *p)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* The lane order of 16 floats given as outputs 0-7 (lo) and 8-15 (hi): v[0] A, v[1] B. */
Q16_INLINE void lanes_ps(__m256 lo, __m256 hi, __m256 v[2])
{
    v[0] = _mm256_permute2f128_ps(lo, hi, 0x20), v[1] = _mm256_permute2f128_ps(lo, hi, 0x31);
}

Q16_INLINE __m256 f16x8(const unsigned char *p)
{
    return _mm256_cvtph_ps(load16(p));
}

Q16_INLINE __m256 bytes8_ps(const unsigned char *p, int is_signed)
{
    const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
}

/* A group's factors in lane order: D (Q6_K: of its 16 inputs h) and the float min M of the
 * min types, the float path's (factors_of in avx2_quant.c), in ref's roundings. */
typedef struct qfactors {
    __m256 d[2], m[2]; /* [A or B] */
} qfactors;

Q16_INLINE qfactors factors_in_lanes(int type, const unsigned char *b, int grp, int h)
{
    qfactors f = {.m = {_mm256_setzero_ps(), _mm256_setzero_ps()}};
    if (type == MHA_QT_Q6_K) {
        const unsigned char *sc = b + MHA_Q6_K_SC + (2 * grp + h) * MHA_QP;
        lanes_ps(_mm256_mul_ps(f16x8(b), bytes8_ps(sc, 1)), _mm256_mul_ps(f16x8(b + 16), bytes8_ps(sc + 8, 1)), f.d);
    } else if (type == MHA_QT_Q4_K || type == MHA_QT_Q5_K) { /* the same scales, d and dmin */
        __m256 d[2], m[2];
        for (int k = 0; k < 2; k++) {
            const unsigned char *q = b + MHA_Q4_K_SC + 8 * k;
            const __m256i low6 = _mm256_set1_epi32(63), low4 = _mm256_set1_epi32(0xF);
            __m256i sc, mn;
            if (grp < 4) {
                sc = _mm256_and_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + grp * MHA_QP))), low6);
                mn = _mm256_and_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + (grp + 4) * MHA_QP))),
                                      low6);
            } else {
                const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + (grp + 4) * MHA_QP)));
                const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + (grp - 4) * MHA_QP)));
                const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + grp * MHA_QP)));
                sc = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_slli_epi32(_mm256_srli_epi32(lo, 6), 4));
                mn = _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_srli_epi32(hi, 6), 4));
            }
            d[k] = _mm256_mul_ps(f16x8(b + 16 * k), _mm256_cvtepi32_ps(sc));
            m[k] = _mm256_xor_ps(_mm256_mul_ps(f16x8(b + MHA_Q4_K_DMIN + 16 * k), _mm256_cvtepi32_ps(mn)),
                                 _mm256_set1_ps(-0.0f));
        }
        lanes_ps(d[0], d[1], f.d), lanes_ps(m[0], m[1], f.m);
    } else {
        lanes_ps(f16x8(b), f16x8(b + 16), f.d);
        if (type == MHA_QT_Q4_1 || type == MHA_QT_Q5_1) /* Q5_1's m at the same place */
            lanes_ps(f16x8(b + MHA_Q4_1_M), f16x8(b + MHA_Q4_1_M + 16), f.m);
    }
    return f;
}

/* vpshufb's controls. pairs: on rows (R0, R1) as [R0 0-7, R1 0-7 | R0 8-15, R1 8-15], lane k of
 * A = output k's bytes of R0 and R1 as words ([0] outputs 0-3 | 8-11, [1] B's 4-7 | 12-15).
 * tops: on one row in both halves, lane k = output k's byte in both words' high bytes. */
#define PAIR(k) k, -128, 8 + k, -128
#define TOP(k) -128, k, -128, k
static const int8_t pairs[2][32] __attribute__((aligned(32))) = {
    {PAIR(0), PAIR(1), PAIR(2), PAIR(3), PAIR(0), PAIR(1), PAIR(2), PAIR(3)},
    {PAIR(4), PAIR(5), PAIR(6), PAIR(7), PAIR(4), PAIR(5), PAIR(6), PAIR(7)}};
static const int8_t tops[2][32] __attribute__((aligned(32))) = {
    {TOP(0), TOP(1), TOP(2), TOP(3), TOP(8), TOP(9), TOP(10), TOP(11)},
    {TOP(4), TOP(5), TOP(6), TOP(7), TOP(12), TOP(13), TOP(14), TOP(15)}};
#undef PAIR
#undef TOP

Q16_INLINE __m256i control(const int8_t *c)
{
    return _mm256_load_si256((const __m256i *)(const void *)c);
}

/* _mm256_mulhi_epu16's factors that take bit e0 of a word's high byte to bit 4 of the lane's
 * first word and bit e1 to bit 4 of its second (a shift right by 4 + e each, which AVX2 has
 * only as one count for all words). */
Q16_INLINE __m256i to_bit4(int e0, int e1)
{
    return _mm256_set1_epi32((int)((1u << (12 - e1)) << 16 | 1u << (12 - e0)));
}

/* Chunk m (inputs 4m … 4m + 3 of group grp) of a panel's block as words in lane order: w[0] and
 * w[1] (A, B) the weights of inputs 4m and 4m + 2, w[2] and w[3] those of 4m + 1 and 4m + 3;
 * Q8_0 signed, the others unsigned with their top bits. */
Q16_INLINE void chunk_words(int type, const unsigned char *b, int grp, int m, __m256i w[4])
{
    if (type == MHA_QT_Q8_0) { /* rows are inputs: (R0, R2) and (R1, R3), sign-extended */
        const unsigned char *q = b + MHA_Q8_0_Q + 4 * m * MHA_QP;
        __m256i r[4];
        for (int i = 0; i < 4; i++)
            r[i] = _mm256_cvtepi8_epi16(load16(q + i * MHA_QP));
        w[0] = _mm256_unpacklo_epi16(r[0], r[2]), w[1] = _mm256_unpackhi_epi16(r[0], r[2]);
        w[2] = _mm256_unpacklo_epi16(r[1], r[3]), w[3] = _mm256_unpackhi_epi16(r[1], r[3]);
        return;
    }
    /* nibble rows 2m (inputs 4m low, 4m + 1 high) and 2m + 1 (4m + 2, 4m + 3) */
    const int k_type = type == MHA_QT_Q4_K || type == MHA_QT_Q5_K || type == MHA_QT_Q6_K;
    const unsigned char *nib = b + mha_q_nib_at(type) + (k_type ? grp * MHA_QG / 2 * MHA_QP : 0);
    const __m256i x = _mm256_permute4x64_epi64(load32(nib + 2 * m * MHA_QP), 0xD8);
    for (int k = 0; k < 2; k++) {
        const __m256i u = _mm256_shuffle_epi8(x, control(pairs[k]));
        w[k] = _mm256_and_si256(u, _mm256_set1_epi16(0xF)), w[2 + k] = _mm256_srli_epi16(u, 4);
    }
    if (!mha_q_hi_bits(type))
        return;
    __m256i top, lo, hi;
    const unsigned char *t;
    if (mha_q_hi_bits(type) == 1) { /* byte m / 2 of the group's four: inputs 8·(m / 2) … at bits 0 … 7 */
        const int e = 4 * (m % 2);
        t = b + mha_q_hi_at(type) + ((type == MHA_QT_Q5_K ? grp * 4 : 0) + m / 2) * MHA_QP;
        top = _mm256_set1_epi16(0x10), lo = to_bit4(e, e + 2), hi = to_bit4(e + 1, e + 3);
    } else { /* Q6_K: byte m of the group's eight, inputs 4m … 4m + 3 at bits 0, 2, 4, 6 */
        t = b + MHA_Q6_K_HI + (8 * grp + m) * MHA_QP;
        top = _mm256_set1_epi16(0x30), lo = to_bit4(0, 4), hi = to_bit4(2, 6);
    }
    const __m256i h = _mm256_broadcastsi128_si256(load16(t));
    for (int k = 0; k < 2; k++) {
        const __m256i hk = _mm256_shuffle_epi8(h, control(tops[k]));
        w[k] = _mm256_or_si256(w[k], _mm256_and_si256(_mm256_mulhi_epu16(hk, lo), top));
        w[2 + k] = _mm256_or_si256(w[2 + k], _mm256_and_si256(_mm256_mulhi_epu16(hk, hi), top));
    }
}

Q16_INLINE __m256i dword_at(const unsigned char *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* s + the lanes' sums of w0 · a0 and w1 · a1 (words in pairs). */
Q16_INLINE __m256i sums(__m256i s, __m256i w0, __m256i a0, __m256i w1, __m256i a1)
{
#if Q16_VNNI
    return _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(s, w0, a0), w1, a1);
#else
    return _mm256_add_epi32(s, _mm256_add_epi32(_mm256_madd_epi16(w0, a0), _mm256_madd_epi16(w1, a1)));
#endif
}

/* rows (≤ 4) × np (≤ 4) panels of one type: per group, each chunk's words once for every row,
 * the integer sums in lanes, then the float steps of mha_qdot16. */
Q16_INLINE void dot_run(const mha_qtype *t, const int type, const unsigned char *const *p, int kk,
                        const unsigned char *x, size_t xs, float *restrict acc, ptrdiff_t ld, const int rows,
                        const int np)
{
    const int groups = t->qk / MHA_QG, halves = type == MHA_QT_Q6_K ? 2 : 1;
    const int offset = mha_q_offset(type);
    const size_t block_bytes = MHA_QP * t->bytes;
    __m256 s[4][4][2]; /* [row][panel][A or B] */
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++) {
            const float *c = acc + r * ld + j * MHA_QP;
            s[r][j][0] = _mm256_loadu2_m128(c + 8, c), s[r][j][1] = _mm256_loadu2_m128(c + 12, c + 4);
        }
    for (int g = 0; g < kk / MHA_QG; g++) {
        const unsigned char *b[4];
        for (int j = 0; j < np; j++)
            b[j] = p[j] + (size_t)(g / groups) * block_bytes;
        for (int h = 0; h < halves; h++) {
            __m256i is[4][4][2];
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < np; j++)
                    is[r][j][0] = is[r][j][1] = _mm256_setzero_si256();
            for (int m = h * 8 / halves; m < (h + 1) * 8 / halves; m++)
                for (int j = 0; j < np; j++) {
                    __m256i w[4];
                    chunk_words(type, b[j], g % groups, m, w);
                    for (int r = 0; r < rows; r++) {
                        const unsigned char *a = x + r * xs + 2 * (g * MHA_QG + 4 * m);
                        const __m256i a0 = dword_at(a), a1 = dword_at(a + 4);
                        for (int k = 0; k < 2; k++) {
                            is[r][j][k] = sums(is[r][j][k], w[k], a0, w[2 + k], a1);
                            /* a chain in a register: else GCC reassociates the group's sums into a
                             * tree whose partial sums spill to the stack */
                            __asm__("" : "+x"(is[r][j][k]));
                        }
                    }
                }
            for (int j = 0; j < np; j++) {
                const qfactors f = factors_in_lanes(type, b[j], g % groups, h);
                for (int r = 0; r < rows; r++) {
                    const unsigned char *row = x + r * xs;
                    const __m256 d = _mm256_set1_ps(mha_a16_d(row, kk)[g]);
                    const int32_t *sum = mha_a16_s(row, kk) + 2 * g;
                    const __m256i off = _mm256_set1_epi32(halves == 2 ? offset * sum[h] : offset * (sum[0] + sum[1]));
                    for (int k = 0; k < 2; k++) {
                        const __m256 dd = _mm256_mul_ps(f.d[k], d);
                        if (mha_q_has_min(type)) {
                            s[r][j][k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(is[r][j][k]), s[r][j][k]);
                            s[r][j][k] = _mm256_fmadd_ps(f.m[k], _mm256_set1_ps(mha_a16_u(row, kk)[g]), s[r][j][k]);
                        } else {
                            const __m256i v = _mm256_sub_epi32(is[r][j][k], off);
                            s[r][j][k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(v), s[r][j][k]);
                        }
                    }
                }
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < np; j++) {
            float *c = acc + r * ld + j * MHA_QP;
            _mm256_storeu2_m128(c + 8, c, s[r][j][0]), _mm256_storeu2_m128(c + 12, c + 4, s[r][j][1]);
        }
}

/* dot_run with its rows and panels constants: one row on up to 4 panels, two on up to 2, 3–4 on
 * one (a pass's int32 sums, 2 vectors a row and panel, in registers beside a chunk's words). */
#define DOT_RUN(r, n) dot_run(t, type, p + j, kk, x + (size_t)r0 * xs, xs, acc + r0 * ld + j * MHA_QP, ld, r, n)
Q16_INLINE void dot_type(const mha_qtype *t, const int type, const unsigned char *const *p, int np, int kk,
                         const unsigned char *x, size_t xs, int rows, float *restrict acc, ptrdiff_t ld)
{
    for (int r0 = 0, rr; r0 < rows; r0 += rr) {
        rr = rows - r0 >= 4 ? 4 : rows - r0;
        for (int j = 0, n; j < np; j += n) {
            const int most = rr == 1 ? 4 : rr == 2 ? 2 : 1;
            n = np - j < most ? np - j : most;
            switch (rr) {
            case 4: DOT_RUN(4, 1); break;
            case 3: DOT_RUN(3, 1); break;
            case 2: n == 2 ? DOT_RUN(2, 2) : DOT_RUN(2, 1); break;
            default: n == 4 ? DOT_RUN(1, 4) : n == 3 ? DOT_RUN(1, 3) : n == 2 ? DOT_RUN(1, 2) : DOT_RUN(1, 1);
            }
        }
    }
}
#undef DOT_RUN

#define DOT_OF(name, type)                                                                                            \
    static Q16 void dot_##name(const mha_qtype *t, const unsigned char *const *p, int np, int kk,                    \
                               const unsigned char *x, size_t xs, int rows, float *restrict acc, ptrdiff_t ld)        \
    {                                                                                                                 \
        dot_type(t, type, p, np, kk, x, xs, rows, acc, ld);                                                           \
    }
MHA_QTYPE_LIST(DOT_OF)
#undef DOT_OF

#define DOT(name, index) MHA_QENTRY(dot, name, index)
const mha_qdot16_ops Q16_OPS = {.name = Q16_NAME, .needs = Q16_NEEDS, .dot = {MHA_QTYPE_LIST(DOT)}};
#undef DOT
