/* scale.c — `mha scale CONFIG`: a thread-scaling sweep over (mode, pinning, threads) points,
 * written as scaling.csv, report.md and gnuplot plots into one folder.
 *
 * Strong scaling runs the config's batch at every thread count; weak scaling runs batch × p
 * sequences on p threads, so the work per thread stays fixed. Every point gets a fresh engine
 * (its thread count and pinning are creation-time settings), warm-up forwards, then N timed
 * forwards. Speedup is against 1 thread with the same mode and pinning (1 is always in the
 * sweep). Every point is checked by mha_config_check before the first one runs. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "scale_fit.h"

extern char **environ;

#define MAX_POINTS (2 * 4 * MHA_MAX_SCALE_POINTS)

typedef struct scale_opts {
    const char *config, *out, *threads, *pinning, *mode, *isa, *bf16_kernel;
    long iters, warmup, rounds;
    int have_iters, have_warmup, have_rounds, have_precision;
    mha_precision precision;
} scale_opts;

typedef struct point {
    int weak, threads, batch;
    mha_pinning pinning;
    int oversubscribed;
    cli_stats t;
    double gflops, tokens_per_s, speedup, efficiency, karp_flatt;
    int cpus[MHA_MAX_THREADS], n_cpus;
} point;

typedef struct sweep {
    cli_config fc;
    const char *config_path;
    char out[4096];
    int threads[MHA_MAX_SCALE_POINTS], n_threads;
    mha_pinning pinning[4];
    int n_pinning, mode, warmup, iters, rounds;
    int allowed[1024], n_allowed;
    point pt[MAX_POINTS];
    int n;
    double flops_1; /* FLOPs of one forward at the config's batch (unmasked work only) */
    char cmdline[1024];
} sweep;

static void usage(FILE *f)
{
    fputs("usage: mha scale CONFIG [--out DIR] [--threads LIST] [--pinning LIST] [--mode strong|weak|both]\n"
          "                        [--iters N] [--warmup N] [--rounds R] [--precision f32|bf16]\n"
          "                        [--isa auto|avx512|avx2|ref] [--bf16-kernel NAME]\n"
          "Sweeps thread counts and pinnings on the config's model and batch; writes DIR/scaling.csv,\n"
          "DIR/report.md and speedup/efficiency/throughput plots (.svg, .png; needs gnuplot).\n"
          "LIST: comma-separated, ranges allowed (1-4,8). Defaults: the config's scaling block, else\n"
          "threads 1..(CPUs this process may use), pinning none,close,spread, mode strong; DIR\n"
          "scale-NAME. 1 thread is always run: it is every speedup's baseline. The N timed forwards of\n"
          "each point are spread over R rounds (default 3) that visit every point in turn, each with a\n"
          "fresh engine and its warm-up, so that a noisy spell of the machine touches all points alike.\n", f);
}

static int parse(int argc, char **argv, scale_opts *o)
{
    static const struct option longopts[] = {
        {"out", required_argument, 0, 'o'},   {"threads", required_argument, 0, 't'},
        {"pinning", required_argument, 0, 'p'}, {"mode", required_argument, 0, 'm'},
        {"iters", required_argument, 0, 'n'}, {"warmup", required_argument, 0, 'W'},
        {"rounds", required_argument, 0, 'r'}, {"precision", required_argument, 0, 'P'},
        {"isa", required_argument, 0, 'I'}, {"bf16-kernel", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 't': o->threads = optarg; break;
        case 'p': o->pinning = optarg; break;
        case 'm': o->mode = optarg; break;
        case 'n': if (!cli_parse_int("--iters", optarg, 1, 1000000, &o->iters)) return 0; o->have_iters = 1; break;
        case 'W': if (!cli_parse_int("--warmup", optarg, 0, 1000000, &o->warmup)) return 0; o->have_warmup = 1; break;
        case 'r': if (!cli_parse_int("--rounds", optarg, 1, 1000, &o->rounds)) return 0; o->have_rounds = 1; break;
        case 'P': if (!cli_parse_precision(optarg, &o->precision)) return 0; o->have_precision = 1; break;
        case 'I': o->isa = optarg; break;
        case 'B': o->bf16_kernel = optarg; break;
        case 'h': usage(stdout); exit(EXIT_OK);
        case ':': cli_error("scale: %s needs a value", argv[optind - 1]); return 0;
        default: cli_error("scale: unknown option '%s' (see mha scale --help)", argv[optind - 1]); return 0;
        }
    }
    if (optind < argc)
        o->config = argv[optind++];
    if (!o->config) {
        cli_error("scale: a CONFIG file is required");
        usage(stderr);
        return 0;
    }
    if (optind < argc) {
        cli_error("scale: unexpected argument '%s'", argv[optind]);
        return 0;
    }
    return 1;
}

