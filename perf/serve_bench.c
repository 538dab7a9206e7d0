/* serve_bench.c — libmha embedded as a server embeds it: M worker threads, each owning an
 * engine with T OpenMP threads, fed by an open-loop request generator (Poisson arrivals at a
 * target rate) through one queue. A request is one sequence whose length is drawn from a
 * ragged distribution; its response is checked bit for bit against a checksum computed
 * offline, before the load, by a separate engine. Reports achieved throughput, latency and
 * queueing-delay percentiles, the process's CPU use, and stops by itself: arrivals end after
 * the duration, the queue drains, and a hard deadline ends a run that cannot keep up.
 *
 * --pool E: the M workers own no engine; they share E engines of T threads, each request
 * taking whichever is free, so engines migrate across request threads (libgomp then keeps a
 * team of T − 1 workers for every request thread that has run one: the "threads" column counts
 * the process's threads at the end of the arrivals, every worker alive).
 * --shared: every engine (a worker's or the pool's) reads one packed copy of the weights
 * (mha_pack_weights, mha_create_shared) instead of holding its own. --isa: the kernel table
 * (default auto; tests/tsan.sh runs ref, whose scalar accesses ThreadSanitizer sees).
 *
 * usage: serve_bench [--workers M] [--threads T] [--pool E] [--shared] [--isa NAME] [--rate R|auto]
 *                    [--duration S] [--d D] [--heads H] [--max-len L] [--seed N] [--calibrate] [--header]
 * --rate auto (default): 0.9 × the capacity measured closed-loop for 2 s with this M × T.
 * --calibrate: print only that capacity (requests/s). --header: the table header. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "mha.h"
#include "perf_util.h"

#define TEMPLATES 64 /* distinct requests; each arrival picks one at random */

typedef struct request_template {
    int len;
    float *x;          /* (len, d) */
    uint64_t checksum; /* FNV-1a of the expected output's bytes */
} request_template;

typedef struct request {
    int tmpl;
    double arrival, start, end; /* ms since the run began */
    int ok;
} request;

typedef struct server {
    int workers, threads, d, heads, max_len;
    double rate, duration_s;
    request_template t[TEMPLATES];
    mha_weights w;
    float *wbuf;
    mha_packed_weights *packed; /* --shared: the one copy every engine reads; else NULL */
    /* queue: requests[head, tail) are waiting; tail only grows */
    request *req;
    size_t cap, head, tail;
    int closed;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double t0;
    int failed; /* an engine call failed */
    int pool;   /* > 0: the workers share this many engines (in engines[], free when !busy[]) */
    int shared; /* --shared */
    const char *isa;
    mha_engine *engines[64];
    int busy[64];
    pthread_cond_t freed;
} server;

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The engines' config: the model, the kernel table, one sequence of up to max_len tokens. */
static mha_config engine_config(const server *s, int threads)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = s->d, cfg.n_heads = s->heads, cfg.threads = threads;
    snprintf(cfg.isa, sizeof cfg.isa, "%s", s->isa);
    cfg.max_batch = 1, cfg.max_seq_q = cfg.max_seq_kv = s->max_len;
    return cfg;
}

static mha_engine *make_engine(const server *s, int threads)
{
    const mha_config cfg = engine_config(s, threads);
    mha_engine *e = NULL;
    if (s->packed ? mha_create_shared(&cfg, s->packed, &e) != MHA_OK
                  : mha_create(&cfg, &e) != MHA_OK || mha_set_weights(e, &s->w) != MHA_OK) {
        mha_free(e);
        return NULL;
    }
    return e;
}

static mha_status serve_one(mha_engine *e, const request_template *t, float *out)
{
    mha_input in = {.batch = 1, .seq_q = t->len, .seq_kv = t->len, .q = t->x, .k = t->x, .v = t->x};
    return mha_forward(e, &in, out, NULL);
}

/* Ragged lengths: log-uniform over [8, max_len], so short requests are common and long ones
 * present, as in serving traffic. Checksums from one 1-thread engine: mha's output does not
 * depend on the thread count (bitwise; tested), so any worker must reproduce them. */
