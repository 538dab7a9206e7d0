/* test_arena.c — the plan that sizes and carves the workspace: regions aligned, disjoint,
 * inside the total, big enough for what the kernel writes; overflow detected. */
#include <limits.h>
#include <stdint.h>
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

typedef struct region { size_t off, bytes; } region;

ParameterizedTestParameters(arena, regions_are_aligned_disjoint_and_inside)
{
    static mha_dims dims[] = {
        {.d = 512, .h = 8, .dk = 64, .batch = 2, .seq_q = 10, .seq_kv = 10, .threads = 2, .q_block = 10, .kvh = 8, .group = 1},
        {.d = 96, .h = 6, .dk = 16, .batch = 3, .seq_q = 37, .seq_kv = 90, .threads = 3, .q_block = 16, .kvh = 6, .group = 1},
        {.d = 40, .h = 4, .dk = 10, .batch = 1, .seq_q = 300, .seq_kv = 7, .threads = 1, .q_block = 32, .kvh = 4, .group = 1},
        {.d = 1024, .h = 16, .dk = 64, .batch = 1, .seq_q = 8192, .seq_kv = 8192, .threads = 2, .q_block = 16, .kvh = 16, .group = 1},
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
    region r[] = {
        {p.engine, 1000},
        {p.wqkv, (size_t)dm->h * d * 3 * dkp * sizeof(float)},
        {p.bqkv, (size_t)dm->h * 3 * dkp * sizeof(float)},
        {p.wo, d * mha_round_up(d, w) * sizeof(float)},
        {p.bo, d * sizeof(float)},
        {p.z, (size_t)dm->batch * dm->seq_q * d * sizeof(float)},
        {p.xpack, (size_t)dm->batch * mha_gemm_packed_a_floats(&K, (size_t)dm->seq_q, d) * sizeof(float)},
        {p.xdeps, (size_t)dm->batch * (((size_t)dm->seq_q + MHA_PACK_BLOCK - 1) / MHA_PACK_BLOCK)},
        {p.order, (size_t)dm->batch * sizeof(int)},
        {p.deps, (size_t)dm->batch * dm->h},
        {p.worker_cpu, (size_t)dm->threads * sizeof(int)},
        {p.pin_cpu, (size_t)dm->threads * sizeof(int)},
        {p.scratch, (size_t)dm->threads * p.scratch_stride},
    };
    size_t n = sizeof r / sizeof r[0];
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(r[i].off % MHA_ALIGN, 0, "region %zu at %zu is not aligned", i, r[i].off);
        cr_assert_leq(r[i].off + r[i].bytes, p.total, "region %zu ends past the total", i);
        for (size_t j = 0; j < i; j++)
            cr_assert(r[i].off >= r[j].off + r[j].bytes || r[j].off >= r[i].off + r[i].bytes,
                      "regions %zu and %zu overlap", i, j);
    }
    /* a worker slice: Q/K/V panels, Kᵀ panels, the score tile, A packing, row sums, the decode
     * scratch, on its own pages */
    cr_assert_eq(p.scratch % MHA_PAGE, 0);
    cr_assert_eq(p.scratch_stride % MHA_PAGE, 0);
    size_t kvp = mha_round_up((size_t)dm->seq_kv, w);
    region slice[] = {
        {0, rows * 3 * dkp * sizeof(float)},
        {p.kt, dk * kvp * sizeof(float)},
        {p.scores, (size_t)dm->q_block * (size_t)p.ld_scores * sizeof(float)},
        {p.apack, mha_gemm_apack_floats(&K) * sizeof(float)},
        {p.inv, mha_attention_state_floats((size_t)dm->q_block, (size_t)dk) * sizeof(float)},
        {p.dec, (size_t)dm->group * MHA_DECODE_ROWS * (MHA_KV_CHUNK + dk) * sizeof(float)},
    };
    cr_assert_geq(p.ld_scores, dm->seq_kv);
    for (size_t i = 0; i < 6; i++) {
        cr_assert_eq(slice[i].off % MHA_ALIGN, 0);
        cr_assert_leq(slice[i].off + slice[i].bytes, p.scratch_stride, "slice part %zu ends past the slice", i);
        for (size_t j = 0; j < i; j++)
            cr_assert(slice[i].off >= slice[j].off + slice[j].bytes, "slice parts %zu and %zu overlap", i, j);
    }
    /* and it never grows with seq_q × seq_kv */
    size_t sum = 0;
    for (size_t i = 0; i < 6; i++)
        sum += slice[i].bytes;
    cr_assert_lt(p.scratch_stride, sum + 7 * MHA_ALIGN + MHA_PAGE);
}

