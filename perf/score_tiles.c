/* score_tiles.c — a decode step's score tiles on cache-resident keys: what each cache type's
 * scores cost per key element when memory is not what they wait on. One thread; 4 query heads
 * (a GQA group of 4, a decode step's row) against RUNS blocks of 16 slots, d_k 128 (Kᵀ as the
 * cache holds it, RUNS · 4 KiB of bf16 keys, RUNS · 2 KiB of int8 and their parameters), each
 * table's decode_scores[INT8] (float32 FMAs on K made from its scale and zero point as the
 * tiles load it) and each int8_scores kernel the CPU runs (integer sums on the codes, isa.h)
 * next to decode_scores16 on a bf16 cache where the table has it (odd first where the CPU has
 * AVX512_BF16, else even first); 200 000 / RUNS calls a run, median of 5 runs interleaved, in ns per 16 key elements (one feature of a block,
 * for all 4 queries) and the keys' bytes per second.
 * usage: score_tiles [RUNS (4)] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (perf_util.h) under -std=c11 */
#include <stdio.h>
#include <stdlib.h>

#include "isa/isa.h"
#include "perf_util.h"

enum { DK = 128, BS = 16, NQ = 4, REPS = 5, MAX_RUNS = 32 };

static double median5(double *t)
{
    qsort(t, REPS, sizeof *t, cmp_double);
    return t[REPS / 2];
}

int main(int argc, char **argv)
{
    const int runs = argc > 1 ? atoi(argv[1]) : 4;
    if (runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage: score_tiles [RUNS 1..%d]\n", MAX_RUNS);
        return 2;
    }
    const size_t elems = (size_t)runs * DK * BS;
    int8_t *k8 = malloc(elems);
    mha_bf16 *k16 = malloc(elems * sizeof *k16);
    mha_f16 *par = malloc((size_t)runs * 2 * DK * sizeof *par); /* K's parameters, float16 */
    float q[NQ * DK], sc[NQ * MAX_RUNS * BS];
    if (!k8 || !k16 || !par) {
        fprintf(stderr, "score_tiles: out of memory\n");
        return 1;
    }
    uint64_t seed = 1;
    for (size_t i = 0; i < elems; i++)
        k8[i] = (int8_t)(splitmix(&seed) & 0xff), k16[i] = 0x3f80; /* 1.0 */
    for (int i = 0; i < runs * 2 * DK; i++)
        par[i] = mha_f16_round((float)uniform01(&seed));
    for (int i = 0; i < NQ * DK; i++)
        q[i] = (float)uniform01(&seed) - 0.5f;
    const void *kt8[MAX_RUNS], *kt16[MAX_RUNS], *vr[MAX_RUNS];
    const mha_f16 *kp[MAX_RUNS];
    int n[MAX_RUNS];
    for (int r = 0; r < runs; r++)
        kt8[r] = k8 + (size_t)r * DK * BS, kt16[r] = k16 + (size_t)r * DK * BS, vr[r] = NULL,
        kp[r] = par + (size_t)r * 2 * DK, n[r] = BS;
    const int calls = 200000 / runs;
    const double per16 = 1e6 / ((double)calls * (double)elems / 16); /* ms → ns per 16 elements */
    printf("score_tiles: %d queries × %d blocks of %d slots, d_k %d, 1 thread, median of %d runs\n", NQ, runs, BS,
           DK, REPS);
    for (int ti = 0; ti < mha_isa_count; ti++) {
        const mha_isa *isa = mha_isa_tables[ti];
        if (!mha_isa_runnable(isa))
            continue;
        /* odd first (vdpbf16ps) where the CPU has it, else even first (FMA on widened elements) */
        const mha_bk_order order = (isa->decode16_orders >> MHA_BK_ODD_FIRST & 1) &&
                                           __builtin_cpu_supports("avx512bf16")
                                       ? MHA_BK_ODD_FIRST
                                       : MHA_BK_EVEN_FIRST;
        const int bf16 = isa->decode_scores16 && (isa->decode16_orders >> order & 1);
        double t8[REPS], ti[3][REPS], t16[REPS];
        for (int rep = 0; rep < REPS; rep++) {
            double t0 = now_ms();
            for (int i = 0; i < calls; i++)
                isa->decode_scores[MHA_KV_INT8](&(mha_score_rows){q, NQ, DK, 1.0f, sc, MAX_RUNS * BS, 0}, 0, DK,
                                                &(mha_key_runs){.runs = runs, .ld = BS, .n = n, .kt = kt8, .vr = vr,
                                                                .kp = kp});
            t8[rep] = now_ms() - t0, t0 = now_ms();
            for (int v = 0; isa->int8_scores[v]; v++) { /* each kernel this CPU runs */
                const int runs_here = mha_cpu_has_all(isa->int8_scores[v]->needs); /* not in the timed loop */
                for (int i = 0; runs_here && i < calls; i++)
                    isa->int8_scores[v]->run(&(mha_score_rows){q, NQ, DK, 1.0f, sc, MAX_RUNS * BS, 0},
                                             &(mha_key_runs){.runs = runs, .ld = BS, .n = n, .kt = kt8, .vr = vr,
                                                             .kp = kp});
                ti[v][rep] = now_ms() - t0, t0 = now_ms();
            }
            for (int i = 0; bf16 && i < calls; i++)
                isa->decode_scores16(&(mha_score_rows){q, NQ, DK, 1.0f, sc, MAX_RUNS * BS, 0},
                                     &(mha_key_runs){.runs = runs, .ld = BS, .n = n, .kt = kt16, .vr = vr}, order);
            t16[rep] = now_ms() - t0;
        }
        const double a = median5(t8) * per16, b = median5(t16) * per16;
        printf("%-7s int8 %.3f ns / 16 elements (%.1f GB/s of K)", isa->name, a, 16 / a);
        for (int v = 0; isa->int8_scores[v]; v++)
            if (mha_cpu_has_all(isa->int8_scores[v]->needs))
                printf(", int8 integer scores (%s) %.3f ns (%.1f GB/s)", isa->int8_scores[v]->name,
                       median5(ti[v]) * per16, 16 / (median5(ti[v]) * per16));
        if (bf16)
            printf(", bf16 (%s first) %.3f ns (%.1f GB/s)", order == MHA_BK_ODD_FIRST ? "odd" : "even", b, 32 / b);
        printf("\n");
    }
    return sc[0] > 1e30f; /* keeps the sums */
}
