/* bgemm.c — bf16 products: the driver around a kernel's blocks, A packing, and the model
 * every kernel is checked against. The kernels (bk->block) and the ISA's rounding, B packing
 * and epilogue live in the kernel tables (src/isa/).
 *
 * One block is up to 32 rows (two A panels) × 32 columns (two B panels) summed over every k
 * tile; the driver packs 32 rows of A at a time (or reads them prepacked) and walks B's
 * panels two by two. */
#include "bgemm.h"

#include <float.h>

#include "isa/isa.h"

/* ---- the model ---- */

/* A denormal input as the instructions read it: a zero of its sign (x86's DAZ, Arm's FZ). */
static float daz(mha_bf16 h)
{
    return mha_bf16_float((h & 0x7f80u) == 0 ? h & 0x8000u : h);
}

/* The exact value hi + lo (|lo| at most half an ulp of hi: a double sum and its error) as
 * BFDOT rounds it: NaN the default NaN, below FLT_MIN a zero of its sign, at 2^128 or above
 * infinity, else truncated to float and, if that dropped anything, its last bit set (round to
 * odd). */
static float odd_round(double hi, double lo)
{
    if (isnan(hi)) /* the instruction's default NaN (lo is NaN too where hi is infinite) */
        return mha_bf16_float(0x7fc0u);
    const double mag = fabs(hi);
    const int nearer_zero = lo != 0.0 && signbit(lo) != signbit(hi); /* the exact value is below |hi| */
    if (mag < FLT_MIN || (mag == FLT_MIN && nearer_zero))
        return copysignf(0.0f, (float)hi);
    if (mag > 0x1p128 || (mag == 0x1p128 && !nearer_zero))
        return copysignf(INFINITY, (float)hi);
    float t = (float)mag;
    if ((double)t > mag) /* nearest rounded up (or to infinity): truncate */
        t = nextafterf(t, 0.0f);
    const int inexact = (double)t != mag || lo != 0.0;
    if ((double)t == mag && nearer_zero)
        t = nextafterf(t, 0.0f);
    uint32_t u;
    memcpy(&u, &t, sizeof u);
    u |= (uint32_t)inexact | (signbit(hi) ? 0x80000000u : 0u);
    memcpy(&t, &u, sizeof t);
    return t;
}

float mha_bk_odd_sum(float x, float y)
{
    const double s = (double)x + y, v = s - x, err = ((double)x - (s - v)) + ((double)y - v); /* TwoSum: exact */
    return odd_round(s, err);
}

/* A pair's product: exact in double, rounded to float only where it leaves float's range. */
static float odd_product(float a, float b)
{
    return odd_round((double)a * b, 0.0);
}

/* Tile by tile, B's tile made float once for every row; each row's columns advanced together
 * (the chains are independent, each summed in its own order: a loop over columns that
 * vectorises). */
