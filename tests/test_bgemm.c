/* test_bgemm.c — the bf16 products: rounding to bf16, every kernel this CPU runs bitwise
 * against the portable model (a kernel the CPU lacks reports itself skipped, with the reason),
 * the packed layouts and the driver against a double product of the rounded operands, and
 * results that do not depend on how rows are blocked. */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "bgemm.h"
#include "helpers.h"
#include "isa/isa.h"

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

Test(bgemm, rounds_to_nearest_even)
{
    cr_assert_eq(mha_bf16_round(1.0f), 0x3f80);
    cr_assert_eq(mha_bf16_round(-2.0f), 0xc000);
    /* halfway: ties go to the even mantissa, up and down */
    cr_assert_eq(mha_bf16_round(from_bits(0x3f808000u)), 0x3f80);
    cr_assert_eq(mha_bf16_round(from_bits(0x3f818000u)), 0x3f82);
    cr_assert_eq(mha_bf16_round(from_bits(0x3f808001u)), 0x3f81);
    cr_assert_eq(mha_bf16_round(from_bits(0x3f807fffu)), 0x3f80);
    cr_assert_eq(mha_bf16_round(INFINITY), 0x7f80);
    cr_assert_eq(mha_bf16_round(-INFINITY), 0xff80);
    cr_assert_eq(mha_bf16_round(from_bits(0x7f7fffffu)), 0x7f80, "FLT_MAX rounds to infinity");
    cr_assert_eq(mha_bf16_round(from_bits(0x7f800001u)), 0x7fc0, "a signalling NaN comes out quiet");
    cr_assert_eq(mha_bf16_round(from_bits(0x00400000u)), 0x0000, "a denormal becomes zero");
    cr_assert_eq(mha_bf16_round(from_bits(0x80000001u)), 0x8000, "keeping its sign");
    for (uint32_t h = 0; h < 0x10000u; h++) /* every bf16 that is not a NaN or a denormal survives the trip */
        if ((h & 0x7f80u) != 0 && (h & 0x7fffu) <= 0x7f80u)
            cr_assert_eq(mha_bf16_round(mha_bf16_float((mha_bf16)h)), h);
}

/* Each table's in-place rounding (round_bf16_floats) gives mha_bf16_round's bits as floats,
 * for every 4099th float pattern (NaNs, infinities, denormals, ties among them) and lengths
 * that end mid-vector, writing nothing past n. */
TABLE_TEST(bgemm, rounding_in_place_is_the_scalar_rounding_in_every_table)
{
    enum { N = 1000 };
    float x[N + 8], want[N];
    for (uint64_t u0 = 0; u0 < 0x100000000ull; u0 += (uint64_t)4099 * N) {
        for (int n = N - 3; n <= N; n += 3) {
            for (int i = 0; i < n; i++) {
                x[i] = from_bits((uint32_t)(u0 + 4099u * (uint32_t)i));
                want[i] = mha_bf16_float(mha_bf16_round(x[i]));
            }
            for (int i = n; i < N + 8; i++)
                x[i] = 7.0f;
            isa->round_bf16_floats(x, n);
            for (int i = 0; i < n; i++)
                cr_assert_eq(memcmp(&x[i], &want[i], sizeof x[i]), 0, "%s: %#x to %a, scalar %a", isa->name,
                             (unsigned)(u0 + 4099u * (uint32_t)i), (double)x[i], (double)want[i]);
            for (int i = n; i < N + 8; i++)
                cr_assert_eq(x[i], 7.0f, "%s: written past n", isa->name);
        }
    }
}

/* Each table's rounding into bf16 (round_to_bf16): mha_bf16_round's bits for the same floats,
 * lengths that end mid-vector, nothing written past n. */
TABLE_TEST(bgemm, rounding_to_bf16_is_the_scalar_rounding_in_every_table)
{
    enum { N = 1000 };
    float x[N];
    mha_bf16 d[N + 8];
    for (uint64_t u0 = 0; u0 < 0x100000000ull; u0 += (uint64_t)4099 * N) {
        for (int n = N - 7; n <= N; n += 1) {
            for (int i = 0; i < n; i++)
                x[i] = from_bits((uint32_t)(u0 + 4099u * (uint32_t)i));
            for (int i = 0; i < N + 8; i++)
                d[i] = 0x1234;
            isa->round_to_bf16(x, n, d);
            for (int i = 0; i < n; i++)
                cr_assert_eq(d[i], mha_bf16_round(x[i]), "%s: %#x to %#x, scalar %#x", isa->name,
                             (unsigned)(u0 + 4099u * (uint32_t)i), (unsigned)d[i], (unsigned)mha_bf16_round(x[i]));
            for (int i = n; i < N + 8; i++)
                cr_assert_eq(d[i], 0x1234, "%s: written past n", isa->name);
        }
    }
}

#if defined(__x86_64__)
/* The CPU's own conversion (vcvtneps2bf16), on a sample of every 97th float. */
__attribute__((target("avx512f,avx512bf16"))) static uint32_t hw_mismatches(void)
{
    uint32_t bad = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 97 * 16) {
        float x[16];
        for (int i = 0; i < 16; i++)
            x[i] = from_bits((uint32_t)(u + 97u * (uint32_t)i));
        __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x));
        uint16_t o[16];
        memcpy(o, &h, sizeof o);
        for (int i = 0; i < 16; i++)
            bad += o[i] != mha_bf16_round(x[i]);
    }
    return bad;
}

Test(bgemm, rounding_matches_the_cpus_conversion, .timeout = 60)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16"))
        cr_skip_test("this CPU has no AVX512_BF16 (vcvtneps2bf16): rounding checked by the cases above only");
    cr_assert_eq(hw_mismatches(), 0u);
}
#else
Test(bgemm, rounding_matches_the_cpus_conversion)
{
    cr_skip_test("not an x86-64 build (the conversion checked is vcvtneps2bf16): the cases above only");
}
#endif

/* Random bf16 of unit scale give sums far from float32's denormals: the model's domain. */
static void fill_bf16(mha_bf16 *x, size_t n, rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = mha_bf16_round(rng_uniform(r, -2.0f, 2.0f));
}

/* The kernel named, from whichever table holds it, if this CPU runs both; else NULL and why. */
static const mha_bkernel *find_bkernel(const char *name, const char **why)
{
    static char buf[256];
    for (int i = 0; i < mha_isa_count; i++) {
        const mha_isa *t = mha_isa_tables[i];
        for (int j = 0; t->bf16[j]; j++) {
            const mha_bkernel *bk = t->bf16[j];
            if (strcmp(bk->name, name) != 0)
                continue;
            const char *no;
            if (!isa_runnable(t->name, &no))
                snprintf(buf, sizeof buf, "isa %s: %s", t->name, no);
            else if (bk->usable && !bk->usable())
                snprintf(buf, sizeof buf, "%s", bk->lacks);
            else if (!mha_bkernel_enable(bk))
                snprintf(buf, sizeof buf, "Linux refused what %s needs (tile data permission)", name);
            else
                return bk;
            *why = buf;
            return NULL;
        }
    }
    *why = "no table holds it";
    return NULL;
}

/* bf16 of every exponent (denormals, zeros of both signs, infinities left out): products that
 * underflow, overflow and cancel, for the kernels whose model holds there (pairs to odd: the
 * FMA kernels fuse what the model rounds, so they part on products outside float32's range). */
static void fill_bf16_wide(mha_bf16 *x, size_t n, rng *r)
{
    for (size_t i = 0; i < n; i++) {
        const int e = (int)(rng_uniform(r, 0.0f, 255.0f)); /* 0 .. 254: denormals and zeros at 0 */
        const unsigned m = (unsigned)rng_uniform(r, 0.0f, 128.0f) & 0x7fu, s = rng_uniform(r, 0.0f, 1.0f) < 0.5f;
        x[i] = (mha_bf16)(s << 15 | (unsigned)e << 7 | m);
    }
}

static void kernel_matches_model_on(const char *name, void (*fill)(mha_bf16 *, size_t, rng *))
{
    const char *why;
    const mha_bkernel *bk = find_bkernel(name, &why);
    if (!bk)
        cr_skip_test("kernel %s not run: %s", name, why);
    rng r = {42};
    for (int kt = 1; kt <= 4; kt++)
        for (int npan = 1; npan <= 2; npan++)
            for (int rows = 1; rows <= 32; rows += rows < 4 ? 1 : 3) {
                const size_t ps = (size_t)kt * 512 + 64; /* a panel stride larger than the panel */
                mha_bf16 *a = aligned_alloc(64, (size_t)32 * 32 * kt * sizeof *a);
                mha_bf16 *b = aligned_alloc(64, 2 * ps * sizeof *b);
                fill(a, (size_t)32 * 32 * kt, &r);
                fill(b, 2 * ps, &r);
                float got[32 * 32], want[32 * 32];
                memset(got, 0, sizeof got), memset(want, 0, sizeof want);
                mha_bk_block(bk, rows, npan, kt, a, b, ps, got);
                mha_bk_block_model(bk->order, rows, npan, kt, a, b, ps, want);
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < 16 * npan; j++)
                        cr_assert(memcmp(&got[i * 32 + j], &want[i * 32 + j], sizeof(float)) == 0,
                                  "%s: rows %d, %d panels, %d k tiles: (%d, %d) %a, model %a", bk->name, rows, npan, kt,
                                  i, j, got[i * 32 + j], want[i * 32 + j]);
                free(a), free(b);
            }
    cr_log_info("bf16 kernel %s matches the model bitwise", bk->name);
}

static void kernel_matches_model(const char *name)
{
    kernel_matches_model_on(name, fill_bf16);
}

