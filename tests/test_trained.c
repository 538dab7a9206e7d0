/* test_trained.c — a trained model's layer on real text (issue 35): layer 26 of
 * SmolLM2-135M-Instruct (9 query heads over 3 KV heads of 64, RoPE theta 1e5) fed the hidden
 * states of two English texts, against HF transformers' LlamaAttention on the same weights
 * (tests/gen_golden_trained.py writes the case; make goldens-trained). Trained weights have
 * what unit-scale random data lacks: K with outlier channels and sharp attention. The forward
 * and steps through the paged cache (a prefill in chunks, then token by token), on the engine
 * suites' table (make test runs this suite once per table), f32 and bf16, every cache type. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "config_file.h"
#include "helpers.h"
#include "mha_io.h"

#define D "tests/data/"
#define PREFIX "model.layers.26.self_attn."

/* float32 against HF's float32 module on the same weights: the two sum in other orders over
 * d_model 576 (measured 1.2e-6), as the synthetic HF goldens' 1e-5 (test_cli.c). */
#define TRAINED_F32_TOL 1e-5
/* bf16 engines (and a bf16 cache): the bf16 contract, 1e-2 against the exact result (DESIGN.md,
 * docs/precision.md); measured 7.8e-3 on this layer's forward. */
#define TRAINED_BF16_TOL 1e-2
/* An int8 cache: issue 35's bound, 1e-2 against HF's unquantized module, in both engines. This
 * layer's K has outlier channels (a per-token scale gave 3.3e-2 here, the worst of the model's
 * 30 layers); K per feature over groups of 16 slots with a zero point (float16 parameters)
 * measures 5.5e-3 (f32 engine) and 7.0e-3 (bf16 engine: its own 7.8e-3 on the forward); every
 * layer in perf/RESULTS.md. */
#define TRAINED_INT8_TOL 1e-2

typedef struct trained {
    cli_config fc;
    mha_weights_file wf;
    float *x, *want;           /* (2, S, d) each: the inputs, HF's outputs (padded rows 0) */
    int32_t len[2];
    int S, d;
} trained;

static void trained_load(trained *t)
{
    char err[512];
    cr_assert_eq(cli_config_load(D "smollm2_trained.yaml", &t->fc, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(mha_weights_file_load(D "smollm2_trained.safetensors", PREFIX, &t->fc.engine, &t->wf, err, sizeof err),
                 MHA_OK, "%s", err);
    int64_t s[3], sw[3], sl;
    t->x = read_npy(D "smollm2_trained_x.npy", 3, s);
    t->want = read_npy(D "smollm2_trained_out.npy", 3, sw);
    int32_t *len;
    cr_assert_eq(mha_npy_load_lengths(D "smollm2_trained_lengths.npy", &sl, &len, (int32_t)s[1], err, sizeof err), MHA_OK,
                 "%s", err);
    cr_assert(s[0] == 2 && sl == 2 && !memcmp(s, sw, sizeof s), "the case's files disagree in shape");
    t->S = (int)s[1], t->d = (int)s[2];
    memcpy(t->len, len, sizeof t->len);
    free(len);
}

static void trained_free(trained *t)
{
    mha_weights_file_free(&t->wf);
    free(t->x), free(t->want);
}

/* An engine of the case's layer on the suites' table (config_init: a table this CPU cannot
 * run skips the test), of precision prec and cache kv, weights set. */
static mha_engine *trained_engine(trained *t, mha_precision prec, mha_kv_type kv, mha_config *cfg)
{
    mha_config table;
    config_init(&table);
    *cfg = t->fc.engine;
    memcpy(cfg->isa, table.isa, sizeof cfg->isa);
    memcpy(cfg->bf16_kernel, table.bf16_kernel, sizeof cfg->bf16_kernel);
    cfg->precision = prec, cfg->kv_type = kv, cfg->threads = 2;
    mha_engine *e;
    cr_assert_eq(mha_create(cfg, &e), MHA_OK, "%s", mha_engine_last_error(NULL));
    cr_assert_eq(mha_set_weights(e, &t->wf.w), MHA_OK, "%s", mha_engine_last_error(e));
    return e;
}

/* ‖got − want‖ / ‖want‖ over n values. */
static double rel(const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]), den += (double)want[i] * want[i];
    return sqrt(num / den);
}

/* The causal forward over both sequences (the shorter one padded): within tol of HF's
 * module, padded rows exactly 0; out (2, S, d) is kept for the steps to match. */
static double forward_error(trained *t, mha_precision prec, float *out)
{
    mha_config cfg;
    mha_engine *e = trained_engine(t, prec, MHA_KV_AUTO, &cfg);
    const mha_input in = {.batch = 2, .seq_q = t->S, .seq_kv = t->S, .q = t->x, .k = t->x, .v = t->x,
                          .q_lengths = t->len, .kv_lengths = t->len, .causal = 1};
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_OK, "%s", mha_engine_last_error(e));
    mha_free(e);
    const size_t n = (size_t)2 * t->S * t->d;
    for (size_t i = 0; i < n; i++)
        if (t->want[i] == 0.0f)
            cr_assert_eq(out[i], 0.0f, "[%zu] = %g, a padded row's value, want exactly 0", i, out[i]);
    return rel(out, t->want, n);
}

