/* main.c — the mha command: dispatch to run, scale, info and schema. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mha run [CONFIG] [options]   run the engine (mha run --help)\n"
"       mha scale CONFIG [options]   thread-scaling sweep: CSV, Markdown, plots (mha scale --help)\n"
               "       mha info                     CPU, cores, BLIS and OpenMP as the engine sees them\n"
               "       mha info M.gguf              a GGUF model: its attention's config, tensors and types\n"
               "       mha schema                   the config file's keys as a Markdown table\n"
               "       mha --version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run"))
        return mha_cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "scale"))
        return mha_cli_scale(argc - 1, argv + 1);
    if (!strcmp(cmd, "info"))
        return mha_cli_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "schema"))
        return mha_cli_schema(argc - 1, argv + 1);
    if (!strcmp(cmd, "--version")) {
        printf("mha %s (BLIS %s)\n", mha_version_string(), mha_blis_version());
        return EXIT_OK;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return EXIT_OK;
    }
    cli_error("unknown command '%s'", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
