/* test_quant.c — quantized weights (quant.h, qgemm.h): the floats the engine reads from each
 * block type are ggml's dequantization, written here again from ggml's own code; every table's
 * panels dequantize to those floats and its products are FMA chains over them in input order,
 * bit for bit; an engine holding blocks as stored matches one holding their floats, and keeps
 * the engine's invariances (batch, threads, steps); quantizing at load equals handing the
 * quantized blocks; what the engine cannot hold is refused with a message. The quant suite runs
 * once (it walks the tables itself); quant_engine once per table (make test). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "bgemm.h"
#include "helpers.h"
#include "isa/isa.h"
#include "qgemm.h"
#include "quant.h"

/* An engine holding blocks and one holding their floats differ only in the order of the
 * projections' sums (FMA chains in input order, or BLIS's microkernel): float32 rounding. */
#define QUANT_F32_TOL 1e-5

static const mha_weight_type block_types[] = {MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q4_0, MHA_WEIGHT_Q4_1, MHA_WEIGHT_Q5_0,
                                              MHA_WEIGHT_Q5_1, MHA_WEIGHT_Q4_K, MHA_WEIGHT_Q5_K, MHA_WEIGHT_Q6_K};
#define N_TYPES (sizeof block_types / sizeof block_types[0])

static void put_f16(unsigned char *p, float x)
{
    const mha_f16 h = mha_f16_round(x);
    memcpy(p, &h, sizeof h);
}

static float f16_at(const unsigned char *p)
{
    mha_f16 h;
    memcpy(&h, p, sizeof h);
    return mha_f16_float(h);
}

/* rows outputs × in inputs of blocks of type t as a file holds them: random integers, the
 * factors drawn so that the weights are about 1/sqrt(in) (nn.Linear's scale). */
static unsigned char *random_rows(mha_weight_type t, int rows, int in, uint64_t seed)
{
    const mha_qtype *q = mha_qtype_of(t);
    const size_t n = (size_t)rows * (size_t)(in / q->qk);
    unsigned char *b = malloc(n * q->bytes);
    rng r = {seed};
    for (size_t i = 0; i < n * q->bytes; i++)
        b[i] = (unsigned char)rng_next(&r);
    const float s = 1.0f / sqrtf((float)in);
    for (size_t k = 0; k < n; k++) {
        unsigned char *blk = b + k * q->bytes;
        const float u = rng_uniform(&r, 0.5f, 1.5f), v = rng_uniform(&r, 0.5f, 1.5f);
        switch (t) {
        case MHA_WEIGHT_Q8_0: put_f16(blk, u * s / 127.0f); break;
        case MHA_WEIGHT_Q4_0: put_f16(blk, u * s / 8.0f); break;
        case MHA_WEIGHT_Q4_1: put_f16(blk, 2.0f * u * s / 15.0f), put_f16(blk + 2, -v * s); break;
        case MHA_WEIGHT_Q5_0: put_f16(blk, u * s / 16.0f); break;
        case MHA_WEIGHT_Q5_1: put_f16(blk, 2.0f * u * s / 31.0f), put_f16(blk + 2, -v * s); break;
        case MHA_WEIGHT_Q4_K: put_f16(blk, 2.0f * u * s / (63.0f * 15.0f)), put_f16(blk + 2, v * s / 63.0f); break;
        case MHA_WEIGHT_Q5_K: put_f16(blk, 2.0f * u * s / (63.0f * 31.0f)), put_f16(blk + 2, v * s / 63.0f); break;
        default: put_f16(blk + 208, u * s / (128.0f * 32.0f)); break; /* Q6_K: d last */
        }
    }
    return b;
}

/* ggml's dequantize_row_* (ggml-quants.c) for one block, its expressions as written, with
 * Q4_1's and Q4_K's x·d + m contracted (fmaf) as GCC compiles them. */
