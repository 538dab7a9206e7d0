/* test_config_load.c — YAML configs: every rejection names file:line and the key, exit code 2
 * from the CLI; defaults; the built-in default matches configs/default.yaml. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "mha_io.h"
#include "config_file.h"
#include "helpers.h"

typedef struct ycase { char what[40]; char yaml[300]; mha_status status; char want[80]; } ycase;

#define MODEL "model: { d_model: 64, heads: 4 }\n"
ParameterizedTestParameters(config_load, rejects_bad_configs)
{
    static ycase cases[] = {
        {"unknown key", "model:\n  d_model: 64\n  heads: 4\n  colour: red\n", MHA_ERR_CONFIG, ":4: model.colour"},
        {"unknown block", MODEL "extra: { a: 1 }\n", MHA_ERR_CONFIG, ":2: extra"},
        {"wrong type", "model:\n  d_model: wide\n  heads: 4\n", MHA_ERR_CONFIG, ":2: model.d_model"},
        {"bool expected", "model: { d_model: 64, heads: 4, bias: maybe }\n", MHA_ERR_CONFIG, "model.bias"},
        {"heads not dividing", "model:\n  d_model: 64\n  heads: 5\n", MHA_ERR_CONFIG, ":3: model.heads: 5 does not divide d_model 64"},
        {"Q too wide", "model:\n  d_model: 64\n  heads: 4096\n  head_dim: 32\n", MHA_ERR_CONFIG,
         ":4: model.head_dim: 32 with 4096 heads: Q is 131072 wide, more than 65536"},
        {"negative head_dim", "model:\n  d_model: 64\n  heads: 4\n  head_dim: -8\n", MHA_ERR_CONFIG,
         ":4: model.head_dim: must be in 0..65536, got -8"},
        {"rotary_dim past head_dim", "model:\n  d_model: 64\n  heads: 4\n  head_dim: 8\n  rope: { style: neox, rotary_dim: 16 }\n",
         MHA_ERR_CONFIG, ":5: model.rope.rotary_dim: 16 must be even and at most d_k 8"},
        {"negative softcap", "model:\n  d_model: 64\n  heads: 4\n  softcap: -30\n", MHA_ERR_CONFIG,
         ":4: model.softcap: must be in 0..1e+06, got -30"},
        {"negative scale", "model:\n  d_model: 64\n  heads: 4\n  scale: -0.1\n", MHA_ERR_CONFIG,
         ":4: model.scale: must be in 0..1e+06, got -0.1"},
        {"ALiBi with RoPE", "model:\n  d_model: 64\n  heads: 4\n  rope: { style: neox }\n  alibi: { max_bias: 8 }\n",
         MHA_ERR_CONFIG, ":5: model.alibi.max_bias: 8 with model.rope.style neox: ALiBi and RoPE are two"},
        {"unknown QK-norm", "model:\n  d_model: 64\n  heads: 4\n  qk_norm: { kind: layer }\n", MHA_ERR_CONFIG,
         ":4: model.qk_norm.kind"},
        {"QK-norm eps 0", "model:\n  d_model: 64\n  heads: 4\n  qk_norm: { kind: head, eps: 0 }\n", MHA_ERR_CONFIG,
         ":4: model.qk_norm.eps: must be in (0..1, got 0"},
        {"sinks not a bool", "model:\n  d_model: 64\n  heads: 4\n  sinks: 3\n", MHA_ERR_CONFIG, ":4: model.sinks"},
        {"non-positive width", "model: { d_model: 0, heads: 4 }\n", MHA_ERR_CONFIG, ":1: model.d_model: must be in 1..65536, got 0"},
        {"length out of range", MODEL "batch:\n  seq_len: 16\n  lengths: [16, 17]\n", MHA_ERR_CONFIG, ":4: batch.lengths[1]: must be in 0..16 (seq_len), got 17"},
        {"negative batch", MODEL "batch: { size: -3 }\n", MHA_ERR_CONFIG, ":2: batch.size"},
        {"bad mask", MODEL "batch: { mask: sometimes }\n", MHA_ERR_CONFIG, ":2: batch.mask"},
        {"bad pinning", MODEL "threads: { pinning: tight }\n", MHA_ERR_CONFIG, ":2: threads.pinning"},
        {"too many threads", MODEL "threads: { count: 5000 }\n", MHA_ERR_CONFIG, ":2: threads.count: must be in 0..1024"},
        {"cpus pinning without cpus", MODEL "threads: { pinning: cpus }\n", MHA_ERR_CONFIG, ":2: threads.pinning"},
        {"cpu not ours", MODEL "threads: { pinning: cpus, cpus: [0, 1000] }\n", MHA_ERR_AFFINITY, ":2: threads.cpus: CPU 1000"},
        {"iters zero", MODEL "run: { iters: 0 }\n", MHA_ERR_CONFIG, ":2: run.iters"},
        {"scaling threads zero", MODEL "scaling: { threads: [1, 0] }\n", MHA_ERR_CONFIG, ":2: scaling.threads[1]"},
        {"scaling mode", MODEL "scaling: { mode: sideways }\n", MHA_ERR_CONFIG, "scaling.mode"},
        {"kv_lengths on self-attention", MODEL "batch: { kv_lengths: [3] }\n", MHA_ERR_CONFIG, ":2: batch.kv_lengths"},
        {"unknown BLIS kernel", MODEL "engine: { blis_arch: pentium4 }\n", MHA_ERR_CONFIG, ":2: engine.blis_arch"},
        {"unknown kernel table", MODEL "engine: { isa: avx9 }\n", MHA_ERR_CONFIG, ":2: engine.isa: 'avx9': unknown (auto, " TEST_TABLES ")"},
        {"sub-config of another table", MODEL "engine: { isa: ref, blis_arch: skx }\n", MHA_ERR_CONFIG,
         ":2: engine.blis_arch: 'skx' is not a sub-config of isa ref"},
        {"bf16 kernel of another table", MODEL "engine: { isa: ref, precision: bf16, bf16_kernel: fma-bf16 }\n",
         MHA_ERR_CONFIG, ":2: engine.bf16_kernel: 'fma-bf16': not a kernel of isa ref"},
        {"bf16 cache, f32 engine", MODEL "engine: { kv_cache: bf16 }\n", MHA_ERR_CONFIG,
         ":2: engine.kv_cache: bf16 with precision f32: an engine reads its own"},
        {"unknown cache", MODEL "engine: { kv_cache: fp8 }\n", MHA_ERR_CONFIG, ":2: engine.kv_cache"},
        {"unknown weight type", MODEL "weights: { type: iq2_xs }\n", MHA_ERR_CONFIG,
         ":2: weights.type: 'iq2_xs' is not one of f32, q8_0, q4_0"},
        {"missing model", "batch: { size: 2 }\n", MHA_ERR_CONFIG, "model"},
        {"missing heads", "model:\n  d_model: 64\n", MHA_ERR_CONFIG, "model.heads"},
        {"syntax error", MODEL "batch: { lengths: [1, 2 }\n", MHA_ERR_CONFIG, ":2: syntax: did not find expected"},
        {"not a mapping", "- 1\n- 2\n", MHA_ERR_CONFIG, ":1: a config is a mapping of blocks"},
        {"empty file", "", MHA_ERR_CONFIG, "empty"},
        {"list too long", MODEL "scaling: { pinning: [none, close, spread, cpus, none] }\n", MHA_ERR_CONFIG, "scaling.pinning"},
    };
    return cr_make_param_array(ycase, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(ycase *c, config_load, rejects_bad_configs, .timeout = 30)
{
    char dir[64], path[128], err[512], args[256];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/c.yaml", dir);
    write_file(path, c->yaml, strlen(c->yaml));
    static cli_config fc; /* the command's keys too: the file as the command reads it */
    mha_status st = cli_config_load(path, &fc, err, sizeof err);
    cr_assert_eq(st, c->status, "%s: status %s, want %s (%s)", c->what, mha_status_str(st), mha_status_str(c->status), err);
    cr_assert(strstr(err, path), "%s: message does not name the file: %s", c->what, err);
    cr_assert(strstr(err, c->want), "%s: message '%s' lacks '%s'", c->what, err, c->want);
    /* and the command line says the same, with exit code 2 */
    snprintf(args, sizeof args, "run %s --iters 1", path);
    char *out, *cerr;
    cr_assert_eq(run_cli(args, &out, &cerr), 2, "%s: %s", c->what, cerr);
    cr_assert(strstr(cerr, c->want), "%s: CLI message '%s' lacks '%s'", c->what, cerr, c->want);
    free(out), free(cerr);
    tmpdir_remove(dir);
}