Test(arena, carve_follows_the_plan, .init = pick_kernel)
{
    mha_dims dm = {.d = 64, .h = 4, .dk = 16, .batch = 2, .seq_q = 9, .seq_kv = 9, .threads = 2, .q_block = 9};
    mha_arena_plan p;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), 0);
    static _Alignas(4096) unsigned char ws[8 << 20];
    cr_assert_leq(p.total, sizeof ws);
    mha_arena_views v;
    mha_arena_carve(&p, ws, &v);
    cr_assert_eq((unsigned char *)v.wqkv, ws + p.wqkv);
    cr_assert_eq((unsigned char *)v.z, ws + p.z);
    cr_assert_eq((unsigned char *)v.pin_cpu, ws + p.pin_cpu);
    cr_assert_eq(v.scratch, ws + p.scratch);
}

Test(arena, overflowing_sizes_are_detected, .init = pick_kernel)
{
    /* Z alone: 2^24 × 2^20 × 2^20 floats */
    mha_dims dm = {.d = 1 << 20, .h = 1, .dk = 1 << 20, .batch = 1 << 24, .seq_q = 1 << 20, .seq_kv = 1 << 20,
                   .threads = 2, .q_block = 256};
    mha_arena_plan p;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), -1);
    /* small weights and Z, but a worker slice: INT_MAX² score floats and INT_MAX Q/K/V rows */
    dm = (mha_dims){.d = 64, .h = 4, .dk = 16, .batch = 1, .seq_q = 1, .seq_kv = INT_MAX, .threads = 1, .q_block = INT_MAX};
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), -1);
    /* and the sum over workers: each slice fits, 2^40 of them do not */
    dm = (mha_dims){.d = 64, .h = 4, .dk = 16, .batch = 1, .seq_q = 1, .seq_kv = 1 << 20, .threads = 1, .q_block = 1 << 10};
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), 0);
    dm.threads = INT_MAX;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), 0, "2^31 slices of 4 GiB: 2^63 bytes, still fits");
    dm.seq_kv = 1 << 22;
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 256, MHA_ARENA_ENGINE, &p), -1, "2^31 slices of 16 GiB: 2^65 bytes");
}

/* A packed-weights plan lays out the weights and nothing else: every other view carves as NULL,
 * whatever the plan struct held before (its step and decode regions were once left unset, and
 * mha_pack_weights built views from stack garbage; ASan cannot see pointers never used). */
Test(arena, a_weights_plan_defines_every_region, .init = pick_kernel)
{
    mha_dims dm = {.d = 96, .h = 6, .dk = 16, .batch = 3, .seq_q = 37, .seq_kv = 90, .threads = 3, .q_block = 16,
                   .kvh = 6, .group = 1};
    mha_arena_plan p;
    memset(&p, 0x5A, sizeof p);
    cr_assert_eq(mha_arena_plan_make(&dm, &K, 1000, MHA_ARENA_WEIGHTS, &p), 0);
    unsigned char *base = aligned_alloc(MHA_ALIGN, mha_round_up(p.total, MHA_ALIGN));
    mha_arena_views v;
    memset(&v, 0x5A, sizeof v);
    mha_arena_carve(&p, base, &v);
    cr_assert(v.engine && v.wqkv && v.bqkv && v.wo && v.bo, "the weights' regions are laid out");
    const void *none[] = {v.z, v.xpack, v.order, v.deps, v.xdeps, v.worker_cpu, v.pin_cpu, v.rope_cos, v.rope_sin,
                          v.step_row0, v.partial, v.scratch};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        cr_assert_null(none[i], "view %zu of a weights plan points at %p", i, none[i]);
    free(base);
}
