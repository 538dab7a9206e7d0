/* kvcache.c — sizing, creating and freeing the paged KV cache (kvcache.h). */
#include "kvcache.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "dims.h"
#include "status.h"

#define HEADER ((sizeof(mha_kv_cache) + 63) / 64 * 64)

/* ---- the types' traits ---- */

static void put_f32(const float *x, int n, void *data, size_t at, size_t stride)
{
    float *d = (float *)data + at;
    for (int i = 0; i < n; i++)
        d[(size_t)i * stride] = x[i];
}

static void put_bf16(const float *x, int n, void *data, size_t at, size_t stride)
{
    mha_bf16 *d = (mha_bf16 *)data + at;
    for (int i = 0; i < n; i++)
        d[(size_t)i * stride] = mha_bf16_round(x[i]);
}

static void floats_of_f32(const void *data, size_t at, int n, float *dst)
{
    memcpy(dst, (const float *)data + at, (size_t)n * sizeof *dst);
}

static void floats_of_bf16(const void *data, size_t at, int n, float *restrict dst)
{
    const mha_bf16 *restrict src = (const mha_bf16 *)data + at;
    for (int i = 0; i < n; i++)
        dst[i] = mha_bf16_float(src[i]);
}

/* int8 codes: x rounded to the nearest integer (ties to even) and kept within −128..127 (a NaN:
 * −128); the quantizer's last step. */
static int8_t code_of(float y)
{
    y = mha_kv_round_even(y);
    return (int8_t)(y >= -128.0f ? y <= 127.0f ? y : 127.0f : -128.0f);
}

static void put_i8(const float *x, int n, void *data, size_t at, size_t stride)
{
    int8_t *d = (int8_t *)data + at;
    for (int i = 0; i < n; i++)
        d[(size_t)i * stride] = code_of(x[i]);
}

