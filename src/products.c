/* products.c — the float32 and bf16 products on packed weights (products.h). */
#include "products.h"

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
                     float beta, mha_mat c)
{
    const mha_kernel *k = g->k;
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

static void gemm_bf16(const mha_gemm_ctx *g, int m, int n, int kk, const void *xp, mha_mat a, const void *b, int col,
                      float beta, mha_mat c)
{
    const size_t ps = mha_bk_ps(kk);
    mha_bgemm(g->bk, g->k, m, n, kk, 1.0f, xp, a, (const mha_bf16 *)b + (size_t)(col / MHA_BT_N) * ps, ps, beta, c,
              g->apack);
}

static const mha_products f32 = {.esz = sizeof(float), .a_panel = a_panel_f32, .a_row = a_row_f32,
                                  .pack_a = pack_a_f32, .pack_b = pack_b_f32, .gemm = gemm_f32};
static const mha_products bf16 = {.esz = sizeof(mha_bf16), .a_panel = a_panel_bf16, .a_row = a_row_bf16,
                                   .pack_a = pack_a_bf16, .pack_b = pack_b_bf16, .gemm = gemm_bf16};

const mha_products *mha_products_of(const mha_bkernel *bk)
{
    return bk ? &bf16 : &f32;
}
