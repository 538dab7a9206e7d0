/* avx512.c — the AVX-512 table (F, BW, VL, DQ with FMA): 16-lane packing through register
 * transposes, the few-row products streamed past skx's microkernel with its sums, RoPE, softmax,
 * decode tiles, bf16 rounding and packing, and the bf16 products on FMA (widened bf16) and
 * AVX512_BF16 (vdpbf16ps); the AMX products are beside it (amx.c). */
#include "isa.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "exp_poly.h"
#include "kvcache.h"
#include "loops.h"

#define AVX512 "avx512f,avx512bw,avx512vl,avx512dq,fma"
/* MXCSR's denormals-are-zero and flush-to-zero bits: how the bf16 instructions treat denormals,
 * set around the FMAs that stand in for them. */
#define DAZ_FTZ 0x8040u

/* The mask of the first n lanes of 16 (n <= 0: none, n >= 16: all). */
static inline __mmask16 first16(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* ---- float32 packing ---- */

/* r[i] (16 rows of 16) becomes its transpose: unpack 32- and 64-bit pairs, then 128-bit lanes. */
static inline __attribute__((target(AVX512))) void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* One group of a panel: up to 16 rows by n <= 16 columns through a register transpose. */
static inline __attribute__((always_inline, target(AVX512))) void pack_group(const float *const *src, int gw, int have,
                                                                            ptrdiff_t off, int n, float *dst, int pw)
{
    const __mmask16 store = first16(gw), load = first16(n);
    __m512 v[16];
    for (int r = 0; r < 16; r++)
        v[r] = r < gw && r < have ? _mm512_maskz_loadu_ps(load, src[r] + off) : _mm512_setzero_ps();
    transpose16(v);
    for (int t = 0; t < n; t++)
        _mm512_mask_storeu_ps(dst + (size_t)t * pw, store, v[t]);
}

/* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc), into panels of pw rows (pw ≤ 64, else ref's):
 * dst[panel][p][r]. Sixteen rows by sixteen columns at a time. */
__attribute__((target(AVX512))) static void pack_rows_avx512(mha_mat a, int w, int i0, int rows, int p0, int kc,
                                                               int pw, float *restrict dst)
{
    if (pw > 64) {
        mha_isa_ref.pack_rows(a, w, i0, rows, p0, kc, pw, dst);
        return;
    }
    mha_pack_walk(a, w, i0, rows, p0, kc, pw, dst, 16, pack_group);
}

/* ---- few rows ---- */

/* Up to MHA_STREAM_ROWS rows on AVX-512 with B panels of 32 columns (k->stream): B streamed
 * once from memory, R rows × 32 columns of accumulators per pass over a chunk of k (R = 12, 8, 4,
 * 2, 1: a register tile of the rows that exist; the microkernel would compute whole panels
 * of aw rows), the other passes reading that chunk again from cache. The sums are the
 * microkernel's, bit for bit for beta 0 and 1 (the engine's): one FMA chain per element over
 * each chunk of k->kc in k order, then c = alpha·acc, + beta·c by FMA for the first chunk
 * (beta = 0: c not read), c + alpha·acc for the others. (BLIS's edge tiles round beta·c
 * separately for other betas.)
 *
 * Prefetch: while the passes compute on one chunk, the next chunk of B (the rest of this
 * panel, or the next panel's first) comes into L2, its lines spread over every pass in
 * proportion to the pass's rows, so memory is read at an even pace the whole time.
 * Prefetching only in the first pass (32 rows ahead) left memory idle during the others:
 * 16 rows, 2 threads, 64 MB of B each, alternating in one process: 0.84-0.89× the time. */
static inline __attribute__((always_inline, target(AVX512))) void
stream_pass(const int R, mha_ahead *pf, int i0, int p0, int p1, int j0, int nj, float alpha, mha_mat a,
            const float *bp, float beta, mha_mat c)
{
    const int w = 32;
    __m512 acc0[12], acc1[12];
    for (int r = 0; r < R; r++)
        acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int p = p0; p < p1;) { /* A's columns are contiguous within one of its panels */
        const int in_panel = w - p % w, np = p1 - p < in_panel ? p1 - p : in_panel;
        const float *x = a.p + (ptrdiff_t)i0 * a.ld + (ptrdiff_t)(p / w) * a.ps + p % w;
        const float *bq = bp + (ptrdiff_t)p * w;
        for (int q = 0; q < np; q++, bq += w) {
            for (pf->credit += pf->share; pf->credit >= pf->per; pf->credit -= pf->per, pf->at += 64)
                _mm_prefetch(pf->at, _MM_HINT_T1);
            const __m512 b0 = _mm512_load_ps(bq), b1 = _mm512_load_ps(bq + 16);
            for (int r = 0; r < R; r++) {
                const __m512 xr = _mm512_set1_ps(x[(ptrdiff_t)r * a.ld + q]);
                acc0[r] = _mm512_fmadd_ps(xr, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(xr, b1, acc1[r]);
            }
        }
        p += np;
    }
    /* alpha and beta broadcast here, not before the loop (GCC 12 hoists them there and then
     * keeps b1 on the stack: an extra load per FMA) */
    __asm__("" : "+v"(alpha), "+v"(beta));
    float *cr = c.p + (ptrdiff_t)(j0 / w) * c.ps + (ptrdiff_t)i0 * c.ld; /* j0 starts a panel: no division (avx2.c) */
    const __mmask16 m0 = first16(nj), m1 = first16(nj - 16);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        float *cp = cr + (ptrdiff_t)r * c.ld;
        __m512 t0 = _mm512_mul_ps(va, acc0[r]), t1 = _mm512_mul_ps(va, acc1[r]);
        if (p0 > 0) {
            t0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cp), t0);
            t1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cp + 16), t1);
        } else if (beta != 0.0f) {
            t0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cp), t0);
            t1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cp + 16), t1);
        }
        _mm512_mask_storeu_ps(cp, m0, t0);
        _mm512_mask_storeu_ps(cp + 16, m1, t1);
    }
}

__attribute__((target(AVX512))) static void stream_rows_avx512(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                          mha_mat a, mha_mat b, float beta, mha_mat c)
{
    mha_stream_walk(k, m, n, kk, alpha, a, b, beta, c, 32, 12, stream_pass);
}

/* AMD's cores: on Zen 4 the cores of bert-base-512, S = 128 and causal 2048 took 0.95, 0.98 and
 * 0.97× the time of packing A for BLIS's microkernel (7 alternating rounds, 2 threads); on
 * Intel's Emerald Rapids Xeon 1.09, 0.97 and 1.25× (perf/RESULTS.md, sessions 30 and 31). Zen 5
 * not measured: taken as Zen 4. */
static int stream_in_place_avx512(void)
{
    return __builtin_cpu_is("amd");
}

/* ---- softmax: 16 lanes, tails and masks as k-registers ---- */

/* mha_exp_poly on 16 lanes with FMA; 2^n applied by vscalefps (y·2^n rounded once: the
 * multiply by 2^n's bits it replaces, bit for bit). clamp 0: the caller's x are at most 0
 * (or NaN), as a softmax's x − max: the range clamps are left out (a lane below MHA_EXP_LO is
 * zeroed all the same), not the bits of any lane. bf16: the bf16 engines' polynomial
 * (MHA_EXP_B*), x reduced by MHA_LN2 in one FMA. */
static inline __attribute__((always_inline, target(AVX512))) __m512 exp16_lanes(__m512 x, const int clamp,
                                                                               const int bf16)
{
    const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MHA_EXP_LO), _CMP_GE_OQ);
    if (clamp)
        x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(MHA_EXP_LO)), _mm512_set1_ps(MHA_EXP_HI));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(MHA_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 y;
    if (bf16) {
        x = _mm512_fnmadd_ps(n, _mm512_set1_ps(MHA_LN2), x);
        y = _mm512_fmadd_ps(_mm512_set1_ps(MHA_EXP_B4), x, _mm512_set1_ps(MHA_EXP_B3));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_B2));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_B1));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
    } else {
        x = _mm512_fnmadd_ps(n, _mm512_set1_ps(MHA_LN2_HI), x);
        x = _mm512_fnmadd_ps(n, _mm512_set1_ps(MHA_LN2_LO), x);
        y = _mm512_fmadd_ps(_mm512_set1_ps(MHA_EXP_P0), x, _mm512_set1_ps(MHA_EXP_P1));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_P2));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_P3));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(MHA_EXP_P4));
        y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    }
    return _mm512_maskz_scalef_ps(in_range, y, n);
}

__attribute__((target(AVX512))) static __m512 exp16(__m512 x)
{
    return exp16_lanes(x, 1, 0);
}

/* Lanes j..j+15 that are below `visible` and not hidden by the explicit mask. */
__attribute__((target(AVX512))) static __mmask16 lanes16(const uint8_t *mask, int j, int visible)
{
    int left = visible - j;
    __mmask16 k = first16(left);
    if (mask) {
        uint8_t bytes[16] = {0};
        memcpy(bytes, mask + j, (size_t)(left >= 16 ? 16 : left));
        __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)bytes));
        k &= _mm512_test_epi32_mask(m, m);
    }
    return k;
}

/* Pass 1 of softmax_row: the larger of *max_io and the visible entries' max; without a mask,
 * 64 lanes per step into four accumulators (one max chain would wait on its own latency). The
 * entry is max's first operand: where it is NaN, the instruction returns the second, the max
 * so far (a NaN is skipped, as ref's comparison skips it). */
