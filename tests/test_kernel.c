/* test_kernel.c — the BLIS context: chosen from the CPU's features, forced by config,
 * reported by the engine; results agree across contexts. */
#define _GNU_SOURCE /* syscall */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "attention.h"
#include "helpers.h"
#include "isa/isa.h"
#include "kernel.h"

#if defined(__x86_64__)
#include <cpuid.h>
#else
#include <sys/auxv.h>
#endif
#define TABLES_UNKNOWN(name) "isa: '" name "': unknown (auto, " TEST_TABLES ")"

#if defined(__x86_64__)
Test(kernel, auto_choice_follows_cpu_features)
{
    __builtin_cpu_init();
    const char *arch = mha_blis_arch_auto();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        cr_assert_str_eq(arch, "skx");
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cr_assert(!strcmp(arch, "haswell") || !strcmp(arch, "zen3"), "AVX2+FMA CPU got %s", arch);
    else
        cr_assert_str_eq(arch, "generic");
    /* every machine this project runs on has AVX2 at least: never the 5–7× slower generic */
    if (__builtin_cpu_supports("avx2"))
        cr_assert_str_neq(arch, "generic");
}


Test(kernel, unknown_or_unrunnable_contexts_are_config_errors)
{
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("no-such-arch", &mha_isa_ref, &k), MHA_ERR_CONFIG);
    cr_assert_eq(mha_kernel_select("knl", &mha_isa_avx512, &k), MHA_ERR_CONFIG, "not offered: no mha machine is a Xeon Phi");
    cr_assert_eq(mha_kernel_select("skx", &mha_isa_avx2, &k), MHA_ERR_CONFIG, "skx is not a sub-config of avx2");
    cr_assert_eq(mha_kernel_select("haswell", &mha_isa_ref, &k), MHA_ERR_CONFIG, "haswell is not a sub-config of ref");
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f"))
        cr_assert_eq(mha_kernel_select("skx", &mha_isa_avx512, &k), MHA_ERR_CONFIG, "skx on a CPU without AVX-512");
}

/* The features mha reads from CPUID itself (clang 14's __builtin_cpu_supports does not name
 * them) as GCC's builtin reads them, OS support included. */
Test(kernel, cpuid_features_agree_with_gccs_builtin)
{
#ifdef __clang__
    cr_skip_test("clang's __builtin_cpu_supports names none of f16c, amx-tile, amx-bf16");
#else
    __builtin_cpu_init();
    cr_assert_eq(mha_cpu_has("f16c"), !!__builtin_cpu_supports("f16c"));
    cr_assert_eq(mha_cpu_has("amx_tile"), !!__builtin_cpu_supports("amx-tile"));
    cr_assert_eq(mha_cpu_has("amx_bf16"), !!__builtin_cpu_supports("amx-bf16"));
#endif
}

/* The auto table is the widest this CPU runs, and each table runs on the features it names. */
Test(kernel, auto_table_follows_cpu_features)
{
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                       __builtin_cpu_supports("fma");
    unsigned a, b, c, d; /* F16C from CPUID: clang 14's __builtin_cpu_supports does not name it */
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    cr_assert_str_eq(mha_isa_auto(), avx512 ? "avx512" : avx2 ? "avx2" : "ref");
    cr_assert_eq(mha_isa_runnable(&mha_isa_avx512), avx512);
    cr_assert_eq(mha_isa_runnable(&mha_isa_avx2), avx2);
    cr_assert(mha_isa_runnable(&mha_isa_ref));
}

#else
/* aarch64: the neon table on cortexa57's microkernel, whatever the CPU (every aarch64 CPU has
 * Advanced SIMD). */
Test(kernel, auto_choice_follows_cpu_features)
{
    cr_assert_str_eq(mha_blis_arch_auto(), "cortexa57");
    cr_assert_str_eq(mha_isa_auto(), "neon");
    cr_assert(mha_isa_runnable(&mha_isa_neon) && mha_isa_runnable(&mha_isa_ref));
}

Test(kernel, unknown_or_unrunnable_contexts_are_config_errors)
{
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("no-such-arch", &mha_isa_ref, &k), MHA_ERR_CONFIG);
    cr_assert_eq(mha_kernel_select("skx", &mha_isa_ref, &k), MHA_ERR_CONFIG, "x86-64's skx is not built here");
    cr_assert_eq(mha_kernel_select("cortexa57", &mha_isa_ref, &k), MHA_ERR_CONFIG,
                 "cortexa57 fuses its epilogue: not a sub-config of ref");
}

