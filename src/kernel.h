/* kernel.h — the attention kernel: BLIS context choice, and the work of one head task and
 * one output-projection task. The only module that sees BLIS. */
#ifndef MHA_KERNEL_H
#define MHA_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"
#include "softmax.h"

typedef struct mha_kernel {
    void *cntx;        /* BLIS cntx_t * of the chosen sub-config */
    const char *arch;  /* its name: "skx", "haswell", "zen3", "generic", … */
} mha_kernel;

/* request: "" or "auto" (from the CPU's features), or a sub-config name.
 * MHA_ERR_CONFIG if it is unknown, not in this BLIS build or not runnable on this CPU. */
mha_status mha_kernel_select(const char *request, mha_kernel *k);
const char *mha_kernel_auto_arch(void); /* what "auto" picks on this CPU */
const char *mha_kernel_blis_version(void);

/* One forward pass, as every task sees it (read-only during the pass). */
typedef struct mha_fwd {
    const mha_kernel *kernel;
    mha_softmax_fn softmax;
    int d, h, dk, q_block;
    int batch, seq_q, seq_kv;
    int fused;               /* q == k == v, seq_q == seq_kv: one GEMM gives Q|K|V */
    int kv_shared;           /* k == v: one GEMM gives K|V */
    int causal, has_bias;
    const float *q, *k, *v;  /* (batch, seq_q, d), (batch, seq_kv, d) ×2 */
    const int32_t *q_len, *kv_len;  /* NULL or (batch) */
    const uint8_t *mask;     /* NULL or (seq_q, seq_kv) */
    const float *wqkv, *bqkv, *wo, *bo;  /* packed, see arena.h */
    float *z;                /* (batch, seq_q, d) */
    float *out;              /* (batch, seq_q, d) */
    float *attn;             /* NULL or (batch, h, seq_q, seq_kv) */
} mha_fwd;

/* Q/K/V projection of head h of sequence b, scores, softmax and A·V into its columns of z,
 * query block by query block, in the worker's scratch: qkv (max(seq_q, seq_kv), 3·dk)
 * floats, scores (q_block, seq_kv) floats. */
void mha_kernel_head(const mha_fwd *f, int b, int h, float *qkv, float *scores);
/* out rows [r0, r1) of sequence b: z · Wo + bo, rows past the query length 0. */
void mha_kernel_out_rows(const mha_fwd *f, int b, int r0, int r1);

#endif
