/* avx512_bf16.c — the avx512 table's bf16 rounding (as mha_bf16_round, 16 lanes), B packing and
 * pairing into VNNI panels, the product epilogue, and its bf16 products: vdpbf16ps
 * (avx512-bf16, AVX512_BF16) and FMA on widened bf16 (fma-bf16), with the choice between them
 * and AMX (amx.c). */
#include <immintrin.h>
#include <string.h>

#include "avx512.h"

/* ---- bf16: rounding, packing, epilogue ---- */

/* 16 floats rounded to bf16 as mha_bf16_round does: each in the low half of its 32-bit lane. */
static inline __attribute__((target(AVX512))) __m512i round_lanes(__m512 x)
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
/* Runs within one 16-wide half of a tile row, 16 lanes at a time (masked: AVX-512BW). */
__attribute__((target(AVX512))) void mha_round_into_tiles_avx512(const float *src, int c, int n, mha_bf16 *d)
{
    for (int t = 0; t < n;) {
        const int e = c + t, run = 16 - e % 16 < n - t ? 16 - e % 16 : n - t;
        const __mmask16 m = first16(run);
        const __m512i r = round_lanes(_mm512_maskz_loadu_ps(m, src + t));
        _mm256_mask_storeu_epi16(d + (size_t)(e / MHA_BT_K) * MHA_BT_ELEMS + e % MHA_BT_K, m, _mm512_cvtepi32_epi16(r));
        t += run;
    }
}

/* 16 lanes at a time (masked): the rounded bits back in the high halves. */
__attribute__((target(AVX512))) void mha_round_bf16_floats_avx512(float *x, int n)
{
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = first16(n - i);
        const __m512i r = round_lanes(_mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)));
    }
}

__attribute__((target(AVX512))) void mha_round_to_bf16_avx512(const float *restrict x, int n, mha_bf16 *restrict d)
{
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = first16(n - i);
        _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(round_lanes(_mm512_maskz_loadu_ps(m, x + i))));
    }
}

/* 16 int8 to 16 bf16: widened to int32, converted (exact), the float's high half. */
__attribute__((target(AVX512))) static inline __m256i bf16_of_i8(const int8_t *src)
{
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)src)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}

/* Two rows of 16 in one register, then one permutation: element 2i from row 0, 2i + 1 from row
 * 1; rows of bf16, or of int8 converted (i8, a constant); a line of next per pf bytes a pair. */
static inline __attribute__((always_inline, target(AVX512))) void
interleave_rows(const int i8, const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next, int pf)
{
    static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(order);
    const size_t row = ld * (i8 ? 1 : sizeof(mha_bf16));
    const char *r = src;
    for (int p = 0; p < pairs; p++, r += 2 * row, dst += 2 * MHA_BT_N) {
        if (next)
            _mm_prefetch(next + (size_t)pf * p, _MM_HINT_T0);
        const __m256i a = i8 ? bf16_of_i8((const int8_t *)r) : _mm256_loadu_si256((const void *)r);
        const __m256i b = i8 ? bf16_of_i8((const int8_t *)(r + row)) : _mm256_loadu_si256((const void *)(r + row));
        _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)));
    }
}

__attribute__((target(AVX512))) void mha_interleave_pairs_avx512(const void *src, size_t ld, int pairs,
                                                                 mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(0, src, ld, pairs, dst, next, 64);
}

__attribute__((target(AVX512))) void mha_interleave_pairs_i8_avx512(const void *src, size_t ld, int pairs,
                                                                    mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(1, src, ld, pairs, dst, next, 32);
}

/* B panels 16 k × 16 columns at a time: 16 source rows loaded (transposed: keys' rows of 16
 * features, turned by a register transpose), each k pair rounded and interleaved into the 32
 * bf16 (one 64-byte line) of its VNNI row. src's 16-column runs must not cross its panels
 * (its panel width a multiple of 16). */