/* "1,2,4-8" → ascending thread counts without duplicates. */
static int parse_threads(const char *text, int *out, int *n)
{
    int count = 0;
    const char *s = text;
    while (*s) {
        char *end;
        errno = 0;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || errno)
            goto bad;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || errno)
                goto bad;
        }
        if (a < 1 || b < a || b > MHA_MAX_THREADS)
            goto bad;
        for (long v = a; v <= b; v++) {
            if (count == MHA_MAX_SCALE_POINTS) {
                cli_error("--threads: more than %d thread counts in '%s'", MHA_MAX_SCALE_POINTS, text);
                return 0;
            }
            out[count++] = (int)v;
        }
        if (*end == ',')
            end++;
        else if (*end)
            goto bad;
        s = end;
    }
    if (!count)
        goto bad;
    *n = count;
    return 1;
bad:
    cli_error("--threads: expected a list like 1,2,4-8 of counts in 1..%d, got '%s'", MHA_MAX_THREADS, text);
    return 0;
}

static int parse_pinning(const char *text, mha_pinning *out, int *n)
{
    static const mha_pinning all[] = {MHA_PIN_NONE, MHA_PIN_CLOSE, MHA_PIN_SPREAD, MHA_PIN_CPUS};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    int count = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(tok, mha_pinning_name(all[i])))
                found = i;
        if (found < 0 || count == 4) {
            cli_error("--pinning: expected up to 4 of none, close, spread, cpus, got '%s'", text);
            return 0;
        }
        out[count++] = all[found];
    }
    if (!count) {
        cli_error("--pinning: empty list");
        return 0;
    }
    *n = count;
    return 1;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Sorted, unique, with 1 (the baseline) first. */
static void normalise_threads(int *t, int *n)
{
    int m = *n, has_one = 0;
    for (int i = 0; i < m; i++)
        has_one |= t[i] == 1;
    if (!has_one) {
        if (m == MHA_MAX_SCALE_POINTS)
            m--; /* the largest count gives way to the baseline */
        qsort(t, (size_t)m, sizeof *t, cmp_int);
        t[m++] = 1;
    }
    qsort(t, (size_t)m, sizeof *t, cmp_int);
    int k = 0;
    for (int i = 0; i < m; i++)
        if (!k || t[i] != t[k - 1])
            t[k++] = t[i];
    *n = k;
}

static void engine_config(const sweep *w, const point *p, mha_config *cfg)
{
    cli_config fc = w->fc;
    fc.engine.threads = p->threads;
    fc.engine.pinning = p->pinning;
    *cfg = fc.engine;
    cfg->max_batch = p->batch;
}

/* Every point's engine config, checked before anything runs. */
static int plan(sweep *w)
{
    char err[256];
    w->n = 0;
    for (int weak = 0; weak < 2; weak++) {
        if ((weak && w->mode == MHA_SCALE_STRONG) || (!weak && w->mode == MHA_SCALE_WEAK))
            continue;
        for (int i = 0; i < w->n_pinning; i++)
            for (int j = 0; j < w->n_threads; j++) {
                point *p = &w->pt[w->n++];
                memset(p, 0, sizeof *p);
                p->weak = weak, p->pinning = w->pinning[i], p->threads = w->threads[j];
                long batch = (long)w->fc.engine.max_batch * (weak ? p->threads : 1);
                if (batch > (1 << 20)) {
                    cli_error("%s: weak scaling at %d threads needs a batch of %ld, above %d", w->config_path,
                              p->threads, batch, 1 << 20);
                    return EXIT_USAGE;
                }
                p->batch = (int)batch;
                /* pinned to a cpus list, the workers share that list's CPUs */
                p->oversubscribed = p->threads > (p->pinning == MHA_PIN_CPUS ? w->fc.engine.n_cpus : w->n_allowed);
                mha_config cfg;
                engine_config(w, p, &cfg);
                mha_status st = MHA_ERR_AFFINITY;
                if (p->pinning == MHA_PIN_CPUS && w->fc.engine.n_cpus == 0)
                    snprintf(err, sizeof err, "pinning cpus needs a threads.cpus list in the config");
                else
                    st = mha_config_check(&cfg, err, sizeof err);
                if (st != MHA_OK) {
                    cli_error("%s: %s scaling, pinning %s, threads %d cannot run: %s", w->config_path,
                              weak ? "weak" : "strong", mha_pinning_name(p->pinning), p->threads, err);
                    return cli_exit_code(st);
                }
            }
    }
    return EXIT_OK;
}

static const char *mode_name(const point *p) { return p->weak ? "weak" : "strong"; }
static const char *mode_text(int mode) { return mode == MHA_SCALE_BOTH ? "strong and weak" : cli_scale_mode_name(mode); }

