/* bgemm.c — bf16 products: kernel choice, packing, the model and its three hardware forms.
 *
 * One block is up to 32 rows (two A panels) × 32 columns (two B panels) summed over every k
 * tile; the driver packs 32 rows of A at a time (or reads them prepacked) and walks B's
 * panels two by two. AMX holds the block in four accumulator tiles (2 × 2: each A and B tile
 * load feeds two tdpbf16ps); the AVX-512 kernels hold up to 8 rows × 32 columns in sixteen
 * registers and walk the rows in groups, specialised for 8, 4, 2 and 1 rows so that a
 * product with few rows (a decode step) does no work for rows it lacks. */
#define _GNU_SOURCE /* syscall */
#include "bgemm.h"

#include <immintrin.h>
#include <math.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "simd.h"

/* ---- choice ---- */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Linux grants a process the AMX tile data state only on request (once is enough; asking
 * again is harmless). Without it the first tile instruction raises SIGILL. */
static int amx_usable(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
        return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

static int avx512_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

static int dpbf16_usable(void)
{
    return avx512_usable() && __builtin_cpu_supports("avx512bf16");
}

static const struct {
    mha_bkernel k;
    int (*usable)(void); /* NULL: runs anywhere */
    const char *lacks;   /* why not, when usable() says no */
} kernels[] = {
    {{MHA_BK_AMX, "amx-bf16", MHA_BK_TILE_LANES}, amx_usable, "this CPU has no AMX-BF16, or Linux did not grant the tile data state"},
    {{MHA_BK_DPBF16, "avx512-bf16", MHA_BK_ODD_FIRST}, dpbf16_usable, "this CPU has no AVX512_BF16"},
    {{MHA_BK_FMA, "fma-bf16", MHA_BK_EVEN_FIRST}, avx512_usable, "this CPU has no AVX-512"},
    {{MHA_BK_REF, "ref-bf16", MHA_BK_EVEN_FIRST}, NULL, NULL},
};

const char *mha_bkernel_auto(void)
{
    /* vdpbf16ps issues at half the FMA rate on Intel's cores (measured on Xeons with and
     * without AMX exposed, perf/RESULTS.md): there the FMA kernel on widened bf16 is faster.
     * AMD's Zen 4/5 are listed at one vdpbf16ps per FMA slot (unmeasured here). */
    if (amx_usable())
        return "amx-bf16";
    if (dpbf16_usable() && __builtin_cpu_is("amd"))
        return "avx512-bf16";
    return avx512_usable() ? "fma-bf16" : "ref-bf16";
}

mha_status mha_bkernel_select(const char *request, mha_bkernel *bk, const char **why)
{
    const char *name = (!request || !request[0] || !strcmp(request, "auto")) ? mha_bkernel_auto() : request;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        if (strcmp(kernels[i].k.name, name) != 0)
            continue;
        if (kernels[i].usable && !kernels[i].usable()) {
            *why = kernels[i].lacks;
            return MHA_ERR_CONFIG;
        }
        *bk = kernels[i].k;
        *why = NULL;
        return MHA_OK;
    }
    *why = "unknown (auto, amx-bf16, avx512-bf16, fma-bf16, ref-bf16)";
    return MHA_ERR_CONFIG;
}

/* ---- the model ---- */

static float daz(mha_bf16 h)
{
    return (h & 0x7f80u) == 0 ? 0.0f : mha_bf16_float(h);
}