static inline __attribute__((always_inline, target(AVX512))) float softmax_max(const float *restrict s, int visible,
                                                                              const uint8_t *restrict mask,
                                                                              float max_in)
{
    __m512 vmax = _mm512_set1_ps(max_in), m1 = vmax, m2 = vmax, m3 = vmax;
    int j0 = 0;
    if (!mask)
        for (; j0 + 64 <= visible; j0 += 64) {
            vmax = _mm512_max_ps(_mm512_loadu_ps(s + j0), vmax);
            m1 = _mm512_max_ps(_mm512_loadu_ps(s + j0 + 16), m1);
            m2 = _mm512_max_ps(_mm512_loadu_ps(s + j0 + 32), m2);
            m3 = _mm512_max_ps(_mm512_loadu_ps(s + j0 + 48), m3);
        }
    vmax = _mm512_max_ps(_mm512_max_ps(vmax, m1), _mm512_max_ps(m2, m3));
    for (int j = j0; j < visible; j += 16) {
        __mmask16 k = lanes16(mask, j, visible);
        vmax = _mm512_mask_max_ps(vmax, k, _mm512_maskz_loadu_ps(k, s + j), vmax);
    }
    return _mm512_reduce_max_ps(vmax);
}

/* Pass 2's 16 entries from j: exp(s − max) where visible and not masked, else 0 (bf16: the
 * bf16 engines' exp). */
static inline __attribute__((always_inline, target(AVX512))) __m512 exp_lanes(const int bf16, const float *s, int j,
                                                                             int visible, const uint8_t *mask,
                                                                             __m512 vmx)
{
    const __mmask16 k = j < visible ? lanes16(mask, j, visible) : 0;
    return _mm512_maskz_mov_ps(k, exp16_lanes(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vmx), 0, bf16));
}

/* Pass 2's step: the 64 visible entries from j exp'd against vmx into e (0 where the mask hides
 * one), each 16 added to its own sum (acc): a masked row sums as the same row with -inf there
 * and no mask. The unmasked step tests nothing. */
static inline __attribute__((always_inline, target(AVX512))) void exp64(const int bf16, const float *s, int j,
                                                                       const uint8_t *mask, __m512 vmx, __m512 e[4],
                                                                       __m512 acc[4])
{
    if (mask)
        for (int q = 0; q < 4; q++)
            e[q] = exp_lanes(bf16, s, j + 16 * q, j + 64, mask, vmx);
    else
        for (int q = 0; q < 4; q++)
            e[q] = exp16_lanes(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16 * q), vmx), 0, bf16);
    for (int q = 0; q < 4; q++)
        acc[q] = _mm512_add_ps(acc[q], e[q]);
}

/* Pass 2: the entries exp(s − mx) where visible, 0 elsewhere; returns their sum (0 when mx is
 * −∞). Both passes 2 below sum them in one order, with a mask or without (four sums over 64
 * lanes a step, then 16 lanes at a time into their sum), so softmax_row16's sum is
 * softmax_row_bf16's. bf16: the bf16 engines' exp. */
static inline __attribute__((always_inline, target(AVX512))) float exp_pass(const int bf16, float *restrict s, int n,
                                                                           int visible, const uint8_t *restrict mask,
                                                                           float mx)
{
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0f;
    }
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}, e[4];
    int j0 = 0;
    for (; j0 + 64 <= visible; j0 += 64) {
        exp64(bf16, s, j0, mask, vmx, e, acc);
        for (int q = 0; q < 4; q++)
            _mm512_storeu_ps(s + j0 + 16 * q, e[q]);
    }
    __m512 vsum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    for (int j = j0; j < visible; j += 16) {
        const __m512 ej = exp_lanes(bf16, s, j, visible, mask, vmx);
        _mm512_mask_storeu_ps(s + j, first16(visible - j), ej);
        vsum = _mm512_add_ps(vsum, ej);
    }
    for (int j = visible; j < n; j++)
        s[j] = 0.0f;
    return _mm512_reduce_add_ps(vsum);
}

__attribute__((target(AVX512))) static float softmax_row_avx512(float *restrict s, int n, int visible,
                                                               const uint8_t *restrict mask, float *max_io)
{
    *max_io = softmax_max(s, visible, mask, *max_io);
    return exp_pass(0, s, n, visible, mask, *max_io);
}

/* mha_rows_walk's bodies: a whole row's max, and its float32 exps in place. */
static inline __attribute__((always_inline, target(AVX512))) float whole_row_max(const float *s, int n)
{
    return softmax_max(s, n, NULL, -INFINITY);
}
static inline __attribute__((always_inline, target(AVX512))) float exps_floats(float *s, int n, float mx, mha_bf16 *d)
{
    (void)d;
    return exp_pass(0, s, n, n, NULL, mx);
}

__attribute__((target(AVX512))) static void softmax_rows_avx512(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                                float *sum, ptrdiff_t st)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, NULL, whole_row_max, exps_floats);
}

__attribute__((target(AVX512))) static void merge_row_avx512(float *restrict z, float a, const float *restrict zc,
                                                             float b, int n)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first16(n - j);
        _mm512_mask_storeu_ps(z + j, k, _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, z + j), va),
                                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(k, zc + j), vb)));
    }
}

__attribute__((target(AVX512))) static void scale_row_avx512(float *z, const float *x, float s, int n)
{
    const __m512 vs = _mm512_set1_ps(s);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first16(n - j);
        _mm512_mask_storeu_ps(z + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), vs));
    }
}

__attribute__((target(AVX512))) static float softmax_row_bf16_avx512(float *restrict s, int n, int visible,
                                                                    const uint8_t *restrict mask, float *max_io)
{
    *max_io = softmax_max(s, visible, mask, *max_io);
    return exp_pass(1, s, n, visible, mask, *max_io);
}

/* softmax_row_bf16's entries rounded by vcvtne2ps2bf16 straight into a row of A tiles (two
 * 16-lane halves make one 32-wide tile row): its bits are mha_bf16_round's for these entries
 * (finite, not negative, no denormal: exp16 flushes below FLT_MIN), so a CPU with AVX512_BF16
 * only. Zeros past `visible` up to n rounded to the k tile. The pass after the max. */
static inline __attribute__((always_inline, target(AVX512 ",avx512bf16"))) float
exp_pass16(const float *restrict s, int n, int visible, const uint8_t *restrict mask, float mx, mha_bf16 *d)
{
    const int kp = (int)mha_bk_kp(n);
    if (mx == -INFINITY)
        visible = 0;
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}, e[4];
    int j0 = 0;
    for (; j0 + 64 <= visible; j0 += 64) {
        exp64(1, s, j0, mask, vmx, e, acc);
        mha_bf16 *t = d + (size_t)(j0 / MHA_BT_K) * MHA_BT_ELEMS; /* j0 starts a tile row */
        _mm512_storeu_si512(t, (__m512i)_mm512_cvtne2ps_pbh(e[1], e[0]));
        _mm512_storeu_si512(t + MHA_BT_ELEMS, (__m512i)_mm512_cvtne2ps_pbh(e[3], e[2]));
    }
    __m512 vsum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    for (int j = j0; j < kp; j += 16) { /* past `visible`: zeros (kp is whole tiles: 16 lanes fit) */
        const __m512 ej = exp_lanes(1, s, j, visible, mask, vmx);
        _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)(j / MHA_BT_K) * MHA_BT_ELEMS + j % MHA_BT_K),
                            (__m256i)_mm512_cvtneps_pbh(ej));
        vsum = _mm512_add_ps(vsum, ej);
    }
    return mx == -INFINITY ? 0.0f : _mm512_reduce_add_ps(vsum);
}

__attribute__((target(AVX512 ",avx512bf16"))) static float softmax_row16_bf16(float *restrict s, int n, int visible,
                                                                              const uint8_t *restrict mask,
                                                                              float *max_io, mha_bf16 *d)
{
    *max_io = softmax_max(s, visible, mask, *max_io);
    return exp_pass16(s, n, visible, mask, *max_io, d);
}

/* mha_rows_walk's body for softmax_row16_bf16's rows: their exps into the A panels at d. */
static inline __attribute__((always_inline, target(AVX512 ",avx512bf16"))) float exps_tiles(float *s, int n, float mx,
                                                                                          mha_bf16 *d)
{
    return exp_pass16(s, n, n, NULL, mx, d);
}

__attribute__((target(AVX512 ",avx512bf16"))) static void softmax_rows16_bf16(float *s, ptrdiff_t ld, int m, int n,
                                                                              float *mx, float *sum, ptrdiff_t st,
                                                                              mha_bf16 *d)
{
    mha_rows_walk(s, ld, m, n, mx, sum, st, d, whole_row_max, exps_tiles);
}

static void round_into_tiles_avx512(const float *src, int c, int n, mha_bf16 *d);

/* Without AVX512_BF16: softmax_row_bf16, then the row rounded into the tiles as
 * mha_bk_pack_a_row does. */
__attribute__((target(AVX512))) static float softmax_row16_avx512(float *restrict s, int n, int visible,
                                                                 const uint8_t *restrict mask, float *max_io,
                                                                 mha_bf16 *d)
{
    if (__builtin_cpu_supports("avx512bf16"))
        return softmax_row16_bf16(s, n, visible, mask, max_io, d);
    const float sum = softmax_row_bf16_avx512(s, n, visible, mask, max_io);
    round_into_tiles_avx512(s, 0, n, d);
    const int kp = (int)mha_bk_kp(n);
    if (n < kp)
        memset(d + (size_t)(n / MHA_BT_K) * MHA_BT_ELEMS + n % MHA_BT_K, 0, (size_t)(kp - n) * sizeof *d);
    return sum;
}

