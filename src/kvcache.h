/* kvcache.h — the paged KV cache: blocks of block_size token slots, each holding K and V of
 * every KV head. Per block and KV head, K is stored transposed, (d_k, block_size): feature c
 * of the block's slots is contiguous, so a decode step's scores for a block are d_k vector
 * FMAs over the slots, no horizontal sums; V is (block_size, d_k), a slot's values contiguous,
 * after the block's K of all heads. Elements are float32, or bfloat16 (rounded to nearest even
 * as they are written) for a config of precision bf16: half the bytes a decode step reads. */
#ifndef MHA_KVCACHE_H
#define MHA_KVCACHE_H

#include <stddef.h>

#include "bgemm.h"
#include "mha.h"

struct mha_kv_cache {
    int d, h, kvh, dk;           /* the model it was made for */
    mha_rope rope;               /* K is stored rotated: the same RoPE must read it */
    int bf16;                    /* elements are mha_bf16, else float */
    int n_blocks, block_size;
    size_t block_elems;          /* 2 · kvh · block_size · dk */
    void *data;                  /* (n_blocks, block_elems) */
    void *owned;                 /* the memory when mha_kv_cache_create allocated it */
};

/* Element index of Kᵀ of KV head g in a block: (d_k, block_size), feature c of slot t at
 * [c · block_size + t]. */
static inline size_t mha_kv_kt_at(const mha_kv_cache *c, int block, int g)
{
    return (size_t)block * c->block_elems + (size_t)g * c->block_size * c->dk;
}

/* Element index of V of KV head g at a slot: d_k contiguous elements. */
static inline size_t mha_kv_v_at(const mha_kv_cache *c, int block, int g, int slot)
{
    return (size_t)block * c->block_elems + ((size_t)(c->kvh + g) * c->block_size + slot) * c->dk;
}

/* Typed views: float for a float32 cache, mha_bf16 for a bf16 one. */
static inline float *mha_kv_f32(const mha_kv_cache *c)
{
    return c->data;
}
static inline mha_bf16 *mha_kv_bf16(const mha_kv_cache *c)
{
    return c->data;
}

/* Whether an engine of these dimensions and precision may read and write the cache. */
int mha_kv_cache_fits(const mha_kv_cache *c, int d, int h, int kvh, int dk, const mha_rope *rope, int bf16);

#endif
