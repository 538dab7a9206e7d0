/* bandwidth.c — the machine's read bandwidth: T threads each summing its share of a 1 GiB
 * array (touched before timing) with AVX-512 loads (AVX2 elsewhere), the median of 7 passes.
 * usage: bandwidth [THREADS] (default 2). Prints: threads, median GB/s, min, max. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES (1ul << 30)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx512f"))) static float sum512(const float *p, size_t n)
{
    __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a = _mm512_add_ps(a, _mm512_load_ps(p + i));
        b = _mm512_add_ps(b, _mm512_load_ps(p + i + 16));
        c = _mm512_add_ps(c, _mm512_load_ps(p + i + 32));
        d = _mm512_add_ps(d, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

__attribute__((target("avx2"))) static float sum256(const float *p, size_t n)
{
    __m256 a = _mm256_setzero_ps(), b = a;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        a = _mm256_add_ps(a, _mm256_load_ps(p + i));
        b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
    }
    float v[8];
    _mm256_storeu_ps(v, _mm256_add_ps(a, b));
    return v[0] + v[7];
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1)
        threads = 1;
    float *p = aligned_alloc(64, BYTES);
    if (!p)
        return 1;
    const size_t n = BYTES / sizeof *p, per = n / (size_t)threads / 64 * 64;
    int avx512 = __builtin_cpu_supports("avx512f");
#pragma omp parallel num_threads(threads)
    memset(p + per * (size_t)omp_get_thread_num(), 0, per * sizeof *p); /* first touch by its reader */
    double t[7];
    volatile float sink = 0;
    for (int r = 0; r < 7; r++) {
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            const float *q = p + per * (size_t)omp_get_thread_num();
            sink += avx512 ? sum512(q, per) : sum256(q, per);
        }
        t[r] = (double)(per * threads * sizeof *p) / (now() - t0) / 1e9;
    }
    qsort(t, 7, sizeof *t, cmp);
    printf("%d %.2f %.2f %.2f\n", threads, t[3], t[0], t[6]);
    free(p);
    return sink == 12345.0f;
}
