/* perf_util.h — what the serving benchmarks share: a monotonic clock in ms and splitmix64
 * with uniform draws in [0, 1). Header-only (each program is one file). */
#ifndef MHA_PERF_UTIL_H
#define MHA_PERF_UTIL_H

#include <stdint.h>
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

#endif
