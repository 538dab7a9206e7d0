/* test_softmax.c — the softmax of every kernel table this CPU runs, against a double softmax:
 * the unnormalised row divided by the returned sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "isa/exp_poly.h"
#include "isa/isa.h"

/* Relative error allowed per weight, in units of float's 2^-24: rounding s − max in float
 * costs up to |s − max| of them, the exp polynomial ~2, the division 1, and a float sum of
 * n terms up to n. A wrong mask or a missed max is off by O(1), far outside this. */
static double tolerance(double x_minus_max, int n)
{
    return (fabs(x_minus_max) + 4.0 + n) * 0x1p-24;
}

/* bf16: the bf16 engines' exp (softmax_row_bf16) adds its polynomial's error to the entry's and
 * to the sum's: 2 · MHA_EXP_BF16_ERR more. */
static void check_row(const char *impl, const float *in, int n, int visible, const uint8_t *mask, const float *got,
                      float got_sum, int bf16)
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
            const double tol = tolerance(in[j] - mx, visible) + (bf16 ? 2.0 * MHA_EXP_BF16_ERR : 0.0);
            cr_assert(fabs(p - want) <= tol * want,
                      "%s n=%d visible=%d: [%d] = %.9g, want %.9g", impl, n, visible, j, p, want);
        }
    }
    if (mx == -INFINITY)
        cr_assert_eq(got_sum, 0.0f, "%s: a row with nothing visible sums to %g", impl, got_sum);
}

TABLE_TEST(softmax, every_implementation_matches_double, .timeout = 30)
{
    rng r = {5};
    float in[300], row[300];
    uint8_t mask[300];
    const int sizes[] = {1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 100, 257, 300};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        for (int variant = 0; variant < 4; variant++) {
            fill_uniform(in, (size_t)n, -20.0f, 20.0f, &r);
            for (int j = 0; j < n; j++)
                mask[j] = rng_next(&r) % 3 != 0;
            int visible = variant == 1 ? n / 2 : variant == 3 ? 0 : n;
            const uint8_t *m = variant >= 2 ? mask : NULL;
            for (int bf16 = 0; bf16 < 2; bf16++) { /* softmax_row, softmax_row_bf16 */
                memcpy(row, in, (size_t)n * sizeof *row);
                float mx = -INFINITY;
                const float sum = (bf16 ? isa->softmax_row_bf16 : isa->softmax_row)(row, n, visible, m, &mx);
                check_row(bf16 ? "softmax_row_bf16" : isa->name, in, n, visible, m, row, sum, bf16);
            }
        }
    }
}

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The bf16 chunks' one-pass softmax (softmax_row16, where a table has one) is softmax_row_bf16's
 * max, sum and entries, each entry rounded as mha_bf16_round into its place in a row of A
 * tiles and zeros up to the k tile: bit for bit, so a chunk's probabilities do not depend on
 * which path rounded them. */
