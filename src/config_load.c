/* config_load.c — YAML configs (DESIGN.md §6) through libcyaml, which checks structure,
 * keys and types against the schema below; value ranges are checked here afterwards. Every
 * message names the file, the line and the key: libcyaml's backtrace gives the line for
 * its own errors, and a pass of libyaml's event parser maps each key to its line for ours. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cyaml/cyaml.h>
#include <yaml.h>

#include "config_file.h"
#include "status.h"

#define MAX_FILE_BYTES (1u << 20)

/* ---- what libcyaml fills: one struct per block ---- */

typedef struct y_model { int d_model, heads; bool bias; } y_model;
typedef struct y_batch {
    int size, seq_len, kv_len;
    bool cross;
    int mask;
    int lengths[MHA_MAX_LENGTHS];
    unsigned n_lengths;
    int kv_lengths[MHA_MAX_LENGTHS];
    unsigned n_kv_lengths;
} y_batch;
typedef struct y_threads { int count, pinning; int cpus[MHA_MAX_CPUS]; unsigned n_cpus; } y_threads;
typedef struct y_run { int warmup, iters; uint64_t seed; } y_run;
typedef struct y_scaling {
    int threads[MHA_MAX_SCALE_POINTS];
    unsigned n_threads;
    int pinning[4];
    unsigned n_pinning;
    int mode, iters;
} y_scaling;
typedef struct y_engine { int q_block; char blis_arch[16]; } y_engine;
typedef struct y_file {
    char name[64];
    y_model model;
    y_batch batch;
    y_threads threads;
    y_run run;
    y_scaling scaling;
    y_engine engine;
} y_file;

static const cyaml_strval_t mask_names[] = {
    {"none", MHA_MASK_NONE}, {"causal", MHA_MASK_CAUSAL}, {"padding", MHA_MASK_PADDING}};
static const cyaml_strval_t pinning_names[] = {
    {"none", MHA_PIN_NONE}, {"close", MHA_PIN_CLOSE}, {"spread", MHA_PIN_SPREAD}, {"cpus", MHA_PIN_CPUS}};
static const cyaml_strval_t mode_names[] = {
    {"strong", MHA_SCALE_STRONG}, {"weak", MHA_SCALE_WEAK}, {"both", MHA_SCALE_BOTH}};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const cyaml_schema_value_t int_entry = {CYAML_VALUE_INT(CYAML_FLAG_DEFAULT, int)};
static const cyaml_schema_value_t pinning_entry = {
    CYAML_VALUE_ENUM(CYAML_FLAG_STRICT, int, pinning_names, N_OF(pinning_names))};

#define OPT CYAML_FLAG_OPTIONAL
static const cyaml_schema_field_t model_fields[] = {
    CYAML_FIELD_INT("d_model", CYAML_FLAG_DEFAULT, y_model, d_model),
    CYAML_FIELD_INT("heads", CYAML_FLAG_DEFAULT, y_model, heads),
    CYAML_FIELD_BOOL("bias", OPT, y_model, bias),
    CYAML_FIELD_END};
static const cyaml_schema_field_t batch_fields[] = {
    CYAML_FIELD_INT("size", OPT, y_batch, size),
    CYAML_FIELD_INT("seq_len", OPT, y_batch, seq_len),
    CYAML_FIELD_INT("kv_len", OPT, y_batch, kv_len),
    CYAML_FIELD_BOOL("cross", OPT, y_batch, cross),
    CYAML_FIELD_ENUM("mask", OPT | CYAML_FLAG_STRICT, y_batch, mask, mask_names, N_OF(mask_names)),
    CYAML_FIELD_SEQUENCE_COUNT("lengths", OPT, y_batch, lengths, n_lengths, &int_entry, 1, MHA_MAX_LENGTHS),
    CYAML_FIELD_SEQUENCE_COUNT("kv_lengths", OPT, y_batch, kv_lengths, n_kv_lengths, &int_entry, 1, MHA_MAX_LENGTHS),
    CYAML_FIELD_END};
