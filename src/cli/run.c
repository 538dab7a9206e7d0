/* run.c — `mha run [CONFIG] [options]`: one engine, real or generated weights and inputs,
 * timed forwards, a double-precision check of sampled rows, a summary or JSON. */
#define _GNU_SOURCE
#include <getopt.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "mha_io.h"

typedef struct run_opts {
    const char *config, *weights, *prefix, *input, *kv, *lengths, *kv_lengths, *output, *attn, *isa, *bf16_kernel;
    long threads, iters, warmup, check, layer;
    int json, causal, core, have_threads, have_iters, have_warmup, have_precision, have_kv, have_layer, have_wtype;
    int have_act;
    mha_precision precision;
    mha_kv_type kv_type;
    mha_weight_type wtype;  /* --weights-type */
    mha_activations act;    /* --activations */
} run_opts;

static void usage(FILE *f)
{
    fputs("usage: mha run [CONFIG] [--weights W.safetensors] [--prefix P] [--input X.npy] [--kv KV.npy]\n"
          "               [--lengths L.npy] [--kv-lengths L.npy] [--output Y.npy] [--attn A.npy]\n"
          "               [--threads N] [--iters N] [--warmup N] [--causal] [--check ROWS]\n"
          "               [--precision f32|bf16] [--isa auto|avx512|avx2|ref] [--bf16-kernel NAME]\n"
          "               [--kv-cache auto|f32|bf16|int8] [--core] [--json]\n"
          "               [--layer N] [--weights-type f32|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k]\n"
          "               [--activations f32|int16|bf16]\n"
          "With no CONFIG, the built-in default model (configs/default.yaml); with no --weights or\n"
          "--input, seeded random data. --lengths pads queries and, for self-attention, keys; output\n"
          "rows past a length are 0. --kv-lengths pads the --kv keys. --check ROWS: sampled output\n"
          "rows (default 4, 0 skips) against a double-precision reference (a decode block: one\n"
          "float32 forward) on the weights as the engine means them (blocks dequantized, floats\n"
          "quantized at load and back), ||out - ref|| / ||ref|| over them, exit 1 above the bound of\n"
          "the precision, cache, weights and rows, which the check's line names (f32 1e-4; bf16\n"
          "1e-2 on blocks, 1.5e-2 on floats, times 1 + 1/sqrt(rows); int8 cache 2e-2;\n"
          "docs/precision.md). A decode config takes --input (sequences, tokens, d_model) with\n"
          "--lengths: prefilled, then decoded token by token as its decode block says, every row\n"
          "to --output. --precision, --isa and --kv-cache\n"
          "override the config's engine.precision, engine.isa (the kernel table: mha info lists\n"
          "them), engine.bf16_kernel and engine.kv_cache (a decode block's cache). --core: the\n"
          "attention core alone (mha_core_forward) on seeded Q, K, V of the config's heads and\n"
          "batch (bf16 tensors with precision bf16), no projections.\n"
          "--weights M.gguf --layer N (default 0): layer N of a GGUF model (docs/gguf.md), its config\n"
          "from the file, overridden by CONFIG's keys and the options; its projections held as the\n"
          "file stores them (Q4_1, Q8_0, ...; F32 for float tensors). --weights-type (config\n"
          "weights.type): how the engine holds Wq, Wk, Wv, Wo instead, quantized or dequantized at load.\n"
          "--activations (config weights.activations): what block weights multiply: f32 (default),\n"
          "int16, activations rounded to int16 per 32 inputs for integer products, or bf16 (precision\n"
          "bf16): the engine's bf16 products on the weights dequantized into bf16 (docs/quant.md).\n", f);
}

