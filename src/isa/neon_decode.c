/* neon_decode.c — the neon table's decode tiles: float32 FMA chains on a float32 cache and on
 * an int8 cache's elements scaled as they load (and its blocks read back as float32), and the
 * scores of a few queries against K's rows (rows_scores). The sums are cortexa57's
 * microkernel's (BLIS's armv8a 8 × 12: one FMLA chain per element from zero, then alpha times
 * the sum), and generic's: Debian builds BLIS's reference kernel with FMA contraction, one chain
 * per element too. Four features (or keys) of a query are loaded at once and the FMAs take
 * them by lane (FMLA by element), as the microkernel does, so a query costs a load per four
 * FMAs of each vector rather than a broadcast per FMA. */
#include <arm_neon.h>
#include <string.h>

#include "kvcache.h"
#include "loops.h"
#include "neon.h"

void mha_i8_scale_rows_neon(const void *from, size_t ld_src, int rows, int n, const float *row_scales,
                            const float *row_zeros, float *restrict dst, size_t ld_dst)
{
    const int8_t *src = from;
    for (int r = 0; r < rows; r++, src += ld_src, dst += ld_dst) {
        const float32x4_t rs = vdupq_n_f32(row_scales[r]), rz = vdupq_n_f32(row_zeros ? row_zeros[r] : 0.0f);
        int t = 0;
        for (; t + 8 <= n; t += 8) { /* 8 bytes widened twice: two vectors */
            const int16x8_t h = vmovl_s8(vld1_s8(src + t));
            float32x4_t x0 = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), rs);
            float32x4_t x1 = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(h)), rs);
            if (row_zeros)
                x0 = vaddq_f32(x0, rz), x1 = vaddq_f32(x1, rz);
            vst1q_f32(dst + t, x0);
            vst1q_f32(dst + t + 4, x1);
        }
        for (; t < n; t += 4) {
            const float32x4_t x = vmulq_f32(i8_load4(src + t, n - t), rs);
            store4_n(dst + t, n - t, row_zeros ? vaddq_f32(x, rz) : x);
        }
    }
}

/* ---- decode tiles ---- */

/* n elements (1..4) of a cache row at x as float32 lanes, lanes from n on zero: float32 as it
 * is, bf16 and int8 converted (exact). */
static inline __attribute__((always_inline)) float32x4_t load_elems(const mha_kv_type type, const char *x, int n)
{
    if (type == MHA_KV_F32)
        return load4_n((const float *)(const void *)x, n);
    if (type == MHA_KV_BF16)
        return bf16_load4((const uint16_t *)(const void *)x, n);
    return i8_load4((const int8_t *)x, n);
}

/* A key's V vectors of features (at x, elements of `type`; the last vector's first nl lanes)
 * into b: float32 as loaded; int8 sixteen bytes (four vectors) a load where whole, widened
 * in steps (SXTL, SXTL2), then eight, then four: a load and a conversion per vector would
 * spend a DUP from a general register and two widenings on each. */
