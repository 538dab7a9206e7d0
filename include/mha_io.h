/* mha_io.h — loaders for clients of libmha: YAML configs, safetensors weights, GGUF model files
 * and NumPy .npy tensors, as the mha command reads and writes them.
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
    /* NULL: the engine's keys start from mha_config_init's defaults and the file must hold the
     * required ones (model.d_model, model.heads). Else they start from *base (a GGUF layer's
     * config: mha_gguf_layer_config) and the file's keys override it, none required. */
    const mha_config *base;
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

/* ---- GGUF, llama.cpp's model files (docs/gguf.md) ----
 *
 * A GGUF file (versions 2 and 3, little-endian) is a header of typed metadata (key → value), a
 * table of tensors (name, dims, ggml type, offset) and the tensors' bytes, each at a multiple of
 * general.alignment (default 32) from the aligned start of the data section. mha_gguf_open maps
 * the file read-only and checks it whole, as ggml's own reader does and more: every length and
 * count against the bytes left, every value type, bools 0 or 1, no nested arrays, no duplicate
 * key or tensor name, at most 4 dims whose element count and byte size fit in 64 bits, rows a
 * whole number of the type's blocks, offsets aligned and the tensors back to back in table order
 * (ggml's layout), inside the file. Nothing is allocated from a size the file states before the
 * bytes it describes were walked. Then every lookup below reads the mapping; the tensors' bytes
 * are never copied. One handle may be read by any number of threads at once. */
typedef struct mha_gguf mha_gguf; /* opaque */

/* Metadata value types, numbered as the GGUF spec numbers them. */
typedef enum mha_gguf_type {
    MHA_GGUF_UINT8 = 0, MHA_GGUF_INT8 = 1, MHA_GGUF_UINT16 = 2, MHA_GGUF_INT16 = 3, MHA_GGUF_UINT32 = 4,
    MHA_GGUF_INT32 = 5, MHA_GGUF_FLOAT32 = 6, MHA_GGUF_BOOL = 7, MHA_GGUF_STRING = 8, MHA_GGUF_ARRAY = 9,
    MHA_GGUF_UINT64 = 10, MHA_GGUF_INT64 = 11, MHA_GGUF_FLOAT64 = 12
} mha_gguf_type;
/* "uint8" … "float64" ("?" for other values); never NULL. */
MHA_API const char *mha_gguf_type_name(mha_gguf_type t);

/* ggml's tensor types, numbered as ggml.h numbers them (the numbers ggml removed are absent:
 * 4, 5, 31–33, 36–38). */
typedef enum mha_ggml_type {
    MHA_GGML_F32 = 0, MHA_GGML_F16 = 1, MHA_GGML_Q4_0 = 2, MHA_GGML_Q4_1 = 3, MHA_GGML_Q5_0 = 6,
    MHA_GGML_Q5_1 = 7, MHA_GGML_Q8_0 = 8, MHA_GGML_Q8_1 = 9, MHA_GGML_Q2_K = 10, MHA_GGML_Q3_K = 11,
    MHA_GGML_Q4_K = 12, MHA_GGML_Q5_K = 13, MHA_GGML_Q6_K = 14, MHA_GGML_Q8_K = 15, MHA_GGML_IQ2_XXS = 16,
    MHA_GGML_IQ2_XS = 17, MHA_GGML_IQ3_XXS = 18, MHA_GGML_IQ1_S = 19, MHA_GGML_IQ4_NL = 20, MHA_GGML_IQ3_S = 21,
    MHA_GGML_IQ2_S = 22, MHA_GGML_IQ4_XS = 23, MHA_GGML_I8 = 24, MHA_GGML_I16 = 25, MHA_GGML_I32 = 26,
    MHA_GGML_I64 = 27, MHA_GGML_F64 = 28, MHA_GGML_IQ1_M = 29, MHA_GGML_BF16 = 30, MHA_GGML_TQ1_0 = 34,
    MHA_GGML_TQ2_0 = 35, MHA_GGML_MXFP4 = 39, MHA_GGML_NVFP4 = 40, MHA_GGML_Q1_0 = 41, MHA_GGML_Q2_0 = 42,
    MHA_GGML_TYPE_COUNT = 43
} mha_ggml_type;
/* What mha does with a type as the weight of a projection: the float types and the quantized
 * types it runs (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), the rest
 * refused with a message that lists them (PLANNED: none today, kept for the ABI). */