static void floats_of_i8(const void *data, size_t at, int n, float *restrict dst)
{
    const int8_t *restrict src = (const int8_t *)data + at;
    for (int i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

static mha_bf16 bf16_of_f32(const void *data, size_t i)
{
    return mha_bf16_round(((const float *)data)[i]);
}

static mha_bf16 bf16_of_bf16(const void *data, size_t i)
{
    return ((const mha_bf16 *)data)[i];
}

static mha_bf16 bf16_of_i8(const void *data, size_t i)
{
    return mha_bf16_round((float)((const int8_t *)data)[i]);
}

/* The float16 value nearest x within float16's finite range (saturated there), as a float. */
static float f16_value(float x)
{
    const float big = 65504.0f; /* float16's largest */
    return mha_f16_float(mha_f16_round(x > big ? big : x < -big ? -big : x));
}

/* int8's rule, for K's groups (per feature) and V's rows alike: values lo..hi in 255 steps,
 * zero point lo + 128·scale with scale (hi − lo) / 255, q = (x − zero) / scale rounded to
 * nearest even and kept within −128..127 (scale 0: q 0), read back as q·scale + zero
 * (mha_kv_k_value). f16 (K's, stored as float16): the zero point rounded to float16 first, then
 * the scale rounded up to float16 from the steps the rounded zero point leaves on either side
 * ((zero − lo) / 128, (hi − zero) / 127), so every value still reads back within half a step
 * (for |x| up to about 8e6: a zero point past float16's range stops at ±65504, a scale at
 * 65504). Why a zero point: V's rows of trained models are not centred, and K's channels not
 * either: a symmetric range spends half its steps on values no element takes. */
static void quantize_i8(const float *x, size_t xs, int n, int f16, void *data, size_t at, size_t stride, float *scale,
                        float *zero)
{
    float lo = x[0], hi = lo;
    for (int i = 1; i < n; i++) {
        const float y = x[(size_t)i * xs];
        lo = y < lo ? y : lo;
        hi = y > hi ? y : hi;
    }
    float s = (hi - lo) / 255.0f, z = lo + 128.0f * s;
    if (f16) {
        z = f16_value(z);
        const float below = (z - lo) / 128.0f, above = (hi - z) / 127.0f, need = below > above ? below : above;
        s = f16_value(need);
        if (s < need && s < 65504.0f) /* a step up: float16's next value */
            s = mha_f16_float((mha_f16)(mha_f16_round(s) + 1));
    }
    *scale = s, *zero = z;
    int8_t *d = (int8_t *)data + at;
    for (int i = 0; i < n; i++)
        d[(size_t)i * stride] = s > 0.0f ? code_of((x[(size_t)i * xs] - z) / s) : 0;
}

/* The unscaled types' quantize: the values as put stores them, scale 1, zero 0. */
static void quantize_f32(const float *x, size_t xs, int n, int f16, void *data, size_t at, size_t stride, float *scale,
                         float *zero)
{
    (void)f16;
    for (int i = 0; i < n; i++)
        put_f32(&x[(size_t)i * xs], 1, data, at + (size_t)i * stride, 1);
    *scale = 1.0f, *zero = 0.0f;
}

static void quantize_bf16(const float *x, size_t xs, int n, int f16, void *data, size_t at, size_t stride, float *scale,
                          float *zero)
{
    (void)f16;
    for (int i = 0; i < n; i++)
        put_bf16(&x[(size_t)i * xs], 1, data, at + (size_t)i * stride, 1);
    *scale = 1.0f, *zero = 0.0f;
}

static const mha_kv_traits traits[MHA_KV_TYPES] = {
    [MHA_KV_F32] = {.put = put_f32, .quantize = quantize_f32, .floats = floats_of_f32, .bf16_at = bf16_of_f32},
    [MHA_KV_BF16] = {.put = put_bf16, .quantize = quantize_bf16, .floats = floats_of_bf16, .bf16_at = bf16_of_bf16},
    [MHA_KV_INT8] =
        {.scaled = 1, .put = put_i8, .quantize = quantize_i8, .floats = floats_of_i8, .bf16_at = bf16_of_i8},
};

const mha_kv_traits *mha_kv_traits_of(mha_kv_type type)
{
    return &traits[type];
}

/* The cache's layout for cfg, or 0 if the config or the sizes are invalid or overflow: the
 * header, the blocks, then (int8) the open-group pool's entries and their K rows. */
static size_t plan(const mha_config *cfg, int n_blocks, int block_size, int max_seqs, mha_kv_cache *c)
{
    mha_dims dims;
    if (!cfg || n_blocks < 1 || block_size < 1 || block_size > (1 << 20) || max_seqs < 0 ||
        mha_config_resolve(cfg, &dims, NULL) != MHA_OK || (dims.dv != dims.dk && !dims.mla.kv_lora_rank))
        return 0; /* V of head_dim (MLA: V read from K) */
    size_t per_head, per_block, bytes, total, scales_at = 0;
    const mha_kv_type type = dims.kv_type;
    const size_t elem = mha_kv_elem_size(type);
    const int scaled = mha_kv_traits_of(type)->scaled;
    /* Kᵀ and V; an MLA layer's Kᵀ alone (its V, the latent, is Kᵀ's first kv_lora features) */
    if (__builtin_mul_overflow((size_t)(dims.mla.kv_lora_rank ? 1 : 2) * dims.dk, (size_t)block_size, &per_head))
        return 0;
    if (scaled) { /* the values, then K's scale and zero point per feature of each group
                   * (float16), V's scale and zero point of each slot (float32) */
        const size_t groups = ((size_t)block_size + MHA_KV_GROUP - 1) / MHA_KV_GROUP;
        scales_at = mha_round_up(per_head, 64);
        per_head = mha_round_up(scales_at + groups * 2 * (size_t)dims.dk * sizeof(mha_f16) +
                                    2 * (size_t)block_size * sizeof(float),
                                64);
    }
    size_t block_bytes;
    if (__builtin_mul_overflow(per_head, (size_t)dims.kvh, &per_block) ||
        __builtin_mul_overflow(per_block, elem, &block_bytes) ||
        __builtin_mul_overflow(block_bytes, (size_t)n_blocks, &bytes) || __builtin_add_overflow(bytes, HEADER, &total))
        return 0;
    const int max_open = !scaled ? 0 : max_seqs == 0 ? dims.batch : max_seqs;
    /* the pool: entries, then each entry's K rows (kvh · MHA_KV_GROUP · dk floats: no
     * overflow, the arena's k_full holds more) */
    const size_t entries = mha_round_up((size_t)max_open * sizeof(mha_kv_open), 64),
                 rows = (size_t)max_open * dims.kvh * MHA_KV_GROUP * (size_t)dims.dk * sizeof(float);
    if (__builtin_add_overflow(total, entries, &total) || __builtin_add_overflow(total, rows, &total))
        return 0;
    *c = (mha_kv_cache){.d = dims.d, .h = dims.h, .kvh = dims.kvh, .dk = dims.dk, .mla = dims.mla.kv_lora_rank,
                        .rope = dims.rope, .type = type,
                        .n_blocks = n_blocks, .block_size = block_size, .head_elems = per_head, .block_elems = per_block,
                        .scales_at = scales_at, .max_open = max_open};
    return total;
}

MHA_API size_t mha_kv_cache_size(const mha_config *cfg, int n_blocks, int block_size, int max_seqs)
{
    mha_kv_cache c;
    return plan(cfg, n_blocks, block_size, max_seqs, &c);
}

/* Bytes of one block: every KV head's region. */
static size_t block_bytes(const mha_kv_cache *c)
{
    return c->block_elems * mha_kv_elem_size(c->type);
}

static mha_kv_cache *build(const mha_kv_cache *layout, void *mem)
{
    mha_kv_cache *c = mem;
    *c = *layout;
    c->data = (unsigned char *)mem + HEADER;
    c->open = (mha_kv_open *)(void *)((unsigned char *)c->data + block_bytes(c) * (size_t)c->n_blocks);
    c->open_k = (float *)(void *)((unsigned char *)c->open + mha_round_up((size_t)c->max_open * sizeof *c->open, 64));
    for (int e = 0; e < c->max_open; e++)
        c->open[e] = (mha_kv_open){-1, 0, 0};
    c->owned = NULL;
    c->last_error[0] = '\0';
    return c;
}

/* What both creators check first: out cleared, the layout planned into *layout (*total bytes). */
static mha_status begin(const mha_config *cfg, int n_blocks, int block_size, int max_seqs, mha_kv_cache **out,
                        mha_kv_cache *layout, size_t *total)
{
    if (!out)
        return MHA_ERR_INVALID_ARG;
    *out = NULL;
    *total = plan(cfg, n_blocks, block_size, max_seqs, layout);
    return *total ? MHA_OK : cfg ? MHA_ERR_CONFIG : MHA_ERR_INVALID_ARG;
}

MHA_API mha_status mha_kv_cache_create(const mha_config *cfg, int n_blocks, int block_size, int max_seqs,
                                       mha_kv_cache **out)
{
    mha_kv_cache layout;
    size_t total;
    mha_status st = begin(cfg, n_blocks, block_size, max_seqs, out, &layout, &total);
    if (st != MHA_OK)
        return st;
    void *mem = mha_alloc_pages(total);
    if (!mem)
        return MHA_ERR_NOMEM;
    memset((unsigned char *)mem + HEADER, 0, total - HEADER); /* zeroed, its pages touched before the first step */
    mha_kv_cache *c = build(&layout, mem);
    c->owned = mem;
    *out = c;
    return MHA_OK;
}

MHA_API mha_status mha_kv_cache_create_static(const mha_config *cfg, int n_blocks, int block_size, int max_seqs,
                                              void *mem, size_t len, mha_kv_cache **out)
{
    mha_kv_cache layout;
    size_t total;
    mha_status st = begin(cfg, n_blocks, block_size, max_seqs, out, &layout, &total);
    if (st != MHA_OK)
        return st;
    if (!mem)
        return MHA_ERR_INVALID_ARG;
    if ((uintptr_t)mem % 64 || len < total)
        return MHA_ERR_WORKSPACE;
    *out = build(&layout, mem);
    return MHA_OK;
}

MHA_API void mha_kv_cache_free(mha_kv_cache *c)
{
    if (c)
        free(c->owned); /* NULL for a cache in caller memory */
}

MHA_API const char *mha_kv_cache_last_error(const mha_kv_cache *c)
{
    return c ? c->last_error : "the cache is NULL";
}

int mha_kv_cache_fits(const mha_kv_cache *c, const mha_dims *dm)
{
    return c->d == dm->d && c->h == dm->h && c->kvh == dm->kvh && c->dk == dm->dk && c->mla == dm->mla.kv_lora_rank &&
           !memcmp(&c->rope, &dm->rope, sizeof dm->rope) && c->type == dm->kv_type;
}

/* ---- the open-group pool (int8) ---- */

/* The entry holding the group at `slot` of `block`, or −1. */
static int open_find(const mha_kv_cache *c, int block, int slot)
{
    for (int e = 0; e < c->max_open; e++)
        if (c->open[e].block == block && c->open[e].slot == slot)
            return e;
    return -1;
}

/* Entries in use that hold a group of one of blocks[0 .. n); with free, the free ones. */
static int open_count(const mha_kv_cache *c, const int32_t *blocks, int n, int *free_entries)
{
    int in = 0, idle = 0;
    for (int e = 0; e < c->max_open; e++) {
        idle += c->open[e].block < 0;
        for (int i = 0; c->open[e].block >= 0 && i < n; i++)
            if (c->open[e].block == blocks[i]) {
                in++;
                break;
            }
    }
    if (free_entries)
        *free_entries = idle;
    return in;
}

/* A free entry (the caller counted them first). */
static int open_take(const mha_kv_cache *c)
{
    int e = 0;
    while (c->open[e].block >= 0)
        e++;
    return e;
}

static float *open_rows(const mha_kv_cache *c, int e)
{
    return c->open_k + (size_t)e * mha_kv_open_floats(c);
}

static void open_release(mha_kv_cache *c, const int32_t *blocks, int n)
{
    for (int e = 0; e < c->max_open; e++)
        for (int i = 0; c->open[e].block >= 0 && i < n; i++)
            if (c->open[e].block == blocks[i])
                c->open[e].block = -1;
}

mha_status mha_kv_open_step(mha_kv_cache *c, int n_seqs, const int32_t *n_past, const int32_t *n_new,
                            const int32_t *blocks, int max_blocks, float **tails, char *why, size_t why_len)
{
    if (!c->max_open)
        return MHA_OK;
    const int bs = c->block_size;
    int fresh = 0, idle;
    open_count(c, NULL, 0, &idle);
    /* check: each sequence's entry found, or counted as one to take; tails[q] the entry's rows
     * (NULL: one to take, or none needed) */
    for (int q = 0; q < n_seqs; q++) {
        const int32_t *table = blocks + (size_t)q * max_blocks;
        const int p = n_past[q], end = p + n_new[q];
        tails[q] = NULL;
        if (n_new[q] == 0)
            continue;
        const mha_kv_group in = mha_kv_group_of(bs, p), out = mha_kv_group_of(bs, end - 1);
        const int open_in = p > in.t, open_out = end < out.t + out.n;
        int e = -1;
        if (open_in) {
            e = open_find(c, table[in.t / bs], in.t % bs);
            if (e < 0 || c->open[e].filled != p - in.t) {
                return mha_errorf(
                    why, why_len, MHA_ERR_STATE,
                    "step: sequence %d: the int8 cache holds %s of its open K group (positions "
                    "%d..%d, block %d slot %d, n_past %d): a step, copy or release of another sequence on this "
                    "block, or a table or n_past other than the one that left it",
                    q, e < 0 ? "nothing" : "other positions", in.t, p - 1, table[in.t / bs], in.t % bs, p);
            }
        } else if (open_out) /* an entry a sequence that ended left on this group, taken back */
            e = open_find(c, table[out.t / bs], out.t % bs);
        if (e >= 0)
            tails[q] = open_rows(c, e);
        else if (open_out)
            fresh++;
        /* two sequences writing one K group (a fork that shares its parent's last block instead
         * of copying it): the groups each continues or leaves open, against the others' */
        for (int r = 0; r < q; r++) {
            const int32_t *rt = blocks + (size_t)r * max_blocks;
            const int rp = n_past[r], rend = rp + n_new[r];
            if (n_new[r] == 0)
                continue;
            const mha_kv_group rin = mha_kv_group_of(bs, rp), rout = mha_kv_group_of(bs, rend - 1);
            const int32_t mine[2][2] = {{open_in ? table[in.t / bs] : -1, in.t % bs},
                                        {open_out ? table[out.t / bs] : -1, out.t % bs}};
            const int32_t theirs[2][2] = {{rp > rin.t ? rt[rin.t / bs] : -1, rin.t % bs},
                                          {rend < rout.t + rout.n ? rt[rout.t / bs] : -1, rout.t % bs}};
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++)
                    if (mine[a][0] >= 0 && mine[a][0] == theirs[b][0] && mine[a][1] == theirs[b][1]) {
                        return mha_errorf(why, why_len, MHA_ERR_STATE,
                                          "step: sequences %d and %d both write the K group at block %d slot %d", r, q,
                                          mine[a][0], mine[a][1]);
                    }
        }
    }
    if (fresh > idle) {
        return mha_errorf(
            why, why_len, MHA_ERR_STATE,
            "step: the int8 cache's pool of open K groups is full (%d entries, %d free, this step "
            "opens %d): release the blocks of sequences that ended (mha_kv_cache_release), or create the cache "
            "with a larger max_seqs",
            c->max_open, idle, fresh);
    }
    /* tag every entry the step leaves open with its group and positions, taking the fresh
     * ones; only then free those whose group the step completes (their rows are still to be
     * read by the step: no sequence may take them before it ends) */
    const ptrdiff_t per = (ptrdiff_t)mha_kv_open_floats(c);
    for (int pass = 0; pass < 2; pass++)
        for (int q = 0; q < n_seqs; q++) {
            if (n_new[q] == 0)
                continue;
            const int32_t *table = blocks + (size_t)q * max_blocks;
            const int end = n_past[q] + n_new[q];
            const mha_kv_group out = mha_kv_group_of(bs, end - 1);
            const int open_out = end < out.t + out.n;
            if (pass == 0 && open_out) {
                const int e = tails[q] ? (int)((tails[q] - c->open_k) / per) : open_take(c);
                const mha_kv_open tag = {table[out.t / bs], out.t % bs, end - out.t};
                for (int o = 0; o < c->max_open; o++) /* a stale entry of the same group: no longer */
                    if (o != e && c->open[o].block == tag.block && c->open[o].slot == tag.slot)
                        c->open[o].block = -1;
                c->open[e] = tag;
                tails[q] = open_rows(c, e);
            } else if (pass == 1 && !open_out && tails[q])
                c->open[(tails[q] - c->open_k) / per].block = -1;
        }
    return MHA_OK;
}

/* ---- block operations ---- */


/* blocks[0 .. n) (`what`) checked: given, in range, none twice; MHA_OK, or the refusal. */
static mha_status check_ids(mha_kv_cache *c, const char *op, const char *what, const int32_t *blocks, int n)
{
    if (n < 0 || (n > 0 && !blocks))
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_INVALID_ARG, "%s: %s", op,
                          n < 0 ? "n < 0" : "blocks is NULL");
    for (int i = 0; i < n; i++) {
        if (blocks[i] < 0 || blocks[i] >= c->n_blocks)
            return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_SHAPE, "%s: %s[%d] is %d, outside 0..%d", op,
                              what, i, blocks[i], c->n_blocks - 1);
        for (int k = 0; k < i; k++)
            if (blocks[k] == blocks[i])
                return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_INVALID_ARG,
                                  "%s: %s[%d] and [%d] are both block %d", op, what, k, i, blocks[i]);
    }
    return MHA_OK;
}