static const cyaml_schema_field_t threads_fields[] = {
    CYAML_FIELD_INT("count", OPT, y_threads, count),
    CYAML_FIELD_ENUM("pinning", OPT | CYAML_FLAG_STRICT, y_threads, pinning, pinning_names, N_OF(pinning_names)),
    CYAML_FIELD_SEQUENCE_COUNT("cpus", OPT, y_threads, cpus, n_cpus, &int_entry, 1, MHA_MAX_CPUS),
    CYAML_FIELD_END};
static const cyaml_schema_field_t run_fields[] = {
    CYAML_FIELD_INT("warmup", OPT, y_run, warmup),
    CYAML_FIELD_INT("iters", OPT, y_run, iters),
    CYAML_FIELD_UINT("seed", OPT, y_run, seed),
    CYAML_FIELD_END};
static const cyaml_schema_field_t scaling_fields[] = {
    CYAML_FIELD_SEQUENCE_COUNT("threads", OPT, y_scaling, threads, n_threads, &int_entry, 1, MHA_MAX_SCALE_POINTS),
    CYAML_FIELD_SEQUENCE_COUNT("pinning", OPT, y_scaling, pinning, n_pinning, &pinning_entry, 1, 4),
    CYAML_FIELD_ENUM("mode", OPT | CYAML_FLAG_STRICT, y_scaling, mode, mode_names, N_OF(mode_names)),
    CYAML_FIELD_INT("iters", OPT, y_scaling, iters),
    CYAML_FIELD_END};
static const cyaml_schema_field_t engine_fields[] = {
    CYAML_FIELD_INT("q_block", OPT, y_engine, q_block),
    CYAML_FIELD_STRING("blis_arch", OPT, y_engine, blis_arch, 0),
    CYAML_FIELD_END};
static const cyaml_schema_field_t file_fields[] = {
    CYAML_FIELD_STRING("name", OPT, y_file, name, 1),
    CYAML_FIELD_MAPPING("model", CYAML_FLAG_DEFAULT, y_file, model, model_fields),
    CYAML_FIELD_MAPPING("batch", OPT, y_file, batch, batch_fields),
    CYAML_FIELD_MAPPING("threads", OPT, y_file, threads, threads_fields),
    CYAML_FIELD_MAPPING("run", OPT, y_file, run, run_fields),
    CYAML_FIELD_MAPPING("scaling", OPT, y_file, scaling, scaling_fields),
    CYAML_FIELD_MAPPING("engine", OPT, y_file, engine, engine_fields),
    CYAML_FIELD_END};
static const cyaml_schema_value_t file_schema = {CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, y_file, file_fields)};

/* ---- libcyaml's messages, caught instead of printed ---- */

typedef struct capture {
    char msg[160];            /* the first error line */
    char field[8][48];        /* backtrace fields, innermost first */
    int n_field;
    size_t line;              /* innermost backtrace line */
} capture;

static void capture_log(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
    capture *c = ctx;
    char text[192];
    if (level < CYAML_LOG_ERROR)
        return;
    vsnprintf(text, sizeof text, fmt, args);
    text[strcspn(text, "\n")] = '\0';
    char field[48];
    size_t line = 0, col = 0;
    if (sscanf(text, " in mapping field '%47[^']' (line: %zu, column: %zu)", field, &line, &col) == 3) {
        if (c->n_field < 8)
            snprintf(c->field[c->n_field++], sizeof c->field[0], "%s", field);
        if (!c->line)
            c->line = line;
    } else if (sscanf(text, " in %*s (line: %zu", &line) == 1 ||
               sscanf(text, " in sequence entry '%*u' (line: %zu", &line) == 1) {
        if (!c->line)
            c->line = line;
    } else if (!c->msg[0] && strncmp(text, "Load: Backtrace", 15) != 0) {
        snprintf(c->msg, sizeof c->msg, "%s", strncmp(text, "Load: ", 6) ? text : text + 6);
    }
}

