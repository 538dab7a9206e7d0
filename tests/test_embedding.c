/* test_embedding.c — what a server that embeds libmha relies on: engines in many threads at
 * once, an engine handed from one thread to another, hostile numbers (±Inf, NaN, 1e30), and
 * engines in a child process after the parent used one (pre-forking servers). */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

static uint64_t hash_floats(const float *x, size_t n)
{
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n * sizeof *x; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ---- 8 engines in 8 threads at once ---- */

#define CLIENTS 8
#define FORWARDS 200

typedef struct client {
    int id, threads, causal;
    problem p;                   /* weights, shapes, lengths; q/k/v refilled per forward */
    uint64_t alone[FORWARDS];    /* output hash of forward k, the engine running alone */
    int mismatches, failures;
    pthread_barrier_t *start;
} client;

/* Different models and batch shapes, some engines multi-threaded, some masks. */
static void client_make(client *c, int id)
{
    static const int d[] = {32, 64, 48, 96, 64, 32, 96, 48}, h[] = {2, 4, 3, 8, 2, 4, 4, 6};
    static const int batch[] = {1, 3, 2, 1, 2, 3, 1, 2}, seq[] = {16, 9, 33, 24, 40, 7, 17, 12};
    static const int threads[] = {1, 2, 1, 3, 1, 2, 2, 1};
    memset(c, 0, sizeof *c);
    c->id = id, c->threads = threads[id], c->causal = id % 3 == 1;
    problem_make(&c->p, d[id], h[id], batch[id], seq[id], seq[id], id % 2, 0, 1000 + (uint64_t)id);
    c->p.causal = c->causal;
    if (id % 4 == 2) { /* ragged */
        c->p.q_len = malloc((size_t)c->p.batch * sizeof *c->p.q_len);
        c->p.kv_len = malloc((size_t)c->p.batch * sizeof *c->p.kv_len);
        for (int b = 0; b < c->p.batch; b++)
            c->p.q_len[b] = c->p.kv_len[b] = seq[id] - 5 * b;
    }
}

/* Forward k of a client: its own random input, the same whichever thread runs it. */
static mha_status client_forward(const client *c, mha_engine *e, int k, float *x, float *out)
{
    rng r = {((uint64_t)c->id << 32) + (uint64_t)k + 1};
    size_t n = (size_t)c->p.batch * c->p.seq_q * c->p.d;
    fill_uniform(x, n, -1.0f, 1.0f, &r);
    problem q = c->p;
    q.q = q.k = q.v = x;
    mha_input in = problem_input(&q);
    return mha_forward(e, &in, out, NULL);
}

static void *client_run(void *arg)
{
    client *c = arg;
    mha_engine *e = engine_for(&c->p, c->threads, MHA_LAYOUT_XW);
    size_t n = (size_t)c->p.batch * c->p.seq_q * c->p.d;
    float *x = malloc(n * sizeof *x), *out = malloc(n * sizeof *out);
    pthread_barrier_wait(c->start);
    for (int k = 0; k < FORWARDS; k++) {
        if (client_forward(c, e, k, x, out) != MHA_OK)
            c->failures++;
        else if (hash_floats(out, n) != c->alone[k])
            c->mismatches++;
    }
    free(x), free(out);
    mha_free(e);
    return NULL;
}

Test(embedding, eight_engines_in_eight_threads_match_each_engine_alone, .timeout = 300)
{
    static client cl[CLIENTS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, CLIENTS);
    for (int i = 0; i < CLIENTS; i++) {
        client_make(&cl[i], i);
        cl[i].start = &start;
        /* alone: one engine at a time, in this thread */
        mha_engine *e = engine_for(&cl[i].p, cl[i].threads, MHA_LAYOUT_XW);
        size_t n = (size_t)cl[i].p.batch * cl[i].p.seq_q * cl[i].p.d;
        float *x = malloc(n * sizeof *x), *out = malloc(n * sizeof *out);
        for (int k = 0; k < FORWARDS; k++) {
            cr_assert_eq(client_forward(&cl[i], e, k, x, out), MHA_OK);
            cl[i].alone[k] = hash_floats(out, n);
        }
        free(x), free(out);
        mha_free(e);
    }
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, client_run, &cl[i]), 0);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CLIENTS; i++) {
        cr_expect_eq(cl[i].failures, 0, "client %d: %d forwards failed", i, cl[i].failures);
        cr_expect_eq(cl[i].mismatches, 0, "client %d (%d threads): %d of %d outputs differ from the engine alone", i,
                     cl[i].threads, cl[i].mismatches, FORWARDS);
        problem_free(&cl[i].p);
    }
    pthread_barrier_destroy(&start);
}

