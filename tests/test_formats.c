/* test_formats.c — every malformed weights or input file is rejected with exit code 2 and a
 * message that names the problem; the loaders' conversions are exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "helpers.h"
#include "npy.h"
#include "json_scan.h"
#include "bgemm.h"
#include "safetensors.h"

#define D "tests/data/"

/* Runs `mha run golden.yaml ARGS` where ARGS names FILE (written to the temp dir as `bad`),
 * and checks exit 2 and that stderr contains both the file name and `want`. */
static void expect_rejected(const char *dir, const char *args_fmt, const char *want)
{
    char path[128], args[600];
    snprintf(path, sizeof path, "%s/bad", dir);
    snprintf(args, sizeof args, args_fmt, path);
    char full[800];
    snprintf(full, sizeof full, "run " D "golden.yaml --iters 1 --warmup 0 %s", args);
    char *out, *err;
    int rc = run_cli(full, &out, &err);
    cr_assert_eq(rc, 2, "'%s': exit %d, want 2; stderr: %s", args, rc, err);
    cr_assert(strstr(err, path), "'%s': message does not name the file: %s", args, err);
    cr_assert(strstr(err, want), "'%s': message does not say '%s': %s", args, want, err);
    cr_assert(!strstr(err, "AddressSanitizer") && !strstr(err, "runtime error"), "%s", err);
    free(out), free(err);
}

/* ---- safetensors ---- */

typedef struct st_case { char what[48]; char header[400]; int data_len; char want[64]; } st_case;