Test(bgemm, amx_kernel_matches_model, .timeout = 60) { kernel_matches_model("amx-bf16"); }
Test(bgemm, avx512bf16_kernel_matches_model, .timeout = 60) { kernel_matches_model("avx512-bf16"); }
Test(bgemm, fma_kernel_matches_model, .timeout = 60) { kernel_matches_model("fma-bf16"); }
Test(bgemm, avx2_kernel_matches_model, .timeout = 60) { kernel_matches_model("avx2-bf16"); }
Test(bgemm, neon_kernel_matches_model, .timeout = 60) { kernel_matches_model("neon-bf16"); }
Test(bgemm, bfdot_kernel_matches_model, .timeout = 60) { kernel_matches_model("neon-bfdot"); }
Test(bgemm, bfdot_kernel_matches_model_at_every_exponent, .timeout = 60)
{
    kernel_matches_model_on("neon-bfdot", fill_bf16_wide);
}

/* BFDOT's steps in the model (pairs to odd), on values whose exact sums are known: exact sums
 * kept, an inexact one truncated with its last bit set, a tie too (never to even), a carry into
 * the next binade, exact values below FLT_MIN flushed to a zero of their sign (the operands
 * normal: BFDOT flushes denormal ones before), overflow to infinity, FLT_MAX kept below 2^128. */
Test(bgemm, pairs_to_odd_rounds_each_step_as_bfdot)
{
    static const struct { float x, y; uint32_t want; } cases[] = {
        {1.0f, 0x1p-24f, 0x3f800001u},                 /* 1 + half an ulp: a tie, to odd */
        {1.0f, 0x1p-30f, 0x3f800001u},                 /* below half: still odd */
        {1.0f, 0x1p-23f, 0x3f800001u},                 /* exact */
        {1.0f, 0x1.8p-23f, 0x3f800001u},               /* 1 + 1.5 ulp: truncated to 1 + 1 ulp, odd already */
        {1.0f, 0x1p-22f, 0x3f800002u},                 /* exact, even: kept */
        {1.0f, -0x1p-30f, 0x3f7fffffu},                /* just below 1: truncated, odd */
        {0x1.fffffep0f, 0x1p-23f, 0x40000000u},        /* exact carry into 2 */
        {0x1.fffffep0f, 0x1p-25f, 0x3fffffffu},        /* inexact below 2: truncated, odd */
        {-1.0f, -0x1p-30f, 0xbf800001u},               /* the sign kept */
        {0x1.8p-126f, -0x1p-126f, 0x00000000u},        /* 2^-127, exact as a denormal: +0 */
        {-0x1.8p-126f, 0x1p-126f, 0x80000000u},        /* the same, negative: -0 */
        {0x1.8p-126f, 0x1p-100f, 0x0d800001u},         /* 2^-100 and a little: odd */
        {0x1p-126f, 0x0p0f, 0x00800000u},              /* FLT_MIN exact */
        {0x1.fffffep127f, 0x1p103f, 0x7f7fffffu},      /* past FLT_MAX, below 2^128: truncated to FLT_MAX */
        {0x1.fffffep127f, 0x1p127f, 0x7f800000u},      /* 2^128 and over: infinity */
        {1.0f, -1.0f, 0x00000000u},                    /* an exact zero: +0 */
        {-0.0f, -0.0f, 0x80000000u},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float got = mha_bk_odd_sum(cases[i].x, cases[i].y), swapped = mha_bk_odd_sum(cases[i].y, cases[i].x);
        uint32_t g, s;
        memcpy(&g, &got, sizeof g), memcpy(&s, &swapped, sizeof s);
        cr_assert_eq(g, cases[i].want, "%a + %a: %#010x, want %#010x", cases[i].x, cases[i].y, g, cases[i].want);
        cr_assert_eq(s, g, "%a + %a: not symmetric", cases[i].x, cases[i].y);
    }
}
/* No such test for ref-bf16: its block is the model itself (ref.c), so it could not fail; its
 * sums are held to the exact product by matches_double_product_of_rounded_operands. */

Test(bgemm, unknown_or_another_tables_kernel_is_refused)
{
    const mha_bkernel *bk;
    char why[256];
    cr_assert_eq(mha_bkernel_select(&mha_isa_ref, "tpu", &bk, why, sizeof why), MHA_ERR_CONFIG);
    cr_assert(strstr(why, "not a kernel of isa ref (it has ref-bf16)"), "%s", why);
#if defined(__x86_64__)
    cr_assert_eq(mha_bkernel_select(&mha_isa_avx2, "fma-bf16", &bk, why, sizeof why), MHA_ERR_CONFIG);
    cr_assert(strstr(why, "not a kernel of isa avx2 (it has avx2-bf16)"), "%s", why);
    cr_assert_eq(mha_bkernel_select(&mha_isa_avx512, "avx2-bf16", &bk, why, sizeof why), MHA_ERR_CONFIG);
#endif
}

typedef struct bcase { int m, n, k; int prepacked; float beta; } bcase;
typedef struct bcase_on { bcase g; table_param on; } bcase_on;

/* Every shape on every bf16 kernel of every table (one this CPU lacks: Criterion's skip). */
ParameterizedTestParameters(bgemm, matches_double_product_of_rounded_operands)
{
    static const bcase shapes[] = {
        {1, 1, 1, 0, 0}, {1, 64, 768, 0, 0}, {3, 33, 17, 1, 1}, {16, 16, 32, 0, 0}, {17, 47, 65, 1, 0},
        {32, 32, 64, 0, 1}, {33, 100, 391, 0, 1}, {100, 192, 768, 1, 0}, {64, 520, 64, 0, 1}, {7, 5, 800, 1, 0},
    };
    return TABLE_CASES(bcase_on, shapes, 1);
}

/* Each kernel's sum of rounded float32 terms against the exact (double) sum: k terms of unit
 * products accumulate at most k·2^-24 relative rounding each; 1e-5 of Σ|a||b| is generous at
 * k ≤ 800 and far below one bf16 rounding (2^-9) of an operand, which a packing or layout
 * mistake produces. */
#define BGEMM_TOL 1e-5

ParameterizedTest(bcase_on *param, bgemm, matches_double_product_of_rounded_operands, .timeout = 60)
{
    const bcase *g = &param->g;
    const int m = g->m, n = g->n, kk = g->k;
    rng r = {(uint64_t)m * 1000 + (uint64_t)n};
    float *a = malloc((size_t)m * kk * sizeof *a), *bsrc = malloc((size_t)kk * n * sizeof *bsrc);
    float *c0 = malloc((size_t)m * n * sizeof *c0), *c = malloc((size_t)m * n * sizeof *c);
    fill_uniform(a, (size_t)m * kk, -1.0f, 1.0f, &r);
    fill_uniform(bsrc, (size_t)kk * n, -1.0f, 1.0f, &r);
    fill_uniform(c0, (size_t)m * n, -1.0f, 1.0f, &r);
    const size_t ps = mha_bk_ps(kk);
    mha_bf16 *b = aligned_alloc(64, mha_round_up(mha_bk_b_elems(kk, n) * 2, 64));
    mha_bf16 *ap = aligned_alloc(64, mha_round_up(mha_bk_a_elems(m, kk) * 2, 64));
    mha_bf16 *apack = aligned_alloc(64, mha_round_up(mha_bgemm_apack_elems(kk) * 2, 64));
    const float alpha = 0.5f;
    const mha_bkernel *bk;
    const mha_isa *isa = table_or_skip(&param->on, &bk);
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("", isa, &k), MHA_OK);
    mha_bk_pack_b(&k, mha_mat_rows(&k, bsrc, n), 0, kk, n, b, ps);
    mha_bk_pack_a(&k, mha_mat_rows(&k, a, kk), 0, m, kk, ap);
    memcpy(c, c0, (size_t)m * n * sizeof *c);
    mha_bk_begin(bk);
    mha_bgemm(bk, &k, m, n, kk, alpha, g->prepacked ? ap : NULL, mha_mat_rows(&k, a, kk), b, ps, g->beta,
              mha_mat_rows(&k, c, n), apack);
    mha_bk_end(bk);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < kk; p++) {
                const double x = mha_bf16_float(mha_bf16_round(a[(size_t)i * kk + p]));
                const double y = mha_bf16_float(mha_bf16_round(bsrc[(size_t)p * n + j]));
                s += x * y, mag += fabs(x * y);
            }
            const double want = alpha * s + g->beta * c0[(size_t)i * n + j];
            const double got = c[(size_t)i * n + j];
            cr_assert(fabs(got - want) <= BGEMM_TOL * (alpha * mag + 1.0), "%s/%s %dx%dx%d: (%d, %d) %g vs %g",
                      isa->name, bk->name, m, n, kk, i, j, got, want);
        }
    free(a), free(bsrc), free(c0), free(c), free(b), free(ap), free(apack);
}

/* Row i of a product is the same bits whether it is computed among 100 rows or alone, on
 * every kernel; and every kernel that sums even first (fma-bf16, avx2-bf16, ref-bf16) gives the
 * model's bits through the whole driver, whatever table packs and finishes it. */
