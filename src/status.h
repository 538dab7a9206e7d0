/* status.h — writing an error message next to a status, and the pieces messages share. */
#ifndef MHA_STATUS_H
#define MHA_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

/* A failed check as data: the mha_config field it concerns ("isa", "cpus", "max_batch" …; the
 * C name, which the config loader maps to its YAML key) and what is wrong. Formatted as
 * "field: what" only at the edge. */
typedef struct mha_problem {
    char field[48];
    char what[224];
} mha_problem;

/* Records field and the formatted problem in pr (if pr) and returns s. */
mha_status mha_problemf(mha_problem *pr, mha_status s, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "field: what" into err (if err and err_len). */
void mha_problem_text(const mha_problem *pr, char *err, size_t err_len);

/* Formats the message into err (if err and err_len) and returns s. */
mha_status mha_errorf(char *err, size_t err_len, mha_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "(2, 7, 32)": a shape as messages print it. */
void mha_shape_text(const int64_t *shape, int rank, char *out, size_t n);

#endif