static void cpus_text(const point *p, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; i < p->n_cpus; i++) {
        size_t k = strlen(out);
        snprintf(out + k, n - k, "%s%d", i ? " " : "", p->cpus[i]);
    }
}

/* One round of a point: a fresh engine, warm-up, `count` timed forwards into times, the
 * workers' CPUs. */
static int run_point(const sweep *w, cli_problem *prob, point *p, double *times, int count)
{
    mha_config cfg;
    engine_config(w, p, &cfg);
    mha_engine *e = NULL;
    float *out = malloc((size_t)p->batch * prob->seq_q * prob->d * sizeof *out);
    mha_status st = out ? mha_create(&cfg, &e) : MHA_ERR_NOMEM;
    if (st == MHA_OK)
        st = cli_set_weights(e, prob);
    mha_input in = {
        .batch = p->batch, .seq_q = prob->seq_q, .seq_kv = prob->seq_kv,
        .q = prob->q, .k = prob->kv ? prob->kv : prob->q, .v = prob->kv ? prob->kv : prob->q,
        .q_lengths = prob->q_len, .kv_lengths = prob->kv_len, .causal = prob->causal,
    };
    for (int i = 0; st == MHA_OK && i < w->warmup; i++)
        st = mha_forward(e, &in, out, NULL);
    for (int i = 0; st == MHA_OK && i < count; i++) {
        double t0 = cli_now_ms();
        st = mha_forward(e, &in, out, NULL);
        times[i] = cli_now_ms() - t0;
    }
    if (st == MHA_OK)
        p->n_cpus = mha_engine_worker_cpus(e, p->cpus, MHA_MAX_THREADS);
    mha_free(e);
    free(out);
    if (st != MHA_OK) {
        cli_error("%s scaling, pinning %s, threads %d: %s", mode_name(p), mha_pinning_name(p->pinning), p->threads,
                  mha_status_str(st));
        return cli_exit_code(st);
    }
    return EXIT_OK;
}

static const point *baseline(const sweep *w, const point *p)
{
    for (int i = 0; i < w->n; i++)
        if (w->pt[i].weak == p->weak && w->pt[i].pinning == p->pinning && w->pt[i].threads == 1)
            return &w->pt[i];
    return NULL;
}

static void derive(sweep *w)
{
    for (int i = 0; i < w->n; i++) {
        point *p = &w->pt[i];
        const point *b = baseline(w, p);
        p->speedup = scale_speedup(p->weak, p->threads, b->t.median, p->t.median);
        p->efficiency = scale_efficiency(p->speedup, p->threads);
        p->karp_flatt = scale_karp_flatt(p->speedup, p->threads);
    }
}

/* Amdahl fit over the strong-scaling points of one pinning, oversubscribed ones left out
 * (threads sharing a CPU measure the sharing, not the serial part); -1 when none is left. */
static int fit_of(const sweep *w, mha_pinning pin, scale_amdahl *fit)
{
    int ps[MHA_MAX_SCALE_POINTS], n = 0;
    double s[MHA_MAX_SCALE_POINTS];
    for (int i = 0; i < w->n; i++)
        if (!w->pt[i].weak && w->pt[i].pinning == pin && !w->pt[i].oversubscribed)
            ps[n] = w->pt[i].threads, s[n++] = w->pt[i].speedup;
    return n ? scale_amdahl_fit(ps, s, n, fit) : -1;
}

/* ---- output files: each written to NAME.tmp and renamed, so none is ever half-written */

static FILE *open_tmp(const sweep *w, const char *name, char *tmp, size_t n)
{
    snprintf(tmp, n, "%s/%s.tmp", w->out, name);
    FILE *f = fopen(tmp, "w");
    if (!f)
        cli_error("%s: %s", tmp, strerror(errno));
    return f;
}

static int commit(const sweep *w, FILE *f, const char *tmp, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", w->out, name);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        cli_error("%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return EXIT_RUNTIME;
    }
    return EXIT_OK;
}

static const char *csv_columns =
    "mode,pinning,threads,batch,oversubscribed,warmup,iters,rounds,median_ms,min_ms,max_ms,gflops,tokens_per_s,"
    "speedup,efficiency,karp_flatt,worker_cpus";

static int write_csv(const sweep *w)
{
    char tmp[4200], cpus[4 * MHA_MAX_THREADS + 16];
    FILE *f = open_tmp(w, "scaling.csv", tmp, sizeof tmp);
    if (!f)
        return EXIT_RUNTIME;
    fprintf(f, "%s\n", csv_columns);
    for (int i = 0; i < w->n; i++) {
        const point *p = &w->pt[i];
        cpus_text(p, cpus, sizeof cpus);
        fprintf(f, "%s,%s,%d,%d,%s,%d,%d,%d,%.6f,%.6f,%.6f,%.3f,%.1f,%.6f,%.6f,", mode_name(p),
                mha_pinning_name(p->pinning), p->threads, p->batch, p->oversubscribed ? "yes" : "no", w->warmup, w->iters,
                w->rounds, p->t.median, p->t.min,
                p->t.max, p->gflops, p->tokens_per_s, p->speedup, p->efficiency);
        if (isnan(p->karp_flatt))
            fputs(",", f);
        else
            fprintf(f, "%.6f,", p->karp_flatt);
        fprintf(f, "%s\n", cpus);
    }
    return commit(w, f, tmp, "scaling.csv");
}