__attribute__((target(AVX512))) static void softmax_rows16_avx512(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                                  float *sum, ptrdiff_t st, mha_bf16 *d)
{
    if (__builtin_cpu_supports("avx512bf16")) {
        softmax_rows16_bf16(s, ld, m, n, mx, sum, st, d);
        return;
    }
    const int kt = (int)(mha_bk_kp(n) / MHA_BT_K);
    for (int i = 0; i < m; i++) {
        mx[i * st] = -INFINITY;
        sum[i * st] = softmax_row16_avx512(s + i * ld, n, n, NULL, &mx[i * st], d + mha_bk_a_row(i, kt));
    }
}

/* Logit softcapping: cap · tanh(s / cap), 16 lanes, both of mha_tanh_poly's branches blended. */
__attribute__((target(AVX512))) static void softcap_row_avx512(float *s, int n, float cap)
{
    const __m512 vc = _mm512_set1_ps(cap), sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first16(n - j);
        const __m512 x = _mm512_div_ps(_mm512_maskz_loadu_ps(k, s + j), vc), z = _mm512_andnot_ps(sign, x);
        const __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f),
                                                            _mm512_add_ps(exp16(_mm512_add_ps(z, z)), one)));
        const __m512 zz = _mm512_mul_ps(z, z);
        __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(MHA_TANH_P0), zz, _mm512_set1_ps(MHA_TANH_P1));
        p = _mm512_fmadd_ps(p, zz, _mm512_set1_ps(MHA_TANH_P2));
        p = _mm512_fmadd_ps(p, zz, _mm512_set1_ps(MHA_TANH_P3));
        p = _mm512_fmadd_ps(p, zz, _mm512_set1_ps(MHA_TANH_P4));
        const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, zz), z, z);
        const __mmask16 far = _mm512_cmp_ps_mask(z, _mm512_set1_ps(MHA_TANH_SPLIT), _CMP_GT_OQ);
        const __m512 t = _mm512_or_ps(_mm512_mask_blend_ps(far, small, big), _mm512_and_ps(x, sign));
        _mm512_mask_storeu_ps(s + j, k, _mm512_mul_ps(t, vc));
    }
}

/* int8 cache elements to float32, 16 at a time (the tail under a mask). */
__attribute__((target(AVX512))) static void i8_scale_rows_avx512(const void *from, size_t ld_src, int rows, int n,
                                                                 const float *row_scales, const float *row_zeros,
                                                                 float *restrict dst, size_t ld_dst)
{
    const int8_t *src = from;
    for (int r = 0; r < rows; r++, src += ld_src, dst += ld_dst) {
        const __m512 rs = _mm512_set1_ps(row_scales[r]), rz = _mm512_set1_ps(row_zeros ? row_zeros[r] : 0.0f);
        for (int t = 0; t < n; t += 16) {
            const __mmask16 k = first16(n - t);
            const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, src + t))), rs);
            _mm512_mask_storeu_ps(dst + t, k, row_zeros ? _mm512_add_ps(x, rz) : x);
        }
    }
}

/* ---- RoPE ---- */

/* Sixteen pairs at a time: products and the difference or sum each rounded once, as ref. */
__attribute__((target(AVX512))) static void rope_halves_avx512(float *a, float *b, const float *c, const float *s,
                                                              float sign, int n)
{
    const __m512 sg = _mm512_set1_ps(sign);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = first16(n - j);
        const __m512 x = _mm512_maskz_loadu_ps(m, a + j), y = _mm512_maskz_loadu_ps(m, b + j);
        const __m512 cj = _mm512_maskz_loadu_ps(m, c + j), sn = _mm512_mul_ps(sg, _mm512_maskz_loadu_ps(m, s + j));
        _mm512_mask_storeu_ps(a + j, m, _mm512_sub_ps(_mm512_mul_ps(x, cj), _mm512_mul_ps(y, sn)));
        _mm512_mask_storeu_ps(b + j, m, _mm512_add_ps(_mm512_mul_ps(y, cj), _mm512_mul_ps(x, sn)));
    }
}

/* Eight pairs (sixteen floats) at a time: cos and sin duplicated per pair, the pair swapped,
 * the even lanes' sine negated: x·c + y·(−s') rounds as x·c − y·s'. */
__attribute__((target(AVX512))) static void rope_pairs_avx512(float *x, const float *c, const float *s, float sign,
                                                             int n)
{
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512 sg = _mm512_mask_blend_ps((__mmask16)0xAAAA, _mm512_set1_ps(-sign), _mm512_set1_ps(sign));
    for (int j = 0; j < n; j += 8) {
        const __mmask16 m = first16(2 * (n - j)), m8 = first16(n - j < 8 ? n - j : 8);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + 2 * j);
        const __m512 cj = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, c + j));
        const __m512 sj = _mm512_mul_ps(sg, _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, s + j)));
        const __m512 swapped = _mm512_permute_ps(v, 0xB1);
        _mm512_mask_storeu_ps(x + 2 * j, m, _mm512_add_ps(_mm512_mul_ps(v, cj), _mm512_mul_ps(swapped, sj)));
    }
}

/* ---- decode tiles: float32 FMA chains on a float32 cache, or on bf16 or int8 elements widened
 * as they load ---- */

/* 16 floats rounded to bf16 as mha_bf16_round does: each in the low half of its 32-bit lane. */
static inline __attribute__((target(AVX512))) __m512i round_lanes(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i top = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(top, _mm512_set1_epi32(1))), 16);
    const __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, tiny, _mm512_and_si512(top, _mm512_set1_epi32(0x8000)));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x0040)));
}

/* 16 elements (lanes m, the rest zero) of a cache row at x as float32: float32 as it is, bf16
 * widened (a shift), int8 converted (exact); scaled: times the scales s, one rounded multiply
 * (an int8 cache in a float32 engine: scale_rows' values). */
static inline __attribute__((always_inline, target(AVX512))) __m512 load16(const mha_kv_type type, const int scaled,
                                                                           const char *x, __mmask16 m, __m512 s)
{
    if (type == MHA_KV_F32)
        return _mm512_maskz_loadu_ps(m, x);
    const __m512 f = type == MHA_KV_BF16
                         ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)), 16))
                         : _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, x)));
    return scaled ? _mm512_mul_ps(f, s) : f;
}

/* One step of an R × V tile: acc[r·V + j] += x[r·x_ld] · y[j] by FMA, for the rows present
 * (full: all R, nothing tested). */
static inline __attribute__((always_inline, target(AVX512))) void fma_rows(const int R, const int V, const int full,
                                                                          int nb, const float *x, size_t x_ld,
                                                                          const __m512 *y, __m512 *acc)
{
    for (int r = 0; r < R; r++)
        if (full || r < nb) {
            const __m512 xr = _mm512_set1_ps(x[(size_t)r * x_ld]);
            for (int j = 0; j < V; j++)
                acc[r * V + j] = _mm512_fmadd_ps(xr, y[j], acc[r * V + j]);
        }
}

/* The products of features [c, c + nc) for scores_tile: one Kᵀ row load per feature and
 * vector for all queries (int8 K, scaled: each value q·scale + zero of its feature in the
 * vector's group, scale_rows' value; feature c's scale at par[j][o], its zero point at
 * par[j][16 + o]). */
static inline __attribute__((always_inline, target(AVX512))) void
score_features(const mha_kv_type type, const int scaled, const int R, const int V, const int full,
               const float *restrict q, int nb, int dk, int c, const int nc, const mha_slot_vec *v, int nv,
               const __mmask16 *m, const float (*par)[32], int o, int ld, __m512 *acc)
{
    const size_t row = (size_t)ld * mha_kv_elem_size(type);
    const char *k[8];
    for (int j = 0; j < V; j++) /* past nv: the first vector's rows, stepped but never read */
        k[j] = v[j < nv ? j : 0].kt + (size_t)c * row;
    q += c;
#ifdef __clang__ /* unrolled, clang 14 hoists every feature's K vectors and spills them: int8 1.7× slower */
#pragma clang loop unroll(disable)
#endif
    for (int u = 0; u < nc; u++, q++) {
        __m512 krow[8];
        for (int j = 0; j < V; j++) {
            krow[j] = j < nv ? load16(type, 0, k[j], m[j], _mm512_setzero_ps()) : _mm512_setzero_ps();
            if (scaled && j < nv)
                krow[j] = _mm512_add_ps(_mm512_mul_ps(krow[j], _mm512_set1_ps(par[j][o + u])),
                                        _mm512_set1_ps(par[j][16 + o + u]));
            k[j] += row;
        }
        fma_rows(R, V, full, nb, q, (size_t)dk, krow, acc);
    }
}

/* Scores of nb <= R queries for nv <= V slot vectors (of any blocks), R · V <= 16
 * accumulators, each score one FMA chain over the features [c0, c1) from zero, then scale ·
 * sum (+ sc when c0 > 0): the microkernel's sums (score_features' products). As it goes, four
 * features at a time, the next tile's vectors (pf, npf of them) prefetched row by row (int8:
 * their parameters' lines too), and the vectors' value rows (when given) into L2 a line per
 * feature. full: nb = R, nv = V, every vector 16 slots wide (nothing tested in the
 * loop, so the accumulators stay in registers). */
