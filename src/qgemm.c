/* qgemm.c — the driver of products on quantized weights (qgemm.h). Decode's one or two rows
 * go to the table's few: up to four panels' weights dequantized in registers, each byte read
 * once. More rows go per block of 64 rows and pair of panels: a chunk of inputs dequantized
 * once into floats (L1) and every row tile of the block runs its FMA chains on it, the sums
 * kept in a tile between chunks (a float stored and loaded back is the same float: the chains
 * do not change). Either way each weight byte is read once a block of rows — once a decode
 * step — and every output is the same chain. On int16 activations (mha_qgemm16) the rows are
 * packed once (mha_a16_pack), and the table's integer products run up to four panels over 8
 * rows at a time, all the inputs in one pass. */
#include "qgemm.h"

#include "isa/isa.h"

#include <math.h>
#include <string.h>

/* Rows a block, inputs a chunk: the chunk's floats (two panels) and the block's sums stay in
 * L1 (16 + 8 KiB). */
enum { QROWS = MHA_QROWS, QCHUNK = 128 };

size_t mha_qmat_head_bytes(const mha_qmat *b)
{
    size_t bytes = 0;
    for (int j = 0; j < b->parts; j++)
        bytes += mha_qmat_part_bytes(b, j);
    return bytes;
}

const unsigned char *mha_qmat_panel(const mha_qmat *b, int col, const mha_qtype **type)
{
    const int width = b->part * b->parts, head = col / width, j = col % width / b->part;
    *type = mha_qmat_type(b, j);
    if (col % b->part >= b->stored)
        return NULL;
    const unsigned char *p = b->p + (size_t)head * mha_qmat_head_bytes(b);
    for (int i = 0; i < j; i++)
        p += mha_qmat_part_bytes(b, i);
    return p + (size_t)(col % b->part / MHA_QP) * mha_qpanel_bytes(*type, b->kk);
}

/* The sums of padding outputs (zeros held nowhere): put_rows' acc with ld 0. */
static const float zeros[MHA_QP];

/* Rows [r0, r0 + rows) of the sums acc (ld apart) into c's columns [cj, cj + cols): the sum,
 * plus c's bias where beta is 1. */
static void put_rows(const mha_kernel *k, const float *acc, ptrdiff_t ld, int r0, int rows, int cj, int cols,
                     float beta, mha_mat c)
{
    for (int i = 0; i < rows; i++)
        for (int o = 0; o < cols; o++) {
            float *out = mha_mat_at(k, c, r0 + i, cj + o);
            *out = beta != 0.0f ? acc[i * ld + o] + *out : acc[i * ld + o];
        }
}

/* Outputs [cj, cj + cols) of c from np ≤ 2 panels of type t at p[0], p[1], for rows [r0, r0 +
 * rows) (rows ≤ QROWS). */
static void panels(const mha_kernel *k, int r0, int rows, int kk, const float *a, ptrdiff_t lda, int np,
                   const unsigned char *const p[2], const mha_qtype *t, float beta, mha_mat c, int cj, int cols)
{
    const mha_qkernels *qk = k->isa->quant;
    enum { LD = 2 * MHA_QP };
    float w[2 * QCHUNK * MHA_QP], acc[QROWS * LD] = {0};
    const size_t block_bytes = MHA_QP * t->bytes;
    const int groups = t->qk / MHA_QG;
    for (int k0 = 0; k0 < kk; k0 += QCHUNK) {
        const int kc = kk - k0 < QCHUNK ? kk - k0 : QCHUNK; /* kk is whole groups */
        for (int j = 0; j < np; j++)
            for (int g = k0 / MHA_QG; g < (k0 + kc) / MHA_QG; g++)
                qk->dequant[t->index](p[j] + (size_t)(g / groups) * block_bytes, g % groups,
                                      w + (size_t)j * QCHUNK * MHA_QP + (size_t)(g * MHA_QG - k0) * MHA_QP);
        qk->tile(w, QCHUNK * MHA_QP, kc, np, a + (size_t)r0 * lda + k0, lda, rows, acc, LD);
    }
    put_rows(k, acc, LD, r0, rows, cj, cols, beta, c);
}

/* The panels a pass reads together from output col + j on (of n): the first, NULL for padding
 * (then alone), and the stored panels after it of its type, at most `most`; their count. */
static int panel_run(const mha_qmat *b, int col, int j, int n, int most, const unsigned char **p,
                     const mha_qtype **t)
{
    const mha_qtype *tj;
    int np = 1;
    p[0] = mha_qmat_panel(b, col + j, t);
    while (p[0] && np < most && j + np * MHA_QP < n && (p[np] = mha_qmat_panel(b, col + j + np * MHA_QP, &tj)) &&
           tj == *t)
        np++;
    return np;
}

