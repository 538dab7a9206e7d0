/* gen_quant_golden.c — tests/data/quant_golden.bin from ggml's own reference quantizers
 * (quantize_row_{q8_0,q4_0,q4_1,q4_K,q6_K,q5_0,q5_1,q5_K}_ref, ggml-quants.c), for tests/test_quantize.c,
 * which asserts that mha_quantize_row writes the same bytes.
 *
 * `make goldens-quant` builds ggml-base from llama-cpp-python's sdist (the ggml that deps-ggml
 * builds) into build/ggml-quant, this program against it, and runs it. By hand:
 *   cc -O2 -std=c11 -I$GGML/include tests/gen_quant_golden.c $BUILD/src/libggml-base.a \
 *      -lstdc++ -lm -lpthread -fopenmp -o gen_quant_golden && ./gen_quant_golden tests/data/quant_golden.bin
 * ggml-base is built as ggml's CMake builds it (-O3, no -march): plain float arithmetic, no FMA,
 * which is what mha's -ffp-contract=off computes too. A ggml built with FMA and GCC's default
 * contraction (gnu11) may write other bytes for Q4_K (make_qkx2_quants' sums).
 *
 * The file, little-endian throughout:
 *   "MHAQGLD1"                     8 bytes
 *   u32 ncases, u32 ntypes
 *   ncases × { char name[16] (NUL-padded); u32 rows; u32 n; f32 x[rows·n] }   the inputs
 *   ntypes × { u32 type (ggml's number: mha_weight_type's); u32 qk; u32 block_bytes;
 *              for each case in order: rows · (n / qk) · block_bytes bytes, row after row }
 * Rows of a case are quantized one call each (a row is what mha_quantize_row takes). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

/* ggml-quants.h is internal to ggml; the block pointers are plain pointers here. */
void quantize_row_q8_0_ref(const float *x, void *y, int64_t k);
void quantize_row_q4_0_ref(const float *x, void *y, int64_t k);
void quantize_row_q4_1_ref(const float *x, void *y, int64_t k);
void quantize_row_q4_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q6_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_0_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_1_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_K_ref(const float *x, void *y, int64_t k);

enum { MAX_N = 1024, MAX_ROWS = 4 };

typedef struct {
    const char *name;
    int rows, n;
    void (*fill)(float *x, int row, int n); /* row of n inputs */
} gcase;

/* splitmix64: the same numbers on every machine. */
static uint64_t rng_state;
static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* N(0, 1) by Box–Muller in double: only its float rounding is stored, so libm's last bits do
 * not matter to the test. */
