/* kernel.c — the attention kernel: single-threaded BLIS GEMMs on one head slice.
 *
 * Every GEMM goes through bli_sgemm_ex with the engine's context and a 1-thread rntm_t,
 * against the serial BLIS build linked statically: no call opens a parallel region, and
 * parallelism comes only from the scheduler's tasks. The OpenMP BLIS build opens a nested
 * region on every call, even with one thread: measured by `make blis-overhead`, the serial
 * build costs less per call and varies less (e.g. 64×64×64: 11.3–11.9 µs vs 11.2–17.4 µs;
 * perf/RESULTS.md), so libmha links the serial libblis.a.
 * The context is chosen here from the CPU's features, never from BLIS's own detection,
 * which picks "generic" on some current CPUs (AMD Zen 5), 5–7× slower than "skx". */
#define _GNU_SOURCE /* blis.h needs the POSIX barrier types */
#include "kernel.h"

#include <math.h>
#include <string.h>

#include <blis.h>

/* ---- BLIS context choice ---- */

typedef struct arch_req {
    const char *name;
    arch_t id;
    const char *features[6]; /* what the CPU must support; NULL-terminated */
} arch_req;

static const arch_req arch_table[] = {
    {"skx", BLIS_ARCH_SKX, {"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma", NULL}},
    {"zen3", BLIS_ARCH_ZEN3, {"avx2", "fma", NULL}},
    {"zen2", BLIS_ARCH_ZEN2, {"avx2", "fma", NULL}},
    {"zen", BLIS_ARCH_ZEN, {"avx2", "fma", NULL}},
    {"haswell", BLIS_ARCH_HASWELL, {"avx2", "fma", NULL}},
    {"sandybridge", BLIS_ARCH_SANDYBRIDGE, {"avx", NULL}},
    {"penryn", BLIS_ARCH_PENRYN, {"ssse3", NULL}},
    {"generic", BLIS_ARCH_GENERIC, {NULL}},
};

