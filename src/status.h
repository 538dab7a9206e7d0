/* status.h — writing an error message next to a status. */
#ifndef MHA_STATUS_H
#define MHA_STATUS_H

#include <stddef.h>

#include "mha.h"

/* Formats the message into err (if err and err_len) and returns s. */
mha_status mha_errorf(char *err, size_t err_len, mha_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
