/* neon.c — the Advanced SIMD table (ARMv8-A's NEON: every aarch64 core), on the two BLIS
 * sub-configs of Debian's arm64 build (kernel.c): cortexa57 (BLIS's NEON 8 × 12 microkernel)
 * and generic (the reference kernels, 4 × 16 rows, which bf16 engines take). Its operations,
 * by family:
 *   neon_f32.c      float32 packing through 4 × 4 register transposes, the few-row products
 *                   streamed past cortexa57's microkernel with its sums, RoPE
 *   neon_softmax.c  softmax rows (float32 and the bf16 engines', these rounded to bf16 as
 *                   floats or into A tiles), merge rule, softcap
 *   neon_decode.c   float32 decode tiles on float32 and int8 caches (a pass past KC ended as
 *                   the sub-config ends it: mha_score_rows.beta_fused), int8 blocks read back,
 *                   rows_scores; the same tiles on a bf16 cache's elements (and an int8 one's
 *                   values) under FZ for neon-bf16's decode (decode_scores16, rows_scores16)
 *   neon_bf16.c     the bf16 products: neon-bfdot (BFDOT) where the CPU has FEAT_BF16,
 *                   neon-bf16 (FMA on widened bf16, ref-bf16's bits) everywhere; rounding
 *                   into bf16, B's bf16 packing, the products' epilogue, the bf16 decode's
 *                   gather of a cache chunk into panels (interleave_pairs)
 *   neon_quant.c    the quantized weights' dequantizing (into floats, or into bf16 B pairs),
 *                   float32 tile and integer products (mha_qk_neon; ref's scalar factors,
 *                   ref.h)
 * and what they share, neon.h. The attention's products pack A for the microkernel (no
 * stream_in_place: nothing measured on an Arm core yet), and generic's sub-config streams no
 * rows (its reference kernel's sums are not reproduced). */
#include "neon.h"

static const char *default_arch_neon(void)
{
    return "cortexa57";
}

/* BFDOT does a k pair's two products in one instruction where FMLA on widened elements does
 * one (and needs the widening): counted, not timed on an Arm core yet (perf/RESULTS.md#arm). */
static const mha_bkernel *bf16_auto_neon(void)
{
    return mha_bk_bfdot.usable() ? &mha_bk_bfdot : &mha_bk_neon;
}

const mha_isa mha_isa_neon = {
    .name = "neon",
    .needs = "asimd",
    .archs = {"cortexa57", "generic", NULL},
    .default_arch = default_arch_neon,
    .bf16 = {&mha_bk_bfdot, &mha_bk_neon, NULL},
    .bf16_auto = bf16_auto_neon,
    .pack_rows = mha_pack_rows_neon,
    .stream_rows = mha_stream_rows_neon,
    .stream_bw = 8,
    .stream_arch = "cortexa57",
    .rope_halves = mha_rope_halves_neon,
    .rope_pairs = mha_rope_pairs_neon,
    .softmax_row = mha_softmax_row_neon,
    .softmax_rows = mha_softmax_rows_neon,
    .merge_row = mha_merge_row_neon,
    .scale_row = mha_scale_row_neon,
    .softmax_row_bf16 = mha_softmax_row_bf16_neon,
    .softmax_row_rounded = mha_softmax_row_rounded_neon,
    .softmax_rows_rounded = mha_softmax_rows_rounded_neon,
    .softmax_row16 = mha_softmax_row16_neon,
    .softmax_rows16 = mha_softmax_rows16_neon,
    .softcap_row = mha_softcap_row_neon,
    .scale_rows = {[MHA_KV_INT8] = mha_i8_scale_rows_neon},
    .decode_scores = {[MHA_KV_F32] = mha_decode_scores_neon, [MHA_KV_INT8] = mha_decode_scores8_neon},
    .rows_scores = mha_rows_scores_neon,
    .rows_scores_group = 4,
    .rows_scores16 = mha_rows_scores16_neon,
    .decode_values = {[MHA_KV_F32] = mha_decode_values_neon, [MHA_KV_INT8] = mha_decode_values8_neon},
    .int8_scores = {NULL}, /* float32 scores until a NEON kernel: the model is scalar */
    .decode16_orders = 1u << MHA_BK_EVEN_FIRST,
    .decode_scores16 = mha_decode_scores16_neon,
    .decode_values16 = mha_decode_values16_neon,
    .round_into_tiles = mha_round_into_tiles_neon,
    .round_bf16_floats = mha_round_bf16_floats_neon,
    .round_to_bf16 = mha_round_to_bf16_neon,
    .pack_b16 = mha_pack_b16_neon,
    .interleave_pairs = {[MHA_KV_BF16] = mha_interleave_pairs_neon, [MHA_KV_INT8] = mha_interleave_pairs_i8_neon},
    .epilogue_block = mha_epilogue_block_neon,
    .quant = &mha_qk_neon,
};