static float ftz(float x)
{
    return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

void mha_bk_block_model(mha_bk_order order, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                        size_t ps, float *acc)
{
    const int first = order == MHA_BK_ODD_FIRST ? 1 : 0, second = 1 - first;
    for (int i = 0; i < rows; i++) {
        const mha_bf16 *ar = a + (size_t)(i / 16) * 16 * 32 * kt + (size_t)(i % 16) * 32;
        for (int j = 0; j < 16 * npan; j++) {
            const mha_bf16 *bc = b + (size_t)(j / 16) * ps + (size_t)(j % 16) * 2;
            float s = 0.0f;
            for (int t = 0; t < kt; t++) {
                float even = 0.0f, odd = 0.0f; /* tile lanes: the tile's two chains */
                for (int q = 0; q < 16; q++) { /* k pair q of tile t */
                    const mha_bf16 *ap = ar + (size_t)t * 512 + 2 * q, *bp = bc + (size_t)t * 512 + 32 * q;
                    if (order == MHA_BK_TILE_LANES) {
                        even = ftz(even + daz(ap[0]) * daz(bp[0]));
                        odd = ftz(odd + daz(ap[1]) * daz(bp[1]));
                    } else {
                        s = ftz(s + daz(ap[first]) * daz(bp[first]));
                        s = ftz(s + daz(ap[second]) * daz(bp[second]));
                    }
                }
                if (order == MHA_BK_TILE_LANES)
                    s = ftz(s + ftz(even + odd));
            }
            acc[i * 32 + j] = s;
        }
    }
}

/* ---- AVX-512: rows in groups of NR (8, 4, 2, 1), 16·npan columns ---- */

#define BK_AVX512 __attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) static inline

/* Few-row products read B from memory once: its pairs PF_AHEAD ahead (64 bytes per panel each)
 * prefetched by the first row group as it goes. */
enum { PF_AHEAD = 32 };
BK_AVX512 void prefetch_b(const mha_bf16 *bp, int npan, size_t ps)
{
    _mm_prefetch((const char *)(bp + 32 * PF_AHEAD), _MM_HINT_T0);
    if (npan == 2)
        _mm_prefetch((const char *)(bp + ps + 32 * PF_AHEAD), _MM_HINT_T0);
}

/* Row i's k pair q of tile t, as the 32-bit word vdpbf16ps broadcasts. */
BK_AVX512 uint32_t a_pair(const mha_bf16 *a, int kt, int i, int t, int q)
{
    uint32_t w;
    memcpy(&w, a + (size_t)(i / 16) * 16 * 32 * kt + (size_t)t * 512 + (size_t)(i % 16) * 32 + 2 * q, sizeof w);
    return w;
}

BK_AVX512 void rows_dpbf16(const int NR, int pf, int i0, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                           size_t ps, float *acc)
{
    __m512 c0[8], c1[8];
    for (int r = 0; r < NR; r++)
        c0[r] = c1[r] = _mm512_setzero_ps();
    for (int t = 0; t < kt; t++)
        for (int q = 0; q < 16; q++) {
            const mha_bf16 *bp = b + (size_t)t * 512 + 32 * q;
            if (pf)
                prefetch_b(bp, npan, ps);
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
            if (npan == 2) {
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + ps);
                for (int r = 0; r < NR; r++) {
                    const __m512bh x = (__m512bh)_mm512_set1_epi32((int)a_pair(a, kt, i0 + r, t, q));
                    c0[r] = _mm512_dpbf16_ps(c0[r], x, b0);
                    c1[r] = _mm512_dpbf16_ps(c1[r], x, b1);
                }
            } else
                for (int r = 0; r < NR; r++)
                    c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)_mm512_set1_epi32((int)a_pair(a, kt, i0 + r, t, q)), b0);
        }
    for (int r = 0; r < NR; r++) {
        _mm512_storeu_ps(acc + (i0 + r) * 32, c0[r]);
        if (npan == 2)
            _mm512_storeu_ps(acc + (i0 + r) * 32 + 16, c1[r]);
    }
}

/* bf16 widened to float32 and two FMAs per pair, even element first: the product is exact, so
 * each FMA rounds once, as the model's sum does. A's rows are widened into a small float buffer
 * a chunk of k at a time (then each FMA broadcasts its A value from memory: a load, not a
 * shuffle on an FMA port); B's pairs are split into even and odd halves by a shift and a mask. */
