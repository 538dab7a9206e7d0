/* gemm.c — the Goto loops around BLIS's microkernel, for the shapes attention has.
 *
 * B always arrives packed: weights at mha_set_weights, Kᵀ and V once per head. A is packed
 * here, mb rows × kc at a time, into panels of aw rows. For every output element the sum
 * over k runs in the same order whatever m and n are blocked into, so results do not depend
 * on how many rows a call covers or which worker makes it. */
#include "gemm.h"

#include <string.h>

#include "isa/isa.h"

size_t mha_gemm_apack_floats(const mha_kernel *k)
{
    return (size_t)k->mb * (size_t)k->kc;
}

static void pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int p0, int kc, float *restrict dst)
{
    k->isa->pack_rows(a, k->bw, i0, rows, p0, kc, k->aw, dst);
}

/* The loops over one block of A (mb rows × kc, already in panels at ap, panel stride aps)
 * and the columns of B: C[i0 .., ..] (+)= alpha · A_blk · B[p0 .., ..]. */
static void gemm_block(const mha_kernel *k, int i0, int mb, int n, int p0, int kc, float alpha, const float *ap,
                       ptrdiff_t aps, mha_mat b, float beta, mha_mat c)
{
    const int aw = k->aw, w = k->bw;
    for (int j0 = 0; j0 < n; j0 += k->nb) {
        const int nb = n - j0 < k->nb ? n - j0 : k->nb;
        /* the B block (kc × nb) stays in cache while every A panel passes over it */
        for (int r0 = 0; r0 < mb; r0 += aw) {
            const float *a = ap + (ptrdiff_t)(r0 / aw) * aps;
            const int rows = mb - r0 < aw ? mb - r0 : aw;
            for (int jj = j0; jj < j0 + nb; jj += w) {
                const float *bp = b.p + (ptrdiff_t)(jj / w) * b.ps + (ptrdiff_t)p0 * w;
                const int cols = n - jj < w ? n - jj : w;
                mha_kernel_tile(k, rows, cols, kc, alpha, a, bp, beta, mha_mat_at(k, c, i0 + r0, jj), c.ld);
            }
        }
    }
}

/* C = beta · C, for k = 0 */
static void scale_c(const mha_kernel *k, int m, int n, float beta, mha_mat c)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float *cp = mha_mat_at(k, c, i, j);
            *cp = beta == 0.0f ? 0.0f : beta * *cp;
        }
}

void mha_gemm(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
              mha_mat c, float *apack)
{
    if (m <= 0 || n <= 0)
        return;
    if (kk <= 0) {
        scale_c(k, m, n, beta, c);
        return;
    }
    if (mha_gemm_few_rows(k, m)) {
        k->isa->stream_rows(k, m, n, kk, alpha, a, b, beta, c);
        return;
    }
    for (int i0 = 0; i0 < m; i0 += k->mb) {
        const int mb = m - i0 < k->mb ? m - i0 : k->mb;
        for (int p0 = 0; p0 < kk; p0 += k->kc) {
            const int kc = kk - p0 < k->kc ? kk - p0 : k->kc;
            pack_a(k, a, i0, mb, p0, kc, apack);
            gemm_block(k, i0, mb, n, p0, kc, alpha, apack, (ptrdiff_t)k->aw * kc, b, p0 == 0 ? beta : 1.0f, c);
        }
    }
}

void mha_gemm_in_place(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                       mha_mat c, float *apack)
{
    if (k->in_place && m > 0 && n > 0 && kk > 0)
        k->isa->stream_rows(k, m, n, kk, alpha, a, b, beta, c);
    else
        mha_gemm(k, m, n, kk, alpha, a, b, beta, c, apack);
}

void mha_gemm_prepacked(const mha_kernel *k, int m, int n, int kk, float alpha, const float *ap, mha_mat b,
                        float beta, mha_mat c)
{
    if (m <= 0 || n <= 0)
        return;
    if (kk <= 0) {
        scale_c(k, m, n, beta, c);
        return;
    }
    const ptrdiff_t aps = (ptrdiff_t)k->aw * kk; /* whole rows of k in each panel */
    for (int i0 = 0; i0 < m; i0 += k->mb) {
        const int mb = m - i0 < k->mb ? m - i0 : k->mb;
        for (int p0 = 0; p0 < kk; p0 += k->kc) {
            const int kc = kk - p0 < k->kc ? kk - p0 : k->kc;
            gemm_block(k, i0, mb, n, p0, kc, alpha, ap + (i0 / k->aw) * aps + (ptrdiff_t)p0 * k->aw, aps, b,
                       p0 == 0 ? beta : 1.0f, c);
        }
    }
}

void mha_pack_panels(const mha_kernel *k, int rows, int cols, mha_mat src, int transpose, float *dst)
{
    const int w = k->bw;
    /* the transpose's panels of w columns are panels of w rows of src: the A packing's form */
    if (transpose) {
        k->isa->pack_rows(src, w, 0, cols, 0, rows, w, dst);
        return;
    }
    const int padded = (int)mha_round_up((size_t)cols, (size_t)w);
    for (int j0 = 0; j0 < padded; j0 += w) {
        float *panel = dst + (size_t)j0 * rows; /* rows × w */
        for (int i = 0; i < rows; i++)
            for (int t = 0; t < w; t++) {
                const int j = j0 + t;
                panel[(size_t)i * w + t] = j >= cols ? 0.0f : transpose ? *mha_mat_at(k, src, j, i) : *mha_mat_at(k, src, i, j);
            }
    }
}

void mha_mat_fill_rows(const mha_kernel *k, mha_mat c, int rows, int cols, const float *v)
{
    const int w = k->bw;
    for (int j0 = 0; j0 < cols; j0 += w) {
        const int n = cols - j0 < w ? cols - j0 : w;
        for (int i = 0; i < rows; i++)
            memcpy(mha_mat_at(k, c, i, j0), v + j0, (size_t)n * sizeof *v);
    }
}

void mha_mat_set_rows(const mha_kernel *k, mha_mat m, int rows, int c0, int cols, const float *src, ptrdiff_t ld)
{
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c += k->bw)
            memcpy(mha_mat_at(k, m, i, c0 + c), src + i * ld + c, (size_t)(cols - c < k->bw ? cols - c : k->bw) * sizeof *src);
}

void mha_mat_get_rows(const mha_kernel *k, mha_mat m, int rows, int c0, int cols, float *dst, ptrdiff_t ld)
{
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c += k->bw)
            memcpy(dst + i * ld + c, mha_mat_at(k, m, i, c0 + c), (size_t)(cols - c < k->bw ? cols - c : k->bw) * sizeof *dst);
}

void mha_gemm_pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int p0, int kc, float *dst)
{
    pack_a(k, a, i0, rows, p0, kc, dst);
}