static inline __attribute__((always_inline, target(AVX512))) void
scores_tile(const mha_kv_type type, const int scaled, const int R, const int V, const int full,
            const float *restrict q, int nb, int dk, int c0, int c1, const mha_slot_vec *v, int nv,
            const mha_slot_vec *pf, int npf, int ld, float scale, float *restrict sc, size_t sc_ld)
{
    if (full)
        nb = R, nv = V;
    const size_t esz = mha_kv_elem_size(type);
    __mmask16 m[8];
    size_t vbytes[8];
    for (int j = 0; j < V; j++) {
        m[j] = full ? (__mmask16)0xFFFF : j < nv ? first16(v[j].lanes) : 0;
        vbytes[j] = j < nv && v[j].v ? (size_t)(full ? 16 : v[j].lanes) * (size_t)dk * esz : 0;
    }
    _Alignas(64) float par[8][32]; /* int8: 16 features' scales and zero points of each vector, float32 */
    __m512 acc[16];
    for (int i = 0; i < R * V; i++)
        acc[i] = _mm512_setzero_ps();
    for (int c = c0; c < c1; c += 4) {
        /* the prefetches of four features at once, the features' products then free of tests */
        const int nc = c1 - c < 4 ? c1 - c : 4;
        const size_t line = (size_t)(c - c0) * 64;
        for (int j = 0; j < V; j++) {
            for (size_t l = line; l < line + 4 * 64 && l < vbytes[j]; l += 64)
                _mm_prefetch(v[j].v + l, _MM_HINT_T1);
            if (j < npf)
                for (int u = 0; u < nc; u++)
                    _mm_prefetch(pf[j].kt + (size_t)(c + u) * ld * esz, _MM_HINT_T0);
            if (scaled && j < npf && (c - c0) % 32 == 0) /* its scales' and zero points' lines */
                _mm_prefetch((const char *)(pf[j].kp + c), _MM_HINT_T0),
                    _mm_prefetch((const char *)(pf[j].kp + dk + c), _MM_HINT_T0);
        }
        if (scaled && (c - c0) % 16 == 0) /* the next 16 features' parameters as float32 */
            for (int j = 0; j < V; j++)
                if (j < nv) {
                    const __mmask16 mh = first16(c1 - c);
                    _mm512_store_ps(par[j], _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mh, v[j].kp + c)));
                    _mm512_store_ps(par[j] + 16, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mh, v[j].kp + dk + c)));
                }
        if (nc == 4)
            score_features(type, scaled, R, V, full, q, nb, dk, c, 4, v, nv, m, par, (c - c0) % 16, ld, acc);
        else
            score_features(type, scaled, R, V, full, q, nb, dk, c, nc, v, nv, m, par, (c - c0) % 16, ld, acc);
    }
#pragma GCC unroll 8 /* constant indices: a loop over acc would keep it in memory, stored every feature */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r >= nb || j >= nv)
                continue;
            float *y = sc + (size_t)r * sc_ld + v[j].out;
            __m512 x = _mm512_mul_ps(acc[r * V + j], _mm512_set1_ps(scale));
            if (c0 > 0)
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m[j], y));
            _mm512_mask_storeu_ps(y, m[j], x);
        }
}

/* R queries × V slot vectors over the vector list, each tile prefetching the next where ahead. */
static inline __attribute__((always_inline, target(AVX512))) void
scores_tiles(const mha_kv_type type, const int scaled, const int R, const int V, const float *restrict q, int nb,
             int dk, int c0, int c1, const mha_slot_vec *v, int nv, int ld, float scale, float *restrict sc,
             size_t sc_ld, int ahead)
{
    ahead = ahead && mha_scores_fit_l1(c1 - c0, V, 16 * mha_kv_elem_size(type));
    mha_scores_walk(type, scaled, R, V, 16, q, nb, dk, c0, c1, v, nv, ld, scale, sc, sc_ld, ahead, scores_tile);
}

/* Slot vectors of 16 from the chunk's blocks: 1 or 2 queries × 4 vectors, up to 4 × 2, more
 * 8 × 2 at a time. Few vectors at once: blocks lie a multiple of 64 KiB apart, so every
 * vector's row falls in one L1 and L2 set; 4 × 4 (16 chains) ran decode about 25% slower than
 * 4 × 2 (llama3-8b decode step, Zen 5). An int8 cache's 3 to 4 queries take 4 × 4: its rows
 * are 16 bytes, and each K vector made from its scale and zero point serves 4 queries, not 2
 * (perf/score_tiles: 1.59 against 1.97 ns a feature of a block, Zen 4). */
static inline __attribute__((always_inline, target(AVX512))) void
scores(const mha_kv_type type, const int scaled, const float *restrict q, int nq, int dk, int c0, int c1, int runs,
       const void *const *kt, const void *const *vr, const mha_f16 *const *kp, const int *n, int ld, float scale,
       float *restrict sc, size_t sc_ld)
{
    mha_slot_vec v[MHA_KV_CHUNK];
    const size_t esz = mha_kv_elem_size(type);
    const int nv = mha_slot_vecs(runs, kt, vr, (size_t)dk * esz, kp, dk, n, 16, esz, v);
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *qq = q + (size_t)q0 * dk;
        float *sq = sc + (size_t)q0 * sc_ld;
        if (nb <= 2)
            scores_tiles(type, scaled, 2, 4, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4 && scaled)
            scores_tiles(type, scaled, 4, 4, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4)
            scores_tiles(type, scaled, 4, 2, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else
            scores_tiles(type, scaled, 8, 2, qq, nb, dk, c0, c1, v, nv, ld, scale, sq, sc_ld, q0 == 0);
    }
}

__attribute__((target(AVX512))) static void decode_scores_avx512(const float *restrict q, int nq, int dk, int c0, int c1,
                                                                 int runs, const void *const *kt, const void *const *vr,
                                                                 const mha_f16 *const *kp, const int *n, int ld,
                                                                 float scale, float *restrict sc, size_t sc_ld)
{
    (void)kp; /* unscaled */
    scores(MHA_KV_F32, 0, q, nq, dk, c0, c1, runs, kt, vr, NULL, n, ld, scale, sc, sc_ld);
}

__attribute__((target(AVX512))) static void decode_scores8_avx512(const float *restrict q, int nq, int dk, int c0,
                                                                  int c1, int runs, const void *const *kt,
                                                                  const void *const *vr, const mha_f16 *const *kp,
                                                                  const int *n, int ld,
                                                                  float scale, float *restrict sc, size_t sc_ld)
{
    scores(MHA_KV_INT8, 1, q, nq, dk, c0, c1, runs, kt, vr, kp, n, ld, scale, sc, sc_ld);
}

/* Z of nb <= R queries, features [c0, c0 + 16·V) (the last vector's lanes ml), over the n
 * value rows of one block, with R · V <= 16 accumulators: each row's vectors loaded once for all
 * the queries, key by key in order (the microkernel's A·V sums); the same features of the next
 * block's rows (next, or NULL) prefetched row by row as it goes, so the prefetches are spread
 * as evenly as the loads (all of a row's lines at once was 10% slower: fill buffers run out),
 * and a step of the walk w (or NULL) a key. Elements of the cache's type; scaled: row t times
 * vs[2t] plus vs[2t + 1] as it loads (an int8 cache's scale and zero point: scale_rows'
 * values). full: nb = R (nothing tested in the loop). */
static inline __attribute__((always_inline, target(AVX512))) void
values_tile_as(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *e,
               size_t e_ld, int nb, const void *v, const float *vs, int n, int dk, int c0, __mmask16 ml, float *p,
               size_t ps, const void *next, mha_prefetch_walk *w)
{
    if (full)
        nb = R;
    const size_t esz = mha_kv_elem_size(type), row = (size_t)dk * esz;
    const size_t pf0 = (size_t)c0 * esz, pf1 = (size_t)(c0 + 16 * V < dk ? c0 + 16 * V : dk) * esz;
    __m512 acc[16];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < V; j++)
            acc[r * V + j] = _mm512_maskz_loadu_ps(j == V - 1 ? ml : (__mmask16)0xFFFF,
                                                   p + (size_t)(r < nb ? r : 0) * ps + c0 + 16 * j);
    mha_prefetch_walk wl = w ? *w : (mha_prefetch_walk){0}; /* in registers while the tile runs */
    for (int t = 0; t < n; t++) {
        if (next)
            for (size_t off = pf0; off < pf1; off += 64)
                _mm_prefetch((const char *)next + (size_t)t * row + off, _MM_HINT_T0);
        if (w)
            mha_prefetch_step(&wl);
        __m512 b[8];
        const __m512 s = scaled ? _mm512_set1_ps(vs[2 * t]) : _mm512_setzero_ps();
        const __m512 z = scaled ? _mm512_set1_ps(vs[2 * t + 1]) : _mm512_setzero_ps();
        for (int j = 0; j < V; j++) {
            b[j] = load16(type, scaled, (const char *)v + ((size_t)t * dk + c0 + 16 * j) * esz,
                          j == V - 1 ? ml : (__mmask16)0xFFFF, s);
            b[j] = scaled ? _mm512_add_ps(b[j], z) : b[j];
        }
        fma_rows(R, V, full, nb, e + t, e_ld, b, acc);
    }
#pragma GCC unroll 8 /* as scores_tile's */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++)
            if (r < nb)
                _mm512_mask_storeu_ps(p + (size_t)r * ps + c0 + 16 * j, j == V - 1 ? ml : (__mmask16)0xFFFF, acc[r * V + j]);
    if (w)
        *w = wl;
}

static inline __attribute__((always_inline, target(AVX512))) void
values_tile(const mha_kv_type type, const int scaled, const int R, const int V, const float *e, size_t e_ld, int nb,
            const void *v, const float *vs, int n, int dk, int c0, __mmask16 ml, float *p, size_t ps, const void *next,
            mha_prefetch_walk *w)
{
    if (nb == R)
        values_tile_as(type, scaled, R, V, 1, e, e_ld, nb, v, vs, n, dk, c0, ml, p, ps, next, w);
    else
        values_tile_as(type, scaled, R, V, 0, e, e_ld, nb, v, vs, n, dk, c0, ml, p, ps, next, w);
}

