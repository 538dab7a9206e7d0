/* kvcache.c — sizing, creating and freeing the paged KV cache (kvcache.h). */
#include "kvcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "dims.h"

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
 * either (perf/RESULTS.md, session 23). */
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
    for (int i = 0; i < n; i++) {
        const float y = s > 0.0f ? mha_kv_round_even((x[(size_t)i * xs] - z) / s) : 0.0f;
        d[(size_t)i * stride] = (int8_t)(y >= -128.0f ? y <= 127.0f ? y : 127.0f : -128.0f); /* a NaN: −128 */
    }
}

static const mha_kv_traits traits[MHA_KV_TYPES] = {
    [MHA_KV_F32] = {.put = put_f32, .floats = floats_of_f32},
    [MHA_KV_BF16] = {.put = put_bf16, .floats = floats_of_bf16, .bf16_at = bf16_of_bf16},
    [MHA_KV_INT8] = {.scaled = 1, .quantize = quantize_i8, .bf16_at = bf16_of_i8},
};

const mha_kv_traits *mha_kv_traits_of(mha_kv_type type)
{
    return &traits[type];
}

/* The cache's layout for cfg, or 0 if the config or the sizes are invalid or overflow. */
static size_t plan(const mha_config *cfg, int n_blocks, int block_size, mha_kv_cache *c)
{
    mha_dims dims;
    if (!cfg || n_blocks < 1 || block_size < 1 || block_size > (1 << 20) ||
        mha_config_resolve(cfg, &dims, NULL) != MHA_OK || (dims.dv != dims.dk && !dims.mla.kv_lora_rank))
        return 0; /* V of head_dim (MLA: V read from K) */
    size_t per_head, per_block, bytes, total, scales_at = 0;
    const mha_kv_type type = dims.kv_type;
    const size_t elem = mha_kv_elem_size(type);
    /* Kᵀ and V; an MLA layer's Kᵀ alone (its V, the latent, is Kᵀ's first kv_lora features) */
    if (__builtin_mul_overflow((size_t)(dims.mla.kv_lora_rank ? 1 : 2) * dims.dk, (size_t)block_size, &per_head))
        return 0;
    if (mha_kv_traits_of(type)->scaled) { /* the values, then K's scale and zero point per feature
                                           * of each group (float16), V's scale and zero point of
                                           * each slot (float32) */
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
    *c = (mha_kv_cache){.d = dims.d, .h = dims.h, .kvh = dims.kvh, .dk = dims.dk, .mla = dims.mla.kv_lora_rank,
                        .rope = dims.rope, .type = type,
                        .n_blocks = n_blocks, .block_size = block_size, .head_elems = per_head, .block_elems = per_block,
                        .scales_at = scales_at};
    return total;
}

MHA_API size_t mha_kv_cache_size(const mha_config *cfg, int n_blocks, int block_size)
{
    mha_kv_cache c;
    return plan(cfg, n_blocks, block_size, &c);
}

MHA_API size_t mha_kv_tail_size(const mha_kv_cache *c)
{
    return c && mha_kv_traits_of(c->type)->scaled ? (size_t)c->kvh * MHA_KV_GROUP * (size_t)c->dk * sizeof(float) : 0;
}

static mha_kv_cache *build(const mha_kv_cache *layout, void *mem)
{
    mha_kv_cache *c = mem;
    *c = *layout;
    c->data = (unsigned char *)mem + HEADER;
    c->owned = NULL;
    return c;
}

/* What both creators check first: out cleared, the layout planned into *layout (*total bytes). */
static mha_status begin(const mha_config *cfg, int n_blocks, int block_size, mha_kv_cache **out, mha_kv_cache *layout,
                        size_t *total)
{
    if (!out)
        return MHA_ERR_INVALID_ARG;
    *out = NULL;
    *total = plan(cfg, n_blocks, block_size, layout);
    return *total ? MHA_OK : cfg ? MHA_ERR_CONFIG : MHA_ERR_INVALID_ARG;
}

MHA_API mha_status mha_kv_cache_create(const mha_config *cfg, int n_blocks, int block_size, mha_kv_cache **out)
{
    mha_kv_cache layout;
    size_t total;
    mha_status st = begin(cfg, n_blocks, block_size, out, &layout, &total);
    if (st != MHA_OK)
        return st;
    void *mem = mha_alloc_pages(total);
    if (!mem)
        return MHA_ERR_NOMEM;
    mha_kv_cache *c = build(&layout, mem);
    memset(c->data, 0, total - HEADER); /* zeroed, and its pages touched before the first step */
    c->owned = mem;
    *out = c;
    return MHA_OK;
}

MHA_API mha_status mha_kv_cache_create_static(const mha_config *cfg, int n_blocks, int block_size, void *mem,
                                              size_t len, mha_kv_cache **out)
{
    mha_kv_cache layout;
    size_t total;
    mha_status st = begin(cfg, n_blocks, block_size, out, &layout, &total);
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

int mha_kv_cache_fits(const mha_kv_cache *c, const mha_dims *dm)
{
    return c->d == dm->d && c->h == dm->h && c->kvh == dm->kvh && c->dk == dm->dk && c->mla == dm->mla.kv_lora_rank &&
           !memcmp(&c->rope, &dm->rope, sizeof dm->rope) && c->type == dm->kv_type;
}