/* ---- one engine, used by two threads one after the other ---- */

typedef struct handoff {
    mha_engine *e;
    const problem *p;
    float *out;
    mha_status st;
} handoff;

static void *handoff_run(void *arg)
{
    handoff *h = arg;
    mha_input in = problem_input(h->p);
    h->st = mha_forward(h->e, &in, h->out, NULL);
    return NULL;
}

static void run_in_thread(handoff *h)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, handoff_run, h), 0);
    pthread_join(t, NULL);
    cr_assert_eq(h->st, MHA_OK, "%s", mha_status_str(h->st));
}

/* Each call from a new thread that exits after it: on LLVM's libomp this crashed the next
 * region while the calling thread created the tasks (scheduler.c's run_region), in about half
 * the tries of three calls; ROUNDS tries make a return of that near certain to fail. */
#define ROUNDS 8

Test(embedding, an_engine_moves_between_threads_between_calls, .timeout = 60)
{
    for (int threads = 1; threads <= 2; threads++) {
        problem a, b;
        problem_make(&a, 64, 4, 2, 19, 19, 1, 0, 11);
        problem_make(&b, 64, 4, 2, 19, 19, 1, 0, 11); /* same weights (same seed), other input */
        rng r = {77};
        fill_uniform(b.q, (size_t)b.batch * b.seq_q * b.d, -1.0f, 1.0f, &r);
        mha_engine *e = engine_for(&a, threads, MHA_LAYOUT_XW);
        size_t n = (size_t)a.batch * a.seq_q * a.d;
        float *o1 = malloc(n * sizeof *o1), *o2 = malloc(n * sizeof *o2), *o3 = malloc(n * sizeof *o3);
        handoff h1 = {e, &a, o1, MHA_OK}, h2 = {e, &b, o2, MHA_OK}, h3 = {e, &a, o3, MHA_OK};
        double *ref = malloc(n * sizeof *ref);
        reference_mha(&b, ref, NULL);
        for (int round = 0; round < ROUNDS; round++) {
            run_in_thread(&h1); /* thread 1 */
            run_in_thread(&h2); /* thread 2, after thread 1 ended */
            run_in_thread(&h3); /* thread 3: input a again */
            cr_assert_eq(first_bit_difference(o1, o3, n), -1, "%d threads: same input, other thread, other bits",
                         threads);
            /* fp32 against double over d = 64: ~1e-7 per element; 1e-5 leaves room for sums */
            cr_assert_leq(rel_error(o2, ref, n), 1e-5, "%d threads: second thread's output is wrong", threads);
        }
        free(ref), free(o1), free(o2), free(o3);
        mha_free(e);
        problem_free(&a), problem_free(&b);
    }
}

/* Threads that live on and take turns with one engine, as a server's pool hands it round:
 * every call's bits those of the engine's first call on the same input. */
#define TAKERS 3
#define TURNS 4

typedef struct turns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn;
} turns;

typedef struct taker {
    turns *t;
    int me;
    handoff h;
    uint64_t bits[TURNS];
} taker;