/* Register tiles: up to 2 queries × 128 features, 4 × 64 or 8 × 32 (fewer queries, more
 * features per pass over the block's rows), 16 features the last pass. */
static inline __attribute__((always_inline, target(AVX512))) void
values(const mha_kv_type type, const int scaled, const float *e, size_t e_ld, int nq, const void *v, const float *vs,
       int n, int dk, float *p, size_t ps, const void *next, mha_prefetch_walk *w)
{
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *eq = e + (size_t)q0 * e_ld;
        float *pq = p + (size_t)q0 * ps;
        const void *pf = q0 == 0 ? next : NULL;
        for (int c0 = 0; c0 < dk;) {
            const int left = dk - c0;
            if (nb <= 2 && left >= 128)
                values_tile(type, scaled, 2, 8, eq, e_ld, nb, v, vs, n, dk, c0, 0xFFFF, pq, ps, pf, w), c0 += 128;
            else if (nb <= 4 && left >= 64)
                values_tile(type, scaled, 4, 4, eq, e_ld, nb, v, vs, n, dk, c0, 0xFFFF, pq, ps, pf, w), c0 += 64;
            else if (left >= 32)
                values_tile(type, scaled, 8, 2, eq, e_ld, nb, v, vs, n, dk, c0, 0xFFFF, pq, ps, pf, w), c0 += 32;
            else {
                const __mmask16 ml = first16(left);
                values_tile(type, scaled, 8, 1, eq, e_ld, nb, v, vs, n, dk, c0, ml, pq, ps, pf, w), c0 += 16;
            }
        }
    }
}

__attribute__((target(AVX512))) static void decode_values_avx512(const float *e, size_t e_ld, int nq, const void *v,
                                                                 const float *vs, int n, int dk, float *p, size_t ps,
                                                                 const void *next, mha_prefetch_walk *w)
{
    (void)vs; /* unscaled */
    values(MHA_KV_F32, 0, e, e_ld, nq, v, NULL, n, dk, p, ps, next, w);
}

__attribute__((target(AVX512))) static void decode_values8_avx512(const float *e, size_t e_ld, int nq, const void *v,
                                                                  const float *vs, int n, int dk, float *p, size_t ps,
                                                                  const void *next, mha_prefetch_walk *w)
{
    values(MHA_KV_INT8, 1, e, e_ld, nq, v, vs, n, dk, p, ps, next, w);
}

/* ---- bf16: rounding, packing, epilogue ---- */


/* n <= 16 floats rounded to bf16, 16 lanes at a time. */
/* Runs within one 16-wide half of a tile row, 16 lanes at a time (masked: AVX-512BW). */
__attribute__((target(AVX512))) static void round_into_tiles_avx512(const float *src, int c, int n, mha_bf16 *d)
{
    for (int t = 0; t < n;) {
        const int e = c + t, run = 16 - e % 16 < n - t ? 16 - e % 16 : n - t;
        const __mmask16 m = first16(run);
        const __m512i r = round_lanes(_mm512_maskz_loadu_ps(m, src + t));
        _mm256_mask_storeu_epi16(d + (size_t)(e / MHA_BT_K) * MHA_BT_ELEMS + e % MHA_BT_K, m, _mm512_cvtepi32_epi16(r));
        t += run;
    }
}

/* 16 lanes at a time (masked): the rounded bits back in the high halves. */
__attribute__((target(AVX512))) static void round_bf16_floats_avx512(float *x, int n)
{
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = first16(n - i);
        const __m512i r = round_lanes(_mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)));
    }
}

__attribute__((target(AVX512))) static void round_to_bf16_avx512(const float *restrict x, int n, mha_bf16 *restrict d)
{
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = first16(n - i);
        _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(round_lanes(_mm512_maskz_loadu_ps(m, x + i))));
    }
}

/* 16 int8 to 16 bf16: widened to int32, converted (exact), the float's high half. */
__attribute__((target(AVX512))) static inline __m256i bf16_of_i8(const int8_t *src)
{
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)src)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}

/* Two rows of 16 in one register, then one permutation: element 2i from row 0, 2i + 1 from row
 * 1; rows of bf16, or of int8 converted (i8, a constant); a line of next per pf bytes a pair. */
static inline __attribute__((always_inline, target(AVX512))) void
interleave_rows(const int i8, const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next, int pf)
{
    static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(order);
    const size_t row = ld * (i8 ? 1 : sizeof(mha_bf16));
    const char *r = src;
    for (int p = 0; p < pairs; p++, r += 2 * row, dst += 2 * MHA_BT_N) {
        if (next)
            _mm_prefetch(next + (size_t)pf * p, _MM_HINT_T0);
        const __m256i a = i8 ? bf16_of_i8((const int8_t *)r) : _mm256_loadu_si256((const void *)r);
        const __m256i b = i8 ? bf16_of_i8((const int8_t *)(r + row)) : _mm256_loadu_si256((const void *)(r + row));
        _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)));
    }
}

__attribute__((target(AVX512))) static void interleave_pairs_avx512(const void *src, size_t ld, int pairs,
                                                                    mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(0, src, ld, pairs, dst, next, 64);
}

__attribute__((target(AVX512))) static void interleave_pairs_i8_avx512(const void *src, size_t ld, int pairs,
                                                                       mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(1, src, ld, pairs, dst, next, 32);
}

/* B panels 16 k × 16 columns at a time: 16 source rows loaded (transposed: keys' rows of 16
 * features, turned by a register transpose), each k pair rounded and interleaved into the 32
 * bf16 (one 64-byte line) of its VNNI row. src's 16-column runs must not cross its panels
 * (its panel width a multiple of 16). */
__attribute__((target(AVX512))) static void pack_b16_avx512(const mha_kernel *k, mha_mat src, int transpose, int kk,
                                                            int n, mha_bf16 *dst, size_t ps)
{
    if (k->bw % 16 != 0) {
        mha_isa_ref.pack_b16(k, src, transpose, kk, n, dst, ps);
        return;
    }
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j0 = 0; j0 < np; j0 += 16)
        for (int p0 = 0; p0 < kp; p0 += 16) {
            __m512 v[16];
            /* rows of src: k (features of the keys' rows when transposed) or columns */
            const int rows = transpose ? n - j0 : kk - p0, cols = transpose ? kk - p0 : n - j0;
            const __mmask16 m = first16(cols);
            for (int r = 0; r < 16; r++)
                v[r] = r < rows && m ? _mm512_maskz_loadu_ps(m, transpose ? mha_mat_at(k, src, j0 + r, p0)
                                                                           : mha_mat_at(k, src, p0 + r, j0))
                                     : _mm512_setzero_ps();
            if (transpose)
                transpose16(v); /* v[r]: k p0 + r over the 16 columns */
            for (int r = 0; r < 16; r += 2) {
                const __m512i pair = _mm512_or_si512(round_lanes(v[r]), _mm512_slli_epi32(round_lanes(v[r + 1]), 16));
                _mm512_storeu_si512(dst + mha_bk_b_index(p0 + r, j0, ps), pair);
            }
        }
}

/* The lanes m of c = alpha·acc + beta·c (beta 0: c not read): a multiply and an add, no FMA, so
 * the bits are epilogue_block_ref's. */
static inline __attribute__((always_inline, target(AVX512))) void epilogue16(__m512 va, __m512 vb, float beta, __m512 acc,
                                                                            float *c, __mmask16 m)
{
    __m512 y = _mm512_mul_ps(va, acc);
    if (beta != 0.0f)
        y = _mm512_add_ps(y, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, c)));
    _mm512_mask_storeu_ps(c, m, y);
}

__attribute__((target(AVX512))) static void epilogue_block_avx512(float *c0, float *c1, ptrdiff_t ldc, const float *acc,
                                                                 int rows, int cols, float alpha, float beta)
{
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int g = 0; g < cols; g += 16) {
        const __mmask16 m = first16(cols - g);
        for (int i = 0; i < rows; i++)
            epilogue16(va, vb, beta, _mm512_maskz_loadu_ps(m, acc + i * 32 + g), (g ? c1 : c0) + (ptrdiff_t)i * ldc, m);
    }
}

/* ---- bf16 products: rows in groups of NR (8, 4, 2, 1), 16·npan columns ---- */

#define BF16_TARGET AVX512 ",avx512bf16"
#define BK_AVX512 __attribute__((target(BF16_TARGET), always_inline)) static inline
#define FMA_INLINE __attribute__((target(AVX512), always_inline)) static inline

/* Few-row products read B from memory once: its pairs PF_AHEAD ahead (64 bytes per panel each)
 * prefetched by the first row group as it goes. */
enum { PF_AHEAD = 32 };
FMA_INLINE void prefetch_b(const mha_bf16 *bp, int npan, size_t ps)
{
    _mm_prefetch((const char *)(bp + 32 * PF_AHEAD), _MM_HINT_T0);
    if (npan == 2)
        _mm_prefetch((const char *)(bp + ps + 32 * PF_AHEAD), _MM_HINT_T0);
}

/* Where a group of rows' sums go: acc (rows 32 floats apart: mha_bk_block's contract), or with c0
 * set, alpha·sums + beta·c into C (mha_bkernel.block_c: the table's epilogue_block fused). */
typedef struct bk_out {
    float *acc;
    float *c0, *c1;
    ptrdiff_t ldc;
    int cols;
    float alpha, beta;
} bk_out;

/* Rows i0 .. i0 + NR's accumulators (c0: columns 0-15, c1: 16-31) out as o says (into C:
 * epilogue_block_avx512's bits). */
