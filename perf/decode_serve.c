/* decode_serve.c — continuous batching through the paged KV cache, as a serving loop runs it:
 * requests arrive (Poisson, at --rate per second) with a prompt and a number of tokens to
 * generate, join the running batch in a free slot, are prefilled in chunks alongside the
 * others' decode tokens, decode one token per step until done, and leave their slot to the
 * next. One engine (T OpenMP threads), one mha_step_forward per iteration. Tokens are seeded
 * random vectors (no language model): the attention layer's work is real.
 * Reports steps, prefill and decode tokens/s, step latency p50/p99, request latency p50/p99,
 * the mean batch; checks one finished request's last output against one causal mha_forward
 * over all its tokens. Stops by itself: arrivals end after --duration, the batch drains.
 *
 * usage: decode_serve [--d D] [--heads H] [--kv-heads K] [--slots S] [--threads T]
 *                     [--rate R] [--duration SEC] [--prompt MIN-MAX] [--gen MIN-MAX]
 *                     [--chunk C] [--block B] [--seed N] */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mha.h"
#include "perf_util.h"

static double pct(double *v, int n, double p) { return n ? v[(int)ceil(p * n) - 1 < 0 ? 0 : (int)ceil(p * n) - 1] : 0; }

typedef struct slot { int active, id, prompt, gen, past; double arrival; } slot;

