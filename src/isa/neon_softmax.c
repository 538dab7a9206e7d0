/* neon_softmax.c — the neon table's softmax rows (float32, the bf16 engines', rounded to bf16
 * as floats or straight into bf16 A tiles), the merge rule's row loops and the logit softcap:
 * 4 lanes, eight exps step by step together, the exp of exp_poly.h as the avx2 table computes
 * it lane by lane (the same FMAs, so the same bits). */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "exp_poly.h"
#include "loops.h"
#include "neon.h"

/* ---- softmax: 4 lanes; a tail runs through a padded copy so it gets the same arithmetic ---- */

/* Each step over the U vectors of x. */
#define EACH _Pragma("GCC unroll 8") for (int q = 0; q < U; q++)

/* Vectors a step of the softmax's exp pass: eight chains of dependent FMAs interleaved, as
 * avx2's four of 8 lanes (32 entries), keep two FMA pipes of 4-cycle latency busy; each exp
 * holds x, n, y and its range mask, so eight of them and the constants fit 32 registers. */
enum { STEP_VECS = 4, STEP = 4 * STEP_VECS };

/* mha_exp_poly in 4 lanes, on U <= STEP_VECS vectors in place, each step over all of them
 * before the next (one chain of dependent FMAs per exp: interleaved, they hide each other's
 * latency). The operations are avx2's exp8_n's, lane for lane: vrndnq is its round to nearest,
 * vfmsq its fnmadd, vfmaq its fmadd. clamp 0: the softmax's x = s − max <= 0 (or a lane the
 * caller zeroes): no clamp to [MHA_EXP_LO, MHA_EXP_HI], the same bits. Below MHA_EXP_LO, or
 * NaN, the range mask zeroes whatever the lane computed. bf16: the bf16 engines' polynomial
 * (MHA_EXP_B*), x reduced by MHA_LN2 in one FMA. */
static inline __attribute__((always_inline)) void exp4_n(float32x4_t *x, const int U, const int clamp, const int bf16)
{
    uint32x4_t in_range[STEP_VECS];
    float32x4_t n[STEP_VECS], y[STEP_VECS], t[STEP_VECS];
    EACH in_range[q] = vcgeq_f32(x[q], vdupq_n_f32(MHA_EXP_LO));
    if (clamp)
        EACH x[q] = vminq_f32(vmaxq_f32(x[q], vdupq_n_f32(MHA_EXP_LO)), vdupq_n_f32(MHA_EXP_HI));
    EACH n[q] = vrndnq_f32(vmulq_f32(x[q], vdupq_n_f32(MHA_LOG2E)));
    if (bf16) {
        EACH x[q] = vfmsq_f32(x[q], n[q], vdupq_n_f32(MHA_LN2));
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_B3), vdupq_n_f32(MHA_EXP_B4), x[q]);
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_B2), y[q], x[q]);
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_B1), y[q], x[q]);
        EACH y[q] = vfmaq_f32(vdupq_n_f32(1.0f), y[q], x[q]);
    } else {
        EACH x[q] = vfmsq_f32(x[q], n[q], vdupq_n_f32(MHA_LN2_HI));
        EACH x[q] = vfmsq_f32(x[q], n[q], vdupq_n_f32(MHA_LN2_LO));
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_P1), vdupq_n_f32(MHA_EXP_P0), x[q]);
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_P2), y[q], x[q]);
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_P3), y[q], x[q]);
        EACH y[q] = vfmaq_f32(vdupq_n_f32(MHA_EXP_P4), y[q], x[q]);
        EACH t[q] = vaddq_f32(x[q], vdupq_n_f32(1.0f));
        EACH y[q] = vfmaq_f32(t[q], y[q], vmulq_f32(x[q], x[q]));
    }
    EACH {
        const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n[q]), vdupq_n_s32(127)), 23);
        x[q] = vreinterpretq_f32_u32(
            vandq_u32(vreinterpretq_u32_f32(vmulq_f32(y[q], vreinterpretq_f32_s32(e))), in_range[q]));
    }
}

/* All-ones lanes where the mask's 4 bytes at m are not 0. */
static inline __attribute__((always_inline)) uint32x4_t visible4(const uint8_t *m)
{
    uint32_t word;
    memcpy(&word, m, sizeof word);
    const uint16x8_t h = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(word)));
    return vmvnq_u32(vceqzq_u32(vmovl_u16(vget_low_u16(h))));
}