static void *take_turns(void *arg)
{
    taker *k = arg;
    const size_t n = (size_t)k->h.p->batch * k->h.p->seq_q * k->h.p->d;
    for (int r = 0; r < TURNS; r++) {
        pthread_mutex_lock(&k->t->mu);
        while (k->t->turn % TAKERS != k->me)
            pthread_cond_wait(&k->t->cv, &k->t->mu);
        pthread_mutex_unlock(&k->t->mu);
        handoff_run(&k->h);
        k->bits[r] = k->h.st == MHA_OK ? hash_floats(k->h.out, n) : 0;
        pthread_mutex_lock(&k->t->mu);
        k->t->turn++;
        pthread_cond_broadcast(&k->t->cv);
        pthread_mutex_unlock(&k->t->mu);
    }
    return NULL;
}

Test(embedding, an_engine_moves_among_threads_that_live_on, .timeout = 60)
{
    for (int threads = 1; threads <= 2; threads++) {
        problem p;
        problem_make(&p, 64, 4, 2, 19, 19, 1, 0, 11);
        mha_engine *e = engine_for(&p, threads, MHA_LAYOUT_XW);
        const size_t n = (size_t)p.batch * p.seq_q * p.d;
        float *first = malloc(n * sizeof *first), *outs = malloc(TAKERS * n * sizeof *outs);
        const mha_input in = problem_input(&p);
        cr_assert_eq(mha_forward(e, &in, first, NULL), MHA_OK);
        turns t = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
        taker k[TAKERS];
        pthread_t th[TAKERS];
        for (int i = 0; i < TAKERS; i++) {
            k[i] = (taker){&t, i, {e, &p, outs + (size_t)i * n, MHA_OK}, {0}};
            cr_assert_eq(pthread_create(&th[i], NULL, take_turns, &k[i]), 0);
        }
        for (int i = 0; i < TAKERS; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < TAKERS; i++)
            for (int r = 0; r < TURNS; r++)
                cr_expect_eq(k[i].bits[r], hash_floats(first, n), "%d threads: taker %d, turn %d: %s", threads, i, r,
                             k[i].bits[r] ? "other bits" : "the call failed");
        free(first), free(outs);
        mha_free(e);
        problem_free(&p);
    }
}

/* ---- inside the caller's own OpenMP parallel region ---- */

/* An engine of 2 threads called from inside an active parallel region would run as 1 thread
 * (libgomp does not nest): refused with MHA_ERR_STATE and a message, nothing written; an
 * engine of 1 thread runs there, bit for bit as outside. */
Test(embedding, inside_a_callers_parallel_region, .timeout = 60)
{
    problem p;
    problem_make(&p, 64, 4, 2, 19, 19, 1, 0, 13);
    const size_t n = (size_t)p.batch * p.seq_q * p.d;
    mha_engine *two = engine_for(&p, 2, MHA_LAYOUT_XW), *one = engine_for(&p, 1, MHA_LAYOUT_XW);
    float *o2 = malloc(n * sizeof *o2), *o1 = malloc(n * sizeof *o1), *ref = malloc(n * sizeof *ref);
    memset(o2, 0x5A, n * sizeof *o2);
    const mha_input in = problem_input(&p);
    cr_assert_eq(mha_forward(one, &in, ref, NULL), MHA_OK);
    mha_status st2 = MHA_OK, st1 = MHA_ERR_STATE;
    char msg[256] = "";
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        {
            st2 = mha_forward(two, &in, o2, NULL);
            snprintf(msg, sizeof msg, "%s", mha_engine_last_error(two));
            st1 = mha_forward(one, &in, o1, NULL);
        }
    }
    cr_assert_eq(st2, MHA_ERR_STATE, "a 2-thread engine inside a parallel region: %s", mha_status_str(st2));
    cr_assert(strstr(msg, "inside an active OpenMP parallel region"), "%s", msg);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(((const unsigned char *)o2)[i * sizeof *o2], 0x5A, "out written by a refused call");
    cr_assert_eq(st1, MHA_OK, "a 1-thread engine inside a parallel region: %s", mha_status_str(st1));
    cr_assert_eq(first_bit_difference(o1, ref, n), -1, "inside and outside the region differ");
    /* and outside again, the 2-thread engine runs */
    cr_assert_eq(mha_forward(two, &in, o2, NULL), MHA_OK);
    cr_assert_eq(first_bit_difference(o2, ref, n), -1);
    free(o2), free(o1), free(ref);
    mha_free(two), mha_free(one);
    problem_free(&p);
}

