/* avx512_decode_bf16.c — the avx512 table's bf16 decode: its odd-first tiles, vdpbf16ps on a bf16
 * or int8 cache's elements paired in registers (the avx512-bf16 kernel's sums: a CPU with
 * AVX512_BF16), and the entries that run them or, even first, the FMA tiles of avx512_decode.c. */
#include <immintrin.h>

#include "avx512.h"
#include "kvcache.h"

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
#pragma GCC unroll 8 /* as scores_tile's (avx512_decode.c) */
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
#pragma GCC unroll 8 /* as scores_tile's (avx512_decode.c) */
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

/* Odd first (avx512-bf16's vdpbf16ps: a CPU with AVX512_BF16), or even first (fma-bf16's FMAs). */
void mha_decode_scores16_avx512(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order)
{
    if (order == MHA_BK_ODD_FIRST)
        dp_scores16(s->q, s->nq, s->dk, k->runs, k->kt, k->vr, k->n, k->ld, s->scale, s->sc, s->sc_ld);
    else
        mha_fma_scores16_avx512(s->q, s->nq, s->dk, k->runs, k->kt, k->vr, k->n, k->ld, s->scale, s->sc, s->sc_ld);
}

void mha_decode_values16_avx512(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                                mha_kv_type type, const mha_prefetch *pf, mha_bk_order order)
{
    const float *e = rows->e;
    const size_t e_ld = rows->e_ld, ps = rows->ps;
    const int nq = rows->nq, dk = rows->dk;
    float *p = rows->p;
    const int i8 = type == MHA_KV_INT8;
    if (order == MHA_BK_ODD_FIRST)
        dp_values16(e, e_ld, nq, runs, v, n, i8, dk, p, ps, pf);
    else
        mha_fma_values16_avx512(e, e_ld, nq, runs, v, n, i8, dk, p, ps);
}