void mha_bk_block_model(mha_bk_order order, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                        size_t ps, float *acc)
{
    const int first = order == MHA_BK_ODD_FIRST, cols = 16 * npan;
    float s[32][32] = {{0}}, bt[2][MHA_BT_K][16]; /* bt[p][k][j]: element k of panel p's column j */
    for (int t = 0; t < kt; t++) {
        for (int p = 0; p < npan; p++)
            for (int k = 0; k < MHA_BT_K; k++)
                for (int j = 0; j < 16; j++)
                    bt[p][k][j] = daz(b[(size_t)p * ps + (size_t)t * MHA_BT_ELEMS + 32 * (k / 2) + 2 * j + k % 2]);
        for (int i = 0; i < rows; i++) {
            const mha_bf16 *ap = a + mha_bk_a_row(i, kt) + (size_t)t * MHA_BT_ELEMS;
            float *si = s[i], even[32] = {0}, odd[32] = {0}; /* tile lanes: the tile's two chains */
            for (int q = 0; q < MHA_BT_K / 2; q++) { /* k pair q of tile t */
                const float a0 = daz(ap[2 * q]), a1 = daz(ap[2 * q + 1]);
                const float af = first ? a1 : a0, as = first ? a0 : a1;
                for (int p = 0; p < npan; p++) {
                    const float *b0 = bt[p][2 * q], *b1 = bt[p][2 * q + 1], *bf = first ? b1 : b0, *bs = first ? b0 : b1;
                    float *sp = si + 16 * p, *ep = even + 16 * p, *op = odd + 16 * p;
                    if (order == MHA_BK_TILE_LANES)
                        for (int j = 0; j < 16; j++) {
                            ep[j] = mha_bk_ftz(ep[j] + a0 * b0[j]);
                            op[j] = mha_bk_ftz(op[j] + a1 * b1[j]);
                        }
                    else if (order == MHA_BK_PAIRS_ODD)
                        for (int j = 0; j < 16; j++)
                            sp[j] = mha_bk_odd_sum(sp[j],
                                                   mha_bk_odd_sum(odd_product(a0, b0[j]), odd_product(a1, b1[j])));
                    else
                        for (int j = 0; j < 16; j++) {
                            sp[j] = mha_bk_ftz(sp[j] + af * bf[j]);
                            sp[j] = mha_bk_ftz(sp[j] + as * bs[j]);
                        }
                }
            }
            if (order == MHA_BK_TILE_LANES)
                for (int j = 0; j < cols; j++)
                    si[j] = mha_bk_ftz(si[j] + mha_bk_ftz(even[j] + odd[j]));
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            acc[i * 32 + j] = s[i][j];
}

/* ---- hardware context ---- */

int mha_bkernel_enable(const mha_bkernel *bk)
{
    return !bk || !bk->enable || bk->enable();
}

void mha_bk_begin(const mha_bkernel *bk)
{
    if (bk && bk->begin)
        bk->begin();
}

void mha_bk_end(const mha_bkernel *bk)
{
    if (bk && bk->end)
        bk->end();
}

void mha_bk_block(const mha_bkernel *bk, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                  size_t ps, float *acc)
{
    mha_bk_begin(bk);
    bk->block(rows, npan, kt, a, b, ps, acc, 1);
    mha_bk_end(bk);
}

/* ---- packing ---- */

/* One row of A panels of depth kk (d: the row's first element in its panel) from src (its
 * columns contiguous within runs of ps's panels of w), zeros past kk. */
static void pack_a_row(const mha_kernel *k, const float *src, ptrdiff_t ps, int kk, mha_bf16 *d)
{
    const int kp = (int)mha_bk_kp(kk), w = k->bw;
    int p = 0;
    while (p < kk) { /* contiguous within one of the source's panels (all of it when ps == w) */
        const int in_panel = ps == w ? kk - p : w - p % w, n = kk - p < in_panel ? kk - p : in_panel;
        k->isa->round_into_tiles(src + (ptrdiff_t)(p / w) * ps + p % w, p, n, d);
        p += n;
    }
    if (p < kp) /* the rest of the last k tile's row */
        memset(d + (size_t)(p / MHA_BT_K) * MHA_BT_ELEMS + p % MHA_BT_K, 0, (size_t)(kp - p) * sizeof *d);
}

void mha_bk_pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int kk, mha_bf16 *dst)
{
    const size_t kp = mha_bk_kp(kk);
    for (int r = 0; r < rows; r++)
        pack_a_row(k, a.p + (ptrdiff_t)(i0 + r) * a.ld, a.ps, kk, dst + mha_bk_a_row(r, (int)(kp / MHA_BT_K)));
    if (rows % 16) { /* the last panel's missing rows: zero, one run per k tile */
        mha_bf16 *last = dst + mha_bk_a_row(rows, (int)(kp / MHA_BT_K));
        for (size_t t = 0; t < kp / 32; t++)
            memset(last + t * MHA_BT_ELEMS, 0, (size_t)(MHA_BT_M - rows % MHA_BT_M) * MHA_BT_K * sizeof *last);
    }
}

void mha_bk_copy_a(const mha_bf16 *src, ptrdiff_t ld, int rows, int kk, mha_bf16 *dst)
{
    const int kt = (int)(mha_bk_kp(kk) / MHA_BT_K), padded = (int)mha_round_up((size_t)rows, MHA_BT_M);
    for (int r = 0; r < padded; r++) /* the last panel's missing rows: zero */
        for (int t = 0; t < kt; t++) {
            mha_bf16 *d = dst + mha_bk_a_row(r, kt) + (size_t)t * MHA_BT_ELEMS;
            const int n = r >= rows ? 0 : kk - t * MHA_BT_K < MHA_BT_K ? kk - t * MHA_BT_K : MHA_BT_K;
            if (n == MHA_BT_K) { /* a whole tile row: a copy of constant size, inlined (a call per
                                  * 64 bytes cost as much as the rest of a short head's packing) */
                memcpy(d, src + (ptrdiff_t)r * ld + t * MHA_BT_K, MHA_BT_K * sizeof *d);
                continue;
            }
            memcpy(d, src + (ptrdiff_t)r * ld + t * MHA_BT_K, (size_t)n * sizeof *d);
            memset(d + n, 0, (size_t)(MHA_BT_K - n) * sizeof *d);
        }
}

void mha_bk_pack_a_row(const mha_kernel *k, const float *x, int i, int kk, mha_bf16 *dst)
{
    const size_t kp = mha_bk_kp(kk);
    pack_a_row(k, x, k->bw, kk, dst + mha_bk_a_row(i, (int)(kp / MHA_BT_K)));
}

void mha_bk_pack_b(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps)
{
    k->isa->pack_b16(k, src, transpose, kk, n, dst, ps);
}

/* Rows [r0, r1) of src (at most n0; each `bytes` long) asked into L1: the rows a packing reads
 * next, while it packs the ones before. A few queries' attention reads K and V once, straight
 * from the caller's tensors, and waits on every line the hardware's prefetchers leave: they
 * follow a stream within a page, not the jump to the next rows a panel's transposes make. */
static void prefetch_rows(const mha_bf16 *src, ptrdiff_t ld, int r0, int r1, int n0, size_t bytes)
{
    for (int r = r0; r < r1 && r < n0; r++)
        for (size_t off = 0; off < bytes; off += 64)
            __builtin_prefetch((const char *)(src + (ptrdiff_t)r * ld) + off, 0, 3);
}

/* B's pairs of rows by blocks of this many, each block's pairs into every whole panel before
 * the next block: the block's lines (a few KiB) stay in L1 across the panels, and the rows are
 * read in order, where a panel at a time would read every row once per 16 columns. */
enum { PACK_PAIRS = 8 };

void mha_bk_pack_b_bf16(const mha_kernel *k, const mha_bf16 *src, ptrdiff_t ld, int transpose, int kk, int n,
                        mha_bf16 *dst, size_t ps)
{
    const mha_isa *isa = k->isa;
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)(n > 0 ? n : 0), MHA_BT_N);
    /* transpose: a row's k pairs are 32-bit words, which B's panels hold 16 rows abreast */
    const int words = transpose && kk % 2 == 0 && ld % 2 == 0 && ((uintptr_t)src & 3u) == 0 ? kk / 2 : 0;
    /* not transposed: the columns of whole panels, their k pairs interleaved block by block */
    const int whole = !transpose && kk >= 2 ? n / MHA_BT_N * MHA_BT_N : 0;
    for (int p0 = 0; whole && p0 < kk / 2; p0 += PACK_PAIRS) {
        prefetch_rows(src, ld, 2 * (p0 + PACK_PAIRS), 2 * (p0 + 2 * PACK_PAIRS), kk, (size_t)n * sizeof *src);
        for (int j0 = 0; j0 < whole; j0 += MHA_BT_N)
            isa->interleave_pairs[MHA_KV_BF16](src + (ptrdiff_t)2 * p0 * ld + j0, (size_t)ld,
                                               kk / 2 - p0 < PACK_PAIRS ? kk / 2 - p0 : PACK_PAIRS,
                                               dst + (size_t)(j0 / MHA_BT_N) * ps + (size_t)2 * MHA_BT_N * p0, NULL);
    }
    for (int j0 = 0; j0 < np; j0 += MHA_BT_N) {
        mha_bf16 *panel = dst + (size_t)(j0 / MHA_BT_N) * ps;
        int p = 0;
        if (words) {
            const int rows = n - j0 < MHA_BT_N ? n - j0 : MHA_BT_N;
            prefetch_rows(src, ld, j0 + MHA_BT_N, j0 + 2 * MHA_BT_N, n, (size_t)kk * sizeof *src);
            isa->pack_rows(mha_mat_rows(k, (const float *)(const void *)(src + (ptrdiff_t)j0 * ld), ld / 2), k->bw, 0,
                           rows, 0, words, MHA_BT_N, (float *)(void *)panel);
            p = kk;
        } else if (j0 < whole)
            p = kk / 2 * 2;
        for (; p < kp; p++) /* the rest, and zeros past kk and n */
            for (int i = 0; i < MHA_BT_N; i++) {
                const int j = j0 + i;
                panel[mha_bk_b_index(p, i, ps)] =
                    j < n && p < kk ? src[transpose ? (ptrdiff_t)j * ld + p : (ptrdiff_t)p * ld + j] : 0;
            }
    }
}

