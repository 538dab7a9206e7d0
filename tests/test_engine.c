/* test_engine.c — mha_forward against the double-precision reference over a table of shapes,
 * masks, biases and layouts, and the properties attention must have. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "attention.h"
#include "config.h"
#include "helpers.h"
#include "isa/isa.h"

/* fp32 GEMMs over k ≤ 512 terms and a ~2-ulp exp give relative errors near 1e-6 on
 * unit-scale inputs; 1e-5 leaves a margin of ten without hiding a wrong mask or head. */
#define REL_TOL 1e-5

enum { M_NONE = 0, M_CAUSAL = 1, M_KVLEN = 2, M_QLEN = 4, M_EXPLICIT = 8 };

typedef struct fcase {
    char name[40]; /* an array: Criterion copies parameters into a new process */
    int d, h, batch, seq_q, seq_kv;
    int cross;   /* 0 self, 1 separate k and v, 2 k = v */
    int bias;
    mha_layout layout;
    int masks;   /* M_* bits */
    int q_block; /* 0: the engine's choice */
    int threads;
    int kvh;     /* 0: heads */
    int rope;    /* mha_rope_style */
    int scaling; /* mha_rope_scaling */
    int rdim;    /* rotary_dim, 0: d_k */
    int window;
    int dk;      /* head_dim, 0: d / h */
    unsigned variants; /* V_* bits (helpers.h): scale, softcap, sinks, QK-norm, ALiBi */
} fcase;

/* RoPE parameters of the decoder cases: small original contexts, so that llama3's three bands
 * and yarn's ramp all fall among the frequencies of a small head. */
#define YARN_EXACT 4 /* a case's scaling: yarn with truncate off (gpt-oss) */
static mha_rope rope_of(const fcase *c)
{
    const int exact = c->scaling == YARN_EXACT;
    mha_rope r = {.style = (mha_rope_style)c->rope, .theta = 10000.0f, .rotary_dim = c->rdim,
                  .scaling = exact ? MHA_ROPE_SCALING_YARN : (mha_rope_scaling)c->scaling, .factor = 1.0f,
                  .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .beta_fast = 32.0f, .beta_slow = 1.0f,
                  .truncate = !exact};
    if (c->scaling == MHA_ROPE_SCALING_LINEAR)
        r.factor = 4.0f;
    if (c->scaling == MHA_ROPE_SCALING_LLAMA3)
        r.theta = 500000.0f, r.factor = 8.0f, r.original_max_position = 64;
    if (r.scaling == MHA_ROPE_SCALING_YARN)
        r.factor = 4.0f, r.original_max_position = 64;
    return r;
}

static void apply_masks(problem *p, int masks, uint64_t seed)
{
    rng r = {seed};
    p->causal = (masks & M_CAUSAL) != 0;
    if (masks & (M_KVLEN | M_QLEN)) {
        int32_t *ql = malloc(sizeof *ql * p->batch), *kl = malloc(sizeof *kl * p->batch);
        for (int b = 0; b < p->batch; b++) {
            /* sequence 0 keeps full length; others random, including 0 */
            ql[b] = b == 0 ? p->seq_q : (int32_t)(rng_next(&r) % (uint64_t)(p->seq_q + 1));
            kl[b] = b == 0 ? p->seq_kv : (int32_t)(rng_next(&r) % (uint64_t)(p->seq_kv + 1));
        }
        if (masks & M_QLEN) p->q_len = ql; else free(ql);
        if (masks & M_KVLEN) p->kv_len = kl; else free(kl);
    }
    if (masks & M_EXPLICIT) {
        p->mask = malloc((size_t)p->seq_q * p->seq_kv);
        for (int i = 0; i < p->seq_q; i++)
            for (int j = 0; j < p->seq_kv; j++)
                /* row 1 fully hidden: it must come out as zeros, never NaN */
                p->mask[(size_t)i * p->seq_kv + j] = i == 1 ? 0 : (rng_next(&r) % 4 != 0);
    }
}

