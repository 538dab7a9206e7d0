/* avx2_decode.c — the avx2 table's decode tiles: float32 FMA chains on a float32 cache, on an
 * int8 cache's elements scaled as they load (and its blocks read back as float32), and on bf16
 * or int8 elements widened (the bf16 decode, even first); the scores of a few queries against
 * K's rows (rows_scores, rows_scores16) and integer scores on an int8 cache's codes
 * (int8_scores, the avx512 table's fallback). */
#include <immintrin.h>
#include <string.h>

#include "avx2.h"
#include "kvcache.h"
#include "loops.h"

/* int8 cache elements to float32, 8 at a time; a tail through a padded copy. */
__attribute__((target(AVX2))) static __m256 i8_load8(const int8_t *src, int n)
{
    int64_t bytes = 0;
    memcpy(&bytes, src, (size_t)(n < 8 ? n : 8));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes)));
}

__attribute__((target(AVX2))) void mha_i8_scale_rows_avx2(const void *from, size_t ld_src, int rows, int n,
                                                          const float *row_scales, const float *row_zeros,
                                                          float *restrict dst, size_t ld_dst)
{
    const int8_t *src = from;
    for (int r = 0; r < rows; r++, src += ld_src, dst += ld_dst) {
        const __m256 rs = _mm256_set1_ps(row_scales[r]), rz = _mm256_set1_ps(row_zeros ? row_zeros[r] : 0.0f);
        for (int t = 0; t < n; t += 8) {
            const __m256 x = _mm256_mul_ps(i8_load8(src + t, n - t), rs);
            store8_n(dst + t, n - t, row_zeros ? _mm256_add_ps(x, rz) : x);
        }
    }
}

/* ---- decode tiles: float32, and bf16 or int8 widened in registers ---- */

/* n elements (1..8) of a cache row at x as float32 lanes, lanes from n on zero: float32 as it
 * is, bf16 widened (a shift), int8 converted (exact); a short bf16 or int8 run through a
 * zeroed copy (no read past it). */
static inline __attribute__((always_inline, target(AVX2))) __m256 load_elems(const mha_kv_type type, const char *x,
                                                                            int n)
{
    if (type == MHA_KV_F32)
        return load8_n((const float *)(const void *)x, n);
    __m128i raw;
    if (n >= 8)
        raw = type == MHA_KV_BF16 ? _mm_loadu_si128((const __m128i *)(const void *)x) : _mm_loadl_epi64((const __m128i *)(const void *)x);
    else {
        _Alignas(16) char tmp[16] = {0};
        memcpy(tmp, x, (size_t)n * mha_kv_elem_size(type));
        raw = _mm_load_si128((const __m128i *)(const void *)tmp);
    }
    if (type == MHA_KV_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
}

enum { PAR_FEATURES = 32 };

/* n <= PAR_FEATURES float16 values at h as float32 into d (exact). */
static inline __attribute__((always_inline, target(AVX2))) void params_f32(const mha_f16 *h, int n, float *d)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_store_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
    for (; i < n; i++)
        d[i] = _cvtsh_ss(h[i]);
}

/* Scores of nb <= R queries for nv <= V slot vectors (of any blocks), R · V <= 8
 * accumulators, each score one FMA chain over the features [c0, c1) from zero, then scale ·
 * sum (+ sc when c0 > 0): the microkernel's sums. One Kᵀ row load per feature and vector for
 * all queries; the next tile's vectors (pf, npf of them; else this tile's again) prefetched
 * row by row as it goes. full: nb = R, nv = V and every vector 8 slots wide, so no lane or
 * row is tested in the loop (the accumulators stay in registers). */
