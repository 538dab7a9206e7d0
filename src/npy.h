/* npy.h — NumPy .npy files (format versions 1.0–3.0): float32 tensors and int32/int64
 * lengths, little-endian, C order. Written files are complete or absent. */
#ifndef MHA_NPY_H
#define MHA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

typedef enum { MHA_NPY_F4, MHA_NPY_I4, MHA_NPY_I8 } mha_npy_dtype;

#define MHA_NPY_MAX_RANK 8

typedef struct mha_npy_header {
    mha_npy_dtype dtype;
    int rank;
    int64_t shape[MHA_NPY_MAX_RANK];
    size_t count;        /* elements */
    size_t data_offset;  /* bytes from the start of the file */
} mha_npy_header;

/* Parses and checks the header and that the file holds exactly the data it announces.
 * MHA_ERR_IO (cannot read), MHA_ERR_FORMAT (anything malformed or unsupported; err says what). */
mha_status mha_npy_open(const char *path, mha_npy_header *h, char *err, size_t err_len);
/* The float32 tensor at path, which must have the given rank; shape into shape[rank];
 * *data is malloc'd. */
mha_status mha_npy_load_f32(const char *path, int rank, int64_t *shape, float **data, char *err, size_t err_len);
/* A (n) vector of lengths, int32 or int64, each in [0, max]; *data is malloc'd int32. */
mha_status mha_npy_load_lengths(const char *path, int64_t *n, int32_t **data, int32_t max, char *err, size_t err_len);
/* The header (magic, version 1.0, dictionary, padding) of a C-order .npy of this dtype
 * ("<f4", "<i4") and shape, into out; returns its length (a multiple of 64), 0 if it does not
 * fit in cap. */
#define MHA_NPY_MAX_HEADER 512
size_t mha_npy_format_header(const char *descr, int rank, const int64_t *shape, unsigned char *out, size_t cap);
/* Writes a float32 .npy (version 1.0) through a temporary file renamed into place. */
mha_status mha_npy_save_f32(const char *path, const float *data, int rank, const int64_t *shape, char *err, size_t err_len);

/* Parses a header's dictionary text (exposed for tests). */
mha_status mha_npy_parse_dict(const char *text, size_t len, mha_npy_header *h, char *err, size_t err_len);

#endif
