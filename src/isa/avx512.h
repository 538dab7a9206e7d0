/* avx512.h — what the avx512 table's files share (avx512.c lists them): the target strings,
 * the lane mask, the 16 × 16 transpose (the float32 and the bf16 packing both turn rows with it),
 * and the functions the table names or one file calls in another, by the file that holds them. */
#ifndef MHA_ISA_AVX512_H
#define MHA_ISA_AVX512_H

#include <immintrin.h>

#include "isa.h"

#define AVX512 "avx512f,avx512bw,avx512vl,avx512dq,fma"
/* vdpbf16ps's functions, and the always-inline helpers of its tiles */
#define BF16_TARGET AVX512 ",avx512bf16"
#define BK_AVX512 __attribute__((target(BF16_TARGET), always_inline)) static inline
/* MXCSR's denormals-are-zero and flush-to-zero bits: how the bf16 instructions treat denormals,
 * set around the FMAs that stand in for them. */
#define DAZ_FTZ 0x8040u

/* The mask of the first n lanes of 16 (n <= 0: none, n >= 16: all). */
static inline __mmask16 first16(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* r[i] (16 rows of 16) becomes its transpose: unpack 32- and 64-bit pairs, then 128-bit lanes. */
static inline __attribute__((target(AVX512))) void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* avx512_f32.c */
void mha_pack_rows_avx512(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst);
void mha_stream_rows_avx512(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                            mha_mat c);
int mha_stream_in_place_avx512(void);
void mha_rope_halves_avx512(float *a, float *b, const float *c, const float *s, float sign, int n);
void mha_rope_pairs_avx512(float *x, const float *c, const float *s, float sign, int n);

/* avx512_softmax.c */
float mha_softmax_row_avx512(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
void mha_softmax_rows_avx512(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
void mha_merge_row_avx512(float *restrict z, float a, const float *restrict zc, float b, int n);
void mha_scale_row_avx512(float *z, const float *x, float s, int n);
float mha_softmax_row_bf16_avx512(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
float mha_softmax_row16_avx512(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io,
                               mha_bf16 *d);
void mha_softmax_rows16_avx512(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st, mha_bf16 *d);
void mha_softcap_row_avx512(float *s, int n, float cap);

/* avx512_decode.c (fma_*16: the even-first bf16 decode, which avx512_decode_bf16.c's entries run) */
void mha_i8_scale_rows_avx512(const void *from, size_t ld_src, int rows, int n, const float *row_scales,
                              const float *row_zeros, float *restrict dst, size_t ld_dst);
void mha_decode_scores_avx512(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
void mha_decode_scores8_avx512(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
void mha_rows_scores_avx512(const mha_score_rows *s, const mha_key_rows *k);
void mha_rows_scores16_avx512(const mha_score_rows *s, const mha_key_rows *k, mha_bk_order order);
void mha_decode_values_avx512(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                              mha_prefetch_walk *w);
void mha_decode_values8_avx512(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                               mha_prefetch_walk *w);
void mha_fma_scores16_avx512(const float *restrict q, int nq, int dk, int runs, const void *const *kt,
                             const void *const *vr, const int *n, int ld, float scale, float *restrict sc,
                             size_t sc_ld);
void mha_fma_values16_avx512(const float *e, size_t e_ld, int nq, int runs, const void *const *v, const int *n, int i8,
                             int dk, float *p, size_t ps);

/* avx512_decode_bf16.c */
void mha_decode_scores16_avx512(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order);
void mha_decode_values16_avx512(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                                mha_kv_type type, const mha_prefetch *pf, mha_bk_order order);

/* avx512_bf16.c */
void mha_round_into_tiles_avx512(const float *src, int c, int n, mha_bf16 *d);
void mha_round_bf16_floats_avx512(float *x, int n);
void mha_round_to_bf16_avx512(const float *restrict x, int n, mha_bf16 *restrict d);
void mha_pack_b16_avx512(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);
void mha_interleave_pairs_avx512(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_interleave_pairs_i8_avx512(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_epilogue_block_avx512(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                               float beta);
extern const mha_bkernel mha_bk_dpbf16, mha_bk_fma; /* avx512-bf16 (vdpbf16ps), fma-bf16 */
const mha_bkernel *mha_bf16_auto_avx512(void);

#endif