static inline __attribute__((always_inline, target(AVX2))) void
scores_tile(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *restrict q,
            int nb, int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv, const mha_slot_vec *pf, int npf,
            int ld, float scale, float *restrict sc, size_t sc_ld)
{
    if (full)
        nb = R, nv = V;
    const mha_f16 *kp[8]; /* scaled (int8 K): each vector's group parameters, float16 */
    for (int j = 0; j < V; j++)
        kp[j] = scaled && j < nv ? v[j].kp : NULL;
    const char *pfp[8];
    for (int j = 0; j < V; j++)
        pfp[j] = j < npf ? pf[j].kt : v[j < nv ? j : 0].kt;
    /* the vectors' value rows (when given): a line each feature from the first, till done */
    size_t vbytes[8];
    for (int j = 0; j < V; j++)
        vbytes[j] = j < nv && v[j].v ? (size_t)(full ? 8 : v[j].lanes) * (size_t)dk * mha_kv_elem_size(type) : 0;
    __m256 acc[8];
    for (int i = 0; i < R * V; i++)
        acc[i] = _mm256_setzero_ps();
    /* scaled: each vector's parameters of PAR_FEATURES features as float32 before their
     * features' FMAs (as the avx512 tiles do), so a feature broadcasts them from memory:
     * converting a float16 there took three operations a parameter and vector */
    _Alignas(32) float par[8][2][PAR_FEATURES];
    for (int cb = c0; cb < c1; cb += PAR_FEATURES) {
        const int ce = c1 - cb < PAR_FEATURES ? c1 : cb + PAR_FEATURES;
        for (int j = 0; scaled && j < nv; j++)
            params_f32(kp[j] + cb, ce - cb, par[j][0]), params_f32(kp[j] + dk + cb, ce - cb, par[j][1]);
        for (int c = cb; c < ce; c++) {
            const size_t at = (size_t)c * ld * mha_kv_elem_size(type), line = (size_t)(c - c0) * 64;
            __m256 krow[8];
            for (int j = 0; j < V; j++) {
                if (line < vbytes[j])
                    _mm_prefetch(v[j].v + line, _MM_HINT_T0);
                _mm_prefetch(pfp[j] + at, _MM_HINT_T0);
                krow[j] = j >= nv ? _mm256_setzero_ps() : load_elems(type, v[j].kt + at, full ? 8 : v[j].lanes);
                if (scaled && j < nv) /* q·scale + zero, scale_rows' value */
                    krow[j] = _mm256_add_ps(_mm256_mul_ps(krow[j], _mm256_broadcast_ss(&par[j][0][c - cb])),
                                            _mm256_broadcast_ss(&par[j][1][c - cb]));
            }
            for (int r = 0; r < R; r++)
                if (r < nb) {
                    const __m256 x = _mm256_set1_ps(q[(size_t)r * dk + c]);
                    for (int j = 0; j < V; j++)
                        acc[r * V + j] = _mm256_fmadd_ps(x, krow[j], acc[r * V + j]);
                }
        }
    }
#pragma GCC unroll 8 /* constant indices: a loop over acc would keep it in memory, stored every feature */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r >= nb || j >= nv)
                continue;
            float *y = sc + (size_t)r * sc_ld + v[j].out;
            __m256 x = _mm256_mul_ps(acc[r * V + j], _mm256_set1_ps(scale));
            if (c0 > 0) /* the sub-config's beta 1: scale·sum rounded first, or in one rounding */
                x = fused ? _mm256_fmadd_ps(acc[r * V + j], _mm256_set1_ps(scale), load8_n(y, v[j].lanes))
                          : _mm256_add_ps(x, load8_n(y, v[j].lanes));
            store8_n(y, v[j].lanes, x);
        }
}

/* R queries × V slot vectors over the vector list, each tile prefetching the next where ahead. */
static inline __attribute__((always_inline, target(AVX2))) void
scores_tiles(const mha_kv_type type, const int scaled, const int R, const int V, const float *restrict q, int nb,
             int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv, int ld, float scale, float *restrict sc,
             size_t sc_ld, int ahead)
{
    ahead = ahead && mha_scores_fit_l1(c1 - c0, V, 8 * mha_kv_elem_size(type));
    if (type != MHA_KV_F32 && ahead) /* the first tile's Kᵀ: nothing prefetched it */
        for (int j = 0; j < V && j < nv; j++)
            for (size_t off = 0; off < (size_t)(c1 - c0) * ld * mha_kv_elem_size(type); off += 64)
                _mm_prefetch(v[j].kt + (size_t)c0 * ld * mha_kv_elem_size(type) + off, _MM_HINT_T0);
    mha_scores_walk(type, scaled, R, V, 8, q, nb, dk, c0, c1, fused, v, nv, ld, scale, sc, sc_ld, ahead, scores_tile);
}

/* Slot vectors of 8 from every block of the chunk: 1 query × 8 vectors, 2 × 4, up to 4 × 2,
 * more 8 × 1 at a time (8 independent chains). */
