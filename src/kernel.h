/* kernel.h — the BLIS boundary: which sub-config runs, its block sizes, and one call of its
 * sgemm microkernel. The only module that sees BLIS. */
#ifndef MHA_KERNEL_H
#define MHA_KERNEL_H

#include <stddef.h>

#include "mha.h"

/* Room for BLIS's cntx_t (5072 bytes in BLIS 0.9; kernel.c checks it at compile time). */
#define MHA_CNTX_BYTES 6144

typedef struct mha_kernel {
    /* The BLIS context of the chosen sub-config, initialised by its own init function into
     * this engine-owned copy: BLIS's global kernel structure (bli_init, whose first call reads
     * BLIS_ARCH_TYPE and aborts on a bad value, and prints under BLIS_ARCH_DEBUG) is never
     * touched. Copied with the struct; used through mha_kernel_tile only. */
    _Alignas(64) unsigned char cntx[MHA_CNTX_BYTES];
    void *ukr;         /* its sgemm microkernel */
    const char *arch;  /* "skx", "haswell", "zen3", "generic", … */
    int transposed;    /* the microkernel prefers column-stored C: it computes Cᵀ tiles */
    int bw, aw;        /* panel widths: B panels of bw columns, A panels of aw rows */
    int kc;            /* k per pass (BLIS's KC) */
    int beta_fused;    /* a whole tile's beta 1 pass (k past KC) ends C + alpha·sum in one rounding
                        * (cortexa57; its edge tiles do not), where every other sub-config rounds
                        * alpha·sum first */
    int mb, nb;        /* rows of A packed per pass; columns of B per cache block */
    const struct mha_isa *isa; /* the kernel table every other ISA-specific operation comes from */
    const struct mha_qdot16_ops *qdot16; /* the table's integer products this CPU runs (qkernels.h) */
    const struct mha_qbf16_ops *qbf16;   /* its dequantizing into bf16 this CPU runs, or NULL */
    const struct mha_int8_scores_ops *int8_scores; /* its integer scores this CPU runs, or NULL */
    int stream;        /* few rows stream B (isa->stream_rows): the table has it for this
                        * sub-config and panel width (its sums are the microkernel's) */
    int in_place;      /* stream, and the attention's products stream any number of rows with
                        * A in place (isa->stream_in_place) */
} mha_kernel;

struct mha_isa;
/* request: "" or "auto" (the table's default sub-config for this CPU), or a sub-config name,
 * with the kernel table isa. MHA_ERR_CONFIG if it is unknown, not in this BLIS build, not
 * runnable on this CPU, or not one the table runs with. */
mha_status mha_kernel_select(const char *request, const struct mha_isa *isa, mha_kernel *k);
/* A create's kernels: the table, BLIS's sub-config within it and (bf16) the bf16 kernel within
 * it, as cfg asks (isa auto with a sub-config named: the widest table that runs that
 * sub-config here); MHA_ERR_CONFIG naming the field otherwise. */
struct mha_problem;
struct mha_bkernel;
mha_status mha_kernel_choose(const mha_config *cfg, int bf16, mha_kernel *k, const struct mha_bkernel **bk,
                             struct mha_problem *pr);
const char *mha_kernel_blis_version(void);

/* One register tile of a row-major C: c[i·ldc + j] (i < rows ≤ aw, j < cols ≤ bw) =
 * alpha · Σ_p a[p·aw + i] · b[p·bw + j] + beta · c (beta = 0: c is not read). */
void mha_kernel_tile(const mha_kernel *k, int rows, int cols, int kc, float alpha, const float *a,
                     const float *b, float beta, float *c, ptrdiff_t ldc);

#endif
