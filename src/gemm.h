/* gemm.h — C = alpha·A·B + beta·C on the BLIS microkernel, with B already packed.
 *
 * Every matrix is an mha_mat: element (i, j) sits at p + (j / w)·ps + i·ld + j % w, where w is
 * the kernel's B panel width (kernel->bw). A row-major matrix is {p, ld, w}; B's packed form
 * ("panels") is {p, w, rows·w}: column panels of w, each rows × w with row stride w, so that
 * the microkernel reads them in place. Q/K/V scratch is kept in panel form too.
 * B's panels must be 64-byte aligned (the microkernels load them with aligned loads); the
 * arena's regions and panel strides keep them so. */
#ifndef MHA_GEMM_H
#define MHA_GEMM_H

#include <stddef.h>

#include "kernel.h"

typedef struct mha_mat {
    float *p;
    ptrdiff_t ld, ps;
} mha_mat;

static inline mha_mat mha_mat_rows(const mha_kernel *k, const float *p, ptrdiff_t ld)
{
    return (mha_mat){(float *)p, ld, k->bw};
}

static inline mha_mat mha_mat_panels(const mha_kernel *k, const float *p, ptrdiff_t rows)
{
    return (mha_mat){(float *)p, k->bw, rows * k->bw};
}

/* The element address, and the matrix starting at row i, column j (j a multiple of bw). */
static inline float *mha_mat_at(const mha_kernel *k, mha_mat m, ptrdiff_t i, ptrdiff_t j)
{
    return m.p + (j / k->bw) * m.ps + i * m.ld + j % k->bw;
}

static inline mha_mat mha_mat_sub(const mha_kernel *k, mha_mat m, ptrdiff_t i, ptrdiff_t j)
{
    return (mha_mat){mha_mat_at(k, m, i, j), m.ld, m.ps};
}

/* Columns rounded up to whole panels. */
static inline size_t mha_round_up(size_t n, size_t w)
{
    return (n + w - 1) / w * w;
}

/* Rows up to which mha_gemm streams B past register tiles of the rows themselves where the
 * kernel allows it (k->stream), with the microkernel's sums bit for bit. */
#define MHA_STREAM_ROWS 32

/* Whether mha_gemm reads A in place, never packed: streamed rows (k->stream, up to
 * MHA_STREAM_ROWS). Every other product runs on the microkernel, so a row's sums never depend
 * on how many rows share its product (there is no matrix-vector shortcut with sums of its own). */
static inline int mha_gemm_few_rows(const mha_kernel *k, int m)
{
    return k->stream && m <= MHA_STREAM_ROWS;
}

/* Floats of scratch mha_gemm needs to pack A. */
size_t mha_gemm_apack_floats(const mha_kernel *k);

/* C (m × n) = alpha · A (m × kk) · B (kk × n, panels: b.ld == bw) + beta · C.
 * beta = 0: C is not read. apack: mha_gemm_apack_floats floats. Few rows stream B past
 * register tiles where the table has them for this microkernel, with its sums. */
void mha_gemm(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
              mha_mat c, float *apack);

/* The same with A read where it lies, whatever its rows, where the table streams them
 * (k->in_place: the microkernel's sums, so the bits of packing it); else mha_gemm. For A that
 * one product reads from L2 once (the attention's query blocks and exp'd scores), packing it
 * costs more than reading it in place on the CPUs where the table says so. */
void mha_gemm_in_place(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                       mha_mat c, float *apack);

/* The same with A already in panels of aw rows holding every k: element (i, p) at
 * ap[(i / aw) · aw · kk + p · aw + i % aw], as mha_gemm_pack_a(k, a, 0, m, 0, kk, ap) writes.
 * k->mb must be a multiple of aw (it is). */
void mha_gemm_prepacked(const mha_kernel *k, int m, int n, int kk, float alpha, const float *ap, mha_mat b,
                        float beta, mha_mat c);

/* dst (panels of bw columns, rows × round_up(cols, bw), zero-padded) = src (rows × cols),
 * or its transpose when transpose is set (then src is cols × rows). */
void mha_pack_panels(const mha_kernel *k, int rows, int cols, mha_mat src, int transpose, float *dst);

/* The packing of mha_gemm's A operand: rows [i0, i0 + rows), columns
 * [p0, p0 + kc) of a into panels of aw rows, dst[panel][p][r], zero rows padding the last
 * (the kernel table's pack_rows). */
void mha_gemm_pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int p0, int kc, float *dst);
/* Floats of the packed form of rows × kk (rows rounded up to whole panels). */
static inline size_t mha_gemm_packed_a_floats(const mha_kernel *k, size_t rows, size_t kk)
{
    return mha_round_up(rows, (size_t)k->aw) * kk;
}

/* Rows [0, rows) of c, columns [0, cols), set to the broadcast vector v. */
void mha_mat_fill_rows(const mha_kernel *k, mha_mat c, int rows, int cols, const float *v);
/* Rows [0, rows) of m, columns [c0, c0 + cols) (c0 a multiple of the panel width), from rows
 * of cols floats at src (set), or into such rows at dst (get), ld floats apart. */
void mha_mat_set_rows(const mha_kernel *k, mha_mat m, int rows, int c0, int cols, const float *src, ptrdiff_t ld);
void mha_mat_get_rows(const mha_kernel *k, mha_mat m, int rows, int c0, int cols, float *dst, ptrdiff_t ld);

#endif