static inline __attribute__((always_inline, target(AVX2))) void
scores(const mha_kv_type type, const int scaled, const float *restrict q, int nq, int dk, int c0, int c1, int fused,
       int runs, const void *const *kt, const void *const *vr, const mha_f16 *const *kp, const int *n, int ld,
       float scale, float *restrict sc, size_t sc_ld)
{
    mha_slot_vec v[MHA_KV_CHUNK];
    const int nv = mha_slot_vecs(runs, kt, vr, (size_t)dk * mha_kv_elem_size(type), kp, dk, n, 8, mha_kv_elem_size(type), v);
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *qq = q + (size_t)q0 * dk;
        float *sq = sc + (size_t)q0 * sc_ld;
        if (nb == 1)
            scores_tiles(type, scaled, 1, 8, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb == 2)
            scores_tiles(type, scaled, 2, 4, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4)
            scores_tiles(type, scaled, 4, 2, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else
            scores_tiles(type, scaled, 8, 1, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
    }
}

/* rows_scores from 4 queries on (and rows_scores16): four queries as the lanes of an xmm
 * register (their features transposed into qt, 4 a feature), J keys a tile, each key's
 * feature broadcast: J accumulators, one FMA chain per score in feature order (Zen 1 runs two
 * 128-bit FMAs a cycle, the 256-bit rate, and nothing is transposed but the queries); swap:
 * in the order c ^ 1, each pair's odd feature first (dk even). The next tile's rows
 * prefetched a line a row every 16 features, and (v) this tile's value rows (rows t on of v)
 * into L2 as often. */
enum { ROWS_KEYS = 12 };

static inline __attribute__((always_inline, target(AVX2))) void keys_tile(const int J, const int swap,
                                                                         const float *restrict qt, int dk,
                                                                         const float *restrict k, ptrdiff_t ld, int nq,
                                                                         float scale, float *restrict sc, size_t sc_ld,
                                                                         const mha_rows_ahead *v, int t)
{
    __m128 acc[ROWS_KEYS];
    for (int u = 0; u < J; u++)
        acc[u] = _mm_setzero_ps();
    for (int c = 0; c < dk; c++) {
        if (c % 16 == 0) {
            const size_t line = (size_t)c / 16 * 64;
            for (int u = 0; u < J; u++) {
                _mm_prefetch((const char *)(k + (ptrdiff_t)(J + u) * ld + c), _MM_HINT_T0);
                if (v && line < v->bytes)
                    _mm_prefetch(v->at + (size_t)(t + u) * v->ld + line, _MM_HINT_T1);
            }
        }
        const __m128 qc = _mm_load_ps(qt + 4 * c);
        for (int u = 0; u < J; u++)
            acc[u] = _mm_fmadd_ps(qc, _mm_broadcast_ss(k + (ptrdiff_t)u * ld + (c ^ swap)), acc[u]);
    }
    _Alignas(16) float out[ROWS_KEYS][4];
    for (int u = 0; u < J; u++)
        _mm_store_ps(out[u], _mm_mul_ps(acc[u], _mm_set1_ps(scale)));
    for (int r = 0; r < nq; r++)
        for (int u = 0; u < J; u++)
            sc[(size_t)r * sc_ld + u] = out[u][r];
}

static inline __attribute__((always_inline, target(AVX2))) void rows_scores_as(const int swap, const float *restrict q,
                                                                              int nq, int dk, const float *restrict k,
                                                                              ptrdiff_t ld, int n, float scale,
                                                                              float *restrict sc, size_t sc_ld,
                                                                              const mha_rows_ahead *v)
{
    _Alignas(16) float qt[4 * MHA_ROWS_SCORES_DK];
    for (int r0 = 0; r0 < nq; r0 += 4) {
        const int nr = nq - r0 < 4 ? nq - r0 : 4;
        for (int c = 0; c < dk; c++) /* lanes past the last query: zeros, their scores unstored */
            for (int r = 0; r < 4; r++)
                qt[4 * c + r] = r < nr ? q[(size_t)(r0 + r) * dk + (c ^ swap)] : 0.0f;
        float *s = sc + (size_t)r0 * sc_ld;
        int t = 0;
        const mha_rows_ahead *pv = v && v->at && r0 == 0 ? v : NULL; /* the first pass prefetches */
        for (; t + ROWS_KEYS <= n; t += ROWS_KEYS)
            keys_tile(ROWS_KEYS, swap, qt, dk, k + (ptrdiff_t)t * ld, ld, nr, scale, s + t, sc_ld, pv, t);
        for (; t + 4 <= n; t += 4)
            keys_tile(4, swap, qt, dk, k + (ptrdiff_t)t * ld, ld, nr, scale, s + t, sc_ld, pv, t);
        for (; t < n; t++)
            keys_tile(1, swap, qt, dk, k + (ptrdiff_t)t * ld, ld, nr, scale, s + t, sc_ld, pv, t);
    }
}

/* Fewer than 4 queries (a KV head of 1 to 3, one query each) would leave the lanes of queries
 * mostly empty: 8 keys are the lanes of a ymm register instead, their rows' features [c, c + nc)
 * loaded and transposed in registers, each query's feature broadcast: the same FMA chains.
 * The next 8 keys' rows prefetched a line a row every 16 features, and (v) these keys' value
 * rows into L2 as often. */
static inline __attribute__((always_inline, target(AVX2))) void
lanes_features(const int R, const int nc, const float *restrict q, int dk, int c, const float *restrict k,
               ptrdiff_t ld, int nt, const mha_rows_ahead *v, int t, __m256 *acc)
{
    const size_t line = (size_t)c / 16 * 64;
    __m256 x[8];
    for (int u = 0; u < 8; u++) {
        x[u] = u < nt ? load8_n(k + (ptrdiff_t)u * ld + c, nc) : _mm256_setzero_ps();
        if (c % 16 == 0) {
            _mm_prefetch((const char *)(k + (ptrdiff_t)(8 + u) * ld + c), _MM_HINT_T0); /* a hint: never faults */
            if (v && u < nt && line < v->bytes)
                _mm_prefetch(v->at + (size_t)(t + u) * v->ld + line, _MM_HINT_T1);
        }
    }
    transpose8(x);
    for (int u = 0; u < nc; u++)
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(q[(size_t)r * dk + c + u]), x[u], acc[r]);
}

