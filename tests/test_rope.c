/* RoPE's table operations and their driver: every table gives ref's bits, ref's are the
 * rotation as written, and mha_rope_rows cuts a head's row into runs that stay inside the
 * panels of any sub-config (odd columns, pairs straddling two panels, negative positions). */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "isa/isa.h"
#include "rope.h"

/* The rotation of one pair as ref writes it: each product, then the difference or sum, rounded. */
static void rotate(float *x, float *y, float c, float s)
{
    const float a = *x, b = *y;
    *x = a * c - b * s;
    *y = b * c + a * s;
}

/* Lengths 1 to 40 (every tail of 8 and 16 lanes), both signs: rope_halves and rope_pairs write
 * ref's bits and nothing past n pairs; ref's are the rotation. */
TABLE_TEST(rope, every_tables_runs_equal_refs_bits)
{
    rng r = {31};
    float a0[48], b0[48], x0[96], c[48], s[48];
    fill_uniform(a0, 48, -4.0f, 4.0f, &r);
    fill_uniform(b0, 48, -4.0f, 4.0f, &r);
    fill_uniform(x0, 96, -4.0f, 4.0f, &r);
    fill_uniform(c, 48, -1.0f, 1.0f, &r);
    fill_uniform(s, 48, -1.0f, 1.0f, &r);
    for (int n = 1; n <= 40; n++)
        for (int neg = 0; neg < 2; neg++) {
            const float sign = neg ? -1.0f : 1.0f;
            float a[48], b[48], x[96], ra[48], rb[48], rx[96];
            memcpy(a, a0, sizeof a), memcpy(b, b0, sizeof b), memcpy(x, x0, sizeof x);
            memcpy(ra, a0, sizeof ra), memcpy(rb, b0, sizeof rb), memcpy(rx, x0, sizeof rx);
            isa->rope_halves(a, b, c, s, sign, n);
            isa->rope_pairs(x, c, s, sign, n);
            for (int j = 0; j < n; j++) {
                rotate(&ra[j], &rb[j], c[j], sign * s[j]);
                rotate(&rx[2 * j], &rx[2 * j + 1], c[j], sign * s[j]);
            }
            cr_assert_eq(memcmp(a, ra, sizeof a), 0, "%s: rope_halves a, n %d, sign %g", isa->name, n, sign);
            cr_assert_eq(memcmp(b, rb, sizeof b), 0, "%s: rope_halves b, n %d, sign %g", isa->name, n, sign);
            cr_assert_eq(memcmp(x, rx, sizeof x), 0, "%s: rope_pairs, n %d, sign %g", isa->name, n, sign);
        }
}

/* mha_rope_rows on a matrix in panel form, every sub-config of every table (panel widths 4 to
 * 32), heads at odd and even columns, neox and gptj, full and partial rotary dims, positions
 * from negative to positive: each row equals the rotation of the same matrix row-major. */
TABLE_TEST(rope, rows_in_panels_equal_the_rotation_of_plain_rows, .timeout = 60)
{
    enum { ROWS = 5, COLS = 83, POS = 8 };
    const int dims[][2] = {{0, 40}, {3, 40}, {5, 24}, {17, 66}, {1, 2}, {40, 34}}; /* col, r */
    float cos_t[POS * 33], sin_t[POS * 33];
    rng g = {9};
    fill_uniform(cos_t, POS * 33, -1.0f, 1.0f, &g);
    fill_uniform(sin_t, POS * 33, -1.0f, 1.0f, &g);
    float plain0[ROWS * COLS];
    fill_uniform(plain0, ROWS * COLS, -2.0f, 2.0f, &g);
    for (int a = 0; isa->archs[a]; a++) {
        mha_kernel k;
        if (mha_kernel_select(isa->archs[a], isa, &k) != MHA_OK)
            continue; /* a sub-config this CPU cannot run */
        const size_t cols = mha_round_up(COLS, (size_t)k.bw);
        float *panels = aligned_alloc(64, mha_round_up(ROWS * cols * sizeof(float), 64));
        for (int d = 0; d < 6; d++)
            for (int style = MHA_ROPE_NEOX; style <= MHA_ROPE_GPTJ; style++) {
                const int col = dims[d][0], rd = dims[d][1], half = rd / 2, pos0 = -2;
                float plain[ROWS * COLS];
                memcpy(plain, plain0, sizeof plain);
                mha_mat m = mha_mat_panels(&k, panels, ROWS);
                for (int i = 0; i < ROWS; i++)
                    for (int j = 0; j < COLS; j++)
                        *mha_mat_at(&k, m, i, j) = plain[i * COLS + j];
                mha_rope_rows(&k, m, ROWS, col, pos0, (mha_rope_style)style, rd, cos_t, sin_t);
                for (int i = 0; i < ROWS; i++) {
                    const int p = pos0 + i, ap = p < 0 ? -p : p;
                    for (int j = 0; j < half; j++) {
                        const int x = style == MHA_ROPE_NEOX ? j : 2 * j, y = style == MHA_ROPE_NEOX ? j + half : 2 * j + 1;
                        rotate(&plain[i * COLS + col + x], &plain[i * COLS + col + y], cos_t[ap * half + j],
                               (p < 0 ? -1.0f : 1.0f) * sin_t[ap * half + j]);
                    }
                    for (int j = 0; j < COLS; j++) {
                        const float got = *mha_mat_at(&k, m, i, j), want = plain[i * COLS + j];
                        cr_assert_eq(memcmp(&got, &want, sizeof got), 0,
                                     "%s/%s (bw %d), %s, col %d, r %d: row %d, column %d: %a, want %a", isa->name,
                                     isa->archs[a], k.bw, style == MHA_ROPE_NEOX ? "neox" : "gptj", col, rd, i, j,
                                     (double)got, (double)want);
                    }
                }
            }
        free(panels);
    }
}
