/* bgemm.h — bf16 matrix products with float32 accumulation: the tile layouts, the kernels
 * that run them, and the portable model every kernel is checked against.
 *
 * Operands are rounded to bfloat16 (nearest even) as they are packed; products of two bf16
 * are exact in float32 within its normal range (the FMA kernels fuse them, the model rounds
 * them: the two part only on a product below 2^-126 or above FLT_MAX), and every sum is rounded
 * to float32 (nearest even, denormal sums flushed to zero), but for BFDOT's pairs. The order of the sums is the instruction's, one of
 * four (mha_bk_order):
 *   even first, odd first: one accumulator, k pair by k pair in increasing k, the pair's two
 *     products added one at a time, even element first (FMA on widened bf16; Intel's SDM for
 *     tdpbf16ps reads so, hardware does not) or odd first (vdpbf16ps, measured bitwise on Xeon
 *     model 207);
 *   tile lanes (AMX tdpbf16ps, measured bitwise on a Sapphire Rapids Xeon, perf/RESULTS.md):
 *     per k tile of 32, the even products and the odd products each summed in their own chain
 *     from zero in increasing k, then acc += (even + odd), two more roundings;
 *   pairs to odd (Arm's BFDOT without FEAT_EBF16's mode, Arm ARM's BFDOT (vector)): one accumulator,
 *     k pair by k pair in increasing k, acc += (even product + odd product), each product, the
 *     pair's sum and the accumulation rounded to odd (an inexact result truncated, its last
 *     bit set) and flushed to zero when the exact value is below FLT_MIN (Arm decides before
 *     rounding), an overflow to infinity.
 * The whole of k is summed in one pass, so a result never depends on how rows and columns are
 * blocked or which worker computes them.
 *
 * Layouts (k padded with zeros to whole tiles of MHA_BT_K):
 *   A, panels of 16 rows, in each tiles of 16 rows × 32 k, row-major (an AMX A tile):
 *     (i, p) at a[(i / 16)·16·kp + (p / 32)·512 + (i % 16)·32 + p % 32]
 *   B, panels of 16 columns, k pairs interleaved (VNNI; an AMX B tile is 16 pairs):
 *     (p, j) at b[(j / 16)·ps + (p / 2)·32 + (j % 16)·2 + p % 2],   ps >= kp·16
 * where kp = kk rounded up to 32. */
#ifndef MHA_BGEMM_H
#define MHA_BGEMM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"

typedef uint16_t mha_bf16;

enum { MHA_BT_M = 16, MHA_BT_N = 16, MHA_BT_K = 32 };
/* bf16 elements of one tile: an A tile (16 rows × 32 k) and a B tile (16 k pairs × 16 columns
 * × 2) alike. */
enum { MHA_BT_ELEMS = MHA_BT_M * MHA_BT_K };

/* float -> bf16, nearest even; a denormal becomes a signed zero (what the instructions do with
 * denormal inputs), NaN stays a quiet NaN (as vcvtneps2bf16). */
static inline mha_bf16 mha_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0)
        return (mha_bf16)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (mha_bf16)((u >> 16) | 0x0040u);
    return (mha_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float mha_bf16_float(mha_bf16 h)
{
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* IEEE binary16 (an int8 cache's K parameters; safetensors' F16 tensors): its bits. */
typedef uint16_t mha_f16;

/* binary16 -> float, exact (inf and NaN kept): no loop, so a loop of them vectorises (a
 * subnormal is its 10 bits times 2^-24, a normal float32 whatever the rounding mode). */
static inline float mha_f16_float(mha_f16 h)
{
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const uint32_t normal = e == 31 ? 0x7f800000u | m << 13 : (e + 112) << 23 | m << 13;
    float f, sub = (float)m * 0x1p-24f;
    memcpy(&f, &normal, sizeof f);
    f = e == 0 ? sub : f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* float -> binary16, nearest even (subnormal results too; past its range: inf; NaN stays a
 * quiet NaN). */
static inline mha_f16 mha_f16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (mha_f16)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* 65520 and above (inf too): past the largest, 65504, by half its step */
        return (mha_f16)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal result, steps of 2^-24 */
        if (a < 0x33000000u) /* at most 2^-25: rounds to zero (2^-25 itself is a tie, to even) */
            return (mha_f16)sign;
        const uint32_t man = (a & 0x7fffffu) | 0x800000u, shift = 126 - (a >> 23); /* 14..24 */
        const uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1), q = man >> shift;
        return (mha_f16)(sign | (q + (rest > half || (rest == half && (q & 1u)))));
    }
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* the 13 bits dropped, nearest even */
    return (mha_f16)(sign | ((r >> 13) - (112u << 10)));
}

