/* test_errors.c — every status code the engine returns, provoked; a failed call leaves the
 * engine usable; status names; the library prints nothing. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "helpers.h"

Test(status, every_code_has_a_distinct_name)
{
    for (int s = MHA_OK; s <= MHA_ERR_STATE; s++) {
        const char *name = mha_status_str((mha_status)s);
        cr_assert(name && *name && strcmp(name, "unknown status") != 0, "status %d has no name", s);
        for (int t = MHA_OK; t < s; t++)
            cr_assert_str_neq(name, mha_status_str((mha_status)t), "statuses %d and %d share a name", s, t);
    }
    cr_assert_str_eq(mha_status_str((mha_status)1000), "unknown status");
    cr_assert_str_eq(mha_status_str((mha_status)-1), "unknown status");
}

Test(status, codes_are_pinned)
{
    /* released values never change: clients store and compare them */
    cr_assert_eq(MHA_OK, 0);
    cr_assert_eq(MHA_ERR_INVALID_ARG, 1);
    cr_assert_eq(MHA_ERR_CONFIG, 2);
    cr_assert_eq(MHA_ERR_SHAPE, 3);
    cr_assert_eq(MHA_ERR_NOMEM, 4);
    cr_assert_eq(MHA_ERR_WORKSPACE, 5);
    cr_assert_eq(MHA_ERR_IO, 6);
    cr_assert_eq(MHA_ERR_FORMAT, 7);
    cr_assert_eq(MHA_ERR_AFFINITY, 8);
    cr_assert_eq(MHA_ERR_STATE, 9);
}

Test(status, version_string_matches_macros)
{
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", MHA_VERSION_MAJOR, MHA_VERSION_MINOR, MHA_VERSION_PATCH);
    cr_assert_str_eq(mha_version_string(), expect);
}

/* A small engine and problem shared by the error tests. */
static problem P;
static mha_engine *E;
static float *OUT;

static void setup(void)
{
    problem_make(&P, 32, 4, 2, 6, 6, 1, 0, 41);
    E = engine_for(&P, 2, MHA_LAYOUT_XW);
    OUT = malloc((size_t)2 * 6 * 32 * sizeof *OUT);
}

static void teardown(void)
{
    mha_free(E);
    free(OUT);
    problem_free(&P);
}

/* The engine still computes the right answer. */
static void assert_usable(void)
{
    mha_input in = problem_input(&P);
    cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_OK);
    double *ref = malloc((size_t)2 * 6 * 32 * sizeof *ref);
    reference_mha(&P, ref, NULL);
    double err = rel_error(OUT, ref, (size_t)2 * 6 * 32);
    cr_assert_leq(err, 1e-5, "engine unusable after a failed call: relative error %g", err);
    free(ref);
}

Test(errors, null_arguments_are_invalid, .init = setup, .fini = teardown)
{
    mha_config cfg;
    mha_config_init(&cfg);
    mha_engine *e = (mha_engine *)&cfg; /* must be reset to NULL on failure */
    cr_assert_eq(mha_create(NULL, &e), MHA_ERR_INVALID_ARG);
    cr_assert_null(e);
    cr_assert_eq(mha_create(&cfg, NULL), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_create_static(&cfg, NULL, 1 << 20, &e), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_set_weights(NULL, NULL), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_set_weights(E, NULL), MHA_ERR_INVALID_ARG);
    mha_input in = problem_input(&P);
    cr_assert_eq(mha_forward(NULL, &in, OUT, NULL), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_forward(E, NULL, OUT, NULL), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_forward(E, &in, NULL, NULL), MHA_ERR_INVALID_ARG);
    in.k = NULL;
    cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_INVALID_ARG);
    mha_free(NULL);
    assert_usable();
}