static inline __attribute__((always_inline)) void load_row(const mha_kv_type type, const char *x, const int V, int nl,
                                                           float32x4_t *b)
{
    int j = 0;
    if (type == MHA_KV_INT8) {
        const int8_t *p = (const int8_t *)x;
        for (; j + 4 < V || (j + 4 == V && nl == 4); j += 4) {
            const int8x16_t w = vld1q_s8(p + 4 * j);
            const int16x8_t lo = vmovl_s8(vget_low_s8(w)), hi = vmovl_high_s8(w);
            b[j] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
            b[j + 1] = vcvtq_f32_s32(vmovl_high_s16(lo));
            b[j + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
            b[j + 3] = vcvtq_f32_s32(vmovl_high_s16(hi));
        }
        for (; j + 2 < V || (j + 2 == V && nl == 4); j += 2) {
            const int16x8_t h = vmovl_s8(vld1_s8(p + 4 * j));
            b[j] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
            b[j + 1] = vcvtq_f32_s32(vmovl_high_s16(h));
        }
    }
    for (; j < V; j++)
        b[j] = load_elems(type, x + (size_t)(4 * j) * mha_kv_elem_size(type), j == V - 1 ? nl : 4);
}

/* Lane l of v in every lane (l a constant where it is inlined). */
static inline __attribute__((always_inline)) float32x4_t dup_lane(float32x4_t v, const int l)
{
    switch (l) {
    case 0:
        return vdupq_laneq_f32(v, 0);
    case 1:
        return vdupq_laneq_f32(v, 1);
    case 2:
        return vdupq_laneq_f32(v, 2);
    default:
        return vdupq_laneq_f32(v, 3);
    }
}

/* Four float16 at h as float32 (exact: FCVTL). */
static inline __attribute__((always_inline)) float32x4_t f16_load4(const mha_f16 *h)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* Most accumulators of a tile: 16 of the 32 registers, the rest for a tile's Kᵀ (or V) rows,
 * its queries' features (or probabilities) and an int8 cache's parameters. */
enum { TILE_ACC = 16, TILE_V = 8 };

/* Scores of nb <= R queries for nv <= V slot vectors (of any blocks; 4 slots a vector), R · V
 * <= 16 accumulators, each score one FMA chain over the features [c0, c1) from zero, then scale
 * · sum (+ sc when c0 > 0, in one rounding where fused: the microkernel's beta 1). Four
 * features a step: each query's four loaded once, each vector's Kᵀ rows loaded and scaled (int8
 * K: q·scale + zero, scale_rows' value, the parameters of the four features converted at once)
 * and multiplied into its R accumulators by lane, one feature after the other. The next tile's
 * vectors (pf, npf of them; else this tile's again) prefetched row by row as it goes, a line at
 * a time, and the vectors' value rows (when given) a line each feature from the first till done.
 * full: nb = R, nv = V and every vector 4 slots wide, so no lane or row is tested in the loop. */
static inline __attribute__((always_inline)) void
scores_tile(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *restrict q,
            int nb, int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv, const mha_slot_vec *pf, int npf,
            int ld, float scale, float *restrict sc, size_t sc_ld)
{
    if (full)
        nb = R, nv = V;
    const size_t esz = mha_kv_elem_size(type);
    const int per_line = (int)(64 / (4 * esz)); /* vectors of one run a line holds */
    const char *kt[TILE_V], *pfp[TILE_V];
    const mha_f16 *kp[TILE_V]; /* scaled (int8 K): each vector's group parameters */
    size_t vbytes[TILE_V];     /* its value rows' bytes to prefetch (0: none) */
    int lanes[TILE_V];
    for (int j = 0; j < V; j++) {
        const mha_slot_vec *x = &v[j < nv ? j : 0];
        kt[j] = x->kt, kp[j] = scaled ? x->kp : NULL, lanes[j] = full ? 4 : j < nv ? x->lanes : 0;
        pfp[j] = j < npf ? pf[j].kt : x->kt;
        vbytes[j] = j < nv && x->v ? (size_t)lanes[j] * (size_t)dk * esz : 0;
    }
    float32x4_t acc[TILE_ACC];
    for (int i = 0; i < R * V; i++)
        acc[i] = vdupq_n_f32(0.0f);
    int c = c0;
    for (; c + 4 <= c1; c += 4) {
        float32x4_t qv[8];
        for (int r = 0; r < R; r++)
            qv[r] = r < nb ? vld1q_f32(q + (size_t)r * dk + c) : vdupq_n_f32(0.0f);
        if (!scaled) /* feature by feature over the vectors: one feature's rows live at a time */
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                const size_t at = (size_t)(c + l) * ld * esz, line = (size_t)(c + l - c0) * 64;
                const int rows = full ? line < vbytes[0] : 1; /* a whole tile's vectors: alike */
#pragma GCC unroll 8
                for (int j = 0; j < V; j++) {
                    if (rows && (full || line < vbytes[j]))
                        __builtin_prefetch(v[j].v + line, 0, 3);
                    if (j % per_line == 0)
                        __builtin_prefetch(pfp[j] + at, 0, 3);
                    const float32x4_t k = j < nv ? load_elems(type, kt[j] + at, lanes[j]) : vdupq_n_f32(0.0f);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++)
                        if (r < nb)
                            acc[r * V + j] = fma_lane(acc[r * V + j], k, qv[r], l);
                }
            }
        else /* vector by vector, its four features' parameters converted at once */
#pragma GCC unroll 8
            for (int j = 0; j < V; j++) {
                float32x4_t ks = vdupq_n_f32(0.0f), kz = ks;
                if (j < nv)
                    ks = f16_load4(kp[j] + c), kz = f16_load4(kp[j] + dk + c);
#pragma GCC unroll 4
                for (int l = 0; l < 4; l++) {
                    const size_t at = (size_t)(c + l) * ld * esz, line = (size_t)(c + l - c0) * 64;
                    if (line < vbytes[j])
                        __builtin_prefetch(v[j].v + line, 0, 3);
                    if (j % per_line == 0)
                        __builtin_prefetch(pfp[j] + at, 0, 3);
                    float32x4_t k = j < nv ? load_elems(type, kt[j] + at, lanes[j]) : vdupq_n_f32(0.0f);
                    if (j < nv)
                        k = vaddq_f32(vmulq_f32(k, dup_lane(ks, l)), dup_lane(kz, l));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++)
                        if (r < nb)
                            acc[r * V + j] = fma_lane(acc[r * V + j], k, qv[r], l);
                }
            }
    }
    for (; c < c1; c++) { /* features past the last four, one at a time */
        const size_t at = (size_t)c * ld * esz;
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            float32x4_t k = j < nv ? load_elems(type, kt[j] + at, lanes[j]) : vdupq_n_f32(0.0f);
            if (scaled && j < nv)
                k = vaddq_f32(vmulq_n_f32(k, mha_f16_float(kp[j][c])), vdupq_n_f32(mha_f16_float(kp[j][dk + c])));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                if (r < nb)
                    acc[r * V + j] = vfmaq_f32(acc[r * V + j], k, vld1q_dup_f32(q + (size_t)r * dk + c));
        }
    }
