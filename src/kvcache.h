/* kvcache.h — the paged KV cache: blocks of block_size token slots, each holding K and V of
 * every KV head. Per block and KV head, K is stored transposed, (d_k, block_size): feature c
 * of the block's slots is contiguous, so a decode step's scores for a block are d_k vector
 * FMAs over the slots, no horizontal sums; V is (block_size, d_k), a slot's values contiguous,
 * after the block's K of all heads. */
#ifndef MHA_KVCACHE_H
#define MHA_KVCACHE_H

#include <stddef.h>

#include "mha.h"

struct mha_kv_cache {
    int d, h, kvh, dk;           /* the model it was made for */
    mha_rope rope;               /* K is stored rotated: the same RoPE must read it */
    int n_blocks, block_size;
    size_t block_floats;         /* 2 · kvh · block_size · dk */
    float *data;                 /* (n_blocks, block_floats) */
    void *owned;                 /* the memory when mha_kv_cache_create allocated it */
};

/* Kᵀ of KV head g in a block: (d_k, block_size), feature c of slot t at [c · block_size + t]. */
static inline float *mha_kv_kt(const mha_kv_cache *c, int block, int g)
{
    return c->data + (size_t)block * c->block_floats + (size_t)g * c->block_size * c->dk;
}

/* V of KV head g at a slot: d_k contiguous floats. */
static inline float *mha_kv_v(const mha_kv_cache *c, int block, int g, int slot)
{
    return c->data + (size_t)block * c->block_floats + ((size_t)(c->kvh + g) * c->block_size + slot) * c->dk;
}

/* Whether an engine of these dimensions may read and write the cache. */
int mha_kv_cache_fits(const mha_kv_cache *c, int d, int h, int kvh, const mha_rope *rope);

#endif