static inline __attribute__((always_inline, target(AVX2))) void
lanes_tile(const int R, const float *restrict q, int dk, const float *restrict k, ptrdiff_t ld, int nt, float scale,
           float *restrict sc, size_t sc_ld, const mha_rows_ahead *v, int t)
{
    __m256 acc[3];
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= dk; c += 8)
        lanes_features(R, 8, q, dk, c, k, ld, nt, v, t, acc);
    if (c < dk)
        lanes_features(R, dk - c, q, dk, c, k, ld, nt, v, t, acc);
    for (int r = 0; r < R; r++)
        store8_n(sc + (size_t)r * sc_ld, nt, _mm256_mul_ps(acc[r], _mm256_set1_ps(scale)));
}

__attribute__((target(AVX2))) void mha_rows_scores_avx2(const mha_score_rows *s, const mha_key_rows *k)
{
    if (s->nq >= 4) {
        rows_scores_as(0, s->q, s->nq, s->dk, k->k, k->ld, k->n, s->scale, s->sc, s->sc_ld, k->v);
        return;
    }
    const mha_rows_ahead *v = k->v && k->v->at ? k->v : NULL;
    for (int t = 0; t < k->n; t += 8) {
        const int nt = k->n - t < 8 ? k->n - t : 8;
        const float *kr = k->k + (ptrdiff_t)t * k->ld;
        if (s->nq == 1)
            lanes_tile(1, s->q, s->dk, kr, k->ld, nt, s->scale, s->sc + t, s->sc_ld, v, t);
        else if (s->nq == 2)
            lanes_tile(2, s->q, s->dk, kr, k->ld, nt, s->scale, s->sc + t, s->sc_ld, v, t);
        else
            lanes_tile(3, s->q, s->dk, kr, k->ld, nt, s->scale, s->sc + t, s->sc_ld, v, t);
    }
}

/* Under DAZ and FTZ with scale 1, as decode_scores16 sums (a sum times one is itself), then
 * its finish in the caller's mode. */
__attribute__((target(AVX2))) void mha_rows_scores16_avx2(const mha_score_rows *s, const mha_key_rows *k,
                                                          mha_bk_order order)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    if (order == MHA_BK_ODD_FIRST)
        rows_scores_as(1, s->q, s->nq, s->dk, k->k, k->ld, k->n, 1.0f, s->sc, s->sc_ld, k->v);
    else
        rows_scores_as(0, s->q, s->nq, s->dk, k->k, k->ld, k->n, 1.0f, s->sc, s->sc_ld, k->v);
    _mm_setcsr(csr);
    mha_scores16_finish(s->sc, s->sc_ld, s->nq, 1, &k->n, s->dk, s->scale);
}

__attribute__((target(AVX2))) void mha_decode_scores_avx2(const mha_score_rows *s, int c0, int c1,
                                                          const mha_key_runs *k)
{
    scores(MHA_KV_F32, 0, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->vr, NULL, k->n, k->ld, s->scale,
           s->sc, s->sc_ld);
}

__attribute__((target(AVX2))) void mha_decode_scores8_avx2(const mha_score_rows *s, int c0, int c1,
                                                           const mha_key_runs *k)
{
    scores(MHA_KV_INT8, 1, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->vr, k->kp, k->n, k->ld,
           s->scale, s->sc, s->sc_ld);
}

/* The sums under FTZ, as the bf16 kernels run (scale 1: a sum times one is itself), then
 * the padding's + 0 and the scale in the caller's mode. */
__attribute__((target(AVX2))) void mha_decode_scores16_avx2(const mha_score_rows *s, const mha_key_runs *k,
                                                           mha_bk_order order)
{
    (void)order; /* even first only */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    scores(MHA_KV_BF16, 0, s->q, s->nq, s->dk, 0, s->dk, 0, k->runs, k->kt, k->vr, NULL, k->n, k->ld, 1.0f, s->sc,
           s->sc_ld);
    _mm_setcsr(csr);
    mha_scores16_finish(s->sc, s->sc_ld, s->nq, k->runs, k->n, s->dk, s->scale);
}