typedef enum mha_ggml_support { MHA_GGML_UNSUPPORTED = 0, MHA_GGML_PLANNED = 1, MHA_GGML_SUPPORTED = 2 } mha_ggml_support;
/* A type's row of ggml's type traits: a row of ne[0] elements takes ne[0] / block blocks of
 * block_bytes each (ne[0] must be a multiple of block). */
typedef struct mha_ggml_type_info {
    const char *name;             /* as gguf-py spells it: "F32", "Q4_K", "IQ2_XS" */
    int block;                    /* elements per block (1 for the plain types) */
    int block_bytes;              /* bytes per block */
    mha_ggml_support projection;
} mha_ggml_type_info;
/* The row of type, NULL for a number that is no type of the spec (never assigned or removed). */
MHA_API const mha_ggml_type_info *mha_ggml_type_get(int type);
/* Its name; "Q4_0_4_4 (removed)" for a removed one, "?" for others; never NULL. */
MHA_API const char *mha_ggml_type_name(int type);

/* A metadata entry. Scalars and arrays of numbers or bools are read with the getters below. */
typedef struct mha_gguf_kv {
    const char *key;              /* NUL-terminated copy of the key */
    mha_gguf_type type;           /* MHA_GGUF_ARRAY for an array */
    mha_gguf_type elem_type;      /* an array's elements (never ARRAY: nested arrays are refused); else type */
    uint64_t n;                   /* an array's elements; 1 for a scalar */
} mha_gguf_kv;

#define MHA_GGUF_MAX_DIMS 4
/* A tensor of the table. ne is in ggml's order: ne[0] elements make a row (contiguous), ne[1]
 * rows a matrix; a PyTorch (out, in) weight is ne = {in, out}. Dims past n_dims are 1. */
typedef struct mha_gguf_tensor {
    const char *name;             /* NUL-terminated copy */
    int type;                     /* mha_ggml_type */
    int n_dims;                   /* 0..4 */
    int64_t ne[MHA_GGUF_MAX_DIMS];
    uint64_t offset;              /* of its first byte, from the start of the file */
    uint64_t bytes;               /* ne[0] / block · block_bytes · ne[1] · ne[2] · ne[3] */
    const void *data;             /* those bytes in the read-only mapping, until mha_gguf_close */
} mha_gguf_tensor;

/* The file as a whole. */
typedef struct mha_gguf_info {
    const char *path;             /* as given to mha_gguf_open */
    uint32_t version;             /* 2 or 3 */
    uint32_t alignment;           /* general.alignment, or 32 */
    uint64_t file_size;
    uint64_t data_offset;         /* where the data section starts (aligned) */
    uint64_t data_bytes;          /* the tensors' bytes, summed (no padding) */
    int64_t n_kv, n_tensors;
} mha_gguf_info;

/* Maps and checks path; *out on success (free it with mha_gguf_close), NULL otherwise. MHA_ERR_IO
 * (cannot open or map), MHA_ERR_FORMAT ("path: what, where": the key, tensor or byte offset and
 * the value), MHA_ERR_NOMEM. Version 1 and big-endian files are refused, saying so. */
MHA_API mha_status mha_gguf_open(const char *path, mha_gguf **out, char *err, size_t err_len);
MHA_API void mha_gguf_close(mha_gguf *g); /* accepts NULL; unmaps the file */
MHA_API const mha_gguf_info *mha_gguf_info_of(const mha_gguf *g);

/* Entries and tensors in file order (NULL past the end), or found by exact name (NULL if none). */
MHA_API const mha_gguf_kv *mha_gguf_kv_at(const mha_gguf *g, int64_t i);
MHA_API const mha_gguf_kv *mha_gguf_find_kv(const mha_gguf *g, const char *key);
MHA_API const mha_gguf_tensor *mha_gguf_tensor_at(const mha_gguf *g, int64_t i);
MHA_API const mha_gguf_tensor *mha_gguf_find_tensor(const mha_gguf *g, const char *name);