BKERNEL_TEST(bgemm, rows_do_not_depend_on_blocking, .timeout = 60)
{
    const int m = 100, n = 70, kk = 200;
    rng r = {5};
    float *a = malloc((size_t)m * kk * sizeof *a), *bsrc = malloc((size_t)kk * n * sizeof *bsrc);
    float *all = malloc((size_t)m * n * sizeof *all), *one = malloc((size_t)n * sizeof *one);
    float *ref = malloc((size_t)m * n * sizeof *ref);
    fill_uniform(a, (size_t)m * kk, -1.0f, 1.0f, &r);
    fill_uniform(bsrc, (size_t)kk * n, -1.0f, 1.0f, &r);
    const size_t ps = mha_bk_ps(kk);
    mha_bf16 *b = aligned_alloc(64, mha_round_up(mha_bk_b_elems(kk, n) * 2, 64));
    mha_bf16 *apack = aligned_alloc(64, mha_round_up(mha_bgemm_apack_elems(kk) * 2, 64));
    mha_kernel kr;
    cr_assert_eq(mha_kernel_select("", &mha_isa_ref, &kr), MHA_OK);
    mha_bk_pack_b(&kr, mha_mat_rows(&kr, bsrc, n), 0, kk, n, b, ps);
    mha_bgemm(mha_isa_ref.bf16[0], &kr, m, n, kk, 1.0f, NULL, mha_mat_rows(&kr, a, kk), b, ps, 0.0f,
              mha_mat_rows(&kr, ref, n), apack);
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("", isa, &k), MHA_OK);
    mha_bk_pack_b(&k, mha_mat_rows(&k, bsrc, n), 0, kk, n, b, ps);
    mha_bk_begin(bk);
    mha_bgemm(bk, &k, m, n, kk, 1.0f, NULL, mha_mat_rows(&k, a, kk), b, ps, 0.0f, mha_mat_rows(&k, all, n), apack);
    for (int i = 0; i < m; i += 7) {
        mha_bgemm(bk, &k, 1, n, kk, 1.0f, NULL, mha_mat_rows(&k, a + (size_t)i * kk, kk), b, ps, 0.0f,
                  mha_mat_rows(&k, one, n), apack);
        cr_assert(memcmp(one, all + (size_t)i * n, (size_t)n * sizeof *one) == 0, "%s: row %d", bk->name, i);
    }
    mha_bk_end(bk);
    if (bk->order == MHA_BK_EVEN_FIRST) {
        long at = first_bit_difference(all, ref, (size_t)m * n);
        cr_assert_eq(at, -1, "%s/%s and the model differ at %ld", isa->name, bk->name, at);
    }
    free(a), free(bsrc), free(all), free(one), free(ref), free(b), free(apack);
}

/* Each vector table's B packing (a register transpose for Kᵀ) writes what ref's writes, bit for
 * bit: every element rounded the same way, the same zero padding (k past kk, columns past n),
 * from row-major and panel-form sources, transposed or not. */
TABLE_TEST(bgemm, vector_b_packing_matches_scalar_bit_for_bit, .timeout = 60)
{
    mha_kernel k, scalar;
    kernel_and_ref(isa, &k, &scalar);
    const int shapes[][2] = {{1, 1}, {17, 33}, {32, 16}, {64, 100}, {100, 7}, {129, 48}};
    rng r = {17};
    for (int si = 0; si < 6; si++)
        for (int transpose = 0; transpose < 2; transpose++)
            for (int panels = 0; panels < 2; panels++) {
                const int kk = shapes[si][0], n = shapes[si][1];
                const int rows = transpose ? n : kk, cols = transpose ? kk : n; /* src: rows × cols */
                const size_t cp = mha_round_up((size_t)cols, (size_t)k.bw);
                float *src = aligned_alloc(64, (size_t)rows * cp * sizeof *src);
                fill_uniform(src, (size_t)rows * cp, -2.0f, 2.0f, &r);
                src[0] = from_bits(0x00000001u); /* a denormal (to signed zero), a NaN, a tie */
                if (rows * cp > 2)
                    src[1] = from_bits(0x7fc01234u), src[2] = from_bits(0x3f808000u);
                const mha_mat m = panels ? mha_mat_panels(&k, src, rows) : mha_mat_rows(&k, src, (ptrdiff_t)cp);
                const size_t ps = mha_bk_ps(kk) + 64, elems = mha_bk_b_elems(kk, n) + 64 * mha_round_up(n, 16) / 16;
                mha_bf16 *x = aligned_alloc(64, mha_round_up(elems * 2, 64)), *y = aligned_alloc(64, mha_round_up(elems * 2, 64));
                memset(x, 0xAB, elems * 2);
                memset(y, 0xAB, elems * 2);
                mha_bk_pack_b(&k, m, transpose, kk, n, x, ps);
                mha_bk_pack_b(&scalar, m, transpose, kk, n, y, ps);
                for (size_t i = 0; i < elems; i++)
                    cr_assert_eq(x[i], y[i], "%s: k %d, n %d, %s, %s: element %zu: %#06x, ref %#06x", isa->name, kk,
                                 n, transpose ? "transposed" : "as is", panels ? "panels" : "rows", i, x[i], y[i]);
                free(src), free(x), free(y);
            }
}

/* B packed from bf16 tensors (mha_bk_pack_b_bf16: the core's bf16 K and V, by blocks of rows
 * with the rows ahead prefetched) writes what the table's packing of the same values as floats
 * writes, bit for bit, padding included: transposed (K: whole 16-row panels and a short last
 * one, odd and even k, one element) or not (V: key pairs by blocks, odd key counts, feature
 * panels whole and not), rows wider than the matrix. */
TABLE_TEST(bgemm, bf16_tensor_packing_matches_the_float_packing, .timeout = 60)
{
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("", isa, &k), MHA_OK);
    const int shapes[][2] = {{1, 1}, {2, 16}, {17, 33}, {64, 100}, {128, 256}, {257, 48}, {130, 31}};
    rng r = {29};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int transpose = 0; transpose < 2; transpose++) {
            const int kk = shapes[si][0], n = shapes[si][1];
            const int rows = transpose ? n : kk, cols = transpose ? kk : n, ld = cols + 6; /* src: rows × cols */
            const size_t cp = mha_round_up((size_t)cols, (size_t)k.bw);
            mha_bf16 *s16 = malloc((size_t)rows * ld * sizeof *s16);
            float *sf = aligned_alloc(64, (size_t)rows * cp * sizeof *sf);
            for (int i = 0; i < rows; i++)
                for (int c = 0; c < cols; c++) {
                    s16[(size_t)i * ld + c] = mha_bf16_round(rng_uniform(&r, -2.0f, 2.0f));
                    sf[(size_t)i * cp + c] = mha_bf16_float(s16[(size_t)i * ld + c]);
                }
            const size_t ps = mha_bk_ps(kk) + 64, elems = mha_bk_b_elems(kk, n) + 64 * mha_round_up(n, 16) / 16;
            mha_bf16 *x = aligned_alloc(64, mha_round_up(elems * 2, 64)), *y = aligned_alloc(64, mha_round_up(elems * 2, 64));
            memset(x, 0xAB, elems * 2);
            memset(y, 0xAB, elems * 2);
            mha_bk_pack_b_bf16(&k, s16, ld, transpose, kk, n, x, ps);
            mha_bk_pack_b(&k, mha_mat_rows(&k, sf, (ptrdiff_t)cp), transpose, kk, n, y, ps);
            for (size_t i = 0; i < elems; i++)
                cr_assert_eq(x[i], y[i], "%s: k %d, n %d, %s: element %zu: %#06x, from floats %#06x", isa->name, kk, n,
                             transpose ? "transposed" : "as is", i, x[i], y[i]);
            free(s16), free(sf), free(x), free(y);
        }
}

/* Each table's pair interleave (the bf16 decode's gather of a cache chunk into panels) writes
 * what ref's writes, and only the pairs asked for: from rows of 16 at strides 16 (Kᵀ of a
 * 16-slot block), 24 and 136 (V rows), 1 to 64 pairs, with and without a prefetch address;
 * from a bf16 cache (interleave_pairs) and an int8 one (interleave_pairs[INT8]: each int8, all of
 * −128 .. 127 appear, exactly in bf16). */
TABLE_TEST(bgemm, vector_pair_interleave_matches_scalar)
{
    const size_t lds[] = {16, 24, 136};
    const int counts[] = {1, 3, 8, 64};
    for (int i8 = 0; i8 < 2; i8++)
        for (int li = 0; li < 3; li++)
            for (int ci = 0; ci < 4; ci++) {
                const size_t ld = lds[li], n = (size_t)2 * counts[ci] * ld;
                const int pairs = counts[ci], cap = 2 * MHA_BT_N * (pairs + 1);
                mha_bf16 *src16 = malloc(n * sizeof *src16), x[2 * MHA_BT_N * 65], y[2 * MHA_BT_N * 65];
                int8_t *src8 = malloc(n);
                for (size_t i = 0; i < n; i++)
                    src16[i] = (mha_bf16)(i * 40503u + 7u), src8[i] = (int8_t)(uint8_t)(i * 37u + 11u);
                memset(x, 0xAB, sizeof x);
                memset(y, 0xAB, sizeof y);
                const char *pf = ci % 2 ? (const char *)src8 : NULL;
                const mha_kv_type type = i8 ? MHA_KV_INT8 : MHA_KV_BF16;
                const void *src = i8 ? (const void *)src8 : (const void *)src16;
                isa->interleave_pairs[type](src, ld, pairs, x, pf);
                mha_isa_ref.interleave_pairs[type](src, ld, pairs, y, NULL);
                for (int i = 0; i < cap; i++)
                    cr_assert_eq(x[i], y[i], "%s, %s: ld %zu, %d pairs: element %d: %#06x, ref %#06x", isa->name,
                                 i8 ? "int8" : "bf16", ld, pairs, i, x[i], y[i]);
                for (int p = 0; p < pairs; p++) /* and ref's is the layout: dst[32p + 2i + e] = row 2p + e */
                    for (int i = 0; i < MHA_BT_N; i++)
                        for (int e = 0; e < 2; e++) {
                            const size_t at = (size_t)(2 * p + e) * ld + i;
                            const mha_bf16 got = y[32 * p + 2 * i + e];
                            cr_assert(i8 ? mha_bf16_float(got) == (float)src8[at] : got == src16[at],
                                      "%s: pair %d, column %d", i8 ? "int8" : "bf16", p, i);
                        }
                cr_assert_eq(y[2 * MHA_BT_N * pairs], 0xABAB, "written past the pairs");
                free(src16), free(src8);
            }
}

