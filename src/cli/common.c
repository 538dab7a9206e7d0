/* common.c — helpers the subcommands share: messages, option values, time, seeded data and
 * generated problems, statistics, the FLOP count, the double-precision check of sampled
 * output rows, and the CPU's description. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <omp.h>

#include "cli.h"

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* on a terminal, over any progress line (cli_progress_show) rather than after it */
    fputs(isatty(2) ? "\r\033[Kmha: " : "mha: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_exit_code(mha_status st)
{
    switch (st) {
    case MHA_OK: return EXIT_OK;
    case MHA_ERR_INVALID_ARG: case MHA_ERR_CONFIG: case MHA_ERR_SHAPE: case MHA_ERR_IO:
    case MHA_ERR_FORMAT: case MHA_ERR_AFFINITY: case MHA_ERR_WORKSPACE:
        return EXIT_USAGE;
    default:
        return EXIT_RUNTIME;
    }
}

int cli_parse_int(const char *opt, const char *text, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || errno || end == text || *end || v < lo || v > hi) {
        cli_error("%s: expected an integer in %ld..%ld, got '%s'", opt, lo, hi, text ? text : "");
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_precision(const char *text, mha_precision *out)
{
    const mha_precision all[] = {MHA_PRECISION_F32, MHA_PRECISION_BF16};
    for (int i = 0; text && i < 2; i++)
        if (!strcmp(text, mha_precision_name(all[i])))
            return *out = all[i], 1;
    cli_error("--precision: expected f32 or bf16, got '%s'", text ? text : "");
    return 0;
}

int cli_parse_kv_type(const char *text, mha_kv_type *out)
{
    const mha_kv_type all[] = {MHA_KV_AUTO, MHA_KV_F32, MHA_KV_BF16, MHA_KV_INT8};
    for (int i = 0; text && i < 4; i++)
        if (!strcmp(text, mha_kv_type_name(all[i])))
            return *out = all[i], 1;
    cli_error("--kv-cache: expected auto, f32, bf16 or int8, got '%s'", text ? text : "");
    return 0;
}

/* The types the engine holds weights in, as weights.type spells them (the schema's row) */
static const struct { const char *name; mha_weight_type t; } weight_types[] = {
    {"f32", MHA_WEIGHT_F32},   {"q8_0", MHA_WEIGHT_Q8_0}, {"q4_0", MHA_WEIGHT_Q4_0}, {"q4_1", MHA_WEIGHT_Q4_1},
    {"q5_0", MHA_WEIGHT_Q5_0}, {"q5_1", MHA_WEIGHT_Q5_1}, {"q4_k", MHA_WEIGHT_Q4_K}, {"q5_k", MHA_WEIGHT_Q5_K},
    {"q6_k", MHA_WEIGHT_Q6_K}, {"f16", MHA_WEIGHT_F16},   {"bf16", MHA_WEIGHT_BF16}};
enum { HELD_TYPES = 9 }; /* the first nine: f16 and bf16 are handed in, never held */

int cli_parse_weight_type(const char *text, mha_weight_type *out)
{
    for (int i = 0; text && i < HELD_TYPES; i++)
        if (!strcmp(text, weight_types[i].name))
            return *out = weight_types[i].t, 1;
    cli_error("--weights-type: expected f32, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k, got '%s'",
              text ? text : "");
    return 0;
}

int cli_parse_activations(const char *text, mha_activations *out)
{
    static const struct { const char *name; mha_activations a; } all[] = {{"f32", MHA_ACTIVATIONS_F32},
                                                                           {"int16", MHA_ACTIVATIONS_INT16},
                                                                           {"bf16", MHA_ACTIVATIONS_BF16}};
    for (size_t i = 0; text && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(text, all[i].name))
            return *out = all[i].a, 1;
    cli_error("--activations: expected f32, int16 or bf16, got '%s'", text ? text : "");
    return 0;
}

const char *cli_weight_type_name(mha_weight_type t)
{
    for (size_t i = 0; i < sizeof weight_types / sizeof weight_types[0]; i++)
        if (weight_types[i].t == t)
            return weight_types[i].name;
    return "?";
}

int cli_apply_isa(mha_config *cfg, const char *isa)
{
    if (!isa)
        return 1;
    if (strlen(isa) >= sizeof cfg->isa)
        return cli_error("--isa: '%.40s' is not a kernel table (auto, avx512, avx2, ref)", isa), 0;
    mha_config c = *cfg;
    snprintf(c.isa, sizeof c.isa, "%s", isa);
    char err[256];
    if (mha_config_check(&c, err, sizeof err) != MHA_OK &&
        (!strncmp(err, "isa:", 4) || !strncmp(err, "blis_arch:", 10) || !strncmp(err, "bf16_kernel:", 12)))
    {
        const char *why = !strncmp(err, "isa:", 4) && strstr(err, "': ") ? strstr(err, "': ") + 3 : err;
        return cli_error("--isa %s: %s", isa, why), 0;
    }
    *cfg = c; /* other problems are the config's own, reported where it is used */
    return 1;
}

int cli_apply_bf16_kernel(mha_config *cfg, const char *name)
{
    if (!name)
        return 1;
    if (cfg->precision != MHA_PRECISION_BF16)
        return cli_error("--bf16-kernel %.40s: only with precision bf16 (engine.precision, or --precision bf16)", name), 0;
    if (strlen(name) >= sizeof cfg->bf16_kernel)
        return cli_error("--bf16-kernel: '%.40s' is not a bf16 kernel (mha info lists each table's)", name), 0;
    mha_config c = *cfg;
    snprintf(c.bf16_kernel, sizeof c.bf16_kernel, "%s", name);
    char err[256];
    if (mha_config_check(&c, err, sizeof err) != MHA_OK && !strncmp(err, "bf16_kernel:", 12))
        return cli_error("--bf16-kernel%s", err + 12), 0; /* err: "bf16_kernel: 'name': why" */
    *cfg = c;
    return 1;
}

int cli_apply_kv_type(mha_config *cfg, mha_kv_type kv)
{
    mha_config c = *cfg;
    c.kv_type = kv;
    char err[256];
    if (mha_config_check(&c, err, sizeof err) != MHA_OK && !strncmp(err, "kv_type:", 8))
        return cli_error("--kv-cache%s", err + 8), 0; /* err: "kv_type: bf16 with precision f32: why" */
    *cfg = c;
    return 1;
}

int cli_kernels(const mha_config *cfg, cli_kernels_used *k)
{
    /* the engine's own choice, from a one-token engine of the same settings (no prediction
     * here to drift from the engine's rules) */
    mha_config c = *cfg;
    c.max_batch = c.max_seq_q = c.max_seq_kv = 1, c.threads = 1, c.pinning = MHA_PIN_NONE;
    mha_engine *e = NULL;
    if (mha_create(&c, &e) != MHA_OK)
        return 0;
    snprintf(k->isa, sizeof k->isa, "%s", mha_engine_isa(e));
    snprintf(k->blis_arch, sizeof k->blis_arch, "%s", mha_engine_blis_arch(e));
    snprintf(k->kernel, sizeof k->kernel, "%s", mha_engine_kernel(e));
    mha_free(e);
    return 1;
}

double cli_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

void cli_progress_begin(cli_progress *p, int json)
{
    p->on = !json && isatty(2), p->shown = 0;
    p->start = p->last = cli_now_ms();
}

void cli_progress_show(cli_progress *p, const char *fmt, ...)
{
    const double now = cli_now_ms();
    if (!p->on || now - p->start < 1000 || (p->shown && now - p->last < 250))
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\rmha: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ", %.0f s elapsed\033[K", (now - p->start) / 1e3);
    fflush(stderr);
    p->shown = 1, p->last = now;
}

void cli_progress_end(cli_progress *p)
{
    if (p->shown)
        fputs("\r\033[K", stderr), fflush(stderr);
    p->shown = 0;
}

void cli_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[i] = lo + (hi - lo) * (float)((double)(z >> 40) / 16777216.0);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

cli_stats cli_stats_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    return (cli_stats){med, t[0], t[n - 1]};
}

