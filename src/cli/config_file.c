/* config_file.c — the mha command's keys (generated batch, run, scaling, decode, name) as rows
 * of libmha's schema, and their cross-key rules; libmha reads the file and checks each value
 * against its row. docs/config.md's key tables are printed from these rows and the engine's
 * (`mha schema`). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config_file.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define AT(f) offsetof(cli_config, f)
#define MILLION 1000000

_Static_assert(sizeof(mha_mask_kind) == sizeof(int) && sizeof(mha_scale_mode) == sizeof(int) &&
                   sizeof(mha_pinning) == sizeof(int),
               "enum fields are stored as int");

static const mha_config_name mask_names[] = {
    {"none", MHA_MASK_NONE}, {"causal", MHA_MASK_CAUSAL}, {"padding", MHA_MASK_PADDING}};
/* threads.pinning's words (config_schema.c), for scaling.pinning: a test keeps the two equal */
static const mha_config_name pinning_names[] = {
    {"none", MHA_PIN_NONE}, {"close", MHA_PIN_CLOSE}, {"spread", MHA_PIN_SPREAD}, {"cpus", MHA_PIN_CPUS}};
static const mha_config_name mode_names[] = {
    {"strong", MHA_SCALE_STRONG}, {"weak", MHA_SCALE_WEAK}, {"both", MHA_SCALE_BOTH}};

/* An integer key: its range, default (text and value), meaning. */
#define INT_ROW(k, lo, hi, dtext, d, meaning, f) \
    {.spec = {.key = k, .type = MHA_KEY_INT, .min = lo, .max = hi, .default_text = dtext, .doc = meaning}, .off = AT(f), .def = d}

static const mha_config_row rows[] = {
    {.spec = {.key = "name", .type = MHA_KEY_STRING, .max = 63, .default_text = "the file's stem",
              .doc = "the model's name in reports"}, .off = AT(name)},
    {.spec = {.key = "batch.cross", .type = MHA_KEY_BOOL, .max = 1, .default_text = "false",
              .doc = "generate separate key/value inputs"}, .off = AT(cross)},
    {.spec = {.key = "batch.mask", .type = MHA_KEY_ENUM, .values = "none, causal, padding", .default_text = "none",
              .doc = "mask of generated inputs; padding needs lengths"},
     .off = AT(mask), .def = MHA_MASK_NONE, .names = mask_names, .n_names = (int)N_OF(mask_names)},
    {.spec = {.key = "batch.lengths", .type = MHA_KEY_INT_LIST, .max = 1 << 20, .max_count = MHA_MAX_LENGTHS,
              .default_text = "none", .doc = "valid query tokens per sequence (<= seq_len), repeated over the batch"},
     .off = AT(lengths), .count_off = AT(n_lengths)},
    {.spec = {.key = "batch.kv_lengths", .type = MHA_KEY_INT_LIST, .max = 1 << 20, .max_count = MHA_MAX_LENGTHS,
              .default_text = "none", .doc = "valid key tokens per sequence (<= kv_len), cross-attention only"},
     .off = AT(kv_lengths), .count_off = AT(n_kv_lengths)},
    INT_ROW("run.warmup", 0, MILLION, "3", 3, "untimed forwards first", warmup),
    INT_ROW("run.iters", 1, MILLION, "20", 20, "timed forwards", iters),
    {.spec = {.key = "run.seed", .type = MHA_KEY_UINT64, .default_text = "42", .doc = "seed of generated inputs and weights"},
     .off = AT(seed), .def = 42},
    {.spec = {.key = "scaling.threads", .type = MHA_KEY_INT_LIST, .min = 1, .max = MHA_MAX_THREADS,
              .max_count = MHA_MAX_SCALE_POINTS, .default_text = "1 .. the CPUs allowed", .doc = "thread counts of mha scale"},
     .off = AT(scale_threads), .count_off = AT(n_scale_threads)},
    {.spec = {.key = "scaling.pinning", .type = MHA_KEY_ENUM_LIST, .max_count = 4, .values = "none, close, spread, cpus",
              .default_text = "none, close, spread", .doc = "pinnings of mha scale"},
     .off = AT(scale_pinning), .count_off = AT(n_scale_pinning), .names = pinning_names, .n_names = (int)N_OF(pinning_names)},
    {.spec = {.key = "scaling.mode", .type = MHA_KEY_ENUM, .values = "strong, weak, both", .default_text = "strong",
              .doc = "strong: fixed batch; weak: batch × threads"},
     .off = AT(scale_mode), .def = MHA_SCALE_STRONG, .names = mode_names, .n_names = (int)N_OF(mode_names)},
    INT_ROW("scaling.iters", 1, MILLION, "run.iters", 20, "timed forwards per point", scale_iters),
    INT_ROW("decode.seqs", 1, 65536, "1", 1, "sequences decoded together (a decode block makes mha run decode)", decode_seqs),
    INT_ROW("decode.context", 1, 1 << 20, "128", 128, "tokens each sequence is prefilled to", decode_context),
    INT_ROW("decode.new", 1, 4096, "1", 1, "new tokens per sequence per decode step", decode_new),
    INT_ROW("decode.steps", 1, MILLION, "16", 16, "decode steps timed", decode_steps),
    INT_ROW("decode.block_size", 1, 65536, "16", 16, "token slots per KV cache block", decode_block_size),
    INT_ROW("decode.prefill_chunk", 1, 1 << 20, "256", 256, "prefill tokens per sequence per step", decode_prefill_chunk),
};

const mha_config_row *cli_config_row_at(int i) { return i >= 0 && i < (int)N_OF(rows) ? &rows[i] : NULL; }

