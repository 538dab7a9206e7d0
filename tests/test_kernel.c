/* test_kernel.c — the BLIS context: chosen from the CPU's features, forced by config,
 * reported by the engine; results agree across contexts. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "kernel.h"

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

Test(kernel, engine_reports_the_context_in_use)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 2, cfg.threads = 1;
    mha_engine *e;
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_str_eq(mha_engine_blis_arch(e), mha_blis_arch_auto());
    mha_free(e);
    strcpy(cfg.blis_arch, "generic");
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_str_eq(mha_engine_blis_arch(e), "generic");
    mha_free(e);
    strcpy(cfg.blis_arch, "auto");
    cr_assert_eq(mha_create(&cfg, &e), MHA_OK);
    cr_assert_str_eq(mha_engine_blis_arch(e), mha_blis_arch_auto());
    mha_free(e);
}

Test(kernel, unknown_or_unrunnable_contexts_are_config_errors)
{
    mha_kernel k;
    cr_assert_eq(mha_kernel_select("no-such-arch", &k), MHA_ERR_CONFIG);
    cr_assert_eq(mha_kernel_select("knl", &k), MHA_ERR_CONFIG, "not offered: no mha machine is a Xeon Phi");
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f"))
        cr_assert_eq(mha_kernel_select("skx", &k), MHA_ERR_CONFIG, "skx on a CPU without AVX-512");
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

Test(kernel, blis_version_is_reported)
{
    const char *v = mha_blis_version();
    cr_assert(v && *v >= '0' && *v <= '9', "BLIS version '%s'", v ? v : "(null)");
}
