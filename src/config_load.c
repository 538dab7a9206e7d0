/* config_load.c — YAML configs (DESIGN.md §6) read with libyaml's event parser against the
 * schema table (config_schema.c). Each key's type, range and destination come from the
 * table; each value is checked where it stands, so every message names the file, the line
 * and the key. Strict where YAML is loose: integers are plain decimal digits (no 1e6, 0o10,
 * 6_4 or 64.9), one document per file, no aliases, no duplicate keys. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config.h"
#include "fileio.h"
#include "status.h"

#define MAX_FILE_BYTES (1u << 20)
#define MAX_DEPTH 4
#define MAX_BLOCKS 32

/* The loader, and what it saw of the file (mha_config_seen, for a client's finish). Rows are
 * numbered as one table: the engine's (0 .. mha_n_keys - 1), then the client's. */
typedef struct mha_config_seen {
    yaml_parser_t parser;
    const char *origin;         /* the file's name in messages */
    mha_config *cfg;            /* the engine's values */
    const mha_config_client *client; /* NULL: the engine's keys alone */
    void *cdest;                /* the client's values (client->size bytes) */
    int n_rows;
    int *line;                  /* (n_rows): per row, its key's line; 0 if absent */
    int **entry_line;           /* (n_rows): per list row, the line of each entry */
    struct { char path[48]; int line; } block[MAX_BLOCKS]; /* the blocks met, with their lines */
    int n_blocks;
    char *err;
    size_t err_len;
} loader;

static mha_status bad_at(const loader *L, mha_status st, int line, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static mha_status bad_at(const loader *L, mha_status st, int line, const char *key, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (line > 0)
        return mha_errorf(L->err, L->err_len, st, "%s:%d: %s%s%s", L->origin, line, key, key[0] ? ": " : "", what);
    return mha_errorf(L->err, L->err_len, st, "%s: %s%s%s", L->origin, key, key[0] ? ": " : "", what);
}

static const mha_config_row *row(const loader *L, int i)
{
    return i < mha_n_keys ? &mha_keys[i] : &L->client->rows[i - mha_n_keys];
}

static void *row_base(const loader *L, int i) { return i < mha_n_keys ? (void *)L->cfg : L->cdest; }

/* The row of a key ("run.iters"), -1 if none. */
static int find(const loader *L, const char *key)
{
    for (int i = 0; i < L->n_rows; i++)
        if (!strcmp(row(L, i)->spec.key, key))
            return i;
    return -1;
}

/* The next event; syntax errors carry libyaml's own words and position. Anchors and aliases
 * are refused here, wherever they stand: a config means what it says where it says it. */
static mha_status next(loader *L, yaml_event_t *ev)
{
    if (yaml_parser_parse(&L->parser, ev)) {
        const yaml_char_t *anchor = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.anchor
                                    : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                    : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.anchor
                                                                            : NULL;
        if (ev->type != YAML_ALIAS_EVENT && !anchor)
            return MHA_OK;
        int line = (int)ev->start_mark.line + 1;
        yaml_event_delete(ev);
        return bad_at(L, MHA_ERR_CONFIG, line, "", "anchors and aliases are not supported in a config");
    }
    if (L->parser.error == YAML_MEMORY_ERROR)
        return mha_errorf(L->err, L->err_len, MHA_ERR_NOMEM, "%s: out of memory while parsing", L->origin);
    const yaml_mark_t *m = L->parser.problem ? &L->parser.problem_mark : &L->parser.context_mark;
    return mha_errorf(L->err, L->err_len, MHA_ERR_CONFIG, "%s:%zu: syntax: %s%s%s", L->origin, m->line + 1,
                      L->parser.problem ? L->parser.problem : "malformed YAML", L->parser.context ? " " : "",
                      L->parser.context ? L->parser.context : "");
}

static int line_of_event(const yaml_event_t *ev) { return (int)ev->start_mark.line + 1; }

static const char *event_kind(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_ALIAS_EVENT: return "an alias";
    default: return "a value";
    }
}

/* ---- scalars ---- */

static int has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* A plain decimal integer: optional sign, digits, no leading zeros, nothing after. */
static int parse_integer(const char *s, long long *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0'))
        return 0;
    unsigned long long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        if (v > (~0ull - 9) / 10)
            return 0;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > (unsigned long long)1 << 62) /* far beyond any range in the table */
        return 0;
    *out = neg ? -(long long)v : (long long)v;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '\0'))
        return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* A decimal number: digits with an optional sign, fraction and exponent (8, 1e4, 500000.0);
 * no hex, inf or nan, nothing after. */