static void ggml_block(mha_weight_type t, const unsigned char *x, float *y)
{
    switch (t) {
    case MHA_WEIGHT_Q8_0: {
        const float d = f16_at(x);
        for (int j = 0; j < 32; j++)
            y[j] = (float)(signed char)x[2 + j] * d;
        break;
    }
    case MHA_WEIGHT_Q4_0:
    case MHA_WEIGHT_Q4_1: {
        const int one = t == MHA_WEIGHT_Q4_1;
        const float d = f16_at(x), m = one ? f16_at(x + 2) : 0.0f;
        const unsigned char *qs = x + (one ? 4 : 2);
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0F) - (one ? 0 : 8), x1 = (qs[j] >> 4) - (one ? 0 : 8);
            y[j] = one ? fmaf((float)x0, d, m) : (float)x0 * d;
            y[j + 16] = one ? fmaf((float)x1, d, m) : (float)x1 * d;
        }
        break;
    }
    case MHA_WEIGHT_Q5_0:
    case MHA_WEIGHT_Q5_1: { /* dequantize_row_q5_0 / _q5_1 */
        const int one = t == MHA_WEIGHT_Q5_1;
        const float d = f16_at(x), m = one ? f16_at(x + 2) : 0.0f;
        uint32_t qh;
        memcpy(&qh, x + (one ? 4 : 2), sizeof qh);
        const unsigned char *qs = x + (one ? 8 : 6);
        for (int j = 0; j < 16; j++) {
            const int xh_0 = (int)((qh >> (j + 0)) << 4) & 0x10, xh_1 = (int)(qh >> (j + 12)) & 0x10;
            const int x0 = ((qs[j] & 0x0F) | xh_0) - (one ? 0 : 16), x1 = ((qs[j] >> 4) | xh_1) - (one ? 0 : 16);
            y[j] = one ? fmaf((float)x0, d, m) : (float)x0 * d;
            y[j + 16] = one ? fmaf((float)x1, d, m) : (float)x1 * d;
        }
        break;
    }
    case MHA_WEIGHT_Q4_K:
    case MHA_WEIGHT_Q5_K: { /* dequantize_row_q4_K / _q5_K: q5_K's top bits u1, u2 of qh */
        const int five = t == MHA_WEIGHT_Q5_K;
        const float d = f16_at(x), min = f16_at(x + 2);
        const unsigned char *scales = x + 4, *qh = x + 16, *q = x + (five ? 48 : 16);
        unsigned u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32, u1 <<= 2, u2 <<= 2) {
            int sc, m;
            mha_q4k_scale_min(is, scales, 1, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            mha_q4k_scale_min(is + 1, scales, 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++)
                y[j + l] = fmaf(d1, (float)((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)), -m1);
            for (int l = 0; l < 32; l++)
                y[j + 32 + l] = fmaf(d2, (float)((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)), -m2);
        }
        break;
    }
    default: { /* Q6_K */
        const float d = f16_at(x + 208);
        const unsigned char *ql = x, *qh = x + 128;
        const signed char *sc = (const signed char *)(x + 192);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[n + l] = d * (float)sc[is] * (float)q1;
                y[n + l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[n + l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[n + l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        break;
    }
    }
}

Test(quant, the_floats_of_every_block_type_are_ggmls_dequantization)
{
    enum { ROWS = 3, IN = 512 };
    float want[256], got[IN];
    for (size_t t = 0; t < N_TYPES; t++) {
        const mha_qtype *q = mha_qtype_of(block_types[t]);
        unsigned char *b = random_rows(q->type, ROWS, IN, 11 + t);
        for (int r = 0; r < ROWS; r++) {
            const unsigned char *row = b + (size_t)r * (IN / q->qk) * q->bytes;
            mha_weight_row_floats(q->type, row, IN, got);
            for (int k = 0; k < IN / q->qk; k++) {
                ggml_block(q->type, row + (size_t)k * q->bytes, want);
                for (int i = 0; i < q->qk; i++)
                    cr_assert(got[k * q->qk + i] == want[i], "%s row %d input %d: %.9g, ggml %.9g", q->name, r,
                              k * q->qk + i, (double)got[k * q->qk + i], (double)want[i]);
            }
        }
        free(b);
    }
}

Test(quant, the_public_calls_quantize_and_dequantize_and_refuse_what_they_cannot)
{
    enum { N = 512 };
    float x[N], y[N];
    unsigned char b[N * 4];
    rng r = {3};
    fill_uniform(x, N, -1.0f, 1.0f, &r);
    const mha_weight_type all[] = {MHA_WEIGHT_F16,  MHA_WEIGHT_BF16, MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q4_0, MHA_WEIGHT_Q4_1,
                                   MHA_WEIGHT_Q5_0, MHA_WEIGHT_Q5_1, MHA_WEIGHT_Q4_K, MHA_WEIGHT_Q5_K, MHA_WEIGHT_Q6_K};
    const double worst[] = {1e-3, 1e-2, 1e-2, 0.15, 0.15, 0.08, 0.08, 0.1, 0.05, 0.05}; /* each type's steps, loosely */
    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
        unsigned char q[N * 4];
        cr_assert_eq(mha_weights_quantize(all[t], x, N, b), MHA_OK);
        cr_assert_eq(mha_weights_to_floats(all[t], b, N, y), MHA_OK);
        if (mha_qtype_of(all[t])) { /* the bytes of the internal quantizer the engine uses */
            mha_quantize_row(all[t], x, q, N);
            cr_assert_eq(memcmp(q, b, mha_weight_bytes(all[t], N)), 0, "%s", mha_weight_type_name(all[t]));
        }
        double num = 0, den = 0;
        for (int i = 0; i < N; i++)
            num += (double)(y[i] - x[i]) * (y[i] - x[i]), den += (double)x[i] * x[i];
        cr_assert(sqrt(num / den) < worst[t], "%s: relative error %.3g of a round trip",
                  mha_weight_type_name(all[t]), sqrt(num / den));
    }
    cr_assert_eq(mha_weight_bytes(MHA_WEIGHT_Q4_K, 512), 2 * 144);
    cr_assert_eq(mha_weight_bytes(MHA_WEIGHT_Q4_K, 480), 0); /* not whole blocks */
    cr_assert_eq(mha_weight_bytes((mha_weight_type)16, 512), 0);
    cr_assert_eq(mha_weights_quantize(MHA_WEIGHT_F32, x, N, b), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_weights_quantize(MHA_WEIGHT_Q8_0, x, 48, b), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_weights_to_floats(MHA_WEIGHT_Q8_0, NULL, N, y), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_weights_to_floats((mha_weight_type)16, b, N, y), MHA_ERR_INVALID_ARG);
}

