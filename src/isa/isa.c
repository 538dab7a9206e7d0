/* isa.c — the list of kernel tables and the choice among them: of a table by name or from the
 * CPU, of a BLIS sub-config within a table, of a bf16 kernel within a table. Nothing here
 * changes process state (a check may call it): what a kernel must ask of the OS is asked by
 * mha_bkernel_enable, at create. */
#include "isa.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

const mha_isa *const mha_isa_tables[] = {&mha_isa_avx512, &mha_isa_avx2, &mha_isa_ref};

/* CPUID's bit of leaf 1 (ECX), 7.0 (EDX) or 7.1 (EAX) for a feature that clang 14's
 * __builtin_cpu_supports does not name (f16c, avx_vnni, amx-tile, amx-bf16), with the register
 * state the OS must save for it: F16C's and AVX-VNNI's VEX encodings need AVX's (which
 * __builtin_cpu_supports("avx") checks), AMX's tiles XCR0's TILECFG and TILEDATA (bits 17, 18),
 * as GCC's own check asks. */
static int cpuid_has(const char *f)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (!strcmp(f, "f16c"))
        return (c >> 29 & 1u) && __builtin_cpu_supports("avx");
    if (!strcmp(f, "avx_vnni"))
        return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u) && __builtin_cpu_supports("avx");
    const unsigned bit = !strcmp(f, "amx_tile") ? 24 : !strcmp(f, "amx_bf16") ? 22 : 0;
    if (!bit || !(c >> 27 & 1u)) /* none of these; or no OSXSAVE, so no xgetbv */
        return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x60000u) == 0x60000u && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> bit & 1u);
}