/* ---- the product ---- */

/* mha_bgemm, and with bias set mha_bgemm_bias (alpha 1, beta 1 on C's rows filled with bias). */
static void bgemm(const mha_bkernel *bk, const mha_kernel *k, int m, int n, int kk, float alpha, const mha_bf16 *ap,
                  mha_mat a, const mha_bf16 *b, size_t ps, float beta, const float *bias, mha_mat c, mha_bf16 *apack)
{
    if (m <= 0 || n <= 0)
        return;
    const int kt = (int)(mha_bk_kp(kk) / MHA_BT_K);
    _Alignas(64) float acc[32 * 32];
    for (int i0 = 0; i0 < m; i0 += 32) {
        const int rows = m - i0 < 32 ? m - i0 : 32;
        const mha_bf16 *ab = ap ? ap + mha_bk_a_row(i0, kt) : apack;
        if (!ap && kt > 0)
            mha_bk_pack_a(k, a, i0, rows, kk, apack);
        for (int j0 = 0; j0 < n; j0 += 32) {
            const int cols = n - j0 < 32 ? n - j0 : 32, npan = cols > 16 ? 2 : 1;
            /* 16 columns are contiguous in any form (bw: 16k); rows are c.ld apart */
            float *c0 = mha_mat_at(k, c, i0, j0), *c1 = cols > 16 ? mha_mat_at(k, c, i0, j0 + 16) : NULL;
            if (kt > 0 && bk->block_c) {
                bk->block_c(rows, npan, kt, ab, b + (size_t)(j0 / 16) * ps, ps, c0, c1, c.ld, cols, alpha, beta,
                            bias ? bias + j0 : NULL, m <= 32);
                continue;
            }
            if (kt > 0)
                bk->block(rows, npan, kt, ab, b + (size_t)(j0 / 16) * ps, ps, acc, m <= 32);
            else
                memset(acc, 0, sizeof acc);
            for (int i = 0; bias && i < rows; i++) { /* the block's rows of C filled with bias: beta 1 adds it */
                memcpy(c0 + i * c.ld, bias + j0, (size_t)(cols < 16 ? cols : 16) * sizeof *c0);
                if (c1)
                    memcpy(c1 + i * c.ld, bias + j0 + 16, (size_t)(cols - 16) * sizeof *c1);
            }
            k->isa->epilogue_block(c0, c1, c.ld, acc, rows, cols, alpha, beta); /* beta 1 with bias */
        }
    }
}

void mha_bgemm(const mha_bkernel *bk, const mha_kernel *k, int m, int n, int kk, float alpha, const mha_bf16 *ap,
               mha_mat a, const mha_bf16 *b, size_t ps, float beta, mha_mat c, mha_bf16 *apack)
{
    bgemm(bk, k, m, n, kk, alpha, ap, a, b, ps, beta, NULL, c, apack);
}

void mha_bgemm_bias(const mha_bkernel *bk, const mha_kernel *k, int m, int n, int kk, const mha_bf16 *ap, mha_mat a,
                    const mha_bf16 *b, size_t ps, const float *bias, mha_mat c, mha_bf16 *apack)
{
    bgemm(bk, k, m, n, kk, 1.0f, ap, a, b, ps, 1.0f, bias, c, apack);
}
