/* test_shared_weights.c — one packed copy of the weights read by many engines: outputs bitwise
 * those of engines with their own copies, in 8 threads at once; the process holds one copy,
 * not eight; the rules (same model and kernel, pw outlives the engines, set_weights refused). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

#define ENGINES 8
#define FORWARDS 20

typedef struct worker {
    const problem *p;
    mha_engine *e;
    int id;
    float *out;           /* (FORWARDS, batch, seq, d) */
    pthread_barrier_t *start;
    int failures;
} worker;

/* Forward k of worker id: its own input, the same for the shared and the private engine. */
static void *work(void *arg)
{
    worker *w = arg;
    const problem *p = w->p;
    size_t n = (size_t)p->batch * p->seq_q * p->d;
    float *x = malloc(n * sizeof *x);
    pthread_barrier_wait(w->start);
    for (int k = 0; k < FORWARDS; k++) {
        rng r = {((uint64_t)w->id << 32) + (uint64_t)k + 7};
        fill_uniform(x, n, -1.0f, 1.0f, &r);
        problem q = *p;
        q.q = q.k = q.v = x;
        mha_input in = problem_input(&q);
        if (mha_forward(w->e, &in, w->out + (size_t)k * n, NULL) != MHA_OK)
            w->failures++;
    }
    free(x);
    return NULL;
}

/* Runs ENGINES engines in ENGINES threads at once; outputs into out[i]. */
static void run_all(const problem *p, mha_engine **e, float **out)
{
    worker w[ENGINES];
    pthread_t th[ENGINES];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, ENGINES);
    for (int i = 0; i < ENGINES; i++) {
        w[i] = (worker){.p = p, .e = e[i], .id = i, .out = out[i], .start = &start};
        cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < ENGINES; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(w[i].failures, 0, "engine %d: %d forwards failed", i, w[i].failures);
    }
    pthread_barrier_destroy(&start);
}