#pragma GCC unroll 8 /* constant indices: a loop over acc would keep it in memory */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r >= nb || j >= nv)
                continue;
            float *y = sc + (size_t)r * sc_ld + v[j].out;
            /* c0 > 0: the sub-config's beta 1, y + scale·sum in one rounding (cortexa57's FMLA on
             * a whole tile) or scale·sum rounded first (generic's) */
            const float32x4_t x = c0 == 0 ? vmulq_n_f32(acc[r * V + j], scale)
                                  : fused  ? vfmaq_n_f32(load4_n(y, lanes[j]), acc[r * V + j], scale)
                                           : vaddq_f32(vmulq_n_f32(acc[r * V + j], scale), load4_n(y, lanes[j]));
            store4_n(y, lanes[j], x);
        }
}

/* R queries × V slot vectors over the vector list, each tile prefetching the next where ahead. */
static inline __attribute__((always_inline)) void scores_tiles(const mha_kv_type type, const int scaled, const int R,
                                                               const int V, const float *restrict q, int nb, int dk,
                                                               int c0, int c1, int fused, const mha_slot_vec *v, int nv,
                                                               int ld, float scale, float *restrict sc, size_t sc_ld,
                                                               int ahead)
{
    ahead = ahead && mha_scores_fit_l1(c1 - c0, V, 4 * mha_kv_elem_size(type));
    if (type != MHA_KV_F32 && ahead) /* the first tile's Kᵀ: nothing prefetched it */
        for (int j = 0; j < V && j < nv; j++)
            for (size_t off = 0; off < (size_t)(c1 - c0) * ld * mha_kv_elem_size(type); off += 64)
                __builtin_prefetch(v[j].kt + (size_t)c0 * ld * mha_kv_elem_size(type) + off, 0, 3);
    mha_scores_walk(type, scaled, R, V, 4, q, nb, dk, c0, c1, fused, v, nv, ld, scale, sc, sc_ld, ahead, scores_tile);
}

/* Slot vectors of 4 from every block of the chunk: 1 query × 8 vectors, 2 × 8, up to 4 × 4,
 * more 8 × 2 at a time (8 or 16 independent chains). */
