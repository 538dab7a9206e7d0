/* quant.h — ggml's weight blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) as the engine
 * reads them.
 *
 * A block type stores each output's weights as a row of blocks along its inputs, qk inputs a
 * block (32; 256 for the K types), as ggml defines them (ggml-common.h). The engine reads every
 * weight as w = fma(q, D, M): q the block's unsigned integer for that input, D and M the
 * factors of its group of 32 inputs (Q6_K: of each 16): Q8_0 q·d (M 0, q signed), Q4_0
 * (q − 8)·d = fma(q, d, −8d), Q5_0 (q − 16)·d, Q4_1 and Q5_1 q·d + m, Q4_K and Q5_K
 * q·(d·sc) − dmin·mn, Q6_K (d·sc)·(q − 32) = fma(q, d·sc, −32·d·sc); the 5-bit types' top bit
 * apart from their nibbles. In every type q·D is exact in float32 (its bits add up to at most 24:
 * Q6_K's float16 d 11, int8 scale 7, q 6), and so is dmin·mn, so each weight is
 * ggml's dequantized float bit for bit — its C contracted into an FMA or not — and gguf-py's.
 *
 * Panels: the engine holds a matrix as panels of MHA_QP outputs. A panel is the outputs' blocks
 * in input order, each block of the panel the MHA_QP outputs' blocks with every field
 * transposed (field by field, output fastest) and 4-bit values paired in input order (byte c of
 * an output's nibbles: input 2c low, 2c + 1 high, where ggml pairs input j with j + 16, or
 * j + 32 in each 64 for Q4_K); as many bytes as the file's. */
#ifndef MHA_QUANT_H
#define MHA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

/* Outputs of a panel. */
enum { MHA_QP = 16 };
/* Inputs of a dequantized group (every type's blocks are whole groups). */
enum { MHA_QG = 32 };

/* The block types, as the kernel tables index their operations; X(name, index) for each. */
enum { MHA_QT_Q8_0, MHA_QT_Q4_0, MHA_QT_Q4_1, MHA_QT_Q5_0, MHA_QT_Q5_1, MHA_QT_Q4_K, MHA_QT_Q5_K, MHA_QT_Q6_K,
       MHA_QTYPES };
#define MHA_QTYPE_LIST(X) X(q8_0, MHA_QT_Q8_0) X(q4_0, MHA_QT_Q4_0) X(q4_1, MHA_QT_Q4_1) X(q5_0, MHA_QT_Q5_0) \
    X(q5_1, MHA_QT_Q5_1) X(q4_k, MHA_QT_Q4_K) X(q5_k, MHA_QT_Q5_K) X(q6_k, MHA_QT_Q6_K)

typedef struct mha_qtype {
    mha_weight_type type;
    int index;        /* MHA_QT_* */
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

/* A panel's block, field by field (offsets in bytes from the block's start; P = MHA_QP):
 *   Q8_0  d[P] f16, q[32][P] int8
 *   Q4_0  d[P] f16, nib[16][P]
 *   Q4_1  d[P] f16, m[P] f16, nib[16][P]
 *   Q5_0  d[P] f16, hi[4][P] (the top bits of inputs 8c..8c+7 at bits 0..7 of byte c), nib[16][P]
 *   Q5_1  d[P] f16, m[P] f16, hi[4][P], nib[16][P]
 *   Q4_K  d[P] f16, dmin[P] f16, scales[12][P] (ggml's 6-bit packing), nib[128][P]
 *   Q5_K  d[P] f16, dmin[P] f16, scales[12][P], hi[32][P], nib[128][P]
 *   Q6_K  d[P] f16, scales[16][P] int8, nib[128][P] (the low 4 bits), hi[64][P] (the top 2
 *         bits of inputs 4c..4c+3 at bits 0, 2, 4, 6 of byte c)
 * Every field starts on a multiple of 16 bytes, and so does every block. */
enum {
    MHA_Q8_0_Q = 2 * MHA_QP,
    MHA_Q4_0_NIB = 2 * MHA_QP,
    MHA_Q4_1_M = 2 * MHA_QP, MHA_Q4_1_NIB = 4 * MHA_QP,
    MHA_Q5_0_HI = 2 * MHA_QP, MHA_Q5_0_NIB = 6 * MHA_QP,
    MHA_Q5_1_M = 2 * MHA_QP, MHA_Q5_1_HI = 4 * MHA_QP, MHA_Q5_1_NIB = 8 * MHA_QP,
    MHA_Q5_K_DMIN = 2 * MHA_QP, MHA_Q5_K_SC = 4 * MHA_QP, MHA_Q5_K_HI = 16 * MHA_QP, MHA_Q5_K_NIB = 48 * MHA_QP,
    MHA_Q4_K_DMIN = 2 * MHA_QP, MHA_Q4_K_SC = 4 * MHA_QP, MHA_Q4_K_NIB = 16 * MHA_QP,
    MHA_Q6_K_SC = 2 * MHA_QP, MHA_Q6_K_NIB = 18 * MHA_QP, MHA_Q6_K_HI = 146 * MHA_QP
};

/* Q4_K's 6-bit scale and min of group j (0..7) from its 12 packed bytes (ggml's
 * get_scale_min_k4), byte i at q[i · stride]. */
static inline void mha_q4k_scale_min(int j, const uint8_t *q, size_t stride, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j * stride] & 63;
        *mn = q[(j + 4) * stride] & 63;
    } else {
        *sc = (q[(j + 4) * stride] & 0xF) | ((q[(j - 4) * stride] >> 6) << 4);
        *mn = (q[(j + 4) * stride] >> 4) | ((q[j * stride] >> 6) << 4);
    }
}

/* Bytes of a panel of kk inputs (kk a multiple of qk). */
static inline size_t mha_qpanel_bytes(const mha_qtype *q, int kk)
{
    return (size_t)(kk / q->qk) * MHA_QP * q->bytes;
}
/* Output o (0 ≤ o < MHA_QP) of a panel of kk inputs from its row of blocks as stored, or
 * zeros (row NULL: a padding output, every weight 0). */
void mha_qpanel_put(const mha_qtype *q, unsigned char *panel, int kk, int o, const void *row);

#endif
