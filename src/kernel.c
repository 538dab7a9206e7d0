/* kernel.c — the BLIS boundary: sub-config choice and the sgemm microkernel.
 *
 * mha drives BLIS's sgemm microkernel itself (gemm.c packs and blocks): weights are packed
 * once at load, K and V once per head, and no call pays BLIS's ~6 µs of per-call setup or its
 * reference packing routines. It links the serial libblis.a: a bli_sgemm_ex call with a
 * 1-thread rntm_t costs less and varies less there than in the OpenMP build, which opens a
 * nested parallel region on every call (`make blis-overhead` compares the two), and the
 * microkernel itself opens none.
 * The context is chosen here from the CPU's features, never from BLIS's own detection,
 * which picks "generic" on some current CPUs (AMD Zen 5), several times slower than "skx", and is
 * built by the sub-config's own init function into the engine's memory: mha never calls
 * bli_init, so BLIS reads no environment variable (BLIS_ARCH_TYPE, BLIS_ARCH_DEBUG), never
 * aborts and prints nothing, and keeps no global state on mha's behalf. */
#define _GNU_SOURCE /* blis.h needs the POSIX barrier types */
#include "kernel.h"

#include <string.h>

#include <blis.h>

#include "attention.h"
#include "isa/isa.h"
#include "status.h"

/* ---- BLIS context choice ---- */

_Static_assert(sizeof(cntx_t) <= MHA_CNTX_BYTES, "MHA_CNTX_BYTES holds BLIS's cntx_t");

typedef struct arch_req {
    const char *name;
    void (*init)(cntx_t *);
    const char *features[6]; /* what the CPU must support; NULL-terminated */
    int beta_fused;          /* mha_kernel.beta_fused */
} arch_req;

#if defined(__x86_64__)
/* Each sub-config's own context initialiser (in every x86-64 build of Debian's libblis.a). */
void bli_cntx_init_skx(cntx_t *cntx);
void bli_cntx_init_zen3(cntx_t *cntx);
void bli_cntx_init_zen2(cntx_t *cntx);
void bli_cntx_init_zen(cntx_t *cntx);
void bli_cntx_init_haswell(cntx_t *cntx);
void bli_cntx_init_sandybridge(cntx_t *cntx);
void bli_cntx_init_penryn(cntx_t *cntx);
void bli_cntx_init_generic(cntx_t *cntx);

static const arch_req arch_table[] = {
    {"skx", bli_cntx_init_skx, {"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma", NULL}, 0},
    {"zen3", bli_cntx_init_zen3, {"avx2", "fma", NULL}, 0},
    {"zen2", bli_cntx_init_zen2, {"avx2", "fma", NULL}, 0},
    {"zen", bli_cntx_init_zen, {"avx2", "fma", NULL}, 0},
    {"haswell", bli_cntx_init_haswell, {"avx2", "fma", NULL}, 0},
    {"sandybridge", bli_cntx_init_sandybridge, {"avx", NULL}, 0},
    {"penryn", bli_cntx_init_penryn, {"ssse3", NULL}, 0},
    {"generic", bli_cntx_init_generic, {NULL}, 0},
};
#else
/* Debian's arm64 libblis.a is built for one sub-config, cortexa57: ARMv8-A's NEON kernels (8 × 12,
 * C column-stored), and BLIS's reference kernels compiled for it, which mha names generic as on
 * x86-64 (4 × 16, C row-stored: the B panels of 16 columns a bf16 engine needs). */
void bli_cntx_init_cortexa57(cntx_t *cntx);
void bli_cntx_init_cortexa57_ref(cntx_t *cntx);

static const arch_req arch_table[] = {
    {"cortexa57", bli_cntx_init_cortexa57, {"asimd", NULL}, 1}, /* FMLA with beta 1: whole tiles */
    {"generic", bli_cntx_init_cortexa57_ref, {NULL}, 0},
};
#endif

static int runnable(const arch_req *a)
{
    for (int i = 0; a->features[i]; i++)
        if (!mha_cpu_has(a->features[i]))
            return 0;
    return 1;
}

/* The float32 microkernel of sub-config `name`, or NULL. */
static void *ukr_of(const char *name)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (!strcmp(arch_table[i].name, name)) {
            cntx_t cx;
            memset(&cx, 0, sizeof cx);
            arch_table[i].init(&cx);
            return (void *)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, &cx);
        }
    return NULL;
}