__attribute__((target(AVX512))) void mha_pack_b16_avx512(const mha_kernel *k, mha_mat src, int transpose, int kk,
                                                         int n, mha_bf16 *dst, size_t ps)
{
    if (k->bw % 16 != 0) {
        mha_isa_ref.pack_b16(k, src, transpose, kk, n, dst, ps);
        return;
    }
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j0 = 0; j0 < np; j0 += 16)
        for (int p0 = 0; p0 < kp; p0 += 16) {
            __m512 v[16];
            /* rows of src: k (features of the keys' rows when transposed) or columns */
            const int rows = transpose ? n - j0 : kk - p0, cols = transpose ? kk - p0 : n - j0;
            const __mmask16 m = first16(cols);
            for (int r = 0; r < 16; r++)
                v[r] = r < rows && m ? _mm512_maskz_loadu_ps(m, transpose ? mha_mat_at(k, src, j0 + r, p0)
                                                                           : mha_mat_at(k, src, p0 + r, j0))
                                     : _mm512_setzero_ps();
            if (transpose)
                transpose16(v); /* v[r]: k p0 + r over the 16 columns */
            for (int r = 0; r < 16; r += 2) {
                const __m512i pair = _mm512_or_si512(round_lanes(v[r]), _mm512_slli_epi32(round_lanes(v[r + 1]), 16));
                _mm512_storeu_si512(dst + mha_bk_b_index(p0 + r, j0, ps), pair);
            }
        }
}

/* The lanes m of c = alpha·acc + beta·c (beta 0: c not read): a multiply and an add, no FMA, so
 * the bits are epilogue_block_ref's. */
static inline __attribute__((always_inline, target(AVX512))) void epilogue16(__m512 va, __m512 vb, float beta, __m512 acc,
                                                                            float *c, __mmask16 m)
{
    __m512 y = _mm512_mul_ps(va, acc);
    if (beta != 0.0f)
        y = _mm512_add_ps(y, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, c)));
    _mm512_mask_storeu_ps(c, m, y);
}

__attribute__((target(AVX512))) void mha_epilogue_block_avx512(float *c0, float *c1, ptrdiff_t ldc, const float *acc,
                                                              int rows, int cols, float alpha, float beta)
{
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int g = 0; g < cols; g += 16) {
        const __mmask16 m = first16(cols - g);
        for (int i = 0; i < rows; i++)
            epilogue16(va, vb, beta, _mm512_maskz_loadu_ps(m, acc + i * 32 + g), (g ? c1 : c0) + (ptrdiff_t)i * ldc, m);
    }
}

/* ---- bf16 products: rows in groups of NR (8, 4, 2, 1), 16·npan columns ---- */

#define FMA_INLINE __attribute__((target(AVX512), always_inline)) static inline

/* Few-row products read B from memory once: its pairs PF_AHEAD ahead (64 bytes per panel each)
 * prefetched by the first row group as it goes. */
enum { PF_AHEAD = 32 };
FMA_INLINE void prefetch_b(const mha_bf16 *bp, int npan, size_t ps)
{
    _mm_prefetch((const char *)(bp + 32 * PF_AHEAD), _MM_HINT_T0);
    if (npan == 2)
        _mm_prefetch((const char *)(bp + ps + 32 * PF_AHEAD), _MM_HINT_T0);
}

/* Where a group of rows' sums go: acc (rows 32 floats apart: mha_bk_block's contract), or with c0
 * set, alpha·sums + beta·c into C (mha_bkernel.block_c: the table's epilogue_block fused); with
 * bias set, + bias (its 32 columns of the block) in place of beta·c. */
typedef struct bk_out {
    float *acc;
    float *c0, *c1;
    ptrdiff_t ldc;
    int cols;
    float alpha, beta;
    const float *bias;
} bk_out;

/* Rows i0 .. i0 + NR's accumulators (c0: columns 0-15, c1: 16-31) out as o says (into C:
 * mha_epilogue_block_avx512's bits). */
