/* test_softmax.c — every softmax implementation this CPU runs, against a double softmax:
 * the unnormalised row divided by the returned sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "softmax.h"

static const struct { const char *name; mha_softmax_fn fn; } impls[] = {
    {"generic", mha_softmax_row_generic},
    {"avx2", mha_softmax_row_avx2},
    {"avx512", mha_softmax_row_avx512},
};

/* Relative error allowed per weight, in units of float's 2^-24: rounding s − max in float
 * costs up to |s − max| of them, the exp polynomial ~2, the division 1, and a float sum of
 * n terms up to n. A wrong mask or a missed max is off by O(1), far outside this. */
static double tolerance(double x_minus_max, int n)
{
    return (fabs(x_minus_max) + 4.0 + n) * 0x1p-24;
}

static void check_row(const char *impl, const float *in, int n, int visible, const uint8_t *mask, const float *got,
                      float got_sum)
{
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < visible; j++)
        if (!mask || mask[j])
            mx = in[j] > mx ? in[j] : mx;
    for (int j = 0; j < visible; j++)
        if (!mask || mask[j])
            sum += exp((double)in[j] - mx);
    for (int j = 0; j < n; j++) {
        int vis = j < visible && (!mask || mask[j]);
        double want = vis ? exp((double)in[j] - mx) / sum : 0.0;
        if (!vis || mx == -INFINITY) {
            cr_assert_eq(got[j], 0.0f, "%s n=%d visible=%d: hidden [%d] = %g", impl, n, visible, j, got[j]);
        } else {
            double p = (double)got[j] / got_sum;
            cr_assert(fabs(p - want) <= tolerance(in[j] - mx, visible) * want,
                      "%s n=%d visible=%d: [%d] = %.9g, want %.9g", impl, n, visible, j, p, want);
        }
    }
    if (mx == -INFINITY)
        cr_assert_eq(got_sum, 0.0f, "%s: a row with nothing visible sums to %g", impl, got_sum);
}

Test(softmax, every_implementation_matches_double, .timeout = 30)
{
    rng r = {5};
    float in[300], row[300];
    uint8_t mask[300];
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!mha_softmax_supported(impls[k].fn))
            continue; /* this CPU cannot run it */
        const int sizes[] = {1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 100, 257, 300};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int n = sizes[s];
            for (int variant = 0; variant < 4; variant++) {
                fill_uniform(in, (size_t)n, -20.0f, 20.0f, &r);
                for (int j = 0; j < n; j++)
                    mask[j] = rng_next(&r) % 3 != 0;
                int visible = variant == 1 ? n / 2 : variant == 3 ? 0 : n;
                const uint8_t *m = variant >= 2 ? mask : NULL;
                memcpy(row, in, (size_t)n * sizeof *row);
                float sum = impls[k].fn(row, n, visible, m);
                check_row(impls[k].name, in, n, visible, m, row, sum);
            }
        }
    }
}

Test(softmax, extreme_scores_stay_finite)
{
    /* differences far beyond exp's range underflow to 0, not NaN */
    float row[20];
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!mha_softmax_supported(impls[k].fn))
            continue;
        for (int j = 0; j < 20; j++)
            row[j] = j == 3 ? 1e30f : -1e30f;
        cr_assert_eq(impls[k].fn(row, 20, 20, NULL), 1.0f, "%s: sum", impls[k].name);
        for (int j = 0; j < 20; j++)
            cr_assert_eq(row[j], j == 3 ? 1.0f : 0.0f, "%s [%d] = %g", impls[k].name, j, row[j]);
    }
}

Test(softmax, fully_hidden_row_is_zero)
{
    uint8_t none[40] = {0};
    float row[40];
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!mha_softmax_supported(impls[k].fn))
            continue;
        for (int j = 0; j < 40; j++)
            row[j] = (float)j;
        cr_assert_eq(impls[k].fn(row, 40, 40, none), 0.0f);
        for (int j = 0; j < 40; j++)
            cr_assert_eq(row[j], 0.0f, "%s [%d] = %g", impls[k].name, j, row[j]);
    }
}

Test(softmax, selection_picks_the_widest_the_cpu_runs)
{
    const char *name = NULL;
    mha_softmax_fn fn = mha_softmax_select(&name);
    cr_assert(mha_softmax_supported(fn));
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        cr_assert_str_eq(name, "avx512");
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cr_assert_str_eq(name, "avx2");
    else
        cr_assert_str_eq(name, "generic");
}
