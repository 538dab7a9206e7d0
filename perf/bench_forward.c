/* bench_forward.c — time mha_forward on one shape: median, min and max over N forwards after
 * warm-up, and GFLOP/s from DESIGN.md's count 8·B·S·d² + 4·B·S²·d (unmasked work only for
 * causal: the score and A·V terms are halved, (S+1)/(2S) exactly).
 * usage: bench_forward D H B S THREADS [ITERS] [causal] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mha.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s D H B S THREADS [ITERS] [causal]\n", argv[0]);
        return 2;
    }
    int d = atoi(argv[1]), h = atoi(argv[2]), B = atoi(argv[3]), S = atoi(argv[4]), T = atoi(argv[5]);
    int iters = argc > 6 ? atoi(argv[6]) : 20, causal = argc > 7 && !strcmp(argv[7], "causal");
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = d, cfg.n_heads = h, cfg.max_batch = B, cfg.max_seq_q = cfg.max_seq_kv = S, cfg.threads = T;
    mha_engine *e;
    mha_status st = mha_create(&cfg, &e);
    if (st != MHA_OK) {
        fprintf(stderr, "mha_create: %s\n", mha_status_str(st));
        return 1;
    }
    size_t dd = (size_t)d * d, nx = (size_t)B * S * d;
    float *w = malloc((4 * dd + 4 * (size_t)d) * sizeof *w), *x = malloc(nx * sizeof *x), *y = malloc(nx * sizeof *y);
    unsigned r = 1;
    for (size_t i = 0; i < 4 * dd + 4 * (size_t)d; i++)
        w[i] = ((r = r * 1103515245u + 12345u) >> 9) / 8388608.0f / 16.0f - 1.0f / 32.0f;
    for (size_t i = 0; i < nx; i++)
        x[i] = ((r = r * 1103515245u + 12345u) >> 9) / 8388608.0f - 0.5f;
    float *b = w + 4 * dd;
    mha_weights wt = {w, w + dd, w + 2 * dd, w + 3 * dd, b, b + d, b + 2 * d, b + 3 * d, MHA_LAYOUT_XW};
    mha_input in = {.batch = B, .seq_q = S, .seq_kv = S, .q = x, .k = x, .v = x, .causal = causal};
    if (mha_set_weights(e, &wt) != MHA_OK)
        return 1;
    for (int i = 0; i < 3; i++)
        mha_forward(e, &in, y, NULL);
    double *t = malloc((size_t)iters * sizeof *t);
    for (int i = 0; i < iters; i++) {
        double t0 = now_ms();
        mha_forward(e, &in, y, NULL);
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    double attn_frac = causal ? (S + 1.0) / (2.0 * S) : 1.0;
    double flops = 8.0 * B * S * (double)d * d + 4.0 * B * (double)S * S * d * attn_frac;
    printf("d=%d h=%d B=%d S=%d threads=%d%s kernel=%s q_block=%d: median %.3f ms (min %.3f, max %.3f) %.1f GFLOP/s\n",
           d, h, B, S, T, causal ? " causal" : "", mha_engine_blis_arch(e), mha_engine_q_block(e),
           t[iters / 2], t[0], t[iters - 1], flops / t[iters / 2] / 1e6);
    mha_free(e);
    free(w), free(x), free(y), free(t);
    return 0;
}
