/* neon_f32.c — the neon table's float32 operations outside the softmax: A and Bᵀ packed 4
 * lanes at a time through 4 × 4 register transposes, and RoPE. */
#include <arm_neon.h>

#include "loops.h"
#include "neon.h"

/* ---- float32 packing ---- */

/* One group of a panel: up to 4 rows by n <= 4 columns through a register transpose, gw
 * lanes of each column stored (cortexa57's panels of 12 and 8 and generic's of 4 and 16 are
 * whole groups of 4: gw is 4 but in a panel narrower than 4). */
static inline __attribute__((always_inline)) void pack_group(const float *const *src, int gw, int have, ptrdiff_t off,
                                                             int n, float *dst, int pw)
{
    float32x4_t v[4];
    if (gw == 4 && have >= 4 && n == 4) { /* a whole group: nothing to test per row or column */
        for (int r = 0; r < 4; r++)
            v[r] = vld1q_f32(src[r] + off);
        transpose4(v);
        for (int t = 0; t < 4; t++)
            vst1q_f32(dst + (size_t)t * pw, v[t]);
        return;
    }
    for (int r = 0; r < 4; r++)
        v[r] = r < gw && r < have ? load4_n(src[r] + off, n) : vdupq_n_f32(0.0f);
    transpose4(v);
    for (int t = 0; t < n; t++)
        store4_n(dst + (size_t)t * pw, gw, v[t]);
}

/* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc), into panels of pw rows: dst[panel][p][r].
 * Four rows by four columns at a time. */
void mha_pack_rows_neon(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst)
{
    mha_pack_walk(a, w, i0, rows, p0, kc, pw, dst, 4, pack_group);
}

/* ---- RoPE ---- */

/* Four pairs at a time: products and the difference or sum each rounded once, as ref (vmulq
 * and vsubq/vaddq: the build contracts nothing into an FMA). */
void mha_rope_halves_neon(float *a, float *b, const float *c, const float *s, float sign, int n)
{
    const float32x4_t sg = vdupq_n_f32(sign);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float32x4_t x = vld1q_f32(a + j), y = vld1q_f32(b + j);
        const float32x4_t cj = vld1q_f32(c + j), sn = vmulq_f32(sg, vld1q_f32(s + j));
        vst1q_f32(a + j, vsubq_f32(vmulq_f32(x, cj), vmulq_f32(y, sn)));
        vst1q_f32(b + j, vaddq_f32(vmulq_f32(y, cj), vmulq_f32(x, sn)));
    }
    if (j < n) {
        const float32x4_t x = load4_n(a + j, n - j), y = load4_n(b + j, n - j);
        const float32x4_t cj = load4_n(c + j, n - j), sn = vmulq_f32(sg, load4_n(s + j, n - j));
        store4_n(a + j, n - j, vsubq_f32(vmulq_f32(x, cj), vmulq_f32(y, sn)));
        store4_n(b + j, n - j, vaddq_f32(vmulq_f32(y, cj), vmulq_f32(x, sn)));
    }
}

/* Four pairs (two vectors of two) at a time: cos and sin duplicated per pair (zip), the pair
 * swapped (rev64), the even lanes' sine negated: x·c + y·(−s') rounds as x·c − y·s'. */
static inline __attribute__((always_inline)) void rope_pairs4(float *x, const float *c, const float *s,
                                                              float32x4_t sg, int n)
{
    const float32x4_t cj = load4_n(c, n), sj = load4_n(s, n);
    const float32x4_t v0 = load4_n(x, 2 * n), v1 = load4_n(x + 4, 2 * n - 4);
    const float32x4_t c0 = vzip1q_f32(cj, cj), c1 = vzip2q_f32(cj, cj);
    const float32x4_t s0 = vmulq_f32(sg, vzip1q_f32(sj, sj)), s1 = vmulq_f32(sg, vzip2q_f32(sj, sj));
    store4_n(x, 2 * n, vaddq_f32(vmulq_f32(v0, c0), vmulq_f32(vrev64q_f32(v0), s0)));
    store4_n(x + 4, 2 * n - 4, vaddq_f32(vmulq_f32(v1, c1), vmulq_f32(vrev64q_f32(v1), s1)));
}

void mha_rope_pairs_neon(float *x, const float *c, const float *s, float sign, int n)
{
    const float sg4[4] = {-sign, sign, -sign, sign};
    const float32x4_t sg = vld1q_f32(sg4);
    int j = 0;
    for (; j + 4 <= n; j += 4)
        rope_pairs4(x + 2 * j, c + j, s + j, sg, 4);
    if (j < n)
        rope_pairs4(x + 2 * j, c + j, s + j, sg, n - j);
}