static int cpu_has(const char *feature)
{
    /* __builtin_cpu_supports needs a literal; list the ones the table uses. */
    if (!strcmp(feature, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(feature, "avx512dq")) return __builtin_cpu_supports("avx512dq");
    if (!strcmp(feature, "avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (!strcmp(feature, "avx512vl")) return __builtin_cpu_supports("avx512vl");
    if (!strcmp(feature, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(feature, "fma")) return __builtin_cpu_supports("fma");
    if (!strcmp(feature, "avx")) return __builtin_cpu_supports("avx");
    if (!strcmp(feature, "ssse3")) return __builtin_cpu_supports("ssse3");
    return 0;
}

static int runnable(const arch_req *a)
{
    for (int i = 0; a->features[i]; i++)
        if (!cpu_has(a->features[i]))
            return 0;
    return 1;
}

const char *mha_kernel_auto_arch(void)
{
    __builtin_cpu_init();
    if (runnable(&arch_table[0]))
        return "skx";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return __builtin_cpu_is("amd") ? "zen3" : "haswell";
    return "generic";
}

mha_status mha_kernel_select(const char *request, mha_kernel *k)
{
    const char *name = (!request || !request[0] || !strcmp(request, "auto")) ? mha_kernel_auto_arch() : request;
    __builtin_cpu_init();
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
        const arch_req *a = &arch_table[i];
        if (strcmp(a->name, name) != 0)
            continue;
        if (!runnable(a))
            return MHA_ERR_CONFIG;
        bli_init(); /* once per process; BLIS guards it */
        cntx_t **ctxs = bli_gks_lookup_id(a->id);
        if (!ctxs || !ctxs[BLIS_NAT])
            return MHA_ERR_CONFIG; /* not in this BLIS build */
        k->cntx = ctxs[BLIS_NAT];
        k->arch = a->name;
        return MHA_OK;
    }
    return MHA_ERR_CONFIG;
}

const char *mha_kernel_blis_version(void)
{
    return bli_info_get_version_str();
}

/* ---- GEMM: C (m, n) = alpha · A (m, k) · B (k, n) + beta · C, general strides ---- */

static void gemm(const mha_kernel *kern, int m, int n, int k, float alpha,
                 const float *a, ptrdiff_t rsa, ptrdiff_t csa,
                 const float *b, ptrdiff_t rsb, ptrdiff_t csb,
                 float beta, float *c, ptrdiff_t rsc)
{
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &rntm);
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &alpha,
                 (float *)a, rsa, csa, (float *)b, rsb, csb, &beta, c, rsc, 1,
                 (cntx_t *)kern->cntx, &rntm);
}

/* rows × cols of c (row stride ldc) = bias broadcast, so a beta = 1 GEMM adds x·W to it. */
static void fill_rows(float *c, ptrdiff_t ldc, int rows, int cols, const float *bias)
{
    for (int i = 0; i < rows; i++)
        memcpy(c + i * ldc, bias, (size_t)cols * sizeof *c);
}

/* qkv[0:m, c0:c0+nc] = x (m, d) · w[:, c0:c0+nc] (+ bias[c0:c0+nc]) */
static void project(const mha_fwd *f, int m, const float *x, const float *w, const float *bias,
                    int c0, int nc, float *qkv)
{
    if (m <= 0)
        return;
    ptrdiff_t ld = 3 * (ptrdiff_t)f->dk;
    if (f->has_bias)
        fill_rows(qkv + c0, ld, m, nc, bias + c0);
    gemm(f->kernel, m, nc, f->d, 1.0f, x, f->d, 1, w + c0, ld, 1, f->has_bias ? 1.0f : 0.0f, qkv + c0, ld);
}

void mha_kernel_head(const mha_fwd *f, int b, int h, float *qkv, float *scores)
{
    const int ql = f->q_len ? f->q_len[b] : f->seq_q;
    const int kl = f->kv_len ? f->kv_len[b] : f->seq_kv;
    const ptrdiff_t d = f->d, dk = f->dk, ld = 3 * dk, lds = f->seq_kv;
    const float *w = f->wqkv + (size_t)h * d * ld; /* (d, 3·dk) */
    const float *bias = f->bqkv + (size_t)h * ld;  /* (3·dk) */
    const float *xq = f->q + (size_t)b * f->seq_q * d;
    const float *xk = f->k + (size_t)b * f->seq_kv * d;
    const float *xv = f->v + (size_t)b * f->seq_kv * d;
    float *z = f->z + (size_t)b * f->seq_q * d + (size_t)h * dk; /* (seq_q, dk), row stride d */
    float *attn = f->attn ? f->attn + ((size_t)b * f->h + h) * f->seq_q * f->seq_kv : NULL;

    /* step 1: Q, K, V of this head (only valid rows), Q in columns [0, dk), K, V after it */
    if (f->fused) {
        project(f, ql > kl ? ql : kl, xq, w, bias, 0, 3 * f->dk, qkv);
    } else {
        project(f, ql, xq, w, bias, 0, f->dk, qkv);
        if (f->kv_shared) {
            project(f, kl, xk, w, bias, f->dk, 2 * f->dk, qkv);
        } else {
            project(f, kl, xk, w, bias, f->dk, f->dk, qkv);
            project(f, kl, xv, w, bias, 2 * f->dk, f->dk, qkv);
        }
    }
    const float *qm = qkv, *km = qkv + dk, *vm = qkv + 2 * dk;
    const float scale = 1.0f / sqrtf((float)f->dk);
    const int off = f->seq_kv - f->seq_q; /* causal: row i sees keys j <= i + off */

    /* step 2: query blocks; a block's keys stop where its last row's visibility does */
    for (int r0 = 0; r0 < ql; r0 += f->q_block) {
        const int r1 = r0 + f->q_block < ql ? r0 + f->q_block : ql, m = r1 - r0;
        int kv_end = kl;
        if (f->causal && r1 + off < kv_end)
            kv_end = r1 + off > 0 ? r1 + off : 0;

        if (kv_end > 0) {
            /* scores (m, kv_end) = scale · Q_blk · Kᵀ */
            gemm(f->kernel, m, kv_end, f->dk, scale, qm + r0 * ld, ld, 1, km, 1, ld, 0.0f, scores, lds);
            for (int i = r0; i < r1; i++) {
                int visible = kv_end;
                if (f->causal && i + off + 1 < visible)
                    visible = i + off + 1 > 0 ? i + off + 1 : 0;
                f->softmax(scores + (i - r0) * lds, kv_end, visible,
                           f->mask ? f->mask + (size_t)i * f->seq_kv : NULL);
            }
            /* z block (m, dk) = P (m, kv_end) · V (kv_end, dk) */
            gemm(f->kernel, m, f->dk, kv_end, 1.0f, scores, lds, 1, vm, ld, 1, 0.0f, z + r0 * d, d);
        } else {
            for (int i = r0; i < r1; i++)
                memset(z + i * d, 0, (size_t)dk * sizeof *z);
        }
        if (attn)
            for (int i = r0; i < r1; i++) {
                float *row = attn + (size_t)i * f->seq_kv;
                if (kv_end > 0)
                    memcpy(row, scores + (i - r0) * lds, (size_t)kv_end * sizeof *row);
                memset(row + kv_end, 0, (size_t)(f->seq_kv - kv_end) * sizeof *row);
            }
    }
    if (attn && ql < f->seq_q)
        memset(attn + (size_t)ql * f->seq_kv, 0, (size_t)(f->seq_q - ql) * f->seq_kv * sizeof *attn);
}

void mha_kernel_out_rows(const mha_fwd *f, int b, int r0, int r1)
{
    const int ql = f->q_len ? f->q_len[b] : f->seq_q;
    const ptrdiff_t d = f->d;
    const int valid_end = r1 < ql ? r1 : ql;
    float *out = f->out + ((size_t)b * f->seq_q + r0) * d;
    const float *z = f->z + ((size_t)b * f->seq_q + r0) * d;

    if (valid_end > r0) {
        const int m = valid_end - r0;
        if (f->has_bias)
            fill_rows(out, d, m, f->d, f->bo);
        gemm(f->kernel, m, f->d, f->d, 1.0f, z, d, 1, f->wo, d, 1, f->has_bias ? 1.0f : 0.0f, out, d);
    }
    const int zero_from = valid_end > r0 ? valid_end : r0;
    if (zero_from < r1)
        memset(f->out + ((size_t)b * f->seq_q + zero_from) * d, 0, (size_t)(r1 - zero_from) * d * sizeof(float));
}