Test(errors, weights_that_disagree_with_the_config, .init = setup, .fini = teardown)
{
    mha_weights w = {.w_q = P.wq, .w_v = P.wv, .w_o = P.wo, .b_q = P.bq, .b_k = P.bk, .b_v = P.bv, .b_o = P.bo,
                     .layout = MHA_LAYOUT_XW};
    cr_assert_eq(mha_set_weights(E, &w), MHA_ERR_INVALID_ARG, "missing W_k");
    w.w_k = P.wk, w.b_k = NULL;
    cr_assert_eq(mha_set_weights(E, &w), MHA_ERR_INVALID_ARG, "b_q and b_v without b_k");
    w.b_k = P.bk, w.b_o = NULL;
    cr_assert_eq(mha_set_weights(E, &w), MHA_OK, "b_o is optional (no output bias, as Qwen2)");
    w.b_o = P.bo;
    cr_assert_eq(mha_set_weights(E, &w), MHA_OK); /* the problem's own weights again */
    w.w_v = NULL;
    cr_assert_eq(mha_set_weights(E, &w), MHA_ERR_INVALID_ARG, "missing W_v");
    w.w_v = P.wv;
    w.layout = (mha_layout)7;
    cr_assert_eq(mha_set_weights(E, &w), MHA_ERR_INVALID_ARG, "unknown layout");
    w.layout = MHA_LAYOUT_XW;
    w.q_norm = w.k_norm = P.bq, w.sinks = P.bq;
    cr_assert_eq(mha_set_weights(E, &w), MHA_ERR_INVALID_ARG, "QK-norm weights for a model without QK-norm");
    cr_assert(strstr(mha_engine_last_error(E), "q_norm set, k_norm set; the config has qk_norm none"), "%s",
              mha_engine_last_error(E));
    w.q_norm = w.k_norm = NULL;
    cr_assert_eq(mha_set_weights(E, &w), MHA_ERR_INVALID_ARG, "sinks for a model without sinks");
    cr_assert(strstr(mha_engine_last_error(E), "sinks set; the config has sinks 0"), "%s", mha_engine_last_error(E));
    assert_usable();
}

/* A model with QK-norm and sinks needs their weights: each missing one is named. */
Test(errors, variant_weights_must_be_given)
{
    problem p;
    problem_make(&p, 32, 4, 1, 4, 4, 0, 0, 5);
    problem_set_qk_norm(&p, MHA_QK_NORM_HEAD, 0, 6);
    problem_set_sinks(&p, 7);
    mha_engine *e = engine_bare(&p, 1);
    float *scratch;
    mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
    const struct { const float **field; const char *says; } missing[] = {
        {&w.q_norm, "q_norm NULL, k_norm set; the config has qk_norm head (both needed, d_k each)"},
        {&w.k_norm, "q_norm set, k_norm NULL"},
        {&w.sinks, "sinks NULL; the config has sinks 1 (n_heads logits needed)"},
    };
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        const float *keep = *missing[i].field;
        *missing[i].field = NULL;
        cr_assert_eq(mha_set_weights(e, &w), MHA_ERR_INVALID_ARG, "%s", missing[i].says);
        cr_assert(strstr(mha_engine_last_error(e), missing[i].says), "%s", mha_engine_last_error(e));
        *missing[i].field = keep;
    }
    cr_assert_eq(mha_set_weights(e, &w), MHA_OK, "%s", mha_engine_last_error(e));
    mha_packed_weights *pw;
    cr_assert_eq(mha_pack_weights(NULL, &w, &pw), MHA_ERR_INVALID_ARG);
    mha_config cfg;
    problem_config(&p, &cfg, 1);
    w.sinks = NULL;
    cr_assert_eq(mha_pack_weights(&cfg, &w, &pw), MHA_ERR_INVALID_ARG, "packed without the sinks");
    free(scratch);
    mha_free(e);
    problem_free(&p);
}

