/* fuzz_config.c — libFuzzer target: the YAML config loader (the schema's rows, the engine's and
 * the command's, the line map, every range check). Any input must give MHA_OK or an error with
 * a message. */
#include <string.h>

#include "config_file.h"
#include "mha_io.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_config fc;
    char err[512] = "";
    cli_config_default(&fc);
    mha_status st = cli_config_load(fuzz_path(data, size), &fc, err, sizeof err);
    if (st != MHA_OK && !err[0])
        abort(); /* every failure explains itself */
    mha_config cfg;
    st = mha_config_load(fuzz_path(data, size), &cfg, err, sizeof err);
    if (st != MHA_OK && !err[0])
        abort();
    return 0;
}
