/* block_reads.c — the rate at which threads read memory in blocks taken in random order: the
 * pattern of a decode step over a paged KV cache (a task reads one region of a few KiB per
 * block, the blocks wherever the pool put them), which streams slower than one sequential
 * read. 1 GiB in blocks of BYTES (transparent huge pages asked for, as mha's cache asks), a
 * shuffled order split between THREADS, each block's lines prefetched DISTANCE blocks ahead
 * (0: none) and summed with AVX2. Prints the best of 3 passes; compare it with
 * build/bandwidth's sequential rate and a decode step's bytes per second.
 *
 * usage: block_reads [BYTES (4096), a multiple of 64] [THREADS (2)] [DISTANCE (1)] */
#define _DEFAULT_SOURCE /* madvise */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { TOTAL_LOG2 = 30, PASSES = 3, HUGE = 1 << 21 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__attribute__((target("avx2"))) static long long read_blocks(const char *m, const size_t *order, size_t lo, size_t hi,
                                                             size_t bytes, int distance)
{
    __m256i acc = _mm256_setzero_si256();
    for (size_t i = lo; i < hi; i++) {
        if (distance > 0 && i + (size_t)distance < hi) {
            const char *p = m + order[i + (size_t)distance] * bytes;
            for (size_t o = 0; o < bytes; o += 64)
                _mm_prefetch(p + o, _MM_HINT_T0);
        }
        const char *b = m + order[i] * bytes;
        for (size_t o = 0; o < bytes; o += 32)
            acc = _mm256_add_epi8(acc, _mm256_load_si256((const __m256i *)(const void *)(b + o)));
    }
    return _mm256_extract_epi64(acc, 0);
}

int main(int argc, char **argv)
{
    const long bytes = argc > 1 ? atol(argv[1]) : 4096;
    const int threads = argc > 2 ? atoi(argv[2]) : 2, distance = argc > 3 ? atoi(argv[3]) : 1;
    const size_t total = (size_t)1 << TOTAL_LOG2;
    if (bytes < 64 || bytes % 64 || (size_t)bytes > total / 64 || threads < 1 || threads > 1024 || distance < 0) {
        fprintf(stderr, "usage: block_reads [BYTES: a multiple of 64, 64..%zu] [THREADS >= 1] [DISTANCE >= 0]\n",
                total / 64);
        return 2;
    }
    if (!__builtin_cpu_supports("avx2")) {
        fprintf(stderr, "block_reads: needs AVX2\n");
        return 1;
    }
    const size_t n = total / (size_t)bytes;
    char *m = aligned_alloc(HUGE, total);
    size_t *order = malloc(n * sizeof *order);
    if (!m || !order) {
        fprintf(stderr, "block_reads: out of memory\n");
        return 1;
    }
    (void)madvise(m, total, MADV_HUGEPAGE);
    memset(m, 1, total); /* every page touched before timing */
    uint64_t seed = 42;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        const size_t j = (size_t)(next(&seed) % (i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    double best = 0.0;
    volatile long long sink = 0; /* the sums are used: the reads stay */
    for (int pass = 0; pass < PASSES; pass++) {
        const double t0 = now();
        long long sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        {
            const size_t id = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
            sum += read_blocks(m, order, n * id / nt, n * (id + 1) / nt, (size_t)bytes, distance);
        }
        const double rate = (double)total / (now() - t0) * 1e-9;
        best = rate > best ? rate : best;
        sink = sink + sum;
    }
    printf("block_reads: %ld-byte blocks in random order, %d thread%s, prefetch %d block%s ahead: %.1f GB/s (best of %d "
           "passes over 1 GiB)\n",
           bytes, threads, threads > 1 ? "s" : "", distance, distance == 1 ? "" : "s", best, PASSES);
    free(order);
    free(m);
    return 0;
}