FMA_INLINE void store_rows(const int NR, const bk_out *o, int i0, int npan, const __m512 *c0, const __m512 *c1)
{
    if (!o->c0) {
        for (int r = 0; r < NR; r++) {
            _mm512_storeu_ps(o->acc + (i0 + r) * 32, c0[r]);
            if (npan == 2)
                _mm512_storeu_ps(o->acc + (i0 + r) * 32 + 16, c1[r]);
        }
        return;
    }
    const __m512 va = _mm512_set1_ps(o->alpha), vb = _mm512_set1_ps(o->beta);
    if (o->bias) { /* + bias: the bits of C filled with it, then beta 1 (y + 1·bias is y + bias) */
        for (int g = 0; g < o->cols; g += 16) {
            const __mmask16 m = first16(o->cols - g);
            const __m512 bias = _mm512_maskz_loadu_ps(m, o->bias + g);
            for (int r = 0; r < NR; r++)
                _mm512_mask_storeu_ps((g ? o->c1 : o->c0) + (ptrdiff_t)(i0 + r) * o->ldc, m,
                                      _mm512_add_ps(_mm512_mul_ps(va, g ? c1[r] : c0[r]), bias));
        }
        return;
    }
    if (o->cols == 32) { /* whole rows of the block: plain loads and stores (a masked store costs
                          * more than a plain one on AMD's cores: RESULTS, H 54) */
        float *p0 = o->c0 + (ptrdiff_t)i0 * o->ldc, *p1 = o->c1 + (ptrdiff_t)i0 * o->ldc;
        const ptrdiff_t ldc = o->ldc;
        for (int r = 0; r < NR; r++) {
            __m512 y0 = _mm512_mul_ps(va, c0[r]), y1 = _mm512_mul_ps(va, c1[r]);
            if (o->beta != 0.0f) {
                y0 = _mm512_add_ps(y0, _mm512_mul_ps(vb, _mm512_loadu_ps(p0 + r * ldc)));
                y1 = _mm512_add_ps(y1, _mm512_mul_ps(vb, _mm512_loadu_ps(p1 + r * ldc)));
            }
            _mm512_storeu_ps(p0 + r * ldc, y0);
            _mm512_storeu_ps(p1 + r * ldc, y1);
        }
        return;
    }
    for (int g = 0; g < o->cols; g += 16) {
        const __mmask16 m = first16(o->cols - g);
        for (int r = 0; r < NR; r++)
            epilogue16(va, vb, o->beta, g ? c1[r] : c0[r], (g ? o->c1 : o->c0) + (ptrdiff_t)(i0 + r) * o->ldc, m);
    }
}

/* Row i's k pair q of tile t, as the 32-bit word vdpbf16ps broadcasts. */
BK_AVX512 uint32_t a_pair(const mha_bf16 *a, int kt, int i, int t, int q)
{
    uint32_t w;
    memcpy(&w, a + mha_bk_a_row(i, kt) + (size_t)t * MHA_BT_ELEMS + 2 * q, sizeof w);
    return w;
}

BK_AVX512 void rows_dpbf16(const int NR, int pf, int i0, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                           size_t ps, const bk_out *o)
{
    __m512 c0[8], c1[8];
    for (int r = 0; r < NR; r++)
        c0[r] = c1[r] = _mm512_setzero_ps();
    for (int t = 0; t < kt; t++)
        for (int q = 0; q < 16; q++) {
            const mha_bf16 *bp = b + (size_t)t * MHA_BT_ELEMS + 32 * q;
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
    store_rows(NR, o, i0, npan, c0, c1);
}

/* bf16 widened to float32 and two FMAs per pair, even element first: the product is exact, so
 * each FMA rounds once, as the model's sum does. A's rows are widened into a small float buffer
 * a chunk of k at a time (then each FMA broadcasts its A value from memory: a load, not a
 * shuffle on an FMA port); B's pairs are split into even and odd halves by a shift and a mask. */
enum { FMA_KCH = 8 }; /* k tiles per widened chunk: 8 rows × 256 floats, 8 KiB */

FMA_INLINE void rows_fma(const int NR, int pf, int i0, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                        size_t ps, const bk_out *o)
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
            const mha_bf16 *src = a + mha_bk_a_row(i, kt);
            for (int t = 0; t < tn; t++) {
                const __m512i v = _mm512_loadu_si512(src + (size_t)(t0 + t) * MHA_BT_ELEMS);
                const __m512i lo16 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
                const __m512i hi16 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
                _mm512_store_ps(&aw[r][t * 32], _mm512_castsi512_ps(_mm512_slli_epi32(lo16, 16)));
                _mm512_store_ps(&aw[r][t * 32 + 16], _mm512_castsi512_ps(_mm512_slli_epi32(hi16, 16)));
            }
        }
        for (int t = 0; t < tn; t++)
            for (int q = 0; q < 16; q++) {
                const mha_bf16 *bp = b + (size_t)(t0 + t) * MHA_BT_ELEMS + 32 * q;
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
    store_rows(NR, o, i0, npan, c0, c1);
}