/* The fields after threads (GQA, RoPE, window) are 0 where a case leaves them out. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static fcase cases[] = {
        {"reference quick test", 512, 8, 2, 10, 10, 0, 1, MHA_LAYOUT_XW, M_NONE, 0, 2},
        {"odd sizes", 96, 6, 3, 37, 37, 0, 1, MHA_LAYOUT_XW, M_NONE, 0, 2},
        {"S=1", 64, 4, 2, 1, 1, 0, 1, MHA_LAYOUT_XW, M_NONE, 0, 1},
        {"d_k = 10", 40, 4, 2, 19, 19, 0, 1, MHA_LAYOUT_XW, M_NONE, 0, 2},
        {"cross", 64, 4, 2, 7, 23, 1, 1, MHA_LAYOUT_XW, M_NONE, 0, 2},
        {"cross k = v", 64, 4, 2, 13, 5, 2, 1, MHA_LAYOUT_XW, M_NONE, 0, 2},
        {"causal", 64, 2, 2, 33, 33, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 8, 2},
        {"causal cross, seq_kv > seq_q", 64, 4, 2, 10, 25, 1, 1, MHA_LAYOUT_XW, M_CAUSAL, 4, 2},
        {"causal cross, seq_q > seq_kv", 64, 4, 2, 20, 8, 1, 1, MHA_LAYOUT_XW, M_CAUSAL, 4, 2},
        {"key padding", 64, 4, 4, 17, 17, 0, 1, MHA_LAYOUT_XW, M_KVLEN, 0, 2},
        {"query lengths", 64, 4, 4, 17, 17, 0, 1, MHA_LAYOUT_XW, M_QLEN, 0, 2},
        {"explicit mask", 64, 4, 2, 12, 12, 0, 1, MHA_LAYOUT_XW, M_EXPLICIT, 0, 2},
        {"all masks, cross", 48, 3, 4, 21, 30, 1, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN | M_QLEN | M_EXPLICIT, 8, 3},
        {"ragged self, causal", 64, 4, 5, 29, 29, 0, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN | M_QLEN, 8, 2},
        {"no bias, torch layout", 64, 4, 2, 11, 11, 0, 0, MHA_LAYOUT_TORCH, M_NONE, 0, 2},
        {"bias, torch layout, cross", 64, 8, 2, 9, 14, 1, 1, MHA_LAYOUT_TORCH, M_KVLEN, 0, 2},
        {"many query blocks", 256, 4, 2, 300, 300, 0, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN, 32, 2},
        {"three threads", 128, 8, 3, 40, 40, 0, 1, MHA_LAYOUT_XW, M_KVLEN, 16, 3},
        /* rows longer than MHA_KV_CHUNK keys: the online softmax over key chunks */
        {"long rows, cross", 32, 2, 2, 40, 1300, 1, 1, MHA_LAYOUT_XW, M_KVLEN, 0, 2},
        {"long rows, all masks", 32, 2, 2, 1100, 1100, 0, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN | M_QLEN | M_EXPLICIT, 0, 2},
        /* decoder attention: grouped-query heads, rotary embeddings, sliding windows */
        {"GQA 8/2", 128, 8, 2, 19, 19, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 2},
        {"MQA, torch layout, ragged", 96, 6, 3, 23, 23, 0, 1, MHA_LAYOUT_TORCH, M_CAUSAL | M_KVLEN | M_QLEN, 8, 2, 1},
        {"GQA cross, k = v", 64, 4, 2, 7, 30, 2, 1, MHA_LAYOUT_XW, M_NONE, 0, 2, 2},
        {"GQA cross, separate k v", 64, 4, 2, 9, 17, 1, 0, MHA_LAYOUT_TORCH, M_KVLEN, 0, 2, 2},
        {"RoPE neox", 64, 4, 2, 25, 25, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 0, MHA_ROPE_NEOX},
        {"RoPE gptj, partial", 96, 4, 2, 21, 21, 0, 0, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 0, MHA_ROPE_GPTJ, 0, 16},
        {"RoPE neox, partial, GQA", 128, 8, 2, 17, 17, 0, 1, MHA_LAYOUT_TORCH, M_CAUSAL, 0, 2, 4, MHA_ROPE_NEOX, 0, 8},
        {"RoPE linear", 64, 2, 2, 40, 40, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 0, MHA_ROPE_NEOX, MHA_ROPE_SCALING_LINEAR},
        {"RoPE llama3", 128, 2, 2, 70, 70, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 1, MHA_ROPE_NEOX, MHA_ROPE_SCALING_LLAMA3},
        {"RoPE yarn", 128, 2, 2, 70, 70, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 0, MHA_ROPE_NEOX, MHA_ROPE_SCALING_YARN},
        {"RoPE yarn untruncated", 128, 2, 2, 70, 70, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 0, MHA_ROPE_NEOX, YARN_EXACT},
        {"RoPE cross, seq_kv > seq_q", 64, 4, 2, 6, 20, 1, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 2, MHA_ROPE_NEOX},
        {"RoPE cross, seq_q > seq_kv", 64, 4, 2, 20, 6, 1, 1, MHA_LAYOUT_XW, M_NONE, 0, 2, 0, MHA_ROPE_GPTJ},
        {"window 5", 64, 4, 2, 33, 33, 0, 1, MHA_LAYOUT_XW, M_NONE, 8, 2, 0, 0, 0, 0, 5},
        {"window 16, GQA, RoPE, ragged", 128, 8, 3, 61, 61, 0, 1, MHA_LAYOUT_XW, M_KVLEN | M_QLEN, 16, 3, 2,
         MHA_ROPE_NEOX, 0, 0, 16},
        {"window 1", 32, 2, 2, 9, 9, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 1, 0, 0, 0, 0, 1},
        {"window cross, explicit mask", 64, 4, 2, 12, 30, 1, 1, MHA_LAYOUT_XW, M_EXPLICIT, 4, 2, 0, 0, 0, 0, 7},
        {"window long rows", 32, 2, 2, 1300, 1300, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 1, MHA_ROPE_NEOX, 0, 0, 700},
        /* heads of head_dim, not d / h (Qwen3, Gemma 2, gpt-oss): Q wider or narrower than d */
        {"head_dim 40 > d/h", 96, 4, 2, 21, 21, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 2, MHA_ROPE_NEOX, 0, 0, 0, 40},
        {"head_dim 8 < d/h, torch", 128, 8, 2, 17, 17, 0, 1, MHA_LAYOUT_TORCH, M_KVLEN, 0, 2, 0, 0, 0, 0, 0, 8},
        {"head_dim, cross, d%h != 0", 100, 6, 2, 9, 30, 1, 0, MHA_LAYOUT_TORCH, M_NONE, 0, 2, 3, MHA_ROPE_GPTJ, 0, 0, 0,
         24},
        {"head_dim, long rows", 48, 2, 2, 300, 300, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 1, MHA_ROPE_NEOX, 0, 0, 0,
         272},
        /* the pieces current models add inside attention (issue 21) */
        {"scale, softcap (Gemma 2)", 128, 4, 2, 23, 23, 0, 0, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 2, MHA_ROPE_NEOX, 0, 0, 0,
         64, V_SCALE | V_SOFTCAP},
        {"softcap, window, long rows", 32, 2, 2, 700, 700, 0, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN, 0, 2, 1,
         MHA_ROPE_NEOX, 0, 0, 300, 0, V_SOFTCAP},
        {"softcap, cross, explicit mask", 64, 4, 2, 12, 30, 1, 1, MHA_LAYOUT_TORCH, M_EXPLICIT, 4, 2, 0, 0, 0, 0, 0, 0,
         V_SOFTCAP},
        {"sinks, window, GQA (gpt-oss)", 96, 6, 2, 31, 31, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 8, 2, 2, MHA_ROPE_NEOX, 0, 0,
         8, 16, V_SINKS},
        {"sinks, ragged, all masks", 48, 3, 4, 21, 30, 1, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN | M_QLEN | M_EXPLICIT, 8,
         3, 0, 0, 0, 0, 0, 0, V_SINKS},
        {"sinks, long rows", 32, 2, 2, 40, 1300, 1, 1, MHA_LAYOUT_XW, M_KVLEN, 0, 2, 0, 0, 0, 0, 0, 0, V_SINKS},
        {"QK-norm (Qwen3)", 64, 4, 2, 25, 25, 0, 0, MHA_LAYOUT_TORCH, M_CAUSAL, 0, 2, 2, MHA_ROPE_NEOX, 0, 0, 0, 32,
         V_QK_NORM},
        {"QK-norm 1 + w (Gemma 3), cross", 64, 4, 2, 9, 30, 1, 1, MHA_LAYOUT_XW, M_KVLEN, 0, 2, 1, MHA_ROPE_GPTJ, 0, 0,
         0, 0, V_QK_NORM_GEMMA},
        {"QK-norm, MHA fused Q|K|V", 64, 4, 2, 19, 19, 0, 1, MHA_LAYOUT_XW, M_NONE, 0, 2, 0, MHA_ROPE_NEOX, 0, 0, 0, 0,
         V_QK_NORM},
        {"QK-norm full (OLMo 2), fused", 64, 4, 2, 25, 25, 0, 0, MHA_LAYOUT_TORCH, M_CAUSAL, 0, 2, 0, MHA_ROPE_NEOX, 0,
         0, 0, 0, V_QK_NORM_FULL},
        {"QK-norm full, GQA, head_dim, cross", 64, 4, 3, 9, 30, 1, 1, MHA_LAYOUT_XW, M_KVLEN | M_QLEN, 0, 2, 2,
         MHA_ROPE_GPTJ, 0, 0, 0, 24, V_QK_NORM_FULL | V_SINKS},
        {"QK-norm full 1 + w, k = v, long", 48, 3, 2, 40, 300, 2, 1, MHA_LAYOUT_XW, M_KVLEN, 8, 2, 0, 0, 0, 0, 0, 0,
         V_QK_NORM_FULL | V_QK_NORM_GEMMA},
        {"ALiBi causal, 6 heads (BLOOM)", 96, 6, 2, 33, 33, 0, 1, MHA_LAYOUT_TORCH, M_CAUSAL | M_QLEN, 8, 2, 0, 0, 0,
         0, 0, 0, V_ALIBI},
        {"ALiBi bidirectional cross, 5 heads", 80, 5, 2, 13, 29, 1, 1, MHA_LAYOUT_XW, M_EXPLICIT | M_KVLEN, 0, 2, 0, 0,
         0, 0, 0, 0, V_ALIBI},
        {"ALiBi, window, long rows, GQA", 64, 4, 2, 600, 600, 0, 1, MHA_LAYOUT_XW, M_CAUSAL, 0, 2, 2, 0, 0, 0, 260, 0,
         V_ALIBI | V_SOFTCAP | V_SINKS},
        {"every variant with RoPE", 96, 4, 3, 300, 300, 0, 1, MHA_LAYOUT_XW, M_CAUSAL | M_KVLEN | M_QLEN, 16, 3, 2,
         MHA_ROPE_NEOX, MHA_ROPE_SCALING_LLAMA3, 0, 100, 40, V_SCALE | V_SOFTCAP | V_SINKS | V_QK_NORM_GEMMA},
};
#pragma GCC diagnostic pop

