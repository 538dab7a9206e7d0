/* products.h — the engine's products in its precision: one interface, chosen at create
 * (engine.c: mha_products_of), float32 on BLIS's microkernel (gemm.c) or bf16 on the engine's
 * bf16 kernel (bgemm.c); or bf16 whose attention chunks run the float32 stream on operands
 * rounded to bf16, where the table's stream sums as the bf16 kernel does (the same bits
 * without widening bf16 for every block: avx2). The drivers (attention.c, step.c, mla.c)
 * pack rows, pack weights, multiply by packed weights, pack a KV head's K and V and run the
 * attention's chunks through the model's f->prod and never ask which. */
#ifndef MHA_PRODUCTS_H
#define MHA_PRODUCTS_H

#include <stddef.h>

#include "bgemm.h"
#include "gemm.h"

struct mha_fwd;
struct mha_scratch;
struct mha_chunk_rows;
struct mha_kv_view;
struct mha_core_io;

typedef struct mha_products {
    /* Bytes of an element of what it packs (A panels, packed B). */
    size_t esz;
    /* 1: the attention's K and V operands are float32 panels (float32 engines, and bf16 on the
     * float32 stream); 0: the bf16 kernel's B panels. */
    int float_panels;
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
     * multiple of both kinds' panel widths) + beta · c. xp: a's rows packed by pack_a (then
     * float32 reads them unless m is few, mha_gemm_few_rows), or NULL: packed here. */
    void (*gemm)(const struct mha_fwd *f, const struct mha_scratch *s, int m, int n, int kk, const void *xp,
                 mha_mat a, const void *b, int col, float beta, mha_mat c);

    /* ---- the attention (attention.c) ---- */
    /* A KV head's kl keys, K's rows km and V's rows vm (float32), into what its chunks read
     * (mha_attention_rows' view): float32 Kᵀ in s->kt's panels and V in the Q/K/V scratch's V
     * columns (where the forward projects it: vm elsewhere is copied there); bf16 Kᵀ and V in
     * s->kt16 and s->v16's B panels; bf16 on the float32 stream: float32's, rounded to bf16
     * (with the attention weights, the B panels: their chunks are the bf16 kernel's). */
    void (*pack_kv)(const struct mha_fwd *f, const struct mha_scratch *s, int kl, mha_mat km, mha_mat vm);
    /* The same from bf16 rows (the core's bf16 tensors: K's rows ldk apart, V's ldv apart; bf16
     * engines only, NULL in float32's). */
    void (*pack_kv16)(const struct mha_fwd *f, const struct mha_scratch *s, int kl, const mha_bf16 *k16,
                      ptrdiff_t ldk, const mha_bf16 *v16, ptrdiff_t ldv);
    /* A query block's queries as every chunk of the block reads them: bf16 without the
     * attention weights packs them once into s->q16 (from r's float rows, or copies r's bf16
     * rows) and returns them; NULL: each chunk reads r->q (float32; bf16 with the weights or an
     * int8 cache's V, kv->vs; the float32 stream's chunks, which round their queries). */
    const mha_bf16 *(*block_queries)(const struct mha_fwd *f, const struct mha_scratch *s,
                                     const struct mha_chunk_rows *r, const struct mha_kv_view *kv);
    /* The core's few queries of a KV head as one block (attention.c's core_few_rows): whether
     * the engine runs them so (float32: where d_k fits one KC pass, the decode tiles' sums
     * being the microkernel's), and the K and V of (sequence b, KV head g) of the core's
     * tensors io (kl keys) packed for it, *kv set to what the chunks then read (float32: K's
     * rows in place for the table's rows_scores, or Kᵀ in the decode tiles' panels, and V in
     * rows dv apart, read in place where the tensor's are, else copied into the Q/K/V scratch;
     * bf16, on the float32 stream too: K's rows as floats of their bf16 values and V's bf16
     * rows for rows_scores16 and decode_values16 where the table has them, else the kernel's B
     * panels, *kv as the caller set it). */
    int (*few_fits)(const struct mha_fwd *f);
    void (*pack_kv_few)(const struct mha_fwd *f, const struct mha_scratch *s, const struct mha_core_io *io, int b,
                        int g, int kl, struct mha_kv_view *kv);
    /* One chunk: mha_attention_chunk's contract (attention.h). */
    void (*chunk)(const struct mha_fwd *f, const struct mha_scratch *s, const struct mha_chunk_rows *r,
                  const struct mha_kv_view *kv, int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx,
                  float *sum, ptrdiff_t st);

} mha_products;

/* The products of a float32 engine (bk NULL) or of a bf16 one (its kernel; on the float32
 * stream where kernel k's table has stream_rows16, bk sums even first and dk fits one KC pass). */
const mha_products *mha_products_of(const mha_bkernel *bk, const mha_kernel *k, int dk);

#endif