enum { FMA_KCH = 8 }; /* k tiles per widened chunk: 8 rows × 256 floats, 8 KiB */

BK_AVX512 void rows_fma(const int NR, int pf, int i0, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                        size_t ps, float *acc)
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    _Alignas(64) float aw[8][FMA_KCH * 32];
    __m512 c0[8], c1[8];
    for (int r = 0; r < NR; r++)
        c0[r] = c1[r] = _mm512_setzero_ps();
    for (int t0 = 0; t0 < kt; t0 += FMA_KCH) {
        const int tn = kt - t0 < FMA_KCH ? kt - t0 : FMA_KCH;
        for (int r = 0; r < NR; r++) {
            const int i = i0 + r;
            const mha_bf16 *src = a + (size_t)(i / 16) * 16 * 32 * kt + (size_t)(i % 16) * 32;
            for (int t = 0; t < tn; t++) {
                const __m512i v = _mm512_loadu_si512(src + (size_t)(t0 + t) * 512);
                const __m512i lo16 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
                const __m512i hi16 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
                _mm512_store_ps(&aw[r][t * 32], _mm512_castsi512_ps(_mm512_slli_epi32(lo16, 16)));
                _mm512_store_ps(&aw[r][t * 32 + 16], _mm512_castsi512_ps(_mm512_slli_epi32(hi16, 16)));
            }
        }
        for (int t = 0; t < tn; t++)
            for (int q = 0; q < 16; q++) {
                const mha_bf16 *bp = b + (size_t)(t0 + t) * 512 + 32 * q;
                if (pf)
                    prefetch_b(bp, npan, ps);
                const __m512i v0 = _mm512_loadu_si512(bp);
                const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
                const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
                __m512 e1 = e0, o1 = o0;
                if (npan == 2) {
                    const __m512i v1 = _mm512_loadu_si512(bp + ps);
                    e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
                    o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
                }
                for (int r = 0; r < NR; r++) {
                    const __m512 xe = _mm512_set1_ps(aw[r][t * 32 + 2 * q]);
                    const __m512 xo = _mm512_set1_ps(aw[r][t * 32 + 2 * q + 1]);
                    c0[r] = _mm512_fmadd_ps(xo, o0, _mm512_fmadd_ps(xe, e0, c0[r]));
                    if (npan == 2)
                        c1[r] = _mm512_fmadd_ps(xo, o1, _mm512_fmadd_ps(xe, e1, c1[r]));
                }
            }
    }
    for (int r = 0; r < NR; r++) {
        _mm512_storeu_ps(acc + (i0 + r) * 32, c0[r]);
        if (npan == 2)
            _mm512_storeu_ps(acc + (i0 + r) * 32 + 16, c1[r]);
    }
}

/* Specialised per row count, so the accumulators live in registers; pf: the first group
 * prefetches B. */
#define ROW_GROUPS(fn)                                                                                    \
    __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void fn##_block(                        \
        int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc, int pf)  \
    {                                                                                                     \
        int i = 0;                                                                                        \
        for (; i + 8 <= rows; i += 8)                                                                     \
            fn(8, pf && i == 0, i, npan, kt, a, b, ps, acc);                                              \
        if (i + 4 <= rows)                                                                                \
            fn(4, pf && i == 0, i, npan, kt, a, b, ps, acc), i += 4;                                      \
        if (i + 2 <= rows)                                                                                \
            fn(2, pf && i == 0, i, npan, kt, a, b, ps, acc), i += 2;                                      \
        if (i < rows)                                                                                     \
            fn(1, pf && i == 0, i, npan, kt, a, b, ps, acc);                                              \
    }
ROW_GROUPS(rows_dpbf16)
ROW_GROUPS(rows_fma)

/* ---- AMX: tiles 0-3 accumulate the 2 × 2 block, 4-5 hold A, 6-7 B ---- */

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