static inline __attribute__((always_inline)) void scores(const mha_kv_type type, const int scaled,
                                                         const float *restrict q, int nq, int dk, int c0, int c1,
                                                         int fused, int runs, const void *const *kt,
                                                         const void *const *vr, const mha_f16 *const *kp, const int *n,
                                                         int ld, float scale, float *restrict sc, size_t sc_ld)
{
    mha_slot_vec v[MHA_KV_CHUNK];
    const int nv = mha_slot_vecs(runs, kt, vr, (size_t)dk * mha_kv_elem_size(type), kp, dk, n, 4,
                                 mha_kv_elem_size(type), v);
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *qq = q + (size_t)q0 * dk;
        float *sq = sc + (size_t)q0 * sc_ld;
        if (nb == 1)
            scores_tiles(type, scaled, 1, 8, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb == 2)
            scores_tiles(type, scaled, 2, 8, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else if (nb <= 4)
            scores_tiles(type, scaled, 4, 4, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
        else
            scores_tiles(type, scaled, 8, 2, qq, nb, dk, c0, c1, fused, v, nv, ld, scale, sq, sc_ld, q0 == 0);
    }
}

void mha_decode_scores_neon(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k)
{
    scores(MHA_KV_F32, 0, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->vr, NULL, k->n, k->ld, s->scale,
           s->sc, s->sc_ld);
}

/* The sums under FZ, as the bf16 kernels run (scale 1: a sum times one is itself), then the
 * padding's + 0 and the scale in the caller's mode. */
void mha_decode_scores16_neon(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order)
{
    (void)order; /* even first only */
    const uint64_t fpcr = fz_begin();
    scores(MHA_KV_BF16, 0, s->q, s->nq, s->dk, 0, s->dk, 0, k->runs, k->kt, k->vr, NULL, k->n, k->ld, 1.0f, s->sc,
           s->sc_ld);
    fz_end(fpcr);
    mha_scores16_finish(s->sc, s->sc_ld, s->nq, k->runs, k->n, s->dk, s->scale);
}

void mha_decode_scores8_neon(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k)
{
    scores(MHA_KV_INT8, 1, s->q, s->nq, s->dk, c0, c1, s->beta_fused, k->runs, k->kt, k->vr, k->kp, k->n, k->ld,
           s->scale, s->sc, s->sc_ld);
}

/* Z of nb <= R queries, features [c0, c0 + 4·V) (the last vector's first nl lanes), over the
 * value rows of `runs` runs (run r: n[r] rows at v[r]; its probabilities follow the previous
 * runs' in e), with R · V <= 16 accumulators, key by key in order (an FMA per key and feature:
 * the microkernel's A·V sums). Four keys a step: each query's four probabilities loaded once
 * and taken by lane; a run's last keys past its fours one at a time. The next run's rows (the
 * last run: next's, or none) prefetched row by row as it goes, and a step of the walk w (or
 * NULL) a key. full: nb = R and nl = 4 (nothing tested in the loop). scaled: key t's row times
 * vs[2t] plus vs[2t + 1] as it is loaded (an int8 cache's scale and zero point, each rounded:
 * scale_rows' values), four keys' pairs loaded at once and split (LD2). */
static inline __attribute__((always_inline)) void
values_tile_as(const mha_kv_type type, const int scaled, const int R, const int V, const int full, const float *e,
               size_t e_ld, int nb, int runs, const void *const *v, const float *vs, const int *n, const void *next,
               int dk, int c0, int nl, float *p, size_t ps, mha_prefetch_walk *w)
{
    if (full)
        nb = R, nl = 4;
    const size_t esz = mha_kv_elem_size(type), row = (size_t)dk * esz;
    const size_t pf0 = (size_t)c0 * esz, pf1 = (size_t)(c0 + 4 * V < dk ? c0 + 4 * V : dk) * esz;
    float32x4_t acc[TILE_ACC];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < V; j++)
            acc[r * V + j] = load4_n(p + (size_t)(r < nb ? r : 0) * ps + c0 + 4 * j, j == V - 1 ? nl : 4);
    mha_prefetch_walk wl = w ? *w : (mha_prefetch_walk){0}; /* in registers while the tile runs */
    for (int u = 0, t0 = 0; u < runs; t0 += n[u++]) {
        const char *vu = (const char *)v[u] + (size_t)c0 * esz, *nx = u + 1 < runs ? v[u + 1] : next;
        const float *eu = e + t0;
        int t = 0;
        for (; t + 4 <= n[u]; t += 4) {
            float32x4_t ev[8];
            for (int r = 0; r < R; r++)
                ev[r] = r < nb ? vld1q_f32(eu + (size_t)r * e_ld + t) : vdupq_n_f32(0.0f);
            float32x4x2_t sz = {{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}};
            if (scaled)
                sz = vld2q_f32(vs + 2 * (t0 + t)); /* val[0]: the four scales, val[1]: zero points */
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                if (nx)
                    for (size_t off = pf0; off < pf1; off += 64)
                        __builtin_prefetch(nx + (size_t)(t + l) * row + off, 0, 3);
                if (w)
                    mha_prefetch_step(&wl);
                float32x4_t b[TILE_V];
                load_row(type, vu + (size_t)(t + l) * row, V, nl, b);
#pragma GCC unroll 8
                for (int j = 0; j < V; j++) {
                    if (scaled)
                        b[j] = vaddq_f32(vmulq_f32(b[j], dup_lane(sz.val[0], l)), dup_lane(sz.val[1], l));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++)
                        if (r < nb)
                            acc[r * V + j] = fma_lane(acc[r * V + j], b[j], ev[r], l);
                }
            }
        }
        for (; t < n[u]; t++) {
            if (nx)
                for (size_t off = pf0; off < pf1; off += 64)
                    __builtin_prefetch(nx + (size_t)t * row + off, 0, 3);
            if (w)
                mha_prefetch_step(&wl);
            const float32x4_t s = scaled ? vdupq_n_f32(vs[2 * (t0 + t)]) : vdupq_n_f32(0.0f);
            const float32x4_t z = scaled ? vdupq_n_f32(vs[2 * (t0 + t) + 1]) : vdupq_n_f32(0.0f);
            float32x4_t b[TILE_V];
            load_row(type, vu + (size_t)t * row, V, nl, b);
#pragma GCC unroll 8
            for (int j = 0; j < V; j++) {
                if (scaled)
                    b[j] = vaddq_f32(vmulq_f32(b[j], s), z);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    if (r < nb)
                        acc[r * V + j] = vfmaq_f32(acc[r * V + j], b[j], vld1q_dup_f32(eu + (size_t)r * e_ld + t));
            }
        }
    }