static int parse_float(const char *s, double *out)
{
    if (!*s || strspn(s, "0123456789+-.eE") != strlen(s) || !strpbrk(s, "0123456789"))
        return 0;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end || errno == ERANGE || !(x == x) || x > 1e300 || x < -1e300)
        return 0;
    *out = x;
    return 1;
}

/* YAML's booleans (1.2's true/false and 1.1's yes/no/on/off). */
static int parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"true", "True", "TRUE", "yes", "on"}, *no[] = {"false", "False", "FALSE", "no", "off"};
    for (int i = 0; i < 5; i++) {
        if (!strcmp(s, yes[i]))
            return *out = 1, 1;
        if (!strcmp(s, no[i]))
            return *out = 0, 1;
    }
    return 0;
}

static int parse_name(const mha_config_row *k, const char *s, int *out)
{
    for (int i = 0; i < k->n_names; i++)
        if (!strcmp(k->names[i].name, s))
            return *out = k->names[i].value, 1;
    return 0;
}

/* One scalar for row i (or one entry of its list, entry >= 0), checked and stored. */
static mha_status scalar(loader *L, int i, int entry, const yaml_event_t *ev)
{
    const mha_config_row *k = row(L, i);
    const char *s = (const char *)ev->data.scalar.value;
    int line = line_of_event(ev);
    char key[80];
    if (entry >= 0)
        snprintf(key, sizeof key, "%s[%d]", k->spec.key, entry);
    else
        snprintf(key, sizeof key, "%s", k->spec.key);
    int quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    void *dst = (char *)row_base(L, i) + k->off;
    long long v;
    int iv;
    switch (k->spec.type) {
    case MHA_KEY_INT:
    case MHA_KEY_INT_LIST:
        if (quoted || !parse_integer(s, &v))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "expected an integer, got '%.40s'", s);
        if (v < k->spec.min || v > k->spec.max)
            return bad_at(L, MHA_ERR_CONFIG, line, key, "must be in %lld..%lld, got %lld", k->spec.min, k->spec.max, v);
        ((int *)dst)[entry < 0 ? 0 : entry] = (int)v;
        return MHA_OK;
    case MHA_KEY_UINT64:
        if (quoted || !parse_u64(s, (uint64_t *)dst))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "expected an integer in 0..18446744073709551615, got '%.40s'", s);
        return MHA_OK;
    case MHA_KEY_BOOL:
        if (quoted || !parse_bool(s, &iv))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "expected true or false, got '%.40s'", s);
        *(int *)dst = iv;
        return MHA_OK;
    case MHA_KEY_ENUM:
    case MHA_KEY_ENUM_LIST:
        if (!parse_name(k, s, &iv))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "'%.40s' is not one of %s", s, k->spec.values);
        ((int *)dst)[entry < 0 ? 0 : entry] = iv;
        return MHA_OK;
    case MHA_KEY_FLOAT: {
        double x = 0;
        if (quoted || !parse_float(s, &x))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "expected a number, got '%.40s'", s);
        if (!(x <= k->spec.fmax && (k->spec.fmin_open ? x > k->spec.fmin : x >= k->spec.fmin)))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "must be in %s%g..%g, got %g", k->spec.fmin_open ? "(" : "",
                          k->spec.fmin, k->spec.fmax, x);
        *(float *)dst = (float)x;
        return MHA_OK;
    }
    case MHA_KEY_STRING:
        if (strlen(s) > (size_t)k->spec.max)
            return bad_at(L, MHA_ERR_CONFIG, line, key, "longer than %lld characters", k->spec.max);
        if (has_control(s))
            return bad_at(L, MHA_ERR_CONFIG, line, key, "contains a control character");
        memcpy(dst, s, strlen(s) + 1);
        return MHA_OK;
    }
    return MHA_ERR_CONFIG;
}

static const char *expected(const mha_config_row *k)
{
    switch (k->spec.type) {
    case MHA_KEY_INT: case MHA_KEY_UINT64: return "an integer";
    case MHA_KEY_FLOAT: return "a number";
    case MHA_KEY_BOOL: return "true or false";
    case MHA_KEY_ENUM: return "one word";
    case MHA_KEY_STRING: return "a string";
    default: return "a list";
    }
}