ParameterizedTestParameters(engine, matches_reference)
{
    return cr_make_param_array(fcase, cases, sizeof cases / sizeof cases[0]);
}

/* One case through an engine of the given precision (bf16: kernel name), against the double
 * reference: out and attn within tol, every element written, padded rows exactly 0. The
 * relative errors measured go to err[0..2]: out, attn, out without attn. */
static void check_case(const fcase *c, mha_precision precision, const char *kernel, double tol, double err[3])
{
    problem p;
    problem_make(&p, c->d, c->h, c->batch, c->seq_q, c->seq_kv, c->bias, c->cross, 1234);
    apply_masks(&p, c->masks, 99);
    if (c->kvh)
        problem_set_kv_heads(&p, c->kvh, 77);
    if (c->dk)
        problem_set_head_dim(&p, c->dk, 78);
    p.rope = rope_of(c);
    p.window = c->window;
    problem_set_variants(&p, c->variants, 79);

    mha_config cfg;
    problem_config(&p, &cfg, c->threads);
    cfg.q_block = c->q_block;
    cfg.precision = precision;
    snprintf(cfg.bf16_kernel, sizeof cfg.bf16_kernel, "%s", kernel);
    mha_engine *e = NULL;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK, "%s: create", c->name);
    float *scratch;
    mha_weights w = problem_weights(&p, c->layout, &scratch);
    cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
    free(scratch);

    size_t n_out = (size_t)p.batch * p.seq_q * p.d, n_attn = (size_t)p.batch * p.h * p.seq_q * p.seq_kv;
    float *out = malloc(n_out * sizeof *out), *attn = malloc(n_attn * sizeof *attn);
    double *ref = malloc(n_out * sizeof *ref), *ref_attn = malloc(n_attn * sizeof *ref_attn);
    /* poison: every element must be written */
    memset(out, 0xff, n_out * sizeof *out);
    memset(attn, 0xff, n_attn * sizeof *attn);
    mha_input in = problem_input(&p);
    cr_assert_eq(mha_forward(e, &in, out, attn), MHA_OK, "%s: forward", c->name);
    reference_mha(&p, ref, ref_attn);

    for (size_t i = 0; i < n_out; i++)
        cr_assert(isfinite(out[i]), "%s: out[%zu] = %g is not finite", c->name, i, out[i]);
    const char *what = mha_engine_kernel(e);
    double err0 = rel_error(out, ref, n_out), err_attn = rel_error(attn, ref_attn, n_attn);
    cr_expect_leq(err0, tol, "%s (%s): out relative error %.3g > %g", c->name, what, err0, tol);
    cr_expect_leq(err_attn, tol, "%s (%s): attn relative error %.3g > %g", c->name, what, err_attn, tol);
    /* without the attention weights, rows longer than MHA_KV_CHUNK go through the online
     * softmax in key chunks: the same bound */
    float *out2 = malloc(n_out * sizeof *out2);
    memset(out2, 0xff, n_out * sizeof *out2);
    cr_assert_eq(mha_forward(e, &in, out2, NULL), MHA_OK, "%s: forward without attn", c->name);
    double err2 = rel_error(out2, ref, n_out);
    cr_expect_leq(err2, tol, "%s (%s): out (no attn) relative error %.3g > %g", c->name, what, err2, tol);
    /* rows within one key chunk: the same sums either way, bit for bit (bf16: probabilities
     * rounded and packed row by row as they are exp'd, or after the block when the weights
     * are wanted) */
    if (p.seq_kv <= MHA_KV_CHUNK) {
        long at = first_bit_difference(out, out2, n_out);
        cr_expect_eq(at, -1, "%s (%s): out[%ld] differs with and without the attention weights", c->name, what, at);
    }
    err[0] = err0, err[1] = err_attn, err[2] = err2;
    /* rows past a query length are exactly 0 */
    for (int b = 0; p.q_len && b < p.batch; b++)
        for (size_t i = (size_t)p.q_len[b] * p.d; i < (size_t)p.seq_q * p.d; i++) {
            cr_assert_eq(out[(size_t)b * p.seq_q * p.d + i], 0.0f, "%s: padded row not zero", c->name);
            cr_assert_eq(out2[(size_t)b * p.seq_q * p.d + i], 0.0f, "%s: padded row not zero", c->name);
        }

    free(out), free(out2), free(attn), free(ref), free(ref_attn);
    mha_free(e);
    problem_free(&p);
}

