/* decode.c — `mha run CONFIG` for a config with a decode block: sequences prefilled through
 * the paged KV cache (prefill_chunk tokens per sequence per step up to `context`; with
 * run.warmup > 0 an untimed prefill first), then decode steps of `new` tokens per sequence;
 * prefill tokens/s, step latency (median, p99), decode tokens/s, the cache's bytes. The tokens
 * are generated (seqs sequences of context + new·steps tokens), or a file's (--input: each
 * sequence to its length, the block then a capacity: context + new·steps tokens at most),
 * whose every output row --output writes. The check (the rule of every mode, common.c):
 * sampled rows of the first and last sequence kept against one causal float32 mha_forward
 * over their tokens. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"

typedef struct decode_state {
    mha_engine *e, *check_e;
    mha_kv_cache *cache;
    mha_weights_file wf;
    mha_gguf_weights gw;        /* a GGUF layer's (cli_decode_files.gguf) */
    float *gen_w, *x, *out, *check_out;
    /* the sequences kept, rows S apart: their tokens (the --input, or sequence 0's generated
     * ones for the check) and their output rows (zeros past a length) */
    float *tokens, *rows;
    int kept, S, given;      /* given: tokens is the --input, not generated */
    int32_t *len;            /* each sequence's tokens */
    int n_seqs, max_blocks, d;
    double *times;
    int32_t *table, *past, *add;
    int *want;               /* the next step's tokens per sequence */
} decode_state;

static void release(decode_state *s)
{
    mha_free(s->e), mha_free(s->check_e);
    mha_kv_cache_free(s->cache);
    mha_weights_file_free(&s->wf);
    mha_gguf_weights_free(&s->gw);
    free(s->gen_w), free(s->x), free(s->out), free(s->check_out), free(s->times);
    free(s->tokens), free(s->rows), free(s->len), free(s->table), free(s->past), free(s->add), free(s->want);
}

/* One step of want[q] tokens for every sequence (0 for those that are done): the file's next
 * tokens, or seeded random ones (the kept sequences' kept); the kept sequences' outputs kept.
 * Returns the step's time in ms, or -1. */
static double step(decode_state *s, uint64_t *seed)
{
    const int n_seqs = s->n_seqs, max_blocks = s->max_blocks, d = s->d;
    const int *want = s->want;
    size_t rows = 0;
    for (int q = 0; q < n_seqs; q++) {
        float *x = s->x + rows * d, *keep = q < s->kept ? s->tokens + ((size_t)q * s->S + s->past[q]) * d : NULL;
        s->add[q] = want[q];
        if (s->given)
            memcpy(x, keep, (size_t)want[q] * d * sizeof *x);
        else {
            cli_fill_uniform(x, (size_t)want[q] * d, -1.0f, 1.0f, seed);
            if (keep)
                memcpy(keep, x, (size_t)want[q] * d * sizeof *x);
        }
        rows += (size_t)want[q];
    }
    mha_step st = {.n_seqs = n_seqs, .n_past = s->past, .n_new = s->add, .blocks = s->table, .max_blocks = max_blocks,
                   .x = s->x};
    double t0 = cli_now_ms();
    mha_status r = mha_step_forward(s->e, s->cache, &st, s->out);
    double t1 = cli_now_ms();
    if (r != MHA_OK) {
        cli_error("step: %s: %s", mha_status_str(r), mha_engine_last_error(s->e));
        return -1;
    }
    rows = 0;
    for (int q = 0; q < n_seqs; q++) {
        if (q < s->kept)
            memcpy(s->rows + ((size_t)q * s->S + s->past[q]) * d, s->out + rows * d, (size_t)s->add[q] * d * sizeof *s->out);
        rows += (size_t)s->add[q];
        s->past[q] += s->add[q];
    }
    return t1 - t0;
}

/* The --input tokens and --lengths into s: n_seqs sequences; each within the cache's `cap`
 * tokens. Returns EXIT_OK or an exit code after a message naming the file and the sizes. */