/* ---- hostile numbers ---- */

static float *forward_of(const problem *p, int threads)
{
    mha_engine *e = engine_for(p, threads, MHA_LAYOUT_XW);
    size_t n = (size_t)p->batch * p->seq_q * p->d;
    float *out = malloc(n * sizeof *out);
    mha_input in = problem_input(p);
    mha_status st = mha_forward(e, &in, out, NULL);
    cr_assert_eq(st, MHA_OK, "forward: %s", mha_status_str(st));
    mha_free(e);
    return out;
}

Test(embedding, inf_nan_and_1e30_inputs_never_crash, .timeout = 60)
{
    static const float hostile[] = {INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 3.4e38f};
    for (int causal = 0; causal <= 1; causal++)
        for (int k = 0; k < 6; k++) {
            problem p;
            problem_make(&p, 64, 4, 3, 21, 21, 1, 0, 5);
            p.causal = causal;
            size_t n = (size_t)p.batch * p.seq_q * p.d;
            for (size_t i = k; i < n; i += 97) /* sprinkled over every sequence */
                p.q[i] = hostile[k];
            float *out = forward_of(&p, 2);
            free(out); /* whatever the values, the call returned and ASan saw no stray access */
            problem_free(&p);
        }
}

Test(embedding, large_finite_inputs_give_finite_outputs, .timeout = 60)
{
    /* inputs of 1e15: scores reach ~1e29, far past where exp overflows (88) — only the max
     * subtraction keeps the softmax finite; the result is then the nearest-key one-hot */
    problem p;
    problem_make(&p, 64, 4, 2, 17, 17, 1, 0, 9);
    size_t n = (size_t)p.batch * p.seq_q * p.d;
    for (size_t i = 0; i < n; i++)
        p.q[i] *= 1e15f;
    float *out = forward_of(&p, 2);
    for (size_t i = 0; i < n; i++)
        cr_assert(isfinite(out[i]), "out[%zu] = %g", i, out[i]);
    double *ref = malloc(n * sizeof *ref);
    reference_mha(&p, ref, NULL);
    /* the softmax is one-hot in both: the error is the projections' fp32 rounding, ~1e-7 */
    cr_assert_leq(rel_error(out, ref, n), 1e-5, "relative error %g", rel_error(out, ref, n));
    free(ref), free(out);
    problem_free(&p);
}

/* NaN in one sequence stays in that sequence: every row that sees the poisoned token becomes
 * NaN (all rows in full attention; with a causal mask, the rows at and after it), and no other
 * sequence changes by a bit. Causal rows before the token are left unspecified: its value row
 * meets their zero weights in A·V and 0 · NaN is NaN (as in PyTorch), depending on blocking. */
Test(embedding, nan_stays_in_its_sequence, .timeout = 60)
{
    for (int causal = 0; causal <= 1; causal++) {
        problem p;
        problem_make(&p, 64, 4, 3, 20, 20, 1, 0, 3);
        p.causal = causal;
        float *clean = forward_of(&p, 2);
        const int bad_b = 1, bad_row = 7;
        p.q[((size_t)bad_b * p.seq_q + bad_row) * p.d + 5] = NAN;
        float *out = forward_of(&p, 2);
        for (int b = 0; b < p.batch; b++)
            for (int i = 0; i < p.seq_q; i++) {
                const float *o = out + ((size_t)b * p.seq_q + i) * p.d, *c = clean + ((size_t)b * p.seq_q + i) * p.d;
                int poisoned = b == bad_b && (!causal || i >= bad_row);
                if (b == bad_b && !poisoned)
                    continue;
                for (int j = 0; j < p.d; j++) {
                    if (poisoned)
                        cr_assert(isnan(o[j]), "causal %d: b %d row %d col %d = %g, want NaN", causal, b, i, j, o[j]);
                    else
                        cr_assert(!memcmp(&o[j], &c[j], sizeof *o), "causal %d: b %d row %d col %d changed", causal, b, i, j);
                }
            }
        free(clean), free(out);
        problem_free(&p);
    }
}

