/* helpers.c — see helpers.h. The reference is written plainly, in double, from DESIGN.md §1. */
#define _DEFAULT_SOURCE /* M_PI */
#include "helpers.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "config_file.h"
#include "isa/isa.h"
#include "kernel.h"

const char *test_isa(void)
{
    const char *e = getenv("MHA_TEST_ISA");
    return e ? e : "";
}

void config_init(mha_config *cfg)
{
    mha_config_init(cfg);
    const char *why = NULL;
    const mha_isa *isa = isa_runnable(test_isa(), &why);
    if (!isa)
        cr_skip_test("isa %s: %s", test_isa(), why);
    snprintf(cfg->isa, sizeof cfg->isa, "%s", test_isa());
    /* MHA_TEST_BLIS_ARCH: engines on that BLIS sub-config (a table's second one: its own sums) */
    const char *arch = getenv("MHA_TEST_BLIS_ARCH");
    if (arch)
        snprintf(cfg->blis_arch, sizeof cfg->blis_arch, "%s", arch);
    /* MHA_TEST_BF16_KERNEL: bf16 engines on that kernel of the table, not its auto one */
    const char *bk = getenv("MHA_TEST_BF16_KERNEL");
    if (bk) {
        static char buf[192];
        const mha_bkernel *k;
        if (mha_bkernel_select(isa, bk, &k, buf, sizeof buf) != MHA_OK)
            cr_skip_test("bf16 kernel %s: %s", bk, buf);
        snprintf(cfg->bf16_kernel, sizeof cfg->bf16_kernel, "%s", bk);
    }
}

const mha_isa *isa_runnable(const char *name, const char **why)
{
    static char buf[192];
    const mha_isa *t = NULL;
    if (mha_isa_select(name, &t, buf, sizeof buf) != MHA_OK) {
        if (why)
            *why = buf;
        return NULL;
    }
    return t;
}

void note_skipped(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[SKIP] %s\n", msg);
}

int table_list(int per_kernel, table_param *out, int max)
{
    int n = 0;
    for (int t = 0; t < mha_isa_count; t++)
        for (int k = 0; per_kernel ? mha_isa_tables[t]->bf16[k] != NULL : k == 0; k++) {
            cr_assert_lt(n, max, "more table instances than room");
            out[n++] = (table_param){t, per_kernel ? k : -1};
        }
    return n;
}

struct criterion_test_params table_params(int per_kernel)
{
    static table_param params[2][64];
    const int n = table_list(per_kernel, params[per_kernel], 64);
    return cr_make_param_array(table_param, params[per_kernel], (size_t)n);
}

const mha_isa *table_or_skip(const table_param *p, const mha_bkernel **bk)
{
    const mha_isa *t = mha_isa_tables[p->table];
    const char *why;
    if (!isa_runnable(t->name, &why))
        cr_skip_test("isa %s: %s", t->name, why);
    if (bk) {
        *bk = t->bf16[p->kernel];
        if (((*bk)->usable && !(*bk)->usable()) || !mha_bkernel_enable(*bk))
            cr_skip_test("isa %s, bf16 kernel %s: %s", t->name, (*bk)->name, (*bk)->lacks);
    }
    return t;
}

int names_bf16_kernel(const char *s, const char *before)
{
    for (int t = 0; t < mha_isa_count; t++)
        for (int k = 0; mha_isa_tables[t]->bf16[k]; k++) {
            char want[64];
            snprintf(want, sizeof want, "%s%s", before, mha_isa_tables[t]->bf16[k]->name);
            if (strstr(s, want))
                return 1;
        }
    return 0;
}

void kernel_auto(mha_kernel *k)
{
    cr_assert_eq(mha_kernel_select("", mha_isa_auto_table(), k), MHA_OK);
}

void kernel_and_ref(const mha_isa *isa, mha_kernel *k, mha_kernel *scalar)
{
    cr_assert_eq(mha_kernel_select("", isa, k), MHA_OK, "isa %s: its default sub-config", isa->name);
    *scalar = *k;
    scalar->isa = &mha_isa_ref;
}

