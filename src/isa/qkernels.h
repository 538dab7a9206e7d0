/* qkernels.h — each kernel table's operations on quantized weights (quant.h's panels): a block
 * group dequantized into floats, and the float32 products on them (qgemm.c drives both). Every
 * table gives ref's bits: the weights are fma(q, D, M) in one rounding, and each sum is an FMA
 * chain in input order, whatever the rows, the panels or the ISA. */
#ifndef MHA_ISA_QKERNELS_H
#define MHA_ISA_QKERNELS_H

#include <stddef.h>

#include "bgemm.h"
#include "quant.h"

/* The integer products (weight_activations INT16) on rows of activations quantized as
 * mha_a16_pack writes them (qgemm.h): for rows r < rows (≤ MHA_A16_ROWS, row r at x + r·xs bytes)
 * and the outputs of np ≤ MHA_QFEW_PANELS panels of type t over all kk inputs, group by group in
 * input order: each group's dot product of the weights' integers q with the row's int16 values,
 * exact in int32, then
 *     types with an integer offset (Q8_0 0, Q4_0 8, Q5_0 16, Q6_K 32 per 16 inputs):
 *         isum = Σ q·a − offset·Σa,  acc = fma(D·d, (float)isum, acc)   (Q6_K: each 16 inputs)
 *     types with a float min M (Q4_1, Q5_1, Q4_K, Q5_K):
 *         isum = Σ q·a,  acc = fma(D·d, (float)isum, acc),  acc = fma(M, u, acc)
 * D and M the group's factors as the float path reads them (quant.h), d the row's group scale,
 * u = d·Σa as packed; D·d one rounding, (float)isum one (exact below 2^24). Integer sums are
 * the same in any order, so every table gives ref's bits with any instructions. */
typedef void mha_qdot16(const mha_qtype *t, const unsigned char *const *p, int np, int kk, const unsigned char *x,
                       size_t xs, int rows, float *restrict acc, ptrdiff_t ld);

typedef struct mha_qdot16_ops {
    const char *name;  /* "avx512-vnni", "avx2-vnni", "avx2", "neon", "ref" */
    const char *needs; /* CPU features beyond the table's, as lscpu names them ("" none) */
    mha_qdot16 *dot[MHA_QTYPES];
} mha_qdot16_ops;

enum { MHA_A16_ROWS = 8 };

/* Block weights in a bf16 engine (qgemm.h: mha_qgemm_bf16): group grp of a panel's block as bf16
 * B-panel pairs (bgemm.h), dst[(i / 2)·2·MHA_QP + o·2 + i % 2] = mha_bf16_round(w[i·MHA_QP + o])
 * for w the table's dequant of it: those bits, by any instructions. */
typedef void mha_qdequant16(const unsigned char *block, int grp, mha_bf16 *restrict dst);

typedef struct mha_qbf16_ops {
    const char *name;  /* "avx512-bf16", "avx512" */
    const char *needs; /* CPU features beyond the table's ("" none) */
    mha_qdequant16 *dequant[MHA_QTYPES];
} mha_qbf16_ops;

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
    /* The integer products it holds, NULL-terminated, fastest first: an engine takes the first
     * this CPU runs (mha_qdot16_choose). */
    const mha_qdot16_ops *dot16[5];
    /* Its dequantizing into bf16, NULL-terminated, fastest first: an engine takes the first this
     * CPU runs (mha_qbf16_choose); none (or none runnable): qgemm.c dequantizes into floats and
     * rounds them through the table's pack_b16, the same bits. */
    const mha_qbf16_ops *bf16w[3];
} mha_qkernels;

/* The first of the table's integer products this CPU runs (the last needs nothing more). */
const mha_qdot16_ops *mha_qdot16_choose(const mha_qkernels *qk);
/* The first of its dequantizing into bf16 this CPU runs, or NULL. */
const mha_qbf16_ops *mha_qbf16_choose(const mha_qkernels *qk);

/* A table's entries by type: [MHA_QT_q8_0] = prefix_q8_0, … */
#define MHA_QENTRY(prefix, name, index) [index] = prefix##_##name,

enum { MHA_QFEW_ROWS = 2, MHA_QFEW_PANELS = 4 };

/* A walk of a panel from memory (a decode step's, a pass dequantizing into bf16) asks for the
 * bytes of the group this many on (a panel's bytes a group, in order) while this one computes,
 * so that every panel has lines in flight; the hardware's stream prefetch alone left a step's
 * reads well below the bf16 step's rate (perf/RESULTS.md). */
enum { MHA_QPREFETCH_GROUPS = 8 };

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

/* The integer a type's unsigned values are offset by (Q4_0 8, Q5_0 16, Q6_K 32; else 0): the
 * integer products take offset·Σa from a group's sum. */
static inline int mha_q_offset(int type)
{
    return type == MHA_QT_Q4_0 ? 8 : type == MHA_QT_Q5_0 ? 16 : type == MHA_QT_Q6_K ? 32 : 0;
}

/* Whether a type's groups have a float min (the integer products' second FMA). */
static inline int mha_q_has_min(int type)
{
    return type == MHA_QT_Q4_1 || type == MHA_QT_Q5_1 || type == MHA_QT_Q4_K || type == MHA_QT_Q5_K;
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
extern const mha_qkernels mha_qk_neon; /* aarch64 builds only (neon_quant.c) */
extern const mha_qdot16_ops mha_qdot16_ref, mha_qdot16_avx2, mha_qdot16_avx2_vnni, mha_qdot16_avx512_vnni;
extern const mha_qdot16_ops mha_qdot16_neon;
extern const mha_qbf16_ops mha_qbf16_avx512, mha_qbf16_avx512_bf16;

#endif