int32_t *cli_cycle_lengths(const int *list, int n, int batch)
{
    int32_t *out = malloc((size_t)batch * sizeof *out);
    for (int b = 0; out && b < batch; b++)
        out[b] = list[b % n];
    return out;
}

float *cli_uniform_floats(size_t n, uint64_t *seed)
{
    float *x = malloc(n * sizeof *x);
    if (x)
        cli_fill_uniform(x, n, -1.0f, 1.0f, seed);
    return x;
}

void cli_problem_model(cli_problem *p, const mha_config *cfg)
{
    p->d = cfg->d_model, p->h = cfg->n_heads, p->dk = mha_config_head_dim(cfg);
    p->kvh = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->mla.kv_lora_rank ? 1 : cfg->n_heads;
    p->rope = cfg->rope;
    p->mla = cfg->mla, p->bias = cfg->bias;
    if (p->rope.style != MHA_ROPE_NONE && p->rope.rotary_dim == 0)
        p->rope.rotary_dim = p->mla.kv_lora_rank ? p->mla.qk_rope_head_dim : p->dk;
    p->window = cfg->window;
    p->scale = cfg->scale > 0.0f ? cfg->scale : (float)(1.0 / sqrt((double)p->dk));
    if (p->mla.kv_lora_rank && !(cfg->scale > 0.0f)) { /* HF DeepseekV3Attention's: 1/sqrt(nope + rope), yarn's m² */
        const mha_rope *r = &cfg->rope;
        double s = 1.0 / sqrt((double)(p->mla.qk_nope_head_dim + p->mla.qk_rope_head_dim));
        if (r->style != MHA_ROPE_NONE && r->scaling == MHA_ROPE_SCALING_YARN && r->mscale_all_dim > 0.0f &&
            r->factor > 1.0f) {
            const double m = 0.1 * r->mscale_all_dim * log(r->factor) + 1.0;
            s *= m * m;
        }
        p->scale = (float)s;
    }
    p->softcap = cfg->softcap, p->sinks = cfg->sinks, p->qk_norm = cfg->qk_norm;
    p->norm_len[0] = mha_config_qk_norm_len(cfg, 0), p->norm_len[1] = mha_config_qk_norm_len(cfg, 1);
    p->alibi_max_bias = cfg->alibi_max_bias;
}

int cli_generate_shape(const cli_config *fc, int batch, cli_problem *p)
{
    cli_problem_model(p, &fc->engine);
    p->batch = batch;
    p->seq_q = fc->engine.max_seq_q, p->seq_kv = fc->cross ? fc->engine.max_seq_kv : fc->engine.max_seq_q, p->cross = fc->cross;
    if ((fc->n_lengths && !(p->q_len = cli_cycle_lengths(fc->lengths, fc->n_lengths, batch))) ||
        (p->cross && fc->n_kv_lengths && !(p->kv_len = cli_cycle_lengths(fc->kv_lengths, fc->n_kv_lengths, batch)))) {
        cli_error("out of memory");
        return EXIT_RUNTIME;
    }
    p->causal = fc->mask == MHA_MASK_CAUSAL;
    return EXIT_OK;
}

int cli_generate_inputs(const cli_config *fc, int batch, cli_problem *p)
{
    uint64_t seed = fc->seed;
    size_t nq, nkv;
    int rc = cli_generate_shape(fc, batch, p);
    if (rc != EXIT_OK)
        return rc;
    if (__builtin_mul_overflow((size_t)batch * p->seq_q, (size_t)p->d, &nq) ||
        __builtin_mul_overflow((size_t)batch * p->seq_kv, (size_t)p->d, &nkv) || nq > SIZE_MAX / 8 || nkv > SIZE_MAX / 8) {
        cli_error("a batch of %d × %d × %d does not fit in memory", batch, p->seq_q, p->d);
        return EXIT_RUNTIME;
    }
    if (!(p->q = cli_uniform_floats(nq, &seed)) || (p->cross && !(p->kv = cli_uniform_floats(nkv, &seed)))) {
        cli_error("out of memory for a batch of %d × %d × %d inputs", batch, p->seq_q, p->d);
        return EXIT_RUNTIME;
    }
    return EXIT_OK;
}