static unsigned char *block_at(const mha_kv_cache *c, int block)
{
    return (unsigned char *)c->data + (size_t)block * block_bytes(c);
}

/* Room in the pool for `need` entries once those on blocks[0 .. n) (to be overwritten) are
 * freed; MHA_OK or the refusal. */
static mha_status check_room(mha_kv_cache *c, const char *op, int need, const int32_t *blocks, int n)
{
    int idle;
    const int freed = open_count(c, blocks, n, &idle);
    if (need > idle + freed)
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_STATE,
                          "%s: %d open K groups to keep, the pool has room for %d (%d entries): "
                          "release the blocks of sequences that ended, or create the cache with a larger max_seqs",
                          op, need, idle + freed, c->max_open);
    return MHA_OK;
}

MHA_API mha_status mha_kv_cache_copy_blocks(mha_kv_cache *c, const int32_t *src, const int32_t *dst, int n)
{
    if (!c)
        return MHA_ERR_INVALID_ARG;
    mha_status st;
    if ((st = check_ids(c, "copy_blocks", "src", src, n)) != MHA_OK ||
        (st = check_ids(c, "copy_blocks", "dst", dst, n)) != MHA_OK)
        return st;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            if (dst[i] == src[k])
                return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_INVALID_ARG,
                                  "copy_blocks: dst[%d] is src[%d] (block %d)", i, k, dst[i]);
    if ((st = check_room(c, "copy_blocks", open_count(c, src, n, NULL), dst, n)) != MHA_OK)
        return st;
    open_release(c, dst, n);
    for (int i = 0; i < n; i++) {
        memcpy(block_at(c, dst[i]), block_at(c, src[i]), block_bytes(c));
        for (int e = 0; e < c->max_open; e++)
            if (c->open[e].block == src[i]) {
                const int to = open_take(c);
                c->open[to] = (mha_kv_open){dst[i], c->open[e].slot, c->open[e].filled};
                memcpy(open_rows(c, to), open_rows(c, e), mha_kv_open_floats(c) * sizeof(float));
            }
    }
    c->last_error[0] = '\0';
    return MHA_OK;
}