/* Typed getters. Each fails with MHA_ERR_FORMAT and "path: key 'K': expected T, found U" (or
 * "is missing", or an element past the array's end), changing nothing. int: any of the eight
 * integer types (a uint64 above INT64_MAX refused); float: float32 or float64; bool: bool;
 * string: a pointer into the mapping and the length (not NUL-terminated; may hold any bytes).
 * The _at forms read element i of an array of such values, and take a scalar of that kind as
 * the value of every element (GGUF's per-layer keys, head_count_kv, are either). */
MHA_API mha_status mha_gguf_get_int(const mha_gguf *g, const char *key, int64_t *v, char *err, size_t err_len);
MHA_API mha_status mha_gguf_get_float(const mha_gguf *g, const char *key, double *v, char *err, size_t err_len);
MHA_API mha_status mha_gguf_get_bool(const mha_gguf *g, const char *key, int *v, char *err, size_t err_len);
MHA_API mha_status mha_gguf_get_string(const mha_gguf *g, const char *key, const char **s, size_t *len, char *err,
                                       size_t err_len);
MHA_API mha_status mha_gguf_get_int_at(const mha_gguf *g, const char *key, uint64_t i, int64_t *v, char *err,
                                       size_t err_len);
MHA_API mha_status mha_gguf_get_float_at(const mha_gguf *g, const char *key, uint64_t i, double *v, char *err,
                                         size_t err_len);
MHA_API mha_status mha_gguf_get_bool_at(const mha_gguf *g, const char *key, uint64_t i, int *v, char *err,
                                        size_t err_len);
MHA_API mha_status mha_gguf_get_string_at(const mha_gguf *g, const char *key, uint64_t i, const char **s, size_t *len,
                                          char *err, size_t err_len);

/* ---- a GGUF model's attention, as mha computes it ----
 *
 * The architectures mha computes the attention of (mha_gguf_architectures): llama (Llama 1–3,
 * Mistral, SmolLM, …: llama.cpp writes general.architecture "llama" for them), qwen2, qwen3,
 * gemma2, gemma3, olmo2 and phi3. Their weights are named blk.N.attn_q/k/v/output.weight (phi3:
 * attn_qkv.weight, Q then K then V rows), biases attn_q/k/v(/output).bias, QK-norm
 * attn_q_norm/attn_k_norm.weight. Two conversions of llama.cpp's converter are the loader's to
 * undo (docs/gguf.md): for arch llama the rows of Q and K (weights and biases) are permuted per
 * head for ggml's RoPE (qk_permuted below); for gemma the RMSNorm weights hold 1 + w, so
 * QK-norm's weight_offset is 0 here. */
MHA_API const char *mha_gguf_architectures(void); /* "llama, qwen2, qwen3, gemma2, gemma3, olmo2, phi3" */
typedef struct mha_gguf_model {
    char arch[32];                /* general.architecture */
    char name[128];               /* general.name, cut at a NUL byte or to fit; "" when absent */
    int n_layers;                 /* {arch}.block_count; 0 when absent */
    int64_t context_length;       /* {arch}.context_length; 0 when absent */
    double rms_eps;               /* {arch}.attention.layer_norm_rms_epsilon; 0 when absent */
    int computed;                 /* 1: an architecture mha computes (mha_gguf_layer_config can succeed) */
    int qk_permuted;              /* 1: Q and K rows in llama.cpp's RoPE order (arch llama) */
    int fused_qkv;                /* 1: one attn_qkv.weight per layer (phi3) */
} mha_gguf_model;
/* What the metadata says of the model; any architecture. MHA_ERR_FORMAT when
 * general.architecture is missing or not a short string, or a key has the wrong type. */