static int load_tokens(const cli_decode_files *f, int d, int cap, decode_state *s, int *n_seqs)
{
    char err[512];
    int64_t shape[3], n;
    mha_status st;
    if ((st = mha_npy_load_f32(f->input, 3, shape, &s->tokens, err, sizeof err)) != MHA_OK)
        return cli_error("%s", err), cli_exit_code(st);
    s->given = 1;
    if (shape[2] != d || shape[0] < 1 || shape[1] < 1 || shape[0] > 1 << 20 || shape[1] > 1 << 24)
        return cli_error("%s: shape (%lld, %lld, %lld): want (sequences, tokens, d_model = %d)", f->input,
                         (long long)shape[0], (long long)shape[1], (long long)shape[2], d), EXIT_USAGE;
    *n_seqs = s->kept = (int)shape[0], s->S = (int)shape[1];
    if (f->lengths) {
        if ((st = mha_npy_load_lengths(f->lengths, &n, &s->len, s->S, err, sizeof err)) != MHA_OK)
            return cli_error("%s", err), cli_exit_code(st);
        if (n != *n_seqs)
            return cli_error("%s: %lld lengths for %d sequences (%s)", f->lengths, (long long)n, *n_seqs, f->input), EXIT_USAGE;
    } else if ((s->len = malloc((size_t)*n_seqs * sizeof *s->len))) {
        for (int q = 0; q < *n_seqs; q++)
            s->len[q] = s->S;
    } else
        return cli_error("out of memory for %d lengths", *n_seqs), EXIT_RUNTIME;
    for (int q = 0; q < *n_seqs; q++)
        if (s->len[q] > cap)
            return cli_error("%s: sequence %d has %d tokens, more than the decode block's cache holds (context + new × "
                             "steps = %d)", f->input, q, (int)s->len[q], cap), EXIT_USAGE;
    return EXIT_OK;
}

/* The check: `rows` rows sampled over the first and last kept sequence against one causal
 * float32 forward over the kept sequences' tokens, on the floats the weights mean (a file's
 * blocks dequantized, floats quantized at load and back: cli_ref_weights_make; what it names
 * into what), into c. Returns EXIT_OK or an exit code after a message. */
static int check_rows(decode_state *s, const mha_config *cfg, const cli_problem *w, int rows, cli_check *c, char *what,
                      size_t what_len)
{
    const int d = cfg->d_model, S = s->S, B = s->kept;
    mha_config one = *cfg;
    one.max_batch = B, one.max_seq_q = one.max_seq_kv = S;
    one.precision = MHA_PRECISION_F32; /* a float32 forward: no cache, no bf16 kernel */
    one.kv_type = MHA_KV_AUTO, one.bf16_kernel[0] = '\0';
    for (int i = 0; i < MHA_W_COUNT; i++)
        one.weight_type[i] = MHA_WEIGHT_F32; /* the reference's floats, as they are */
    one.weight_activations = MHA_ACTIVATIONS_F32; /* float activations: f32 weights multiply nothing else */
    cli_ref_weights ref;
    mha_status st = cli_ref_weights_make(w, cfg, &ref);
    if (st != MHA_OK)
        return cli_error("check: the reference's weights: %s", mha_status_str(st)), EXIT_RUNTIME;
    cli_problem rp = *w;
    rp.w = ref.w;
    snprintf(what, what_len, "%s", ref.what);
    st = MHA_ERR_NOMEM;
    s->check_out = malloc((size_t)B * S * d * sizeof *s->check_out);
    if (s->check_out && (st = mha_create(&one, &s->check_e)) == MHA_OK)
        st = cli_set_weights(s->check_e, &rp);
    cli_ref_weights_free(&ref); /* the engine holds its own copy */
    if (st != MHA_OK)
        return cli_error("check: an engine for %d × %d tokens: %s", B, S, s->check_out ? mha_status_str(st) : "out of memory"),
               EXIT_RUNTIME;
    const mha_input in = {.batch = B, .seq_q = S, .seq_kv = S, .q = s->tokens, .k = s->tokens, .v = s->tokens,
                          .q_lengths = s->given ? s->len : NULL, .kv_lengths = s->given ? s->len : NULL, .causal = 1};
    if ((st = mha_forward(s->check_e, &in, s->check_out, NULL)) != MHA_OK)
        return cli_error("check: forward: %s", mha_engine_last_error(s->check_e)), EXIT_RUNTIME;
    const int seqs[2] = {0, B - 1}, n_seq = B > 1 ? 2 : 1;
    for (int t = 0; t < n_seq; t++) {
        const int b = seqs[t], want = (rows + n_seq - 1 - t) / n_seq;
        for (int r = 0; r < want && s->len[b] > 0; r++) {
            const size_t at = ((size_t)b * S + cli_sample_row(r, want, s->len[b])) * d;
            cli_check_row_f(c, s->rows + at, s->check_out + at, d);
        }
    }
    return EXIT_OK;
}

/* Every sequence chunk by chunk to `context` tokens (or its length); with run.warmup > 0 once
 * untimed first (the same tokens, the cache then rewound), so the timed one runs warm; its
 * time and tokens into *ms and *tokens. Returns 0, or -1 after a message. */
