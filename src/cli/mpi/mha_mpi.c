/* mha_mpi.c — `mpirun -np N mha-mpi run CONFIG --input X.npy [options]`: batch inference
 * sharded over MPI ranks.
 *
 * Rank 0 reads the config, the input's header, the lengths and the weights, and broadcasts
 * them. The batch is cut into N contiguous shards balanced by work (len² per sequence,
 * shard.h). Each rank reads only its own rows of the input with MPI-IO (offsets from the
 * .npy header), runs its own engine with its OpenMP threads, and writes only its own rows
 * of the output into a temporary file that rank 0 renames into place once every rank has
 * succeeded: the output is complete or absent. The temporary name is unique per run
 * (OUTPUT.mpi-tmp.PID.TAG beside the output's target, symlinks followed), so concurrent runs
 * never share one; rank 0 removes it when the job is terminated (SIGTERM, SIGINT, SIGHUP,
 * as mpirun sends when a rank dies), and removes leftovers of runs that were killed outright
 * (their PID no longer alive on this host) before it writes. After every phase the ranks agree on the
 * outcome; if one failed, all exit non-zero and rank 0 prints the failing rank's message.
 * Each sequence's rows depend on that sequence alone, so the output is bitwise identical
 * to `mha run` on the whole batch. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <mpi.h>

#include "cli.h"
#include "mha_io.h"
#include "shard.h"

typedef struct opts {
    const char *config, *weights, *prefix, *input, *lengths, *output;
    long threads, iters, warmup;
    int have_threads, have_iters, have_warmup, json, causal;
} opts;

/* What every rank knows after the broadcasts (plain data: sent as bytes). */
typedef struct shared {
    cli_config fc;
    int batch, seq, d, layout, has_lengths;
    uint64_t data_offset;
    long w_off[11]; /* offsets of w_q … b_o, q_norm, k_norm, sinks (MLA: of mha_mla_weights' eleven,
                     * weight_views' order) in the weight buffer, -1: none */
    size_t wlen;   /* floats in the weight buffer */
} shared;

typedef struct rank_result {
    int first, count;
    double tokens, median, min, max;
} rank_result;

static int rank_, size_;

static void usage(FILE *f)
{
    fputs("usage: mpirun -np N mha-mpi run CONFIG --input X.npy --output Y.npy [--lengths L.npy]\n"
          "                  [--weights W.safetensors] [--prefix P] [--threads T] [--iters N]\n"
          "                  [--warmup N] [--causal] [--json]\n"
          "Self-attention over the batch in X.npy (batch, seq, d_model), split into N contiguous shards\n"
          "balanced by work (length² per sequence); T OpenMP threads per rank (default: the config's).\n"
          "Y.npy is bitwise identical to `mha run` on the whole batch, and complete or absent.\n", f);
}

/* A failure message of this rank, kept until the ranks agree. */
static char msg_[1024];
static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg_, sizeof msg_, fmt, ap);
    va_end(ap);
    return code;
}

/* Every rank brings its exit code; all get the worst. On failure the lowest failing rank's
 * message reaches rank 0, which prints it. */