/* A program's own keys (here "tool.level" and "tool.tags") load with the engine's through
 * mha_config_load_with: range errors and the program's cross-key rule (finish) say file:line:
 * key as the engine's do; without the rows the same file is refused, naming the key; a row
 * that repeats an engine key is a caller's error; failure leaves both outputs alone. */
typedef struct tool { int level; int tags[3], n_tags; int block_line; } tool;
static const mha_config_row tool_rows[] = {
    {.spec = {.key = "tool.level", .type = MHA_KEY_INT, .min = 0, .max = 9, .default_text = "3", .doc = "a level"},
     .off = offsetof(tool, level), .def = 3},
    {.spec = {.key = "tool.tags", .type = MHA_KEY_INT_LIST, .min = 0, .max = 99, .max_count = 3, .default_text = "none",
              .doc = "tags"}, .off = offsetof(tool, tags), .count_off = offsetof(tool, n_tags)},
};
static mha_status tool_finish(void *dest, const mha_config *engine, const mha_config_seen *seen)
{
    tool *t = dest;
    t->block_line = mha_config_seen_line(seen, "tool", -1);
    for (int i = 0; i < t->n_tags; i++)
        if (t->tags[i] >= engine->n_heads * 10)
            return mha_config_seen_fail(seen, "tool.tags", i, "%d: at most heads × 10 - 1", t->tags[i]);
    return MHA_OK;
}

