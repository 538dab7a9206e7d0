/* weights_file.h — attention weights from a safetensors file, found by the names PyTorch
 * and the reference class use, checked against the model's shape. */
#ifndef MHA_WEIGHTS_FILE_H
#define MHA_WEIGHTS_FILE_H

#include "mha.h"

typedef struct mha_weights_file {
    mha_weights w;        /* views into storage, ready for mha_set_weights */
    float *storage;       /* (4·d² + 4·d) floats */
    const char *scheme;   /* which naming was found */
} mha_weights_file;

/* prefix: "" or a name prefix ("encoder.layers.0.self_attn", a trailing '.' optional).
 * MHA_ERR_IO, MHA_ERR_FORMAT (malformed file, missing or misshapen tensors: err names the
 * tensor, the shape found and the one expected), MHA_ERR_NOMEM. */
mha_status mha_weights_file_load(const char *path, const char *prefix, int d_model, int bias,
                                 mha_weights_file *out, char *err, size_t err_len);
void mha_weights_file_free(mha_weights_file *w);

#endif
