/* quant.h — ggml's weight blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) as the engine reads them.
 *
 * A block type stores each output's weights as a row of blocks along its inputs, qk inputs a
 * block (32; 256 for the K types), as ggml defines them (ggml-common.h). The engine reads every
 * weight as w = fma(q, D, M): q the block's unsigned integer for that input, D and M the
 * factors of its group of 32 inputs (Q6_K: of each 16): Q8_0 q·d (M 0, q signed), Q4_0
 * (q − 8)·d = fma(q, d, −8d), Q4_1 q·d + m, Q4_K q·(d·sc) − dmin·mn, Q6_K (d·sc)·(q − 32) =
 * fma(q, d·sc, −32·d·sc). That is ggml's dequantization with Q4_1's and Q4_K's q·d + m in one
 * rounding, as GCC contracts ggml's own C (gguf-py's numpy rounds twice: a weight may differ
 * by an ulp there); the others are exact rewritings.
 *
 * Panels: the engine holds a matrix as panels of MHA_QP outputs. A panel is the outputs' blocks
 * in input order, each block of the panel the MHA_QP outputs' blocks with every field
 * transposed (field by field, output fastest) and 4-bit values paired in input order (byte c of
 * an output's nibbles: input 2c low, 2c + 1 high); the same bytes as the file's. */
#ifndef MHA_QUANT_H
#define MHA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

/* Outputs of a panel. */
enum { MHA_QP = 16 };
/* Inputs of a dequantized group (every type's blocks are whole groups). */
enum { MHA_QG = 32 };

typedef struct mha_qtype {
    mha_weight_type type;
    const char *name; /* "q4_k": as the config and the command write it */
    int qk;           /* inputs per block */
    size_t bytes;     /* bytes per block (one output) */
} mha_qtype;

/* A block type's description, or NULL (F32, F16, BF16, anything else). */
const mha_qtype *mha_qtype_of(mha_weight_type t);
/* Bytes of n weights of type t (n a multiple of its qk): 4·n for F32, 2·n for F16/BF16. 0 for
 * a type mha does not read. */
size_t mha_weight_row_bytes(mha_weight_type t, int64_t n);
/* "f32", "f16", "bf16", "q8_0", …; NULL for a type mha does not read. */
const char *mha_weight_type_name(mha_weight_type t);
/* The type that name names (as mha_weight_type_name writes them, case-insensitive); -1 if none. */
int mha_weight_type_parse(const char *name);

/* n weights (one output's row of type t, n a multiple of its qk) as floats: F32 copied, F16
 * and BF16 converted, block types as the engine reads them (w = fma(q, D, M)). */
void mha_weight_row_floats(mha_weight_type t, const void *row, int64_t n, float *y);
/* n floats (a multiple of qk) into blocks of block type t, as ggml's quantize_row_*_ref
 * (quantize.c: the same bytes). */
void mha_quantize_row(mha_weight_type t, const float *x, void *blocks, int64_t n);

/* Bytes of a panel of kk inputs (kk a multiple of qk). */
static inline size_t mha_qpanel_bytes(const mha_qtype *q, int kk)
{
    return (size_t)(kk / q->qk) * MHA_QP * q->bytes;
}
/* Output o (0 ≤ o < MHA_QP) of a panel of kk inputs from its row of blocks as stored, or
 * zeros (row NULL: a padding output, every weight 0). */
void mha_qpanel_put(const mha_qtype *q, unsigned char *panel, int kk, int o, const void *row);

#endif