/* A gnuplot single-quoted string: '' stands for one quote. */
static void gp_string(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static const char *plot_names[3] = {"speedup", "efficiency", "throughput"};

/* Draws the three plots as .svg and .png; 0 on success, else why it did not (in why). */
static int write_plots(const sweep *w, char *why, size_t why_len)
{
    const char *gp = getenv("MHA_GNUPLOT") ? getenv("MHA_GNUPLOT") : "gnuplot";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --version >/dev/null 2>&1", gp);
    if (system(cmd) != 0) {
        snprintf(why, why_len, "gnuplot is not installed (Debian: gnuplot-nox)");
        return -1;
    }
    snprintf(cmd, sizeof cmd, "%s 2>&1", gp);
    FILE *f = popen(cmd, "w");
    if (!f) {
        snprintf(why, why_len, "cannot start gnuplot: %s", strerror(errno));
        return -1;
    }
    int maxp = w->threads[w->n_threads - 1];
    /* one data block per (mode, pinning) series: threads, speedup, efficiency, GFLOP/s */
    int series = 0;
    for (int i = 0; i < w->n; i++) {
        const point *p = &w->pt[i];
        if (p->threads == 1)
            fprintf(f, "%s$s%d << EOD\n", i ? "EOD\n" : "", series++);
        fprintf(f, "%d %.6f %.6f %.3f\n", p->threads, p->speedup, p->efficiency, p->gflops);
    }
    fputs("EOD\n", f);
    fputs("set grid\nset key top left\nset xlabel 'threads'\nset tics nomirror\n", f);
    fprintf(f, "set xrange [0.8:%g]\n", maxp + 0.2);
    if (maxp <= 16) {
        fputs("set xtics (", f);
        for (int i = 0; i < w->n_threads; i++)
            fprintf(f, "%s%d", i ? ", " : "", w->threads[i]);
        fputs(")\n", f);
    }
    if (maxp > w->n_allowed)
        fprintf(f, "set arrow from %g, graph 0 to %g, graph 1 nohead dt 3 lc 'gray40'\n"
                   "set label 'oversubscribed →' at %g, graph 0.95 left textcolor 'gray40'\n",
                w->n_allowed + 0.5, w->n_allowed + 0.5, w->n_allowed + 0.55);
    char title[512];
    snprintf(title, sizeof title, "%s: d=%d h=%d batch %d seq %d", w->fc.name, w->fc.engine.d_model, w->fc.engine.n_heads,
             w->fc.engine.max_batch, w->fc.engine.max_seq_q);
    const char *ylabel[3] = {"speedup vs 1 thread", "parallel efficiency", "GFLOP/s (unmasked work)"};
    const int column[3] = {2, 3, 4};
    for (int k = 0; k < 3; k++) {
        for (int term = 0; term < 2; term++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s.%s.tmp", w->out, plot_names[k], term ? "png" : "svg");
            fputs(term ? "set terminal pngcairo size 800,520 font 'sans,10'\n"
                       : "set terminal svg size 800,520 dynamic font 'sans,12'\n", f);
            fputs("set output ", f);
            gp_string(f, path);
            fputs("\nset title ", f);
            gp_string(f, title);
            fprintf(f, "\nset ylabel '%s'\nset yrange [0:*]\nplot ", ylabel[k]);
            if (k == 0)
                fputs("x title 'ideal' with lines dt 2 lc 'gray50', ", f);
            if (k == 1)
                fputs("1 title 'ideal' with lines dt 2 lc 'gray50', ", f);
            int s = 0;
            for (int i = 0; i < w->n; i++) {
                const point *p = &w->pt[i];
                if (p->threads != 1)
                    continue;
                char name[64];
                snprintf(name, sizeof name, "%s, %s", mode_name(p), mha_pinning_name(p->pinning));
                /* weak scaling dashed, with hollow points: the same pinning keeps its colour */
                fprintf(f, "%s$s%d using 1:%d with linespoints lw 2 dt %d pt %d lc %d title '%s'", s ? ", " : "", s,
                        column[k], p->weak ? 3 : 1, p->weak ? 6 : 7, (int)p->pinning + 1, name);
                s++;
            }
            fputs("\nunset output\n", f);
        }
    }
    int rc = pclose(f);
    int ok = rc == 0;
    for (int k = 0; k < 3; k++)
        for (int term = 0; term < 2; term++) {
            char tmp[4200], path[4200];
            snprintf(path, sizeof path, "%s/%s.%s", w->out, plot_names[k], term ? "png" : "svg");
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            struct stat sb;
            if (ok && stat(tmp, &sb) == 0 && sb.st_size > 0 && rename(tmp, path) == 0)
                continue;
            ok = 0;
            unlink(tmp);
        }
    if (!ok) {
        snprintf(why, why_len, "gnuplot failed (exit status %d)", rc);
        return -1;
    }
    return 0;
}

static void md_point_row(FILE *f, const point *p)
{
    char cpus[4 * MHA_MAX_THREADS + 16];
    cpus_text(p, cpus, sizeof cpus);
    fprintf(f, "| %s | %s | %d | %d | %.3f (%.3f–%.3f) | %.1f | %.0f | %.3f | %.3f | ", mode_name(p),
            mha_pinning_name(p->pinning), p->threads, p->batch, p->t.median, p->t.min, p->t.max, p->gflops,
            p->tokens_per_s, p->speedup, p->efficiency);
    if (isnan(p->karp_flatt))
        fputs("— | ", f);
    else
        fprintf(f, "%.3f | ", p->karp_flatt);
    fprintf(f, "%s | %s |\n", cpus, p->oversubscribed ? "oversubscribed" : "");
}

/* report.md's sections, in order. */
static void md_machine(FILE *f, const sweep *w)
{
    const cli_config *fc = &w->fc;
    char model[256], flags[512];
    cli_cpu_info(model, sizeof model, flags, sizeof flags);
    fputs("## Machine\n\n| | |\n| --- | --- |\n", f);
    fprintf(f, "| CPU | %s |\n| CPU features | %s |\n", model, flags[0] ? flags : CLI_NO_FEATURES);
    fprintf(f, "| CPUs this process may use | %d:", w->n_allowed);
    for (int i = 0; i < w->n_allowed && i < 1024; i++)
        fprintf(f, " %d", w->allowed[i]);
    if (mha_l2_bytes())
        fprintf(f, " |\n| L2 per core | %zu KiB |\n", mha_l2_bytes() / 1024);
    else
        fprintf(f, " |\n| L2 per core | unknown |\n");
    cli_kernels_used used = {"?", "?", "?"};
    cli_kernels(&fc->engine, &used);
    fprintf(f, "| Kernel table | %s (isa: every ISA-specific operation of the engine) |\n", used.isa);
    fprintf(f, "| BLIS | %s, kernel %s (mha's choice; only its microkernel is used) |\n", mha_blis_version(),
            used.blis_arch);
    fprintf(f, "| Precision | %s, products on %s |\n", mha_precision_name(fc->engine.precision), used.kernel);
    fprintf(f, "| OpenMP | %d (spec date), libgomp |\n", _OPENMP);
    fputs("| OMP_* settings |", f);
    int any = 0;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "OMP_", 4) || !strncmp(*e, "GOMP_", 5))
            fprintf(f, "%s `%s`", any++ ? "," : "", *e);
    char binding[2048];
    cli_openmp_binding(binding, sizeof binding);
    fprintf(f, "%s |\n| OpenMP binding | %s |\n| mha | %s |\n\n", any ? "" : " none set (libgomp defaults)", binding,
            mha_version_string());

}

