/* ukernel_rate.c — the float32 microkernel's own rate, one thread: mha_kernel_tile (the BLIS
 * sub-config mha selected, as the engine calls it) over packed A panels (aw rows) and B panels
 * (bw columns) small enough to stay in L1/L2 (96 rows × KC, KC × 512), tile after tile, C
 * accumulated (beta 1). What a GEMM of mha's can reach at best on this CPU; compare with the
 * FMA loop of `build/ceiling 1` run next to it. Median of 5 runs of 200 sweeps per KC.
 * Where few-row products are streamed (skx, AVX-512: the avx512 table's stream_rows, mha's own register
 * tiles with the microkernel's sums bit for bit), the same work through it too: 8 products of
 * 12 rows × KC by KC × 512 per sweep, the same B panels — what an AVX-512 tile of mha's own
 * reaches on the same operands.
 * Then each bf16 kernel of the table this CPU runs: its 32 × 32 blocks (the attention chunks'
 * unit) at 2, 4 and 8 k tiles (d_k 64 and 128 of the scores, a 256-key chunk of A·V) on A and
 * B panels that stay in L1, block after block; compare with the vdpbf16ps or tdpbf16ps loop.
 * Then the attention's two float32 products as a query block runs them, on every table this
 * CPU runs (attention_products_rate). Last, the table's softmax passes on their own:
 * softmax_row and softmax_row16 (the bf16 chunks' exp, straight into A tiles) over the 32 rows
 * of one 256-key chunk in L1, row after row, in ns per score: a share of the attention core
 * that no product kernel hides (the exp runs on the vector units; an AMX core's tiles cannot
 * go faster than it).
 * usage: ukernel_rate [KC ...] (default 64 384: d_k, and BLIS's k block on skx) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (perf_util.h) under -std=c11 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "isa/isa.h"
#include "kernel.h"
#include "perf_util.h"

enum { MB = 96, NB = 512, SWEEPS = 200, RUNS = 5 };

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ns per score of the table's softmax_row and softmax_row16 (where it has one) on ROWS rows of
 * N keys, every key visible (their entries stay in [0, 1] after the first sweep). */
static void softmax_rate(const mha_isa *isa)
{
    enum { ROWS = 32, N = 256, PASSES = 4000 };
    static float s[ROWS][N];
    static _Alignas(64) mha_bf16 d[N / MHA_BT_K * MHA_BT_ELEMS];
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < N; j++)
            s[r][j] = -1e-2f * (float)((r * 7 + j * 13) % 997);
    for (int with16 = 0; with16 < 2; with16++) {
        if (with16 && !isa->softmax_row16)
            break;
        double ms[RUNS];
        float sink = 0.0f;
        for (int run = 0; run < RUNS; run++) {
            const double t0 = now_ms();
            for (int p = 0; p < PASSES; p++)
                for (int r = 0; r < ROWS; r++) {
                    float mx = -INFINITY;
                    sink += with16 ? isa->softmax_row16(s[r], N, N, NULL, &mx, d) : isa->softmax_row(s[r], N, N, NULL, &mx);
                }
            ms[run] = now_ms() - t0;
        }
        qsort(ms, RUNS, sizeof *ms, cmp);
        const double scores = (double)PASSES * ROWS * N;
        printf("%s: %.3f ns per score (%.3f-%.3f), rows of %d keys in L1, medians of %d%s\n",
               with16 ? "softmax_row16" : "softmax_row", ms[RUNS / 2] * 1e6 / scores, ms[0] * 1e6 / scores,
               ms[RUNS - 1] * 1e6 / scores, N, RUNS, sink == 0.0f ? " (no sum?)" : "");
    }
}

/* The attention's two float32 products as a query block runs them (mha_gemm_in_place: the
 * stream where the table reads A in place, else the microkernel), on one 256-key chunk in
 * L1/L2: the scores (96 query rows × 256 keys over d_k 64: Q's rows in place, Kᵀ in panels,
 * alpha 1/8) and A·V (96 × 64 over the 256 keys: the score rows in place, V in panels), each
 * table this CPU runs, medians of RUNS alternating runs. The scores' passes are short (k = 64),
 * so what a pass costs besides its FMAs shows there first. */