/* The value of row i, whose key's own line is `line`. */
static mha_status value(loader *L, int i, int line)
{
    const mha_config_row *k = row(L, i);
    yaml_event_t ev;
    mha_status st = next(L, &ev);
    if (st != MHA_OK)
        return st;
    int is_list = k->spec.type == MHA_KEY_INT_LIST || k->spec.type == MHA_KEY_ENUM_LIST;
    if (ev.type == YAML_SCALAR_EVENT && !is_list) {
        st = scalar(L, i, -1, &ev);
    } else if (ev.type == YAML_SEQUENCE_START_EVENT && is_list) {
        int *count = (int *)((char *)row_base(L, i) + k->count_off);
        int *lines = L->entry_line[i];
        *count = 0;
        for (;;) {
            yaml_event_delete(&ev);
            if ((st = next(L, &ev)) != MHA_OK)
                return st;
            if (ev.type == YAML_SEQUENCE_END_EVENT)
                break;
            if (ev.type != YAML_SCALAR_EVENT) {
                st = bad_at(L, MHA_ERR_CONFIG, line_of_event(&ev), k->spec.key, "entries must be single values, got %s",
                            event_kind(&ev));
                break;
            }
            if (*count == k->spec.max_count) {
                st = bad_at(L, MHA_ERR_CONFIG, line_of_event(&ev), k->spec.key, "more than %d entries", k->spec.max_count);
                break;
            }
            if ((st = scalar(L, i, *count, &ev)) != MHA_OK)
                break;
            if (lines)
                lines[*count] = line_of_event(&ev);
            ++*count;
        }
    } else {
        const char *got = ev.type == YAML_SCALAR_EVENT ? (const char *)ev.data.scalar.value : event_kind(&ev);
        st = bad_at(L, MHA_ERR_CONFIG, line_of_event(&ev) ? line_of_event(&ev) : line, k->spec.key, "expected %s, got %s%.40s%s",
                    expected(k), ev.type == YAML_SCALAR_EVENT ? "'" : "", got, ev.type == YAML_SCALAR_EVENT ? "'" : "");
    }
    yaml_event_delete(&ev);
    return st;
}

/* Whether `path` is a block: some key of the table lies under it. */
static int is_block(const loader *L, const char *path)
{
    size_t n = strlen(path);
    for (int i = 0; i < L->n_rows; i++)
        if (!strncmp(row(L, i)->spec.key, path, n) && row(L, i)->spec.key[n] == '.')
            return 1;
    return 0;
}

/* The word of a key right under block ("" the top): "rope" for model.rope.theta under model,
 * its length in *w; NULL if the key is not under the block. */
static const char *word_under(const char *key, const char *block, size_t *w)
{
    const size_t len = strlen(block);
    if (len && (strncmp(key, block, len) || key[len] != '.'))
        return NULL;
    const char *rest = len ? key + len + 1 : key;
    *w = strcspn(rest, ".");
    return rest;
}

/* "d_model, heads, bias": the words a block (or the top, "") takes, for messages, each once. */
static void block_keys(const loader *L, const char *block, char *out, size_t n)
{
    size_t k = 0, w = 0, wj = 0;
    out[0] = '\0';
    for (int i = 0; i < L->n_rows && k < n; i++) {
        const char *word = word_under(row(L, i)->spec.key, block, &w);
        int listed = 0; /* by an earlier row: model.rope.*, a block of both tables */
        for (int j = 0; word && j < i && !listed; j++) {
            const char *other = word_under(row(L, j)->spec.key, block, &wj);
            listed = other && wj == w && !strncmp(other, word, w);
        }
        if (word && !listed)
            k += (size_t)snprintf(out + k, n - k, "%s%.*s", k ? ", " : "", (int)w, word);
    }
}

static mha_status mapping(loader *L, const char *prefix, int depth);

