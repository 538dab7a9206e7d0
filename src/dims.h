/* dims.h — the dimensions an engine is built with, resolved from its config: what the arena
 * plan and the passes read. No YAML, no schema: the compute modules include this, not config.h. */
#ifndef MHA_DIMS_H
#define MHA_DIMS_H

#include "mha.h"
#include "status.h"

/* Everything the arena plan and the forward pass need, resolved from a config:
 * threads = 0 becomes the CPUs allowed now, q_block = 0 becomes the engine's choice. */
typedef struct mha_dims {
    int d, h, dk;                 /* d_model, heads, d_k (head_dim, or d_model / heads) */
    int dv;                       /* V's features per head (v_head_dim, or dk), at most dk */
    int qd;                       /* h·dk: the width of Q and of the heads' outputs Z */
    int batch, seq_q, seq_kv;     /* capacity */
    int threads;                  /* workers, each with its own scratch slice */
    int q_block;                  /* query rows per score tile */
    int bias;
    int bf16;                     /* precision bf16: weights, K, V and operands in bfloat16 */
    mha_kv_type kv_type;          /* the KV cache's elements, resolved (never AUTO) */
    int kvh, group;               /* KV heads; query heads per KV head (h / kvh) */
    int window;                   /* sliding window, 0: none */
    float scale;                  /* the scores' factor, resolved (0 -> 1/sqrt(dk)) */
    float softcap;                /* 0: none */
    int sinks;                    /* 1: a sink logit per head */
    mha_qk_norm qk_norm;          /* as configured; zeroed when kind is none */
    float alibi_max_bias;         /* 0: no ALiBi */
    mha_rope rope;                /* as configured; rope.rotary_dim resolved (0 -> dk) */
    int positions;                /* RoPE table rows: max(seq_q, seq_kv) */
    mha_weight_type wtype[MHA_W_COUNT]; /* Wq, Wk, Wv, Wo as held (config.weight_type) */
    mha_activations acts;               /* what block weights multiply
                                           (config.weight_activations) */
    int quant;                    /* the four held as blocks (quant.h), not floats */
    mha_mla mla;                  /* as configured; zeroed without MLA (kv_lora_rank 0). With it:
                                   * dk = kv_lora + rope, dv = kv_lora, kvh 1, group h */
} mha_dims;

/* QK-norm's factors for `heads` heads of dk features (n_heads for Q, n_kv_heads for K): dk
 * per row for head, every head's for full (the norm spans the whole projection), 0 for none. */
static inline int mha_qk_norm_len(mha_qk_norm_kind kind, int heads, int dk)
{
    return kind == MHA_QK_NORM_FULL ? heads * dk : kind == MHA_QK_NORM_HEAD ? dk : 0;
}

mha_status mha_config_resolve(const mha_config *cfg, mha_dims *dims, mha_problem *pr);

#endif
