/* chunk_step.c — issue 32's chunked-prefill target measured directly: the last CHUNK-token
 * chunk of a prompt of CONTEXT tokens (a step with n_past = CONTEXT − CHUNK, n_new = CHUNK on
 * a paged cache that a chunked prefill filled) against the same rows' attention inside one
 * forward (mha_core_forward of CHUNK queries over CONTEXT keys, causal: PyTorch's bottom-right
 * alignment puts query i at CONTEXT − CHUNK + i, the forward's last CHUNK rows). One engine
 * serves both (its arena, its table); d_model is small (D_MODEL) so the step's projections
 * of CHUNK tokens cost well under 1% and the step is its attention. The step writes the
 * chunk's K and V at the same positions every time: the same work each round. The two are
 * timed alternately, ROUNDS rounds; printed: each one's median and min–max, and the ratio
 * step / core per round (median, min–max). The target: ≤ 1.1.
 *
 * KV_CACHE int8: the chunk goes through an int8 cache (its context read back dequantized), the
 * core's rows still on the float K and V; CONTEXT and CHUNK multiples of MHA_KV_GROUP, so that
 * the repeated chunk neither continues nor leaves an open K group (the cache keeps one per
 * sequence, which a repeat of the step would find already moved on).
 *
 * usage: chunk_step [f32|bf16] [CONTEXT (8192)] [CHUNK (512)] [ROUNDS (9)] [HEADS (8)]
 *                   [KV_HEADS (2)] [THREADS (2)] [ISA (auto)] [BF16_KERNEL (auto)]
 *                   [KV_CACHE (auto: the precision's; int8)] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (perf_util.h) under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"
#include "perf_util.h"

enum { D_MODEL = 16, DK = 128, BLOCK = 16, WARMUP = 2 };

/* median, min and max of n values (sorted in place) */
static void spread(double *v, int n, double r[3])
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    r[0] = v[n / 2], r[1] = v[0], r[2] = v[n - 1];
}