TABLE_TEST(softmax, bf16_rows_are_the_float_rows_rounded_into_tiles, .timeout = 30)
{
    rng r = {17};
    enum { N = 300, KP = 320 };
    float in[N], row[N], row16[N];
    uint8_t mask[N];
    mha_bf16 got[KP / MHA_BT_K * MHA_BT_ELEMS];
    if (!isa->softmax_row16)
        cr_skip_test("isa %s has no softmax_row16 (its bf16 chunks take softmax_row and round after it)", isa->name);
    const int sizes[] = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 256, 257, 300};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        const int n = sizes[z], kp = (int)mha_bk_kp(n);
        for (int variant = 0; variant < 5; variant++) {
            fill_uniform(in, (size_t)n, -20.0f, 20.0f, &r);
            for (int j = 0; j < n; j++)
                mask[j] = rng_next(&r) % 3 != 0;
            const int visible = variant == 1 ? n / 2 : variant == 3 ? 0 : variant == 4 ? n - n / 3 : n;
            const uint8_t *m = variant >= 2 ? mask : NULL;
            memcpy(row, in, (size_t)n * sizeof *row);
            memcpy(row16, in, (size_t)n * sizeof *row16);
            memset(got, 0xff, sizeof got); /* NaN-ish garbage where nothing is written */
            float mx = -INFINITY, mx16 = -INFINITY;
            const float sum = isa->softmax_row_bf16(row, n, visible, m, &mx);
            const float sum16 = isa->softmax_row16(row16, n, visible, m, &mx16, got);
            cr_assert_eq(float_bits(sum16), float_bits(sum), "%s n=%d visible=%d: sum %a, want %a", isa->name, n,
                         visible, sum16, sum);
            cr_assert_eq(float_bits(mx16), float_bits(mx), "%s n=%d: max", isa->name, n);
            for (int j = 0; j < kp; j++) {
                const mha_bf16 want = j < n ? mha_bf16_round(row[j]) : 0;
                const mha_bf16 at = got[(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K];
                cr_assert_eq(at, want, "%s n=%d visible=%d variant %d: [%d] = %#x, want %#x", isa->name, n,
                             visible, variant, j, at, want);
            }
        }
    }
}

/* softmax_row_rounded (where a table has one) is softmax_row_bf16's max and sum with each entry
 * left as the float of its bf16 rounding (round_bf16_floats), bit for bit: a chunk's
 * probabilities on the float32 stream do not depend on which path rounded them. Scores down to
 * −120 below the max, and the first few above MHA_EXP_LO: exps at float32's smallest normals
 * and below, which the rounding flushes. */
TABLE_TEST(softmax, rounded_rows_are_the_float_rows_rounded, .timeout = 30)
{
    rng r = {19};
    enum { N = 300 };
    float in[N], row[N], rounded[N];
    uint8_t mask[N];
    if (!isa->softmax_row_rounded)
        cr_skip_test("isa %s has no softmax_row_rounded (softmax_row_bf16, then round_bf16_floats)", isa->name);
    const int sizes[] = {1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 256, 257, 300};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        const int n = sizes[z];
        for (int variant = 0; variant < 5; variant++) {
            fill_uniform(in, (size_t)n, variant % 2 ? -120.0f : -20.0f, variant % 2 ? 0.0f : 20.0f, &r);
            float edge = MHA_EXP_LO; /* the exp's last steps above zero: results near FLT_MIN */
            for (int j = 1; variant % 2 && j < n && j < 12; j++, edge = nextafterf(edge, 0.0f))
                in[0] = 0.0f, in[j] = edge;
            for (int j = 0; j < n; j++)
                mask[j] = rng_next(&r) % 3 != 0;
            const int visible = variant == 1 ? n / 2 : variant == 3 ? 0 : variant == 4 ? n - n / 3 : n;
            const uint8_t *m = variant >= 2 ? mask : NULL;
            memcpy(row, in, (size_t)n * sizeof *row);
            memcpy(rounded, in, (size_t)n * sizeof *rounded);
            float mx = -INFINITY, mx_r = -INFINITY;
            const float sum = isa->softmax_row_bf16(row, n, visible, m, &mx);
            isa->round_bf16_floats(row, n);
            const float sum_r = isa->softmax_row_rounded(rounded, n, visible, m, &mx_r);
            cr_assert_eq(float_bits(sum_r), float_bits(sum), "%s n=%d visible=%d: sum %a, want %a", isa->name, n,
                         visible, sum_r, sum);
            cr_assert_eq(float_bits(mx_r), float_bits(mx), "%s n=%d: max", isa->name, n);
            for (int j = 0; j < n; j++)
                cr_assert_eq(float_bits(rounded[j]), float_bits(row[j]), "%s n=%d visible=%d variant %d: [%d] = %a, want %a",
                             isa->name, n, visible, variant, j, rounded[j], row[j]);
        }
    }
}

