/* softmax.h — the contract of the masked row softmax (unnormalised); each kernel table
 * (src/isa/) holds one (softmax_row), two passes: the max, then exp and the sum. */
#ifndef MHA_SOFTMAX_H
#define MHA_SOFTMAX_H

#include <stdint.h>

/* The unnormalised softmax of a row, or of one chunk of it, in place over s[0, n): with m
 * the larger of *max_io and the visible entries' max, entries j < visible with mask == NULL
 * or mask[j] != 0 become exp(s[j] − m), every other entry 0; *max_io becomes m; returns their
 * sum (0 when m is −∞: nothing visible yet, the chunk is all zeros, never NaN). A whole row
 * starts with *max_io = −∞. For a row in chunks the caller keeps m and the sum across calls
 * and rescales what it accumulated by exp(m_old − m_new): online softmax. The caller also
 * divides by the sum where it is cheaper: after A·V, on d_k columns instead of n. */
typedef float (*mha_softmax_fn)(float *restrict s, int n, int visible, const uint8_t *restrict mask,
                                float *max_io);

#endif
