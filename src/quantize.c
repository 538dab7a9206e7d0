/* quantize.c — float rows into ggml's weight blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
 * Q6_K): the bytes of ggml's reference quantizers, quantize_row_*_ref in ggml-quants.c (the
 * llama.cpp that llama-cpp-python 0.3.36 vendors), so that weights mha quantizes are the
 * weights llama.cpp's tools would write. tests/test_quantize.c holds ggml's bytes for a set
 * of rows.
 *
 * Same bytes means the same float operations in the same order: every expression here is
 * ggml's, its types and its evaluation order kept (w*x*l is (w·x)·l), with no FMA contraction
 * (the build's -ffp-contract=off; ggml-base is built without -march, so its x86 code has none
 * either), in the default floating-point environment (nearest, no flush to zero). Where ggml's
 * C is undefined (a float converted to an integer it does not fit: a block of float denormals,
 * whose inverse scale overflows to inf) this file writes what ggml's x86 code does. The helpers
 * (nearest_int, make_qx_quants, make_qkx2_quants) keep ggml's names and only the arguments
 * these types pass. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bgemm.h" /* mha_f16_round, mha_f16_float: ggml's fp16 conversions, bit for bit */
#include "quant.h"

enum { QK = 32, QK_K = 256 };

/* ---- the blocks (ggml-common.h), built in place and copied out: the caller's bytes need no
 * alignment. The fp16 fields are little-endian, as everywhere mha reads files. */
typedef struct {
    mha_f16 d;
    int8_t qs[QK]; /* input j */
} block_q8_0;
typedef struct {
    mha_f16 d;
    uint8_t qs[QK / 2]; /* byte j: input j low nibble, j + 16 high */
} block_q4_0;
typedef struct {
    mha_f16 d, m;
    uint8_t qs[QK / 2]; /* as Q4_0's */
} block_q4_1;
typedef struct {
    mha_f16 d;
    uint8_t qh[4];      /* bit j of the little-endian u32: input j's fifth bit */
    uint8_t qs[QK / 2]; /* byte j: input j low 4 bits, j + 16 high */
} block_q5_0;
typedef struct {
    mha_f16 d, m;
    uint8_t qh[4], qs[QK / 2]; /* as Q5_0's */
} block_q5_1;
typedef struct {
    mha_f16 d, dmin;      /* factors of the 6-bit scales and mins */
    uint8_t scales[12];   /* 8 scales and 8 mins, 6 bits each (put_scale_min) */
    uint8_t qs[QK_K / 2]; /* per 64 inputs, byte j: input j low nibble, j + 32 high */
} block_q4_K;
typedef struct {
    mha_f16 d, dmin;      /* as Q4_K's */
    uint8_t scales[12];   /* as Q4_K's */
    uint8_t qh[QK_K / 8]; /* fifth bits: byte j bits 2i, 2i + 1 for inputs 64i + j, 64i + j + 32 */
    uint8_t qs[QK_K / 2]; /* low 4 bits, laid out as Q4_K's */
} block_q5_K;
typedef struct {
    uint8_t ql[QK_K / 2]; /* low 4 bits, per 128 inputs: byte j input j | j + 64, byte 32 + j j + 32 | j + 96 */
    uint8_t qh[QK_K / 4]; /* high 2 bits, per 128 inputs: byte j inputs j, j + 32, j + 64, j + 96 */
    int8_t scales[QK_K / 16];
    mha_f16 d;
} block_q6_K;
_Static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 &&
                   sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24 && sizeof(block_q4_K) == 144 &&
                   sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210,
               "ggml's block sizes");

/* ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it quantizes as all zero. */
static const float group_max_eps = 1e-15f;

/* ---- conversions ---- */

/* ggml's nearest_int: 1.5·2^23 added puts the integer, rounded to nearest even, in the low
 * mantissa bits (exact for |f| < 2^22; outside, and for inf and NaN, the same bits as ggml's). */
