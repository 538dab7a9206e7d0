/* test_arena.c — the plan that sizes and carves the workspace: regions aligned, disjoint,
 * inside the total, big enough for what the kernel writes; overflow detected. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "arena.h"
#include "config.h"
#include "gemm.h"
#include "helpers.h"
#include "kernel.h"

static mha_kernel K;

static void pick_kernel(void)
{
    kernel_auto(&K);
}

ParameterizedTestParameters(arena, regions_are_aligned_disjoint_and_inside)
{
    static mha_dims dims[] = {
        {.d = 512, .h = 8, .dk = 64, .qd = 512, .batch = 2, .seq_q = 10, .seq_kv = 10, .threads = 2, .q_block = 10, .kvh = 8, .group = 1},
        {.d = 96, .h = 6, .dk = 16, .qd = 96, .batch = 3, .seq_q = 37, .seq_kv = 90, .threads = 3, .q_block = 16, .kvh = 6, .group = 1},
        {.d = 40, .h = 4, .dk = 10, .qd = 40, .batch = 1, .seq_q = 300, .seq_kv = 7, .threads = 1, .q_block = 32, .kvh = 4, .group = 1},
        {.d = 1024, .h = 16, .dk = 64, .qd = 1024, .batch = 1, .seq_q = 8192, .seq_kv = 8192, .threads = 2, .q_block = 16, .kvh = 16, .group = 1},
        /* heads of head_dim, not d / h: Q and Z 160 wide in a 96-wide model */
        {.d = 96, .h = 4, .dk = 40, .qd = 160, .batch = 2, .seq_q = 33, .seq_kv = 70, .threads = 2, .q_block = 16, .kvh = 4, .group = 1},
    };
    return cr_make_param_array(mha_dims, dims, sizeof dims / sizeof dims[0]);
}


ParameterizedTest(mha_dims *dm, arena, regions_are_aligned_disjoint_and_inside, .init = pick_kernel)
{
    mha_arena_plan p;
    cr_assert_eq(mha_arena_plan_make(dm, &K, 1000, MHA_ARENA_ENGINE, &p), 0);
    size_t d = dm->d, dk = dm->dk, rows = dm->seq_q > dm->seq_kv ? dm->seq_q : dm->seq_kv;
    size_t w = (size_t)K.bw, dkp = mha_round_up(dk, w);
    cr_assert_eq((size_t)p.dkp, dkp);
    /* what the passes write, worked out here on their own */
    const size_t need[MHA_REGION_COUNT] = {
        [MHA_REGION_engine] = 1000,
        [MHA_REGION_wqkv] = (size_t)dm->h * d * 3 * dkp * sizeof(float),
        [MHA_REGION_bqkv] = (size_t)dm->h * 3 * dkp * sizeof(float),
        [MHA_REGION_wo] = (size_t)dm->qd * mha_round_up(d, w) * sizeof(float),
        [MHA_REGION_bo] = d * sizeof(float),
        [MHA_REGION_z] = (size_t)dm->batch * dm->seq_q * dm->qd * sizeof(float),
        [MHA_REGION_xpack] = (size_t)dm->batch * mha_gemm_packed_a_floats(&K, (size_t)dm->seq_q, d) * sizeof(float),
        [MHA_REGION_xdeps] = (size_t)dm->batch * (((size_t)dm->seq_q + MHA_PACK_BLOCK - 1) / MHA_PACK_BLOCK),
        [MHA_REGION_order] = (size_t)dm->batch * sizeof(int),
        [MHA_REGION_deps] = (size_t)dm->batch * dm->h,
        [MHA_REGION_worker_cpu] = (size_t)dm->threads * sizeof(int),
        [MHA_REGION_pin_cpu] = (size_t)dm->threads * sizeof(int),
        [MHA_REGION_step_row0] = ((size_t)dm->batch + 1) * sizeof(int),
        [MHA_REGION_scratch] = (size_t)dm->threads * p.scratch_stride,
    };
    for (int r = 0; r < MHA_REGION_COUNT; r++)
        cr_assert_geq(p.bytes[r], need[r], "region %s: %zu bytes, the passes write %zu", mha_arena_region_name(r),
                      p.bytes[r], need[r]);
    /* a worker slice: Q/K/V panels, Kᵀ panels, the score tile, A packing, the softmax state,
     * the decode scratch, on its own pages */
    cr_assert_eq(p.off[MHA_REGION_scratch] % MHA_PAGE, 0);
    cr_assert_eq(p.scratch_stride % MHA_PAGE, 0);
    const size_t slice_need[MHA_SLICE_COUNT] = {
        [MHA_SLICE_qkv] = rows * 3 * dkp * sizeof(float),
        [MHA_SLICE_kt] = dk * mha_round_up((size_t)dm->seq_kv, w) * sizeof(float),
        [MHA_SLICE_scores] = (size_t)dm->q_block * (size_t)p.ld_scores * sizeof(float),
        [MHA_SLICE_apack] = mha_gemm_apack_floats(&K) * sizeof(float),
        [MHA_SLICE_state] = mha_attention_state_floats((size_t)dm->q_block, dk) * sizeof(float),
        [MHA_SLICE_dec] = (size_t)dm->group * MHA_DECODE_MAX_NEW * (MHA_KV_CHUNK + dk) * sizeof(float),
    };
    cr_assert_geq(p.ld_scores, dm->seq_kv);
    size_t sum = 0;
    for (int r = 0; r < MHA_SLICE_COUNT; r++) {
        cr_assert_geq(p.slice_bytes[r], slice_need[r], "slice part %s", mha_slice_region_name(r));
        sum += p.slice_bytes[r];
    }
    /* and it never grows with seq_q × seq_kv */
    cr_assert_lt(p.scratch_stride, sum + MHA_SLICE_COUNT * MHA_ALIGN + MHA_PAGE);
}