Test(embedding, nan_in_padding_is_never_read, .timeout = 60)
{
    problem p;
    problem_make(&p, 64, 4, 2, 20, 20, 1, 0, 4);
    p.q_len = malloc(2 * sizeof *p.q_len), p.kv_len = malloc(2 * sizeof *p.kv_len);
    p.q_len[0] = p.kv_len[0] = 13, p.q_len[1] = p.kv_len[1] = 20;
    float *clean = forward_of(&p, 2);
    for (int i = 13; i < 20; i++) /* everything past sequence 0's length */
        for (int j = 0; j < p.d; j++)
            p.q[(size_t)i * p.d + j] = (i + j) % 2 ? NAN : INFINITY;
    float *out = forward_of(&p, 2);
    size_t n = (size_t)p.batch * p.seq_q * p.d;
    cr_assert_eq(first_bit_difference(out, clean, n), -1, "padding's contents reached the output");
    free(clean), free(out);
    problem_free(&p);
}

/* ---- fork ---- */

typedef struct fork_job {
    const problem *p;
    mha_engine *e; /* NULL: create one with `threads` */
    int threads;
    uint64_t hash;
} fork_job;

static void *fork_job_run(void *arg)
{
    fork_job *j = arg;
    mha_engine *e = j->e;
    if (!e) {
        mha_config cfg;
        problem_config(j->p, &cfg, j->threads);
        float *scratch;
        mha_weights w = problem_weights(j->p, MHA_LAYOUT_XW, &scratch);
        if (mha_create(&cfg, &e) != MHA_OK || mha_set_weights(e, &w) != MHA_OK)
            _exit(10);
        free(scratch);
    }
    size_t n = (size_t)j->p->batch * j->p->seq_q * j->p->d;
    float *out = malloc(n * sizeof *out);
    mha_input in = problem_input(j->p);
    if (mha_forward(e, &in, out, NULL) != MHA_OK)
        _exit(11);
    j->hash = hash_floats(out, n);
    free(out);
    if (!j->e)
        mha_free(e);
    return NULL;
}

static uint64_t in_new_thread(fork_job *j)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fork_job_run, j) != 0)
        _exit(12);
    pthread_join(t, NULL);
    return j->hash;
}

/* The parent runs a 2-thread engine, then forks. In the child: a new 2-thread engine and the
 * inherited one, each driven from a thread created after the fork, and a 1-thread engine on
 * the forking thread, all reproduce the parent's output bit for bit. (GCC's libgomp is not
 * fork-safe: the forking thread itself cannot start a team of more than one thread in the
 * child if it ran one in the parent — docs/server.md.) */
Test(embedding, engines_work_in_a_child_after_the_parent_used_one, .timeout = 120)
{
    problem p;
    problem_make(&p, 64, 4, 2, 24, 24, 1, 0, 21);
    mha_engine *e = engine_for(&p, 2, MHA_LAYOUT_XW);
    fork_job parent = {&p, e, 2, 0};
    fork_job_run(&parent); /* on this thread: libgomp now has a pool for it */
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        alarm(60); /* a hang becomes a signal, not a stuck suite */
        fork_job fresh = {&p, NULL, 2, 0}, inherited = {&p, e, 2, 0}, single = {&p, NULL, 1, 0};
        if (in_new_thread(&fresh) != parent.hash)
            _exit(1);
        if (in_new_thread(&inherited) != parent.hash)
            _exit(2);
        fork_job_run(&single);
        if (single.hash != parent.hash)
            _exit(3);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "child killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    cr_assert_eq(WEXITSTATUS(status), 0, "child check %d failed", WEXITSTATUS(status));
    /* and the parent's engine is untouched by the child */
    fork_job again = {&p, e, 2, 0};
    fork_job_run(&again);
    cr_assert_eq(again.hash, parent.hash);
    mha_free(e);
    problem_free(&p);
}
