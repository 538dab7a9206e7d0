/* config.h — the config schema table and config validation (the YAML loader's side; the
 * compute modules need only dims.h). */
#ifndef MHA_CONFIG_H
#define MHA_CONFIG_H

#include <stddef.h>

#include "dims.h"
#include "mha.h"
#include "mha_io.h"
#include "status.h"

/* The widest model (d_model's range), the widest Q (n_heads·d_k) and the largest head_dim. */
#define MHA_MAX_WIDTH 65536

/* ---- the schema (config_schema.c) ---- */

/* The engine's rows (mha_config_row, mha_io.h): off and count_off are offsets in mha_config. */
extern const mha_config_row mha_keys[];
extern const int mha_n_keys;

/* The engine's row of a key ("model.heads"), NULL if none. */
const mha_config_row *mha_key_find(const char *key);
/* Every row's default into base (rows' offsets), which the caller zeroed. */
void mha_config_rows_default(const mha_config_row *rows, int n, void *base);

/* Whether the engine reads this field ("rope.beta_fast") under the config's RoPE style and
 * scaling; every field outside rope is read. */
int mha_rope_key_read(const mha_rope *r, const char *field);

/* The first key of an engine config that breaks the schema, and why. */
typedef struct mha_key_problem {
    const mha_config_row *key;
    int index;                /* list entry, -1: the key itself, -2: the list's length */
    char what[160];
} mha_key_problem;
/* Range, enum and cross-key checks of every engine key, table-driven. */
mha_status mha_config_verify(const mha_config *cfg, mha_key_problem *p);
/* The problem as data, field in C names ("cpus[2]", "n_cpus"); returns MHA_ERR_CONFIG. */
mha_status mha_config_problem(const mha_key_problem *p, mha_problem *pr);
/* The same as "field: what" into err. */
mha_status mha_config_problem_text(const mha_key_problem *p, char *err, size_t err_len);
/* The key of a problem's field ("cpus[2]" -> threads.cpus, "n_cpus" too); NULL: none. */
const mha_config_row *mha_key_of_field(const char *field);
/* mha_config_check's checks, the problem as data (the config loader names its key from it). */
mha_status mha_config_check_problem(const mha_config *cfg, mha_problem *pr);


#endif
