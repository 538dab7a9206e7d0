/* mha_io.h — loaders for clients of libmha: YAML configs, safetensors weights and NumPy .npy
 * tensors, as the mha command reads and writes them.
 *
 * Same contract as mha.h: no printing, no exits, no environment reads, no global state.
 * Every call returns a status; on failure `err` (when not NULL) holds a message that names
 * the file, and for configs the line and key ("m.yaml:3: model.heads: 5 does not divide
 * d_model 64"), for weights the tensor. Buffers handed back are malloc'd: release them with
 * free() (or the _free function named next to them). On failure nothing is handed back.
 * Only regular files are read: a directory, FIFO or device is refused at once (never blocks). */
#ifndef MHA_IO_H
#define MHA_IO_H

#include "mha.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- YAML configs (docs/config.md; the engine's keys are in the schema table below) ---- */

/* Reads a YAML config (docs/config.md) into cfg: model, threads, pinning, engine block, and
 * the batch block as capacity; cfg changes only on success. MHA_ERR_IO if it cannot be read,
 * MHA_ERR_CONFIG with "file:line: key: problem" in err for syntax errors, unknown keys, wrong
 * types and out-of-range values, more than one YAML document, MHA_ERR_AFFINITY for a CPU the
 * process may not use, MHA_ERR_NOMEM. A file that also holds a program's own keys (the mha
 * command's run, scaling, decode blocks) loads with that program's rows: mha_config_load_with. */
MHA_API mha_status mha_config_load(const char *path, mha_config *cfg, char *err, size_t err_len);

/* The schema: one row per key, the table that drives mha_config_init, mha_config_check,
 * mha_config_load and their messages (docs/config.md's key tables are printed by `mha schema`). */
typedef enum {
    MHA_KEY_INT, MHA_KEY_UINT64, MHA_KEY_BOOL, MHA_KEY_ENUM, MHA_KEY_STRING, MHA_KEY_INT_LIST, MHA_KEY_ENUM_LIST,
    MHA_KEY_FLOAT
} mha_key_type;
typedef struct mha_config_key {
    const char *key;          /* "model.d_model" */
    const char *field;        /* the mha_config field it fills ("d_model"); NULL in a program's own rows */
    mha_key_type type;
    long long min, max;       /* integers and list entries; strings: max is the longest length */
    int max_count;            /* lists: most entries */
    int required;             /* 1: a file must have it */
    const char *values;       /* enums: "none, causal, padding" */
    const char *default_text; /* "128", "seq_len", "the file's stem" */
    const char *doc;          /* one line: what it means */
    double fmin, fmax;        /* floats: the range (fmin excluded when fmin_open) */
    int fmin_open;
} mha_config_key;
/* Key i of the engine's schema, NULL past the last. */
MHA_API const mha_config_key *mha_config_key_at(int i);

/* A program's own keys in the same file, as rows of the same schema: the loader reads them with
 * the engine's keys, checks their type and range, and writes "file:line: key: problem" for them
 * as for its own. Values go to offsets in the program's struct: int for integers, bools and
 * enums (lists: int[max_count] and an int count), uint64_t, float, char[max + 1] for strings. */
typedef struct mha_config_name { const char *name; int value; } mha_config_name;
typedef struct mha_config_row {
    mha_config_key spec;      /* spec.field NULL (in the engine's rows: its mha_config field) */
    size_t off;               /* where the value goes */
    size_t count_off;         /* lists: where the entry count goes */
    long long def;            /* the default of an integer, bool or enum key */
    const mha_config_name *names; /* enums: each word and its value */
    int n_names;
    double fdef;              /* the default of a float key */
} mha_config_row;
/* What the loader saw of a file, for a program's own cross-key checks (its finish function). */
typedef struct mha_config_seen mha_config_seen;
typedef struct mha_config_client {
    const mha_config_row *rows;
    int n_rows;
    void *dest;               /* the program's struct, size bytes; changes only on success */
    size_t size;
    /* After the engine's keys passed their checks: the program's own, on the loaded values
     * (dest, engine). It reports a problem through mha_config_seen_fail, or returns MHA_OK. */
    mha_status (*finish)(void *dest, const mha_config *engine, const mha_config_seen *seen);
} mha_config_client;

/* mha_config_load with a program's rows (client NULL: the engine's alone). MHA_ERR_INVALID_ARG
 * for a row that repeats a key of the engine or of the rows. */
MHA_API mha_status mha_config_load_with(const char *path, mha_config *cfg, const mha_config_client *client, char *err,
                                        size_t err_len);
/* The same from text in memory; `origin` names it in messages. */
MHA_API mha_status mha_config_parse_with(const char *text, size_t len, const char *origin, mha_config *cfg,
                                         const mha_config_client *client, char *err, size_t err_len);
/* The client's struct zeroed, then every row's default. */
MHA_API void mha_config_client_init(const mha_config_client *client);
/* The line of a key (entry -1) or of a list's entry, or of a block ("decode"); 0 if absent. */
MHA_API int mha_config_seen_line(const mha_config_seen *seen, const char *key, int entry);
/* The file's name as messages give it. */
MHA_API const char *mha_config_seen_origin(const mha_config_seen *seen);
/* "file:line: key[entry]: what" into the loader's err; returns MHA_ERR_CONFIG. */
#ifdef __GNUC__
__attribute__((format(printf, 4, 5)))
#endif
MHA_API mha_status mha_config_seen_fail(const mha_config_seen *seen, const char *key, int entry, const char *fmt, ...);
/* The word of an enum row's value ("?" for others). */
MHA_API const char *mha_config_value_name(const mha_config_row *row, int value);