Test(errors, invalid_configs)
{
    mha_config cfg;
    mha_engine *e = NULL;
    char err[128];

#define EXPECT_CONFIG(stmt, field)                                                         \
    do {                                                                                   \
        mha_config_init(&cfg);                                                             \
        stmt;                                                                              \
        cr_assert_eq(mha_create(&cfg, &e), MHA_ERR_CONFIG, "%s accepted", #stmt);          \
        cr_assert_null(e);                                                                 \
        cr_assert_eq(mha_workspace_size(&cfg), 0, "%s: workspace size not 0", #stmt);      \
        cr_assert_eq(mha_config_check(&cfg, err, sizeof err), MHA_ERR_CONFIG);             \
        cr_assert(strstr(err, field), "%s: message '%s' does not name %s", #stmt, err, field); \
    } while (0)

    EXPECT_CONFIG(cfg.n_heads = 7, "n_heads");
    EXPECT_CONFIG(cfg.d_model = 0, "d_model");
    EXPECT_CONFIG(cfg.d_model = -512, "d_model");
    EXPECT_CONFIG(cfg.n_heads = 0, "n_heads");
    EXPECT_CONFIG(cfg.max_batch = 0, "max_batch");
    EXPECT_CONFIG(cfg.max_seq_q = -1, "max_seq_q");
    EXPECT_CONFIG(cfg.max_seq_kv = 0, "max_seq_kv");
    EXPECT_CONFIG(cfg.bias = 2, "bias");
    EXPECT_CONFIG(cfg.threads = -1, "threads");
    EXPECT_CONFIG(cfg.threads = MHA_MAX_THREADS + 1, "threads");
    EXPECT_CONFIG(cfg.q_block = -4, "q_block");
    EXPECT_CONFIG(cfg.pinning = (mha_pinning)9, "pinning");
    EXPECT_CONFIG((cfg.pinning = MHA_PIN_CPUS, cfg.n_cpus = 0), "n_cpus");
    EXPECT_CONFIG((cfg.pinning = MHA_PIN_CPUS, cfg.n_cpus = 1, cfg.cpus[0] = -2), "cpus[0]");
    EXPECT_CONFIG(memset(cfg.blis_arch, 'x', sizeof cfg.blis_arch), "blis_arch");
    EXPECT_CONFIG(strcpy(cfg.blis_arch, "pentium4"), "blis_arch");
    /* past the schema's ranges (which keep every workspace product far below 2^64) */
    EXPECT_CONFIG((cfg.d_model = 1 << 30, cfg.n_heads = 1), "d_model: must be in 1..65536");
    EXPECT_CONFIG(cfg.max_batch = INT_MAX, "max_batch: must be in 1..65536");
#undef EXPECT_CONFIG
    cr_assert_eq(mha_config_check(NULL, err, sizeof err), MHA_ERR_INVALID_ARG);
}

Test(errors, forward_shapes_beyond_capacity, .init = setup, .fini = teardown)
{
    mha_input in = problem_input(&P);
    int *fields[] = {&in.batch, &in.seq_q, &in.seq_kv};
    for (int f = 0; f < 3; f++) {
        int keep = *fields[f];
        *fields[f] = keep + 1;
        cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_SHAPE, "field %d above capacity", f);
        *fields[f] = 0;
        cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_SHAPE, "field %d zero", f);
        *fields[f] = keep;
    }
    assert_usable();
}

Test(errors, lengths_out_of_range, .init = setup, .fini = teardown)
{
    mha_input in = problem_input(&P);
    int32_t len[2] = {6, 7};
    in.q_lengths = len;
    cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_SHAPE, "q length above seq_q");
    len[1] = -1;
    cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_SHAPE, "negative q length");
    in.q_lengths = NULL;
    in.kv_lengths = len;
    cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_SHAPE, "negative kv length");
    len[1] = 7;
    cr_assert_eq(mha_forward(E, &in, OUT, NULL), MHA_ERR_SHAPE, "kv length above seq_kv");
    assert_usable();
}

Test(errors, forward_before_weights_is_out_of_order)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4, cfg.threads = 1;
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    float x[32] = {0}, out[32];
    mha_input in = {.batch = 1, .seq_q = 1, .seq_kv = 1, .q = x, .k = x, .v = x};
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_ERR_STATE);
    mha_free(e);
}

