/* avx2_bf16.c — the avx2 table's bf16 rounding (as mha_bf16_round, 8 lanes), B packing and
 * pairing into VNNI panels, the product epilogue, and its bf16 products: FMA on widened bf16,
 * even element first (avx2-bf16). */
#include <immintrin.h>
#include <string.h>

#include "avx2.h"

/* ---- bf16: rounding, packing, epilogue ---- */

/* Runs within one 8-wide quarter of a tile row, 8 lanes at a time. */
__attribute__((target(AVX2))) void mha_round_into_tiles_avx2(const float *src, int c, int n, mha_bf16 *d)
{
    for (int t = 0; t < n;) {
        const int e = c + t, run = 8 - e % 8 < n - t ? 8 - e % 8 : n - t;
        mha_bf16 *o = d + (size_t)(e / MHA_BT_K) * MHA_BT_ELEMS + e % MHA_BT_K;
        const __m128i h = narrow8(round_lanes(load8_n(src + t, run)));
        if (run == 8)
            _mm_storeu_si128((__m128i *)(void *)o, h);
        else {
            mha_bf16 tmp[8];
            _mm_storeu_si128((__m128i *)(void *)tmp, h);
            memcpy(o, tmp, (size_t)run * sizeof *tmp);
        }
        t += run;
    }
}

/* 8 lanes at a time: the rounded bits back in the high halves. */
__attribute__((target(AVX2))) void mha_round_bf16_floats_avx2(float *x, int n)
{
    for (int i = 0; i < n; i += 8)
        store8_n(x + i, n - i, rounded8(load8_n(x + i, n - i)));
}

__attribute__((target(AVX2))) void mha_round_to_bf16_avx2(const float *restrict x, int n, mha_bf16 *restrict d)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(d + i), narrow8(round_lanes(_mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        d[i] = mha_bf16_round(x[i]);
}

/* 16 int8 to 16 bf16: widened to int32 8 at a time, converted (exact), the floats' high halves
 * packed back in order. */
__attribute__((target(AVX2))) static inline __m256i bf16_of_i8(const int8_t *src)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)src);
    const __m256i lo = _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))), 16);
    const __m256i hi =
        _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)))), 16);
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

/* Two rows of 16 (bf16, or int8 converted: i8 a constant) into pairs: unpacklo/hi interleave
 * within 128-bit lanes (elements 0-3 | 8-11 and 4-7 | 12-15), the lane permutes put 0-7 and
 * 8-15 in order; a line of next per pf bytes a pair. */
