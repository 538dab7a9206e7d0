/* loops.h — control loops that both vector tables (avx2*.c, avx512*.c; ref.c where it runs the
 * same) run, written once in plain C. Each table passes its body: an always_inline function of its own intrinsics. The loops are
 * always_inline too, so in the table's function the body is a known function called with
 * constant heights and widths, and the compiler inlines it as if the loop were written out
 * there (the same instructions as the loop written out: no call, no spilled accumulator).
 * Loops left in the tables, and why, are listed in DESIGN.md §3. */
#ifndef MHA_ISA_LOOPS_H
#define MHA_ISA_LOOPS_H

#include <stddef.h>

#include "bgemm.h"
#include "isa.h"

/* ---- pack_rows: rows of a into panels of pw rows, lanes × lanes at a time ---- */

/* One group of the panel: rows src[0 .. min(gw, have)) (have may be <= 0: none), n <= lanes
 * columns from offset off of each, transposed into dst (stride pw) with gw lanes stored. */
typedef void (*mha_pack_group_fn)(const float *const *src, int gw, int have, ptrdiff_t off, int n, float *dst, int pw);

/* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc), into panels of pw rows: dst[panel][p][r];
 * groups of `lanes` (at most 16) rows of a panel, `lanes` columns at a time, never across one
 * of A's panels of w columns. */
static inline __attribute__((always_inline)) void mha_pack_walk(mha_mat a, int w, int i0, int rows, int p0, int kc,
                                                                int pw, float *restrict dst, const int lanes,
                                                                mha_pack_group_fn group)
{
    for (int r0 = 0; r0 < rows; r0 += pw, dst += (size_t)pw * kc)
        for (int g = 0; g < pw; g += lanes) { /* a group of up to `lanes` rows of the panel */
            const int gw = pw - g < lanes ? pw - g : lanes, have = rows - r0 - g;
            const float *src[16];
            for (int r = 0; r < gw && r < have; r++)
                src[r] = a.p + (ptrdiff_t)(i0 + r0 + g + r) * a.ld;
            for (int p = 0; p < kc;) {
                const int col = p0 + p, in_panel = w - col % w;
                int n = kc - p < in_panel ? kc - p : in_panel;
                n = n < lanes ? n : lanes;
                group(src, gw, have, (ptrdiff_t)(col / w) * a.ps + col % w, n, dst + (size_t)p * pw + g, pw);
                p += n;
            }
        }
}

/* ---- stream_rows: few rows past the microkernel, B streamed once ---- */

/* The prefetch of the next chunk of B over the passes of this one (avx512_f32.c says why), and
 * the product's rows m (neon's pass tells cortexa57's whole tiles from its edge ones by them). */
typedef struct mha_ahead {
    const char *at;          /* the next line of the next chunk */
    long credit, share, per; /* a line each time credit, growing by share per row of a pass, reaches per */
    int m;
} mha_ahead;

/* One pass of R rows from row i0 over k in [p0, p1) against B's panel bp (columns j0 .. j0 + nj). */
typedef void (*mha_stream_pass_fn)(int R, mha_ahead *pf, int i0, int p0, int p1, int j0, int nj,
                                   float alpha, mha_mat a, const float *bp, float beta, mha_mat c);

/* C = alpha·A·B + beta·C for m rows: B's panels of w columns (w floats a row of the panel), k in
 * chunks of k->kc; within a chunk, passes of `top` rows, then one pass of 8, 4, 2, 1 rows each
 * below top as the rows left need. Written out rather than looped over the heights: each
 * pass's R must be a constant where the body is inlined, or its accumulators spill. */