__attribute__((target("amx-tile"))) static void amx_begin(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    /* Not gcc 12's _tile_loadconfig: its asm operand is the first 8 bytes of the config only,
     * so the rest of the struct is dead to the compiler, its stores are dropped, and
     * ldtilecfg faults on the stack garbage (#GP: SIGSEGV). The operand here is all 64. */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

__attribute__((target("amx-tile"))) static void amx_end(void)
{
    _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"))) static void amx_block(int rows, int npan, int kt, const mha_bf16 *a,
                                                                   const mha_bf16 *b, size_t ps, float *acc)
{
    const mha_bf16 *a1 = a + (size_t)16 * 32 * kt, *b1 = b + ps;
    const long s = 64; /* bytes per tile row, A and B alike */
    __asm__ volatile("" ::: "memory"); /* the packed panels are written before the tile loads read them */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int t = 0; t < kt; t++) {
        const size_t o = (size_t)t * 512;
        _tile_loadd(4, a + o, s);
        _tile_loadd(6, b + o, s);
        _tile_dpbf16ps(0, 4, 6);
        if (npan == 2) {
            _tile_loadd(7, b1 + o, s);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (rows > 16) {
            _tile_loadd(5, a1 + o, s);
            _tile_dpbf16ps(2, 5, 6);
            if (npan == 2)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    const long sc = 32 * sizeof(float);
    _tile_stored(0, acc, sc);
    if (npan == 2)
        _tile_stored(1, acc + 16, sc);
    if (rows > 16) {
        _tile_stored(2, acc + 16 * 32, sc);
        if (npan == 2)
            _tile_stored(3, acc + 16 * 32 + 16, sc);
    }
}

/* ---- one block, and what a run of blocks needs around it ---- */

/* Tile configuration is per thread: loaded at the start of each product, released at its end. */
static void begin(const mha_bkernel *bk)
{
    if (bk->id == MHA_BK_AMX)
        amx_begin();
}

static void end(const mha_bkernel *bk)
{
    if (bk->id == MHA_BK_AMX)
        amx_end();
}

/* pf: B comes from memory (a product of few rows reads it once): prefetch it ahead. */
static void block(const mha_bkernel *bk, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps,
                  float *acc, int pf)
{
    switch (bk->id) {
    case MHA_BK_AMX: amx_block(rows, npan, kt, a, b, ps, acc); break;
    case MHA_BK_DPBF16: rows_dpbf16_block(rows, npan, kt, a, b, ps, acc, pf); break;
    case MHA_BK_FMA: { /* the instructions' DAZ and FTZ, for the FMAs only */
        const unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040u);
        rows_fma_block(rows, npan, kt, a, b, ps, acc, pf);
        _mm_setcsr(csr);
        break;
    }
    case MHA_BK_REF: mha_bk_block_model(MHA_BK_EVEN_FIRST, rows, npan, kt, a, b, ps, acc); break;
    }
}

void mha_bk_block(const mha_bkernel *bk, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                  size_t ps, float *acc)
{
    begin(bk);
    block(bk, rows, npan, kt, a, b, ps, acc, 1);
    end(bk);
}

/* ---- packing ---- */

/* 16 floats rounded to bf16 as mha_bf16_round does: each in the low half of its 32-bit lane. */
static inline __attribute__((target("avx512f"))) __m512i round_lanes(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i top = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(top, _mm512_set1_epi32(1))), 16);
    const __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, tiny, _mm512_and_si512(top, _mm512_set1_epi32(0x8000)));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x0040)));
}

/* n <= 16 floats rounded to bf16, 16 lanes at a time. */
__attribute__((target("avx512f"))) static void round16(const float *src, mha_bf16 *dst, int n)
{
    const __mmask16 m = (__mmask16)((1u << n) - 1u);
    const __m512i r = round_lanes(_mm512_maskz_loadu_ps(m, src));
    if (n == 16)
        _mm256_storeu_si256((__m256i *)(void *)dst, _mm512_cvtepi32_epi16(r));
    else {
        mha_bf16 t[16];
        _mm256_storeu_si256((__m256i *)(void *)t, _mm512_cvtepi32_epi16(r));
        memcpy(dst, t, (size_t)n * sizeof *t);
    }
}