static void *yaml_mem(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

/* ---- key → line, from libyaml's events ---- */

typedef struct key_line { char path[64]; char value[24]; int line; } key_line;
typedef struct line_map { key_line e[512]; int n; } line_map;

typedef struct frame { int is_map, expect_key, index, entry; char path[64], key[48]; } frame;

static void child_path(const frame *f, char *out, size_t n)
{
    if (f->is_map)
        snprintf(out, n, "%s%s%s", f->path, f->path[0] ? "." : "", f->key);
    else
        snprintf(out, n, "%s[%d]", f->path, f->index);
}

static void record(line_map *m, const char *path, size_t line)
{
    if (m->n < (int)N_OF(m->e)) {
        snprintf(m->e[m->n].path, sizeof m->e[0].path, "%s", path);
        m->e[m->n].value[0] = '\0';
        m->e[m->n++].line = (int)line + 1;
    }
}

static void line_map_build(const unsigned char *buf, size_t len, line_map *m)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    frame st[16];
    int depth = 0, done = 0;
    m->n = 0;
    if (!yaml_parser_initialize(&parser))
        return;
    yaml_parser_set_input_string(&parser, buf, len);
    while (!done && yaml_parser_parse(&parser, &ev)) {
        frame *top = depth ? &st[depth - 1] : NULL;
        char path[64];
        switch (ev.type) {
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            if (depth == (int)N_OF(st)) {
                done = 1;
                break;
            }
            path[0] = '\0';
            if (top) {
                child_path(top, path, sizeof path);
                if (!top->is_map)
                    record(m, path, ev.start_mark.line);
            }
            st[depth] = (frame){.is_map = ev.type == YAML_MAPPING_START_EVENT, .expect_key = 1};
            snprintf(st[depth].path, sizeof st[depth].path, "%s", path);
            depth++;
            break;
        case YAML_SCALAR_EVENT:
            if (!top)
                break;
            if (top->is_map && top->expect_key) {
                snprintf(top->key, sizeof top->key, "%s", (const char *)ev.data.scalar.value);
                child_path(top, path, sizeof path);
                top->entry = m->n;
                record(m, path, ev.start_mark.line);
                top->expect_key = 0;
            } else if (top->is_map) {
                if (top->entry < m->n) /* the key's scalar value, for checks libcyaml does not make */
                    snprintf(m->e[top->entry].value, sizeof m->e[0].value, "%s", (const char *)ev.data.scalar.value);
                top->expect_key = 1;
            } else {
                child_path(top, path, sizeof path);
                record(m, path, ev.start_mark.line);
                top->index++;
            }
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT:
            if (--depth > 0) {
                if (st[depth - 1].is_map)
                    st[depth - 1].expect_key = 1;
                else
                    st[depth - 1].index++;
            }
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
}

static const key_line *entry_of(const line_map *m, const char *path)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].path, path))
            return &m->e[i];
    return NULL;
}

static int line_of(const line_map *m, const char *path)
{
    const key_line *e = entry_of(m, path);
    return e ? e->line : 0;
}

/* libcyaml takes any word but false/no/off/disable/0 as true: accept YAML's booleans only. */
static int is_yaml_bool(const char *v)
{
    static const char *words[] = {"true", "false", "True", "False", "TRUE", "FALSE", "yes", "no", "on", "off"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcmp(v, words[i]))
            return 1;
    return 0;
}

/* ---- validation ---- */

typedef struct vctx { const char *path; const line_map *lines; char *err; size_t err_len; } vctx;