int cli_self_key_padding(cli_problem *p)
{
    if (p->cross || !p->q_len)
        return EXIT_OK;
    free(p->kv_len);
    if (!(p->kv_len = malloc((size_t)p->batch * sizeof *p->kv_len))) {
        cli_error("out of memory");
        return EXIT_RUNTIME;
    }
    memcpy(p->kv_len, p->q_len, (size_t)p->batch * sizeof *p->kv_len);
    return EXIT_OK;
}

/* QK-norm's weights (q then k) and the sinks (h), after the biases. */
static size_t extra_floats(const cli_problem *p)
{
    return (size_t)p->norm_len[0] + (size_t)p->norm_len[1] + (p->sinks ? (size_t)p->h : 0);
}

/* An MLA model's matrices as (in, out): q_a, q_b (or q_proj), kv_a, kv_b, o; returns the floats
 * of its weights in all: those, the two RMSNorms' factors, and with bias q_a's (with q_lora),
 * kv_a's and o's biases (the loader's buffer holds the same). */
static size_t mla_matrices(const cli_problem *p, int mat[5][2])
{
    const int bias = p->bias;
    const mha_mla *m = &p->mla;
    const int d = p->d, h = p->h, ql = m->q_lora_rank, kvl = m->kv_lora_rank, rope = m->qk_rope_head_dim;
    const int all[5][2] = {{d, ql}, {ql ? ql : d, h * (m->qk_nope_head_dim + rope)}, {d, kvl + rope},
                           {kvl, h * (m->qk_nope_head_dim + m->v_head_dim)}, {h * m->v_head_dim, d}};
    memcpy(mat, all, sizeof all);
    size_t total = (size_t)ql + (size_t)kvl + (bias ? (size_t)ql + (size_t)(kvl + rope) + (size_t)d : 0);
    for (int i = 0; i < 5; i++)
        total += (size_t)mat[i][0] * (size_t)mat[i][1];
    return total;
}

size_t cli_weight_floats(const cli_problem *p)
{
    int mat[5][2];
    if (p->mla.kv_lora_rank)
        return mla_matrices(p, mat);
    const size_t d = (size_t)p->d, qd = (size_t)p->h * p->dk, kvd = (size_t)p->kvh * p->dk;
    return 2 * d * qd + 2 * d * kvd + qd + d + 2 * kvd + extra_floats(p);
}

void cli_mla_text(const cli_problem *p, char *buf, size_t n)
{
    const mha_mla *m = &p->mla;
    if (!m->kv_lora_rank) {
        buf[0] = '\0';
        return;
    }
    char q[32];
    snprintf(q, sizeof q, m->q_lora_rank ? "q_lora %d" : "q_proj", m->q_lora_rank);
    snprintf(buf, n, ", MLA: latent %d + rope %d as one KV head, %s, nope %d, v %d", m->kv_lora_rank,
             m->qk_rope_head_dim, q, m->qk_nope_head_dim, m->v_head_dim);
}

const char *cli_bytes_text(size_t bytes, char *buf, size_t n)
{
    const double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
    return buf;
}

int cli_engine_failed(const mha_config *cfg, const mha_engine *e, mha_status st)
{
    char err[1024];
    if (e)
        snprintf(err, sizeof err, "%s", mha_engine_last_error(e));
    else
        mha_config_check(cfg, err, sizeof err);
    cli_error("engine: %s%s%s", mha_status_str(st), err[0] ? ": " : "", err);
    return cli_exit_code(st);
}

mha_status cli_set_weights(mha_engine *e, const cli_problem *p)
{
    return p->mla.kv_lora_rank ? mha_set_mla_weights(e, &p->mw) : mha_set_weights(e, &p->w);
}

/* An MLA model's seeded weights in x·W layout: each matrix U(-1/sqrt(in), 1/sqrt(in)) as
 * nn.Linear's init, the RMSNorms' factors U(0.5, 1.5), biases U(-1/sqrt(d), 1/sqrt(d)). */
static int generate_mla_weights(const cli_config *fc, cli_problem *p, float **buf)
{
    const mha_mla *m = &p->mla;
    const int d = p->d, ql = m->q_lora_rank, kvl = m->kv_lora_rank, rope = m->qk_rope_head_dim, bias = p->bias;
    int mat[5][2];
    const size_t total = mla_matrices(p, mat);
    if (!(*buf = malloc(total * sizeof **buf))) {
        cli_error("out of memory for the weights");
        return EXIT_RUNTIME;
    }
    uint64_t seed = fc->seed ^ 0x5EEDull;
    float *w = *buf, *at[5];
    for (int i = 0; i < 5; i++) {
        const float bound = 1.0f / sqrtf((float)mat[i][0]);
        at[i] = w;
        cli_fill_uniform(w, (size_t)mat[i][0] * mat[i][1], -bound, bound, &seed);
        w += (size_t)mat[i][0] * mat[i][1];
    }
    float *qn = w, *kn = qn + ql, *b = kn + kvl;
    cli_fill_uniform(qn, (size_t)ql + kvl, 0.5f, 1.5f, &seed);
    const float bound = 1.0f / sqrtf((float)d);
    if (bias)
        cli_fill_uniform(b, (size_t)ql + (size_t)(kvl + rope) + (size_t)d, -bound, bound, &seed);
    p->mw = (mha_mla_weights){.layout = MHA_LAYOUT_XW, .q_a = ql ? at[0] : NULL, .q_a_norm = ql ? qn : NULL,
                              .q_b = ql ? at[1] : NULL, .q = ql ? NULL : at[1], .kv_a = at[2], .kv_a_norm = kn,
                              .kv_b = at[3], .o = at[4]};
    if (bias)
        p->mw.b_q_a = ql ? b : NULL, p->mw.b_kv_a = b + ql, p->mw.b_o = b + ql + kvl + rope;
    return EXIT_OK;
}

