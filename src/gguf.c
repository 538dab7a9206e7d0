/* gguf.c — reading GGUF files (mha_io.h; docs/gguf.md; the spec: ggml's docs/gguf.md, its
 * reader: ggml/src/gguf.cpp). The file is mapped read-only and walked twice by one function,
 * parse(): the first walk checks every byte it reads and counts what the tables need (entries,
 * tensors, string-array elements, name bytes), one block is allocated for them all, and the
 * second walk fills it — size first, then point, so the two cannot disagree, and nothing is
 * allocated for a count the file states before the bytes it describes were walked. Lookups
 * bsearch tables sorted by name; getters read the values from the mapping. */
#include "gguf.h"

#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "status.h"

/* ggml's type traits (ggml/src/ggml.c type_traits[]; block structs in ggml-common.h): elements
 * and bytes per block, and what mha does with the type as a projection's weight. */
#define NO MHA_GGML_UNSUPPORTED
#define YES MHA_GGML_SUPPORTED
static const mha_ggml_type_info ggml_types[MHA_GGML_TYPE_COUNT] = {
    [MHA_GGML_F32] = {"F32", 1, 4, YES},
    [MHA_GGML_F16] = {"F16", 1, 2, YES},
    [MHA_GGML_Q4_0] = {"Q4_0", 32, 18, YES},       /* d (f16), 16 bytes of nibbles */
    [MHA_GGML_Q4_1] = {"Q4_1", 32, 20, YES},       /* d, m (f16), 16 */
    [MHA_GGML_Q5_0] = {"Q5_0", 32, 22, YES},       /* d, qh[4], 16 */
    [MHA_GGML_Q5_1] = {"Q5_1", 32, 24, YES},       /* d, m, qh[4], 16 */
    [MHA_GGML_Q8_0] = {"Q8_0", 32, 34, YES},       /* d, 32 int8 */
    [MHA_GGML_Q8_1] = {"Q8_1", 32, 36, NO},        /* d, s, 32 int8 */
    [MHA_GGML_Q2_K] = {"Q2_K", 256, 84, NO},
    [MHA_GGML_Q3_K] = {"Q3_K", 256, 110, NO},
    [MHA_GGML_Q4_K] = {"Q4_K", 256, 144, YES},     /* d, dmin, scales[12], qs[128] */
    [MHA_GGML_Q5_K] = {"Q5_K", 256, 176, YES},     /* d, dmin, scales[12], qh[32], qs[128] */
    [MHA_GGML_Q6_K] = {"Q6_K", 256, 210, YES},     /* ql[128], qh[64], scales[16], d */
    [MHA_GGML_Q8_K] = {"Q8_K", 256, 292, NO},
    [MHA_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66, NO},
    [MHA_GGML_IQ2_XS] = {"IQ2_XS", 256, 74, NO},
    [MHA_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98, NO},
    [MHA_GGML_IQ1_S] = {"IQ1_S", 256, 50, NO},
    [MHA_GGML_IQ4_NL] = {"IQ4_NL", 32, 18, NO},
    [MHA_GGML_IQ3_S] = {"IQ3_S", 256, 110, NO},
    [MHA_GGML_IQ2_S] = {"IQ2_S", 256, 82, NO},
    [MHA_GGML_IQ4_XS] = {"IQ4_XS", 256, 136, NO},
    [MHA_GGML_I8] = {"I8", 1, 1, NO},
    [MHA_GGML_I16] = {"I16", 1, 2, NO},
    [MHA_GGML_I32] = {"I32", 1, 4, NO},
    [MHA_GGML_I64] = {"I64", 1, 8, NO},
    [MHA_GGML_F64] = {"F64", 1, 8, NO},
    [MHA_GGML_IQ1_M] = {"IQ1_M", 256, 56, NO},
    [MHA_GGML_BF16] = {"BF16", 1, 2, YES},
    [MHA_GGML_TQ1_0] = {"TQ1_0", 256, 54, NO},
    [MHA_GGML_TQ2_0] = {"TQ2_0", 256, 66, NO},
    [MHA_GGML_MXFP4] = {"MXFP4", 32, 17, NO},      /* e (E8M0), 16 bytes of E2M1 pairs */
    [MHA_GGML_NVFP4] = {"NVFP4", 64, 36, NO},      /* 4 UE4M3 scales, 32 bytes of E2M1 pairs */
    [MHA_GGML_Q1_0] = {"Q1_0", 128, 18, NO},
    [MHA_GGML_Q2_0] = {"Q2_0", 64, 18, NO},
};

MHA_API const mha_ggml_type_info *mha_ggml_type_get(int type)
{
    return type >= 0 && type < MHA_GGML_TYPE_COUNT && ggml_types[type].name ? &ggml_types[type] : NULL;
}