#define W32 "\"dtype\":\"F32\",\"shape\":[32,32]"
ParameterizedTestParameters(formats, malformed_safetensors)
{
    static st_case cases[] = {
        {"not JSON", "{\"in_proj_weight\": nope}", 0, "header JSON"},
        {"not an object", "[1, 2, 3]", 0, "start with '{'"},
        {"duplicate keys", "{\"a\":{" W32 ",\"data_offsets\":[0,4096]},\"a\":{" W32 ",\"data_offsets\":[0,4096]}}", 4096, "duplicate"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'F99'"},
        {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"shape and offsets disagree", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 12"},
        {"size overflows", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "overflows"},
        {"overlapping offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"gap between tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "gap"},
        {"data past the tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, "data section"},
        {"offsets past the data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "data section"},
        {"bad data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets"},
        {"metadata not strings", "{\"__metadata__\":{\"x\":1}}", 0, "__metadata__"},
        {"duplicate field", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "duplicate field 'dtype'"},
        {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key '__metadata__'"},
        {"text after the object", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8, "text after"},
        {"nested too deep", "{\"a\":{\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"
                            "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "nested deeper"},
        {"invalid UTF-8 in a name", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "invalid UTF-8"},
        {"unpaired surrogate", "{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "surrogate"},
        {"NUL in a name", "{\"a\\u0000\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\\u0000"},
        {"fractional shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"offset too large", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}", 8, "data_offsets"},
        {"unterminated string", "{\"a\":{\"dtype\":\"F32", 0, "unterminated string"},
        {"no attention tensors", "{\"encoder.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "no attention weights"},
        {"wrong dtype for weights", "{\"in_proj_weight\":{\"dtype\":\"I64\",\"shape\":[96,32],\"data_offsets\":[0,24576]}}", 24576, "dtype I64"},
        {"wrong shape", "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[96,16],\"data_offsets\":[0,6144]}}", 6144, "expected (96, 32)"},
        {"missing tensor", "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[96,32],\"data_offsets\":[0,12288]}}", 12288, "'out_proj.weight' is missing"},
    };
    return cr_make_param_array(st_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(st_case *c, formats, malformed_safetensors, .timeout = 30)
{
    char dir[64], path[128];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad", dir);
    write_safetensors_raw(path, c->header, (size_t)c->data_len, 0);
    expect_rejected(dir, "--weights %s", c->want);
    tmpdir_remove(dir);
}

Test(formats, truncated_and_oversized_safetensors, .timeout = 30)
{
    char dir[64], path[128];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad", dir);
    /* a real file cut in half */
    FILE *f = fopen(D "mha.safetensors", "rb");
    unsigned char buf[20000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_file(path, buf, n / 2);
    expect_rejected(dir, "--weights %s", "data section");
    /* cut inside the header */
    write_file(path, buf, 40);
    expect_rejected(dir, "--weights %s", "runs past the end");
    /* shorter than the length field */
    write_file(path, buf, 5);
    expect_rejected(dir, "--weights %s", "8-byte header length");
    /* a header length over the 100 MB cap */
    unsigned char big[16] = {0x00, 0xe2, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000256 */
    write_file(path, big, sizeof big);
    expect_rejected(dir, "--weights %s", "cap");
    tmpdir_remove(dir);
}

Test(formats, bias_in_file_but_not_in_model, .timeout = 30)
{
    char dir[64], cfg[128], args[400];
    tmpdir_make(dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/nobias.yaml", dir);
    const char *yaml = "model: { d_model: 32, heads: 4, bias: false }\n";
    write_file(cfg, yaml, strlen(yaml));
    snprintf(args, sizeof args, "run %s --weights " D "mha.safetensors --iters 1", cfg);
    char *out, *err;
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, "in_proj_bias") && strstr(err, "bias: false"), "%s", err);
    free(out), free(err);
    tmpdir_remove(dir);
}

/* ---- .npy ---- */

typedef struct npy_case { char what[40]; int major; char dict[160]; int data_len; char option[16]; char want[48]; } npy_case;

ParameterizedTestParameters(formats, malformed_npy)
{
    static npy_case cases[] = {
        {"object array", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, "--input", "object arrays"},
        {"Fortran order", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 7, 32), }", 1792, "--input", "Fortran"},
        {"big-endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 7, 32), }", 1792, "--input", "big-endian"},
        {"float64", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 7, 32), }", 3584, "--input", "'<f8' is not supported"},
        {"wrong rank", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (14, 32), }", 1792, "--input", "rank 2, want rank 3"},
        {"wrong width", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 7, 16), }", 896, "--input", "d_model = 32"},
        {"truncated data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 7, 32), }", 1000, "--input", "announces 1792"},
        {"trailing data", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 7, 32), }", 2000, "--input", "announces 1792"},
        {"structured dtype", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, "--input", "structured"},
        {"missing shape", 3, "{'descr': '<f4', 'fortran_order': False, }", 4, "--input", "missing 'shape'"},
        {"unknown key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }", 8, "--input", "unexpected key 'x'"},
        {"not a dict", 1, "['descr']", 0, "--input", "not a dictionary"},
        {"float lengths", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, "--lengths", "want int32 or int64"},
        {"lengths matrix", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 1), }", 8, "--lengths", "want a vector"},
        {"wrong batch", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24, "--lengths", "3 lengths for a batch of 2"},
    };
    return cr_make_param_array(npy_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(npy_case *c, formats, malformed_npy, .timeout = 30)
{
    char dir[64], path[128], fmt[200];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad", dir);
    write_npy_raw(path, c->major, c->dict, (size_t)c->data_len);
    if (!strcmp(c->option, "--input"))
        snprintf(fmt, sizeof fmt, "--input %%s");
    else
        snprintf(fmt, sizeof fmt, "--input " D "x.npy %s %%s", c->option);
    expect_rejected(dir, fmt, c->want);
    tmpdir_remove(dir);
}

Test(formats, npy_bad_magic_version_and_lengths_out_of_range, .timeout = 30)
{
    char dir[64], path[128];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad", dir);
    write_file(path, "PK\x03\x04 not npy at all", 20);
    expect_rejected(dir, "--input %s", "not a .npy file");
    write_npy_raw(path, 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    expect_rejected(dir, "--input %s", "version 4.0");
    int32_t len[2] = {7, 9}; /* 9 > seq 7 */
    write_npy_raw(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 0);
    FILE *f = fopen(path, "ab");
    fwrite(len, sizeof len, 1, f);
    fclose(f);
    expect_rejected(dir, "--input " D "x.npy --lengths %s", "outside 0..7");
    tmpdir_remove(dir);
}

Test(formats, npy_round_trip_and_header_parse)
{
    char dir[64], path[128], err[256];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.npy", dir);
    float data[6] = {1, -2, 3.5f, 0, 1e-30f, -1e30f};
    int64_t shape[2] = {2, 3}, got[2];
    cr_assert_eq(mha_npy_save_f32(path, data, 2, shape, err, sizeof err), MHA_OK, "%s", err);
    mha_npy_header h;
    cr_assert_eq(mha_npy_open(path, &h, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(h.data_offset % 64, 0, "header padded to 64 bytes");
    float *back = read_npy(path, 2, got);
    cr_assert(got[0] == 2 && got[1] == 3 && !memcmp(back, data, sizeof data));
    free(back);
    /* numpy's spellings: 1-tuples, no trailing comma, double quotes, empty shape */
    const char *ok[] = {"{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
                        "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (2, 3)}",
                        "{'shape': (), 'fortran_order': False, 'descr': '<f4'}"};
    size_t counts[] = {5, 6, 1};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(mha_npy_parse_dict(ok[i], strlen(ok[i]), &h, err, sizeof err), MHA_OK, "%s: %s", ok[i], err);
        cr_assert_eq(h.count, counts[i]);
    }
    const char *dup = "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}";
    cr_assert_eq(mha_npy_parse_dict(dup, strlen(dup), &h, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "twice"), "%s", err);
    tmpdir_remove(dir);
}

Test(formats, half_precision_conversions_are_exact)
{
    /* every one of the 65536 F16 values against the compiler-free definition */
    for (uint32_t h = 0; h < 65536; h++) {
        int e = (h >> 10) & 31, m = h & 1023, s = h >> 15;
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
        want = s ? -want : want;
        float got = mha_f16_float((mha_f16)h);
        if (isnan(want))
            cr_assert(isnan(got), "F16 %04x", h);
        else
            cr_assert_eq((double)got, want, "F16 %04x: %g, want %g", h, got, want);
    }
    cr_assert_eq(mha_bf16_float(0x3f80), 1.0f);
    cr_assert_eq(mha_bf16_float(0xc049), -3.140625f);
    cr_assert(isinf(mha_bf16_float(0x7f80)));
}

/* float -> F16 (an int8 cache's K parameters) rounds to nearest even: every finite F16 value
 * to itself; each midpoint between neighbours (ties to the even one) and the floats either
 * side of it to the nearer; past 65504 by half its step to inf; NaN to NaN. */
Test(formats, f16_rounding_is_nearest_even)
{
    int checked = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const double a = mha_f16_float((mha_f16)h), b = h + 1 < 0x7c00 ? mha_f16_float((mha_f16)(h + 1)) : 65536.0;
        const float mid = (float)((a + b) / 2); /* exact: a and b are 11-bit numbers */
        const float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        for (int s = 0; s < 2; s++) {
            const uint16_t sign = s ? 0x8000 : 0;
            const float k = s ? -1.0f : 1.0f;
            cr_assert_eq(mha_f16_round(k * (float)a), sign | h, "%a", k * a);
            cr_assert_eq(mha_f16_round(k * below), sign | h, "%a", (double)(k * below));
            cr_assert_eq(mha_f16_round(k * above), sign | (h + 1), "%a", (double)(k * above));
            cr_assert_eq(mha_f16_round(k * mid), sign | (h & 1 ? h + 1 : h), "tie %a", (double)(k * mid));
            checked++;
        }
    }
    cr_assert_eq(checked, 2 * 0x7c00);
    cr_assert_eq(mha_f16_round(65519.99f), 0x7bff);
    cr_assert_eq(mha_f16_round(-INFINITY), 0xfc00);
    cr_assert_eq(mha_f16_round(1e-9f), 0);
    cr_assert_eq(mha_f16_round(NAN) & 0x7e00, 0x7e00);
}

/* ---- the JSON scanner behind the safetensors header ---- */

Test(formats, json_scanner_decodes_escapes_and_bounds_integers)
{
    const char *text = "\"a\\u00e9\\ud83d\\ude00\\n\\/\\\"\"";
    mha_json j;
    mha_json_init(&j, text, strlen(text));
    size_t raw, len;
    cr_assert(mha_json_string_raw_len(&j, &raw));
    cr_assert_eq(raw, strlen(text) - 2);
    char out[64];
    cr_assert(mha_json_string(&j, out, raw + 1, &len), "%s", j.msg);
    cr_assert_str_eq(out, "a\xc3\xa9\xf0\x9f\x98\x80\n/\"");
    cr_assert_eq(len, strlen(out));
    cr_assert(mha_json_at_end(&j));

    static const struct { const char *text; int ok; uint64_t v; } ints[] = {
        {"0", 1, 0}, {"9223372036854775807", 1, 9223372036854775807ull}, {"9223372036854775808", 0, 0},
        {"-0", 0, 0}, {"1e3", 0, 0}, {"1.0", 0, 0}, {"01", 1, 0} /* "0", then "1" is left over */,
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        uint64_t v = 99;
        mha_json_init(&j, ints[i].text, strlen(ints[i].text));
        cr_assert_eq(mha_json_u64(&j, &v), ints[i].ok, "'%s': %s", ints[i].text, j.msg);
        if (ints[i].ok)
            cr_assert_eq(v, ints[i].v, "'%s'", ints[i].text);
    }
    mha_json_init(&j, "01", 2);
    uint64_t v;
    cr_assert(mha_json_u64(&j, &v) && !mha_json_at_end(&j), "a leading zero ends the number");
}

Test(formats, safetensors_names_are_decoded_and_extra_fields_skipped, .timeout = 30)
{
    char dir[64], path[128];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    write_safetensors_raw(path,
                          "{\"__metadata__\":{\"format\":\"pt\",\"format\":\"again\"},"
                          "\"in\\u005fproj\":{\"note\":{\"deep\":[1,2.5e3,true,null]},\"dtype\":\"F32\",\"shape\":[2],"
                          "\"data_offsets\":[0,8]}}  ",
                          8, 0);
    mha_st_file sf;
    char err[256];
    cr_assert_eq(mha_st_open(path, &sf, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(sf.n, 1);
    cr_assert(mha_st_find(&sf, "in_proj"), "the escaped name was not decoded");
    mha_st_close(&sf);
    tmpdir_remove(dir);
}
