/* ceiling.c — the machine's arithmetic ceiling: an FMA loop (AVX-512, else AVX2+FMA) on
 * 1..T threads, the median of 9 runs each; where the CPU has AVX512_BF16, the same loop of
 * vdpbf16ps (bf16 pairs into float32: 32 multiply-adds per instruction) next to it; where it
 * has AMX-BF16 and Linux grants tile data, a loop of tdpbf16ps on four accumulator tiles
 * (16 × 16 × 32 multiply-adds each), else one line saying why not. On aarch64: a NEON FMLA loop
 * (the neon table's float32 and neon-bf16 ceiling) and, where the CPU has BF16, a BFDOT loop
 * (neon-bfdot's).
 * usage: ceiling [THREADS] (default 2).
 * Prints one line per kind and thread count: kind, threads, median GFLOP/s, min, max. */
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>
#endif
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef ITERS /* -DITERS=…: a short run (a check that the loops run, under emulation) */
#define ITERS 20000000L
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 16 independent chains of FMAs, named so they stay in registers and started from distinct
 * values so the compiler cannot merge them: flops = ITERS · 16 · lanes · 2 */
#define CHAINS(T, FMA)                                                                          \
    T a0 = FMA(x, x, y), a1 = FMA(a0, x, y), a2 = FMA(a1, x, y), a3 = FMA(a2, x, y);            \
    T a4 = FMA(a3, x, y), a5 = FMA(a4, x, y), a6 = FMA(a5, x, y), a7 = FMA(a6, x, y);           \
    T a8 = FMA(a7, x, y), a9 = FMA(a8, x, y), a10 = FMA(a9, x, y), a11 = FMA(a10, x, y);        \
    T a12 = FMA(a11, x, y), a13 = FMA(a12, x, y), a14 = FMA(a13, x, y), a15 = FMA(a14, x, y);   \
    for (long n = 0; n < ITERS; n++) {                                                          \
        a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);         \
        a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);         \
        a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);     \
        a12 = FMA(a12, x, y); a13 = FMA(a13, x, y); a14 = FMA(a14, x, y); a15 = FMA(a15, x, y); \
    }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float fma512(float seed)
{
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(seed + 1e-3f);
    CHAINS(__m512, _mm512_fmadd_ps)
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                       _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
    return _mm512_reduce_add_ps(s);
}

/* AVX2 has 16 vector registers (AVX-512's 32 are not encodable here): 16 chains and the two
 * operands spill (this loop read 95 GFLOP/s per core on a Sapphire Rapids Xeon that the
 * avx2 table's GEMM beat); 12 chains fit and still cover 2 FMA ports × 4 cycles of latency.
 * flops = ITERS · 12 · 8 lanes · 2. */
#define CHAINS12(T, FMA)                                                                       \
    T a0 = FMA(x, x, y), a1 = FMA(a0, x, y), a2 = FMA(a1, x, y), a3 = FMA(a2, x, y);            \
    T a4 = FMA(a3, x, y), a5 = FMA(a4, x, y), a6 = FMA(a5, x, y), a7 = FMA(a6, x, y);           \
    T a8 = FMA(a7, x, y), a9 = FMA(a8, x, y), a10 = FMA(a9, x, y), a11 = FMA(a10, x, y);        \
    for (long n = 0; n < ITERS; n++) {                                                          \
        a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);         \
        a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);         \
        a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);     \
    }

__attribute__((target("avx2,fma"))) static float fma256(float seed)
{
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(seed + 1e-3f);
    CHAINS12(__m256, _mm256_fmadd_ps)
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[7];
}

/* 16 chains of vdpbf16ps: flops = ITERS · 16 · 16 lanes · 2 pairs · 2. Each chain starts from
 * its own value (as the FMA loop's): identical chains are one chain to the compiler, which
 * then issues a single vdpbf16ps per iteration (an earlier version of this loop did, and
 * overstated the rate 16-fold). */
#define DP(a, b, c) _mm512_dpbf16_ps(a, b, c)
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16(float seed)
{
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = x; /* bf16 1.0 pairs */
    __m512 a0 = _mm512_set1_ps(seed), a1 = _mm512_set1_ps(seed + 1), a2 = _mm512_set1_ps(seed + 2);
    __m512 a3 = _mm512_set1_ps(seed + 3), a4 = _mm512_set1_ps(seed + 4), a5 = _mm512_set1_ps(seed + 5);
    __m512 a6 = _mm512_set1_ps(seed + 6), a7 = _mm512_set1_ps(seed + 7), a8 = _mm512_set1_ps(seed + 8);
    __m512 a9 = _mm512_set1_ps(seed + 9), a10 = _mm512_set1_ps(seed + 10), a11 = _mm512_set1_ps(seed + 11);
    __m512 a12 = _mm512_set1_ps(seed + 12), a13 = _mm512_set1_ps(seed + 13), a14 = _mm512_set1_ps(seed + 14);
    __m512 a15 = _mm512_set1_ps(seed + 15);
    for (long n = 0; n < ITERS; n++) {
        a0 = DP(a0, x, y); a1 = DP(a1, x, y); a2 = DP(a2, x, y); a3 = DP(a3, x, y);
        a4 = DP(a4, x, y); a5 = DP(a5, x, y); a6 = DP(a6, x, y); a7 = DP(a7, x, y);
        a8 = DP(a8, x, y); a9 = DP(a9, x, y); a10 = DP(a10, x, y); a11 = DP(a11, x, y);
        a12 = DP(a12, x, y); a13 = DP(a13, x, y); a14 = DP(a14, x, y); a15 = DP(a15, x, y);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                       _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
    return _mm512_reduce_add_ps(s);
}

/* AMX: tiles 0-3 accumulate, A in 4-5, B in 6-7 (each 16 rows of 64 bytes, loaded once);
 * four independent tdpbf16ps per iteration: flops = ITERS_AMX · 4 · 16 · 16 · 32 · 2. Tile
 * configuration is per thread. */
#define ITERS_AMX 2000000L
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

__attribute__((target("amx-tile,amx-bf16"))) static float amx_loop(float seed)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg)); /* not gcc 12's _tile_loadconfig: see src/bgemm.c */
    _Alignas(64) uint16_t ab[16 * 32];
    _Alignas(64) float c[16 * 16];
    for (int i = 0; i < 16 * 32; i++)
        ab[i] = 0x3f80; /* bf16 1.0 */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    for (long n = 0; n < ITERS_AMX; n++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    return c[0] + seed;
}