ParameterizedTest(fcase *c, engine, matches_reference, .timeout = 60)
{
    double err[3];
    check_case(c, MHA_PRECISION_F32, "", REL_TOL, err);
}

/* bf16 operands carry a relative rounding of up to 2^-9 each; through the projections, scores,
 * probabilities and output projection the errors measured on these cases stay below 4e-3
 * (perf/RESULTS.md lists the worst); DESIGN.md's contract is 1e-2. */
#define BF16_TOL 1e-2

/* A case on one bf16 kernel (its index in the table under test). */
typedef struct fcase_on {
    fcase c;
    int kernel;
} fcase_on;

/* Every case on every bf16 kernel of the table under test (test_isa; "" the widest this CPU
 * runs): an instance per kernel, so a kernel this CPU cannot run (AMX without AMX) is
 * Criterion's skip, counted as such. */
ParameterizedTestParameters(engine, bf16_matches_reference)
{
    static fcase_on on[sizeof cases / sizeof cases[0] * 8];
    const mha_isa *isa = mha_isa_auto_table();
    for (int t = 0; t < mha_isa_count; t++)
        if (strcmp(mha_isa_tables[t]->name, test_isa()) == 0)
            isa = mha_isa_tables[t];
    size_t n = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int k = 0; k < 8 && isa->bf16[k]; k++)
            on[n++] = (fcase_on){cases[i], k};
    return cr_make_param_array(fcase_on, on, n);
}