static int agree(int rc)
{
    int worst = 0, first = size_;
    int mine = rc ? rank_ : size_;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!worst)
        return 0;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Bcast(msg_, sizeof msg_, MPI_CHAR, first, MPI_COMM_WORLD);
    if (rank_ == 0)
        fprintf(stderr, "mha-mpi: rank %d of %d: %s\n", first, size_, msg_);
    return worst;
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option longopts[] = {
        {"weights", required_argument, 0, 'w'}, {"prefix", required_argument, 0, 'p'},
        {"input", required_argument, 0, 'i'},   {"lengths", required_argument, 0, 'l'},
        {"output", required_argument, 0, 'o'},  {"threads", required_argument, 0, 't'},
        {"iters", required_argument, 0, 'n'},   {"warmup", required_argument, 0, 'W'},
        {"causal", no_argument, 0, 'C'},        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    optind = 1;
    opterr = 0;
    int c;
    char tmp[256];
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        long *v = c == 't' ? &o->threads : c == 'n' ? &o->iters : c == 'W' ? &o->warmup : NULL;
        if (v) {
            char *end;
            *v = strtol(optarg, &end, 10);
            long lo = c == 'n' ? 1 : 0, hi = c == 't' ? MHA_MAX_THREADS : 1000000;
            if (end == optarg || *end || *v < lo || *v > hi)
                return fail(EXIT_USAGE, "--%s: expected an integer in %ld..%ld, got '%s'",
                            c == 't' ? "threads" : c == 'n' ? "iters" : "warmup", lo, hi, optarg);
            *(c == 't' ? &o->have_threads : c == 'n' ? &o->have_iters : &o->have_warmup) = 1;
            continue;
        }
        switch (c) {
        case 'w': o->weights = optarg; break;
        case 'p': o->prefix = optarg; break;
        case 'i': o->input = optarg; break;
        case 'l': o->lengths = optarg; break;
        case 'o': o->output = optarg; break;
        case 'C': o->causal = 1; break;
        case 'j': o->json = 1; break;
        case 'h': if (rank_ == 0) usage(stdout); return -1;
        case ':': return fail(EXIT_USAGE, "%s needs a value", argv[optind - 1]);
        default:
            snprintf(tmp, sizeof tmp, "%s", argv[optind - 1]);
            return fail(EXIT_USAGE, "unknown option '%s' (see mha-mpi run --help)", tmp);
        }
    }
    if (optind < argc)
        o->config = argv[optind++];
    if (optind < argc)
        return fail(EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!o->config || !o->input || !o->output)
        return fail(EXIT_USAGE, "CONFIG, --input and --output are required (see mha-mpi run --help)");
    return 0;
}

/* The eleven weight pointers of the problem, MHA's or MLA's, in the order w_off keeps them. */
static void weight_views(cli_problem *p, const float **v[11])
{
    mha_weights *w = &p->w;
    mha_mla_weights *m = &p->mw;
    const float **mha[11] = {&w->w_q, &w->w_k, &w->w_v, &w->w_o, &w->b_q, &w->b_k, &w->b_v, &w->b_o,
                             &w->q_norm, &w->k_norm, &w->sinks};
    const float **mla[11] = {&m->q_a, &m->q_a_norm, &m->q_b, &m->q, &m->kv_a, &m->kv_a_norm, &m->kv_b, &m->o,
                             &m->b_q_a, &m->b_kv_a, &m->b_o};
    memcpy(v, p->mla.kv_lora_rank ? mla : mha, sizeof mha);
}