/* A masked-out key is a key whose score is -inf, bit for bit: the max, the sum and every
 * entry (the mask's path and the unmasked one sum alike), for every length, vector tail and
 * visible count; softmax_row and softmax_row_bf16 alike. */
TABLE_TEST(softmax, a_mask_is_minus_infinity_bit_for_bit, .timeout = 30)
{
    rng r = {23};
    enum { N = 300 };
    float in[N], masked[N], hidden[N];
    uint8_t mask[N];
    const int sizes[] = {1, 7, 8, 9, 31, 32, 33, 64, 100, 256, 300};
    for (size_t z = 0; z < 2 * (sizeof sizes / sizeof sizes[0]); z++)
        for (int variant = 0; variant < 3; variant++) {
            const mha_softmax_fn soft = z % 2 ? isa->softmax_row_bf16 : isa->softmax_row;
            const int n = sizes[z / 2], visible = variant == 1 ? n / 2 : variant == 2 ? n - n / 3 : n;
            fill_uniform(in, (size_t)n, -20.0f, 20.0f, &r);
            for (int j = 0; j < n; j++)
                mask[j] = (uint8_t)(rng_next(&r) % 3 != 0 ? 1 + rng_next(&r) % 255 : 0); /* any nonzero byte: visible */
            mask[0] = 1; /* a row with a visible key */
            for (int j = 0; j < n; j++) {
                masked[j] = in[j];
                hidden[j] = mask[j] ? in[j] : -INFINITY;
            }
            float mx = -INFINITY, mx_inf = -INFINITY;
            const float sum = soft(masked, n, visible, mask, &mx);
            const float sum_inf = soft(hidden, n, visible, NULL, &mx_inf);
            cr_assert_eq(float_bits(mx), float_bits(mx_inf), "%s n=%d visible=%d: max %a, want %a", isa->name, n, visible,
                         mx, mx_inf);
            cr_assert_eq(float_bits(sum), float_bits(sum_inf), "%s n=%d visible=%d: sum %a, want %a", isa->name, n,
                         visible, sum, sum_inf);
            for (int j = 0; j < n; j++)
                cr_assert_eq(float_bits(masked[j]), float_bits(hidden[j]), "%s n=%d visible=%d: [%d] = %a, want %a",
                             isa->name, n, visible, j, masked[j], hidden[j]);
        }
}

TABLE_TEST(softmax, extreme_scores_stay_finite)
{
    /* differences far beyond exp's range underflow to 0, not NaN */
    float row[20];
    for (int bf16 = 0; bf16 < 2; bf16++) { /* softmax_row, softmax_row_bf16: exp(0) is 1 in both */
        for (int j = 0; j < 20; j++)
            row[j] = j == 3 ? 1e30f : -1e30f;
        float mx = -INFINITY;
        cr_assert_eq((bf16 ? isa->softmax_row_bf16 : isa->softmax_row)(row, 20, 20, NULL, &mx), 1.0f, "%s: sum",
                     isa->name);
        cr_assert_eq(mx, 1e30f);
        for (int j = 0; j < 20; j++)
            cr_assert_eq(row[j], j == 3 ? 1.0f : 0.0f, "%s bf16 %d [%d] = %g", isa->name, bf16, j, row[j]);
    }
}

/* The ref path runs on every machine here, whatever the CPU would pick, so UBSan
 * (make DEBUG=1 test) sees it with NaN and infinite scores: exp of a NaN difference once
 * converted NaN to int32 and shifted a negative value. NaN and -inf differences flush to 0,
 * as the vector versions' in-range mask does. */