Test(trained, forward_reproduces_hf_on_real_text, .timeout = 60)
{
    trained t;
    trained_load(&t);
    float *out = malloc((size_t)2 * t.S * t.d * sizeof *out);
    const double f32 = forward_error(&t, MHA_PRECISION_F32, out), bf16 = forward_error(&t, MHA_PRECISION_BF16, out);
    cr_log_info("SmolLM2 layer 26 on real text, forward against HF: f32 %.2e, bf16 %.2e", f32, bf16);
    cr_assert_leq(f32, TRAINED_F32_TOL, "f32: relative error %.3g against HF", f32);
    cr_assert_leq(bf16, TRAINED_BF16_TOL, "bf16: relative error %.3g against HF", bf16);
    free(out);
    trained_free(&t);
}

/* Both sequences through the cache at once: prefill in chunks of 24 and 17 tokens (blocks of
 * 16: chunks end mid-block), the last 12 tokens of each one at a time; every output row against
 * HF's (worst row and all rows norm-wise); float32 and bf16 caches also bit for bit against
 * the engine's own causal forward (`same`). */
static void steps(trained *t, mha_precision prec, mha_kv_type kv, double tol)
{
    const int S = t->S, d = t->d, bs = 16, max_blocks = (S + bs - 1) / bs;
    float *same = malloc((size_t)2 * S * d * sizeof *same);
    if (forward_error(t, prec, same) > tol) /* forward_error asserts the padding; the bound is forward_reproduces_hf's */
        cr_log_info("the forward itself is past %g", tol);
    mha_config cfg;
    mha_engine *e = trained_engine(t, prec, kv, &cfg);
    mha_kv_cache *c;
    cr_assert_eq(mha_kv_cache_create(&cfg, 2 * max_blocks, bs, 0, &c), MHA_OK);
    int32_t table[2 * 16], past[2] = {0, 0}, add[2];
    cr_assert_leq(max_blocks, 16);
    for (int i = 0; i < 2 * max_blocks; i++) /* the second sequence's blocks first */
        table[i] = (i + max_blocks) % (2 * max_blocks);
    float *x = malloc((size_t)2 * 24 * d * sizeof *x), *out = malloc((size_t)2 * 24 * d * sizeof *out);
    float *got = calloc((size_t)2 * S * d, sizeof *got);
    double worst = 0;
    while (past[0] < t->len[0] || past[1] < t->len[1]) {
        size_t rows = 0;
        for (int b = 0; b < 2; b++) {
            const int left = t->len[b] - past[b], chunk = b ? 17 : 24;
            add[b] = left > 12 ? (left - 12 < chunk ? left - 12 : chunk) : left > 0;
            memcpy(x + rows * d, t->x + ((size_t)b * S + past[b]) * d, (size_t)add[b] * d * sizeof *x);
            rows += (size_t)add[b];
        }
        const mha_step st = {.n_seqs = 2, .n_past = past, .n_new = add, .blocks = table, .max_blocks = max_blocks, .x = x};
        cr_assert_eq(mha_step_forward(e, c, &st, out), MHA_OK, "%s", mha_engine_last_error(e));
        rows = 0;
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < add[b]; i++, rows++) {
                const size_t at = ((size_t)b * S + past[b] + i) * d;
                memcpy(got + at, out + rows * d, (size_t)d * sizeof *got);
                const double r = rel(got + at, t->want + at, (size_t)d);
                worst = r > worst ? r : worst;
                if (kv != MHA_KV_INT8) {
                    const long f = first_bit_difference(got + at, same + at, (size_t)d);
                    cr_assert_eq(f, -1, "%s, sequence %d, position %d, feature %ld: %a (step) vs %a (forward)",
                                 mha_engine_isa(e), b, past[b] + i, f, got[at + (f < 0 ? 0 : f)], same[at + (f < 0 ? 0 : f)]);
                }
            }
        past[0] += add[0], past[1] += add[1];
    }
    const double all = rel(got, t->want, (size_t)2 * S * d);
    cr_log_info("SmolLM2 layer 26, steps, %s engine, %s cache: %.2e against HF (worst row %.2e)", mha_precision_name(prec),
                mha_kv_type_name(cfg.kv_type), all, worst);
    cr_assert_leq(all, tol, "%s engine, %s cache: relative error %.3g against HF", mha_precision_name(prec),
                  mha_kv_type_name(cfg.kv_type), all);
    free(x), free(out), free(got), free(same);
    mha_kv_cache_free(c);
    mha_free(e);
}

/* Both precisions' engines on a cache of type kv, each against its bound. */
static void steps_in_both_precisions(mha_kv_type kv, double f32_tol, double bf16_tol)
{
    trained t;
    trained_load(&t);
    steps(&t, MHA_PRECISION_F32, kv, f32_tol);
    steps(&t, MHA_PRECISION_BF16, kv, bf16_tol);
    trained_free(&t);
}

Test(trained, steps_through_the_cache_reproduce_hf, .timeout = 120)
{
    steps_in_both_precisions(MHA_KV_AUTO, TRAINED_F32_TOL, TRAINED_BF16_TOL);
}

Test(trained, an_int8_cache_is_within_1e_2_of_hf, .timeout = 120)
{
    steps_in_both_precisions(MHA_KV_INT8, TRAINED_INT8_TOL, TRAINED_INT8_TOL);
}
