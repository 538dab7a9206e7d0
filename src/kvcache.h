/* kvcache.h — the paged KV cache: blocks of block_size token slots, each holding K and V of
 * every KV head, a region per KV head: K stored transposed, (d_k, block_size), feature c of
 * the block's slots contiguous (a decode step's scores for a block are d_k vector FMAs over
 * the slots, no horizontal sums), then V, (block_size, d_k), a slot's values contiguous.
 * Elements are float32, bfloat16 (rounded to nearest even as they are written: half the
 * bytes a decode step reads), or int8 (a quarter): then the region ends with K's parameters,
 * per group of MHA_KV_GROUP slots (mha_kv_group_of) a scale and then a zero point per feature
 * (a value is q·scale + zero, mha_kv_k_value), float16, and V's scale and zero point per slot
 * (mha_kv_v_params), float32. A decode task
 * reads one KV head of a block: one contiguous run (random runs of a few KiB stream faster the
 * longer they are). */
#ifndef MHA_KVCACHE_H
#define MHA_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "bgemm.h"
#include "dims.h"
#include "mha.h"

/* An entry of an int8 cache's open-group pool: the K group at slot `slot` of block `block`
 * (block −1: the entry is free), its first `filled` positions written. */
typedef struct mha_kv_open { int32_t block, slot, filled; } mha_kv_open;

struct mha_kv_cache {
    int d, h, kvh, dk;           /* the model it was made for */
    int mla;                     /* an MLA model's kv_lora_rank (its one KV head: K is [latent |
                                  * rotated k_rope]; the region holds Kᵀ alone, V being K's
                                  * first kv_lora features), else 0 */
    mha_rope rope;               /* K is stored rotated: the same RoPE must read it */
    mha_kv_type type;            /* F32, BF16 or INT8 (never AUTO) */
    int n_blocks, block_size;
    size_t head_elems;           /* elements per (block, KV head): 2 · block_size · dk (MLA:
                                  * block_size · dk), and for int8 (elements are bytes) the
                                  * scales after them, 64-byte rounded */
    size_t block_elems;          /* kvh · head_elems */
    size_t scales_at;            /* int8: where a region's K parameters start (bytes, 64-byte
                                  * rounded); V's parameters follow them */
    void *data;                  /* (n_blocks, block_elems) */
    /* int8: the open-group pool, max_open entries (0 for other types); entry e's K rows at
     * open_k + e · mha_kv_open_floats: KV head g's row of the group's slot u at
     * (g · MHA_KV_GROUP + u) · dk */
    int max_open;
    mha_kv_open *open;           /* (max_open): which group each entry holds */
    float *open_k;
    void *owned;                 /* the memory when mha_kv_cache_create allocated it */
    char last_error[256];        /* the last failed block operation's message */
};

/* ---- the cache types: what the drivers (step.c, arena.c, engine.c) know of one, indexed by
 * mha_kv_type. A new type is a row in mha_kv_elem_size and in kvcache.c's traits, and a row
 * in each table's per-type operations (isa.h: decode_scores, decode_values, interleave_pairs;
 * a bf16 engine's decode_scores16 and decode_values16 where they read it), not a change to
 * the drivers. ---- */
#define MHA_KV_TYPES 4 /* arrays indexed by mha_kv_type (MHA_KV_AUTO's entry unused) */

/* Bytes of one element of a cache of this type (F32, BF16 or INT8); inline, so the tables'
 * tiles, written for one type each, fold it. */
static inline size_t mha_kv_elem_size(mha_kv_type type)
{
    return type == MHA_KV_F32 ? sizeof(float) : type == MHA_KV_BF16 ? sizeof(mha_bf16) : 1;
}

typedef struct mha_kv_traits {
    /* 1: an element q stands for q·scale + zero (int8). K per feature over each group of
     * MHA_KV_GROUP slots (mha_kv_group_of), the group still filling kept at full precision in
     * the cache's open-group pool (mha_kv_open_step) until it is complete; V per slot; the parameters
     * after the values (mha_kv_k_params, mha_kv_v_params). Its scores, in either engine: a
     * stored group's integer where the table has them (isa.h's int8_scores), else float32
     * products on K read back; the query's own group's float32 products on K at full
     * precision. A bf16 engine's chunks read V's elements themselves and apply the parameters
     * after. 0: elements are the values (float32, bf16). */
    int scaled;
    /* Every operation below is defined for every type (no holes: a caller never tests the type
     * before calling one). */
    /* x[0 .. n) stored as the elements themselves at at, at + stride, ... of data: float32 as
     * they are, bf16 rounded to nearest even (mha_bf16_round), int8 as codes (each rounded to
     * nearest even and kept within −128..127, no scale: what floats reads back). */
    void (*put)(const float *x, int n, void *data, size_t at, size_t stride);
    /* x[i · xs] for i < n as values with one scale and zero point (*scale, *zero) into the
     * elements at, at + stride, ... of data: int8 over their range (its rule, kvcache.c; f16:
     * the scale and zero point float16 values, as K's are stored: mha_kv_k_params); the
     * unscaled types store the values themselves (put's), scale 1 and zero 0. */
    void (*quantize)(const float *x, size_t xs, int n, int f16, void *data, size_t at, size_t stride, float *scale,
                     float *zero);
    /* The n elements from at of data as float32, exact (the elements themselves: an int8
     * cache's codes, not its values), for the engines that read them as float32 (a step's
     * prefill gather). */
    void (*floats)(const void *data, size_t at, int n, float *dst);
    /* Element i of data as bf16, as a bf16 engine's panels hold it: bf16's itself, float32's
     * rounded to nearest even, int8's code (exact). */
    mha_bf16 (*bf16_at)(const void *data, size_t i);
} mha_kv_traits;