static mha_status bad(const vctx *v, mha_status st, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static mha_status bad(const vctx *v, mha_status st, const char *key, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line = line_of(v->lines, key);
    if (line)
        return mha_errorf(v->err, v->err_len, st, "%s:%d: %s: %s", v->path, line, key, what);
    return mha_errorf(v->err, v->err_len, st, "%s: %s: %s", v->path, key, what);
}

#define RANGE(key, value, lo, hi)                                                              \
    do {                                                                                       \
        if ((value) < (lo) || (value) > (hi))                                                  \
            return bad(v, MHA_ERR_CONFIG, key, "must be in %d..%d, got %d", (int)(lo), (int)(hi), (int)(value)); \
    } while (0)

/* A key that is in the file: range-checked, then taken; absent keys keep their default. */
#define TAKE(key, dst, value, lo, hi)                                                          \
    do {                                                                                       \
        if (line_of(lm, key)) {                                                                \
            RANGE(key, value, lo, hi);                                                         \
            (dst) = (value);                                                                   \
        }                                                                                      \
    } while (0)

static mha_status validate(const vctx *v, const y_file *y, mha_file_config *fc)
{
    const line_map *lm = v->lines;
    char key[64];

    if (line_of(lm, "name"))
        snprintf(fc->name, sizeof fc->name, "%s", y->name);
    const char *bools[] = {"model.bias", "batch.cross"};
    for (int i = 0; i < 2; i++) {
        const key_line *e = entry_of(lm, bools[i]);
        if (e && !is_yaml_bool(e->value))
            return bad(v, MHA_ERR_CONFIG, bools[i], "expected true or false, got '%s'", e->value);
    }

    RANGE("model.d_model", y->model.d_model, 1, 65536);
    RANGE("model.heads", y->model.heads, 1, y->model.d_model);
    if (y->model.d_model % y->model.heads)
        return bad(v, MHA_ERR_CONFIG, "model.heads", "%d does not divide d_model %d", y->model.heads, y->model.d_model);
    fc->d_model = y->model.d_model;
    fc->heads = y->model.heads;
    if (line_of(lm, "model.bias"))
        fc->bias = y->model.bias;

    TAKE("batch.size", fc->batch, y->batch.size, 1, 1 << 16);
    TAKE("batch.seq_len", fc->seq_len, y->batch.seq_len, 1, 1 << 20);
    fc->kv_len = fc->seq_len;
    TAKE("batch.kv_len", fc->kv_len, y->batch.kv_len, 1, 1 << 20);
    fc->cross = y->batch.cross || fc->kv_len != fc->seq_len;
    if (line_of(lm, "batch.mask"))
        fc->mask = y->batch.mask;
    fc->n_lengths = (int)y->batch.n_lengths;
    for (int i = 0; i < fc->n_lengths; i++) {
        snprintf(key, sizeof key, "batch.lengths[%d]", i);
        RANGE(key, y->batch.lengths[i], 0, fc->seq_len);
        fc->lengths[i] = y->batch.lengths[i];
    }
    fc->n_kv_lengths = (int)y->batch.n_kv_lengths;
    if (fc->n_kv_lengths && !fc->cross)
        return bad(v, MHA_ERR_CONFIG, "batch.kv_lengths", "needs cross-attention (kv_len different from seq_len, or cross: true)");
    for (int i = 0; i < fc->n_kv_lengths; i++) {
        snprintf(key, sizeof key, "batch.kv_lengths[%d]", i);
        RANGE(key, y->batch.kv_lengths[i], 0, fc->kv_len);
        fc->kv_lengths[i] = y->batch.kv_lengths[i];
    }
    fc->line_mask = line_of(lm, "batch.mask");
    fc->line_lengths = line_of(lm, "batch.lengths");

    TAKE("threads.count", fc->threads, y->threads.count, 0, MHA_MAX_THREADS);
    fc->line_threads = line_of(lm, "threads.count");
    if (line_of(lm, "threads.pinning"))
        fc->pinning = (mha_pinning)y->threads.pinning;
    fc->n_cpus = (int)y->threads.n_cpus;
    for (int i = 0; i < fc->n_cpus; i++) {
        snprintf(key, sizeof key, "threads.cpus[%d]", i);
        RANGE(key, y->threads.cpus[i], 0, 1023);
        fc->cpus[i] = y->threads.cpus[i];
    }
    if (fc->pinning == MHA_PIN_CPUS && fc->n_cpus == 0)
        return bad(v, MHA_ERR_CONFIG, "threads.pinning", "'cpus' needs a threads.cpus list");
    if (fc->pinning != MHA_PIN_CPUS && fc->n_cpus > 0 && !line_of(lm, "threads.pinning"))
        fc->pinning = MHA_PIN_CPUS; /* a cpus list alone means: pin to these */

    TAKE("run.warmup", fc->warmup, y->run.warmup, 0, 1000000);
    TAKE("run.iters", fc->iters, y->run.iters, 1, 1000000);
    if (line_of(lm, "run.seed"))
        fc->seed = y->run.seed;

    fc->n_scale_threads = (int)y->scaling.n_threads;
    for (int i = 0; i < fc->n_scale_threads; i++) {
        snprintf(key, sizeof key, "scaling.threads[%d]", i);
        RANGE(key, y->scaling.threads[i], 1, MHA_MAX_THREADS);
        fc->scale_threads[i] = y->scaling.threads[i];
    }
    fc->n_scale_pinning = (int)y->scaling.n_pinning;
    for (int i = 0; i < fc->n_scale_pinning; i++)
        fc->scale_pinning[i] = (mha_pinning)y->scaling.pinning[i];
    if (line_of(lm, "scaling.mode"))
        fc->scale_mode = y->scaling.mode;
    fc->scale_iters = fc->iters;
    TAKE("scaling.iters", fc->scale_iters, y->scaling.iters, 1, 1000000);

    TAKE("engine.q_block", fc->q_block, y->engine.q_block, 0, 1 << 20);
    if (line_of(lm, "engine.blis_arch"))
        snprintf(fc->blis_arch, sizeof fc->blis_arch, "%s", y->engine.blis_arch);

    /* what only the engine can judge: BLIS context, CPUs we may use, sizes that overflow */
    mha_config cfg;
    char why[160];
    mha_file_config_engine(fc, &cfg);
    mha_status st = mha_config_check(&cfg, why, sizeof why);
    if (st != MHA_OK) {
        const char *k = st == MHA_ERR_AFFINITY ? "threads.cpus" : strncmp(why, "blis_arch", 9) == 0 ? "engine.blis_arch" : "batch";
        const char *colon = strstr(why, ": ");
        return bad(v, st, k, "%s", colon ? colon + 2 : why);
    }
    return MHA_OK;
}

/* ---- entry points ---- */

void mha_file_config_default(mha_file_config *fc)
{
    memset(fc, 0, sizeof *fc);
    snprintf(fc->name, sizeof fc->name, "default");
    fc->d_model = 256, fc->heads = 4, fc->bias = 1;
    fc->batch = 2, fc->seq_len = fc->kv_len = 64, fc->mask = MHA_MASK_NONE;
    fc->threads = 0, fc->pinning = MHA_PIN_NONE;
    fc->warmup = 3, fc->iters = 20, fc->seed = 42;
    fc->scale_mode = MHA_SCALE_STRONG, fc->scale_iters = 20;
}

void mha_file_config_engine(const mha_file_config *fc, mha_config *cfg)
{
    mha_config_init(cfg);
    cfg->d_model = fc->d_model;
    cfg->n_heads = fc->heads;
    cfg->bias = fc->bias;
    cfg->max_batch = fc->batch;
    cfg->max_seq_q = fc->seq_len;
    cfg->max_seq_kv = fc->kv_len;
    cfg->threads = fc->threads;
    cfg->pinning = fc->pinning;
    cfg->n_cpus = fc->n_cpus;
    memcpy(cfg->cpus, fc->cpus, sizeof fc->cpus);
    cfg->q_block = fc->q_block;
    memcpy(cfg->blis_arch, fc->blis_arch, sizeof cfg->blis_arch);
}

static mha_status read_file(const char *path, unsigned char **buf, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char *b = malloc(MAX_FILE_BYTES + 1);
    if (!b) {
        fclose(f);
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(b, 1, MAX_FILE_BYTES + 1, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(b);
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: read error", path);
    }
    if (n > MAX_FILE_BYTES) {
        free(b);
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: larger than %u bytes: not a config", path, MAX_FILE_BYTES);
    }
    *buf = b;
    *len = n;
    return MHA_OK;
}

mha_status mha_file_config_load(const char *path, mha_file_config *fc, char *err, size_t err_len)
{
    if (!path || !fc)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "config path or output is NULL");
    unsigned char *buf = NULL;
    size_t len = 0;
    mha_status st = read_file(path, &buf, &len, err, err_len);
    if (st != MHA_OK)
        return st;

    line_map *lines = malloc(sizeof *lines);
    if (!lines) {
        free(buf);
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
    }
    line_map_build(buf, len, lines);

    capture cap = {0};
    const cyaml_config_t cy = {
        .log_fn = capture_log, .log_ctx = &cap, .mem_fn = yaml_mem, .mem_ctx = NULL,
        .log_level = CYAML_LOG_ERROR, .flags = CYAML_CFG_NO_ALIAS,
    };
    y_file *y = NULL;
    cyaml_err_t ce = cyaml_load_data(buf, len, &cy, &file_schema, (cyaml_data_t **)&y, NULL);
    if (ce != CYAML_OK) {
        /* the key path: backtrace fields outermost first, then an unexpected key's own name */
        char key[160] = "";
        for (int i = cap.n_field - 1; i >= 0; i--)
            snprintf(key + strlen(key), sizeof key - strlen(key), "%s%s", key[0] ? "." : "", cap.field[i]);
        const char *unexpected = strstr(cap.msg, "Unexpected key: ");
        const char *missing = strstr(cap.msg, "Missing required mapping field: ");
        if (unexpected)
            snprintf(key + strlen(key), sizeof key - strlen(key), "%s%s", key[0] ? "." : "", unexpected + 16);
        if (missing) /* the backtrace ends wherever parsing stopped: name the key from the schema */
            snprintf(key, sizeof key, "%s%s", strcmp(missing + 32, "model") ? "model." : "", missing + 32);
        int line = line_of(lines, key);
        if (!line)
            line = (int)cap.line;
        const char *what = cap.msg[0] ? cap.msg : cyaml_strerror(ce);
        st = ce == CYAML_ERR_OOM ? MHA_ERR_NOMEM : MHA_ERR_CONFIG;
        if (st == MHA_ERR_NOMEM)
            mha_errorf(err, err_len, st, "%s: out of memory while parsing", path);
        else if (line)
            mha_errorf(err, err_len, st, "%s:%d: %s%s%s", path, line, key, key[0] ? ": " : "", what);
        else
            mha_errorf(err, err_len, st, "%s: %s%s%s", path, key, key[0] ? ": " : "", what);
    } else if (!y) {
        st = mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: empty: a config needs at least a model block", path);
    } else {
        mha_file_config_default(fc);
        snprintf(fc->path, sizeof fc->path, "%s", path);
        /* name defaults to the file's name without directory and extension */
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(fc->name, sizeof fc->name, "%.*s", (int)strcspn(base, "."), base);
        vctx v = {path, lines, err, err_len};
        st = validate(&v, y, fc);
    }
    if (y)
        cyaml_free(&cy, &file_schema, y, 0);
    free(lines);
    free(buf);
    return st;
}

MHA_API mha_status mha_config_load(const char *path, mha_config *cfg, char *err, size_t err_len)
{
    if (!path || !cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "config path or output is NULL");
    mha_file_config *fc = malloc(sizeof *fc);
    if (!fc)
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
    mha_status st = mha_file_config_load(path, fc, err, err_len);
    if (st == MHA_OK)
        mha_file_config_engine(fc, cfg);
    free(fc);
    return st;
}

const char *mha_mask_name(int mask)
{
    for (size_t i = 0; i < N_OF(mask_names); i++)
        if (mask_names[i].val == mask)
            return mask_names[i].str;
    return "?";
}

const char *mha_pinning_name(mha_pinning p)
{
    for (size_t i = 0; i < N_OF(pinning_names); i++)
        if (pinning_names[i].val == (int64_t)p)
            return pinning_names[i].str;
    return "?";
}

const char *mha_scale_mode_name(int mode)
{
    for (size_t i = 0; i < N_OF(mode_names); i++)
        if (mode_names[i].val == mode)
            return mode_names[i].str;
    return "?";
}