MHA_API mha_status mha_gguf_model_info(const mha_gguf *g, mha_gguf_model *m, char *err, size_t err_len);
/* The model fields of cfg for layer `layer` (0-based): d_model, heads and KV heads (that layer's
 * when the keys are per-layer arrays), head_dim and v_head_dim (key_length, value_length;
 * default d_model / heads), bias (from the layer's attn_q.bias), RoPE (neox, HF's rotate_half;
 * rope.freq_base, rope.dimension_count, rope.scaling.*, llama3's factors from rope_freqs.weight
 * when they are llama3's formula), the layer's sliding window, scale and softcap (Gemma 2/3 as
 * llama.cpp reads them), QK-norm from the layer's attn_q_norm.weight (per head or over the whole
 * projection by its length; eps the RMS epsilon). Capacity, threads, precision and the other
 * run-time fields stay as cfg had them; cfg changes only on success. MHA_ERR_FORMAT naming the
 * key or tensor and its value (an architecture mha does not compute: the list of those it
 * does), MHA_ERR_CONFIG when the engine refuses the result (the config's message),
 * MHA_ERR_INVALID_ARG for a layer the model has not. */
MHA_API mha_status mha_gguf_layer_config(const mha_gguf *g, int layer, mha_config *cfg, char *err, size_t err_len);
/* The attention tensors of layer `layer` for a config of that layer (mha_gguf_layer_config's),
 * found and checked: every projection a 2-D tensor of the config's shape and a type mha_ggml_*
 * supports (mha_gguf_check_projection), the biases and norms 1-D of their lengths in F32, F16 or
 * BF16. A pointer is NULL for a tensor the model has not (fused: q, k, v NULL and qkv set). */
typedef struct mha_gguf_layer {
    const mha_gguf_tensor *q, *k, *v, *qkv, *o;                 /* weights */
    const mha_gguf_tensor *q_bias, *k_bias, *v_bias, *qkv_bias, *o_bias;
    const mha_gguf_tensor *q_norm, *k_norm;
} mha_gguf_layer;
MHA_API mha_status mha_gguf_layer_tensors(const mha_gguf *g, int layer, const mha_config *cfg, mha_gguf_layer *t,
                                          char *err, size_t err_len);
/* Whether t can be a projection of in → out features (ne = {in, out}) in mha: MHA_OK, or
 * MHA_ERR_FORMAT with "path: blk.3.attn_q.weight: type IQ2_XS is not supported (supported: F32,
 * F16, …)" or its dims against those expected. */
MHA_API mha_status mha_gguf_check_projection(const mha_gguf *g, const mha_gguf_tensor *t, int64_t in, int64_t out,
                                             char *err, size_t err_len);

/* The attention weights of layer `layer` for cfg (mha_gguf_layer_config's, with any overrides:
 * the tensors are checked against it as mha_gguf_layer_tensors does), ready for mha_set_weights,
 * TORCH layout (HF's (out, in) rows). Each projection as stored: F32 as floats (w_q …, type
 * MHA_WEIGHT_F32), F16, BF16 and the block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
 * Q6_K) as type[i] = the tensor's ggml type and blocks[i]; phi3's fused attn_qkv split into its Q, K and V rows.
 * They point into the mapping (valid until mha_gguf_close) except where rows are moved: for
 * arch llama (mha_gguf_model.qk_permuted) Q's and K's rows, and their biases, are put back from
 * llama.cpp's RoPE order into HF's (docs/gguf.md), whole rows of blocks, into storage. Biases
 * and QK-norm weights are floats in storage (F16 and BF16 converted); Gemma's norms as the file
 * holds them (1 + w: the config's weight_offset 0). A float tensor holding NaN or an infinity is
 * refused naming the tensor and element. MHA_ERR_FORMAT (a tensor missing, misshapen or of a
 * type mha does not run: "m.gguf: blk.3.attn_q.weight: type IQ2_XS is not supported (supported:
 * …)"), MHA_ERR_CONFIG (cfg invalid), MHA_ERR_NOMEM; *out zeroed on failure. */
typedef struct mha_gguf_weights {
    mha_weights w;                /* for mha_set_weights / mha_pack_weights */
    void *storage;                /* owned: moved rows, biases and norms (NULL when nothing is copied) */
    size_t storage_bytes;
    int permuted;                 /* 1: Q and K rows were moved back to HF's order (arch llama) */
} mha_gguf_weights;
MHA_API mha_status mha_gguf_layer_weights(const mha_gguf *g, int layer, const mha_config *cfg,
                                          mha_gguf_weights *out, char *err, size_t err_len);
MHA_API void mha_gguf_weights_free(mha_gguf_weights *w); /* accepts NULL; zeroes *w */
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