/* One key of a mapping under prefix ("" at the top) and its value. */
static mha_status entry(loader *L, const char *prefix, const yaml_event_t *key_ev, int depth)
{
    const char *name = (const char *)key_ev->data.scalar.value;
    int line = line_of_event(key_ev);
    char path[96];
    snprintf(path, sizeof path, "%s%s%.60s", prefix, prefix[0] ? "." : "", name);
    if (has_control(name))
        return bad_at(L, MHA_ERR_CONFIG, line, prefix, "a key contains a control character");
    const int k = find(L, path);
    if (k >= 0) {
        int *first = &L->line[k];
        if (*first)
            return bad_at(L, MHA_ERR_CONFIG, line, path, "duplicate key (first on line %d)", *first);
        *first = line;
        return value(L, k, line);
    }
    if (is_block(L, path)) {
        for (int i = 0; i < L->n_blocks; i++)
            if (!strcmp(L->block[i].path, path))
                return bad_at(L, MHA_ERR_CONFIG, line, path, "duplicate block (first on line %d)", L->block[i].line);
        if (L->n_blocks == MAX_BLOCKS || strlen(path) >= sizeof L->block[0].path)
            return bad_at(L, MHA_ERR_CONFIG, line, path, "more blocks, or a deeper one, than a loader keeps");
        snprintf(L->block[L->n_blocks].path, sizeof L->block[0].path, "%s", path);
        L->block[L->n_blocks++].line = line;
        yaml_event_t ev;
        mha_status st = next(L, &ev);
        if (st != MHA_OK)
            return st;
        int is_map = ev.type == YAML_MAPPING_START_EVENT;
        if (!is_map) {
            char keys[200];
            block_keys(L, path, keys, sizeof keys);
            st = bad_at(L, MHA_ERR_CONFIG, line, path, "expected a mapping of keys (%s), got %s", keys, event_kind(&ev));
        }
        yaml_event_delete(&ev);
        return is_map ? mapping(L, path, depth + 1) : st;
    }
    char keys[200];
    block_keys(L, prefix, keys, sizeof keys);
    return bad_at(L, MHA_ERR_CONFIG, line, path, "unknown key (%s takes %s)", prefix[0] ? prefix : "a config", keys);
}

/* The keys of a mapping whose start event was just read, up to its end. */
static mha_status mapping(loader *L, const char *prefix, int depth)
{
    if (depth > MAX_DEPTH)
        return bad_at(L, MHA_ERR_CONFIG, 0, prefix, "nested too deep");
    for (;;) {
        yaml_event_t ev;
        mha_status st = next(L, &ev);
        if (st != MHA_OK)
            return st;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return MHA_OK;
        }
        if (ev.type != YAML_SCALAR_EVENT)
            st = bad_at(L, MHA_ERR_CONFIG, line_of_event(&ev), prefix, "keys must be plain words, got %s", event_kind(&ev));
        else
            st = entry(L, prefix, &ev, depth);
        yaml_event_delete(&ev);
        if (st != MHA_OK)
            return st;
    }
}

/* The stream: exactly one document whose root is a mapping. */
static mha_status document(loader *L)
{
    yaml_event_t ev;
    mha_status st;
    int stage = 0; /* 0: stream start, 1: document start, 2: root, 3: document end, 4: stream end */
    while ((st = next(L, &ev)) == MHA_OK) {
        yaml_event_type_t t = ev.type;
        int line = line_of_event(&ev);
        if (stage == 0 && t == YAML_STREAM_START_EVENT)
            stage = 1;
        else if (stage == 1 && t == YAML_STREAM_END_EVENT)
            st = bad_at(L, MHA_ERR_CONFIG, 0, "", "empty: a config needs at least a model block");
        else if (stage == 1 && t == YAML_DOCUMENT_START_EVENT)
            stage = 2;
        else if (stage == 2 && t == YAML_MAPPING_START_EVENT)
            st = mapping(L, "", 0), stage = 3;
        else if (stage == 2 && t == YAML_SCALAR_EVENT && !ev.data.scalar.value[0])
            st = bad_at(L, MHA_ERR_CONFIG, 0, "", "empty: a config needs at least a model block");
        else if (stage == 2)
            st = bad_at(L, MHA_ERR_CONFIG, line, "", "a config is a mapping of blocks (model, batch, ...), got %s",
                        event_kind(&ev));
        else if (stage == 3 && t == YAML_DOCUMENT_END_EVENT)
            stage = 4;
        else if (stage == 4 && t == YAML_DOCUMENT_START_EVENT)
            st = bad_at(L, MHA_ERR_CONFIG, line, "", "a second YAML document: a config is one document");
        else if (stage == 4 && t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            return MHA_OK;
        }
        yaml_event_delete(&ev);
        if (st != MHA_OK)
            return st;
    }
    return st;
}

/* ---- what one key's type and range cannot say ---- */

static int seen(const loader *L, const char *key) { return L->line[find(L, key)]; }