FMA_INLINE void store_rows(const int NR, const bk_out *o, int i0, int npan, const __m512 *c0, const __m512 *c1)
{
    if (!o->c0) {
        for (int r = 0; r < NR; r++) {
            _mm512_storeu_ps(o->acc + (i0 + r) * 32, c0[r]);
            if (npan == 2)
                _mm512_storeu_ps(o->acc + (i0 + r) * 32 + 16, c1[r]);
        }
        return;
    }
    const __m512 va = _mm512_set1_ps(o->alpha), vb = _mm512_set1_ps(o->beta);
    for (int g = 0; g < o->cols; g += 16) {
        const __mmask16 m = first16(o->cols - g);
        for (int r = 0; r < NR; r++)
            epilogue16(va, vb, o->beta, g ? c1[r] : c0[r], (g ? o->c1 : o->c0) + (ptrdiff_t)(i0 + r) * o->ldc, m);
    }
}

/* Row i's k pair q of tile t, as the 32-bit word vdpbf16ps broadcasts. */
BK_AVX512 uint32_t a_pair(const mha_bf16 *a, int kt, int i, int t, int q)
{
    uint32_t w;
    memcpy(&w, a + mha_bk_a_row(i, kt) + (size_t)t * MHA_BT_ELEMS + 2 * q, sizeof w);
    return w;
}

BK_AVX512 void rows_dpbf16(const int NR, int pf, int i0, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                           size_t ps, const bk_out *o)
{
    __m512 c0[8], c1[8];
    for (int r = 0; r < NR; r++)
        c0[r] = c1[r] = _mm512_setzero_ps();
    for (int t = 0; t < kt; t++)
        for (int q = 0; q < 16; q++) {
            const mha_bf16 *bp = b + (size_t)t * MHA_BT_ELEMS + 32 * q;
            if (pf)
                prefetch_b(bp, npan, ps);
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
            if (npan == 2) {
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + ps);
                for (int r = 0; r < NR; r++) {
                    const __m512bh x = (__m512bh)_mm512_set1_epi32((int)a_pair(a, kt, i0 + r, t, q));
                    c0[r] = _mm512_dpbf16_ps(c0[r], x, b0);
                    c1[r] = _mm512_dpbf16_ps(c1[r], x, b1);
                }
            } else
                for (int r = 0; r < NR; r++)
                    c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)_mm512_set1_epi32((int)a_pair(a, kt, i0 + r, t, q)), b0);
        }
    store_rows(NR, o, i0, npan, c0, c1);
}

/* bf16 widened to float32 and two FMAs per pair, even element first: the product is exact, so
 * each FMA rounds once, as the model's sum does. A's rows are widened into a small float buffer
 * a chunk of k at a time (then each FMA broadcasts its A value from memory: a load, not a
 * shuffle on an FMA port); B's pairs are split into even and odd halves by a shift and a mask. */
enum { FMA_KCH = 8 }; /* k tiles per widened chunk: 8 rows × 256 floats, 8 KiB */

FMA_INLINE void rows_fma(const int NR, int pf, int i0, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                        size_t ps, const bk_out *o)
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    _Alignas(64) float aw[8][FMA_KCH * 32];
    __m512 c0[8], c1[8];
    for (int r = 0; r < NR; r++)
        c0[r] = c1[r] = _mm512_setzero_ps();
    for (int t0 = 0; t0 < kt; t0 += FMA_KCH) {
        const int tn = kt - t0 < FMA_KCH ? kt - t0 : FMA_KCH;
        for (int r = 0; r < NR; r++) {
            const int i = i0 + r;
            const mha_bf16 *src = a + mha_bk_a_row(i, kt);
            for (int t = 0; t < tn; t++) {
                const __m512i v = _mm512_loadu_si512(src + (size_t)(t0 + t) * MHA_BT_ELEMS);
                const __m512i lo16 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
                const __m512i hi16 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
                _mm512_store_ps(&aw[r][t * 32], _mm512_castsi512_ps(_mm512_slli_epi32(lo16, 16)));
                _mm512_store_ps(&aw[r][t * 32 + 16], _mm512_castsi512_ps(_mm512_slli_epi32(hi16, 16)));
            }
        }
        for (int t = 0; t < tn; t++)
            for (int q = 0; q < 16; q++) {
                const mha_bf16 *bp = b + (size_t)(t0 + t) * MHA_BT_ELEMS + 32 * q;
                if (pf)
                    prefetch_b(bp, npan, ps);
                const __m512i v0 = _mm512_loadu_si512(bp);
                const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
                const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
                __m512 e1 = e0, o1 = o0;
                if (npan == 2) {
                    const __m512i v1 = _mm512_loadu_si512(bp + ps);
                    e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
                    o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
                }
                for (int r = 0; r < NR; r++) {
                    const __m512 xe = _mm512_set1_ps(aw[r][t * 32 + 2 * q]);
                    const __m512 xo = _mm512_set1_ps(aw[r][t * 32 + 2 * q + 1]);
                    c0[r] = _mm512_fmadd_ps(xo, o0, _mm512_fmadd_ps(xe, e0, c0[r]));
                    if (npan == 2)
                        c1[r] = _mm512_fmadd_ps(xo, o1, _mm512_fmadd_ps(xe, e1, c1[r]));
                }
            }
    }
    store_rows(NR, o, i0, npan, c0, c1);
}

/* Specialised per row count, so the accumulators live in registers; pf: the first group
 * prefetches B. */
#define ROW_GROUPS(fn, tgt)                                                                                \
    __attribute__((target(tgt))) static void fn##_groups(                                             \
        int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, const bk_out *o, int pf) \
    {                                                                                                     \
        int i = 0;                                                                                        \
        for (; i + 8 <= rows; i += 8)                                                                     \
            fn(8, pf && i == 0, i, npan, kt, a, b, ps, o);                                                \
        if (i + 4 <= rows)                                                                                \
            fn(4, pf && i == 0, i, npan, kt, a, b, ps, o), i += 4;                                        \
        if (i + 2 <= rows)                                                                                \
            fn(2, pf && i == 0, i, npan, kt, a, b, ps, o), i += 2;                                        \
        if (i < rows)                                                                                     \
            fn(1, pf && i == 0, i, npan, kt, a, b, ps, o);                                                \
    }
ROW_GROUPS(rows_dpbf16, BF16_TARGET)
ROW_GROUPS(rows_fma, AVX512)

static void rows_dpbf16_block(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc,
                              int pf)
{
    rows_dpbf16_groups(rows, npan, kt, a, b, ps, &(bk_out){.acc = acc}, pf);
}

/* The block and the epilogue in one pass: the scores' and values' products of the attention
 * chunks store each row's sums once, scaled, instead of through acc (a bert-base-512 bf16 core
 * spent 3.5% in the separate epilogue, Zen 4). */
static void rows_dpbf16_block_c(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *c0,
                                float *c1, ptrdiff_t ldc, int cols, float alpha, float beta, int pf)
{
    rows_dpbf16_groups(rows, npan, kt, a, b, ps,
                       &(bk_out){.c0 = c0, .c1 = c1, .ldc = ldc, .cols = cols, .alpha = alpha, .beta = beta}, pf);
}

/* FMA under the instructions' DAZ and FTZ (for the FMAs only: the caller's MXCSR comes back). */
static void block_fma(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc, int pf)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    rows_fma_groups(rows, npan, kt, a, b, ps, &(bk_out){.acc = acc}, pf);
    _mm_setcsr(csr);
}

static int dpbf16_usable(void)
{
    return mha_cpu_has("avx512_bf16");
}

static const mha_bkernel bk_dpbf16 = {
    .name = "avx512-bf16",
    .order = MHA_BK_ODD_FIRST,
    .usable = dpbf16_usable,
    .lacks = "this CPU has no AVX512_BF16",
    .block = rows_dpbf16_block,
    .block_c = rows_dpbf16_block_c,
};
static const mha_bkernel bk_fma = {.name = "fma-bf16", .order = MHA_BK_EVEN_FIRST, .block = block_fma};

/* ---- bf16 decode tiles: vdpbf16ps on a bf16 or int8 cache's elements in registers ---- */

/* The k pairs (a[i], b[i]) of 16 lanes (m: the lanes there; the rest zero) as vdpbf16ps takes
 * them, element 2i from row a, 2i + 1 from row b (NULL: zeros, the padding's): bf16 rows
 * interleaved by one permutation; int8 rows converted (exact) and each float's high half
 * taken, a shift and one bitwise select. */
BK_AVX512 __m512bh pair_rows(const int i8, const char *a, const char *b, __mmask16 m)
{
    if (i8) { /* V: the int8 values themselves */
        const __m512i fa = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, a))));
        const __m512i fb = b ? _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, b))))
                             : _mm512_setzero_si512();
        /* (fb & 0xffff0000) | (fa >> 16) */
        return (__m512bh)_mm512_ternarylogic_epi32(fb, _mm512_srli_epi32(fa, 16), _mm512_set1_epi32((int)0xffff0000u), 0xEC);
    }
    static const uint16_t order[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i x = _mm512_zextsi256_si512(_mm256_maskz_loadu_epi16(m, a));
    const __m512i y = b ? _mm512_zextsi256_si512(_mm256_maskz_loadu_epi16(m, b)) : _mm512_setzero_si512();
    return (__m512bh)_mm512_permutex2var_epi16(x, _mm512_loadu_si512(order), y);
}

/* Rows r < nb of x (rows ld floats apart, each holding bf16 values), elements [c, c + 32)
 * (those below n; zeros past it), as the 16 k pairs vdpbf16ps broadcasts: pk[r][i] holds
 * elements c + 2i and c + 2i + 1 (an exact conversion). */
