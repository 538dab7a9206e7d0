/* test_contract.c — the embedding contract where the environment is hostile or the caller
 * errs: OpenMP's binding variables, BLIS's variables, messages of failed calls, the version
 * number, and a workspace size that is a function of the config. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* With OMP_PLACES/OMP_PROC_BIND set, libgomp binds the initial thread to one place before
 * main: mha once took that one CPU for the process's, pinned both workers to CPU 0 and ran
 * threads = 0 with one thread. */
Test(contract, openmp_binding_variables_do_not_shrink_the_cpus, .timeout = 60)
{
    int cpus[1024];
    int n = mha_cpus_allowed(cpus, 1024);
    if (n < 2)
        cr_skip_test("this process may use %d CPU: the test needs two", n);
    const char *env = "OMP_PLACES=cores OMP_PROC_BIND=close ";
    char *out, *err, want[96];
    cr_assert_eq(run_cli_env(env, "run configs/bert-base.yaml --iters 1 --warmup 0 --check 0", &out, &err), 0, "%s", err);
    snprintf(want, sizeof want, "workers on CPUs %d,%d;", cpus[0], cpus[1]);
    cr_assert(strstr(out, want), "'%s' not in: %s", want, out);
    free(out), free(err);
    cr_assert_eq(run_cli_env(env, "run --threads 0 --iters 1 --warmup 0 --check 0", &out, &err), 0, "%s", err);
    snprintf(want, sizeof want, "engine   %d threads", n < 1024 ? n : 1024);
    cr_assert(strstr(out, want), "threads = 0 under OpenMP binding: '%s' not in: %s", want, out);
    free(out), free(err);
    cr_assert_eq(run_cli_env(env, "info", &out, &err), 0);
    cr_assert(strstr(out, "proc_bind close") && strstr(out, "places:"), "mha info does not show the binding: %s", out);
    free(out), free(err);
}

/* BLIS reads BLIS_ARCH_TYPE on its first bli_init and aborts the process on a bad value;
 * BLIS_ARCH_DEBUG makes it print. mha builds its BLIS context itself and never calls it. */
Test(contract, blis_environment_variables_are_never_read, .timeout = 60)
{
    char *out, *err;
    int rc = run_cli_env("BLIS_ARCH_TYPE=99 BLIS_ARCH_DEBUG=1 ", "run --iters 1 --warmup 0", &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_null(strstr(out, "libblis"), "BLIS printed: %s", out);
    cr_assert_null(strstr(err, "libblis"), "BLIS printed: %s", err);
    cr_assert_str_eq(err, "", "stderr: %s", err);
    free(out), free(err);
    rc = run_cli_env("BLIS_ARCH_TYPE=generic ", "run --iters 1 --warmup 0", &out, &err);
    cr_assert_eq(rc, 0);
    cr_assert(strstr(out, "BLIS generic") == NULL, "BLIS_ARCH_TYPE chose the kernel: %s", out);
    free(out), free(err);
}

Test(contract, failed_calls_leave_a_message_naming_field_and_values)
{
    problem p;
    problem_make(&p, 32, 4, 2, 8, 8, 1, 0, 9);
    mha_engine *e = engine_bare(&p, 1);
    cr_assert_str_eq(mha_engine_last_error(e), "");
    float *out = malloc((size_t)3 * 8 * 32 * sizeof *out);
    mha_input in = problem_input(&p);
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_ERR_STATE);
    cr_assert(strstr(mha_engine_last_error(e), "mha_set_weights"), "%s", mha_engine_last_error(e));

    float *scratch;
    mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &scratch);
    mha_weights no_bias = w;
    no_bias.b_v = NULL;
    cr_assert_eq(mha_set_weights(e, &no_bias), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_engine_last_error(e), "b_v NULL"), "%s", mha_engine_last_error(e));
    cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
    cr_assert_str_eq(mha_engine_last_error(e), "", "a success clears the message");

    const struct { int batch, seq_q, seq_kv; const char *want; } cases[] = {
        {3, 8, 8, "batch 3 > max_batch 2"},
        {2, 9, 8, "seq_q 9 > max_seq_q 8"},
        {2, 8, 0, "seq_kv 0 < 1"},
    };
    for (int i = 0; i < 3; i++) {
        mha_input bad = in;
        bad.batch = cases[i].batch, bad.seq_q = cases[i].seq_q, bad.seq_kv = cases[i].seq_kv;
        cr_assert_eq(mha_forward(e, &bad, out, NULL), MHA_ERR_SHAPE);
        cr_assert(strstr(mha_engine_last_error(e), cases[i].want), "'%s' lacks '%s'", mha_engine_last_error(e),
                  cases[i].want);
    }
    int32_t len[2] = {8, 9};
    mha_input bad = in;
    bad.kv_lengths = len;
    cr_assert_eq(mha_forward(e, &bad, out, NULL), MHA_ERR_SHAPE);
    cr_assert(strstr(mha_engine_last_error(e), "kv_lengths[1] = 9 is outside 0..seq_kv 8"), "%s", mha_engine_last_error(e));
    bad = in;
    bad.v = NULL;
    cr_assert_eq(mha_forward(e, &bad, out, NULL), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_engine_last_error(e), "in->v is NULL"), "%s", mha_engine_last_error(e));
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_OK, "the engine stays usable");
    cr_assert_str_eq(mha_engine_last_error(e), "");
    cr_assert_str_eq(mha_engine_last_error(NULL), "engine is NULL");
    mha_free(e);
    free(out), free(scratch);
    problem_free(&p);
}