uint64_t rng_next(rng *r)
{
    /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float rng_uniform(rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_next(r) >> 40) * (1.0 / 16777216.0));
}

void fill_uniform(float *x, size_t n, float lo, float hi, rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform(r, lo, hi);
}

static float *alloc_floats(size_t n)
{
    float *x = calloc(n ? n : 1, sizeof *x);
    cr_assert(x, "out of memory in the test");
    return x;
}

void problem_make(problem *p, int d, int h, int batch, int seq_q, int seq_kv, int bias, int cross, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    rng r = {seed};
    p->d = d, p->h = h, p->dk = d / h, p->batch = batch, p->seq_q = seq_q, p->seq_kv = cross ? seq_kv : seq_q;
    p->bias = bias, p->cross = cross;
    size_t dd = (size_t)d * d;
    float ws = 1.0f / sqrtf((float)d);
    float **w[4] = {&p->wq, &p->wk, &p->wv, &p->wo};
    float **b[4] = {&p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < 4; i++) {
        *w[i] = alloc_floats(dd);
        fill_uniform(*w[i], dd, -ws, ws, &r);
        if (bias) {
            *b[i] = alloc_floats((size_t)d);
            fill_uniform(*b[i], (size_t)d, -0.5f, 0.5f, &r);
        }
    }
    p->kvh = h;
    size_t nq = (size_t)batch * seq_q * d, nkv = (size_t)batch * p->seq_kv * d;
    p->q = alloc_floats(nq);
    fill_uniform(p->q, nq, -1.0f, 1.0f, &r);
    if (cross == 0) {
        p->k = p->v = p->q;
    } else {
        p->k = alloc_floats(nkv);
        fill_uniform(p->k, nkv, -1.0f, 1.0f, &r);
        if (cross == 1) {
            p->v = alloc_floats(nkv);
            fill_uniform(p->v, nkv, -1.0f, 1.0f, &r);
        } else {
            p->v = p->k;
        }
    }
}

void problem_set_kv_heads(problem *p, int kvh, uint64_t seed)
{
    rng r = {seed};
    const size_t d = (size_t)p->d, kvd = (size_t)kvh * p->dk;
    const float ws = 1.0f / sqrtf((float)d);
    float **w[2] = {&p->wk, &p->wv}, **b[2] = {&p->bk, &p->bv};
    for (int i = 0; i < 2; i++) {
        free(*w[i]);
        *w[i] = alloc_floats(d * kvd);
        fill_uniform(*w[i], d * kvd, -ws, ws, &r);
        if (p->bias) {
            free(*b[i]);
            *b[i] = alloc_floats(kvd);
            fill_uniform(*b[i], kvd, -0.5f, 0.5f, &r);
        }
    }
    p->kvh = kvh;
}

void problem_set_head_dim(problem *p, int dk, uint64_t seed)
{
    rng r = {seed};
    const size_t d = (size_t)p->d, qd = (size_t)p->h * dk;
    const float ws = 1.0f / sqrtf((float)d), wso = 1.0f / sqrtf((float)qd);
    free(p->wq), free(p->wo), free(p->bq);
    p->wq = alloc_floats(d * qd), p->wo = alloc_floats(qd * d);
    fill_uniform(p->wq, d * qd, -ws, ws, &r);
    fill_uniform(p->wo, qd * d, -wso, wso, &r);
    p->bq = NULL;
    if (p->bias) {
        p->bq = alloc_floats(qd);
        fill_uniform(p->bq, qd, -0.5f, 0.5f, &r);
    }
    p->dk = dk;
    problem_set_kv_heads(p, p->kvh, seed ^ 0xD1Dull);
}

void problem_set_qk_norm(problem *p, mha_qk_norm_kind kind, int weight_offset, uint64_t seed)
{
    rng r = {seed};
    const float lo = weight_offset ? -0.5f : 0.5f;
    const int full = kind == MHA_QK_NORM_FULL;
    const size_t nq = (size_t)p->dk * (full ? p->h : 1), nk = (size_t)p->dk * (full ? p->kvh : 1);
    free(p->q_norm), free(p->k_norm);
    p->q_norm = alloc_floats(nq), p->k_norm = alloc_floats(nk);
    fill_uniform(p->q_norm, nq, lo, lo + 1.0f, &r);
    fill_uniform(p->k_norm, nk, lo, lo + 1.0f, &r);
    p->qk_norm = (mha_qk_norm){.kind = kind, .eps = 1e-6f, .weight_offset = weight_offset};
}

