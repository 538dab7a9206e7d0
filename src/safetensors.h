/* safetensors.h — the safetensors format: an 8-byte little-endian header length N, N bytes of
 * JSON {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the tensors' bytes.
 * Validated as the format's own reader does; F32, F16 and BF16 read as float32. */
#ifndef MHA_SAFETENSORS_H
#define MHA_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include "mha.h"

#define MHA_ST_MAX_HEADER 100000000u /* the reference reader's cap */
#define MHA_ST_MAX_RANK 8

typedef struct mha_st_tensor {
    char *name;
    int dtype;                       /* index into the dtype table, see mha_st_dtype_name */
    int rank;
    int64_t shape[MHA_ST_MAX_RANK];
    uint64_t begin, end;             /* byte offsets in the data section */
} mha_st_tensor;

typedef struct mha_st_file {
    FILE *f;
    uint64_t data_start;             /* 8 + N */
    mha_st_tensor *t;
    int n;
} mha_st_file;

/* MHA_ERR_IO (cannot read), MHA_ERR_FORMAT (malformed: err says what), MHA_ERR_NOMEM. */
mha_status mha_st_open(const char *path, mha_st_file *sf, char *err, size_t err_len);
void mha_st_close(mha_st_file *sf);
const mha_st_tensor *mha_st_find(const mha_st_file *sf, const char *name);
const char *mha_st_dtype_name(int dtype);
/* Whether a dtype converts to float32 (F32, F16, BF16). */
int mha_st_is_float(int dtype);
/* Reads a float tensor into dst (count elements), converting to float32. */
mha_status mha_st_read_f32(const mha_st_file *sf, const mha_st_tensor *t, float *dst, char *err, size_t err_len);


#endif
