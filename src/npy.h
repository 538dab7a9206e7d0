/* npy.h — NumPy .npy files: the public calls are in mha_io.h; this adds what tests reach. */
#ifndef MHA_NPY_H
#define MHA_NPY_H

#include <stddef.h>

#include "mha_io.h"

/* Parses a header's dictionary text. */
mha_status mha_npy_parse_dict(const char *text, size_t len, mha_npy_header *h, char *err, size_t err_len);

#endif
