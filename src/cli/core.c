/* core.c — `mha run CONFIG --core`: the attention core alone (mha_core_forward) on seeded Q,
 * K, V of the config's heads and batch (bf16 tensors with precision bf16, as SDPA's peers take
 * them), timed, sampled rows checked against a double reference: the core's speed without the
 * projections, measured as SDPA's peers are. With model.v_head_dim below head_dim, V is K's
 * first v_head_dim features, read in place (an MLA model's absorbed core, as llama.cpp's
 * flash attention takes K of 576 and V of 512). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"

/* Everything the run allocates, freed in one place. */
typedef struct core_state {
    cli_problem p;
    int dv;                            /* V's and out's features: head_dim, or fewer (V in K) */
    float *q, *k, *v, *out, *sinks;
    uint16_t *q16, *k16, *v16, *out16; /* precision bf16: the tensors the core is given */
    double *times;
    mha_engine *e;
} core_state;

static void release(core_state *s)
{
    mha_free(s->e);
    cli_problem_free(&s->p);
    free(s->q), free(s->k), free(s->v), free(s->out), free(s->sinks), free(s->times);
    free(s->q16), free(s->k16), free(s->v16), free(s->out16);
}

/* float -> bf16, nearest even (the engine's rounding for finite values, which these are). */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float of_bf16(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* n floats at x as bf16 into a new array, x keeping the values it now holds (the reference's
 * input); NULL when out of memory. */
static uint16_t *bf16_copy(float *x, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; h && i < n; i++)
        h[i] = to_bf16(x[i]), x[i] = of_bf16(h[i]);
    return h;
}

/* Element (b, h, i, 0) of a contiguous (batch, heads, rows, width) tensor. */
static size_t at(int b, int h, int heads, int rows, int i, int width)
{
    return (((size_t)b * heads + h) * rows + i) * width;
}

/* Sampled rows (spread over the first and last sequence and over the heads), each against
 * the attention of its head in double, into c. */
static void check_rows(const core_state *s, int rows, cli_check *chk)
{
    const cli_problem *p = &s->p;
    const int dk = p->dk, dv = s->dv, group = p->h / p->kvh;
    double *K = malloc((size_t)p->seq_kv * dk * sizeof *K), *V = malloc((size_t)p->seq_kv * dk * sizeof *V);
    double *q = malloc((size_t)dk * sizeof *q), *z = malloc((size_t)dk * sizeof *z);
    double *a = malloc((size_t)p->seq_kv * sizeof *a);
    if (!K || !V || !q || !z || !a) {
        chk->num = NAN, chk->rows++; /* no reference: the check fails */
        goto done;
    }
    const int seqs[2] = {0, p->batch - 1}, n_seq = p->batch > 1 ? 2 : 1;
    for (int t = 0; t < n_seq; t++) {
        const int b = seqs[t], ql = p->q_len ? p->q_len[b] : p->seq_q, want = (rows + n_seq - 1 - t) / n_seq;
        for (int r = 0; r < want && ql > 0; r++) {
            const int i = cli_sample_row(r, want, ql), h = (int)((long)r * p->h / want), g = h / group;
            int lo;
            const int nv = cli_visible(p, b, i, &lo);
            for (int j = lo; j < nv; j++) /* V narrower: K's first dv features, the rest zero */
                for (int c = 0; c < dk; c++) {
                    K[(size_t)j * dk + c] = s->k[at(b, g, p->kvh, p->seq_kv, j, dk) + c];
                    V[(size_t)j * dk + c] = dv < dk ? (c < dv ? K[(size_t)j * dk + c] : 0.0)
                                                    : s->v[at(b, g, p->kvh, p->seq_kv, j, dk) + c];
                }
            for (int c = 0; c < dk; c++)
                q[c] = s->q[at(b, h, p->h, p->seq_q, i, dk) + c], z[c] = 0.0;
            if (nv > lo)
                cli_ref_attention_row(p, h, i, q, K, V, dk, lo, nv, a, z);
            cli_check_row(chk, s->out + at(b, h, p->h, p->seq_q, i, dv), z, dv);
        }
    }
done:
    free(K), free(V), free(q), free(z), free(a);
}

