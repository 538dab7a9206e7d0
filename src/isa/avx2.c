/* avx2.c — the AVX2 table (AVX2, FMA, F16C: AMD Zen 1-3, Intel Haswell and later client parts).
 * Its operations, by family:
 *   avx2_f32.c      float32 packing, the few-row products streamed past haswell's
 *                   microkernel, RoPE
 *   avx2_softmax.c  softmax rows (float32, bf16, rounded, into bf16 tiles), merge rule, softcap
 *   avx2_decode.c   decode tiles: float32 and int8 caches, bf16 (even first); rows_scores
 *                   (4 queries the lanes, or under 4, 8 keys), rows_scores16, int8_scores
 *   avx2_bf16.c     bf16 rounding, B packing, epilogue, the bf16 products as FMA on widened
 *                   bf16 (avx2-bf16: the sums of the model, even first, bit for bit, as
 *                   fma-bf16 and ref-bf16)
 * and what they share, avx2.h. */
#include "avx2.h"

/* Debian's BLIS picks haswell's kernels on Intel and zen3's on AMD. */
static const char *default_arch_avx2(void)
{
    return __builtin_cpu_is("amd") ? "zen3" : "haswell";
}

const mha_isa mha_isa_avx2 = {
    .name = "avx2",
    .needs = "avx2 fma f16c",
    .archs = {"haswell", "zen3", "zen2", "zen", NULL},
    .default_arch = default_arch_avx2,
    .bf16 = {&mha_bk_avx2, NULL},
    .bf16_auto = mha_bf16_auto_avx2,
    .pack_rows = mha_pack_rows_avx2,
    .stream_rows = mha_stream_rows_avx2,
    .stream_bw = 16,
    .stream_arch = "haswell",
    .stream_in_place = mha_stream_in_place_avx2,
    .stream_rows16 = mha_stream_rows16_avx2,
    .rope_halves = mha_rope_halves_avx2,
    .rope_pairs = mha_rope_pairs_avx2,
    .softmax_row = mha_softmax_row_avx2,
    .softmax_rows = mha_softmax_rows_avx2,
    .merge_row = mha_merge_row_avx2,
    .scale_row = mha_scale_row_avx2,
    .softmax_row_bf16 = mha_softmax_row_bf16_avx2,
    .softmax_row_rounded = mha_softmax_row_rounded_avx2,
    .softmax_rows_rounded = mha_softmax_rows_rounded_avx2,
    .softmax_row16 = mha_softmax_row16_avx2,
    .softmax_rows16 = mha_softmax_rows16_avx2,
    .softcap_row = mha_softcap_row_avx2,
    .scale_rows = {[MHA_KV_INT8] = mha_i8_scale_rows_avx2},
    .decode_scores = {[MHA_KV_F32] = mha_decode_scores_avx2, [MHA_KV_INT8] = mha_decode_scores8_avx2},
    .rows_scores = mha_rows_scores_avx2,
    .rows_scores_group = 0, /* under 4 queries, keys as lanes: any group */
    .rows_scores16 = mha_rows_scores16_avx2,
    .decode_values = {[MHA_KV_F32] = mha_decode_values_avx2, [MHA_KV_INT8] = mha_decode_values8_avx2},
    .int8_scores = {NULL}, /* float32 scores: vpmaddwd runs at half the FMA's rate (the avx512 table's fallback) */
    .decode16_orders = 1u << MHA_BK_EVEN_FIRST,
    .decode_scores16 = mha_decode_scores16_avx2,
    .decode_values16 = mha_decode_values16_avx2,
    .round_into_tiles = mha_round_into_tiles_avx2,
    .round_bf16_floats = mha_round_bf16_floats_avx2,
    .round_to_bf16 = mha_round_to_bf16_avx2,
    .pack_b16 = mha_pack_b16_avx2,
    .interleave_pairs = {[MHA_KV_BF16] = mha_interleave_pairs_avx2, [MHA_KV_INT8] = mha_interleave_pairs_i8_avx2},
    .epilogue_block = mha_epilogue_block_avx2,
    .quant = &mha_qk_avx2,
};
