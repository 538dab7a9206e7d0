/* qgemm.h — products on quantized weights held as panels (quant.h): C = A · Wᵀ with A's rows
 * float32 in place and W's outputs in panels of MHA_QP, each part of the matrix of its own
 * type (a GGUF Q4_K_M file's Wv is Q6_K beside Q4_K Wq and Wk). */
#ifndef MHA_QGEMM_H
#define MHA_QGEMM_H

#include <stddef.h>

#include "bgemm.h"
#include "dims.h"
#include "gemm.h"
#include "quant.h"

#include <stdint.h>

/* A matrix of kk inputs as the engine holds it: per head, `parts` parts of `part` outputs
 * (a multiple of MHA_QP), of which the first `stored` are in panels and the rest, the
 * attention's padding up to whole float panels, are zeros held nowhere: Wqkv's [Q_0 | K | V |
 * Q_1 | …] per KV head, or Wo's one part of every output (parts 1). type[0] is Q's (and Wo's),
 * type[1] K's, type[2] V's. */
typedef struct mha_qmat {
    const unsigned char *p;
    int kk, part, stored, parts;
    const mha_qtype *type[3];
} mha_qmat;

/* An engine's Wqkv (per KV head [Q_0 | K | V | Q_1 | …], parts dkp wide) and Wo (d outputs
 * padded to whole panels) at p. */
static inline mha_qmat mha_qmat_qkv(const mha_dims *dims, int dkp, const unsigned char *p)
{
    return (mha_qmat){p, dims->d, dkp, (dims->dk + MHA_QP - 1) / MHA_QP * MHA_QP, dims->group + 2,
                      {mha_qtype_of(dims->wtype[MHA_W_Q]), mha_qtype_of(dims->wtype[MHA_W_K]),
                       mha_qtype_of(dims->wtype[MHA_W_V])}};
}
static inline mha_qmat mha_qmat_o(const mha_dims *dims, const unsigned char *p)
{
    const mha_qtype *t = mha_qtype_of(dims->wtype[MHA_W_O]);
    const int outs = (dims->d + MHA_QP - 1) / MHA_QP * MHA_QP;
    return (mha_qmat){p, dims->qd, outs, outs, 1, {t, t, t}};
}

/* The type of part j of a head, and the bytes of a part and of a head. */
static inline const mha_qtype *mha_qmat_type(const mha_qmat *b, int j)
{
    return b->type[j == 1 || j == 2 ? j : 0];
}
static inline size_t mha_qmat_part_bytes(const mha_qmat *b, int j)
{
    return (size_t)(b->stored / MHA_QP) * mha_qpanel_bytes(mha_qmat_type(b, j), b->kk);
}
size_t mha_qmat_head_bytes(const mha_qmat *b);
/* The panel of outputs [col, col + MHA_QP) (col a multiple of MHA_QP), and its type; NULL for
 * padding (zeros). */
const unsigned char *mha_qmat_panel(const mha_qmat *b, int col, const mha_qtype **type);

/* c (m × n) = a (m × kk float32 rows, lda apart) · the outputs [col, col + n) of b (col and n
 * multiples of MHA_QP), plus c where beta is 1 (the bias a caller put there; beta 0: c is not
 * read): each element one FMA chain over its inputs in order, then that one addition, the
 * same bits whatever m, n, col or the table (qkernels.h). */
void mha_qgemm(const mha_kernel *k, int m, int n, const float *a, ptrdiff_t lda, const mha_qmat *b, int col,
               float beta, mha_mat c);

/* Activations for the integer products (weight_activations INT16): a row of kk inputs (whole
 * groups of MHA_QG) quantized per group of 32 inputs to d = max|x| / 32767 and q = x · (32767 /
 * max|x|) rounded to nearest even (0 for a group of zeros), written by mha_a16_pack in
 * mha_a16_row_bytes(kk) bytes:
 *   q[kk]    int16; in each 4 inputs 4m … 4m + 3 the even ones first (4m, 4m + 2, 4m + 1,
 *            4m + 3): two inputs of one parity a 32-bit lane, as two rows of a panel's nibble
 *            pairs give them (mha_a16_at)
 *   d[kk/32] float, group g's scale
 *   u[kk/32] float, d · Σq over the group (what a float min multiplies)
 *   s[kk/16] int32, Σq over each 16 inputs (what an integer offset multiplies)
 * 16 bits, not llama.cpp's 8: trained layers' activations have channels 20 times their row's
 * rms, and 8 bits round the 31 inputs beside such a channel to a few steps (docs/quant.md). */
