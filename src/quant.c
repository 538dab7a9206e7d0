/* quant.c — ggml's weight blocks: their table, their floats as the engine reads them, and
 * their panels (quant.h). */
#include "quant.h"

#include "bgemm.h" /* mha_f16_float, mha_bf16_float */

#include <math.h>
#include <string.h>
#include <strings.h>

static const mha_qtype qtypes[MHA_QTYPES] = {
    [MHA_QT_Q8_0] = {MHA_WEIGHT_Q8_0, MHA_QT_Q8_0, "q8_0", 32, 34},
    [MHA_QT_Q4_0] = {MHA_WEIGHT_Q4_0, MHA_QT_Q4_0, "q4_0", 32, 18},
    [MHA_QT_Q4_1] = {MHA_WEIGHT_Q4_1, MHA_QT_Q4_1, "q4_1", 32, 20},
    [MHA_QT_Q5_0] = {MHA_WEIGHT_Q5_0, MHA_QT_Q5_0, "q5_0", 32, 22},
    [MHA_QT_Q5_1] = {MHA_WEIGHT_Q5_1, MHA_QT_Q5_1, "q5_1", 32, 24},
    [MHA_QT_Q4_K] = {MHA_WEIGHT_Q4_K, MHA_QT_Q4_K, "q4_k", 256, 144},
    [MHA_QT_Q5_K] = {MHA_WEIGHT_Q5_K, MHA_QT_Q5_K, "q5_k", 256, 176},
    [MHA_QT_Q6_K] = {MHA_WEIGHT_Q6_K, MHA_QT_Q6_K, "q6_k", 256, 210},
};

const mha_qtype *mha_qtype_of(mha_weight_type t)
{
    for (int i = 0; i < MHA_QTYPES; i++)
        if (qtypes[i].type == t)
            return &qtypes[i];
    return NULL;
}

size_t mha_weight_row_bytes(mha_weight_type t, int64_t n)
{
    const mha_qtype *q = mha_qtype_of(t);
    if (q)
        return (size_t)(n / q->qk) * q->bytes;
    if (t == MHA_WEIGHT_F16 || t == MHA_WEIGHT_BF16)
        return (size_t)n * 2;
    return t == MHA_WEIGHT_F32 ? (size_t)n * 4 : 0;
}

const char *mha_weight_type_name(mha_weight_type t)
{
    const mha_qtype *q = mha_qtype_of(t);
    if (q)
        return q->name;
    return t == MHA_WEIGHT_F32 ? "f32" : t == MHA_WEIGHT_F16 ? "f16" : t == MHA_WEIGHT_BF16 ? "bf16" : NULL;
}

int mha_weight_type_parse(const char *name)
{
    static const mha_weight_type floats[] = {MHA_WEIGHT_F32, MHA_WEIGHT_F16, MHA_WEIGHT_BF16};
    for (size_t i = 0; name && i < sizeof floats / sizeof floats[0]; i++)
        if (!strcasecmp(name, mha_weight_type_name(floats[i])))
            return (int)floats[i];
    for (int i = 0; name && i < MHA_QTYPES; i++)
        if (!strcasecmp(name, qtypes[i].name))
            return (int)qtypes[i].type;
    return -1;
}

static float f16_at(const uint8_t *p)
{
    mha_f16 h;
    memcpy(&h, p, sizeof h);
    return mha_f16_float(h);
}

/* Input i's integer in a block as the file stores it (ggml-common.h): Q8_0's signed byte, the
 * 4-bit value of the others (Q4_0/Q4_1/Q5_0/Q5_1: byte i low, i − 16 high; Q4_K/Q5_K: per 64
 * inputs 32 bytes, low nibbles then high) with the 5-bit types' top bit (Q5_0/Q5_1: bit i of a
 * 32-bit word; Q5_K: bit 2·(i / 64) + (i % 64 ≥ 32) of byte i % 32), Q6_K's 6 bits (per 128
 * inputs 64 bytes of low nibbles, 32 of 2-bit tops; quarter s of the 128 at nibble (s ≥ 2) of
 * byte l + 32·(s & 1), top bits 2s of byte l). */
