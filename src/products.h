/* products.h — the engine's products in its precision: one interface, chosen at create
 * (engine.c: mha_products_of), float32 on BLIS's microkernel (gemm.c) or bf16 on the engine's
 * bf16 kernel (bgemm.c). The drivers (forward.c, step.c, mla.c) pack rows, pack weights and
 * multiply by packed weights through the model's f->prod and never ask which. How the
 * attention packs K and V and runs its chunks is the attention's own choice
 * (attention.h: mha_attention_ops). */
#ifndef MHA_PRODUCTS_H
#define MHA_PRODUCTS_H

#include <stddef.h>

#include "bgemm.h"
#include "gemm.h"
#include "mha.h"

/* What a product needs of the engine and the worker: the microkernel (and its table), the
 * bf16 kernel (NULL: float32), the worker's room for packing A (float32's or bf16's), and for
 * block weights in a bf16 engine its room for their dequantized panels (else NULL). */
typedef struct mha_gemm_ctx {
    const mha_kernel *k;
    const mha_bkernel *bk;
    void *apack, *wpack;
} mha_gemm_ctx;

typedef struct mha_products {
    /* Bytes of an element of what it packs (A panels, packed B). */
    size_t esz;
    /* Rows of an A panel: a block of packed rows starts on a multiple. */
    int (*a_panel)(const mha_kernel *k);
    /* Elements of one packed row of d columns (A panels: row r of a block from its first
     * panel's start at r · a_row(d)). */
    size_t (*a_row)(int d);
    /* Rows [r0, r0 + m) of x (d columns) into A panels at dst (the panels of row r0, which
     * starts one). */
    void (*pack_a)(const mha_kernel *k, mha_mat x, int r0, int m, int d, void *dst);
    /* src (kk × n, or srcᵀ) packed as a product's B at dst: float32 panels of the
     * microkernel's width, or bf16 VNNI panels of mha_bk_ps(kk) elements. */
    void (*pack_b)(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, void *dst);
    /* c (m × n) = a · the columns [col, col + n) of b (kk rows packed by pack_b; col a
     * multiple of both kinds' panel widths), + bias (n floats) in every row where bias is set:
     * the bits of c's rows filled with bias and the products added to them. xp: a's rows
     * packed by pack_a (then float32 reads them unless m is few, mha_gemm_few_rows), or NULL:
     * packed here. */
    void (*gemm)(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b, int col,
                 const float *bias, mha_mat c);
} mha_products;

/* The products of a float32 engine (bk NULL), of a bf16 one (its kernel), or of one holding
 * quantized weights (b an mha_qmat, qgemm.h) multiplying acts: float32 A read in place, A
 * packed as int16 rows for the integer products, or (a bf16 engine) A in bf16 panels on the
 * weights dequantized into bf16. */
const mha_products *mha_products_of(const mha_bkernel *bk, int quantized, mha_activations acts);

#endif