MHA_API mha_status mha_kv_cache_release(mha_kv_cache *c, const int32_t *blocks, int n)
{
    if (!c)
        return MHA_ERR_INVALID_ARG;
    mha_status st = check_ids(c, "release", "blocks", blocks, n);
    if (st != MHA_OK)
        return st;
    open_release(c, blocks, n);
    c->last_error[0] = '\0';
    return MHA_OK;
}

MHA_API int mha_kv_cache_open_groups(const mha_kv_cache *c)
{
    int idle = 0;
    if (c)
        open_count(c, NULL, 0, &idle);
    return c ? c->max_open - idle : 0;
}

MHA_API int mha_kv_cache_max_open(const mha_kv_cache *c)
{
    return c ? c->max_open : 0;
}

/* A swapped-out image: this head, the blocks' bytes in order, then each open group: its
 * swap_group (the block's index in the image, slot, positions) and its K rows. */
#define SWAP_MAGIC 0x70617773u /* "swap" */
typedef struct swap_head {
    uint32_t magic;
    int32_t n, n_open, kvh, dk, type;
    uint64_t block_bytes;
} swap_head;
typedef struct swap_group { int32_t index, slot, filled, unused; } swap_group;
#define SWAP_HEAD mha_round_up(sizeof(swap_head), 64)