static void attention_products_rate(void)
{
    enum { QM = 96, QN = 256, DK = 64, REPS = 400 };
    float *q = aligned_alloc(64, sizeof(float) * QM * DK), *kt = aligned_alloc(64, sizeof(float) * DK * QN);
    float *v = aligned_alloc(64, sizeof(float) * QN * DK), *s = aligned_alloc(64, sizeof(float) * QM * QN);
    float *z = aligned_alloc(64, sizeof(float) * QM * DK);
    if (!q || !kt || !v || !s || !z)
        exit(1);
    for (int t = 0; t < QM * DK; t++)
        q[t] = 1e-3f * (float)(t % 13), z[t] = 0.0f;
    for (int t = 0; t < DK * QN; t++)
        kt[t] = 1e-3f * (float)(t % 7), v[t] = 1e-3f * (float)(t % 5);
    memset(s, 0, sizeof(float) * QM * QN);
    for (int i = 0; i < mha_isa_count; i++) {
        mha_kernel k;
        if (!mha_isa_runnable(mha_isa_tables[i]) || mha_isa_tables[i] == &mha_isa_ref ||
            mha_kernel_select("", mha_isa_tables[i], &k) != MHA_OK)
            continue;
        float *ap = aligned_alloc(64, sizeof(float) * mha_gemm_apack_floats(&k));
        if (!ap)
            exit(1);
        double ms[2][RUNS];
        for (int r = 0; r < RUNS; r++)
            for (int which = 0; which < 2; which++) {
                const double t0 = now_ms();
                for (int rep = 0; rep < REPS; rep++)
                    if (which == 0)
                        mha_gemm_in_place(&k, QM, QN, DK, 0.125f, mha_mat_rows(&k, q, DK), mha_mat_panels(&k, kt, DK),
                                          0.0f, mha_mat_rows(&k, s, QN), ap);
                    else
                        mha_gemm_in_place(&k, QM, DK, QN, 1.0f, mha_mat_rows(&k, s, QN), mha_mat_panels(&k, v, QN),
                                          0.0f, mha_mat_rows(&k, z, DK), ap);
                ms[which][r] = now_ms() - t0;
            }
        const double flop = 2.0 * QM * QN * DK * REPS;
        printf("table %s (blis-%s%s), a query block's products:", mha_isa_tables[i]->name, k.arch,
               k.in_place ? ", streamed in place" : "");
        for (int which = 0; which < 2; which++) {
            qsort(ms[which], RUNS, sizeof ms[which][0], cmp);
            printf(" %s %.1f GFLOP/s (%.1f-%.1f)%s", which ? "A·V (k 256)" : "scores (k 64)",
                   flop / ms[which][RUNS / 2] / 1e6, flop / ms[which][RUNS - 1] / 1e6, flop / ms[which][0] / 1e6,
                   which ? "" : ";");
        }
        printf(", medians of %d\n", RUNS);
        free(ap);
    }
    free(q), free(kt), free(v), free(s), free(z);
}