/* The traits of a cache type (F32, BF16 or INT8). */
const mha_kv_traits *mha_kv_traits_of(mha_kv_type type);

/* Element index of Kᵀ of KV head g in a block: (d_k, block_size), feature c of slot t at
 * [c · block_size + t]. */
static inline size_t mha_kv_kt_at(const mha_kv_cache *c, int block, int g)
{
    return (size_t)block * c->block_elems + (size_t)g * c->head_elems;
}

/* Element index of V of KV head g at a slot: d_k contiguous elements. Not in an MLA cache
 * (V is read from Kᵀ there: step_decode.c's mla_v_rows). */
static inline size_t mha_kv_v_at(const mha_kv_cache *c, int block, int g, int slot)
{
    return mha_kv_kt_at(c, block, g) + ((size_t)c->block_size + (size_t)slot) * c->dk;
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
/* int8: the group of K slots holding position p (block_size bs): positions [t, t + n), within
 * one block, from a multiple of MHA_KV_GROUP slots (the block's last group may be shorter). */
typedef struct mha_kv_group { int t, n; } mha_kv_group;
static inline mha_kv_group mha_kv_group_of(int bs, int p)
{
    const int slot = p % bs, first = slot / MHA_KV_GROUP * MHA_KV_GROUP;
    return (mha_kv_group){p - slot + first, bs - first < MHA_KV_GROUP ? bs - first : MHA_KV_GROUP};
}
/* int8: K's parameters of the group holding `slot` of KV head g in a block, float16: the scale
 * of feature c at [c], its zero point at [dk + c] (half the bytes of float32's: a block of 16
 * slots and d_k 128 holds 4736 bytes a KV head, 0.58× a bf16 cache's 8192). */
static inline mha_f16 *mha_kv_k_params(const mha_kv_cache *c, int block, int g, int slot)
{
    unsigned char *b = (unsigned char *)c->data + mha_kv_kt_at(c, block, g) + c->scales_at;
    return (mha_f16 *)(void *)b + (size_t)(slot / MHA_KV_GROUP) * 2 * (size_t)c->dk;
}
/* int8: V's parameters of KV head g's block_size slots in a block, float32: slot t's scale at
 * [2t], its zero point at [2t + 1] (a value q·scale + zero, as K's: mha_kv_k_value). */
static inline float *mha_kv_v_params(const mha_kv_cache *c, int block, int g)
{
    const int groups = (c->block_size + MHA_KV_GROUP - 1) / MHA_KV_GROUP;
    return (float *)(void *)(mha_kv_k_params(c, block, g, 0) + (size_t)groups * 2 * (size_t)c->dk);
}
/* int8: the value of K's element q of a feature with that scale and zero point: a multiply
 * and an add, each rounded (-ffp-contract=off), the same bits wherever it is read. */
static inline float mha_kv_k_value(int8_t q, float scale, float zero)
{
    return (float)q * scale + zero;
}

/* int8 quantizers: x rounded to the nearest integer, ties to even, for |x| < 2^22 (a NaN stays
 * NaN): nearbyintf's bits in the default rounding mode (the engine's; −0.4 gives +0, not −0:
 * the quantizers store 0 either way), as two adds where
 * nearbyintf is a libm call that saves and restores the floating-point environment (about 3%
 * of an int8 decode step). A -ffast-math build, which could fold the adds, stops at isa.h. */
static inline float mha_kv_round_even(float x)
{
    const float big = 0x1.8p23f; /* 1.5·2^23: a sum this large keeps no fraction */
    return (x + big) - big;
}

/* A run of a sequence's positions in one block: positions [t, t + n) at slots [slot, slot + n)
 * of block `block` (n = 0: past the end). The one walk from positions to blocks and slots:
 *     for (mha_kv_run r = mha_kv_run_at(table, bs, t0, t1); r.n; r = mha_kv_run_at(table, bs, r.t + r.n, t1))
 * visits [t0, t1) block by block (table: the sequence's block table, bs: slots per block). */
typedef struct mha_kv_run { int t, n, block, slot; } mha_kv_run;
static inline mha_kv_run mha_kv_run_at(const int32_t *table, int bs, int t, int t1)
{
    if (t >= t1)
        return (mha_kv_run){t, 0, -1, 0};
    const int slot = t % bs;
    return (mha_kv_run){t, t1 - t < bs - slot ? t1 - t : bs - slot, table[t / bs], slot};
}

/* Floats of one open-group entry's K rows: kvh · MHA_KV_GROUP · dk. */
static inline size_t mha_kv_open_floats(const mha_kv_cache *c)
{
    return (size_t)c->kvh * MHA_KV_GROUP * (size_t)c->dk;
}

/* An int8 cache's step (n_seqs sequences, the step's n_past, n_new and block tables): each
 * sequence's open-group entry found (the group holding n_past, when it is partly written) or
 * taken (the group the step leaves partly written: an entry of that group left by a sequence
 * that ended without a release, else a free one), tails[q] its K rows (NULL where the sequence
 * neither continues nor leaves an open group); the entries then tagged with what the step
 * leaves (a group the step completes frees its entry; the rows themselves are written by the
 * step, into tails[q], and read from there before). Or, changing nothing, MHA_ERR_STATE with
 * why: a group missing or holding other positions, two sequences on one entry, no free entry.
 * Other cache types: MHA_OK, tails unwritten. */
mha_status mha_kv_open_step(mha_kv_cache *c, int n_seqs, const int32_t *n_past, const int32_t *n_new,
                            const int32_t *blocks, int max_blocks, float **tails, char *why, size_t why_len);

/* Whether an engine of these dimensions (its model, MLA or not, and kv type) may read and write
 * the cache. */
int mha_kv_cache_fits(const mha_kv_cache *c, const mha_dims *dims);

#endif