MHA_API const char *mha_ggml_type_name(int type)
{
    switch (type) { /* the numbers ggml removed (ggml.h) */
    case 4: return "Q4_2 (removed)";
    case 5: return "Q4_3 (removed)";
    case 31: return "Q4_0_4_4 (removed)";
    case 32: return "Q4_0_4_8 (removed)";
    case 33: return "Q4_0_8_8 (removed)";
    case 36: return "IQ4_NL_4_4 (removed)";
    case 37: return "IQ4_NL_4_8 (removed)";
    case 38: return "IQ4_NL_8_8 (removed)";
    default: return mha_ggml_type_get(type) ? ggml_types[type].name : "?";
    }
}

static const char *const type_names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                         "bool", "string", "array", "uint64", "int64", "float64"};
#define N_TYPES 13

MHA_API const char *mha_gguf_type_name(mha_gguf_type t)
{
    return (unsigned)t < N_TYPES ? type_names[t] : "?";
}

/* Bytes of one value of a fixed-size type; 0 for string, array and unknown types. */
static unsigned scalar_size(uint32_t t)
{
    static const unsigned size[N_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < N_TYPES ? size[t] : 0;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- the walk over the header ---- */

#define KEY_MAX 65535u  /* the spec's longest key */
#define NAME_MAX_ 64    /* the spec's longest tensor name */
#define SHOWN 80        /* bytes of a key or name a message shows */

typedef struct walk {
    const char *path;
    const uint8_t *p;          /* the mapping (NULL for an empty file: nothing is read then) */
    uint64_t size, pos;
    char where[SHOWN + 48];    /* what is being read: "key 'general.name'", "tensor 3 at byte 812" */
    char *err;
    size_t err_len;
} walk;

/* What the walk counts, and in the filling walk where it writes. */
typedef struct tables {
    mha_gguf_entry *kv;
    mha_gguf_tensor *t;
    uint64_t *str;             /* string arrays' element offsets */
    char *names;               /* keys and tensor names, NUL-terminated */
} tables;
typedef struct counts {
    int64_t n_kv, n_tensors;
    uint64_t n_str, name_bytes, data_offset, data_bytes;
    uint32_t version, alignment;
    uint64_t expect;               /* where the next tensor's data must start (data-relative) */
    uint64_t last_end;             /* where the last one's ends */
    char last_name[NAME_MAX_ + 1];
} counts;

#define BAD(w, ...) mha_errorf((w)->err, (w)->err_len, MHA_ERR_FORMAT, __VA_ARGS__)

static uint64_t left(const walk *w)
{
    return w->size - w->pos;
}

/* n more bytes for what, or the message that the file ends first. */
static mha_status need(walk *w, uint64_t n, const char *what)
{
    if (n <= left(w))
        return MHA_OK;
    return BAD(w, "%s: %s: %s at byte %llu needs %llu bytes, but the file ends at byte %llu", w->path, w->where, what,
               (unsigned long long)w->pos, (unsigned long long)n, (unsigned long long)w->size);
}

static mha_status read_u32(walk *w, const char *what, uint32_t *v)
{
    mha_status st = need(w, 4, what);
    if (st == MHA_OK)
        *v = (uint32_t)le(w->p + w->pos, 4), w->pos += 4;
    return st;
}

static mha_status read_u64(walk *w, const char *what, uint64_t *v)
{
    mha_status st = need(w, 8, what);
    if (st == MHA_OK)
        *v = le(w->p + w->pos, 8), w->pos += 8;
    return st;
}

/* A GGUF string (uint64 length, then the bytes) of at most max bytes, what naming it. */
static mha_status read_str(walk *w, const char *what, uint64_t max, const uint8_t **s, uint64_t *len)
{
    const uint64_t at = w->pos;
    mha_status st = read_u64(w, what, len);
    if (st != MHA_OK)
        return st;
    if (*len > max)
        return BAD(w, "%s: %s: %s at byte %llu is %llu bytes long, over the spec's %llu", w->path, w->where, what,
                   (unsigned long long)at, (unsigned long long)*len, (unsigned long long)max);
    if (*len > left(w))
        return BAD(w, "%s: %s: %s at byte %llu is %llu bytes long and runs past the end of the %llu-byte file", w->path,
                   w->where, what, (unsigned long long)at, (unsigned long long)*len, (unsigned long long)w->size);
    *s = w->p + w->pos;
    w->pos += *len;
    return MHA_OK;
}

/* Key or tensor i's name (what: "key", "tensor") of 1 to max bytes, no NUL byte (the tables keep
 * C strings); messages then name it: w->where becomes "key 'general.name'". */
static mha_status read_name(walk *w, const char *what, int64_t i, uint64_t max, const uint8_t **s, uint64_t *len)
{
    snprintf(w->where, sizeof w->where, "%s %lld at byte %llu", what, (long long)i, (unsigned long long)w->pos);
    mha_status st = read_str(w, strcmp(what, "key") ? "its name" : "its length", max, s, len);
    if (st != MHA_OK)
        return st;
    if (*len == 0)
        return BAD(w, "%s: %s %lld is empty", w->path, what, (long long)i);
    if (memchr(*s, 0, *len))
        return BAD(w, "%s: %s %lld ('%.*s…') holds a NUL byte", w->path, what, (long long)i, SHOWN, (const char *)*s);
    snprintf(w->where, sizeof w->where, "%s '%.*s%s'", what, (int)(*len < SHOWN ? *len : SHOWN), (const char *)*s,
             *len > SHOWN ? "…" : "");
    return MHA_OK;
}

/* A metadata value of type type (elem and n for an array), its first byte at w->pos. The
 * filling walk records string arrays' element offsets from out->str[c->n_str] on. */
static mha_status walk_value(walk *w, uint32_t type, uint32_t elem, uint64_t n, const tables *out, counts *c)
{
    if (elem == MHA_GGUF_STRING) {
        if (n > left(w) / 8) /* each string takes 8 bytes at least */
            return BAD(w, "%s: %s: %llu strings cannot fit in the %llu bytes left after byte %llu", w->path, w->where,
                       (unsigned long long)n, (unsigned long long)left(w), (unsigned long long)w->pos);
        for (uint64_t j = 0; j < n; j++) {
            const uint8_t *s;
            uint64_t len;
            char what[48];
            if (type == MHA_GGUF_ARRAY) {
                if (out)
                    out->str[c->n_str] = w->pos;
                c->n_str++;
            }
            snprintf(what, sizeof what, type == MHA_GGUF_ARRAY ? "string %llu" : "the string", (unsigned long long)j);
            mha_status st = read_str(w, what, UINT64_MAX, &s, &len);
            if (st != MHA_OK)
                return st;
        }
        return MHA_OK;
    }
    const unsigned size = scalar_size(elem);
    if (n > left(w) / size)
        return BAD(w, "%s: %s: %llu %s value%s (%u bytes each) at byte %llu run past the end of the %llu-byte file",
                   w->path, w->where, (unsigned long long)n, type_names[elem], n == 1 ? "" : "s", size,
                   (unsigned long long)w->pos, (unsigned long long)w->size);
    if (elem == MHA_GGUF_BOOL) /* the spec: 0 or 1, anything else an invalid file */
        for (uint64_t j = 0; j < n; j++)
            if (w->p[w->pos + j] > 1)
                return BAD(w, "%s: %s: bool value %u at byte %llu is neither 0 nor 1", w->path, w->where,
                           w->p[w->pos + j], (unsigned long long)(w->pos + j));
    w->pos += n * size;
    return MHA_OK;
}

static mha_status walk_header(walk *w, counts *c)
{
    snprintf(w->where, sizeof w->where, "header");
    if (w->size < 4)
        return BAD(w, "%s: %llu bytes: too short for GGUF's 4-byte magic", w->path, (unsigned long long)w->size);
    if (memcmp(w->p, "GGUF", 4)) {
        char shown[20];
        int printable = 1;
        for (int i = 0; i < 4; i++)
            printable &= w->p[i] >= 0x20 && w->p[i] < 0x7f;
        if (printable)
            snprintf(shown, sizeof shown, "'%.4s'", (const char *)w->p);
        else
            snprintf(shown, sizeof shown, "%02x %02x %02x %02x", w->p[0], w->p[1], w->p[2], w->p[3]);
        return BAD(w, "%s: not a GGUF file: it starts with %s, not 'GGUF'", w->path, shown);
    }
    w->pos = 4;
    uint64_t n_tensors, n_kv;
    mha_status st = read_u32(w, "the version", &c->version);
    if (st != MHA_OK)
        return st;
    if (c->version == 1)
        return BAD(w, "%s: GGUF version 1 is not supported (versions 2 and 3 are: v1 counted in 32 bits; convert the "
                   "model again with a current llama.cpp)", w->path);
    if (c->version && (c->version & 0xffff) == 0)
        return BAD(w, "%s: GGUF version 0x%08x is a byte-swapped one: a big-endian file (mha reads little-endian "
                   "GGUF only)", w->path, c->version);
    if (c->version != 2 && c->version != 3)
        return BAD(w, "%s: GGUF version %u is not supported (versions 2 and 3 are)", w->path, c->version);
    if ((st = read_u64(w, "the tensor count", &n_tensors)) != MHA_OK || (st = read_u64(w, "the metadata count", &n_kv)))
        return st;
    /* each entry takes 13 bytes at least (a key's length and byte, its type, a byte), each tensor
     * info 24 (name length and byte, n_dims, type, offset) */
    if (n_kv > left(w) / 13)
        return BAD(w, "%s: header: %llu metadata entries cannot fit in the %llu bytes after the header", w->path,
                   (unsigned long long)n_kv, (unsigned long long)left(w));
    if (n_tensors > left(w) / 24)
        return BAD(w, "%s: header: %llu tensors cannot fit in the %llu bytes after the header", w->path,
                   (unsigned long long)n_tensors, (unsigned long long)left(w));
    c->n_kv = (int64_t)n_kv, c->n_tensors = (int64_t)n_tensors;
    return MHA_OK;
}

static mha_status walk_kv(walk *w, int64_t i, const tables *out, counts *c)
{
    const uint8_t *k;
    uint64_t klen;
    mha_status st = read_name(w, "key", i, KEY_MAX, &k, &klen);
    if (st != MHA_OK)
        return st;
    uint32_t type, elem;
    uint64_t n = 1;
    if ((st = read_u32(w, "its value type", &type)) != MHA_OK)
        return st;
    if (type >= N_TYPES)
        return BAD(w, "%s: %s: unknown value type %u", w->path, w->where, type);
    elem = type;
    if (type == MHA_GGUF_ARRAY) {
        if ((st = read_u32(w, "the array's element type", &elem)) != MHA_OK)
            return st;
        if (elem == MHA_GGUF_ARRAY)
            return BAD(w, "%s: %s: an array of arrays (mha reads arrays of numbers, bools and strings)", w->path,
                       w->where);
        if (elem >= N_TYPES)
            return BAD(w, "%s: %s: unknown array element type %u", w->path, w->where, elem);
        if ((st = read_u64(w, "the array's length", &n)) != MHA_OK)
            return st;
    }
    const uint64_t val = w->pos, str0 = c->n_str;
    if ((st = walk_value(w, type, elem, n, out, c)) != MHA_OK)
        return st;
    if (klen == strlen("general.alignment") && !memcmp(k, "general.alignment", klen)) {
        if (type != MHA_GGUF_UINT32) /* as ggml's reader requires */
            return BAD(w, "%s: key 'general.alignment': expected uint32, found %s%s", w->path,
                       type == MHA_GGUF_ARRAY ? "array of " : "", type_names[elem]);
        c->alignment = (uint32_t)le(w->p + val, 4);
        if (c->alignment == 0 || (c->alignment & (c->alignment - 1)))
            return BAD(w, "%s: key 'general.alignment': %u is not a power of two", w->path, c->alignment);
    }
    if (out) {
        char *name = out->names + c->name_bytes;
        memcpy(name, k, klen);
        name[klen] = '\0';
        out->kv[i] = (mha_gguf_entry){.pub = {name, (mha_gguf_type)type, (mha_gguf_type)elem, n}, .val = w->p + val,
                                      .str = type == MHA_GGUF_ARRAY && elem == MHA_GGUF_STRING ? out->str + str0 : NULL};
    }
    c->name_bytes += klen + 1;
    return MHA_OK;
}

static mha_status walk_tensor_info(walk *w, int64_t i, const tables *out, counts *c)
{
    const uint8_t *s;
    uint64_t len;
    mha_status st = read_name(w, "tensor", i, NAME_MAX_, &s, &len);
    if (st != MHA_OK)
        return st;
    char name[NAME_MAX_ + 1];
    memcpy(name, s, len);
    name[len] = '\0';
    uint32_t n_dims, type;
    if ((st = read_u32(w, "its number of dimensions", &n_dims)) != MHA_OK)
        return st;
    if (n_dims > MHA_GGUF_MAX_DIMS)
        return BAD(w, "%s: tensor '%s': %u dimensions (at most %d)", w->path, name, n_dims, MHA_GGUF_MAX_DIMS);
    int64_t ne[MHA_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t elements = 1;
    int overflow = 0;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        if ((st = read_u64(w, "a dimension", &v)) != MHA_OK)
            return st;
        if (v > INT64_MAX)
            return BAD(w, "%s: tensor '%s': dimension %u is %llu, over 2^63 - 1", w->path, name, d, (unsigned long long)v);
        ne[d] = (int64_t)v;
        overflow |= __builtin_mul_overflow(elements, v, &elements);
    }
    if (overflow || elements > INT64_MAX)
        return BAD(w, "%s: tensor '%s': dims %lld x %lld x %lld x %lld hold more than 2^63 - 1 elements", w->path, name,
                   (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
    if ((st = read_u32(w, "its type", &type)) != MHA_OK)
        return st;
    const mha_ggml_type_info *ti = mha_ggml_type_get((int)type);
    if (!ti) {
        const char *nm = mha_ggml_type_name((int)type);
        return strcmp(nm, "?") ? BAD(w, "%s: tensor '%s': ggml type %u is %s: GGUF files hold it no more", w->path,
                                     name, type, nm)
                               : BAD(w, "%s: tensor '%s': unknown ggml type %u", w->path, name, type);
    }
    if (ne[0] % ti->block)
        return BAD(w, "%s: tensor '%s': a row of %lld elements is not a whole number of %s blocks of %d", w->path,
                   name, (long long)ne[0], ti->name, ti->block);
    uint64_t bytes;
    if (__builtin_mul_overflow(elements / (uint64_t)ti->block, (uint64_t)ti->block_bytes, &bytes))
        return BAD(w, "%s: tensor '%s': %llu elements of %s take more than 2^64 bytes", w->path, name,
                   (unsigned long long)elements, ti->name);
    uint64_t offset;
    if ((st = read_u64(w, "its offset", &offset)) != MHA_OK)
        return st;
    if (offset % c->alignment)
        return BAD(w, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u", w->path, name,
                   (unsigned long long)offset, c->alignment);
    if (offset != c->expect)
        return BAD(w, "%s: tensor '%s': data at offset %llu, expected %llu: the tensors' data %s", w->path, name,
                   (unsigned long long)offset, (unsigned long long)c->expect,
                   offset < c->expect ? "overlap" : "leave a gap (ggml's layout: back to back in table order, each aligned)");
    /* the data must fit in the file (walk_data): until then, sizes past it are refused here */
    if (bytes > w->size || offset > w->size - bytes)
        return BAD(w, "%s: tensor '%s': %llu bytes at offset %llu run past the end of the %llu-byte file", w->path, name,
                   (unsigned long long)bytes, (unsigned long long)offset, (unsigned long long)w->size);
    c->last_end = offset + bytes;
    c->expect = c->last_end + (c->alignment - c->last_end % c->alignment) % c->alignment;
    c->data_bytes += bytes;
    memcpy(c->last_name, name, len + 1);
    if (out) {
        mha_gguf_tensor *t = &out->t[i];
        char *copy = out->names + c->name_bytes;
        memcpy(copy, name, len + 1);
        *t = (mha_gguf_tensor){.name = copy, .type = (int)type, .n_dims = (int)n_dims, .offset = offset,
                               .bytes = bytes};
        memcpy(t->ne, ne, sizeof ne);
    }
    c->name_bytes += len + 1;
    return MHA_OK;
}

/* The data section starts at the first multiple of the alignment after the tensor infos; the
 * tensors lie back to back in table order, each padded to the alignment (ggml's layout, which
 * its reader requires and walk_tensor_info checks), so the last one ends the data. The filling
 * walk turns offsets into the file's and points each tensor at its bytes. */
static mha_status walk_data(walk *w, const tables *out, counts *c)
{
    const uint64_t a = c->alignment;
    c->data_offset = w->pos + (a - w->pos % a) % a; /* pos <= size < 2^63: no overflow */
    if (c->n_tensors == 0) /* a metadata-only file may end right after its header */
        return MHA_OK;
    if (c->data_offset > w->size || c->last_end > w->size - c->data_offset)
        return BAD(w, "%s: tensor '%s' (the last): its data ends at byte %llu, past the end of the %llu-byte file",
                   w->path, c->last_name, (unsigned long long)(c->data_offset + c->last_end),
                   (unsigned long long)w->size);
    for (int64_t i = 0; out && i < c->n_tensors; i++) {
        out->t[i].offset += c->data_offset;
        out->t[i].data = w->p + out->t[i].offset;
    }
    return MHA_OK;
}

/* One walk of the whole header: checking (out NULL) or filling the tables. */
static mha_status parse(walk *w, const tables *out, counts *c)
{
    memset(c, 0, sizeof *c);
    c->alignment = 32; /* the spec's default */
    w->pos = 0;
    mha_status st = walk_header(w, c);
    for (int64_t i = 0; st == MHA_OK && i < c->n_kv; i++)
        st = walk_kv(w, i, out, c);
    for (int64_t i = 0; st == MHA_OK && i < c->n_tensors; i++)
        st = walk_tensor_info(w, i, out, c);
    return st == MHA_OK ? walk_data(w, out, c) : st;
}

/* ---- the handle ---- */

static int entry_by_key(const void *a, const void *b)
{
    return strcmp((*(const mha_gguf_entry *const *)a)->pub.key, (*(const mha_gguf_entry *const *)b)->pub.key);
}

static int tensor_by_name(const void *a, const void *b)
{
    return strcmp((*(const mha_gguf_tensor *const *)a)->name, (*(const mha_gguf_tensor *const *)b)->name);
}

/* The tables' block: its size from the checking walk's counts, then the pointers carved from it. */
static mha_status carve(mha_gguf *g, const counts *c, tables *out, const char *path, char *err, size_t err_len)
{
    const uint64_t nk = (uint64_t)c->n_kv, nt = (uint64_t)c->n_tensors;
    const uint64_t part[5] = {nk * sizeof(mha_gguf_entry), nk * sizeof(mha_gguf_entry *), nt * sizeof(mha_gguf_tensor),
                              nt * sizeof(mha_gguf_tensor *), c->n_str * sizeof(uint64_t)};
    uint64_t total = c->name_bytes; /* the counts are bounded by the file's bytes: no overflow, checked anyway */
    int overflow = 0;
    for (int i = 0; i < 5; i++)
        overflow |= __builtin_add_overflow(total, part[i], &total);
    char *b = overflow || total > SIZE_MAX ? NULL : malloc(total ? (size_t)total : 1);
    if (!b)
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for the tables (%llu bytes)", path,
                          (unsigned long long)total);
    g->block = b;
    out->kv = g->kv = (mha_gguf_entry *)b;
    g->kv_by_key = (const mha_gguf_entry **)(b + part[0]);
    out->t = g->t = (mha_gguf_tensor *)(b + part[0] + part[1]);
    g->t_by_name = (const mha_gguf_tensor **)(b + part[0] + part[1] + part[2]);
    out->str = (uint64_t *)(b + part[0] + part[1] + part[2] + part[3]);
    out->names = b + part[0] + part[1] + part[2] + part[3] + part[4];
    return MHA_OK;
}

/* Sorts the lookup tables and refuses a key or tensor name that appears twice. */
static mha_status index_names(mha_gguf *g, char *err, size_t err_len)
{
    const int64_t nk = g->info.n_kv, nt = g->info.n_tensors;
    for (int64_t i = 0; i < nk; i++)
        g->kv_by_key[i] = &g->kv[i];
    for (int64_t i = 0; i < nt; i++)
        g->t_by_name[i] = &g->t[i];
    if (nk > 1) /* qsort's pointer must not be NULL, even for no elements */
        qsort(g->kv_by_key, (size_t)nk, sizeof *g->kv_by_key, entry_by_key);
    if (nt > 1)
        qsort(g->t_by_name, (size_t)nt, sizeof *g->t_by_name, tensor_by_name);
    for (int64_t i = 1; i < nk; i++)
        if (!strcmp(g->kv_by_key[i - 1]->pub.key, g->kv_by_key[i]->pub.key)) {
            const int64_t a = g->kv_by_key[i - 1] - g->kv, b = g->kv_by_key[i] - g->kv;
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: duplicate key '%.*s' (entries %lld and %lld)",
                              g->info.path, SHOWN, g->kv_by_key[i]->pub.key, (long long)(a < b ? a : b),
                              (long long)(a < b ? b : a));
        }
    for (int64_t i = 1; i < nt; i++)
        if (!strcmp(g->t_by_name[i - 1]->name, g->t_by_name[i]->name)) {
            const int64_t a = g->t_by_name[i - 1] - g->t, b = g->t_by_name[i] - g->t;
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: duplicate tensor name '%s' (tensors %lld and %lld)",
                              g->info.path, g->t_by_name[i]->name, (long long)(a < b ? a : b),
                              (long long)(a < b ? b : a));
        }
    return MHA_OK;
}

MHA_API mha_status mha_gguf_open(const char *path, mha_gguf **out, char *err, size_t err_len)
{
    if (!out)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle output is NULL");
    *out = NULL;
    if (!path)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF path is NULL");
    const void *map;
    size_t size;
    mha_status st = mha_file_map_read(path, &map, &size, err, err_len);
    if (st != MHA_OK)
        return st;
    const size_t plen = strlen(path);
    mha_gguf *g = calloc(1, sizeof *g + plen + 1);
    if (!g) {
        mha_file_unmap(map, size);
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
    }
    char *name = (char *)(g + 1);
    memcpy(name, path, plen + 1);
    g->map = map;
    g->info.path = name;
    g->info.file_size = size;
    walk w = {.path = name, .p = map, .size = size, .err = err, .err_len = err_len};
    counts c;
    tables tb;
    if ((st = parse(&w, NULL, &c)) == MHA_OK && (st = carve(g, &c, &tb, name, err, err_len)) == MHA_OK &&
        (st = parse(&w, &tb, &c)) == MHA_OK) {
        g->info.version = c.version, g->info.alignment = c.alignment;
        g->info.data_offset = c.data_offset, g->info.data_bytes = c.data_bytes;
        g->info.n_kv = c.n_kv, g->info.n_tensors = c.n_tensors;
        st = index_names(g, err, err_len);
    }
    if (st != MHA_OK) {
        mha_gguf_close(g);
        return st;
    }
    *out = g;
    return MHA_OK;
}

MHA_API void mha_gguf_close(mha_gguf *g)
{
    if (!g)
        return;
    mha_file_unmap(g->map, (size_t)g->info.file_size);
    free(g->block);
    free(g);
}

MHA_API const mha_gguf_info *mha_gguf_info_of(const mha_gguf *g)
{
    return g ? &g->info : NULL;
}

MHA_API const mha_gguf_kv *mha_gguf_kv_at(const mha_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->info.n_kv ? &g->kv[i].pub : NULL;
}

static const mha_gguf_entry *find_entry(const mha_gguf *g, const char *key)
{
    if (!g || !key || g->info.n_kv == 0)
        return NULL;
    const mha_gguf_entry probe = {.pub = {.key = key}}, *pp = &probe;
    const mha_gguf_entry **e = bsearch(&pp, g->kv_by_key, (size_t)g->info.n_kv, sizeof *g->kv_by_key, entry_by_key);
    return e ? *e : NULL;
}

MHA_API const mha_gguf_kv *mha_gguf_find_kv(const mha_gguf *g, const char *key)
{
    const mha_gguf_entry *e = find_entry(g, key);
    return e ? &e->pub : NULL;
}

MHA_API const mha_gguf_tensor *mha_gguf_tensor_at(const mha_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->info.n_tensors ? &g->t[i] : NULL;
}

MHA_API const mha_gguf_tensor *mha_gguf_find_tensor(const mha_gguf *g, const char *name)
{
    if (!g || !name || g->info.n_tensors == 0)
        return NULL;
    const mha_gguf_tensor probe = {.name = name}, *pp = &probe;
    const mha_gguf_tensor **t = bsearch(&pp, g->t_by_name, (size_t)g->info.n_tensors, sizeof *g->t_by_name,
                                        tensor_by_name);
    return t ? *t : NULL;
}

float mha_gguf_f32_at(const mha_gguf_tensor *t, int64_t i)
{
    const uint32_t bits = (uint32_t)le((const uint8_t *)t->data + 4 * i, 4);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- typed getters ---- */

enum kind { K_INT, K_FLOAT, K_BOOL, K_STRING, K_NONE };
static const char *const kind_names[] = {"an integer", "a float", "a bool", "a string"};
static const char *const kind_plural[] = {"integers", "floats", "bools", "strings"};

static enum kind kind_of(mha_gguf_type t)
{
    switch (t) {
    case MHA_GGUF_FLOAT32: case MHA_GGUF_FLOAT64: return K_FLOAT;
    case MHA_GGUF_BOOL: return K_BOOL;
    case MHA_GGUF_STRING: return K_STRING;
    case MHA_GGUF_ARRAY: return K_NONE;
    default: return (unsigned)t < N_TYPES ? K_INT : K_NONE;
    }
}

/* The bytes of key's value (element i of an array when indexed; a scalar serves every i), which
 * must be of kind k; *type its type. */
static mha_status value_of(const mha_gguf *g, const char *key, enum kind k, int indexed, uint64_t i,
                           const uint8_t **v, mha_gguf_type *type, char *err, size_t err_len)
{
    if (!g || !key)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle or key is NULL");
    const mha_gguf_entry *e = find_entry(g, key);
    if (!e)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: key '%s' is missing", g->info.path, key);
    const mha_gguf_kv *kv = &e->pub;
    const int array = kv->type == MHA_GGUF_ARRAY;
    if (kind_of(kv->elem_type) != k || (array && !indexed)) {
        char found[64];
        if (array)
            snprintf(found, sizeof found, "an array of %llu %s", (unsigned long long)kv->n, type_names[kv->elem_type]);
        else
            snprintf(found, sizeof found, "%s", type_names[kv->type]);
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: key '%s': expected %s%s%s, found %s", g->info.path, key,
                          kind_names[k], indexed ? " or an array of " : "", indexed ? kind_plural[k] : "", found);
    }
    if (array && i >= kv->n)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: key '%s': no element %llu in an array of %llu", g->info.path,
                          key, (unsigned long long)i, (unsigned long long)kv->n);
    *type = kv->elem_type;
    *v = !array ? e->val : e->str ? g->map + e->str[i] : e->val + i * scalar_size(kv->elem_type);
    return MHA_OK;
}

