/* sgemm_ceiling.c — BLIS's own sgemm with the kernel mha uses (skx with AVX-512, else
 * haswell), serial build:
 *   sgemm_ceiling N THREADS: one large sgemm per thread, THREADS OpenMP threads each multiply
 *     their own N×N matrices; prints "N THREADS median_GFLOPs min max" over 5 runs.
 *   sgemm_ceiling heads D HEADS SEQ [REPS]: 1 thread, each GEMM of one attention head (and
 *     its share of the output projection) at its own rate, and the forward pass's rate if
 *     every GEMM ran at BLIS's rate and nothing else cost anything: the per-shape ceiling
 *     the performance targets quote. */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <blis.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median GFLOP/s of C (m × n) = A (m × k) · B (k × n), row-major, over reps calls. */
static double rate(cntx_t *cntx, int m, int n, int k, int reps)
{
    float *a = malloc((size_t)m * k * sizeof *a), *b = malloc((size_t)k * n * sizeof *b), *c = malloc((size_t)m * n * sizeof *c);
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = 1e-3f * (float)(i % 97);
    for (size_t i = 0; i < (size_t)k * n; i++)
        b[i] = 1e-3f * (float)(i % 89);
    float one = 1, zero = 0;
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &rntm);
    double *t = malloc((size_t)reps * sizeof *t);
    for (int r = -2; r < reps; r++) { /* two warm-up calls */
        double t0 = now();
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, a, k, 1, b, n, 1, &zero, c, n, 1, cntx, &rntm);
        if (r >= 0)
            t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    double g = 2.0 * m * n * (double)k / t[reps / 2] / 1e9;
    free(a), free(b), free(c), free(t);
    return g;
}

static int heads(cntx_t *cntx, int argc, char **argv)
{
    if (argc < 4)
        return fprintf(stderr, "usage: sgemm_ceiling heads D HEADS SEQ [REPS]\n"), 2;
    int d = atoi(argv[1]), h = atoi(argv[2]), s = atoi(argv[3]), reps = argc > 4 ? atoi(argv[4]) : 21;
    int dk = d / h;
    /* one head of one sequence; the output projection's share per head */
    struct { const char *name; int m, n, k; double per_head; } g[] = {
        {"QKV projection", s, 3 * dk, d, 1},
        {"Q·Kᵀ", s, s, dk, 1},
        {"A·V", s, dk, s, 1},
        {"output projection", s, d, d, 1.0 / h},
    };
    double flops = 0, seconds = 0;
    for (int i = 0; i < 4; i++) {
        double r = rate(cntx, g[i].m, g[i].n, g[i].k, reps);
        double f = 2.0 * g[i].m * g[i].n * (double)g[i].k * g[i].per_head;
        flops += f, seconds += f / (r * 1e9);
        printf("%-18s m=%-5d n=%-5d k=%-5d %7.1f GFLOP/s\n", g[i].name, g[i].m, g[i].n, g[i].k, r);
    }
    printf("all four at BLIS's rates, weighted by their FLOPs: %.1f GFLOP/s (1 thread)\n", flops / seconds / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    bli_init();
    __builtin_cpu_init();
    cntx_t *cntx = bli_gks_lookup_id(__builtin_cpu_supports("avx512f") ? BLIS_ARCH_SKX : BLIS_ARCH_HASWELL)[BLIS_NAT];
    if (argc > 1 && !strcmp(argv[1], "heads"))
        return heads(cntx, argc - 1, argv + 1);
    int n = argc > 1 ? atoi(argv[1]) : 2048, threads = argc > 2 ? atoi(argv[2]) : 1;
    double g[5];
    for (int r = 0; r < 6; r++) {
        double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads)
        {
            size_t nn = (size_t)n * n;
            float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
            for (size_t i = 0; i < nn; i++)
                a[i] = b[i] = c[i] = 1e-3f * (float)(i % 97);
            float one = 1, zero = 0;
#pragma omp barrier
#pragma omp single
            t0 = now();
            rntm_t rntm = BLIS_RNTM_INITIALIZER;
            bli_rntm_set_num_threads(1, &rntm);
            bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &one, a, n, 1, b, n, 1, &zero, c, n, 1, cntx, &rntm);
#pragma omp barrier
#pragma omp single
            t1 = now();
            free(a), free(b), free(c);
        }
        if (r > 0) /* the first run warms BLIS's pools */
            g[r - 1] = 2.0 * n * n * (double)n * threads / (t1 - t0) / 1e9;
    }
    qsort(g, 5, sizeof g[0], cmp);
    printf("%d %d %.1f %.1f %.1f\n", n, threads, g[2], g[0], g[4]);
    return 0;
}
