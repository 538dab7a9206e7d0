/* ref_quant.c — the portable quantized-weight operations (qkernels.h): the definition of their
 * numerics, which the vector tables reproduce bit for bit. */
#include "qkernels.h"
#include "ref.h"

#include "bgemm.h" /* mha_f16_float */
#include "qgemm.h" /* the packed activations */

#include <math.h>
#include <string.h>

static float f16_at(const unsigned char *p)
{
    mha_f16 h;
    memcpy(&h, p, sizeof h);
    return mha_f16_float(h);
}

/* The 4-bit value of input i (of the block) from a field of pairs. */
static int nibble(const unsigned char *nib, int i, int o)
{
    return (nib[(i / 2) * MHA_QP + o] >> (4 * (i & 1))) & 0xF;
}

/* Input i's 5-bit value: its nibble, and its top bit from byte i / 8 of the field at hi. */
static int five_bits(const unsigned char *nib, const unsigned char *hi, int i, int o)
{
    return nibble(nib, i, o) | ((hi[(i / 8) * MHA_QP + o] >> (i % 8)) & 1) << 4;
}

static void group_ints(int type, const unsigned char *b, int grp, int o, int q[MHA_QG]);

void mha_q_dequant_factors_ref(int type, const unsigned char *b, int grp, int o, float d[2], float m[2])
{
    const float f = f16_at(b + 2 * o);
    d[0] = d[1] = f, m[0] = m[1] = 0.0f;
    if (type == MHA_QT_Q4_0 || type == MHA_QT_Q5_0) /* an integer offset: −offset·d */
        m[0] = m[1] = -(float)mha_q_offset(type) * f;
    else if (type == MHA_QT_Q4_1 || type == MHA_QT_Q5_1) /* Q5_1's m at Q4_1's place */
        m[0] = m[1] = f16_at(b + MHA_Q4_1_M + 2 * o);
    else if (type == MHA_QT_Q4_K || type == MHA_QT_Q5_K) { /* Q5_K's scales at Q4_K's place */
        int sc, mn;
        mha_q4k_scale_min(grp, b + MHA_Q4_K_SC + o, MHA_QP, &sc, &mn);
        d[0] = d[1] = f * (float)sc, m[0] = m[1] = -(f16_at(b + MHA_Q4_K_DMIN + 2 * o) * (float)mn);
    } else if (type == MHA_QT_Q6_K)
        for (int h = 0; h < 2; h++) {
            d[h] = f * (float)(signed char)b[MHA_Q6_K_SC + (2 * grp + h) * MHA_QP + o];
            m[h] = -32.0f * d[h];
        }
}

/* Every type's dequant: w = fma(q, d, m) with its integers and factors. */
static void dequant_ref(int type, const unsigned char *b, int grp, float *restrict w)
{
    for (int o = 0; o < MHA_QP; o++) {
        int q[MHA_QG];
        float d[2], m[2];
        mha_q_dequant_factors_ref(type, b, grp, o, d, m);
        group_ints(type, b, grp, o, q);
        for (int i = 0; i < MHA_QG; i++)
            w[i * MHA_QP + o] = fmaf((float)q[i], d[i / 16], m[i / 16]);
    }
}

#define DEQUANT(name, index)                                                                                           \
    static void dequant_##name##_ref(const unsigned char *b, int grp, float *restrict w)                              \
    {                                                                                                                  \
        dequant_ref(index, b, grp, w);                                                                                 \
    }
MHA_QTYPE_LIST(DEQUANT)
#undef DEQUANT

static void tile_ref(const float *restrict w, ptrdiff_t wps, int kc, int np, const float *a, ptrdiff_t lda, int rows,
                     float *restrict acc, ptrdiff_t ld)
{
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < np; p++)
            for (int o = 0; o < MHA_QP; o++) {
                float s = acc[r * ld + p * MHA_QP + o];
                for (int i = 0; i < kc; i++)
                    s = fmaf(w[p * wps + i * MHA_QP + o], a[r * lda + i], s);
                acc[r * ld + p * MHA_QP + o] = s;
            }
}

static void few_ref(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const float *a, ptrdiff_t lda,
                    int rows, float *restrict acc, ptrdiff_t ld)
{
    mha_qfew_by_groups(&mha_qk_ref, t, p, np, kk, a, lda, rows, acc, ld);
}