Test(errors, static_workspace_too_small_or_misaligned)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4, cfg.threads = 2;
    size_t size = mha_workspace_size(&cfg);
    unsigned char *ws = aligned_alloc(64, size + 64);
    mha_engine *e = (mha_engine *)ws;
    cr_assert_eq(mha_create_static(&cfg, ws, size - 1, &e), MHA_ERR_WORKSPACE);
    cr_assert_null(e);
    cr_assert_eq(mha_create_static(&cfg, ws + 8, size, &e), MHA_ERR_WORKSPACE);
    cr_assert_eq(mha_create_static(&cfg, ws + 64, size, &e), MHA_OK, "64-byte aligned and exact size is enough");
    mha_free(e);
    free(ws);
}

Test(errors, allocation_failure_is_nomem)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4, cfg.threads = 1;
    mha_engine *e = (mha_engine *)&cfg;
    alloc_fail_after(1);
    cr_assert_eq(mha_create(&cfg, &e), MHA_ERR_NOMEM);
    alloc_fail_after(0);
    cr_assert_null(e);
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    mha_free(e);
}

Test(errors, pinning_outside_allowed_cpus_is_an_affinity_error)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4, cfg.threads = 2;
    cfg.pinning = MHA_PIN_CPUS;
    cfg.n_cpus = 2;
    cfg.cpus[0] = 0;
    cfg.cpus[1] = 1023; /* no CPU this test machine lets us use */
    mha_engine *e = (mha_engine *)&cfg;
    cr_assert_eq(mha_create(&cfg, &e), MHA_ERR_AFFINITY);
    cr_assert_null(e);
}

Test(errors, library_prints_nothing, .init = cr_redirect_stdout)
{
    cr_redirect_stderr();
    /* a full life cycle with failures on the way */
    problem p;
    problem_make(&p, 32, 4, 2, 6, 6, 1, 0, 43);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_TORCH);
    mha_input in = problem_input(&p);
    float out[2 * 6 * 32];
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_OK);
    in.batch = 99;
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_ERR_SHAPE);
    mha_config bad;
    mha_config_init(&bad);
    bad.n_heads = 5;
    mha_engine *none;
    cr_assert_eq(mha_create(&bad, &none), MHA_ERR_CONFIG);
    mha_free(e);
    problem_free(&p);
    fflush(stdout);
    fflush(stderr);
    cr_assert_stdout_eq_str("");
    cr_assert_stderr_eq_str("");
}

/* Each create has a form that says what is wrong (issue 22: a mismatched packed-weights config
 * was a bare MHA_ERR_CONFIG that mha_config_check could not explain). */
Test(errors, creates_say_what_is_wrong)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4, cfg.threads = 1;
    char err[256];
    mha_engine *e = NULL;
    strcpy(cfg.isa, "avx9");
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "isa: 'avx9': unknown"), "%s", err);
    cr_assert_null(e);
    cfg.isa[0] = '\0';
    static _Alignas(64) unsigned char small[4096];
    cr_assert_eq(mha_create_static_msg(&cfg, small, sizeof small, &e, err, sizeof err), MHA_ERR_WORKSPACE);
    cr_assert(strstr(err, "ws: 4096 bytes") && strstr(err, "this config needs"), "%s", err);
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_OK);
    cr_assert_str_eq(err, "", "a success leaves no message");
    mha_free(e);
    /* shared weights packed for another model: the field that differs, and both values */
    static float w[4][32 * 32], b[4][32];
    mha_weights wt = {.w_q = w[0], .w_k = w[1], .w_v = w[2], .w_o = w[3], .b_q = b[0], .b_k = b[1], .b_v = b[2],
                      .b_o = b[3], .layout = MHA_LAYOUT_XW};
    mha_packed_weights *pw;
    cr_assert_eq(mha_pack_weights(&cfg, &wt, &pw), MHA_OK);
    mha_config other = cfg;
    other.n_heads = 8;
    cr_assert_eq(mha_create_shared_msg(&other, pw, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "n_heads: 8, but the packed weights were made for 4"), "%s", err);
    other = cfg;
    other.bias = 0;
    cr_assert_eq(mha_create_shared_msg(&other, pw, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "bias: 0, but the packed weights were made for 1"), "%s", err);
    cr_assert_eq(mha_create_shared_msg(&cfg, pw, &e, err, sizeof err), MHA_OK, "%s", err);
    mha_free(e);
    mha_packed_weights_free(pw);
}