/* Specialised per row count, so the accumulators live in registers; pf: the first group
 * prefetches B. */
#define ROW_GROUPS(fn, tgt)                                                                                \
    __attribute__((target(tgt))) static void fn##_groups(                                             \
        int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, const bk_out *o, int pf) \
    {                                                                                                     \
        int i = 0;                                                                                        \
        for (; i + 8 <= rows; i += 8)                                                                     \
            fn(8, pf && i == 0, i, npan, kt, a, b, ps, o);                                                \
        if (i + 4 <= rows)                                                                                \
            fn(4, pf && i == 0, i, npan, kt, a, b, ps, o), i += 4;                                        \
        if (i + 2 <= rows)                                                                                \
            fn(2, pf && i == 0, i, npan, kt, a, b, ps, o), i += 2;                                        \
        if (i < rows)                                                                                     \
            fn(1, pf && i == 0, i, npan, kt, a, b, ps, o);                                                \
    }
ROW_GROUPS(rows_dpbf16, BF16_TARGET)
ROW_GROUPS(rows_fma, AVX512)

static void rows_dpbf16_block(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc,
                              int pf)
{
    rows_dpbf16_groups(rows, npan, kt, a, b, ps, &(bk_out){.acc = acc}, pf);
}

/* The block and the epilogue in one pass: the scores' and values' products of the attention
 * chunks store each row's sums once, scaled, instead of through acc (a separate epilogue is
 * another pass over the block, acc written and read back, on products that are small). */
static void rows_dpbf16_block_c(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *c0,
                                float *c1, ptrdiff_t ldc, int cols, float alpha, float beta, const float *bias, int pf)
{
    rows_dpbf16_groups(
        rows, npan, kt, a, b, ps,
        &(bk_out){.c0 = c0, .c1 = c1, .ldc = ldc, .cols = cols, .alpha = alpha, .beta = beta, .bias = bias}, pf);
}

/* FMA under the instructions' DAZ and FTZ (for the FMAs only: the caller's MXCSR comes back). */
static void block_fma(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc, int pf)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    rows_fma_groups(rows, npan, kt, a, b, ps, &(bk_out){.acc = acc}, pf);
    _mm_setcsr(csr);
}

static int dpbf16_usable(void)
{
    return mha_cpu_has("avx512_bf16");
}

const mha_bkernel mha_bk_dpbf16 = {
    .name = "avx512-bf16",
    .order = MHA_BK_ODD_FIRST,
    .usable = dpbf16_usable,
    .lacks = "this CPU has no AVX512_BF16",
    .block = rows_dpbf16_block,
    .block_c = rows_dpbf16_block_c,
};
const mha_bkernel mha_bk_fma = {.name = "fma-bf16", .order = MHA_BK_EVEN_FIRST, .block = block_fma};

/* vdpbf16ps issues at half the FMA rate on Intel's cores (Xeons with and without AMX exposed):
 * there two FMAs on widened bf16 do a pair's products as fast, so the FMA kernel is the faster.
 * On AMD's Zen 5 it issues at the FMA rate, one instruction for a pair's two products: there
 * avx512-bf16 does fma-bf16's work in half the instructions. */
const mha_bkernel *mha_bf16_auto_avx512(void)
{
    if (mha_bk_amx.usable())
        return &mha_bk_amx;
    if (dpbf16_usable() && __builtin_cpu_is("amd"))
        return &mha_bk_dpbf16;
    return &mha_bk_fma;
}