/* Scores j..j+3 (0 past visible), and in *vis all-ones lanes where each is visible; a short
 * vector through a padded copy. */
static inline __attribute__((always_inline)) float32x4_t load4(const float *s, const uint8_t *mask, int j, int visible,
                                                               uint32x4_t *vis)
{
    const int left = visible - j < 4 ? visible - j : 4;
    if (left == 4) {
        *vis = mask ? visible4(mask + j) : vdupq_n_u32(~0u);
        return vld1q_f32(s + j);
    }
    uint32_t on[4] = {0};
    for (int i = 0; i < left; i++)
        on[i] = (mask == NULL || mask[j + i] != 0) ? ~0u : 0;
    *vis = vld1q_u32(on);
    return load4_n(s + j, left);
}

/* Where the exp pass stores the entries: s as they are, s as the floats of their bf16
 * roundings, or those bf16 in their places in a row of A tiles (then s is not written). */
enum { EXP_FLOATS, EXP_ROUNDED, EXP_TILES };

/* Entries j .. j + 3 (a vector within one k tile's row of 32) stored as `out` says; n of them. */
static inline __attribute__((always_inline)) void store_exps(float *s, mha_bf16 *d, int j, int n, float32x4_t e,
                                                             const int out)
{
    if (out == EXP_FLOATS) {
        store4_n(s + j, n, e);
        return;
    }
    const uint16x4_t h = bf16_round4(e);
    if (out == EXP_ROUNDED) {
        store4_n(s + j, n, vreinterpretq_f32_u32(vshll_n_u16(h, 16)));
        return;
    }
    mha_bf16 *o = d + (size_t)(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K;
    if (n >= 4)
        vst1_u16(o, h);
    else {
        mha_bf16 tmp[4];
        vst1_u16(tmp, h);
        memcpy(o, tmp, (size_t)n * sizeof *tmp);
    }
}

/* Softmax pass 2's steps of STEP entries up to end (a multiple of STEP, all visible), the exps
 * step by step together (exp4_n): exp(s[j] − max), 0 where masked, stored as `out` says.
 * Returns their sum, in lanes, added in order of j. Inlined with mask NULL or not: the
 * unmasked loop tests nothing. */
static inline __attribute__((always_inline)) float32x4_t exp_steps(float *s, const uint8_t *mask, int end,
                                                                   float32x4_t vmx, mha_bf16 *d, const int out,
                                                                   const int bf16)
{
    float32x4_t vsum = vdupq_n_f32(0.0f);
    for (int j0 = 0; j0 < end; j0 += STEP) {
        float32x4_t e[STEP_VECS];
        for (int q = 0; q < STEP_VECS; q++)
            e[q] = vsubq_f32(vld1q_f32(s + j0 + 4 * q), vmx);
        exp4_n(e, STEP_VECS, 0, bf16);
        for (int q = 0; q < STEP_VECS; q++) {
            if (mask)
                e[q] = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(e[q]), visible4(mask + j0 + 4 * q)));
            store_exps(s, d, j0 + 4 * q, 4, e[q], out);
            vsum = vaddq_f32(vsum, e[q]);
        }
    }
    return vsum;
}

/* Pass 1: the larger of max_in and the visible entries' max. vmaxnmq (IEEE maxNum) returns the
 * number where one operand is a quiet NaN, so a NaN entry is skipped, as ref skips it. */
static inline __attribute__((always_inline)) float row_max(const float *restrict s, int visible,
                                                           const uint8_t *restrict mask, float max_in)
{
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t vmax = vdupq_n_f32(max_in);
    uint32x4_t vis;
    int j1 = 0;
    if (!mask) { /* whole vectors, 16 lanes a step into four accumulators: one max chain would
                  * wait on its own latency */
        float32x4_t m1 = vmax, m2 = vmax, m3 = vmax;
        for (; j1 + 16 <= visible; j1 += 16) {
            vmax = vmaxnmq_f32(vld1q_f32(s + j1), vmax);
            m1 = vmaxnmq_f32(vld1q_f32(s + j1 + 4), m1);
            m2 = vmaxnmq_f32(vld1q_f32(s + j1 + 8), m2);
            m3 = vmaxnmq_f32(vld1q_f32(s + j1 + 12), m3);
        }
        vmax = vmaxnmq_f32(vmaxnmq_f32(vmax, m1), vmaxnmq_f32(m2, m3));
        for (; j1 + 4 <= visible; j1 += 4)
            vmax = vmaxnmq_f32(vld1q_f32(s + j1), vmax);
    }
    for (int j = j1; j < visible; j += 4) {
        const float32x4_t x = load4(s, mask, j, visible, &vis);
        vmax = vmaxnmq_f32(vbslq_f32(vis, x, ninf), vmax);
    }
    return vmaxnmvq_f32(vmax);
}

