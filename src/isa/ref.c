/* ref.c — the portable table: plain C for every operation, runnable on any x86-64 CPU (and
 * any other), the definition of the numerics the vector tables are tested against. */
#include "isa.h"

#include <math.h>
#include <string.h>

#include "exp_poly.h"
#include "loops.h"
#include "ref.h"

/* ---- float32 ---- */

static void pack_rows_ref(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst)
{
    for (int r0 = 0; r0 < rows; r0 += pw, dst += (size_t)pw * kc) {
        const int nr = rows - r0 < pw ? rows - r0 : pw;
        for (int r = 0; r < nr; r++) {
            const float *src = a.p + (ptrdiff_t)(i0 + r0 + r) * a.ld;
            /* walk the columns a panel of w at a time: within one they are contiguous */
            for (int p = 0; p < kc;) {
                const int col = p0 + p, in_panel = w - col % w, n = kc - p < in_panel ? kc - p : in_panel;
                const float *s = src + (ptrdiff_t)(col / w) * a.ps + col % w;
                for (int t = 0; t < n; t++)
                    dst[(size_t)(p + t) * pw + r] = s[t];
                p += n;
            }
        }
        for (int r = nr; r < pw; r++) /* pad the last panel with zero rows */
            for (int p = 0; p < kc; p++)
                dst[(size_t)p * pw + r] = 0.0f;
    }
}

static void rope_halves_ref(float *a, float *b, const float *c, const float *s, float sign, int n)
{
    for (int j = 0; j < n; j++) {
        const float x = a[j], y = b[j], sn = sign * s[j];
        a[j] = x * c[j] - y * sn;
        b[j] = y * c[j] + x * sn;
    }
}

static void rope_pairs_ref(float *x, const float *c, const float *s, float sign, int n)
{
    for (int j = 0; j < n; j++)
        rope_halves_ref(x + 2 * j, x + 2 * j + 1, c + j, s + j, sign, 1);
}

static void softcap_row_ref(float *s, int n, float cap)
{
    for (int j = 0; j < n; j++)
        s[j] = cap * mha_tanh_poly(s[j] / cap);
}

static void i8_scale_rows_ref(const void *from, size_t ld_src, int rows, int n, const float *row_scales,
                              const float *row_zeros, float *restrict dst, size_t ld_dst)
{
    const int8_t *src = from;
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            const float x = (float)src[r * ld_src + t] * row_scales[r];
            dst[r * ld_dst + t] = row_zeros ? x + row_zeros[r] : x;
        }
}

static int visible_at(const uint8_t *mask, int j)
{
    return mask == NULL || mask[j] != 0;
}

/* Two passes: the max over the visible entries (and the running max), then exp (bf16: the bf16
 * engines' polynomial) and sum. */
static float softmax_row_as(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io,
                            int bf16)
{
    /* pass 1: max over the visible entries and the running max */
    float mx = *max_io;
    for (int j = 0; j < visible; j++)
        if (visible_at(mask, j) && s[j] > mx)
            mx = s[j];
    *max_io = mx;
    if (mx == -INFINITY) { /* nothing visible: a zero row, never NaN */
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    /* pass 2: exp(s - max) where visible, 0 elsewhere, and the sum */
    float sum = 0.0f;
    for (int j = 0; j < visible; j++) {
        const float e = visible_at(mask, j) ? mha_exp_poly_as(s[j] - mx, bf16) : 0.0f;
        s[j] = e;
        sum += e;
    }
    for (int j = visible; j < n; j++)
        s[j] = 0.0f;
    return sum;
}

static float softmax_row_ref(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, 0);
}

static void softmax_rows_ref(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st)
{
    for (int i = 0; i < m; i++) {
        mx[i * st] = -INFINITY;
        sum[i * st] = softmax_row_as(s + i * ld, n, n, NULL, &mx[i * st], 0);
    }
}

static void merge_row_ref(float *restrict z, float a, const float *restrict zc, float b, int n)
{
    for (int j = 0; j < n; j++)
        z[j] = z[j] * a + zc[j] * b;
}

static void scale_row_ref(float *z, const float *x, float s, int n)
{
    for (int j = 0; j < n; j++)
        z[j] = x[j] * s;
}

static float softmax_row_bf16_ref(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io)
{
    return softmax_row_as(s, n, visible, mask, max_io, 1);
}

/* Element i of a cache's run as float: float32, bf16, or int8 (exact). */
static float elem_at(const void *p, mha_kv_type type, size_t i)
{
    return type == MHA_KV_F32    ? ((const float *)p)[i]
           : type == MHA_KV_BF16 ? mha_bf16_float(((const mha_bf16 *)p)[i])
                                 : (float)((const int8_t *)p)[i];
}