enum { MHA_A16_ALIGN = 64 };
static inline size_t mha_a16_row_bytes(int kk)
{
    return ((size_t)kk * 5 / 2 + MHA_A16_ALIGN - 1) / MHA_A16_ALIGN * MHA_A16_ALIGN;
}
/* Where input i's int16 lies in a packed row. */
static inline int mha_a16_at(int i)
{
    return (i & ~3) + (i & 1) * 2 + (i & 3) / 2;
}
static inline const int16_t *mha_a16_q(const unsigned char *row)
{
    return (const int16_t *)(const void *)row;
}
static inline const float *mha_a16_d(const unsigned char *row, int kk)
{
    return (const float *)(const void *)(row + 2 * (size_t)kk);
}
static inline const float *mha_a16_u(const unsigned char *row, int kk)
{
    return mha_a16_d(row, kk) + kk / MHA_QG;
}
static inline const int32_t *mha_a16_s(const unsigned char *row, int kk)
{
    return (const int32_t *)(const void *)(mha_a16_u(row, kk) + kk / MHA_QG);
}
/* Row x (kk inputs) into row. The same code for every table, so the same integers. */
void mha_a16_pack(const float *x, int kk, unsigned char *row);

/* Rows a block of mha_qgemm16 when it quantizes them itself: its room holds them. */
enum { MHA_QROWS = 64 };
/* mha_qgemm on int16 activations (k->qdot16's integer products): xq holds a's m rows packed
 * (mha_a16_row_bytes(kk) apart), or is NULL: then a's rows are packed here, MHA_QROWS at a
 * time, into room (MHA_QROWS · mha_a16_row_bytes(kk) bytes). The same bits whatever m, n, col
 * or the table (qkernels.h: mha_qdot16). */
void mha_qgemm16(const mha_kernel *k, int m, int n, const unsigned char *xq, const float *a, ptrdiff_t lda,
                 const mha_qmat *b, int col, float beta, mha_mat c, void *room);

/* Block weights in a bf16 engine (float activations): the engine's bf16 products on the weights
 * dequantized (quant.h's floats, exact) and rounded to bf16 as its packing rounds floats. A pass
 * dequantizes up to mha_qbf16_cols columns at a time into the worker's room as bf16 B panels
 * (bgemm.h), then runs bk's blocks on every row of the product: the bits of a bf16 engine
 * holding the dequantized floats, whatever m, n, col or the blocking (mha_bgemm sums every k in
 * one pass), so on AMX tiles or vdpbf16ps a prefill costs the dequantizing once per product.
 * xp: a's m rows in A panels (mha_bk_pack_a), or NULL: packed here into apack, at most
 * MHA_QBF16_ROWS rows at a time. Runs between mha_bk_begin and mha_bk_end of bk. */
enum { MHA_QBF16_ROWS = 192 };
/* Columns a pass dequantizes for products of depth kk: whole panels of both B kinds (k->bw and
 * MHA_QP), their bf16 within MHA_QBF16_BYTES where kk allows (L2: they are read again for
 * every block of 32 rows). */
enum { MHA_QBF16_BYTES = 512 * 1024 };
int mha_qbf16_cols(const mha_kernel *k, int kk);
/* The rooms: bf16 elements of apack (A rows packed when xp is NULL) and of wpack. */
static inline size_t mha_qbf16_apack_elems(int kk)
{
    return mha_bk_a_elems(MHA_QBF16_ROWS, kk);
}
static inline size_t mha_qbf16_wpack_elems(const mha_kernel *k, int kk)
{
    return (size_t)mha_qbf16_cols(k, kk) * mha_bk_kp(kk);
}
void mha_qgemm_bf16(const mha_kernel *k, const mha_bkernel *bk, int m, int n, const mha_bf16 *xp, const float *a,
                    ptrdiff_t lda, const mha_qmat *b, int col, float beta, mha_mat c, mha_bf16 *apack,
                    mha_bf16 *wpack);

#endif
