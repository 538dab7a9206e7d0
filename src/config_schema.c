/* config_schema.c — the one table of config keys (DESIGN.md §6): name, type, range, default
 * and where the value goes. It drives mha_config_init's defaults, the range checks of
 * mha_config_check, the YAML loader (config_load.c) and README's key table (`mha schema`),
 * so a key is added in one place and its messages say the same thing everywhere. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "status.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define ENG(f) offsetof(mha_config, f) /* engine keys: offsets in mha_config */
#define FILE_(f) offsetof(mha_config_file, f)
#define NONE ((size_t)-1)

_Static_assert(sizeof(mha_pinning) == sizeof(int) && sizeof(mha_mask_kind) == sizeof(int) &&
                   sizeof(mha_scale_mode) == sizeof(int),
               "enum fields are stored as int");

static const mha_name_val mask_names[] = {
    {"none", MHA_MASK_NONE}, {"causal", MHA_MASK_CAUSAL}, {"padding", MHA_MASK_PADDING}};
static const mha_name_val pinning_names[] = {
    {"none", MHA_PIN_NONE}, {"close", MHA_PIN_CLOSE}, {"spread", MHA_PIN_SPREAD}, {"cpus", MHA_PIN_CPUS}};
static const mha_name_val mode_names[] = {
    {"strong", MHA_SCALE_STRONG}, {"weak", MHA_SCALE_WEAK}, {"both", MHA_SCALE_BOTH}};
#define NAMES(a) a, (int)N_OF(a)

#define MILLION 1000000
/* key, engine field, type, min, max, max entries, required, enum text, default text, doc;
 * then destination, count destination, default value, enum names */
