/* safetensors.c — reading safetensors files. The header is parsed by jansson and checked as
 * the reference reader checks it: length cap and within the file, a JSON object without
 * duplicate keys, known dtypes, non-negative shapes whose byte sizes (overflow-checked) match
 * their offsets, offsets contiguous from 0 to the end of the file. Tensors are then read one
 * at a time, straight into the caller's buffer. */
#include "safetensors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "status.h"

static const struct { const char *name; unsigned size; } dtypes[] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
    {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
};
enum { DT_F16 = 7, DT_BF16 = 8, DT_F32 = 11 };
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *mha_st_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < N_DTYPES ? dtypes[dtype].name : "?";
}

int mha_st_is_float(int dtype)
{
    return dtype == DT_F32 || dtype == DT_F16 || dtype == DT_BF16;
}

float mha_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0 && man == 0) {
        bits = sign;
    } else if (exp == 0) { /* subnormal: normalise */
        int e = 113;
        while (!(man & 0x400)) {
            man <<= 1;
            e--;
        }
        bits = sign | (uint32_t)e << 23 | (man & 0x3ff) << 13;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 112) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float mha_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int by_offset(const void *a, const void *b)
{
    const mha_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int read_u64(json_t *j, uint64_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(j);
    return 1;
}

/* One entry of the header: name → {dtype, shape, data_offsets}. */
static mha_status parse_tensor(const char *path, const char *name, json_t *v, mha_st_tensor *t, char *err, size_t err_len)
{
    if (!json_is_object(v))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': not an object", path, name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': missing dtype", path, name);
    t->dtype = -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (!strcmp(json_string_value(dt), dtypes[i].name))
            t->dtype = i;
    if (t->dtype < 0)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, name, json_string_value(dt));
    if (!json_is_array(shape))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': shape is not a list", path, name);
    if (json_array_size(shape) > MHA_ST_MAX_RANK)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': more than %d dimensions", path, name, MHA_ST_MAX_RANK);
    t->rank = (int)json_array_size(shape);
    uint64_t bytes = dtypes[t->dtype].size;
    for (int i = 0; i < t->rank; i++) {
        uint64_t dim;
        if (!read_u64(json_array_get(shape, (size_t)i), &dim))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        t->shape[i] = (int64_t)dim;
        if (__builtin_mul_overflow(bytes, dim, &bytes))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': size overflows", path, name);
    }
    if (!json_is_array(off) || json_array_size(off) != 2 || !read_u64(json_array_get(off, 0), &t->begin) ||
        !read_u64(json_array_get(off, 1), &t->end))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s': data_offsets must be [begin, end]", path, name);
    if (t->end < t->begin || t->end - t->begin != bytes)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, its dtype and shape need %llu",
                          path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)(t->end >= t->begin ? t->end - t->begin : 0), (unsigned long long)bytes);
    return MHA_OK;
}