Test(shared_weights, eight_shared_engines_equal_eight_private_ones_bitwise, .timeout = 120)
{
    problem p;
    problem_make(&p, 96, 6, 2, 21, 21, 1, 0, 31);
    p.causal = 1;
    problem_set_variants(&p, V_SINKS | V_QK_NORM_GEMMA | V_SOFTCAP, 32); /* their weights are packed too */
    mha_config cfg; /* one single-threaded engine per core: the server recipe */
    float *scratch;
    mha_weights wt = problem_ready(&p, &cfg, 1, MHA_LAYOUT_TORCH, &scratch);
    mha_packed_weights *pw;
    cr_assert_eq(mha_pack_weights(&cfg, &wt, &pw), MHA_OK);
    free(scratch); /* packed: the caller's arrays are no longer needed */
    mha_config other = cfg;
    other.sinks = 0;
    mha_engine *none;
    char err[256];
    cr_assert_eq(mha_create_shared_msg(&other, pw, &none, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert_str_eq(err, "sinks: 0, but the packed weights were made for 1");
    mha_engine *shared[ENGINES], *own[ENGINES];
    float *out_shared[ENGINES], *out_own[ENGINES];
    size_t n = (size_t)FORWARDS * p.batch * p.seq_q * p.d;
    for (int i = 0; i < ENGINES; i++) {
        cr_assert_eq(mha_create_shared(&cfg, pw, &shared[i]), MHA_OK);
        own[i] = engine_for(&p, 1, MHA_LAYOUT_XW);
        out_shared[i] = malloc(n * sizeof(float));
        out_own[i] = malloc(n * sizeof(float));
    }
    run_all(&p, shared, out_shared);
    run_all(&p, own, out_own);
    for (int i = 0; i < ENGINES; i++) {
        long at = first_bit_difference(out_shared[i], out_own[i], n);
        cr_assert_eq(at, -1, "engine %d: shared and private outputs differ at %ld: %a vs %a", i, at,
                     at >= 0 ? out_shared[i][at] : 0.0f, at >= 0 ? out_own[i][at] : 0.0f);
        mha_free(shared[i]), mha_free(own[i]);
        free(out_shared[i]), free(out_own[i]);
    }
    mha_packed_weights_free(pw);
    problem_free(&p);
}

static double rss_mib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert(f);
    cr_assert_eq(fscanf(f, "%ld %ld", &pages, &resident), 2);
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* d = 1024: 16 MiB of packed weights. Eight shared engines, each having run a forward (every
 * page it reads is touched), grow the process by about one copy; eight private engines grow
 * it by eight. Workspaces of the shared engines hold no weights. */
Test(shared_weights, the_process_holds_one_copy_not_eight, .timeout = 120)
{
    problem p;
    problem_make(&p, 1024, 16, 1, 8, 8, 1, 0, 5);
    mha_config cfg;
    float *scratch;
    mha_weights wt = problem_ready(&p, &cfg, 1, MHA_LAYOUT_XW, &scratch);
    float *out = malloc((size_t)p.batch * p.seq_q * p.d * sizeof *out);
    mha_input in = problem_input(&p);

    double before = rss_mib();
    mha_packed_weights *pw;
    cr_assert_eq(mha_pack_weights(&cfg, &wt, &pw), MHA_OK);
    const double copy = (double)mha_packed_weights_size(pw) / (1 << 20);
    cr_assert_geq(copy, 16.0, "packed weights of d = 1024 are at least 4·d² floats");
    mha_engine *e[ENGINES];
    for (int i = 0; i < ENGINES; i++) {
        cr_assert_eq(mha_create_shared(&cfg, pw, &e[i]), MHA_OK);
        cr_assert_eq(mha_forward(e[i], &in, out, NULL), MHA_OK);
    }
    double grown_shared = rss_mib() - before;
    size_t ws_shared = mha_engine_workspace_size(e[0]);
    for (int i = 0; i < ENGINES; i++)
        mha_free(e[i]);
    mha_packed_weights_free(pw);

    before = rss_mib();
    for (int i = 0; i < ENGINES; i++) {
        cr_assert_eq(mha_create(&cfg, &e[i]), MHA_OK);
        cr_assert_eq(mha_set_weights(e[i], &wt), MHA_OK);
        cr_assert_eq(mha_forward(e[i], &in, out, NULL), MHA_OK);
    }
    double grown_private = rss_mib() - before;
    size_t ws_private = mha_engine_workspace_size(e[0]);
    for (int i = 0; i < ENGINES; i++)
        mha_free(e[i]);

    cr_log_info("packed copy %.1f MiB; 8 shared engines grew RSS by %.1f MiB, 8 private by %.1f MiB", copy,
                grown_shared, grown_private);
    cr_assert_lt(grown_shared, 2.0 * copy, "8 shared engines grew RSS by %.1f MiB, more than two %.1f MiB copies",
                 grown_shared, copy);
    cr_assert_gt(grown_private, 7.0 * copy, "8 private engines grew RSS by only %.1f MiB", grown_private);
    cr_assert_geq(ws_private - ws_shared, (size_t)(copy * (1 << 20)) - 4096,
                  "a shared engine's workspace (%zu) still holds weights (private %zu)", ws_shared, ws_private);
    free(out), free(scratch);
    problem_free(&p);
}

Test(shared_weights, another_model_or_kernel_is_refused_and_capacity_may_differ)
{
    problem p;
    problem_make(&p, 64, 4, 1, 8, 8, 1, 0, 3);
    mha_config cfg;
    float *scratch;
    mha_weights wt = problem_ready(&p, &cfg, 1, MHA_LAYOUT_XW, &scratch);
    mha_packed_weights *pw = (mha_packed_weights *)&p; /* must be cleared on failure */
    cr_assert_eq(mha_pack_weights(NULL, &wt, &pw), MHA_ERR_INVALID_ARG);
    cr_assert_null(pw);
    mha_weights no_bias = wt;
    no_bias.b_k = NULL;
    cr_assert_eq(mha_pack_weights(&cfg, &no_bias, &pw), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_pack_weights(&cfg, &wt, &pw), MHA_OK);

    mha_engine *e = NULL;
    cr_assert_eq(mha_create_shared(&cfg, NULL, &e), MHA_ERR_INVALID_ARG);
    mha_config other = cfg;
    other.d_model = 128; /* another model */
    cr_assert_eq(mha_create_shared(&other, pw, &e), MHA_ERR_CONFIG);
    cr_assert_null(e);
    other = cfg;
    other.bias = 0;
    cr_assert_eq(mha_create_shared(&other, pw, &e), MHA_ERR_CONFIG);
    if (strcmp(mha_blis_arch_auto(), "generic") != 0) { /* another kernel's panel width */
        other = cfg;
        strcpy(other.blis_arch, "generic"), other.isa[0] = '\0'; /* auto: generic's table */
        mha_status st = mha_create_shared(&other, pw, &e);
        cr_assert(st == MHA_ERR_CONFIG || st == MHA_OK, "%s", mha_status_str(st));
        mha_free(e);
        e = NULL;
    }
    /* capacity and threads are the engine's own: any may share */
    other = cfg;
    other.max_batch = 5, other.max_seq_q = other.max_seq_kv = 40, other.threads = 2;
    cr_assert_eq(mha_create_shared(&other, pw, &e), MHA_OK);
    cr_assert_eq(mha_set_weights(e, &wt), MHA_ERR_STATE);
    cr_assert(strstr(mha_engine_last_error(e), "shared"), "%s", mha_engine_last_error(e));
    mha_free(e);
    mha_packed_weights_free(pw);
    mha_packed_weights_free(NULL);
    cr_assert_eq(mha_packed_weights_size(NULL), 0);
    free(scratch);
    problem_free(&p);
}
