/* sgemm_ceiling.c — one large BLIS sgemm with the kernel mha uses (skx with AVX-512, else
 * haswell), per thread: THREADS OpenMP threads each multiply their own N×N matrices.
 * usage: sgemm_ceiling N THREADS; prints "N THREADS median_GFLOPs min max" over 5 runs. */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2048, threads = argc > 2 ? atoi(argv[2]) : 1;
    bli_init();
    __builtin_cpu_init();
    cntx_t *cntx = bli_gks_lookup_id(__builtin_cpu_supports("avx512f") ? BLIS_ARCH_SKX : BLIS_ARCH_HASWELL)[BLIS_NAT];
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
