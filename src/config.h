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

typedef struct mha_name_val { const char *name; int value; } mha_name_val;

typedef struct mha_key_def {
    mha_config_key pub;       /* what clients see: name, type, range, default text */
    size_t off;               /* destination: in mha_config for engine keys (pub.field set),
                                 else in mha_config_file */
    size_t count_off;         /* lists: where the entry count goes (same base) */
    long long def;            /* default of an integer, bool or enum key */
    const mha_name_val *names;/* enums */
    int n_names;
    double fdef;              /* default of a float key */
} mha_key_def;

extern const mha_key_def mha_keys[];
extern const int mha_n_keys;

const mha_key_def *mha_key_find(const char *key);
const char *mha_key_value_name(const mha_key_def *k, int value);
void *mha_key_dest(const mha_key_def *k, mha_config_file *fc);
void *mha_key_count_dest(const mha_key_def *k, mha_config_file *fc);

/* Whether the engine reads this field ("rope.beta_fast") under the config's RoPE style and
 * scaling; every field outside rope is read. */
int mha_rope_key_read(const mha_rope *r, const char *field);

/* The first key of an engine config that breaks the schema, and why. */
typedef struct mha_key_problem {
    const mha_key_def *key;
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
const mha_key_def *mha_key_of_field(const char *field);
/* mha_config_check's checks, the problem as data (the config loader names its key from it). */
mha_status mha_config_check_problem(const mha_config *cfg, mha_problem *pr);


#endif
