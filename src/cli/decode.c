/* decode.c — `mha run CONFIG` for a config with a decode block: seqs sequences prefilled to
 * context tokens through the paged KV cache (prefill_chunk tokens per sequence per step; with
 * run.warmup > 0 an untimed prefill first), then `steps` decode steps of `new` tokens per sequence; prefill tokens/s, step latency (median,
 * p99), decode tokens/s, the cache's bytes. The check: sequence 0's last step against one
 * causal float32 mha_forward over its whole token sequence. */
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
    float *gen_w, *x, *out, *seq0, *check_out;
    double *times;
    int32_t *table, *past, *add;
} decode_state;

static void release(decode_state *s)
{
    mha_free(s->e), mha_free(s->check_e);
    mha_kv_cache_free(s->cache);
    mha_weights_file_free(&s->wf);
    free(s->gen_w), free(s->x), free(s->out), free(s->seq0), free(s->check_out), free(s->times);
    free(s->table), free(s->past), free(s->add);
}

/* One step of `n` tokens for every sequence (n = 0 for sequences that are done); the new tokens
 * are seeded random, sequence 0's kept for the check. Returns the step's time in ms, or -1. */
static double step(decode_state *s, int n_seqs, int max_blocks, const int *want, uint64_t *seed, int d)
{
    size_t rows = 0;
    for (int q = 0; q < n_seqs; q++) {
        s->add[q] = want[q];
        cli_fill_uniform(s->x + rows * d, (size_t)want[q] * d, -1.0f, 1.0f, seed);
        if (q == 0 && s->seq0)
            memcpy(s->seq0 + (size_t)s->past[0] * d, s->x, (size_t)want[0] * d * sizeof *s->x);
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
    for (int q = 0; q < n_seqs; q++)
        s->past[q] += s->add[q];
    return t1 - t0;
}

int cli_decode(const mha_config_file *fc, const char *config, const char *weights, const char *prefix, int check,
               int json)
{
    decode_state s;
    memset(&s, 0, sizeof s);
    const int n_seqs = fc->decode_seqs, context = fc->decode_context, add = fc->decode_new, steps = fc->decode_steps;
    const int chunk = fc->decode_prefill_chunk < context ? fc->decode_prefill_chunk : context, bs = fc->decode_block_size;
    mha_config cfg = fc->engine;
    cfg.max_batch = n_seqs;
    cfg.max_seq_q = chunk > add ? chunk : add;
    cfg.max_seq_kv = context + add * steps;
    const int max_blocks = (cfg.max_seq_kv + bs - 1) / bs, d = cfg.d_model;
    char err[1024];
    int rc = EXIT_RUNTIME;
    mha_status st;
    cli_problem p = {0};
    cli_problem_model(&p, &cfg);

    if (weights) {
        if ((st = mha_weights_file_load(weights, prefix, &cfg, &s.wf, err, sizeof err)) != MHA_OK) {
            cli_error("%s", err);
            rc = cli_exit_code(st);
            goto out;
        }
        p.w = s.wf.w;
    } else if ((rc = cli_generate_weights(fc, &p, &s.gen_w)) != EXIT_OK) {
        goto out;
    }
    rc = EXIT_RUNTIME;
    if ((st = mha_create(&cfg, &s.e)) != MHA_OK || (st = mha_set_weights(s.e, &p.w)) != MHA_OK) {
        mha_config_check(&cfg, err, sizeof err);
        cli_error("engine: %s%s%s", mha_status_str(st), err[0] ? ": " : "", s.e ? mha_engine_last_error(s.e) : err);
        rc = cli_exit_code(st);
        goto out;
    }
    if ((st = mha_kv_cache_create(&cfg, n_seqs * max_blocks, bs, &s.cache)) != MHA_OK) {
        cli_error("KV cache of %d blocks of %d slots: %s", n_seqs * max_blocks, bs, mha_status_str(st));
        goto out;
    }
    const size_t rows_max = (size_t)n_seqs * cfg.max_seq_q;
    s.table = malloc((size_t)n_seqs * max_blocks * sizeof *s.table);
    s.past = calloc((size_t)n_seqs, sizeof *s.past), s.add = calloc((size_t)n_seqs, sizeof *s.add);
    s.x = malloc(rows_max * d * sizeof *s.x), s.out = malloc(rows_max * d * sizeof *s.out);
    s.times = malloc((size_t)steps * sizeof *s.times);
    int *want = calloc((size_t)n_seqs, sizeof *want);
    if (check > 0)
        s.seq0 = malloc((size_t)cfg.max_seq_kv * d * sizeof *s.seq0);
    if (!s.table || !s.past || !s.add || !s.x || !s.out || !s.times || !want || (check > 0 && !s.seq0)) {
        free(want);
        cli_error("out of memory for %d sequences of %d tokens", n_seqs, cfg.max_seq_kv);
        goto out;
    }
    for (int i = 0; i < n_seqs * max_blocks; i++)
        s.table[i] = i; /* sequence q: blocks q·max_blocks .. */

    /* prefill: every sequence chunk by chunk to `context` tokens; with run.warmup > 0 once
     * untimed first (the same tokens, the cache then rewound), so the timed one runs warm */
    uint64_t seed = fc->seed;
    double prefill_ms = 0;
    cli_progress pr;
    cli_progress_begin(&pr, json);
    for (int warm = fc->warmup > 0; warm > 0; warm--) {
        uint64_t wseed = seed;
        for (int done = 0; done < context; done += chunk) {
            for (int q = 0; q < n_seqs; q++)
                want[q] = context - done < chunk ? context - done : chunk;
            if (step(&s, n_seqs, max_blocks, want, &wseed, d) < 0)
                goto out_want;
            cli_progress_show(&pr, "warm-up prefill %d/%d tokens", done + want[0], context);
        }
        memset(s.past, 0, (size_t)n_seqs * sizeof *s.past);
    }
    for (int done = 0; done < context; done += chunk) {
        for (int q = 0; q < n_seqs; q++)
            want[q] = context - done < chunk ? context - done : chunk;
        double t = step(&s, n_seqs, max_blocks, want, &seed, d);
        if (t < 0)
            goto out_want;
        prefill_ms += t;
        cli_progress_show(&pr, "prefill %d/%d tokens, %.0f tokens/s", done + want[0], context,
                          (double)n_seqs * (done + want[0]) / (prefill_ms / 1e3));
    }
    /* decode: `steps` steps of `add` tokens per sequence */
    for (int q = 0; q < n_seqs; q++)
        want[q] = add;
    for (int k = 0; k < steps; k++) {
        if ((s.times[k] = step(&s, n_seqs, max_blocks, want, &seed, d)) < 0)
            goto out_want;
        cli_progress_show(&pr, "decode step %d/%d, last %.2f ms", k + 1, steps, s.times[k]);
    }
    cli_progress_end(&pr);

    /* the check: sequence 0's last `add` outputs against one causal float32 forward over its
     * tokens; float32 steps differ from it in summation order only, bf16 steps by bf16 operands
     * (weights, inputs, the cache, probabilities: the engine's bf16 contract, 1e-2), an int8
     * cache by its rounding of K and V (its contract, 2e-2) */
    const double tol = cfg.kv_type == MHA_KV_INT8 ? 2e-2 : cfg.precision == MHA_PRECISION_BF16 ? 1e-2 : 1e-4;
    const mha_kv_type kv = cfg.kv_type != MHA_KV_AUTO ? cfg.kv_type
                         : cfg.precision == MHA_PRECISION_BF16 ? MHA_KV_BF16 : MHA_KV_F32;
    double max_err = 0;
    int checked = 0;
    if (check > 0) {
        mha_config one = cfg;
        const int total = context + add * steps;
        one.max_batch = 1, one.max_seq_q = one.max_seq_kv = total;
        one.precision = MHA_PRECISION_F32; /* a float32 forward: no cache, no bf16 kernel */
        one.kv_type = MHA_KV_AUTO, one.bf16_kernel[0] = '\0';
        s.check_out = malloc((size_t)total * d * sizeof *s.check_out);
        if (!s.check_out || (st = mha_create(&one, &s.check_e)) != MHA_OK || (st = mha_set_weights(s.check_e, &p.w)) != MHA_OK) {
            cli_error("check: an engine for %d tokens: %s", total, s.check_out ? mha_status_str(st) : "out of memory");
            goto out_want;
        }
        mha_input in = {.batch = 1, .seq_q = total, .seq_kv = total, .q = s.seq0, .k = s.seq0, .v = s.seq0, .causal = 1};
        if ((st = mha_forward(s.check_e, &in, s.check_out, NULL)) != MHA_OK) {
            cli_error("check: forward: %s", mha_engine_last_error(s.check_e));
            goto out_want;
        }
        for (int i = 0; i < add; i++, checked++) {
            const float *got = s.out + (size_t)i * d, *ref = s.check_out + (size_t)(total - add + i) * d;
            double num = 0, den = 0;
            for (int c = 0; c < d; c++)
                num += ((double)got[c] - ref[c]) * ((double)got[c] - ref[c]), den += (double)ref[c] * ref[c];
            double e = den > 0 ? sqrt(num / den) : sqrt(num);
            max_err = e > max_err || isnan(e) ? e : max_err;
        }
    }

    /* p99 of the step times (nearest rank), then the summary */
    cli_stats t = cli_stats_of(s.times, steps); /* sorts */
    const double p99 = s.times[(int)ceil(0.99 * steps) - 1];
    const double prefill_tps = (double)n_seqs * context / (prefill_ms / 1e3);
    const double decode_tps = (double)n_seqs * add / (t.median / 1e3);
    const size_t cache_bytes = mha_kv_cache_size(&cfg, n_seqs * max_blocks, bs);
    if (json) {
        json_t *j = json_object();
        json_object_set_new(j, "mode", json_string("decode"));
        json_object_set_new(j, "name", json_string(fc->name));
        json_object_set_new(j, "config", json_string(config));
        json_object_set_new(j, "d_model", json_integer(d));
        json_object_set_new(j, "heads", json_integer(p.h));
        json_object_set_new(j, "kv_heads", json_integer(p.kvh));
        json_object_set_new(j, "seqs", json_integer(n_seqs));
        json_object_set_new(j, "context", json_integer(context));
        json_object_set_new(j, "new", json_integer(add));
        json_object_set_new(j, "steps", json_integer(steps));
        json_object_set_new(j, "block_size", json_integer(bs));
        json_object_set_new(j, "threads", json_integer(mha_engine_threads(s.e)));
        json_object_set_new(j, "isa", json_string(mha_engine_isa(s.e)));
        json_object_set_new(j, "precision", json_string(mha_precision_name(cfg.precision)));
        json_object_set_new(j, "kernel", json_string(mha_engine_kernel(s.e)));
        json_object_set_new(j, "prefill_ms", json_real(prefill_ms));
        json_object_set_new(j, "prefill_tokens_per_s", json_real(prefill_tps));
        json_object_set_new(j, "step_median_ms", json_real(t.median));
        json_object_set_new(j, "step_p99_ms", json_real(p99));
        json_object_set_new(j, "step_min_ms", json_real(t.min));
        json_object_set_new(j, "step_max_ms", json_real(t.max));
        json_object_set_new(j, "decode_tokens_per_s", json_real(decode_tps));
        json_object_set_new(j, "kv_cache", json_string(mha_kv_type_name(kv)));
        json_object_set_new(j, "kv_cache_bytes", json_integer((json_int_t)cache_bytes));
        json_object_set_new(j, "check_rows", json_integer(checked));
        json_object_set_new(j, "max_rel_error", checked ? json_real(max_err) : json_null());
        cli_print_json(j);
    } else {
        printf("mha run (decode): %s (%s)\n", fc->name, config);
        printf("  model    d_model %d, %d heads, %d KV heads (d_k %d)\n", d, p.h, p.kvh, p.dk);
        printf("  decode   %d sequences, prefilled to %d tokens in chunks of %d, then %d steps of %d token%s each\n",
               n_seqs, context, chunk, steps, add, add == 1 ? "" : "s");
        printf("  engine   %d threads, isa %s, %s, kernel %s; KV cache %s, %d blocks of %d slots, %.1f MiB\n",
               mha_engine_threads(s.e), mha_engine_isa(s.e), mha_precision_name(cfg.precision), mha_engine_kernel(s.e),
               mha_kv_type_name(kv), n_seqs * max_blocks, bs, cache_bytes / 1048576.0);
        printf("  prefill  %.1f ms, %.0f tokens/s\n", prefill_ms, prefill_tps);
        printf("  step     median %.3f ms, p99 %.3f ms (min %.3f, max %.3f) over %d steps\n", t.median, p99, t.min, t.max,
               steps);
        printf("  decode   %.0f tokens/s\n", decode_tps);
        if (checked)
            printf("  check    max relative error %.3g over sequence 0's last %d row%s against one causal forward over "
                   "its %d tokens\n", max_err, checked, checked == 1 ? "" : "s", context + add * steps);
    }
    rc = !checked || max_err <= tol ? EXIT_OK : EXIT_RUNTIME;
    if (rc != EXIT_OK)
        cli_error("check: relative error %.3g is above %g (%s, KV cache %s)", max_err, tol, mha_precision_name(cfg.precision),
                  mha_kv_type_name(kv));
out_want:
    free(want);
out:
    release(&s);
    return rc;
}
