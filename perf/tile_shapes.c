/* tile_shapes.c — would a float32 register tile of another shape beat BLIS's microkernel?
 * One thread, operands in L1/L2 (A: 96 rows × KC, B: KC × 576, packed for each tile), C
 * accumulated (beta 1), tile after tile, 100 sweeps per run, median of 5 runs interleaved:
 * BLIS's 12 × 32 kernel as mha calls it (mha_kernel_tile) next to plain AVX-512 tiles of R
 * broadcast rows × 16·V columns (R·V accumulators: 12 × 32, 14 × 32, 8 × 48, 6 × 64, 4 × 96).
 * Prints GFLOP/s per shape for KC 64 (a head's d_k) and 384 (BLIS's k block on skx); run the
 * FMA loop (`build/ceiling 1`) next to it. Only where the selected kernel is skx's (12 × 32).
 * usage: tile_shapes */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (perf_util.h) under -std=c11 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa/isa.h"
#include "kernel.h"
#include "perf_util.h"

enum { MB = 96, NB = 576, SWEEPS = 100, RUNS = 5 };

#define TILE(R, V)                                                                                              \
    __attribute__((target("avx512f"), noinline)) static void tile_##R##x##V(int kc, const float *a, const float *b, \
                                                                           float *c, int ldc)                  \
    {                                                                                                           \
        __m512 acc[R * V];                                                                                      \
        for (int i = 0; i < R * V; i++)                                                                         \
            acc[i] = _mm512_setzero_ps();                                                                       \
        for (int p = 0; p < kc; p++) {                                                                          \
            __m512 bv[V];                                                                                       \
            for (int j = 0; j < V; j++)                                                                         \
                bv[j] = _mm512_load_ps(b + (size_t)p * 16 * V + 16 * j);                                        \
            for (int r = 0; r < R; r++) {                                                                       \
                const __m512 x = _mm512_set1_ps(a[(size_t)p * R + r]);                                          \
                for (int j = 0; j < V; j++)                                                                     \
                    acc[r * V + j] = _mm512_fmadd_ps(x, bv[j], acc[r * V + j]);                                 \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < R; r++)                                                                             \
            for (int j = 0; j < V; j++) {                                                                       \
                float *cp = c + (size_t)r * ldc + 16 * j;                                                       \
                _mm512_storeu_ps(cp, _mm512_add_ps(_mm512_loadu_ps(cp), acc[r * V + j]));                       \
            }                                                                                                   \
    }
TILE(12, 2)
TILE(14, 2)
TILE(8, 3)
TILE(6, 4)
TILE(4, 6)

typedef void (*tile_fn)(int, const float *, const float *, float *, int);
static const struct {
    const char *name;
    int rows, vecs;
    tile_fn fn;
} shapes[] = {{"12x32", 12, 2, tile_12x2}, {"14x32", 14, 2, tile_14x2}, {"8x48", 8, 3, tile_8x3},
              {"6x64", 6, 4, tile_6x4},    {"4x96", 4, 6, tile_4x6}};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

static int cmp(const void *x, const void *y)
{
    double u = *(const double *)x, v = *(const double *)y;
    return (u > v) - (u < v);
}

int main(void)
{
    mha_kernel k;
    if (mha_kernel_select("", &mha_isa_avx512, &k) != MHA_OK || !k.stream || k.aw != 12 || k.bw != 32) {
        printf("tile_shapes: n/a: needs AVX-512 and BLIS's skx kernel (12 x 32)\n");
        return 0; /* a CPU without them is not a failure of make ukernel-rate */
    }
    static const int kcs[] = {64, 384};
    for (int ki = 0; ki < 2; ki++) {
        const int kc = kcs[ki];
        /* A: up to 14·7 = 98 rows; B and C: NB columns, a multiple of 32, 48, 64 and 96 */
        float *a = aligned_alloc(64, (size_t)112 * kc * sizeof *a), *b = aligned_alloc(64, (size_t)kc * NB * sizeof *b);
        float *c = aligned_alloc(64, (size_t)112 * NB * sizeof *c);
        if (!a || !b || !c) {
            fprintf(stderr, "tile_shapes: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < (size_t)112 * kc; i++)
            a[i] = 1e-3f * (float)(i % 11);
        for (size_t i = 0; i < (size_t)kc * NB; i++)
            b[i] = 1e-3f * (float)(i % 7);
        memset(c, 0, (size_t)112 * NB * sizeof *c);
        double rate[1 + N_SHAPES][RUNS];
        for (int run = 0; run < RUNS; run++) {
            double t0 = now_ms();
            for (int s = 0; s < SWEEPS; s++)
                for (int j = 0; j < NB; j += 32)
                    for (int i = 0; i < MB; i += 12)
                        mha_kernel_tile(&k, 12, 32, kc, 1.0f, a + (size_t)i * kc, b + (size_t)j * kc, 1.0f,
                                        c + (size_t)i * NB + j, NB);
            rate[0][run] = 2.0 * MB * NB * kc * SWEEPS / (now_ms() - t0) / 1e6;
            for (int t = 0; t < N_SHAPES; t++) {
                const int rows = shapes[t].rows, cols = 16 * shapes[t].vecs, mb = MB / rows * rows;
                t0 = now_ms();
                for (int s = 0; s < SWEEPS; s++)
                    for (int j = 0; j < NB; j += cols)
                        for (int i = 0; i < mb; i += rows)
                            shapes[t].fn(kc, a + (size_t)i * kc, b + (size_t)j * kc, c + (size_t)i * NB + j, NB);
                rate[1 + t][run] = 2.0 * mb * NB * kc * SWEEPS / (now_ms() - t0) / 1e6;
            }
        }
        printf("kc %3d, GFLOP/s:", kc);
        for (int t = 0; t <= N_SHAPES; t++) {
            qsort(rate[t], RUNS, sizeof rate[t][0], cmp);
            printf(" %s %.1f", t ? shapes[t - 1].name : "blis-12x32", rate[t][RUNS / 2]);
        }
        printf("\n");
        free(a), free(b), free(c);
    }
    return 0;
}