void problem_set_sinks(problem *p, uint64_t seed)
{
    rng r = {seed};
    free(p->sinks);
    p->sinks = alloc_floats((size_t)p->h);
    fill_uniform(p->sinks, (size_t)p->h, -2.0f, 2.0f, &r);
}

void problem_set_variants(problem *p, unsigned variants, uint64_t seed)
{
    p->scale = variants & V_SCALE ? 0.2f : 0.0f;
    p->softcap = variants & V_SOFTCAP ? 3.0f : 0.0f;
    if (variants & V_SINKS)
        problem_set_sinks(p, seed);
    if (variants & (V_QK_NORM | V_QK_NORM_GEMMA | V_QK_NORM_FULL))
        problem_set_qk_norm(p, variants & V_QK_NORM_FULL ? MHA_QK_NORM_FULL : MHA_QK_NORM_HEAD,
                            (variants & V_QK_NORM_GEMMA) != 0, seed ^ 0x9Eull);
    if (variants & V_ALIBI)
        p->alibi_max_bias = 8.0f, p->rope.style = MHA_ROPE_NONE;
}

void problem_free(problem *p)
{
    float *all[] = {p->wq, p->wk, p->wv, p->wo, p->bq, p->bk, p->bv, p->bo, p->q_norm, p->k_norm, p->sinks};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    if (p->v != p->q && p->v != p->k)
        free(p->v);
    if (p->k != p->q)
        free(p->k);
    free(p->q);
    free(p->q_len);
    free(p->kv_len);
    free(p->mask);
    memset(p, 0, sizeof *p);
}

mha_input problem_input(const problem *p)
{
    return (mha_input){
        .batch = p->batch, .seq_q = p->seq_q, .seq_kv = p->seq_kv,
        .q = p->q, .k = p->k, .v = p->v,
        .q_lengths = p->q_len, .kv_lengths = p->kv_len,
        .causal = p->causal, .mask = p->mask,
    };
}

mha_weights problem_weights(const problem *p, mha_layout layout, float **scratch)
{
    mha_weights w = {.w_q = p->wq, .w_k = p->wk, .w_v = p->wv, .w_o = p->wo, .b_q = p->bq, .b_k = p->bk,
                     .b_v = p->bv, .b_o = p->bo, .layout = layout, .q_norm = p->q_norm, .k_norm = p->k_norm,
                     .sinks = p->sinks};
    *scratch = NULL;
    if (layout == MHA_LAYOUT_TORCH) {
        /* nn.Linear stores (d_out, d_in): the transpose of the x·W matrix. */
        const size_t d = (size_t)p->d, qd = (size_t)p->h * p->dk, kvd = (size_t)p->kvh * p->dk;
        const float *src[4] = {p->wq, p->wk, p->wv, p->wo};
        const size_t in[4] = {d, d, d, qd}, out[4] = {qd, kvd, kvd, d};
        float *t = alloc_floats(2 * d * qd + 2 * d * kvd), *at = t, *dst[4];
        for (int m = 0; m < 4; m++) {
            dst[m] = at, at += in[m] * out[m];
            for (size_t i = 0; i < in[m]; i++)
                for (size_t o = 0; o < out[m]; o++)
                    dst[m][o * in[m] + i] = src[m][i * out[m] + o];
        }
        w.w_q = dst[0], w.w_k = dst[1], w.w_v = dst[2], w.w_o = dst[3];
        *scratch = t;
    }
    return w;
}

mha_weights problem_ready(const problem *p, mha_config *cfg, int threads, mha_layout layout, float **scratch)
{
    problem_config(p, cfg, threads);
    return problem_weights(p, layout, scratch);
}