/* Whether the CPU has AMX-BF16 and Linux grants this process tile data (once); else why not. */
static const char *amx_unavailable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22)))
        return "the CPU reports no AMX-TILE / AMX-BF16";
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0)
        return "Linux refused tile data (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return NULL;
}

#elif defined(__aarch64__)
/* 16 chains of FMLA on 4 lanes (32 registers: chains and operands fit): flops = ITERS · 16 · 4 · 2. */
static float fma_neon(float seed)
{
    const float32x4_t x = vdupq_n_f32(0.999999f), y = vdupq_n_f32(seed + 1e-3f);
#define FMLA(a, b, c) vfmaq_f32(c, a, b)
    CHAINS(float32x4_t, FMLA)
#undef FMLA
    float32x4_t s = vaddq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)),
                              vaddq_f32(vaddq_f32(a4, a5), vaddq_f32(a6, a7)));
    s = vaddq_f32(s, vaddq_f32(vaddq_f32(vaddq_f32(a8, a9), vaddq_f32(a10, a11)),
                               vaddq_f32(vaddq_f32(a12, a13), vaddq_f32(a14, a15))));
    return vaddvq_f32(s);
}

/* 16 chains of BFDOT, each chain from its own value (see dpbf16 above): 4 lanes × 2 pairs a
 * chain, flops = ITERS · 16 · 4 · 2 · 2. In asm, as src/isa/neon_bf16.c writes it (no target
 * attribute, no bf16 types: either compiler, any -mcpu). */
#if defined(__clang__)
__attribute__((target("bf16")))
#endif
static float bfdot(float seed)
{
    uint16x8_t x = vdupq_n_u16(0x3f80); /* bf16 1.0 pairs */
    __asm__("" : "+w"(x)); /* an opaque value: folded, GCC writes it as an FP16 fmov (FEAT_FP16) */
    float32x4_t a[16];
    for (int i = 0; i < 16; i++)
        a[i] = vdupq_n_f32(seed + (float)i);
    for (long n = 0; n < ITERS; n++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
#if defined(__clang__)
            __asm__("bfdot %0.4s, %1.8h, %1.8h" : "+w"(a[i]) : "w"(x));
#else
            __asm__(".arch_extension bf16\n\tbfdot %0.4s, %1.8h, %1.8h" : "+w"(a[i]) : "w"(x));
#endif
    float32x4_t s = a[0];
    for (int i = 1; i < 16; i++)
        s = vaddq_f32(s, a[i]);
    return vaddvq_f32(s);
}
#endif

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* loop on 1..max_threads threads, 9 runs each: one line "kind threads median min max" in
 * GFLOP/s, flops being the loop's per thread. */
static void measure(const char *kind, float (*loop)(float), double flops, int max_threads)
{
    volatile float sink = 0;
    for (int t = 1; t <= max_threads; t++) {
        double g[9];
        for (int r = 0; r < 9; r++) {
            double t0 = now();
#pragma omp parallel num_threads(t)
            {
                float v = loop(1e-7f * omp_get_thread_num());
#pragma omp atomic
                sink += v;
            }
            g[r] = flops * t / (now() - t0) / 1e9;
        }
        qsort(g, 9, sizeof g[0], cmp);
        printf("%s %d %.1f %.1f %.1f\n", kind, t, g[4], g[0], g[8]);
    }
}

int main(int argc, char **argv)
{
    int max_threads = argc > 1 ? atoi(argv[1]) : 2;
#if defined(__aarch64__)
    measure("neon", fma_neon, ITERS * 16.0 * 4 * 2, max_threads);
    if (getauxval(AT_HWCAP2) & HWCAP2_BF16)
        measure("neon_bfdot", bfdot, ITERS * 16.0 * 4 * 2 * 2, max_threads);
    else
        printf("neon_bfdot n/a: the CPU reports no BF16 (HWCAP2_BF16)\n");
    return 0;
#else
    __builtin_cpu_init();
    int wide = __builtin_cpu_supports("avx512f");
    if (wide)
        measure("avx512", fma512, ITERS * 16.0 * 16 * 2, max_threads);
    /* the AVX2 loop everywhere: the avx2 kernel table's ceiling (make bench ISA=avx2) */
    measure("avx2", fma256, ITERS * 12.0 * 8 * 2, max_threads);
    if (__builtin_cpu_supports("avx512bf16"))
        measure("avx512_bf16", dpbf16, ITERS * 16.0 * 16 * 2 * 2, max_threads);
    const char *no_amx = amx_unavailable();
    if (no_amx)
        printf("amx_bf16 n/a: %s\n", no_amx);
    else
        measure("amx_bf16", amx_loop, ITERS_AMX * 4.0 * 16 * 16 * 32 * 2, max_threads);
    return 0;
#endif
}