/* Whether a plan of this kind and precision lays region r out. */
static int expected(mha_arena_kind kind, const mha_dims *dm, int r)
{
    const int mla = dm->mla.kv_lora_rank > 0;
    const int quant_weight = r == MHA_REGION_wqkvq || r == MHA_REGION_woq;
    const int f32_weight = r == MHA_REGION_wqkv || r == MHA_REGION_wo || r == MHA_REGION_mla_w;
    const int bf16_weight = r == MHA_REGION_wqkv16 || r == MHA_REGION_wo16 || r == MHA_REGION_mla_w16;
    if (quant_weight) /* block types in place of either precision's panels */
        return dm->quant && kind != MHA_ARENA_ENGINE_SHARED;
    if (dm->quant && (f32_weight || bf16_weight))
        return 0;
    const int mla_region = r == MHA_REGION_mla_w || r == MHA_REGION_mla_w16 || r == MHA_REGION_mla_v ||
                           r == MHA_REGION_mla_k || r == MHA_REGION_mla_z;
    if (r == MHA_REGION_engine)
        return 1;
    if (mla_region != mla && (mla_region || f32_weight || bf16_weight || r == MHA_REGION_bqkv || r == MHA_REGION_bo ||
                              r == MHA_REGION_xpack)) /* an MLA engine's weights and buffers in place of these */
        return 0;
    if (f32_weight || bf16_weight || r == MHA_REGION_bqkv || r == MHA_REGION_bo || r == MHA_REGION_mla_v)
        return kind != MHA_ARENA_ENGINE_SHARED && !(dm->bf16 ? f32_weight : bf16_weight);
    if (r == MHA_REGION_qk_norm)
        return kind != MHA_ARENA_ENGINE_SHARED && dm->qk_norm.kind != MHA_QK_NORM_NONE;
    if (r == MHA_REGION_sinks)
        return kind != MHA_ARENA_ENGINE_SHARED && dm->sinks;
    if (kind == MHA_ARENA_WEIGHTS)
        return 0;
    if (r == MHA_REGION_rope_cos || r == MHA_REGION_rope_sin)
        return dm->rope.style != MHA_ROPE_NONE;
    if (r == MHA_REGION_alibi)
        return dm->alibi_max_bias > 0.0f;
    if (r == MHA_REGION_qk_ss || r == MHA_REGION_k_saved)
        return dm->qk_norm.kind == MHA_QK_NORM_FULL;
    if (r == MHA_REGION_k_full || r == MHA_REGION_step_tails)
        return dm->kv_type == MHA_KV_INT8;
    return 1;
}

