/* test_alloc_fail.c — every allocation that engine creation, the config loader and the file
 * loaders make is made to fail in turn (the n-th, for n = 1, 2, … until the call succeeds):
 * each failing call returns MHA_ERR_NOMEM with a message, leaves nothing allocated (the
 * counted allocator's live count; LeakSanitizer under `make DEBUG=1 test`) and hands back
 * no half-made result. libmha's own allocations and jansson's (routed here with
 * json_set_alloc_funcs) are counted; libyaml's internal ones have no hook and are not
 * (the config loader's own buffers around it are). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "config_file.h"
#include "helpers.h"
#include "mha_io.h"
#include "npy.h"

#define D "tests/data/"

typedef struct call {
    const char *what;
    mha_status (*run)(struct call *c, char *err, size_t err_len);
    void (*release)(struct call *c); /* frees what a successful run produced (through the
                                      * counted free: the library's malloc was counted) */
    int (*nothing_made)(struct call *c);
    /* arguments and results */
    const char *path, *prefix;
    int d, bias;
    mha_mla mla;      /* the weights loader's: an MLA layer when kv_lora_rank is set */
    mha_config cfg;
    mha_engine *e;
    float *data;
    int32_t *lengths;
    mha_weights_file wf;
    mha_gguf *g;
} call;

/* Fails allocation 1, 2, … of the call until it succeeds; returns how many it made. */
static long fail_each_allocation(call *c)
{
    json_set_alloc_funcs(mha_counted_malloc, mha_counted_free);
    const long base = alloc_live();
    for (long n = 1; n < 100000; n++) {
        char err[1024] = "";
        const long before = alloc_count();
        alloc_fail_after(n);
        mha_status st = c->run(c, err, sizeof err);
        alloc_fail_after(0);
        const long made = alloc_count() - before;
        if (st == MHA_OK) {
            cr_assert_lt(made, n, "%s succeeded although allocation %ld of %ld failed", c->what, n, made);
            c->release(c);
            cr_assert_eq(alloc_live(), base, "%s: success leaves %ld blocks after release", c->what, alloc_live() - base);
            return n - 1;
        }
        cr_assert_eq(st, MHA_ERR_NOMEM, "%s with allocation %ld failing: %s (%s)", c->what, n, mha_status_str(st), err);
        cr_assert(c->nothing_made(c), "%s with allocation %ld failing: a half-made result was handed back", c->what, n);
        cr_assert_eq(alloc_live(), base, "%s with allocation %ld failing: %ld blocks leaked", c->what, n,
                     alloc_live() - base);
    }
    cr_assert_fail("%s never succeeded", c->what);
    return -1;
}

static void expect_message(const char *what, const char *err)
{
    cr_assert(strstr(err, "out of memory"), "%s: message '%s' does not say out of memory", what, err);
}

/* ---- the calls ---- */

static mha_status run_create(call *c, char *err, size_t n)
{
    (void)err, (void)n;
    return mha_create(&c->cfg, &c->e);
}
static void release_engine(call *c) { mha_free(c->e), c->e = NULL; }
static int no_engine(call *c) { return c->e == NULL; }

static mha_status run_config(call *c, char *err, size_t n)
{
    static cli_config fc; /* the files hold the command's keys too: loaded with its rows */
    mha_status st = cli_config_load(c->path, &fc, err, n);
    if (st == MHA_OK)
        c->cfg = fc.engine;
    if (st == MHA_ERR_NOMEM)
        expect_message(c->what, err);
    return st;
}
static void release_nothing(call *c) { (void)c; }
static int nothing_to_make(call *c) { (void)c; return 1; }

static mha_status run_npy(call *c, char *err, size_t n)
{
    int64_t shape[3];
    c->data = NULL;
    mha_status st = mha_npy_load_f32(c->path, 3, shape, &c->data, err, n);
    if (st == MHA_ERR_NOMEM)
        expect_message(c->what, err);
    return st;
}
static void release_data(call *c) { mha_counted_free(c->data), c->data = NULL; }
static int no_data(call *c) { return c->data == NULL; }

static mha_status run_lengths(call *c, char *err, size_t n)
{
    int64_t count;
    c->lengths = NULL;
    mha_status st = mha_npy_load_lengths(c->path, &count, &c->lengths, 1 << 20, err, n);
    if (st == MHA_ERR_NOMEM)
        expect_message(c->what, err);
    return st;
}
static void release_lengths(call *c) { mha_counted_free(c->lengths), c->lengths = NULL; }
static int no_lengths(call *c) { return c->lengths == NULL; }