/* Z of nb <= R queries, features [c0, c0 + 8·V) (the last vector's first nl lanes), over the
 * value rows of `runs` runs (run r: n[r] rows at v[r]; its probabilities follow the previous
 * runs' in e), with R · V <= 8 accumulators, key by key in order (an FMA per key and feature:
 * the microkernel's A·V sums); the next run's rows (the last run: next's, or none) prefetched
 * row by row as it goes, and a step of the walk w (or NULL) a key. full: nb = R and nl = 8
 * (nothing tested in the loop). scaled: key
 * t's row times vs[2t] plus vs[2t + 1] as it is loaded (an int8 cache's scale and zero point,
 * each rounded: scale_rows' values). */
static inline __attribute__((always_inline, target(AVX2))) void
values_tile_as(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *e,
               size_t e_ld, int nb, int runs, const void *const *v, const float *vs, const int *n, const void *next,
               int dk, int c0, int nl, float *p, size_t ps, mha_prefetch_walk *w)
{
    if (full)
        nb = R, nl = 8;
    const size_t esz = mha_kv_elem_size(type), row = (size_t)dk * esz;
    const size_t pf0 = (size_t)c0 * esz, pf1 = (size_t)(c0 + 8 * V < dk ? c0 + 8 * V : dk) * esz;
    __m256 acc[8];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < V; j++) {
            const float *y = p + (size_t)(r < nb ? r : 0) * ps + c0 + 8 * j;
            acc[r * V + j] = load8_n(y, j == V - 1 ? nl : 8);
        }
    mha_prefetch_walk wl = w ? *w : (mha_prefetch_walk){0}; /* in registers while the tile runs */
    for (int u = 0, t0 = 0; u < runs; t0 += n[u++]) {
        const char *vu = (const char *)v[u] + (size_t)c0 * esz, *nx = u + 1 < runs ? v[u + 1] : next;
        const float *eu = e + t0;
        for (int t = 0; t < n[u]; t++) {
            if (nx)
                for (size_t off = pf0; off < pf1; off += 64)
                    _mm_prefetch(nx + (size_t)t * row + off, _MM_HINT_T0);
            if (w)
                mha_prefetch_step(&wl);
            __m256 b[4];
            const __m256 s = scaled ? _mm256_set1_ps(vs[2 * (t0 + t)]) : _mm256_setzero_ps();
            const __m256 z = scaled ? _mm256_set1_ps(vs[2 * (t0 + t) + 1]) : _mm256_setzero_ps();
            for (int j = 0; j < V; j++) {
                b[j] = load_elems(type, vu + (size_t)t * row + (size_t)(8 * j) * esz, j == V - 1 ? nl : 8);
                b[j] = scaled ? _mm256_add_ps(_mm256_mul_ps(b[j], s), z) : b[j];
            }
            for (int r = 0; r < R; r++)
                if (r < nb) {
                    const __m256 x = _mm256_set1_ps(eu[(size_t)r * e_ld + t]);
                    for (int j = 0; j < V; j++)
                        acc[r * V + j] = _mm256_fmadd_ps(x, b[j], acc[r * V + j]);
                }
        }
    }
#pragma GCC unroll 8 /* as scores_tile's */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r < nb)
                store8_n(p + (size_t)r * ps + c0 + 8 * j, j == V - 1 ? nl : 8, acc[r * V + j]);
        }
    if (w)
        *w = wl;
}

static inline __attribute__((always_inline, target(AVX2))) void
values_tile(const mha_kv_type type, const int scaled, const int R, const int V, const float *e, size_t e_ld, int nb,
            int runs, const void *const *v, const float *vs, const int *n, const void *next, int dk, int c0, int nl,
            float *p, size_t ps, mha_prefetch_walk *w)
{
    if (nb == R && nl == 8)
        values_tile_as(type, scaled, R, V, 1, e, e_ld, nb, runs, v, vs, n, next, dk, c0, nl, p, ps, w);
    else
        values_tile_as(type, scaled, R, V, 0, e, e_ld, nb, runs, v, vs, n, next, dk, c0, nl, p, ps, w);
}

/* Register tiles of up to 2 queries × 32 features, 4 × 16 or 8 × 8, 8 features the last pass,
 * each over every run. */
static inline __attribute__((always_inline, target(AVX2))) void
values(const mha_kv_type type, const int scaled, const float *e, size_t e_ld, int nq, int runs, const void *const *v,
       const float *vs, const int *n, const void *next, int dk, float *p, size_t ps, mha_prefetch_walk *w)
{
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *eq = e + (size_t)q0 * e_ld;
        float *pq = p + (size_t)q0 * ps;
        const void *pf = q0 == 0 ? next : NULL;
        for (int c0 = 0; c0 < dk;) {
            const int left = dk - c0;
            if (nb <= 2 && left >= 32)
                values_tile(type, scaled, 2, 4, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 8, pq, ps, w), c0 += 32;
            else if (nb <= 4 && left >= 16)
                values_tile(type, scaled, 4, 2, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 8, pq, ps, w), c0 += 16;
            else
                values_tile(type, scaled, 8, 1, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, left < 8 ? left : 8, pq, ps,
                            w), c0 += 8;
        }
    }
}