/* Pass 2: exp(s − mx) where visible, 0 elsewhere, and the sum in order of j: STEP entries a
 * step (exp_steps), then 4. The sum is of the entries unrounded whatever `out` stores
 * (EXP_ROUNDED: softmax_row_rounded; EXP_TILES: softmax_row16, zeros in d past visible up to
 * n rounded to the k tile); bf16: the bf16 engines' exp (every `out` but EXP_FLOATS;
 * softmax_row_bf16 for that one). mx −∞: nothing visible, zeros, sum 0. The sum's lanes end as
 * avx2's 8 end, in pairs: (l0 + l2) + (l1 + l3). */
static inline __attribute__((always_inline)) float exp_pass(float *restrict s, int n, int visible,
                                                            const uint8_t *restrict mask, float mx, mha_bf16 *d,
                                                            const int out, const int bf16)
{
    const int kp = (int)mha_bk_kp(n);
    if (mx == -INFINITY) {
        if (out == EXP_TILES)
            for (int t = 0; t < kp; t += MHA_BT_K)
                memset(d + (size_t)(t / MHA_BT_K) * MHA_BT_ELEMS, 0, MHA_BT_K * sizeof *d);
        else
            memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    const float32x4_t vmx = vdupq_n_f32(mx);
    const int j0 = visible / STEP * STEP;
    uint32x4_t vis;
    float32x4_t vsum = mask ? exp_steps(s, mask, j0, vmx, d, out, bf16) : exp_steps(s, NULL, j0, vmx, d, out, bf16);
    for (int j = j0; j < visible; j += 4) {
        const float32x4_t x = load4(s, mask, j, visible, &vis);
        float32x4_t e = vsubq_f32(x, vmx);
        exp4_n(&e, 1, 0, bf16);
        e = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(e), vis));
        store_exps(s, d, j, visible - j, e, out);
        vsum = vaddq_f32(vsum, e);
    }
    if (out == EXP_TILES)
        for (int j = visible; j < kp; j++)
            d[(size_t)(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K] = 0;
    else
        for (int j = visible; j < n; j++)
            s[j] = 0.0f;
    return (vgetq_lane_f32(vsum, 0) + vgetq_lane_f32(vsum, 2)) + (vgetq_lane_f32(vsum, 1) + vgetq_lane_f32(vsum, 3));
}

static inline __attribute__((always_inline)) float softmax_row_as(float *restrict s, int n, int visible,
                                                                  const uint8_t *restrict mask, float *max_io,
                                                                  mha_bf16 *d, const int out, const int bf16)
{
    *max_io = row_max(s, visible, mask, *max_io);
    return exp_pass(s, n, visible, mask, *max_io, d, out, bf16);
}

float mha_softmax_row_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_FLOATS, 0);
}

float mha_softmax_row_bf16_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_FLOATS, 1);
}

float mha_softmax_row_rounded_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, NULL, EXP_ROUNDED, 1);
}

float mha_softmax_row16_neon(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io,
                             mha_bf16 *d)
{
    return softmax_row_as(s, n, visible, mask, max_io, d, EXP_TILES, 1);
}

/* mha_rows_walk's bodies: a whole row's max, and its exps as each table entry stores them
 * (floats; floats of their bf16 roundings; bf16 into the A panels at d). */