const mha_key_def mha_keys[] = {
    {{"name", NULL, MHA_KEY_STRING, 0, 63, 0, 0, NULL, "the file's stem", "the model's name in reports"},
     FILE_(name), NONE, 0, NULL, 0},
    {{"model.d_model", "d_model", MHA_KEY_INT, 1, 65536, 0, 1, NULL, "512", "model width d"},
     ENG(d_model), NONE, 512, NULL, 0},
    {{"model.heads", "n_heads", MHA_KEY_INT, 1, 65536, 0, 1, NULL, "8", "attention heads h; divides d_model"},
     ENG(n_heads), NONE, 8, NULL, 0},
    {{"model.bias", "bias", MHA_KEY_BOOL, 0, 1, 0, 0, NULL, "true", "q, k, v and output projection biases"},
     ENG(bias), NONE, 1, NULL, 0},
    {{"batch.size", "max_batch", MHA_KEY_INT, 1, 65536, 0, 0, NULL, "1", "sequences per forward (engine capacity)"},
     ENG(max_batch), NONE, 1, NULL, 0},
    {{"batch.seq_len", "max_seq_q", MHA_KEY_INT, 1, 1 << 20, 0, 0, NULL, "128", "query tokens per sequence"},
     ENG(max_seq_q), NONE, 128, NULL, 0},
    {{"batch.kv_len", "max_seq_kv", MHA_KEY_INT, 1, 1 << 20, 0, 0, NULL, "seq_len",
      "key/value tokens per sequence; other than seq_len means cross-attention"},
     ENG(max_seq_kv), NONE, 128, NULL, 0},
    {{"batch.cross", NULL, MHA_KEY_BOOL, 0, 1, 0, 0, NULL, "false", "generate separate key/value inputs"},
     FILE_(cross), NONE, 0, NULL, 0},
    {{"batch.mask", NULL, MHA_KEY_ENUM, 0, 0, 0, 0, "none, causal, padding", "none",
      "mask of generated inputs; padding needs lengths"},
     FILE_(mask), NONE, MHA_MASK_NONE, NAMES(mask_names)},
    {{"batch.lengths", NULL, MHA_KEY_INT_LIST, 0, 1 << 20, MHA_MAX_LENGTHS, 0, NULL, "none",
      "valid query tokens per sequence (<= seq_len), repeated over the batch"},
     FILE_(lengths), FILE_(n_lengths), 0, NULL, 0},
    {{"batch.kv_lengths", NULL, MHA_KEY_INT_LIST, 0, 1 << 20, MHA_MAX_LENGTHS, 0, NULL, "none",
      "valid key tokens per sequence (<= kv_len), cross-attention only"},
     FILE_(kv_lengths), FILE_(n_kv_lengths), 0, NULL, 0},
    {{"threads.count", "threads", MHA_KEY_INT, 0, MHA_MAX_THREADS, 0, 0, NULL, "0",
      "worker threads; 0: every CPU the process may use"},
     ENG(threads), NONE, 0, NULL, 0},
    {{"threads.pinning", "pinning", MHA_KEY_ENUM, 0, 0, 0, 0, "none, close, spread, cpus", "none (cpus with a cpus list)",
      "where workers run"},
     ENG(pinning), NONE, MHA_PIN_NONE, NAMES(pinning_names)},
    {{"threads.cpus", "cpus", MHA_KEY_INT_LIST, 0, 1023, MHA_MAX_CPUS, 0, NULL, "none",
      "CPUs for pinning cpus: worker t on cpus[t % n]"},
     ENG(cpus), ENG(n_cpus), 0, NULL, 0},
    {{"run.warmup", NULL, MHA_KEY_INT, 0, MILLION, 0, 0, NULL, "3", "untimed forwards first"},
     FILE_(warmup), NONE, 3, NULL, 0},
    {{"run.iters", NULL, MHA_KEY_INT, 1, MILLION, 0, 0, NULL, "20", "timed forwards"},
     FILE_(iters), NONE, 20, NULL, 0},
    {{"run.seed", NULL, MHA_KEY_UINT64, 0, 0, 0, 0, NULL, "42", "seed of generated inputs and weights"},
     FILE_(seed), NONE, 42, NULL, 0},
    {{"scaling.threads", NULL, MHA_KEY_INT_LIST, 1, MHA_MAX_THREADS, MHA_MAX_SCALE_POINTS, 0, NULL,
      "1 .. the CPUs allowed", "thread counts of mha scale"},
     FILE_(scale_threads), FILE_(n_scale_threads), 0, NULL, 0},
    {{"scaling.pinning", NULL, MHA_KEY_ENUM_LIST, 0, 0, 4, 0, "none, close, spread, cpus", "none, close, spread",
      "pinnings of mha scale"},
     FILE_(scale_pinning), FILE_(n_scale_pinning), 0, NAMES(pinning_names)},
    {{"scaling.mode", NULL, MHA_KEY_ENUM, 0, 0, 0, 0, "strong, weak, both", "strong",
      "strong: fixed batch; weak: batch × threads"},
     FILE_(scale_mode), NONE, MHA_SCALE_STRONG, NAMES(mode_names)},
    {{"scaling.iters", NULL, MHA_KEY_INT, 1, MILLION, 0, 0, NULL, "run.iters", "timed forwards per point"},
     FILE_(scale_iters), NONE, 20, NULL, 0},
    {{"engine.q_block", "q_block", MHA_KEY_INT, 0, 1 << 20, 0, 0, NULL, "0", "query rows per score tile; 0: the engine's choice"},
     ENG(q_block), NONE, 0, NULL, 0},
    {{"engine.blis_arch", "blis_arch", MHA_KEY_STRING, 0, 15, 0, 0, NULL, "auto",
      "BLIS sub-config (skx, haswell, zen3, generic, ...); auto: from the CPU's features"},
     ENG(blis_arch), NONE, 0, NULL, 0},
};
const int mha_n_keys = (int)N_OF(mha_keys);

MHA_API const mha_config_key *mha_config_key_at(int i)
{
    return i >= 0 && i < mha_n_keys ? &mha_keys[i].pub : NULL;
}

const mha_key_def *mha_key_find(const char *key)
{
    for (int i = 0; i < mha_n_keys; i++)
        if (!strcmp(mha_keys[i].pub.key, key))
            return &mha_keys[i];
    return NULL;
}

const char *mha_key_value_name(const mha_key_def *k, int value)
{
    for (int i = 0; i < k->n_names; i++)
        if (k->names[i].value == value)
            return k->names[i].name;
    return "?";
}

MHA_API const char *mha_mask_name(int mask)
{
    return mha_key_value_name(mha_key_find("batch.mask"), mask);
}

MHA_API const char *mha_pinning_name(mha_pinning p)
{
    return mha_key_value_name(mha_key_find("threads.pinning"), (int)p);
}

MHA_API const char *mha_scale_mode_name(int mode)
{
    return mha_key_value_name(mha_key_find("scaling.mode"), mode);
}

/* ---- defaults ---- */

void *mha_key_dest(const mha_key_def *k, mha_config_file *fc)
{
    return k->pub.field ? (char *)&fc->engine + k->off : (char *)fc + k->off;
}