/* One row of A panels of depth kk (d: the row's first element in its panel) from src (its
 * columns contiguous within runs of ps's panels of w), zeros past kk. */
static void pack_a_row(const mha_kernel *k, const float *src, ptrdiff_t ps, int kk, mha_bf16 *d)
{
    const int kp = (int)mha_bk_kp(kk), w = k->bw;
    int p = 0;
    while (p < kk) { /* contiguous within one of the source's panels */
        const int in_panel = w - p % w, n = kk - p < in_panel ? kk - p : in_panel;
        const float *s = src + (ptrdiff_t)(p / w) * ps + p % w;
        for (int t = 0; t < n;) { /* within one 16-wide half of a tile row: contiguous */
            const int c = p + t, run = 16 - c % 16 < n - t ? 16 - c % 16 : n - t;
            mha_bf16 *o = d + (size_t)(c / 32) * 512 + c % 32;
            if (k->avx512)
                round16(s + t, o, run);
            else
                for (int u = 0; u < run; u++)
                    o[u] = mha_bf16_round(s[t + u]);
            t += run;
        }
        p += n;
    }
    if (p < kp) /* the rest of the last k tile's row */
        memset(d + (size_t)(p / 32) * 512 + p % 32, 0, (size_t)(kp - p) * sizeof *d);
}

void mha_bk_pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int kk, mha_bf16 *dst)
{
    const size_t kp = mha_bk_kp(kk);
    for (int r = 0; r < rows; r++)
        pack_a_row(k, a.p + (ptrdiff_t)(i0 + r) * a.ld, a.ps, kk, dst + (size_t)(r / 16) * 16 * kp + (size_t)(r % 16) * 32);
    if (rows % 16) { /* the last panel's missing rows: zero, one run per k tile */
        mha_bf16 *last = dst + (size_t)(rows / 16) * 16 * kp + (size_t)(rows % 16) * 32;
        for (size_t t = 0; t < kp / 32; t++)
            memset(last + t * 512, 0, (size_t)(16 - rows % 16) * 32 * sizeof *last);
    }
}

void mha_bk_pack_a_row(const mha_kernel *k, const float *x, int i, int kk, mha_bf16 *dst)
{
    const size_t kp = mha_bk_kp(kk);
    pack_a_row(k, x, k->bw, kk, dst + (size_t)(i / 16) * 16 * kp + (size_t)(i % 16) * 32);
}

/* The same, 16 k × 16 columns at a time: 16 source rows loaded (transposed: keys' rows of 16
 * features, turned by a register transpose), each k pair rounded and interleaved into the 32
 * bf16 (one 64-byte line) of its VNNI row. src's 16-column runs must not cross its panels
 * (its panel width a multiple of 16). */
__attribute__((target("avx512f"))) static void pack_b_avx512(const mha_kernel *k, mha_mat src, int transpose, int kk,
                                                            int n, mha_bf16 *dst, size_t ps)
{
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j0 = 0; j0 < np; j0 += 16)
        for (int p0 = 0; p0 < kp; p0 += 16) {
            __m512 v[16];
            /* rows of src: k (features of the keys' rows when transposed) or columns */
            const int rows = transpose ? n - j0 : kk - p0, cols = transpose ? kk - p0 : n - j0;
            const __mmask16 m = cols >= 16 ? (__mmask16)0xFFFF : cols <= 0 ? 0 : (__mmask16)((1u << cols) - 1u);
            for (int r = 0; r < 16; r++)
                v[r] = r < rows && m ? _mm512_maskz_loadu_ps(m, transpose ? mha_mat_at(k, src, j0 + r, p0)
                                                                           : mha_mat_at(k, src, p0 + r, j0))
                                     : _mm512_setzero_ps();
            if (transpose)
                mha_transpose16(v); /* v[r]: k p0 + r over the 16 columns */
            for (int r = 0; r < 16; r += 2) {
                const __m512i pair = _mm512_or_si512(round_lanes(v[r]), _mm512_slli_epi32(round_lanes(v[r + 1]), 16));
                _mm512_storeu_si512(dst + mha_bk_b_index(p0 + r, j0, ps), pair);
            }
        }
}