/* Rows [r0, r0 + rows) (rows ≤ QROWS, or ≤ MHA_QFEW_ROWS through few): every output. */
static void row_block(const mha_kernel *k, int r0, int rows, int n, const float *a, ptrdiff_t lda, const mha_qmat *b,
                      int col, float beta, mha_mat c)
{
    const int few = rows <= MHA_QFEW_ROWS, most = few ? MHA_QFEW_PANELS : 2; /* panels a pass reads together */
    for (int j = 0; j < n;) {
        const mha_qtype *t;
        const unsigned char *p[MHA_QFEW_PANELS];
        const int np = panel_run(b, col, j, n, most, p, &t);
        const int cols = n - j < np * MHA_QP ? n - j : np * MHA_QP;
        if (!p[0]) { /* padding: its sums are 0 */
            put_rows(k, zeros, 0, r0, rows, j, cols, beta, c);
        } else if (few) {
            float acc[MHA_QFEW_ROWS * MHA_QFEW_PANELS * MHA_QP] = {0};
            k->isa->quant->few[t->index](t, p, np, b->kk, a + (size_t)r0 * lda, lda, rows, acc,
                                         MHA_QFEW_PANELS * MHA_QP);
            put_rows(k, acc, MHA_QFEW_PANELS * MHA_QP, r0, rows, j, cols, beta, c);
        } else {
            panels(k, r0, rows, b->kk, a, lda, np, p, t, beta, c, j, cols);
        }
        j += np * MHA_QP;
    }
}

void mha_qgemm(const mha_kernel *k, int m, int n, const float *a, ptrdiff_t lda, const mha_qmat *b, int col,
               float beta, mha_mat c)
{
    if (m <= MHA_QFEW_ROWS) { /* decode */
        row_block(k, 0, m, n, a, lda, b, col, beta, c);
        return;
    }
    /* Row blocks outermost: a block's rows (QROWS × kk floats) stay in L2 while every panel
     * streams past them, where panels outermost would read all m rows again for each pair. */
    for (int r0 = 0; r0 < m; r0 += QROWS)
        row_block(k, r0, m - r0 < QROWS ? m - r0 : QROWS, n, a, lda, b, col, beta, c);
}

void mha_a16_pack(const float *x, int kk, unsigned char *row)
{
    int16_t *q = (int16_t *)(void *)row;
    float *d = (float *)(void *)(row + 2 * (size_t)kk), *u = d + kk / MHA_QG;
    int32_t *s = (int32_t *)(void *)(u + kk / MHA_QG);
    /* adding and taking away 1.5 · 2^23 rounds |v| ≤ 32767 to nearest even, as nearbyintf does
     * in the default mode, in code every compiler vectorizes */
    const float round = 12582912.0f, top = 32767.0f;
    for (int g = 0; g < kk / MHA_QG; g++) {
        const float *xg = x + g * MHA_QG;
        float amax = 0.0f;
        for (int i = 0; i < MHA_QG; i++) {
            const float v = fabsf(xg[i]);
            amax = v > amax ? v : amax; /* a NaN is passed over */
        }
        const float id = amax > 0.0f ? top / amax : 0.0f;
        int32_t sum[2] = {0, 0};
        for (int i = 0; i < MHA_QG; i++) {
            float v = xg[i] * id;
            v = v > -top ? v : -top; /* NaN: −32767 */
            v = v < top ? v : top;
            const int qi = (int)((v + round) - round);
            q[g * MHA_QG + mha_a16_at(i)] = (int16_t)qi;
            sum[i / 16] += qi;
        }
        d[g] = amax / top;
        u[g] = d[g] * (float)(sum[0] + sum[1]);
        s[2 * g] = sum[0], s[2 * g + 1] = sum[1];
    }
}

/* Rows [r0, r0 + rows) of xq (rows ≤ MHA_QROWS): every output, up to MHA_QFEW_PANELS panels of
 * one type a pass, MHA_A16_ROWS rows at a time over them. */
static void row_block16(const mha_kernel *k, int r0, int rows, int n, const unsigned char *xq, size_t xs,
                        const mha_qmat *b, int col, float beta, mha_mat c)
{
    enum { LD = MHA_QFEW_PANELS * MHA_QP };
    for (int j = 0; j < n;) {
        const mha_qtype *t;
        const unsigned char *p[MHA_QFEW_PANELS];
        const int np = panel_run(b, col, j, n, MHA_QFEW_PANELS, p, &t);
        const int cols = n - j < np * MHA_QP ? n - j : np * MHA_QP;
        for (int r = 0; r < rows; r += MHA_A16_ROWS) {
            const int rr = rows - r < MHA_A16_ROWS ? rows - r : MHA_A16_ROWS;
            if (!p[0]) { /* padding: its sums are 0 */
                put_rows(k, zeros, 0, r0 + r, rr, j, cols, beta, c);
                continue;
            }
            float acc[MHA_A16_ROWS * LD] = {0};
            k->qdot16->dot[t->index](t, p, np, b->kk, xq + (size_t)r * xs, xs, rr, acc, LD);
            put_rows(k, acc, LD, r0 + r, rr, j, cols, beta, c);
        }
        j += np * MHA_QP;
    }
}