ParameterizedTest(fcase_on *p, engine, bf16_matches_reference, .timeout = 120)
{
    const char *why = NULL;
    const mha_isa *isa = isa_runnable(test_isa(), &why);
    if (!isa)
        cr_skip_test("isa %s: %s", test_isa(), why);
    const char *name = isa->bf16[p->kernel]->name;
    mha_config probe;
    config_init(&probe);
    probe.precision = MHA_PRECISION_BF16;
    snprintf(probe.bf16_kernel, sizeof probe.bf16_kernel, "%s", name);
    char no[256];
    if (mha_config_check(&probe, no, sizeof no) != MHA_OK)
        cr_skip_test("%s on bf16 kernel %s: %s", p->c.name, name, no);
    double err[3];
    check_case(&p->c, MHA_PRECISION_BF16, name, BF16_TOL, err);
    cr_log_info("%s, %s: out %.2e, attn %.2e, out without attn %.2e", p->c.name, name, err[0], err[1], err[2]);
}

/* Fixture-free helpers for the property tests. */
static float *run(mha_engine *e, const problem *p, float *attn)
{
    float *out = malloc((size_t)p->batch * p->seq_q * p->d * sizeof *out);
    mha_input in = problem_input(p);
    cr_assert_eq(mha_forward(e, &in, out, attn), MHA_OK);
    return out;
}

