/* safetensors.c — reading safetensors files. The header is walked by the strict JSON scanner
 * (json_scan.h: no tree, no allocation but the tensor table the caller keeps) and checked as
 * the reference reader checks it: length cap and within the file, one JSON object without
 * duplicate tensor names or fields, known dtypes, non-negative shapes whose byte sizes
 * (overflow-checked) match their offsets, offsets contiguous from 0 to the end of the file.
 * Tensors are then read one at a time, straight into the caller's buffer. */
#include "safetensors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bgemm.h" /* mha_f16_float, mha_bf16_float */
#include "json_scan.h"
#include "fileio.h"
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

static int by_offset(const void *a, const void *b)
{
    const mha_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

#define BAD(...) mha_errorf(err, err_len, MHA_ERR_FORMAT, __VA_ARGS__)

/* One entry of the header: name → {dtype, shape, data_offsets}; other fields are skipped. */
static mha_status parse_tensor(const char *path, const char *name, mha_json *j, mha_st_tensor *t, char *err, size_t err_len)
{
    if (mha_json_peek(j) != MHA_JSON_OBJECT) /* valid JSON of another kind, or no JSON at all */
        return mha_json_skip(j) ? BAD("%s: tensor '%s': not an object", path, name) : BAD("%s: header JSON, %s", path, j->msg);
    j->pos++;
    int seen_dtype = 0, seen_shape = 0, seen_off = 0, r;
    char field[32], dt[16];
    for (int first = 1; (r = mha_json_next(j, first, '}')) == 1; first = 0) {
        size_t raw;
        if (!mha_json_string_raw_len(j, &raw))
            return BAD("%s: header JSON, %s", path, j->msg);
        if (raw >= sizeof field) { /* not one of ours: skip it */
            if (!mha_json_skip(j) || !mha_json_expect(j, ':') || !mha_json_skip(j))
                return BAD("%s: header JSON, %s", path, j->msg);
            continue;
        }
        if (!mha_json_string(j, field, sizeof field, NULL) || !mha_json_expect(j, ':'))
            return BAD("%s: header JSON, %s", path, j->msg);
        int *seen = !strcmp(field, "dtype") ? &seen_dtype : !strcmp(field, "shape") ? &seen_shape
                  : !strcmp(field, "data_offsets") ? &seen_off : NULL;
        if (seen && (*seen)++)
            return BAD("%s: tensor '%s': duplicate field '%s'", path, name, field);
        if (seen == &seen_dtype) {
            size_t len;
            if (mha_json_peek(j) != MHA_JSON_STRING)
                return BAD("%s: tensor '%s': dtype is not a string", path, name);
            if (!mha_json_string_raw_len(j, &len))
                return BAD("%s: header JSON, %s", path, j->msg);
            if (len >= sizeof dt)
                return BAD("%s: tensor '%s': unknown dtype (a %zu-byte string)", path, name, len);
            if (!mha_json_string(j, dt, sizeof dt, NULL))
                return BAD("%s: header JSON, %s", path, j->msg);
            t->dtype = -1;
            for (int i = 0; i < N_DTYPES; i++)
                if (!strcmp(dt, dtypes[i].name))
                    t->dtype = i;
            if (t->dtype < 0)
                return BAD("%s: tensor '%s': unknown dtype '%s'", path, name, dt);
        } else if (seen == &seen_shape) {
            if (!mha_json_expect(j, '['))
                return BAD("%s: tensor '%s': shape is not a list", path, name);
            t->rank = 0;
            for (int f = 1; (r = mha_json_next(j, f, ']')) == 1; f = 0) {
                uint64_t dim;
                if (t->rank == MHA_ST_MAX_RANK)
                    return BAD("%s: tensor '%s': more than %d dimensions", path, name, MHA_ST_MAX_RANK);
                if (!mha_json_u64(j, &dim))
                    return BAD("%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, t->rank);
                t->shape[t->rank++] = (int64_t)dim;
            }
            if (r < 0)
                return BAD("%s: header JSON, %s", path, j->msg);
        } else if (seen == &seen_off) {
            int k = 0;
            uint64_t v[2];
            if (!mha_json_expect(j, '['))
                return BAD("%s: tensor '%s': data_offsets must be [begin, end]", path, name);
            for (int f = 1; (r = mha_json_next(j, f, ']')) == 1; f = 0)
                if (k == 2 || !mha_json_u64(j, &v[k++]))
                    return BAD("%s: tensor '%s': data_offsets must be [begin, end]", path, name);
            if (r < 0 || k != 2)
                return BAD("%s: tensor '%s': data_offsets must be [begin, end]", path, name);
            t->begin = v[0], t->end = v[1];
        } else if (!mha_json_skip(j)) {
            return BAD("%s: header JSON, %s", path, j->msg);
        }
    }
    if (r < 0)
        return BAD("%s: header JSON, %s", path, j->msg);
    if (!seen_dtype)
        return BAD("%s: tensor '%s': missing dtype", path, name);
    if (!seen_shape)
        return BAD("%s: tensor '%s': shape is not a list", path, name);
    if (!seen_off)
        return BAD("%s: tensor '%s': data_offsets must be [begin, end]", path, name);
    uint64_t bytes = dtypes[t->dtype].size;
    for (int i = 0; i < t->rank; i++)
        if (__builtin_mul_overflow(bytes, (uint64_t)t->shape[i], &bytes))
            return BAD("%s: tensor '%s': size overflows", path, name);
    if (t->end < t->begin || t->end - t->begin != bytes)
        return BAD("%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, its dtype and shape need %llu", path,
                   name, (unsigned long long)t->begin, (unsigned long long)t->end,
                   (unsigned long long)(t->end >= t->begin ? t->end - t->begin : 0), (unsigned long long)bytes);
    return MHA_OK;
}

/* __metadata__: an object of strings (its keys are not checked for duplicates). */
static mha_status parse_metadata(const char *path, mha_json *j, char *err, size_t err_len)
{
    if (mha_json_peek(j) != MHA_JSON_OBJECT)
        return BAD("%s: __metadata__ is not an object", path);
    j->pos++;
    int r;
    for (int first = 1; (r = mha_json_next(j, first, '}')) == 1; first = 0) {
        size_t key_at = j->pos;
        if (!mha_json_skip(j) || !mha_json_expect(j, ':'))
            return BAD("%s: header JSON, %s", path, j->msg);
        if (mha_json_peek(j) != MHA_JSON_STRING)
            return BAD("%s: __metadata__ entry at byte %zu is not a string", path, key_at);
        if (!mha_json_skip(j))
            return BAD("%s: header JSON, %s", path, j->msg);
    }
    return r == 0 ? MHA_OK : BAD("%s: header JSON, %s", path, j->msg);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const mha_st_tensor *)a)->name, ((const mha_st_tensor *)b)->name);
}