/* 64-byte aligned memory (aligned_alloc takes whole multiples of the alignment). */
static void *alloc64(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* MHA_QP outputs of kk inputs into one panel (as weights.c packs them). */
static unsigned char *panel_of(const mha_qtype *q, const unsigned char *rows, int kk)
{
    unsigned char *p = alloc64(mha_qpanel_bytes(q, kk));
    for (int o = 0; o < MHA_QP; o++)
        mha_qpanel_put(q, p, kk, o, rows + (size_t)o * mha_weight_row_bytes(q->type, kk));
    return p;
}

TABLE_TEST(quant, every_tables_panels_dequantize_to_the_rows_floats)
{
    enum { KK = 512 };
    float row[MHA_QP][KK], w[MHA_QG * MHA_QP];
    for (size_t t = 0; t < N_TYPES; t++) {
        const mha_qtype *q = mha_qtype_of(block_types[t]);
        unsigned char *rows = random_rows(q->type, MHA_QP, KK, 23 + t), *p = panel_of(q, rows, KK);
        for (int o = 0; o < MHA_QP; o++)
            mha_weight_row_floats(q->type, rows + (size_t)o * mha_weight_row_bytes(q->type, KK), KK, row[o]);
        for (int g = 0; g < KK / MHA_QG; g++) {
            const int groups = q->qk / MHA_QG;
            isa->quant->dequant[q->index](p + (size_t)(g / groups) * MHA_QP * q->bytes, g % groups, w);
            for (int i = 0; i < MHA_QG; i++)
                for (int o = 0; o < MHA_QP; o++)
                    cr_assert(w[i * MHA_QP + o] == row[o][g * MHA_QG + i], "%s on %s: input %d output %d: %.9g, "
                              "the row's %.9g", q->name, isa->name, g * MHA_QG + i, o, (double)w[i * MHA_QP + o],
                              (double)row[o][g * MHA_QG + i]);
        }
        free(rows);
        free(p);
    }
}

/* Block weights into bf16 (a bf16 engine on bf16 activations): each runnable kernel of the table
 * gives its dequant's floats rounded as mha_bf16_round, in B panels' pairs, bit for bit; panels
 * whose scales are infinite or NaN too (output 0's d NaN, output 1's infinite). */
TABLE_TEST(quant, every_tables_bf16_dequantizing_is_its_floats_rounded)
{
    enum { KK = 512 };
    float w[MHA_QG * MHA_QP];
    mha_bf16 got[MHA_QG * MHA_QP];
    for (int v = 0; isa->quant->bf16w[v]; v++) {
        const mha_qbf16_ops *ops = isa->quant->bf16w[v];
        if (!mha_cpu_has_all(ops->needs)) {
            note_skipped("quant: %s's dequantizing into bf16 %s: this CPU lacks %s", isa->name, ops->name, ops->needs);
            continue;
        }
        for (size_t t = 0; t < N_TYPES; t++)
            for (int poison = 0; poison < 2; poison++) {
                const mha_qtype *q = mha_qtype_of(block_types[t]);
                unsigned char *rows = random_rows(q->type, MHA_QP, KK, 29 + t), *p = panel_of(q, rows, KK);
                if (poison) { /* every type's first field is its blocks' float16 d, output by output */
                    const uint16_t nan = 0x7e01, inf = 0x7c00;
                    memcpy(p, &nan, 2), memcpy(p + 2, &inf, 2);
                }
                for (int g = 0; g < KK / MHA_QG; g++) {
                    const int groups = q->qk / MHA_QG;
                    const unsigned char *b = p + (size_t)(g / groups) * MHA_QP * q->bytes;
                    isa->quant->dequant[q->index](b, g % groups, w);
                    ops->dequant[q->index](b, g % groups, got);
                    for (int i = 0; i < MHA_QG; i++)
                        for (int o = 0; o < MHA_QP; o++) {
                            const mha_bf16 want = mha_bf16_round(w[i * MHA_QP + o]);
                            const mha_bf16 at = got[i / 2 * 2 * MHA_QP + o * 2 + i % 2];
                            cr_assert_eq(at, want, "%s on %s (%s)%s: input %d output %d: 0x%04x, the float %.9g "
                                         "rounds to 0x%04x", q->name, isa->name, ops->name, poison ? ", NaN scales" : "",
                                         g * MHA_QG + i, o, at, (double)w[i * MHA_QP + o], want);
                        }
                }
                free(rows);
                free(p);
            }
    }
}

/* c = a · Wᵀ (+ c) by mha_qgemm on the table `isa` (a BLIS-free kernel: only its table is read). */
static void qgemm_on(const mha_isa *isa, int m, int n, const float *a, int kk, const mha_qmat *b, int col, float beta,
                     float *c, int ldc)
{
    mha_kernel k = {.isa = isa, .bw = MHA_QP};
    mha_qgemm(&k, m, n, a, kk, b, col, beta, mha_mat_rows(&k, c, ldc));
}

TABLE_TEST(quant, products_are_fma_chains_in_input_order_for_any_rows_and_columns)
{
    enum { KK = 768, OUT = 80 }; /* 5 panels: a pair, a pair, one alone */
    const int ms[] = {1, 2, 7, 8, 9, 33, 64, 70};
    for (size_t t = 0; t < N_TYPES; t++) {
        const mha_qtype *q = mha_qtype_of(block_types[t]);
        unsigned char *rows = random_rows(q->type, OUT, KK, 41 + t);
        const size_t row_bytes = mha_weight_row_bytes(q->type, KK);
        unsigned char *panels = alloc64((OUT / MHA_QP) * mha_qpanel_bytes(q, KK));
        for (int j = 0; j < OUT; j++)
            mha_qpanel_put(q, panels + (size_t)(j / MHA_QP) * mha_qpanel_bytes(q, KK), KK, j % MHA_QP,
                           rows + (size_t)j * row_bytes);
        const mha_qmat b = {panels, KK, OUT, OUT, 1, {q, q, q}};
        float *w = malloc((size_t)OUT * KK * sizeof *w), *a = malloc((size_t)70 * KK * sizeof *a);
        float *c = malloc((size_t)70 * OUT * sizeof *c), *bias = malloc((size_t)70 * OUT * sizeof *bias);
        for (int j = 0; j < OUT; j++)
            mha_weight_row_floats(q->type, rows + (size_t)j * row_bytes, KK, w + (size_t)j * KK);
        rng r = {5 + t};
        fill_uniform(a, (size_t)70 * KK, -1.0f, 1.0f, &r);
        fill_uniform(bias, (size_t)70 * OUT, -1.0f, 1.0f, &r);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int m = ms[mi], col = mi % 2 ? MHA_QP : 0, n = OUT - col; /* from the second panel too */
            memcpy(c, bias, (size_t)m * OUT * sizeof *c);
            qgemm_on(isa, m, n, a, KK, &b, col, 1.0f, c, OUT);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    float s = 0.0f;
                    for (int k = 0; k < KK; k++)
                        s = fmaf(w[(size_t)(col + j) * KK + k], a[(size_t)i * KK + k], s);
                    const float want = s + bias[(size_t)i * OUT + j];
                    const float got = c[(size_t)i * OUT + j];
                    cr_assert(got == want, "%s on %s, %d rows from column %d: row %d output %d: %.9g, the chain's "
                              "%.9g", q->name, isa->name, m, col, i, j, (double)got, (double)want);
                }
        }
        free(rows), free(panels), free(w), free(a), free(c), free(bias);
    }
}

/* Integer products on int16 activations against the products on float32 ones, a row's outputs
 * in norm: each input's rounding is uniform within half a step of its group's max|x| / 32767,
 * independent between inputs: about 1.6e-5 on uniform rows (rounding's rms 1/(32767·√12) of
 * max|x| against an input's rms of max|x|/√3), measured 1.7e-5 to 2.9e-5 (the K types' min adds
 * its own rounding of d·Σq); bound 5e-5. A 20× outlier channel makes its group's step 20 times
 * coarser for the 31 inputs beside it, the rest of the row unchanged: measured 5.0e-5 to 8.7e-5;
 * bound 2e-4. */
#define Q16_ACT_TOL 5e-5
#define Q16_OUTLIER_TOL 2e-4

/* What the activations' packing must give: each group's q = x · 32767 / max|x| to nearest even
 * (nearbyintf), the sums and scales, at the places mha_a16_at and the layout say. */