/* Rank 0: config, input header, lengths, weights. */
static int load_on_root(const opts *o, shared *sh, int32_t **lengths, float **wbuf, size_t *wlen)
{
    char err[1024];
    mha_status st;
    cli_config_default(&sh->fc);
    if ((st = cli_config_load(o->config, &sh->fc, err, sizeof err)) != MHA_OK ||
        (st = cli_config_projections(&sh->fc, err, sizeof err)) != MHA_OK)
        return fail(cli_exit_code(st), "%s", err);
    if (o->have_threads) sh->fc.engine.threads = (int)o->threads;
    if (o->have_iters) sh->fc.iters = (int)o->iters;
    if (o->have_warmup) sh->fc.warmup = (int)o->warmup;
    if (o->causal) sh->fc.mask = MHA_MASK_CAUSAL;
    mha_npy_header h;
    if ((st = mha_npy_open(o->input, &h, err, sizeof err)) != MHA_OK)
        return fail(cli_exit_code(st), "%s", err);
    if (h.dtype != MHA_NPY_F4 || h.rank != 3 || h.shape[2] != sh->fc.engine.d_model || h.shape[0] < 1 || h.shape[1] < 1 ||
        h.shape[0] > 1 << 20 || h.shape[1] > 1 << 24)
        return fail(EXIT_USAGE, "%s: want float32 (batch, seq, d_model = %d), found a %d-d %s array", o->input,
                    sh->fc.engine.d_model, h.rank, h.dtype == MHA_NPY_F4 ? "float32" : "integer");
    sh->batch = (int)h.shape[0], sh->seq = (int)h.shape[1], sh->d = sh->fc.engine.d_model;
    sh->data_offset = h.data_offset;
    if (sh->fc.mask == MHA_MASK_PADDING && !o->lengths)
        return fail(EXIT_USAGE, "%s: batch.mask is padding, but no --lengths file is given", o->config);
    if (o->lengths) {
        int64_t n;
        if ((st = mha_npy_load_lengths(o->lengths, &n, lengths, sh->seq, err, sizeof err)) != MHA_OK)
            return fail(cli_exit_code(st), "%s", err);
        if (n != sh->batch)
            return fail(EXIT_USAGE, "%s: %lld lengths for a batch of %d", o->lengths, (long long)n, sh->batch);
        sh->has_lengths = 1;
    }
    cli_problem p = {0};
    cli_problem_model(&p, &sh->fc.engine);
    const float *base;
    mha_weights_file wf;
    if (o->weights) {
        if ((st = mha_weights_file_load(o->weights, o->prefix, &sh->fc.engine, &wf, err, sizeof err)) != MHA_OK)
            return fail(cli_exit_code(st), "%s", err);
        p.w = wf.w, *wbuf = wf.storage, base = wf.storage; /* the buffer is ours to free */
    } else {
        if (o->prefix)
            return fail(EXIT_USAGE, "--prefix: only with --weights");
        if (cli_generate_weights(&sh->fc, &p, wbuf) != EXIT_OK)
            return fail(EXIT_RUNTIME, "out of memory for the weights");
        base = *wbuf;
    }
    if (o->weights && p.mla.kv_lora_rank)
        p.mw = wf.mla;
    *wlen = sh->wlen = o->weights ? wf.n_floats : cli_weight_floats(&p);
    const float **views[11];
    weight_views(&p, views);
    for (int i = 0; i < 11; i++)
        sh->w_off[i] = *views[i] ? (long)(*views[i] - base) : -1;
    sh->layout = (int)(p.mla.kv_lora_rank ? p.mw.layout : p.w.layout);
    return EXIT_OK;
}

/* Large transfers in pieces: MPI counts are ints. */
#define CHUNK (1 << 28)

static int read_rows(const char *path, uint64_t offset, float *dst, size_t count)
{
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        return fail(EXIT_RUNTIME, "%s: MPI-IO cannot open it", path);
    int rc = EXIT_OK;
    for (size_t done = 0; done < count && rc == EXIT_OK;) {
        int k = (int)(count - done < CHUNK ? count - done : CHUNK);
        MPI_Status status;
        int got = 0;
        if (MPI_File_read_at(fh, (MPI_Offset)(offset + done * sizeof *dst), dst + done, k, MPI_FLOAT, &status) != MPI_SUCCESS ||
            MPI_Get_count(&status, MPI_FLOAT, &got) != MPI_SUCCESS || got != k)
            rc = fail(EXIT_RUNTIME, "%s: short read at byte %llu", path, (unsigned long long)(offset + done * sizeof *dst));
        done += (size_t)k;
    }
    MPI_File_close(&fh);
    return rc;
}

/* This rank's shard: its rows, its output, its engine. */
typedef struct shard {
    int first, count;
    float *x, *out;
    double *times;
    mha_engine *e;
} shard;

static void shard_free(shard *sd)
{
    mha_free(sd->e);
    free(sd->x), free(sd->out), free(sd->times);
}

/* Everything that can fail for want of memory or a bad file, before any compute: the ranks
 * agree on it before the first forward. */