int cli_generate_weights(const cli_config *fc, cli_problem *p, float **buf)
{
    if (p->mla.kv_lora_rank)
        return generate_mla_weights(fc, p, buf);
    /* after the inputs' stream: a different seed; Wq (d, h·d_k), Wk, Wv (d, kvh·d_k), Wo
     * (h·d_k, d), then their biases */
    const size_t d = (size_t)p->d, qd = (size_t)p->h * p->dk, dd = d * qd, kvd = (size_t)p->kvh * p->dk;
    const size_t nw = 2 * dd + 2 * d * kvd, nx = extra_floats(p), nb = cli_weight_floats(p) - nw - nx;
    uint64_t seed = fc->seed ^ 0x5EEDull;
    if (!(*buf = malloc((nw + nb + nx) * sizeof **buf))) {
        cli_error("out of memory for the weights");
        return EXIT_RUNTIME;
    }
    float bound = 1.0f / sqrtf((float)p->d), *w = *buf, *b = w + nw;
    cli_fill_uniform(w, nw, -bound, bound, &seed);
    cli_fill_uniform(b, nb, -bound, bound, &seed);
    p->w = (mha_weights){.w_q = w, .w_k = w + dd, .w_v = w + dd + d * kvd, .w_o = w + dd + 2 * d * kvd,
                         .layout = MHA_LAYOUT_XW};
    if (fc->engine.bias)
        p->w.b_q = b, p->w.b_k = b + qd, p->w.b_v = b + qd + kvd, p->w.b_o = b + qd + 2 * kvd;
    float *x = b + nb;
    if (p->qk_norm.kind != MHA_QK_NORM_NONE) { /* factors (offset + w) around 1 */
        const float lo = 0.5f - (float)p->qk_norm.weight_offset;
        const size_t nq = (size_t)p->norm_len[0], nk = (size_t)p->norm_len[1];
        cli_fill_uniform(x, nq + nk, lo, lo + 1.0f, &seed);
        p->w.q_norm = x, p->w.k_norm = x + nq, x += nq + nk;
    }
    if (p->sinks) {
        cli_fill_uniform(x, (size_t)p->h, -1.0f, 1.0f, &seed);
        p->w.sinks = x;
    }
    return EXIT_OK;
}

void cli_variants_text(const cli_problem *p, const mha_config *cfg, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
#define ADD(...) (at += (size_t)snprintf(buf + at, at < n ? n - at : 0, __VA_ARGS__))
    if (cfg->scale > 0.0f)
        ADD("%sscale %g", at ? ", " : "", (double)p->scale);
    if (p->softcap > 0.0f)
        ADD("%ssoftcap %g", at ? ", " : "", (double)p->softcap);
    if (p->sinks)
        ADD("%ssinks", at ? ", " : "");
    if (p->qk_norm.kind != MHA_QK_NORM_NONE)
        ADD("%sQK-norm %s%s", at ? ", " : "", p->qk_norm.kind == MHA_QK_NORM_FULL ? "full" : "head",
            p->qk_norm.weight_offset ? " (1 + w)" : "");
    if (p->alibi_max_bias > 0.0f)
        ADD("%sALiBi max_bias %g", at ? ", " : "", (double)p->alibi_max_bias);
#undef ADD
}

void cli_problem_free(cli_problem *p)
{
    free(p->q), free(p->kv), free(p->q_len), free(p->kv_len);
    p->q = p->kv = NULL, p->q_len = p->kv_len = NULL;
}

static int q_len_of(const cli_problem *p, int b) { return p->q_len ? p->q_len[b] : p->seq_q; }
static int kv_len_of(const cli_problem *p, int b) { return p->kv_len ? p->kv_len[b] : p->seq_kv; }

int cli_visible(const cli_problem *p, int b, int i, int *first)
{
    const int pos = i + (p->seq_kv - p->seq_q);
    int n = kv_len_of(p, b), lo = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0;
    if ((p->causal || p->window > 0) && pos + 1 < n)
        n = pos + 1;
    n = n > 0 ? n : 0;
    if (first)
        *first = lo < n ? lo : n;
    return n;
}

double cli_attention_flops(const cli_problem *p)
{
    double qd = (double)p->h * p->dk, total = 0;
    for (int b = 0; b < p->batch; b++)
        for (int i = 0; i < q_len_of(p, b); i++) {
            int lo, hi = cli_visible(p, b, i, &lo);
            total += 4.0 * qd * (hi - lo);
        }
    return total;
}

double cli_flops(const cli_problem *p)
{
    const mha_mla *m = &p->mla;
    if (m->kv_lora_rank) { /* per token: the projections, q_nope into latent space, W_uv, o_proj */
        const double h = p->h, qk = m->qk_nope_head_dim + m->qk_rope_head_dim, kvl = m->kv_lora_rank;
        const double q = m->q_lora_rank ? 2.0 * m->q_lora_rank * (p->d + h * qk) : 2.0 * p->d * h * qk;
        const double per = q + 2.0 * p->d * (kvl + m->qk_rope_head_dim) + 2.0 * h * m->qk_nope_head_dim * kvl +
                           2.0 * h * kvl * m->v_head_dim + 2.0 * h * m->v_head_dim * p->d;
        return cli_attention_flops(p) * (p->dk + kvl) / (2.0 * p->dk) + per * cli_tokens(p);
    }
    double d = p->d, qd = (double)p->h * p->dk, kvd = (double)p->kvh * p->dk, total = cli_attention_flops(p);
    for (int b = 0; b < p->batch; b++) {
        int ql = q_len_of(p, b), kl = p->cross ? kv_len_of(p, b) : (ql > kv_len_of(p, b) ? ql : kv_len_of(p, b));
        total += 2.0 * d * qd * 2.0 * ql + 2.0 * d * kvd * 2.0 * kl; /* Q and out; K and V */
    }
    return total;
}

