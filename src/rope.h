/* rope.h — rotary position embeddings: the frequencies of HF transformers' rope utilities
 * (default, linear, llama3, yarn), a cos/sin table per position, and the rotation of a head's
 * rows in the GEMM's panel form. */
#ifndef MHA_ROPE_H
#define MHA_ROPE_H

#include <math.h>

#include "gemm.h"
#include "mha.h"

/* inv_freq[i], i < r/2, as HF computes it in float32 (θ_i = theta^(-2i/r), then the scaling),
 * and the factor cos and sin are multiplied by (yarn's attention factor, else 1). */
void mha_rope_freqs(const mha_rope *rope, int r, float *inv_freq, float *attention_factor);
/* yarn's m(x) = 0.1·x·ln(factor) + 1 (1 for factor <= 1), HF's get_mscale in double. */
static inline double mha_yarn_mscale(double factor, double x)
{
    return factor <= 1.0 ? 1.0 : 0.1 * x * log(factor) + 1.0;
}
/* cos[p·(r/2) + i] and sin[...] of angle p·inv_freq[i] (float32 product, as HF), times the
 * attention factor, for positions p in [0, positions). */
void mha_rope_table(const mha_rope *rope, int r, int positions, float *cos_t, float *sin_t);
/* Rotates rows [0, rows) of the head whose features are columns [col, col + r) of m: row i sits
 * at position pos0 + i (may be negative: the table is read at |p|, sin negated). The rotation
 * is the kernel table's (rope_halves, rope_pairs: the same bits in every table) on runs that
 * stay inside m's panels. */
void mha_rope_rows(const mha_kernel *k, mha_mat m, int rows, int col, int pos0, mha_rope_style style, int r,
                   const float *cos_t, const float *sin_t);

#endif