void problem_config(const problem *p, mha_config *cfg, int threads)
{
    config_init(cfg);
    cfg->d_model = p->d;
    cfg->n_heads = p->h;
    cfg->max_batch = p->batch;
    cfg->max_seq_q = p->seq_q;
    cfg->max_seq_kv = p->seq_kv;
    cfg->bias = p->bias;
    cfg->threads = threads;
    cfg->n_kv_heads = p->kvh == p->h ? 0 : p->kvh;
    cfg->head_dim = p->dk * p->h == p->d ? 0 : p->dk;
    if (p->rope.style != MHA_ROPE_NONE)
        cfg->rope = p->rope;
    cfg->window = p->window;
    cfg->scale = p->scale, cfg->softcap = p->softcap, cfg->alibi_max_bias = p->alibi_max_bias;
    cfg->sinks = p->sinks != NULL;
    if (p->qk_norm.kind != MHA_QK_NORM_NONE)
        cfg->qk_norm = p->qk_norm;
}

/* y (rows, n) = x (rows, d) · W (d, n) + b */
static void ref_linear(const float *x, int rows, int d, int n, const float *w, const float *b, double *y)
{
    for (int i = 0; i < rows; i++)
        for (int o = 0; o < n; o++) {
            double acc = b ? b[o] : 0.0;
            for (int c = 0; c < d; c++)
                acc += (double)x[(size_t)i * d + c] * w[(size_t)c * n + o];
            y[(size_t)i * n + o] = acc;
        }
}

/* The RoPE frequencies in double, written from HF's rope utilities (not from src/rope.c):
 * theta_i = base^(-2i/r), then linear, llama3 or yarn; *att: yarn's attention factor. */