static mha_status run_weights(call *c, char *err, size_t n)
{
    memset(&c->wf, 0, sizeof c->wf);
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = c->d, cfg.n_heads = 4, cfg.bias = c->bias, cfg.mla = c->mla;
    mha_status st = mha_weights_file_load(c->path, c->prefix, &cfg, &c->wf, err, n);
    if (st == MHA_ERR_NOMEM)
        expect_message(c->what, err);
    return st;
}
static void release_weights(call *c) { mha_weights_file_free(&c->wf); }
static int no_weights(call *c) { return c->wf.storage == NULL && c->wf.w.w_q == NULL; }

static mha_status run_gguf(call *c, char *err, size_t n)
{
    c->g = NULL;
    mha_status st = mha_gguf_open(c->path, &c->g, err, n);
    if (st == MHA_ERR_NOMEM)
        expect_message(c->what, err);
    return st;
}
static void release_gguf(call *c) { mha_gguf_close(c->g), c->g = NULL; }
static int no_gguf(call *c) { return c->g == NULL; }

/* ---- tests ---- */

Test(alloc_fail, mha_create, .timeout = 60)
{
    call c = {.what = "mha_create", .run = run_create, .release = release_engine, .nothing_made = no_engine};
    mha_config_init(&c.cfg);
    c.cfg.d_model = 64, c.cfg.n_heads = 4, c.cfg.max_batch = 2, c.cfg.max_seq_q = c.cfg.max_seq_kv = 32;
    c.cfg.threads = 2;
    cr_assert_geq(fail_each_allocation(&c), 1, "mha_create allocates its arena");
}

Test(alloc_fail, mha_set_weights_allocates_nothing)
{
    problem p;
    problem_make(&p, 64, 4, 1, 8, 8, 1, 0, 1);
    mha_engine *e = engine_bare(&p, 1);
    float *scratch;
    mha_weights w = problem_weights(&p, MHA_LAYOUT_TORCH, &scratch);
    const long before = alloc_count();
    alloc_fail_after(1); /* the first allocation would fail: there is none */
    mha_status st = mha_set_weights(e, &w);
    alloc_fail_after(0);
    cr_assert_eq(st, MHA_OK, "%s", mha_status_str(st));
    cr_assert_eq(alloc_count() - before, 0, "mha_set_weights allocated %ld times", alloc_count() - before);
    free(scratch);
    mha_free(e);
    problem_free(&p);
}

Test(alloc_fail, config_loader, .timeout = 120)
{
    /* every block of the schema, lists included */
    call c = {.what = "mha_config_load_with", .run = run_config, .release = release_nothing,
              .nothing_made = nothing_to_make, .path = "configs/ragged-serving.yaml"};
    cr_assert_geq(fail_each_allocation(&c), 1);
    c.path = D "golden.yaml";
    cr_assert_geq(fail_each_allocation(&c), 1);
}

Test(alloc_fail, npy_loaders, .timeout = 60)
{
    call c = {.what = "mha_npy_load_f32", .run = run_npy, .release = release_data, .nothing_made = no_data,
              .path = D "x.npy"};
    cr_assert_geq(fail_each_allocation(&c), 1);
    call l = {.what = "mha_npy_load_lengths", .run = run_lengths, .release = release_lengths,
              .nothing_made = no_lengths, .path = D "lengths.npy"};
    cr_assert_geq(fail_each_allocation(&l), 1);
}

Test(alloc_fail, safetensors_weights_loader, .timeout = 120)
{
    call c = {.what = "mha_weights_file_load (nn.MultiheadAttention, F32)", .run = run_weights,
              .release = release_weights, .nothing_made = no_weights, .path = D "mha.safetensors", .prefix = NULL,
              .d = 32, .bias = 1};
    cr_assert_geq(fail_each_allocation(&c), 3, "header, JSON, tensors and weights: several allocations");
    c.what = "mha_weights_file_load (q_proj, F16, prefix)";
    c.path = D "proj_f16.safetensors", c.prefix = "model.layers.0.self_attn";
    cr_assert_geq(fail_each_allocation(&c), 3);
    c.what = "mha_weights_file_load (W_q, BF16)";
    c.path = D "xw_bf16.safetensors", c.prefix = NULL;
    cr_assert_geq(fail_each_allocation(&c), 3);
    c.what = "mha_weights_file_load (DeepSeek MLA, q_lora)";
    c.path = D "mla_lora.safetensors", c.prefix = "model.layers.0.self_attn", c.d = 64, c.bias = 0;
    c.mla = (mha_mla){.kv_lora_rank = 16, .q_lora_rank = 24, .qk_nope_head_dim = 8, .qk_rope_head_dim = 4,
                      .v_head_dim = 6, .eps = 1e-6f};
    cr_assert_geq(fail_each_allocation(&c), 3);
}

Test(alloc_fail, gguf_reader, .timeout = 60)
{
    call c = {.what = "mha_gguf_open", .run = run_gguf, .release = release_gguf, .nothing_made = no_gguf,
              .path = D "gguf/tiny_llama.gguf"};
    cr_assert_geq(fail_each_allocation(&c), 2, "the handle and the tables' block");
}