/* The features read from the auxiliary vector: what Linux (or qemu-user) says, as the CPU
 * the tests run on has them. */
Test(kernel, hwcap_features_agree_with_the_auxiliary_vector)
{
    cr_assert_eq(mha_cpu_has("asimd"), !!(getauxval(AT_HWCAP) & HWCAP_ASIMD));
    cr_assert_eq(mha_cpu_has("sve"), !!(getauxval(AT_HWCAP) & HWCAP_SVE));
    cr_assert_eq(mha_cpu_has("bf16"), !!(getauxval(AT_HWCAP2) & HWCAP2_BF16));
    cr_assert_eq(mha_cpu_has("i8mm"), !!(getauxval(AT_HWCAP2) & HWCAP2_I8MM));
    cr_assert(!mha_cpu_has("avx2") && !mha_cpu_has("no-such-feature"));
}
#endif

Test(kernel, engine_reports_the_context_in_use)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1;
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_str_eq(mha_engine_blis_arch(e), mha_blis_arch_auto());
    mha_free(e);
    strcpy(cfg.blis_arch, TEST_REF_ARCH);
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_str_eq(mha_engine_blis_arch(e), TEST_REF_ARCH);
    cr_assert_str_eq(mha_engine_isa(e), TEST_GENERIC_TABLE, TEST_REF_ARCH "'s table is the widest that lists it");
    mha_free(e);
    strcpy(cfg.blis_arch, "auto");
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_str_eq(mha_engine_blis_arch(e), mha_blis_arch_auto());
    mha_free(e);
}

/* Each table this CPU runs: an engine of it says so, with the table's default sub-config and
 * bf16 kernel; a sub-config named without isa picks the table that runs it. */
TABLE_TEST(kernel, engines_report_their_table)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1;
    snprintf(cfg.isa, sizeof cfg.isa, "%s", isa->name);
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK, "isa %s", isa->name);
    cr_assert_str_eq(mha_engine_isa(e), isa->name);
    cr_assert_str_eq(mha_engine_blis_arch(e), isa->default_arch());
    mha_free(e);
    cfg.precision = MHA_PRECISION_BF16;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK, "isa %s bf16", isa->name);
    cr_assert_str_eq(mha_engine_kernel(e), isa->bf16_auto()->name);
    mha_free(e);
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1;
    snprintf(cfg.blis_arch, sizeof cfg.blis_arch, "%s", isa->default_arch());
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    /* the widest table that lists it (aarch64: generic is neon's too) */
    cr_assert_str_eq(mha_engine_isa(e), mha_isa_of_arch(isa->default_arch())->name, "blis_arch %s",
                     isa->default_arch());
    mha_free(e);
}

/* An unknown table, a sub-config or bf16 kernel of another table, and a table this CPU cannot
 * run are config errors that say which field and why; nothing is created. */
Test(kernel, bad_isa_choices_are_config_errors_naming_the_field)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1;
    char err[256];
    mha_engine *e = (mha_engine *)1;
    strcpy(cfg.isa, "avx9");
    cr_assert_eq(mha_config_check(&cfg, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, TABLES_UNKNOWN("avx9")), "%s", err);
    cr_assert_eq(mha_create(&cfg, &e), MHA_ERR_CONFIG);
    cr_assert_null(e);
    strcpy(cfg.isa, "ref"), strcpy(cfg.blis_arch, "skx");
    cr_assert_eq(mha_config_check(&cfg, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "blis_arch: 'skx' is not a sub-config of isa ref (it runs " TEST_REF_ARCHS ")"), "%s", err);
    strcpy(cfg.blis_arch, "auto"), cfg.precision = MHA_PRECISION_BF16, strcpy(cfg.bf16_kernel, "amx-bf16");
    cr_assert_eq(mha_config_check(&cfg, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "bf16_kernel: 'amx-bf16': not a kernel of isa ref (it has ref-bf16)"), "%s", err);
}