static void ref_rope_freqs(const mha_rope *rp, int r, double *f, double *att)
{
    const double base = rp->theta, factor = rp->factor;
    *att = 1.0;
    for (int i = 0; i < r / 2; i++) {
        const double theta = pow(base, -2.0 * i / r);
        f[i] = theta;
        if (rp->scaling == MHA_ROPE_SCALING_LINEAR) {
            f[i] = theta / factor;
        } else if (rp->scaling == MHA_ROPE_SCALING_LLAMA3) {
            const double ctx = rp->original_max_position, wavelen = 2 * M_PI / theta;
            if (wavelen > ctx / rp->low_freq_factor)
                f[i] = theta / factor;              /* low frequencies: interpolated */
            else if (wavelen >= ctx / rp->high_freq_factor) { /* the band between: smoothed */
                const double smooth = (ctx / wavelen - rp->low_freq_factor) / (rp->high_freq_factor - rp->low_freq_factor);
                f[i] = (1 - smooth) * theta / factor + smooth * theta;
            }
        } else if (rp->scaling == MHA_ROPE_SCALING_YARN) {
            const double ctx = rp->original_max_position;
            double lo = r * log(ctx / (rp->beta_fast * 2 * M_PI)) / (2 * log(base));
            double hi = r * log(ctx / (rp->beta_slow * 2 * M_PI)) / (2 * log(base));
            if (rp->truncate) /* HF's default: the range rounded out to whole dimensions */
                lo = floor(lo), hi = ceil(hi);
            lo = lo < 0 ? 0 : lo, hi = hi > r - 1 ? r - 1 : hi;
            if (lo == hi)
                hi += 0.001;
            double ramp = (i - lo) / (hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            f[i] = theta / factor * ramp + theta * (1 - ramp); /* extrapolated where ramp is 0 */
            *att = factor > 1 ? 0.1 * log(factor) + 1 : 1;
        }
    }
}

/* QK-norm of rows × (n_heads·dk), written from HF's Qwen3RMSNorm / Gemma3RMSNorm (each head's
 * dk features) and OLMo 2's Olmo2RMSNorm on the whole projection (full: all n_heads·dk
 * features, before the heads split): x · rsqrt(mean(x²) + eps) · (offset + w). */
static void ref_qk_norm(const problem *p, double *x, int rows, int n_heads, const float *w)
{
    const int n = p->qk_norm.kind == MHA_QK_NORM_FULL ? n_heads * p->dk : p->dk; /* one norm's width */
    for (int i = 0; i < rows * n_heads * p->dk / n; i++) {
        double *v = x + (size_t)i * n, ss = 0;
        for (int c = 0; c < n; c++)
            ss += v[c] * v[c];
        const double r = 1.0 / sqrt(ss / n + p->qk_norm.eps);
        for (int c = 0; c < n; c++)
            v[c] *= r * (p->qk_norm.weight_offset + (double)w[c]);
    }
}

/* ALiBi slopes, written from BLOOM's build_alibi_tensor (max_bias 8 there; ggml's general
 * form): the closest power of two n <= h; 2^(-max_bias/n)^(1..n), then 2^(-max_bias/2n)^(1, 3, …). */
static double ref_alibi_slope(const problem *p, int hd)
{
    int n = 1;
    while (2 * n <= p->h)
        n *= 2;
    const double base = pow(2.0, -p->alibi_max_bias / n), extra = pow(2.0, -p->alibi_max_bias / (2.0 * n));
    return hd < n ? pow(base, hd + 1) : pow(extra, 2 * (hd - n) + 1);
}

/* Rotates the first r features of each of n_heads heads (width dk) of rows × (n_heads·dk). */
static void ref_rope(const problem *p, double *x, int rows, int n_heads, int pos0)
{
    const int dk = p->dk, r = p->rope.rotary_dim ? p->rope.rotary_dim : dk, half = r / 2;
    double f[4096], att;
    ref_rope_freqs(&p->rope, r, f, &att);
    for (int i = 0; i < rows; i++)
        for (int hd = 0; hd < n_heads; hd++) {
            double *v = x + (size_t)i * n_heads * dk + (size_t)hd * dk;
            for (int j = 0; j < half; j++) {
                const int a = p->rope.style == MHA_ROPE_NEOX ? j : 2 * j, b = p->rope.style == MHA_ROPE_NEOX ? j + half : 2 * j + 1;
                const double ang = (pos0 + i) * f[j], c = cos(ang) * att, s = sin(ang) * att;
                const double x1 = v[a], x2 = v[b];
                v[a] = x1 * c - x2 * s;
                v[b] = x2 * c + x1 * s;
            }
        }
}

void reference_attention(const problem *p, int b, const double *Q, const double *K, const double *V, double *Z,
                         double *attn)
{
    const int h = p->h, dk = p->dk, qd = h * dk, sq = p->seq_q, skv = p->seq_kv;
    const int kvd = p->kvh * dk, group = h / p->kvh, off = skv - sq;
    const int ql = p->q_len ? p->q_len[b] : sq, kl = p->kv_len ? p->kv_len[b] : skv;
    double *a = calloc((size_t)skv, sizeof *a);
    cr_assert(a);
    memset(Z, 0, (size_t)sq * qd * sizeof *Z);
    for (int hd = 0; hd < h; hd++)
        for (int i = 0; i < ql; i++) {
            /* visible keys: within the key length, causal bottom-right, explicit mask; the
             * logits: scaled, softcapped, ALiBi's bias; a sink (gpt-oss) joins the max and
             * the sum as one more logit with no value */
            double mx = p->sinks ? p->sinks[hd] : -INFINITY;
            const double scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)dk);
            const double slope = p->alibi_max_bias > 0 ? ref_alibi_slope(p, hd) : 0.0;
            const int g = hd / group; /* its KV head, as HF's repeat_kv */
            for (int j = 0; j < skv; j++) {
                int vis = j < kl && (!(p->causal || p->window) || j <= i + off) &&
                          (!p->window || j > i + off - p->window) && (!p->mask || p->mask[(size_t)i * skv + j]);
                a[j] = -INFINITY;
                if (!vis)
                    continue;
                double s = 0;
                for (int c = 0; c < dk; c++)
                    s += Q[(size_t)i * qd + hd * dk + c] * K[(size_t)j * kvd + g * dk + c];
                s *= scale;
                if (p->softcap > 0)
                    s = p->softcap * tanh(s / p->softcap);
                a[j] = s - slope * abs(i + off - j);
                mx = a[j] > mx ? a[j] : mx;
            }
            if (mx == -INFINITY)
                continue; /* no visible key: zero attention row, zero Z row */
            double sum = p->sinks ? exp(p->sinks[hd] - mx) : 0.0;
            for (int j = 0; j < skv; j++) {
                a[j] = a[j] == -INFINITY ? 0.0 : exp(a[j] - mx);
                sum += a[j];
            }
            for (int j = 0; j < skv; j++) {
                a[j] /= sum;
                if (attn)
                    attn[(((size_t)b * h + hd) * sq + i) * skv + j] = a[j];
                for (int c = 0; c < dk; c++)
                    Z[(size_t)i * qd + hd * dk + c] += a[j] * V[(size_t)j * kvd + g * dk + c];
            }
        }
    free(a);
}

