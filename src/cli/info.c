/* info.c — `mha info`: what the engine sees of this machine: CPU model and features, the CPUs
 * this process may use, BLIS, each kernel table and what it would run here, OpenMP and its settings.
 * `mha info M.gguf`: what a GGUF model file holds for mha (gguf_info.c). */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* "0-3,8,10-11" */
static void cpu_list(const int *cpus, int n, char *out, size_t len)
{
    out[0] = '\0';
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
            j++;
        size_t k = strlen(out);
        if (j > i)
            snprintf(out + k, len - k, "%s%d-%d", k ? "," : "", cpus[i], cpus[j]);
        else
            snprintf(out + k, len - k, "%s%d", k ? "," : "", cpus[i]);
        i = j + 1;
    }
}

int mha_cli_info(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: mha info            CPU, cores, BLIS and OpenMP as the engine sees them\n"
               "       mha info M.gguf     a GGUF model file: its attention's config per layer, tensors and types\n");
        return EXIT_OK;
    }
    if (argc == 2)
        return cli_gguf_info(argv[1]);
    if (argc > 2) {
        cli_error("info: takes no arguments, or one GGUF file (mha info M.gguf)");
        return EXIT_USAGE;
    }
    char model[256], flags[512], list[4096];
    cli_cpu_info(model, sizeof model, flags, sizeof flags);
    static int cpus[1024];
    int n = mha_cpus_allowed(cpus, 1024);
    cpu_list(cpus, n < 1024 ? n : 1024, list, sizeof list);

    printf("mha %s\n", mha_version_string());
    printf("CPU       %s\n", model);
    printf("features  %s\n", flags[0] ? flags : "(" CLI_NO_FEATURES ")");
    printf("CPUs      %d this process may use: %s (%ld online)\n", n, list, sysconf(_SC_NPROCESSORS_ONLN));
    if (mha_l2_bytes())
        printf("L2        %zu KiB per core\n", mha_l2_bytes() / 1024);
    else
        printf("L2        unknown (neither glibc nor sysfs says)\n");
    printf("BLIS      %s; sub-configs chosen by the kernel table (never BLIS's own detection)\n", mha_blis_version());
    /* each kernel table, as an engine of it would run here (a one-token engine says) */
    const char *tables[8];
    int nt = 0;
    while (nt < 8 && (tables[nt] = mha_isa_table(nt)))
        nt++;
    for (int i = 0; i < nt; i++) {
        mha_config c;
        mha_config_init(&c);
        snprintf(c.isa, sizeof c.isa, "%s", tables[i]);
        char err[256];
        cli_kernels_used f32, bf16;
        if (mha_config_check(&c, err, sizeof err) != MHA_OK || !cli_kernels(&c, &f32)) {
            printf("%s%-6s    not on this CPU: %s\n", i ? "          " : "isa       ", tables[i], err);
            continue;
        }
        c.precision = MHA_PRECISION_BF16;
        if (!cli_kernels(&c, &bf16))
            snprintf(bf16.kernel, sizeof bf16.kernel, "none");
        printf("%s%-6s    runs here%s: f32 on BLIS '%s', bf16 on '%s'\n", i ? "          " : "isa       ", tables[i],
               !strcmp(tables[i], mha_isa_auto()) ? " (auto)" : "", f32.blis_arch, bf16.kernel);
    }
    for (int i = 0; i < nt; i++) { /* what each table holds */
        char what[512];
        mha_isa_describe(tables[i], what, sizeof what);
        printf("%s%-6s    %s\n", i ? "          " : "tables    ", tables[i], what);
    }
    const char *bk = mha_bf16_kernel_auto();
    printf("bf16      precision bf16 would run on '%s'%s\n", bk,
           !strcmp(bk, "amx-bf16") ? " (AMX tiles)"
           : !strcmp(bk, "avx512-bf16") ? " (vdpbf16ps; no AMX here)"
           : !strcmp(bk, "fma-bf16") || !strcmp(bk, "avx2-bf16") ? " (bf16 storage, float32 FMA; no AMX here)"
           : !strcmp(bk, "neon-bfdot")                           ? " (BFDOT)"
           : !strcmp(bk, "neon-bf16") ? " (bf16 storage, float32 FMA; no BFDOT here)"
                                      : " (portable C)");
    static const char *binds[] = {"false", "true", "primary", "close", "spread"};
    omp_proc_bind_t bind = omp_get_proc_bind();
    printf("OpenMP    %d (spec date), max threads %d, dynamic %s, proc_bind %s, max active levels %d\n", _OPENMP,
           omp_get_max_threads(), omp_get_dynamic() ? "true" : "false",
           (int)bind >= 0 && (int)bind < 5 ? binds[bind] : "?", omp_get_max_active_levels());
    char binding[2048];
    cli_openmp_binding(binding, sizeof binding);
    printf("binding   %s\n", binding);
    int any = 0;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "OMP_", 4) || !strncmp(*e, "GOMP_", 5) || !strncmp(*e, "BLIS_", 5)) {
            printf("%s%s\n", any ? "          " : "env       ", *e);
            any = 1;
        }
    if (!any)
        printf("env       no OMP_*, GOMP_* or BLIS_* variables set (libgomp defaults; mha ignores BLIS_*)\n");
    return EXIT_OK;
}
