/* products.c — the float32 and bf16 products on packed weights (products.h). */
#include "products.h"

#include "attention.h"
#include "isa/isa.h"

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

static void gemm_f32(const mha_fwd *f, const mha_scratch *s, int m, int n, int kk, const void *xp, mha_mat a,
                     const void *b, int col, float beta, mha_mat c)
{
    const mha_kernel *k = f->kernel;
    const mha_mat bm = mha_mat_sub(k, mha_mat_panels(k, b, kk), 0, col);
    if (xp && !mha_gemm_few_rows(k, m)) /* few rows are read from a itself */
        mha_gemm_prepacked(k, m, n, kk, 1.0f, xp, bm, beta, c);
    else
        mha_gemm(k, m, n, kk, 1.0f, a, bm, beta, c, s->apack);
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

static void gemm_bf16(const mha_fwd *f, const mha_scratch *s, int m, int n, int kk, const void *xp, mha_mat a,
                      const void *b, int col, float beta, mha_mat c)
{
    const size_t ps = mha_bk_ps(kk);
    mha_bgemm(f->bk, f->kernel, m, n, kk, 1.0f, xp, a, (const mha_bf16 *)b + (size_t)(col / MHA_BT_N) * ps, ps, beta, c,
              s->apack16);
}

static const mha_products f32 = {.esz = sizeof(float), .float_panels = 1, .a_panel = a_panel_f32, .a_row = a_row_f32,
                                  .pack_a = pack_a_f32, .pack_b = pack_b_f32, .gemm = gemm_f32,
                                  .pack_kv = mha_attention_pack_kv_f32, .block_queries = mha_attention_block_queries_f32,
                                  .few_fits = mha_attention_few_fits_f32, .pack_kv_few = mha_attention_pack_kv_few_f32,
                                  .chunk = mha_attention_chunk_f32};
static const mha_products bf16 = {.esz = sizeof(mha_bf16), .a_panel = a_panel_bf16, .a_row = a_row_bf16,
                                   .pack_a = pack_a_bf16, .pack_b = pack_b_bf16, .gemm = gemm_bf16,
                                   .pack_kv = mha_attention_pack_kv_bf16, .pack_kv16 = mha_attention_pack_kv16_bf16,
                                   .block_queries = mha_attention_block_queries_bf16,
                                   .few_fits = mha_attention_few_fits_bf16, .pack_kv_few = mha_attention_pack_kv_few_bf16,
                                   .chunk = mha_attention_chunk_bf16};
/* bf16's, but the attention's K/V packing and chunks on the float32 stream
 * (the stream's chunks round their queries themselves; the core's few queries are bf16's) */
static const mha_products bf16_stream = {.esz = sizeof(mha_bf16), .float_panels = 1, .a_panel = a_panel_bf16, .a_row = a_row_bf16,
                                          .pack_a = pack_a_bf16, .pack_b = pack_b_bf16, .gemm = gemm_bf16,
                                          .pack_kv = mha_attention_pack_kv_stream,
                                          .pack_kv16 = mha_attention_pack_kv16_stream,
                                          .block_queries = mha_attention_block_queries_stream,
                                          .few_fits = mha_attention_few_fits_bf16,
                                          .pack_kv_few = mha_attention_pack_kv_few_bf16,
                                          .chunk = mha_attention_chunk_stream};

const mha_products *mha_products_of(const mha_bkernel *bk, const mha_kernel *k, int dk)
{
    if (!bk)
        return &f32;
    const int stream = bk->order == MHA_BK_EVEN_FIRST && k->stream && k->isa->stream_rows16 && dk <= k->kc;
    return stream ? &bf16_stream : &bf16;
}
