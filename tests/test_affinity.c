/* test_affinity.c — pinning applies to the engine's workers only and the calling thread's
 * mask is restored; worker CPUs are reported. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "affinity.h"
#include "helpers.h"

static int allowed_cpus(int *cpus, int max)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

static void run_once(mha_engine *e, const problem *p)
{
    float *out = malloc((size_t)p->batch * p->seq_q * p->d * sizeof *out);
    mha_input in = problem_input(p);
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_OK);
    free(out);
}

Test(affinity, pinning_restores_the_callers_mask, .timeout = 30)
{
    cpu_set_t before, after;
    cr_assert_eq(sched_getaffinity(0, sizeof before, &before), 0);
    problem p;
    problem_make(&p, 32, 4, 4, 8, 8, 1, 0, 51);
    const mha_pinning policies[] = {MHA_PIN_CLOSE, MHA_PIN_SPREAD, MHA_PIN_CPUS};
    for (size_t k = 0; k < 3; k++) {
        mha_config cfg;
        problem_config(&p, &cfg, 2);
        cfg.pinning = policies[k];
        cfg.n_cpus = allowed_cpus(cfg.cpus, 1);
        mha_engine *e;
        cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
        mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &(float *){NULL});
        cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
        run_once(e, &p);
        cr_assert_eq(sched_getaffinity(0, sizeof after, &after), 0);
        cr_assert(CPU_EQUAL(&before, &after), "policy %d left the calling thread's affinity changed", (int)policies[k]);
        mha_free(e);
    }
    problem_free(&p);
}

Test(affinity, pinned_workers_run_where_asked, .timeout = 30)
{
    int cpus[2];
    int n = allowed_cpus(cpus, 2);
    problem p;
    problem_make(&p, 32, 4, 4, 8, 8, 1, 0, 52);
    mha_config cfg;
    problem_config(&p, &cfg, n);
    cfg.pinning = MHA_PIN_CPUS;
    cfg.n_cpus = n;
    /* in reverse, so that worker 0 (the calling thread) moves */
    for (int i = 0; i < n; i++)
        cfg.cpus[i] = cpus[n - 1 - i];
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &(float *){NULL});
    cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
    int ran[2] = {-2, -2};
    run_once(e, &p);
    cr_assert_eq(mha_engine_worker_cpus(e, ran, 2), n);
    for (int t = 0; t < n; t++)
        cr_assert_eq(ran[t], cfg.cpus[t], "worker %d ran on CPU %d, pinned to %d", t, ran[t], cfg.cpus[t]);
    mha_free(e);
    problem_free(&p);
}

Test(affinity, unpinned_workers_report_their_cpus, .timeout = 30)
{
    problem p;
    problem_make(&p, 32, 4, 2, 8, 8, 1, 0, 53);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_XW);
    int ran[4] = {-2, -2, -2, -2};
    cr_assert_eq(mha_engine_worker_cpus(e, ran, 4), 2);
    int allowed[64];
    int n = allowed_cpus(allowed, 64);
    run_once(e, &p);
    mha_engine_worker_cpus(e, ran, 4);
    for (int t = 0; t < 2; t++) {
        int ok = 0;
        for (int i = 0; i < n; i++)
            ok |= allowed[i] == ran[t];
        cr_assert(ok, "worker %d reports CPU %d, not an allowed one", t, ran[t]);
    }
    mha_free(e);
    problem_free(&p);
}

Test(affinity, threads_zero_means_every_allowed_cpu)
{
    int allowed[1024];
    int n = allowed_cpus(allowed, 1024);
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4, cfg.threads = 0;
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_eq(mha_engine_threads(e), n);
    mha_free(e);
}

/* The per-core L2 from sysfs: cpu0's level-2 cache's size over the CPUs sharing it (counted here
 * from shared_cpu_map's bits, where the library reads shared_cpu_list); mha_l2_bytes reports it
 * wherever glibc has no answer (aarch64). */
Test(affinity, l2_size_is_the_kernels)
{
    for (int i = 0; i < 8; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        int level = 0;
        const int got = fscanf(f, "%d", &level);
        fclose(f);
        if (got != 1 || level != 2)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        cr_assert(f = fopen(path, "r"), "%s", path);
        unsigned long kib = 0;
        cr_assert_eq(fscanf(f, "%luK", &kib), 1, "%s", path);
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_map", i);
        cr_assert(f = fopen(path, "r"), "%s", path);
        unsigned word, sharing = 0;
        while (fscanf(f, "%x,", &word) == 1)
            sharing += (unsigned)__builtin_popcount(word);
        fclose(f);
        const size_t want = (size_t)kib * 1024 / (sharing ? sharing : 1);
        cr_assert_eq(mha_affinity_sysfs_l2_bytes(), want, "sysfs L2 %zu, want %lu KiB over %u CPUs",
                     mha_affinity_sysfs_l2_bytes(), kib, sharing);
        if (sysconf(_SC_LEVEL2_CACHE_SIZE) <= 0)
            cr_assert_eq(mha_l2_bytes(), want, "mha_l2_bytes %zu where glibc has none", mha_l2_bytes());
        return;
    }
    cr_skip_test("no level-2 cache in /sys/devices/system/cpu/cpu0/cache: nothing to compare");
}