mha_status mha_st_open(const char *path, mha_st_file *sf, char *err, size_t err_len)
{
    memset(sf, 0, sizeof *sf);
    FILE *f = fopen(path, "rb");
    if (!f)
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    mha_status st = MHA_OK;
    char *text = NULL;
    json_t *root = NULL;
    unsigned char len8[8];
    long size;
    uint64_t n = 0;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = mha_errorf(err, err_len, MHA_ERR_IO, "%s: not a seekable file", path);
        goto fail;
    }
    if (fread(len8, 1, 8, f) != 8) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: shorter than the 8-byte header length", path);
        goto fail;
    }
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n > MHA_ST_MAX_HEADER) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header length %llu is over the %u-byte cap", path,
                        (unsigned long long)n, MHA_ST_MAX_HEADER);
        goto fail;
    }
    if (8 + n > (uint64_t)size) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header length %llu runs past the end of the %ld-byte file",
                        path, (unsigned long long)n, size);
        goto fail;
    }
    text = malloc(n ? n : 1);
    if (!text) {
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for the header", path);
        goto fail;
    }
    if (fread(text, 1, n, f) != n) {
        st = mha_errorf(err, err_len, MHA_ERR_IO, "%s: read error", path);
        goto fail;
    }
    if (n == 0 || text[0] != '{') {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header does not start with '{'", path);
        goto fail;
    }
    json_error_t je;
    root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header JSON, line %d column %d: %s", path, je.line, je.column, je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto fail;
    }
    size_t count = json_object_size(root);
    sf->t = calloc(count ? count : 1, sizeof *sf->t);
    if (!sf->t) {
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: __metadata__ is not an object", path);
                goto fail;
            }
            json_object_foreach(v, mk, mv) if (!json_is_string(mv)) {
                st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: __metadata__ '%s' is not a string", path, mk);
                goto fail;
            }
            continue;
        }
        mha_st_tensor *t = &sf->t[sf->n];
        if ((st = parse_tensor(path, key, v, t, err, err_len)) != MHA_OK)
            goto fail;
        if (!(t->name = malloc(strlen(key) + 1))) {
            st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        strcpy(t->name, key);
        sf->n++;
    }
    /* the data section is exactly the tensors, back to back from offset 0 */
    qsort(sf->t, (size_t)sf->n, sizeof *sf->t, by_offset);
    uint64_t expect = 0, data_len = (uint64_t)size - 8 - n;
    for (int i = 0; i < sf->n; i++) {
        if (sf->t[i].begin != expect) {
            st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' starts at %llu, expected %llu: offsets %s",
                            path, sf->t[i].name, (unsigned long long)sf->t[i].begin, (unsigned long long)expect,
                            sf->t[i].begin < expect ? "overlap" : "leave a gap");
            goto fail;
        }
        expect = sf->t[i].end;
    }
    if (expect != data_len) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensors end at byte %llu of a %llu-byte data section",
                        path, (unsigned long long)expect, (unsigned long long)data_len);
        goto fail;
    }
    sf->f = f;
    sf->data_start = 8 + n;
    json_decref(root);
    free(text);
    return MHA_OK;
fail:
    json_decref(root);
    free(text);
    fclose(f);
    sf->f = NULL;
    mha_st_close(sf);
    return st;
}

void mha_st_close(mha_st_file *sf)
{
    if (!sf)
        return;
    if (sf->f)
        fclose(sf->f);
    for (int i = 0; i < sf->n; i++)
        free(sf->t[i].name);
    free(sf->t);
    memset(sf, 0, sizeof *sf);
}

const mha_st_tensor *mha_st_find(const mha_st_file *sf, const char *name)
{
    for (int i = 0; i < sf->n; i++)
        if (!strcmp(sf->t[i].name, name))
            return &sf->t[i];
    return NULL;
}

mha_status mha_st_read_f32(const mha_st_file *sf, const mha_st_tensor *t, float *dst, char *err, size_t err_len)
{
    if (!mha_st_is_float(t->dtype))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "tensor '%s': dtype %s does not convert to float32 (F32, F16, BF16)",
                          t->name, mha_st_dtype_name(t->dtype));
    size_t size = dtypes[t->dtype].size, count = (size_t)((t->end - t->begin) / size);
    if (fseek(sf->f, (long)(sf->data_start + t->begin), SEEK_SET) != 0)
        return mha_errorf(err, err_len, MHA_ERR_IO, "tensor '%s': cannot seek", t->name);
    if (t->dtype == DT_F32) {
        if (fread(dst, sizeof *dst, count, sf->f) != count)
            return mha_errorf(err, err_len, MHA_ERR_IO, "tensor '%s': read error", t->name);
        return MHA_OK;
    }
    uint16_t chunk[4096];
    for (size_t done = 0; done < count;) {
        size_t k = count - done < 4096 ? count - done : 4096;
        if (fread(chunk, sizeof *chunk, k, sf->f) != k)
            return mha_errorf(err, err_len, MHA_ERR_IO, "tensor '%s': read error", t->name);
        for (size_t i = 0; i < k; i++)
            dst[done + i] = t->dtype == DT_F16 ? mha_f16_to_f32(chunk[i]) : mha_bf16_to_f32(chunk[i]);
        done += k;
    }
    return MHA_OK;
}