static int prefill(decode_state *s, const cli_config *fc, uint64_t *seed, cli_progress *pr, double *ms, long *tokens)
{
    const int context = fc->decode_context;
    const int chunk = fc->decode_prefill_chunk < context ? fc->decode_prefill_chunk : context;
    for (int pass = fc->warmup > 0 ? 0 : 1; pass < 2; pass++) {
        uint64_t pass_seed = *seed;
        for (;;) {
            int busy = 0;
            for (int q = 0; q < s->n_seqs; q++) {
                const int to = s->len[q] < context ? s->len[q] : context;
                s->want[q] = to - s->past[q] < chunk ? to - s->past[q] : chunk;
                busy |= s->want[q] > 0;
            }
            if (!busy)
                break;
            const double t = step(s, &pass_seed);
            if (t < 0)
                return -1;
            if (pass) {
                *ms += t;
                for (int q = 0; q < s->n_seqs; q++)
                    *tokens += s->want[q];
            }
            cli_progress_show(pr, "%sprefill %d/%d tokens", pass ? "" : "warm-up ", s->past[0], context);
        }
        if (pass)
            *seed = pass_seed;
        else { /* rewound: the blocks released, so that an int8 cache's open groups free their entries */
            memset(s->past, 0, (size_t)s->n_seqs * sizeof *s->past);
            mha_status st = mha_kv_cache_release(s->cache, s->table, s->n_seqs * s->max_blocks);
            if (st != MHA_OK)
                return cli_error("prefill: %s", mha_kv_cache_last_error(s->cache)), -1;
        }
    }
    return 0;
}

/* Steps of `add` tokens per sequence until each has its tokens (at most `steps`), their times
 * into s->times. Returns how many ran, or -1 after a message. */
static int decode(decode_state *s, int add, int steps, uint64_t *seed, cli_progress *pr)
{
    int ran = 0;
    while (ran < steps) {
        int busy = 0;
        for (int q = 0; q < s->n_seqs; q++) {
            s->want[q] = s->len[q] - s->past[q] < add ? s->len[q] - s->past[q] : add;
            busy |= s->want[q] > 0;
        }
        if (!busy)
            break;
        if ((s->times[ran] = step(s, seed)) < 0)
            return -1;
        ran++;
        cli_progress_show(pr, "decode step %d, last %.2f ms", ran, s->times[ran - 1]);
    }
    return ran;
}

/* The run's summary: text, or one JSON object; ran decode steps, the timed prefill's ms and
 * tokens. Sorts s->times. */