static int file_q(const mha_qtype *q, const uint8_t *b, int i)
{
    switch (q->index) {
    case MHA_QT_Q8_0:
        return (int8_t)b[2 + i];
    case MHA_QT_Q4_0:
    case MHA_QT_Q4_1:
    case MHA_QT_Q5_0:
    case MHA_QT_Q5_1: {
        static const int qs_at[MHA_QTYPES] = {[MHA_QT_Q4_0] = 2, [MHA_QT_Q4_1] = 4, [MHA_QT_Q5_0] = 6,
                                              [MHA_QT_Q5_1] = 8};
        const uint8_t *qs = b + qs_at[q->index];
        const int low = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
        if (q->index == MHA_QT_Q4_0 || q->index == MHA_QT_Q4_1)
            return low;
        const uint8_t *qh = b + qs_at[q->index] - 4; /* a little-endian 32-bit word */
        return low | ((qh[i / 8] >> (i % 8)) & 1) << 4;
    }
    case MHA_QT_Q4_K:
    case MHA_QT_Q5_K: {
        const int five = q->index == MHA_QT_Q5_K;
        const uint8_t *qs = b + (five ? 48 : 16) + 32 * (i / 64);
        const int low = i % 64 < 32 ? qs[i % 64] & 0xF : qs[i % 64 - 32] >> 4;
        return five ? low | ((b[16 + i % 32] >> (2 * (i / 64) + (i % 64 >= 32))) & 1) << 4 : low;
    }
    default: { /* Q6_K */
        const int n = i / 128, r = i % 128, l = r % 32, s = r / 32;
        const uint8_t lo = b[64 * n + l + 32 * (s & 1)], hi = b[128 + 32 * n + l];
        return (s < 2 ? lo & 0xF : lo >> 4) | ((hi >> (2 * s)) & 3) << 4;
    }
    }
}

/* D and M of input i's group in a block as the file stores it. */
static void file_dm(const mha_qtype *q, const uint8_t *b, int i, float *dd, float *mm)
{
    switch (q->index) {
    case MHA_QT_Q8_0:
        *dd = f16_at(b), *mm = 0.0f;
        break;
    case MHA_QT_Q4_0:
        *dd = f16_at(b), *mm = -8.0f * *dd;
        break;
    case MHA_QT_Q5_0:
        *dd = f16_at(b), *mm = -16.0f * *dd;
        break;
    case MHA_QT_Q4_1:
    case MHA_QT_Q5_1:
        *dd = f16_at(b), *mm = f16_at(b + 2);
        break;
    case MHA_QT_Q4_K:
    case MHA_QT_Q5_K: {
        int sc, mn;
        mha_q4k_scale_min(i / 32, b + 4, 1, &sc, &mn);
        *dd = f16_at(b) * (float)sc, *mm = -(f16_at(b + 2) * (float)mn);
        break;
    }
    default: /* Q6_K */
        *dd = f16_at(b + 208) * (float)(int8_t)b[192 + i / 16], *mm = -32.0f * *dd;
        break;
    }
}

void mha_weight_row_floats(mha_weight_type t, const void *row, int64_t n, float *y)
{
    const uint8_t *p = row;
    const mha_qtype *q = mha_qtype_of(t);
    if (t == MHA_WEIGHT_F32) {
        memcpy(y, row, (size_t)n * sizeof *y);
    } else if (t == MHA_WEIGHT_F16 || t == MHA_WEIGHT_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            y[i] = t == MHA_WEIGHT_F16 ? mha_f16_float(h) : mha_bf16_float(h);
        }
    } else if (q) {
        for (int64_t blk = 0; blk < n / q->qk; blk++, p += q->bytes)
            for (int i = 0; i < q->qk; i++) {
                float dd, mm;
                file_dm(q, p, i, &dd, &mm);
                y[blk * q->qk + i] = fmaf((float)file_q(q, p, i), dd, mm);
            }
    }
}

/* Output o's field of `size` bytes a block (one output's copy at src) into its place in a
 * panel's block: `size` rows of MHA_QP bytes for byte fields, MHA_QP f16s for an f16. */
static void put_bytes(uint8_t *dst, int o, const uint8_t *src, int size)
{
    for (int i = 0; i < size; i++)
        dst[i * MHA_QP + o] = src ? src[i] : 0;
}

static void put_f16(uint8_t *dst, int o, const uint8_t *src)
{
    static const uint8_t zero[2];
    memcpy(dst + 2 * o, src ? src : zero, 2);
}

/* Output o's 4-bit values of a block (ints of file_q), paired in input order. */
static void put_nibbles(const mha_qtype *q, uint8_t *dst, int o, const uint8_t *b)
{
    for (int c = 0; c < q->qk / 2; c++)
        dst[c * MHA_QP + o] = b ? (uint8_t)((file_q(q, b, 2 * c) & 0xF) | (file_q(q, b, 2 * c + 1) & 0xF) << 4) : 0;
}

/* Output o's top bits of a 5-bit type's block, inputs 8c..8c + 7 at bits 0..7 of byte c. */
static void put_top_bits(const mha_qtype *q, uint8_t *dst, int o, const uint8_t *b)
{
    for (int c = 0; c < q->qk / 8; c++) {
        int hi = 0;
        for (int t = 0; b && t < 8; t++)
            hi |= (file_q(q, b, 8 * c + t) >> 4) << t;
        dst[c * MHA_QP + o] = (uint8_t)hi;
    }
}