void mha_bk_pack_b(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps)
{
    if (k->avx512 && k->bw % 16 == 0) {
        pack_b_avx512(k, src, transpose, kk, n, dst, ps);
        return;
    }
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j = 0; j < np; j++)
        for (int p = 0; p < kp; p++) {
            float x = 0.0f;
            if (j < n && p < kk)
                x = transpose ? *mha_mat_at(k, src, j, p) : *mha_mat_at(k, src, p, j);
            dst[mha_bk_b_index(p, j, ps)] = mha_bf16_round(x);
        }
}

/* ---- the product ---- */

/* c = alpha·x, then + beta·c (beta = 0: c not read), each rounded: cnt <= 16 contiguous floats. */
static void epilogue_scalar(float *c, const float *x, int cnt, float alpha, float beta)
{
    if (beta == 0.0f)
        for (int t = 0; t < cnt; t++)
            c[t] = alpha * x[t];
    else
        for (int t = 0; t < cnt; t++) {
            const float y = alpha * x[t];
            c[t] = y + beta * c[t];
        }
}

/* The same 16 lanes at a time: a multiply and an add, no FMA, so the bits are the scalar's. */
__attribute__((target("avx512f"))) static void epilogue_avx512(float *c, const float *x, int cnt, float alpha, float beta)
{
    const __mmask16 m = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1u);
    __m512 y = _mm512_mul_ps(_mm512_set1_ps(alpha), _mm512_maskz_loadu_ps(m, x));
    if (beta != 0.0f)
        y = _mm512_add_ps(y, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m, c)));
    _mm512_mask_storeu_ps(c, m, y);
}

void mha_bgemm(const mha_bkernel *bk, const mha_kernel *k, int m, int n, int kk, float alpha, const mha_bf16 *ap,
               mha_mat a, const mha_bf16 *b, size_t ps, float beta, mha_mat c, mha_bf16 *apack)
{
    if (m <= 0 || n <= 0)
        return;
    const int kt = (int)(mha_bk_kp(kk) / MHA_BT_K);
    _Alignas(64) float acc[32 * 32];
    begin(bk);
    for (int i0 = 0; i0 < m; i0 += 32) {
        const int rows = m - i0 < 32 ? m - i0 : 32;
        const mha_bf16 *ab = ap ? ap + (size_t)(i0 / 16) * 16 * 32 * kt : apack;
        if (!ap && kt > 0)
            mha_bk_pack_a(k, a, i0, rows, kk, apack);
        for (int j0 = 0; j0 < n; j0 += 32) {
            const int cols = n - j0 < 32 ? n - j0 : 32, npan = cols > 16 ? 2 : 1;
            if (kt > 0)
                block(bk, rows, npan, kt, ab, b + (size_t)(j0 / 16) * ps, ps, acc, m <= 32);
            else
                memset(acc, 0, sizeof acc);
            for (int i = 0; i < rows; i++)
                for (int g = 0; g < cols; g += 16) { /* 16 columns are contiguous in any form (bw: 16k) */
                    float *cp = mha_mat_at(k, c, i0 + i, j0 + g);
                    const float *x = acc + i * 32 + g;
                    const int cnt = cols - g < 16 ? cols - g : 16;
                    if (k->avx512)
                        epilogue_avx512(cp, x, cnt, alpha, beta);
                    else
                        epilogue_scalar(cp, x, cnt, alpha, beta);
                }
        }
    }
    end(bk);
}