static mha_status get_int(const mha_gguf *g, const char *key, int indexed, uint64_t i, int64_t *out, char *err,
                          size_t err_len)
{
    const uint8_t *v = NULL;
    mha_gguf_type t = MHA_GGUF_UINT8;
    mha_status st = value_of(g, key, K_INT, indexed, i, &v, &t, err, err_len);
    if (st != MHA_OK)
        return st;
    const unsigned n = scalar_size(t);
    const uint64_t u = le(v, (int)n);
    const int is_signed = t == MHA_GGUF_INT8 || t == MHA_GGUF_INT16 || t == MHA_GGUF_INT32 || t == MHA_GGUF_INT64;
    if (!is_signed && u > INT64_MAX)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: key '%s': uint64 value %llu is over 2^63 - 1",
                          g->info.path, key, (unsigned long long)u);
    if (is_signed && n < 8 && (u >> (8 * n - 1)) & 1) /* sign-extend */
        *out = (int64_t)(u | ~(uint64_t)0 << (8 * n));
    else
        *out = (int64_t)u;
    return MHA_OK;
}

static mha_status get_float(const mha_gguf *g, const char *key, int indexed, uint64_t i, double *out, char *err,
                            size_t err_len)
{
    const uint8_t *v = NULL;
    mha_gguf_type t = MHA_GGUF_UINT8;
    mha_status st = value_of(g, key, K_FLOAT, indexed, i, &v, &t, err, err_len);
    if (st != MHA_OK)
        return st;
    if (t == MHA_GGUF_FLOAT32) {
        const uint32_t bits = (uint32_t)le(v, 4);
        float f;
        memcpy(&f, &bits, sizeof f);
        *out = f;
    } else {
        const uint64_t bits = le(v, 8);
        memcpy(out, &bits, sizeof *out);
    }
    return MHA_OK;
}

