/* neon_quant.c — the neon table's operations on quantized weights (qkernels.h): the float32
 * tile (each output's FMA chain in input order, a panel's 16 outputs in 4 registers) and the
 * integer products (a group's weights unpacked to int16 once, 16 outputs wide, then SMLAL by
 * each row's int16 activation into int32: exact, so ref's sums in any order; then ref's float
 * chain, 4 outputs a register), and dequantizing into floats the same way (ref's factors, 16
 * outputs a row of fma). */
#include "neon.h"
#include "qgemm.h"

/* R rows (a compile-time count: the accumulators stay in registers) of one panel: acc's 16
 * outputs of row r += w[i][o]·a[r][i], input by input, each input's 16 weights loaded once. */
static inline __attribute__((always_inline)) void tile_rows(const int R, const float *restrict w, int kc,
                                                           const float *a, ptrdiff_t lda, float *restrict acc,
                                                           ptrdiff_t ld)
{
    float32x4_t s[4][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            s[r][v] = vld1q_f32(acc + r * ld + 4 * v);
    for (int i = 0; i < kc; i++) {
        const float32x4_t w0 = vld1q_f32(w + i * MHA_QP), w1 = vld1q_f32(w + i * MHA_QP + 4),
                          w2 = vld1q_f32(w + i * MHA_QP + 8), w3 = vld1q_f32(w + i * MHA_QP + 12);
        for (int r = 0; r < R; r++) {
            const float32x4_t x = vld1q_dup_f32(a + r * lda + i);
            s[r][0] = vfmaq_f32(s[r][0], w0, x), s[r][1] = vfmaq_f32(s[r][1], w1, x);
            s[r][2] = vfmaq_f32(s[r][2], w2, x), s[r][3] = vfmaq_f32(s[r][3], w3, x);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            vst1q_f32(acc + r * ld + 4 * v, s[r][v]);
}

/* acc[r·ld + p·MHA_QP + o] = fma(w[p·wps + i·MHA_QP + o], a[r·lda + i], …), i in order. */
static void tile_neon(const float *restrict w, ptrdiff_t wps, int kc, int np, const float *a, ptrdiff_t lda, int rows,
                      float *restrict acc, ptrdiff_t ld)
{
    for (int p = 0; p < np; p++) {
        const float *wp = w + p * wps;
        float *y = acc + p * MHA_QP;
        int r = 0;
        for (; r + 4 <= rows; r += 4)
            tile_rows(4, wp, kc, a + r * lda, lda, y + r * ld, ld);
        if (rows - r >= 2)
            tile_rows(2, wp, kc, a + r * lda, lda, y + r * ld, ld), r += 2;
        if (rows - r >= 1)
            tile_rows(1, wp, kc, a + r * lda, lda, y + r * ld, ld);
    }
}

static void few_neon(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const float *a, ptrdiff_t lda,
                     int rows, float *restrict acc, ptrdiff_t ld)
{
    mha_qfew_by_groups(&mha_qk_neon, t, p, np, kk, a, lda, rows, acc, ld);
}

/* Group grp of a panel's block as integers, w[i][o] for input i of the group and output o (Q8_0
 * signed, else unsigned below 64): ref's group_ints, 16 outputs at a time. */
static void group_weights(int type, const unsigned char *b, int grp, int16_t w[MHA_QG][MHA_QP])
{
    if (type == MHA_QT_Q8_0) {
        for (int i = 0; i < MHA_QG; i++) {
            const int8x16_t q = vld1q_s8((const int8_t *)b + MHA_Q8_0_Q + i * MHA_QP);
            vst1q_s16(w[i], vmovl_s8(vget_low_s8(q)));
            vst1q_s16(w[i] + 8, vmovl_high_s8(q));
        }
        return;
    }
    const int nib_at = mha_q_nib_at(type), hi_at = mha_q_hi_at(type), hi_bits = mha_q_hi_bits(type);
    for (int i = 0; i < MHA_QG; i++) {
        const int at = grp * MHA_QG + i; /* input at of the block */
        const uint8x16_t pairs = vld1q_u8(b + nib_at + (at / 2) * MHA_QP);
        uint8x16_t q = at & 1 ? vshrq_n_u8(pairs, 4) : vandq_u8(pairs, vdupq_n_u8(0xF));
        if (hi_bits) { /* bits at·hi_bits of the top field's rows, hi_bits of them, above the nibble */
            const int per = 8 / hi_bits, shift = hi_bits * (at % per);
            const uint8x16_t hi = vld1q_u8(b + hi_at + (at / per) * MHA_QP);
            const uint8x16_t top = vandq_u8(vshlq_u8(hi, vdupq_n_s8((int8_t)-shift)), vdupq_n_u8((1u << hi_bits) - 1));
            q = vorrq_u8(q, vshlq_n_u8(top, 4));
        }
        vst1q_s16(w[i], vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(q))));
        vst1q_s16(w[i] + 8, vreinterpretq_s16_u16(vmovl_high_u8(q)));
    }
}

/* Σ w[i][o]·a_i over 16 inputs into s[4] (outputs 4v .. 4v + 3), exact; a the packed row's
 * int16 values, each 4 inputs 4m, 4m + 2, 4m + 1, 4m + 3 (mha_a16_at): input 4m + k at lane
 * (k % 2)·2 + k / 2 of its 4, the lanes constants as SMLAL by element wants them. */
static inline __attribute__((always_inline)) void sum_16(int16_t (*w)[MHA_QP], const int16_t *a, int32x4_t s[4])
{
    for (int v = 0; v < 4; v++)
        s[v] = vdupq_n_s32(0);
    for (int m = 0; m < 16; m += 4) {
        const int16x4_t x = vld1_s16(a + m);
#define MAC(k, lane)                                                                                                   \
    do {                                                                                                               \
        const int16x8_t w0 = vld1q_s16(w[m + (k)]), w1 = vld1q_s16(w[m + (k)] + 8);                                    \
        s[0] = vmlal_lane_s16(s[0], vget_low_s16(w0), x, lane), s[1] = vmlal_high_lane_s16(s[1], w0, x, lane);        \
        s[2] = vmlal_lane_s16(s[2], vget_low_s16(w1), x, lane), s[3] = vmlal_high_lane_s16(s[3], w1, x, lane);        \
    } while (0)
        MAC(0, 0);
        MAC(1, 2);
        MAC(2, 1);
        MAC(3, 3);
#undef MAC
    }
}

/* A group's integers (group_weights) and ref's factors for each 16 inputs, by output. */
typedef struct group_of {
    int16_t q[MHA_QG][MHA_QP];
    float d[2][MHA_QP], m[2][MHA_QP];
} group_of;

static void group_read(int type, const unsigned char *b, int grp, group_of *g)
{
    group_weights(type, b, grp, g->q);
    for (int o = 0; o < MHA_QP; o++) {
        float d2[2], m2[2];
        mha_q_dequant_factors_ref(type, b, grp, o, d2, m2);
        g->d[0][o] = d2[0], g->d[1][o] = d2[1], g->m[0][o] = m2[0], g->m[1][o] = m2[1];
    }
}

/* Input i's weights of outputs 4v .. 4v + 3: fma(q, d, m), as ref's dequant. */
static inline __attribute__((always_inline)) float32x4_t group_weight4(const group_of *g, int i, int v)
{
    const float32x4_t x = vcvtq_f32_s32(vmovl_s16(vld1_s16(g->q[i] + 4 * v))); /* exact */
    return vfmaq_f32(vld1q_f32(g->m[i / 16] + 4 * v), x, vld1q_f32(g->d[i / 16] + 4 * v));
}

/* A group as floats, as ref's dequant, 4 outputs a register. */
static void dequant_neon(int type, const unsigned char *b, int grp, float *restrict w)
{
    group_of g;
    group_read(type, b, grp, &g);
    for (int i = 0; i < MHA_QG; i++)
        for (int v = 0; v < 4; v++)
            vst1q_f32(w + i * MHA_QP + 4 * v, group_weight4(&g, i, v));
}

/* The same weights rounded to bf16 (bf16_round4: mha_bf16_round's bits, NaN and infinite factors
 * included) as B-panel pairs: inputs 2p and 2p + 1 of each output side by side (vst2's zip). */
static void dequant16_neon(int type, const unsigned char *b, int grp, mha_bf16 *restrict dst)
{
    group_of g;
    group_read(type, b, grp, &g);
    for (int i = 0; i < MHA_QG; i += 2)
        for (int v = 0; v < 4; v++) {
            const uint16x4x2_t pair = {
                {bf16_round4(group_weight4(&g, i, v)), bf16_round4(group_weight4(&g, i + 1, v))}};
            vst2_u16(dst + (size_t)i * MHA_QP + 8 * v, pair);
        }
}

#define DEQUANT(name, index)                                                                                           \
    static void dequant_##name##_neon(const unsigned char *b, int grp, float *restrict w)                             \
    {                                                                                                                  \
        dequant_neon(index, b, grp, w);                                                                                \
    }                                                                                                                  \
    static void dequant16_##name##_neon(const unsigned char *b, int grp, mha_bf16 *restrict dst)                      \
    {                                                                                                                  \
        dequant16_neon(index, b, grp, dst);                                                                            \
    }
MHA_QTYPE_LIST(DEQUANT)
#undef DEQUANT

#define DEQUANT16(name, index) [index] = dequant16_##name##_neon,
static const mha_qbf16_ops qbf16_neon = {.name = "neon", .needs = "", .dequant = {MHA_QTYPE_LIST(DEQUANT16)}};
#undef DEQUANT16

static void dot_neon(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const unsigned char *x,
                     size_t xs, int rows, float *restrict acc, ptrdiff_t ld)
{
    const int groups = t->qk / MHA_QG, type = t->index, q6 = type == MHA_QT_Q6_K, has_min = mha_q_has_min(type);
    for (int j = 0; j < np; j++)
        for (int g = 0; g < kk / MHA_QG; g++) {
            const unsigned char *b = p[j] + (size_t)(g / groups) * MHA_QP * t->bytes;
            int16_t w[MHA_QG][MHA_QP];
            float D[2][MHA_QP], M[MHA_QP];
            int off = 0;
            group_weights(type, b, g % groups, w);
            for (int o = 0; o < MHA_QP; o++) {
                float d2[2];
                off = mha_q_group_factors_ref(type, b, g % groups, o, d2, &M[o]);
                D[0][o] = d2[0], D[1][o] = d2[1];
            }
            for (int r = 0; r < rows; r++) {
                const unsigned char *row = x + (size_t)r * xs;
                const int16_t *a = mha_a16_q(row) + g * MHA_QG;
                const float d = mha_a16_d(row, kk)[g], u = mha_a16_u(row, kk)[g];
                const int32_t *s16 = mha_a16_s(row, kk) + 2 * g;
                int32x4_t sum[2][4]; /* [inputs 0-15, 16-31][outputs 4v .. 4v + 3] */
                for (int h = 0; h < 2; h++)
                    sum_16(w + 16 * h, a + 16 * h, sum[h]);
                float *y = acc + r * ld + j * MHA_QP;
                for (int v = 0; v < 4; v++) {
                    float32x4_t s = vld1q_f32(y + 4 * v);
                    if (q6)
                        for (int h = 0; h < 2; h++) {
                            const int32x4_t isum = vsubq_s32(sum[h][v], vdupq_n_s32(off * s16[h]));
                            s = vfmaq_f32(s, vmulq_n_f32(vld1q_f32(D[h] + 4 * v), d), vcvtq_f32_s32(isum));
                        }
                    else {
                        const int32x4_t isum =
                            vsubq_s32(vaddq_s32(sum[0][v], sum[1][v]), vdupq_n_s32(off * (s16[0] + s16[1])));
                        s = vfmaq_f32(s, vmulq_n_f32(vld1q_f32(D[0] + 4 * v), d), vcvtq_f32_s32(isum));
                        if (has_min)
                            s = vfmaq_f32(s, vld1q_f32(M + 4 * v), vdupq_n_f32(u));
                    }
                    vst1q_f32(y + 4 * v, s);
                }
            }
        }
}

#define DOT(name, index) [index] = dot_neon,
const mha_qdot16_ops mha_qdot16_neon = {.name = "neon", .needs = "", .dot = {MHA_QTYPE_LIST(DOT)}};
#undef DOT

#define FEW(name, index) [index] = few_neon,
const mha_qkernels mha_qk_neon = {
#define DEQUANT(name, index) [index] = dequant_##name##_neon,
    .dequant = {MHA_QTYPE_LIST(DEQUANT)},
#undef DEQUANT
    .tile = tile_neon,
    .few = {MHA_QTYPE_LIST(FEW)},
    .dot16 = {&mha_qdot16_neon, NULL},
    .bf16w = {&qbf16_neon, NULL},
};
#undef FEW