Test(quant, activations_pack_to_int16_per_group_of_32)
{
    enum { KK = 256 };
    float x[KK];
    rng r = {91};
    fill_uniform(x, KK, -2.0f, 2.0f, &r);
    for (int i = 0; i < 32; i++)
        x[32 + i] = 0.0f; /* a group of zeros: scale 0 */
    x[70] = 40.0f;        /* an outlier */
    x[64] = 40.0f / 65534.0f; /* about half a step of its group's scale */
    unsigned char *row = alloc64(mha_a16_row_bytes(KK));
    mha_a16_pack(x, KK, row);
    const int16_t *q = mha_a16_q(row);
    for (int g = 0; g < KK / MHA_QG; g++) {
        float amax = 0.0f;
        for (int i = 0; i < MHA_QG; i++)
            amax = fmaxf(amax, fabsf(x[g * MHA_QG + i]));
        const float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        int sum[2] = {0, 0};
        for (int i = 0; i < MHA_QG; i++) {
            const int want = (int)nearbyintf(fminf(fmaxf(x[g * MHA_QG + i] * id, -32767.0f), 32767.0f));
            cr_assert_eq(q[g * MHA_QG + mha_a16_at(i)], want, "input %d", g * MHA_QG + i);
            sum[i / 16] += want;
        }
        cr_assert(mha_a16_d(row, KK)[g] == amax / 32767.0f, "group %d's scale", g);
        cr_assert(mha_a16_u(row, KK)[g] == amax / 32767.0f * (float)(sum[0] + sum[1]), "group %d's u", g);
        cr_assert(mha_a16_s(row, KK)[2 * g] == sum[0] && mha_a16_s(row, KK)[2 * g + 1] == sum[1], "group %d", g);
    }
    for (int i = 0; i < KK; i++) /* every place once */
        for (int j = 0; j < i; j++)
            cr_assert_neq(mha_a16_at(i), mha_a16_at(j));
    free(row);
}

/* c = a · Wᵀ (+ c) by mha_qgemm16 with the integer products ops. */
static void qgemm16_on(const mha_isa *isa, const mha_qdot16_ops *ops, int m, int n, const float *a, int kk,
                      const mha_qmat *b, int col, float beta, float *c, int ldc, int packed)
{
    mha_kernel k = {.isa = isa, .bw = MHA_QP, .qdot16 = ops};
    const size_t xs = mha_a16_row_bytes(kk);
    unsigned char *room = alloc64((size_t)(m > MHA_QROWS ? m : MHA_QROWS) * xs);
    if (packed)
        for (int i = 0; i < m; i++)
            mha_a16_pack(a + (size_t)i * kk, kk, room + (size_t)i * xs);
    mha_qgemm16(&k, m, n, packed ? room : NULL, a, kk, b, col, beta, mha_mat_rows(&k, c, ldc), room);
    free(room);
}


TABLE_TEST(quant, integer_products_are_refs_bits_for_any_rows_and_columns_and_near_the_floats)
{
    enum { KK = 768, OUT = 80, M = 70 };
    const int ms[] = {1, 2, 3, 5, 8, 33, 64, 70};
    for (int v = 0; isa->quant->dot16[v]; v++) {
        const mha_qdot16_ops *ops = isa->quant->dot16[v];
        if (!mha_cpu_has_all(ops->needs)) {
            note_skipped("quant: %s's integer products %s: this CPU lacks some of %s", isa->name, ops->name,
                         ops->needs);
            continue;
        }
        for (size_t t = 0; t < N_TYPES; t++) {
            const mha_qtype *q = mha_qtype_of(block_types[t]);
            unsigned char *rows = random_rows(q->type, OUT, KK, 41 + t);
            const size_t row_bytes = mha_weight_row_bytes(q->type, KK);
            unsigned char *panels = alloc64((OUT / MHA_QP) * mha_qpanel_bytes(q, KK));
            for (int j = 0; j < OUT; j++)
                mha_qpanel_put(q, panels + (size_t)(j / MHA_QP) * mha_qpanel_bytes(q, KK), KK, j % MHA_QP,
                               rows + (size_t)j * row_bytes);
            const mha_qmat b = {panels, KK, OUT, OUT, 1, {q, q, q}};
            float *w = malloc((size_t)OUT * KK * sizeof *w), *a = malloc((size_t)M * KK * sizeof *a);
            float *c = malloc((size_t)M * OUT * sizeof *c), *want = malloc((size_t)M * OUT * sizeof *want);
            float *bias = malloc((size_t)M * OUT * sizeof *bias);
            for (int j = 0; j < OUT; j++)
                mha_weight_row_floats(q->type, rows + (size_t)j * row_bytes, KK, w + (size_t)j * KK);
            rng r = {5 + t};
            fill_uniform(a, (size_t)M * KK, -1.0f, 1.0f, &r);
            fill_uniform(bias, (size_t)M * OUT, -1.0f, 1.0f, &r);
            for (int i = 1; i < M; i += 2)
                a[(size_t)i * KK + (i * 37) % KK] = 20.0f; /* an outlier channel in odd rows */
            /* ref's integer products on all rows: what every table and row count gives */
            memcpy(want, bias, (size_t)M * OUT * sizeof *want);
            qgemm16_on(&mha_isa_ref, &mha_qdot16_ref, M, OUT, a, KK, &b, 0, 1.0f, want, OUT, 1);
            for (int i = 0; i < M; i++) { /* each row's outputs against the floats' */
                double e2 = 0.0, r2 = 0.0;
                for (int j = 0; j < OUT; j++) {
                    double s = 0.0;
                    for (int k = 0; k < KK; k++)
                        s += (double)w[(size_t)j * KK + k] * a[(size_t)i * KK + k];
                    const double got = (double)want[(size_t)i * OUT + j] - bias[(size_t)i * OUT + j];
                    e2 += (got - s) * (got - s), r2 += s * s;
                }
                cr_assert(sqrt(e2 / r2) <= (i % 2 ? Q16_OUTLIER_TOL : Q16_ACT_TOL), "%s: row %d: %.3g from the floats' "
                          "products", q->name, i, sqrt(e2 / r2));
            }
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const int m = ms[mi], col = mi % 2 ? MHA_QP : 0, n = OUT - col;
                for (int i = 0; i < m; i++)
                    memcpy(c + (size_t)i * OUT, bias + (size_t)i * OUT + col, (size_t)n * sizeof *c);
                qgemm16_on(isa, ops, m, n, a, KK, &b, col, 1.0f, c, OUT, (int)(mi / 2 % 2));
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        const float got = c[(size_t)i * OUT + j], ref = want[(size_t)i * OUT + col + j];
                        cr_assert(memcmp(&got, &ref, sizeof got) == 0, "%s on %s (%s), %d rows from column %d: row %d output %d: %.9g, "
                                  "ref's %.9g", q->name, isa->name, ops->name, m, col, i, j, (double)got,
                                  (double)ref);
                    }
            }
            free(rows), free(panels), free(w), free(a), free(c), free(want), free(bias);
        }
    }
}