Test(softmax, generic_path_takes_non_finite_scores)
{
    float row[8] = {1.0f, NAN, 2.0f, -INFINITY, 0.5f, NAN, 3.0f, -1.0f};
    float mx = -INFINITY;
    float sum = mha_isa_ref.softmax_row(row, 8, 8, NULL, &mx);
    cr_assert_eq(mx, 3.0f, "NaN never becomes the max");
    cr_assert_eq(row[1], 0.0f);
    cr_assert_eq(row[3], 0.0f);
    cr_assert_eq(row[5], 0.0f);
    cr_assert_eq(row[6], 1.0f);
    cr_assert(isfinite(sum) && sum > 1.0f, "sum %g", sum);
    /* an infinite max: inf - inf is NaN for that entry, every other difference is -inf */
    float inf_row[4] = {INFINITY, 1.0f, NAN, -INFINITY};
    mx = -INFINITY;
    sum = mha_isa_ref.softmax_row(inf_row, 4, 4, NULL, &mx);
    cr_assert(isinf(mx) && mx > 0);
    for (int j = 0; j < 4; j++)
        cr_assert_eq(inf_row[j], 0.0f, "[%d] = %g", j, inf_row[j]);
    cr_assert_eq(sum, 0.0f);
}

/* A NaN score never becomes the max nor hides a larger one: every table's max pass skips it
 * as ref's does (a vector max taking the NaN operand would lose its lane's max so far). The
 * max 3 sits in lane 0 of the first vector and NaNs in lane 0 of the later ones of 8 and 16
 * lanes and of the 64-entry steps, and in the tail. */
TABLE_TEST(softmax, a_nan_score_never_hides_the_max)
{
    enum { N = 150 };
    const int nans[] = {8, 16, 64, 72, 80, 128, 136, 144};
    uint8_t mask[N];
    for (int j = 0; j < N; j++)
        mask[j] = j % 5 != 3;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int masked = 0; masked < 2; masked++) {
            float row[N];
            for (int j = 0; j < N; j++)
                row[j] = -1.0f - 0.1f * (float)(j % 7);
            row[0] = 3.0f;
            for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
                row[nans[i]] = NAN;
            float mx = -INFINITY;
            const float sum = (bf16 ? isa->softmax_row_bf16 : isa->softmax_row)(row, N, N, masked ? mask : NULL, &mx);
            cr_assert_eq(mx, 3.0f, "%s bf16 %d masked %d: max %g", isa->name, bf16, masked, mx);
            cr_assert_eq(row[0], 1.0f, "%s bf16 %d masked %d", isa->name, bf16, masked);
            for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
                cr_assert_eq(row[nans[i]], 0.0f, "%s bf16 %d masked %d: [%d] = %g", isa->name, bf16, masked, nans[i],
                             row[nans[i]]);
            cr_assert(isfinite(sum) && sum > 1.0f, "%s: sum %g", isa->name, sum);
        }
}

/* softmax_rows is softmax_row row by row, bit for bit (entries, max and sum), whatever the
 * rows hold: lengths around the vector widths and the 64-lane steps, rows ld apart with
 * garbage between, a NaN, an all −∞ row, a row whose max is the last entry; likewise
 * softmax_rows_rounded and softmax_row_rounded where a table has them. */
typedef void (*softmax_rows_fn)(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);