static int nearest_int(float f)
{
    const float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* (int32_t)f truncated, as x86's cvttss2si gives it: NaN and values outside int32's range give
 * INT32_MIN. C leaves those undefined; ggml's Q8_0, Q4_0 and Q4_1 meet them when a block's
 * inverse scale is inf, and its x86 code writes this. */
static int32_t trunc_i32(float f)
{
    return f >= -2147483648.0f && f < 2147483648.0f ? (int32_t)f : INT32_MIN;
}

/* v converted to int8_t (ggml's casts): its low byte, signed — what GCC and clang define the
 * conversion as, written out so that it is C's. */
static int low_i8(int32_t v)
{
    const int b = (int)((uint32_t)v & 0xffu);
    return b < 128 ? b : b - 256;
}

/* A 32-input block's quant: MIN(cap, (int8_t)f) stored in a uint8_t (Q4_0 and Q4_1 cap 15,
 * Q5_0 31). Q5_1's plain (uint8_t)f is cap 255: a cap that never binds, the same low byte. */
static uint8_t q_byte(float f, int cap)
{
    const int v = low_i8(trunc_i32(f));
    return (uint8_t)(v < cap ? v : cap);
}

/* Q5_0's and Q5_1's fifth bits, bit j of qh's little-endian u32 for input j (ggml's memcpy of
 * a uint32_t on x86), and the low 4 bits as Q4's bytes are laid out. */
static void q5_pack(const uint8_t *q, uint8_t *qh, uint8_t *qs)
{
    uint32_t h = 0;
    for (int j = 0; j < QK / 2; ++j) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[QK / 2 + j] & 0x0F) << 4);
        h |= ((q[j] & 0x10u) >> 4) << (j + 0);
        h |= ((q[QK / 2 + j] & 0x10u) >> 4) << (j + QK / 2);
    }
    for (int k = 0; k < 4; ++k)
        qh[k] = (uint8_t)(h >> 8 * k);
}

/* ---- 32-input blocks ---- */

/* Q8_0: d = amax / 127, each input round(x / d) (half away from zero). */
static void q8_0_block(const float *x, unsigned char *out)
{
    block_q8_0 b;
    float amax = 0.0f;
    for (int j = 0; j < QK; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    b.d = mha_f16_round(d);
    for (int j = 0; j < QK; j++) {
        const float x0 = x[j] * id;
        b.qs[j] = (int8_t)low_i8(trunc_i32(roundf(x0)));
    }
    memcpy(out, &b, sizeof b);
}

/* Q4_0 and Q5_0 (half 8, 16): d = max / −half, max the input of largest magnitude (the first of
 * them), so that it is q = 0 exactly; each input truncated from x / d + half + 0.5, capped at
 * 2·half − 1. Returns d; q[j] is input j's. */
static float fit_sym(const float *x, int half, uint8_t *q)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -half;
    const float id = d ? 1.0f / d : 0.0f;
    const float offset = half + 0.5f; /* 8.5f, 16.5f: exact */
    for (int j = 0; j < QK; j++)
        q[j] = q_byte(x[j] * id + offset, 2 * half - 1);
    return d;
}

/* Q4_1 and Q5_1 (nmax 15, 31): d = (max − min) / nmax, m = min; each input truncated from
 * (x − min) / d + 0.5 (capped at cap). Returns d and min; q[j] is input j's. */
static float fit_asym(const float *x, int nmax, int cap, float *min_out, uint8_t *q)
{
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    const float d = (max - min) / nmax;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK; j++)
        q[j] = q_byte((x[j] - min) * id + 0.5f, cap);
    *min_out = min;
    return d;
}

/* ggml packs Q4_0's and Q4_1's quants unmasked: byte j is q[j] | q[j + 16] << 4. */
static void q4_pack(const uint8_t *q, uint8_t *qs)
{
    for (int j = 0; j < QK / 2; j++)
        qs[j] = (uint8_t)(q[j] | q[QK / 2 + j] << 4);
}

static void q4_0_block(const float *x, unsigned char *out)
{
    block_q4_0 b;
    uint8_t q[QK];
    b.d = mha_f16_round(fit_sym(x, 8, q));
    q4_pack(q, b.qs);
    memcpy(out, &b, sizeof b);
}

