/* arena.c — sizing and carving share this one plan, so they can never disagree. */
#include "arena.h"

#include "qgemm.h"

#include <stdint.h>

#include "kvcache.h"

/* Reserve count × elem bytes at the cursor, aligned; flags overflow instead of wrapping. */
static size_t take(size_t *cursor, size_t count, size_t elem, size_t align, int *overflow)
{
    size_t bytes, start, end;
    if (__builtin_mul_overflow(count, elem, &bytes) ||
        __builtin_add_overflow(*cursor, align - 1, &start)) {
        *overflow = 1;
        return 0;
    }
    start &= ~(align - 1);
    if (__builtin_add_overflow(start, bytes, &end)) {
        *overflow = 1;
        return 0;
    }
    *cursor = end;
    return start;
}

static size_t product(size_t a, size_t b, size_t c, int *overflow)
{
    size_t ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) {
        *overflow = 1;
        return 0;
    }
    return abc;
}

/* Every region's size in bytes, the one place they are written: the slice's parts into
 * slice[], the arena's into bytes[] (the worker slices last, once their stride is known).
 * A region the kind or the precision leaves out gets 0. */
static void region_bytes(const mha_dims *dims, const mha_kernel *k, size_t engine_bytes, mha_arena_kind kind,
                         mha_arena_plan *p, int *of)
{
    size_t *b = p->bytes, *sl = p->slice_bytes;
    const size_t d = (size_t)dims->d, h = (size_t)dims->h, dk = (size_t)dims->dk, qd = (size_t)dims->qd;
    const size_t batch = (size_t)dims->batch, threads = (size_t)dims->threads, kvh = (size_t)dims->kvh;
    const size_t seq_q = (size_t)dims->seq_q, seq_kv = (size_t)dims->seq_kv;
    const size_t rows = seq_q > seq_kv ? seq_q : seq_kv;
    const size_t dkp = (size_t)p->dkp, w = (size_t)k->bw, f = sizeof(float);
    const int bf16 = dims->bf16, scaled = mha_kv_traits_of(dims->kv_type)->scaled;
    for (int r = 0; r < MHA_REGION_COUNT; r++)
        b[r] = 0;
    for (int r = 0; r < MHA_SLICE_COUNT; r++)
        sl[r] = 0;

    b[MHA_REGION_engine] = engine_bytes;
    const size_t per_group = (size_t)dims->group + 2;
    const mha_mla_plan *mla = &p->mla;
    if (mla->on) { /* its own weights (mla.h) in place of Wqkv and Wo; its K and latent outputs */
        b[bf16 ? MHA_REGION_mla_w16 : MHA_REGION_mla_w] = product(mla->weights, bf16 ? sizeof(mha_bf16) : f, 1, of);
        b[MHA_REGION_mla_v] = mla->vectors * f;
        b[MHA_REGION_mla_k] = product(batch, seq_kv, dk * f, of);
        b[MHA_REGION_mla_z] = product(product(batch, seq_q, h, of), (size_t)dims->dv, f, of);
    } else if (dims->quant) { /* panels of MHA_QP outputs, the blocks' bytes */
        const mha_qmat qkv = mha_qmat_qkv(dims, p->dkp, NULL), o = mha_qmat_o(dims, NULL);
        b[MHA_REGION_wqkvq] = product(kvh, mha_qmat_head_bytes(&qkv), 1, of);
        b[MHA_REGION_woq] = mha_qmat_head_bytes(&o);
    } else if (bf16) { /* k of the weights padded to whole tiles; Wo's columns to whole panels */
        b[MHA_REGION_wqkv16] = product(kvh, mha_bk_kp(dims->d), per_group * dkp * sizeof(mha_bf16), of);
        b[MHA_REGION_wo16] = product(mha_bk_kp(dims->qd), mha_round_up(d, MHA_BT_N), sizeof(mha_bf16), of);
    } else {
        b[MHA_REGION_wqkv] = product(kvh, d, per_group * dkp * f, of);
        b[MHA_REGION_wo] = product(qd, mha_round_up(d, w), f, of);
    }
    if (!mla->on) {
        b[MHA_REGION_bqkv] = product(kvh, per_group, dkp * f, of);
        b[MHA_REGION_bo] = d * f;
        b[MHA_REGION_xpack] = product(batch, p->xpack_stride, f, of);
    }
    b[MHA_REGION_qk_norm] = (size_t)(mha_qk_norm_len(dims->qk_norm.kind, dims->h, dims->dk) +
                                     mha_qk_norm_len(dims->qk_norm.kind, dims->kvh, dims->dk)) * f;
    if (dims->sinks)
        b[MHA_REGION_sinks] = h * f;

    b[MHA_REGION_z] = product(batch, seq_q, qd * f, of); /* MLA: Q_abs */
    b[MHA_REGION_order] = batch * sizeof(int);
    b[MHA_REGION_deps] = product(batch, 2 * h, 1, of);
    b[MHA_REGION_xdeps] = product(batch, (seq_q + MHA_PACK_BLOCK - 1) / MHA_PACK_BLOCK, 1, of);
    b[MHA_REGION_worker_cpu] = threads * sizeof(int);
    b[MHA_REGION_pin_cpu] = threads * sizeof(int);
    b[MHA_REGION_step_row0] = (batch + 1) * sizeof(int);
    const size_t chunks = (seq_kv + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK;
    const size_t dec_q = (size_t)dims->group * MHA_DECODE_MAX_NEW; /* queries of one decode task */
    b[MHA_REGION_partial] = product(product(batch, kvh, chunks, of), mha_step_partial_floats(dims->group, dims->dk), f, of);
    if (dims->qk_norm.kind == MHA_QK_NORM_FULL) {
        b[MHA_REGION_qk_ss] = product(product(batch, seq_q + rows, kvh, of), sizeof(double), 1, of);
        b[MHA_REGION_k_saved] = product(product(batch, rows, kvh, of), dk, f, of);
    }
    if (mha_kv_traits_of(dims->kv_type)->scaled) {
        b[MHA_REGION_k_full] = product(product(batch, seq_q, kvh, of), dk, f, of);
        b[MHA_REGION_step_tails] = batch * sizeof(float *);
    }
    if (dims->rope.style != MHA_ROPE_NONE) {
        b[MHA_REGION_rope_cos] = product((size_t)dims->positions, (size_t)dims->rope.rotary_dim / 2, f, of);
        b[MHA_REGION_rope_sin] = b[MHA_REGION_rope_cos];
    }
    if (dims->alibi_max_bias > 0.0f)
        b[MHA_REGION_alibi] = h * f;

    sl[MHA_SLICE_qkv] = product(rows, 3, dkp * f, of);
    /* Kᵀ in the microkernel's panels of w keys, or the decode tiles' of MHA_TILE_KEYS (the
     * core's few queries) */
    sl[MHA_SLICE_kt] = product(dk, mha_round_up(seq_kv, w > MHA_TILE_KEYS ? w : MHA_TILE_KEYS), f, of);
    sl[MHA_SLICE_scores] = product((size_t)dims->q_block, (size_t)p->ld_scores, f, of);
    sl[MHA_SLICE_apack] = mha_gemm_apack_floats(k) * f;
    if (dims->acts == MHA_ACTIVATIONS_INT16) { /* Wo's rows quantized a block at a time (mha_qgemm16) */
        const size_t room = product(MHA_QROWS, mha_a16_row_bytes(dims->qd > dims->d ? dims->qd : dims->d), 1, of);
        sl[MHA_SLICE_apack] = sl[MHA_SLICE_apack] > room ? sl[MHA_SLICE_apack] : room;
    }
    if (bf16) {
        /* Kᵀ (dk, seq_kv) in B panels; A packing for the deepest product: d (the projections),
         * qd (the output's), or a whole key row */
        const size_t kt16 = product(mha_bk_b_elems(dims->dk, dims->seq_kv), sizeof(mha_bf16), 1, of);
        int deepest = dims->d > dims->qd ? dims->d : dims->qd;
        if (mla->on) /* o_proj's h·v, q_b_proj's q_lora */
            deepest = mha_mla_deepest(dims, deepest);
        const size_t ap16 = product(mha_bgemm_apack_elems(deepest > dims->seq_kv ? deepest : dims->seq_kv),
                                    sizeof(mha_bf16), 1, of);
        sl[MHA_SLICE_kt] = sl[MHA_SLICE_kt] > kt16 ? sl[MHA_SLICE_kt] : kt16;
        sl[MHA_SLICE_apack] = sl[MHA_SLICE_apack] > ap16 ? sl[MHA_SLICE_apack] : ap16;
        if (dims->acts == MHA_ACTIVATIONS_BF16) { /* mha_qgemm_bf16's rooms, for Wqkv (d) and Wo (qd) */
            const size_t apq = product(mha_qbf16_apack_elems(deepest), sizeof(mha_bf16), 1, of);
            const size_t wd = mha_qbf16_wpack_elems(k, dims->d), wo = mha_qbf16_wpack_elems(k, dims->qd);
            sl[MHA_SLICE_apack] = sl[MHA_SLICE_apack] > apq ? sl[MHA_SLICE_apack] : apq;
            sl[MHA_SLICE_wq16] = product(wd > wo ? wd : wo, sizeof(mha_bf16), 1, of);
        }
        /* V (seq_kv, dk) in B panels; a key chunk may start 16 rows into a k tile and read a
         * tile past its end (those rows meet zero probabilities): one tile of room */
        sl[MHA_SLICE_v16] = product(mha_bk_b_elems(dims->seq_kv + MHA_BT_K, dims->dk), sizeof(mha_bf16), 1, of);
        /* the probabilities of 32 query rows against one chunk of keys, rounded to bf16 in A
         * panels as each row is exp'd (the A·V product reads them packed: chunk16), and the
         * queries of a query block or of the core's few queries of a group (the larger) in A
         * panels, packed once for all their chunks, or as float rows (bf16 on the float32
         * stream: a chunk's queries rounded) */
        const size_t kv = mha_round_up(seq_kv, w), chunk = kv < MHA_KV_CHUNK ? kv : MHA_KV_CHUNK;
        const size_t q_rows = dims->q_block > (int)dec_q ? (size_t)dims->q_block : dec_q;
        const size_t q16 = product(mha_bk_a_elems((int)q_rows, dims->dk), sizeof(mha_bf16), 1, of);
        const size_t qf = product(q_rows, dk, f, of);
        sl[MHA_SLICE_p16] = product(mha_bk_a_elems(2 * MHA_BT_M, (int)chunk), sizeof(mha_bf16), 1, of);
        sl[MHA_SLICE_q16] = q16 > qf ? q16 : qf;
    }
    sl[MHA_SLICE_state] = product(mha_attention_state_floats((size_t)dims->q_block, dk), f, 1, of);
    sl[MHA_SLICE_dec] = product(dec_q, MHA_KV_CHUNK + 2 * dk + 3, f, of);
    if (bf16 && scaled) /* V's parameters beside its int8 values in the panels */
        sl[MHA_SLICE_kvs] = product(2, seq_kv, f, of);
    sl[MHA_SLICE_mla] = mla->scratch * f;
    if (scaled) { /* a group's view (k_view) or its integer scores and a chunk's queries (mha_int8_keys) */
        const size_t view = product(MHA_KV_GROUP + 2 + (MHA_KV_GROUP + 3) / 4, dk, f, of);
        const size_t ints = product(mha_int8_keys_room(dims->dk) + (size_t)MHA_INT8_ROWS * dk, f, 1, of);
        sl[MHA_SLICE_k8] = view > ints ? view : ints;
    }

    size_t slice = 0;
    for (int r = 0; r < MHA_SLICE_COUNT; r++)
        p->slice_off[r] = sl[r] ? take(&slice, sl[r], 1, MHA_ALIGN, of) : MHA_ARENA_ABSENT;
    p->scratch_stride = take(&slice, 0, 1, MHA_PAGE, of); /* the slice rounded up to a page */
    b[MHA_REGION_scratch] = product(threads, p->scratch_stride, 1, of);
    for (int r = 0; r < MHA_REGION_COUNT; r++) /* the regions another arena holds */
        if (!mha_arena_kind_holds(kind, (mha_arena_region)r))
            b[r] = 0;
}

static const struct {
    const char *name;
    size_t align;
    int held;
} regions[MHA_REGION_COUNT] = {
#define MHA_ARENA_INFO(name, type, align, held) [MHA_REGION_##name] = {#name, align, MHA_HELD_##held},
    MHA_ARENA_REGIONS(MHA_ARENA_INFO)
#undef MHA_ARENA_INFO
};

static size_t lcm(size_t a, size_t b)
{
    size_t x = a, y = b;
    while (y) { /* Euclid: x becomes gcd(a, b) */
        const size_t t = x % y;
        x = y, y = t;
    }
    return a / x * b;
}

int mha_arena_plan_make(const mha_dims *dims, const mha_kernel *k, size_t engine_bytes, mha_arena_kind kind,
                        mha_arena_plan *p)
{
    int of = 0;
    /* bf16 engines have bw a multiple of 16 (engine.c checks): head columns (multiples of
     * dkp) start on whole bf16 B panels too */
    const size_t w = (size_t)k->bw;
    p->dkp = (int)mha_round_up((size_t)dims->dk, dims->quant ? lcm(w, MHA_QP) : w); /* whole panels of either */
    p->ld_scores = (ptrdiff_t)mha_round_up((size_t)dims->seq_kv, 16);
    p->xpack_stride = mha_gemm_packed_a_floats(k, (size_t)dims->seq_q, (size_t)dims->d); /* seq_q, d <= 2^20, 2^16 */
    if (dims->acts == MHA_ACTIVATIONS_INT16) /* int16 rows (qgemm.h), in floats' room */
        p->xpack_stride = (product((size_t)dims->seq_q, mha_a16_row_bytes(dims->d), 1, &of) + 3) / 4;
    else if (dims->quant && dims->acts == MHA_ACTIVATIONS_F32) /* nothing packed: the products read A in place */
        p->xpack_stride = 1;
    else if (dims->bf16) /* bf16 A panels, in floats' room */
        p->xpack_stride = (product(mha_round_up((size_t)dims->seq_q, MHA_BT_M), mha_bk_kp(dims->d), 1, &of) + 1) / 2;
    mha_mla_plan_make(dims, k->bw, &p->mla);
    p->scratch_stride = 0;
    for (int r = 0; r < MHA_SLICE_COUNT; r++)
        p->slice_off[r] = MHA_ARENA_ABSENT;
    region_bytes(dims, k, engine_bytes, kind, p, &of);
    size_t cur = 0;
    for (int r = 0; r < MHA_REGION_COUNT; r++)
        p->off[r] = p->bytes[r] ? take(&cur, p->bytes[r], 1, regions[r].align, &of) : MHA_ARENA_ABSENT;
    p->total = cur;
    return of ? -1 : 0;
}

static void *at(unsigned char *base, size_t offset)
{
    return offset == MHA_ARENA_ABSENT ? NULL : base + offset;
}

void mha_arena_carve(const mha_arena_plan *p, void *base, mha_arena_views *v)
{
#define MHA_ARENA_CARVE(name, type, align, held) v->name = at(base, p->off[MHA_REGION_##name]);
    MHA_ARENA_REGIONS(MHA_ARENA_CARVE)
#undef MHA_ARENA_CARVE
}

void mha_arena_share_weights(mha_arena_views *v, const mha_arena_views *packed)
{
#define MHA_ARENA_SHARE(name, type, align, held)                                                                       \
    if (MHA_HELD_##held == MHA_HELD_WEIGHTS)                                                                           \
        v->name = packed->name;
    MHA_ARENA_REGIONS(MHA_ARENA_SHARE)
#undef MHA_ARENA_SHARE
}

int mha_arena_kind_holds(mha_arena_kind kind, mha_arena_region r)
{
    const int held = regions[r].held;
    return kind == MHA_ARENA_ENGINE ? 1 : kind == MHA_ARENA_WEIGHTS ? (held & MHA_HELD_WEIGHTS) != 0
                                                                     : (held & MHA_HELD_ENGINE) != 0;
}

mha_scratch mha_arena_slice(const mha_arena_plan *p, unsigned char *scratch, int t)
{
    unsigned char *slice = scratch + (size_t)t * p->scratch_stride;
    const size_t *o = p->slice_off;
    mha_scratch s;
#define MHA_SLICE_CARVE(name, type) s.name = at(slice, o[MHA_SLICE_##name]);
    MHA_SLICE_REGIONS(MHA_SLICE_CARVE)
#undef MHA_SLICE_CARVE
    /* the f32 and bf16 forms of Kᵀ and of A packing share their part */
    s.kt16 = at(slice, o[MHA_SLICE_kt]), s.apack16 = at(slice, o[MHA_SLICE_apack]);
    return s;
}

const char *mha_arena_region_name(mha_arena_region r)
{
    return (unsigned)r < MHA_REGION_COUNT ? regions[r].name : "?";
}

size_t mha_arena_region_align(mha_arena_region r)
{
    return (unsigned)r < MHA_REGION_COUNT ? regions[r].align : MHA_ALIGN;
}

const char *mha_slice_region_name(mha_slice_region r)
{
    static const char *const names[MHA_SLICE_COUNT] = {
#define MHA_SLICE_NAME(name, type) [MHA_SLICE_##name] = #name,
        MHA_SLICE_REGIONS(MHA_SLICE_NAME)
#undef MHA_SLICE_NAME
    };
    return (unsigned)r < MHA_SLICE_COUNT ? names[r] : "?";
}