Test(engine, attention_rows_sum_to_one, .timeout = 30)
{
    problem p;
    problem_make(&p, 64, 4, 3, 25, 25, 1, 0, 7);
    apply_masks(&p, M_CAUSAL | M_KVLEN | M_EXPLICIT, 5);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_XW);
    size_t n_attn = (size_t)p.batch * p.h * p.seq_q * p.seq_kv;
    float *attn = malloc(n_attn * sizeof *attn);
    free(run(e, &p, attn));
    for (int b = 0; b < p.batch; b++)
        for (int h = 0; h < p.h; h++)
            for (int i = 0; i < p.seq_q; i++) {
                const float *row = attn + (((size_t)b * p.h + h) * p.seq_q + i) * p.seq_kv;
                int any = 0;
                double sum = 0;
                for (int j = 0; j < p.seq_kv; j++) {
                    int vis = j < p.kv_len[b] && j <= i && p.mask[(size_t)i * p.seq_kv + j];
                    any |= vis;
                    if (!vis)
                        cr_assert_eq(row[j], 0.0f, "hidden key (b %d, h %d, i %d, j %d) has weight %g", b, h, i, j, row[j]);
                    sum += row[j];
                }
                /* a sum of ≤ 25 fp32 weights each within 2 ulp: 1e-5 is loose enough */
                if (any)
                    cr_assert(fabs(sum - 1.0) <= 1e-5, "row (b %d, h %d, i %d) sums to %.9g", b, h, i, sum);
                else
                    cr_assert_eq(sum, 0.0, "row with no visible key sums to %g", sum);
            }
    free(attn);
    mha_free(e);
    problem_free(&p);
}

Test(engine, self_attention_is_permutation_equivariant, .timeout = 30)
{
    problem p;
    problem_make(&p, 64, 4, 1, 16, 16, 1, 0, 11);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_XW);
    float *out = run(e, &p, NULL);

    int perm[16];
    for (int i = 0; i < 16; i++)
        perm[i] = (i * 7 + 3) % 16; /* 7 is coprime with 16: a permutation */
    float *orig = malloc(16 * 64 * sizeof *orig);
    memcpy(orig, p.q, 16 * 64 * sizeof *orig);
    for (int i = 0; i < 16; i++)
        memcpy(p.q + i * 64, orig + perm[i] * 64, 64 * sizeof *orig);
    float *out_perm = run(e, &p, NULL);
    /* Equal up to fp32 summation order in the softmax and A·V: 1e-5 relative per row. */
    for (int i = 0; i < 16; i++) {
        double num = 0, den = 0;
        for (int c = 0; c < 64; c++) {
            double diff = out_perm[i * 64 + c] - out[perm[i] * 64 + c];
            num += diff * diff;
            den += (double)out[perm[i] * 64 + c] * out[perm[i] * 64 + c];
        }
        cr_assert_leq(sqrt(num / den), 1e-5, "row %d does not follow its token", i);
    }
    free(orig), free(out), free(out_perm);
    mha_free(e);
    problem_free(&p);
}

Test(engine, causal_outputs_ignore_future_tokens, .timeout = 30)
{
    problem p;
    problem_make(&p, 64, 4, 2, 40, 40, 1, 0, 13);
    p.causal = 1;
    mha_config cfg;
    problem_config(&p, &cfg, 2);
    cfg.q_block = 16; /* token 20 sits inside a block, so the block's skipping is exercised */
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    float *scratch;
    mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
    cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
    float *before = run(e, &p, NULL);
    rng r = {77};
    for (int b = 0; b < 2; b++)
        fill_uniform(p.q + ((size_t)b * 40 + 21) * 64, 19 * 64, -3.0f, 3.0f, &r); /* tokens 21.. */
    float *after = run(e, &p, NULL);
    for (int b = 0; b < 2; b++) {
        long i = first_bit_difference(before + (size_t)b * 40 * 64, after + (size_t)b * 40 * 64, 21 * 64);
        cr_assert_eq(i, -1, "sequence %d: output %ld (token %ld) changed with future tokens", b, i, i / 64);
    }
    free(scratch), free(before), free(after);
    mha_free(e);
    problem_free(&p);
}