BK_AVX512 void pack_pairs(const float *x, size_t ld, int nb, int c, int n, uint32_t pk[][16])
{
    for (int r = 0; r < nb; r++) {
        const float *xr = x + (size_t)r * ld + c;
        const __m512 lo = _mm512_maskz_loadu_ps(first16(n - c), xr), hi = _mm512_maskz_loadu_ps(first16(n - c - 16), xr + 16);
        _mm512_storeu_si512(pk[r], (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* A tile's sum into y (lanes m): + 0 where the kernels' sums end on zero padding (padded),
 * then times scale (scaled), as the kernels' epilogue rounds them. */
BK_AVX512 void store_sum(float *y, __mmask16 m, __m512 x, int padded, const int scaled, float scale)
{
    if (padded)
        x = _mm512_add_ps(x, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(y, m, scaled ? _mm512_mul_ps(x, _mm512_set1_ps(scale)) : x);
}

/* One pair step of an R × V tile: acc[r·V + j] += xp[r][i] (a pair of bf16, broadcast) · y[j]
 * by vdpbf16ps, for the rows present (full: all R, nothing tested). */
BK_AVX512 void dp_pairs(const int R, const int V, const int full, int nb, const uint32_t (*xp)[16], int i,
                        const __m512bh *y, __m512 *acc)
{
    for (int r = 0; r < R; r++)
        if (full || r < nb) {
            const __m512bh x = (__m512bh)_mm512_set1_epi32((int)xp[r][i]);
            for (int j = 0; j < V; j++)
                acc[r * V + j] = _mm512_dpbf16_ps(acc[r * V + j], x, y[j]);
        }
}

/* Scores of nb <= R queries for nv <= V slot vectors, R · V <= 16 accumulators, each score one
 * vdpbf16ps chain over the feature pairs in increasing order from zero: the avx512-bf16
 * kernel's sums of the same pairs (odd first), bit for bit; then + 0 where zero features pad
 * dk to whole k tiles, and scale · sum. Each vector's Kᵀ rows 2p and 2p + 1 paired in a
 * register, once for all the queries (an odd dk's last feature paired with zero); the
 * vectors' value rows (when given) prefetched into L2 a line per pair (into L1 they came late
 * or were lost: the values then waited on memory), the next tile's Kᵀ (pf, npf vectors) pair
 * by pair. full: nb = R, nv = V, every vector 16 slots wide (nothing tested in
 * the loop, so the accumulators stay in registers). */
BK_AVX512 void scores16_tile(const int R, const int V, const int full, const float *restrict q, int nb,
                             int dk, const mha_slot_vec *v, int nv, const mha_slot_vec *pf, int npf, int ld,
                             float scale, float *restrict sc, size_t sc_ld)
{
    if (full)
        nb = R, nv = V;
    const size_t row = (size_t)ld * sizeof(mha_bf16);
    const int pairs = (dk + 1) / 2;
    __mmask16 m[8];
    const char *kt[8], *vr[8], *pk[8];
    size_t vbytes[8];
    for (int j = 0; j < V; j++) {
        m[j] = full ? (__mmask16)0xFFFF : j < nv ? first16(v[j].lanes) : 0;
        kt[j] = v[j < nv ? j : 0].kt, vr[j] = v[j < nv ? j : 0].v, pk[j] = j < npf ? pf[j].kt : NULL;
        vbytes[j] = j < nv && v[j].v ? (size_t)(full ? 16 : v[j].lanes) * (size_t)dk * sizeof(mha_bf16) : 0;
    }
    __m512 acc[16];
    for (int i = 0; i < R * V; i++)
        acc[i] = _mm512_setzero_ps();
    _Alignas(64) uint32_t qp[8][16];
    for (int p0 = 0; p0 < pairs; p0 += 16) {
        pack_pairs(q, (size_t)dk, nb, 2 * p0, dk, qp);
        const int pn = pairs - p0 < 16 ? pairs - p0 : 16;
        for (int i = 0; i < pn; i++) {
            const int p = p0 + i, whole = 2 * p + 1 < dk;
            const size_t at = 2 * (size_t)p * row, line = (size_t)p * 64;
            __m512bh kp[8];
            for (int j = 0; j < V; j++) {
                if (line < vbytes[j])
                    _mm_prefetch(vr[j] + line, _MM_HINT_T1);
                if (pk[j])
                    _mm_prefetch(pk[j] + at, _MM_HINT_T0), _mm_prefetch(pk[j] + at + row, _MM_HINT_T0);
                kp[j] = pair_rows(0, kt[j] + at, whole ? kt[j] + at + row : NULL, m[j]);
            }
            dp_pairs(R, V, full, nb, qp, i, kp, acc);
        }
    }
#pragma GCC unroll 8 /* as scores_tile's */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++)
            if (r < nb && j < nv)
                store_sum(sc + (size_t)r * sc_ld + v[j].out, m[j], acc[r * V + j], dk % MHA_BT_K, 1, scale);
}

BK_AVX512 void scores16_tiles(const int R, const int V, const float *restrict q, int nb, int dk,
                              const mha_slot_vec *v, int nv, int ld, float scale, float *restrict sc, size_t sc_ld)
{
    const size_t row = (size_t)ld * sizeof(mha_bf16);
    for (int j = 0; j < V && j < nv; j++) /* the first tile's Kᵀ: nothing prefetched it */
        for (size_t off = 0; off < (size_t)dk * row; off += 64)
            _mm_prefetch(v[j].kt + off, _MM_HINT_T0);
    for (int i = 0; i < nv; i += V) {
        const int here = nv - i < V ? nv - i : V, next = nv - i - here < V ? nv - i - here : V;
        const int full = nb == R && here == V && mha_slot_vecs_whole(v + i, here, 16);
        if (full)
            scores16_tile(R, V, 1, q, nb, dk, v + i, here, v + i + here, next, ld, scale, sc, sc_ld);
        else
            scores16_tile(R, V, 0, q, nb, dk, v + i, here, v + i + here, next, ld, scale, sc, sc_ld);
    }
}

/* Slot vectors of 16 from every run of the chunk, in the float32 tiles' shapes. */
__attribute__((target(BF16_TARGET))) static void dp_scores16(const float *restrict q, int nq, int dk, int runs,
                                                             const void *const *kt, const void *const *vr,
                                                             const int *n, int ld, float scale, float *restrict sc,
                                                             size_t sc_ld)
{
    mha_slot_vec v[MHA_KV_CHUNK];
    const size_t esz = sizeof(mha_bf16);
    const int nv = mha_slot_vecs(runs, kt, vr, (size_t)dk * esz, NULL, dk, n, 16, esz, v);
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *qq = q + (size_t)q0 * dk;
        float *sq = sc + (size_t)q0 * sc_ld;
        if (nb <= 2)
            scores16_tiles(2, 4, qq, nb, dk, v, nv, ld, scale, sq, sc_ld);
        else if (nb <= 4)
            scores16_tiles(4, 2, qq, nb, dk, v, nv, ld, scale, sq, sc_ld);
        else
            scores16_tiles(8, 2, qq, nb, dk, v, nv, ld, scale, sq, sc_ld);
    }
}

/* Z of nb <= R queries, features [c0, c0 + 16·V) (the last vector's lanes ml), over the
 * chunk's keys in pairs (rows: each key's value row, across runs; an odd last key paired with
 * zeros), R · V <= 16 accumulators from p: one vdpbf16ps per key pair, feature vector and
 * query, in increasing key order (the kernel's A·V sums); then + 0 where zero keys pad the
 * chunk to whole k tiles. A step of the prefetch walk per key pair (w: NULL, none). full:
 * nb = R and ml whole (nothing tested in the loop). */
BK_AVX512 void values16_tile(const int i8, const int R, const int V, const int full, const float *e, size_t e_ld,
                             int nb, const char *const *rows, int keys, int c0, __mmask16 ml, float *p, size_t ps,
                             mha_prefetch_walk *w)
{
    if (full)
        nb = R, ml = 0xFFFF;
    const size_t off = (size_t)c0 * (i8 ? 1 : sizeof(mha_bf16)), step = 16 * (i8 ? 1 : sizeof(mha_bf16));
    const int pairs = (keys + 1) / 2;
    __m512 acc[16];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < V; j++)
            acc[r * V + j] = _mm512_maskz_loadu_ps(j == V - 1 ? ml : (__mmask16)0xFFFF,
                                                   p + (size_t)(r < nb ? r : 0) * ps + c0 + 16 * j);
    mha_prefetch_walk wl = w ? *w : (mha_prefetch_walk){0}; /* in registers while the tile runs */
    _Alignas(64) uint32_t ep[8][16];
    for (int p0 = 0; p0 < pairs; p0 += 16) {
        pack_pairs(e, e_ld, nb, 2 * p0, keys, ep);
        const int pn = pairs - p0 < 16 ? pairs - p0 : 16;
        for (int i = 0; i < pn; i++) {
            const int t = 2 * (p0 + i);
            if (w)
                mha_prefetch_step(&wl);
            const char *a = rows[t] + off, *b = t + 1 < keys ? rows[t + 1] + off : NULL;
            __m512bh vp[8];
            for (int j = 0; j < V; j++)
                vp[j] = pair_rows(i8, a + j * step, b ? b + j * step : NULL, j == V - 1 ? ml : (__mmask16)0xFFFF);
            dp_pairs(R, V, full, nb, ep, i, vp, acc);
        }
    }
#pragma GCC unroll 8 /* as scores_tile's */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++)
            if (r < nb)
                store_sum(p + (size_t)r * ps + c0 + 16 * j, j == V - 1 ? ml : (__mmask16)0xFFFF, acc[r * V + j],
                          keys % MHA_BT_K, 0, 1.0f);
    if (w)
        *w = wl;
}

/* Register tiles as the float32 values take them: up to 2 queries × 128 features, 4 × 64 or
 * 8 × 32, 16 features the last pass; each over every key of the chunk. run: the tiles are run
 * (else only counted: the passes, returned). */
BK_AVX512 int values16(const int i8, const int run, const float *e, size_t e_ld, int nq, const char *const *rows,
                       int keys, int dk, float *p, size_t ps, mha_prefetch_walk *w)
{
    int passes = 0;
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *eq = e + (size_t)q0 * e_ld;
        float *pq = p + (size_t)q0 * ps;
        for (int c0 = 0; c0 < dk; passes++) {
            const int left = dk - c0;
            if (nb <= 2 && left >= 128) {
                if (run)
                    nb == 2 ? values16_tile(i8, 2, 8, 1, eq, e_ld, nb, rows, keys, c0, 0xFFFF, pq, ps, w)
                            : values16_tile(i8, 2, 8, 0, eq, e_ld, nb, rows, keys, c0, 0xFFFF, pq, ps, w);
                c0 += 128;
            } else if (nb <= 4 && left >= 64) {
                if (run)
                    nb == 4 ? values16_tile(i8, 4, 4, 1, eq, e_ld, nb, rows, keys, c0, 0xFFFF, pq, ps, w)
                            : values16_tile(i8, 4, 4, 0, eq, e_ld, nb, rows, keys, c0, 0xFFFF, pq, ps, w);
                c0 += 64;
            } else if (left >= 32) {
                if (run)
                    nb == 8 ? values16_tile(i8, 8, 2, 1, eq, e_ld, nb, rows, keys, c0, 0xFFFF, pq, ps, w)
                            : values16_tile(i8, 8, 2, 0, eq, e_ld, nb, rows, keys, c0, 0xFFFF, pq, ps, w);
                c0 += 32;
            } else {
                if (run)
                    values16_tile(i8, 8, 1, 0, eq, e_ld, nb, rows, keys, c0, first16(left), pq, ps, w);
                c0 += 16;
            }
        }
    }
    return passes;
}

/* The prefetch list spread over every pass's key pairs. */
__attribute__((target(BF16_TARGET))) static void dp_values16(const float *e, size_t e_ld, int nq, int runs,
                                                             const void *const *v, const int *n, int i8, int dk,
                                                             float *p, size_t ps, const mha_prefetch *pf)
{
    const char *rows[MHA_KV_CHUNK];
    const size_t row = (size_t)dk * (i8 ? 1 : sizeof(mha_bf16));
    int keys = 0;
    for (int r = 0; r < runs; r++)
        for (int t = 0; t < n[r]; t++)
            rows[keys++] = (const char *)v[r] + (size_t)t * row;
    mha_prefetch_walk walk = {.pf = pf}, *w = pf && pf->n > 0 ? &walk : NULL;
    if (w) {
        const size_t lines = (size_t)pf->n * ((pf->bytes + 63) / 64);
        const size_t steps = (size_t)values16(i8, 0, e, e_ld, nq, rows, keys, dk, p, ps, NULL) * (size_t)((keys + 1) / 2);
        walk.per = (int)((lines + steps - 1) / steps);
    }
    if (i8)
        values16(1, 1, e, e_ld, nq, rows, keys, dk, p, ps, w);
    else
        values16(0, 1, e, e_ld, nq, rows, keys, dk, p, ps, w);
}

/* ---- bf16 decode tiles, even first: the float32 tiles on widened elements ---- */

/* The sums under DAZ and FTZ, as fma-bf16 sums (scale 1: a sum times one is itself), then the
 * padding's + 0 and the scale in the caller's mode. */
__attribute__((target(AVX512))) static void fma_scores16(const float *restrict q, int nq, int dk, int runs,
                                                         const void *const *kt, const void *const *vr, const int *n,
                                                         int ld, float scale, float *restrict sc, size_t sc_ld)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    scores(MHA_KV_BF16, 0, q, nq, dk, 0, dk, runs, kt, vr, NULL, n, ld, 1.0f, sc, sc_ld);
    _mm_setcsr(csr);
    mha_scores16_finish(sc, sc_ld, nq, runs, n, dk, scale);
}

/* Run by run (the sums carried through p, exactly), under DAZ and FTZ; then the key padding's
 * + 0. The next run's rows prefetched as the float32 values prefetch them. */
__attribute__((target(AVX512))) static void fma_values16(const float *e, size_t e_ld, int nq, int runs,
                                                         const void *const *v, const int *n, int i8, int dk, float *p,
                                                         size_t ps)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    int keys = 0;
    for (int r = 0; r < runs; keys += n[r++]) {
        const void *next = r + 1 < runs ? v[r + 1] : NULL;
        if (i8)
            values(MHA_KV_INT8, 0, e + keys, e_ld, nq, v[r], NULL, n[r], dk, p, ps, next, NULL);
        else
            values(MHA_KV_BF16, 0, e + keys, e_ld, nq, v[r], NULL, n[r], dk, p, ps, next, NULL);
    }
    _mm_setcsr(csr);
    mha_values16_finish(p, ps, nq, keys, dk);
}