void mha_qpanel_put(const mha_qtype *q, unsigned char *panel, int kk, int o, const void *row)
{
    for (int blk = 0; blk < kk / q->qk; blk++) {
        uint8_t *d = panel + (size_t)blk * MHA_QP * q->bytes;
        const uint8_t *b = row ? (const uint8_t *)row + (size_t)blk * q->bytes : NULL;
        switch (q->index) {
        case MHA_QT_Q8_0:
            put_f16(d, o, b);
            put_bytes(d + MHA_Q8_0_Q, o, b ? b + 2 : NULL, 32);
            break;
        case MHA_QT_Q4_0:
            put_f16(d, o, b);
            put_nibbles(q, d + MHA_Q4_0_NIB, o, b);
            break;
        case MHA_QT_Q4_1:
            put_f16(d, o, b);
            put_f16(d + MHA_Q4_1_M, o, b ? b + 2 : NULL);
            put_nibbles(q, d + MHA_Q4_1_NIB, o, b);
            break;
        case MHA_QT_Q4_K:
            put_f16(d, o, b);
            put_f16(d + MHA_Q4_K_DMIN, o, b ? b + 2 : NULL);
            put_bytes(d + MHA_Q4_K_SC, o, b ? b + 4 : NULL, 12);
            put_nibbles(q, d + MHA_Q4_K_NIB, o, b);
            break;
        case MHA_QT_Q5_0:
            put_f16(d, o, b);
            put_top_bits(q, d + MHA_Q5_0_HI, o, b);
            put_nibbles(q, d + MHA_Q5_0_NIB, o, b);
            break;
        case MHA_QT_Q5_1:
            put_f16(d, o, b);
            put_f16(d + MHA_Q5_1_M, o, b ? b + 2 : NULL);
            put_top_bits(q, d + MHA_Q5_1_HI, o, b);
            put_nibbles(q, d + MHA_Q5_1_NIB, o, b);
            break;
        case MHA_QT_Q5_K:
            put_f16(d, o, b);
            put_f16(d + MHA_Q5_K_DMIN, o, b ? b + 2 : NULL);
            put_bytes(d + MHA_Q5_K_SC, o, b ? b + 4 : NULL, 12);
            put_top_bits(q, d + MHA_Q5_K_HI, o, b);
            put_nibbles(q, d + MHA_Q5_K_NIB, o, b);
            break;
        default: /* Q6_K */
            put_f16(d, o, b ? b + 208 : NULL);
            put_bytes(d + MHA_Q6_K_SC, o, b ? b + 192 : NULL, 16);
            put_nibbles(q, d + MHA_Q6_K_NIB, o, b);
            for (int c = 0; c < 64; c++) {
                int hi = 0;
                for (int t = 0; b && t < 4; t++)
                    hi |= (file_q(q, b, 4 * c + t) >> 4) << (2 * t);
                d[MHA_Q6_K_HI + c * MHA_QP + o] = (uint8_t)hi;
            }
            break;
        }
    }
}

/* n weights of t whole in its blocks (n ≥ 0). */
static int whole(mha_weight_type t, int64_t n)
{
    const mha_qtype *q = mha_qtype_of(t);
    return n >= 0 && mha_weight_type_name(t) && (!q || n % q->qk == 0);
}

MHA_API size_t mha_weight_bytes(mha_weight_type t, int64_t n)
{
    return whole(t, n) ? mha_weight_row_bytes(t, n) : 0;
}

MHA_API mha_status mha_weights_to_floats(mha_weight_type t, const void *src, int64_t n, float *dst)
{
    if (!src || !dst || !whole(t, n))
        return MHA_ERR_INVALID_ARG;
    mha_weight_row_floats(t, src, n, dst);
    return MHA_OK;
}

MHA_API mha_status mha_weights_quantize(mha_weight_type t, const float *src, int64_t n, void *dst)
{
    if (!src || !dst || t == MHA_WEIGHT_F32 || !whole(t, n))
        return MHA_ERR_INVALID_ARG;
    if (t == MHA_WEIGHT_F16 || t == MHA_WEIGHT_BF16)
        for (int64_t i = 0; i < n; i++) {
            const uint16_t h = t == MHA_WEIGHT_F16 ? mha_f16_round(src[i]) : mha_bf16_round(src[i]);
            memcpy((unsigned char *)dst + 2 * i, &h, sizeof h); /* dst: any alignment */
        }
    else
        mha_quantize_row(t, src, dst, n);
    return MHA_OK;
}
