/* test_quantize.c — mha_quantize_row against ggml's reference quantizers, byte for byte: the
 * inputs and ggml's blocks are in tests/data/quant_golden.bin (tests/gen_quant_golden.c wrote
 * it with ggml's quantize_row_*_ref and says its format; `make goldens-quant` writes it again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "helpers.h"
#include "quant.h"

#define GOLDEN "tests/data/quant_golden.bin"

enum { MAX_CASES = 16, MAX_TYPES = 8 };

/* The file, parsed in place (pointers into data). */
typedef struct {
    unsigned char *data;
    size_t size;
    int ncases, ntypes;
    struct {
        char name[17];
        int rows, n;
        const unsigned char *x; /* rows·n float32 */
    } cases[MAX_CASES];
    struct {
        int type, qk, bytes;
        const unsigned char *blocks; /* every case's rows, in case order */
    } types[MAX_TYPES];
} golden;

static uint32_t u32_at(const golden *g, size_t *at)
{
    cr_assert_leq(*at + 4, g->size, "%s is cut short at byte %zu", GOLDEN, *at);
    const unsigned char *p = g->data + *at;
    *at += 4;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The golden file read and checked for its own consistency; free g->data. */
static void golden_load(golden *g)
{
    memset(g, 0, sizeof *g);
    FILE *f = fopen(GOLDEN, "rb");
    cr_assert(f, "cannot open %s (the tests run from the repository's root)", GOLDEN);
    fseek(f, 0, SEEK_END);
    g->size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g->data = malloc(g->size);
    cr_assert_eq(fread(g->data, 1, g->size, f), g->size);
    fclose(f);

    cr_assert(g->size >= 16 && memcmp(g->data, "MHAQGLD1", 8) == 0, "%s: not a golden file", GOLDEN);
    size_t at = 8;
    g->ncases = (int)u32_at(g, &at);
    g->ntypes = (int)u32_at(g, &at);
    cr_assert(g->ncases > 0 && g->ncases <= MAX_CASES && g->ntypes > 0 && g->ntypes <= MAX_TYPES);
    for (int c = 0; c < g->ncases; c++) {
        cr_assert_leq(at + 16, g->size);
        memcpy(g->cases[c].name, g->data + at, 16);
        at += 16;
        g->cases[c].rows = (int)u32_at(g, &at);
        g->cases[c].n = (int)u32_at(g, &at);
        g->cases[c].x = g->data + at;
        at += (size_t)g->cases[c].rows * g->cases[c].n * 4;
    }
    for (int t = 0; t < g->ntypes; t++) {
        g->types[t].type = (int)u32_at(g, &at);
        g->types[t].qk = (int)u32_at(g, &at);
        g->types[t].bytes = (int)u32_at(g, &at);
        g->types[t].blocks = g->data + at;
        for (int c = 0; c < g->ncases; c++) {
            cr_assert(g->cases[c].n % g->types[t].qk == 0);
            at += (size_t)g->cases[c].rows * (g->cases[c].n / g->types[t].qk) * g->types[t].bytes;
        }
    }
    cr_assert_eq(at, g->size, "%s: %zu bytes, its contents say %zu", GOLDEN, g->size, at);
}

/* The name is held, not pointed to: Criterion's workers get a copy of the parameters, and a
 * pointer into the runner's image was not valid in them. */
typedef struct {
    mha_weight_type type;
    char name[8];
    int qk, bytes; /* ggml-common.h's */
} qcase;

ParameterizedTestParameters(quantize, writes_ggml_reference_bytes)
{
    static qcase types[] = {
        {MHA_WEIGHT_Q8_0, "q8_0", 32, 34},   {MHA_WEIGHT_Q4_0, "q4_0", 32, 18},   {MHA_WEIGHT_Q4_1, "q4_1", 32, 20},
        {MHA_WEIGHT_Q5_0, "q5_0", 32, 22},   {MHA_WEIGHT_Q5_1, "q5_1", 32, 24},   {MHA_WEIGHT_Q4_K, "q4_K", 256, 144},
        {MHA_WEIGHT_Q5_K, "q5_K", 256, 176}, {MHA_WEIGHT_Q6_K, "q6_K", 256, 210},
    };
    return cr_make_param_array(qcase, types, sizeof types / sizeof types[0]);
}

/* Every row of every case, quantized into a buffer at an odd address (blocks need no
 * alignment) between guard bytes, against ggml's bytes; the first difference is named by
 * type, case, row, block and byte. */
ParameterizedTest(qcase *q, quantize, writes_ggml_reference_bytes)
{
    golden g;
    golden_load(&g);
    int t = 0;
    while (t < g.ntypes && g.types[t].type != (int)q->type)
        t++;
    cr_assert_lt(t, g.ntypes, "%s holds no %s blocks", GOLDEN, q->name);
    cr_assert(g.types[t].qk == q->qk && g.types[t].bytes == q->bytes, "%s: ggml's %s blocks are %d inputs in %d bytes",
              GOLDEN, q->name, g.types[t].qk, g.types[t].bytes);

    const unsigned char *want = g.types[t].blocks;
    for (int c = 0; c < g.ncases; c++) {
        const int n = g.cases[c].n, nb = n / q->qk;
        const size_t row_bytes = (size_t)nb * q->bytes;
        unsigned char *buf = malloc(row_bytes + 2);
        float *x = malloc((size_t)n * sizeof *x);
        for (int r = 0; r < g.cases[c].rows; r++, want += row_bytes) {
            memcpy(x, g.cases[c].x + (size_t)r * n * 4, (size_t)n * 4);
            memset(buf, 0xa5, row_bytes + 2);
            mha_quantize_row(q->type, x, buf + 1, n);
            cr_assert(buf[0] == 0xa5 && buf[row_bytes + 1] == 0xa5, "%s, case %s, row %d: wrote outside its %zu bytes",
                      q->name, g.cases[c].name, r, row_bytes);
            for (size_t i = 0; i < row_bytes; i++)
                if (buf[1 + i] != want[i])
                    cr_assert_fail("%s, case %s, row %d: block %zu byte %zu is 0x%02x, ggml's 0x%02x", q->name,
                                   g.cases[c].name, r, i / (size_t)q->bytes, i % (size_t)q->bytes, buf[1 + i], want[i]);
        }
        free(x);
        free(buf);
    }
    free(g.data);
}

/* The file has every kind of input it was made for (a regenerated file that lost one fails). */
Test(quantize, golden_covers_its_cases)
{
    golden g;
    golden_load(&g);
    const char *names[] = {"gauss", "outliers", "zero_blocks", "tiny", "constant", "huge", "halves"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int c = 0;
        while (c < g.ncases && strcmp(g.cases[c].name, names[k]) != 0)
            c++;
        cr_expect_lt(c, g.ncases, "%s has no case %s", GOLDEN, names[k]);
    }
    free(g.data);
}

/* A type mha does not quantize to (float types, ggml's other block types) writes nothing. */
Test(quantize, other_types_write_nothing)
{
    float x[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)i / 7 - 3;
    const int others[] = {MHA_WEIGHT_F32, MHA_WEIGHT_F16, MHA_WEIGHT_BF16, 10 /* Q2_K */, 11 /* Q3_K */, 15 /* Q8_K */};
    unsigned char buf[1024];
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        memset(buf, 0xa5, sizeof buf);
        mha_quantize_row((mha_weight_type)others[k], x, buf, 256);
        for (size_t i = 0; i < sizeof buf; i++)
            cr_assert_eq(buf[i], 0xa5, "type %d wrote byte %zu", others[k], i);
    }
}