static int prepare(server *s, uint64_t seed)
{
    size_t dd = (size_t)s->d * s->d;
    if (!(s->wbuf = malloc((4 * dd + 4 * (size_t)s->d) * sizeof *s->wbuf)))
        return -1;
    float bound = 1.0f / sqrtf((float)s->d);
    for (size_t i = 0; i < 4 * dd + 4 * (size_t)s->d; i++)
        s->wbuf[i] = (float)(2 * uniform01(&seed) - 1) * bound;
    float *w = s->wbuf, *b = w + 4 * dd;
    s->w = (mha_weights){.w_q = w, .w_k = w + dd, .w_v = w + 2 * dd, .w_o = w + 3 * dd, .b_q = b, .b_k = b + s->d,
                         .b_v = b + 2 * s->d, .b_o = b + 3 * s->d, .layout = MHA_LAYOUT_XW};
    mha_engine *e = make_engine(s, 1); /* before any packing: the checksums come from an engine's own copy */
    float *out = malloc((size_t)s->max_len * s->d * sizeof *out);
    if (!e || !out)
        return free(out), mha_free(e), -1;
    for (int i = 0; i < TEMPLATES; i++) {
        request_template *t = &s->t[i];
        t->len = (int)lround(exp(log(8.0) + uniform01(&seed) * (log((double)s->max_len) - log(8.0))));
        if (!(t->x = malloc((size_t)t->len * s->d * sizeof *t->x)))
            return free(out), mha_free(e), -1;
        for (size_t j = 0; j < (size_t)t->len * s->d; j++)
            t->x[j] = (float)(2 * uniform01(&seed) - 1);
        if (serve_one(e, t, out) != MHA_OK)
            return free(out), mha_free(e), -1;
        t->checksum = fnv1a(out, (size_t)t->len * s->d * sizeof *out);
    }
    free(out);
    mha_free(e);
    if (s->shared) {
        const mha_config cfg = engine_config(s, 1);
        if (mha_pack_weights(&cfg, &s->w, &s->packed) != MHA_OK)
            return -1;
    }
    return 0;
}

/* Pool mode: a free engine of the pool (waiting for one), and giving it back. */
static int take_engine(server *s)
{
    pthread_mutex_lock(&s->mu);
    int k = -1;
    while (k < 0) {
        for (int i = 0; i < s->pool && k < 0; i++)
            if (!s->busy[i])
                k = i;
        if (k < 0)
            pthread_cond_wait(&s->freed, &s->mu);
    }
    s->busy[k] = 1;
    pthread_mutex_unlock(&s->mu);
    return k;
}

static void give_engine(server *s, int k)
{
    pthread_mutex_lock(&s->mu);
    s->busy[k] = 0;
    pthread_cond_signal(&s->freed);
    pthread_mutex_unlock(&s->mu);
}

static int process_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8))
            n = atoi(line + 8);
    if (f)
        fclose(f);
    return n;
}

static void *worker(void *arg)
{
    server *s = arg;
    mha_engine *e = s->pool ? NULL : make_engine(s, s->threads);
    float *out = malloc((size_t)s->max_len * s->d * sizeof *out);
    if ((!s->pool && !e) || !out) {
        pthread_mutex_lock(&s->mu);
        s->failed = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->head == s->tail && !s->closed && !s->failed)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->failed || (s->head == s->tail && s->closed)) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        request *r = &s->req[s->head++];
        pthread_mutex_unlock(&s->mu);
        r->start = now_ms() - s->t0;
        const request_template *t = &s->t[r->tmpl];
        const int k = s->pool ? take_engine(s) : -1;
        mha_status st = serve_one(k >= 0 ? s->engines[k] : e, t, out);
        if (k >= 0)
            give_engine(s, k);
        r->end = now_ms() - s->t0;
        r->ok = st == MHA_OK && fnv1a(out, (size_t)t->len * s->d * sizeof *out) == t->checksum;
        if (st != MHA_OK) {
            pthread_mutex_lock(&s->mu);
            s->failed = 1;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
        }
    }
    free(out);
    mha_free(e);
    return NULL;
}