static inline __attribute__((always_inline)) void mha_stream_walk(const mha_kernel *k, int m, int n, int kk, float alpha,
                                                                  mha_mat a, mha_mat b, float beta, mha_mat c,
                                                                  const int w, const int top, mha_stream_pass_fn pass)
{
    for (int j0 = 0; j0 < n; j0 += w) {
        const float *bp = b.p + (ptrdiff_t)(j0 / w) * b.ps;
        const int nj = n - j0 < w ? n - j0 : w;
        for (int p0 = 0; p0 < kk; p0 += k->kc) {
            const int p1 = kk - p0 < k->kc ? kk : p0 + k->kc;
            /* the next chunk: rows p1 .. of this panel, or the first of the next panel */
            const int more = p1 < kk ? kk - p1 : j0 + w < n ? kk : 0;
            const float *next = p1 < kk ? bp + (ptrdiff_t)p1 * w : more ? bp + b.ps : bp;
            const long lines = (long)(more < k->kc ? more : k->kc) * w / 16; /* 64-byte lines */
            /* a pass of R rows: lines·R/m of them over its p1 - p0 rows */
            mha_ahead pf = {.at = (const char *)next, .per = (long)(p1 - p0) * m, .m = m};
            int i0 = 0;
            for (; i0 + top <= m; i0 += top)
                pf.share = lines * top, pass(top, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c);
            if (top > 8 && m - i0 >= 8)
                pf.share = lines * 8, pass(8, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c), i0 += 8;
            if (top > 4 && m - i0 >= 4)
                pf.share = lines * 4, pass(4, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c), i0 += 4;
            if (top > 2 && m - i0 >= 2)
                pf.share = lines * 2, pass(2, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c), i0 += 2;
            if (top > 1 && m - i0 >= 1)
                pf.share = lines, pass(1, &pf, i0, p0, p1, j0, nj, alpha, a, bp, beta, c);
        }
    }
}

/* ---- softmax_rows: whole rows, each row's max taken before the row above's exps ---- */

/* A whole row's max (from −∞); a row's exps against mx, each into the row, or into d (the A
 * panels' row for it; NULL where the body writes floats), returning their sum. */
typedef float (*mha_row_max_fn)(const float *s, int n);
typedef float (*mha_row_exps_fn)(float *s, int n, float mx, mha_bf16 *d);

/* m whole rows ld apart through the softmax: row i + 1's max taken before row i's exps, so its
 * loads and reductions run behind them, where a row at a time waits on them between rows (the
 * same bits as row by row). d: NULL, or A panels whose row i takes row i's probabilities. */
static inline __attribute__((always_inline)) void mha_rows_walk(float *s, ptrdiff_t ld, int m, int n, float *mx,
                                                                float *sum, ptrdiff_t st, mha_bf16 *d,
                                                                mha_row_max_fn max, mha_row_exps_fn exps)
{
    const int kt = (int)(mha_bk_kp(n) / MHA_BT_K);
    float next = m > 0 ? max(s, n) : 0.0f;
    for (int i = 0; i < m; i++) {
        const float row_max = next;
        if (i + 1 < m)
            next = max(s + (i + 1) * ld, n);
        mx[i * st] = row_max;
        sum[i * st] = exps(s + i * ld, n, row_max, d ? d + mha_bk_a_row(i, kt) : NULL);
    }
}

/* ---- decode: score tiles over a chunk's slot vectors ---- */

/* Scores of nb <= R queries against up to V slot vectors (v, nv of them), the next tile's
 * vectors (pf, npf) prefetched; full: nb = R and V whole vectors; fused: a pass after the first
 * ends in one rounding (mha_score_rows.beta_fused). */
typedef void (*mha_scores_tile_fn)(mha_kv_type type, int scaled, int R, int V, int full, const float *restrict q, int nb,
                                   int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv,
                                   const mha_slot_vec *pf, int npf, int ld, float scale, float *restrict sc,
                                   size_t sc_ld);

/* Whether a score tile's Kᵀ (rows features of V vectors, each row's vector `bytes` wide) and
 * the next tile's fit in 32 KiB of L1 together. */
static inline int mha_scores_fit_l1(int rows, int V, size_t bytes)
{
    return (size_t)rows * (size_t)V * bytes * 2 <= 32768;
}

/* Every slot vector of the chunk, V at a time, through R × V tiles of `lanes`-wide vectors; a
 * whole tile takes the body's full path (nothing tested in its loops). ahead: each tile
 * prefetches the next one's vectors, which the first pass over the chunk's keys (the first
 * rows) reads from memory; the later passes find them in L2, and there a prefetch into L1
 * costs: an MLA tile (576 features) pushes the lines out before it reads them. */
