/* status.h — writing an error message next to a status, and the pieces messages share. */
#ifndef MHA_STATUS_H
#define MHA_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

/* Formats the message into err (if err and err_len) and returns s. */
mha_status mha_errorf(char *err, size_t err_len, mha_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "(2, 7, 32)": a shape as messages print it. */
void mha_shape_text(const int64_t *shape, int rank, char *out, size_t n);

#endif