/* ---- engines (quant_engine: once per table) ---- */

/* A Q4_K_M and a Q5_K_M file's mixes (Wv in Q6_K), the 5-bit types of 32, and one type throughout. */
enum { MIX_Q4_K_M, MIX_Q5_K_M, MIX_Q5, MIX_Q8_0 };
static const mha_weight_type mixes[][MHA_W_COUNT] = {
    {MHA_WEIGHT_Q4_K, MHA_WEIGHT_Q4_K, MHA_WEIGHT_Q6_K, MHA_WEIGHT_Q4_K},
    {MHA_WEIGHT_Q5_K, MHA_WEIGHT_Q5_K, MHA_WEIGHT_Q6_K, MHA_WEIGHT_Q5_K}, /* Q5_K_M */
    {MHA_WEIGHT_Q5_0, MHA_WEIGHT_Q5_0, MHA_WEIGHT_Q5_1, MHA_WEIGHT_Q5_1},
    {MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0},
    {MHA_WEIGHT_Q4_0, MHA_WEIGHT_Q4_0, MHA_WEIGHT_Q4_0, MHA_WEIGHT_Q4_0},
    {MHA_WEIGHT_Q4_1, MHA_WEIGHT_Q4_1, MHA_WEIGHT_Q4_1, MHA_WEIGHT_Q4_1},
};

/* A GQA layer of d 256 (whole K blocks), 4 heads of 64 on 2 KV heads, biases or none, causal. */
static void quant_problem_bias(problem *p, int batch, int seq, int bias)
{
    problem_make(p, 256, 4, batch, seq, seq, bias, 0, 71);
    problem_set_kv_heads(p, 2, 72);
    p->causal = 1;
}

static void quant_problem(problem *p, int batch, int seq)
{
    quant_problem_bias(p, batch, seq, 1);
}

typedef struct qweights {
    mha_weights w;
    unsigned char *rows[MHA_W_COUNT];
    float *scratch;
} qweights;

/* The problem's biases with random blocks of the mix for the four matrices (TORCH rows). */
static qweights quant_weights(const problem *p, const mha_weight_type *mix)
{
    qweights q;
    q.w = problem_weights(p, MHA_LAYOUT_TORCH, &q.scratch);
    const int outs[MHA_W_COUNT] = {p->h * p->dk, p->kvh * p->dk, p->kvh * p->dk, p->d};
    const int ins[MHA_W_COUNT] = {p->d, p->d, p->d, p->h * p->dk};
    q.w.w_q = q.w.w_k = q.w.w_v = q.w.w_o = NULL;
    for (int i = 0; i < MHA_W_COUNT; i++) {
        q.rows[i] = random_rows(mix[i], outs[i], ins[i], 100 + (uint64_t)i);
        q.w.type[i] = mix[i];
        q.w.blocks[i] = q.rows[i];
    }
    return q;
}

static void qweights_free(qweights *q)
{
    for (int i = 0; i < MHA_W_COUNT; i++)
        free(q->rows[i]);
    free(q->scratch);
}

/* An engine of the problem in precision `prec` holding the weights as `held` (NULL: floats),
 * threads workers, its block weights multiplying activations as `act`. */
static mha_engine *quant_engine_in(const problem *p, mha_precision prec, const mha_weight_type *held,
                                   const mha_weights *w, int threads, mha_activations act)
{
    mha_config cfg;
    problem_config(p, &cfg, threads);
    cfg.precision = prec;
    for (int i = 0; held && i < MHA_W_COUNT; i++)
        cfg.weight_type[i] = held[i];
    cfg.weight_activations = act;
    char err[256];
    mha_engine *e;
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(mha_set_weights(e, w), MHA_OK, "%s", mha_engine_last_error(e));
    return e;
}

static mha_engine *quant_engine_act(const problem *p, const mha_weight_type *held, const mha_weights *w, int threads,
                                    mha_activations act)
{
    return quant_engine_in(p, MHA_PRECISION_F32, held, w, threads, act);
}

static mha_engine *quant_engine(const problem *p, const mha_weight_type *held, const mha_weights *w, int threads)
{
    return quant_engine_act(p, held, w, threads, MHA_ACTIVATIONS_F32);
}

static float *forward(mha_engine *e, const problem *p)
{
    float *out = malloc((size_t)p->batch * p->seq_q * p->d * sizeof *out);
    const mha_input in = problem_input(p);
    cr_assert_eq(mha_forward(e, &in, out, NULL), MHA_OK, "%s", mha_engine_last_error(e));
    return out;
}

Test(quant_engine, blocks_as_stored_match_their_floats_and_hold_batch_and_thread_invariance, .timeout = 120)
{
    for (size_t x = 0; x < sizeof mixes / sizeof mixes[MIX_Q4_K_M]; x++) {
        problem p;
        quant_problem(&p, 3, 19);
        qweights q = quant_weights(&p, mixes[x]);
        mha_engine *held = quant_engine(&p, mixes[x], &q.w, 2), *floats = quant_engine(&p, NULL, &q.w, 2);
        mha_engine *one = quant_engine(&p, mixes[x], &q.w, 1);
        float *a = forward(held, &p), *b = forward(floats, &p), *c = forward(one, &p);
        const size_t n = (size_t)p.batch * p.seq_q * p.d;
        double *ref = malloc(n * sizeof *ref);
        for (size_t i = 0; i < n; i++)
            ref[i] = b[i];
        const double err = rel_error(a, ref, n);
        cr_assert(err <= QUANT_F32_TOL, "mix %zu (%s Wq): %.3g against the floats' engine", x,
                  mha_weight_type_name(mixes[x][0]), err);
        cr_assert_eq(first_bit_difference(a, c, n), -1, "mix %zu: 1 thread and 2 differ", x);
        /* sequence 1 alone: the same bits as in the batch */
        problem alone = p;
        alone.batch = 1;
        alone.q = alone.k = alone.v = p.q + (size_t)p.seq_q * p.d;
        float *s = forward(held, &alone);
        cr_assert_eq(first_bit_difference(s, a + (size_t)p.seq_q * p.d, (size_t)p.seq_q * p.d), -1,
                     "mix %zu: a sequence alone and in a batch differ", x);
        free(a), free(b), free(c), free(s), free(ref);
        mha_free(held), mha_free(floats), mha_free(one);
        qweights_free(&q);
        problem_free(&p);
    }
}

