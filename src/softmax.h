/* softmax.h — masked row softmax (unnormalised), vectorized, with a portable scalar fallback. */
#ifndef MHA_SOFTMAX_H
#define MHA_SOFTMAX_H

#include <stdint.h>

/* The unnormalised softmax of a row, in place over s[0, n): entries j < visible with
 * mask == NULL or mask[j] != 0 become exp(s[j] − max), every other entry 0; returns their
 * sum (0 when nothing is visible: the row is then all zeros, never NaN). The caller divides
 * by the sum where it is cheaper: after A·V, on d_k columns instead of n. */
typedef float (*mha_softmax_fn)(float *restrict s, int n, int visible, const uint8_t *restrict mask);

float mha_softmax_row_generic(float *restrict s, int n, int visible, const uint8_t *restrict mask);
float mha_softmax_row_avx2(float *restrict s, int n, int visible, const uint8_t *restrict mask);
float mha_softmax_row_avx512(float *restrict s, int n, int visible, const uint8_t *restrict mask);

/* The fastest implementation this CPU runs, and its name ("avx512", "avx2", "generic"). */
mha_softmax_fn mha_softmax_select(const char **name);
/* Whether this CPU can run the named implementation. */
int mha_softmax_supported(mha_softmax_fn fn);

#endif
