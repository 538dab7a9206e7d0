/* neon_bf16.c — the neon table's bf16 products (mha_bkernel's block on bgemm.h's layouts):
 *   neon-bf16   FMLA on bf16 widened to float32 (a shift or a mask: exact), even element of
 *               each k pair first, under FPCR.FZ: every aarch64 core; the model's even-first
 *               sums, so ref-bf16's bits.
 *   neon-bfdot  BFDOT (FEAT_BF16): a pair's two products in one instruction, each step
 *               rounded to odd (bgemm.h: pairs to odd), its own bits.
 * Both run a block as groups of up to 4 rows against one 16-column panel at a time: 16
 * accumulators, the panel's pair row (4 registers of 4 columns × 2) and the rows' A elements
 * in 32 registers. FMLA is fused where the model rounds a product before its sum (x86's FMA
 * kernels alike): the two part only on a product outside float32's normal range. */
#include "neon.h"

/* bf16 pairs (even element low) as float32 lanes: the even elements, the odd ones. */
static inline __attribute__((always_inline)) float32x4_t even_of(uint16x8_t v)
{
    return vreinterpretq_f32_u32(vshlq_n_u32(vreinterpretq_u32_u16(v), 16));
}
static inline __attribute__((always_inline)) float32x4_t odd_of(uint16x8_t v)
{
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_u16(v), vdupq_n_u32(0xffff0000u)));
}

/* R rows of 16 sums into acc's rows (32 floats apart). */
static inline __attribute__((always_inline)) void store_rows(const int R, float32x4_t c[4][4], float *acc)
{
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            vst1q_f32(acc + (size_t)r * 32 + 4 * v, c[r][v]);
}

/* The B lines of the panel's next k tile, while this one computes (B from memory: pf). */
static inline __attribute__((always_inline)) void prefetch_tile(const mha_bf16 *bt)
{
    for (int l = 0; l < MHA_BT_ELEMS * 2; l += 64)
        __builtin_prefetch((const char *)bt + l);
}

/* One k pair's row of B (pr) into R rows' accumulators, A's pair at lanes 2h, 2h + 1 of x[r]:
 * column group by column group, so that two B registers are live at a time. */
static inline __attribute__((always_inline)) void pair_fma(const int R, float32x4_t c[4][4], const float32x4_t x[4],
                                                          const mha_bf16 *pr, const int h)
{
    for (int v = 0; v < 4; v++) {
        const uint16x8_t w = vld1q_u16(pr + 8 * v);
        const float32x4_t e = even_of(w), o = odd_of(w);
        for (int r = 0; r < R; r++)
            c[r][v] = fma_lane(fma_lane(c[r][v], e, x[r], 2 * h), o, x[r], 2 * h + 1);
    }
}

/* Rows i0 .. i0 + R - 1 against the panel at bp (its columns col0 .. col0 + 15 of acc). */
static inline __attribute__((always_inline)) void rows_fma(const int R, int i0, int kt, const mha_bf16 *a,
                                                          const mha_bf16 *bp, float *acc, int col0, int pf)
{
    float32x4_t c[4][4] = {{vdupq_n_f32(0.0f)}};
    for (int t = 0; t < kt; t++) {
        const mha_bf16 *bt = bp + (size_t)t * MHA_BT_ELEMS;
        if (pf && t + 1 < kt)
            prefetch_tile(bt + MHA_BT_ELEMS);
        for (int q0 = 0; q0 < MHA_BT_K / 2; q0 += 2) { /* two k pairs: 4 of A's elements a row */
            float32x4_t x[4];
            for (int r = 0; r < R; r++)
                x[r] = vreinterpretq_f32_u32(
                    vshll_n_u16(vld1_u16(a + mha_bk_a_row(i0 + r, kt) + (size_t)t * MHA_BT_ELEMS + 2 * q0), 16));
            pair_fma(R, c, x, bt + 32 * q0, 0); /* the lanes written out: fma_lane's must be constants */
            pair_fma(R, c, x, bt + 32 * (q0 + 1), 1);
        }
    }
    store_rows(R, c, acc + (size_t)i0 * 32 + col0);
}

