/* exp_poly.h — the exp of the softmax: a Cephes-style polynomial, one definition for every
 * table (ref evaluates it one lane at a time, the vector tables 8 or 16 lanes at a time with
 * FMA, so their bits may differ from ref's by the FMA roundings: about 2 ulp of exp).
 * A scalar expf per score costs more than the GEMMs at S = 512. */
#ifndef MHA_EXP_POLY_H
#define MHA_EXP_POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MHA_EXP_HI 88.3762626647949f
#define MHA_EXP_LO -87.3365447504019f /* exp(MHA_EXP_LO) = FLT_MIN; below it the result is 0 */
#define MHA_LOG2E 1.44269504088896341f
#define MHA_LN2_HI 0.693359375f
#define MHA_LN2_LO -2.12194440e-4f
#define MHA_EXP_P0 1.9875691500E-4f
#define MHA_EXP_P1 1.3981999507E-3f
#define MHA_EXP_P2 8.3334519073E-3f
#define MHA_EXP_P3 4.1665795894E-2f
#define MHA_EXP_P4 1.6666665459E-1f
#define MHA_EXP_P5 5.0000001201E-1f
/* bf16 engines' exp (softmax_row_bf16): their probabilities are rounded to bf16 (2^-9
 * relative) before A·V, so the same reduction and 1 + x·P(x), P of degree 3 (a relative
 * minimax fit with exp(0) = 1 exactly; within 2.9e-6 of exp over [−ln2/2, ln2/2] evaluated in
 * float32: four FMAs where the Cephes form takes eight operations) serve them. Their float32
 * sums carry the same 2.9e-6, a thousandth of the rounding's. */
#define MHA_EXP_B1 0.9999668598175049f
#define MHA_EXP_B2 0.5000301599502563f
#define MHA_EXP_B3 0.16787473857402802f
#define MHA_EXP_B4 0.041513845324516296f
#define MHA_EXP_BF16_ERR 3e-6 /* that polynomial's relative error, rounded up: tests' bound */

/* One lane (bf16: the bf16 engines' polynomial). Below FLT_MIN: flushed, as the vector
 * versions do; NaN too (their in-range compare is false for NaN), which also keeps NaN away
 * from the float-to-int conversion. */
static inline float mha_exp_poly_as(float x, int bf16)
{
    if (!(x >= MHA_EXP_LO))
        return 0.0f;
    x = x > MHA_EXP_HI ? MHA_EXP_HI : x;
    const float n = rintf(x * MHA_LOG2E);
    x = x - n * MHA_LN2_HI - n * MHA_LN2_LO;
    float y;
    if (bf16)
        y = (((MHA_EXP_B4 * x + MHA_EXP_B3) * x + MHA_EXP_B2) * x + MHA_EXP_B1) * x + 1.0f;
    else {
        y = ((((MHA_EXP_P0 * x + MHA_EXP_P1) * x + MHA_EXP_P2) * x + MHA_EXP_P3) * x + MHA_EXP_P4) * x + MHA_EXP_P5;
        y = y * x * x + x + 1.0f;
    }
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

static inline float mha_exp_poly(float x)
{
    return mha_exp_poly_as(x, 0);
}

/* tanh of the logit softcap, Cephes' tanhf on this exp: for |x| > 0.625, 1 − 2 / (exp(2|x|) + 1)
 * (no cancellation there: the result is above 0.55); below, an odd polynomial, |x| + |x|³·P(x²);
 * the sign of x put back. Within 2e-7 of tanh over the line (the polynomial's own error and
 * a few roundings); tanh(±∞) = ±1. */
#define MHA_TANH_SPLIT 0.625f
#define MHA_TANH_P0 -5.70498872745E-3f
#define MHA_TANH_P1 2.06390887954E-2f
#define MHA_TANH_P2 -5.37397155531E-2f
#define MHA_TANH_P3 1.33314422036E-1f
#define MHA_TANH_P4 -3.33332819422E-1f

static inline float mha_tanh_poly(float x)
{
    const float z = fabsf(x);
    float t;
    if (z > MHA_TANH_SPLIT) {
        t = 1.0f - 2.0f / (mha_exp_poly(z + z) + 1.0f);
    } else {
        const float s = z * z;
        t = (((((MHA_TANH_P0 * s + MHA_TANH_P1) * s + MHA_TANH_P2) * s + MHA_TANH_P3) * s + MHA_TANH_P4) * s) * z + z;
    }
    return copysignf(t, x);
}

#endif