void reference_mha(const problem *p, double *out, double *attn)
{
    const int d = p->d, h = p->h, dk = p->dk, qd = h * dk, sq = p->seq_q, skv = p->seq_kv;
    const int kvd = p->kvh * dk, off = skv - sq;
    double *Q = calloc((size_t)sq * qd, sizeof *Q), *K = calloc((size_t)skv * kvd, sizeof *K);
    double *V = calloc((size_t)skv * kvd, sizeof *V), *Z = calloc((size_t)sq * qd, sizeof *Z);
    cr_assert(Q && K && V && Z);
    if (attn)
        memset(attn, 0, (size_t)p->batch * h * sq * skv * sizeof *attn);

    for (int b = 0; b < p->batch; b++) {
        const int ql = p->q_len ? p->q_len[b] : sq;
        ref_linear(p->q + (size_t)b * sq * d, sq, d, qd, p->wq, p->bq, Q);
        ref_linear(p->k + (size_t)b * skv * d, skv, d, kvd, p->wk, p->bk, K);
        ref_linear(p->v + (size_t)b * skv * d, skv, d, kvd, p->wv, p->bv, V);
        if (p->qk_norm.kind != MHA_QK_NORM_NONE) { /* after the projection, before RoPE */
            ref_qk_norm(p, Q, sq, h, p->q_norm);
            ref_qk_norm(p, K, skv, p->kvh, p->k_norm);
        }
        if (p->rope.style != MHA_ROPE_NONE) { /* key j at position j, query i at i + skv - sq */
            ref_rope(p, Q, sq, h, off);
            ref_rope(p, K, skv, p->kvh, 0);
        }
        reference_attention(p, b, Q, K, V, Z, attn);
        double *o = out + (size_t)b * sq * d;
        for (int i = 0; i < sq; i++)
            for (int c = 0; c < d; c++) {
                double acc = p->bo && i < ql ? p->bo[c] : 0.0;
                if (i < ql)
                    for (int e = 0; e < qd; e++)
                        acc += Z[(size_t)i * qd + e] * p->wo[(size_t)e * d + c];
                o[(size_t)i * d + c] = acc;
            }
    }
    free(Q), free(K), free(V), free(Z);
}

double rel_error(const float *x, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = x[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (den == 0) {
        for (size_t i = 0; i < n; i++)
            den += (double)x[i] * x[i];
        return sqrt(den);
    }
    return sqrt(num / den);
}

long first_bit_difference(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0)
            return (long)i;
    return -1;
}

mha_engine *engine_bare(const problem *p, int threads)
{
    mha_config cfg;
    problem_config(p, &cfg, threads);
    mha_engine *e = NULL;
    mha_status st = mha_create(&cfg, &e);
    cr_assert_eq(st, MHA_OK, "mha_create: %s", mha_status_str(st));
    return e;
}

mha_engine *engine_for(const problem *p, int threads, mha_layout layout)
{
    mha_engine *e = engine_bare(p, threads);
    float *scratch;
    mha_weights w = problem_weights(p, layout, &scratch);
    mha_status st = mha_set_weights(e, &w);
    free(scratch);
    cr_assert_eq(st, MHA_OK, "mha_set_weights: %s", mha_status_str(st));
    return e;
}

const mha_config_key *schema_key_at(int i)
{
    int n = 0;
    while (mha_config_key_at(n))
        n++;
    return i < n ? mha_config_key_at(i) : cli_config_row_at(i - n) ? &cli_config_row_at(i - n)->spec : NULL;
}
