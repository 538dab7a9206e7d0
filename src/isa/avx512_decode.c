/* avx512_decode.c — the avx512 table's decode tiles on FMA: float32 chains on a float32 cache,
 * on an int8 cache's elements scaled as they load (and its blocks read back as float32), and on
 * bf16 or int8 elements widened: the even-first bf16 decode (fma-bf16's sums), which the bf16
 * entries in avx512_decode_bf16.c call; and the same chains on K's rows (rows_scores,
 * rows_scores16: the core's few queries). */
#include <immintrin.h>

#include "avx512.h"
#include "kvcache.h"
#include "loops.h"

/* int8 cache elements to float32, 16 at a time (the tail under a mask). */
__attribute__((target(AVX512))) void mha_i8_scale_rows_avx512(const void *from, size_t ld_src, int rows, int n,
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

/* ---- decode tiles: float32 FMA chains on a float32 cache, or on bf16 or int8 elements widened
 * as they load ---- */

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
#ifdef __clang__ /* kept rolled: unrolled, clang hoists every feature's K vectors and spills them */
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
            const float *restrict q, int nb, int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv,
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
            if (c0 > 0) /* the sub-config's beta 1: scale·sum rounded first, or in one rounding */
                x = fused ? _mm512_fmadd_ps(acc[r * V + j], _mm512_set1_ps(scale), _mm512_maskz_loadu_ps(m[j], y))
                          : _mm512_add_ps(x, _mm512_maskz_loadu_ps(m[j], y));
            _mm512_mask_storeu_ps(y, m[j], x);
        }
}

/* R queries × V slot vectors over the vector list, each tile prefetching the next where ahead. */
static inline __attribute__((always_inline, target(AVX512))) void
scores_tiles(const mha_kv_type type, const int scaled, const int R, const int V, const float *restrict q, int nb,
             int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv, int ld, float scale, float *restrict sc,
             size_t sc_ld, int ahead)
{
    ahead = ahead && mha_scores_fit_l1(c1 - c0, V, 16 * mha_kv_elem_size(type));
    mha_scores_walk(type, scaled, R, V, 16, q, nb, dk, c0, c1, fused, v, nv, ld, scale, sc, sc_ld, ahead, scores_tile);
}

/* Slot vectors of 16 from the chunk's blocks: 1 or 2 queries × 4 vectors, up to 4 × 2, more
 * 8 × 2 at a time. Few vectors at once: blocks lie a multiple of 64 KiB apart, so every
 * vector's row falls in one L1 and L2 set, and 4 vectors' rows a feature (4 × 4, 16 chains)
 * crowd that set where 2 (4 × 2) do not. An int8 cache's 3 to 4 queries take 4 × 4 all the
 * same: its rows are 16 bytes, a quarter of a float32 cache's, and each K vector made from its
 * scale and zero point (two operations a feature) serves 4 queries, not 2. */
