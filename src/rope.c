/* rope.c — rotary position embeddings (rope.h). The frequency formulas follow HF transformers'
 * modeling_rope_utils (_compute_default/linear/llama3/yarn_parameters), in float32 where HF
 * computes in float32, so the same positions give the same angles. */
#include "rope.h"

#include "isa/isa.h"

#include <math.h>

#define PI 3.14159265358979323846 /* Python's math.pi */

void mha_rope_freqs(const mha_rope *rope, int r, float *inv_freq, float *attention_factor)
{
    const int half = r / 2;
    const double base = rope->theta, factor = rope->factor;
    *attention_factor = 1.0f;
    /* default: 1 / base^(2i / r), the power in float32 as torch does it */
    for (int i = 0; i < half; i++)
        inv_freq[i] = 1.0f / powf((float)base, (float)(2 * i) / (float)r);
    switch (rope->scaling) {
    case MHA_ROPE_SCALING_LINEAR:
        for (int i = 0; i < half; i++)
            inv_freq[i] /= (float)factor;
        break;
    case MHA_ROPE_SCALING_LLAMA3: {
        /* wavelengths above the original context's low-frequency bound are divided by the
         * factor, those below its high-frequency bound kept, the band between interpolated */
        /* tensor-with-scalar arithmetic in float32, as torch does it */
        const float ctx = (float)rope->original_max_position, lo = rope->low_freq_factor, hi = rope->high_freq_factor;
        const double low_wavelen = (double)rope->original_max_position / lo, high_wavelen = (double)rope->original_max_position / hi;
        const float fac = (float)factor;
        for (int i = 0; i < half; i++) {
            const float f = inv_freq[i];
            const float wavelen = (float)(2.0 * PI) / f;
            float g = wavelen > low_wavelen ? f / fac : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                const float smooth = (ctx / wavelen - lo) / (hi - lo);
                g = (1.0f - smooth) * g / fac + smooth * g;
            }
            inv_freq[i] = g;
        }
        break;
    }
    case MHA_ROPE_SCALING_YARN: {
        /* dimensions rotating fewer than beta_slow times over the original context are
         * interpolated (θ / factor), more than beta_fast times extrapolated (θ kept), a linear
         * ramp between; cos and sin carry the attention factor 0.1·ln(factor) + 1 (DeepSeek's
         * mscale and mscale_all_dim set: m(mscale) / m(mscale_all_dim)) */
        const double ctx = rope->original_max_position;
#define CORRECTION_DIM(rot) ((double)r * log(ctx / ((rot) * 2.0 * PI)) / (2.0 * log(base)))
        double low = CORRECTION_DIM(rope->beta_fast), high = CORRECTION_DIM(rope->beta_slow);
        if (rope->truncate)
            low = floor(low), high = ceil(high);
#undef CORRECTION_DIM
        low = low > 0 ? low : 0;
        high = high < r - 1 ? high : r - 1;
        if (low == high)
            high += 0.001;
        for (int i = 0; i < half; i++) {
            const float pos_freq = powf((float)base, (float)(2 * i) / (float)r);
            const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            const float keep = 1.0f - ramp; /* the extrapolation's share */
            inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
        }
        *attention_factor = rope->mscale > 0.0f && rope->mscale_all_dim > 0.0f /* DeepSeek's */
                                ? (float)(mha_yarn_mscale(factor, rope->mscale) / mha_yarn_mscale(factor, rope->mscale_all_dim))
                                : (float)mha_yarn_mscale(factor, 1.0);
        break;
    }
    default:
        break;
    }
}

void mha_rope_table(const mha_rope *rope, int r, int positions, float *cos_t, float *sin_t)
{
    const int half = r / 2;
    float att, *inv_freq = sin_t; /* position 0's row holds the frequencies until written last */
    mha_rope_freqs(rope, r, inv_freq, &att);
    for (int p = positions - 1; p >= 0; p--)
        for (int i = 0; i < half; i++) {
            const float angle = (float)p * inv_freq[i]; /* float32, as HF's freqs */
            cos_t[(size_t)p * half + i] = (float)cos((double)angle) * att;
            sin_t[(size_t)p * half + i] = (float)sin((double)angle) * att;
        }
}

/* The columns left in col's panel. */
static int panel_left(const mha_kernel *k, int col)
{
    return k->bw - col % k->bw;
}

void mha_rope_rows(const mha_kernel *k, mha_mat m, int rows, int col, int pos0, mha_rope_style style, int r,
                   const float *cos_t, const float *sin_t)
{
    const mha_isa *isa = k->isa;
    const int half = r / 2;
    for (int i = 0; i < rows; i++) {
        const int p = pos0 + i, ap = p < 0 ? -p : p;
        const float sign = p < 0 ? -1.0f : 1.0f;
        const float *c = cos_t + (size_t)ap * half, *s = sin_t + (size_t)ap * half;
        /* runs of pairs whose elements stay inside their panels: neox pairs feature j with
         * j + r/2 (HF rotate_half), gptj with its neighbour (a pair that straddles two panels,
         * when col is odd, is a run of its own) */
        for (int j = 0; j < half;) {
            if (style == MHA_ROPE_NEOX) {
                const int a = col + j, b = a + half;
                int n = half - j;
                n = n < panel_left(k, a) ? n : panel_left(k, a);
                n = n < panel_left(k, b) ? n : panel_left(k, b);
                isa->rope_halves(mha_mat_at(k, m, i, a), mha_mat_at(k, m, i, b), c + j, s + j, sign, n);
                j += n;
            } else {
                const int a = col + 2 * j, fit = panel_left(k, a) / 2;
                if (fit == 0) {
                    isa->rope_halves(mha_mat_at(k, m, i, a), mha_mat_at(k, m, i, a + 1), c + j, s + j, sign, 1);
                    j++;
                } else {
                    const int n = half - j < fit ? half - j : fit;
                    isa->rope_pairs(mha_mat_at(k, m, i, a), c + j, s + j, sign, n);
                    j += n;
                }
            }
        }
    }
}

MHA_API mha_status mha_rope_inv_freq(const mha_rope *rope, int rotary_dim, float *inv_freq, float *attention_factor)
{
    if (!rope || !inv_freq || !attention_factor || rotary_dim < 2 || rotary_dim % 2)
        return MHA_ERR_INVALID_ARG;
    mha_rope_freqs(rope, rotary_dim, inv_freq, attention_factor);
    return MHA_OK;
}
