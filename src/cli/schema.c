/* schema.c — `mha schema`: the config key tables (the engine's, mha_config_key_at, and the
 * command's, cli_config_row_at) as Markdown, the tables docs/config.md holds (a
 * test checks that the two are the same text). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *type_name(mha_key_type t)
{
    switch (t) {
    case MHA_KEY_INT: return "integer";
    case MHA_KEY_UINT64: return "integer";
    case MHA_KEY_BOOL: return "bool";
    case MHA_KEY_ENUM: return "word";
    case MHA_KEY_STRING: return "string";
    case MHA_KEY_INT_LIST: return "integer list";
    case MHA_KEY_ENUM_LIST: return "word list";
    case MHA_KEY_FLOAT: return "number";
    }
    return "?";
}

static void print_key(const mha_config_key *k)
{
    char values[96];
    switch (k->type) {
    case MHA_KEY_ENUM: case MHA_KEY_ENUM_LIST:
        snprintf(values, sizeof values, "%s", k->values);
        break;
    case MHA_KEY_STRING:
        snprintf(values, sizeof values, "up to %lld characters", k->max);
        break;
    case MHA_KEY_UINT64:
        snprintf(values, sizeof values, "0 .. 2^64-1");
        break;
    case MHA_KEY_BOOL:
        snprintf(values, sizeof values, "true, false");
        break;
    case MHA_KEY_FLOAT:
        snprintf(values, sizeof values, "%s %g, <= %g", k->fmin_open ? ">" : ">=", k->fmin, k->fmax);
        break;
    default:
        snprintf(values, sizeof values, "%lld .. %lld", k->min, k->max);
    }
    if (k->max_count)
        snprintf(values + strlen(values), sizeof values - strlen(values), "; up to %d entries", k->max_count);
    printf("| `%s`%s | %s | %s | %s | %s%s%s%s |\n", k->key, k->required ? " (required)" : "", type_name(k->type), values,
           k->default_text, k->doc, k->field ? " (`mha_config." : "", k->field ? k->field : "", k->field ? "`)" : "");
}

/* Two tables: the engine's keys (libmha's schema, each filling a field of mha_config), then
 * the command's own (src/cli/config_file.c). */
int mha_cli_schema(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        cli_error("schema: takes no arguments");
        return EXIT_USAGE;
    }
    static const char head[] = "| key | type | values | default | meaning |\n|---|---|---|---|---|\n";
    printf("The engine's keys (`mha_config_load`):\n\n%s", head);
    for (int i = 0; mha_config_key_at(i); i++)
        print_key(mha_config_key_at(i));
    printf("\nThe mha command's keys (generated inputs, timing, scaling, decode):\n\n%s", head);
    for (int i = 0; cli_config_row_at(i); i++)
        print_key(&cli_config_row_at(i)->spec);
    return EXIT_OK;
}