/* The path of the shared library the build puts beside the command. */
static void libmha_so(char *path, size_t len)
{
    const char *cli = MHA_CLI, *slash = strrchr(cli, '/');
    snprintf(path, len, "%.*s/libmha.so", slash ? (int)(slash - cli) : 1, slash ? cli : ".");
}

/* The shared library beside the command (what a program linked with -lmha loads) reports the
 * version of the header these tests were built with, as a number and as a string: a libmha.so
 * built from another header, or a string that drifted from the number, fails here. Asking the
 * library linked into this binary would prove nothing: it is the static one, compiled from this
 * header, so its functions return the header's macros themselves. */
Test(contract, shared_library_reports_the_header_version)
{
    char path[512];
    libmha_so(path, sizeof path);
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *why = so ? NULL : dlerror();
    if (why && strstr(why, "libclang_rt.asan")) /* make test-clang's sanitized build: its .so takes
                                                  * clang's shared ASan runtime, not on the loader's
                                                  * path; every other build runs the test */
        cr_skip_test("dlopen %s: %s", path, why);
    cr_assert(so, "dlopen %s: %s", path, why);
    int (*number)(void);
    const char *(*string)(void);
    *(void **)&number = dlsym(so, "mha_version_number");
    *(void **)&string = dlsym(so, "mha_version_string");
    cr_assert(number && string, "%s does not export mha_version_number and mha_version_string", path);
    cr_assert_neq((void *)number, (void *)mha_version_number, "the shared library's, not this binary's");
    cr_assert_eq(number(), MHA_VERSION_NUMBER, "%s reports %d, the header says %d", path, number(), MHA_VERSION_NUMBER);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", MHA_VERSION_MAJOR, MHA_VERSION_MINOR, MHA_VERSION_PATCH);
    cr_assert_str_eq(string(), want, "%s reports \"%s\", the header says \"%s\"", path, string(), want);
    dlclose(so);
}

typedef struct sized { mha_config cfg; size_t bytes; int cpu; } sized;

static void *size_on_one_cpu(void *arg)
{
    sized *s = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(s->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
        return NULL;
    s->bytes = mha_workspace_size(&s->cfg);
    return s;
}

/* The workspace is a function of the config: the query block no longer follows the L2 of the
 * CPU at hand (a fixed 1 MiB budget: 96 rows up to seq_kv 2730, then 48), and with threads
 * set, a thread pinned to one CPU sizes it as any other does. threads = 0 counts the calling
 * thread's CPUs (mha.h says so). */
Test(contract, workspace_size_is_a_function_of_the_config, .timeout = 30)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 64, cfg.n_heads = 4, cfg.max_seq_q = 200, cfg.threads = 2;
    mha_engine *e;
    cfg.max_seq_kv = 2730;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_eq(mha_engine_q_block(e), 96);
    mha_free(e);
    cfg.max_seq_kv = 2731;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_eq(mha_engine_q_block(e), 48);
    mha_free(e);

    int cpus[1024];
    int n = mha_cpus_allowed(cpus, 1024);
    cr_assert_geq(n, 1);
    sized s = {.cfg = cfg, .cpu = cpus[n - 1]};
    pthread_t th;
    void *ok;
    cr_assert_eq(pthread_create(&th, NULL, size_on_one_cpu, &s), 0);
    pthread_join(th, &ok);
    cr_assert(ok, "could not pin a thread to CPU %d", s.cpu);
    cr_assert_eq(s.bytes, mha_workspace_size(&cfg), "sized %zu on one CPU, %zu here", s.bytes, mha_workspace_size(&cfg));
    /* and an engine in caller memory sized there runs here */
    void *ws = aligned_alloc(64, (s.bytes + 63) / 64 * 64);
    cr_assert_eq(mha_create_static(&cfg, ws, s.bytes, &e), MHA_OK);
    mha_free(e);
    free(ws);
}

/* The shared library's soname carries the minor version while the major is 0 (structs grow in
 * minor releases): libmha.so.0.MINOR, as make install and pkg-config install it. */
Test(contract, soname_carries_the_minor_version_while_major_is_0)
{
    char path[512], cmd[600], line[512], want[64];
    libmha_so(path, sizeof path);
    snprintf(cmd, sizeof cmd, "readelf -d %s 2>&1", path);
    if (MHA_VERSION_MAJOR == 0)
        snprintf(want, sizeof want, "[libmha.so.0.%d]", MHA_VERSION_MINOR);
    else
        snprintf(want, sizeof want, "[libmha.so.%d]", MHA_VERSION_MAJOR);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    int found = 0;
    char soname[512] = "none";
    while (fgets(line, sizeof line, p))
        if (strstr(line, "SONAME")) {
            snprintf(soname, sizeof soname, "%s", line);
            found = strstr(line, want) != NULL;
        }
    pclose(p);
    cr_assert(found, "%s: soname %s, want %s", cmd, soname, want);
}