/* The run's summary: text, or one JSON object. Sorts s->times. */
static void report(core_state *s, const cli_config *fc, const char *config, const mha_config *cfgp,
                   const cli_check *checked, int json)
{
    const cli_problem *p = &s->p;
    const mha_config cfg = *cfgp;
    const int bf16 = cfg.precision == MHA_PRECISION_BF16;
    const double flops = cli_attention_flops(p) * (p->dk + s->dv) / (2.0 * p->dk); /* 2·(dk + dv) a head */
    const cli_stats t = cli_stats_of(s->times, fc->iters);
    const char *mask = p->causal ? (p->q_len || p->kv_len ? "causal+padding" : "causal")
                                 : (p->q_len || p->kv_len ? "padding" : "none");
    char variants[160];
    cli_variants_text(p, &fc->engine, variants, sizeof variants);
    if (json) {
        json_t *j = json_object();
        json_object_set_new(j, "name", json_string(fc->name));
        json_object_set_new(j, "config", config ? json_string(config) : json_null());
        json_object_set_new(j, "mode", json_string("core"));
        json_object_set_new(j, "heads", json_integer(p->h));
        json_object_set_new(j, "kv_heads", json_integer(p->kvh));
        json_object_set_new(j, "head_dim", json_integer(p->dk));
        json_object_set_new(j, "v_head_dim", json_integer(s->dv));
        json_object_set_new(j, "variants", json_string(variants));
        json_object_set_new(j, "batch", json_integer(p->batch));
        json_object_set_new(j, "seq_q", json_integer(p->seq_q));
        json_object_set_new(j, "seq_kv", json_integer(p->seq_kv));
        json_object_set_new(j, "mask", json_string(mask));
        json_object_set_new(j, "threads", json_integer(mha_engine_threads(s->e)));
        json_object_set_new(j, "isa", json_string(mha_engine_isa(s->e)));
        json_object_set_new(j, "precision", json_string(mha_precision_name(cfg.precision)));
        json_object_set_new(j, "tensors", json_string(bf16 ? "bf16" : "f32"));
        json_object_set_new(j, "kernel", json_string(mha_engine_kernel(s->e)));
        json_object_set_new(j, "warmup", json_integer(fc->warmup));
        json_object_set_new(j, "iters", json_integer(fc->iters));
        json_object_set_new(j, "median_ms", json_real(t.median));
        json_object_set_new(j, "min_ms", json_real(t.min));
        json_object_set_new(j, "max_ms", json_real(t.max));
        json_object_set_new(j, "gflops", json_real(flops / (t.median * 1e6)));
        json_object_set_new(j, "flops_counted", json_string("visible pairs, 2·heads·(head_dim + v_head_dim) each"));
        cli_check_json(j, checked, cfg.precision, MHA_KV_AUTO, NULL, MHA_ACTIVATIONS_F32);
        cli_print_json(j);
    } else {
        printf("mha run --core: %s%s%s%s\n", fc->name, config ? " (" : "", config ? config : "",
               config ? ")" : " (built-in default)");
        printf("  core     %d heads over %d KV heads of %d%s%s (Q, K, V given: no projection, RoPE or QK-norm)\n", p->h,
               p->kvh, p->dk, variants[0] ? ", " : "", variants);
        if (s->dv < p->dk)
            printf("  V        K's first %d features, read in place (v_head_dim)\n", s->dv);
        printf("  batch    %d × %d queries over %d keys, mask %s\n", p->batch, p->seq_q, p->seq_kv, mask);
        printf("  engine   %d threads; isa %s, precision %s, kernel %s; Q, K, V and out %s\n", mha_engine_threads(s->e),
               mha_engine_isa(s->e), mha_precision_name(cfg.precision), mha_engine_kernel(s->e), bf16 ? "bf16" : "float32");
        printf("  time     median %.3f ms (min %.3f, max %.3f) over %d calls after %d warm-up\n", t.median, t.min, t.max,
               fc->iters, fc->warmup);
        printf("  speed    %.1f GFLOP/s (2·heads·(head_dim + v_head_dim) per visible query-key pair)\n",
               flops / (t.median * 1e6));
    }
}

