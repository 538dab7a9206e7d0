/* perf_util.h — what the benchmarks against the API share: a monotonic clock in ms, splitmix64
 * with uniform draws in [0, 1), random floats, shuffled block ids, qsort's order of doubles. Header-only (each
 * program is one file). */
#ifndef MHA_PERF_UTIL_H
#define MHA_PERF_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static inline uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double uniform01(uint64_t *s) { return (double)(splitmix(s) >> 11) / 9007199254740992.0; }

/* n floats uniform in [−scale/2, scale/2), malloc'd (NULL when out of memory) */
static inline float *random_floats(size_t n, float scale, uint64_t *s)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)(uniform01(s) - 0.5) * scale;
    return p;
}

/* blocks[0..n) = a permutation of 0..n−1: a pool's blocks, handed out in no order */
static inline void shuffled_blocks(int32_t *blocks, int n, uint64_t *s)
{
    for (int i = 0; i < n; i++)
        blocks[i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(splitmix(s) % (uint64_t)(i + 1));
        const int32_t t = blocks[i];
        blocks[i] = blocks[j], blocks[j] = t;
    }
}

/* qsort's comparison of doubles, ascending */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