double cli_tokens(const cli_problem *p)
{
    double t = 0;
    for (int b = 0; b < p->batch; b++)
        t += q_len_of(p, b);
    return t;
}

/* y (n) = x (d) · W[:, o0 : o0 + n] + bias[o0 : o0 + n]: output columns o0.. of a linear map
 * from d to width outputs in the problem's layout, in double. */
static void linear_cols(const cli_problem *p, const float *x, const float *w, const float *bias, int width, int o0,
                        int n, double *y)
{
    const int d = p->d;
    for (int o = 0; o < n; o++)
        y[o] = bias ? bias[o0 + o] : 0.0;
    if (p->w.layout == MHA_LAYOUT_TORCH) {
        for (int o = 0; o < n; o++) {
            double acc = 0;
            for (int c = 0; c < d; c++)
                acc += (double)x[c] * w[(size_t)(o0 + o) * d + c];
            y[o] += acc;
        }
    } else {
        for (int c = 0; c < d; c++)
            for (int o = 0; o < n; o++)
                y[o] += (double)x[c] * w[(size_t)c * width + o0 + o];
    }
}

/* RoPE of one head's features y (d_k) at position pos, with the engine's frequencies. */
static void rope_row(const cli_problem *p, const float *inv_freq, float att, double *y, int pos)
{
    const int half = p->rope.rotary_dim / 2, neox = p->rope.style == MHA_ROPE_NEOX;
    for (int j = 0; j < half; j++) {
        const int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
        const double ang = (double)((float)pos * inv_freq[j]), c = cos(ang) * att, s = sin(ang) * att;
        const double x1 = y[a], x2 = y[b];
        y[a] = x1 * c - x2 * s;
        y[b] = x2 * c + x1 * s;
    }
}

/* QK-norm of one head's features y (d_k) with HF's RMSNorm weights w (this head's), in double:
 * the mean over y itself (head), or over all, the whole projection's n features (full). */
static void norm_row(const cli_problem *p, const float *w, double *y, const double *all, int n)
{
    if (!all)
        all = y, n = p->dk;
    double ss = 0;
    for (int c = 0; c < n; c++)
        ss += all[c] * all[c];
    const double r = 1.0 / sqrt(ss / n + p->qk_norm.eps);
    for (int c = 0; c < p->dk; c++)
        y[c] *= r * (p->qk_norm.weight_offset + (double)w[c]);
}

/* ALiBi's slope of head h, from BLOOM's build_alibi_tensor, in double. */
static double alibi_slope(const cli_problem *p, int h)
{
    int n = 1;
    while (n * 2 <= p->h)
        n *= 2;
    const double b = p->alibi_max_bias;
    return h < n ? pow(2.0, -b / n * (h + 1)) : pow(2.0, -b / (2.0 * n) * (2 * (h - n) + 1));
}

int cli_sample_row(int r, int want, int ql)
{
    return want == 1 ? ql - 1 : (int)((long)r * (ql - 1) / (want - 1));
}

void cli_ref_attention_row(const cli_problem *p, int h, int i, const double *q, const double *K, const double *V,
                           ptrdiff_t ld, int lo, int nv, double *a, double *zr)
{
    const int dk = p->dk, off = p->seq_kv - p->seq_q;
    /* scale, softcap, ALiBi; a sink joins the max and the sum */
    double mx = p->w.sinks ? p->w.sinks[h] : -INFINITY, sum = 0;
    const double slope = p->alibi_max_bias > 0 ? alibi_slope(p, h) : 0.0;
    for (int j = lo; j < nv; j++) {
        double sc = 0;
        for (int c = 0; c < dk; c++)
            sc += q[c] * K[(size_t)j * ld + c];
        sc *= p->scale;
        if (p->softcap > 0)
            sc = p->softcap * tanh(sc / p->softcap);
        a[j] = sc - slope * abs(i + off - j);
        mx = a[j] > mx ? a[j] : mx;
    }
    if (p->w.sinks)
        sum = exp(p->w.sinks[h] - mx);
    for (int j = lo; j < nv; j++)
        sum += (a[j] = exp(a[j] - mx));
    for (int j = lo; j < nv; j++)
        for (int c = 0; c < dk; c++)
            zr[c] += a[j] / sum * V[(size_t)j * ld + c];
}

void cli_check_row(cli_check *c, const float *got, const double *ref, int n)
{
    for (int i = 0; i < n; i++)
        c->num += (got[i] - ref[i]) * (got[i] - ref[i]), c->den += ref[i] * ref[i];
    c->rows++;
}

void cli_check_row_f(cli_check *c, const float *got, const float *ref, int n)
{
    for (int i = 0; i < n; i++)
        c->num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]), c->den += (double)ref[i] * ref[i];
    c->rows++;
}

double cli_check_error(const cli_check *c)
{
    return c->den > 0 ? sqrt(c->num / c->den) : sqrt(c->num);
}

int cli_check_verdict(const cli_check *c, mha_precision prec, mha_kv_type kv, const mha_weight_type *wt,
                      mha_activations act, const char *against, int json)
{
    if (!c->rows)
        return EXIT_OK;
    const double e = cli_check_error(c);
    const cli_bound b = cli_check_bound(prec, kv, wt, act, c->rows);
    if (!json)
        printf("  check    relative error %.2e over %d row%s against %s (bound %.3g, %s: %s)\n", e, c->rows,
               c->rows == 1 ? "" : "s", against, b.bound, b.path, b.why);
    if (e <= b.bound)
        return EXIT_OK;
    cli_error("check: relative error %.3g over %d row%s is above the bound %.3g of %s (%s)", e, c->rows,
              c->rows == 1 ? "" : "s", b.bound, b.path, b.why);
    return EXIT_RUNTIME;
}

