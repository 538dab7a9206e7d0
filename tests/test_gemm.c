/* test_gemm.c — the GEMM on BLIS's microkernel against a double-precision product, for every
 * kernel this CPU runs: edge tiles, several k passes, several A blocks, panel-form operands,
 * beta, the few-rows and streamed-rows paths; the streamed rows against the microkernel and the
 * vector A packing against the scalar one, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "gemm.h"
#include "helpers.h"
#include "isa/isa.h"

/* Packed operands are 64-byte aligned in the arena; the microkernels load them aligned. */
static float *aligned_floats(size_t n)
{
    float *p = aligned_alloc(64, mha_round_up(n * sizeof(float), 64));
    cr_assert(p);
    return p;
}

typedef struct gcase { int m, n, k; int a_panels; float beta; } gcase;
typedef struct gcase_on { gcase g; table_param on; } gcase_on;

/* Every shape on every table (one this CPU cannot run: Criterion's skip). */
ParameterizedTestParameters(gemm, matches_double_product)
{
    static const gcase shapes[] = {
        {1, 1, 1, 0, 0}, {1, 64, 256, 0, 0}, {2, 192, 256, 0, 1}, {3, 33, 17, 1, 0},
        {12, 32, 64, 0, 0}, {13, 31, 65, 1, 1}, {37, 100, 391, 0, 1}, {128, 192, 768, 0, 0},
        {500, 70, 40, 1, 0}, {64, 1000, 64, 0, 0}, {7, 5, 800, 0, 1}, {481, 13, 9, 0, 1},
        /* up to MHA_STREAM_ROWS rows: streamed on skx (every n tail, beta 0 and 1, k passes) */
        {4, 70, 33, 0, 0}, {9, 33, 300, 0, 1}, {16, 1024, 128, 0, 1}, {16, 17, 256, 0, 0},
        {24, 65, 900, 1, 1}, {32, 96, 385, 0, 0}, {31, 40, 50, 1, 1},
    };
    return TABLE_CASES(gcase_on, shapes, 0);
}

ParameterizedTest(gcase_on *param, gemm, matches_double_product, .timeout = 60)
{
    const gcase *g = &param->g;
    const mha_isa *isa = table_or_skip(&param->on, NULL);
    for (int ai = 0; isa->archs[ai]; ai++) {
        mha_kernel k;
        if (mha_kernel_select(isa->archs[ai], isa, &k) != MHA_OK)
            continue; /* a sub-config this CPU cannot run */
        const int m = g->m, n = g->n, kk = g->k, w = k.bw;
        rng r = {(uint64_t)(m * 1000 + n * 10 + kk)};
        /* A: row-major (lda = kk + 3) or in panels; B: panels, built from a row-major copy */
        size_t lda = (size_t)kk + 3, kp = mha_round_up((size_t)kk, (size_t)w), np = mha_round_up((size_t)n, (size_t)w);
        float *a_rows = malloc((size_t)m * lda * sizeof *a_rows), *b_rows = malloc((size_t)kk * n * sizeof *b_rows);
        fill_uniform(a_rows, (size_t)m * lda, -1, 1, &r);
        fill_uniform(b_rows, (size_t)kk * n, -1, 1, &r);
        float *a_pan = aligned_floats((size_t)m * kp), *b_pan = aligned_floats((size_t)kk * np);
        mha_pack_panels(&k, m, kk, mha_mat_rows(&k, a_rows, (ptrdiff_t)lda), 0, a_pan);
        mha_pack_panels(&k, kk, n, mha_mat_rows(&k, b_rows, n), 0, b_pan);
        mha_mat a = g->a_panels ? mha_mat_panels(&k, a_pan, m) : mha_mat_rows(&k, a_rows, (ptrdiff_t)lda);
        size_t ldc = (size_t)n + 5;
        float *c = malloc((size_t)m * ldc * sizeof *c), *c0 = malloc((size_t)m * ldc * sizeof *c0);
        fill_uniform(c0, (size_t)m * ldc, -1, 1, &r);
        memcpy(c, c0, (size_t)m * ldc * sizeof *c);
        float *apack = aligned_floats(mha_gemm_apack_floats(&k));
        const float alpha = 0.75f;
        mha_gemm(&k, m, n, kk, alpha, a, mha_mat_panels(&k, b_pan, kk), g->beta, mha_mat_rows(&k, c, (ptrdiff_t)ldc), apack);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                double want = g->beta * (double)c0[i * ldc + j], mag = fabs(want);
                for (int p = 0; p < kk; p++) {
                    want += alpha * (double)a_rows[i * lda + p] * b_rows[(size_t)p * n + j];
                    mag += fabs(alpha * (double)a_rows[i * lda + p] * b_rows[(size_t)p * n + j]);
                }
                /* fp32 accumulation of k terms: |error| ≤ k · 2^-24 · Σ|terms| (a strict bound) */
                double tol = (kk + 2) * 0x1p-24 * mag;
                cr_assert(fabs(c[i * ldc + j] - want) <= tol, "%s/%s m=%d n=%d k=%d: c[%d][%d] = %.9g, want %.9g",
                          isa->name, k.arch, m, n, kk, i, j, c[i * ldc + j], want);
            }
            for (size_t j = (size_t)n; j < ldc; j++) /* nothing written past n */
                cr_assert_eq(c[i * ldc + j], c0[i * ldc + j]);
        }
        free(a_rows), free(b_rows), free(a_pan), free(b_pan), free(c), free(c0), free(apack);
    }
}