/* A sum as the kernels leave it: a denormal flushed to a zero of its sign (FTZ). */
static inline float mha_bk_ftz(float x)
{
    return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

/* The order of a kernel's sums (see the top of this file). */
typedef enum { MHA_BK_EVEN_FIRST, MHA_BK_ODD_FIRST, MHA_BK_TILE_LANES, MHA_BK_PAIRS_ODD } mha_bk_order;

/* One of BFDOT's steps as the model takes it (pairs to odd): x + y rounded to odd, flushed
 * below FLT_MIN. */
float mha_bk_odd_sum(float x, float y);

/* A bf16 kernel of a table (src/isa/): "ref-bf16" (the model), "fma-bf16" (AVX-512F FMA on
 * widened bf16), "avx512-bf16" (vdpbf16ps), "amx-bf16" (AMX tiles), "avx2-bf16" (AVX2 FMA on
 * widened bf16), "neon-bf16" (NEON FMA on widened bf16), "neon-bfdot" (BFDOT). */
typedef struct mha_bkernel {
    const char *name;   /* as mha_engine_kernel names it */
    mha_bk_order order; /* the order of its sums */
    int (*usable)(void);/* NULL: wherever its table runs; else whether this CPU has what it
                         * needs (a query: changes nothing) */
    const char *lacks;  /* why not, when usable() says no */
    int (*enable)(void);/* NULL, or what the process asks once before the first use (AMX:
                         * Linux's tile data permission); 0 if refused */
    void (*begin)(void), (*end)(void); /* hardware context (AMX tile configuration) around
                                        * a thread's run of products; NULL: none */
    /* mha_bk_block's contract; pf: B comes from memory (a product of few rows reads it
     * once): prefetch it ahead */
    void (*block)(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *acc, int pf);
    /* NULL, or block and the table's epilogue_block in one: C's rows (c0: columns 0-15, c1:
     * 16-31 when cols > 16; ldc apart) = alpha·sums + beta·C (beta 0: C not read), the bits
     * of block then epilogue_block; bias set: + bias[j] in every row in place of beta·C
     * (C not read), the bits of C's rows filled with bias and beta 1 */
    void (*block_c)(int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps, float *c0, float *c1,
                    ptrdiff_t ldc, int cols, float alpha, float beta, const float *bias, int pf);
} mha_bkernel;

/* Once per process before the first product (at create: a check never calls it); 0 when the OS
 * refused. NULL or a kernel without the need: 1. */
int mha_bkernel_enable(const mha_bkernel *bk);
/* A thread's stretch of products of kernel bk (NULL: no-op) runs between these: the
 * scheduler enters it once per worker and parallel region, not once per product. */
void mha_bk_begin(const mha_bkernel *bk);
void mha_bk_end(const mha_bkernel *bk);

static inline size_t mha_bk_kp(int kk)
{
    return mha_round_up((size_t)(kk > 0 ? kk : 0), MHA_BT_K);
}
/* Elements per B panel of depth kk: the smallest panel stride. */
static inline size_t mha_bk_ps(int kk)
{
    return mha_bk_kp(kk) * MHA_BT_N;
}
/* bf16 elements of A packed (rows rounded to panels) and of B (cols rounded to panels). */
static inline size_t mha_bk_a_elems(int rows, int kk)
{
    return mha_round_up((size_t)rows, MHA_BT_M) * mha_bk_kp(kk);
}
static inline size_t mha_bk_b_elems(int kk, int cols)
{
    return mha_bk_kp(kk) * mha_round_up((size_t)cols, MHA_BT_N);
}
/* The A layout's one index: where row i of A panels of kt k tiles starts (its element p of k
 * is at + (p / 32)·MHA_BT_ELEMS + p % 32). */
static inline size_t mha_bk_a_row(int i, int kt)
{
    return (size_t)(i / MHA_BT_M) * MHA_BT_M * MHA_BT_K * (size_t)kt + (size_t)(i % MHA_BT_M) * MHA_BT_K;
}
static inline size_t mha_bk_b_index(int p, int j, size_t ps)
{
    return (size_t)(j / 16) * ps + (size_t)(p / 2) * 32 + (size_t)(j % 16) * 2 + (size_t)(p % 2);
}

/* Rows [i0, i0 + rows) of a (float, any mha_mat form of kernel k), all kk columns, into A
 * panels at dst (rows a multiple of 16 except at the end of a; padding is zero). */
void mha_bk_pack_a(const mha_kernel *k, mha_mat a, int i0, int rows, int kk, mha_bf16 *dst);
/* The same from bf16 rows ld elements apart (rows [0, rows), kk each), copied. */
void mha_bk_copy_a(const mha_bf16 *src, ptrdiff_t ld, int rows, int kk, mha_bf16 *dst);
/* Row i of A panels of depth kk at dst = the kk contiguous floats at x (rounded), as
 * mha_bk_pack_a writes it; the panel's other rows untouched. */
void mha_bk_pack_a_row(const mha_kernel *k, const float *x, int i, int kk, mha_bf16 *dst);
/* B (kk × n) = src (kk × n), or srcᵀ when transpose (src is n × kk), into B panels of stride
 * ps; zero padding to whole tiles and panels. */
void mha_bk_pack_b(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);

/* The same from bf16 elements (src's rows ld apart: kk × n, or n × kk when transpose), copied:
 * pairs of a row's elements as 32-bit words through the table's pack_rows (transpose) or
 * pairs of rows through its interleave_pairs where whole, element by element elsewhere. */
void mha_bk_pack_b_bf16(const mha_kernel *k, const mha_bf16 *src, ptrdiff_t ld, int transpose, int kk, int n,
                        mha_bf16 *dst, size_t ps);

/* bf16 of scratch mha_bgemm needs to pack A for products of depth up to kk. */
static inline size_t mha_bgemm_apack_elems(int kk)
{
    return mha_bk_a_elems(2 * MHA_BT_M, kk);
}

/* C (m × n) = alpha · A · B + beta · C (beta = 0: C is not read), A (m × kk) from ap packed
 * (mha_bk_pack_a of those rows), or from the float a packed here into apack when ap is NULL;
 * B packed with panel stride ps; C float in kernel k's mha_mat form. The epilogue is the same
 * float32 code for every kernel: c = alpha·acc, then + beta·c, each rounded. Runs between
 * mha_bk_begin and mha_bk_end of bk on the calling thread. */
void mha_bgemm(const mha_bkernel *bk, const mha_kernel *k, int m, int n, int kk, float alpha, const mha_bf16 *ap,
               mha_mat a, const mha_bf16 *b, size_t ps, float beta, mha_mat c, mha_bf16 *apack);
/* mha_bgemm with alpha 1 and C = A · B + bias (n floats, added to every row; C not read): the
 * bits of C's rows filled with bias then mha_bgemm with beta 1, the bias added as each block is
 * stored (a kernel with block_c) or each block's rows filled just before its epilogue. */
void mha_bgemm_bias(const mha_bkernel *bk, const mha_kernel *k, int m, int n, int kk, const mha_bf16 *ap, mha_mat a,
                    const mha_bf16 *b, size_t ps, const float *bias, mha_mat c, mha_bf16 *apack);

/* The accumulators of one block (entering and leaving bk's hardware context): acc[i·32 + j] (i < rows ≤ 32, j < 16·npan, npan 1 or 2) =
 * Σ_k A·B over kt tiles of k, for A panels a (the second at a + 16·kt·32 when rows > 16; a
 * panel's rows past `rows` are read and must be finite) and B panels b (and b + ps).
 * Exposed for the tests: each kernel against the model, bitwise. */
void mha_bk_block(const mha_bkernel *bk, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b,
                  size_t ps, float *acc);
/* The model of that block, in the given order: bitwise what the kernels compute while
 * products and sums stay in float32's normal range (the instructions flush denormal inputs
 * and results; the model does too, but rounds an underflowing product before adding it). */
void mha_bk_block_model(mha_bk_order order, int rows, int npan, int kt, const mha_bf16 *a, const mha_bf16 *b, size_t ps,
                        float *acc);

#endif