mha_status mha_kernel_select(const char *request, const mha_isa *isa, mha_kernel *k)
{
    const char *name = (!request || !request[0] || !strcmp(request, "auto")) ? isa->default_arch() : request;
    if (!mha_isa_runs_arch(isa, name))
        return MHA_ERR_CONFIG;
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
        const arch_req *a = &arch_table[i];
        if (strcmp(a->name, name) != 0)
            continue;
        if (!runnable(a))
            return MHA_ERR_CONFIG;
        cntx_t *cx = (cntx_t *)(void *)k->cntx;
        memset(cx, 0, sizeof *cx);
        a->init(cx);
        k->arch = a->name;
        k->beta_fused = a->beta_fused;
        k->ukr = (void *)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cx);
        k->transposed = bli_cntx_l3_nat_ukr_prefers_cols_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cx);
        int mr = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, cx);
        int nr = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, cx);
        int mc = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cx);
        int nc = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NC, cx);
        k->kc = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cx);
        /* Goto's roles: the MR side's block (MC × KC) stays in L2, the NR side streams */
        k->bw = k->transposed ? mr : nr;
        k->aw = k->transposed ? nr : mr;
        k->mb = mc / k->aw * k->aw;
        k->nb = k->transposed ? mc : nc / nr * nr;
        k->isa = isa;
        k->qdot16 = mha_qdot16_choose(isa->quant);
        k->qbf16 = mha_qbf16_choose(isa->quant);
        k->int8_scores = mha_int8_scores_choose(isa);
        /* rows stream where the table's passes reproduce this microkernel's sums: the one of
         * stream_arch, which other sub-configs share (zen, zen2 and zen3 run haswell's) */
        k->stream = isa->stream_rows && k->bw == isa->stream_bw &&
                    (!strcmp(k->arch, isa->stream_arch) || k->ukr == ukr_of(isa->stream_arch));
        k->in_place = k->stream && isa->stream_in_place && isa->stream_in_place();
        if (!k->ukr || k->bw < 1 || k->aw < 1 || k->kc < 1 || k->mb < k->aw || k->nb < k->bw)
            return MHA_ERR_CONFIG;
        return MHA_OK;
    }
    return MHA_ERR_CONFIG;
}

const char *mha_kernel_blis_version(void)
{
    return bli_info_get_version_str();
}

/* ---- one microkernel call ---- */

void mha_kernel_tile(const mha_kernel *k, int rows, int cols, int kc, float alpha, const float *a,
                     const float *b, float beta, float *c, ptrdiff_t ldc)
{
    auxinfo_t aux;
    memset(&aux, 0, sizeof aux);
    bli_auxinfo_set_next_a((void *)a, &aux);
    bli_auxinfo_set_next_b((void *)b, &aux);
    sgemm_ukr_ft ukr = (sgemm_ukr_ft)k->ukr;
    if (k->transposed) /* Cᵀ (cols × rows, column-stored) = Bᵀ · Aᵀ: B's panels are its MR side */
        ukr(cols, rows, kc, &alpha, (float *)b, (float *)a, &beta, c, 1, ldc, &aux, (cntx_t *)(void *)k->cntx);
    else
        ukr(rows, cols, kc, &alpha, (float *)a, (float *)b, &beta, c, ldc, 1, &aux, (cntx_t *)(void *)k->cntx);
}

static int is_auto(const char *name)
{
    return !name[0] || !strcmp(name, "auto");
}

mha_status mha_kernel_choose(const mha_config *cfg, int bf16, mha_kernel *k, const mha_bkernel **bk, mha_problem *pr)
{
    char why[192];
    const mha_isa *isa = NULL;
    if (is_auto(cfg->isa) && !is_auto(cfg->blis_arch)) {
        if (!(isa = mha_isa_of_arch(cfg->blis_arch)))
            return mha_problemf(pr, MHA_ERR_CONFIG, "blis_arch",
                                "'%s' is unknown, not in this BLIS build, or not runnable on this CPU", cfg->blis_arch);
    } else if (mha_isa_select(cfg->isa, &isa, why, sizeof why) != MHA_OK)
        return mha_problemf(pr, MHA_ERR_CONFIG, "isa", "'%s': %s", cfg->isa, why);
    if (!is_auto(cfg->blis_arch) && !mha_isa_runs_arch(isa, cfg->blis_arch)) {
        size_t at = (size_t)snprintf(why, sizeof why, "%s", isa->archs[0]);
        for (int i = 1; isa->archs[i] && at < sizeof why; i++)
            at += (size_t)snprintf(why + at, sizeof why - at, ", %s", isa->archs[i]);
        return mha_problemf(pr, MHA_ERR_CONFIG, "blis_arch", "'%s' is not a sub-config of isa %s (it runs %s)",
                            cfg->blis_arch, isa->name, why);
    }
    if (mha_kernel_select(cfg->blis_arch, isa, k) != MHA_OK)
        return mha_problemf(pr, MHA_ERR_CONFIG, "blis_arch",
                            "'%s' is unknown, not in this BLIS build, or not runnable on this CPU",
                            is_auto(cfg->blis_arch) ? isa->default_arch() : cfg->blis_arch);
    /* A bf16 engine's activations sit in 16-column groups of whole B panels: with no sub-config
     * named, it takes the table's first whose panels hold them (aarch64: generic, as cortexa57's
     * are 8 wide); with none, the engine's check names the default's width. */
    if (bf16 && is_auto(cfg->blis_arch) && k->bw % MHA_BT_N != 0) {
        int i = 0;
        while (isa->archs[i] && (mha_kernel_select(isa->archs[i], isa, k) != MHA_OK || k->bw % MHA_BT_N != 0))
            i++;
        if (!isa->archs[i])
            mha_kernel_select(cfg->blis_arch, isa, k);
    }
    if (!mha_attention_chunk_fits(k))
        return mha_problemf(pr, MHA_ERR_CONFIG, "blis_arch", "'%s' has KC %d and B panels %d wide: the softmax's "
                            "chunks of %d keys need one KC pass on whole panels", k->arch, k->kc,
                            k->bw, MHA_KV_CHUNK);
    *bk = NULL;
    if (bf16 && mha_bkernel_select(isa, cfg->bf16_kernel, bk, why, sizeof why) != MHA_OK)
        return mha_problemf(pr, MHA_ERR_CONFIG, "bf16_kernel", "'%s': %s", cfg->bf16_kernel, why);
    return MHA_OK;
}