static mha_status get_bool(const mha_gguf *g, const char *key, int indexed, uint64_t i, int *out, char *err,
                           size_t err_len)
{
    const uint8_t *v = NULL;
    mha_gguf_type t = MHA_GGUF_UINT8;
    mha_status st = value_of(g, key, K_BOOL, indexed, i, &v, &t, err, err_len);
    if (st == MHA_OK)
        *out = *v; /* 0 or 1: checked at open */
    return st;
}

static mha_status get_string(const mha_gguf *g, const char *key, int indexed, uint64_t i, const char **s, size_t *len,
                             char *err, size_t err_len)
{
    const uint8_t *v = NULL;
    mha_gguf_type t = MHA_GGUF_UINT8;
    mha_status st = value_of(g, key, K_STRING, indexed, i, &v, &t, err, err_len);
    if (st == MHA_OK)
        *len = (size_t)le(v, 8), *s = (const char *)v + 8; /* within the file: checked at open */
    return st;
}

MHA_API mha_status mha_gguf_get_int(const mha_gguf *g, const char *key, int64_t *v, char *err, size_t err_len)
{
    return get_int(g, key, 0, 0, v, err, err_len);
}

MHA_API mha_status mha_gguf_get_float(const mha_gguf *g, const char *key, double *v, char *err, size_t err_len)
{
    return get_float(g, key, 0, 0, v, err, err_len);
}