/* An int8 cache's blocks read back: every table's scale_rows[INT8] writes ref's bits, ref's is
 * (float)q · scale, + zero with zero points (K), the row's each, and nothing past n columns of
 * each row; widths 1 to 40 (tails), rows 1 to 16. */
TABLE_TEST(bgemm, int8_read_back_matches_scalar)
{
    rng r = {77};
    int8_t src[16 * 48];
    float rs[16], rz[16], x[16 * 48], y[16 * 48];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (int8_t)(uint8_t)(i * 53u + 5u);
    fill_uniform(rs, 16, 0.0f, 0.05f, &r);
    fill_uniform(rz, 16, -3.0f, 3.0f, &r);
    const int widths[] = {1, 7, 8, 9, 16, 17, 40}, heights[] = {1, 3, 16};
    for (int wi = 0; wi < 7; wi++)
        for (int hi = 0; hi < 3; hi++)
            for (int zeros = 0; zeros < 2; zeros++) {
                const int n = widths[wi], rows = heights[hi];
                memset(x, 0x7f, sizeof x), memset(y, 0x7f, sizeof y);
                isa->scale_rows[MHA_KV_INT8](src, 48, rows, n, rs, zeros ? rz : NULL, x, 48);
                mha_isa_ref.scale_rows[MHA_KV_INT8](src, 48, rows, n, rs, zeros ? rz : NULL, y, 48);
                for (int i = 0; i < rows; i++)
                    for (int t = 0; t < 48; t++) {
                        const size_t at = (size_t)i * 48 + t;
                        cr_assert_eq(memcmp(&x[at], &y[at], sizeof x[at]), 0, "%s: %d × %d, [%d][%d]: %a, ref %a",
                                     isa->name, rows, n, i, t, (double)x[at], (double)y[at]);
                        const float v = (float)src[at] * rs[i];
                        if (t < n)
                            cr_assert_eq(y[at], zeros ? v + rz[i] : v);
                        else
                            cr_assert_eq(((const uint32_t *)(const void *)y)[at], 0x7f7f7f7fu, "written past n");
                    }
            }
}

/* One product (37 × 57 × 70, alpha 0.7: the last block of columns 25 wide, its second 16 cut
 * short; C's rows ldc apart, ldc >= 57) through kernel bx on table kernel kx and through by on
 * ky, B packed by ky, for betas 0, 1 and 0.3: asserts the same bits over all of C (so neither
 * writes outside the 37 × 57). */
static void products_agree(const mha_bkernel *bx, const mha_kernel *kx, const mha_bkernel *by, const mha_kernel *ky,
                           int ldc, const char *what)
{
    const int m = 37, n = 57, kk = 70;
    rng r = {23};
    float *a = malloc((size_t)m * kk * sizeof *a), *bsrc = malloc((size_t)kk * n * sizeof *bsrc);
    float *c0 = malloc((size_t)m * ldc * sizeof *c0), *x = malloc((size_t)m * ldc * sizeof *x);
    float *y = malloc((size_t)m * ldc * sizeof *y);
    fill_uniform(a, (size_t)m * kk, -1.0f, 1.0f, &r);
    fill_uniform(bsrc, (size_t)kk * n, -1.0f, 1.0f, &r);
    fill_uniform(c0, (size_t)m * ldc, -1.0f, 1.0f, &r);
    const size_t ps = mha_bk_ps(kk);
    mha_bf16 *b = aligned_alloc(64, mha_round_up(mha_bk_b_elems(kk, n) * 2, 64));
    mha_bf16 *apack = aligned_alloc(64, mha_round_up(mha_bgemm_apack_elems(kk) * 2, 64));
    mha_bk_pack_b(ky, mha_mat_rows(ky, bsrc, n), 0, kk, n, b, ps);
    const float betas[] = {0.0f, 1.0f, 0.3f};
    for (int i = 0; i < 3; i++) {
        memcpy(x, c0, (size_t)m * ldc * sizeof *x);
        memcpy(y, c0, (size_t)m * ldc * sizeof *y);
        mha_bk_begin(bx);
        mha_bgemm(bx, kx, m, n, kk, 0.7f, NULL, mha_mat_rows(kx, a, kk), b, ps, betas[i], mha_mat_rows(kx, x, ldc), apack);
        mha_bk_end(bx);
        mha_bk_begin(by);
        mha_bgemm(by, ky, m, n, kk, 0.7f, NULL, mha_mat_rows(ky, a, kk), b, ps, betas[i], mha_mat_rows(ky, y, ldc), apack);
        mha_bk_end(by);
        long at = first_bit_difference(x, y, (size_t)m * ldc);
        cr_assert_eq(at, -1, "%s, beta %g: c[%ld][%ld] %.9g, against %.9g", what, betas[i], at / ldc, at % ldc,
                     x[at < 0 ? 0 : at], y[at < 0 ? 0 : at]);
    }
    free(a), free(bsrc), free(c0), free(x), free(y), free(b), free(apack);
}

/* Each table's driver parts (A rounding, the float32 epilogue) give ref's bits: the same product
 * through a kernel of the table and one of ref's parts, on the portable model. */
TABLE_TEST(bgemm, vector_driver_matches_scalar_bit_for_bit, .timeout = 60)
{
    const mha_bkernel *bk = mha_isa_ref.bf16[0];
    mha_kernel k, scalar;
    kernel_and_ref(isa, &k, &scalar);
    products_agree(bk, &k, bk, &scalar, 57, isa->name);
}

/* A kernel's fused block and epilogue (block_c) gives the bits of its block then the table's
 * epilogue, and writes only C's m × n: every kernel with one that this CPU runs, betas 0, 1 and
 * another, alpha not 1, edge columns and rows, C's rows wider than n. */
Test(bgemm, fused_epilogue_matches_block_then_epilogue, .timeout = 60)
{
    int ran = 0;
    for (int ti = 0; ti < mha_isa_count; ti++)
        for (int j = 0; mha_isa_tables[ti]->bf16[j]; j++) {
            const mha_isa *t = mha_isa_tables[ti];
            const mha_bkernel *bk = t->bf16[j];
            const char *why;
            if (!bk->block_c || find_bkernel(bk->name, &why) != bk)
                continue;
            mha_bkernel apart = *bk;
            apart.block_c = NULL;
            mha_kernel k;
            cr_assert_eq(mha_kernel_select("", t, &k), MHA_OK);
            products_agree(bk, &k, &apart, &k, 61, bk->name);
            ran++;
        }
    if (!ran)
        cr_skip_test("no bf16 kernel with a fused epilogue runs on this CPU");
}

/* mha_bgemm_bias (the projections' bias added as blocks are stored) against C's rows filled with
 * the bias and mha_bgemm with beta 1, bit for bit, on kernel bk: 37 rows (a short last row
 * group), n 57 (the last block 25 wide: its second 16 cut short) and 13 (one short panel); C's
 * rows 61 apart, whose columns past n keep what they held. */
static void bias_agrees(const mha_bkernel *bk, const mha_kernel *k)
{
    const int m = 37, kk = 70, ldc = 61, ns[] = {57, 13};
    rng r = {29};
    float *a = malloc((size_t)m * kk * sizeof *a), *bsrc = malloc((size_t)kk * ldc * sizeof *bsrc);
    float *bias = malloc((size_t)ldc * sizeof *bias), *x = malloc((size_t)m * ldc * sizeof *x);
    float *y = malloc((size_t)m * ldc * sizeof *y);
    fill_uniform(a, (size_t)m * kk, -1.0f, 1.0f, &r);
    fill_uniform(bsrc, (size_t)kk * ldc, -1.0f, 1.0f, &r);
    fill_uniform(bias, (size_t)ldc, -1.0f, 1.0f, &r);
    const size_t ps = mha_bk_ps(kk);
    mha_bf16 *b = aligned_alloc(64, mha_round_up(mha_bk_b_elems(kk, ldc) * 2, 64));
    mha_bf16 *apack = aligned_alloc(64, mha_round_up(mha_bgemm_apack_elems(kk) * 2, 64));
    for (int t = 0; t < 2; t++) {
        const int n = ns[t];
        mha_bk_pack_b(k, mha_mat_rows(k, bsrc, n), 0, kk, n, b, ps);
        fill_uniform(x, (size_t)m * ldc, -1.0f, 1.0f, &r); /* what C held: unread */
        for (int i = 0; i < m; i++)
            memcpy(y + (size_t)i * ldc, x + (size_t)i * ldc, (size_t)ldc * sizeof *y);
        mha_mat_fill_rows(k, mha_mat_rows(k, y, ldc), m, n, bias);
        mha_bk_begin(bk);
        mha_bgemm_bias(bk, k, m, n, kk, NULL, mha_mat_rows(k, a, kk), b, ps, bias, mha_mat_rows(k, x, ldc), apack);
        mha_bgemm(bk, k, m, n, kk, 1.0f, NULL, mha_mat_rows(k, a, kk), b, ps, 1.0f, mha_mat_rows(k, y, ldc), apack);
        mha_bk_end(bk);
        const long at = first_bit_difference(x, y, (size_t)m * ldc);
        cr_assert_eq(at, -1, "%s, n %d: c[%ld][%ld] %.9g, against %.9g", bk->name, n, at / ldc, at % ldc,
                     x[at < 0 ? 0 : at], y[at < 0 ? 0 : at]);
    }
    free(a), free(bsrc), free(bias), free(x), free(y), free(b), free(apack);
}

/* Every bf16 kernel this CPU runs, fused epilogue (block_c) or not. */
Test(bgemm, bias_is_c_filled_with_it_then_beta_1, .timeout = 60)
{
    int ran = 0;
    for (int ti = 0; ti < mha_isa_count; ti++)
        for (int j = 0; mha_isa_tables[ti]->bf16[j]; j++) {
            const mha_bkernel *bk = mha_isa_tables[ti]->bf16[j];
            const char *why;
            if (find_bkernel(bk->name, &why) != bk)
                continue;
            mha_kernel k;
            cr_assert_eq(mha_kernel_select("", mha_isa_tables[ti], &k), MHA_OK);
            bias_agrees(bk, &k);
            ran++;
        }
    cr_assert_gt(ran, 0, "ref's bf16 kernel runs everywhere");
}