static size_t swap_bytes(const mha_kv_cache *c, int n, int n_open)
{
    return SWAP_HEAD + (size_t)n * block_bytes(c) +
           (size_t)n_open * (sizeof(swap_group) + mha_kv_open_floats(c) * sizeof(float));
}

MHA_API size_t mha_kv_cache_swap_size(const mha_kv_cache *c, const int32_t *blocks, int n)
{
    if (!c || n < 0 || (n > 0 && !blocks))
        return 0;
    for (int i = 0; i < n; i++)
        if (blocks[i] < 0 || blocks[i] >= c->n_blocks)
            return 0;
    return swap_bytes(c, n, open_count(c, blocks, n, NULL));
}

MHA_API mha_status mha_kv_cache_swap_out(mha_kv_cache *c, const int32_t *blocks, int n, void *dst, size_t len)
{
    if (!c)
        return MHA_ERR_INVALID_ARG;
    mha_status st = check_ids(c, "swap_out", "blocks", blocks, n);
    if (st != MHA_OK)
        return st;
    const int n_open = open_count(c, blocks, n, NULL);
    const size_t need = swap_bytes(c, n, n_open);
    if (!dst)
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_INVALID_ARG, "swap_out: dst is NULL");
    if (len < need)
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_WORKSPACE,
                          "swap_out: dst holds %zu bytes, the image needs %zu "
                          "(mha_kv_cache_swap_size)",
                          len, need);
    unsigned char *o = dst;
    const swap_head head = {SWAP_MAGIC, n, n_open, c->kvh, c->dk, (int32_t)c->type, block_bytes(c)};
    memcpy(o, &head, sizeof head);
    o += SWAP_HEAD;
    for (int i = 0; i < n; i++, o += block_bytes(c))
        memcpy(o, block_at(c, blocks[i]), block_bytes(c));
    for (int i = 0; i < n; i++)
        for (int e = 0; e < c->max_open; e++)
            if (c->open[e].block == blocks[i]) {
                const swap_group g = {i, c->open[e].slot, c->open[e].filled, 0};
                memcpy(o, &g, sizeof g);
                memcpy(o + sizeof g, open_rows(c, e), mha_kv_open_floats(c) * sizeof(float));
                o += sizeof g + mha_kv_open_floats(c) * sizeof(float);
            }
    open_release(c, blocks, n);
    c->last_error[0] = '\0';
    return MHA_OK;
}