/* A block's panels one by one, its rows 4, then 2, then 1 at a time through fn; the first
 * group of a panel prefetches B (pf). */
#define PANELS(fn)                                                                                                     \
    for (int p = 0; p < npan; p++) {                                                                                   \
        const mha_bf16 *bp = b + (size_t)p * ps;                                                                       \
        int i = 0;                                                                                                     \
        for (; i + 4 <= rows; i += 4)                                                                                  \
            fn(4, i, kt, a, bp, acc, 16 * p, pf && i == 0);                                                            \
        if (i + 2 <= rows)                                                                                             \
            fn(2, i, kt, a, bp, acc, 16 * p, pf && i == 0), i += 2;                                                    \
        if (i < rows)                                                                                                  \
            fn(1, i, kt, a, bp, acc, 16 * p, pf && i == 0);                                                            \
    }

static void block_fma(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc, int pf)
{
    const uint64_t fpcr = fz_begin();
    PANELS(rows_fma)
    fz_end(fpcr);
}

const mha_bkernel mha_bk_neon = {.name = "neon-bf16", .order = MHA_BK_EVEN_FIRST, .block = block_fma};

/* BFDOT in asm, on uint16 vectors: GCC's target attribute for bf16 sets a baseline that a -mcpu
 * in CFLAGS does not match (it then inlines nothing into the function), and clang's bf16 types
 * need the whole file built for bf16. GCC's assembler takes the extension from a directive;
 * clang's (14) does not know it there, and takes it from the functions' target instead, which
 * clang adds to the baseline. */
#if defined(__clang__)
#define BF16_FN __attribute__((target("bf16")))
#define BF16_ASM ""
#else
#define BF16_FN
#define BF16_ASM ".arch_extension bf16\n\t"
#endif

/* acc + BFDOT of w's 4 pairs with x's pair l (l a constant where it is inlined). */
BF16_FN static inline __attribute__((always_inline)) float32x4_t bfdot_lane(float32x4_t acc, uint16x8_t w,
                                                                            uint16x8_t x, const int l)
{
#define BFDOT(l) __asm__(BF16_ASM "bfdot %0.4s, %1.8h, %2.2h[" #l "]" : "+w"(acc) : "w"(w), "w"(x))
    switch (l) {
    case 0:
        BFDOT(0);
        break;
    case 1:
        BFDOT(1);
        break;
    case 2:
        BFDOT(2);
        break;
    default:
        BFDOT(3);
        break;
    }
#undef BFDOT
    return acc;
}

/* One k pair's row of B (pr) into R rows' accumulators by BFDOT, A's pair at lane h of x[r]. */
BF16_FN static inline __attribute__((always_inline)) void pair_dot(const int R, float32x4_t c[4][4],
                                                                   const uint16x8_t x[4], const mha_bf16 *pr,
                                                                   const int h)
{
    for (int v = 0; v < 4; v++) {
        const uint16x8_t w = vld1q_u16(pr + 8 * v);
        for (int r = 0; r < R; r++)
            c[r][v] = bfdot_lane(c[r][v], w, x[r], h);
    }
}