Test(quant_engine, heads_of_80_features_hold_no_padding_and_match_their_floats)
{
    problem p; /* d_k 80: on avx512's 32-wide panels the attention pads each part to 96 */
    quant_problem(&p, 2, 7);
    problem_set_head_dim(&p, 80, 73);
    qweights q = quant_weights(&p, mixes[MIX_Q8_0]); /* Q8_0: Wo's 320 inputs are whole blocks */
    mha_engine *held = quant_engine(&p, mixes[MIX_Q8_0], &q.w, 2), *floats = quant_engine(&p, NULL, &q.w, 2);
    float *a = forward(held, &p), *b = forward(floats, &p);
    const size_t n = (size_t)p.batch * p.seq_q * p.d;
    double *ref = malloc(n * sizeof *ref);
    for (size_t i = 0; i < n; i++)
        ref[i] = b[i];
    cr_assert(rel_error(a, ref, n) <= QUANT_F32_TOL, "%.3g against the floats' engine", rel_error(a, ref, n));
    size_t bytes = 0; /* the blocks held: the four matrices' rows, no padding output */
    const int outs[MHA_W_COUNT] = {p.h * p.dk, p.kvh * p.dk, p.kvh * p.dk, p.d};
    const int ins[MHA_W_COUNT] = {p.d, p.d, p.d, p.h * p.dk};
    for (int i = 0; i < MHA_W_COUNT; i++)
        bytes += (size_t)outs[i] * mha_weight_bytes(MHA_WEIGHT_Q8_0, ins[i]);
    mha_config cfg;
    problem_config(&p, &cfg, 2);
    memcpy(cfg.weight_type, mixes[MIX_Q8_0], sizeof cfg.weight_type);
    mha_packed_weights *pw;
    cr_assert_eq(mha_pack_weights(&cfg, &q.w, &pw), MHA_OK);
    cr_assert_leq(mha_packed_weights_size(pw), bytes + 64 * 1024, "%zu bytes held for %zu of blocks",
                  mha_packed_weights_size(pw), bytes); /* biases, headers and alignment beside */
    mha_packed_weights_free(pw);
    free(a), free(b), free(ref);
    mha_free(held), mha_free(floats);
    qweights_free(&q);
    problem_free(&p);
}

/* One sequence of seq tokens through the paged cache in precision prec on weights of the mix and
 * activations act, for each prefill length of prefills (n of them) then one token a step: the
 * causal forward's bits. */
static void steps_equal_the_forward(mha_precision prec, const mha_weight_type *mix, mha_activations act, int seq,
                                    const int *prefills, int n)
{
    problem p;
    quant_problem(&p, 1, seq);
    qweights q = quant_weights(&p, mix);
    mha_engine *e = quant_engine_in(&p, prec, mix, &q.w, 2, act);
    float *full = forward(e, &p);
    mha_config cfg;
    problem_config(&p, &cfg, 2);
    cfg.precision = prec;
    memcpy(cfg.weight_type, mix, sizeof cfg.weight_type);
    cfg.weight_activations = act;
    enum { BS = 16, BLOCKS = 8 };
    cr_assert_leq(seq, BS * BLOCKS);
    mha_kv_cache *c;
    cr_assert_eq(mha_kv_cache_create(&cfg, BLOCKS, BS, 1, &c), MHA_OK);
    const int32_t blocks[BLOCKS] = {0, 1, 2, 3, 4, 5, 6, 7};
    float *out = malloc((size_t)p.seq_q * p.d * sizeof *out);
    for (int pass = 0; pass < n; pass++) {
        memset(out, 0, (size_t)p.seq_q * p.d * sizeof *out);
        for (int t = 0, k; t < p.seq_q; t += k) {
            k = t ? 1 : prefills[pass];
            const int32_t past = t, nn = k;
            const mha_step st = {.n_seqs = 1, .n_past = &past, .n_new = &nn, .blocks = blocks, .max_blocks = BLOCKS,
                                 .x = p.q + (size_t)t * p.d};
            cr_assert_eq(mha_step_forward(e, c, &st, out + (size_t)t * p.d), MHA_OK, "%s", mha_engine_last_error(e));
        }
        const long at = first_bit_difference(out, full, (size_t)p.seq_q * p.d);
        cr_assert_eq(at, -1, "%s: %s Wq on %s activations, a prefill of %d: steps and the forward differ at row %ld",
                     prec == MHA_PRECISION_BF16 ? "bf16" : "f32", mha_weight_type_name(mix[0]),
                     act == MHA_ACTIVATIONS_INT16 ? "int16" : act == MHA_ACTIVATIONS_BF16 ? "bf16" : "f32",
                     prefills[pass], at / p.d);
    }
    free(out), free(full);
    mha_kv_cache_free(c);
    mha_free(e);
    qweights_free(&q);
    problem_free(&p);
}

Test(quant_engine, steps_token_by_token_equal_the_causal_forward_bitwise, .timeout = 120)
{
    const int prefill[1] = {10};
    steps_equal_the_forward(MHA_PRECISION_F32, mixes[MIX_Q4_K_M], MHA_ACTIVATIONS_F32, 24, prefill, 1);
}

/* Block weights on bf16 activations are a bf16 engine's products on their floats (qgemm.h): the
 * bits of the bf16 engine handed the same blocks to hold as floats, for every mix, batch and
 * thread count, the rows of a self-attention (packed once) and of a cross-attention's keys
 * (packed here, more than MHA_QBF16_ROWS of them). */
