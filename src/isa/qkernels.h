/* qkernels.h — each kernel table's operations on quantized weights (quant.h's panels): a block
 * group dequantized into floats, and the float32 products on them (qgemm.c drives both). Every
 * table gives ref's bits: the weights are fma(q, D, M) in one rounding, and each sum is an FMA
 * chain in input order, whatever the rows, the panels or the ISA. */
#ifndef MHA_ISA_QKERNELS_H
#define MHA_ISA_QKERNELS_H

#include <stddef.h>

#include "quant.h"

typedef struct mha_qkernels {
    /* Group grp (inputs [grp·MHA_QG, grp·MHA_QG + MHA_QG)) of a panel's block of that type as
     * floats: w[i·MHA_QP + o], input i of the group, output o of the panel. */
    void (*dequant[MHA_QTYPES])(const unsigned char *block, int grp, float *restrict w);
    /* For rows r < rows and the outputs of panels p < np (np ≤ 2: w's panel p at w + p·wps):
     * acc[r·ld + p·MHA_QP + o] = fma(w[p·wps + i·MHA_QP + o], a[r·lda + i], acc[…]), inputs
     * i = 0 … kc − 1 in order. */
    void (*tile)(const float *restrict w, ptrdiff_t wps, int kc, int np, const float *a, ptrdiff_t lda, int rows,
                 float *restrict acc, ptrdiff_t ld);
    /* Decode's few rows (rows ≤ MHA_QFEW_ROWS) on np ≤ MHA_QFEW_PANELS panels of type t (its index) over
     * all kk inputs, dequantized in registers: acc[r·ld + p·MHA_QP + o] as tile's chains from
     * acc's values, the same bits. Each weight byte is read once, never stored as a float. */
    void (*few[MHA_QTYPES])(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const float *a,
                            ptrdiff_t lda, int rows, float *restrict acc, ptrdiff_t ld);
} mha_qkernels;

/* A table's entries by type: [MHA_QT_q8_0] = prefix_q8_0, … */
#define MHA_QENTRY(prefix, name, index) [index] = prefix##_##name,

enum { MHA_QFEW_ROWS = 2, MHA_QFEW_PANELS = 4 };

/* Where a type's 4-bit pairs and its top bits lie in a panel's block (0: none), and how many
 * top bits an input has (Q6_K 2, the 5-bit types 1). */
static inline int mha_q_nib_at(int type)
{
    static const int at[MHA_QTYPES] = {[MHA_QT_Q4_0] = MHA_Q4_0_NIB, [MHA_QT_Q4_1] = MHA_Q4_1_NIB,
                                       [MHA_QT_Q5_0] = MHA_Q5_0_NIB, [MHA_QT_Q5_1] = MHA_Q5_1_NIB,
                                       [MHA_QT_Q4_K] = MHA_Q4_K_NIB, [MHA_QT_Q5_K] = MHA_Q5_K_NIB,
                                       [MHA_QT_Q6_K] = MHA_Q6_K_NIB};
    return at[type];
}

static inline int mha_q_hi_at(int type)
{
    static const int at[MHA_QTYPES] = {[MHA_QT_Q5_0] = MHA_Q5_0_HI, [MHA_QT_Q5_1] = MHA_Q5_1_HI,
                                       [MHA_QT_Q5_K] = MHA_Q5_K_HI, [MHA_QT_Q6_K] = MHA_Q6_K_HI};
    return at[type];
}

static inline int mha_q_hi_bits(int type)
{
    return type == MHA_QT_Q6_K ? 2 : mha_q_hi_at(type) ? 1 : 0;
}

/* few from a table's dequant and tile, a group at a time (for tables without their own). */
static inline void mha_qfew_by_groups(const mha_qkernels *qk, const mha_qtype *t, const unsigned char *const *p,
                                      int np, int kk, const float *a, ptrdiff_t lda, int rows, float *restrict acc,
                                      ptrdiff_t ld)
{
    float w[2 * MHA_QG * MHA_QP];
    const int groups = t->qk / MHA_QG;
    for (int j = 0; j < np; j += 2) /* tile's panels two at a time */
        for (int g = 0; g < kk / MHA_QG; g++) {
            const int n = np - j < 2 ? np - j : 2;
            for (int i = 0; i < n; i++)
                qk->dequant[t->index](p[j + i] + (size_t)(g / groups) * MHA_QP * t->bytes, g % groups,
                                      w + i * MHA_QG * MHA_QP);
            qk->tile(w, MHA_QG * MHA_QP, MHA_QG, n, a + g * MHA_QG, lda, rows, acc + j * MHA_QP, ld);
        }
}

extern const mha_qkernels mha_qk_ref, mha_qk_avx2, mha_qk_avx512;

#endif