int mha_q_group_factors_ref(int type, const unsigned char *b, int grp, int o, float D[2], float *M)
{
    const float d = f16_at(b + 2 * o);
    *M = 0.0f;
    D[0] = D[1] = d;
    if (type == MHA_QT_Q8_0)
        return 0;
    if (type == MHA_QT_Q6_K) {
        for (int h = 0; h < 2; h++)
            D[h] = d * (float)(signed char)b[MHA_Q6_K_SC + (2 * grp + h) * MHA_QP + o];
        return mha_q_offset(type);
    }
    if (type == MHA_QT_Q4_K || type == MHA_QT_Q5_K) {
        int sc, mn;
        mha_q4k_scale_min(grp, b + MHA_Q4_K_SC + o, MHA_QP, &sc, &mn); /* Q5_K's at the same place */
        D[0] = D[1] = d * (float)sc, *M = -(f16_at(b + MHA_Q4_K_DMIN + 2 * o) * (float)mn);
        return 0;
    }
    if (type == MHA_QT_Q4_1 || type == MHA_QT_Q5_1)
        *M = f16_at(b + MHA_Q4_1_M + 2 * o); /* Q5_1's m at the same place */
    return mha_q_offset(type);
}

/* Group grp of output o of a panel's block as integers q (Q8_0 signed, else unsigned). */
static void group_ints(int type, const unsigned char *b, int grp, int o, int q[MHA_QG])
{
    if (type == MHA_QT_Q8_0) {
        for (int i = 0; i < MHA_QG; i++)
            q[i] = (signed char)b[MHA_Q8_0_Q + i * MHA_QP + o];
        return;
    }
    const int nib_at = mha_q_nib_at(type), hi_at = mha_q_hi_at(type);
    for (int i = 0; i < MHA_QG; i++) {
        const int at = grp * MHA_QG + i; /* input at of the block (a block of one group: grp 0) */
        const int nib = nibble(b + nib_at, at, o);
        q[i] = type == MHA_QT_Q6_K ? nib | (b[hi_at + (at / 4) * MHA_QP + o] >> (2 * (at % 4)) & 3) << 4
               : hi_at             ? five_bits(b + nib_at, b + hi_at, at, o)
                                   : nib;
    }
}

static void dot_ref(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const unsigned char *x,
                    size_t xs, int rows, float *restrict acc, ptrdiff_t ld)
{
    const int groups = t->qk / MHA_QG;
    for (int r = 0; r < rows; r++) {
        const unsigned char *row = x + (size_t)r * xs;
        const int16_t *a = mha_a16_q(row);
        const float *d = mha_a16_d(row, kk), *u = mha_a16_u(row, kk);
        const int32_t *s16 = mha_a16_s(row, kk);
        for (int j = 0; j < np; j++)
            for (int o = 0; o < MHA_QP; o++) {
                float s = acc[r * ld + j * MHA_QP + o];
                for (int g = 0; g < kk / MHA_QG; g++) {
                    int q[MHA_QG];
                    float D[2], M;
                    const unsigned char *b = p[j] + (size_t)(g / groups) * MHA_QP * t->bytes;
                    const int off = mha_q_group_factors_ref(t->index, b, g % groups, o, D, &M);
                    group_ints(t->index, b, g % groups, o, q);
                    int32_t sum[2] = {0, 0};
                    for (int i = 0; i < MHA_QG; i++)
                        sum[i / 16] += q[i] * a[g * MHA_QG + mha_a16_at(i)];
                    if (t->index == MHA_QT_Q6_K) {
                        for (int h = 0; h < 2; h++)
                            s = fmaf(D[h] * d[g], (float)(sum[h] - off * s16[2 * g + h]), s);
                        continue;
                    }
                    s = fmaf(D[0] * d[g], (float)(sum[0] + sum[1] - off * (s16[2 * g] + s16[2 * g + 1])), s);
                    if (mha_q_has_min(t->index))
                        s = fmaf(M, u[g], s);
                }
                acc[r * ld + j * MHA_QP + o] = s;
            }
    }
}

#define DOT(name, index) [index] = dot_ref,
const mha_qdot16_ops mha_qdot16_ref = {.name = "ref", .needs = "", .dot = {MHA_QTYPE_LIST(DOT)}};
#undef DOT

#define FEW(name, index) [index] = few_ref, /* one for every type */
const mha_qkernels mha_qk_ref = {
#define DEQUANT(name, index) [index] = dequant_##name##_ref,
    .dequant = {MHA_QTYPE_LIST(DEQUANT)},
#undef DEQUANT
    .tile = tile_ref,
    .few = {MHA_QTYPE_LIST(FEW)},
    .dot16 = {&mha_qdot16_ref, NULL},
};
#undef FEW