int cli_core(const cli_config *fc, const char *config, int causal, int check, int json)
{
    core_state s;
    memset(&s, 0, sizeof s);
    cli_problem *p = &s.p;
    int rc = cli_generate_shape(fc, fc->engine.max_batch, p);
    if (rc != EXIT_OK || (rc = cli_self_key_padding(p)) != EXIT_OK)
        goto out;
    p->causal |= causal;
    if (fc->mask == MHA_MASK_PADDING && !p->q_len && !p->kv_len) {
        cli_error("%s:%d: batch.mask: padding, but no lengths anywhere (batch.lengths, batch.kv_lengths)", fc->path,
                  fc->line_mask);
        rc = EXIT_USAGE;
        goto out;
    }
    mha_config cfg = fc->engine;
    cfg.max_batch = p->batch, cfg.max_seq_q = p->seq_q, cfg.max_seq_kv = p->seq_kv;
    mha_status st = mha_create(&cfg, &s.e);
    if (st != MHA_OK) {
        rc = cli_engine_failed(&cfg, NULL, st);
        goto out;
    }
    /* Q, K, V in SDPA's (batch, heads, rows, d_k), seeded as run's inputs are; with a narrower
     * V (v_head_dim, or an MLA model's latent), none: V is K's first dv features, read with K's
     * strides */
    s.dv = mha_config_v_head_dim(&cfg);
    const int v_in_k = s.dv < p->dk;
    uint64_t seed = fc->seed;
    const size_t nq = (size_t)p->batch * p->h * p->seq_q * p->dk, nkv = (size_t)p->batch * p->kvh * p->seq_kv * p->dk;
    const size_t nout = nq / p->dk * s.dv;
    if (!(s.q = cli_uniform_floats(nq, &seed)) || !(s.k = cli_uniform_floats(nkv, &seed)) ||
        (!v_in_k && !(s.v = cli_uniform_floats(nkv, &seed))) ||
        !(s.out = malloc(nout * sizeof *s.out)) || !(s.times = malloc((size_t)fc->iters * sizeof *s.times)) ||
        (p->sinks && !(s.sinks = cli_uniform_floats((size_t)p->h, &seed)))) {
        cli_error("out of memory for Q, K and V of %d × %d × %d × %d", p->batch, p->h, p->seq_q, p->dk);
        rc = EXIT_RUNTIME;
        goto out;
    }
    p->w.sinks = s.sinks;
    const int bf16 = cfg.precision == MHA_PRECISION_BF16;
    if (bf16 && (!(s.q16 = bf16_copy(s.q, nq)) || !(s.k16 = bf16_copy(s.k, nkv)) ||
                 (!v_in_k && !(s.v16 = bf16_copy(s.v, nkv))) || !(s.out16 = malloc(nout * sizeof *s.out16)))) {
        cli_error("out of memory for bf16 Q, K and V of %d × %d × %d × %d", p->batch, p->h, p->seq_q, p->dk);
        rc = EXIT_RUNTIME;
        goto out;
    }
    const void *k_in = bf16 ? (const void *)s.k16 : s.k;
    mha_core_input in = {.batch = p->batch, .seq_q = p->seq_q, .seq_kv = p->seq_kv,
                         .dtype = bf16 ? MHA_DTYPE_BF16 : MHA_DTYPE_F32, .q = bf16 ? (const void *)s.q16 : s.q,
                         .k = k_in, .v = v_in_k ? k_in : bf16 ? (const void *)s.v16 : s.v,
                         .q_lengths = p->q_len, .kv_lengths = p->kv_len, .causal = p->causal, .sinks = s.sinks};
    if (v_in_k) { /* K's contiguous strides */
        in.v_stride[2] = p->dk, in.v_stride[1] = (ptrdiff_t)p->seq_kv * p->dk;
        in.v_stride[0] = in.v_stride[1] * p->kvh;
    }
    void *out = bf16 ? (void *)s.out16 : s.out;
    for (int i = 0; i < fc->warmup && st == MHA_OK; i++)
        st = mha_core_forward(s.e, &in, out, NULL);
    cli_progress pr;
    cli_progress_begin(&pr, json);
    for (int i = 0; st == MHA_OK && i < fc->iters; i++) {
        const double t0 = cli_now_ms();
        st = mha_core_forward(s.e, &in, out, NULL);
        s.times[i] = cli_now_ms() - t0;
        cli_progress_show(&pr, "core %d/%d", i + 1, fc->iters);
    }
    cli_progress_end(&pr);
    for (size_t i = 0; bf16 && st == MHA_OK && i < nout; i++) /* the check reads float32 */
        s.out[i] = of_bf16(s.out16[i]);
    if (st != MHA_OK) {
        cli_error("core: %s: %s", mha_status_str(st), mha_engine_last_error(s.e));
        rc = cli_exit_code(st);
        goto out;
    }
    cli_check checked = {0};
    check_rows(&s, check, &checked);
    report(&s, fc, config, &cfg, &checked, json);
    rc = cli_check_verdict(&checked, cfg.precision, MHA_KV_AUTO, NULL, MHA_ACTIVATIONS_F32, "a double-precision reference",
                           json);
out:
    release(&s);
    return rc;
}