static void assert_laid_out(const char *what, size_t off, size_t bytes, size_t align, size_t total)
{
    cr_assert_gt(bytes, 0, "%s: present with 0 bytes", what);
    cr_assert_eq(off % align, 0, "%s at %zu is not %zu-aligned", what, off, align);
    cr_assert_leq(off + bytes, total, "%s ends at %zu, past %zu", what, off + bytes, total);
}

static void assert_disjoint(const char *what, const size_t *off, const size_t *bytes, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (off[i] != MHA_ARENA_ABSENT && off[j] != MHA_ARENA_ABSENT)
                cr_assert(off[i] >= off[j] + bytes[j] || off[j] >= off[i] + bytes[i], "%s %d and %d overlap", what, i, j);
}

/* Every region of every kind of plan, f32, bf16 and Q8_0 blocks (in bf16 on bf16 activations too), with and
 * without RoPE (and with it
 * QK-norm, per head or over the whole projection, and sinks; without it ALiBi): either laid out
 * (aligned, inside the total, disjoint, its view at its offset) or absent (0 bytes, a NULL
 * view), whatever the plan and the views held before (a weights plan once left its step and
 * decode regions unset, and mha_pack_weights built views from stack garbage: ASan cannot see
 * pointers never used); each worker's scratch views at its own slice's parts. */