static void report(decode_state *s, const cli_config *fc, const char *config, const cli_decode_files *f,
                   const cli_problem *p, const mha_config *cfg, mha_kv_type kv, int ran, double prefill_ms, long prefilled,
                   const cli_check *checked, int json)
{
    const int n_seqs = s->n_seqs, d = s->d, bs = fc->decode_block_size, context = fc->decode_context;
    const int add = fc->decode_new, chunk = fc->decode_prefill_chunk < context ? fc->decode_prefill_chunk : context;
    /* p99 of the step times (nearest rank) */
    const cli_stats t = ran ? cli_stats_of(s->times, ran) : (cli_stats){0}; /* sorts */
    const double p99 = ran ? s->times[(int)ceil(0.99 * ran) - 1] : 0;
    long decoded = -prefilled;
    for (int q = 0; q < n_seqs; q++)
        decoded += s->past[q];
    const double prefill_tps = prefill_ms > 0 ? prefilled / (prefill_ms / 1e3) : 0;
    const double decode_tps = ran ? (double)decoded / ran / (t.median / 1e3) : 0;
    const size_t cache_bytes = mha_kv_cache_size(cfg, n_seqs * s->max_blocks, bs, n_seqs);
    if (json) {
        json_t *j = json_object();
        json_object_set_new(j, "mode", json_string("decode"));
        json_object_set_new(j, "name", json_string(fc->name));
        json_object_set_new(j, "config", json_string(config));
        json_object_set_new(j, "d_model", json_integer(d));
        json_object_set_new(j, "heads", json_integer(p->h));
        json_object_set_new(j, "kv_heads", json_integer(p->kvh));
        json_object_set_new(j, "input", json_string(f->input ? f->input : "random"));
        json_object_set_new(j, "seqs", json_integer(n_seqs));
        json_object_set_new(j, "context", json_integer(context));
        json_object_set_new(j, "new", json_integer(add));
        json_object_set_new(j, "steps", json_integer(ran));
        json_object_set_new(j, "block_size", json_integer(bs));
        json_object_set_new(j, "threads", json_integer(mha_engine_threads(s->e)));
        json_object_set_new(j, "isa", json_string(mha_engine_isa(s->e)));
        json_object_set_new(j, "precision", json_string(mha_precision_name(cfg->precision)));
        json_object_set_new(j, "kernel", json_string(mha_engine_kernel(s->e)));
        json_object_set_new(j, "prefill_ms", json_real(prefill_ms));
        json_object_set_new(j, "prefill_tokens_per_s", json_real(prefill_tps));
        json_object_set_new(j, "step_median_ms", json_real(t.median));
        json_object_set_new(j, "step_p99_ms", json_real(p99));
        json_object_set_new(j, "step_min_ms", json_real(t.min));
        json_object_set_new(j, "step_max_ms", json_real(t.max));
        json_object_set_new(j, "decode_tokens_per_s", json_real(decode_tps));
        json_object_set_new(j, "kv_cache", json_string(mha_kv_type_name(kv)));
        json_object_set_new(j, "kv_cache_bytes", json_integer((json_int_t)cache_bytes));
        cli_check_json(j, checked, cfg->precision, kv, cfg->weight_type, cfg->weight_activations);
        cli_print_json(j);
        return;
    }
    printf("mha run (decode): %s (%s)\n", fc->name, config);
    char mla[160];
    cli_mla_text(p, mla, sizeof mla);
    printf("  model    d_model %d, %d heads, %d KV heads (d_k %d)%s\n", d, p->h, p->kvh, p->dk, mla);
    if (f->input)
        printf("  data     input %s (%d sequences of up to %d tokens), weights %s\n", f->input, n_seqs, s->S,
               f->weights ? f->weights : "random");
    printf("  decode   %d sequences, %s %d tokens in chunks of %d, then %d steps of %d token%s each\n", n_seqs,
           f->input ? "each prefilled to the lower of its length and" : "prefilled to", context, chunk, ran, add,
           add == 1 ? "" : "s");
    char bytes[32];
    printf("  engine   %d threads, isa %s, %s, kernel %s; KV cache %s, %d blocks of %d slots, %s\n",
           mha_engine_threads(s->e), mha_engine_isa(s->e), mha_precision_name(cfg->precision), mha_engine_kernel(s->e),
           mha_kv_type_name(kv), n_seqs * s->max_blocks, bs, cli_bytes_text(cache_bytes, bytes, sizeof bytes));
    printf("  prefill  %.1f ms, %.0f tokens/s\n", prefill_ms, prefill_tps);
    if (ran) {
        printf("  step     median %.3f ms, p99 %.3f ms (min %.3f, max %.3f) over %d steps\n", t.median, p99, t.min, t.max,
               ran);
        printf("  decode   %.0f tokens/s\n", decode_tps);
    }
    if (f->output)
        printf("  wrote    %s (%d, %d, %d)\n", f->output, s->kept, s->S, d);
}

/* The steps' buffers for s->n_seqs sequences of up to seq_q new rows a step: block tables
 * (sequence q: blocks q·max_blocks ..), lengths, rows in and out, step times, the kept rows
 * (zeros past each length). 0, or -1 when out of memory. */
static int buffers(decode_state *s, int seq_q, int steps)
{
    const int n_seqs = s->n_seqs, d = s->d;
    const size_t rows_max = (size_t)n_seqs * seq_q;
    s->table = malloc((size_t)n_seqs * s->max_blocks * sizeof *s->table);
    s->past = calloc((size_t)n_seqs, sizeof *s->past), s->add = calloc((size_t)n_seqs, sizeof *s->add);
    s->x = malloc(rows_max * d * sizeof *s->x), s->out = malloc(rows_max * d * sizeof *s->out);
    s->times = malloc((size_t)steps * sizeof *s->times);
    s->rows = calloc((size_t)s->kept * s->S * d + 1, sizeof *s->rows);
    s->want = calloc((size_t)n_seqs, sizeof *s->want);
    if (!s->table || !s->past || !s->add || !s->x || !s->out || !s->times || !s->want || !s->rows)
        return -1;
    for (int i = 0; i < n_seqs * s->max_blocks; i++)
        s->table[i] = i;
    return 0;
}