int main(int argc, char **argv)
{
    int d = 1024, heads = 16, kvh = 4, slots = 8, threads = 2, pmin = 32, pmax = 256, gmin = 16, gmax = 64;
    int chunk = 64, block = 16;
    double rate = 20, duration = 5;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--d")) d = atoi(v);
        else if (!strcmp(o, "--heads")) heads = atoi(v);
        else if (!strcmp(o, "--kv-heads")) kvh = atoi(v);
        else if (!strcmp(o, "--slots")) slots = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--rate")) rate = atof(v);
        else if (!strcmp(o, "--duration")) duration = atof(v);
        else if (!strcmp(o, "--prompt")) sscanf(v, "%d-%d", &pmin, &pmax);
        else if (!strcmp(o, "--gen")) sscanf(v, "%d-%d", &gmin, &gmax);
        else if (!strcmp(o, "--chunk")) chunk = atoi(v);
        else if (!strcmp(o, "--block")) block = atoi(v);
        else if (!strcmp(o, "--seed")) seed = strtoull(v, NULL, 10);
        else { fprintf(stderr, "decode_serve: unknown option %s\n", o); return 2; }
    }
    const int ctx = pmax + gmax, max_blocks = (ctx + block - 1) / block;
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = d, cfg.n_heads = heads, cfg.n_kv_heads = kvh, cfg.bias = 0, cfg.threads = threads;
    cfg.rope.style = MHA_ROPE_NEOX, cfg.rope.theta = 500000.0f;
    cfg.max_batch = slots, cfg.max_seq_q = chunk, cfg.max_seq_kv = ctx;
    const size_t dd = (size_t)d * d, kd = (size_t)d * kvh * (d / heads);
    float *w = malloc((2 * dd + 2 * kd) * sizeof *w);
    uint64_t ws = seed ^ 0x5EED;
    for (size_t i = 0; i < 2 * dd + 2 * kd; i++)
        w[i] = (float)(uniform01(&ws) * 2 - 1) / sqrtf((float)d);
    mha_weights wt = {w, w + dd, w + dd + kd, w + dd + 2 * kd, NULL, NULL, NULL, NULL, MHA_LAYOUT_XW};
    mha_engine *e;
    mha_kv_cache *cache;
    mha_status st = mha_create(&cfg, &e);
    if (st == MHA_OK) st = mha_set_weights(e, &wt);
    if (st == MHA_OK) st = mha_kv_cache_create(&cfg, slots * max_blocks, block, 0, &cache);
    if (st != MHA_OK) {
        fprintf(stderr, "decode_serve: setup: %s\n", mha_status_str(st));
        return 1;
    }
    int32_t *table = malloc((size_t)slots * max_blocks * sizeof *table), *past = calloc(slots, sizeof *past),
            *add = calloc(slots, sizeof *add);
    for (int i = 0; i < slots * max_blocks; i++)
        table[i] = i; /* slot s owns blocks s·max_blocks ..: reused by the next request */
    float *x = malloc((size_t)slots * chunk * d * sizeof *x), *out = malloc((size_t)slots * chunk * d * sizeof *out);
    float *tokens0 = malloc((size_t)ctx * d * sizeof *tokens0), *last0 = malloc((size_t)d * sizeof *last0);
    int len0 = 0; /* request 0's tokens when it finished (0: not yet) */
    slot *sl = calloc(slots, sizeof *sl);
    int max_steps = 1 << 20, n_steps = 0, n_done = 0, id = 0;
    double *step_ms = malloc((size_t)max_steps * sizeof *step_ms), *req_ms = malloc(100000 * sizeof *req_ms);
    long prefill_tokens = 0, decode_tokens = 0, batch_sum = 0;
    uint64_t rs = seed, xs = seed ^ 0xABCD;
    double t0 = now_ms(), next_arrival = t0 - log(1 - uniform01(&rs)) / rate * 1e3, step_total = 0;
    for (;;) {
        const double t = now_ms();
        /* arrivals until now join free slots (the rest wait: the batch is full) */
        while (t - t0 < duration * 1e3 && next_arrival <= t) {
            int s = 0;
            while (s < slots && sl[s].active)
                s++;
            if (s == slots)
                break;
            sl[s] = (slot){1, id++, pmin + (int)(uniform01(&rs) * (pmax - pmin + 1)), gmin + (int)(uniform01(&rs) * (gmax - gmin + 1)),
                           0, next_arrival};
            past[s] = 0;
            next_arrival += -log(1 - uniform01(&rs)) / rate * 1e3;
        }
        int any = 0;
        size_t rows = 0;
        for (int s = 0; s < slots; s++) {
            add[s] = 0;
            if (!sl[s].active)
                continue;
            any = 1;
            const int left_prompt = sl[s].prompt - past[s];
            add[s] = left_prompt > 0 ? (left_prompt < chunk ? left_prompt : chunk) : 1;
            for (int i = 0; i < add[s] * d; i++)
                x[rows * d + i] = (float)(uniform01(&xs) * 2 - 1);
            if (sl[s].id == 0) /* request 0's tokens, for the check */
                memcpy(tokens0 + (size_t)past[s] * d, x + rows * d, (size_t)add[s] * d * sizeof *x);
            rows += (size_t)add[s];
        }
        if (!any) {
            if (t - t0 >= duration * 1e3)
                break;
            const double wait = next_arrival - now_ms(); /* idle: sleep until the next arrival */
            if (wait > 0) {
                struct timespec ts = {(time_t)(wait / 1e3), (long)(fmod(wait, 1e3) * 1e6)};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        mha_step step = {slots, past, add, table, max_blocks, x};
        const double a = now_ms();
        st = mha_step_forward(e, cache, &step, out);
        const double b = now_ms();
        if (st != MHA_OK) {
            fprintf(stderr, "decode_serve: step: %s\n", mha_engine_last_error(e));
            return 1;
        }
        if (n_steps < max_steps)
            step_ms[n_steps++] = b - a;
        step_total += b - a;
        rows = 0;
        for (int s = 0; s < slots; s++) {
            if (!sl[s].active)
                continue;
            batch_sum++;
            if (past[s] < sl[s].prompt)
                prefill_tokens += add[s];
            else
                decode_tokens += add[s];
            past[s] += add[s];
            rows += (size_t)add[s];
            if (past[s] == sl[s].prompt + sl[s].gen) { /* done: its slot is free */
                if (sl[s].id == 0) {
                    memcpy(last0, out + (rows - 1) * d, (size_t)d * sizeof *out);
                    len0 = past[s];
                }
                if (n_done < 100000)
                    req_ms[n_done++] = b - sl[s].arrival;
                sl[s].active = 0;
            }
        }
    }
    const double wall = (now_ms() - t0) / 1e3;
    /* the check: request 0's last output against one causal forward over its tokens */
    double err = -1;
    if (len0 > 0) {
        mha_config one = cfg;
        one.max_batch = 1, one.max_seq_q = one.max_seq_kv = len0;
        mha_engine *ce;
        float *ref = malloc((size_t)len0 * d * sizeof *ref);
        mha_input in = {.batch = 1, .seq_q = len0, .seq_kv = len0, .q = tokens0, .k = tokens0, .v = tokens0, .causal = 1};
        if (ref && mha_create(&one, &ce) == MHA_OK) {
            if (mha_set_weights(ce, &wt) == MHA_OK && mha_forward(ce, &in, ref, NULL) == MHA_OK) {
                double num = 0, den = 0;
                for (int c = 0; c < d; c++) {
                    const double r = ref[(size_t)(len0 - 1) * d + c];
                    num += (last0[c] - r) * (last0[c] - r), den += r * r;
                }
                err = sqrt(num / den);
            }
            mha_free(ce);
        }
        free(ref);
    }
    qsort(step_ms, (size_t)n_steps, sizeof *step_ms, cmp_double);
    qsort(req_ms, (size_t)n_done, sizeof *req_ms, cmp_double);
    printf("decode_serve: d %d, %d heads over %d KV heads, %d slots, %d threads, rate %.1f/s for %.0f s, prompts %d-%d, "
           "generate %d-%d, chunk %d\n", d, heads, kvh, slots, threads, rate, duration, pmin, pmax, gmin, gmax, chunk);
    printf("  %d steps in %.2f s (stepping %.2f s); %d requests done; mean batch %.1f\n", n_steps, wall, step_total / 1e3,
           n_done, n_steps ? (double)batch_sum / n_steps : 0.0);
    printf("  prefill %.0f tokens/s, decode %.0f tokens/s (over the stepping time)\n", prefill_tokens / (step_total / 1e3),
           decode_tokens / (step_total / 1e3));
    printf("  step p50 %.2f ms, p99 %.2f ms; request p50 %.0f ms, p99 %.0f ms (arrival to last token)\n",
           pct(step_ms, n_steps, 0.5), pct(step_ms, n_steps, 0.99), pct(req_ms, n_done, 0.5), pct(req_ms, n_done, 0.99));
    if (err >= 0)
        printf("  check: request 0 (%d tokens): its last output against one causal forward, relative error %.3g\n", len0, err);
    else
        printf("  check: request 0 did not finish\n");
    mha_kv_cache_free(cache);
    mha_free(e);
    free(w), free(table), free(past), free(add), free(x), free(out), free(tokens0), free(last0), free(sl), free(step_ms),
        free(req_ms);
    return err > 1e-4;
}