static void md_workload(FILE *f, const sweep *w)
{
    const cli_config *fc = &w->fc;
    const char *mask = fc->mask == MHA_MASK_CAUSAL ? "causal" : fc->n_lengths ? "padding (lengths)" : "none";
    fputs("## Workload\n\n", f);
    fprintf(f, "Config `%s`: d_model %d, %d heads, batch %d × seq %d (%s-attention, seq_kv %d), mask %s, %s.\n",
            w->config_path, fc->engine.d_model, fc->engine.n_heads, fc->engine.max_batch, fc->engine.max_seq_q, fc->cross ? "cross" : "self",
            fc->cross ? fc->engine.max_seq_kv : fc->engine.max_seq_q, mask,
            fc->engine.bias ? "biases" : "no biases");
    fprintf(f, "Seeded random weights and inputs (seed %llu). Every point, in each round: a fresh engine, %d warm-up forwards, "
               "then %d timed forwards in all, spread over %d rounds that visit every point in turn; "
               "median (min–max) in ms.\n",
            (unsigned long long)fc->seed, w->warmup, w->iters, w->rounds);
    fprintf(f, "GFLOP/s count only unmasked work (DESIGN.md: 8·B·S·d² + 4·B·S²·d when nothing is masked; "
               "%.3f GFLOP per forward at batch %d).\n\n", w->flops_1 / 1e9, fc->engine.max_batch);
    fputs("Strong scaling runs the config's batch at every thread count: speedup = t(1) / t(p). Weak scaling "
          "runs batch × p sequences on p threads (fixed work per thread): speedup = p · t(1) / t(p), the "
          "throughput ratio. Efficiency = speedup / p. Karp–Flatt serial fraction e = (1/S − 1/p) / (1 − 1/p). "
          "Worker CPUs are where each worker thread last ran, as the workers read it (sched_getcpu), not "
          "what was requested.", f);
    int any_over = 0;
    for (int i = 0; i < w->n; i++)
        any_over |= w->pt[i].oversubscribed;
    if (any_over)
        fprintf(f, " Points with more threads than the %d CPUs allowed (or, pinned to `cpus`, than the CPUs "
                   "listed) are marked *oversubscribed*: their threads share CPUs.", w->n_allowed);
    fputs("\n\n## Results\n\n", f);
    fputs("| mode | pinning | threads | batch | median ms (min–max) | GFLOP/s | tokens/s | speedup | efficiency | "
          "Karp–Flatt | worker CPUs | note |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", f);
    for (int i = 0; i < w->n; i++)
        md_point_row(f, &w->pt[i]);

}

