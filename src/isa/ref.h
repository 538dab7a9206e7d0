/* ref.h — the portable table's operations that another table takes as they are (neon: the
 * bf16 products and their surroundings, where it has no vector code of its own yet). They are
 * ref's bits, and each is the entry of the same name in mha_isa_ref. */
#ifndef MHA_ISA_REF_H
#define MHA_ISA_REF_H

#include "isa.h"

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

#endif
