/* neon.h — what the neon table's files share (neon.c lists them): the loads and stores of a
 * short vector, the 4 × 4 transpose, an FMA by a lane chosen at compile time, the widening of
 * int8 elements, and the functions the table names, by the file that holds them. Advanced SIMD
 * is part of every ARMv8-A core, so nothing here needs a target attribute: 32 registers of
 * 4 floats. */
#ifndef MHA_ISA_NEON_H
#define MHA_ISA_NEON_H

#include <arm_neon.h>
#include <string.h>

#include "isa.h"
#include "ref.h"

/* n elements (n >= 4: all 4) of a row at x, lanes from n on zero; a short one through a zeroed
 * copy (no read past x + n). */
static inline __attribute__((always_inline)) float32x4_t load4_n(const float *x, int n)
{
    if (n >= 4)
        return vld1q_f32(x);
    float buf[4] = {0};
    memcpy(buf, x, (size_t)(n > 0 ? n : 0) * sizeof *buf);
    return vld1q_f32(buf);
}

/* The first n lanes of v (n >= 4: all 4) to x, nothing past them. */
static inline __attribute__((always_inline)) void store4_n(float *x, int n, float32x4_t v)
{
    if (n >= 4)
        vst1q_f32(x, v);
    else if (n == 3)
        vst1_f32(x, vget_low_f32(v)), vst1q_lane_f32(x + 2, v, 2);
    else if (n == 2)
        vst1_f32(x, vget_low_f32(v));
    else if (n == 1)
        vst1q_lane_f32(x, v, 0);
}

/* r[i] (4 rows of 4) becomes its transpose. */
static inline __attribute__((always_inline)) void transpose4(float32x4_t r[4])
{
    const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* acc + b · v[l], one rounding: FMLA by element, l a constant where it is inlined. Written in
 * asm because GCC, given vfmaq_laneq_f32 for several accumulators on the same v[l] (a tile's
 * queries' feature against each of its vectors), shares one DUP of the lane among them and
 * issues plain FMLAs: an instruction and a register more per lane and FMA row, which in a tile
 * of 16 accumulators spills them. The asm is not volatile: the compiler still schedules and
 * drops it as it would the intrinsic. */
static inline __attribute__((always_inline)) float32x4_t fma_lane(float32x4_t acc, float32x4_t b, float32x4_t v,
                                                                  const int l)
{
    switch (l) {
    case 0:
        __asm__("fmla %0.4s, %1.4s, %2.s[0]" : "+w"(acc) : "w"(b), "w"(v));
        break;
    case 1:
        __asm__("fmla %0.4s, %1.4s, %2.s[1]" : "+w"(acc) : "w"(b), "w"(v));
        break;
    case 2:
        __asm__("fmla %0.4s, %1.4s, %2.s[2]" : "+w"(acc) : "w"(b), "w"(v));
        break;
    default:
        __asm__("fmla %0.4s, %1.4s, %2.s[3]" : "+w"(acc) : "w"(b), "w"(v));
        break;
    }
    return acc;
}

/* 4 int8 elements at x (n >= 4: all 4; lanes from n on zero) as float32 lanes, exact. */
static inline __attribute__((always_inline)) float32x4_t i8_load4(const int8_t *x, int n)
{
    int32_t word = 0;
    memcpy(&word, x, (size_t)(n < 4 ? (n > 0 ? n : 0) : 4));
    const int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(word)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}

/* 4 bf16 elements at x (n >= 4: all 4; lanes from n on zero) as float32 lanes, exact. */
static inline __attribute__((always_inline)) float32x4_t bf16_load4(const uint16_t *x, int n)
{
    uint64_t word = 0;
    memcpy(&word, x, (size_t)(n < 4 ? (n > 0 ? n : 0) : 4) * sizeof *x);
    return vreinterpretq_f32_u32(vshll_n_u16(vcreate_u16(word), 16));
}

/* 4 floats to bf16 as mha_bf16_round: nearest even, a denormal a zero of its sign, NaN quiet. */
static inline __attribute__((always_inline)) uint16x4_t bf16_round4(float32x4_t x)
{
    const uint32x4_t u = vreinterpretq_u32_f32(x), hi = vshrq_n_u32(u, 16);
    const uint32x4_t even = vaddq_u32(vandq_u32(hi, vdupq_n_u32(1)), vdupq_n_u32(0x7fff));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(u, even), 16);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    r = vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), r);
    const uint32x4_t denormal = vceqq_u32(vandq_u32(u, vdupq_n_u32(0x7f800000u)), vdupq_n_u32(0));
    r = vbslq_u32(denormal, vandq_u32(hi, vdupq_n_u32(0x8000)), r);
    return vmovn_u32(r);
}

