/* test_core.c — mha_core_forward, the attention core on given Q, K, V: the forward's attention
 * bit for bit, the double reference, invariance to the batch, threads and strides, bad input
 * refused with nothing written, no allocation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "bgemm.h"
#include "helpers.h"
#include "isa/isa.h"

/* fp32 products over at most a few hundred terms and a ~2-ulp exp on unit-scale data: near
 * 1e-6; 1e-5 leaves a margin of ten (test_engine.c's bound). bf16: the precision's contract
 * (mha.h, docs/precision.md) on unit-scale data. */
#define F32_TOL 1e-5
#define BF16_TOL 1e-2

enum { M_CAUSAL = 1, M_KVLEN = 2, M_QLEN = 4, M_EXPLICIT = 8 };

typedef struct ccase {
    const char *name;
    int h, kvh, dk, batch, seq_q, seq_kv, cross, masks, window;
    unsigned variants; /* V_SCALE, V_SOFTCAP, V_SINKS, V_ALIBI (helpers.h) */
} ccase;

/* Shapes that cross a key chunk (256), GQA and MQA (a group of 40: the core's tasks take
 * blocks of its heads), heads not a power of two, d_k not a multiple of any panel, every mask
 * and logit variant the core applies, and sequences of too few KV heads for the threads (the
 * core splits their rows). */