static int prepare_shard(const opts *o, const shared *sh, const float *w, shard *sd)
{
    if (sd->count == 0)
        return EXIT_OK;
    const size_t row = (size_t)sh->seq * sh->d, n = (size_t)sd->count * row;
    sd->x = malloc(n * sizeof *sd->x);
    sd->out = malloc(n * sizeof *sd->out);
    sd->times = malloc((size_t)sh->fc.iters * sizeof *sd->times);
    if (!sd->x || !sd->out || !sd->times)
        return fail(EXIT_RUNTIME, "out of memory for a shard of %d × %d × %d (%.0f MiB)", sd->count, sh->seq, sh->d,
                    2.0 * (double)n * sizeof(float) / 1048576.0);
    int rc = read_rows(o->input, sh->data_offset + (uint64_t)sd->first * row * sizeof *sd->x, sd->x, n);
    if (rc != EXIT_OK)
        return rc;
    mha_config cfg;
    cfg = sh->fc.engine;
    cfg.max_batch = sd->count, cfg.max_seq_q = cfg.max_seq_kv = sh->seq;
    cli_problem p = {0};
    cli_problem_model(&p, &cfg);
    const float **v[11];
    weight_views(&p, v);
    for (int i = 0; i < 11; i++)
        *v[i] = sh->w_off[i] >= 0 ? w + sh->w_off[i] : NULL;
    p.w.layout = p.mw.layout = (mha_layout)sh->layout;
    mha_status st;
    char why[256] = "";
    if ((st = mha_create(&cfg, &sd->e)) != MHA_OK || (st = cli_set_weights(sd->e, &p)) != MHA_OK) {
        mha_config_check(&cfg, why, sizeof why);
        return fail(cli_exit_code(st), "engine for a shard of %d × %d: %s%s%s", sd->count, sh->seq, mha_status_str(st),
                    why[0] ? ": " : "", why);
    }
    return EXIT_OK;
}

/* Warm-up and timed forwards; sd->out keeps the last one's rows. */
static int run_shard(const shared *sh, const int32_t *lengths, shard *sd, rank_result *res)
{
    res->first = sd->first, res->count = sd->count;
    if (sd->count == 0)
        return EXIT_OK;
    const int32_t *len = lengths ? lengths + sd->first : NULL;
    mha_input in = {.batch = sd->count, .seq_q = sh->seq, .seq_kv = sh->seq, .q = sd->x, .k = sd->x, .v = sd->x,
                    .q_lengths = len, .kv_lengths = len, .causal = sh->fc.mask == MHA_MASK_CAUSAL};
    mha_status st = MHA_OK;
    for (int i = 0; st == MHA_OK && i < sh->fc.warmup; i++)
        st = mha_forward(sd->e, &in, sd->out, NULL);
    for (int i = 0; st == MHA_OK && i < sh->fc.iters; i++) {
        double t0 = MPI_Wtime();
        st = mha_forward(sd->e, &in, sd->out, NULL);
        sd->times[i] = (MPI_Wtime() - t0) * 1e3;
    }
    if (st != MHA_OK)
        return fail(cli_exit_code(st), "forward: %s", mha_status_str(st));
    cli_stats t = cli_stats_of(sd->times, sh->fc.iters);
    res->median = t.median, res->min = t.min, res->max = t.max;
    for (int b = 0; b < sd->count; b++)
        res->tokens += len ? len[b] : sh->seq;
    return EXIT_OK;
}