/* A step of a float32 chain as the microkernels of this table's sub-configs sum: x86-64's
 * portable ones a multiply and an add, each rounded; aarch64's generic (BLIS's reference
 * kernels, which Debian compiles with contraction there) one FMA. */
static inline float chain_step(float acc, float a, float b)
{
#if defined(__aarch64__)
    return fmaf(a, b, acc);
#else
    return acc + a * b;
#endif
}

/* One chain per score, feature by feature: float32 as the microkernels sum (chain_step); bf16
 * (bf16 set) as the bf16 model sums (flushed), its products exact.
 * int8 K (kp: each run's first group's parameters; float32 sums in either engine): each
 * element q·scale + zero of its feature, scale_rows' value. */
static void scores_ref(mha_kv_type type, int bf16, const float *restrict q, int nq, int dk, int c0, int c1, int fused,
                       int runs, const void *const *kt, const mha_f16 *const *kp, const int *n, int ld, float scale,
                       float *restrict sc, size_t sc_ld)
{
    const int flush = type != MHA_KV_F32 && bf16; /* the bf16 kernels' sums */
    for (int r = 0, at = 0; r < runs; at += n[r++])
        for (int qi = 0; qi < nq; qi++)
            for (int t = 0; t < n[r]; t++) {
                const mha_f16 *g = kp ? kp[r] + (size_t)(t / MHA_KV_GROUP) * 2 * (size_t)dk : NULL;
                float acc = 0.0f;
                for (int c = c0; c < c1; c++) {
                    float x = elem_at(kt[r], type, (size_t)c * ld + t);
                    if (g)
                        x = x * mha_f16_float(g[c]) + mha_f16_float(g[dk + c]);
                    acc = chain_step(acc, q[(size_t)qi * dk + c], x);
                    acc = flush ? mha_bk_ftz(acc) : acc;
                }
                if (flush && dk % MHA_BT_K) /* the padding's zero products */
                    acc += 0.0f;
                float *y = sc + (size_t)qi * sc_ld + at + t;
                *y = c0 == 0 ? acc * scale : fused ? fmaf(acc, scale, *y) : acc * scale + *y;
            }
}

static void values_ref(mha_kv_type type, const float *e, size_t e_ld, int nq, const void *v, const float *vs, int n,
                       int dk, float *p, size_t ps)
{
    for (int t = 0; t < n; t++)
        for (int qi = 0; qi < nq; qi++) {
            const float x = e[(size_t)qi * e_ld + t];
            float *y = p + (size_t)qi * ps;
            for (int c = 0; c < dk; c++) {
                const float el = elem_at(v, type, (size_t)t * dk + c);
                y[c] = chain_step(y[c], x, vs ? el * vs[2 * t] + vs[2 * t + 1] : el);
                y[c] = type != MHA_KV_F32 && !vs ? mha_bk_ftz(y[c]) : y[c];
            }
        }
}

static void decode_scores_ref(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k)
{
    /* unscaled; nothing to prefetch */
    scores_ref(MHA_KV_F32, 0, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, NULL, k->n, k->ld, s->scale,
               s->sc, s->sc_ld);
}

static void decode_scores8_ref(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k)
{
    scores_ref(MHA_KV_INT8, 0, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->kp, k->n, k->ld, s->scale,
               s->sc, s->sc_ld);
}

/* x86's maxps on one lane: the second operand where either is NaN. */
static float max_x86(float a, float b)
{
    return a > b ? a : b;
}

/* x86's cvtps2dq then packssdw on one lane: rne to int32 (NaN or out of its range: INT32_MIN),
 * saturated to int16 (int8_scores' u, |x| < 32767.5 but where a max was a NaN's). */
static int16_t cvt_pack_x86(float x)
{
    if (!(fabsf(x) < 2147483648.0f))
        return INT16_MIN;
    const long r = lrintf(x);
    return (int16_t)(r > INT16_MAX ? INT16_MAX : r < INT16_MIN ? INT16_MIN : r);
}

/* int8_scores' model (isa.h): per run, group, query and pass, the group's u, zsum and step,
 * then each slot's exact integer sum. */