/* FPCR, read and written in asm (GCC's builtins for it are GCC's alone); the memory clobber keeps
 * the loads and stores of what runs under it on its side. */
static inline __attribute__((always_inline)) uint64_t fpcr_get(void)
{
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}
static inline __attribute__((always_inline)) void fpcr_set(uint64_t v)
{
    __asm__ volatile("msr fpcr, %0" ::"r"(v) : "memory");
}

/* FPCR.FZ set (denormal inputs and results flushed, as the bf16 kernels sum) until fz_end(the
 * value fz_begin returned) puts the caller's back. */
static inline __attribute__((always_inline)) uint64_t fz_begin(void)
{
    const uint64_t fpcr = fpcr_get();
    fpcr_set(fpcr | 1u << 24);
    return fpcr;
}
static inline __attribute__((always_inline)) void fz_end(uint64_t fpcr)
{
    fpcr_set(fpcr);
}

/* neon_f32.c */
void mha_pack_rows_neon(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst);
void mha_stream_rows_neon(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                          mha_mat c);
void mha_rope_halves_neon(float *a, float *b, const float *c, const float *s, float sign, int n);
void mha_rope_pairs_neon(float *x, const float *c, const float *s, float sign, int n);

/* neon_softmax.c */
float mha_softmax_row_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
void mha_softmax_rows_neon(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
void mha_merge_row_neon(float *restrict z, float a, const float *restrict zc, float b, int n);
void mha_scale_row_neon(float *z, const float *x, float s, int n);
float mha_softmax_row_bf16_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
float mha_softmax_row_rounded_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
void mha_softmax_rows_rounded_neon(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
float mha_softmax_row16_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io,
                             mha_bf16 *d);
void mha_softmax_rows16_neon(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st, mha_bf16 *d);
void mha_softcap_row_neon(float *s, int n, float cap);

/* neon_bf16.c */
extern const mha_bkernel mha_bk_neon, mha_bk_bfdot;
void mha_round_to_bf16_neon(const float *restrict x, int n, mha_bf16 *restrict d);
void mha_round_bf16_floats_neon(float *x, int n);
void mha_round_into_tiles_neon(const float *src, int c, int n, mha_bf16 *d);
void mha_pack_b16_neon(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);
void mha_interleave_pairs_neon(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_interleave_pairs_i8_neon(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next);
void mha_epilogue_block_neon(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                             float beta);

/* neon_decode.c */
void mha_i8_scale_rows_neon(const void *from, size_t ld_src, int rows, int n, const float *row_scales,
                            const float *row_zeros, float *restrict dst, size_t ld_dst);
void mha_decode_scores_neon(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
void mha_decode_scores8_neon(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
void mha_decode_values_neon(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                            mha_prefetch_walk *w);
void mha_decode_values8_neon(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                             mha_prefetch_walk *w);
void mha_rows_scores_neon(const mha_score_rows *s, const mha_key_rows *k);
void mha_rows_scores16_neon(const mha_score_rows *s, const mha_key_rows *k, mha_bk_order order);
void mha_decode_scores16_neon(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order);
void mha_decode_values16_neon(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                              mha_kv_type type, const mha_prefetch *pf, mha_bk_order order);

#endif
