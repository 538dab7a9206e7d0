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
} mha_qkernels;

extern const mha_qkernels mha_qk_ref, mha_qk_avx2, mha_qk_avx512;

#endif