/* Every rank writes its rows into tmp (rank 0 also the header); rank 0 renames it later. */
static int write_rows(const char *tmp, const shared *sh, const float *out, int first, int count, int *opened)
{
    int64_t shape[3] = {sh->batch, sh->seq, sh->d};
    unsigned char header[MHA_NPY_MAX_HEADER];
    size_t hlen = mha_npy_format_header("<f4", 3, shape, header, sizeof header);
    const size_t row = (size_t)sh->seq * sh->d;
    MPI_File fh;
    /* collective: every rank reaches it, whatever happened before, so the ranks stay in step */
    if (MPI_File_open(MPI_COMM_WORLD, tmp, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        return fail(EXIT_RUNTIME, "%s: cannot create it", tmp);
    *opened = 1;
    int rc = EXIT_OK;
    MPI_Offset total = (MPI_Offset)(hlen + (size_t)sh->batch * row * sizeof *out);
    if (MPI_File_set_size(fh, total) != MPI_SUCCESS)
        rc = fail(EXIT_RUNTIME, "%s: cannot size it to %lld bytes", tmp, (long long)total);
    MPI_Status status;
    if (rc == EXIT_OK && rank_ == 0 &&
        MPI_File_write_at(fh, 0, header, (int)hlen, MPI_BYTE, &status) != MPI_SUCCESS)
        rc = fail(EXIT_RUNTIME, "%s: cannot write the header", tmp);
    const size_t n = (size_t)count * row;
    for (size_t done = 0; rc == EXIT_OK && done < n;) {
        int k = (int)(n - done < CHUNK ? n - done : CHUNK);
        MPI_Offset at = (MPI_Offset)(hlen + ((size_t)first * row + done) * sizeof *out);
        if (MPI_File_write_at(fh, at, out + done, k, MPI_FLOAT, &status) != MPI_SUCCESS)
            rc = fail(EXIT_RUNTIME, "%s: write failed at byte %lld", tmp, (long long)at);
        done += (size_t)k;
    }
    if (MPI_File_close(&fh) != MPI_SUCCESS && rc == EXIT_OK)
        rc = fail(EXIT_RUNTIME, "%s: close failed", tmp);
    return rc;
}

static void report(const opts *o, const shared *sh, const rank_result *all, const int *bounds, const uint64_t *cost)
{
    double tokens = 0, slowest = 0, busy = 0;
    for (int r = 0; r < size_; r++) {
        tokens += all[r].tokens;
        slowest = all[r].median > slowest ? all[r].median : slowest;
        busy += all[r].median;
    }
    const double total_tps = slowest > 0 ? tokens / (slowest / 1e3) : 0;
    const double imbalance = busy > 0 ? slowest / (busy / size_) : 1;
    if (o->json) {
        json_t *j = json_object(), *ranks = json_array();
        for (int r = 0; r < size_; r++) {
            uint64_t c = 0;
            for (int b = bounds[r]; b < bounds[r + 1]; b++)
                c += cost[b];
            json_t *x = json_object();
            json_object_set_new(x, "rank", json_integer(r));
            json_object_set_new(x, "first", json_integer(all[r].first));
            json_object_set_new(x, "sequences", json_integer(all[r].count));
            json_object_set_new(x, "tokens", json_integer((json_int_t)all[r].tokens));
            json_object_set_new(x, "cost", json_integer((json_int_t)c));
            json_object_set_new(x, "median_ms", json_real(all[r].median));
            json_object_set_new(x, "min_ms", json_real(all[r].min));
            json_object_set_new(x, "max_ms", json_real(all[r].max));
            json_object_set_new(x, "tokens_per_s", json_real(all[r].median > 0 ? all[r].tokens / (all[r].median / 1e3) : 0));
            json_array_append_new(ranks, x);
        }
        json_object_set_new(j, "name", json_string(sh->fc.name));
        json_object_set_new(j, "ranks", json_integer(size_));
        json_object_set_new(j, "threads_per_rank", json_integer(sh->fc.engine.threads));
        json_object_set_new(j, "batch", json_integer(sh->batch));
        json_object_set_new(j, "seq", json_integer(sh->seq));
        json_object_set_new(j, "d_model", json_integer(sh->d));
        json_object_set_new(j, "iters", json_integer(sh->fc.iters));
        json_object_set_new(j, "per_rank", ranks);
        json_object_set_new(j, "tokens_per_s", json_real(total_tps));
        json_object_set_new(j, "imbalance", json_real(imbalance));
        json_object_set_new(j, "output", json_string(o->output));
        cli_print_json(j);
        return;
    }
    printf("mha-mpi run: %s (%s), %d ranks × %d threads, batch %d × %d, d_model %d\n", sh->fc.name, o->config, size_,
           sh->fc.engine.threads, sh->batch, sh->seq, sh->d);
    for (int r = 0; r < size_; r++) {
        if (all[r].count == 0) { /* more ranks than sequences worth splitting */
            printf("  rank %d: idle (no sequences)\n", r);
            continue;
        }
        printf("  rank %d: sequences %d..%d (%d), %.0f tokens, median %.3f ms (min %.3f, max %.3f), %.0f tokens/s\n", r,
               all[r].first, all[r].first + all[r].count - 1, all[r].count, all[r].tokens, all[r].median, all[r].min,
               all[r].max, all[r].median > 0 ? all[r].tokens / (all[r].median / 1e3) : 0.0);
    }
    printf("  total: %.0f tokens in %.3f ms (slowest rank's median), %.0f tokens/s; imbalance %.2f (slowest / mean)\n",
           tokens, slowest, total_tps, imbalance);
    printf("  wrote %s (%d, %d, %d)\n", o->output, sh->batch, sh->seq, sh->d);
}

/* ---- the output's temporary file ---- */

static char cleanup_path_[PATH_MAX + 96]; /* rank 0: the temporary to remove on a signal */
static mode_t replaced_mode_;             /* rank 0: the mode of the file replaced, 0: new */

static void remove_and_exit(int sig)
{
    if (cleanup_path_[0])
        unlink(cleanup_path_); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Rank 0: where the output goes (a symlink's target) and a temporary name beside it unique
 * to this run; EXIT_USAGE when the output is something MPI-IO cannot replace. */
static int temp_name(const char *output, char *target, size_t nt, char *tmp, size_t n)
{
    struct stat st;
    if (stat(output, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return fail(EXIT_USAGE, "%s: not a regular file: mha-mpi writes its output with MPI-IO at offsets and "
                                    "renames it into place (use mha run to write to a pipe or device)", output);
        if (!realpath(output, target))
            return fail(EXIT_RUNTIME, "%s: %s", output, strerror(errno));
        replaced_mode_ = st.st_mode & 07777;
    } else {
        snprintf(target, nt, "%s", output);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (snprintf(tmp, n, "%s.mpi-tmp.%ld.%lx", target, (long)getpid(), (unsigned long)ts.tv_nsec) >= (int)n)
        return fail(EXIT_USAGE, "%s: path too long", output);
    return EXIT_OK;
}

/* Rank 0: removes TARGET.mpi-tmp.PID.* left by runs on this host whose PID is gone. */
static void remove_stale(const char *target)
{
    char dir[PATH_MAX], prefix[PATH_MAX];
    const char *slash = strrchr(target, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - target) : 1, slash ? target : ".");
    if (slash && slash == target)
        snprintf(dir, sizeof dir, "/");
    snprintf(prefix, sizeof prefix, "%s.mpi-tmp.", slash ? slash + 1 : target);
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t np = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        long pid;
        if (strncmp(e->d_name, prefix, np) != 0 || sscanf(e->d_name + np, "%ld.", &pid) != 1 || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to ask): another run's file */
        char path[2 * PATH_MAX + 2];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    opts o;
    shared sh;
    memset(&sh, 0, sizeof sh);
    int32_t *lengths = NULL;
    float *w = NULL;
    shard sd = {0};
    size_t wlen = 0;
    int *bounds = NULL, rc, opened = 0;
    uint64_t *cost = NULL;
    rank_result mine = {0}, *all = NULL;
    char tmp[PATH_MAX + 96] = "", target[PATH_MAX] = "";

    if (argc < 2 || strcmp(argv[1], "run")) {
        rc = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? -1
             : fail(EXIT_USAGE, "expected 'run' (see mha-mpi run --help)");
    } else {
        rc = parse(argc - 1, argv + 1, &o);
    }
    if (rc < 0) { /* --help */
        MPI_Finalize();
        return EXIT_OK;
    }
    /* phase 1: rank 0 reads, everyone learns the outcome, then the data */
    if (rc == EXIT_OK && rank_ == 0)
        rc = load_on_root(&o, &sh, &lengths, &w, &wlen);
    if ((rc = agree(rc)) != EXIT_OK)
        goto out;
    MPI_Bcast(&sh, sizeof sh, MPI_BYTE, 0, MPI_COMM_WORLD);
    wlen = sh.wlen;
    if (rank_ != 0) {
        w = malloc(wlen * sizeof *w);
        lengths = sh.has_lengths ? malloc((size_t)sh.batch * sizeof *lengths) : NULL;
        rc = !w || (sh.has_lengths && !lengths) ? fail(EXIT_RUNTIME, "out of memory for the weights") : EXIT_OK;
    }
    if ((rc = agree(rc)) != EXIT_OK)
        goto out;
    for (size_t done = 0; done < wlen; done += CHUNK)
        MPI_Bcast(w + done, (int)(wlen - done < CHUNK ? wlen - done : CHUNK), MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (sh.has_lengths)
        MPI_Bcast(lengths, sh.batch, MPI_INT32_T, 0, MPI_COMM_WORLD);

    /* phase 2: shards, then each rank's own work */
    cost = malloc((size_t)sh.batch * sizeof *cost);
    bounds = malloc(((size_t)size_ + 1) * sizeof *bounds);
    if (!cost || !bounds) {
        rc = fail(EXIT_RUNTIME, "out of memory");
    } else {
        for (int b = 0; b < sh.batch; b++)
            cost[b] = shard_cost(lengths ? lengths[b] : sh.seq);
        if (shard_balance(cost, sh.batch, size_, bounds) != 0)
            rc = fail(EXIT_RUNTIME, "cannot balance %d sequences over %d ranks", sh.batch, size_);
    }
    if ((rc = agree(rc)) != EXIT_OK)
        goto out;
    sd.first = bounds[rank_], sd.count = bounds[rank_ + 1] - bounds[rank_];
    if ((rc = agree(prepare_shard(&o, &sh, w, &sd))) != EXIT_OK)
        goto out;
    if ((rc = agree(run_shard(&sh, lengths, &sd, &mine))) != EXIT_OK)
        goto out;

    /* phase 3: the output, complete or absent */
    if (rank_ == 0 && (rc = temp_name(o.output, target, sizeof target, tmp, sizeof tmp)) == EXIT_OK) {
        remove_stale(target);
        snprintf(cleanup_path_, sizeof cleanup_path_, "%s", tmp);
        signal(SIGTERM, remove_and_exit), signal(SIGINT, remove_and_exit), signal(SIGHUP, remove_and_exit);
    }
    if ((rc = agree(rc)) != EXIT_OK)
        goto out;
    MPI_Bcast(tmp, (int)sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    rc = write_rows(tmp, &sh, sd.out, sd.first, sd.count, &opened);
    if ((rc = agree(rc)) != EXIT_OK)
        goto out;
    if (rank_ == 0 && replaced_mode_ && chmod(tmp, replaced_mode_) != 0)
        rc = fail(EXIT_RUNTIME, "%s: cannot keep the mode of %s: %s", tmp, o.output, strerror(errno));
    if (rc == EXIT_OK && rank_ == 0 && rename(tmp, target) != 0)
        rc = fail(EXIT_RUNTIME, "%s: cannot rename %s into place", o.output, tmp);
    cleanup_path_[0] = '\0';
    opened = rc != EXIT_OK;
    if ((rc = agree(rc)) != EXIT_OK)
        goto out;

    all = rank_ == 0 ? malloc((size_t)size_ * sizeof *all) : NULL;
    MPI_Gather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank_ == 0 && all)
        report(&o, &sh, all, bounds, cost);
out:
    if (opened && rank_ == 0)
        MPI_File_delete(tmp, MPI_INFO_NULL);
    if (rc != EXIT_OK && rank_ == 0 && !msg_[0])
        fprintf(stderr, "mha-mpi: failed\n");
    shard_free(&sd);
    free(lengths), free(w), free(cost), free(bounds), free(all);
    MPI_Finalize();
    return rc;
}
