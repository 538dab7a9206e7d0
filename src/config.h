/* config.h — config validation and the dimensions an engine is built with. */
#ifndef MHA_CONFIG_H
#define MHA_CONFIG_H

#include "mha.h"

/* Everything the arena plan and the forward pass need, resolved from a config:
 * threads = 0 becomes the CPUs allowed now, q_block = 0 becomes the engine's choice. */
typedef struct mha_dims {
    int d, h, dk;                 /* d_model, heads, d_model / heads */
    int batch, seq_q, seq_kv;     /* capacity */
    int threads;                  /* workers, each with its own scratch slice */
    int q_block;                  /* query rows per score tile */
    int bias;
} mha_dims;

/* Rows of one output-projection task and of one input-packing task: fixed, so results never
 * depend on the thread count. MHA_PACK_BLOCK is a multiple of every microkernel's row panel. */
#define MHA_OUT_BLOCK 128
#define MHA_PACK_BLOCK 192

mha_status mha_config_resolve(const mha_config *cfg, mha_dims *dims, char *err, size_t err_len);

#endif