static inline __attribute__((always_inline)) float whole_row_max(const float *s, int n)
{
    return row_max(s, n, NULL, -INFINITY);
}
static inline __attribute__((always_inline)) float exps_floats(float *s, int n, float mx, mha_bf16 *d)
{
    return exp_pass(s, n, n, NULL, mx, d, EXP_FLOATS, 0);
}
static inline __attribute__((always_inline)) float exps_rounded(float *s, int n, float mx, mha_bf16 *d)
{
    return exp_pass(s, n, n, NULL, mx, d, EXP_ROUNDED, 1);
}
static inline __attribute__((always_inline)) float exps_tiles(float *s, int n, float mx, mha_bf16 *d)
{
    return exp_pass(s, n, n, NULL, mx, d, EXP_TILES, 1);
}

void mha_softmax_rows_neon(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_floats);
}

void mha_softmax_rows_rounded_neon(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_rounded);
}

void mha_softmax_rows16_neon(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st, mha_bf16 *d)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, d, whole_row_max, exps_tiles);
}

/* ---- the merge rule: each product and the sum rounded once, as ref ---- */

void mha_merge_row_neon(float *restrict z, float a, const float *restrict zc, float b, int n)
{
    const float32x4_t va = vdupq_n_f32(a), vb = vdupq_n_f32(b);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        vst1q_f32(z + j, vaddq_f32(vmulq_f32(vld1q_f32(z + j), va), vmulq_f32(vld1q_f32(zc + j), vb)));
        vst1q_f32(z + j + 4, vaddq_f32(vmulq_f32(vld1q_f32(z + j + 4), va), vmulq_f32(vld1q_f32(zc + j + 4), vb)));
    }
    for (; j < n; j++)
        z[j] = z[j] * a + zc[j] * b;
}

void mha_scale_row_neon(float *z, const float *x, float s, int n)
{
    const float32x4_t vs = vdupq_n_f32(s);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        vst1q_f32(z + j, vmulq_f32(vld1q_f32(x + j), vs));
        vst1q_f32(z + j + 4, vmulq_f32(vld1q_f32(x + j + 4), vs));
    }
    for (; j < n; j++)
        z[j] = x[j] * s;
}

/* ---- logit softcapping ---- */

/* cap · tanh(s / cap), 4 lanes, both of mha_tanh_poly's branches blended (avx2's
 * softcap_vecs lane for lane); 16 entries a step, their exps step by step together (exp4_n),
 * then 4. */
static inline __attribute__((always_inline)) void softcap_vecs(float *s, int n, float cap, const int U)
{
    const float32x4_t vc = vdupq_n_f32(cap), one = vdupq_n_f32(1.0f);
    const uint32x4_t sign = vdupq_n_u32(0x80000000u);
    float32x4_t x[4], z[4], e[4];
    EACH {
        x[q] = vdivq_f32(load4_n(s + 4 * q, n - 4 * q), vc);
        z[q] = vabsq_f32(x[q]);
        e[q] = vaddq_f32(z[q], z[q]);
    }
    exp4_n(e, U, 1, 0);
    EACH {
        const float32x4_t big = vsubq_f32(one, vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e[q], one)));
        const float32x4_t zz = vmulq_f32(z[q], z[q]);
        float32x4_t p = vfmaq_f32(vdupq_n_f32(MHA_TANH_P1), vdupq_n_f32(MHA_TANH_P0), zz);
        p = vfmaq_f32(vdupq_n_f32(MHA_TANH_P2), p, zz);
        p = vfmaq_f32(vdupq_n_f32(MHA_TANH_P3), p, zz);
        p = vfmaq_f32(vdupq_n_f32(MHA_TANH_P4), p, zz);
        const float32x4_t small = vfmaq_f32(z[q], vmulq_f32(p, zz), z[q]);
        const uint32x4_t far = vcgtq_f32(z[q], vdupq_n_f32(MHA_TANH_SPLIT));
        const uint32x4_t t = vorrq_u32(vreinterpretq_u32_f32(vbslq_f32(far, big, small)),
                                       vandq_u32(vreinterpretq_u32_f32(x[q]), sign));
        store4_n(s + 4 * q, n - 4 * q, vmulq_f32(vreinterpretq_f32_u32(t), vc));
    }
}

void mha_softcap_row_neon(float *s, int n, float cap)
{
    int j = 0;
    for (; j + 16 <= n; j += 16)
        softcap_vecs(s + j, 16, cap, 4);
    for (; j < n; j += 4)
        softcap_vecs(s + j, n - j, cap, 1);
}
