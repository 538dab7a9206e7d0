/* avx2.h — what the avx2 table's files share (avx2.c lists them): the target string, the
 * masked loads and stores of a short vector, the 8 × 8 transpose (the float32 and the bf16
 * packing both turn rows with it), the bf16 rounding of 8 lanes (the rounded softmax rows and
 * the bf16 rounding entries both store it), and the functions the table names, by the file
 * that holds them. */
#ifndef MHA_ISA_AVX2_H
#define MHA_ISA_AVX2_H

#include <immintrin.h>

#include "isa.h"

#define AVX2 "avx2,fma,f16c"

/* MXCSR bits of the bf16 instructions' behaviour: denormal inputs read as zero (DAZ),
 * denormal results flushed to zero (FTZ). */
#define DAZ_FTZ 0x8040u

/* All-ones in the first n lanes of 8 (n <= 0: none, n >= 8: all): AVX2's masked loads and
 * stores read and write only those. */
static inline __attribute__((target(AVX2))) __m256i first8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n elements (n >= 8: all 8) of a row at x, lanes from n on zero. Masked loads and stores only
 * where a vector is short: AMD's vmaskmovps store is microcoded (Zen 1: one per ~12 cycles,
 * where a plain store takes one), and a full mask costs it as much as a short one. */
static inline __attribute__((always_inline, target(AVX2))) __m256 load8_n(const float *x, int n)
{
    return n >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, first8(n));
}

/* The first n lanes of v (n >= 8: all 8) to x, nothing past them. */
static inline __attribute__((always_inline, target(AVX2))) void store8_n(float *x, int n, __m256 v)
{
    if (n >= 8)
        _mm256_storeu_ps(x, v);
    else
        _mm256_maskstore_ps(x, first8(n), v);
}

/* r[i] (8 rows of 8) becomes its transpose. */
static inline __attribute__((target(AVX2))) void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* 8 floats rounded to bf16 as mha_bf16_round does: each in the low half of its 32-bit lane. */
static inline __attribute__((always_inline, target(AVX2))) __m256i round_lanes(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i top = _mm256_srli_epi32(u, 16);
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(top, _mm256_set1_epi32(1))), 16);
    const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    /* NaN: |u| > 0x7f800000 as signed integers (both are below 2^31) */
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i out = _mm256_blendv_epi8(r, _mm256_and_si256(top, _mm256_set1_epi32(0x8000)), tiny);
    return _mm256_blendv_epi8(out, _mm256_or_si256(top, _mm256_set1_epi32(0x0040)), nan);
}

/* The floats of 8 lanes' bf16 roundings (round_bf16_floats' bits). */
static inline __attribute__((always_inline, target(AVX2))) __m256 rounded8(__m256 x)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(round_lanes(x), 16));
}

/* rounded8's bits for lanes in [0, 1] (exp'd probabilities: no sign, NaN or carry into the
 * exponent's top to test), in half its operations: nearest even on the bits, + 0 below the
 * normal range. */
static inline __attribute__((always_inline, target(AVX2))) __m256 rounded8_unit(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd),
                                       _mm256_set1_epi32((int)0xffff0000u));
    const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), u);
    return _mm256_castsi256_ps(_mm256_andnot_si256(tiny, r));
}

/* 8 rounded lanes (low halves) as 8 contiguous bf16. */
static inline __attribute__((target(AVX2))) __m128i narrow8(__m256i r)
{
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* avx2_f32.c */
void mha_pack_rows_avx2(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst);
void mha_stream_rows_avx2(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                          mha_mat c);
void mha_stream_rows16_avx2(const mha_kernel *k, const mha_product16 *p);
int mha_stream_in_place_avx2(void);
void mha_rope_halves_avx2(float *a, float *b, const float *c, const float *s, float sign, int n);
void mha_rope_pairs_avx2(float *x, const float *c, const float *s, float sign, int n);

/* avx2_softmax.c */
float mha_softmax_row_avx2(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
void mha_softmax_rows_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
void mha_merge_row_avx2(float *restrict z, float a, const float *restrict zc, float b, int n);
void mha_scale_row_avx2(float *z, const float *x, float s, int n);
float mha_softmax_row_bf16_avx2(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
float mha_softmax_row_rounded_avx2(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
void mha_softmax_rows_rounded_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
float mha_softmax_row16_avx2(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io,
                             mha_bf16 *d);
void mha_softmax_rows16_avx2(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st, mha_bf16 *d);
void mha_softcap_row_avx2(float *s, int n, float cap);

/* avx2_decode.c (and isa.h's mha_rows_scores_avx2, mha_rows_scores16_avx2) */
void mha_i8_scale_rows_avx2(const void *from, size_t ld_src, int rows, int n, const float *row_scales,
                            const float *row_zeros, float *restrict dst, size_t ld_dst);
void mha_decode_scores_avx2(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
void mha_decode_scores8_avx2(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
void mha_decode_scores16_avx2(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order);
void mha_decode_values_avx2(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                            mha_prefetch_walk *w);
void mha_decode_values8_avx2(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                             mha_prefetch_walk *w);
void mha_decode_values16_avx2(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                              mha_kv_type type, const mha_prefetch *pf, mha_bk_order order);

/* avx2_bf16.c */
void mha_round_into_tiles_avx2(const float *src, int c, int n, mha_bf16 *d);
void mha_round_bf16_floats_avx2(float *x, int n);
void mha_round_to_bf16_avx2(const float *restrict x, int n, mha_bf16 *restrict d);
void mha_pack_b16_avx2(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);
void mha_interleave_pairs_avx2(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_interleave_pairs_i8_avx2(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_epilogue_block_avx2(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                             float beta);
extern const mha_bkernel mha_bk_avx2; /* avx2-bf16 */
const mha_bkernel *mha_bf16_auto_avx2(void);

#endif