Test(arena, every_region_of_every_kind_is_defined, .init = pick_kernel)
{
    const mha_arena_kind kinds[] = {MHA_ARENA_ENGINE, MHA_ARENA_ENGINE_SHARED, MHA_ARENA_WEIGHTS};
    for (int cq = 0; cq < 48; cq++) {
        const int c = cq < 36 ? cq : cq - 36; /* 36..47: cases 0..11 holding Q8_0 blocks */
        mha_dims dm = {.d = 96, .h = 6, .dk = 16, .dv = 16, .qd = 96, .batch = 3, .seq_q = 37, .seq_kv = 290, .threads = 3,
                       .q_block = 16, .kvh = 3, .group = 2, .bf16 = c % 2, .positions = 290, .quant = cq >= 36};
        for (int i = 0; dm.quant && i < MHA_W_COUNT; i++)
            dm.wtype[i] = MHA_WEIGHT_Q8_0;
        if (dm.quant && dm.bf16 && c / 2 % 2) /* the bf16 products' rooms */
            dm.acts = MHA_ACTIVATIONS_BF16;
        if (c >= 24) { /* MLA: one KV head of latent 16 + rope 4, V the latent */
            dm.mla = (mha_mla){.kv_lora_rank = 16, .q_lora_rank = c % 4 < 2 ? 24 : 0, .qk_nope_head_dim = 8,
                               .qk_rope_head_dim = 4, .v_head_dim = 6, .eps = 1e-6f};
            dm.dk = 20, dm.dv = 16, dm.qd = 120, dm.kvh = 1, dm.group = 6, dm.bias = c / 2 % 2;
            dm.rope = (mha_rope){.style = MHA_ROPE_GPTJ, .rotary_dim = 4, .theta = 10000.0f};
        } else if (c / 2 % 2) {
            dm.rope = (mha_rope){.style = MHA_ROPE_NEOX, .rotary_dim = 16, .theta = 10000.0f};
            dm.qk_norm = (mha_qk_norm){.kind = c < 12 ? MHA_QK_NORM_HEAD : MHA_QK_NORM_FULL, .eps = 1e-6f}, dm.sinks = 1;
            dm.kv_type = MHA_KV_INT8;
        } else {
            dm.alibi_max_bias = 8.0f;
        }
        const mha_arena_kind kind = kinds[c / 4 % 3];
        mha_arena_plan p;
        memset(&p, 0x5A, sizeof p);
        cr_assert_eq(mha_arena_plan_make(&dm, &K, 1000, kind, &p), 0);
        unsigned char *base = aligned_alloc(MHA_PAGE, mha_round_up(p.total, MHA_PAGE));
        cr_assert_not_null(base);
        mha_arena_views v;
        memset(&v, 0x5A, sizeof v);
        mha_arena_carve(&p, base, &v);
        const void *view[MHA_REGION_COUNT] = {
#define VIEW(name, type, align, held) [MHA_REGION_##name] = v.name,
            MHA_ARENA_REGIONS(VIEW)
#undef VIEW
        };
        for (int r = 0; r < MHA_REGION_COUNT; r++) {
            char what[96];
            snprintf(what, sizeof what, "case %d (kind %d, bf16 %d, rope %d): region %s", cq, (int)kind, dm.bf16,
                     dm.rope.style != MHA_ROPE_NONE, mha_arena_region_name(r));
            if (!expected(kind, &dm, r)) {
                cr_assert_eq(p.off[r], MHA_ARENA_ABSENT, "%s: laid out at %zu", what, p.off[r]);
                cr_assert_eq(p.bytes[r], 0, "%s: absent with %zu bytes", what, p.bytes[r]);
                cr_assert_null(view[r], "%s: absent but its view is %p", what, view[r]);
                continue;
            }
            assert_laid_out(what, p.off[r], p.bytes[r], mha_arena_region_align(r), p.total);
            cr_assert_eq(view[r], base + p.off[r], "%s: view %p, offset %zu", what, view[r], p.off[r]);
        }
        assert_disjoint("regions", p.off, p.bytes, MHA_REGION_COUNT);
        if (kind == MHA_ARENA_WEIGHTS) {
            free(base);
            continue;
        }
        for (int r = 0; r < MHA_SLICE_COUNT; r++) {
            const int bf16_only = r == MHA_SLICE_v16 || r == MHA_SLICE_p16 || r == MHA_SLICE_q16;
            if ((bf16_only && !dm.bf16) || (r == MHA_SLICE_kvs && !(dm.bf16 && dm.kv_type == MHA_KV_INT8)) ||
                (r == MHA_SLICE_k8 && dm.kv_type != MHA_KV_INT8) || (r == MHA_SLICE_mla && !dm.mla.kv_lora_rank) ||
                (r == MHA_SLICE_wq16 && dm.acts != MHA_ACTIVATIONS_BF16)) {
                cr_assert_eq(p.slice_off[r], MHA_ARENA_ABSENT, "case %d: slice has %s", cq, mha_slice_region_name(r));
                continue;
            }
            assert_laid_out(mha_slice_region_name(r), p.slice_off[r], p.slice_bytes[r], MHA_ALIGN, p.scratch_stride);
        }
        assert_disjoint("slice parts", p.slice_off, p.slice_bytes, MHA_SLICE_COUNT);
        const size_t *o = p.slice_off;
        for (int t = 0; t < dm.threads; t++) {
            const unsigned char *slice = v.scratch + (size_t)t * p.scratch_stride;
            const mha_scratch s = mha_arena_slice(&p, v.scratch, t);
            cr_assert_eq((const void *)s.qkv, slice + o[MHA_SLICE_qkv]);
            cr_assert_eq((const void *)s.kt, slice + o[MHA_SLICE_kt]);
            cr_assert_eq((const void *)s.kt16, slice + o[MHA_SLICE_kt]);
            cr_assert_eq((const void *)s.scores, slice + o[MHA_SLICE_scores]);
            cr_assert_eq((const void *)s.apack, slice + o[MHA_SLICE_apack]);
            cr_assert_eq((const void *)s.apack16, slice + o[MHA_SLICE_apack]);
            cr_assert_eq((const void *)s.state, slice + o[MHA_SLICE_state]);
            cr_assert_eq((const void *)s.dec, slice + o[MHA_SLICE_dec]);
            cr_assert_eq((const void *)s.v16, dm.bf16 ? slice + o[MHA_SLICE_v16] : NULL);
            cr_assert_eq((const void *)s.p16, dm.bf16 ? slice + o[MHA_SLICE_p16] : NULL);
            cr_assert_eq((const void *)s.q16, dm.bf16 ? slice + o[MHA_SLICE_q16] : NULL);
            cr_assert_eq((const void *)s.wq16, dm.acts == MHA_ACTIVATIONS_BF16 ? slice + o[MHA_SLICE_wq16] : NULL);
        }
        free(base);
    }
}

