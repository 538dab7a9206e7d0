/* kvcache.h — the paged KV cache: blocks of block_size token slots, each holding K and V of
 * every KV head. Per block and KV head, K is stored transposed, (d_k, block_size): feature c
 * of the block's slots is contiguous, so a decode step's scores for a block are d_k vector
 * FMAs over the slots, no horizontal sums; V is (block_size, d_k), a slot's values contiguous,
 * after the block's K of all heads. Elements are float32, bfloat16 (rounded to nearest even
 * as they are written: half the bytes a decode step reads), or int8 (a quarter): then each
 * block ends with the scales, K's of every (KV head, slot) and then V's, float32. */
#ifndef MHA_KVCACHE_H
#define MHA_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "bgemm.h"
#include "mha.h"

struct mha_kv_cache {
    int d, h, kvh, dk;           /* the model it was made for */
    mha_rope rope;               /* K is stored rotated: the same RoPE must read it */
    mha_kv_type type;            /* F32, BF16 or INT8 (never AUTO) */
    int n_blocks, block_size;
    size_t block_elems;          /* elements per block: 2 · kvh · block_size · dk, and for int8
                                  * (elements are bytes) the scales after them, 64-byte rounded */
    size_t scales_at;            /* int8: where a block's scales start (bytes) */
    void *data;                  /* (n_blocks, block_elems) */
    void *owned;                 /* the memory when mha_kv_cache_create allocated it */
};

/* Bytes of one element of a cache of this type (F32, BF16 or INT8). */
static inline size_t mha_kv_elem_size(mha_kv_type type)
{
    return type == MHA_KV_F32 ? sizeof(float) : type == MHA_KV_BF16 ? sizeof(mha_bf16) : 1;
}

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

/* Typed views: float for a float32 cache, mha_bf16 for a bf16 one, int8 for an int8 one. */
static inline float *mha_kv_f32(const mha_kv_cache *c)
{
    return c->data;
}
static inline mha_bf16 *mha_kv_bf16(const mha_kv_cache *c)
{
    return c->data;
}
static inline int8_t *mha_kv_i8(const mha_kv_cache *c)
{
    return c->data;
}
/* int8: the scales of KV head g's block_size slots in a block, K's (v = 0) or V's (v = 1). */
static inline float *mha_kv_scales(const mha_kv_cache *c, int block, int g, int v)
{
    unsigned char *b = (unsigned char *)c->data + (size_t)block * c->block_elems + c->scales_at;
    return (float *)(void *)b + ((size_t)v * c->kvh + (size_t)g) * c->block_size;
}

/* Whether an engine of these dimensions and kv type may read and write the cache. */
int mha_kv_cache_fits(const mha_kv_cache *c, int d, int h, int kvh, int dk, const mha_rope *rope, mha_kv_type type);

#endif
