/* amx_swap.c — does AMX's tdpbf16ps sum an element the same way whichever operand holds which
 * factor? Scores C = Q·Kᵀ as the amx-bf16 kernel computes them (A = 16 query rows, B = Kᵀ's
 * k pairs of 16 keys) against C' = K·Qᵀ (A = 16 key rows loaded as they lie, B = Qᵀ's k pairs):
 * if every element of C equals its transpose's in C', bit for bit, a few-query decode can take K
 * straight from a cache block or a tensor as the A operand, with no B panel packed from it. The
 * bf16 inputs are random over wide exponents (up to 2^19 apart) so that the order of the sums
 * shows: a plain float32 chain over k differs from AMX's in most elements. d_k 128 (4 k tiles).
 * usage: gcc -O2 perf/amx_swap.c -o build/amx_swap && build/amx_swap [TRIALS (2000)]; exit
 * status 0 when no element differs, 1 when one does, 2 without AMX. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { DK = 128, KT = DK / 32 };

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static uint64_t state = 88172645463325252ull;

static uint64_t next(void)
{
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
}

/* A float to bf16, nearest even (the inputs are finite and normal). */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

/* C (16 × 16) = Σ over KT k tiles of A's tile (16 rows, sa bytes apart) · B's (16 pairs × 16). */
__attribute__((target("amx-tile,amx-bf16"))) static void product(const uint16_t *a, long sa, const uint16_t *b,
                                                                float *c)
{
    _tile_zero(0);
    for (int t = 0; t < KT; t++) {
        _tile_loadd(1, a + t * 32, sa);
        _tile_loadd(2, b + t * 16 * 32, 64);
        _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, c, 64);
}

__attribute__((target("amx-tile"))) static void release(void)
{
    _tile_release();
}

int main(int argc, char **argv)
{
    const int trials = argc > 1 ? atoi(argv[1]) : 2000;
    if (!__builtin_cpu_supports("avx512f") || syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18)) {
        puts("amx_swap: no AMX tile data here");
        return 2;
    }
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
    static uint16_t q[16][DK], k[16][DK], kpairs[KT][16][32], qpairs[KT][16][32];
    static float c[16][16], ct[16][16];
    long differ = 0, sums = 0;
    for (int trial = 0; trial < trials; trial++) {
        for (int r = 0; r < 16; r++)
            for (int d = 0; d < DK; d++) {
                const float x = (float)((int)(next() % 2001) - 1000) / 1000.0f * (float)(1u << next() % 20);
                const float y = (float)((int)(next() % 2001) - 1000) / 1000.0f * (float)(1u << next() % 20);
                q[r][d] = to_bf16(x), k[r][d] = to_bf16(y);
            }
        for (int t = 0; t < KT; t++)
            for (int p = 0; p < 16; p++)
                for (int n = 0; n < 16; n++)
                    for (int e = 0; e < 2; e++) {
                        kpairs[t][p][2 * n + e] = k[n][t * 32 + 2 * p + e];
                        qpairs[t][p][2 * n + e] = q[n][t * 32 + 2 * p + e];
                    }
        product(&q[0][0], DK * 2, &kpairs[0][0][0], &c[0][0]);
        product(&k[0][0], DK * 2, &qpairs[0][0][0], &ct[0][0]);
        for (int i = 0; i < 16; i++)
            for (int n = 0; n < 16; n++, sums++)
                differ += memcmp(&c[i][n], &ct[n][i], sizeof c[i][n]) != 0;
    }
    release();
    printf("amx_swap: %ld of %ld scores differ between Q·Kᵀ and (K·Qᵀ)ᵀ\n", differ, sums);
    return differ != 0;
}