const mha_config_row *cli_config_row(const char *key)
{
    for (size_t i = 0; i < N_OF(rows); i++)
        if (!strcmp(rows[i].spec.key, key))
            return &rows[i];
    return NULL;
}

const char *cli_mask_name(int mask) { return mha_config_value_name(cli_config_row("batch.mask"), mask); }
const char *cli_scale_mode_name(int mode) { return mha_config_value_name(cli_config_row("scaling.mode"), mode); }

/* Each entry of a lengths list within its bound (seq_len or kv_len). */
static mha_status check_list(const mha_config_seen *seen, const char *key, const int *v, int n, int max, const char *bound)
{
    for (int i = 0; i < n; i++)
        if (v[i] > max)
            return mha_config_seen_fail(seen, key, i, "must be in 0..%d (%s), got %d", max, bound, v[i]);
    return MHA_OK;
}

/* What one key's type and range cannot say, once libmha has read the file and checked the
 * engine's keys. */
static mha_status finish(void *dest, const mha_config *c, const mha_config_seen *seen)
{
    cli_config *fc = dest;
    fc->engine = *c;
    if (!mha_config_seen_line(seen, "name", -1)) { /* the file's stem */
        const char *origin = mha_config_seen_origin(seen), *base = strrchr(origin, '/') ? strrchr(origin, '/') + 1 : origin;
        snprintf(fc->name, sizeof fc->name, "%.*s", (int)strcspn(base, "."), base);
        for (const char *p = fc->name; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                snprintf(fc->name, sizeof fc->name, "config");
    }
    fc->cross = fc->cross || c->max_seq_kv != c->max_seq_q;
    mha_status st = check_list(seen, "batch.lengths", fc->lengths, fc->n_lengths, c->max_seq_q, "seq_len");
    if (st != MHA_OK)
        return st;
    if (fc->n_kv_lengths && !fc->cross)
        return mha_config_seen_fail(seen, "batch.kv_lengths", -1,
                                    "needs cross-attention (kv_len different from seq_len, or cross: true)");
    if ((st = check_list(seen, "batch.kv_lengths", fc->kv_lengths, fc->n_kv_lengths, c->max_seq_kv, "kv_len")) != MHA_OK)
        return st;
    if (!mha_config_seen_line(seen, "scaling.iters", -1))
        fc->scale_iters = fc->iters;
    fc->decode = mha_config_seen_line(seen, "decode", -1) > 0;
    if (fc->decode && (long)fc->decode_context + (long)fc->decode_new * fc->decode_steps > (1 << 20))
        return mha_config_seen_fail(seen, "decode", -1, "context %d + new %d × steps %d is past 1048576 positions",
                                    fc->decode_context, fc->decode_new, fc->decode_steps);
    if (c->mla.kv_lora_rank && fc->cross)
        return mha_config_seen_fail(seen, mha_config_seen_line(seen, "batch.cross", -1) ? "batch.cross" : "batch.kv_len", -1,
                                    "not with model.mla (self-attention: its one KV head is made from the queries' tokens)");
    fc->line_mask = mha_config_seen_line(seen, "batch.mask", -1);
    fc->line_lengths = mha_config_seen_line(seen, "batch.lengths", -1);
    fc->line_threads = mha_config_seen_line(seen, "threads.count", -1);
    fc->line_v_head_dim = mha_config_seen_line(seen, "model.v_head_dim", -1);
    return MHA_OK;
}

mha_status cli_config_projections(const cli_config *fc, char *err, size_t err_len)
{
    const int dk = mha_config_head_dim(&fc->engine), dv = fc->engine.v_head_dim;
    if (!dv || dv == dk)
        return MHA_OK;
    snprintf(err, err_len, "%s:%d: model.v_head_dim: %d below head_dim %d runs with mha run --core only (the "
             "projections and the KV cache take V of head_dim)", fc->path[0] ? fc->path : "<config>",
             fc->line_v_head_dim, dv, dk);
    return MHA_ERR_CONFIG;
}

static mha_config_client client_of(cli_config *fc)
{
    return (mha_config_client){.rows = rows, .n_rows = (int)N_OF(rows), .dest = fc, .size = sizeof *fc, .finish = finish};
}

void cli_config_default(cli_config *fc)
{
    const mha_config_client c = client_of(fc);
    mha_config_client_init(&c);
    mha_config_init(&fc->engine);
    fc->scale_iters = fc->iters;
    snprintf(fc->name, sizeof fc->name, "default");
}

mha_status cli_config_parse(const char *text, size_t len, const char *origin, cli_config *fc, char *err, size_t err_len)
{
    if (!fc)
        return mha_config_parse_with(text, len, origin, NULL, NULL, err, err_len); /* its NULL-argument message */
    const mha_config_client c = client_of(fc);
    mha_config engine;
    mha_status st = mha_config_parse_with(text, len, origin, &engine, &c, err, err_len);
    if (st == MHA_OK)
        fc->path[0] = '\0';
    return st;
}

mha_status cli_config_load_onto(const char *path, const mha_config *base, cli_config *fc, char *err, size_t err_len)
{
    mha_config_client c = client_of(fc);
    c.base = base;
    mha_config engine;
    mha_status st = mha_config_load_with(path, &engine, &c, err, err_len);
    if (st == MHA_OK)
        snprintf(fc->path, sizeof fc->path, "%s", path);
    return st;
}

mha_status cli_config_load(const char *path, cli_config *fc, char *err, size_t err_len)
{
    if (!fc)
        return mha_config_load_with(path, NULL, NULL, err, err_len);
    const mha_config_client c = client_of(fc);
    mha_config engine;
    mha_status st = mha_config_load_with(path, &engine, &c, err, err_len);
    if (st == MHA_OK)
        snprintf(fc->path, sizeof fc->path, "%s", path);
    return st;
}