Test(engine, valid_outputs_ignore_padded_tokens, .timeout = 30)
{
    problem p;
    problem_make(&p, 64, 4, 3, 24, 24, 1, 0, 17);
    p.q_len = malloc(3 * sizeof *p.q_len);
    p.kv_len = malloc(3 * sizeof *p.kv_len);
    const int32_t len[3] = {24, 9, 15};
    memcpy(p.q_len, len, sizeof len);
    memcpy(p.kv_len, len, sizeof len);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_XW);
    float *before = run(e, &p, NULL);
    rng r = {78};
    for (int b = 1; b < 3; b++)
        fill_uniform(p.q + ((size_t)b * 24 + len[b]) * 64, (size_t)(24 - len[b]) * 64, -5.0f, 5.0f, &r);
    float *after = run(e, &p, NULL);
    long i = first_bit_difference(before, after, (size_t)3 * 24 * 64);
    cr_assert_eq(i, -1, "output %ld changed with padded tokens", i);
    free(before), free(after);
    mha_free(e);
    problem_free(&p);
}

static void check_bitwise_across_threads(int d, int h, int batch, int seq, int q_block, int kvh, int window,
                                         mha_precision precision)
{
    problem p;
    problem_make(&p, d, h, batch, seq, seq, 1, 0, 19);
    apply_masks(&p, M_CAUSAL | M_KVLEN | M_QLEN, 3);
    if (kvh) { /* a decoder layer: grouped KV heads, RoPE, a window */
        problem_set_kv_heads(&p, kvh, 5);
        p.rope = (mha_rope){.style = MHA_ROPE_NEOX, .theta = 10000.0f};
        p.window = window;
    }
    size_t n = (size_t)p.batch * p.seq_q * p.d;
    float *first = NULL;
    for (int threads = 1; threads <= 4; threads++) {
        mha_config cfg;
        problem_config(&p, &cfg, threads);
        cfg.q_block = q_block;
        cfg.pinning = threads == 3 ? MHA_PIN_CLOSE : MHA_PIN_NONE;
        cfg.precision = precision;
        mha_engine *e;
        cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
        float *scratch;
        mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
        cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
        free(scratch);
        for (int rep = 0; rep < 3; rep++) {
            float *out = run(e, &p, NULL);
            if (!first) {
                first = out;
                continue;
            }
            long i = first_bit_difference(first, out, n);
            cr_assert_eq(i, -1, "threads %d, run %d: out[%ld] = %a, with 1 thread %a", threads, rep, i,
                         i >= 0 ? out[i] : 0.0f, i >= 0 ? first[i] : 0.0f);
            free(out);
        }
        mha_free(e);
    }
    free(first);
    problem_free(&p);
}

Test(engine, bitwise_identical_across_thread_counts, .timeout = 60)
{
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        const mha_precision pr = bf16 ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
        check_bitwise_across_threads(96, 6, 5, 45, 16, 0, 0, pr);
        check_bitwise_across_threads(32, 2, 3, 1200, 0, 0, 0, pr); /* long rows: key chunks */
        check_bitwise_across_threads(128, 8, 3, 70, 16, 2, 20, pr); /* GQA, RoPE, window */
    }
}

/* A bf16 engine holds half the weight bytes, and refuses steps (not built yet) with a message
 * rather than running them in float32 behind the caller's back. */
/* bf16 halves the packed weights and the KV cache; an engine on shared bf16 weights runs steps
 * on a bf16 cache (what they compute: test_step.c). */