/* The same on BFDOT: the 4 pairs of A's 8 elements a row, each by its lane. */
BF16_FN static inline __attribute__((always_inline)) void rows_dot(const int R, int i0, int kt, const mha_bf16 *a,
                                                                   const mha_bf16 *bp, float *acc, int col0, int pf)
{
    float32x4_t c[4][4] = {{vdupq_n_f32(0.0f)}};
    for (int t = 0; t < kt; t++) {
        const mha_bf16 *bt = bp + (size_t)t * MHA_BT_ELEMS;
        if (pf && t + 1 < kt)
            prefetch_tile(bt + MHA_BT_ELEMS);
        for (int q0 = 0; q0 < MHA_BT_K / 2; q0 += 4) {
            uint16x8_t x[4];
            for (int r = 0; r < R; r++)
                x[r] = vld1q_u16(a + mha_bk_a_row(i0 + r, kt) + (size_t)t * MHA_BT_ELEMS + 2 * q0);
            pair_dot(R, c, x, bt + 32 * q0, 0); /* the lanes written out: constants */
            pair_dot(R, c, x, bt + 32 * (q0 + 1), 1);
            pair_dot(R, c, x, bt + 32 * (q0 + 2), 2);
            pair_dot(R, c, x, bt + 32 * (q0 + 3), 3);
        }
    }
    store_rows(R, c, acc + (size_t)i0 * 32 + col0);
}

/* Under FPCR.EBF clear: on a core with FEAT_EBF16 a caller's EBF 1 would fuse the pair's
 * products (other bits); without the feature the bit is RES0, written as it was. */
BF16_FN static void block_dot(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps,
                              float *acc, int pf)
{
    const uint64_t fpcr = fpcr_get(), ebf = 1u << 13;
    if (fpcr & ebf)
        fpcr_set(fpcr & ~ebf);
    PANELS(rows_dot)
    if (fpcr & ebf)
        fpcr_set(fpcr);
}

static int dot_usable(void)
{
    return mha_cpu_has("bf16");
}

const mha_bkernel mha_bk_bfdot = {
    .name = "neon-bfdot",
    .order = MHA_BK_PAIRS_ODD,
    .usable = dot_usable,
    .lacks = "this CPU has no BF16 (FEAT_BF16: BFDOT)",
    .block = block_dot,
};

/* ---- rounding into bf16 and the products' epilogue (ref's bits) ---- */

void mha_round_to_bf16_neon(const float *restrict x, int n, mha_bf16 *restrict d)
{
    int i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(d + i, bf16_round4(vld1q_f32(x + i)));
    for (; i < n; i++)
        d[i] = mha_bf16_round(x[i]);
}

void mha_round_bf16_floats_neon(float *x, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(x + i, vreinterpretq_f32_u32(vshll_n_u16(bf16_round4(vld1q_f32(x + i)), 16)));
    for (; i < n; i++)
        x[i] = mha_bf16_float(mha_bf16_round(x[i]));
}

void mha_round_into_tiles_neon(const float *src, int c, int n, mha_bf16 *d)
{
    for (int t = 0; t < n;) { /* a run within one tile's row of MHA_BT_K */
        const int e = c + t, run = n - t < MHA_BT_K - e % MHA_BT_K ? n - t : MHA_BT_K - e % MHA_BT_K;
        mha_round_to_bf16_neon(src + t, run, d + (size_t)(e / MHA_BT_K) * MHA_BT_ELEMS + e % MHA_BT_K);
        t += run;
    }
}

/* C = alpha·acc (+ beta·C), each product and the sum rounded apart, as ref's loop. */
void mha_epilogue_block_neon(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                             float beta)
{
    for (int i = 0; i < rows; i++)
        for (int h = 0; h * 16 < cols; h++) {
            float *c = (h ? c1 : c0) + (ptrdiff_t)i * ldc;
            const float *a = acc + i * 32 + 16 * h;
            const int n = cols - 16 * h < 16 ? cols - 16 * h : 16;
            int j = 0;
            for (; j + 4 <= n; j += 4) {
                const float32x4_t y = vmulq_n_f32(vld1q_f32(a + j), alpha);
                vst1q_f32(c + j, beta == 0.0f ? y : vaddq_f32(y, vmulq_n_f32(vld1q_f32(c + j), beta)));
            }
            for (; j < n; j++) {
                const float y = alpha * a[j];
                c[j] = beta == 0.0f ? y : y + beta * c[j];
            }
        }
}

