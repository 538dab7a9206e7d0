/* npy.c — reading and writing NumPy .npy files.
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 for 1.x, u32 for 2.x/3.x), then a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and ended by '\n', then the raw data. The dict is parsed strictly: exactly those
 * three keys, each once. Only little-endian f4 / i4 / i8 in C order is accepted. */
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "status.h"

#define MAX_HEADER (1u << 20)

/* ---- the header dictionary ---- */

typedef struct cursor { const char *p, *end; } cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes (none of the three keys or dtypes need them). */
static int read_string(cursor *c, char *out, size_t n)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return 0;
    char q = *c->p++;
    size_t k = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || k + 1 >= n)
            return 0;
        out[k++] = *c->p++;
    }
    if (c->p >= c->end)
        return 0;
    c->p++;
    out[k] = '\0';
    return 1;
}

static int read_word(cursor *c, const char *word)
{
    skip_ws(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, word, n)) {
        c->p += n;
        return 1;
    }
    return 0;
}

mha_status mha_npy_parse_dict(const char *text, size_t len, mha_npy_header *h, char *err, size_t err_len)
{
    cursor c = {text, text + len};
    int have_descr = 0, have_order = 0, have_shape = 0;
    memset(h, 0, sizeof *h);
    if (!eat(&c, '{'))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header is not a dictionary");
    for (;;) {
        if (eat(&c, '}'))
            break;
        char key[32], val[32];
        if (!read_string(&c, key, sizeof key) || !eat(&c, ':'))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: expected 'key': value");
        if (!strcmp(key, "descr")) {
            if (have_descr++)
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: 'descr' appears twice");
            if (!read_string(&c, val, sizeof val))
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "dtype: structured dtypes are not supported (want '<f4')");
            if (!strcmp(val, "<f4"))
                h->dtype = MHA_NPY_F4;
            else if (!strcmp(val, "<i4"))
                h->dtype = MHA_NPY_I4;
            else if (!strcmp(val, "<i8"))
                h->dtype = MHA_NPY_I8;
            else if (val[0] == '|' && val[1] == 'O')
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "dtype '%s': object arrays are not supported", val);
            else if (val[0] == '>')
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "dtype '%s': big-endian data is not supported", val);
            else
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "dtype '%s' is not supported (want '<f4', '<i4' or '<i8')", val);
        } else if (!strcmp(key, "fortran_order")) {
            if (have_order++)
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: 'fortran_order' appears twice");
            if (read_word(&c, "True"))
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "Fortran-order arrays are not supported (save with C order)");
            if (!read_word(&c, "False"))
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: fortran_order must be True or False");
        } else if (!strcmp(key, "shape")) {
            if (have_shape++)
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: 'shape' appears twice");
            if (!eat(&c, '('))
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: shape must be a tuple");
            while (!eat(&c, ')')) {
                skip_ws(&c);
                int64_t v = 0;
                int digits = 0;
                while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
                    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c.p - '0', &v))
                        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "shape: dimension overflows");
                    c.p++, digits++;
                }
                if (!digits)
                    return mha_errorf(err, err_len, MHA_ERR_FORMAT, "shape: expected a non-negative integer");
                if (h->rank == MHA_NPY_MAX_RANK)
                    return mha_errorf(err, err_len, MHA_ERR_FORMAT, "shape: more than %d dimensions", MHA_NPY_MAX_RANK);
                h->shape[h->rank++] = v;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')'))
                        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "shape: expected ',' or ')'");
                    break;
                }
            }
        } else {
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: unexpected key '%s'", key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}'))
                return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: expected ',' or '}'");
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: missing '%s'",
                          !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    skip_ws(&c);
    if (c.p != c.end)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "header: text after the dictionary");
    size_t count = 1;
    for (int i = 0; i < h->rank; i++)
        if ((uint64_t)h->shape[i] > SIZE_MAX || __builtin_mul_overflow(count, (size_t)h->shape[i], &count))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "shape: element count overflows");
    h->count = count;
    return MHA_OK;
}

static size_t item_size(mha_npy_dtype t)
{
    return t == MHA_NPY_I8 ? 8 : 4;
}

/* ---- files ---- */

static mha_status open_header(const char *path, FILE **out, mha_npy_header *h, char *err, size_t err_len)
{
    FILE *f;
    mha_status opened = mha_file_open_read(path, &f, err, err_len);
    if (opened != MHA_OK)
        return opened;
    unsigned char pre[12];
    char *text = NULL;
    mha_status st = MHA_OK;
    size_t got = fread(pre, 1, 10, f);
    if (got < 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: not a .npy file (bad magic or too short)", path);
        goto done;
    }
    int major = pre[6], minor = pre[7];
    size_t hlen, prefix;
    if (major == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        prefix = 10;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: truncated header", path);
            goto done;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        prefix = 12;
    } else {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: .npy version %d.%d is not supported (1.0–3.0)", path, major, minor);
        goto done;
    }
    if (minor != 0) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: .npy version %d.%d is not supported (1.0–3.0)", path, major, minor);
        goto done;
    }
    if (hlen > MAX_HEADER) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header length %zu is over %u bytes", path, hlen, MAX_HEADER);
        goto done;
    }
    text = malloc(hlen + 1);
    if (!text) {
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (fread(text, 1, hlen, f) != hlen) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: header length %zu runs past the end of the file", path, hlen);
        goto done;
    }
    char why[200];
    if ((st = mha_npy_parse_dict(text, hlen, h, why, sizeof why)) != MHA_OK) {
        mha_errorf(err, err_len, st, "%s: %s", path, why);
        goto done;
    }
    h->data_offset = prefix + hlen;
    /* the data: exactly count items, no more, no less */
    size_t bytes;
    long end;
    if (__builtin_mul_overflow(h->count, item_size(h->dtype), &bytes) || fseek(f, 0, SEEK_END) != 0 ||
        (end = ftell(f)) < 0) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: data size overflows or file is not seekable", path);
        goto done;
    }
    if ((size_t)end != h->data_offset + bytes) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: holds %ld bytes of data, the header announces %zu",
                        path, end - (long)h->data_offset, bytes);
        goto done;
    }
    if (fseek(f, (long)h->data_offset, SEEK_SET) != 0)
        st = mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot seek", path);