static void q4_1_block(const float *x, unsigned char *out)
{
    block_q4_1 b;
    uint8_t q[QK];
    float min;
    b.d = mha_f16_round(fit_asym(x, 15, 15, &min, q));
    b.m = mha_f16_round(min);
    q4_pack(q, b.qs);
    memcpy(out, &b, sizeof b);
}

static void q5_0_block(const float *x, unsigned char *out)
{
    block_q5_0 b;
    uint8_t q[QK];
    b.d = mha_f16_round(fit_sym(x, 16, q));
    q5_pack(q, b.qh, b.qs);
    memcpy(out, &b, sizeof b);
}

static void q5_1_block(const float *x, unsigned char *out)
{
    block_q5_1 b;
    uint8_t q[QK];
    float min;
    b.d = mha_f16_round(fit_asym(x, 31, 255, &min, q)); /* ggml's (uint8_t) without a MIN */
    b.m = mha_f16_round(min);
    q5_pack(q, b.qh, b.qs);
    memcpy(out, &b, sizeof b);
}

/* ---- Q4_K and Q5_K ---- */

/* ggml's make_qkx2_quants without use_mad (Q4_K and Q5_K pass false, and nstep ≥ 1): L (n
 * values in 0..nmax) and a scale and min (returned, and −min in *the_min) for
 * x ≈ scale·L + min, min ≤ 0: the plain min/max fit, then nstep + 1 trial scales
 * (rmin + rdelta·is + nmax steps over the range), each refit by weighted least squares and
 * kept if its weighted squared error is smaller. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Sub-block j's 6-bit scale ls and min lm into Q4_K's 12 bytes: j < 4 in the low 6 bits of
 * bytes j and j + 4; j ≥ 4 their low 4 bits in byte j + 4, their top 2 in the top bits of
 * bytes j − 4 and j (ggml's order: j ≥ 4 comes after j − 4 has written its bytes). */