#pragma GCC unroll 8 /* as scores_tile's */
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < V; j++) {
            if (r < nb)
                store4_n(p + (size_t)r * ps + c0 + 4 * j, j == V - 1 ? nl : 4, acc[r * V + j]);
        }
    if (w)
        *w = wl;
}

static inline __attribute__((always_inline)) void values_tile(const mha_kv_type type, const int scaled, const int R,
                                                              const int V, const float *e, size_t e_ld, int nb,
                                                              int runs, const void *const *v, const float *vs,
                                                              const int *n, const void *next, int dk, int c0, int nl,
                                                              float *p, size_t ps, mha_prefetch_walk *w)
{
    if (nb == R && nl == 4)
        values_tile_as(type, scaled, R, V, 1, e, e_ld, nb, runs, v, vs, n, next, dk, c0, nl, p, ps, w);
    else
        values_tile_as(type, scaled, R, V, 0, e, e_ld, nb, runs, v, vs, n, next, dk, c0, nl, p, ps, w);
}

/* Register tiles of 1 query × 32 features, 2 × 32, 4 × 16 or 8 × 8, 4 features (or fewer) the
 * last pass, each over every run. */
static inline __attribute__((always_inline)) void values(const mha_kv_type type, const int scaled, const float *e,
                                                         size_t e_ld, int nq, int runs, const void *const *v,
                                                         const float *vs, const int *n, const void *next, int dk,
                                                         float *p, size_t ps, mha_prefetch_walk *w)
{
    for (int q0 = 0; q0 < nq; q0 += 8) {
        const int nb = nq - q0 < 8 ? nq - q0 : 8;
        const float *eq = e + (size_t)q0 * e_ld;
        float *pq = p + (size_t)q0 * ps;
        const void *pf = q0 == 0 ? next : NULL;
        for (int c0 = 0; c0 < dk;) {
            const int left = dk - c0;
            if (nb == 1 && left >= 32)
                values_tile(type, scaled, 1, 8, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 4, pq, ps, w), c0 += 32;
            else if (nb <= 2 && left >= 32)
                values_tile(type, scaled, 2, 8, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 4, pq, ps, w), c0 += 32;
            else if (nb <= 4 && left >= 16)
                values_tile(type, scaled, 4, 4, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 4, pq, ps, w), c0 += 16;
            else if (left >= 8)
                values_tile(type, scaled, 8, 2, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, 4, pq, ps, w), c0 += 8;
            else
                values_tile(type, scaled, 8, 1, eq, e_ld, nb, runs, v, vs, n, pf, dk, c0, left < 4 ? left : 4, pq, ps,
                            w), c0 += 4;
        }
    }
}