static mha_status finish(loader *L)
{
    mha_config *c = L->cfg;
    const int based = L->client && L->client->base; /* the model is the base's: nothing is required */
    for (int i = 0; i < L->n_rows && !based; i++)
        if (row(L, i)->spec.required && !L->line[i])
            return bad_at(L, MHA_ERR_CONFIG, 0, row(L, i)->spec.key, "missing: a config needs a model block with d_model and heads");
    if (!seen(L, "batch.kv_len"))
        c->max_seq_kv = c->max_seq_q;
    if (c->pinning == MHA_PIN_CPUS && c->n_cpus == 0)
        return bad_at(L, MHA_ERR_CONFIG, seen(L, "threads.pinning"), "threads.pinning", "'cpus' needs a threads.cpus list");
    if (c->n_cpus > 0 && !seen(L, "threads.pinning"))
        c->pinning = MHA_PIN_CPUS; /* a cpus list alone means: pin to these */
    /* a RoPE parameter that this style and scaling do not read: a mistake, not a no-op */
    for (int i = 0; i < mha_n_keys; i++)
        if (L->line[i] && !mha_rope_key_read(&c->rope, mha_keys[i].spec.field))
            return bad_at(L, MHA_ERR_CONFIG, L->line[i], mha_keys[i].spec.key, "given, but rope style %s, scaling %s do not read it",
                          mha_config_value_name(mha_key_find("model.rope.style"), c->rope.style),
                          mha_config_value_name(mha_key_find("model.rope.scaling"), c->rope.scaling));

    /* weights.type is one type for the four projections (the schema's row fills the first) */
    if (seen(L, "weights.type"))
        for (int i = 1; i < MHA_W_COUNT; i++)
            c->weight_type[i] = c->weight_type[0];

    if (seen(L, "model.mla.eps") && !c->mla.kv_lora_rank)
        return bad_at(L, MHA_ERR_CONFIG, seen(L, "model.mla.eps"), "model.mla.eps",
                      "given, but model.mla has no kv_lora_rank (no latent to norm)");

    /* the engine's own checks: the cross-key rules of the table, then what only the engine
     * can judge (BLIS kernel, CPUs this process may use, sizes that overflow) */
    mha_key_problem p;
    if (mha_config_verify(c, &p) != MHA_OK) {
        char key[80];
        if (p.index >= 0)
            snprintf(key, sizeof key, "%s[%d]", p.key->spec.key, p.index);
        else
            snprintf(key, sizeof key, "%s", p.key->spec.key);
        return bad_at(L, MHA_ERR_CONFIG, L->line[p.key - mha_keys], key, "%s", p.what);
    }
    mha_problem pr;
    mha_status st = mha_config_check_problem(c, &pr);
    if (st != MHA_OK) { /* the problem's field names its key; the sizes' overflow is the batch's */
        const mha_config_row *k = mha_key_of_field(pr.field);
        const char *key = k ? k->spec.key : "batch";
        int line = L->line[(k ? k : mha_key_find("batch.size")) - mha_keys];
        return bad_at(L, st, line, key, "%s", pr.what);
    }
    /* then the client's own */
    return L->client && L->client->finish ? L->client->finish(L->cdest, c, L) : MHA_OK;
}

/* ---- what a client's finish reads ---- */

MHA_API int mha_config_seen_line(const mha_config_seen *L, const char *key, int entry)
{
    if (!L || !key)
        return 0;
    const int i = find(L, key);
    if (i >= 0 && entry < 0)
        return L->line[i];
    if (i >= 0) /* a list's entry: the lines of entries read */
        return L->entry_line[i] && entry < *(const int *)((const char *)row_base(L, i) + row(L, i)->count_off)
                   ? L->entry_line[i][entry] : 0;
    for (int b = 0; b < L->n_blocks; b++)
        if (!strcmp(L->block[b].path, key))
            return L->block[b].line;
    return 0;
}

MHA_API const char *mha_config_seen_origin(const mha_config_seen *L) { return L ? L->origin : ""; }

MHA_API mha_status mha_config_seen_fail(const mha_config_seen *L, const char *key, int entry, const char *fmt, ...)
{
    char what[256], name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (entry >= 0)
        snprintf(name, sizeof name, "%s[%d]", key, entry);
    else
        snprintf(name, sizeof name, "%s", key);
    return bad_at(L, MHA_ERR_CONFIG, mha_config_seen_line(L, key, entry), name, "%s", what);
}

/* ---- entry points ---- */

/* A client whose rows are sound: each key once, none of the engine's, a destination and a
 * finish optional. */