Test(quant_engine, bf16_activations_equal_the_bf16_engine_on_the_floats_bitwise, .timeout = 240)
{
    for (int cross = 0; cross < 2; cross++)
        for (size_t x = 0; x < sizeof mixes / sizeof mixes[MIX_Q4_K_M]; x++) {
            if (cross && x != MIX_Q4_K_M)
                continue;
            problem p;
            if (cross)
                problem_make(&p, 256, 4, 2, 9, MHA_QBF16_ROWS + 21, 1, 1, 74);
            else
                quant_problem(&p, 3, 19);
            qweights q = quant_weights(&p, mixes[x]);
            mha_engine *held = quant_engine_in(&p, MHA_PRECISION_BF16, mixes[x], &q.w, 2, MHA_ACTIVATIONS_BF16);
            mha_engine *floats = quant_engine_in(&p, MHA_PRECISION_BF16, NULL, &q.w, 2, MHA_ACTIVATIONS_F32);
            mha_engine *one = quant_engine_in(&p, MHA_PRECISION_BF16, mixes[x], &q.w, 1, MHA_ACTIVATIONS_BF16);
            float *a = forward(held, &p), *b = forward(floats, &p), *c = forward(one, &p);
            const size_t n = (size_t)p.batch * p.seq_q * p.d, rows = (size_t)p.seq_q * p.d;
            cr_assert_eq(first_bit_difference(a, b, n), -1, "mix %zu%s: blocks and their floats differ", x,
                         cross ? ", cross" : "");
            cr_assert_eq(first_bit_difference(a, c, n), -1, "mix %zu: 1 thread and 2 differ", x);
            problem alone = p; /* the last sequence alone: its bits in the batch */
            alone.batch = 1;
            alone.q = p.q + (size_t)(p.batch - 1) * rows;
            alone.k = p.k + (size_t)(p.batch - 1) * p.seq_kv * p.d;
            alone.v = p.v + (size_t)(p.batch - 1) * p.seq_kv * p.d;
            float *s = forward(held, &alone);
            cr_assert_eq(first_bit_difference(s, a + (size_t)(p.batch - 1) * rows, rows), -1,
                         "mix %zu: a sequence alone and in a batch differ", x);
            free(a), free(b), free(c), free(s);
            mha_free(held), mha_free(floats), mha_free(one);
            qweights_free(&q);
            problem_free(&p);
        }
}

Test(quant_engine, bf16_activations_steps_token_by_token_equal_the_causal_forward_bitwise, .timeout = 120)
{
    const int prefill[1] = {10};
    steps_equal_the_forward(MHA_PRECISION_BF16, mixes[MIX_Q4_K_M], MHA_ACTIVATIONS_BF16, 24, prefill, 1);
}

Test(quant_engine, quantizing_floats_at_load_equals_handing_the_quantized_blocks, .timeout = 120)
{
    problem p;
    quant_problem(&p, 2, 9);
    float *scratch;
    const mha_weights fw = problem_weights(&p, MHA_LAYOUT_TORCH, &scratch);
    const float *const f[MHA_W_COUNT] = {fw.w_q, fw.w_k, fw.w_v, fw.w_o};
    const int outs[MHA_W_COUNT] = {p.h * p.dk, p.kvh * p.dk, p.kvh * p.dk, p.d};
    const int ins[MHA_W_COUNT] = {p.d, p.d, p.d, p.h * p.dk};
    for (size_t x = 0; x < sizeof mixes / sizeof mixes[MIX_Q4_K_M]; x++) {
        mha_weights bw = fw;
        unsigned char *rows[MHA_W_COUNT];
        for (int i = 0; i < MHA_W_COUNT; i++) {
            const size_t rb = mha_weight_row_bytes(mixes[x][i], ins[i]);
            rows[i] = malloc((size_t)outs[i] * rb);
            for (int o = 0; o < outs[i]; o++)
                mha_quantize_row(mixes[x][i], f[i] + (size_t)o * ins[i], rows[i] + (size_t)o * rb, ins[i]);
            bw.type[i] = mixes[x][i];
            bw.blocks[i] = rows[i];
        }
        bw.w_q = bw.w_k = bw.w_v = bw.w_o = NULL;
        mha_engine *a = quant_engine(&p, mixes[x], &fw, 2), *b = quant_engine(&p, mixes[x], &bw, 2);
        float *oa = forward(a, &p), *ob = forward(b, &p);
        cr_assert_eq(first_bit_difference(oa, ob, (size_t)p.batch * p.seq_q * p.d), -1,
                     "mix %zu: quantized at load and handed quantized differ", x);
        free(oa), free(ob);
        mha_free(a), mha_free(b);
        for (int i = 0; i < MHA_W_COUNT; i++)
            free(rows[i]);
    }
    free(scratch);
    problem_free(&p);
}

Test(quant_engine, what_the_engine_cannot_hold_is_refused_with_its_reason)
{
    problem p;
    quant_problem(&p, 1, 4);
    mha_config cfg;
    problem_config(&p, &cfg, 1);
    char err[256];
    mha_engine *e = NULL;
    const struct {
        mha_weight_type t[MHA_W_COUNT];
        const char *says;
    } bad[] = {
        {{MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0, MHA_WEIGHT_F32}, "all four f32, or all four block types"},
        {{MHA_WEIGHT_F16, MHA_WEIGHT_F16, MHA_WEIGHT_F16, MHA_WEIGHT_F16}, "not a type the engine holds"},
        {{(mha_weight_type)16, MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0, MHA_WEIGHT_Q8_0}, "16 (unknown)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mha_config c = cfg;
        memcpy(c.weight_type, bad[i].t, sizeof c.weight_type);
        cr_assert_eq(mha_create_msg(&c, &e, err, sizeof err), MHA_ERR_CONFIG, "case %zu", i);
        cr_assert(strstr(err, bad[i].says), "case %zu: '%s' does not say '%s'", i, err, bad[i].says);
    }
    mha_config c = cfg; /* d_model 256 is one Q4_K block; 384 is not whole ones */
    c.d_model = 384, c.head_dim = 64;
    for (int i = 0; i < MHA_W_COUNT; i++)
        c.weight_type[i] = MHA_WEIGHT_Q4_K;
    cr_assert_eq(mha_create_msg(&c, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "weight_type[0]") && strstr(err, "256") && strstr(err, "384"), "%s", err);

    /* weights the engine will not take: another block type, blocks in XW, none given */
    qweights q = quant_weights(&p, mixes[MIX_Q8_0]); /* Q8_0 */
    for (int i = 0; i < MHA_W_COUNT; i++)
        cfg.weight_type[i] = MHA_WEIGHT_Q4_0;
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(mha_set_weights(e, &q.w), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_engine_last_error(e), "requantizing"), "%s", mha_engine_last_error(e));
    mha_weights w = q.w;
    w.layout = MHA_LAYOUT_XW;
    cr_assert_eq(mha_set_weights(e, &w), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_engine_last_error(e), "MHA_LAYOUT_TORCH"), "%s", mha_engine_last_error(e));
    mha_free(e);
    e = quant_engine(&p, mixes[MIX_Q8_0], &q.w, 1);
    w = q.w;
    w.blocks[MHA_W_V] = NULL;
    cr_assert_eq(mha_set_weights(e, &w), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(mha_engine_last_error(e), "w_v") && strstr(mha_engine_last_error(e), "NULL"), "%s",
              mha_engine_last_error(e));
    mha_free(e);
    qweights_free(&q);
    problem_free(&p);
}