static void check_rows(const mha_isa *isa, const char *what, softmax_rows_fn rows_fn, mha_softmax_fn row_fn,
                       rng *r)
{
    enum { M = 5, N = 300, LD = 307 };
    static float in[M * LD], rows[M * LD], each[M * LD];
    const int sizes[] = {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 128, 256, 300};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int m = 1; m <= M; m += 2) {
            const int n = sizes[z];
            fill_uniform(in, (size_t)M * LD, -30.0f, 30.0f, r);
            in[0] = NAN;
            for (int j = 0; m > 1 && j < n; j++)
                in[LD + j] = -INFINITY;
            if (m > 2)
                in[2 * LD + n - 1] = 40.0f;
            memcpy(rows, in, sizeof in);
            memcpy(each, in, sizeof in);
            float mx[2 * M], sum[2 * M], mx1[M], sum1[M];
            memset(mx, 0x7f, sizeof mx);
            memset(sum, 0x7f, sizeof sum);
            rows_fn(rows, LD, m, n, mx, sum, 2);
            for (int i = 0; i < m; i++) {
                mx1[i] = -INFINITY;
                sum1[i] = row_fn(each + i * LD, n, n, NULL, &mx1[i]);
                cr_assert_eq(float_bits(mx[2 * i]), float_bits(mx1[i]), "%s %s n=%d row %d: max %a, want %a",
                             isa->name, what, n, i, mx[2 * i], mx1[i]);
                cr_assert_eq(float_bits(sum[2 * i]), float_bits(sum1[i]), "%s %s n=%d row %d: sum %a, want %a",
                             isa->name, what, n, i, sum[2 * i], sum1[i]);
            }
            for (int j = 0; j < M * LD; j++)
                cr_assert_eq(float_bits(rows[j]), float_bits(each[j]), "%s %s n=%d m=%d: [%d] = %a, want %a",
                             isa->name, what, n, m, j, rows[j], each[j]);
        }
}

TABLE_TEST(softmax, rows_are_softmax_row_row_by_row, .timeout = 30)
{
    rng r = {29};
    check_rows(isa, "softmax_rows", isa->softmax_rows, isa->softmax_row, &r);
    cr_assert_eq(isa->softmax_rows_rounded == NULL, isa->softmax_row_rounded == NULL, "%s: softmax_rows_rounded",
                 isa->name);
    if (isa->softmax_rows_rounded)
        check_rows(isa, "softmax_rows_rounded", isa->softmax_rows_rounded, isa->softmax_row_rounded, &r);
}

/* softmax_rows16 is softmax_row16 row by row into the A panels' rows, bit for bit (the tiles,
 * each row's max and sum), for row counts across a panel's 16. */
TABLE_TEST(softmax, rows16_are_softmax_row16_row_by_row, .timeout = 30)
{
    rng r = {31};
    enum { M = 20, N = 300, LD = 301, KP = 320 };
    static float in[M * LD], rows[M * LD], each[M * LD];
    static mha_bf16 got[2 * 16 * KP], want[2 * 16 * KP];
    if (!isa->softmax_rows16)
        cr_skip_test("isa %s has no softmax_rows16 (nor softmax_row16)", isa->name);
    const int sizes[] = {1, 15, 16, 17, 33, 64, 65, 256, 300};
    const int counts[] = {1, 3, 16, 17, 20};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const int n = sizes[z], m = counts[c], kt = (int)(mha_bk_kp(n) / MHA_BT_K);
            fill_uniform(in, (size_t)M * LD, -30.0f, 30.0f, &r);
            in[0] = NAN;
            for (int j = 0; m > 1 && j < n; j++)
                in[LD + j] = -INFINITY;
            memcpy(rows, in, sizeof in);
            memcpy(each, in, sizeof in);
            memset(got, 0xff, sizeof got);
            memset(want, 0xff, sizeof want);
            float mx[2 * M], sum[2 * M];
            isa->softmax_rows16(rows, LD, m, n, mx, sum, 2, got);
            for (int i = 0; i < m; i++) {
                float mx1 = -INFINITY;
                const float sum1 = isa->softmax_row16(each + i * LD, n, n, NULL, &mx1, want + mha_bk_a_row(i, kt));
                cr_assert_eq(float_bits(mx[2 * i]), float_bits(mx1), "%s n=%d row %d: max %a, want %a", isa->name, n,
                             i, mx[2 * i], mx1);
                cr_assert_eq(float_bits(sum[2 * i]), float_bits(sum1), "%s n=%d row %d: sum %a, want %a", isa->name,
                             n, i, sum[2 * i], sum1);
            }
            for (size_t e = 0; e < sizeof got / sizeof got[0]; e++)
                cr_assert_eq(got[e], want[e], "%s n=%d m=%d: tile element %zu = %#x, want %#x", isa->name, n, m, e,
                             got[e], want[e]);
        }
}

