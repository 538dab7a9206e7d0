/* test_kv_blocks.c — the KV cache's block operations for servers, on every kv type: a fork
 * (mha_kv_cache_copy_blocks of the last, partly written block, the full ones shared) lets parent
 * and child continue bit for bit as each would alone; a sequence swapped out, its blocks reused
 * by another, and swapped back into other blocks continues bit for bit as if it had never
 * left; the int8 cache's open groups are the cache's own (found by block and positions, a
 * mismatched step refused); every refusal changes nothing. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

enum { D = 64, H = 8, KVH = 2, S = 40, PREFIX = 21, BS = 8, MAX_BLOCKS = (S + BS - 1) / BS, N_BLOCKS = 16 };

/* The kinds of cache every property holds for: the precision and the cache's elements. */
static const struct kind { mha_precision prec; mha_kv_type kv; const char *name; } KINDS[] = {
    {MHA_PRECISION_F32, MHA_KV_AUTO, "f32"},
    {MHA_PRECISION_BF16, MHA_KV_AUTO, "bf16"},
    {MHA_PRECISION_F32, MHA_KV_INT8, "int8 (f32 engine)"},
    {MHA_PRECISION_BF16, MHA_KV_INT8, "int8 (bf16 engine)"},
};
#define N_KINDS (int)(sizeof KINDS / sizeof KINDS[0])

typedef struct bench {
    problem p;         /* two sequences of S tokens (rows of p.q): the parent's and the child's */
    mha_config cfg;
    mha_engine *e;
} bench;

static void bench_make(bench *b, const struct kind *k, int max_seqs_cfg)
{
    problem_make(&b->p, D, H, 2, S, S, 1, 0, 911);
    problem_set_kv_heads(&b->p, KVH, 912);
    b->p.rope = (mha_rope){.style = MHA_ROPE_NEOX, .theta = 10000.0f};
    b->p.causal = 1;
    problem_config(&b->p, &b->cfg, 2);
    b->cfg.max_batch = max_seqs_cfg, b->cfg.max_seq_q = PREFIX;
    b->cfg.precision = k->prec, b->cfg.kv_type = k->kv;
    cr_assert_eq(mha_create(&b->cfg, &b->e), MHA_OK, "%s", k->name);
    float *scratch;
    mha_weights w = problem_weights(&b->p, MHA_LAYOUT_XW, &scratch);
    cr_assert_eq(mha_set_weights(b->e, &w), MHA_OK, "%s", mha_engine_last_error(b->e));
    free(scratch);
}

static void bench_free(bench *b)
{
    mha_free(b->e);
    problem_free(&b->p);
}

/* One step of n sequences: sequence i at past[i] brings add[i] tokens, its rows from tok[i]
 * (S, D) at its position, its outputs into got[i] (S, D) there; tables (n, MAX_BLOCKS). */
static mha_status step(bench *b, mha_kv_cache *c, int n, const int32_t *tables, int32_t *past, const int32_t *add,
                       const float *const *tok, float *const *got)
{
    float x[2 * PREFIX * D], out[2 * PREFIX * D];
    size_t rows = 0;
    for (int i = 0; i < n; i++) {
        memcpy(x + rows * D, tok[i] + (size_t)past[i] * D, (size_t)add[i] * D * sizeof *x);
        rows += (size_t)add[i];
    }
    const mha_step st = {.n_seqs = n, .n_past = past, .n_new = add, .blocks = tables, .max_blocks = MAX_BLOCKS, .x = x};
    const mha_status r = mha_step_forward(b->e, c, &st, out);
    if (r != MHA_OK)
        return r;
    rows = 0;
    for (int i = 0; i < n; i++) {
        memcpy(got[i] + (size_t)past[i] * D, out + rows * D, (size_t)add[i] * D * sizeof *out);
        rows += (size_t)add[i];
        past[i] += add[i];
    }
    return MHA_OK;
}

/* The prefix in one step, then token by token to S: sequence tok alone in a fresh cache, its
 * outputs into got (S, D). */
static void alone(bench *b, const float *tok, float *got)
{
    mha_kv_cache *c;
    cr_assert_eq(mha_kv_cache_create(&b->cfg, N_BLOCKS, BS, 1, &c), MHA_OK);
    const int32_t table[MAX_BLOCKS] = {3, 9, 1, 14, 6};
    int32_t past = 0, add = PREFIX;
    while (past < S) {
        cr_assert_eq(step(b, c, 1, table, &past, &add, &tok, &got), MHA_OK, "%s", mha_engine_last_error(b->e));
        add = 1;
    }
    mha_kv_cache_free(c);
}