/* A packing: each row's values rounded at their tile places, zeros past kk to the tile's end
 * and in the last panel's missing rows (whatever the buffer held before). */
TABLE_TEST(bgemm, a_packing_places_rows_and_pads_with_zeros)
{
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("", isa, &k), MHA_OK);
    const int rows = 21, kk = 40; /* two panels, the second with 5 rows; two k tiles, the second 8 wide */
    const size_t kp = mha_bk_kp(kk), n = mha_bk_a_elems(rows, kk);
    rng r = {5};
    float *a = malloc((size_t)rows * kk * sizeof *a);
    fill_uniform(a, (size_t)rows * kk, -3.0f, 3.0f, &r);
    mha_bf16 *dst = malloc(n * sizeof *dst);
    memset(dst, 0xAB, n * sizeof *dst);
    mha_bk_pack_a(&k, mha_mat_rows(&k, a, kk), 0, rows, kk, dst);
    for (int i = 0; i < 32; i++)
        for (int p = 0; p < (int)kp; p++) {
            const mha_bf16 got = dst[(size_t)(i / 16) * 16 * kp + (size_t)(p / 32) * 512 + (size_t)(i % 16) * 32 + p % 32];
            const mha_bf16 want = i < rows && p < kk ? mha_bf16_round(a[(size_t)i * kk + p]) : 0;
            cr_assert_eq(got, want, "%s: row %d, k %d: %#06x, want %#06x", isa->name, i, p, got, want);
        }
    free(a), free(dst);
}

/* ---- bf16 decode tiles (decode_scores16, decode_values16) ---- */

/* The cache's element e of a bf16 (i8 = 0) or int8 run as float, and back from a value the
 * test chose representable. */
static float cache_elem(const void *run, int i8, size_t e)
{
    return i8 ? (float)((const int8_t *)run)[e] : mha_bf16_float(((const mha_bf16 *)run)[e]);
}
static void set_elem(void *run, int i8, size_t e, float x)
{
    if (i8)
        ((int8_t *)run)[e] = (int8_t)x;
    else
        ((mha_bf16 *)run)[e] = mha_bf16_round(x);
}

/* The model as a kernel, one per order: bgemm's packing and epilogue around mha_bk_block_model. */
#define MODEL_KERNEL(order)                                                                                         \
    static void model_block_##order(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, \
                                    float *acc, int pf)                                                            \
    {                                                                                                              \
        (void)pf;                                                                                                  \
        mha_bk_block_model(order, rows, npan, kt, a, b, ps, acc);                                                  \
    }
MODEL_KERNEL(MHA_BK_EVEN_FIRST)
MODEL_KERNEL(MHA_BK_ODD_FIRST)
MODEL_KERNEL(MHA_BK_TILE_LANES)
static const mha_bkernel model_kernels[] = {
    [MHA_BK_EVEN_FIRST] = {.name = "model-even", .order = MHA_BK_EVEN_FIRST, .block = model_block_MHA_BK_EVEN_FIRST},
    [MHA_BK_ODD_FIRST] = {.name = "model-odd", .order = MHA_BK_ODD_FIRST, .block = model_block_MHA_BK_ODD_FIRST},
    [MHA_BK_TILE_LANES] = {.name = "model-tile", .order = MHA_BK_TILE_LANES, .block = model_block_MHA_BK_TILE_LANES},
};

/* One product through bgemm on the model of a kernel order, of float operands holding bf16
 * values: C (m × n) = alpha · A (m × kk) · B (kk × n). */
static void model_product(mha_bk_order order, int m, int n, int kk, float alpha, const float *a, const float *b,
                          float *c)
{
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("", &mha_isa_ref, &k), MHA_OK);
    const size_t ps = mha_bk_ps(kk);
    mha_bf16 *bp = aligned_alloc(64, mha_round_up(mha_bk_b_elems(kk, n) * 2, 64));
    mha_bf16 *apack = aligned_alloc(64, mha_round_up(mha_bgemm_apack_elems(kk) * 2, 64));
    mha_bk_pack_b(&k, mha_mat_rows(&k, b, n), 0, kk, n, bp, ps);
    mha_bgemm(&model_kernels[order], &k, m, n, kk, alpha, NULL, mha_mat_rows(&k, a, kk), bp, ps, 0.0f,
              mha_mat_rows(&k, c, n), apack);
    free(bp), free(apack);
}

/* One table's tiles of one order against the model of that order (the test below). */
static void decode_tiles_check(const mha_isa *isa, mha_bk_order order, rng *rp)
{
    enum { BS = 16, RUNS = 3, SC_LD = 64 };
    const int n[RUNS] = {16, 5, 6}, slots = 27, tiny = 2; /* query `tiny` holds the cancelling pair */
    const float lo = 0x1p-126f;                           /* float32's smallest normal */
    rng r = *rp;
    static const int dks[] = {128, 40, 41};
    for (int i8 = 0; i8 < 2; i8++)
        for (int di = 0, dk; di < 3 && (dk = dks[di]); di++)
            for (int nq = 1; nq <= 9; nq += 4) {
                const size_t blk = (size_t)dk * BS * 2, vblk = (size_t)dk * BS * (i8 ? 1 : 2);
                char *kt = calloc(RUNS, blk), *v = calloc(RUNS, vblk);
                float *q = calloc((size_t)nq * dk, sizeof *q), *e = calloc((size_t)nq * slots, sizeof *e);
                float *kf = malloc((size_t)dk * slots * sizeof *kf), *vf = malloc((size_t)slots * dk * sizeof *vf);
                float *sc = malloc((size_t)nq * SC_LD * sizeof *sc), *want = malloc((size_t)nq * slots * sizeof *want);
                float *p = calloc((size_t)nq * dk, sizeof *p), *zwant = malloc((size_t)nq * dk * sizeof *zwant);
                const void *ktr[RUNS];
                /* K (bf16: an int8 cache's scores are the float32 tiles') and V (bf16 or int8):
                 * random cache elements, each run in its own block; the last two keys' V are −1
                 * and 1 and the last two features of K are 1 (the cancelling pairs) */
                for (int ri = 0, at = 0; ri < RUNS; at += n[ri++]) {
                    ktr[ri] = kt + (size_t)ri * blk;
                    for (int t = 0; t < n[ri]; t++)
                        for (int c = 0; c < dk; c++) {
                            const int key = at + t;
                            float kx = rng_uniform(&r, -2.0f, 2.0f);
                            float vx = i8 ? (float)((int)(rng_next(&r) % 255) - 127) : rng_uniform(&r, -2.0f, 2.0f);
                            kx = c >= dk - 2 ? 1.0f : kx;
                            vx = key >= slots - 2 ? (key == slots - 2 ? -1.0f : 1.0f) : vx;
                            set_elem(kt + (size_t)ri * blk, 0, (size_t)c * BS + t, kx);
                            set_elem(v + (size_t)ri * vblk, i8, (size_t)t * dk + c, vx);
                            kf[(size_t)c * slots + key] = cache_elem(kt + (size_t)ri * blk, 0, (size_t)c * BS + t);
                            vf[(size_t)key * dk + c] = cache_elem(v + (size_t)ri * vblk, i8, (size_t)t * dk + c);
                        }
                }
                for (int qi = 0; qi < nq; qi++)
                    for (int c = 0; c < dk; c++) /* bf16 values, as the caller rounds them */
                        q[(size_t)qi * dk + c] = qi == tiny ? (c == dk - 2 ? -1.5f * lo : c == dk - 1 ? lo : 0.0f)
                                                           : mha_bf16_float(mha_bf16_round(rng_uniform(&r, -1.0f, 1.0f)));
                for (int qi = 0; qi < nq; qi++)
                    for (int t = 0; t < slots; t++)
                        e[(size_t)qi * slots + t] = qi == tiny ? (t == slots - 2 ? 1.5f * lo : t == slots - 1 ? lo : 0.0f)
                                                               : mha_bf16_float(mha_bf16_round(rng_uniform(&r, 0.0f, 1.0f)));
                const float scale = 0.125f;
                const void *vr[RUNS];
                for (int ri = 0; ri < RUNS; ri++)
                    vr[ri] = v + (size_t)ri * vblk;
                isa->decode_scores16(&(mha_score_rows){q, nq, dk, scale, sc, SC_LD, 0},
                                     &(mha_key_runs){.runs = RUNS, .ld = BS, .n = n, .kt = ktr, .vr = vr}, order);
                model_product(order, nq, slots, dk, scale, q, kf, want);
                for (int qi = 0; qi < nq; qi++) {
                    long at = first_bit_difference(sc + (size_t)qi * SC_LD, want + (size_t)qi * slots, (size_t)slots);
                    cr_assert_eq(at, -1, "%s order %d, V %s, dk %d, %d queries: score (%d, %ld) %a, model %a",
                                 isa->name, (int)order, i8 ? "int8" : "bf16", dk, nq, qi, at, sc[(size_t)qi * SC_LD + (at < 0 ? 0 : at)],
                                 want[(size_t)qi * slots + (at < 0 ? 0 : at)]);
                }
                isa->decode_values16(&(mha_value_rows){e, (size_t)slots, nq, dk, p, (size_t)dk}, RUNS, vr, n,
                                     i8 ? MHA_KV_INT8 : MHA_KV_BF16, NULL, order);
                model_product(order, nq, dk, slots, 1.0f, e, vf, zwant);
                long at = first_bit_difference(p, zwant, (size_t)nq * dk);
                cr_assert_eq(at, -1, "%s order %d, %s, dk %d, %d queries: z (%ld, %ld) %a, model %a", isa->name,
                             (int)order, i8 ? "int8" : "bf16", dk, nq, at / dk, at % dk, p[at < 0 ? 0 : at],
                             zwant[at < 0 ? 0 : at]);
                if (nq > tiny) { /* the pairs did cancel to flushed zeros, made +0 by any padding */
                    cr_assert(zwant[(size_t)tiny * dk] == 0.0f && !signbit(zwant[(size_t)tiny * dk]));
                    cr_assert(want[(size_t)tiny * slots] == 0.0f &&
                              (dk % MHA_BT_K == 0) == !!signbit(want[(size_t)tiny * slots]));
                }
                free(kt), free(v), free(q), free(e), free(kf), free(vf), free(sc), free(want), free(p), free(zwant);
            }
    *rp = r;
}