static void md_amdahl(FILE *f, const sweep *w)
{
    fputs("\n## Amdahl fit (strong scaling)\n\n", f);
    fputs("Least squares in the time domain, where Amdahl's law is linear in the serial fraction f: "
          "t(p)/t(1) = f + (1 − f)/p. Oversubscribed points are left out of the fit; with a single point "
          "above 1 thread the fit passes through it exactly (residual 0) and equals its Karp–Flatt fraction.\n\n", f);
    int fits = 0;
    for (int i = 0; i < w->n_pinning; i++) {
        scale_amdahl fit;
        if (fit_of(w, w->pinning[i], &fit) != 0)
            continue;
        if (!fits++)
            fputs("| pinning | serial fraction f | speedup limit 1/f | RMS residual of t(p)/t(1) | points |\n"
                  "| --- | --- | --- | --- | --- |\n", f);
        char limit[32];
        snprintf(limit, sizeof limit, isinf(fit.max_speedup) ? "none (f ≤ 0)" : "%.1f", fit.max_speedup);
        fprintf(f, "| %s | %.4f | %s | %.4f | %d |\n", mha_pinning_name(w->pinning[i]), fit.serial, limit, fit.rms,
                fit.points);
    }
    if (!fits)
        fputs("No strong-scaling points with more than one thread: nothing to fit.\n", f);

}

static void md_plots_and_notes(FILE *f, int plotted, const char *why)
{
    fputs("\n## Plots\n\n", f);
    if (plotted)
        for (int k = 0; k < 3; k++)
            fprintf(f, "![%s](%s.svg)\n\n", plot_names[k], plot_names[k]);
    else
        fprintf(f, "Plots skipped: %s. The CSV and this report are complete without them.\n\n", why);

    fputs("## How to read this\n\n"
          "Speedup close to the ideal line and efficiency near 1 mean the forward pass divides evenly over "
          "the threads. A Karp–Flatt fraction that grows with p points at overhead that grows with threads "
          "(synchronisation, memory bandwidth); a constant one at a fixed serial part, which the Amdahl fit "
          "then estimates. Compare pinnings at the same thread count: on a shared or virtual machine "
          "pinning can help or hurt, and only the medians side by side say which. An efficiency above 1 (a "
          "negative Karp–Flatt fraction) means the 1-thread baseline ran slower than its share: noise, or a "
          "working set that fits the caches of p cores but not of one.\n\n", f);
    fputs("## scaling.csv columns\n\n"
          "`mode` strong or weak; `pinning` none, close, spread or cpus; `threads` the engine's worker "
          "threads; `batch` sequences per forward; `oversubscribed` yes when threads exceed the CPUs allowed; "
          "`warmup` untimed forwards per round, `iters` timed forwards in all, `rounds` the rounds they were spread over; `median_ms`, `min_ms`, `max_ms` per forward; "
          "`gflops` unmasked FLOPs / median; `tokens_per_s` valid query tokens / median; `speedup`, "
          "`efficiency`, `karp_flatt` as above (empty at 1 thread); `worker_cpus` the CPU each worker last "
          "ran on, space-separated.\n", f);
}

static int write_report(const sweep *w, int plotted, const char *why)
{
    char tmp[4200];
    FILE *f = open_tmp(w, "report.md", tmp, sizeof tmp);
    if (!f)
        return EXIT_RUNTIME;
    char host[256] = "unknown", date[64];
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(host, sizeof host, "%s", u.nodename);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    fprintf(f, "# Thread scaling: %s\n\n", w->fc.name);
    fprintf(f, "`%s`, %s, on %s.\n\n", w->cmdline, date, host);
    md_machine(f, w);
    md_workload(f, w);
    md_amdahl(f, w);
    md_plots_and_notes(f, plotted, why);
    return commit(w, f, tmp, "report.md");
}

