/* avx512.c — the AVX-512 table (F, BW, VL, DQ with FMA). Its operations, by family:
 *   avx512_f32.c          float32 packing, the few-row products streamed past skx's
 *                         microkernel, RoPE
 *   avx512_softmax.c      softmax rows (float32, bf16, into bf16 tiles), merge rule, softcap
 *   avx512_decode.c       decode tiles on FMA: float32 and int8 caches, even-first bf16;
 *                         rows_scores, rows_scores16 (16 keys the lanes of a register)
 *   avx512_decode_bf16.c  the bf16 decode entries and the vdpbf16ps (odd-first) tiles
 *   avx512_bf16.c         bf16 rounding, B packing, epilogue, the bf16 products on FMA
 *                         (widened bf16) and AVX512_BF16 (vdpbf16ps)
 *   amx.c                 the AMX-BF16 products
 * and what they share, avx512.h. */
#include "avx512.h"

static const char *default_arch_avx512(void)
{
    return "skx";
}

const mha_isa mha_isa_avx512 = {
    .name = "avx512",
    .needs = "avx512f avx512dq avx512bw avx512vl fma",
    .archs = {"skx", NULL},
    .default_arch = default_arch_avx512,
    .bf16 = {&mha_bk_amx, &mha_bk_dpbf16, &mha_bk_fma, NULL},
    .bf16_auto = mha_bf16_auto_avx512,
    .pack_rows = mha_pack_rows_avx512,
    .stream_rows = mha_stream_rows_avx512,
    .stream_bw = 32,
    .stream_arch = "skx",
    .stream_in_place = mha_stream_in_place_avx512,
    .rope_halves = mha_rope_halves_avx512,
    .rope_pairs = mha_rope_pairs_avx512,
    .softmax_row = mha_softmax_row_avx512,
    .softmax_rows = mha_softmax_rows_avx512,
    .merge_row = mha_merge_row_avx512,
    .scale_row = mha_scale_row_avx512,
    .softmax_row_bf16 = mha_softmax_row_bf16_avx512,
    .softcap_row = mha_softcap_row_avx512,
    .scale_rows = {[MHA_KV_INT8] = mha_i8_scale_rows_avx512},
    .decode_scores = {[MHA_KV_F32] = mha_decode_scores_avx512, [MHA_KV_INT8] = mha_decode_scores8_avx512},
    .decode_values = {[MHA_KV_F32] = mha_decode_values_avx512, [MHA_KV_INT8] = mha_decode_values8_avx512},
    .int8_scores = {&mha_int8_scores_avx512_vnni, &mha_int8_scores_avx2, NULL}, /* avx2's: the same integer sums */
    .decode16_orders = 1u << MHA_BK_EVEN_FIRST | 1u << MHA_BK_ODD_FIRST,
    .rows_scores = mha_rows_scores_avx512,
    .rows_scores_group = 0, /* keys as lanes: any group */
    .rows_scores16 = mha_rows_scores16_avx512,
    .decode_scores16 = mha_decode_scores16_avx512,
    .decode_values16 = mha_decode_values16_avx512,
    .softmax_row16 = mha_softmax_row16_avx512,
    .softmax_rows16 = mha_softmax_rows16_avx512,
    .round_into_tiles = mha_round_into_tiles_avx512,
    .round_bf16_floats = mha_round_bf16_floats_avx512,
    .round_to_bf16 = mha_round_to_bf16_avx512,
    .pack_b16 = mha_pack_b16_avx512,
    .interleave_pairs = {[MHA_KV_BF16] = mha_interleave_pairs_avx512, [MHA_KV_INT8] = mha_interleave_pairs_i8_avx512},
    .epilogue_block = mha_epilogue_block_avx512,
    .quant = &mha_qk_avx512,
};