/* The child's tokens: the parent's prefix, then the second sequence's tokens. */
static float *child_tokens(const bench *b)
{
    float *t = malloc((size_t)S * D * sizeof *t);
    memcpy(t, b->p.q, (size_t)PREFIX * D * sizeof *t);
    memcpy(t + (size_t)PREFIX * D, b->p.q + ((size_t)S + PREFIX) * D, (size_t)(S - PREFIX) * D * sizeof *t);
    return t;
}

static void assert_same(const float *got, const float *want, const char *what, const char *kind)
{
    const long at = first_bit_difference(got, want, (size_t)S * D);
    cr_assert_eq(at, -1, "%s, %s: row %ld feature %ld: %a, alone %a", kind, what, at < 0 ? 0 : at / D,
                 at < 0 ? 0 : at % D, got[at < 0 ? 0 : at], want[at < 0 ? 0 : at]);
}

Test(kv_blocks, a_fork_continues_as_each_sequence_alone)
{
    for (int k = 0; k < N_KINDS; k++) {
        bench b;
        bench_make(&b, &KINDS[k], 2);
        float *child = child_tokens(&b), *want[2], *got[2];
        for (int i = 0; i < 2; i++)
            want[i] = calloc((size_t)S * D, sizeof(float)), got[i] = calloc((size_t)S * D, sizeof(float));
        alone(&b, b.p.q, want[0]);
        alone(&b, child, want[1]);

        mha_kv_cache *c;
        cr_assert_eq(mha_kv_cache_create(&b.cfg, N_BLOCKS, BS, 2, &c), MHA_OK);
        /* the parent's prefix fills blocks 3 and 9 and 5 slots of block 1 (an int8 K group open) */
        int32_t tables[2 * MAX_BLOCKS] = {3, 9, 1, 14, 6, /* the child: */ 3, 9, 12, 0, 7};
        int32_t past[2] = {0, 0}, add[2] = {PREFIX, 0};
        const float *tok[2] = {b.p.q, child};
        cr_assert_eq(step(&b, c, 1, tables, past, add, tok, got), MHA_OK, "%s", mha_engine_last_error(b.e));
        cr_assert_eq(mha_kv_cache_open_groups(c), KINDS[k].kv == MHA_KV_INT8, "%s", KINDS[k].name);
        /* the fork: the full blocks shared, the last one copied before either writes into it */
        const int32_t src = 1, dst = 12;
        cr_assert_eq(mha_kv_cache_copy_blocks(c, &src, &dst, 1), MHA_OK, "%s", mha_kv_cache_last_error(c));
        memcpy(got[1], got[0], (size_t)PREFIX * D * sizeof(float));
        past[1] = PREFIX;
        for (int t = PREFIX; t < S; t++) { /* both decode in the same steps */
            add[0] = add[1] = 1;
            cr_assert_eq(step(&b, c, 2, tables, past, add, tok, got), MHA_OK, "%s, position %d: %s", KINDS[k].name, t,
                         mha_engine_last_error(b.e));
        }
        assert_same(got[0], want[0], "the parent", KINDS[k].name);
        assert_same(got[1], want[1], "the child", KINDS[k].name);
        mha_kv_cache_free(c);
        for (int i = 0; i < 2; i++)
            free(want[i]), free(got[i]);
        free(child);
        bench_free(&b);
    }
}