void mha_decode_values_neon(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                            mha_prefetch_walk *w)
{
    (void)vs; /* unscaled */
    const void *vr[1] = {v};
    values(MHA_KV_F32, 0, rows->e, rows->e_ld, rows->nq, 1, vr, NULL, &n, next, rows->dk, rows->p, rows->ps, w);
}

/* Under FZ, as the bf16 kernels sum; an int8 cache's V its values themselves (exact as bf16),
 * unscaled; then the padding's + 0. */
void mha_decode_values16_neon(const mha_value_rows *rows, int runs, const void *const *v, const int *n,
                              mha_kv_type type, const mha_prefetch *pf, mha_bk_order order)
{
    (void)pf, (void)order; /* even first only: their FMAs, not memory, bound them */
    const float *e = rows->e;
    const size_t e_ld = rows->e_ld;
    const int nq = rows->nq, dk = rows->dk;
    const uint64_t fpcr = fz_begin();
    if (type == MHA_KV_INT8)
        values(MHA_KV_INT8, 0, e, e_ld, nq, runs, v, NULL, n, NULL, dk, rows->p, rows->ps, NULL);
    else
        values(MHA_KV_BF16, 0, e, e_ld, nq, runs, v, NULL, n, NULL, dk, rows->p, rows->ps, NULL);
    fz_end(fpcr);
    int keys = 0;
    for (int r = 0; r < runs; r++)
        keys += n[r];
    mha_values16_finish(rows->p, rows->ps, rows->nq, keys, rows->dk);
}

void mha_decode_values8_neon(const mha_value_rows *rows, const void *v, const float *vs, int n, const void *next,
                             mha_prefetch_walk *w)
{
    const void *vr[1] = {v};
    values(MHA_KV_INT8, 1, rows->e, rows->e_ld, rows->nq, 1, vr, vs, &n, next, rows->dk, rows->p, rows->ps, w);
}

/* ---- rows_scores: four queries as the lanes of a register ---- */

/* The queries' features transposed into qt (4 a feature), J keys a tile: four features of each
 * key loaded at once and taken by lane, J accumulators, one FMA chain per score in feature
 * order; features past the last four one at a time. The next tile's rows prefetched a line a
 * row every 16 features, and (v) this tile's value rows (rows t on of v) into L2 as often. */
enum { ROWS_KEYS = 12 };