static int make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return -1;
    struct stat sb;
    return stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : (errno = ENOTDIR, -1);
}

static int setup(const scale_opts *o, sweep *w)
{
    char err[1024];
    mha_status st;
    cli_config_default(&w->fc);
    if ((st = cli_config_load(o->config, &w->fc, err, sizeof err)) != MHA_OK)
        return cli_error("%s", err), cli_exit_code(st);
    if ((st = cli_config_projections(&w->fc, err, sizeof err)) != MHA_OK)
        return cli_error("%s", err), cli_exit_code(st);
    w->config_path = o->config;
    if (o->have_precision)
        w->fc.engine.precision = o->precision;
    if (!cli_apply_isa(&w->fc.engine, o->isa) || !cli_apply_bf16_kernel(&w->fc.engine, o->bf16_kernel))
        return EXIT_USAGE;
    const cli_config *fc = &w->fc;
    w->n_allowed = mha_cpus_allowed(w->allowed, 1024);
    if (w->n_allowed < 1)
        return cli_error("scale: cannot read the CPUs this process may use"), EXIT_RUNTIME;

    if (o->threads) {
        if (!parse_threads(o->threads, w->threads, &w->n_threads))
            return EXIT_USAGE;
    } else if (fc->n_scale_threads) {
        memcpy(w->threads, fc->scale_threads, (size_t)fc->n_scale_threads * sizeof *w->threads);
        w->n_threads = fc->n_scale_threads;
    } else {
        w->n_threads = w->n_allowed < MHA_MAX_SCALE_POINTS ? w->n_allowed : MHA_MAX_SCALE_POINTS;
        for (int i = 0; i < w->n_threads; i++)
            w->threads[i] = i + 1;
    }
    normalise_threads(w->threads, &w->n_threads);

    if (o->pinning) {
        if (!parse_pinning(o->pinning, w->pinning, &w->n_pinning))
            return EXIT_USAGE;
    } else if (fc->n_scale_pinning) {
        memcpy(w->pinning, fc->scale_pinning, (size_t)fc->n_scale_pinning * sizeof *w->pinning);
        w->n_pinning = fc->n_scale_pinning;
    } else {
        w->pinning[0] = MHA_PIN_NONE, w->pinning[1] = MHA_PIN_CLOSE, w->pinning[2] = MHA_PIN_SPREAD;
        w->n_pinning = 3;
    }
    w->mode = fc->scale_mode;
    if (o->mode) {
        if (!strcmp(o->mode, "strong")) w->mode = MHA_SCALE_STRONG;
        else if (!strcmp(o->mode, "weak")) w->mode = MHA_SCALE_WEAK;
        else if (!strcmp(o->mode, "both")) w->mode = MHA_SCALE_BOTH;
        else return cli_error("--mode: expected strong, weak or both, got '%s'", o->mode), EXIT_USAGE;
    }
    w->iters = o->have_iters ? (int)o->iters : fc->scale_iters;
    w->warmup = o->have_warmup ? (int)o->warmup : (fc->warmup > 0 ? fc->warmup : 1);
    w->rounds = o->have_rounds ? (int)o->rounds : 3;
    if (w->rounds > w->iters)
        w->rounds = w->iters;
    if (o->out)
        snprintf(w->out, sizeof w->out, "%s", o->out);
    else
        snprintf(w->out, sizeof w->out, "scale-%s", fc->name);
    if (fc->mask == MHA_MASK_PADDING && !fc->n_lengths && !fc->n_kv_lengths) {
        cli_error("%s:%d: batch.mask: padding, but the config has no batch.lengths", o->config, fc->line_mask);
        return EXIT_USAGE;
    }
    return plan(w);
}

/* The sweep's table on stdout, the Amdahl fits and what was written. */
static void print_summary(const sweep *w, int plotted, const char *why)
{
    printf("mha scale: %s (%s), %s scaling\n", w->fc.name, w->config_path, mode_text(w->mode));
    printf("  %-6s %-7s %7s %6s %12s %9s %10s %11s\n", "mode", "pinning", "threads", "batch", "median ms", "speedup",
           "efficiency", "Karp–Flatt");
    for (int i = 0; i < w->n; i++) {
        const point *p = &w->pt[i];
        printf("  %-6s %-7s %7d %6d %12.3f %9.3f %10.3f ", mode_name(p), mha_pinning_name(p->pinning), p->threads,
               p->batch, p->t.median, p->speedup, p->efficiency);
        if (isnan(p->karp_flatt))
            printf("%11s", "—");
        else
            printf("%11.3f", p->karp_flatt);
        printf("%s\n", p->oversubscribed ? "  oversubscribed" : "");
    }
    for (int i = 0; i < w->n_pinning; i++) {
        scale_amdahl fit;
        if (fit_of(w, w->pinning[i], &fit) == 0)
            printf("  Amdahl fit, pinning %s: serial fraction %.4f over %d points\n", mha_pinning_name(w->pinning[i]),
                   fit.serial, fit.points);
    }
    printf("  wrote %s/scaling.csv, %s/report.md%s%s\n", w->out, w->out,
           plotted ? ", speedup/efficiency/throughput .svg and .png" : "; plots skipped: ", plotted ? "" : why);
}

