/* test_config_schema.c — the one key table drives mha_config_init, mha_config_check and the
 * YAML loader; the loader is strict where YAML is loose (integers, documents, duplicates,
 * aliases, control characters) and keeps every key of a long file; docs/config.md's key
 * tables are the tables `mha schema` prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "config.h"
#include "config_file.h"
#include "helpers.h"

#define MODEL "model: { d_model: 64, heads: 4 }\n"

static mha_status load_text(const char *yaml, cli_config *fc, char *err, size_t n)
{
    return cli_config_parse(yaml, strlen(yaml), "t.yaml", fc, err, n);
}

/* A batch.lengths list of 600 entries once made the loader drop every later key: key
 * presence came from a 512-entry line map. */
Test(config_schema, keys_after_a_long_list_are_read_and_checked)
{
    size_t cap = 16384;
    char *yaml = malloc(cap);
    size_t k = (size_t)snprintf(yaml, cap, MODEL "batch:\n  seq_len: 64\n  lengths: [");
    for (int i = 0; i < 600; i++)
        k += (size_t)snprintf(yaml + k, cap - k, "%s%d", i ? ", " : "", 1 + i % 64);
    size_t base = k + (size_t)snprintf(yaml + k, cap - k, "]\n");
    static cli_config fc;
    char err[512];
    const char *tails[] = {
        "threads: { count: 1 }\nrun: { warmup: 5, iters: 7 }\nengine: { q_block: 16 }\n",
        "run: { warmup: -7 }\n", "run: { iters: 0 }\n", "engine: { q_block: -3 }\n",
    };
    const char *want[] = {NULL, "run.warmup: must be in 0..1000000, got -7", "run.iters: must be in 1..1000000, got 0",
                          "engine.q_block: must be in 0..1048576, got -3"};
    for (int t = 0; t < 4; t++) {
        snprintf(yaml + base, cap - base, "%s", tails[t]);
        mha_status st = load_text(yaml, &fc, err, sizeof err);
        if (!want[t]) {
            cr_assert_eq(st, MHA_OK, "%s", err);
            cr_assert_eq(fc.n_lengths, 600);
            cr_assert_eq(fc.lengths[599], 1 + 599 % 64);
            cr_assert_eq(fc.engine.threads, 1, "threads.count after the list was dropped");
            cr_assert_eq(fc.warmup, 5);
            cr_assert_eq(fc.iters, 7);
            cr_assert_eq(fc.engine.q_block, 16);
        } else {
            cr_assert_eq(st, MHA_ERR_CONFIG, "%s accepted", tails[t]);
            cr_assert(strstr(err, ":5: ") && strstr(err, want[t]), "'%s' lacks line 5 and '%s'", err, want[t]);
        }
    }
    free(yaml);
}

typedef struct scase { char what[40]; char yaml[200]; char want[100]; } scase;