void mha_qgemm16(const mha_kernel *k, int m, int n, const unsigned char *xq, const float *a, ptrdiff_t lda,
                 const mha_qmat *b, int col, float beta, mha_mat c, void *room)
{
    const size_t xs = mha_a16_row_bytes(b->kk);
    for (int r0 = 0; r0 < m; r0 += QROWS) {
        const int rows = m - r0 < QROWS ? m - r0 : QROWS;
        const unsigned char *x = xq ? xq + (size_t)r0 * xs : room;
        if (!xq)
            for (int r = 0; r < rows; r++)
                mha_a16_pack(a + (size_t)(r0 + r) * lda, b->kk, (unsigned char *)room + (size_t)r * xs);
        row_block16(k, r0, rows, n, x, xs, b, col, beta, c);
    }
}

static int gcd(int a, int b)
{
    return b ? gcd(b, a % b) : a;
}

int mha_qbf16_cols(const mha_kernel *k, int kk)
{
    const int step = k->bw / gcd(k->bw, MHA_QP) * MHA_QP;
    const size_t fit = MHA_QBF16_BYTES / (mha_bk_kp(kk) * sizeof(mha_bf16)) / (size_t)step * (size_t)step;
    return fit > (size_t)step ? (int)fit : step;
}

/* Panel p (type t) of kk inputs into a bf16 B panel at dst (B's layout is k pair by k pair: input
 * i's pair starts i·MHA_QP elements in): a group at a time by the table's k->qbf16, or QCHUNK
 * inputs at a time dequantized into floats (L1), then rounded as the table packs any float B. */
static void panel_bf16(const mha_kernel *k, const unsigned char *p, const mha_qtype *t, int kk, mha_bf16 *dst)
{
    const mha_qkernels *qk = k->isa->quant;
    const size_t block_bytes = MHA_QP * t->bytes;
    const int groups = t->qk / MHA_QG;
    if (k->qbf16) {
        /* the panel from memory, walked once in order: a group's share of its bytes asked for
         * MHA_QPREFETCH_GROUPS groups ahead, so the reads overlap the dequantizing */
        const size_t share = block_bytes / (size_t)groups;
        for (int g = 0; g < kk / MHA_QG; g++) {
            for (size_t at = 0; at < share; at += 64)
                __builtin_prefetch(p + (size_t)(g + MHA_QPREFETCH_GROUPS) * share + at, 0, 3);
            k->qbf16->dequant[t->index](p + (size_t)(g / groups) * block_bytes, g % groups,
                                        dst + (size_t)g * MHA_QG * MHA_QP);
        }
        return;
    }
    float w[QCHUNK * MHA_QP];
    for (int k0 = 0; k0 < kk; k0 += QCHUNK) {
        const int kc = kk - k0 < QCHUNK ? kk - k0 : QCHUNK; /* whole groups, so whole k pairs */
        for (int g = k0 / MHA_QG; g < (k0 + kc) / MHA_QG; g++)
            qk->dequant[t->index](p + (size_t)(g / groups) * block_bytes, g % groups, w + (size_t)(g * MHA_QG - k0) * MHA_QP);
        k->isa->pack_b16(k, mha_mat_rows(k, w, MHA_QP), 0, kc, MHA_QP, dst + (size_t)k0 * MHA_QP, mha_bk_ps(kk));
    }
}

void mha_qgemm_bf16(const mha_kernel *k, const mha_bkernel *bk, int m, int n, const mha_bf16 *xp, const float *a,
                    ptrdiff_t lda, const mha_qmat *b, int col, float beta, mha_mat c, mha_bf16 *apack,
                    mha_bf16 *wpack)
{
    const int kk = b->kk, most = mha_qbf16_cols(k, kk) / MHA_QP;
    const size_t ps = mha_bk_ps(kk);
    const int block = xp ? m : MHA_QBF16_ROWS;
    for (int r0 = 0; r0 < m; r0 += block) {
        const int rows = m - r0 < block ? m - r0 : block;
        const mha_bf16 *ap = xp ? xp : apack;
        if (!xp)
            mha_bk_pack_a(k, mha_mat_rows(k, a, lda), r0, rows, kk, apack);
        for (int j = 0; j < n;) {
            const mha_qtype *t;
            const unsigned char *p = mha_qmat_panel(b, col + j, &t);
            if (!p) { /* padding: its sums are 0 */
                const int cols = n - j < MHA_QP ? n - j : MHA_QP;
                put_rows(k, zeros, 0, r0, rows, j, cols, beta, c);
                j += MHA_QP;
                continue;
            }
            /* the stored panels from j on, up to most: each of its own type */
            int np = 0;
            while (p) {
                panel_bf16(k, p, t, kk, wpack + (size_t)np++ * ps);
                p = np < most && j + np * MHA_QP < n ? mha_qmat_panel(b, col + j + np * MHA_QP, &t) : NULL;
            }
            const int cols = n - j < np * MHA_QP ? n - j : np * MHA_QP;
            mha_bgemm(bk, k, rows, cols, kk, 1.0f, ap, mha_mat_rows(k, a, lda), wpack, ps, beta,
                      mha_mat_sub(k, c, r0, j), NULL);
            j += np * MHA_QP;
        }
    }
}