__attribute__((target(AVX2))) void mha_decode_values_avx2(const mha_value_rows *rows, const void *v, const float *vs,
                                                          int n, const void *next, mha_prefetch_walk *w)
{
    (void)vs; /* unscaled */
    const void *vr[1] = {v};
    values(MHA_KV_F32, 0, rows->e, rows->e_ld, rows->nq, 1, vr, NULL, &n, next, rows->dk, rows->p, rows->ps, w);
}

__attribute__((target(AVX2))) void mha_decode_values8_avx2(const mha_value_rows *rows, const void *v, const float *vs,
                                                           int n, const void *next, mha_prefetch_walk *w)
{
    const void *vr[1] = {v};
    values(MHA_KV_INT8, 1, rows->e, rows->e_ld, rows->nq, 1, vr, vs, &n, next, rows->dk, rows->p, rows->ps, w);
}

/* Under FTZ, as the bf16 kernels sum; then the key padding's + 0. */
__attribute__((target(AVX2))) void mha_decode_values16_avx2(const mha_value_rows *rows, int runs, const void *const *v,
                                                            const int *n, mha_kv_type type, const mha_prefetch *pf,
                                                            mha_bk_order order)
{
    const float *e = rows->e;
    const size_t e_ld = rows->e_ld, ps = rows->ps;
    const int nq = rows->nq, dk = rows->dk;
    float *p = rows->p;
    (void)pf, (void)order; /* even first only */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | DAZ_FTZ);
    if (type == MHA_KV_INT8)
        values(MHA_KV_INT8, 0, e, e_ld, nq, runs, v, NULL, n, NULL, dk, p, ps, NULL);
    else
        values(MHA_KV_BF16, 0, e, e_ld, nq, runs, v, NULL, n, NULL, dk, p, ps, NULL);
    _mm_setcsr(csr);
    int keys = 0;
    for (int r = 0; r < runs; r++)
        keys += n[r];
    mha_values16_finish(p, ps, nq, keys, dk);
}

/* ---- int8_scores (isa.h): K's codes against int16 queries, exact int32 sums ---- */

/* The largest lane of m (the lanes' maxps order: halves, then pairs, then the two left). */
static inline __attribute__((always_inline, target(AVX2))) float max8(__m256 m)
{
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
}

/* A group's pass [p0, p0 + np) (np <= MHA_INT8_PASS): its scales over their largest |scale|
 * into sr and its zero points into z, as float32, zeros past np up to whole 16s; returns the
 * largest |scale| (NaN where a scale is NaN). */
static inline __attribute__((always_inline, target(AVX2))) float group_params(const mha_f16 *par, int dk, int np,
                                                                             float *restrict sr, float *restrict z)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int c = 0; c < np; c += 8) {
        __m256 s, zz;
        if (np - c >= 8) {
            s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(par + c)));
            zz = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(par + dk + c)));
        } else {
            _Alignas(16) mha_f16 hs[8] = {0}, hz[8] = {0};
            memcpy(hs, par + c, (size_t)(np - c) * sizeof *hs), memcpy(hz, par + dk + c, (size_t)(np - c) * sizeof *hz);
            s = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)hs));
            zz = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)hz));
        }
        _mm256_store_ps(sr + c, s), _mm256_store_ps(z + c, zz);
        m = _mm256_max_ps(m, _mm256_and_ps(s, absm));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(s, s, _CMP_UNORD_Q));
    }
    for (int c = (np + 7) / 8 * 8; c % 16; c += 8)
        _mm256_store_ps(sr + c, _mm256_setzero_ps()), _mm256_store_ps(z + c, _mm256_setzero_ps());
    const float ms = max8(m);
    const __m256 rs = _mm256_set1_ps(ms > 0.0f ? 1.0f / ms : 0.0f);
    for (int c = 0; c < np; c += 8)
        _mm256_store_ps(sr + c, _mm256_mul_ps(_mm256_load_ps(sr + c), rs));
    return _mm256_movemask_ps(nan) ? NAN : ms;
}

/* One query's u over the pass (qr: its features times 32767 / mq, qz: the features, each
 * zero past the pass up to whole 16s) into u, and its zero points' sum: 16 chains (two
 * vectors), then halves added. */
