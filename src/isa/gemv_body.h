/* gemv_body.h — the few-row product as plain loops, one source for every table: each ISA file
 * wraps it in a function compiled for its instruction set (the compiler vectorises the column
 * loop). C11 mode forbids FMA contraction (and the Makefile pins -ffp-contract=off), so every
 * table's build gives the same bits: one multiply and one add per term, in k order. */
#ifndef MHA_GEMV_BODY_H
#define MHA_GEMV_BODY_H

#include "gemm.h"

/* c[i][j] = alpha · Σ_p a[i][p] · b[p][j] + beta · c[i][j] for m rows, B read panel by panel. */
static inline __attribute__((always_inline)) void mha_gemv_rows_body(const mha_kernel *k, int m, int n, int kk,
                                                                    float alpha, mha_mat a, mha_mat b, float beta,
                                                                    mha_mat c)
{
    enum { MAXW = 64 };
    const int w = k->bw;
    float acc[MAXW];
    for (int i = 0; i < m; i++)
        for (int j0 = 0; j0 < n; j0 += w) {
            const float *bp = b.p + (ptrdiff_t)(j0 / w) * b.ps;
            const int nj = n - j0 < w ? n - j0 : w;
            for (int t = 0; t < w; t++)
                acc[t] = 0.0f;
            for (int p = 0; p < kk;) { /* A's columns are contiguous within one of its panels */
                const int in_panel = w - p % w, np = kk - p < in_panel ? kk - p : in_panel;
                const float *x = a.p + (ptrdiff_t)i * a.ld + (ptrdiff_t)(p / w) * a.ps + p % w;
                for (int q = 0; q < np; q++) {
                    const float *row = bp + (ptrdiff_t)(p + q) * w;
                    for (int t = 0; t < w; t++)
                        acc[t] += x[q] * row[t];
                }
                p += np;
            }
            float *cp = mha_mat_at(k, c, i, j0);
            for (int t = 0; t < nj; t++)
                cp[t] = beta == 0.0f ? alpha * acc[t] : alpha * acc[t] + beta * cp[t];
        }
}

#endif