/* Odd first (avx512-bf16's vdpbf16ps: a CPU with AVX512_BF16), or even first (fma-bf16's FMAs). */
static void decode_scores16_avx512(const float *restrict q, int nq, int dk, int runs, const void *const *kt,
                                   const void *const *vr, const int *n, int ld, float scale, float *restrict sc,
                                   size_t sc_ld, mha_bk_order order)
{
    if (order == MHA_BK_ODD_FIRST)
        dp_scores16(q, nq, dk, runs, kt, vr, n, ld, scale, sc, sc_ld);
    else
        fma_scores16(q, nq, dk, runs, kt, vr, n, ld, scale, sc, sc_ld);
}

static void decode_values16_avx512(const float *e, size_t e_ld, int nq, int runs, const void *const *v, const int *n,
                                   mha_kv_type type, int dk, float *p, size_t ps, const mha_prefetch *pf,
                                   mha_bk_order order)
{
    const int i8 = type == MHA_KV_INT8;
    if (order == MHA_BK_ODD_FIRST)
        dp_values16(e, e_ld, nq, runs, v, n, i8, dk, p, ps, pf);
    else
        fma_values16(e, e_ld, nq, runs, v, n, i8, dk, p, ps);
}

/* ---- the table ---- */

static const char *default_arch_avx512(void)
{
    return "skx";
}

/* vdpbf16ps issues at half the FMA rate on Intel's cores (measured on Xeons with and without
 * AMX exposed, perf/RESULTS.md): there the FMA kernel on widened bf16 is faster. On AMD's Zen 5
 * it runs at the FMA rate: avx512-bf16 took half fma-bf16's time (bert-base-512 forward 44 vs
 * 91 ms, a decode step's 16-row projections 2.7 vs 4.9 ms; perf/RESULTS.md, session 14). */
static const mha_bkernel *bf16_auto_avx512(void)
{
    if (mha_bk_amx.usable())
        return &mha_bk_amx;
    if (dpbf16_usable() && __builtin_cpu_is("amd"))
        return &bk_dpbf16;
    return &bk_fma;
}

const mha_isa mha_isa_avx512 = {
    .name = "avx512",
    .needs = "avx512f avx512dq avx512bw avx512vl fma",
    .archs = {"skx", NULL},
    .default_arch = default_arch_avx512,
    .bf16 = {&mha_bk_amx, &bk_dpbf16, &bk_fma, NULL},
    .bf16_auto = bf16_auto_avx512,
    .pack_rows = pack_rows_avx512,
    .stream_rows = stream_rows_avx512,
    .stream_bw = 32,
    .stream_arch = "skx",
    .stream_in_place = stream_in_place_avx512,
    .rope_halves = rope_halves_avx512,
    .rope_pairs = rope_pairs_avx512,
    .softmax_row = softmax_row_avx512,
    .softmax_rows = softmax_rows_avx512,
    .merge_row = merge_row_avx512,
    .scale_row = scale_row_avx512,
    .softmax_row_bf16 = softmax_row_bf16_avx512,
    .softcap_row = softcap_row_avx512,
    .scale_rows = {[MHA_KV_INT8] = i8_scale_rows_avx512},
    .decode_scores = {[MHA_KV_F32] = decode_scores_avx512, [MHA_KV_INT8] = decode_scores8_avx512},
    .decode_values = {[MHA_KV_F32] = decode_values_avx512, [MHA_KV_INT8] = decode_values8_avx512},
    .decode16_orders = 1u << MHA_BK_EVEN_FIRST | 1u << MHA_BK_ODD_FIRST,
    .rows_scores = mha_rows_scores_avx2,
    .rows_scores16 = mha_rows_scores16_avx2,
    .decode_scores16 = decode_scores16_avx512,
    .decode_values16 = decode_values16_avx512,
    .softmax_row16 = softmax_row16_avx512,
    .softmax_rows16 = softmax_rows16_avx512,
    .round_into_tiles = round_into_tiles_avx512,
    .round_bf16_floats = round_bf16_floats_avx512,
    .round_to_bf16 = round_to_bf16_avx512,
    .pack_b16 = pack_b16_avx512,
    .interleave_pairs = {[MHA_KV_BF16] = interleave_pairs_avx512, [MHA_KV_INT8] = interleave_pairs_i8_avx512},
    .epilogue_block = epilogue_block_avx512,
};