void *mha_key_count_dest(const mha_key_def *k, mha_config_file *fc)
{
    return k->pub.field ? (char *)&fc->engine + k->count_off : (char *)fc + k->count_off;
}

/* Every key's default into fc, or into cfg alone (fc NULL): engine keys only. */
static void set_defaults(mha_config_file *fc, mha_config *cfg)
{
    for (int i = 0; i < mha_n_keys; i++) {
        const mha_key_def *k = &mha_keys[i];
        if (!fc && !k->pub.field)
            continue;
        void *dst = fc ? mha_key_dest(k, fc) : (char *)cfg + k->off;
        switch (k->pub.type) {
        case MHA_KEY_INT: case MHA_KEY_BOOL: case MHA_KEY_ENUM:
            *(int *)dst = (int)k->def;
            break;
        case MHA_KEY_UINT64:
            *(uint64_t *)dst = (uint64_t)k->def;
            break;
        default: /* strings and lists start empty (zeroed by the caller) */
            break;
        }
    }
}

MHA_API void mha_config_init(mha_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    set_defaults(NULL, cfg);
}

MHA_API void mha_config_file_default(mha_config_file *fc)
{
    if (!fc)
        return;
    memset(fc, 0, sizeof *fc);
    set_defaults(fc, NULL);
    snprintf(fc->name, sizeof fc->name, "default");
}

/* ---- the table-driven check of an engine config ---- */

static mha_status fail(mha_key_problem *p, const mha_key_def *k, int index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static mha_status fail(mha_key_problem *p, const mha_key_def *k, int index, const char *fmt, ...)
{
    p->key = k;
    p->index = index;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    return MHA_ERR_CONFIG;
}

static int in_names(const mha_key_def *k, int v)
{
    for (int i = 0; i < k->n_names; i++)
        if (k->names[i].value == v)
            return 1;
    return 0;
}

mha_status mha_config_verify(const mha_config *cfg, mha_key_problem *p)
{
    const char *base = (const char *)cfg;
    for (int i = 0; i < mha_n_keys; i++) {
        const mha_key_def *k = &mha_keys[i];
        if (!k->pub.field)
            continue;
        const void *src = base + k->off;
        int v = 0;
        switch (k->pub.type) {
        case MHA_KEY_INT:
            v = *(const int *)src;
            if (v < k->pub.min || v > k->pub.max)
                return fail(p, k, -1, "must be in %lld..%lld, got %d", k->pub.min, k->pub.max, v);
            break;
        case MHA_KEY_BOOL:
            v = *(const int *)src;
            if (v != 0 && v != 1)
                return fail(p, k, -1, "must be 0 or 1 (false or true), got %d", v);
            break;
        case MHA_KEY_ENUM:
            v = *(const int *)src;
            if (!in_names(k, v))
                return fail(p, k, -1, "unknown value %d (one of %s)", v, k->pub.values);
            break;
        case MHA_KEY_STRING:
            if (!memchr(src, '\0', (size_t)k->pub.max + 1))
                return fail(p, k, -1, "longer than %lld characters or not NUL-terminated", k->pub.max);
            break;
        case MHA_KEY_INT_LIST: {
            int n = *(const int *)(base + k->count_off);
            if (n < 0 || n > k->pub.max_count)
                return fail(p, k, -2, "must be in 0..%d, got %d", k->pub.max_count, n);
            for (int j = 0; j < n; j++) {
                v = ((const int *)src)[j];
                if (v < k->pub.min || v > k->pub.max)
                    return fail(p, k, j, "must be in %lld..%lld, got %d", k->pub.min, k->pub.max, v);
            }
            break;
        }
        default:
            break;
        }
    }
    /* what one key's range cannot say */
    if (cfg->d_model % cfg->n_heads)
        return fail(p, mha_key_find("model.heads"), -1, "%d does not divide d_model %d", cfg->n_heads, cfg->d_model);
    if (cfg->pinning == MHA_PIN_CPUS && cfg->n_cpus < 1)
        return fail(p, mha_key_find("threads.cpus"), -2, "must be in 1..%d with pinning cpus, got %d", MHA_MAX_CPUS,
                    cfg->n_cpus);
    return MHA_OK;
}

mha_status mha_config_problem_text(const mha_key_problem *p, char *err, size_t err_len)
{
    const mha_key_def *k = p->key;
    if (p->index == -2) /* a list's length: its count field */
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "n_%s: %s", k->pub.field, p->what);
    if (p->index >= 0)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s[%d]: %s", k->pub.field, p->index, p->what);
    return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: %s", k->pub.field, p->what);
}