/* ---- block weights on int16 activations (weight_activations INT16) ---- */

/* The integer products' engine against the same engine on float activations, norm-wise over
 * the whole output (batch, rows, d_model): Wq, Wk, Wv and Wo each add their activations'
 * rounding, about a uniform row's 1.6e-5 to 2.9e-5 (Q16_ACT_TOL's comment). V's and Wo's pass to
 * the output as they are, Q's and K's only through the scores' softmax; independent, they add
 * in quadrature. Without biases the error is all the products': measured 2.5e-5 to 2.8e-5 over
 * the six mixes (avx512, avx2 and ref alike); biases add float32 terms that carry no rounding:
 * 8e-6 to 1.1e-5 with them. Bound: a product's own, Q16_ACT_TOL. */
#define Q16_ENGINE_TOL Q16_ACT_TOL

/* A sequence of 70: one query block (q_block: up to 96 rows) multiplies Wo over 70 rows, more
 * than MHA_QROWS, so mha_qgemm16 quantizes them in two blocks into the worker's room. */
enum { Q16_SEQ = 70 };

Test(quant_engine, int16_activations_stay_within_their_bound_of_f32_ones_and_hold_batch_and_thread_invariance,
     .timeout = 240)
{
    for (size_t t = 0; t < 2 * sizeof mixes / sizeof mixes[MIX_Q4_K_M]; t++) {
        const size_t x = t / 2; /* each mix without biases, then with them */
        problem p;
        quant_problem_bias(&p, 2, Q16_SEQ, (int)(t % 2));
        qweights q = quant_weights(&p, mixes[x]);
        mha_engine *i16 = quant_engine_act(&p, mixes[x], &q.w, 2, MHA_ACTIVATIONS_INT16);
        mha_engine *one = quant_engine_act(&p, mixes[x], &q.w, 1, MHA_ACTIVATIONS_INT16);
        mha_engine *f32 = quant_engine(&p, mixes[x], &q.w, 2);
        float *a = forward(i16, &p), *b = forward(f32, &p), *c = forward(one, &p);
        const size_t n = (size_t)p.batch * p.seq_q * p.d;
        double *ref = malloc(n * sizeof *ref);
        for (size_t i = 0; i < n; i++)
            ref[i] = b[i];
        const double err = rel_error(a, ref, n);
        cr_assert(err <= Q16_ENGINE_TOL, "mix %zu (%s Wq)%s: %.3g against f32 activations", x,
                  mha_weight_type_name(mixes[x][0]), t % 2 ? ", biases" : "", err);
        cr_assert_gt(err, 0.0, "mix %zu: int16 activations gave f32's bits: the integer products did not run", x);
        cr_assert_eq(first_bit_difference(a, c, n), -1, "mix %zu: 1 thread and 2 differ", x);
        problem alone = p; /* sequence 1 alone: the same bits as in the batch */
        alone.batch = 1;
        alone.q = alone.k = alone.v = p.q + (size_t)p.seq_q * p.d;
        float *s = forward(i16, &alone);
        cr_assert_eq(first_bit_difference(s, a + (size_t)p.seq_q * p.d, (size_t)p.seq_q * p.d), -1,
                     "mix %zu: a sequence alone and in a batch differ", x);
        free(a), free(b), free(c), free(s), free(ref);
        mha_free(i16), mha_free(f32), mha_free(one);
        qweights_free(&q);
        problem_free(&p);
    }
}

/* Steps through the paged cache on int16 activations: the forward's bits, whether the rows come
 * a prefill of 10 then one a step (Wo on 1 to 10 rows) or a prefill of 70 then one a step (Wo on
 * more than MHA_QROWS rows in a step). */
Test(quant_engine, int16_activations_steps_token_by_token_equal_the_causal_forward_bitwise, .timeout = 240)
{
    const int prefills[2] = {10, Q16_SEQ};
    for (size_t x = 0; x < sizeof mixes / sizeof mixes[MIX_Q4_K_M]; x++)
        steps_equal_the_forward(MHA_PRECISION_F32, mixes[x], MHA_ACTIVATIONS_INT16, Q16_SEQ + 4, prefills, 2);
}

Test(quant_engine, int16_activations_on_f32_weights_or_an_unknown_value_are_refused_with_the_field)
{
    problem p;
    quant_problem(&p, 1, 4);
    mha_config cfg;
    problem_config(&p, &cfg, 1);
    char err[256];
    mha_engine *e = NULL;
    cfg.weight_activations = MHA_ACTIVATIONS_INT16; /* the four f32 */
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "weight_activations") && strstr(err, "f32"), "%s", err);
    for (int i = 0; i < MHA_W_COUNT; i++)
        cfg.weight_type[i] = MHA_WEIGHT_Q8_0;
    cfg.weight_activations = (mha_activations)7; /* neither F32 nor INT16, on block weights */
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "weight_activations") && strstr(err, "7"), "%s", err);
    cfg.weight_activations = MHA_ACTIVATIONS_INT16; /* and the one that is right */
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_OK, "%s", err);
    mha_free(e);
    problem_free(&p);
}

Test(quant_engine, bf16_activations_outside_a_bf16_engine_or_on_f32_weights_are_refused_with_the_field)
{
    problem p;
    quant_problem(&p, 1, 4);
    mha_config cfg;
    problem_config(&p, &cfg, 1);
    char err[256];
    mha_engine *e = NULL;
    cfg.weight_activations = MHA_ACTIVATIONS_BF16;
    cfg.precision = MHA_PRECISION_BF16; /* the four f32 */
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "weight_activations") && strstr(err, "bf16") && strstr(err, "f32"), "%s", err);
    for (int i = 0; i < MHA_W_COUNT; i++)
        cfg.weight_type[i] = MHA_WEIGHT_Q4_K;
    cfg.precision = MHA_PRECISION_F32; /* blocks, in a float32 engine */
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "weight_activations") && strstr(err, "precision"), "%s", err);
    cfg.precision = MHA_PRECISION_BF16;
    cr_assert_eq(mha_create_msg(&cfg, &e, err, sizeof err), MHA_OK, "%s", err);
    mha_free(e);
    problem_free(&p);
}