MHA_API mha_status mha_gguf_get_bool(const mha_gguf *g, const char *key, int *v, char *err, size_t err_len)
{
    return get_bool(g, key, 0, 0, v, err, err_len);
}

MHA_API mha_status mha_gguf_get_string(const mha_gguf *g, const char *key, const char **s, size_t *len, char *err,
                                       size_t err_len)
{
    return get_string(g, key, 0, 0, s, len, err, err_len);
}

MHA_API mha_status mha_gguf_get_int_at(const mha_gguf *g, const char *key, uint64_t i, int64_t *v, char *err,
                                       size_t err_len)
{
    return get_int(g, key, 1, i, v, err, err_len);
}

MHA_API mha_status mha_gguf_get_float_at(const mha_gguf *g, const char *key, uint64_t i, double *v, char *err,
                                         size_t err_len)
{
    return get_float(g, key, 1, i, v, err, err_len);
}

MHA_API mha_status mha_gguf_get_bool_at(const mha_gguf *g, const char *key, uint64_t i, int *v, char *err,
                                        size_t err_len)
{
    return get_bool(g, key, 1, i, v, err, err_len);
}

MHA_API mha_status mha_gguf_get_string_at(const mha_gguf *g, const char *key, uint64_t i, const char **s, size_t *len,
                                          char *err, size_t err_len)
{
    return get_string(g, key, 1, i, s, len, err, err_len);
}