static void int8_scores_ref(const mha_score_rows *s, const mha_key_runs *k)
{
    const int dk = s->dk;
    int16_t u[MHA_INT8_PASS];
    for (int r = 0, at = 0; r < k->runs; at += k->n[r++])
        for (int g0 = 0; g0 < k->n[r]; g0 += MHA_KV_GROUP) {
            const int slots = k->n[r] - g0 < MHA_KV_GROUP ? k->n[r] - g0 : MHA_KV_GROUP;
            const mha_f16 *par = k->kp[r] + (size_t)(g0 / MHA_KV_GROUP) * 2 * (size_t)dk;
            const int8_t *code = (const int8_t *)k->kt[r] + g0;
            for (int qi = 0; qi < s->nq; qi++) {
                const float *q = s->q + (size_t)qi * dk;
                float y[MHA_KV_GROUP];
                for (int p0 = 0; p0 < dk; p0 += MHA_INT8_PASS) {
                    const int p1 = dk - p0 < MHA_INT8_PASS ? dk : p0 + MHA_INT8_PASS;
                    float mq = 0.0f, ms = 0.0f, ch[16] = {0};
                    int nan = 0;
                    for (int c = p0; c < p1; c++) {
                        const float sc = mha_f16_float(par[c]);
                        mq = max_x86(mq, fabsf(q[c])), ms = max_x86(ms, fabsf(sc)), nan |= sc != sc;
                    }
                    const float rq = mq > MHA_INT8_TINY ? 32767.0f / mq : 0.0f, rs = ms > 0.0f ? 1.0f / ms : 0.0f;
                    ms = nan ? NAN : ms;
                    for (int c = p0; c < p1; c++) {
                        u[c - p0] = cvt_pack_x86((q[c] * rq) * (mha_f16_float(par[c]) * rs));
                        ch[(c - p0) % 16] = fmaf(q[c], mha_f16_float(par[dk + c]), ch[(c - p0) % 16]);
                    }
                    for (int w = 8; w >= 1; w /= 2) /* chains j and j + 8, j and j + 4, … */
                        for (int j = 0; j < w; j++)
                            ch[j] += ch[j + w];
                    const float step = mq / 32767.0f * ms;
                    for (int t = 0; t < slots; t++) {
                        uint32_t isum = 0; /* wraps as the vector sums (only where a u is NaN's) */
                        for (int c = p0; c < p1; c++)
                            isum += (uint32_t)((int32_t)u[c - p0] * code[(size_t)c * k->ld + t]);
                        const float v = fmaf(step, (float)(int32_t)isum, ch[0]);
                        y[t] = p0 == 0 ? v : y[t] + v;
                    }
                }
                for (int t = 0; t < slots; t++)
                    s->sc[(size_t)qi * s->sc_ld + at + g0 + t] = y[t] * s->scale;
            }
        }
}

const mha_int8_scores_ops mha_int8_scores_ref = {.name = "ref", .needs = "", .run = int8_scores_ref};

static void decode_values_ref(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                              mha_prefetch_walk *w)
{
    (void)vs, (void)next, (void)w; /* unscaled; nothing prefetched */
    values_ref(MHA_KV_F32, rows->e, rows->e_ld, rows->nq, v, NULL, n, rows->dk, rows->p, rows->ps);
}

static void decode_values8_ref(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                               mha_prefetch_walk *w)
{
    (void)next, (void)w;
    values_ref(MHA_KV_INT8, rows->e, rows->e_ld, rows->nq, v, vs, n, rows->dk, rows->p, rows->ps);
}

static void decode_scores16_ref(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order)
{
    (void)order; /* even first only; nothing to prefetch */
    scores_ref(MHA_KV_BF16, 1, s->q, s->nq, s->dk, 0, s->dk, 0, k->runs, k->kt, NULL, k->n, k->ld, s->scale, s->sc,
               s->sc_ld);
}

static void decode_values16_ref(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                             mha_kv_type type, const mha_prefetch *pf, mha_bk_order order)
{
    const float *e = rows->e;
    const size_t e_ld = rows->e_ld, ps = rows->ps;
    const int nq = rows->nq, dk = rows->dk;
    float *p = rows->p;
    (void)pf, (void)order; /* even first only */
    int keys = 0;
    for (int r = 0; r < runs; keys += n[r++])
        values_ref(type, e + keys, e_ld, nq, v[r], NULL, n[r], dk, p, ps);
    mha_values16_finish(p, ps, nq, keys, dk); /* the padding's zero products */
}

/* ---- bf16 ---- */

static void round_into_tiles_ref(const float *src, int c, int n, mha_bf16 *d)
{
    for (int t = 0; t < n; t++) {
        const int e = c + t;
        d[(size_t)(e / MHA_BT_K) * MHA_BT_ELEMS + e % MHA_BT_K] = mha_bf16_round(src[t]);
    }
}

static void round_bf16_floats_ref(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = mha_bf16_float(mha_bf16_round(x[i]));
}