/* Names of the engine's enum values as a config spells them ("?" for others). */
MHA_API const char *mha_pinning_name(mha_pinning p);
MHA_API const char *mha_precision_name(mha_precision p);
MHA_API const char *mha_kv_type_name(mha_kv_type t);

/* ---- safetensors weights (F32, F16, BF16 → float32) ---- */

/* Found under `prefix` ("" or e.g. "encoder.layers.0.self_attn"; a trailing '.' optional),
 * in one of four namings:
 *   nn.MultiheadAttention     in_proj_weight (3d, d), in_proj_bias, out_proj.weight, out_proj.bias
 *   nn.Linear per projection  {q,k,v,o}_proj.weight (d, d) and .bias
 *   BLOOM                     query_key_value.weight (3d, d), its rows (heads, 3, d_k), and .bias;
 *                             dense.weight (d, d) and .bias
 *   the reference class       W_q, W_k, W_v, W_o (d, d) as x·W, b_q … b_o
 * and with cfg's mla (multi-head latent attention), HF DeepseekV3Attention's: q_a_proj,
 * q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj,
 * into mla (below).
 * Shapes must match cfg: d_model, and with kv_heads K and V of (kv_heads·d_k, d) as HF's
 * k_proj/v_proj (Llama, Mistral, Qwen2); biases when cfg->bias — those of the output
 * projection optional (Qwen2 has q, k and v biases only) — and none without. In every
 * naming, with cfg's qk_norm: q_norm.weight and k_norm.weight (HF's RMSNorm modules: d_k
 * each, or n_heads·d_k and n_kv_heads·d_k for kind full, OLMo 2); with sinks: sinks
 * (n_heads, gpt-oss). */
typedef struct mha_weights_file {
    mha_weights w;            /* views into storage, ready for mha_set_weights / mha_pack_weights */
    mha_mla_weights mla;      /* a config with model.mla: its weights under HF DeepseekV3Attention's
                                 names (q_a_proj, q_a_layernorm, q_b_proj or q_proj,
                                 kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; biases of
                                 q_a_proj, kv_a_proj_with_mqa and o_proj with bias), for
                                 mha_set_mla_weights; w then empty */
    float *storage;           /* owned: Wq, Wk, Wv, Wo, then b_q, b_k, b_v, b_o, q_norm, k_norm, sinks */
    size_t n_floats;          /* storage's length */
    const char *scheme;       /* which naming was found (static text) */
} mha_weights_file;
/* MHA_ERR_IO, MHA_ERR_FORMAT (malformed file; a missing or misshapen tensor: err names it, the
 * shape found and the one expected), MHA_ERR_INVALID_ARG, MHA_ERR_NOMEM. */
MHA_API mha_status mha_weights_file_load(const char *path, const char *prefix, const mha_config *cfg,
                                         mha_weights_file *out, char *err, size_t err_len);
MHA_API void mha_weights_file_free(mha_weights_file *w); /* accepts NULL; zeroes *w */

/* ---- NumPy .npy (format 1.0–3.0, little-endian, C order) ---- */

typedef enum { MHA_NPY_F4, MHA_NPY_I4, MHA_NPY_I8 } mha_npy_dtype;
#define MHA_NPY_MAX_RANK 8
typedef struct mha_npy_header {
    mha_npy_dtype dtype;
    int rank;
    int64_t shape[MHA_NPY_MAX_RANK];
    size_t count;             /* elements */
    size_t data_offset;       /* bytes from the start of the file */
} mha_npy_header;

/* Parses the header and checks that the file holds exactly the data it announces.
 * MHA_ERR_IO (cannot read), MHA_ERR_FORMAT (malformed or unsupported: err says what). */
MHA_API mha_status mha_npy_open(const char *path, mha_npy_header *h, char *err, size_t err_len);
/* The float32 tensor at path, which must have this rank; its shape into shape[rank]. */
MHA_API mha_status mha_npy_load_f32(const char *path, int rank, int64_t *shape, float **data, char *err,
                                    size_t err_len);
/* A (n,) vector of lengths, int32 or int64, each in [0, max], as int32. */
MHA_API mha_status mha_npy_load_lengths(const char *path, int64_t *n, int32_t **data, int32_t max, char *err,
                                        size_t err_len);
/* Writes a float32 .npy (version 1.0). A regular file (new, or replacing one) is written to a
 * temporary file beside it and renamed into place: complete or absent, with the old file's
 * mode, or 0666 less the umask for a new one. A FIFO or character device (/dev/null, a pipe)
 * is written through, never replaced; a directory is refused. */
MHA_API mha_status mha_npy_save_f32(const char *path, const float *data, int rank, const int64_t *shape,
                                    char *err, size_t err_len);
/* The header (magic, version 1.0, dictionary, padding) of a C-order .npy of this dtype
 * ("<f4", "<i4") and shape, into out; returns its length (a multiple of 64), 0 if it does not
 * fit in cap (MHA_NPY_MAX_HEADER always suffices). */
#define MHA_NPY_MAX_HEADER 512
MHA_API size_t mha_npy_format_header(const char *descr, int rank, const int64_t *shape, unsigned char *out,
                                     size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* MHA_IO_H */
