/* avx512_f32.c — the avx512 table's float32 operations outside the softmax: A and Bᵀ packed
 * 16 lanes at a time through register transposes, the few-row products streamed past skx's
 * microkernel with its sums, and RoPE. */
#include <immintrin.h>

#include "avx512.h"
#include "loops.h"

/* ---- float32 packing ---- */

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
__attribute__((target(AVX512))) void mha_pack_rows_avx512(mha_mat a, int w, int i0, int rows, int p0, int kc,
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
 * Prefetching only in the first pass (32 rows ahead) would leave memory idle during the
 * others. */
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
    float *cr = c.p + (ptrdiff_t)(j0 / w) * c.ps + (ptrdiff_t)i0 * c.ld; /* j0 starts a panel: no division (avx2_f32.c) */
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

__attribute__((target(AVX512))) void mha_stream_rows_avx512(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                       mha_mat a, mha_mat b, float beta, mha_mat c)
{
    mha_stream_walk(k, m, n, kk, alpha, a, b, beta, c, 32, 12, stream_pass);
}

/* AMD's cores: there the attention's products run faster streamed with A read in place than
 * on A packed for BLIS's microkernel (Zen 4; Zen 5 taken as Zen 4). On Intel's Xeons packing A
 * for skx's microkernel is mostly the faster (most on a long causal core), so they pack. */
int mha_stream_in_place_avx512(void)
{
    return __builtin_cpu_is("amd");
}
/* ---- RoPE ---- */

/* Sixteen pairs at a time: products and the difference or sum each rounded once, as ref. */
__attribute__((target(AVX512))) void mha_rope_halves_avx512(float *a, float *b, const float *c, const float *s,
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
__attribute__((target(AVX512))) void mha_rope_pairs_avx512(float *x, const float *c, const float *s, float sign,
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