int cli_decode(const cli_config *fc, const char *config, const cli_decode_files *f, int check, int json)
{
    decode_state s;
    memset(&s, 0, sizeof s);
    int n_seqs = fc->decode_seqs;
    const int context = fc->decode_context, add = fc->decode_new, steps = fc->decode_steps;
    const int chunk = fc->decode_prefill_chunk < context ? fc->decode_prefill_chunk : context, bs = fc->decode_block_size;
    const int cap = context + add * steps, d = fc->engine.d_model;
    char err[1024];
    int rc = EXIT_RUNTIME;
    mha_status st;
    cli_problem p = {0};
    if (f->input) {
        if ((rc = load_tokens(f, d, cap, &s, &n_seqs)) != EXIT_OK)
            goto out;
    } else { /* generated: every sequence to the capacity; sequence 0 kept for the check */
        s.kept = check > 0, s.S = cap;
        if (!(s.len = malloc((size_t)n_seqs * sizeof *s.len)) ||
            (s.kept && !(s.tokens = malloc((size_t)cap * d * sizeof *s.tokens)))) {
            cli_error("out of memory for %d sequences of %d tokens", n_seqs, cap);
            goto out;
        }
        for (int q = 0; q < n_seqs; q++)
            s.len[q] = cap;
    }
    mha_config cfg = fc->engine;
    cfg.max_batch = n_seqs;
    cfg.max_seq_q = chunk > add ? chunk : add;
    cfg.max_seq_kv = cap;
    const int max_blocks = (cap + bs - 1) / bs;
    s.n_seqs = n_seqs, s.max_blocks = max_blocks, s.d = d;
    cli_problem_model(&p, &cfg);

    if (f->gguf) {
        if ((st = mha_gguf_layer_weights(f->gguf, f->layer, &cfg, &s.gw, err, sizeof err)) != MHA_OK) {
            cli_error("%s", err);
            rc = cli_exit_code(st);
            goto out;
        }
        p.w = s.gw.w;
    } else if (f->weights) {
        if ((st = mha_weights_file_load(f->weights, f->prefix, &cfg, &s.wf, err, sizeof err)) != MHA_OK) {
            cli_error("%s", err);
            rc = cli_exit_code(st);
            goto out;
        }
        p.w = s.wf.w, p.mw = s.wf.mla;
    } else if ((rc = cli_generate_weights(fc, &p, &s.gen_w)) != EXIT_OK) {
        goto out;
    }
    rc = EXIT_RUNTIME;
    if ((st = mha_create(&cfg, &s.e)) != MHA_OK || (st = cli_set_weights(s.e, &p)) != MHA_OK) {
        rc = cli_engine_failed(&cfg, s.e, st);
        goto out;
    }
    if ((st = mha_kv_cache_create(&cfg, n_seqs * max_blocks, bs, n_seqs, &s.cache)) != MHA_OK) {
        cli_error("KV cache of %d blocks of %d slots: %s", n_seqs * max_blocks, bs, mha_status_str(st));
        goto out;
    }
    if (buffers(&s, cfg.max_seq_q, steps) != 0) {
        cli_error("out of memory for %d sequences of %d tokens", n_seqs, cap);
        goto out;
    }

    uint64_t seed = fc->seed;
    double prefill_ms = 0;
    long prefilled = 0;
    cli_progress pr;
    cli_progress_begin(&pr, json);
    const int ran = prefill(&s, fc, &seed, &pr, &prefill_ms, &prefilled) < 0 ? -1 : decode(&s, add, steps, &seed, &pr);
    cli_progress_end(&pr);
    if (ran < 0)
        goto out;

    cli_check checked = {0};
    char what[96] = "";
    if (check > 0 && s.kept && (rc = check_rows(&s, &cfg, &p, check, &checked, what, sizeof what)) != EXIT_OK)
        goto out;
    if (f->output) {
        const int64_t shape[3] = {s.kept, s.S, d};
        if ((st = mha_npy_save_f32(f->output, s.rows, 3, shape, err, sizeof err)) != MHA_OK) {
            cli_error("%s", err);
            rc = EXIT_RUNTIME;
            goto out;
        }
    }

    const mha_kv_type kv = cfg.kv_type != MHA_KV_AUTO ? cfg.kv_type
                         : cfg.precision == MHA_PRECISION_BF16 ? MHA_KV_BF16 : MHA_KV_F32;
    report(&s, fc, config, f, &p, &cfg, kv, ran, prefill_ms, prefilled, &checked, json);
    char against[224];
    snprintf(against, sizeof against, "one causal float32 forward over %s%s%s",
             f->input ? "the inputs" : "sequence 0's tokens", what[0] ? " on " : "", what);
    rc = cli_check_verdict(&checked, cfg.precision, kv, cfg.weight_type, cfg.weight_activations, against, json);
out:
    release(&s);
    return rc;
}