/* Each table's bf16 decode tiles, reading a cache's blocks in place (runs of 16, 5 and 6 slots
 * of blocks of 16; K bf16, V bf16 or int8), give what the forward's chunk computes on the kernels that
 * sum in their order (even first: ref, avx2, avx512; odd first: avx512), bit for bit: scores = scale · Q·Kᵀ
 * and Z = E·V, against bgemm on the model of that order on the same operands. d_k 128, 40 (a
 * padded k tile) and 41 (an odd feature: a half pair); 27 keys (a half pair); 1 to 9 queries.
 * One query's last two products cancel to a half of float32's smallest normal, flushed to −0
 * as the kernels flush; then the padding makes it +0: a tile without FTZ, or without the
 * padding's + 0, fails. */
BKERNEL_TEST(bgemm, decode_tiles_sum_as_the_kernels_of_their_order, .timeout = 60)
{
    rng r = {2112};
    if (!isa->decode_scores16 || !(isa->decode16_orders >> bk->order & 1u))
        cr_skip_test("isa %s has no bf16 decode tiles that sum as %s does: decode on it runs the forward's chunk",
                     isa->name, bk->name);
    decode_tiles_check(isa, bk->order, &r);
}

/* int8_scores (isa.h): each kernel of every table that has one gives the model's bits (ref's;
 * a kernel this CPU cannot run is noted as skipped), and the model is within its rounding of the float64 score on the same codes and parameters: blocks of
 * 16, 32 and 8 slots (runs of whole groups, two groups in a run, groups of 8; runs of 5 and
 * 21), d_k 44, 128 and 601 (two passes, odd), 1 to 70 queries (a kernel's blocks and their
 * remainders); codes over all of int8, K's
 * channels and the queries with outliers, a group whose scales are all zero, a query of zeros
 * and one below MHA_INT8_TINY (bits only). Then NaN:
 * a NaN scale makes its group's scores NaN, a NaN query feature its query's. */
static void int8_scores_check(const mha_isa *isa, const mha_int8_scores_ops *ops)
{
    enum { RUNS = 3, SC_LD = 96 };
    rng r = {4099};
    for (int BS = 8; BS <= 32; BS *= 2)
        for (int dk = 44; dk <= 601; dk = dk == 44 ? 128 : dk == 128 ? 601 : 602)
            for (int nq = 1; nq <= 70; nq += nq < 5 ? 1 : nq < 9 ? 4 : nq < 21 ? 12 : 49) {
                const int n[RUNS] = {BS, BS == 8 ? BS : BS - 11, BS}; /* 5 of 16, 21 of 32 */
                const int groups = (BS + MHA_KV_GROUP - 1) / MHA_KV_GROUP, gs = BS < MHA_KV_GROUP ? BS : MHA_KV_GROUP;
                const size_t blk = (size_t)dk * BS;
                int8_t *k8 = malloc(RUNS * blk);
                mha_f16 *kh = malloc((size_t)RUNS * groups * 2 * dk * sizeof *kh);
                float *q = malloc((size_t)nq * dk * sizeof *q), *sc = malloc((size_t)nq * SC_LD * sizeof *sc);
                float *want = malloc((size_t)nq * SC_LD * sizeof *want);
                for (size_t i = 0; i < RUNS * blk; i++)
                    k8[i] = (int8_t)(rng_next(&r) & 0xff);
                for (int g = 0; g < RUNS * groups; g++)
                    for (int c = 0; c < dk; c++) { /* channel 5 mod 37: 20× the range; group 1 all zero scales */
                        const float w = c % 37 == 5 ? 20.0f : 1.0f;
                        const float scale = g == 1 ? 0.0f : w * rng_uniform(&r, 0.001f, 0.02f);
                        kh[((size_t)g * 2) * dk + c] = mha_f16_round(scale);
                        kh[((size_t)g * 2 + 1) * dk + c] = mha_f16_round(w * rng_uniform(&r, -1.0f, 1.0f));
                    }
                for (int i = 0; i < nq * dk; i++) /* feature 7 mod 41: 30× the range; query 1 zeros, 3 tiny */
                    q[i] = i / dk == 1 ? 0.0f
                                       : rng_uniform(&r, -1.0f, 1.0f) * (i % dk % 41 == 7 ? 30.0f : 1.0f) *
                                             (i / dk == 3 ? 1e-36f : 1.0f);
                const void *ktr[RUNS];
                const mha_f16 *kpr[RUNS];
                for (int ri = 0; ri < RUNS; ri++)
                    ktr[ri] = k8 + ri * blk, kpr[ri] = kh + (size_t)ri * groups * 2 * dk;
                const mha_key_runs keys = {.runs = RUNS, .ld = BS, .n = n, .kt = ktr, .kp = kpr};
                ops->run(&(mha_score_rows){q, nq, dk, 0.125f, sc, SC_LD, 0}, &keys);
                mha_int8_scores_ref.run(&(mha_score_rows){q, nq, dk, 0.125f, want, SC_LD, 0}, &keys);
                for (int qi = 0, slots = n[0] + n[1] + n[2]; qi < nq; qi++) {
                    const long at =
                        first_bit_difference(sc + (size_t)qi * SC_LD, want + (size_t)qi * SC_LD, (size_t)slots);
                    cr_assert_eq(at, -1, "%s %s, blocks of %d, dk %d, %d queries: score (%d, %ld) %a, the model's %a",
                                 isa->name, ops->name, BS, dk, nq, qi, at, sc[(size_t)qi * SC_LD + (at < 0 ? 0 : at)],
                                 want[(size_t)qi * SC_LD + (at < 0 ? 0 : at)]);
                }
                /* the model against float64: u's rounding (half a step a feature, times its code),
                 * then float32 roundings of sums of the products' magnitudes */
                for (int qi = 0; qi < nq; qi++)
                    for (int ri = 0, at = 0; ri < RUNS && qi != 3; at += n[ri++]) /* 3: below MHA_INT8_TINY */
                        for (int t = 0; t < n[ri]; t++) {
                            const mha_f16 *g = kpr[ri] + (size_t)(t / gs) * 2 * dk;
                            double exact = 0, mag = 0, ucodes = 0;
                            float mq = 0, ms = 0;
                            for (int c = 0; c < dk; c++)
                                mq = fmaxf(mq, fabsf(q[(size_t)qi * dk + c])), ms = fmaxf(ms, mha_f16_float(g[c]));
                            for (int c = 0; c < dk; c++) {
                                const double x = (double)k8[ri * blk + (size_t)c * BS + t] * mha_f16_float(g[c]) +
                                                 mha_f16_float(g[dk + c]);
                                exact += q[(size_t)qi * dk + c] * x;
                                mag += fabs(q[(size_t)qi * dk + c]) * (fabs(x) + fabs(mha_f16_float(g[dk + c])));
                                ucodes += abs(k8[ri * blk + (size_t)c * BS + t]);
                            }
                            const double tol = 0.5 * mq / 32767 * ms * ucodes * 1.001 + 1e-5 * mag;
                            const double got = want[(size_t)qi * SC_LD + at + t] / 0.125;
                            cr_assert(fabs(got - exact) <= tol, "the model, blocks of %d, dk %d: score (%d, %d) %g, "
                                      "float64 %g, bound %g", BS, dk, qi, at + t, got, exact, tol);
                        }
                /* NaN: run 0's first scale, and query 0's feature 3 */
                kh[0] = 0x7e00;
                ops->run(&(mha_score_rows){q, nq, dk, 0.125f, sc, SC_LD, 0}, &keys);
                for (int qi = 0; qi < nq; qi++)
                    for (int t = 0; t < gs && t < n[0]; t++)
                        cr_assert(isnan(sc[(size_t)qi * SC_LD + t]), "%s %s: a NaN scale, score (%d, %d) %g", isa->name, ops->name,
                                  qi, t, sc[(size_t)qi * SC_LD + t]);
                kh[0] = mha_f16_round(0.01f), q[3] = NAN;
                ops->run(&(mha_score_rows){q, nq, dk, 0.125f, sc, SC_LD, 0}, &keys);
                for (int t = 0; t < n[0] + n[1] + n[2]; t++)
                    cr_assert(isnan(sc[t]), "%s %s: a NaN query, score %d %g", isa->name, ops->name, t, sc[t]);
                free(k8), free(kh), free(q), free(sc), free(want);
            }
}

TABLE_TEST(bgemm, int8_scores_match_the_model, .timeout = 60)
{
    if (!isa->int8_scores[0])
        cr_skip_test("isa %s has no int8_scores", isa->name);
    for (int v = 0; isa->int8_scores[v]; v++)
        if (mha_cpu_has_all(isa->int8_scores[v]->needs))
            int8_scores_check(isa, isa->int8_scores[v]);
        else
            note_skipped("bgemm: %s's int8 scores %s: this CPU lacks some of %s", isa->name,
                         isa->int8_scores[v]->name, isa->int8_scores[v]->needs);
}