/* merge_row and scale_row are the merge rule's scalar loops bit for bit (each product and the
 * sum rounded once), for lengths around the vector widths, in place for scale_row, on values
 * with infinities, NaN, signed zeros and denormals among them. */
TABLE_TEST(softmax, merge_loops_are_the_scalar_rule, .timeout = 30)
{
    rng r = {37};
    enum { N = 70 };
    float z[N], zc[N], got[N], want[N];
    const float odd[] = {INFINITY, -INFINITY, NAN, -0.0f, 0x1p-140f, -0x1p-130f, 3e38f};
    const float factors[][2] = {{0.75f, 0.25f}, {1.0f, 0x1p-20f}, {0.0f, 1.0f}, {0x1p-100f, 3.0f}};
    for (int n = 0; n <= N; n++)
        for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++) {
            fill_uniform(z, N, -4.0f, 4.0f, &r);
            fill_uniform(zc, N, -4.0f, 4.0f, &r);
            for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
                z[(7 * i + (size_t)n) % N] = odd[i], zc[(5 * i + 3) % N] = odd[i];
            const float a = factors[f][0], b = factors[f][1];
            memcpy(got, z, sizeof z);
            memcpy(want, z, sizeof z);
            isa->merge_row(got, a, zc, b, n);
            for (int j = 0; j < n; j++)
                want[j] = want[j] * a + zc[j] * b;
            for (int j = 0; j < N; j++)
                cr_assert_eq(float_bits(got[j]), float_bits(want[j]), "%s merge_row n=%d: [%d] = %a, want %a",
                             isa->name, n, j, got[j], want[j]);
            memcpy(got, z, sizeof z);
            memcpy(want, z, sizeof z);
            isa->scale_row(got, got, b, n); /* in place, as the division by the sum */
            for (int j = 0; j < n; j++)
                want[j] = want[j] * b;
            for (int j = 0; j < N; j++)
                cr_assert_eq(float_bits(got[j]), float_bits(want[j]), "%s scale_row n=%d: [%d] = %a, want %a",
                             isa->name, n, j, got[j], want[j]);
            isa->scale_row(got, zc, a, n); /* from another row, as a first chunk */
            for (int j = 0; j < n; j++)
                want[j] = zc[j] * a;
            for (int j = 0; j < N; j++)
                cr_assert_eq(float_bits(got[j]), float_bits(want[j]), "%s scale_row from zc n=%d: [%d] = %a, want %a",
                             isa->name, n, j, got[j], want[j]);
        }
}

TABLE_TEST(softmax, fully_hidden_row_is_zero)
{
    uint8_t none[40] = {0};
    float row[40];
    for (int j = 0; j < 40; j++)
        row[j] = (float)j;
    float mx = -INFINITY;
    cr_assert_eq(isa->softmax_row(row, 40, 40, none, &mx), 0.0f);
    cr_assert(isinf(mx) && mx < 0, "the max of nothing stays -inf");
    for (int j = 0; j < 40; j++)
        cr_assert_eq(row[j], 0.0f, "%s [%d] = %g", isa->name, j, row[j]);
}

/* A row in chunks against a running max, rescaled as the max grows (what attention.c does
 * for long rows), equals the whole row's softmax: the same tolerance as above plus one
 * rounding per rescale. */