static inline __attribute__((always_inline, target(AVX2))) float query_u(const float *restrict qr,
                                                                        const float *restrict qz,
                                                                        const float *restrict sr,
                                                                        const float *restrict z, int np,
                                                                        int16_t *restrict u)
{
    __m256 z0 = _mm256_setzero_ps(), z1 = _mm256_setzero_ps();
    for (int c = 0; c < np; c += 16) {
        const __m256 a = _mm256_mul_ps(_mm256_load_ps(qr + c), _mm256_load_ps(sr + c));
        const __m256 b = _mm256_mul_ps(_mm256_load_ps(qr + c + 8), _mm256_load_ps(sr + c + 8));
        const __m256i w = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b)); /* NaN: −32768 */
        _mm256_store_si256((__m256i *)(void *)(u + c), _mm256_permute4x64_epi64(w, 0xd8)); /* features in order */
        z0 = _mm256_fmadd_ps(_mm256_load_ps(qz + c), _mm256_load_ps(z + c), z0);
        z1 = _mm256_fmadd_ps(_mm256_load_ps(qz + c + 8), _mm256_load_ps(z + c + 8), z1);
    }
    const __m256 s8 = _mm256_add_ps(z0, z1);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1)));
}

/* R <= 4 queries' exact sums against one group's slots over a pass of np
 * features: rows c and c + 1 of Kᵀ (k, rows ld apart, 16 codes each) widened and interleaved,
 * one vpmaddwd a query and pair against its u pair; then each live query's value fma(step,
 * isum, zsum) into y (16 slots, in order). pk: the next group's Kᵀ (NULL: none) and pv (bytes
 * pvb): this group's value rows, a line of each prefetched a pair. */
static inline __attribute__((always_inline, target(AVX2))) void
group_sums(const int R, const int8_t *k, size_t ld, int np, const int16_t (*u)[MHA_INT8_PASS], const float *step,
           const float *zsum, const int8_t *pk, const char *pv, size_t pvb, float (*y)[MHA_KV_GROUP])
{
    /* named accumulators: GCC spilled two of an array's eight across the pair loop */
    __m256i a0 = _mm256_setzero_si256(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
    /* the prefetches without a test in the loop: no next group, no value rows: k's own lines */
    const char *ahead = pk ? (const char *)pk : (const char *)k, *rows = pvb ? pv : (const char *)k;
    const size_t rows_end = pvb ? pvb - 1 : 0;
    const int32_t *u0 = (const int32_t *)(const void *)u[0], *u1 = (const int32_t *)(const void *)u[R > 1];
    const int32_t *u2 = (const int32_t *)(const void *)u[R > 2 ? 2 : 0];
    const int32_t *u3 = (const int32_t *)(const void *)u[R > 3 ? 3 : 0];
/* rows c and c + 1 widened (w0, w1) into every query's sums: slots 0-3 8-11 (lo), 4-7 12-15 (hi) */
#define PAIR_SUMS(w0, w1)                                                                                              \
    do {                                                                                                               \
        const __m256i lo = _mm256_unpacklo_epi16(w0, w1), hi = _mm256_unpackhi_epi16(w0, w1);                          \
        __m256i x = _mm256_set1_epi32(u0[c / 2]);                                                                      \
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(lo, x)), b0 = _mm256_add_epi32(b0, _mm256_madd_epi16(hi, x));      \
        if (R > 1)                                                                                                     \
            x = _mm256_set1_epi32(u1[c / 2]), a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(lo, x)),                     \
            b1 = _mm256_add_epi32(b1, _mm256_madd_epi16(hi, x));                                                       \
        if (R > 2)                                                                                                     \
            x = _mm256_set1_epi32(u2[c / 2]), a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(lo, x)),                     \
            b2 = _mm256_add_epi32(b2, _mm256_madd_epi16(hi, x));                                                       \
        if (R > 3)                                                                                                     \
            x = _mm256_set1_epi32(u3[c / 2]), a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(lo, x)),                     \
            b3 = _mm256_add_epi32(b3, _mm256_madd_epi16(hi, x));                                                       \
    } while (0)
    int c = 0;
    for (; c + 1 < np; c += 2) {
        const size_t line = (size_t)c * 32;
        _mm_prefetch(ahead + (size_t)c * ld, _MM_HINT_T0);
        _mm_prefetch(rows + (line < rows_end ? line : rows_end), _MM_HINT_T0);
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + (size_t)c * ld)));
        const __m256i w1 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + (size_t)(c + 1) * ld)));
        PAIR_SUMS(w0, w1);
    }
    if (c < np) { /* an odd pass's last feature, paired with zeros */
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + (size_t)c * ld)));
        PAIR_SUMS(w0, _mm256_setzero_si256());
    }
#undef PAIR_SUMS
    const __m256i acc[4][2] = {{a0, b0}, {a1, b1}, {a2, b2}, {a3, b3}};
#pragma GCC unroll 4
    for (int qi = 0; qi < R; qi++) {
        const __m256 d = _mm256_set1_ps(step[qi]), zs = _mm256_set1_ps(zsum[qi]);
        const __m256i x0 = _mm256_permute2x128_si256(acc[qi][0], acc[qi][1], 0x20);
        const __m256i x1 = _mm256_permute2x128_si256(acc[qi][0], acc[qi][1], 0x31);
        _mm256_store_ps(y[qi], _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(x0), zs));
        _mm256_store_ps(y[qi] + 8, _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(x1), zs));
    }
}

