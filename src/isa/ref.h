/* ref.h — the portable table's parts that another table takes as they are (neon: B's packing
 * where its vector one does not fit, the quantized weights' scalar factors). They are ref's
 * bits, and each is what mha_isa_ref (or its quantized weights', mha_qk_ref) runs. */
#ifndef MHA_ISA_REF_H
#define MHA_ISA_REF_H

#include "isa.h"
#include "qkernels.h"

/* B into bf16 panels, where a table's vector packing does not fit the sub-config's panels. */
void mha_pack_b16_ref(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);

/* The quantized weights' (qkernels.h, ref_quant.c): the factors of output o's group grp of a
 * panel's block that the integer products scale their sums by: D (Q6_K: D[h] for each 16
 * inputs; else D[0] = D[1]) and the float min M (0 where the offset is an integer), in the
 * float path's roundings; returns the type's integer offset (mha_q_offset). */
int mha_q_group_factors_ref(int type, const unsigned char *b, int grp, int o, float D[2], float *M);
/* And what the dequant makes of output o's group grp: input i's float is fma(q_i, d[i / 16],
 * m[i / 16]) (Q6_K: its two scales; every other type d[0] = d[1], m[0] = m[1]). */
void mha_q_dequant_factors_ref(int type, const unsigned char *b, int grp, int o, float d[2], float m[2]);

#endif