static mha_status client_check(const mha_config_client *cl, const char *origin, char *err, size_t err_len)
{
    if (!cl)
        return MHA_OK;
    if (cl->n_rows < 0 || (cl->n_rows && !cl->rows) || (cl->n_rows && !cl->dest))
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "%s: a client with %d rows needs rows and a destination", origin,
                          cl->n_rows);
    for (int i = 0; i < cl->n_rows; i++) {
        const mha_config_row *r = &cl->rows[i];
        int twice = !r->spec.key || r->spec.field || mha_key_find(r->spec.key) || r->off >= cl->size;
        for (int j = 0; j < i && !twice; j++)
            twice = !strcmp(cl->rows[j].spec.key, r->spec.key);
        if (twice)
            return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "%s: client row %d (%s): no key, a key of the engine or an "
                              "earlier row, an engine field, or an offset past its struct", origin, i,
                              r->spec.key ? r->spec.key : "NULL");
    }
    return MHA_OK;
}

static mha_status parse(const char *text, size_t len, const char *origin, mha_config *cfg, const mha_config_client *cl,
                        void *cdest, char *err, size_t err_len)
{
    loader *L = calloc(1, sizeof *L);
    if (!L)
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", origin);
    L->origin = origin, L->cfg = cfg, L->client = cl, L->cdest = cdest, L->err = err, L->err_len = err_len;
    L->n_rows = mha_n_keys + (cl ? cl->n_rows : 0);
    mha_status st = MHA_OK;
    /* sized from the key tables, which grow with every feature */
    L->line = calloc((size_t)L->n_rows, sizeof *L->line);
    L->entry_line = calloc((size_t)L->n_rows, sizeof *L->entry_line);
    if (!L->line || !L->entry_line)
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", origin);
    for (int i = 0; i < L->n_rows && st == MHA_OK; i++)
        if ((row(L, i)->spec.type == MHA_KEY_INT_LIST || row(L, i)->spec.type == MHA_KEY_ENUM_LIST) &&
            !(L->entry_line[i] = calloc((size_t)row(L, i)->spec.max_count + 1, sizeof(int)))) /* + 1: never 0 bytes */
            st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", origin);
    if (st == MHA_OK && !yaml_parser_initialize(&L->parser))
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", origin);
    if (st == MHA_OK) {
        if (cl && cl->base)
            *cfg = *cl->base;
        else
            mha_config_init(cfg);
        if (cl)
            mha_config_client_init(&(mha_config_client){.rows = cl->rows, .n_rows = cl->n_rows, .dest = cdest, .size = cl->size});
        yaml_parser_set_input_string(&L->parser, (const unsigned char *)text, len);
        st = document(L);
        yaml_parser_delete(&L->parser);
        if (st == MHA_OK)
            st = finish(L);
    }
    for (int i = 0; i < L->n_rows && L->entry_line; i++)
        free(L->entry_line[i]);
    free(L->entry_line), free(L->line);
    free(L);
    return st;
}

MHA_API mha_status mha_config_parse_with(const char *text, size_t len, const char *origin, mha_config *cfg,
                                         const mha_config_client *client, char *err, size_t err_len)
{
    if (!text || !cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "config text or output is NULL");
    if (!origin)
        origin = "config";
    mha_status st = client_check(client, origin, err, err_len);
    if (st != MHA_OK)
        return st;
    mha_config *tmp = malloc(sizeof *tmp);
    void *ctmp = client && client->size ? malloc(client->size) : NULL;
    if (!tmp || (client && client->size && !ctmp))
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", origin);
    else
        st = parse(text, len, origin, tmp, client, ctmp, err, err_len);
    if (st == MHA_OK) { /* the outputs change only on success */
        *cfg = *tmp;
        if (ctmp)
            memcpy(client->dest, ctmp, client->size);
        if (err && err_len)
            err[0] = '\0';
    }
    free(ctmp);
    free(tmp);
    return st;
}

MHA_API mha_status mha_config_load_with(const char *path, mha_config *cfg, const mha_config_client *client, char *err,
                                        size_t err_len)
{
    if (!path || !cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "config path or output is NULL");
    char *buf = NULL;
    size_t len = 0;
    mha_status st = mha_file_read_all(path, MAX_FILE_BYTES, &buf, &len, err, err_len);
    if (st == MHA_ERR_FORMAT)
        st = mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: larger than %u bytes: not a config", path, MAX_FILE_BYTES);
    if (st != MHA_OK)
        return st;
    if (memchr(buf, '\0', len))
        st = mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: holds a NUL byte: not a YAML config", path);
    else
        st = mha_config_parse_with(buf, len, path, cfg, client, err, err_len);
    free(buf);
    return st;
}

MHA_API mha_status mha_config_load(const char *path, mha_config *cfg, char *err, size_t err_len)
{
    return mha_config_load_with(path, cfg, NULL, err, err_len);
}