ParameterizedTestParameters(config_schema, strict_values)
{
    static scase cases[] = {
        {"exponent", MODEL "batch: { seq_len: 1e6 }\n", ":2: batch.seq_len: expected an integer, got '1e6'"},
        {"junk after digits", MODEL "batch: { seq_len: 64abc }\n", "batch.seq_len: expected an integer, got '64abc'"},
        {"fraction", MODEL "batch: { seq_len: 64.9 }\n", "batch.seq_len: expected an integer, got '64.9'"},
        {"underscore", MODEL "batch: { seq_len: 6_4 }\n", "expected an integer, got '6_4'"},
        {"octal", MODEL "batch: { seq_len: 0o100 }\n", "expected an integer, got '0o100'"},
        {"leading zero", MODEL "batch: { seq_len: 010 }\n", "expected an integer, got '010'"},
        {"hex", MODEL "batch: { seq_len: 0x40 }\n", "expected an integer, got '0x40'"},
        {"quoted integer", MODEL "batch: { seq_len: \"64\" }\n", "expected an integer, got '64'"},
        {"huge", MODEL "batch: { seq_len: 99999999999999999999999 }\n", "expected an integer"},
        {"negative seed", MODEL "run: { seed: -1 }\n", ":2: run.seed: expected an integer in 0..18446744073709551615"},
        {"seed past 2^64", MODEL "run: { seed: 18446744073709551616 }\n", "run.seed: expected an integer"},
        {"second document", MODEL "---\nmodel: { d_model: 64, heads: 4, bias: true }\n", ":2: a second YAML document"},
        {"duplicate key", "model:\n  d_model: 64\n  heads: 4\n  heads: 8\n", ":4: model.heads: duplicate key (first on line 3)"},
        {"duplicate block", MODEL "run: { iters: 2 }\nrun: { iters: 3 }\n", ":3: run: duplicate block"},
        {"alias", "model: &m { d_model: 64, heads: 4 }\nbatch: *m\n", "anchors and aliases are not supported"},
        {"control character in name", "name: \"a\\e[31mb\"\n" MODEL, ":1: name: contains a control character"},
        {"name too long", "name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" MODEL,
         ":1: name: longer than 63 characters"},
        {"list where a number goes", MODEL "batch: { size: [1, 2] }\n", ":2: batch.size: expected an integer, got a list"},
        {"mapping in a list", MODEL "batch: { lengths: [1, {a: 2}] }\n", "batch.lengths: entries must be single values"},
        {"number where a block goes", MODEL "batch: 3\n", ":2: batch: expected a mapping of keys (size, seq_len"},
        {"unknown top-level key", MODEL "modle: {}\n", ":2: modle: unknown key (a config takes model, batch, threads, engine, weights, name, run"},
        {"bool spelled as number", "model: { d_model: 64, heads: 4, bias: 1 }\n", "model.bias: expected true or false, got '1'"},
        {"too many entries", MODEL "scaling: { pinning: [none, close, spread, cpus, none] }\n", "scaling.pinning: more than 4 entries"},
        /* decoder keys */
        {"kv_heads not dividing", "model: { d_model: 64, heads: 4, kv_heads: 3 }\n", ":1: model.kv_heads: 3 does not divide heads 4"},
        {"odd rotary_dim", "model: { d_model: 64, heads: 4, rope: { style: neox, rotary_dim: 7 } }\n",
         ":1: model.rope.rotary_dim: 7 must be even and at most d_k 16"},
        {"rotary_dim above d_k", "model: { d_model: 64, heads: 4, rope: { style: neox, rotary_dim: 18 } }\n",
         "model.rope.rotary_dim: 18 must be even and at most d_k 16"},
        {"unknown rope style", "model: { d_model: 64, heads: 4, rope: { style: spiral } }\n",
         "model.rope.style: 'spiral' is not one of none, neox, gptj"},
        {"unknown rope scaling", "model: { d_model: 64, heads: 4, rope: { style: neox, scaling: ntk } }\n",
         "model.rope.scaling: 'ntk' is not one of none, linear, llama3, yarn"},
        {"negative window", "model: { d_model: 64, heads: 4, window: -1 }\n", ":1: model.window: must be in 0..1048576, got -1"},
        {"theta without a style", "model:\n  d_model: 64\n  heads: 4\n  rope: { theta: 500000 }\n",
         ":4: model.rope.theta: given, but rope style none, scaling none do not read it"},
        {"llama3 without its context", "model: { d_model: 64, heads: 4, rope: { style: neox, scaling: llama3, factor: 8 } }\n",
         "model.rope.original_max_position: llama3 scaling needs it"},
        {"beta with llama3", "model: { d_model: 64, heads: 4, rope: { style: neox, scaling: llama3, factor: 8, "
         "original_max_position: 8192, beta_fast: 16 } }\n", "model.rope.beta_fast: given, but rope style neox, scaling llama3"},
        {"theta not a number", "model: { d_model: 64, heads: 4, rope: { style: neox, theta: 1e4x } }\n",
         "model.rope.theta: expected a number, got '1e4x'"},
        {"theta zero", "model: { d_model: 64, heads: 4, rope: { style: neox, theta: 0 } }\n",
         "model.rope.theta: must be in (0..1e+12, got 0"},
        {"decode context past the positions", MODEL "decode:\n  context: 1048576\n  steps: 2\n",
         ":2: decode: context 1048576 + new 1 × steps 2 is past 1048576 positions"},
        {"decode block of the wrong type", MODEL "decode: [1, 2]\n", ":2: decode: expected a mapping of keys (seqs, context"},
    };
    return cr_make_param_array(scase, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(scase *c, config_schema, strict_values)
{
    static cli_config fc;
    char err[512] = "";
    cli_config_default(&fc);
    fc.iters = 12345; /* a failed load leaves its output as it was */
    mha_status st = load_text(c->yaml, &fc, err, sizeof err);
    cr_assert_eq(st, MHA_ERR_CONFIG, "%s: accepted (%s)", c->what, mha_status_str(st));
    cr_assert(strstr(err, "t.yaml") && strstr(err, c->want), "%s: '%s' lacks '%s'", c->what, err, c->want);
    cr_assert_eq(fc.iters, 12345, "%s: output changed on failure", c->what);
}

Test(config_schema, largest_values_are_taken)
{
    static cli_config fc;
    char err[256];
    const char *yaml = MODEL "run: { seed: 18446744073709551615, iters: 1000000 }\nbatch: { seq_len: +64 }\n";
    cr_assert_eq(load_text(yaml, &fc, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(fc.seed, UINT64_MAX);
    cr_assert_eq(fc.iters, 1000000);
    cr_assert_eq(fc.engine.max_seq_q, 64);
}

/* For every integer key of the table: one past its range is refused, by the loader with the
 * YAML key and line, and for engine keys by mha_config_check with the C field, both quoting
 * the table's range. mha_config_init holds the table's defaults. */
Test(config_schema, every_integer_key_is_range_checked_from_the_table)
{
    static cli_config fc;
    char yaml[256], err[512], want[160];
    int checked = 0;
    for (int i = 0; schema_key_at(i); i++) {
        const mha_config_key *k = schema_key_at(i);
        if (k->type != MHA_KEY_INT)
            continue;
        const char *dot = strchr(k->key, '.');
        cr_assert(dot, "%s: integer keys live in blocks", k->key);
        for (int side = 0; side < 2; side++) {
            long long bad = side ? k->max + 1 : k->min - 1;
            if (!strcmp(k->key, "model.d_model") || !strcmp(k->key, "model.heads"))
                snprintf(yaml, sizeof yaml, "model: { %s: %lld, %s: %s }\n", dot + 1, bad,
                         !strcmp(k->key, "model.heads") ? "d_model" : "heads", !strcmp(k->key, "model.heads") ? "64" : "1");
            else if (!strncmp(k->key, "model.rope.", 11))
                snprintf(yaml, sizeof yaml, "model: { d_model: 64, heads: 4, rope: { style: neox, %s: %lld } }\n", k->key + 11,
                         bad);
            else if (!strncmp(k->key, "model.", 6))
                snprintf(yaml, sizeof yaml, "model: { d_model: 64, heads: 4, %s: %lld }\n", k->key + 6, bad);
            else
                snprintf(yaml, sizeof yaml, MODEL "%.*s: { %s: %lld }\n", (int)(dot - k->key), k->key, dot + 1, bad);
            cr_assert_eq(load_text(yaml, &fc, err, sizeof err), MHA_ERR_CONFIG, "%s = %lld accepted", k->key, bad);
            snprintf(want, sizeof want, "%s: must be in %lld..%lld, got %lld", k->key, k->min, k->max, bad);
            cr_assert(strstr(err, want), "'%s' lacks '%s'", err, want);
            checked++;
        }
        if (!k->field)
            continue;
        const mha_config_row *def = mha_key_find(k->key);
        mha_config cfg;
        mha_config_init(&cfg);
        cr_assert_eq(*(int *)((char *)&cfg + def->off), (int)def->def, "mha_config_init: %s", k->field);
        if (!strncmp(k->field, "rope.", 5))
            cfg.rope.style = MHA_ROPE_NEOX, cfg.rope.scaling = MHA_ROPE_SCALING_YARN; /* on, reading them all */
        *(int *)((char *)&cfg + def->off) = (int)k->max + 1;
        cr_assert_neq(mha_config_check(&cfg, err, sizeof err), MHA_OK, "%s = max + 1 accepted", k->field);
        snprintf(want, sizeof want, "%s: must be in %lld..%lld, got %lld", k->field, k->min, k->max, k->max + 1);
        cr_assert(strstr(err, want), "'%s' lacks '%s'", err, want);
    }
    cr_assert_geq(checked, 16);
}

Test(config_schema, docs_key_table_is_the_schema, .timeout = 30)
{
    char *out, *err;
    cr_assert_eq(run_cli("schema", &out, &err), 0, "%s", err);
    char *docs = read_text("docs/config.md");
    cr_assert(strstr(docs, out), "docs/config.md lacks the tables `mha schema` prints:\n%s", out);
    /* and no key row in the docs that the tables do not have */
    for (const char *p = docs; (p = strstr(p, "\n| `")) != NULL; p++) {
        char key[64];
        if (sscanf(p, "\n| `%63[^`]`", key) == 1 && strchr(key, '.'))
            cr_assert(mha_key_find(key) || cli_config_row(key) || !strchr(key, ' '), "docs/config.md names key '%s' that the schema lacks", key);
    }
    free(out), free(err), free(docs);
}

Test(config_schema, parse_from_text_and_failure_leaves_output_alone)
{
    static cli_config fc;
    char err[256];
    cr_assert_eq(load_text("name: mine\n" MODEL, &fc, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_str_eq(fc.name, "mine");
    cr_assert_str_eq(fc.path, "");
    cr_assert_eq(fc.engine.d_model, 64);
    cr_assert_eq(fc.engine.max_batch, 1, "batch.size's table default");
    cr_assert_eq(cli_config_parse(NULL, 0, "x", &fc, err, sizeof err), MHA_ERR_INVALID_ARG);
    cr_assert_eq(load_text("", &fc, err, sizeof err), MHA_ERR_CONFIG);
    cr_assert(strstr(err, "empty"), "%s", err);
    cr_assert_str_eq(fc.name, "mine", "a failed parse keeps the earlier result");
}

/* scaling.pinning (the command's) takes the words of threads.pinning (the engine's): its own
 * copy of the table, kept equal here. */
Test(config_schema, the_commands_pinning_words_are_the_engines)
{
    const mha_config_row *cmd = cli_config_row("scaling.pinning"), *eng = mha_key_find("threads.pinning");
    cr_assert(cmd && eng);
    cr_assert_str_eq(cmd->spec.values, eng->spec.values);
    cr_assert_eq(cmd->n_names, eng->n_names);
    for (int i = 0; i < eng->n_names; i++)
        cr_assert_str_eq(mha_config_value_name(cmd, eng->names[i].value), eng->names[i].name);
}
