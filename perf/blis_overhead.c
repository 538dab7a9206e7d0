/* blis_overhead.c — the fixed cost of one small single-threaded BLIS sgemm call, per BLIS
 * build. Built twice by `make blis-overhead`: against the serial libblis.a (what libmha
 * links) and the OpenMP one, both with the skx/haswell context and a 1-thread rntm_t.
 * Prints the median ns per call over 15 repetitions of N calls, for per-head shapes. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <blis.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *build = argc > 1 ? argv[1] : "?";
    bli_init();
    __builtin_cpu_init();
    arch_t id = __builtin_cpu_supports("avx512f") ? BLIS_ARCH_SKX : BLIS_ARCH_HASWELL;
    cntx_t *cntx = bli_gks_lookup_id(id)[BLIS_NAT];
    const int shapes[][3] = {{1, 64, 64}, {16, 64, 64}, {64, 64, 64}, {128, 128, 64}, {128, 192, 768}};
    float *a = calloc(128 * 768, sizeof *a), *b = calloc(768 * 192, sizeof *b), *c = calloc(128 * 192, sizeof *c);
    float one = 1.0f, zero = 0.0f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        double flops = 2.0 * m * n * k, reps[15];
        int calls = (int)(2e8 / (flops + 2e4)) + 10;
        for (int r = 0; r < 15; r++) {
            double t0 = now_ns();
            for (int i = 0; i < calls; i++) {
                rntm_t rntm = BLIS_RNTM_INITIALIZER;
                bli_rntm_set_num_threads(1, &rntm);
                bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, a, k, 1, b, n, 1, &zero,
                             c, n, 1, cntx, &rntm);
            }
            reps[r] = (now_ns() - t0) / calls;
        }
        qsort(reps, 15, sizeof reps[0], cmp);
        printf("%-7s %-7s m=%-4d n=%-4d k=%-4d  median %9.0f ns/call (min %.0f, max %.0f)  %6.1f GFLOP/s\n",
               build, bli_arch_string(id), m, n, k, reps[7], reps[0], reps[14], flops / reps[7]);
    }
    free(a), free(b), free(c);
    return 0;
}
