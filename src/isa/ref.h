/* ref.h — the portable table's operations that another table takes as they are (neon: the
 * bf16 work around its products and the quantized weights' dequantizing, where it has no vector
 * code of its own yet). They are ref's bits, and each is the entry of the same name in
 * mha_isa_ref (or its quantized weights', mha_qk_ref). */
#ifndef MHA_ISA_REF_H
#define MHA_ISA_REF_H

#include "isa.h"
#include "qkernels.h"

extern const mha_bkernel mha_bk_ref; /* ref-bf16: the model itself, even first */

void mha_decode_scores16_ref(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order);
void mha_decode_values16_ref(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                             mha_kv_type type, const mha_prefetch *pf, mha_bk_order order);
void mha_round_into_tiles_ref(const float *src, int c, int n, mha_bf16 *d);
void mha_round_bf16_floats_ref(float *x, int n);
void mha_round_to_bf16_ref(const float *restrict x, int n, mha_bf16 *restrict d);
void mha_pack_b16_ref(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);
void mha_interleave_pairs_ref(const void *from, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_interleave_pairs_i8_ref(const void *from, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_epilogue_block_ref(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                            float beta);

/* The quantized weights' (qkernels.h): each type's dequant (ref_quant.c), as a table's entries
 * (.dequant = {MHA_QTYPE_LIST(MHA_REF_DEQUANT)}), and the factors of output o's group grp of a
 * panel's block that the integer products scale their sums by: D (Q6_K: D[h] for each 16
 * inputs; else D[0] = D[1]) and the float min M (0 where the offset is an integer), in the
 * float path's roundings; returns the type's integer offset (mha_q_offset). */
#define MHA_REF_DEQUANT(name, index) [index] = mha_dequant_##name##_ref,
#define MHA_REF_DEQUANT_DECL(name, index)                                                                              \
    void mha_dequant_##name##_ref(const unsigned char *b, int grp, float *restrict w);
MHA_QTYPE_LIST(MHA_REF_DEQUANT_DECL)
#undef MHA_REF_DEQUANT_DECL
int mha_q_group_factors_ref(int type, const unsigned char *b, int grp, int o, float D[2], float *M);

#endif