Test(arena, overflowing_sizes_are_detected, .init = pick_kernel)
{
    /* Z alone: 2^24 × 2^20 × 2^20 floats */
    mha_dims dm = {.d = 1 << 20, .h = 1, .dk = 1 << 20, .qd = 1 << 20, .batch = 1 << 24, .seq_q = 1 << 20, .seq_kv = 1 << 20,
                   .threads = 2, .q_block = 256};
    mha_arena_plan p;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), -1);
    /* small weights and Z, but a worker slice: INT_MAX² score floats and INT_MAX Q/K/V rows */
    dm = (mha_dims){.d = 64, .h = 4, .dk = 16, .qd = 64, .batch = 1, .seq_q = 1, .seq_kv = INT_MAX, .threads = 1, .q_block = INT_MAX};
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), -1);
    /* and the sum over workers: each slice fits, 2^40 of them do not */
    dm = (mha_dims){.d = 64, .h = 4, .dk = 16, .qd = 64, .batch = 1, .seq_q = 1, .seq_kv = 1 << 20, .threads = 1, .q_block = 1 << 10};
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), 0);
    dm.threads = INT_MAX;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), 0, "2^31 slices of 4 GiB: 2^63 bytes, still fits");
    dm.seq_kv = 1 << 22;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), -1, "2^31 slices of 16 GiB: 2^65 bytes");
}

/* A shared engine reads every region the packed weights hold from the block, and nothing
 * else: by the region list's holder column (a weight region added to the list is shared
 * without another line), checked against the plans of both kinds. */
Test(arena, a_shared_engine_takes_every_weight_view_of_the_block, .init = pick_kernel)
{
    for (int bf16 = 0; bf16 < 2; bf16++) {
        mha_dims dm = {.d = 96, .h = 6, .dk = 16, .qd = 96, .batch = 2, .seq_q = 20, .seq_kv = 20, .threads = 2, .q_block = 16,
                       .kvh = 3, .group = 2, .bf16 = bf16, .positions = 20, .sinks = 1,
                       .qk_norm = {.kind = MHA_QK_NORM_HEAD, .eps = 1e-6f}};
        mha_arena_plan weights, shared;
        cr_assert_eq(mha_arena_plan_make(&dm, &K, 64, MHA_ARENA_WEIGHTS, &weights), 0);
        cr_assert_eq(mha_arena_plan_make(&dm, &K, 1000, MHA_ARENA_ENGINE_SHARED, &shared), 0);
        unsigned char *block = aligned_alloc(MHA_PAGE, mha_round_up(weights.total, MHA_PAGE));
        unsigned char *engine = aligned_alloc(MHA_PAGE, mha_round_up(shared.total, MHA_PAGE));
        mha_arena_views packed, v;
        mha_arena_carve(&weights, block, &packed);
        mha_arena_carve(&shared, engine, &v);
        mha_arena_views before = v;
        mha_arena_share_weights(&v, &packed);
        const void *got[MHA_REGION_COUNT] = {
#define VIEW(name, type, align, held) [MHA_REGION_##name] = v.name,
            MHA_ARENA_REGIONS(VIEW)
#undef VIEW
        };
        const void *was[MHA_REGION_COUNT] = {
#define VIEW(name, type, align, held) [MHA_REGION_##name] = before.name,
            MHA_ARENA_REGIONS(VIEW)
#undef VIEW
        };
        const void *in_block[MHA_REGION_COUNT] = {
#define VIEW(name, type, align, held) [MHA_REGION_##name] = packed.name,
            MHA_ARENA_REGIONS(VIEW)
#undef VIEW
        };
        int shared_views = 0;
        for (int r = 0; r < MHA_REGION_COUNT; r++) {
            const int weight = r != MHA_REGION_engine && mha_arena_kind_holds(MHA_ARENA_WEIGHTS, r);
            cr_assert_eq(weight, !mha_arena_kind_holds(MHA_ARENA_ENGINE_SHARED, r) && r != MHA_REGION_engine,
                         "region %s: held by both or neither", mha_arena_region_name(r));
            if (weight) {
                cr_assert_eq(got[r], in_block[r], "bf16 %d: region %s not taken from the block", bf16,
                             mha_arena_region_name(r));
                shared_views += got[r] != NULL;
            } else
                cr_assert_eq(got[r], was[r], "bf16 %d: region %s changed", bf16, mha_arena_region_name(r));
        }
        cr_assert_eq(shared_views, 6, "bf16 %d: Wqkv, bqkv, Wo, bo, the QK-norm factors and the sinks: %d", bf16,
                     shared_views);
        free(block), free(engine);
    }
}
