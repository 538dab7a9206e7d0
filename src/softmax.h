/* softmax.h — masked row softmax, vectorized, with a portable scalar fallback. */
#ifndef MHA_SOFTMAX_H
#define MHA_SOFTMAX_H

#include <stdint.h>

/* In place over s[0, n): entries j < visible with mask == NULL or mask[j] != 0 take part;
 * every other entry is written 0. A row with nothing visible becomes all zeros, never NaN. */
typedef void (*mha_softmax_fn)(float *restrict s, int n, int visible, const uint8_t *restrict mask);

void mha_softmax_row_generic(float *restrict s, int n, int visible, const uint8_t *restrict mask);
void mha_softmax_row_avx2(float *restrict s, int n, int visible, const uint8_t *restrict mask);
void mha_softmax_row_avx512(float *restrict s, int n, int visible, const uint8_t *restrict mask);

/* The fastest implementation this CPU runs, and its name ("avx512", "avx2", "generic"). */
mha_softmax_fn mha_softmax_select(const char **name);
/* Whether this CPU can run the named implementation. */
int mha_softmax_supported(mha_softmax_fn fn);

#endif
