/* products.c — the float32, bf16 and quantized-weight products on packed weights (products.h). */
#include "products.h"

#include "qgemm.h"

/* c's m rows filled with bias (n columns) for products that add to c (beta 1); NULL: beta 0. */
static float bias_rows(const mha_kernel *k, mha_mat c, int m, int n, const float *bias)
{
    if (!bias)
        return 0.0f;
    mha_mat_fill_rows(k, c, m, n, bias);
    return 1.0f;
}

static int a_panel_f32(const mha_kernel *k)
{
    return k->aw;
}

static size_t a_row_f32(int d)
{
    return (size_t)d;
}

static void pack_a_f32(const mha_kernel *k, mha_mat x, int r0, int m, int d, void *dst)
{
    mha_gemm_pack_a(k, x, r0, m, 0, d, dst);
}

static void pack_b_f32(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, void *dst)
{
    mha_pack_panels(k, kk, n, src, transpose, dst);
}

static void gemm_f32(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b, int col,
                     const float *bias, mha_mat c)
{
    const mha_kernel *k = g->k;
    const float beta = bias_rows(k, c, m, n, bias);
    const mha_mat bm = mha_mat_sub(k, mha_mat_panels(k, b, kk), 0, col);
    if (xp && !mha_gemm_few_rows(k, m)) /* few rows are read from a itself */
        mha_gemm_prepacked(k, m, n, kk, 1.0f, xp, bm, beta, c);
    else
        mha_gemm(k, m, n, kk, 1.0f, a, bm, beta, c, g->apack);
}

static int a_panel_bf16(const mha_kernel *k)
{
    (void)k;
    return MHA_BT_M;
}

static size_t a_row_bf16(int d)
{
    return mha_bk_kp(d);
}

static void pack_a_bf16(const mha_kernel *k, mha_mat x, int r0, int m, int d, void *dst)
{
    mha_bk_pack_a(k, x, r0, m, d, dst);
}

static void pack_b_bf16(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, void *dst)
{
    mha_bk_pack_b(k, src, transpose, kk, n, dst, mha_bk_ps(kk));
}

/* The bias added as each block of c is stored (mha_bgemm_bias), not filled into c first. */
static void gemm_bf16(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b, int col,
                      const float *bias, mha_mat c)
{
    const size_t ps = mha_bk_ps(kk);
    const mha_bf16 *bp = (const mha_bf16 *)b + (size_t)(col / MHA_BT_N) * ps;
    if (bias)
        mha_bgemm_bias(g->bk, g->k, m, n, kk, xp, a, bp, ps, bias, c, g->apack);
    else
        mha_bgemm(g->bk, g->k, m, n, kk, 1.0f, xp, a, bp, ps, 0.0f, c, g->apack);
}

static const mha_products f32 = {.esz = sizeof(float), .a_panel = a_panel_f32, .a_row = a_row_f32,
                                  .pack_a = pack_a_f32, .pack_b = pack_b_f32, .gemm = gemm_f32};
static const mha_products bf16 = {.esz = sizeof(mha_bf16), .a_panel = a_panel_bf16, .a_row = a_row_bf16,
                                   .pack_a = pack_a_bf16, .pack_b = pack_b_bf16, .gemm = gemm_bf16};

/* Quantized weights: A is read in place, float32 rows (nothing to pack); b is an mha_qmat. */
static int a_panel_quant(const mha_kernel *k)
{
    (void)k;
    return 1;
}

static size_t a_row_quant(int d)
{
    (void)d;
    return 0;
}

static void pack_a_quant(const mha_kernel *k, mha_mat x, int r0, int m, int d, void *dst)
{
    (void)k, (void)x, (void)r0, (void)m, (void)d, (void)dst;
}

static void gemm_quant(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b, int col,
                       const float *bias, mha_mat c)
{
    (void)kk, (void)xp; /* the matrix knows its inputs */
    mha_qgemm(g->k, m, n, a.p, a.ld, b, col, bias_rows(g->k, c, m, n, bias), c);
}

/* pack_b: none (weights.c packs the panels; MLA takes no quantized weights). */
static const mha_products quant = {.esz = sizeof(float), .a_panel = a_panel_quant, .a_row = a_row_quant,
                                    .pack_a = pack_a_quant, .gemm = gemm_quant};

/* Quantized weights on int16 activations: A packed as mha_a16_pack's rows (bytes). */
static size_t a_row_quant16(int d)
{
    return mha_a16_row_bytes(d);
}

static void pack_a_quant16(const mha_kernel *k, mha_mat x, int r0, int m, int d, void *dst)
{
    for (int r = 0; r < m; r++)
        mha_a16_pack(mha_mat_at(k, x, r0 + r, 0), d, (unsigned char *)dst + (size_t)r * mha_a16_row_bytes(d));
}

static void gemm_quant16(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b,
                        int col, const float *bias, mha_mat c)
{
    (void)kk;
    mha_qgemm16(g->k, m, n, xp, a.p, a.ld, b, col, bias_rows(g->k, c, m, n, bias), c, g->apack);
}

static const mha_products quant16 = {.esz = 1, .a_panel = a_panel_quant, .a_row = a_row_quant16,
                                     .pack_a = pack_a_quant16, .gemm = gemm_quant16};

/* Block weights in a bf16 engine: A packed as bf16's, the products mha_qgemm_bf16's (the bits
 * of a bf16 engine holding the dequantized floats). */
static void gemm_quant_bf16(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b,
                            int col, const float *bias, mha_mat c)
{
    (void)kk;
    mha_qgemm_bf16(g->k, g->bk, m, n, xp, a.p, a.ld, b, col, bias_rows(g->k, c, m, n, bias), c, g->apack, g->wpack);
}

static const mha_products quant_bf16 = {.esz = sizeof(mha_bf16), .a_panel = a_panel_bf16, .a_row = a_row_bf16,
                                        .pack_a = pack_a_bf16, .gemm = gemm_quant_bf16};

const mha_products *mha_products_of(const mha_bkernel *bk, int quantized, mha_activations acts)
{
    if (quantized)
        return acts == MHA_ACTIVATIONS_INT16 ? &quant16 : acts == MHA_ACTIVATIONS_BF16 ? &quant_bf16 : &quant;
    return bk ? &bf16 : &f32;
}