Test(kv_blocks, a_sequence_swapped_out_and_back_continues_as_if_it_never_left)
{
    for (int k = 0; k < N_KINDS; k++) {
        bench b;
        bench_make(&b, &KINDS[k], 1);
        float *want = calloc((size_t)S * D, sizeof(float)), *got = calloc((size_t)S * D, sizeof(float));
        float *other = calloc((size_t)S * D, sizeof(float));
        alone(&b, b.p.q, want);

        mha_kv_cache *c;
        cr_assert_eq(mha_kv_cache_create(&b.cfg, N_BLOCKS, BS, 1, &c), MHA_OK);
        int32_t table[MAX_BLOCKS] = {3, 9, 1, 14, 6}, past = 0, add = PREFIX;
        const float *tok = b.p.q, *tok2 = b.p.q + (size_t)S * D;
        cr_assert_eq(step(&b, c, 1, table, &past, &add, &tok, &got), MHA_OK, "%s", mha_engine_last_error(b.e));
        /* preempted: its three blocks out */
        const size_t len = mha_kv_cache_swap_size(c, table, 3);
        cr_assert_gt(len, 0);
        unsigned char *image = malloc(len);
        cr_assert_eq(mha_kv_cache_swap_out(c, table, 3, image, len - 1), MHA_ERR_WORKSPACE, "%s", KINDS[k].name);
        cr_assert(strstr(mha_kv_cache_last_error(c), "the image needs"), "%s", mha_kv_cache_last_error(c));
        cr_assert_eq(mha_kv_cache_swap_out(c, table, 3, image, len), MHA_OK, "%s", mha_kv_cache_last_error(c));
        cr_assert_eq(mha_kv_cache_open_groups(c), 0, "%s: swapped out, released", KINDS[k].name);
        /* another sequence runs on the same blocks (its own open group in block 1), ends, and
         * releases them */
        int32_t past2 = 0, add2 = PREFIX;
        cr_assert_eq(step(&b, c, 1, table, &past2, &add2, &tok2, &other), MHA_OK, "%s", mha_engine_last_error(b.e));
        cr_assert_eq(mha_kv_cache_release(c, table, 3), MHA_OK);
        /* back, into other blocks */
        int32_t back[MAX_BLOCKS] = {11, 2, 15, 4, 8};
        cr_assert_eq(mha_kv_cache_swap_in(c, back, 2, image, len), MHA_ERR_FORMAT, "%s: two blocks for an image of three",
                     KINDS[k].name);
        cr_assert_eq(mha_kv_cache_swap_in(c, back, 3, image, len - 1), MHA_ERR_FORMAT);
        cr_assert_eq(mha_kv_cache_swap_in(c, back, 3, image, len), MHA_OK, "%s", mha_kv_cache_last_error(c));
        cr_assert_eq(mha_kv_cache_open_groups(c), KINDS[k].kv == MHA_KV_INT8, "%s", KINDS[k].name);
        for (add = 1; past < S;)
            cr_assert_eq(step(&b, c, 1, back, &past, &add, &tok, &got), MHA_OK, "%s: %s", KINDS[k].name,
                         mha_engine_last_error(b.e));
        assert_same(got, want, "swapped out and back", KINDS[k].name);
        /* what is not a swap_out image is refused */
        image[0] ^= 1;
        cr_assert_eq(mha_kv_cache_swap_in(c, back, 3, image, len), MHA_ERR_FORMAT);
        cr_assert(strstr(mha_kv_cache_last_error(c), "no swap_out image"), "%s", mha_kv_cache_last_error(c));
        free(image), free(want), free(got), free(other);
        mha_kv_cache_free(c);
        bench_free(&b);
    }
}

/* The bytes of every block, to show that a refused operation changed none. */
static unsigned char *snapshot(mha_kv_cache *c, size_t *len)
{
    int32_t all[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++)
        all[i] = i;
    *len = mha_kv_cache_swap_size(c, all, N_BLOCKS);
    unsigned char *s = malloc(*len);
    /* swap_out releases what it writes: a copy made through a second cache would cost more than
     * restoring the open groups, which swap_in does */
    cr_assert_eq(mha_kv_cache_swap_out(c, all, N_BLOCKS, s, *len), MHA_OK);
    cr_assert_eq(mha_kv_cache_swap_in(c, all, N_BLOCKS, s, *len), MHA_OK);
    return s;
}

static void assert_unchanged(mha_kv_cache *c, const unsigned char *before, size_t len, const char *what)
{
    size_t now_len;
    unsigned char *now = snapshot(c, &now_len);
    cr_assert(now_len == len && !memcmp(now, before, len), "%s changed the cache", what);
    free(now);
}