static int parse(int argc, char **argv, run_opts *o)
{
    static const struct option longopts[] = {
        {"weights", required_argument, 0, 'w'}, {"prefix", required_argument, 0, 'p'},
        {"input", required_argument, 0, 'i'},   {"kv", required_argument, 0, 'k'},
        {"lengths", required_argument, 0, 'l'}, {"kv-lengths", required_argument, 0, 'L'},
        {"output", required_argument, 0, 'o'},  {"attn", required_argument, 0, 'a'},
        {"threads", required_argument, 0, 't'}, {"iters", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'W'},  {"check", required_argument, 0, 'c'},
        {"causal", no_argument, 0, 'C'},        {"json", no_argument, 0, 'j'},
        {"precision", required_argument, 0, 'P'}, {"isa", required_argument, 0, 'I'},
        {"kv-cache", required_argument, 0, 'K'}, {"core", no_argument, 0, 'R'},
        {"bf16-kernel", required_argument, 0, 'B'}, {"layer", required_argument, 0, 'Y'},
        {"weights-type", required_argument, 0, 'T'}, {"activations", required_argument, 0, 'Q'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->check = 4;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'w': o->weights = optarg; break;
        case 'p': o->prefix = optarg; break;
        case 'i': o->input = optarg; break;
        case 'k': o->kv = optarg; break;
        case 'l': o->lengths = optarg; break;
        case 'L': o->kv_lengths = optarg; break;
        case 'o': o->output = optarg; break;
        case 'a': o->attn = optarg; break;
        case 't': if (!cli_parse_int("--threads", optarg, 0, MHA_MAX_THREADS, &o->threads)) return 0; o->have_threads = 1; break;
        case 'n': if (!cli_parse_int("--iters", optarg, 1, 1000000, &o->iters)) return 0; o->have_iters = 1; break;
        case 'W': if (!cli_parse_int("--warmup", optarg, 0, 1000000, &o->warmup)) return 0; o->have_warmup = 1; break;
        case 'c': if (!cli_parse_int("--check", optarg, 0, 1000, &o->check)) return 0; break;
        case 'P': if (!cli_parse_precision(optarg, &o->precision)) return 0; o->have_precision = 1; break;
        case 'I': o->isa = optarg; break;
        case 'B': o->bf16_kernel = optarg; break;
        case 'K': if (!cli_parse_kv_type(optarg, &o->kv_type)) return 0; o->have_kv = 1; break;
        case 'Y': if (!cli_parse_int("--layer", optarg, 0, 1 << 20, &o->layer)) return 0; o->have_layer = 1; break;
        case 'T': if (!cli_parse_weight_type(optarg, &o->wtype)) return 0; o->have_wtype = 1; break;
        case 'Q': if (!cli_parse_activations(optarg, &o->act)) return 0; o->have_act = 1; break;
        case 'C': o->causal = 1; break;
        case 'R': o->core = 1; break;
        case 'j': o->json = 1; break;
        case 'h': usage(stdout); exit(EXIT_OK);
        case ':': cli_error("run: %s needs a value", argv[optind - 1]); return 0;
        default: cli_error("run: unknown option '%s' (see mha run --help)", argv[optind - 1]); return 0;
        }
    }
    if (optind < argc)
        o->config = argv[optind++];
    if (optind < argc) {
        cli_error("run: unexpected argument '%s'", argv[optind]);
        return 0;
    }
    return 1;
}

/* Everything a run allocates, freed in one place. */
typedef struct run_state {
    cli_config fc;
    cli_problem p;
    mha_weights_file wf;
    mha_gguf *gguf;             /* --weights M.gguf, open */
    mha_gguf_weights gw;        /* its layer's weights */
    float *gen_w;
    float *out, *attn;
    double *times;
    mha_engine *e;
} run_state;

static void release(run_state *s)
{
    mha_free(s->e);
    mha_weights_file_free(&s->wf);
    mha_gguf_weights_free(&s->gw);
    mha_gguf_close(s->gguf);
    free(s->gen_w);
    cli_problem_free(&s->p);
    free(s->out), free(s->attn), free(s->times);
}