/* The header text → sf->t: every tensor, checked, names unique. */
static mha_status parse_header(const char *path, const char *text, size_t n, mha_st_file *sf, char *err, size_t err_len)
{
    mha_json j;
    mha_json_init(&j, text, n);
    if (mha_json_peek(&j) != MHA_JSON_OBJECT)
        return BAD("%s: header does not start with '{'", path);
    j.pos++;
    int r, cap = 0, metadata = 0;
    for (int first = 1; (r = mha_json_next(&j, first, '}')) == 1; first = 0) {
        size_t raw;
        if (!mha_json_string_raw_len(&j, &raw))
            return BAD("%s: header JSON, %s", path, j.msg);
        if (sf->n == cap) {
            int grow = cap ? 2 * cap : 16;
            mha_st_tensor *t = grow < (1 << 24) ? realloc(sf->t, (size_t)grow * sizeof *t) : NULL;
            if (!t)
                return grow < (1 << 24) ? mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path)
                                        : BAD("%s: more than %d tensors", path, 1 << 23);
            sf->t = t, cap = grow;
        }
        mha_st_tensor *t = &sf->t[sf->n];
        memset(t, 0, sizeof *t);
        if (!(t->name = malloc(raw + 1)))
            return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
        sf->n++; /* owned by sf from here: mha_st_close frees it */
        if (!mha_json_string(&j, t->name, raw + 1, NULL) || !mha_json_expect(&j, ':'))
            return BAD("%s: header JSON, %s", path, j.msg);
        mha_status st;
        if (!strcmp(t->name, "__metadata__")) {
            free(t->name);
            sf->n--;
            if (metadata++)
                return BAD("%s: duplicate key '__metadata__'", path);
            st = parse_metadata(path, &j, err, err_len);
        } else {
            st = parse_tensor(path, t->name, &j, t, err, err_len);
        }
        if (st != MHA_OK)
            return st;
    }
    if (r < 0)
        return BAD("%s: header JSON, %s", path, j.msg);
    if (!mha_json_at_end(&j))
        return BAD("%s: header JSON, byte %zu: text after the header object", path, j.pos);
    if (sf->n > 1) {
        qsort(sf->t, (size_t)sf->n, sizeof *sf->t, by_name);
        for (int i = 1; i < sf->n; i++)
            if (!strcmp(sf->t[i - 1].name, sf->t[i].name))
                return BAD("%s: duplicate tensor name '%s'", path, sf->t[i].name);
    }
    return MHA_OK;
}

mha_status mha_st_open(const char *path, mha_st_file *sf, char *err, size_t err_len)
{
    memset(sf, 0, sizeof *sf);
    FILE *f;
    mha_status st = mha_file_open_read(path, &f, err, err_len);
    if (st != MHA_OK)
        return st;
    char *text = NULL;
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
    if ((st = parse_header(path, text, (size_t)n, sf, err, err_len)) != MHA_OK)
        goto fail;
    /* the data section is exactly the tensors, back to back from offset 0 */
    if (sf->n > 1) /* qsort's pointer must not be NULL, even for no elements */
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
    free(text);
    return MHA_OK;
fail:
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
            dst[done + i] = t->dtype == DT_F16 ? mha_f16_float(chunk[i]) : mha_bf16_float(chunk[i]);
        done += k;
    }
    return MHA_OK;
}