/* B panels 4 k × 4 columns at a time: 4 source rows loaded (transposed: keys' rows of 4
 * features, turned by a register transpose), each k pair rounded and interleaved into 8 words
 * (4 columns' pairs). src's 4-column runs must not cross its panels (else ref's). */
void mha_pack_b16_neon(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps)
{
    if (k->bw % 4 != 0) {
        mha_pack_b16_ref(k, src, transpose, kk, n, dst, ps);
        return;
    }
    const int kp = (int)mha_bk_kp(kk), np = (int)mha_round_up((size_t)n, MHA_BT_N);
    for (int j0 = 0; j0 < np; j0 += 4)
        for (int p0 = 0; p0 < kp; p0 += 4) {
            float32x4_t v[4];
            /* rows of src: k (features of the keys' rows when transposed) or columns */
            const int rows = transpose ? n - j0 : kk - p0, cols = transpose ? kk - p0 : n - j0;
            for (int r = 0; r < 4; r++)
                v[r] = r < rows && cols > 0 ? load4_n(transpose ? mha_mat_at(k, src, j0 + r, p0)
                                                                : mha_mat_at(k, src, p0 + r, j0), cols)
                                            : vdupq_n_f32(0.0f);
            if (transpose)
                transpose4(v); /* v[r]: k p0 + r over the 4 columns */
            for (int r = 0; r < 4; r += 2) {
                const uint16x4x2_t pair = {{bf16_round4(v[r]), bf16_round4(v[r + 1])}};
                vst2_u16(dst + mha_bk_b_index(p0 + r, j0, ps), pair);
            }
        }
}

/* ---- the bf16 decode's gather of a cache chunk into panels ---- */

/* 16 elements of a row at r as bf16: a bf16 row's as they are, an int8 row's converted (exact in
 * bf16: its float32's low half is zero). */
static inline __attribute__((always_inline)) uint16x8x2_t row16(const int i8, const char *r)
{
    if (!i8)
        return (uint16x8x2_t){{vld1q_u16((const uint16_t *)(const void *)r),
                               vld1q_u16((const uint16_t *)(const void *)r + 8)}};
    const int8x16_t b = vld1q_s8((const int8_t *)r);
    const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
#define BF16_OF(h) vreinterpretq_u32_f32(vcvtq_f32_s32(h))
    return (uint16x8x2_t){{vcombine_u16(vshrn_n_u32(BF16_OF(vmovl_s16(vget_low_s16(lo))), 16),
                                        vshrn_n_u32(BF16_OF(vmovl_high_s16(lo)), 16)),
                           vcombine_u16(vshrn_n_u32(BF16_OF(vmovl_s16(vget_low_s16(hi))), 16),
                                        vshrn_n_u32(BF16_OF(vmovl_high_s16(hi)), 16))}};
#undef BF16_OF
}

/* Pair p of rows (2p, 2p + 1; ld elements apart) interleaved element by element into 32 words:
 * a B panel's pair row. */
static inline __attribute__((always_inline)) void interleave_rows(const int i8, const void *src, size_t ld, int pairs,
                                                                 mha_bf16 *restrict dst, const char *next, int pf)
{
    const size_t row = ld * (i8 ? 1 : sizeof(mha_bf16));
    const char *r = src;
    for (int p = 0; p < pairs; p++, r += 2 * row, dst += 2 * MHA_BT_N) {
        if (next)
            __builtin_prefetch(next + (size_t)pf * p);
        const uint16x8x2_t a = row16(i8, r), b = row16(i8, r + row);
        vst2q_u16(dst, ((uint16x8x2_t){{a.val[0], b.val[0]}}));
        vst2q_u16(dst + MHA_BT_N, ((uint16x8x2_t){{a.val[1], b.val[1]}}));
    }
}

void mha_interleave_pairs_neon(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(0, src, ld, pairs, dst, next, 64);
}

void mha_interleave_pairs_i8_neon(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst, const char *next)
{
    interleave_rows(1, src, ld, pairs, dst, next, 32);
}