/* Each table's float32 decode tiles on an int8 cache (decode_scores[INT8]: K per feature with a
 * scale and zero point; decode_values[INT8]: V per slot with a scale and zero point), reading the int8 values and
 * making each value as they load it, give the bits of the float32 tiles on the chunk read back
 * first (scale_rows[INT8]): scores and Z, runs of 16, 5 and 6 slots of blocks of 16 (runs of 32 and
 * 16 of blocks of 32: two groups in a run), d_k 128 and 44 (a part vector of features), 1 to 9
 * queries. The int8 values step a prefetch walk (over the read-back K) as they go: the vector tables to its end, ref
 * not at all; the sums are the same. */
TABLE_TEST(bgemm, int8_decode_tiles_equal_the_read_back_chunk, .timeout = 60)
{
    enum { RUNS = 3, SC_LD = 96 };
    rng r = {8128};
    cr_assert(isa->decode_scores[MHA_KV_INT8] && isa->decode_values[MHA_KV_INT8], "isa %s has no int8 float32 decode tiles",
              isa->name);
    for (int BS = 16; BS <= 32; BS += 16)
        for (int dk = 44; dk <= 128; dk += 84)
            for (int nq = 1; nq <= 9; nq += 4) {
                const int n[RUNS] = {BS, BS == 16 ? 5 : 16, BS == 16 ? 6 : 32}, slots = n[0] + n[1] + n[2];
                const size_t blk = (size_t)dk * BS, groups = (size_t)BS / MHA_KV_GROUP;
                int8_t *k8 = malloc(RUNS * blk), *v8 = malloc(RUNS * blk);
                float vp[RUNS][64], *kp = malloc(RUNS * groups * 2 * dk * sizeof *kp); /* V: scale, zero point */
                mha_f16 *kh = malloc(RUNS * groups * 2 * dk * sizeof *kh); /* K's as the cache holds them */
                float *kf = malloc(RUNS * blk * sizeof *kf), *vf = malloc(RUNS * blk * sizeof *vf);
                float *q = malloc((size_t)nq * dk * sizeof *q), *e = malloc((size_t)nq * slots * sizeof *e);
                float *sc = malloc((size_t)nq * SC_LD * sizeof *sc), *want = malloc((size_t)nq * SC_LD * sizeof *want);
                float *p = calloc((size_t)nq * dk, sizeof *p), *zwant = calloc((size_t)nq * dk, sizeof *zwant);
                const void *k8r[RUNS], *kfr[RUNS], *v8r[RUNS], *vfr[RUNS]; /* V's rows: prefetched by the scores */
                const mha_f16 *kpr[RUNS];
                for (size_t i = 0; i < RUNS * blk; i++)
                    k8[i] = (int8_t)((int)(rng_next(&r) % 255) - 127), v8[i] = (int8_t)((int)(rng_next(&r) % 255) - 127);
                for (size_t i = 0; i < RUNS * groups; i++) {
                    fill_uniform(kp + i * 2 * dk, (size_t)dk, 0.001f, 0.02f, &r);
                    fill_uniform(kp + i * 2 * dk + dk, (size_t)dk, -2.0f, 2.0f, &r);
                }
                for (size_t i = 0; i < RUNS * groups * 2 * dk; i++)
                    kh[i] = mha_f16_round(kp[i]), kp[i] = mha_f16_float(kh[i]);
                for (int ri = 0; ri < RUNS; ri++)
                    for (int t = 0; t < 32; t++)
                        vp[ri][2 * t] = rng_uniform(&r, 0.0f, 0.02f), vp[ri][2 * t + 1] = rng_uniform(&r, -1.0f, 1.0f);
                fill_uniform(q, (size_t)nq * dk, -1.0f, 1.0f, &r);
                fill_uniform(e, (size_t)nq * slots, 0.0f, 1.0f, &r);
                for (int ri = 0; ri < RUNS; ri++) { /* read back: Kᵀ group by group, V by row */
                    for (size_t gi = 0; gi < groups; gi++) {
                        const float *gp = kp + (ri * groups + gi) * 2 * dk;
                        isa->scale_rows[MHA_KV_INT8](k8 + ri * blk + gi * MHA_KV_GROUP, (size_t)BS, dk, MHA_KV_GROUP, gp,
                                                     gp + dk, kf + ri * blk + gi * MHA_KV_GROUP, (size_t)BS);
                    }
                    for (int t = 0; t < n[ri]; t++)
                        isa->scale_rows[MHA_KV_INT8](v8 + ri * blk + (size_t)t * dk, 0, 1, dk, &vp[ri][2 * t],
                                                     &vp[ri][2 * t + 1], vf + ri * blk + (size_t)t * dk, 0);
                    k8r[ri] = k8 + ri * blk, kfr[ri] = kf + ri * blk, kpr[ri] = kh + ri * groups * 2 * dk;
                    v8r[ri] = v8 + ri * blk, vfr[ri] = vf + ri * blk;
                }
                const mha_score_rows got_rows = {q, nq, dk, 0.125f, sc, SC_LD, 0},
                                     want_rows = {q, nq, dk, 0.125f, want, SC_LD, 0};
                const mha_key_runs k8runs = {.runs = RUNS, .ld = BS, .n = n, .kt = k8r, .vr = v8r, .kp = kpr};
                const mha_key_runs kfruns = {.runs = RUNS, .ld = BS, .n = n, .kt = kfr, .vr = vfr};
                isa->decode_scores[MHA_KV_INT8](&got_rows, 0, dk, &k8runs);
                isa->decode_scores[MHA_KV_F32](&want_rows, 0, dk, &kfruns);
                for (int qi = 0; qi < nq; qi++) {
                    long at = first_bit_difference(sc + (size_t)qi * SC_LD, want + (size_t)qi * SC_LD, (size_t)slots);
                    cr_assert_eq(at, -1, "%s, blocks of %d, dk %d, %d queries: score (%d, %ld) %a, read back %a", isa->name,
                                 BS, dk, nq, qi, at, sc[(size_t)qi * SC_LD + (at < 0 ? 0 : at)],
                                 want[(size_t)qi * SC_LD + (at < 0 ? 0 : at)]);
                }
                mha_prefetch ahead = {.at = {kf}, .n = 1, .bytes = RUNS * blk * sizeof *kf};
                mha_prefetch_walk walk = {.pf = &ahead, .per = 16}; /* 16 lines a key: done within the keys */
                for (int ri = 0, at = 0; ri < RUNS; at += n[ri++]) {
                    isa->decode_values[MHA_KV_INT8](&(mha_value_rows){e + at, (size_t)slots, nq, dk, p, (size_t)dk},
                                                    v8 + ri * blk, vp[ri], n[ri], NULL, &walk);
                    isa->decode_values[MHA_KV_F32](&(mha_value_rows){e + at, (size_t)slots, nq, dk, zwant, (size_t)dk},
                                                   vf + ri * blk, NULL, n[ri], NULL, NULL);
                }
                cr_assert_eq(walk.r, isa == &mha_isa_ref ? 0 : 1, "%s, dk %d, %d queries: the prefetch walk at region %d",
                             isa->name, dk, nq, walk.r);
                long at = first_bit_difference(p, zwant, (size_t)nq * dk);
                cr_assert_eq(at, -1, "%s, dk %d, %d queries: z (%ld, %ld) %a, read back %a", isa->name, dk, nq, at / dk,
                             at % dk, p[at < 0 ? 0 : at], zwant[at < 0 ? 0 : at]);
                free(k8), free(v8), free(kp), free(kh), free(kf), free(vf), free(q), free(e), free(sc), free(want), free(p),
                    free(zwant);
            }
}

/* A decode score pass after the first ends as the engine's sub-config ends a beta 1 pass
 * (mha_score_rows.beta_fused): the pass's sums times scale plus the scores so far, rounded once
 * where fused (cortexa57's FMLA), the product rounded first where not (every other sub-config).
 * Every table, float32 and int8 keys: the second pass's sums alone (scale 1 onto zeros: exact
 * either way) give the expected ends of the two-pass scores. */
TABLE_TEST(bgemm, decode_score_passes_end_as_the_sub_config_ends_them, .timeout = 30)
{
    enum { N = 19, DK = 40, C = 24, NQ = 3 };
    rng r = {777};
    float q[NQ * DK], kt[DK * N], one[NQ * N], sums[NQ * N], got[NQ * N];
    int8_t k8[DK * N];
    mha_f16 kp[2 * DK * 2]; /* two groups' scales and zero points */
    fill_uniform(q, NQ * DK, -1.0f, 1.0f, &r);
    fill_uniform(kt, DK * N, -1.0f, 1.0f, &r);
    for (int i = 0; i < DK * N; i++)
        k8[i] = (int8_t)(rng_next(&r) % 255 - 127);
    for (int i = 0; i < 2 * DK * 2; i++)
        kp[i] = mha_f16_round(i % (2 * DK) < DK ? rng_uniform(&r, 0.001f, 0.05f) : rng_uniform(&r, -0.5f, 0.5f));
    const float scale = 0.37f;
    for (mha_kv_type type = MHA_KV_F32; type <= MHA_KV_INT8; type += MHA_KV_INT8 - MHA_KV_F32)
        for (int fused = 0; fused <= 1; fused++) {
            const void *ktr[2] = {type == MHA_KV_INT8 ? (const void *)k8 : (const void *)kt,
                                  type == MHA_KV_INT8 ? (const void *)(k8 + MHA_KV_GROUP)
                                                      : (const void *)(kt + MHA_KV_GROUP)};
            const mha_f16 *kpr[2] = {kp, kp + 2 * DK};
            const int len[2] = {MHA_KV_GROUP, N - MHA_KV_GROUP};
            const mha_key_runs keys = {.runs = 2, .ld = N, .n = len, .kt = ktr, .kp = type == MHA_KV_INT8 ? kpr : NULL};
            const mha_score_rows first = {q, NQ, DK, scale, one, N, fused}, rows = {q, NQ, DK, scale, got, N, fused};
            isa->decode_scores[type](&first, 0, C, &keys);
            memset(sums, 0, sizeof sums);
            isa->decode_scores[type](&(mha_score_rows){q, NQ, DK, 1.0f, sums, N, fused}, C, DK, &keys);
            memcpy(got, one, sizeof got);
            isa->decode_scores[type](&rows, C, DK, &keys);
            float want[NQ * N];
            int parted = 0; /* scores whose two ends differ: the data tell them apart */
            for (int i = 0; i < NQ * N; i++) {
                want[i] = fused ? fmaf(sums[i], scale, one[i]) : sums[i] * scale + one[i];
                parted += fmaf(sums[i], scale, one[i]) != sums[i] * scale + one[i];
            }
            cr_assert_gt(parted, 0, "no score's two pass ends differ: the test cannot tell them apart");
            const long at = first_bit_difference(got, want, NQ * N), i = at < 0 ? 0 : at;
            cr_assert_eq(at, -1, "%s, %s keys, beta_fused %d, score %ld: %a, want %a (first pass %a, second's sum %a)",
                         isa->name, type == MHA_KV_INT8 ? "int8" : "float32", fused, at, got[i], want[i], one[i], sums[i]);
        }
}