static inline __attribute__((always_inline)) void
mha_scores_walk(const mha_kv_type type, const int scaled, const int R, const int V, const int lanes,
                const float *restrict q, int nb, int dk, int c0, int c1, int fused, const mha_slot_vec *v, int nv,
                int ld, float scale, float *restrict sc, size_t sc_ld, int ahead, mha_scores_tile_fn tile)
{
    for (int i = 0; i < nv; i += V) {
        const int here = nv - i < V ? nv - i : V, next = !ahead ? 0 : nv - i - here < V ? nv - i - here : V;
        const int full = nb == R && here == V && mha_slot_vecs_whole(v + i, here, lanes);
        if (full)
            tile(type, scaled, R, V, 1, q, nb, dk, c0, c1, fused, v + i, here, v + i + here, next, ld, scale, sc,
                 sc_ld);
        else
            tile(type, scaled, R, V, 0, q, nb, dk, c0, c1, fused, v + i, here, v + i + here, next, ld, scale, sc,
                 sc_ld);
    }
}

/* ---- decode on bf16 tiles, even first: the ends of the float32 tiles' sums ---- */

/* After scores summed with scale 1 (under DAZ and FTZ, as the bf16 kernels sum), in the
 * caller's mode: each score + 0 where the kernels' sums end on padding (d_k not a multiple
 * of their k tile), then times scale, rounded as the kernels' epilogue rounds it. Plain C: the
 * compiler vectorizes it in the table's function; the bits are per element. */
static inline __attribute__((always_inline)) void mha_scores16_finish(float *restrict sc, size_t sc_ld, int nq, int runs,
                                                                      const int *n, int dk, float scale)
{
    int slots = 0;
    for (int r = 0; r < runs; r++)
        slots += n[r];
    for (int qi = 0; qi < nq; qi++)
        for (int t = 0; t < slots; t++) {
            float x = sc[(size_t)qi * sc_ld + t];
            if (dk % MHA_BT_K)
                x += 0.0f;
            sc[(size_t)qi * sc_ld + t] = x * scale;
        }
}

/* After the values summed run by run: + 0 on every output where the kernels' sums end on key
 * padding (keys not a multiple of their k tile). */
static inline __attribute__((always_inline)) void mha_values16_finish(float *restrict p, size_t ps, int nq, int keys,
                                                                      int dk)
{
    for (int qi = 0; keys % MHA_BT_K && qi < nq; qi++)
        for (int c = 0; c < dk; c++)
            p[(size_t)qi * ps + c] += 0.0f;
}

/* ---- int8_scores: where a group of the runs lies ---- */

/* Group g0 (a multiple of MHA_KV_GROUP) of run r of the key runs k (int8_scores, isa.h), from
 * feature p0 of dk: its slots, its codes (Kᵀ rows k->ld apart), the next group's (what to
 * prefetch; NULL: none), its value rows where first and p0 is 0 (NULL otherwise) and its
 * parameters from p0. */
typedef struct mha_int8_group {
    int slots;
    const int8_t *kt, *next;
    const char *vr;
    const mha_f16 *par;
} mha_int8_group;

static inline mha_int8_group mha_int8_group_at(const mha_key_runs *k, int r, int g0, int p0, int dk, int first)
{
    const int8_t *kt = (const int8_t *)k->kt[r] + g0 + (size_t)p0 * k->ld;
    return (mha_int8_group){
        .slots = k->n[r] - g0 < MHA_KV_GROUP ? k->n[r] - g0 : MHA_KV_GROUP,
        .kt = kt,
        .next = g0 + MHA_KV_GROUP < k->n[r] ? kt + MHA_KV_GROUP
                : r + 1 < k->runs           ? (const int8_t *)k->kt[r + 1] + (size_t)p0 * k->ld
                                            : NULL,
        .vr = first && k->vr && p0 == 0 ? (const char *)k->vr[r] + (size_t)g0 * dk : NULL,
        .par = k->kp[r] + (size_t)(g0 / MHA_KV_GROUP) * 2 * (size_t)dk + p0,
    };
}

#endif