static void push(server *s, int tmpl, double arrival)
{
    pthread_mutex_lock(&s->mu);
    if (s->tail < s->cap) {
        s->req[s->tail] = (request){.tmpl = tmpl, .arrival = arrival};
        s->tail++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static double pct(const double *sorted, size_t n, double p)
{
    if (!n)
        return NAN;
    size_t i = (size_t)ceil(p / 100.0 * (double)n);
    return sorted[i ? i - 1 : 0];
}

/* One run. closed: every worker takes a request as soon as it is free (capacity). Returns
 * requests/s completed, and prints the table row unless quiet. */
static double run(server *s, int closed, int quiet, uint64_t seed)
{
    double expect = closed ? 1e6 : s->rate * s->duration_s * 1.5 + 1024;
    s->cap = (size_t)expect;
    s->req = calloc(s->cap, sizeof *s->req);
    if (!s->req)
        return -1;
    s->head = s->tail = 0, s->closed = 0, s->failed = 0;
    pthread_t *th = calloc((size_t)s->workers, sizeof *th);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    s->t0 = now_ms();
    if (closed) { /* every request there at t = 0; measure how fast the workers empty it */
        for (size_t i = 0; i < s->cap; i++)
            s->req[i] = (request){.tmpl = (int)(splitmix(&seed) % TEMPLATES)};
        s->tail = s->cap;
    }
    for (int i = 0; i < s->workers; i++)
        pthread_create(&th[i], NULL, worker, s);
    const double end_ms = s->duration_s * 1e3, deadline = 2 * end_ms + 10e3;
    if (closed) {
        while (now_ms() - s->t0 < end_ms)
            usleep(10000);
    } else { /* open loop: Poisson arrivals, whatever the workers manage */
        double next = 0;
        while (next < end_ms) {
            double t = now_ms() - s->t0;
            if (t < next) {
                double wait = next - t;
                if (wait > 0.05)
                    usleep((useconds_t)(wait * 1e3 * 0.8));
                continue;
            }
            push(s, (int)(splitmix(&seed) % TEMPLATES), next);
            next += -log(1.0 - uniform01(&seed)) * 1e3 / s->rate;
        }
    }
    const int threads_live = process_threads(); /* every worker alive, with its OpenMP team */
    pthread_mutex_lock(&s->mu);
    if (closed)
        s->tail = s->head; /* drop what is left: capacity is what got done in the time */
    s->closed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    /* drain, but not forever: a run that cannot keep up is cut at the deadline */
    int cut = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int empty = s->head == s->tail;
        if (!empty && now_ms() - s->t0 > deadline)
            s->tail = s->head, cut = 1;
        pthread_mutex_unlock(&s->mu);
        if (empty || cut)
            break;
        usleep(10000);
    }
    for (int i = 0; i < s->workers; i++)
        pthread_join(th[i], NULL);
    double wall = now_ms() - s->t0;
    getrusage(RUSAGE_SELF, &ru1);
    double cpu_s = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                   (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    free(th);

    /* statistics over the requests served, the first 10% of the arrival window left out
     * (engines and caches warming up) */
    size_t n = 0, bad = 0, done = 0;
    double tokens = 0, busy = 0;
    double *lat = malloc(s->head * sizeof *lat + 1), *queue = malloc(s->head * sizeof *queue + 1);
    double first = 1e300, last = 0;
    for (size_t i = 0; i < s->head; i++) {
        const request *r = &s->req[i];
        if (r->end <= 0)
            continue;
        done++;
        bad += !r->ok;
        busy += r->end - r->start;
        if (!closed && r->arrival < 0.1 * end_ms)
            continue;
        lat[n] = r->end - r->arrival, queue[n] = r->start - r->arrival, n++;
        tokens += s->t[r->tmpl].len;
        first = r->arrival < first ? r->arrival : first;
        last = r->end > last ? r->end : last;
    }
    qsort(lat, n, sizeof *lat, cmp_double);
    qsort(queue, n, sizeof *queue, cmp_double);
    double span_s = closed ? end_ms / 1e3 : (last - first) / 1e3;
    double achieved = closed ? (double)done / span_s : (double)n / span_s;
    if (!quiet) {
        const char *wp = getenv("OMP_WAIT_POLICY");
        char split[80];
        if (s->pool)
            snprintf(split, sizeof split, "%d threads sharing %d × %d%s", s->workers, s->pool, s->threads,
                     s->packed ? ", one weights copy" : "");
        else
            snprintf(split, sizeof split, "%d × %d%s", s->workers, s->threads, s->packed ? ", one weights copy" : "");
        printf("| %s | %s | %d | %.1f | %.1f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f%% | %zu/%zu%s |\n",
               split, wp ? wp : "default", threads_live, s->rate, achieved, tokens / span_s, pct(lat, n, 50),
               pct(lat, n, 95), pct(lat, n, 99), lat[n ? n - 1 : 0], pct(queue, n, 50), pct(queue, n, 99),
               busy / wall * 100 / s->workers, 100 * cpu_s / (wall / 1e3) / (double)sysconf(_SC_NPROCESSORS_ONLN),
               done - bad, done, cut ? ", cut at the deadline" : "");
        fflush(stdout);
    }
    free(lat), free(queue), free(s->req);
    s->req = NULL;
    if (s->failed) {
        fprintf(stderr, "serve_bench: an engine failed\n");
        return -1;
    }
    if (bad) {
        fprintf(stderr, "serve_bench: %zu of %zu responses differ from their offline checksum\n", bad, done);
        return -1;
    }
    return achieved;
}

int main(int argc, char **argv)
{
    server s = {.workers = 1, .threads = 2, .d = 768, .heads = 12, .max_len = 256, .duration_s = 20, .isa = "auto"};
    uint64_t seed = 42;
    int calibrate = 0, auto_rate = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--header")) {
            printf("| M × T | OMP_WAIT_POLICY | threads | offered req/s | achieved req/s | tokens/s | p50 ms | p95 ms | "
                   "p99 ms | max ms | queue p50 ms | queue p99 ms | worker busy | process CPU | ok/served |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
            return 0;
        }
        if (!strcmp(a, "--calibrate")) { calibrate = 1; continue; }
        if (!strcmp(a, "--shared")) { s.shared = 1; continue; }
        if (!v) { fprintf(stderr, "serve_bench: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--workers")) s.workers = atoi(v);
        else if (!strcmp(a, "--threads")) s.threads = atoi(v);
        else if (!strcmp(a, "--pool")) s.pool = atoi(v);
        else if (!strcmp(a, "--isa")) s.isa = v;
        else if (!strcmp(a, "--rate")) { auto_rate = !strcmp(v, "auto"); s.rate = auto_rate ? 0 : atof(v); }
        else if (!strcmp(a, "--duration")) s.duration_s = atof(v);
        else if (!strcmp(a, "--d")) s.d = atoi(v);
        else if (!strcmp(a, "--heads")) s.heads = atoi(v);
        else if (!strcmp(a, "--max-len")) s.max_len = atoi(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else { fprintf(stderr, "serve_bench: unknown option %s\n", a); return 2; }
    }
    if (s.workers < 1 || s.workers > 256 || s.threads < 1 || s.threads > 256 || s.pool < 0 || s.pool > 64 ||
        s.duration_s <= 0 ||
        s.duration_s > 3600 || s.max_len < 8 || s.max_len > 8192 || s.d < 1 || s.heads < 1 || s.d % s.heads ||
        (!auto_rate && !(s.rate > 0 && s.rate < 1e6)) || strlen(s.isa) >= sizeof ((mha_config *)0)->isa) {
        fprintf(stderr, "serve_bench: an option is out of range (see the usage at the top of perf/serve_bench.c)\n");
        return 2;
    }
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_cond_init(&s.freed, NULL);
    if (prepare(&s, seed) != 0) {
        fprintf(stderr, "serve_bench: could not prepare the requests (memory or engine)\n");
        return 1;
    }
    for (int i = 0; i < s.pool; i++)
        if (!(s.engines[i] = make_engine(&s, s.threads))) {
            fprintf(stderr, "serve_bench: could not make the pool's engines\n");
            return 1;
        }
    int rc = 0;
    if (calibrate || auto_rate) {
        double d = s.duration_s;
        s.duration_s = 2;
        double cap = run(&s, 1, 1, seed);
        s.duration_s = d;
        if (cap <= 0)
            rc = 1;
        else if (calibrate)
            printf("%.1f\n", cap);
        s.rate = 0.9 * cap;
    }
    if (!rc && !calibrate && run(&s, 0, 0, seed + 1) < 0)
        rc = 1;
    for (int i = 0; i < TEMPLATES; i++)
        free(s.t[i].x);
    for (int i = 0; i < s.pool; i++)
        mha_free(s.engines[i]);
    mha_packed_weights_free(s.packed);
    free(s.wbuf);
    return rc;
}