static inline __attribute__((always_inline, target(AVX2))) void
interleave_rows(const int i8, const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next, int pf)
{
    const size_t row = ld * (i8 ? 1 : sizeof(mha_bf16));
    const char *r = src;
    for (int p = 0; p < pairs; p++, r += 2 * row, dst += 2 * MHA_BT_N) {
        if (next)
            _mm_prefetch(next + (size_t)pf * p, _MM_HINT_T0);
        const __m256i a = i8 ? bf16_of_i8((const int8_t *)r) : _mm256_loadu_si256((const void *)r);
        const __m256i b = i8 ? bf16_of_i8((const int8_t *)(r + row)) : _mm256_loadu_si256((const void *)(r + row));
        const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
        _mm256_storeu_si256((void *)dst, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((void *)(dst + MHA_BT_N), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

__attribute__((target(AVX2))) void mha_interleave_pairs_avx2(const void *src, size_t ld, int pairs,
                                                             mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(0, src, ld, pairs, dst, next, 64);
}

__attribute__((target(AVX2))) void mha_interleave_pairs_i8_avx2(const void *src, size_t ld, int pairs,
                                                                mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(1, src, ld, pairs, dst, next, 32);
}

/* B panels 8 k × 8 columns at a time: 8 source rows loaded (transposed: keys' rows of 8
 * features, turned by a register transpose), each k pair rounded and interleaved into 8 words
 * (half a 64-byte VNNI row). src's 8-column runs must not cross its panels. */
__attribute__((target(AVX2))) void mha_pack_b16_avx2(const mha_kernel *k, mha_mat src, int transpose, int kk, int n,
                                                    mha_bf16 *dst, size_t ps)
{
    if (k->bw % 8 != 0) {
        mha_isa_ref.pack_b16(k, src, transpose, kk, n, dst, ps);
        return;
    }
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j0 = 0; j0 < np; j0 += 8)
        for (int p0 = 0; p0 < kp; p0 += 8) {
            __m256 v[8];
            /* rows of src: k (features of the keys' rows when transposed) or columns */
            const int rows = transpose ? n - j0 : kk - p0, cols = transpose ? kk - p0 : n - j0;
            for (int r = 0; r < 8; r++)
                v[r] = r < rows && cols > 0 ? load8_n(transpose ? mha_mat_at(k, src, j0 + r, p0)
                                                                : mha_mat_at(k, src, p0 + r, j0), cols)
                                            : _mm256_setzero_ps();
            if (transpose)
                transpose8(v); /* v[r]: k p0 + r over the 8 columns */
            for (int r = 0; r < 8; r += 2) {
                const __m256i pair = _mm256_or_si256(round_lanes(v[r]), _mm256_slli_epi32(round_lanes(v[r + 1]), 16));
                _mm256_storeu_si256((__m256i *)(void *)(dst + mha_bk_b_index(p0 + r, j0, ps)), pair);
            }
        }
}

/* 8 lanes at a time: a multiply and an add, no FMA, so the bits are epilogue_block_ref's. */
__attribute__((target(AVX2))) void mha_epilogue_block_avx2(float *c0, float *c1, ptrdiff_t ldc, const float *acc,
                                                          int rows, int cols, float alpha, float beta)
{
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int g = 0; g < cols; g += 8) {
        float *cg = (g < 16 ? c0 + g : c1 + (g - 16));
        for (int i = 0; i < rows; i++) {
            float *c = cg + (ptrdiff_t)i * ldc;
            __m256 y = _mm256_mul_ps(va, load8_n(acc + i * 32 + g, cols - g));
            if (beta != 0.0f)
                y = _mm256_add_ps(y, _mm256_mul_ps(vb, load8_n(c, cols - g)));
            store8_n(c, cols - g, y);
        }
    }
}

/* ---- bf16 products: FMA on widened bf16, even element first (the model's sums) ---- */

/* A block is summed a chunk of KCH k tiles at a time: the chunk's B panels and A rows are
 * widened to float32 once (B's pairs split into their two k rows by a shift and a mask), then
 * every row group runs a plain float32 FMA kernel on them, 6 rows × 16 columns (haswell's
 * tile: 12 accumulators), the accumulators kept in acc between chunks. Each element's sum is
 * one FMA chain in increasing k, even element of a pair first: the model's, bit for bit (the
 * products are exact). Widening once per block instead of once per row group takes the
 * shifts off the FMA ports: B is used by every row of the block. */
enum { KCH = 4 };       /* k tiles per chunk: 128 k; widened B 2 × 8 KiB, A 32 × 512 bytes */

static inline __attribute__((always_inline, target(AVX2))) void
rows_tile(const int R, int r0, int kn, const float *restrict bw, const float (*restrict aw)[KCH * 32], float *acc,
          int col0, int first, const mha_bf16 *next)
{
    __m256 c0[6], c1[6];
    for (int r = 0; r < R; r++) {
        float *y = acc + (r0 + r) * 32 + col0;
        c0[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
        c1[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8);
    }
    for (int p = 0; p < kn; p++) {
        if (next && p % 2 == 0) /* one line of the next chunk's panel per pair row of this one */
            _mm_prefetch((const char *)(next + (size_t)p * 16), _MM_HINT_T0);
        const __m256 b0 = _mm256_load_ps(bw + (size_t)p * 16), b1 = _mm256_load_ps(bw + (size_t)p * 16 + 8);
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_broadcast_ss(&aw[r0 + r][p]);
            c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float *y = acc + (r0 + r) * 32 + col0;
        _mm256_storeu_ps(y, c0[r]);
        _mm256_storeu_ps(y + 8, c1[r]);
    }
}

/* Under the instructions' DAZ and FTZ, as fma-bf16 (the caller's MXCSR comes back). pf: B
 * comes from memory (a few-row product reads it once): the first row group of each panel
 * prefetches the panel's next chunk (or the next block's first) while it computes, so the
 * widening finds it in cache. */
__attribute__((target(AVX2))) static void block_avx2(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                                                    size_t ps, float *acc, int pf)
{
    _Alignas(32) float bw[2][KCH * 32 * 16]; /* widened B: [panel][k][column] */
    _Alignas(32) float aw[32][KCH * 32];     /* widened A: [row][k] */
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    for (int t0 = 0; t0 < kt; t0 += KCH) {
        const int tn = kt - t0 < KCH ? kt - t0 : KCH, kn = tn * 32;
        for (int j = 0; j < npan; j++)
            for (int q = 0; q < tn * 16; q++) { /* pair row q of the chunk: k 2q and 2q + 1 */
                const mha_bf16 *bp = b + (size_t)j * ps + (size_t)t0 * MHA_BT_ELEMS + (size_t)q * 32;
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)bp);
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(bp + 16));
                float *even = bw[j] + (size_t)(2 * q) * 16, *odd = even + 16;
                _mm256_store_ps(even, _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)));
                _mm256_store_ps(even + 8, _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)));
                _mm256_store_ps(odd, _mm256_castsi256_ps(_mm256_and_si256(v0, hi)));
                _mm256_store_ps(odd + 8, _mm256_castsi256_ps(_mm256_and_si256(v1, hi)));
            }
        for (int r = 0; r < rows; r++) {
            const mha_bf16 *src = a + mha_bk_a_row(r, kt) + (size_t)t0 * MHA_BT_ELEMS;
            for (int t = 0; t < tn; t++)
                for (int h = 0; h < 4; h++) {
                    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)t * MHA_BT_ELEMS + 8 * h));
                    _mm256_store_ps(&aw[r][t * 32 + 8 * h],
                                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)));
                }
        }
        for (int j = 0; j < npan; j++) {
            const mha_bf16 *next = !pf ? NULL
                                   : t0 + KCH < kt ? b + (size_t)j * ps + (size_t)(t0 + KCH) * MHA_BT_ELEMS
                                                   : b + (size_t)(npan + j) * ps;
            int r0 = 0;
            for (; r0 + 6 <= rows; r0 += 6)
                rows_tile(6, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL);
            if (rows - r0 >= 4)
                rows_tile(4, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL), r0 += 4;
            if (rows - r0 >= 2)
                rows_tile(2, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL), r0 += 2;
            if (rows - r0 >= 1)
                rows_tile(1, r0, kn, bw[j], aw, acc, 16 * j, t0 == 0, r0 == 0 ? next : NULL);
        }
    }
    _mm_setcsr(csr);
}

const mha_bkernel mha_bk_avx2 = {.name = "avx2-bf16", .order = MHA_BK_EVEN_FIRST, .block = block_avx2};

const mha_bkernel *mha_bf16_auto_avx2(void)
{
    return &mha_bk_avx2;
}