/* A table this CPU cannot run: the message names what it needs and what the CPU lacks. */
Test(kernel, a_table_the_cpu_cannot_run_says_what_it_lacks)
{
    mha_config cfg;
    char err[256];
    const mha_isa *missing = NULL;
    for (int i = 0; i < mha_isa_count && !missing; i++)
        if (!mha_isa_runnable(mha_isa_tables[i]))
            missing = mha_isa_tables[i];
    if (!missing)
        cr_skip_test("this CPU runs every table: the 'cannot run' message is not provoked here");
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1;
    snprintf(cfg.isa, sizeof cfg.isa, "%s", missing->name);
    cr_assert_eq(mha_config_check(&cfg, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "needs") && strstr(err, "this CPU lacks"), "%s", err);
}

Test(kernel, contexts_agree, .timeout = 60)
{
    const char *archs[] = {"generic", "haswell", "zen3", "skx"};
    problem p;
    problem_make(&p, 128, 4, 2, 33, 33, 1, 0, 31);
    size_t n = (size_t)2 * 33 * 128;
    double *ref = malloc(n * sizeof *ref);
    reference_mha(&p, ref, NULL);
    float *out = malloc(n * sizeof *out);
    mha_input in = problem_input(&p);
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        mha_config cfg;
        problem_config(&p, &cfg, 2);
        strcpy(cfg.blis_arch, archs[a]);
        mha_engine *e;
        if (mha_create(&cfg, &e) != MHA_OK)
            continue; /* not runnable on this CPU */
        mha_weights w = problem_weights(&p, MHA_LAYOUT_XW, &(float *){NULL});
        cr_assert_eq(mha_set_weights(e, &w), MHA_OK);
        cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_OK);
        double err = rel_error(out, ref, n);
        cr_assert_leq(err, 1e-5, "%s: relative error %g", archs[a], err); /* as in test_engine.c */
        mha_free(e);
    }
    free(out), free(ref);
    problem_free(&p);
}

/* The softmax's key chunks are one KC pass of the microkernel on whole B panels: so for every
 * sub-config of every table this CPU runs; a kernel with a shorter KC or panels that do not
 * divide a chunk is refused. */
TABLE_TEST(kernel, every_sub_config_takes_a_key_chunk_in_one_pass)
{
    int checked = 0;
    for (int i = 0; isa->archs[i]; i++) {
        mha_kernel k;
        if (mha_kernel_select(isa->archs[i], isa, &k) != MHA_OK) {
            note_skipped("isa %s: BLIS '%s' does not run on this CPU", isa->name, isa->archs[i]);
            continue;
        }
        cr_assert(mha_attention_chunk_fits(&k), "%s/%s: KC %d, B panels %d wide, chunks of %d keys", isa->name,
                  k.arch, k.kc, k.bw, MHA_KV_CHUNK);
        mha_kernel short_kc = k, odd_panels = k;
        short_kc.kc = MHA_KV_CHUNK - 1;
        odd_panels.bw = 12;
        cr_assert(!mha_attention_chunk_fits(&short_kc) && !mha_attention_chunk_fits(&odd_panels));
        checked++;
    }
    cr_assert_gt(checked, 0);
}

/* The public list of tables is the library's, widest first, ref last; the public feature test
 * is the tables' own. */
Test(kernel, the_public_table_list_and_feature_test_are_the_librarys)
{
    int n = 0;
    while (mha_isa_table(n))
        n++;
    cr_assert_eq(n, mha_isa_count);
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(mha_isa_table(i), mha_isa_tables[i]->name);
    cr_assert_str_eq(mha_isa_table(n - 1), "ref");
    cr_assert_null(mha_isa_table(-1));
    static const char *features[] = {"avx512f", "avx2", "fma", "f16c", "amx_bf16", "asimd", "bf16", "sve"};
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++)
        cr_assert_eq(mha_cpu_has_feature(features[i]), !!mha_cpu_has(features[i]), "%s", features[i]);
    cr_assert(!mha_cpu_has_feature(NULL) && !mha_cpu_has_feature("no-such-feature"));
}

Test(kernel, blis_version_is_reported)
{
    const char *v = mha_blis_version();
    cr_assert(v && *v >= '0' && *v <= '9', "BLIS version '%s'", v ? v : "(null)");
}

#if defined(__x86_64__)
/* A check changes nothing in the process: Linux's AMX tile data permission is asked for by
 * mha_create of an amx-bf16 engine only, never by mha_config_check, mha_workspace_size or the
 * auto queries (issue 22). */