static inline __attribute__((always_inline)) void keys_tile(const int J, const float *restrict qt, int dk,
                                                            const float *restrict k, ptrdiff_t ld, int nq, float scale,
                                                            float *restrict sc, size_t sc_ld, const mha_rows_ahead *v,
                                                            int t)
{
    float32x4_t acc[ROWS_KEYS];
    for (int u = 0; u < J; u++)
        acc[u] = vdupq_n_f32(0.0f);
    int c = 0;
    for (; c + 4 <= dk; c += 4) {
        if (c % 16 == 0) {
            const size_t line = (size_t)c / 16 * 64;
            for (int u = 0; u < J; u++) {
                __builtin_prefetch(k + (ptrdiff_t)(J + u) * ld + c, 0, 3);
                if (v && line < v->bytes)
                    __builtin_prefetch(v->at + (size_t)(t + u) * v->ld + line, 0, 2);
            }
        }
        const float32x4_t q0 = vld1q_f32(qt + 4 * c), q1 = vld1q_f32(qt + 4 * c + 4);
        const float32x4_t q2 = vld1q_f32(qt + 4 * c + 8), q3 = vld1q_f32(qt + 4 * c + 12);
#pragma GCC unroll 12
        for (int u = 0; u < J; u++) {
            const float32x4_t kv = vld1q_f32(k + (ptrdiff_t)u * ld + c);
            acc[u] = vfmaq_laneq_f32(acc[u], q0, kv, 0);
            acc[u] = vfmaq_laneq_f32(acc[u], q1, kv, 1);
            acc[u] = vfmaq_laneq_f32(acc[u], q2, kv, 2);
            acc[u] = vfmaq_laneq_f32(acc[u], q3, kv, 3);
        }
    }
    for (; c < dk; c++) {
        const float32x4_t qc = vld1q_f32(qt + 4 * c);
#pragma GCC unroll 12
        for (int u = 0; u < J; u++)
            acc[u] = vfmaq_f32(acc[u], qc, vld1q_dup_f32(k + (ptrdiff_t)u * ld + c));
    }
    float out[ROWS_KEYS][4];
#pragma GCC unroll 12
    for (int u = 0; u < J; u++)
        vst1q_f32(out[u], vmulq_n_f32(acc[u], scale));
    for (int r = 0; r < nq; r++)
        for (int u = 0; u < J; u++)
            sc[(size_t)r * sc_ld + u] = out[u][r];
}

void mha_rows_scores_neon(const mha_score_rows *s, const mha_key_rows *k)
{
    const float *q = s->q, *kr = k->k;
    const int nq = s->nq, dk = s->dk, n = k->n;
    float qt[4 * MHA_ROWS_SCORES_DK];
    for (int r0 = 0; r0 < nq; r0 += 4) {
        const int nr = nq - r0 < 4 ? nq - r0 : 4;
        for (int c = 0; c < dk; c++) /* lanes past the last query: zeros, their scores unstored */
            for (int r = 0; r < 4; r++)
                qt[4 * c + r] = r < nr ? q[(size_t)(r0 + r) * dk + c] : 0.0f;
        float *sr = s->sc + (size_t)r0 * s->sc_ld;
        const mha_rows_ahead *pv = k->v && k->v->at && r0 == 0 ? k->v : NULL; /* the first pass prefetches */
        int t = 0;
        for (; t + ROWS_KEYS <= n; t += ROWS_KEYS)
            keys_tile(ROWS_KEYS, qt, dk, kr + (ptrdiff_t)t * k->ld, k->ld, nr, s->scale, sr + t, s->sc_ld, pv, t);
        for (; t + 4 <= n; t += 4)
            keys_tile(4, qt, dk, kr + (ptrdiff_t)t * k->ld, k->ld, nr, s->scale, sr + t, s->sc_ld, pv, t);
        for (; t < n; t++)
            keys_tile(1, qt, dk, kr + (ptrdiff_t)t * k->ld, k->ld, nr, s->scale, sr + t, s->sc_ld, pv, t);
    }
}

/* Under FZ with scale 1, as decode_scores16 sums, then its finish in the caller's mode. */
void mha_rows_scores16_neon(const mha_score_rows *s, const mha_key_rows *k, mha_bk_order order)
{
    (void)order; /* even first only */
    mha_score_rows one = *s;
    one.scale = 1.0f;
    const uint64_t fpcr = fz_begin();
    mha_rows_scores_neon(&one, k);
    fz_end(fpcr);
    mha_scores16_finish(s->sc, s->sc_ld, s->nq, 1, &k->n, s->dk, s->scale);
}