/* rows_scores (K's rows read in place: the core's few queries) gives decode_scores' bits on
 * the same keys transposed into one run: 1 to 17 queries (avx2's and neon's lanes of 4 filled
 * and not, avx512's passes of up to 8), d_k 1 to MHA_ROWS_SCORES_DK (whole blocks of 16
 * features, a tail, both), 1 to 33 keys (every key tile and tail), rows wider than d_k; no score
 * written past the keys (sentinels). A table without it is skipped. */
TABLE_TEST(bgemm, rows_scores_equal_the_decode_tiles, .timeout = 120)
{
    enum { N = 33, LD_PAD = 3 };
    if (!isa->rows_scores) {
        note_skipped("bgemm::rows_scores_equal_the_decode_tiles: isa %s has no rows_scores (it transposes K)", isa->name);
        cr_skip_test();
    }
    rng r = {4242};
    const int dks[] = {1, 7, 17, 32, 40, 64, 128, 200, MHA_ROWS_SCORES_DK};
    for (size_t di = 0; di < sizeof dks / sizeof dks[0]; di++)
        for (int nq = 1; nq <= 17; nq++)
            for (int n = 1; n <= N; n += n < 17 ? 1 : 4) {
                const int dk = dks[di], ld = dk + LD_PAD;
                float *q = malloc((size_t)nq * dk * sizeof *q), *k = malloc((size_t)n * ld * sizeof *k);
                float *kt = malloc((size_t)dk * n * sizeof *kt), *sc = malloc((size_t)nq * N * sizeof *sc);
                float *want = malloc((size_t)nq * N * sizeof *want);
                fill_uniform(q, (size_t)nq * dk, -1.0f, 1.0f, &r);
                fill_uniform(k, (size_t)n * ld, -1.0f, 1.0f, &r);
                for (size_t i = 0; i < (size_t)nq * N; i++)
                    sc[i] = want[i] = 12345.0f; /* sentinels past the keys */
                for (int t = 0; t < n; t++)
                    for (int c = 0; c < dk; c++)
                        kt[(size_t)c * n + t] = k[(size_t)t * ld + c];
                const void *ktr[1] = {kt};
                const int len[1] = {n};
                const mha_score_rows want_rows = {q, nq, dk, 0.3f, want, N, 0};
                const mha_key_runs keys = {.runs = 1, .ld = n, .n = len, .kt = ktr};
                isa->decode_scores[MHA_KV_F32](&want_rows, 0, dk, &keys);
                const mha_rows_ahead v = {(const char *)kt, (size_t)dk * sizeof *kt, (size_t)dk * sizeof *kt}; /* a hint */
                isa->rows_scores(&(mha_score_rows){q, nq, dk, 0.3f, sc, N, 0}, &(mha_key_rows){k, ld, n, &v});
                for (int qi = 0; qi < nq; qi++) {
                    const long at = first_bit_difference(sc + (size_t)qi * N, want + (size_t)qi * N, N);
                    cr_assert_eq(at, -1, "%s, dk %d, %d queries, %d keys: score (%d, %ld) %a, decode tiles %a", isa->name,
                                 dk, nq, n, qi, at, sc[(size_t)qi * N + (at < 0 ? 0 : at)],
                                 want[(size_t)qi * N + (at < 0 ? 0 : at)]);
                }
                free(q), free(k), free(kt), free(sc), free(want);
            }
}

/* A random denormal bf16 of either sign: exponent 0, a mantissa of 1 to 127. */
static mha_bf16 bf16_denormal(rng *r)
{
    const uint32_t u = rng_next(r);
    return (mha_bf16)((u & 0x8000u) | (1u + (u >> 16) % 127u));
}

/* The CPU's floating-point mode (x86's MXCSR, aarch64's FPCR): what a kernel that flushes
 * denormals must leave as it found it. */
static unsigned long fp_mode(void)
{
#if defined(__x86_64__)
    return _mm_getcsr();
#elif defined(__aarch64__)
    return __builtin_aarch64_get_fpcr();
#else
    return 0;
#endif
}

/* rows_scores16 (K's rows of bf16 values as floats: a bf16 engine's few queries) gives
 * decode_scores16's bits on the same keys in a cache's blocks of 16, in the order of each bf16
 * kernel the CPU runs whose order the table's tiles sum in (odd first for an even d_k only): 1
 * to 17 queries, 1 to 33 keys, d_k tails, queries and keys with denormal bf16 values among
 * them (read as zero: DAZ; a query of denormals against large keys tells DAZ from FTZ), no
 * score written past the keys (sentinels), and the caller's floating-point mode restored. */
BKERNEL_TEST(bgemm, rows_scores16_equal_the_bf16_decode_tiles, .timeout = 120)
{
    enum { N = 33, BS = 16, LD_PAD = 3 };
    const mha_bk_order order = bk->order;
    if (!isa->rows_scores16 || !isa->decode_scores16 || !(isa->decode16_orders >> order & 1u))
        cr_skip_test("isa %s has no rows_scores16 in the order %s sums", isa->name, bk->name);
    rng r = {4343};
    const int dks[] = {2, 7, 40, 64, 130};
    for (size_t di = 0; di < sizeof dks / sizeof dks[0]; di++)
        for (int nq = 1; nq <= 17; nq++)
            for (int n = 1; n <= N; n += n < 17 ? 1 : 4) {
                const int dk = dks[di], ld = dk + LD_PAD, runs = (n + BS - 1) / BS;
                if (order == MHA_BK_ODD_FIRST && dk % 2)
                    continue;
                float *q = malloc((size_t)nq * dk * sizeof *q), *k = malloc((size_t)n * ld * sizeof *k);
                float *sc = malloc((size_t)nq * N * sizeof *sc), *want = malloc((size_t)nq * N * sizeof *want);
                mha_bf16 *kt = calloc((size_t)runs * dk * BS, sizeof *kt);
                const void *ktr[(N + BS - 1) / BS];
                int len[(N + BS - 1) / BS];
                /* bf16 values (bf16 has float32's exponents): one in 5 a denormal, query 1's all
                 * (whose products with K's features of up to 2^23 would be normal but for DAZ);
                 * denormals by their bits (mha_bf16_round flushes them) */
                for (size_t i = 0; i < (size_t)nq * dk; i++)
                    q[i] = i % 5 == 3 || i / dk == 1 ? mha_bf16_float(bf16_denormal(&r))
                                                     : mha_bf16_float(mha_bf16_round(rng_uniform(&r, -1.0f, 1.0f)));
                for (int t = 0; t < n; t++)
                    for (int c = 0; c < dk; c++) {
                        const float big = ldexpf(1.0f, c % 24);
                        const mha_bf16 x = (t + c) % 5 == 1 ? bf16_denormal(&r)
                                                            : mha_bf16_round(rng_uniform(&r, -1.0f, 1.0f) * big);
                        k[(size_t)t * ld + c] = mha_bf16_float(x);
                        kt[((size_t)(t / BS) * dk + c) * BS + t % BS] = x;
                    }
                for (int ri = 0; ri < runs; ri++)
                    ktr[ri] = kt + (size_t)ri * dk * BS, len[ri] = n - ri * BS < BS ? n - ri * BS : BS;
                for (size_t i = 0; i < (size_t)nq * N; i++)
                    sc[i] = want[i] = 12345.0f; /* sentinels past the keys */
                isa->decode_scores16(&(mha_score_rows){q, nq, dk, 0.125f, want, N, 0},
                                     &(mha_key_runs){.runs = runs, .ld = BS, .n = len, .kt = ktr}, order);
                const unsigned long mode = fp_mode();
                isa->rows_scores16(&(mha_score_rows){q, nq, dk, 0.125f, sc, N, 0}, &(mha_key_rows){k, ld, n, NULL},
                                   order);
                cr_assert_eq(fp_mode(), mode, "%s: rows_scores16 left the floating-point mode changed", isa->name);
                for (int qi = 0; qi < nq; qi++) {
                    const long at = first_bit_difference(sc + (size_t)qi * N, want + (size_t)qi * N, N);
                    cr_assert_eq(at, -1, "%s order %d, dk %d, %d queries, %d keys: score (%d, %ld) %a, decode tiles %a",
                                 isa->name, (int)order, dk, nq, n, qi, at, sc[(size_t)qi * N + (at < 0 ? 0 : at)],
                                 want[(size_t)qi * N + (at < 0 ? 0 : at)]);
                }
                free(q), free(k), free(sc), free(want), free(kt);
            }
}