static void round_to_bf16_ref(const float *restrict x, int n, mha_bf16 *restrict d)
{
    for (int i = 0; i < n; i++)
        d[i] = mha_bf16_round(x[i]);
}

static void interleave_pairs_ref(const void *from, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next)
{
    (void)next;
    const mha_bf16 *src = from;
    for (int p = 0; p < pairs; p++, src += 2 * ld, dst += 2 * MHA_BT_N)
        for (int i = 0; i < MHA_BT_N; i++)
            dst[2 * i] = src[i], dst[2 * i + 1] = src[ld + i];
}

static void interleave_pairs_i8_ref(const void *from, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next)
{
    (void)next;
    const int8_t *src = from;
    for (int p = 0; p < pairs; p++, src += 2 * ld, dst += 2 * MHA_BT_N)
        for (int i = 0; i < MHA_BT_N; i++)
            dst[2 * i] = mha_bf16_round((float)src[i]), dst[2 * i + 1] = mha_bf16_round((float)src[ld + i]);
}

void mha_pack_b16_ref(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps)
{
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j = 0; j < np; j++)
        for (int p = 0; p < kp; p++) {
            float x = 0.0f;
            if (j < n && p < kk)
                x = transpose ? *mha_mat_at(k, src, j, p) : *mha_mat_at(k, src, p, j);
            dst[mha_bk_b_index(p, j, ps)] = mha_bf16_round(x);
        }
}

static void epilogue_block_ref(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                            float beta)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float *c = (j < 16 ? c0 + j : c1 + (j - 16)) + (ptrdiff_t)i * ldc;
            const float y = alpha * acc[i * 32 + j];
            *c = beta == 0.0f ? y : y + beta * *c;
        }
}

/* The model itself, even element first. */
static void block_ref(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc, int pf)
{
    (void)pf;
    mha_bk_block_model(MHA_BK_EVEN_FIRST, rows, npan, kt, a, b, ps, acc);
}

static const mha_bkernel ref_bf16 = {.name = "ref-bf16", .order = MHA_BK_EVEN_FIRST, .block = block_ref};

/* ---- the table ---- */

/* The portable table on the BLIS sub-configs that sum as its chains do (chain_step): x86-64's
 * generic (and the AVX and SSSE3 ones), aarch64's generic. Not cortexa57, whose epilogue fuses
 * beta·C into alpha·sum where generic rounds them apart: decode passes after a first (heads
 * wider than KC) would differ from its forward. */
#if defined(__aarch64__)
#define REF_ARCHS "generic"
#else
#define REF_ARCHS "generic", "sandybridge", "penryn"
#endif

static const char *default_arch_ref(void)
{
    static const char *const archs[] = {REF_ARCHS};
    return archs[0];
}

static const mha_bkernel *bf16_auto_ref(void)
{
    return &ref_bf16;
}

const mha_isa mha_isa_ref = {
    .name = "ref",
    .needs = "",
    .archs = {REF_ARCHS, NULL},
    .default_arch = default_arch_ref,
    .bf16 = {&ref_bf16, NULL},
    .bf16_auto = bf16_auto_ref,
    .pack_rows = pack_rows_ref,
    .rope_halves = rope_halves_ref,
    .rope_pairs = rope_pairs_ref,
    .softmax_row = softmax_row_ref,
    .softmax_rows = softmax_rows_ref,
    .merge_row = merge_row_ref,
    .scale_row = scale_row_ref,
    .softmax_row_bf16 = softmax_row_bf16_ref,
    .softcap_row = softcap_row_ref,
    .scale_rows = {[MHA_KV_INT8] = i8_scale_rows_ref},
    .decode_scores = {[MHA_KV_F32] = decode_scores_ref, [MHA_KV_INT8] = decode_scores8_ref},
    .decode_values = {[MHA_KV_F32] = decode_values_ref, [MHA_KV_INT8] = decode_values8_ref},
    .int8_scores = {&mha_int8_scores_ref, NULL},
    .decode16_orders = 1u << MHA_BK_EVEN_FIRST,
    .decode_scores16 = decode_scores16_ref,
    .decode_values16 = decode_values16_ref,
    .round_into_tiles = round_into_tiles_ref,
    .round_bf16_floats = round_bf16_floats_ref,
    .round_to_bf16 = round_to_bf16_ref,
    .pack_b16 = mha_pack_b16_ref,
    .interleave_pairs = {[MHA_KV_BF16] = interleave_pairs_ref, [MHA_KV_INT8] = interleave_pairs_i8_ref},
    .epilogue_block = epilogue_block_ref,
    .quant = &mha_qk_ref,
};