static int load_inputs(const run_opts *o, run_state *s)
{
    cli_config *fc = &s->fc;
    cli_problem *p = &s->p;
    char err[512];
    mha_status st;
    int rc;
    if (!o->input) {
        if ((rc = cli_generate_inputs(fc, fc->engine.max_batch, p)) != EXIT_OK)
            return rc;
    } else {
        int64_t shape[3];
        cli_problem_model(p, &fc->engine);
        if ((st = mha_npy_load_f32(o->input, 3, shape, &p->q, err, sizeof err)) != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        if (shape[2] != fc->engine.d_model || shape[0] < 1 || shape[1] < 1 || shape[0] > 1 << 20 || shape[1] > 1 << 24)
            return cli_error("%s: shape (%lld, %lld, %lld): want (batch, seq, d_model = %d)", o->input, (long long)shape[0],
                             (long long)shape[1], (long long)shape[2], fc->engine.d_model), EXIT_USAGE;
        p->batch = (int)shape[0], p->seq_q = p->seq_kv = (int)shape[1];
        p->causal = fc->mask == MHA_MASK_CAUSAL;
    }
    if (o->kv) { /* replaces generated keys and their config lengths */
        int64_t shape[3];
        free(p->kv), free(p->kv_len);
        p->kv = NULL, p->kv_len = NULL;
        if ((st = mha_npy_load_f32(o->kv, 3, shape, &p->kv, err, sizeof err)) != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        if (shape[0] != p->batch || shape[2] != fc->engine.d_model || shape[1] < 1 || shape[1] > 1 << 24)
            return cli_error("%s: shape (%lld, %lld, %lld): want (batch = %d, seq_kv, d_model = %d)", o->kv,
                             (long long)shape[0], (long long)shape[1], (long long)shape[2], p->batch, fc->engine.d_model), EXIT_USAGE;
        p->seq_kv = (int)shape[1];
        p->cross = 1;
    }
    int64_t n;
    if (o->lengths) {
        free(p->q_len);
        p->q_len = NULL;
        if ((st = mha_npy_load_lengths(o->lengths, &n, &p->q_len, p->seq_q, err, sizeof err)) != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        if (n != p->batch)
            return cli_error("%s: %lld lengths for a batch of %d", o->lengths, (long long)n, p->batch), EXIT_USAGE;
    }
    if (o->kv_lengths) {
        if (!p->cross)
            return cli_error("--kv-lengths: only for cross-attention (--kv)"), EXIT_USAGE;
        free(p->kv_len);
        p->kv_len = NULL;
        if ((st = mha_npy_load_lengths(o->kv_lengths, &n, &p->kv_len, p->seq_kv, err, sizeof err)) != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        if (n != p->batch)
            return cli_error("%s: %lld lengths for a batch of %d", o->kv_lengths, (long long)n, p->batch), EXIT_USAGE;
    }
    if ((rc = cli_self_key_padding(p)) != EXIT_OK)
        return rc;
    p->causal |= o->causal;
    if (fc->mask == MHA_MASK_PADDING && !p->q_len && !p->kv_len) {
        if (fc->line_mask)
            cli_error("%s:%d: batch.mask: padding, but no lengths anywhere (batch.lengths, --lengths, --kv-lengths)",
                      fc->path, fc->line_mask);
        else
            cli_error("batch.mask: padding, but no lengths anywhere (batch.lengths, --lengths, --kv-lengths)");
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

static int load_weights(const run_opts *o, run_state *s)
{
    cli_problem *p = &s->p;
    if (s->gguf) {
        char err[1024];
        mha_status st = mha_gguf_layer_weights(s->gguf, (int)o->layer, &s->fc.engine, &s->gw, err, sizeof err);
        if (st != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        p->w = s->gw.w;
        return EXIT_OK;
    }
    if (o->weights) {
        char err[1024];
        mha_status st = mha_weights_file_load(o->weights, o->prefix, &s->fc.engine, &s->wf, err, sizeof err);
        if (st != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        p->w = s->wf.w, p->mw = s->wf.mla;
        return EXIT_OK;
    }
    if (o->prefix)
        return cli_error("--prefix: only with --weights"), EXIT_USAGE;
    return cli_generate_weights(&s->fc, p, &s->gen_w);
}

/* The whole process's peak resident memory. */
static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1024.0 : 0.0;
}

/* The median of the last (up to 64) of the k forward times so far. */
static double recent_median(int k, const double *t)
{
    double sorted[64];
    int m = k < 64 ? k : 64;
    memcpy(sorted, t + (k - m), (size_t)m * sizeof *t);
    return cli_stats_of(sorted, m).median;
}

/* --weights names a GGUF file (its magic, whatever its name): opened into s->gguf. MHA_OK (not
 * one, or opened), else the status after a message. */
static mha_status open_gguf(const run_opts *o, run_state *s)
{
    char magic[4] = {0}, err[1024];
    struct stat sb; /* only a regular file is opened here: a FIFO's open would wait for a writer */
    if (!o->weights || stat(o->weights, &sb) != 0 || !S_ISREG(sb.st_mode))
        return MHA_OK; /* not one: the weights' loader says why */
    FILE *f = fopen(o->weights, "rb");
    const int is = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f)
        fclose(f);
    if (!is)
        return MHA_OK;
    mha_status st = mha_gguf_open(o->weights, &s->gguf, err, sizeof err);
    if (st != MHA_OK)
        cli_error("%s", err);
    else if (o->prefix)
        cli_error("--prefix: not with a GGUF file (--layer N names the layer)"), st = MHA_ERR_INVALID_ARG;
    return st;
}

/* Layer --layer's config from the file, its projections held as stored: the block types as
 * they are, F32 for the float types (F16 and BF16 are converted at load, never held). */
static mha_status gguf_base(const run_opts *o, const mha_gguf *g, mha_config *base, char *err, size_t err_len)
{
    mha_gguf_layer t;
    mha_config_init(base);
    mha_status st = mha_gguf_layer_config(g, (int)o->layer, base, err, err_len);
    if (st != MHA_OK || (st = mha_gguf_layer_tensors(g, (int)o->layer, base, &t, err, err_len)) != MHA_OK)
        return st;
    const mha_gguf_tensor *m[MHA_W_COUNT] = {t.q ? t.q : t.qkv, t.k ? t.k : t.qkv, t.v ? t.v : t.qkv, t.o};
    int floats = 0;
    for (int i = 0; i < MHA_W_COUNT; i++) {
        const int ty = m[i]->type;
        const int f = ty == MHA_GGML_F32 || ty == MHA_GGML_F16 || ty == MHA_GGML_BF16;
        base->weight_type[i] = f ? MHA_WEIGHT_F32 : (mha_weight_type)ty;
        floats += f;
    }
    if (floats) /* the engine holds all four as blocks or all four as floats: a mix is dequantized */
        for (int i = 0; i < MHA_W_COUNT; i++)
            base->weight_type[i] = MHA_WEIGHT_F32;
    return MHA_OK;
}

/* The config (the file, or the built-in default) into s->fc, with the command's overrides.
 * Returns EXIT_OK or an exit code after a message. */
static int load_config(const run_opts *o, run_state *s)
{
    char err[1024];
    static const char builtin[] =
#include "default_yaml.h"
        ;
    mha_status st;
    if ((st = open_gguf(o, s)) != MHA_OK)
        return cli_exit_code(st);
    if (s->gguf) { /* the layer's config, then CONFIG's keys over it (its model block optional) */
        mha_config base;
        if ((st = gguf_base(o, s->gguf, &base, err, sizeof err)) == MHA_OK && o->config)
            st = cli_config_load_onto(o->config, &base, &s->fc, err, sizeof err);
        else if (st == MHA_OK) {
            cli_config_default(&s->fc);
            s->fc.engine = base;
            const char *stem = strrchr(o->weights, '/') ? strrchr(o->weights, '/') + 1 : o->weights;
            snprintf(s->fc.name, sizeof s->fc.name, "%.*s layer %ld", (int)strcspn(stem, "."), stem, o->layer);
        }
    } else if (o->have_layer)
        return cli_error("--layer: only with --weights M.gguf (a GGUF model's layers)"), EXIT_USAGE;
    else
        st = o->config ? cli_config_load(o->config, &s->fc, err, sizeof err)
                       : cli_config_parse(builtin, sizeof builtin - 1, "configs/default.yaml (built in)", &s->fc, err,
                                          sizeof err);
    if (st != MHA_OK)
        return cli_error("%s", err), cli_exit_code(st);
    if (o->have_wtype)
        for (int i = 0; i < MHA_W_COUNT; i++)
            s->fc.engine.weight_type[i] = o->wtype;
    if (o->have_act)
        s->fc.engine.weight_activations = o->act;
    if (o->have_threads) s->fc.engine.threads = (int)o->threads;
    if (o->have_precision) s->fc.engine.precision = o->precision;
    if ((o->have_kv && !cli_apply_kv_type(&s->fc.engine, o->kv_type)) || !cli_apply_isa(&s->fc.engine, o->isa) ||
        !cli_apply_bf16_kernel(&s->fc.engine, o->bf16_kernel))
        return EXIT_USAGE;
    if (o->have_iters) s->fc.iters = (int)o->iters;
    if (o->have_warmup) s->fc.warmup = (int)o->warmup; /* a decode block's untimed prefill too */
    return EXIT_OK;
}

/* The modes other than a forward: --core, and a config with a decode block (their options
 * checked). Returns their exit code, or -1 when the run is a forward. */
static int other_mode(const run_opts *o, run_state *s)
{
    if (o->core) { /* the attention core alone, on generated Q, K, V */
        const char *other = o->weights ? "--weights" : o->prefix ? "--prefix" : o->input ? "--input" : o->kv ? "--kv"
                            : o->lengths ? "--lengths" : o->kv_lengths ? "--kv-lengths" : o->output ? "--output"
                            : o->attn ? "--attn" : o->have_kv ? "--kv-cache" : NULL;
        if (other) {
            cli_error("%s: not with --core (the core runs on generated Q, K and V, with no weights or cache)", other);
            return EXIT_USAGE;
        }
        return cli_core(&s->fc, o->config, o->causal, (int)o->check, o->json);
    }
    if (s->fc.decode) { /* prefill and decode through the KV cache */
        const char *other = o->kv ? "--kv" : o->kv_lengths ? "--kv-lengths" : o->attn ? "--attn" : o->causal ? "--causal" : NULL;
        if (other) {
            cli_error("%s: not with a decode config (%s has a decode block: causal self-attention through the cache)",
                      other, o->config);
            return EXIT_USAGE;
        }
        if (!o->input && (o->lengths || o->output)) {
            cli_error("%s: only with --input in a decode config (generated tokens are not kept)",
                      o->lengths ? "--lengths" : "--output");
            return EXIT_USAGE;
        }
        const cli_decode_files files = {o->weights, o->prefix, o->input, o->lengths, o->output, s->gguf, (int)o->layer};
        return cli_decode(&s->fc, o->config, &files, (int)o->check, o->json);
    }
    if (o->have_kv) { /* a forward keeps no cache: int8 here would change nothing and look perfect */
        cli_error("--kv-cache: only with a decode block (a forward keeps no KV cache; %s has no decode block)",
                  o->config ? o->config : "the built-in default");
        return EXIT_USAGE;
    }
    return -1;
}

/* --output and --attn, each complete or absent. Returns EXIT_OK or EXIT_RUNTIME after a message. */
static int write_outputs(const run_opts *o, const run_state *s)
{
    const cli_problem *p = &s->p;
    char err[1024];
    mha_status st;
    if (o->output) {
        int64_t shape[3] = {p->batch, p->seq_q, p->d};
        if ((st = mha_npy_save_f32(o->output, s->out, 3, shape, err, sizeof err)) != MHA_OK) {
            cli_error("%s", err);
            return EXIT_RUNTIME;
        }
    }
    if (o->attn) {
        int64_t shape[4] = {p->batch, p->h, p->seq_q, p->seq_kv};
        if ((st = mha_npy_save_f32(o->attn, s->attn, 4, shape, err, sizeof err)) != MHA_OK) {
            cli_error("%s", err);
            return EXIT_RUNTIME;
        }
    }
    return EXIT_OK;
}

/* The run's summary: text, or one JSON object. */
static void report(const run_opts *o, const run_state *s, const cli_stats *tp, const cli_check *check)
{
    const cli_problem *p = &s->p;
    const cli_stats t = *tp;
    const double gflops = cli_flops(p) / (t.median * 1e6), tokens = cli_tokens(p) / (t.median / 1e3);
    int cpus[MHA_MAX_THREADS];
    const int nw = mha_engine_worker_cpus(s->e, cpus, MHA_MAX_THREADS);
    const char *mask = p->causal ? (p->q_len || p->kv_len ? "causal+padding" : "causal") : (p->q_len || p->kv_len ? "padding" : "none");
    const char *pin = mha_pinning_name(s->fc.engine.pinning);
    char rope_text[160] = "none";
    if (p->rope.style != MHA_ROPE_NONE) {
        const mha_rope *r = &p->rope;
        static const char *scalings[] = {"", ", linear", ", llama3", ", yarn"};
        snprintf(rope_text, sizeof rope_text, "%s theta %g, %d of %d features%s", r->style == MHA_ROPE_NEOX ? "neox" : "gptj",
                 (double)r->theta, r->rotary_dim, p->dk, scalings[r->scaling & 3]);
        if (r->scaling != MHA_ROPE_SCALING_NONE)
            snprintf(rope_text + strlen(rope_text), sizeof rope_text - strlen(rope_text), " ×%g", (double)r->factor);
    }
    char variants[160];
    cli_variants_text(p, &s->fc.engine, variants, sizeof variants);
    if (o->json) {
        json_t *j = json_object(), *wc = json_array();
        for (int i = 0; i < nw; i++)
            json_array_append_new(wc, json_integer(cpus[i]));
        json_object_set_new(j, "name", json_string(s->fc.name));
        json_object_set_new(j, "config", o->config ? json_string(o->config) : json_null());
        json_object_set_new(j, "d_model", json_integer(p->d));
        json_object_set_new(j, "heads", json_integer(p->h));
        json_object_set_new(j, "kv_heads", json_integer(p->kvh));
        json_object_set_new(j, "rope", json_string(rope_text));
        json_object_set_new(j, "window", json_integer(p->window));
        json_object_set_new(j, "variants", json_string(variants));
        json_object_set_new(j, "batch", json_integer(p->batch));
        json_object_set_new(j, "seq_q", json_integer(p->seq_q));
        json_object_set_new(j, "seq_kv", json_integer(p->seq_kv));
        json_object_set_new(j, "cross", json_boolean(p->cross));
        json_object_set_new(j, "mask", json_string(mask));
        json_object_set_new(j, "threads", json_integer(mha_engine_threads(s->e)));
        json_object_set_new(j, "pinning", json_string(pin));
        json_object_set_new(j, "worker_cpus", wc);
        json_object_set_new(j, "isa", json_string(mha_engine_isa(s->e)));
        json_object_set_new(j, "blis_arch", json_string(mha_engine_blis_arch(s->e)));
        json_object_set_new(j, "precision", json_string(mha_precision_name(s->fc.engine.precision)));
        json_object_set_new(j, "kernel", json_string(mha_engine_kernel(s->e)));
        json_object_set_new(j, "q_block", json_integer(mha_engine_q_block(s->e)));
        json_object_set_new(j, "weights", json_string(o->weights ? o->weights : "random"));
        json_object_set_new(j, "input", json_string(o->input ? o->input : "random"));
        json_object_set_new(j, "warmup", json_integer(s->fc.warmup));
        json_object_set_new(j, "iters", json_integer(s->fc.iters));
        json_object_set_new(j, "median_ms", json_real(t.median));
        json_object_set_new(j, "min_ms", json_real(t.min));
        json_object_set_new(j, "max_ms", json_real(t.max));
        json_object_set_new(j, "gflops", json_real(gflops));
        json_object_set_new(j, "flops_counted", json_string("unmasked"));
        json_object_set_new(j, "tokens_per_s", json_real(tokens));
        json_object_set_new(j, "peak_rss_mb", json_real(peak_rss_mb()));
        cli_check_json(j, check, s->fc.engine.precision, MHA_KV_AUTO, s->fc.engine.weight_type,
                       s->fc.engine.weight_activations);
        cli_print_json(j);
    } else {
        printf("mha run: %s%s%s%s\n", s->fc.name, o->config ? " (" : "", o->config ? o->config : "", o->config ? ")" : " (built-in default)");
        char mla[160];
        cli_mla_text(p, mla, sizeof mla);
        printf("  model    d_model %d, %d heads (d_k %d)%s", p->d, p->h, p->dk, mla);
        if (!mla[0] && p->kvh != p->h)
            printf(", %d KV heads", p->kvh);
        printf(", %s", s->fc.engine.bias ? "biases" : "no biases");
        if (p->rope.style != MHA_ROPE_NONE)
            printf(", RoPE %s", rope_text);
        if (p->window)
            printf(", window %d", p->window);
        if (variants[0])
            printf(", %s", variants);
        printf("\n");
        printf("  batch    %d × %d%s, %s-attention (seq_kv %d), mask %s\n", p->batch, p->seq_q, "", p->cross ? "cross" : "self",
               p->seq_kv, mask);
        char scheme[160] = "";
        if (s->gguf) /* each matrix's type as the file hands it, and how the engine holds it */
            snprintf(scheme, sizeof scheme, "layer %ld, Wq/Wk/Wv/Wo %s/%s/%s/%s held as %s/%s/%s/%s%s", o->layer,
                     cli_weight_type_name(p->w.type[0]), cli_weight_type_name(p->w.type[1]),
                     cli_weight_type_name(p->w.type[2]), cli_weight_type_name(p->w.type[3]),
                     cli_weight_type_name(s->fc.engine.weight_type[0]), cli_weight_type_name(s->fc.engine.weight_type[1]),
                     cli_weight_type_name(s->fc.engine.weight_type[2]), cli_weight_type_name(s->fc.engine.weight_type[3]),
                     s->gw.permuted ? ", Q/K rows back in HF's order" : "");
        else if (o->weights)
            snprintf(scheme, sizeof scheme, "%s", s->wf.scheme);
        printf("  data     input %s, weights %s%s%s\n", o->input ? o->input : "random", o->weights ? o->weights : "random",
               o->weights ? ", " : "", scheme);
        printf("  engine   %d threads, pinning %s, workers on CPUs", mha_engine_threads(s->e), pin);
        for (int i = 0; i < nw; i++)
            printf("%s%d", i ? "," : " ", cpus[i]);
        char arena[32];
        printf("; isa %s, kernel %s (BLIS %s), q_block %d, arena %s\n", mha_engine_isa(s->e), mha_engine_kernel(s->e),
               mha_blis_version(), mha_engine_q_block(s->e),
               cli_bytes_text(mha_engine_workspace_size(s->e), arena, sizeof arena));
        printf("  time     median %.3f ms (min %.3f, max %.3f) over %d forwards after %d warm-up\n", t.median, t.min,
               t.max, s->fc.iters, s->fc.warmup);
        printf("  speed    %.1f GFLOP/s (unmasked work), %.0f tokens/s; peak RSS %.0f MiB\n", gflops, tokens, peak_rss_mb());
        if (o->output)
            printf("  wrote    %s (%d, %d, %d)\n", o->output, p->batch, p->seq_q, p->d);
        if (o->attn)
            printf("  wrote    %s (%d, %d, %d, %d)\n", o->attn, p->batch, p->h, p->seq_q, p->seq_kv);
    }
}

int mha_cli_run(int argc, char **argv)
{
    run_opts o;
    if (!parse(argc, argv, &o))
        return EXIT_USAGE;
    run_state s;
    memset(&s, 0, sizeof s);
    char err[1024];
    mha_status st;
    int rc;
    /* from here every exit goes through out: the state holds an open GGUF file */
    if ((rc = load_config(&o, &s)) != EXIT_OK)
        goto out;
    if (!o.core && (st = cli_config_projections(&s.fc, err, sizeof err)) != MHA_OK) { /* a forward or a decode */
        cli_error("%s", err);
        rc = cli_exit_code(st);
        goto out;
    }
    if (s.fc.engine.mla.kv_lora_rank && (o.attn || o.kv)) { /* the engine's refusals, before any work */
        cli_error("%s: not with model.mla (%s)", o.attn ? "--attn" : "--kv",
                  o.attn ? "the absorbed form gives no attention weights" : "self-attention only");
        rc = EXIT_USAGE;
        goto out;
    }
    if ((rc = other_mode(&o, &s)) >= 0 || (rc = load_inputs(&o, &s)) != EXIT_OK ||
        (rc = load_weights(&o, &s)) != EXIT_OK)
        goto out;

    cli_problem *p = &s.p;
    mha_config cfg;
    cfg = s.fc.engine;
    cfg.max_batch = p->batch, cfg.max_seq_q = p->seq_q, cfg.max_seq_kv = p->seq_kv;
    if ((st = mha_create(&cfg, &s.e)) != MHA_OK || (st = cli_set_weights(s.e, p)) != MHA_OK) {
        rc = cli_engine_failed(&cfg, s.e, st);
        goto out;
    }
    size_t n_out = (size_t)p->batch * p->seq_q * p->d, n_attn = 0;
    if (o.attn && (__builtin_mul_overflow((size_t)p->batch * p->h, (size_t)p->seq_q * p->seq_kv, &n_attn) ||
                   !(s.attn = malloc(n_attn * sizeof *s.attn)))) {
        cli_error("--attn: %d × %d × %d × %d weights do not fit in memory", p->batch, p->h, p->seq_q, p->seq_kv);
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (!(s.out = malloc(n_out * sizeof *s.out)) || !(s.times = malloc((size_t)s.fc.iters * sizeof *s.times))) {
        cli_error("out of memory for the output");
        rc = EXIT_RUNTIME;
        goto out;
    }
    mha_input in = {
        .batch = p->batch, .seq_q = p->seq_q, .seq_kv = p->seq_kv,
        .q = p->q, .k = p->kv ? p->kv : p->q, .v = p->kv ? p->kv : p->q,
        .q_lengths = p->q_len, .kv_lengths = p->kv_len, .causal = p->causal,
    };

    /* warm-up, then timed forwards; progress on a terminal once a run is long */
    for (int i = 0; i < s.fc.warmup; i++)
        if ((st = mha_forward(s.e, &in, s.out, s.attn)) != MHA_OK)
            break;
    cli_progress pr;
    cli_progress_begin(&pr, o.json);
    for (int i = 0; st == MHA_OK && i < s.fc.iters; i++) {
        double t0 = cli_now_ms();
        st = mha_forward(s.e, &in, s.out, s.attn);
        s.times[i] = cli_now_ms() - t0;
        cli_progress_show(&pr, "forward %d/%d, median %.3f ms", i + 1, s.fc.iters, recent_median(i + 1, s.times));
    }
    cli_progress_end(&pr);
    if (st != MHA_OK) {
        cli_error("forward: %s", mha_status_str(st));
        rc = cli_exit_code(st);
        goto out;
    }
    cli_check check = {0};
    /* the double-precision reference on the floats the weights mean: a file's blocks
     * dequantized, floats quantized at load through the engine's quantizer and back */
    cli_ref_weights ref;
    char against[160] = "a double-precision reference";
    if (o.check) {
        if ((st = cli_ref_weights_make(p, &cfg, &ref)) != MHA_OK) {
            cli_error("check: the reference's weights: %s", mha_status_str(st));
            rc = EXIT_RUNTIME;
            goto out;
        }
        cli_problem rp = *p;
        rp.w = ref.w;
        cli_check_rows(&rp, s.out, (int)o.check, &check);
        if (ref.what[0])
            snprintf(against + strlen(against), sizeof against - strlen(against), " on %s", ref.what);
        cli_ref_weights_free(&ref);
    }
    const cli_stats t = cli_stats_of(s.times, s.fc.iters);
    if ((rc = write_outputs(&o, &s)) != EXIT_OK)
        goto out;
    report(&o, &s, &t, &check);
    rc = cli_check_verdict(&check, s.fc.engine.precision, MHA_KV_AUTO, s.fc.engine.weight_type,
                           s.fc.engine.weight_activations, against, o.json);
out:
    release(&s);
    return rc;
}