/* R <= 4 queries (q rows dk apart) over every group of the runs, pass by pass. */
static inline __attribute__((always_inline, target(AVX2))) void
int8_scores_block(const int R, const float *q, int dk, float scale, const mha_key_runs *k, float *sc,
                  size_t sc_ld, int first)
{
    _Alignas(32) float qr[4][MHA_INT8_PASS], qz[4][MHA_INT8_PASS], sr[MHA_INT8_PASS], z[MHA_INT8_PASS];
    _Alignas(32) float y[4][MHA_KV_GROUP];
    _Alignas(32) int16_t u[4][MHA_INT8_PASS];
    _Alignas(32) int8_t part[MHA_INT8_PASS][MHA_KV_GROUP]; /* a group of fewer slots, zero-padded */
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int p0 = 0; p0 < dk; p0 += MHA_INT8_PASS) {
        const int np = dk - p0 < MHA_INT8_PASS ? dk - p0 : MHA_INT8_PASS, last = p0 + np == dk;
        float dq[4];
        for (int qi = 0; qi < R; qi++) { /* the queries times 32767 / max |q| */
            const float *qq = q + (size_t)qi * dk + p0;
            __m256 m = _mm256_setzero_ps();
            for (int c = 0; c < np; c += 8)
                m = _mm256_max_ps(m, _mm256_and_ps(load8_n(qq + c, np - c), absm));
            const float mq = max8(m);
            const __m256 rq = _mm256_set1_ps(mq > MHA_INT8_TINY ? 32767.0f / mq : 0.0f);
            dq[qi] = mq / 32767.0f;
            for (int c = 0; c < (np + 15) / 16 * 16; c += 8) {
                const __m256 x = c < np ? load8_n(qq + c, np - c) : _mm256_setzero_ps();
                _mm256_store_ps(qz[qi] + c, x), _mm256_store_ps(qr[qi] + c, _mm256_mul_ps(x, rq));
            }
        }
        for (int r = 0, at = 0; r < k->runs; at += k->n[r++])
            for (int g0 = 0; g0 < k->n[r]; g0 += MHA_KV_GROUP) {
                const mha_int8_group gr = mha_int8_group_at(k, r, g0, p0, dk, first);
                const int slots = gr.slots;
                const int8_t *kg = gr.kt;
                size_t ld = (size_t)k->ld;
                if (slots < MHA_KV_GROUP) { /* no read past the group's codes */
                    for (int c = 0; c < np; c++) {
                        memset(part[c], 0, sizeof part[c]);
                        memcpy(part[c], kg + (size_t)c * ld, (size_t)slots);
                    }
                    kg = &part[0][0], ld = MHA_KV_GROUP;
                }
                const float ms = group_params(gr.par, dk, np, sr, z);
                float step[4], zsum[4];
                for (int qi = 0; qi < R; qi++) {
                    zsum[qi] = query_u(qr[qi], qz[qi], sr, z, np, u[qi]);
                    step[qi] = dq[qi] * ms;
                }
                group_sums(R, kg, ld, np, (const int16_t (*)[MHA_INT8_PASS])u, step, zsum, gr.next, gr.vr,
                           gr.vr ? (size_t)slots * (size_t)dk : 0, y);
                for (int qi = 0; qi < R; qi++) /* a pass's value, added to the passes' before */
                    for (int h = 0; h < slots; h += 8) {
                        float *out = sc + (size_t)qi * sc_ld + at + g0 + h;
                        __m256 v = _mm256_load_ps(y[qi] + h);
                        v = p0 == 0 ? v : _mm256_add_ps(load8_n(out, slots - h), v);
                        store8_n(out, slots - h, last ? _mm256_mul_ps(v, _mm256_set1_ps(scale)) : v);
                    }
            }
    }
}

static __attribute__((target(AVX2))) void int8_scores_avx2(const mha_score_rows *s, const mha_key_runs *k)
{
    for (int q0 = 0; q0 < s->nq; q0 += 4) {
        const int nb = s->nq - q0 < 4 ? s->nq - q0 : 4;
        const float *q = s->q + (size_t)q0 * s->dk;
        float *sc = s->sc + (size_t)q0 * s->sc_ld;
        if (nb == 4) /* R constant in each: the accumulators in registers */
            int8_scores_block(4, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
        else if (nb == 3)
            int8_scores_block(3, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
        else if (nb == 2)
            int8_scores_block(2, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
        else
            int8_scores_block(1, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
    }
}

const mha_int8_scores_ops mha_int8_scores_avx2 = {.name = "avx2", .needs = "", .run = int8_scores_avx2};