static const ccase cases[] = {
    {"bert-like, two key chunks", 4, 4, 64, 3, 300, 300, 0, 0, 0, 0},
    {"GQA 8/2, causal", 8, 2, 32, 2, 130, 130, 0, M_CAUSAL, 0, V_SCALE},
    {"MQA, window, softcap, sinks", 4, 1, 40, 2, 70, 70, 0, M_CAUSAL, 17, V_SOFTCAP | V_SINKS},
    {"ALiBi, ragged, explicit mask", 3, 3, 16, 3, 33, 33, 0, M_KVLEN | M_QLEN | M_EXPLICIT, 0, V_ALIBI},
    {"cross, few queries, key padding", 2, 2, 24, 2, 9, 300, 1, M_KVLEN, 0, 0},
    {"decode-like: one query, causal", 4, 2, 128, 2, 1, 260, 1, M_CAUSAL, 0, V_SINKS},
    {"three queries of 8 heads over 2: window, mask, ragged", 8, 2, 32, 3, 3, 300, 1,
     M_CAUSAL | M_EXPLICIT | M_QLEN | M_KVLEN, 40, V_ALIBI | V_SOFTCAP},
    {"MQA of 40 heads (core tasks of 10), sinks, ALiBi", 40, 1, 24, 2, 70, 70, 0, M_CAUSAL, 0, V_SINKS | V_ALIBI},
    {"one long causal sequence of MQA (its rows in parts over the tasks)", 4, 1, 48, 1, 700, 700, 0, M_CAUSAL, 0,
     V_SINKS | V_ALIBI},
    {"one sequence's queries at the end of longer keys, window (rows in parts)", 6, 2, 40, 1, 300, 800, 1, M_CAUSAL,
     150, V_SOFTCAP},
    {"one sequence of MQA, ragged, explicit mask (its rows one part: the mask's are the call's)", 4, 1, 32, 1, 200, 200,
     0, M_CAUSAL | M_EXPLICIT | M_QLEN | M_KVLEN, 0, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* The case's problem: d = h·dk (so an identity Wq is square), unit-scale inputs, masks and
 * variants drawn from seed; no bias. */
static void case_problem(const ccase *c, problem *p, uint64_t seed)
{
    const int d = c->h * c->dk;
    problem_make(p, d, c->h, c->batch, c->seq_q, c->seq_kv, 0, c->cross ? 2 : 0, seed);
    if (c->kvh != c->h)
        problem_set_kv_heads(p, c->kvh, seed ^ 1);
    problem_set_variants(p, c->variants, seed ^ 2);
    p->window = c->window;
    p->causal = (c->masks & M_CAUSAL) != 0;
    rng r = {seed ^ 3};
    if (c->masks & (M_KVLEN | M_QLEN)) {
        int32_t *ql = malloc(sizeof *ql * p->batch), *kl = malloc(sizeof *kl * p->batch);
        for (int b = 0; b < p->batch; b++) { /* sequence 0 whole, the others random, 0 included */
            ql[b] = b == 0 ? p->seq_q : (int32_t)(rng_next(&r) % (uint64_t)(p->seq_q + 1));
            kl[b] = b == 0 ? p->seq_kv : (int32_t)(rng_next(&r) % (uint64_t)(p->seq_kv + 1));
        }
        if (c->masks & M_QLEN) p->q_len = ql; else free(ql);
        if (c->masks & M_KVLEN) p->kv_len = kl; else free(kl);
    }
    if (c->masks & M_EXPLICIT) {
        p->mask = malloc((size_t)p->seq_q * p->seq_kv);
        for (int i = 0; i < p->seq_q; i++)
            for (int j = 0; j < p->seq_kv; j++) /* row 1 hidden whole: a zero row */
                p->mask[(size_t)i * p->seq_kv + j] = i == 1 ? 0 : rng_next(&r) % 4 != 0;
    }
}

/* The core's input over the problem's own buffers, read in HF's (batch, rows, heads, d_k)
 * layout: Q is the query input (d = h·dk), K the key input's first kvh·dk columns, V its last
 * kvh·dk: what selection weights project them to. */
static mha_core_input hf_input(const problem *p)
{
    const ptrdiff_t d = p->d, kvd = (ptrdiff_t)p->kvh * p->dk;
    return (mha_core_input){
        .batch = p->batch, .seq_q = p->seq_q, .seq_kv = p->seq_kv,
        .q = p->q, .k = p->k, .v = p->k + (d - kvd),
        .q_stride = {p->seq_q * d, p->dk, d}, .k_stride = {p->seq_kv * d, p->dk, d},
        .v_stride = {p->seq_kv * d, p->dk, d},
        .q_lengths = p->q_len, .kv_lengths = p->kv_len, .causal = p->causal, .mask = p->mask, .sinks = p->sinks,
    };
}

/* Weights that select: Wq = Wo = I, Wk the key input's first kvh·dk columns, Wv its last. */
static void selection_weights(problem *p)
{
    const size_t d = (size_t)p->d, kvd = (size_t)p->kvh * p->dk;
    memset(p->wq, 0, d * d * sizeof *p->wq);
    memset(p->wo, 0, d * d * sizeof *p->wo);
    memset(p->wk, 0, d * kvd * sizeof *p->wk);
    memset(p->wv, 0, d * kvd * sizeof *p->wv);
    for (size_t c = 0; c < d; c++)
        p->wq[c * d + c] = p->wo[c * d + c] = 1.0f;
    for (size_t c = 0; c < kvd; c++)
        p->wk[c * kvd + c] = 1.0f, p->wv[(d - kvd + c) * kvd + c] = 1.0f;
}

static float *sentinel_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    for (size_t i = 0; i < n; i++)
        x[i] = -7.25f;
    return x;
}

/* An engine of the problem in the given precision, its weights set (layout XW). */
static mha_engine *engine_in(const problem *p, int bf16)
{
    mha_config cfg;
    problem_config(p, &cfg, 2);
    cfg.precision = bf16 ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
    mha_engine *e = NULL;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    float *scratch;
    const mha_weights w = problem_weights(p, MHA_LAYOUT_XW, &scratch);
    cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
    free(scratch);
    return e;
}

/* With weights that only select (exact products), mha_forward's output is its attention
 * itself; the core on the same Q, K, V must give those bits, through HF's strides. bf16: the
 * selections are exact on the inputs rounded to bf16, which is what the core's packing rounds
 * them to, so the attention is the same; the forward's output projection then rounds it to
 * bf16, so the core's output rounded to bf16 must be the forward's output. */
Test(core, equals_the_forwards_attention_bit_for_bit, .timeout = 120)
{
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int ci = 0; ci < N_CASES; ci++) {
            const ccase *c = &cases[ci];
            problem p;
            case_problem(c, &p, 1000 + (uint64_t)ci);
            selection_weights(&p);
            mha_engine *e = engine_in(&p, bf16);
            const size_t n = (size_t)p.batch * p.seq_q * p.d;
            float *fwd = sentinel_floats(n), *core = sentinel_floats(n);
            mha_input in = problem_input(&p);
            cr_assert_eq(mha_forward(e, &in, fwd, NULL), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
            mha_core_input ci_ = hf_input(&p);
            const ptrdiff_t os[3] = {(ptrdiff_t)p.seq_q * p.d, p.dk, p.d};
            cr_assert_eq(mha_core_forward(e, &ci_, core, os), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
            for (size_t i = 0; bf16 && i < n; i++)
                core[i] = mha_bf16_float(mha_bf16_round(core[i]));
            const long at = first_bit_difference(fwd, core, n);
            cr_assert_eq(at, -1, "%s, %s (isa %s): element %ld: forward %a, core %a", c->name, bf16 ? "bf16" : "f32",
                         mha_engine_isa(e), at, (double)fwd[at < 0 ? 0 : at], (double)core[at < 0 ? 0 : at]);
            free(fwd), free(core);
            mha_free(e);
            problem_free(&p);
        }
}

/* Q, K, V in SDPA's (batch, heads, rows, d_k) layout (default strides) and in the problem's
 * (batch, rows, heads·d_k) for the reference. */
typedef struct sdpa { float *q, *k, *v; } sdpa;
static sdpa sdpa_of(const problem *p, uint64_t seed)
{
    rng r = {seed};
    const size_t nq = (size_t)p->batch * p->h * p->seq_q * p->dk, nk = (size_t)p->batch * p->kvh * p->seq_kv * p->dk;
    sdpa s = {malloc(nq * sizeof(float)), malloc(nk * sizeof(float)), malloc(nk * sizeof(float))};
    cr_assert(s.q && s.k && s.v);
    fill_uniform(s.q, nq, -1.0f, 1.0f, &r);
    fill_uniform(s.k, nk, -1.0f, 1.0f, &r);
    fill_uniform(s.v, nk, -1.0f, 1.0f, &r);
    return s;
}

/* Sequence b's heads × rows × d_k tensor at x as (rows, heads·d_k) doubles. */
static void to_rows(const float *x, int b, int heads, int rows, int dk, double *dst)
{
    for (int hd = 0; hd < heads; hd++)
        for (int i = 0; i < rows; i++)
            for (int c = 0; c < dk; c++)
                dst[((size_t)i * heads + hd) * dk + c] = x[(((size_t)b * heads + hd) * rows + i) * dk + c];
}

Test(core, matches_the_double_reference_in_both_precisions, .timeout = 120)
{
    for (int prec = 0; prec < 2; prec++)
        for (int ci = 0; ci < N_CASES; ci++) {
            const ccase *c = &cases[ci];
            problem p;
            case_problem(c, &p, 2000 + (uint64_t)ci);
            mha_config cfg;
            problem_config(&p, &cfg, 2);
            cfg.precision = prec ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
            mha_engine *e = NULL;
            cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
            sdpa s = sdpa_of(&p, 3000 + (uint64_t)ci);
            const int qd = p.h * p.dk, kvd = p.kvh * p.dk;
            const size_t n = (size_t)p.batch * p.h * p.seq_q * p.dk;
            float *out = sentinel_floats(n);
            mha_core_input in = {.batch = p.batch, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = s.q, .k = s.k, .v = s.v,
                                 .q_lengths = p.q_len, .kv_lengths = p.kv_len, .causal = p.causal, .mask = p.mask,
                                 .sinks = p.sinks};
            cr_assert_eq(mha_core_forward(e, &in, out, NULL), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
            double *Q = malloc((size_t)p.seq_q * qd * sizeof *Q), *K = malloc((size_t)p.seq_kv * kvd * sizeof *K);
            double *V = malloc((size_t)p.seq_kv * kvd * sizeof *V), *Z = malloc((size_t)p.seq_q * qd * sizeof *Z);
            double *want = malloc(n * sizeof *want);
            cr_assert(Q && K && V && Z && want);
            for (int b = 0; b < p.batch; b++) {
                to_rows(s.q, b, p.h, p.seq_q, p.dk, Q);
                to_rows(s.k, b, p.kvh, p.seq_kv, p.dk, K);
                to_rows(s.v, b, p.kvh, p.seq_kv, p.dk, V);
                reference_attention(&p, b, Q, K, V, Z, NULL);
                for (int hd = 0; hd < p.h; hd++) /* back to (batch, heads, rows, d_k) */
                    for (int i = 0; i < p.seq_q; i++)
                        memcpy(want + (((size_t)b * p.h + hd) * p.seq_q + i) * p.dk, Z + (size_t)i * qd + hd * p.dk,
                               (size_t)p.dk * sizeof *want);
            }
            const double err = rel_error(out, want, n), tol = prec ? BF16_TOL : F32_TOL;
            cr_assert(err <= tol, "%s, %s (isa %s): relative error %.3g > %.0e", c->name, prec ? "bf16" : "f32",
                      mha_engine_isa(e), err, tol);
            free(Q), free(K), free(V), free(Z), free(want), free(out);
            free(s.q), free(s.k), free(s.v);
            mha_free(e);
            problem_free(&p);
        }
}

/* A sequence's rows have the same bits alone or in a batch, on 1 or 3 threads, read through
 * SDPA's strides or HF's. */
Test(core, a_rows_bits_depend_on_its_sequence_alone, .timeout = 120)
{
    for (int prec = 0; prec < 2; prec++) {
        const ccase *c = &cases[3]; /* ragged, masked, ALiBi */
        problem p;
        case_problem(c, &p, 4000);
        mha_config cfg;
        problem_config(&p, &cfg, 3);
        cfg.precision = prec ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
        mha_engine *many = NULL, *one = NULL;
        cr_assert_eq(mha_create(&cfg, &many), MHA_OK);
        cfg.threads = 1;
        cr_assert_eq(mha_create(&cfg, &one), MHA_OK);
        sdpa s = sdpa_of(&p, 4001);
        const size_t per_q = (size_t)p.h * p.seq_q * p.dk, per_k = (size_t)p.kvh * p.seq_kv * p.dk;
        float *batch = sentinel_floats(per_q * p.batch), *alone = sentinel_floats(per_q);
        mha_core_input in = {.batch = p.batch, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = s.q, .k = s.k, .v = s.v,
                             .q_lengths = p.q_len, .kv_lengths = p.kv_len, .causal = p.causal, .mask = p.mask,
                             .sinks = p.sinks};
        cr_assert_eq(mha_core_forward(many, &in, batch, NULL), MHA_OK, "%s", mha_engine_last_error(many));
        for (int b = 0; b < p.batch; b++) {
            /* sequence b alone, its Q copied into HF's layout, its output written in HF's too */
            float *q = malloc(per_q * sizeof *q), *hf = sentinel_floats(per_q);
            for (int hd = 0; hd < p.h; hd++)
                for (int i = 0; i < p.seq_q; i++)
                    memcpy(q + ((size_t)i * p.h + hd) * p.dk, s.q + b * per_q + ((size_t)hd * p.seq_q + i) * p.dk,
                           (size_t)p.dk * sizeof *q);
            const ptrdiff_t hs[3] = {(ptrdiff_t)per_q, p.dk, (ptrdiff_t)p.h * p.dk};
            mha_core_input in1 = {.batch = 1, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = q, .k = s.k + b * per_k,
                                  .v = s.v + b * per_k, .q_stride = {hs[0], hs[1], hs[2]},
                                  .q_lengths = p.q_len ? p.q_len + b : NULL, .kv_lengths = p.kv_len ? p.kv_len + b : NULL,
                                  .causal = p.causal, .mask = p.mask, .sinks = p.sinks};
            cr_assert_eq(mha_core_forward(one, &in1, hf, hs), MHA_OK, "%s", mha_engine_last_error(one));
            for (int hd = 0; hd < p.h; hd++)
                for (int i = 0; i < p.seq_q; i++)
                    memcpy(alone + ((size_t)hd * p.seq_q + i) * p.dk, hf + ((size_t)i * p.h + hd) * p.dk,
                           (size_t)p.dk * sizeof *alone);
            const long at = first_bit_difference(batch + b * per_q, alone, per_q);
            cr_assert_eq(at, -1, "%s, sequence %d: element %ld differs alone on 1 thread", prec ? "bf16" : "f32", b, at);
            free(q), free(hf);
        }
        free(batch), free(alone), free(s.q), free(s.k), free(s.v);
        mha_free(many), mha_free(one);
        problem_free(&p);
    }
}

/* bf16 tensors (dtype MHA_DTYPE_BF16, a bf16 engine): the bits of the same values in float32
 * tensors, out rounded to bf16, on every case (few queries, GQA, masks, ragged, strides of HF's
 * layout for q and out) and an odd d_k (K and V copied element by element, not as pairs). */
Test(core, bf16_tensors_give_the_bits_of_their_values_in_float32, .timeout = 120)
{
    const ccase odd = {"odd d_k", 2, 1, 17, 2, 40, 40, 0, M_CAUSAL, 0, 0};
    for (int ci = 0; ci <= N_CASES; ci++) {
        const ccase *c = ci < N_CASES ? &cases[ci] : &odd;
        problem p;
        case_problem(c, &p, 7000 + (uint64_t)ci);
        mha_config cfg;
        problem_config(&p, &cfg, 2);
        cfg.precision = MHA_PRECISION_BF16;
        mha_engine *e = NULL;
        cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
        sdpa s = sdpa_of(&p, 7100 + (uint64_t)ci);
        const size_t nq = (size_t)p.batch * p.h * p.seq_q * p.dk, nk = (size_t)p.batch * p.kvh * p.seq_kv * p.dk;
        mha_bf16 *q16 = malloc(nq * sizeof *q16), *k16 = malloc(nk * sizeof *k16), *v16 = malloc(nk * sizeof *v16);
        mha_bf16 *out16 = malloc(nq * sizeof *out16);
        cr_assert(q16 && k16 && v16 && out16);
        for (size_t i = 0; i < nq; i++) /* the float32 tensors hold the bf16 values */
            q16[i] = mha_bf16_round(s.q[i]), s.q[i] = mha_bf16_float(q16[i]);
        for (size_t i = 0; i < nk; i++)
            k16[i] = mha_bf16_round(s.k[i]), s.k[i] = mha_bf16_float(k16[i]), v16[i] = mha_bf16_round(s.v[i]),
            s.v[i] = mha_bf16_float(v16[i]);
        float *out = sentinel_floats(nq);
        memset(out16, 0xee, nq * sizeof *out16);
        /* q (and out) in HF's (batch, rows, heads, d_k) layout: the same elements, other strides */
        const ptrdiff_t hs[3] = {(ptrdiff_t)p.seq_q * p.h * p.dk, p.dk, (ptrdiff_t)p.h * p.dk};
        mha_core_input in = {.batch = p.batch, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = s.q, .k = s.k, .v = s.v,
                             .q_stride = {hs[0], hs[1], hs[2]}, .q_lengths = p.q_len, .kv_lengths = p.kv_len,
                             .causal = p.causal, .mask = p.mask, .sinks = p.sinks};
        cr_assert_eq(mha_core_forward(e, &in, out, hs), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
        in.dtype = MHA_DTYPE_BF16, in.q = q16, in.k = k16, in.v = v16;
        cr_assert_eq(mha_core_forward(e, &in, out16, hs), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
        for (size_t i = 0; i < nq; i++)
            cr_assert_eq(out16[i], mha_bf16_round(out[i]), "%s (isa %s, kernel %s): element %zu: %#x, float32 %a",
                         c->name, mha_engine_isa(e), mha_engine_kernel(e), i, out16[i], (double)out[i]);
        free(q16), free(k16), free(v16), free(out16), free(out), free(s.q), free(s.k), free(s.v);
        mha_free(e);
        problem_free(&p);
    }
}

/* The core's few queries (a KV head's 1–4 rows per query head, one pass over the keys: on
 * avx2 and avx512 K's and V's rows read in place) give the bits of the same rows inside a query block:
 * the last query of each head alone against the last row of 8 (causal, bottom-right: the
 * same position), GQA 8 over 2, d_k 64, 300 keys (two chunks), float32 and bf16 tensors, both
 * precisions, on the suite's table (MHA_TEST_ISA). */
Test(core, few_queries_equal_the_same_rows_of_a_query_block, .timeout = 60)
{
    enum { H = 8, KVH = 2, DK = 64, SQ = 8, SKV = 300 };
    rng r = {9090};
    float *q = malloc(H * SQ * DK * sizeof *q), *k = malloc(KVH * SKV * DK * sizeof *k);
    float *v = malloc(KVH * SKV * DK * sizeof *v), *all = malloc(H * SQ * DK * sizeof *all);
    float *one = malloc(H * DK * sizeof *one);
    mha_bf16 *q16 = malloc(H * SQ * DK * sizeof *q16), *k16 = malloc(KVH * SKV * DK * sizeof *k16);
    mha_bf16 *v16 = malloc(KVH * SKV * DK * sizeof *v16), *all16 = malloc(H * SQ * DK * sizeof *all16);
    mha_bf16 *one16 = malloc(H * DK * sizeof *one16);
    cr_assert(q && k && v && all && one && q16 && k16 && v16 && all16 && one16);
    fill_uniform(q, H * SQ * DK, -1.0f, 1.0f, &r);
    fill_uniform(k, KVH * SKV * DK, -1.0f, 1.0f, &r);
    fill_uniform(v, KVH * SKV * DK, -1.0f, 1.0f, &r);
    for (int i = 0; i < H * SQ * DK; i++)
        q16[i] = mha_bf16_round(q[i]);
    for (int i = 0; i < KVH * SKV * DK; i++)
        k16[i] = mha_bf16_round(k[i]), v16[i] = mha_bf16_round(v[i]);
    for (int prec = 0; prec < 2; prec++)
        for (int dt = 0; dt <= prec; dt++) { /* bf16 tensors: bf16 engines only */
            mha_config cfg;
            config_init(&cfg); /* the table (MHA_TEST_ISA) and bf16 kernel the suite runs */
            cfg.d_model = 16, cfg.n_heads = H, cfg.n_kv_heads = KVH, cfg.head_dim = DK, cfg.bias = 0;
            cfg.max_batch = 1, cfg.max_seq_q = SQ, cfg.max_seq_kv = SKV, cfg.threads = 2;
            cfg.precision = prec ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
            mha_engine *e = NULL;
            cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
            mha_core_input in = {.batch = 1, .seq_q = SQ, .seq_kv = SKV, .dtype = dt ? MHA_DTYPE_BF16 : MHA_DTYPE_F32,
                                 .q = dt ? (const void *)q16 : q, .k = dt ? (const void *)k16 : k,
                                 .v = dt ? (const void *)v16 : v, .causal = 1};
            cr_assert_eq(mha_core_forward(e, &in, dt ? (void *)all16 : all, NULL), MHA_OK, "%s", mha_engine_last_error(e));
            /* each head's last query alone: SDPA's strides over the same tensor */
            in.seq_q = 1;
            in.q = dt ? (const void *)(q16 + (SQ - 1) * DK) : (const void *)(q + (SQ - 1) * DK);
            in.q_stride[0] = H * SQ * DK, in.q_stride[1] = SQ * DK, in.q_stride[2] = DK;
            cr_assert_eq(mha_core_forward(e, &in, dt ? (void *)one16 : one, NULL), MHA_OK, "%s", mha_engine_last_error(e));
            for (int h = 0; h < H; h++) {
                const size_t at = ((size_t)h * SQ + SQ - 1) * DK;
                const long d = dt ? (memcmp(one16 + h * DK, all16 + at, DK * sizeof *one16) ? 0 : -1)
                                  : first_bit_difference(one + h * DK, all + at, DK);
                cr_assert_eq(d, -1, "isa %s, %s engine, %s tensors, head %d: feature %ld differs from the block's row",
                             mha_engine_isa(e), prec ? "bf16" : "f32", dt ? "bf16" : "f32", h, d);
            }
            mha_free(e);
        }
    free(q), free(k), free(v), free(all), free(one), free(q16), free(k16), free(v16), free(all16), free(one16);
}

/* The order of the sums of the bf16 kernel named `name`. */
static mha_bk_order kernel_order(const char *name)
{
    for (int i = 0; i < mha_isa_count; i++)
        for (int j = 0; mha_isa_tables[i]->bf16[j]; j++)
            if (!strcmp(mha_isa_tables[i]->bf16[j]->name, name))
                return mha_isa_tables[i]->bf16[j]->order;
    cr_assert_fail("no bf16 kernel %s", name);
    return MHA_BK_EVEN_FIRST;
}

/* A bf16 A·V sum that flushes to −0 (FTZ) keeps that sign only while every later product is
 * −0: the kernels sum the chunk's k tile to its end, + 0 times the V of the keys past the
 * chunk (zero past the last key: the panels' room). The tables that run bf16 on the float32
 * stream sum the chunk alone and must end as the kernel would. One head of d_k 16, 100 keys;
 * rows 1 and 33 see keys 0 and 1 (the mask), their queries zero (both probabilities 1): V's
 * columns 0 and 1 hold 1.5·2⁻¹²⁶ and −1.75·2⁻¹²⁶ there (their sum flushes to −0), −1 on every
 * later key but key 50 of column 1 (+0.25); the rest random. A causal chunk's rows go by groups
 * of the bf16 kernel's 32, each to the k tile of the last key its rows see, within the chunk.
 * (c) 40 causal queries at positions 8–47 (92 queries, 100 keys): row 1's group (rows 0–31)
 * sees keys to 40 of the chunk's 48, its padding keys 40–63 real; (b) 40 causal queries from
 * position 0: row 33's group (rows 32–39) ends at key 40, the chunk's end, padding real; then
 * (a) 40 keys (kv_lengths): the chunk's tile padded past the last key (the scratch still
 * holding (b)'s V there). The row must be the model's sums in the engine kernel's order
 * (mha_bk_block_model) times 1/2. */
Test(core, a_sum_flushed_to_minus_zero_ends_as_the_bf16_kernel_ends_it, .timeout = 30)
{
    enum { DK = 16, S = 100, N = 40, ROW = 33 };
    const int kp = (int)mha_bk_kp(N);
    problem p;
    problem_make(&p, DK, 1, 1, S, S, 0, 0, 9000);
    mha_config cfg;
    problem_config(&p, &cfg, 1);
    cfg.precision = MHA_PRECISION_BF16;
    mha_engine *e = NULL;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    sdpa s = sdpa_of(&p, 9100);
    memset(s.q + DK, 0, DK * sizeof *s.q);
    memset(s.q + ROW * DK, 0, DK * sizeof *s.q);
    for (int j = 0; j < S; j++)
        for (int c = 0; c < 2; c++)
            s.v[(size_t)j * DK + c] = j == 0 ? 0x1.8p-126f : j == 1 ? -0x1.cp-126f : c == 1 && j == 50 ? 0.25f : -1.0f;
    for (size_t i = 0; i < (size_t)S * DK; i++) /* the values the kernels see */
        s.v[i] = mha_bf16_float(mha_bf16_round(s.v[i]));
    uint8_t mask[S * S];
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++)
            mask[i * S + j] = (i != 1 && i != ROW) || j < 2;
    const int32_t len = N;
    float *out = sentinel_floats((size_t)S * DK);
    for (int variant = 2; variant >= 0; variant--) {
        const int row = variant == 2 ? 1 : ROW;
        const mha_core_input in = {.batch = 1, .seq_q = variant == 2 ? S - 8 : S, .seq_kv = S, .q = s.q, .k = s.k,
                                   .v = s.v, .q_lengths = variant ? &len : NULL, .kv_lengths = variant ? NULL : &len,
                                   .causal = variant > 0, .mask = mask};
        cr_assert_eq(mha_core_forward(e, &in, out, NULL), MHA_OK, "%s", mha_engine_last_error(e));
        /* the model: E (1, 1, 0, …) in row 0 of an A panel, V's keys [0, kp) in a B panel (zero
         * past the last key) */
        mha_bf16 a[MHA_BT_M * 64] = {0}, b[64 * MHA_BT_N] = {0};
        a[0] = a[1] = mha_bf16_round(1.0f);
        for (int j = 0; j < kp && (variant || j < N); j++)
            for (int c = 0; c < DK; c++)
                b[mha_bk_b_index(j, c, (size_t)kp * MHA_BT_N)] = mha_bf16_round(s.v[(size_t)j * DK + c]);
        float acc[32 * 32];
        mha_bk_block_model(kernel_order(mha_engine_kernel(e)), 1, 1, kp / MHA_BT_K, a, b, (size_t)kp * MHA_BT_N, acc);
        for (int c = 0; c < DK; c++) {
            const float want = acc[c] * 0.5f, got = out[row * DK + c];
            cr_assert(memcmp(&want, &got, sizeof want) == 0, "(%c) isa %s, kernel %s: row %d, column %d: %a, the model %a",
                      'a' + variant, mha_engine_isa(e), mha_engine_kernel(e), row, c, (double)got, (double)want);
        }
    }
    free(out), free(s.q), free(s.k), free(s.v);
    mha_free(e);
    problem_free(&p);
}

/* V narrower than K (v_head_dim < head_dim: an MLA model's absorbed core, K of kv_lora + rope
 * features and V their first kv_lora) through the forward's query blocks and the few-query
 * pass: the double reference (V padded with zero features gives the same first dv outputs),
 * and V read from K's own rows (v = k, K's strides) the bits of V copied out of them. */
typedef struct vcase { const char *name; int h, kvh, dk, dv, batch, seq_q, seq_kv, masks; unsigned variants; } vcase;
static const vcase v_cases[] = {
    {"MLA-like: 8 heads over 1, K 72, V 64, causal, two key chunks", 8, 1, 72, 64, 2, 300, 300, M_CAUSAL, V_SCALE},
    {"MLA-like decode: one query over 260 keys", 8, 1, 72, 64, 2, 1, 260, M_CAUSAL, V_SINKS},
    {"three queries, GQA 4/2, K 40, V 24, ragged", 4, 2, 40, 24, 3, 3, 90, M_CAUSAL | M_KVLEN | M_QLEN, V_SOFTCAP},
    {"odd widths: K 17, V 9, explicit mask", 2, 1, 17, 9, 2, 40, 40, M_EXPLICIT, V_ALIBI},
};

/* K (kvh, seq_kv, dk) of sequence b with each row's first dv features, the rest zero: what
 * V = K's first dv features gives the reference once padded to dk. */
static void padded_v(const float *k, int b, const problem *p, int dv, float *dst)
{
    const size_t per = (size_t)p->kvh * p->seq_kv;
    for (size_t r = 0; r < per; r++)
        for (int c = 0; c < p->dk; c++)
            dst[r * p->dk + c] = c < dv ? k[(b * per + r) * p->dk + c] : 0.0f;
}

Test(core, v_narrower_than_k_and_read_from_k, .timeout = 120)
{
    for (int prec = 0; prec < 2; prec++)
        for (size_t ci = 0; ci < sizeof v_cases / sizeof v_cases[0]; ci++) {
            const vcase *c = &v_cases[ci];
            const ccase cc = {c->name, c->h, c->kvh, c->dk, c->batch, c->seq_q, c->seq_kv, 0, c->masks, 0, c->variants};
            problem p;
            case_problem(&cc, &p, 8000 + ci);
            mha_config cfg;
            problem_config(&p, &cfg, 2);
            cfg.v_head_dim = c->dv;
            cfg.precision = prec ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
            mha_engine *e = NULL;
            cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
            sdpa s = sdpa_of(&p, 8100 + ci);
            const int dk = c->dk, dv = c->dv, qd = p.h * dk, kvd = p.kvh * dk;
            const size_t n = (size_t)p.batch * p.h * p.seq_q * dv, nk = (size_t)p.batch * p.kvh * p.seq_kv;
            float *alias = sentinel_floats(n), *copied = sentinel_floats(n), *vc = malloc(nk * dv * sizeof *vc);
            cr_assert(vc);
            for (size_t r = 0; r < nk; r++) /* V: K's first dv features of each row, copied out */
                memcpy(vc + r * dv, s.k + r * dk, (size_t)dv * sizeof *vc);
            const ptrdiff_t ks[3] = {(ptrdiff_t)p.kvh * p.seq_kv * dk, (ptrdiff_t)p.seq_kv * dk, dk};
            mha_core_input in = {.batch = p.batch, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = s.q, .k = s.k, .v = s.k,
                                 .v_stride = {ks[0], ks[1], ks[2]}, .q_lengths = p.q_len, .kv_lengths = p.kv_len,
                                 .causal = p.causal, .mask = p.mask, .sinks = p.sinks};
            cr_assert_eq(mha_core_forward(e, &in, alias, NULL), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
            in.v = vc;
            memset(in.v_stride, 0, sizeof in.v_stride); /* contiguous (batch, kvh, seq_kv, dv) */
            cr_assert_eq(mha_core_forward(e, &in, copied, NULL), MHA_OK, "%s: %s", c->name, mha_engine_last_error(e));
            const long at = first_bit_difference(alias, copied, n);
            cr_assert_eq(at, -1, "%s, %s (isa %s): element %ld: V read from K %a, copied %a", c->name,
                         prec ? "bf16" : "f32", mha_engine_isa(e), at, (double)alias[at < 0 ? 0 : at],
                         (double)copied[at < 0 ? 0 : at]);
            double *Q = malloc((size_t)p.seq_q * qd * sizeof *Q), *K = malloc((size_t)p.seq_kv * kvd * sizeof *K);
            double *V = malloc((size_t)p.seq_kv * kvd * sizeof *V), *Z = malloc((size_t)p.seq_q * qd * sizeof *Z);
            double *want = malloc(n * sizeof *want);
            float *vpad = malloc((size_t)p.kvh * p.seq_kv * dk * sizeof *vpad);
            cr_assert(Q && K && V && Z && want && vpad);
            for (int b = 0; b < p.batch; b++) {
                to_rows(s.q, b, p.h, p.seq_q, dk, Q);
                to_rows(s.k, b, p.kvh, p.seq_kv, dk, K);
                padded_v(s.k, b, &p, dv, vpad);
                to_rows(vpad, 0, p.kvh, p.seq_kv, dk, V);
                reference_attention(&p, b, Q, K, V, Z, NULL);
                for (int hd = 0; hd < p.h; hd++) /* the first dv features, as (batch, heads, rows, dv) */
                    for (int i = 0; i < p.seq_q; i++)
                        memcpy(want + (((size_t)b * p.h + hd) * p.seq_q + i) * dv, Z + (size_t)i * qd + hd * dk,
                               (size_t)dv * sizeof *want);
            }
            const double err = rel_error(alias, want, n), tol = prec ? BF16_TOL : F32_TOL;
            cr_assert(err <= tol, "%s, %s (isa %s): relative error %.3g > %.0e", c->name, prec ? "bf16" : "f32",
                      mha_engine_isa(e), err, tol);
            free(Q), free(K), free(V), free(Z), free(want), free(vpad), free(alias), free(copied), free(vc);
            free(s.q), free(s.k), free(s.v);
            mha_free(e);
            problem_free(&p);
        }
}

/* v_head_dim: at most head_dim; an engine with a narrower V has no projections and no cache. */
Test(core, a_narrower_v_runs_the_core_alone, .timeout = 30)
{
    problem p;
    case_problem(&cases[1], &p, 8500); /* 8 heads over 2, d_k 32 */
    mha_config cfg;
    problem_config(&p, &cfg, 1);
    char err[256];
    cfg.v_head_dim = 33;
    cr_assert_eq(mha_config_check(&cfg, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "v_head_dim: 33 is more than head_dim 32"), "%s", err);
    cfg.v_head_dim = 16;
    mha_engine *e = NULL;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    float *scratch;
    const mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
    cr_assert_eq(mha_set_weights(e, &w), MHA_ERR_CONFIG);
    cr_assert(strstr(mha_engine_last_error(e), "v_head_dim 16 differs from head_dim 32"), "%s", mha_engine_last_error(e));
    mha_packed_weights *pw = NULL;
    cr_assert_eq(mha_pack_weights(&cfg, &w, &pw), MHA_ERR_CONFIG);
    cr_assert_null(pw);
    mha_kv_cache *c = NULL;
    cr_assert_eq(mha_kv_cache_create(&cfg, 4, 16, 0, &c), MHA_ERR_CONFIG);
    cr_assert_null(c);
    cr_assert_eq(mha_kv_cache_size(&cfg, 4, 16, 0), 0);
    float *out = sentinel_floats((size_t)p.batch * p.seq_q * p.d);
    mha_input in = problem_input(&p);
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_ERR_STATE); /* no weights */
    free(scratch), free(out);
    mha_free(e);
    problem_free(&p);
}

Test(core, bad_input_is_refused_and_nothing_is_written, .timeout = 30)
{
    problem p;
    case_problem(&cases[1], &p, 5000); /* 8 heads over 2, d_k 32, 2 × 130 */
    mha_engine *e = engine_bare(&p, 2);
    sdpa s = sdpa_of(&p, 5001);
    const size_t n = (size_t)p.batch * p.h * p.seq_q * p.dk;
    float *out = sentinel_floats(n), *fresh = sentinel_floats(n);
    const mha_core_input good = {.batch = p.batch, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = s.q, .k = s.k, .v = s.v};
    int32_t bad_len[2] = {130, 131}, neg_len[2] = {-1, 3};
    const float sinks[8] = {0};
    struct { const char *what; mha_core_input in; const ptrdiff_t *os; mha_status st; const char *says; } t[] = {
        {"q NULL", good, NULL, MHA_ERR_INVALID_ARG, "in->q is NULL"},
        {"batch 0", good, NULL, MHA_ERR_SHAPE, "batch 0 < 1"},
        {"batch past capacity", good, NULL, MHA_ERR_SHAPE, "batch 3 > max_batch 2"},
        {"seq_kv past capacity", good, NULL, MHA_ERR_SHAPE, "seq_kv 131 > max_seq_kv 130"},
        {"a query length past seq_q", good, NULL, MHA_ERR_SHAPE, "q_lengths[1] = 131"},
        {"a negative key length", good, NULL, MHA_ERR_SHAPE, "kv_lengths[0] = -1"},
        {"a negative stride", good, NULL, MHA_ERR_SHAPE, "k_stride {-1, 32, 32}"},
        {"an offset past PTRDIFF_MAX", good, NULL, MHA_ERR_SHAPE, "overflows"},
        {"out rows on top of each other", good, (const ptrdiff_t[3]){8 * 130 * 32, 130 * 32, 16}, MHA_ERR_SHAPE,
         "share an address"},
        {"sinks the config does not have", good, NULL, MHA_ERR_INVALID_ARG, "no sinks"},
        {"bf16 tensors on a float32 engine", good, NULL, MHA_ERR_INVALID_ARG, "needs an engine of precision bf16"},
        {"a dtype that is none", good, NULL, MHA_ERR_INVALID_ARG, "in->dtype 7 is neither"},
    };
    t[0].in.q = NULL;
    t[1].in.batch = 0;
    t[2].in.batch = 3;
    t[3].in.seq_kv = 131;
    t[4].in.q_lengths = bad_len;
    t[5].in.kv_lengths = neg_len;
    t[6].in.k_stride[0] = -1, t[6].in.k_stride[1] = 32, t[6].in.k_stride[2] = 32;
    t[7].in.v_stride[0] = PTRDIFF_MAX, t[7].in.v_stride[1] = 1, t[7].in.v_stride[2] = 32;
    t[9].in.sinks = sinks;
    t[10].in.dtype = MHA_DTYPE_BF16;
    t[11].in.dtype = (mha_dtype)7;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        cr_assert_eq(mha_core_forward(e, &t[i].in, out, t[i].os), t[i].st, "%s: %s", t[i].what, mha_engine_last_error(e));
        cr_assert(strstr(mha_engine_last_error(e), t[i].says), "%s: the message '%s' does not say '%s'", t[i].what,
                  mha_engine_last_error(e), t[i].says);
        cr_assert_eq(memcmp(out, fresh, n * sizeof *out), 0, "%s: out was written", t[i].what);
    }
    cr_assert_eq(mha_core_forward(e, NULL, out, NULL), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_core_forward(NULL, &good, out, NULL), MHA_ERR_INVALID_ARG);
    /* the config's sinks not given */
    problem_set_sinks(&p, 5002);
    mha_engine *es = engine_bare(&p, 1);
    cr_assert_eq(mha_core_forward(es, &good, out, NULL), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_engine_last_error(es), "in->sinks is NULL"), "%s", mha_engine_last_error(es));
    cr_assert_eq(memcmp(out, fresh, n * sizeof *out), 0, "missing sinks: out was written");
    /* and the engine still works, its message cleared */
    cr_assert_eq(mha_core_forward(e, &good, out, NULL), MHA_OK, "%s", mha_engine_last_error(e));
    cr_assert_str_eq(mha_engine_last_error(e), "");
    cr_assert_neq(memcmp(out, fresh, n * sizeof *out), 0);
    free(out), free(fresh), free(s.q), free(s.k), free(s.v);
    mha_free(e), mha_free(es);
    problem_free(&p);
}

Test(core, allocates_nothing, .timeout = 30)
{
    problem p;
    case_problem(&cases[2], &p, 6000); /* window, softcap, sinks */
    mha_engine *e = engine_bare(&p, 2);
    sdpa s = sdpa_of(&p, 6001);
    float *out = sentinel_floats((size_t)p.batch * p.h * p.seq_q * p.dk);
    mha_core_input in = {.batch = p.batch, .seq_q = p.seq_q, .seq_kv = p.seq_kv, .q = s.q, .k = s.k, .v = s.v,
                         .causal = p.causal, .sinks = p.sinks};
    cr_assert_eq(mha_core_forward(e, &in, out, NULL), MHA_OK); /* libgomp's first team */
    const long before = alloc_count();
    cr_assert_eq(mha_core_forward(e, &in, out, NULL), MHA_OK);
    cr_assert_eq(alloc_count(), before, "mha_core_forward allocated %ld blocks", alloc_count() - before);
    free(out), free(s.q), free(s.k), free(s.v);
    mha_free(e);
    problem_free(&p);
}