int mha_cpu_has(const char *f)
{
    __builtin_cpu_init();
    /* __builtin_cpu_supports needs a literal: the features the tables test */
    if (!strcmp(f, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(f, "avx512dq")) return __builtin_cpu_supports("avx512dq");
    if (!strcmp(f, "avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (!strcmp(f, "avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (!strcmp(f, "avx512_bf16")) return __builtin_cpu_supports("avx512bf16");
    if (!strcmp(f, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(f, "fma")) return __builtin_cpu_supports("fma");
    if (!strcmp(f, "avx")) return __builtin_cpu_supports("avx");
    if (!strcmp(f, "ssse3")) return __builtin_cpu_supports("ssse3");
    if (!strcmp(f, "avx512_vnni")) return __builtin_cpu_supports("avx512vnni");
    if (!strcmp(f, "avx512vbmi")) return __builtin_cpu_supports("avx512vbmi");
    return cpuid_has(f);
}
#elif defined(__aarch64__)
#include <sys/auxv.h>

/* The x86 tables' files are not built here (Makefile): NEON (every ARMv8-A core has it), then
 * the portable table. */
const mha_isa *const mha_isa_tables[] = {&mha_isa_neon, &mha_isa_ref};

/* Linux's names for the features (/proc/cpuinfo's), from the auxiliary vector's HWCAP words:
 * the kernel says what it enabled, as it does for user space (no MRS traps). */
int mha_cpu_has(const char *f)
{
    static const struct { const char *name; int word; unsigned long bit; } caps[] = {
        {"asimd", 1, HWCAP_ASIMD}, {"fphp", 1, HWCAP_FPHP},   {"asimdhp", 1, HWCAP_ASIMDHP},
        {"asimddp", 1, HWCAP_ASIMDDP}, {"sve", 1, HWCAP_SVE}, {"sve2", 2, HWCAP2_SVE2},
        {"i8mm", 2, HWCAP2_I8MM},  {"bf16", 2, HWCAP2_BF16},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (!strcmp(f, caps[i].name))
            return (getauxval(caps[i].word == 1 ? AT_HWCAP : AT_HWCAP2) & caps[i].bit) != 0;
    return 0;
}
#else
#error "mha builds for x86-64 and aarch64 Linux"
#endif

const int mha_isa_count = (int)(sizeof mha_isa_tables / sizeof mha_isa_tables[0]);

/* The features of `needs` (space-separated) this CPU lacks, into buf ("" when none). */
static void lacking(const char *needs, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (const char *p = needs; *p;) {
        const size_t n = strcspn(p, " ");
        char f[32];
        snprintf(f, sizeof f, "%.*s", (int)n, p);
        if (n > 0 && !mha_cpu_has(f) && at < len)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " " : "", f);
        p += n + (p[n] == ' ');
    }
}

int mha_cpu_has_all(const char *needs)
{
    char lacks[128];
    lacking(needs, lacks, sizeof lacks);
    return !lacks[0];
}

const mha_qdot16_ops *mha_qdot16_choose(const mha_qkernels *qk)
{
    int i = 0;
    while (qk->dot16[i + 1] && !mha_cpu_has_all(qk->dot16[i]->needs))
        i++;
    return qk->dot16[i];
}

const mha_qbf16_ops *mha_qbf16_choose(const mha_qkernels *qk)
{
    int i = 0;
    while (qk->bf16w[i] && !mha_cpu_has_all(qk->bf16w[i]->needs))
        i++;
    return qk->bf16w[i];
}

const mha_int8_scores_ops *mha_int8_scores_choose(const mha_isa *isa)
{
    int i = 0;
    while (isa->int8_scores[i] && !mha_cpu_has_all(isa->int8_scores[i]->needs))
        i++;
    return isa->int8_scores[i];
}

int mha_isa_runnable(const mha_isa *isa)
{
    char lacks[128];
    lacking(isa->needs, lacks, sizeof lacks);
    return !lacks[0];
}

const mha_isa *mha_isa_auto_table(void)
{
    for (int i = 0; i < mha_isa_count; i++)
        if (mha_isa_runnable(mha_isa_tables[i]))
            return mha_isa_tables[i];
    return &mha_isa_ref;
}

/* "unknown (auto, avx512, avx2, ref)": the names there are, from the tables. */
static void unknown(char *buf, size_t len, int with_auto)
{
    size_t at = (size_t)snprintf(buf, len, "unknown (%s", with_auto ? "auto" : "");
    for (int i = 0; i < mha_isa_count && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i || with_auto ? ", " : "", mha_isa_tables[i]->name);
    if (at < len)
        snprintf(buf + at, len - at, ")");
}

mha_status mha_isa_select(const char *request, const mha_isa **isa, char *why_buf, size_t why_len)
{
    if (!request || !request[0] || !strcmp(request, "auto")) {
        *isa = mha_isa_auto_table();
        return MHA_OK;
    }
    for (int i = 0; i < mha_isa_count; i++) {
        const mha_isa *t = mha_isa_tables[i];
        if (strcmp(t->name, request) != 0)
            continue;
        char lacks[128];
        lacking(t->needs, lacks, sizeof lacks);
        if (lacks[0]) {
            snprintf(why_buf, why_len, "needs %s; this CPU lacks %s", t->needs, lacks);
            return MHA_ERR_CONFIG;
        }
        *isa = t;
        return MHA_OK;
    }
    unknown(why_buf, why_len, 1);
    return MHA_ERR_CONFIG;
}

int mha_isa_runs_arch(const mha_isa *isa, const char *arch)
{
    for (int i = 0; isa->archs[i]; i++)
        if (!strcmp(isa->archs[i], arch))
            return 1;
    return 0;
}

const mha_isa *mha_isa_of_arch(const char *arch)
{
    for (int i = 0; i < mha_isa_count; i++)
        if (mha_isa_runnable(mha_isa_tables[i]) && mha_isa_runs_arch(mha_isa_tables[i], arch))
            return mha_isa_tables[i];
    return NULL;
}

mha_status mha_bkernel_select(const mha_isa *isa, const char *request, const mha_bkernel **bk, char *why_buf,
                              size_t why_len)
{
    if (!request || !request[0] || !strcmp(request, "auto")) {
        *bk = isa->bf16_auto();
        return MHA_OK;
    }
    for (int i = 0; isa->bf16[i]; i++) {
        const mha_bkernel *k = isa->bf16[i];
        if (strcmp(k->name, request) != 0)
            continue;
        if (k->usable && !k->usable()) {
            snprintf(why_buf, why_len, "%s", k->lacks);
            return MHA_ERR_CONFIG;
        }
        *bk = k;
        return MHA_OK;
    }
    /* another table's kernel, or none at all */
    size_t at = (size_t)snprintf(why_buf, why_len, "not a kernel of isa %s (it has", isa->name);
    for (int i = 0; isa->bf16[i] && at < why_len; i++)
        at += (size_t)snprintf(why_buf + at, why_len - at, "%s %s", i ? "," : "", isa->bf16[i]->name);
    if (at < why_len)
        snprintf(why_buf + at, why_len - at, ")");
    return MHA_ERR_CONFIG;
}

MHA_API mha_status mha_isa_describe(const char *name, char *buf, size_t len)
{
    if (!name || !buf || len == 0)
        return MHA_ERR_INVALID_ARG;
    for (int i = 0; i < mha_isa_count; i++) {
        const mha_isa *t = mha_isa_tables[i];
        if (strcmp(t->name, name) != 0)
            continue;
        char lacks[128], here[160] = "runs here";
        lacking(t->needs, lacks, sizeof lacks);
        if (lacks[0])
            snprintf(here, sizeof here, "not here: this CPU lacks %s", lacks);
        size_t at = (size_t)snprintf(buf, len, "needs %s; %s; BLIS", t->needs[0] ? t->needs : "nothing (portable C)", here);
        for (int j = 0; t->archs[j] && at < len; j++)
            at += (size_t)snprintf(buf + at, len - at, " %s", t->archs[j]);
        if (at < len)
            at += (size_t)snprintf(buf + at, len - at, "; bf16");
        for (int j = 0; t->bf16[j] && at < len; j++)
            at += (size_t)snprintf(buf + at, len - at, " %s", t->bf16[j]->name);
        if (at < len) /* the integer products, the one an engine here would take marked */
            at += (size_t)snprintf(buf + at, len - at, "; int16 products");
        const mha_qdot16_ops *here_ops = lacks[0] ? NULL : mha_qdot16_choose(t->quant);
        for (int j = 0; t->quant->dot16[j] && at < len; j++)
            at += (size_t)snprintf(buf + at, len - at, " %s%s", t->quant->dot16[j]->name,
                                   t->quant->dot16[j] == here_ops ? " (here)" : "");
        if (at < len) /* an int8 cache's integer scores, the kernel an engine here would take marked */
            at += (size_t)snprintf(buf + at, len - at, "; int8 scores%s", t->int8_scores[0] ? "" : " float32");
        const mha_int8_scores_ops *here_s = lacks[0] ? NULL : mha_int8_scores_choose(t);
        for (int j = 0; t->int8_scores[j] && at < len; j++)
            at += (size_t)snprintf(buf + at, len - at, " %s%s", t->int8_scores[j]->name,
                                   t->int8_scores[j] == here_s ? " (here)" : "");
        if (at < len) /* block weights into bf16: the table's own, or its floats rounded */
            at += (size_t)snprintf(buf + at, len - at, "; blocks to bf16");
        const mha_qbf16_ops *here_w = lacks[0] ? NULL : mha_qbf16_choose(t->quant);
        for (int j = 0; t->quant->bf16w[j] && at < len; j++)
            at += (size_t)snprintf(buf + at, len - at, " %s%s", t->quant->bf16w[j]->name,
                                   t->quant->bf16w[j] == here_w ? " (here)" : "");
        if (at < len)
            at += (size_t)snprintf(buf + at, len - at, " floats%s", !lacks[0] && !here_w ? " (here)" : "");
        return MHA_OK;
    }
    unknown(buf, len, 0);
    return MHA_ERR_CONFIG;
}