static float gauss(void)
{
    const double u1 = ((next_u64() >> 11) + 1.0) * 0x1p-53, u2 = (next_u64() >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* unit-scale weights */
static void fill_gauss(float *x, int row, int n)
{
    (void)row;
    for (int i = 0; i < n; i++)
        x[i] = gauss();
}

/* a few channels (the same columns in every row) ×100, as activations' and some weights' are */
static void fill_outliers(float *x, int row, int n)
{
    (void)row;
    for (int i = 0; i < n; i++)
        x[i] = gauss() * (i % 61 == 7 || i % 97 == 40 ? 100.0f : 1.0f);
}

/* zero blocks: a whole 256 super-block, 32-blocks, a lone 16 (Q6_K's sub-block, half a
 * 32-block), negative zeros, and a block with one value in it */
static void fill_zero_blocks(float *x, int row, int n)
{
    for (int i = 0; i < n; i++) {
        const float g = gauss();
        int zero = row == 0 ? i < 256 || (i >= 288 && i < 320) || (i >= 384 && i < 400)
                            : (i >= 64 && i < 96) || (i >= 300 && i < 316) || (i >= 416 && i < 448 && i != 430);
        x[i] = zero ? 0.0f : g;
        if (row == 1 && i < 32)
            x[i] = -0.0f;
    }
}

/* tiny values: each 32-block scaled from 1e-3 (an fp16-subnormal Q8_0 d) down through
 * float's smallest normals into its denormals; row 1 mixes a normal value into denormal
 * blocks */
static void fill_tiny(float *x, int row, int n)
{
    static const float scale[16] = {1e-3f, 1e-4f, 1e-5f, 1e-6f,  1e-7f,  1e-8f,  1e-10f,    1e-20f,
                                    1e-30f, 1e-36f, 1e-37f, 0x1p-126f, 1e-39f, 1e-41f, 1e-44f, 0x1p-149f};
    for (int i = 0; i < n; i++) {
        const int b = (i / 32) % 16;
        x[i] = gauss() * scale[b];
        if (row == 1 && i % 32 == 5)
            x[i] = b % 2 ? 1e-3f : -2.5e-5f;
    }
}

/* constant blocks: each 32-block one value (row 0); row 1 constant over 64 values, its last
 * super-block one value */
static void fill_constant(float *x, int row, int n)
{
    static const float v0[8] = {0.5f, -3.25f, 1e-3f, 7.0f, -1.0f, 100.0f, 1.0f / 3, -1e-4f};
    static const float v1[4] = {-2.0f, 2.0f, 0.25f, -0.75f};
    for (int i = 0; i < n; i++)
        x[i] = row == 0 ? v0[(i / 32) % 8] : i >= n - 256 ? 1.0f : v1[(i / 64) % 4];
}

/* huge values: factors past fp16's 65504 (stored as inf) and mins below −65504 */
static void fill_huge(float *x, int row, int n)
{
    static const float scale[8] = {1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 3e4f, 2e5f, 5e6f};
    for (int i = 0; i < n; i++)
        x[i] = gauss() * scale[(i / 32 + row) % 8];
}

/* exact halves: 32-blocks of largest magnitude 127 (Q8_0's d exactly 1) whose values are
 * integers + 0.5, where rounding's ties decide (roundf: away from zero); row 1 multiples of
 * 0.25 with −8 in each block (Q4_0's d exactly 1) */
static void fill_halves(float *x, int row, int n)
{
    for (int i = 0; i < n; i++) {
        const int k = (int)(next_u64() % 253) - 126;
        if (row == 0)
            x[i] = i % 32 == 0 ? (i / 32 % 2 ? 127.0f : -127.0f) : (float)k + (k < 0 ? -0.5f : 0.5f);
        else
            x[i] = i % 32 == 3 ? -8.0f : (float)(k % 32) * 0.25f;
    }
}

static const gcase cases[] = {
    {"gauss", 3, 1024, fill_gauss},      {"outliers", 2, 1024, fill_outliers}, {"zero_blocks", 2, 512, fill_zero_blocks},
    {"tiny", 2, 512, fill_tiny},         {"constant", 2, 512, fill_constant},  {"huge", 2, 512, fill_huge},
    {"halves", 2, 512, fill_halves},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

typedef struct {
    enum ggml_type type;
    void (*quantize)(const float *x, void *y, int64_t k);
} gtype;

static const gtype types[] = {
    {GGML_TYPE_Q8_0, quantize_row_q8_0_ref}, {GGML_TYPE_Q4_0, quantize_row_q4_0_ref},
    {GGML_TYPE_Q4_1, quantize_row_q4_1_ref}, {GGML_TYPE_Q4_K, quantize_row_q4_K_ref},
    {GGML_TYPE_Q6_K, quantize_row_q6_K_ref}, /* types added later follow: the earlier bytes stay put */
    {GGML_TYPE_Q5_0, quantize_row_q5_0_ref}, {GGML_TYPE_Q5_1, quantize_row_q5_1_ref},
    {GGML_TYPE_Q5_K, quantize_row_q5_K_ref},
};
enum { NTYPES = sizeof types / sizeof types[0] };

static void put_u32(FILE *f, uint32_t v)
{
    const unsigned char b[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};
    fwrite(b, 1, 4, f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_quant_golden OUT.bin\n");
        return 2;
    }
    static float x[NCASES][MAX_ROWS][MAX_N];
    static unsigned char y[MAX_N * 2];
    rng_state = 20240611;
    for (int c = 0; c < NCASES; c++)
        for (int r = 0; r < cases[c].rows; r++)
            cases[c].fill(x[c][r], r, cases[c].n);

    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fwrite("MHAQGLD1", 1, 8, f);
    put_u32(f, NCASES);
    put_u32(f, NTYPES);
    for (int c = 0; c < NCASES; c++) {
        char name[16] = {0};
        strncpy(name, cases[c].name, sizeof name - 1);
        fwrite(name, 1, sizeof name, f);
        put_u32(f, (uint32_t)cases[c].rows);
        put_u32(f, (uint32_t)cases[c].n);
        for (int r = 0; r < cases[c].rows; r++)
            for (int i = 0; i < cases[c].n; i++) {
                uint32_t u;
                memcpy(&u, &x[c][r][i], sizeof u);
                put_u32(f, u);
            }
    }
    for (int t = 0; t < NTYPES; t++) {
        const int qk = (int)ggml_blck_size(types[t].type);
        const size_t bytes = ggml_type_size(types[t].type);
        put_u32(f, (uint32_t)types[t].type);
        put_u32(f, (uint32_t)qk);
        put_u32(f, (uint32_t)bytes);
        for (int c = 0; c < NCASES; c++)
            for (int r = 0; r < cases[c].rows; r++) {
                types[t].quantize(x[c][r], y, cases[c].n);
                fwrite(y, 1, (size_t)(cases[c].n / qk) * bytes, f);
            }
    }
    if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