int mha_cli_scale(int argc, char **argv)
{
    sweep *w = calloc(1, sizeof *w);
    if (!w)
        return cli_error("out of memory"), EXIT_RUNTIME;
    size_t k = (size_t)snprintf(w->cmdline, sizeof w->cmdline, "mha"); /* before getopt reorders argv */
    for (int i = 0; i < argc && k < sizeof w->cmdline; i++)
        k += (size_t)snprintf(w->cmdline + k, sizeof w->cmdline - k, " %s", argv[i]);
    scale_opts o;
    if (!parse(argc, argv, &o)) {
        free(w);
        return EXIT_USAGE;
    }
    cli_problem prob;
    memset(&prob, 0, sizeof prob);
    float *gen_w = NULL;
    double *times = NULL;
    int rc;
    if ((rc = setup(&o, w)) != EXIT_OK)
        goto out;
    /* the largest batch once; a point uses its first `batch` sequences */
    int max_batch = 0;
    for (int i = 0; i < w->n; i++)
        max_batch = w->pt[i].batch > max_batch ? w->pt[i].batch : max_batch;
    if ((rc = cli_generate_inputs(&w->fc, max_batch, &prob)) != EXIT_OK ||
        (rc = cli_self_key_padding(&prob)) != EXIT_OK || (rc = cli_generate_weights(&w->fc, &prob, &gen_w)) != EXIT_OK)
        goto out;
    if (!(times = malloc((size_t)w->n * w->iters * sizeof *times))) {
        cli_error("out of memory");
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (make_dirs(w->out) != 0) {
        cli_error("--out %s: cannot create the folder: %s", w->out, strerror(errno));
        rc = EXIT_USAGE;
        goto out;
    }
    {
        cli_problem one = prob;
        one.batch = w->fc.engine.max_batch;
        w->flops_1 = cli_flops(&one);
    }
    fprintf(stderr, "mha scale: %s, %d points (%d thread counts × %d pinnings × %s scaling), %d CPUs allowed, into %s/\n",
            w->fc.name, w->n, w->n_threads, w->n_pinning, mode_text(w->mode), w->n_allowed, w->out);
    /* rounds over all points, so that a slow spell of a shared machine hits every point alike */
    for (int r = 0, step = 0; r < w->rounds; r++)
        for (int i = 0; i < w->n; i++, step++) {
            point *p = &w->pt[i];
            int from = (int)((long)w->iters * r / w->rounds), to = (int)((long)w->iters * (r + 1) / w->rounds);
            double *t = times + (size_t)i * w->iters;
            fprintf(stderr, "mha scale: [%d/%d] round %d/%d: %s, pinning %s, threads %d, batch %d%s: ", step + 1,
                    w->n * w->rounds, r + 1, w->rounds, mode_name(p), mha_pinning_name(p->pinning), p->threads,
                    p->batch, p->oversubscribed ? " (oversubscribed)" : "");
            fflush(stderr);
            if ((rc = run_point(w, &prob, p, t + from, to - from)) != EXIT_OK)
                goto out;
            double sorted[64];
            int m = to < 64 ? to : 64;
            memcpy(sorted, t + to - m, (size_t)m * sizeof *t);
            fprintf(stderr, "median so far %.3f ms\n", cli_stats_of(sorted, m).median);
        }
    for (int i = 0; i < w->n; i++) {
        point *p = &w->pt[i];
        cli_problem view = prob;
        view.batch = p->batch;
        p->t = cli_stats_of(times + (size_t)i * w->iters, w->iters);
        p->gflops = cli_flops(&view) / (p->t.median * 1e6);
        p->tokens_per_s = cli_tokens(&view) / (p->t.median / 1e3);
    }
    derive(w);
    char why[256] = "";
    int plotted = write_plots(w, why, sizeof why) == 0;
    if ((rc = write_csv(w)) != EXIT_OK || (rc = write_report(w, plotted, why)) != EXIT_OK)
        goto out;

    print_summary(w, plotted, why);
    rc = EXIT_OK;
out:
    cli_problem_free(&prob);
    free(gen_w);
    free(times);
    free(w);
    return rc;
}