void cli_check_json(json_t *j, const cli_check *c, mha_precision prec, mha_kv_type kv, const mha_weight_type *wt,
                    mha_activations act)
{
    const cli_bound b = cli_check_bound(prec, kv, wt, act, c->rows);
    json_object_set_new(j, "check_rows", json_integer(c->rows));
    json_object_set_new(j, "check_rel_error", c->rows ? json_real(cli_check_error(c)) : json_null());
    json_object_set_new(j, "check_bound", json_real(b.bound));
    json_object_set_new(j, "check_bound_path", json_string(b.path));
    json_object_set_new(j, "check_bound_why", json_string(b.why));
}

/* y (n) = x (k) · W + b, W one of an MLA model's matrices (k in, n out; TORCH: rows are
 * outputs) at its first column o0 of width columns in all, in double. */
static void mla_linear(const double *x, int k, int n, const float *w, int width, int o0, const float *b, mha_layout layout,
                       double *y)
{
    for (int o = 0; o < n; o++) {
        double acc = b ? b[o0 + o] : 0.0;
        for (int c = 0; c < k; c++)
            acc += x[c] * (layout == MHA_LAYOUT_TORCH ? w[(size_t)(o0 + o) * k + c] : w[(size_t)c * width + o0 + o]);
        y[o] = acc;
    }
}

/* HF's RMSNorm of y (n) with factors w, in double. */
static void mla_norm(double *y, int n, const float *w, float eps)
{
    double ss = 0;
    for (int c = 0; c < n; c++)
        ss += y[c] * y[c];
    const double r = 1.0 / sqrt(ss / n + eps);
    for (int c = 0; c < n; c++)
        y[c] *= r * w[c];
}

/* cli_check_rows of an MLA model, in double and the absorbed form (scores against the normed
 * latent and the rotated shared k_rope, values summed in latent space, then W_uv; HF's
 * expanded form gives the same to 1e-7 in float64: tests/gen_golden_mla.py). */
static void check_rows_mla(const cli_problem *p, const float *out, int rows, cli_check *chk)
{
    const mha_mla *m = &p->mla;
    const mha_mla_weights *w = &p->mw;
    const int d = p->d, h = p->h, dk = p->dk, kvl = m->kv_lora_rank, rope = m->qk_rope_head_dim;
    const int nope = m->qk_nope_head_dim, vd = m->v_head_dim, qk = nope + rope, ql = m->q_lora_rank;
    const int nv = nope + vd, kvb = h * nv, off = p->seq_kv - p->seq_q;
    const int seqs[2] = {0, p->batch - 1}, n_seq = p->batch > 1 ? 2 : 1;
    double *K = malloc((size_t)p->seq_kv * dk * sizeof *K), *x = malloc((size_t)d * sizeof *x);
    double *qa = malloc(((size_t)ql + 1) * sizeof *qa), *q = malloc((size_t)h * qk * sizeof *q);
    double *qabs = malloc((size_t)dk * sizeof *qabs), *z = malloc((size_t)dk * sizeof *z);
    double *o = malloc((size_t)h * vd * sizeof *o), *ref = malloc((size_t)d * sizeof *ref);
    double *a = malloc((size_t)p->seq_kv * sizeof *a);
    float *inv_freq = malloc(((size_t)rope / 2 + 1) * sizeof *inv_freq), att = 1.0f;
    if (!K || !x || !qa || !q || !qabs || !z || !o || !ref || !a || !inv_freq) {
        chk->num = NAN, chk->rows++; /* no reference: the check fails */
        goto done;
    }
    if (p->rope.style != MHA_ROPE_NONE)
        mha_rope_inv_freq(&p->rope, rope, inv_freq, &att);
    for (int s = 0; s < n_seq; s++) {
        const int b = seqs[s], qlen = q_len_of(p, b), want = (rows + n_seq - 1 - s) / n_seq;
        const float *xs = p->q + (size_t)b * p->seq_q * d;
        if (qlen == 0 || want == 0)
            continue;
        int max_key = 0;
        for (int r = 0; r < want; r++) {
            const int nvis = cli_visible(p, b, cli_sample_row(r, want, qlen), NULL);
            max_key = nvis > max_key ? nvis : max_key;
        }
        for (int j = 0; j < max_key; j++) { /* K row j: [normed latent | rotated k_rope] */
            double *kj = K + (size_t)j * dk;
            for (int c = 0; c < d; c++)
                x[c] = xs[(size_t)j * d + c];
            mla_linear(x, d, dk, w->kv_a, dk, 0, w->b_kv_a, w->layout, kj);
            mla_norm(kj, kvl, w->kv_a_norm, m->eps);
            if (p->rope.style != MHA_ROPE_NONE)
                rope_row(p, inv_freq, att, kj + kvl, j);
        }
        for (int r = 0; r < want; r++) {
            int lo;
            const int i = cli_sample_row(r, want, qlen), nvis = cli_visible(p, b, i, &lo);
            for (int c = 0; c < d; c++)
                x[c] = xs[(size_t)i * d + c];
            if (ql) {
                mla_linear(x, d, ql, w->q_a, ql, 0, w->b_q_a, w->layout, qa);
                mla_norm(qa, ql, w->q_a_norm, m->eps);
                mla_linear(qa, ql, h * qk, w->q_b, h * qk, 0, NULL, w->layout, q);
            } else
                mla_linear(x, d, h * qk, w->q, h * qk, 0, NULL, w->layout, q);
            for (int hd = 0; hd < h; hd++) {
                const double *qn = q + (size_t)hd * qk;
                for (int l = 0; l < kvl; l++) { /* q_lat = W_ukᵀ·q_nope */
                    double acc = 0;
                    for (int c = 0; c < nope; c++)
                        acc += qn[c] * (w->layout == MHA_LAYOUT_TORCH ? w->kv_b[((size_t)hd * nv + c) * kvl + l]
                                                                      : w->kv_b[(size_t)l * kvb + (size_t)hd * nv + c]);
                    qabs[l] = acc;
                }
                memcpy(qabs + kvl, qn + nope, (size_t)rope * sizeof *qabs);
                if (p->rope.style != MHA_ROPE_NONE)
                    rope_row(p, inv_freq, att, qabs + kvl, i + off);
                memset(z, 0, (size_t)dk * sizeof *z);
                if (nvis > lo)
                    cli_ref_attention_row(p, hd, i, qabs, K, K, dk, lo, nvis, a, z);
                for (int c = 0; c < vd; c++) { /* its value: W_uv·(the latent output) */
                    double acc = 0;
                    for (int l = 0; l < kvl; l++)
                        acc += z[l] * (w->layout == MHA_LAYOUT_TORCH ? w->kv_b[((size_t)hd * nv + nope + c) * kvl + l]
                                                                     : w->kv_b[(size_t)l * kvb + (size_t)hd * nv + nope + c]);
                    o[(size_t)hd * vd + c] = acc;
                }
            }
            mla_linear(o, h * vd, d, w->o, d, 0, w->b_o, w->layout, ref);
            cli_check_row(chk, out + ((size_t)b * p->seq_q + i) * d, ref, d);
        }
    }
done:
    free(K), free(x), free(qa), free(q), free(qabs), free(z), free(o), free(ref), free(a), free(inv_freq);
}