static inline __attribute__((always_inline, target(AVX512))) void
scores(const mha_kv_type type, const int scaled, const float *restrict q, int nq, int dk, int c0, int c1, int fused,
       int runs, const void *const *kt, const void *const *vr, const mha_f16 *const *kp, const int *n, int ld,
       float scale, float *restrict sc, size_t sc_ld)
{
    mha_slot_vec v[MHA_KV_CHUNK];
    const size_t esz = mha_kv_elem_size(type);
    const int nv = mha_slot_vecs(runs, kt, vr, (size_t)dk * esz, kp, dk, n, 16, esz, v);
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *qq = q + (size_t)q0 * dk;
        float *sq = sc + (size_t)q0 * sc_ld;
        if (nb <= 2)
            scores_tiles(type, scaled, 2, 4, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4 && scaled)
            scores_tiles(type, scaled, 4, 4, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4)
            scores_tiles(type, scaled, 4, 2, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else
            scores_tiles(type, scaled, 8, 2, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
    }
}

__attribute__((target(AVX512))) void mha_decode_scores_avx512(const mha_score_rows *s, int c0, int c1,
                                                              const mha_key_runs *k)
{
    scores(MHA_KV_F32, 0, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->vr, NULL, k->n, k->ld, s->scale,
           s->sc, s->sc_ld);
}

__attribute__((target(AVX512))) void mha_decode_scores8_avx512(const mha_score_rows *s, int c0, int c1,
                                                               const mha_key_runs *k)
{
    scores(MHA_KV_INT8, 1, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->vr, k->kp, k->n, k->ld,
           s->scale, s->sc, s->sc_ld);
}

/* ---- rows_scores: 16 keys as the lanes of a register ---- */

/* The products of features [c, c + nc) of 16 keys' rows (nt of them, the rest zero) for R
 * queries: the rows' 16 features loaded and transposed in registers (feature u of the 16 keys
 * in x[u]), each query's feature broadcast, one FMA a query and feature; swap: in the order
 * u ^ 1, each pair's odd feature first (nc even). The next 16 keys' rows prefetched a line a
 * row, and (v) these keys' value rows into L2 as often. */
static inline __attribute__((always_inline, target(AVX512))) void
rows_features(const int R, const int swap, const int nc, const float *restrict q, int dk, int c,
              const float *restrict k, ptrdiff_t ld, int nt, const mha_rows_ahead *v, int t, __m512 *acc)
{
    const __mmask16 mc = first16(nc);
    const size_t line = (size_t)c / 16 * 64;
    __m512 x[16];
    for (int u = 0; u < 16; u++) {
        x[u] = u < nt ? _mm512_maskz_loadu_ps(mc, k + (ptrdiff_t)u * ld + c) : _mm512_setzero_ps();
        _mm_prefetch((const char *)(k + (ptrdiff_t)(16 + u) * ld + c), _MM_HINT_T0); /* a hint: never faults */
        if (v && u < nt && line < v->bytes)
            _mm_prefetch(v->at + (size_t)(t + u) * v->ld + line, _MM_HINT_T1);
    }
    transpose16(x);
    for (int u = 0; u < nc; u++)
        fma_rows(R, 1, 1, R, q + c + (u ^ swap), (size_t)dk, &x[u ^ swap], acc);
}

/* Scores of R queries (rows dk apart) against nt <= 16 keys' rows from k: one FMA chain per
 * score in feature order from zero (swap: pair by pair, odd first), then scale · sum:
 * decode_scores' bits (decode_scores16's before its finish). */
static inline __attribute__((always_inline, target(AVX512))) void
rows_tile(const int R, const int swap, const float *restrict q, int dk, const float *restrict k, ptrdiff_t ld, int nt,
          float scale, float *restrict sc, size_t sc_ld, const mha_rows_ahead *v, int t)
{
    __m512 acc[8];
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= dk; c += 16)
        rows_features(R, swap, 16, q, dk, c, k, ld, nt, v, t, acc);
    if (c < dk)
        rows_features(R, swap, dk - c, q, dk, c, k, ld, nt, v, t, acc);
    const __mmask16 mt = first16(nt);
    for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(sc + (size_t)r * sc_ld, mt, _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
}

/* Keys as lanes: any number of queries fills the vectors (avx2's rows_scores has the queries
 * as its lanes, 4 to a register, from 4 queries on), at the cost of a register transpose per
 * 16 keys and 16 features, for up to 8 queries at once (8 accumulators beside the 16
 * transposed vectors); more queries transpose the keys again a pass. The first pass
 * prefetches the value rows. */
static inline __attribute__((always_inline, target(AVX512))) void
rows_scores_as(const int swap, const mha_score_rows *s, const mha_key_rows *k, float scale)
{
    const int dk = s->dk;
    for (int r0 = 0; r0 < s->nq; r0 += 8) {
        const int nb = s->nq - r0 < 8 ? s->nq - r0 : 8;
        const float *q = s->q + (size_t)r0 * dk;
        const mha_rows_ahead *v = k->v && k->v->at && r0 == 0 ? k->v : NULL;
        for (int t = 0; t < k->n; t += 16) {
            const int nt = k->n - t < 16 ? k->n - t : 16;
            const float *kr = k->k + (ptrdiff_t)t * k->ld;
            float *sc = s->sc + (size_t)r0 * s->sc_ld + t;
            switch (nb) {
            case 1: rows_tile(1, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            case 2: rows_tile(2, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            case 3: rows_tile(3, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            case 4: rows_tile(4, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            case 5: rows_tile(5, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            case 6: rows_tile(6, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            case 7: rows_tile(7, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            default: rows_tile(8, swap, q, dk, kr, k->ld, nt, scale, sc, s->sc_ld, v, t); break;
            }
        }
    }
}

__attribute__((target(AVX512))) void mha_rows_scores_avx512(const mha_score_rows *s, const mha_key_rows *k)
{
    rows_scores_as(0, s, k, s->scale);
}

/* Under DAZ and FTZ with scale 1, as decode_scores16 sums (a sum times one is itself), then
 * its finish in the caller's mode (avx2's rows_scores16 likewise). */
__attribute__((target(AVX512))) void mha_rows_scores16_avx512(const mha_score_rows *s, const mha_key_rows *k,
                                                              mha_bk_order order)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    if (order == MHA_BK_ODD_FIRST)
        rows_scores_as(1, s, k, 1.0f);
    else
        rows_scores_as(0, s, k, 1.0f);
    _mm_setcsr(csr);
    mha_scores16_finish(s->sc, s->sc_ld, s->nq, 1, &k->n, s->dk, s->scale);
}

/* Z of nb <= R queries, features [c0, c0 + 16·V) (the last vector's lanes ml), over the n
 * value rows of one block, with R · V <= 16 accumulators: each row's vectors loaded once for all
 * the queries, key by key in order (the microkernel's A·V sums); the same features of the next
 * block's rows (next, or NULL) prefetched row by row as it goes, so the prefetches are spread
 * as evenly as the loads (all of a row's lines at once would run out of fill buffers),
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

__attribute__((target(AVX512))) void mha_decode_values_avx512(const mha_value_rows *rows, const void *v,
                                                              const float *vs, int n, const void *next,
                                                              mha_prefetch_walk *w)
{
    (void)vs; /* unscaled */
    values(MHA_KV_F32, 0, rows->e, rows->e_ld, rows->nq, v, NULL, n, rows->dk, rows->p, rows->ps, next, w);
}

__attribute__((target(AVX512))) void mha_decode_values8_avx512(const mha_value_rows *rows, const void *v,
                                                               const float *vs, int n, const void *next,
                                                               mha_prefetch_walk *w)
{
    values(MHA_KV_INT8, 1, rows->e, rows->e_ld, rows->nq, v, vs, n, rows->dk, rows->p, rows->ps, next, w);
}

/* ---- bf16 decode tiles, even first: the float32 tiles on widened elements ---- */

/* The sums under DAZ and FTZ, as fma-bf16 sums (scale 1: a sum times one is itself), then the
 * padding's + 0 and the scale in the caller's mode. */
__attribute__((target(AVX512))) void mha_fma_scores16_avx512(const float *restrict q, int nq, int dk, int runs,
                                                             const void *const *kt, const void *const *vr, const int *n,
                                                             int ld, float scale, float *restrict sc, size_t sc_ld)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    scores(MHA_KV_BF16, 0, q, nq, dk, 0, dk, 0, runs, kt, vr, NULL, n, ld, 1.0f, sc, sc_ld);
    _mm_setcsr(csr);
    mha_scores16_finish(sc, sc_ld, nq, runs, n, dk, scale);
}

/* Run by run (the sums carried through p, exactly), under DAZ and FTZ; then the key padding's
 * + 0. The next run's rows prefetched as the float32 values prefetch them. */
__attribute__((target(AVX512))) void mha_fma_values16_avx512(const float *e, size_t e_ld, int nq, int runs,
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