int main(int argc, char **argv)
{
    const int bf16 = argc > 1 && !strcmp(argv[1], "bf16");
    const int context = argc > 2 ? atoi(argv[2]) : 8192, chunk = argc > 3 ? atoi(argv[3]) : 512;
    const int rounds = argc > 4 ? atoi(argv[4]) : 9, heads = argc > 5 ? atoi(argv[5]) : 8;
    const int kvh = argc > 6 ? atoi(argv[6]) : 2, threads = argc > 7 ? atoi(argv[7]) : 2;
    const char *isa = argc > 8 ? argv[8] : "auto", *bk = argc > 9 ? argv[9] : "auto";
    const int int8 = argc > 10 && !strcmp(argv[10], "int8");
    if ((argc > 1 && !bf16 && strcmp(argv[1], "f32")) || chunk < 1 || context < chunk || context > 1 << 20 ||
        rounds < 1 || heads < 1 || heads > 256 || kvh < 1 || heads % kvh || threads < 1 ||
        strlen(isa) >= sizeof((mha_config){0}.isa) || strlen(bk) >= sizeof((mha_config){0}.bf16_kernel) ||
        (argc > 10 && !int8 && strcmp(argv[10], "auto")) || (int8 && (context % MHA_KV_GROUP || chunk % MHA_KV_GROUP))) {
        fprintf(stderr,
                "usage: chunk_step [f32|bf16] [CONTEXT <= %d] [CHUNK 1..CONTEXT] [ROUNDS >= 1] [HEADS 1..256] "
                "[KV_HEADS dividing HEADS] [THREADS >= 1] [ISA auto|avx512|avx2|ref] [BF16_KERNEL auto|NAME] "
                "[KV_CACHE auto|int8 (CONTEXT and CHUNK multiples of %d)]\n",
                1 << 20, MHA_KV_GROUP);
        return 2;
    }
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = D_MODEL, cfg.n_heads = heads, cfg.n_kv_heads = kvh, cfg.head_dim = DK, cfg.bias = 0;
    cfg.max_batch = 1, cfg.max_seq_q = chunk, cfg.max_seq_kv = context;
    cfg.threads = threads, cfg.pinning = MHA_PIN_CLOSE;
    cfg.precision = bf16 ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
    cfg.kv_type = int8 ? MHA_KV_INT8 : MHA_KV_AUTO;
    cfg.rope = (mha_rope){.style = MHA_ROPE_NEOX, .theta = 500000.0f};
    snprintf(cfg.isa, sizeof cfg.isa, "%s", isa);
    snprintf(cfg.bf16_kernel, sizeof cfg.bf16_kernel, "%s", bk);

    const size_t d = D_MODEL, qd = (size_t)heads * DK, kvd = (size_t)kvh * DK;
    const int n_blocks = (context + BLOCK - 1) / BLOCK;
    uint64_t seed = 42;
    /* Wq (d, qd), Wk, Wv (d, kvd), Wo (qd, d); unit-scale tokens, weights of 1/sqrt(d) */
    float *wm = random_floats(2 * d * qd + 2 * d * kvd, 0.5f, &seed);
    float *x = random_floats((size_t)context * d, 1.0f, &seed), *out = malloc((size_t)chunk * d * sizeof *out);
    float *q = random_floats((size_t)chunk * qd, 1.0f, &seed), *k = random_floats((size_t)context * kvd, 1.0f, &seed);
    float *v = random_floats((size_t)context * kvd, 1.0f, &seed), *o = malloc((size_t)chunk * qd * sizeof *o);
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    double *t_step = malloc((size_t)rounds * sizeof *t_step), *t_core = malloc((size_t)rounds * sizeof *t_core);
    double *ratio = malloc((size_t)rounds * sizeof *ratio);
    mha_engine *e = NULL;
    mha_kv_cache *cache = NULL;
    const char *what = "out of memory";
    mha_status st = MHA_ERR_NOMEM;
    if (!wm || !x || !out || !q || !k || !v || !o || !blocks || !t_step || !t_core || !ratio)
        goto done;
    if ((st = mha_create(&cfg, &e)) != MHA_OK) {
        what = "mha_create";
        goto done;
    }
    const mha_weights w = {.w_q = wm, .w_k = wm + d * qd, .w_v = wm + d * qd + d * kvd,
                           .w_o = wm + d * qd + 2 * d * kvd, .layout = MHA_LAYOUT_XW};
    if ((st = mha_set_weights(e, &w)) != MHA_OK) {
        what = "setting the weights";
        goto done;
    }
    if ((st = mha_kv_cache_create(&cfg, n_blocks, BLOCK, 0, &cache)) != MHA_OK) {
        what = "mha_kv_cache_create";
        goto done;
    }
    shuffled_blocks(blocks, n_blocks, &seed);
    /* the prompt's first CONTEXT − CHUNK tokens, chunk by chunk (untimed) */
    int32_t past = 0, add = 0;
    mha_step step = {.n_seqs = 1, .n_past = &past, .n_new = &add, .blocks = blocks, .max_blocks = n_blocks};
    while (past < context - chunk) {
        add = context - chunk - past < chunk ? context - chunk - past : chunk;
        step.x = x + (size_t)past * d;
        if ((st = mha_step_forward(e, cache, &step, out)) != MHA_OK) {
            what = "the prefill";
            goto done;
        }
        past += add;
    }
    add = chunk, step.x = x + (size_t)past * d;
    /* Q (1, heads, chunk, DK), K and V (1, kvh, context, DK): SDPA's contiguous layout */
    const mha_core_input in = {.batch = 1, .seq_q = chunk, .seq_kv = context, .q = q, .k = k, .v = v, .causal = 1};
    for (int r = -WARMUP; r < rounds; r++) {
        const double t0 = now_ms();
        if ((st = mha_step_forward(e, cache, &step, out)) != MHA_OK) {
            what = "the last chunk";
            goto done;
        }
        const double t1 = now_ms();
        if ((st = mha_core_forward(e, &in, o, NULL)) != MHA_OK) {
            what = "mha_core_forward";
            goto done;
        }
        const double t2 = now_ms();
        if (r >= 0)
            t_step[r] = t1 - t0, t_core[r] = t2 - t1, ratio[r] = (t1 - t0) / (t2 - t1);
    }
    double s[3], c[3], a[3];
    spread(t_step, rounds, s), spread(t_core, rounds, c), spread(ratio, rounds, a);
    printf("chunk_step %s, kv %s, isa %s (%s), %d heads over %d KV heads of %d, a %d-token chunk at context %d, %d threads, "
           "%d rounds: step %.2f ms (%.2f–%.2f), the same rows in one forward (core) %.2f ms (%.2f–%.2f), "
           "step / core %.3f (%.3f–%.3f)\n",
           bf16 ? "bf16" : "f32", int8 ? "int8" : bf16 ? "bf16" : "f32", mha_engine_isa(e), mha_engine_kernel(e), heads, kvh, DK, chunk, context, threads,
           rounds, s[0], s[1], s[2], c[0], c[1], c[2], a[0], a[1], a[2]);
done:
    if (st != MHA_OK) {
        char why[256] = "";
        if (!e)
            mha_config_check(&cfg, why, sizeof why);
        fprintf(stderr, "chunk_step: %s: %s: %s\n", what, mha_status_str(st), e ? mha_engine_last_error(e) : why);
    }
    free(wm), free(x), free(out), free(q), free(k), free(v), free(o), free(blocks);
    free(t_step), free(t_core), free(ratio);
    mha_kv_cache_free(cache);
    mha_free(e);
    return st == MHA_OK ? 0 : 1;
}