Test(engine, bf16_halves_weights_and_cache, .timeout = 30)
{
    mha_config f32, bf;
    config_init(&f32);
    f32.d_model = 1024, f32.n_heads = 16, f32.max_seq_q = f32.max_seq_kv = 16, f32.threads = 1;
    bf = f32;
    bf.precision = MHA_PRECISION_BF16;
    mha_packed_weights *pw32 = NULL, *pw16 = NULL;
    problem p;
    problem_make(&p, 1024, 16, 1, 16, 16, 1, 0, 3);
    float *scratch;
    mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
    cr_assert_eq(mha_pack_weights(&f32, &w, &pw32), MHA_OK);
    cr_assert_eq(mha_pack_weights(&bf, &w, &pw16), MHA_OK);
    const double ratio = (double)mha_packed_weights_size(pw16) / (double)mha_packed_weights_size(pw32);
    cr_assert(ratio > 0.45 && ratio < 0.55, "bf16 weights are %.2f of float32's", ratio);
    mha_engine *e = NULL;
    cr_assert_eq(mha_create_shared(&f32, pw16, &e), MHA_ERR_CONFIG, "an f32 engine must refuse bf16 weights");
    cr_assert_eq(mha_create_shared(&bf, pw16, &e), MHA_OK);
    const double cache_ratio = (double)(mha_kv_cache_size(&bf, 9, 16, 0) - mha_kv_cache_size(&bf, 1, 16, 0)) /
                               (double)(mha_kv_cache_size(&f32, 9, 16, 0) - mha_kv_cache_size(&f32, 1, 16, 0));
    cr_assert_eq(cache_ratio, 0.5, "a bf16 cache block is %.3f of a float32 one", cache_ratio);
    mha_kv_cache *c = NULL;
    cr_assert_eq(mha_kv_cache_create(&bf, 1, 16, 0, &c), MHA_OK);
    int32_t past = 0, add = 1, block = 0;
    mha_step st = {.n_seqs = 1, .n_past = &past, .n_new = &add, .blocks = &block, .max_blocks = 1, .x = p.q};
    float out[1024];
    cr_assert_eq(mha_step_forward(e, c, &st, out), MHA_OK, "%s", mha_engine_last_error(e));
    past = 1;
    cr_assert_eq(mha_step_forward(e, c, &st, out), MHA_OK, "%s", mha_engine_last_error(e));
    mha_kv_cache_free(c);
    mha_free(e);
    mha_packed_weights_free(pw32), mha_packed_weights_free(pw16);
    free(scratch);
    problem_free(&p);
}

Test(engine, static_engine_matches_heap_engine, .timeout = 30)
{
    problem p;
    problem_make(&p, 64, 4, 2, 10, 10, 1, 0, 23);
    mha_config cfg;
    problem_config(&p, &cfg, 2);
    size_t size = mha_workspace_size(&cfg);
    cr_assert_gt(size, 0);
    void *ws = aligned_alloc(64, (size + 63) / 64 * 64);
    mha_engine *s;
    cr_assert_eq(mha_create_static(&cfg, ws, size, &s), MHA_OK);
    float *scratch;
    mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
    cr_assert_eq(mha_set_weights(s, &w), MHA_OK);
    mha_engine *h = engine_for(&p, 2, MHA_LAYOUT_XW);
    float *a = run(s, &p, NULL), *b = run(h, &p, NULL);
    cr_assert_eq(first_bit_difference(a, b, (size_t)2 * 10 * 64), -1);
    mha_free(s); /* a static engine's memory stays the caller's */
    mha_free(h);
    free(ws), free(a), free(b), free(scratch);
    problem_free(&p);
}

Test(engine, forward_calls_no_allocator, .timeout = 30)
{
    problem p;
    problem_make(&p, 128, 8, 4, 50, 50, 1, 0, 29);
    apply_masks(&p, M_CAUSAL | M_KVLEN | M_QLEN | M_EXPLICIT, 4);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_XW);
    size_t n = (size_t)p.batch * p.seq_q * p.d;
    float *out = malloc(n * sizeof *out), *attn = malloc((size_t)p.batch * p.h * p.seq_q * p.seq_kv * sizeof *attn);
    mha_input in = problem_input(&p);
    long before = alloc_count();
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mha_forward(e, &in, out, i % 2 ? attn : NULL), MHA_OK);
    cr_assert_eq(alloc_count() - before, 0, "mha_forward called the allocator %ld times", alloc_count() - before);
    /* the counter does see the library: creating an engine allocates once */
    mha_free(engine_for(&p, 1, MHA_LAYOUT_XW));
    cr_assert_eq(alloc_count() - before, 1, "create should allocate its arena once");
    free(out), free(attn);
    mha_free(e);
    problem_free(&p);
}

Test(engine, arena_for_long_context_is_far_below_a_score_tensor)
{
    mha_config cfg;
    config_init(&cfg);
    cfg.d_model = 1024, cfg.n_heads = 16, cfg.max_batch = 1;
    cfg.max_seq_q = cfg.max_seq_kv = 8192, cfg.threads = 2;
    size_t score_tensor = (size_t)16 * 8192 * 8192 * sizeof(float); /* 4 GiB */
    size_t ws = mha_workspace_size(&cfg);
    cr_assert_gt(ws, 0);
    cr_assert_lt(ws, score_tensor / 32, "arena %zu bytes is not far below the %zu of a score tensor", ws, score_tensor);
}