TABLE_TEST(softmax, chunks_with_a_running_max_match_the_whole_row, .timeout = 30)
{
    rng r = {11};
    enum { N = 700 };
    float in[N], row[N];
    uint8_t mask[N];
    for (int variant = 0; variant < 3; variant++) {
        /* rising scores make the max grow chunk after chunk */
        for (int j = 0; j < N; j++)
            in[j] = rng_uniform(&r, -10.0f, 10.0f) + (variant == 1 ? 0.05f * (float)j : 0.0f);
        for (int j = 0; j < N; j++)
            mask[j] = rng_next(&r) % 4 != 0;
        const uint8_t *m = variant == 2 ? mask : NULL;
        const int visible = variant == 2 ? 650 : N, chunk = 128;
        memcpy(row, in, sizeof row);
        float mx = -INFINITY, total = 0.0f;
        for (int c0 = 0; c0 < N; c0 += chunk) {
            int n = N - c0 < chunk ? N - c0 : chunk, vis = visible - c0 < 0 ? 0 : visible - c0 > n ? n : visible - c0;
            float before = mx;
            float part = isa->softmax_row(row + c0, n, vis, m ? m + c0 : NULL, &mx);
            float corr = total > 0.0f && before != mx ? expf(before - mx) : 1.0f;
            total = total * corr + part;
            for (int j = 0; j < c0; j++) /* rescale the earlier chunks, as Z is */
                row[j] *= corr;
        }
        double dmx = -INFINITY, dsum = 0;
        for (int j = 0; j < visible; j++)
            if (!m || m[j])
                dmx = in[j] > dmx ? in[j] : dmx;
        for (int j = 0; j < visible; j++)
            if (!m || m[j])
                dsum += exp((double)in[j] - dmx);
        for (int j = 0; j < N; j++) {
            int vis = j < visible && (!m || m[j]);
            double want = vis ? exp((double)in[j] - dmx) / dsum : 0.0;
            double got = (double)row[j] / total;
            cr_assert(fabs(got - want) <= (tolerance(in[j] - dmx, visible) + 8 * 0x1p-24) * want,
                      "%s variant %d: [%d] = %.9g, want %.9g", isa->name, variant, j, got, want);
        }
    }
}

/* The logit softcap of every table against tanh in double: Cephes' split keeps the error
 * near 2e-7 of tanh on both sides of 0.625 (no cancellation below it); 1e-6 · cap, a margin of
 * five, fails a wrong branch, a lost sign or a tail lane left as it was. Values past the tail
 * stay untouched. ±∞ and the largest floats saturate to ±cap. */
#define SOFTCAP_TOL 1e-6
TABLE_TEST(softmax, softcap_rows_are_cap_tanh_on_every_table)
{
    rng r = {61};
    float in[300], row[304];
    const float caps[] = {50.0f, 3.0f, 0.5f};
    const int sizes[] = {1, 7, 8, 9, 16, 17, 33, 300};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            const int n = sizes[s];
            const float cap = caps[c];
            fill_uniform(in, (size_t)n, -4.0f * cap, 4.0f * cap, &r);
            in[0] = n > 1 ? 0.625f * cap : in[0]; /* the branch point, and tiny values */
            if (n > 2)
                in[1] = -1e-6f * cap, in[2] = 1e-30f;
            memcpy(row, in, (size_t)n * sizeof *row);
            for (int j = n; j < n + 4; j++)
                row[j] = 1234.5f;
            isa->softcap_row(row, n, cap);
            for (int j = 0; j < n; j++) {
                const double want = cap * tanh((double)in[j] / cap);
                cr_assert_leq(fabs(row[j] - want), SOFTCAP_TOL * cap, "%s, n %d, cap %g: [%d] %a -> %a, want %a",
                              isa->name, n, (double)cap, j, (double)in[j], (double)row[j], want);
            }
            for (int j = n; j < n + 4; j++)
                cr_assert_eq(row[j], 1234.5f, "%s: element %d past the row was written", isa->name, j);
        }
    float big[4] = {INFINITY, -INFINITY, 3e38f, -3e38f};
    isa->softcap_row(big, 4, 30.0f);
    for (int j = 0; j < 4; j++)
        cr_assert_eq(big[j], j % 2 ? -30.0f : 30.0f, "%s: [%d] = %g", isa->name, j, (double)big[j]);
}