void cli_check_rows(const cli_problem *p, const float *out, int rows, cli_check *chk)
{
    if (p->mla.kv_lora_rank) {
        check_rows_mla(p, out, rows, chk);
        return;
    }
    const int d = p->d, dk = p->dk, qd = p->h * dk;
    if (rows <= 0)
        return;
    /* Sample from at most two sequences. The reference runs head by head: one head's keys and
     * values in double (seq_kv × d_k each), not the whole sequence's (seq_kv × d), so checking
     * a long context costs little memory next to the engine. */
    int seqs[2] = {0, p->batch - 1}, n_seq = p->batch > 1 ? 2 : 1;
    const int max_want = (rows + n_seq - 1) / n_seq; /* the first sequence's share, the larger */
    const int kvd = p->kvh * dk, group = p->h / p->kvh, off = p->seq_kv - p->seq_q;
    double *K = malloc((size_t)p->seq_kv * dk * sizeof *K), *V = malloc((size_t)p->seq_kv * dk * sizeof *V);
    double *q = malloc((size_t)dk * sizeof *q), *z = malloc((size_t)max_want * qd * sizeof *z);
    double *ref = malloc((size_t)d * sizeof *ref), *a = malloc((size_t)p->seq_kv * sizeof *a);
    const int full = p->qk_norm.kind == MHA_QK_NORM_FULL; /* QK-norm over the whole projection */
    double *all = malloc((size_t)(full ? qd : 1) * sizeof *all);
    float *inv_freq = malloc(((size_t)dk / 2 + 1) * sizeof *inv_freq), att = 1.0f;
    if (p->rope.style != MHA_ROPE_NONE && inv_freq)
        mha_rope_inv_freq(&p->rope, p->rope.rotary_dim, inv_freq, &att);
    if (!K || !V || !q || !z || !ref || !a || !all || !inv_freq) {
        chk->num = NAN, chk->rows++; /* no reference: the check fails */
        goto done;
    }
    for (int s = 0; s < n_seq; s++) {
        const int b = seqs[s], ql = q_len_of(p, b), kl = kv_len_of(p, b);
        const float *xq = p->q + (size_t)b * p->seq_q * d;
        const float *xkv = (p->kv ? p->kv : p->q) + (size_t)b * p->seq_kv * d;
        int want = (rows + n_seq - 1 - s) / n_seq;
        if (ql == 0 || want == 0)
            continue;
        int max_key = 0;
        for (int r = 0; r < want; r++) {
            const int nv = cli_visible(p, b, cli_sample_row(r, want, ql), NULL);
            max_key = nv > max_key ? nv : max_key;
        }
        if (max_key > kl)
            max_key = kl;
        memset(z, 0, (size_t)want * qd * sizeof *z);
        for (int h = 0; h < p->h; h++) {
            const int c0 = h * dk, kc0 = (h / group) * dk; /* its columns, its KV head's */
            if (h % group == 0) /* a new KV head: its keys and values (rotated keys at j) */
                for (int j = 0; j < max_key; j++) {
                    linear_cols(p, xkv + (size_t)j * d, p->w.w_k, p->w.b_k, kvd, kc0, dk, K + (size_t)j * dk);
                    linear_cols(p, xkv + (size_t)j * d, p->w.w_v, p->w.b_v, kvd, kc0, dk, V + (size_t)j * dk);
                    if (full) {
                        linear_cols(p, xkv + (size_t)j * d, p->w.w_k, p->w.b_k, kvd, 0, kvd, all);
                        norm_row(p, p->w.k_norm + kc0, K + (size_t)j * dk, all, kvd);
                    } else if (p->w.k_norm)
                        norm_row(p, p->w.k_norm, K + (size_t)j * dk, NULL, 0);
                    if (p->rope.style != MHA_ROPE_NONE)
                        rope_row(p, inv_freq, att, K + (size_t)j * dk, j);
                }
            for (int r = 0; r < want; r++) {
                int lo;
                const int i = cli_sample_row(r, want, ql), nv = cli_visible(p, b, i, &lo);
                if (nv <= lo)
                    continue;
                linear_cols(p, xq + (size_t)i * d, p->w.w_q, p->w.b_q, qd, c0, dk, q);
                if (full) {
                    linear_cols(p, xq + (size_t)i * d, p->w.w_q, p->w.b_q, qd, 0, qd, all);
                    norm_row(p, p->w.q_norm + c0, q, all, qd);
                } else if (p->w.q_norm)
                    norm_row(p, p->w.q_norm, q, NULL, 0);
                if (p->rope.style != MHA_ROPE_NONE)
                    rope_row(p, inv_freq, att, q, i + off);
                cli_ref_attention_row(p, h, i, q, K, V, dk, lo, nv, a, z + (size_t)r * qd + c0);
            }
        }
        for (int r = 0; r < want; r++) {
            const int i = cli_sample_row(r, want, ql);
            /* out row = z · Wo + bo, Wo (qd, d) */
            for (int o = 0; o < d; o++)
                ref[o] = p->w.b_o ? p->w.b_o[o] : 0.0;
            for (int c = 0; c < qd; c++)
                for (int o = 0; o < d; o++)
                    ref[o] += z[(size_t)r * qd + c] *
                              (p->w.layout == MHA_LAYOUT_TORCH ? p->w.w_o[(size_t)o * qd + c] : p->w.w_o[(size_t)c * d + o]);
            cli_check_row(chk, out + ((size_t)b * p->seq_q + i) * d, ref, d);
        }
    }
done:
    free(K), free(V), free(q), free(z), free(ref), free(a), free(all), free(inv_freq);
}

