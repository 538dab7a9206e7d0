/* gguf.h — the GGUF reader's handle (gguf.c), shared with the model layer (gguf_model.c). The
 * public calls are in mha_io.h; this is what both files see of a mapped file. */
#ifndef MHA_GGUF_H
#define MHA_GGUF_H

#include <stdint.h>

#include "mha_io.h"

/* A metadata entry: the public part first (mha_gguf_kv_at hands out its address), then where
 * its value lies in the mapping. */
typedef struct mha_gguf_entry {
    mha_gguf_kv pub;
    const uint8_t *val;          /* the scalar, or an array's first element; strings: their 8-byte length */
    const uint64_t *str;         /* arrays of strings: each element's offset in the file; else NULL */
} mha_gguf_entry;

struct mha_gguf {
    mha_gguf_info info;
    const uint8_t *map;          /* the file, read-only; NULL for an empty one (never opened) */
    mha_gguf_entry *kv;          /* (n_kv) in file order */
    mha_gguf_tensor *t;          /* (n_tensors) in file order */
    const mha_gguf_entry **kv_by_key;    /* (n_kv) sorted by key, for bsearch */
    const mha_gguf_tensor **t_by_name;   /* (n_tensors) sorted by name */
    void *block;                 /* the one allocation the tables above are carved from */
};

/* "path" for messages. */
static inline const char *mha_gguf_path(const mha_gguf *g) { return g->info.path; }

/* A float32 element i of an F32 tensor (read from the mapping, unaligned, little-endian). */
float mha_gguf_f32_at(const mha_gguf_tensor *t, int64_t i);

#endif