done:
    free(text);
    if (st != MHA_OK || !out)
        fclose(f);
    else
        *out = f;
    return st;
}

MHA_API mha_status mha_npy_open(const char *path, mha_npy_header *h, char *err, size_t err_len)
{
    return open_header(path, NULL, h, err, err_len);
}

static mha_status load(const char *path, mha_npy_header *h, void **data, char *err, size_t err_len)
{
    FILE *f;
    mha_status st = open_header(path, &f, h, err, err_len);
    if (st != MHA_OK)
        return st;
    size_t bytes = h->count * item_size(h->dtype);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for %zu bytes", path, bytes);
    else if (fread(buf, 1, bytes, f) != bytes)
        st = mha_errorf(err, err_len, MHA_ERR_IO, "%s: read error", path);
    fclose(f);
    if (st != MHA_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    return MHA_OK;
}

MHA_API mha_status mha_npy_load_f32(const char *path, int rank, int64_t *shape, float **data, char *err, size_t err_len)
{
    mha_npy_header h;
    void *buf;
    mha_status st = load(path, &h, &buf, err, err_len);
    if (st != MHA_OK)
        return st;
    char s[128];
    mha_shape_text(h.shape, h.rank, s, sizeof s);
    if (h.dtype != MHA_NPY_F4)
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: dtype %s, want float32 ('<f4')", path,
                        h.dtype == MHA_NPY_I4 ? "int32" : "int64");
    else if (h.rank != rank)
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: shape %s has rank %d, want rank %d", path, s, h.rank, rank);
    if (st != MHA_OK) {
        free(buf);
        return st;
    }
    memcpy(shape, h.shape, (size_t)rank * sizeof *shape);
    *data = buf;
    return MHA_OK;
}

MHA_API mha_status mha_npy_load_lengths(const char *path, int64_t *n, int32_t **data, int32_t max, char *err, size_t err_len)
{
    mha_npy_header h;
    void *buf;
    mha_status st = load(path, &h, &buf, err, err_len);
    if (st != MHA_OK)
        return st;
    char s[128];
    mha_shape_text(h.shape, h.rank, s, sizeof s);
    if (h.dtype == MHA_NPY_F4)
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: dtype float32, want int32 or int64 lengths", path);
    else if (h.rank != 1)
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: shape %s, want a vector (batch,)", path, s);
    int32_t *out = st == MHA_OK ? malloc((h.count ? h.count : 1) * sizeof *out) : NULL;
    if (st == MHA_OK && !out)
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; st == MHA_OK && i < h.count; i++) {
        int64_t v;
        if (h.dtype == MHA_NPY_I8)
            memcpy(&v, (char *)buf + 8 * i, 8);
        else {
            int32_t v32;
            memcpy(&v32, (char *)buf + 4 * i, 4);
            v = v32;
        }
        if (v < 0 || v > max)
            st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: length [%zu] = %lld is outside 0..%d", path, i,
                            (long long)v, (int)max);
        else
            out[i] = (int32_t)v;
    }
    free(buf);
    if (st != MHA_OK) {
        free(out);
        return st;
    }
    *n = h.shape[0];
    *data = out;
    return MHA_OK;
}

MHA_API size_t mha_npy_format_header(const char *descr, int rank, const int64_t *shape, unsigned char *out, size_t cap)
{
    char dict[256], s[200] = "";
    size_t k = 0;
    for (int i = 0; i < rank && k < sizeof s; i++)
        k += (size_t)snprintf(s + k, sizeof s - k, "%lld,%s", (long long)shape[i], i + 1 < rank ? " " : "");
    if (k >= sizeof s)
        return 0;
    if (rank > 1) /* Python writes (2, 3) but (2,) */
        s[strlen(s) - 1] = '\0';
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, s);
    if (n < 0 || (size_t)n >= sizeof dict)
        return 0;
    /* pad with spaces so that magic + header is a multiple of 64, ending in '\n' */
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64, hlen = total - 10;
    if (total > cap)
        return 0;
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    memcpy(out, pre, 10);
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', total - 10 - (size_t)n - 1);
    out[total - 1] = '\n';
    return total;
}

MHA_API mha_status mha_npy_save_f32(const char *path, const float *data, int rank, const int64_t *shape, char *err, size_t err_len)
{
    size_t count = 1;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(count, (size_t)shape[i], &count))
            return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "%s: shape overflows", path);
    unsigned char header[MHA_NPY_MAX_HEADER];
    size_t hlen = mha_npy_format_header("<f4", rank, shape, header, sizeof header);
    if (!hlen)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "%s: shape too long for a header", path);

    size_t bytes;
    if (__builtin_mul_overflow(count, sizeof *data, &bytes))
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "%s: shape overflows", path);
    return mha_file_write(path, header, hlen, data, bytes, err, err_len);
}