Test(config_load, a_programs_own_rows_load_with_the_engines)
{
    tool t = {.level = -5};
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 999;
    const mha_config_client client = {.rows = tool_rows, .n_rows = 2, .dest = &t, .size = sizeof t, .finish = tool_finish};
    char err[512];
    const char *ok = MODEL "tool:\n  tags: [1,\n    2]\n";
    cr_assert_eq(mha_config_parse_with(ok, strlen(ok), "t.yaml", &cfg, &client, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(t.level == 3 && t.n_tags == 2 && t.tags[1] == 2 && t.block_line == 2 && cfg.d_model == 64);
    static const struct { const char *yaml, *want; } bad[] = {
        {MODEL "tool: { level: 10 }\n", "t.yaml:2: tool.level: must be in 0..9, got 10"},
        {MODEL "tool:\n  tags: [1,\n    45]\n", "t.yaml:4: tool.tags[1]: 45: at most heads × 10 - 1"},
        {MODEL "tool: { colour: red }\n", "t.yaml:2: tool.colour: unknown key (tool takes level, tags)"},
        {MODEL "batch: { seq_len: 4 }\ntool: { level: 1 }\nbatch: { size: 2 }\n", "t.yaml:4: batch: duplicate block (first on line 2)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t.level = -5, cfg.d_model = 999;
        cr_assert_eq(mha_config_parse_with(bad[i].yaml, strlen(bad[i].yaml), "t.yaml", &cfg, &client, err, sizeof err),
                     MHA_ERR_CONFIG, "%s accepted", bad[i].yaml);
        cr_assert(strstr(err, bad[i].want), "'%s' lacks '%s'", err, bad[i].want);
        cr_assert(t.level == -5 && cfg.d_model == 999, "outputs changed on failure");
    }
    /* the engine alone does not know the program's keys */
    const char *engine_alone = MODEL "tool: { level: 1 }\n";
    cr_assert_eq(mha_config_parse_with(engine_alone, strlen(engine_alone), "t.yaml", &cfg, NULL, err, sizeof err),
                 MHA_ERR_CONFIG);
    cr_assert(strstr(err, "t.yaml:2: tool: unknown key (a config takes model, batch, threads, engine, weights)"), "%s", err);
    /* nor the command's: a command's file needs its rows */
    const char *command = MODEL "run: { iters: 2 }\n";
    cr_assert_eq(mha_config_parse_with(command, strlen(command), "t.yaml", &cfg, NULL, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "t.yaml:2: run: unknown key"), "%s", err);
    /* a row that is the engine's, or twice the program's */
    mha_config_row twice[] = {tool_rows[0], tool_rows[0]};
    mha_config_row engine_key[] = {tool_rows[0]};
    engine_key[0].spec.key = "model.heads";
    const mha_config_client c2 = {.rows = twice, .n_rows = 2, .dest = &t, .size = sizeof t};
    const mha_config_client c3 = {.rows = engine_key, .n_rows = 1, .dest = &t, .size = sizeof t};
    cr_assert_eq(mha_config_parse_with(ok, strlen(ok), "t.yaml", &cfg, &c2, err, sizeof err), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(err, "client row 1 (tool.level)"), "%s", err);
    cr_assert_eq(mha_config_parse_with(ok, strlen(ok), "t.yaml", &cfg, &c3, err, sizeof err), MHA_ERR_INVALID_ARG);
    cr_assert(strstr(err, "client row 0 (model.heads)"), "%s", err);
}

Test(config_load, missing_file_is_an_io_error_and_exit_2)
{
    char err[256];
    mha_config cfg;
    cr_assert_eq(mha_config_load("/nonexistent/x.yaml", &cfg, err, sizeof err), MHA_ERR_IO);
    cr_assert(strstr(err, "/nonexistent/x.yaml") && strstr(err, "No such file"), "%s", err);
    char *out, *cerr;
    cr_assert_eq(run_cli("run /nonexistent/x.yaml", &out, &cerr), 2);
    cr_assert(strstr(cerr, "/nonexistent/x.yaml"), "%s", cerr);
    free(out), free(cerr);
    cr_assert_eq(mha_config_load(NULL, &cfg, err, sizeof err), MHA_ERR_INVALID_ARG);
}

Test(config_load, padding_without_lengths_is_an_error_with_its_line, .timeout = 30)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/p.yaml", dir);
    const char *yaml = MODEL "batch:\n  size: 2\n  mask: padding\n";
    write_file(path, yaml, strlen(yaml));
    snprintf(args, sizeof args, "run %s --iters 1", path);
    char *out, *err;
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, ":4: batch.mask"), "%s", err);
    free(out), free(err);
    /* with lengths from a file it runs */
    snprintf(args, sizeof args, "run %s --iters 1 --input tests/data/x.npy --lengths tests/data/lengths.npy", path);
    const char *yaml32 = "model: { d_model: 32, heads: 4 }\nbatch:\n  size: 2\n  mask: padding\n";
    write_file(path, yaml32, strlen(yaml32));
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    free(out), free(err);
    tmpdir_remove(dir);
}

