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

/* One lane. Below FLT_MIN: flushed, as the vector versions do; NaN too (their in-range compare
 * is false for NaN), which also keeps NaN away from the float-to-int conversion. */
static inline float mha_exp_poly(float x)
{
    if (!(x >= MHA_EXP_LO))
        return 0.0f;
    x = x > MHA_EXP_HI ? MHA_EXP_HI : x;
    const float n = rintf(x * MHA_LOG2E);
    x = x - n * MHA_LN2_HI - n * MHA_LN2_LO;
    float y = ((((MHA_EXP_P0 * x + MHA_EXP_P1) * x + MHA_EXP_P2) * x + MHA_EXP_P3) * x + MHA_EXP_P4) * x + MHA_EXP_P5;
    y = y * x * x + x + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
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