/* Each table's A packing writes ref's bits (a copy, zero rows padding the last panel). */
TABLE_TEST(gemm, vector_packing_matches_scalar_bit_for_bit)
{
    mha_kernel k, scalar;
    kernel_and_ref(isa, &k, &scalar);
    rng r = {3};
    const int m = 29, cols = 203;
    float *a = malloc((size_t)m * cols * sizeof *a);
    fill_uniform(a, (size_t)m * cols, -1, 1, &r);
    size_t n = mha_gemm_apack_floats(&k);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    const int starts[] = {0, 5, 31, 64}, lens[] = {1, 16, 17, 100, 139};
    for (int s = 0; s < 4; s++)
        for (int l = 0; l < 5; l++) {
            memset(x, 0xAB, n * sizeof *x);
            memset(y, 0xCD, n * sizeof *y);
            mha_gemm_pack_a(&k, mha_mat_rows(&k, a, cols), 3, m - 3, starts[s], lens[l], x);
            mha_gemm_pack_a(&scalar, mha_mat_rows(&k, a, cols), 3, m - 3, starts[s], lens[l], y);
            size_t used = mha_round_up((size_t)(m - 3), (size_t)k.aw) * (size_t)lens[l];
            cr_assert(!memcmp(x, y, used * sizeof *x), "%s: start %d, %d columns: packings differ", isa->name,
                      starts[s], lens[l]);
        }
    free(a), free(x), free(y);
}

/* The streamed rows (k->stream) sum exactly as the microkernel does (per chunk of kc, k in
 * order, the same epilogue for beta 0 and 1), so a row's bits never depend on how many rows a
 * call has: up to MHA_STREAM_ROWS through mha_gemm, any number through mha_gemm_in_place —
 * streamed in place and packed alike (k->in_place both ways, whichever this CPU gets). */
static void streamed_rows_match(const mha_kernel *kp);

TABLE_TEST(gemm, streamed_rows_match_the_microkernel_bit_for_bit, .timeout = 120)
{
    int ran = 0;
    for (int ai = 0; isa->stream_rows && isa->archs[ai]; ai++) { /* every sub-config that streams */
        mha_kernel k;
        if (mha_kernel_select(isa->archs[ai], isa, &k) != MHA_OK || !k.stream)
            continue;
        for (k.in_place = 0; k.in_place < 2; k.in_place++)
            streamed_rows_match(&k);
        cr_log_info("isa %s: rows streamed past BLIS '%s' match its microkernel bit for bit", isa->name, k.arch);
        ran++;
    }
    if (!ran)
        cr_skip_test("isa %s streams no rows here (it has no streaming op, or none of its sub-configs that stream runs on this CPU)", isa->name);
}