Test(config_load, defaults_and_derived_values)
{
    char dir[64], path[128], err[256];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/my-model.yaml", dir);
    const char *yaml = MODEL "batch: { size: 5, seq_len: 9, lengths: [9, 3] }\nthreads: { cpus: [0] }\n";
    write_file(path, yaml, strlen(yaml));
    static cli_config fc;
    cr_assert_eq(cli_config_load(path, &fc, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_str_eq(fc.name, "my-model", "name defaults to the file's stem");
    cr_assert_eq(fc.engine.max_seq_kv, 9, "kv_len defaults to seq_len");
    cr_assert_eq(fc.cross, 0);
    cr_assert_eq(fc.engine.bias, 1);
    cr_assert_eq(fc.n_lengths, 2);
    cr_assert_eq(fc.engine.pinning, MHA_PIN_CPUS, "a cpus list alone pins to those CPUs");
    cr_assert_eq(fc.iters, 20);
    cr_assert_eq(fc.seed, 42);
    const mha_config *cfg = &fc.engine;
    cr_assert(cfg->d_model == 64 && cfg->n_heads == 4 && cfg->max_batch == 5 && cfg->max_seq_q == 9 && cfg->max_seq_kv == 9);
    /* the engine alone reads no batch.lengths: the command's key, refused by name */
    mha_config engine;
    cr_assert_eq(mha_config_load(path, &engine, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, ":2: batch.lengths: unknown key (batch takes size, seq_len, kv_len)"), "%s", err);
    tmpdir_remove(dir);
}

Test(config_load, built_in_default_is_configs_default_yaml, .timeout = 30)
{
    /* the command compiles configs/default.yaml in as text: with no CONFIG it runs that file */
    cli_config file;
    char err[256], *out, *cerr;
    cr_assert_eq(cli_config_load("configs/default.yaml", &file, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(run_cli("run --iters 1 --warmup 0", &out, &cerr), 0, "%s", cerr);
    char want[128];
    snprintf(want, sizeof want, "d_model %d, %d heads", file.engine.d_model, file.engine.n_heads);
    cr_assert(strstr(out, want), "'%s' not in %s", want, out);
    snprintf(want, sizeof want, "batch    %d × %d", file.engine.max_batch, file.engine.max_seq_q);
    cr_assert(strstr(out, want), "'%s' not in %s", want, out);
    free(out), free(cerr);
}

/* Three configs that between them set every key of the schema (RoPE's llama3 and yarn fields
 * exclude each other, and ALiBi excludes RoPE) load, so the loader's per-key tables hold the
 * whole schema however it grows; the test fails when a key is added without being set here. */
Test(config_load, configs_using_every_key_load, .timeout = 30)
{
    static const char common[] =
        "name: every-key\n"
        "model:\n  d_model: 64\n  heads: 4\n  head_dim: 16\n  v_head_dim: 16\n  bias: true\n  kv_heads: 2\n  window: 0\n"
        "  scale: 0.125\n  softcap: 30\n  sinks: true\n  qk_norm: { kind: head, eps: 1e-5, weight_offset: 1 }\n"
        "  %s\n"
        "batch: { size: 2, seq_len: 8, kv_len: 8, cross: true, mask: padding, lengths: [8, 5], kv_lengths: [8, 3] }\n"
        "threads: { count: 1, pinning: cpus, cpus: [%d] }\n"
        "run: { warmup: 1, iters: 1, seed: 7 }\n"
        "scaling: { threads: [1], pinning: [none], mode: strong, iters: 1 }\n"
        "decode: { seqs: 1, context: 8, new: 1, steps: 1, block_size: 4, prefill_chunk: 4 }\n"
        "engine: { q_block: 0, blis_arch: auto, precision: f32, bf16_kernel: auto, isa: auto, kv_cache: int8 }\n"
        "weights: { type: f32, activations: f32 }\n";
    static const char *model[] = {
        "rope: { style: neox, theta: 10000, rotary_dim: 16, factor: 2, original_max_position: 64, scaling: llama3, "
        "low_freq_factor: 1, high_freq_factor: 4 }",
        "rope: { style: neox, theta: 10000, rotary_dim: 16, factor: 2, original_max_position: 64, scaling: yarn, "
        "beta_fast: 32, beta_slow: 1, truncate: false }",
        "alibi: { max_bias: 8 }"};
    /* MLA's keys, without the keys it replaces (head_dim, kv_heads, QK-norm, sinks, softcap) */
    static const char mla[] =
        "model: { d_model: 64, heads: 4, rope: { style: gptj, scaling: yarn, factor: 40, original_max_position: 64,\n"
        "         mscale: 1, mscale_all_dim: 1 },\n"
        "         mla: { kv_lora_rank: 16, q_lora_rank: 24, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6,\n"
        "                eps: 1e-6 } }\n";
    enum { N = sizeof model / sizeof model[0] + 1 };
    char dir[64], path[128], err[512], yaml[N][1024];
    int cpu;
    cr_assert_geq(mha_cpus_allowed(&cpu, 1), 1);
    tmpdir_make(dir, sizeof dir);
    for (int i = 0; i < N; i++) {
        if (i < N - 1)
            snprintf(yaml[i], sizeof yaml[i], common, model[i], cpu);
        else
            snprintf(yaml[i], sizeof yaml[i], "%s", mla);
        snprintf(path, sizeof path, "%s/every%d.yaml", dir, i);
        write_file(path, yaml[i], strlen(yaml[i]));
        cli_config fc;
        mha_status st = cli_config_load(path, &fc, err, sizeof err);
        cr_assert_eq(st, MHA_OK, "%s: %s", yaml[i], err);
    }
    for (int k = 0; schema_key_at(k); k++) {
        /* the key's last name part, as written in the blocks above ("rope.factor" -> "factor:") */
        const char *key = schema_key_at(k)->key, *leaf = strrchr(key, '.') ? strrchr(key, '.') + 1 : key;
        char want[64];
        snprintf(want, sizeof want, "%s:", leaf);
        int found = 0;
        for (int i = 0; i < N; i++)
            found |= strstr(yaml[i], want) != NULL;
        cr_assert(found, "key %s is set by no config", key);
    }
    tmpdir_remove(dir);
}

/* weights.type: one type for the four projections; a base config (a GGUF layer's) is the start,
 * its per-matrix types kept unless the file names one, and the model keys not required. */
Test(config_load, weights_type_fills_the_four_and_a_base_is_overridden)
{
    static const char text[] = "model: { d_model: 256, heads: 4 }\nweights: { type: q4_k }\n";
    mha_config c;
    char err[256];
    cr_assert_eq(mha_config_parse_with(text, sizeof text - 1, "w.yaml", &c, NULL, err, sizeof err), MHA_OK, "%s", err);
    for (int i = 0; i < MHA_W_COUNT; i++)
        cr_assert_eq(c.weight_type[i], MHA_WEIGHT_Q4_K, "matrix %d", i);
    mha_config base;
    mha_config_init(&base);
    base.bias = 0;
    for (int i = 0; i < MHA_W_COUNT; i++) /* Q4_K_M's mix: V in Q6_K */
        base.weight_type[i] = i == MHA_W_V ? MHA_WEIGHT_Q6_K : MHA_WEIGHT_Q4_K;
    base.d_model = 512, base.n_heads = 8, base.n_kv_heads = 2;
    const mha_config_client cl = {.base = &base};
    static const char runtime[] = "threads: { count: 1 }\nbatch: { seq_len: 12 }\n";
    cr_assert_eq(mha_config_parse_with(runtime, sizeof runtime - 1, "r.yaml", &c, &cl, err, sizeof err), MHA_OK, "%s",
                 err);
    cr_assert(c.d_model == 512 && c.n_heads == 8 && c.n_kv_heads == 2 && !c.bias, "the base's model");
    cr_assert(c.threads == 1 && c.max_seq_q == 12 && c.max_seq_kv == 12, "the file's run-time keys");
    cr_assert(c.weight_type[MHA_W_V] == MHA_WEIGHT_Q6_K && c.weight_type[MHA_W_Q] == MHA_WEIGHT_Q4_K);
    static const char over[] = "model: { kv_heads: 1 }\nweights: { type: q8_0 }\n";
    cr_assert_eq(mha_config_parse_with(over, sizeof over - 1, "o.yaml", &c, &cl, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(c.n_kv_heads == 1 && c.d_model == 512 && c.weight_type[MHA_W_V] == MHA_WEIGHT_Q8_0);
    static const char bad[] = "model: { kv_heads: 3 }\n";
    cr_assert_eq(mha_config_parse_with(bad, sizeof bad - 1, "b.yaml", &c, &cl, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "b.yaml:1: model.kv_heads"), "%s", err);
}