static void put_scale_min(uint8_t *scales, int j, uint8_t ls, uint8_t lm)
{
    if (j < 4) {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
        scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
        scales[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* Q4_K and Q5_K (nmax 15, 31, with make_qkx2_quants' rmin and nstep): 8 sub-blocks of 32, each
 * fit by make_qkx2_quants weighted by rms + |x|; their scales and mins as 6-bit multiples of
 * d = max scale / 63 and dmin = max min / 63 (into *d, *dmin and scales[12]); then each input
 * requantized against the rounded factors: L = nearest((x + dmin·m) / (d·sc)) in 0..nmax. */
static void fit_k(const float *x, int nmax, float rmin, int nstep, mha_f16 *d_out, mha_f16 *dmin_out,
                  uint8_t *packed, uint8_t *L)
{
    uint8_t Laux[32], ls[8], lm[8];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0; /* the min is subtracted: scales are positive */
    for (int j = 0; j < 8; ++j) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += xj[l] * xj[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(xj[l]);
        scales[j] = make_qkx2_quants(32, nmax, xj, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        /* nearest_int's int into a uint8_t, then capped: ggml's order (a negative wraps) */
        ls[j] = (uint8_t)nearest_int(inv_scale * scales[j]);
        lm[j] = (uint8_t)nearest_int(inv_min * mins[j]);
        ls[j] = ls[j] < 63 ? ls[j] : 63;
        lm[j] = lm[j] < 63 ? lm[j] : 63;
        put_scale_min(packed, j, ls[j], lm[j]);
    }
    *d_out = mha_f16_round(max_scale / 63.f);
    *dmin_out = mha_f16_round(max_min / 63.f);

    /* ggml reads ls and lm back from the packed bytes: 6 bits each, the same values */
    for (int j = 0; j < 8; ++j) {
        const float d = mha_f16_float(*d_out) * ls[j];
        if (!d) /* keeps make_qkx2_quants' L */
            continue;
        const float dm = mha_f16_float(*dmin_out) * lm[j];
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        }
    }
}

static void q4_K_block(const float *x, unsigned char *out)
{
    block_q4_K b;
    uint8_t L[QK_K];
    fit_k(x, 15, -1.f, 20, &b.d, &b.dmin, b.scales, L);
    for (int j = 0; j < QK_K; j += 64)
        for (int l = 0; l < 32; ++l)
            b.qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    memcpy(out, &b, sizeof b);
}

/* Q5_K: Q4_K's nibbles of L's low 4 bits, its fifth bits in qh (64-input group i: bits 2i, 2i + 1). */
static void q5_K_block(const float *x, unsigned char *out)
{
    block_q5_K b;
    uint8_t L[QK_K];
    fit_k(x, 31, -0.5f, 15, &b.d, &b.dmin, b.scales, L);
    memset(b.qh, 0, sizeof b.qh);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QK_K; n += 64) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                b.qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                b.qh[j] |= m2;
            }
            b.qs[n / 2 + j] = (uint8_t)(l1 | l2 << 4);
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
    }
    memcpy(out, &b, sizeof b);
}

/* ---- Q6_K ---- */

/* ggml's make_qx_quants with rmse_type 1 and no weights (Q6_K's call): L (n values in
 * 0..2·nmax − 1, q + nmax) and the scale (returned) for x ≈ scale·q: the scale that puts the
 * largest magnitude at −nmax, then 18 trial scales around it, each refit by least squares
 * weighted by x², kept if it explains more of x. A group below group_max_eps is all zero. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < group_max_eps) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q6_K: 16 groups of 16, each fit by make_qx_quants; their scales as int8 multiples of
 * d = max scale / −128 (the group scale of largest magnitude becomes −128); then each input
 * requantized against the rounded factor: q = nearest(x / (d·sc)) in −32..31, stored + 32. */
static void q6_K_block(const float *x, unsigned char *out)
{
    block_q6_K b;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs_scale) {
            max_abs_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < group_max_eps) { /* every byte 0, d +0 */
        memset(&b, 0, sizeof b);
        b.d = mha_f16_round(0.f);
        memcpy(out, &b, sizeof b);
        return;
    }
    const float iscale = -128.f / max_scale;
    b.d = mha_f16_round(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const int s = nearest_int(iscale * scales[ib]);
        b.scales[ib] = (int8_t)low_i8(s < 127 ? s : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = mha_f16_float(b.d) * b.scales[j];
        if (!d) /* keeps make_qx_quants' L */
            continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = nearest_int(x[16 * j + ii] / d);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            L[16 * j + ii] = (int8_t)(l + 32);
        }
    }
    for (int j = 0; j < QK_K; j += 128) {
        uint8_t *ql = b.ql + j / 2, *qh = b.qh + j / 4;
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96]; /* 0..63 */
            ql[l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
            ql[l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
            qh[l] = (uint8_t)(q1 >> 4 | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
    }
    memcpy(out, &b, sizeof b);
}

/* ---- the row ---- */

/* A block type's quantizer: qk inputs into one block of `bytes`. */
typedef struct {
    mha_weight_type type;
    int qk;
    size_t bytes;
    void (*block)(const float *x, unsigned char *out);
} quantizer;

static const quantizer quantizers[] = {
    {MHA_WEIGHT_Q8_0, QK, sizeof(block_q8_0), q8_0_block},   {MHA_WEIGHT_Q4_0, QK, sizeof(block_q4_0), q4_0_block},
    {MHA_WEIGHT_Q4_1, QK, sizeof(block_q4_1), q4_1_block},   {MHA_WEIGHT_Q5_0, QK, sizeof(block_q5_0), q5_0_block},
    {MHA_WEIGHT_Q5_1, QK, sizeof(block_q5_1), q5_1_block},   {MHA_WEIGHT_Q4_K, QK_K, sizeof(block_q4_K), q4_K_block},
    {MHA_WEIGHT_Q5_K, QK_K, sizeof(block_q5_K), q5_K_block}, {MHA_WEIGHT_Q6_K, QK_K, sizeof(block_q6_K), q6_K_block},
};

void mha_quantize_row(mha_weight_type t, const float *x, void *blocks, int64_t n)
{
    for (size_t k = 0; k < sizeof quantizers / sizeof quantizers[0]; k++) {
        const quantizer *q = &quantizers[k];
        if (q->type != t)
            continue;
        unsigned char *out = blocks;
        for (int64_t i = 0; i < n / q->qk; i++)
            q->block(x + i * q->qk, out + (size_t)i * q->bytes);
        return;
    }
}