int main(int argc, char **argv)
{
    mha_kernel k;
    if (mha_kernel_select("", mha_isa_auto_table(), &k) != MHA_OK) {
        fprintf(stderr, "ukernel_rate: no float32 kernel for this CPU\n");
        return 1;
    }
    printf("kernel blis-%s: A panels of %d rows, B panels of %d columns\n", k.arch, k.aw, k.bw);
    const int n_kc = argc > 1 ? argc - 1 : 2;
    for (int i = 0; i < n_kc; i++) {
        const int kc = argc > 1 ? atoi(argv[1 + i]) : (i == 0 ? 64 : 384);
        if (kc < 1 || kc > 4096) {
            fprintf(stderr, "usage: ukernel_rate [KC 1..4096 ...]\n");
            return 2;
        }
        const int mb = MB / k.aw * k.aw, nb = NB / k.bw * k.bw;
        float *a = aligned_alloc(64, (size_t)mb * kc * sizeof *a), *b = aligned_alloc(64, (size_t)kc * nb * sizeof *b);
        float *c = aligned_alloc(64, (size_t)mb * nb * sizeof *c);
        if (!a || !b || !c) {
            fprintf(stderr, "ukernel_rate: out of memory\n");
            return 1;
        }
        for (size_t t = 0; t < (size_t)mb * kc; t++)
            a[t] = 1e-3f * (float)(t % 11);
        for (size_t t = 0; t < (size_t)kc * nb; t++)
            b[t] = 1e-3f * (float)(t % 7);
        memset(c, 0, (size_t)mb * nb * sizeof *c);
        double ms[RUNS];
        for (int r = 0; r < RUNS; r++) {
            const double t0 = now_ms();
            for (int s = 0; s < SWEEPS; s++)
                for (int j = 0; j < nb; j += k.bw)
                    for (int row = 0; row < mb; row += k.aw)
                        mha_kernel_tile(&k, k.aw, k.bw, kc, 1.0f, a + (size_t)row * kc, b + (size_t)j * kc, 1.0f,
                                        c + (size_t)row * nb + j, nb);
            ms[r] = now_ms() - t0;
        }
        qsort(ms, RUNS, sizeof *ms, cmp);
        const double flop = 2.0 * mb * nb * kc * SWEEPS;
        printf("kc %4d: microkernel %.1f GFLOP/s (min-max %.1f-%.1f)", kc, flop / ms[RUNS / 2] / 1e6,
               flop / ms[RUNS - 1] / 1e6, flop / ms[0] / 1e6);
        if (k.stream && k.bw == 32) { /* the same operands: A as 12-row panels, B as bw-column panels */
            const mha_mat bm = mha_mat_panels(&k, b, kc);
            for (int r = 0; r < RUNS; r++) {
                const double t0 = now_ms();
                for (int sw = 0; sw < SWEEPS; sw++)
                    for (int row = 0; row < mb; row += 12)
                        mha_gemm(&k, 12, nb, kc, 1.0f, mha_mat_rows(&k, a + (size_t)row * kc, kc), bm, 1.0f,
                                 mha_mat_rows(&k, c + (size_t)row * nb, nb), NULL);
                ms[r] = now_ms() - t0;
            }
            qsort(ms, RUNS, sizeof *ms, cmp);
            printf("; streamed 12-row tiles %.1f (%.1f-%.1f)", flop / ms[RUNS / 2] / 1e6, flop / ms[RUNS - 1] / 1e6,
                   flop / ms[0] / 1e6);
        }
        printf(", medians of %d\n", RUNS);
        free(a), free(b), free(c);
    }
    const mha_isa *isa = mha_isa_auto_table();
    for (int i = 0; isa->bf16[i]; i++) {
        const mha_bkernel *bk = isa->bf16[i];
        if ((bk->usable && !bk->usable()) || !mha_bkernel_enable(bk))
            continue;
        printf("bf16 kernel %s, 32 x 32 blocks:", bk->name);
        for (int kt = 2; kt <= 8; kt *= 2) {
            const size_t ps = (size_t)kt * MHA_BT_K * MHA_BT_N, blocks = 20000000 / kt;
            mha_bf16 *a = aligned_alloc(64, 2 * ps * sizeof *a), *b = aligned_alloc(64, 2 * ps * sizeof *b);
            float acc[32 * 32];
            if (!a || !b)
                return 1;
            for (size_t t = 0; t < 2 * ps; t++) /* small normal values: no denormal products */
                a[t] = mha_bf16_round(1e-2f * (float)(t % 13)), b[t] = mha_bf16_round(1e-2f * (float)(t % 5));
            double ms[RUNS];
            for (int r = 0; r < RUNS; r++) {
                mha_bk_begin(bk);
                const double t0 = now_ms();
                for (size_t s = 0; s < blocks / RUNS / 4; s++)
                    bk->block(32, 2, kt, a, b, ps, acc, 0);
                ms[r] = now_ms() - t0;
                mha_bk_end(bk);
            }
            qsort(ms, RUNS, sizeof *ms, cmp);
            const double flop = 2.0 * 32 * 32 * 32 * kt * (double)(blocks / RUNS / 4);
            printf(" %d k tiles %.1f GFLOP/s (%.1f-%.1f)%s", kt, flop / ms[RUNS / 2] / 1e6, flop / ms[RUNS - 1] / 1e6,
                   flop / ms[0] / 1e6, kt < 8 ? ";" : "");
            free(a), free(b);
        }
        printf(", medians of %d\n", RUNS);
    }
    attention_products_rate();
    softmax_rate(isa);
    return 0;
}