#if defined(__aarch64__)
/* An Arm core's name from /proc/cpuinfo's implementer and part (Linux gives no model name
 * there): the server cores seen in clouds, else the two numbers. */
static void arm_core_name(unsigned impl, unsigned part, char *model, size_t nm)
{
    static const struct { unsigned impl, part; const char *name; } cores[] = {
        {0x41, 0xd0c, "Arm Neoverse N1"}, {0x41, 0xd40, "Arm Neoverse V1"}, {0x41, 0xd49, "Arm Neoverse N2"},
        {0x41, 0xd4f, "Arm Neoverse V2"}, {0x41, 0xd84, "Arm Neoverse V3"}, {0x41, 0xd8e, "Arm Neoverse N3"},
        {0x41, 0xd08, "Arm Cortex-A72"}, {0x41, 0xd07, "Arm Cortex-A57"}, {0xc0, 0xac3, "Ampere AmpereOne"},
    };
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (cores[i].impl == impl && cores[i].part == part) {
            snprintf(model, nm, "%s", cores[i].name);
            return;
        }
    snprintf(model, nm, "Arm implementer %#x, part %#x", impl, part);
}
#endif

void cli_cpu_info(char *model, size_t nm, char *flags, size_t nf)
{
    snprintf(model, nm, "unknown");
    flags[0] = '\0';
#if defined(__aarch64__) /* the auxiliary vector's features, as the library reads them (qemu-user's too) */
    static const char *arm[] = {"asimd", "fphp", "asimdhp", "asimddp", "bf16", "i8mm", "sve", "sve2"};
    for (size_t i = 0; i < sizeof arm / sizeof arm[0]; i++)
        if (mha_cpu_has_feature(arm[i]))
            snprintf(flags + strlen(flags), nf - strlen(flags), "%s%s", flags[0] ? " " : "", arm[i]);
    unsigned impl = 0, part = 0;
    int got_impl = 0, got_part = 0;
#endif
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[8192];
    int got_model = 0, got_flags = 0;
    while ((!got_model || !got_flags) && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *value = colon + 2 <= line + strlen(line) ? colon + 2 : colon + 1;
        value[strcspn(value, "\n")] = '\0';
#if defined(__aarch64__) /* implementer and part (not qemu-user's host's model name: x86's line) */
        got_flags = 1;
        if (!got_impl && !strncmp(line, "CPU implementer", 15))
            got_impl = sscanf(value, "%x", &impl) == 1;
        if (!got_part && !strncmp(line, "CPU part", 8))
            got_part = sscanf(value, "%x", &part) == 1;
        if (got_impl && got_part && !got_model)
            arm_core_name(impl, part, model, nm), got_model = 1;
#else
        if (!got_model && !strncmp(line, "model name", 10)) {
            snprintf(model, nm, "%s", value);
            got_model = 1;
        } else if (!got_flags && !strncmp(line, "flags", 5)) {
            /* the features that decide kernels, in the order they matter */
            static const char *keep[] = {"sse4_2", "avx", "f16c", "fma", "avx2", "avx512f", "avx512dq", "avx512bw",
                                         "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", NULL};
            for (int i = 0; keep[i]; i++) {
                char pat[32];
                snprintf(pat, sizeof pat, " %s ", keep[i]);
                char padded[8200];
                snprintf(padded, sizeof padded, " %s ", value);
                if (strstr(padded, pat))
                    snprintf(flags + strlen(flags), nf - strlen(flags), "%s%s", flags[0] ? " " : "", keep[i]);
            }
            got_flags = 1;
        }
#endif
    }
    fclose(f);
}

void cli_openmp_binding(char *out, size_t n)
{
    static const char *binds[] = {"false", "true", "primary", "close", "spread"};
    omp_proc_bind_t bind = omp_get_proc_bind();
    int places = omp_get_num_places();
    size_t k = (size_t)snprintf(out, n, "proc_bind %s", (int)bind >= 0 && (int)bind < 5 ? binds[bind] : "?");
    if (bind == omp_proc_bind_false || places < 1) {
        snprintf(out + k, k < n ? n - k : 0, ", no places: OpenMP does not pin; mha uses the CPUs this process may use");
        return;
    }
    k += (size_t)snprintf(out + k, k < n ? n - k : 0, ", %d places:", places);
    for (int p = 0; p < places && p < 64 && k < n; p++) {
        int ids[1024], m = omp_get_place_num_procs(p);
        if (m < 0 || m > 1024)
            break;
        omp_get_place_proc_ids(p, ids);
        k += (size_t)snprintf(out + k, n - k, " {");
        for (int i = 0; i < m && k < n; i++)
            k += (size_t)snprintf(out + k, n - k, "%s%d", i ? "," : "", ids[i]);
        k += (size_t)snprintf(out + k, k < n ? n - k : 0, "}");
    }
    if (k < n)
        snprintf(out + k, n - k, "%s; libgomp binds the initial thread to the first before main, so mha takes its "
                                 "CPUs from the places, not from that thread", places > 64 ? " ..." : "");
}

void cli_print_json(json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (text)
        puts(text);
    free(text);
    json_decref(j);
}