#define ARCH_GET_XCOMP_PERM 0x1022
#define XFEATURE_XTILEDATA 18
static int tile_permission(void)
{
    unsigned long mask = 0;
    return syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask) == 0 && (mask >> XFEATURE_XTILEDATA & 1u);
}

Test(kernel, checks_ask_the_os_for_nothing, .timeout = 30)
{
    const mha_bkernel *amx = &mha_bk_amx;
    if (!amx->usable())
        cr_skip_test("no AMX here (%s): nothing for a check to ask", amx->lacks);
    if (tile_permission())
        cr_skip_test("this test process already holds the tile data permission: nothing to observe");
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1, cfg.precision = MHA_PRECISION_BF16;
    strcpy(cfg.isa, "avx512"), strcpy(cfg.bf16_kernel, "amx-bf16");
    cr_assert_eq(mha_config_check(&cfg, NULL, 0), MHA_OK);
    cr_assert_gt(mha_workspace_size(&cfg), 0);
    cr_assert_str_eq(mha_bf16_kernel_auto(), "amx-bf16");
    cr_assert_str_eq(mha_isa_auto(), "avx512");
    cr_assert(!tile_permission(), "a check asked Linux for the tile data state");
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert(tile_permission(), "mha_create of an amx-bf16 engine did not ask for it");
    mha_free(e);
}

#endif

/* mha_isa_describe says what each table holds, and refuses a name it does not know. */
Test(kernel, each_table_describes_itself)
{
    char buf[512];
#if defined(__x86_64__)
    cr_assert_eq(mha_isa_describe("avx2", buf, sizeof buf), MHA_OK);
    cr_assert(strstr(buf, "needs avx2 fma f16c") && strstr(buf, "BLIS haswell zen3 zen2 zen") && strstr(buf, "bf16 avx2-bf16"),
              "%s", buf);
    cr_assert_eq(mha_isa_describe("avx512", buf, sizeof buf), MHA_OK);
    cr_assert(strstr(buf, "bf16 amx-bf16 avx512-bf16 fma-bf16") && strstr(buf, mha_isa_runnable(&mha_isa_avx512) ? "runs here" : "not here"),
              "%s", buf);
    cr_assert(strstr(buf, "int16 products avx512-vnni") && strstr(buf, "avx2-vnni") && strstr(buf, " ref") &&
              (!mha_isa_runnable(&mha_isa_avx512) || strstr(buf, " (here)")), "%s", buf);
    const int vnni_here = mha_isa_runnable(&mha_isa_avx512) && mha_cpu_has_all(mha_int8_scores_avx512_vnni.needs);
    cr_assert(strstr(buf, "; int8 scores avx512-vnni") && strstr(buf, vnni_here ? "avx512-vnni (here) avx2" : " avx2"),
              "%s", buf);
    const int bf16_here = mha_isa_runnable(&mha_isa_avx512) && mha_cpu_has("avx512_bf16");
    cr_assert(strstr(buf, "; blocks to bf16 avx512-bf16") && strstr(buf, " avx512") && strstr(buf, " floats") &&
              (!bf16_here || strstr(buf, "avx512-bf16 (here)")), "%s", buf);
#else
    cr_assert_eq(mha_isa_describe("neon", buf, sizeof buf), MHA_OK);
    cr_assert(strstr(buf, "needs asimd") && strstr(buf, "runs here") && strstr(buf, "BLIS cortexa57 generic") &&
              strstr(buf, "bf16 neon-bfdot neon-bf16"), "%s", buf);
#endif
    cr_assert_eq(mha_isa_describe("ref", buf, sizeof buf), MHA_OK);
    cr_assert(strstr(buf, "runs here") && strstr(buf, "BLIS " TEST_REF_ARCH) && strstr(buf, "bf16 ref-bf16") &&
              strstr(buf, "int16 products ref (here)") && strstr(buf, "blocks to bf16 floats (here)"), "%s", buf);
    cr_assert_eq(mha_isa_describe("avx9", buf, sizeof buf), MHA_ERR_CONFIG);
    cr_assert(strstr(buf, "unknown"), "%s", buf);
    cr_assert_eq(mha_isa_describe(NULL, buf, sizeof buf), MHA_ERR_INVALID_ARG);
}