MHA_API mha_status mha_kv_cache_swap_in(mha_kv_cache *c, const int32_t *blocks, int n, const void *src, size_t len)
{
    if (!c)
        return MHA_ERR_INVALID_ARG;
    mha_status st = check_ids(c, "swap_in", "blocks", blocks, n);
    if (st != MHA_OK)
        return st;
    if (!src)
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_INVALID_ARG, "swap_in: src is NULL");
    swap_head head;
    if (len < SWAP_HEAD)
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_FORMAT,
                          "swap_in: %zu bytes are no swapped-out image (its head alone is %zu)", len,
                          (size_t)SWAP_HEAD);
    memcpy(&head, src, sizeof head);
    if (head.magic != SWAP_MAGIC || head.kvh != c->kvh || head.dk != c->dk || head.type != (int32_t)c->type ||
        head.block_bytes != block_bytes(c))
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_FORMAT,
                          "swap_in: src is not an image of this cache's layout (%s)",
                          head.magic != SWAP_MAGIC ? "no swap_out image" : "another model, kv type or block size");
    if (head.n != n || head.n_open < 0 ||
        head.n_open > (long long)n * ((c->block_size + MHA_KV_GROUP - 1) / MHA_KV_GROUP))
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_FORMAT,
                          "swap_in: the image holds %d blocks (%d open groups), %d given", head.n, head.n_open, n);
    if (len < swap_bytes(c, n, head.n_open))
        return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_FORMAT,
                          "swap_in: the image is %zu bytes, its head says %zu", len, swap_bytes(c, n, head.n_open));
    const unsigned char *groups = (const unsigned char *)src + SWAP_HEAD + (size_t)n * block_bytes(c);
    const size_t per = sizeof(swap_group) + mha_kv_open_floats(c) * sizeof(float);
    for (int k = 0; k < head.n_open; k++) {
        swap_group g;
        memcpy(&g, groups + (size_t)k * per, sizeof g);
        if (g.index < 0 || g.index >= n || g.slot < 0 || g.slot >= c->block_size || g.slot % MHA_KV_GROUP ||
            g.filled < 1 || g.filled >= mha_kv_group_of(c->block_size, g.slot).n)
            return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_FORMAT,
                              "swap_in: the image's open group %d (block %d, slot %d, %d positions) "
                              "is not one of this cache",
                              k, g.index, g.slot, g.filled);
        for (int l = 0; l < k; l++) {
            swap_group h;
            memcpy(&h, groups + (size_t)l * per, sizeof h);
            if (h.index == g.index && h.slot == g.slot)
                return mha_errorf(c->last_error, sizeof c->last_error, MHA_ERR_FORMAT,
                                  "swap_in: the image holds block %d slot %d's open group twice", g.index, g.slot);
        }
    }
    if ((st = check_room(c, "swap_in", head.n_open, blocks, n)) != MHA_OK)
        return st;
    open_release(c, blocks, n);
    const unsigned char *in = (const unsigned char *)src + SWAP_HEAD;
    for (int i = 0; i < n; i++, in += block_bytes(c))
        memcpy(block_at(c, blocks[i]), in, block_bytes(c));
    for (int k = 0; k < head.n_open; k++) {
        swap_group g;
        memcpy(&g, groups + (size_t)k * per, sizeof g);
        const int e = open_take(c);
        c->open[e] = (mha_kv_open){blocks[g.index], g.slot, g.filled};
        memcpy(open_rows(c, e), groups + (size_t)k * per + sizeof g, mha_kv_open_floats(c) * sizeof(float));
    }
    c->last_error[0] = '\0';
    return MHA_OK;
}
