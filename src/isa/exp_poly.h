/* exp_poly.h — the exp of the softmax: Cephes' reduction and form with a minimax polynomial,
 * one definition for every table (ref evaluates it one lane at a time, the vector tables 8 or
 * 16 lanes at a time with FMA, so their bits may differ from ref's by the FMA roundings: about
 * 2 ulp of exp). A scalar expf per score costs more than the GEMMs at S = 512. */
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
/* exp(x) = 2^n · exp(r), r = x − n·ln2 in [−ln2/2, ln2/2] (ln2 in two parts), exp(r) =
 * 1 + r + r²·P(r), P of degree 4: the minimax fit of exp's relative error on that interval
 * (3.1e-9, a twentieth of float32's ulp; tests/fit_exp_poly.py), coefficients rounded to
 * float32. Cephes' P of degree 5 (its error 1e-10) gave no fewer ulp in float32 (1.24 at
 * most with FMA over [−87, 88], either) for one more FMA a lane: the softmax's exp is bound by
 * FMA issue, and the f32 core's softmax by its exp. */
#define MHA_EXP_P0 1.3814613922e-3f
#define MHA_EXP_P1 8.3687100559e-3f
#define MHA_EXP_P2 4.1668388993e-2f
#define MHA_EXP_P3 1.6666521132e-1f
#define MHA_EXP_P4 4.9999994040e-1f
/* bf16 engines' exp (softmax_row_bf16): their probabilities are rounded to bf16 (2^-9
 * relative) before A·V, so the same reduction and 1 + x·P(x), P of degree 3 (a relative
 * minimax fit with exp(0) = 1 exactly; within 2.9e-6 of exp over [−ln2/2, ln2/2] evaluated in
 * float32: four FMAs where the float32 form takes seven operations) serve them. Their float32
 * sums carry the same 2.9e-6, a thousandth of the rounding's. */
#define MHA_EXP_B1 0.9999668598175049f
#define MHA_EXP_B2 0.5000301599502563f
#define MHA_EXP_B3 0.16787473857402802f
#define MHA_EXP_B4 0.041513845324516296f
#define MHA_EXP_BF16_ERR 3e-6 /* that polynomial's relative error, rounded up: tests' bound */
/* ln2 rounded to float32: the vector tables reduce a bf16 engine's x in one FMA, x − n·MHA_LN2
 * (its error n·1.9e-9, 2.4e-7 at most where exp is below 2^-120: a twelfth of the polynomial's
 * at worst; one FMA of eight fewer, on an exp bound by FMA issue); ref keeps the two-part ln2 (its
 * product rounded, one part would cost up to 3.8e-6). */
#define MHA_LN2 0.693147182464599609375f

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
        y = (((MHA_EXP_P0 * x + MHA_EXP_P1) * x + MHA_EXP_P2) * x + MHA_EXP_P3) * x + MHA_EXP_P4;
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