Test(kv_blocks, refusals_name_the_problem_and_change_nothing)
{
    bench b;
    bench_make(&b, &KINDS[2], 2); /* int8: the open groups are the cache's */
    mha_kv_cache *c;
    cr_assert_eq(mha_kv_cache_create(&b.cfg, N_BLOCKS, BS, 1, &c), MHA_OK);
    cr_assert_eq(mha_kv_cache_max_open(c), 1);
    int32_t tables[2 * MAX_BLOCKS] = {3, 9, 1, 14, 6, 3, 9, 1, 0, 7}, past[2] = {0, 0}, add[2] = {PREFIX, PREFIX};
    float *got[2] = {calloc((size_t)S * D, sizeof(float)), calloc((size_t)S * D, sizeof(float))};
    const float *tok[2] = {b.p.q, b.p.q};
    cr_assert_eq(step(&b, c, 1, tables, past, add, tok, got), MHA_OK, "%s", mha_engine_last_error(b.e));
    size_t len;
    unsigned char *before = snapshot(c, &len);

    /* a fork that shares its parent's open group instead of copying it: both write block 1 */
    past[1] = PREFIX, add[0] = add[1] = 1;
    cr_assert_eq(step(&b, c, 2, tables, past, add, tok, got), MHA_ERR_STATE);
    cr_assert(strstr(mha_engine_last_error(b.e), "sequences 0 and 1 both write the K group at block 1 slot 0"), "%s",
              mha_engine_last_error(b.e));
    assert_unchanged(c, before, len, "a step of two writers");
    /* the copy needs a second entry of a pool of one */
    const int32_t src = 1, dst = 12, bad = N_BLOCKS;
    cr_assert_eq(mha_kv_cache_copy_blocks(c, &src, &dst, 1), MHA_ERR_STATE);
    cr_assert(strstr(mha_kv_cache_last_error(c), "the pool has room for 0 (1 entries)"), "%s", mha_kv_cache_last_error(c));
    cr_assert_eq(mha_kv_cache_copy_blocks(c, &src, &src, 1), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_kv_cache_last_error(c), "dst[0] is src[0] (block 1)"), "%s", mha_kv_cache_last_error(c));
    cr_assert_eq(mha_kv_cache_copy_blocks(c, &src, &bad, 1), MHA_ERR_SHAPE);
    cr_assert(strstr(mha_kv_cache_last_error(c), "dst[0] is 16, outside 0..15"), "%s", mha_kv_cache_last_error(c));
    cr_assert_eq(mha_kv_cache_release(c, tables, -1), MHA_ERR_INVALID_ARG);
    const int32_t twice[2] = {4, 4};
    cr_assert_eq(mha_kv_cache_swap_out(c, twice, 2, before, len), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_kv_cache_last_error(c), "blocks[0] and [1] are both block 4"), "%s", mha_kv_cache_last_error(c));
    assert_unchanged(c, before, len, "the refused block operations");
    /* a second sequence opening a group of its own: the pool of one is full */
    tables[MAX_BLOCKS] = 0, tables[MAX_BLOCKS + 1] = 7, tables[MAX_BLOCKS + 2] = 5;
    past[1] = 0, add[0] = 1, add[1] = PREFIX;
    cr_assert_eq(step(&b, c, 2, tables, past, add, tok, got), MHA_ERR_STATE);
    cr_assert(strstr(mha_engine_last_error(b.e), "pool of open K groups is full (1 entries, 0 free, this step opens 1)"),
              "%s", mha_engine_last_error(b.e));
    assert_unchanged(c, before, len, "a step past the pool");
    cr_assert_eq(mha_kv_cache_last_error(NULL)[0] != '\0', 1);
    free(before), free(got[0]), free(got[1]);
    mha_kv_cache_free(c);
    bench_free(&b);
}

/* A sequence that ends without releasing its blocks leaves its open K group in the pool; a
 * later sequence on those blocks takes the group back (writing it from its start), and one
 * whose open group moves onto that group's block and slot replaces it: neither is refused or
 * reads the old rows (the same bits as alone). */
Test(kv_blocks, an_unreleased_open_group_does_not_stand_in_a_later_sequences_way)
{
    bench b;
    bench_make(&b, &KINDS[2], 1);
    float *want = calloc((size_t)S * D, sizeof(float)), *got = calloc((size_t)S * D, sizeof(float));
    float *scrap = calloc((size_t)S * D, sizeof(float));
    const float *tok = b.p.q, *other = b.p.q + (size_t)S * D;
    /* alone: 5 tokens, 6, then one at a time, on blocks 7, 3, ... */
    mha_kv_cache *c;
    cr_assert_eq(mha_kv_cache_create(&b.cfg, N_BLOCKS, BS, 2, &c), MHA_OK);
    int32_t table[MAX_BLOCKS] = {7, 3, 1, 14, 6}, past = 0, add = 5;
    for (int k = 0; past < S; k++, add = k == 1 ? 6 : 1)
        cr_assert_eq(step(&b, c, 1, table, &past, &add, &tok, &want), MHA_OK, "%s", mha_engine_last_error(b.e));
    mha_kv_cache_free(c);
    /* first another sequence leaves 5 positions of block 3's group open, and ends */
    cr_assert_eq(mha_kv_cache_create(&b.cfg, N_BLOCKS, BS, 2, &c), MHA_OK);
    int32_t ended[MAX_BLOCKS] = {3, 0, 0, 0, 0}, ended_past = 0, ended_add = 5;
    cr_assert_eq(step(&b, c, 1, ended, &ended_past, &ended_add, &other, &scrap), MHA_OK);
    cr_assert_eq(mha_kv_cache_open_groups(c), 1);
    /* then the sequence: its second step moves its open group onto block 3, slot 0 */
    past = 0, add = 5;
    for (int k = 0; past < S; k++, add = k == 1 ? 6 : 1)
        cr_assert_eq(step(&b, c, 1, table, &past, &add, &tok, &got), MHA_OK, "step %d: %s", k,
                     mha_engine_last_error(b.e));
    assert_same(got, want, "after an unreleased group", KINDS[2].name);
    free(want), free(got), free(scrap);
    mha_kv_cache_free(c);
    bench_free(&b);
}