static void streamed_rows_match(const mha_kernel *kp)
{
    const mha_kernel k = *kp;
    const int ms[] = {1, 2, 3, 4, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 96, 101}, ns[] = {1, 31, 32, 33, 100},
              ks[] = {1, 100, 801};
    /* the engine's betas (0: c not read; 1: c + alpha·acc, a bias or an earlier k pass). Others
     * are accurate (matches_double_product) but BLIS's edge tiles round beta·c their own way */
    const float betas[] = {0.0f, 1.0f};
    rng r = {91};
    const int M = 101, N = 100, K = 801, w = k.bw;
    float *a = malloc((size_t)M * K * sizeof *a), *b = malloc((size_t)K * N * sizeof *b);
    float *c0 = malloc((size_t)M * N * sizeof *c0), *c1 = malloc((size_t)M * N * sizeof *c1);
    float *c2 = malloc((size_t)M * N * sizeof *c2);
    fill_uniform(a, (size_t)M * K, -1, 1, &r);
    fill_uniform(b, (size_t)K * N, -1, 1, &r);
    fill_uniform(c0, (size_t)M * N, -1, 1, &r);
    float *ap = aligned_floats(mha_gemm_packed_a_floats(&k, M, K)), *a_pan = aligned_floats((size_t)M * mha_round_up(K, (size_t)w));
    float *bp = aligned_floats((size_t)K * mha_round_up(N, (size_t)w)), *apack = aligned_floats(mha_gemm_apack_floats(&k));
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 5; ni++) {
            const int kk = ks[ki], n = ns[ni];
            mha_pack_panels(&k, kk, n, mha_mat_rows(&k, b, N), 0, bp);
            mha_pack_panels(&k, M, kk, mha_mat_rows(&k, a, K), 0, a_pan);
            for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]); mi++)
                for (int bi = 0; bi < 2; bi++)
                    for (int form = 0; form < 2; form++) { /* A row-major, or in panels */
                        const int m = ms[mi];
                        const mha_mat am = form ? mha_mat_panels(&k, a_pan, M) : mha_mat_rows(&k, a, K);
                        memcpy(c1, c0, (size_t)M * N * sizeof *c1);
                        memcpy(c2, c0, (size_t)M * N * sizeof *c2);
                        if (m <= MHA_STREAM_ROWS)
                            mha_gemm(&k, m, n, kk, 0.75f, am, mha_mat_panels(&k, bp, kk), betas[bi], mha_mat_rows(&k, c1, N),
                                     NULL);
                        else /* streamed where the kernel streams any rows (in_place), else packed */
                            mha_gemm_in_place(&k, m, n, kk, 0.75f, am, mha_mat_panels(&k, bp, kk), betas[bi],
                                              mha_mat_rows(&k, c1, N), apack);
                        mha_gemm_pack_a(&k, mha_mat_rows(&k, a, K), 0, m, 0, kk, ap);
                        mha_gemm_prepacked(&k, m, n, kk, 0.75f, ap, mha_mat_panels(&k, bp, kk), betas[bi],
                                           mha_mat_rows(&k, c2, N));
                        long at = first_bit_difference(c1, c2, (size_t)M * N);
                        cr_assert_eq(at, -1, "%s%s: m %d, n %d, k %d, beta %g, A %s: c[%ld][%ld] %.9g, microkernel %.9g",
                                     k.isa->name, k.in_place ? " in place" : "", m, n, kk, betas[bi],
                                     form ? "panels" : "rows", at / N, at % N, c1[at < 0 ? 0 : at],
                                     c2[at < 0 ? 0 : at]);
                    }
        }
    free(a), free(b), free(c0), free(c1), free(c2), free(ap), free(a_pan), free(bp), free(apack);
}

/* A row's result has the same bits whether its product has 1 row, a few or many, on every
 * table and sub-config this CPU runs: the streamed rows and the microkernel sum alike and
 * there is no matrix-vector path with sums of its own (a decode token alone and among 16
 * sequences or beside a 64-token prefill then project to the same bits: issue 20). */
TABLE_TEST(gemm, a_row_does_not_depend_on_the_rows_beside_it, .timeout = 120)
{
    const int M = 70, N = 100, K = 900, ms[] = {1, 2, 3, 5, 16, 31, 32, 33, 64, 70};
    rng r = {2024};
    float *a = malloc((size_t)M * K * sizeof *a), *b = malloc((size_t)K * N * sizeof *b);
    float *all = malloc((size_t)M * N * sizeof *all), *part = malloc((size_t)M * N * sizeof *part);
    fill_uniform(a, (size_t)M * K, -1, 1, &r);
    fill_uniform(b, (size_t)K * N, -1, 1, &r);
    for (int ai = 0; isa->archs[ai]; ai++) {
    mha_kernel k;
    if (mha_kernel_select(isa->archs[ai], isa, &k) != MHA_OK)
        continue;
    float *bp = aligned_floats((size_t)K * mha_round_up(N, (size_t)k.bw)), *apack = aligned_floats(mha_gemm_apack_floats(&k));
    mha_pack_panels(&k, K, N, mha_mat_rows(&k, b, N), 0, bp);
    for (int bi = 0; bi < 2; bi++) { /* beta 0, and 1 over a bias-like C */
        const float beta = (float)bi;
        for (size_t i = 0; i < (size_t)M * N; i++)
            all[i] = beta * (float)(i % 7);
        mha_gemm(&k, M, N, K, 0.5f, mha_mat_rows(&k, a, K), mha_mat_panels(&k, bp, K), beta, mha_mat_rows(&k, all, N),
                 apack);
        for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]); mi++) {
            const int m = ms[mi], i0 = M - m; /* the last m rows, alone */
            for (size_t i = 0; i < (size_t)m * N; i++)
                part[i] = beta * (float)(((size_t)i0 * N + i) % 7);
            mha_gemm(&k, m, N, K, 0.5f, mha_mat_rows(&k, a + (size_t)i0 * K, K), mha_mat_panels(&k, bp, K), beta,
                     mha_mat_rows(&k, part, N), apack);
            long at = first_bit_difference(part, all + (size_t)i0 * N, (size_t)m * N);
            cr_assert_eq(at, -1, "%s/%s, beta %g: rows %d.. alone (%d) differ from among %d at [%ld][%ld]: %a vs %a",
                         isa->name, k.arch, beta, i0, m, M, at / N, at % N, part[at < 0 ? 0 : at],
                         all[(size_t)i0 * N + (at < 0 ? 0 : at)]);
        }
    }
    free(bp), free(apack);
    }
    free(a), free(b), free(all), free(part);
}
