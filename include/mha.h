/* mha.h — the public API of libmha, batched multi-head attention inference on CPUs
 * (x86-64 Linux). mha_io.h adds the file loaders (YAML configs, safetensors, .npy).
 *
 * It depends on <stddef.h> and <stdint.h> alone.
 * Contract (docs/DESIGN.md §4): the library never prints, exits, aborts, reads the
 * environment or keeps mutable global state; every failure returns a status and leaves the
 * engine usable.
 *
 * Threading contract: use one engine per calling thread at a time; any number of engines
 * may run at once in one process, and an engine may move between threads between calls
 * (threads that exit after a call included; on LLVM's libomp each such thread leaves about
 * 8 KiB in the runtime, docs/server.md).
 * An engine of more than one thread called from inside the caller's own active OpenMP
 * parallel region fails with MHA_ERR_STATE (its team would run as one thread there); one of
 * threads = 1 runs anywhere. libgomp keeps one team of workers per thread that starts parallel
 * regions, so engines that migrate across many request threads multiply idle workers: give
 * each long-lived worker thread its own engine (and OMP_WAIT_POLICY=passive where workers
 * outnumber cores).
 *
 * Memory: an engine's memory is one arena taken at mha_create (or yours, with
 * mha_create_static); mha_set_weights and mha_forward allocate nothing themselves. What the
 * runtimes below mha allocate is theirs: BLIS allocates its kernel tables once per process
 * at the first mha_create, and libgomp allocates a small descriptor per OpenMP task from
 * malloc in every forward with more than one thread (about two per head task).
 *
 * ABI policy: while the version is 0.x there is none. Structs (mha_config, mha_input, ...)
 * may grow and enum values may be added in any minor release: rebuild against the header
 * you link, and check mha_version_number() == MHA_VERSION_NUMBER at start-up. The soname
 * carries the minor version while the major is 0 (libmha.so.0.5): a binary built against
 * 0.2 does not load 0.3 (0.6: the KV cache took a max_seqs and owns its int8 open groups,
 * mha_step lost its tails). Status
 * codes are never renumbered.
 */
#ifndef MHA_H
#define MHA_H

#include <stddef.h>
#include <stdint.h>

#define MHA_VERSION_MAJOR 0
#define MHA_VERSION_MINOR 9
#define MHA_VERSION_PATCH 0
#define MHA_VERSION_NUMBER (MHA_VERSION_MAJOR * 10000 + MHA_VERSION_MINOR * 100 + MHA_VERSION_PATCH)

#if defined(MHA_BUILDING) && defined(__GNUC__)
#define MHA_API __attribute__((visibility("default")))
#else
#define MHA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mha_engine mha_engine; /* opaque */

/* Values are never renumbered; new codes are only appended. */
typedef enum mha_status {
    MHA_OK = 0,
    MHA_ERR_INVALID_ARG = 1, /* NULL pointer, bad enum, inconsistent arguments */
    MHA_ERR_CONFIG = 2,      /* the config is invalid (see mha_config_check) */
    MHA_ERR_SHAPE = 3,       /* forward shapes beyond capacity, lengths out of range */
    MHA_ERR_NOMEM = 4,       /* an allocation failed */
    MHA_ERR_WORKSPACE = 5,   /* static workspace too small or not 64-byte aligned */
    MHA_ERR_IO = 6,          /* a file could not be read or written */
    MHA_ERR_FORMAT = 7,      /* a file's contents are malformed */
    MHA_ERR_AFFINITY = 8,    /* a pinning request names a CPU the process may not use */
    MHA_ERR_STATE = 9        /* call out of order: forward before mha_set_weights */
} mha_status;

MHA_API const char *mha_status_str(mha_status s); /* never NULL */
MHA_API const char *mha_version_string(void);     /* "0.5.1" */
MHA_API int mha_version_number(void);             /* MHA_VERSION_NUMBER of the library linked */

typedef enum { MHA_PIN_NONE, MHA_PIN_CLOSE, MHA_PIN_SPREAD, MHA_PIN_CPUS } mha_pinning;

#define MHA_MAX_CPUS 256
#define MHA_MAX_THREADS 1024

/* Rotary position embeddings (RoPE), as HF transformers' rope utilities define them: applied
 * to each head's Q and K after projection and bias, before the scores. In mha_forward key j
 * sits at position j and query i at i + (seq_kv - seq_q), the causal mask's alignment. */
typedef enum { MHA_ROPE_NONE = 0, MHA_ROPE_NEOX = 1, MHA_ROPE_GPTJ = 2 } mha_rope_style;
typedef enum { MHA_ROPE_SCALING_NONE = 0, MHA_ROPE_SCALING_LINEAR = 1,
               MHA_ROPE_SCALING_LLAMA3 = 2, MHA_ROPE_SCALING_YARN = 3 } mha_rope_scaling;
typedef struct mha_rope {
    mha_rope_style style;        /* NEOX rotates halves (x_i, x_{i+r/2}) (HF rotate_half, Llama);
                                    GPTJ adjacent pairs (x_2i, x_2i+1); NONE: no rotation */
    float theta;                 /* base: θ_i = theta^(-2i/r); default 10000 */
    int rotary_dim;              /* r: features rotated, even, <= d_k; 0: d_k */
    mha_rope_scaling scaling;    /* of θ, as HF's rope_type */
    float factor;                /* linear (θ/factor), llama3, yarn */
    float low_freq_factor, high_freq_factor; /* llama3 (HF defaults 1, 4) */
    int original_max_position;   /* llama3, yarn: the pre-training context */
    float beta_fast, beta_slow;  /* yarn (HF defaults 32, 1) */
    int truncate;                /* yarn: 1 (mha_config_init's default, HF's) rounds the correction
                                    range out to whole dimensions; 0 keeps it exact (HF truncate:
                                    false, gpt-oss) */
    float mscale, mscale_all_dim;/* yarn, DeepSeek's (0: unset): with both set, cos and sin are
                                    scaled by m(mscale) / m(mscale_all_dim), m(x) = 0.1·x·ln(factor)
                                    + 1, instead of m(1); an MLA layer's scale is multiplied by
                                    m(mscale_all_dim)² when it is set (HF's DeepseekV3Attention) */
} mha_rope;

/* Arithmetic of the matrix products. F32: float32 throughout (BLIS's microkernel). BF16:
 * weights stored in bfloat16, activations rounded to bf16 (nearest even) where they enter a
 * product, products accumulated in float32; softmax, inputs and outputs stay float32
 * (‖out − ref‖ / ‖ref‖ ≤ 1e-2 on unit-scale data). Runs on AMX tiles where the CPU has them,
 * else on the fastest fallback (mha_engine_kernel says which). */
typedef enum { MHA_PRECISION_F32 = 0, MHA_PRECISION_BF16 = 1 } mha_precision;

/* Elements of the KV cache (mha_kv_cache_create): AUTO, the precision's own (F32 for f32,
 * BF16 for bf16); INT8 for either precision: int8 with a scale and zero point (lo..hi in 255
 * steps, values rounded to nearest even, read back as q·scale + zero) per feature over each
 * group of MHA_KV_GROUP slots for K (float16 parameters) and per (token, KV head) for V
 * (float32 ones) (‖out − ref‖ / ‖ref‖ ≤ 2e-2 on unit-scale data; ≤ 1e-2 against HF on every
 * layer of a trained model: docs/precision.md): about 0.3 of a float32 cache's bytes, 0.6 of a bf16
 * one's. */
typedef enum { MHA_KV_AUTO = 0, MHA_KV_F32 = 1, MHA_KV_BF16 = 2, MHA_KV_INT8 = 3 } mha_kv_type;

/* How the engine holds the projections' weights (mha_config.weight_type) and how a caller hands
 * them (mha_weights.type), one per matrix, indexed by MHA_W_Q, MHA_W_K, MHA_W_V, MHA_W_O. The
 * values are ggml's type numbers (mha_io.h's mha_ggml_type), so a GGUF tensor's type passes
 * through. F32 (0, the default): floats, held in the precision's form (float32 or bf16 panels).
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: ggml's blocks along each output's inputs, held and multiplied as
 * stored (repacked, the file's bytes), activations and sums in float32: each weight is ggml's
 * dequantized float exactly, and a product is float32 FMA chains over those weights in input
 * order, the same bits on every kernel table (docs/quant.md). F16 and BF16:
 * mha_weights.type only, converted at load. */
typedef enum {
    MHA_WEIGHT_F32 = 0, MHA_WEIGHT_F16 = 1, MHA_WEIGHT_Q4_0 = 2, MHA_WEIGHT_Q4_1 = 3, MHA_WEIGHT_Q5_0 = 6,
    MHA_WEIGHT_Q5_1 = 7, MHA_WEIGHT_Q8_0 = 8, MHA_WEIGHT_Q4_K = 12, MHA_WEIGHT_Q5_K = 13, MHA_WEIGHT_Q6_K = 14,
    MHA_WEIGHT_BF16 = 30
} mha_weight_type;
enum { MHA_W_Q = 0, MHA_W_K = 1, MHA_W_V = 2, MHA_W_O = 3, MHA_W_COUNT = 4 };
/* What block-type weights multiply (mha_config.weight_activations). F32 (0, the default): the
 * activations as they are, float32 FMA chains over the exact weights (the f32 contract against
 * the layer on the dequantized weights). INT16: each row's activations rounded to int16 per
 * group of 32 inputs (a float scale, max|x| / 32767), each group's dot product with the weights'
 * integers exact in int32, then scaled into a float32 sum in input order: integer multiply units
 * (AVX512_VNNI's vpdpwssd, pmaddwd) at several times float32's rate, within a stated bound of the
 * dequantized layer (docs/quant.md); the same bits on every table, row count and split. 16 bits,
 * not llama.cpp's 8: trained layers' outlier channels leave 8 bits above 1e-2. BF16 (bf16
 * engines only): the engine's own bf16 products (AMX tiles, vdpbf16ps) on the activations and
 * the dequantized weights rounded to bf16, a panel of weights dequantized once a product: the
 * bits of the bf16 engine holding the dequantized floats, prefills and many rows at its speed. */
typedef enum { MHA_ACTIVATIONS_F32 = 0, MHA_ACTIVATIONS_INT16 = 1, MHA_ACTIVATIONS_BF16 = 2 } mha_activations;
/* Bytes of n weights of type t as a file stores them (n whole blocks: 32, 256 for Q4_K and
 * Q5_K and Q6_K); 0 for a type mha does not read or n not whole blocks. */
MHA_API size_t mha_weight_bytes(mha_weight_type t, int64_t n);
/* n weights of type t (whole blocks) as the engine reads them, into floats: F16 and BF16
 * converted, blocks dequantized (ggml's floats, exactly). MHA_ERR_INVALID_ARG: a NULL pointer,
 * a type mha does not read, n not whole blocks. */
MHA_API mha_status mha_weights_to_floats(mha_weight_type t, const void *src, int64_t n, float *dst);
/* n floats into blocks of block type t (n whole blocks), the bytes of ggml's reference
 * quantizer (quantize_row_*_ref); F16 and BF16 rounded to nearest even. MHA_ERR_INVALID_ARG as
 * above, or t F32. */
MHA_API mha_status mha_weights_quantize(mha_weight_type t, const float *src, int64_t n, void *dst);

/* QK-norm, as HF's RMSNorm modules compute it (float32): Q and K after projection and bias,
 * before RoPE, x ↦ x · rsqrt(mean(x²) + eps) · w, the mean over each head's d_k features
 * (HEAD: Qwen3, Gemma 3) or over the whole projection before the heads split (FULL: OLMo 2,
 * n_heads·d_k features of Q, n_kv_heads·d_k of K); weight_offset 1 multiplies by (1 + w)
 * instead (Gemma's RMSNorm). The weights are mha_weights.q_norm and .k_norm
 * (mha_config_qk_norm_len of each). */
typedef enum { MHA_QK_NORM_NONE = 0, MHA_QK_NORM_HEAD = 1, MHA_QK_NORM_FULL = 2 } mha_qk_norm_kind;
typedef struct mha_qk_norm {
    mha_qk_norm_kind kind;       /* MHA_QK_NORM_NONE by default */
    float eps;                   /* default 1e-6 */
    int weight_offset;           /* 0: x̂·w; 1: x̂·(1 + w) */
} mha_qk_norm;

/* Multi-head latent attention (DeepSeek V2/V3, Kimi K2), as HF's DeepseekV3Attention computes
 * it: Q = q_b_proj(RMSNorm(q_a_proj(x))) (or q_proj(x)), per head qk_nope_head_dim features
 * then qk_rope_head_dim; kv_a_proj_with_mqa(x) = [latent c (kv_lora_rank) | k_rope
 * (qk_rope_head_dim), shared by every head]; c RMS-normed (kv_a_layernorm), and kv_b_proj
 * expands it per head into K's nope features and V (v_head_dim); RoPE (the config's style on
 * the rope features: gptj is DeepSeek's interleaved form) on Q's and k_rope; o_proj. mha runs
 * the absorbed form: attention with one KV head of kv_lora_rank + qk_rope_head_dim features
 * ([c | k_rope]) whose V is c, every query head a row. Weights: mha_mla_weights. */
typedef struct mha_mla {
    int kv_lora_rank;            /* the latent's width; 0: no MLA (the default) */
    int q_lora_rank;             /* Q through q_a_proj, q_a_layernorm and q_b_proj; 0: q_proj */
    int qk_nope_head_dim, qk_rope_head_dim; /* each head's Q and K features without, with RoPE */
    int v_head_dim;              /* each head's V, after kv_b_proj */
    float eps;                   /* the latent RMSNorms' epsilon (HF's rms_norm_eps); default 1e-6 */
} mha_mla;

typedef struct mha_config {
    int d_model, n_heads;                  /* n_heads divides d_model unless head_dim is set */
    int max_batch, max_seq_q, max_seq_kv;  /* capacity; the arena is sized from these */
    int bias;                              /* 1: q/k/v/o biases */
    int threads;                           /* 0: every CPU the process may use */
    mha_pinning pinning;
    int cpus[MHA_MAX_CPUS];                /* MHA_PIN_CPUS: worker t runs on cpus[t % n_cpus] */
    int n_cpus;
    int q_block;                           /* 0: chosen by the engine */
    char blis_arch[16];                    /* "" or "auto", or a BLIS sub-config name */
    int n_kv_heads;                        /* 0: n_heads; divides n_heads (grouped-query
                                              attention; 1: multi-query). Query head h reads
                                              KV head h / (n_heads / n_kv_heads), as HF's repeat_kv */
    int head_dim;                          /* d_k of every head; 0: d_model / n_heads. Wq maps
                                              d_model to n_heads·head_dim, Wk and Wv to
                                              n_kv_heads·head_dim, Wo n_heads·head_dim back to
                                              d_model (Qwen3, Gemma 2, gpt-oss: not d_model) */
    int v_head_dim;                        /* V's features per head, and each head's output's;
                                              0: head_dim. At most head_dim: a latent-attention
                                              (MLA) model's absorbed core reads K of kv_lora +
                                              rope features and V = their first kv_lora (V may
                                              alias K). An engine whose v_head_dim differs runs
                                              mha_core_forward only: mha_set_weights,
                                              mha_pack_weights and the KV cache refuse it */
    mha_rope rope;                         /* MHA_ROPE_NONE by default */
    int window;                            /* sliding window W > 0: a query at position p sees
                                              keys p - W < j <= p (causal implied); 0: none */
    float scale;                           /* the scores' factor; 0: 1/sqrt(head_dim) (Gemma 2:
                                              query_pre_attn_scalar^-0.5) */
    float softcap;                         /* logit softcapping (Gemma 2): each score s ↦
                                              softcap·tanh(s / softcap) after the scale, before
                                              ALiBi and the masks; 0: none */
    int sinks;                             /* 1: each head's learned logit (mha_weights.sinks)
                                              joins every row's softmax denominator and adds no
                                              value (gpt-oss) */
    mha_qk_norm qk_norm;                   /* RMSNorm of Q and K before RoPE; none by default */
    float alibi_max_bias;                  /* ALiBi (BLOOM, MPT): score − slope_h·|p_q − p_k|,
                                              BLOOM's / ggml's slopes for this max bias (8 for
                                              BLOOM), head counts not a power of two included;
                                              0: none. Not with RoPE */
    mha_precision precision;               /* MHA_PRECISION_F32 by default */
    char bf16_kernel[16];                  /* precision bf16: "" or "auto", or a kernel's name as
                                              mha_engine_kernel says it ("fma-bf16", ...), one
                                              of the isa's */
    mha_kv_type kv_type;                   /* the KV cache's elements; MHA_KV_AUTO by default */
    char isa[16];                          /* the kernel table: "" or "auto" (the widest this CPU
                                              runs; with blis_arch set, the widest that runs
                                              that sub-config), "avx512", "avx2" or "ref" */
    mha_mla mla;                           /* multi-head latent attention; none by default. With
                                              it, n_heads query heads, no n_kv_heads, head_dim,
                                              v_head_dim, QK-norm, sinks, ALiBi, window or
                                              softcap; the scale's default is
                                              1/sqrt(qk_nope_head_dim + qk_rope_head_dim) */
    mha_weight_type weight_type[MHA_W_COUNT]; /* Wq, Wk, Wv, Wo as the engine holds them
                                              (MHA_W_Q …): F32 by default; a block type needs
                                              d_model (Wq, Wk, Wv) and n_heads·head_dim (Wo) to
                                              be whole blocks (32 inputs; 256 for the K types); not
                                              with MLA */
    mha_activations weight_activations;    /* what block-type weights multiply: F32 by default;
                                              INT16 needs block-type weights */
} mha_config;

/* Defaults: d_model 512, 8 heads, capacity 1 × 128 × 128, bias on, all CPUs, no pinning,
 * precision f32, n_kv_heads = n_heads, no RoPE (theta 10000, factor 1, low/high_freq_factor 1/4, beta_fast/slow
 * 32/1 ready for when a style is set), no window, the scale 1/sqrt(head_dim), no softcap, sinks,
 * QK-norm (eps 1e-6 ready) or ALiBi. */
MHA_API void mha_config_init(mha_config *cfg);
/* d_k of the config's heads: head_dim, or d_model / n_heads (0 for NULL or n_heads < 1); with
 * MLA, the absorbed core's: kv_lora_rank + qk_rope_head_dim. */
MHA_API int mha_config_head_dim(const mha_config *cfg);
/* d_v of the core's heads (what mha_core_forward reads of V and writes a head's output):
 * v_head_dim, or with MLA the latent (kv_lora_rank: V is K's first features), else d_k. */
MHA_API int mha_config_v_head_dim(const mha_config *cfg);
/* The length of QK-norm's weights q_norm (k = 0) or k_norm (k = 1): 0 without QK-norm, d_k
 * for HEAD, n_heads·d_k (q_norm) or n_kv_heads·d_k (k_norm) for FULL. */
MHA_API int mha_config_qk_norm_len(const mha_config *cfg, int k);
/* mha_config_load (a YAML config into cfg) is in mha_io.h with the other loaders: the engine's
 * own header needs no YAML. */
/* Everything mha_create checks, without creating: MHA_OK, MHA_ERR_INVALID_ARG (cfg NULL),
 * MHA_ERR_CONFIG (a field out of range, an unknown or unrunnable blis_arch, sizes that
 * overflow) or MHA_ERR_AFFINITY (cpus names a CPU this process may not use), with a message
 * naming the field in err ("n_heads: 7 does not divide d_model 512"); mha_create_msg and its
 * kin say the same for a failed create. */
MHA_API mha_status mha_config_check(const mha_config *cfg, char *err, size_t err_len);

MHA_API size_t mha_workspace_size(const mha_config *cfg); /* 0 if cfg is invalid */
MHA_API mha_status mha_create(const mha_config *cfg, mha_engine **out);
/* Runs in caller memory ws (64-byte aligned, at least mha_workspace_size bytes) and never
 * allocates; ws must outlive the engine. mha_workspace_size is a function of the config
 * alone, except that threads = 0 counts mha_cpus_allowed() of the calling thread: to size
 * on one thread and create on another, set threads. */
MHA_API mha_status mha_create_static(const mha_config *cfg, void *ws, size_t ws_len,
                                     mha_engine **out);
MHA_API void mha_free(mha_engine *e); /* accepts NULL */
/* The same creates with their message: on failure err (when not NULL) says which field and
 * why, as mha_config_check does ("isa: 'neon': unknown …", "ws: 4096 bytes at 0x…: this config
 * needs 1081344, 64-byte aligned"); "" on success. */
MHA_API mha_status mha_create_msg(const mha_config *cfg, mha_engine **out, char *err, size_t err_len);
MHA_API mha_status mha_create_static_msg(const mha_config *cfg, void *ws, size_t ws_len, mha_engine **out,
                                         char *err, size_t err_len);

typedef enum { MHA_LAYOUT_XW, MHA_LAYOUT_TORCH } mha_layout;
/* XW: each W is (d_in, d_out) applied as x·W (the reference numpy class).
 * TORCH: each W is (d_out, d_in) applied as x·Wᵀ (nn.Linear, in_proj_weight rows).
 * w_q maps d to n_heads·d_k ((d, n_heads·d_k) in XW, (n_heads·d_k, d) in TORCH), w_k and w_v
 * to n_kv_heads·d_k, and w_o maps n_heads·d_k back to d ((n_heads·d_k, d) in XW, (d,
 * n_heads·d_k) in TORCH); b_q has n_heads·d_k entries, b_k and b_v n_kv_heads·d_k, b_o d.
 * Without head_dim, n_heads·d_k = d. */
typedef struct mha_weights {
    const float *w_q, *w_k, *w_v, *w_o;
    const float *b_q, *b_k, *b_v, *b_o;  /* config with bias: b_q, b_k, b_v, and b_o or NULL
                                            (no output bias, as Qwen2); without: all NULL */
    mha_layout layout;
    const float *q_norm, *k_norm;        /* qk_norm: the RMSNorm weights of Q and K
                                            (mha_config_qk_norm_len each: d_k for head, the
                                            projections' widths for full; HF's q_norm.weight,
                                            k_norm.weight); else NULL */
    const float *sinks;                  /* sinks: one logit per head (n_heads, HF's sinks);
                                            else NULL */
    mha_weight_type type[MHA_W_COUNT];   /* of Wq, Wk, Wv, Wo (MHA_W_Q …): F32 (0): w_q … as
                                            floats; any other: blocks[i] as a GGUF file stores
                                            the matrix (TORCH layout only: per output a row of
                                            blocks along the inputs), w_q … NULL. The engine's
                                            weight_type F32 takes any (converted, dequantized at
                                            load); a block type takes floats (quantized at load,
                                            as ggml's reference quantizer) or its own type (as
                                            stored) */
    const void *blocks[MHA_W_COUNT];
} mha_weights;
MHA_API mha_status mha_set_weights(mha_engine *e, const mha_weights *w); /* copies and packs */

/* An MLA engine's weights (config mla.kv_lora_rank > 0), as HF's DeepseekV3Attention names
 * them; TORCH layout: each (out, in) as nn.Linear stores it, XW: (in, out). With
 * q_lora_rank: q_a (q_lora, d), q_a_norm (q_lora), q_b (heads·(nope + rope), q_lora); without:
 * q (heads·(nope + rope), d). kv_a (kv_lora + rope, d): kv_a_proj_with_mqa; kv_a_norm
 * (kv_lora); kv_b (heads·(nope + v), kv_lora): each head's nope rows of K, then its v rows of
 * V; o (d, heads·v). Biases with the config's bias (HF's attention_bias): b_q_a (q_lora, with
 * q_lora_rank), b_kv_a (kv_lora + rope), b_o (d); else NULL. An MLA engine takes these, not
 * mha_weights (mha_set_weights refuses it, and this refuses an engine without MLA). */
typedef struct mha_mla_weights {
    mha_layout layout;
    const float *q_a, *q_a_norm, *q_b, *q;
    const float *kv_a, *kv_a_norm, *kv_b, *o;
    const float *b_q_a, *b_kv_a, *b_o;
} mha_mla_weights;
MHA_API mha_status mha_set_mla_weights(mha_engine *e, const mha_mla_weights *w); /* copies and packs */

/* Shared weights: packed once, read by any number of engines (one per core is the
 * recommended server setup), so the process holds one copy instead of one per engine.
 * mha_pack_weights copies and packs w for cfg's model (d_model, n_heads, bias) and kernel
 * (blis_arch); the packed copy is read-only and may be used from any thread.
 * mha_create_shared makes an engine whose arena holds no weights: cfg must describe the
 * same model and kernel as the packed copy's (else MHA_ERR_CONFIG), pw must outlive it,
 * and mha_set_weights on it is MHA_ERR_STATE. Outputs are bitwise those of an engine with
 * its own copy. */
typedef struct mha_packed_weights mha_packed_weights; /* opaque */
MHA_API mha_status mha_pack_weights(const mha_config *cfg, const mha_weights *w, mha_packed_weights **out);
MHA_API void mha_packed_weights_free(mha_packed_weights *pw); /* accepts NULL */
MHA_API size_t mha_packed_weights_size(const mha_packed_weights *pw); /* bytes held */
MHA_API mha_status mha_create_shared(const mha_config *cfg, const mha_packed_weights *pw, mha_engine **out);
/* With its message, naming the field that differs from the packed copy's ("n_heads: 8, but the
 * packed weights were made for 4"). */
MHA_API mha_status mha_create_shared_msg(const mha_config *cfg, const mha_packed_weights *pw, mha_engine **out,
                                         char *err, size_t err_len);

typedef struct mha_input {
    int batch, seq_q, seq_kv;
    const float *q, *k, *v;        /* (batch, seq_q, d), (batch, seq_kv, d) ×2 */
    const int32_t *q_lengths;      /* NULL or (batch): valid query rows; the rest of out is 0 */
    const int32_t *kv_lengths;     /* NULL or (batch): key padding */
    int causal;                    /* 1: causal mask, bottom-right aligned as PyTorch */
    const uint8_t *mask;           /* NULL or (seq_q, seq_kv), 0 = hidden */
} mha_input;

/* out: (batch, seq_q, d). attn: NULL or (batch, n_heads, seq_q, seq_kv).
 * A query row with no visible key gets a zero attention row (its out row is b_o);
 * a row past its q_length is 0 in out and attn. out and attn must not overlap the inputs
 * or each other (inputs are read while out is written). */
MHA_API mha_status mha_forward(mha_engine *e, const mha_input *in, float *out, float *attn);
/* (MHA_ERR_STATE, too, when called inside an active OpenMP parallel region with threads > 1.) */

/* ---- decoding: a paged KV cache and steps of prefill and decode ----
 *
 * The cache holds K (after bias and RoPE) and V of every KV head for blocks of block_size
 * token slots; a sequence's position p lives in block table[p / block_size], slot
 * p % block_size, so sequences grow block by block and may share blocks they only read (a
 * common prompt prefix). One block per sequence of max_context slots is the contiguous case.
 * Elements are the config's kv_type: float32, or bfloat16 (rounded to nearest even as they are
 * written: half the bytes) for a config of precision bf16, or int8 (a quarter, plus scales)
 * for either: K per feature over each group of MHA_KV_GROUP slots of a block (a scale and a
 * zero point per feature), V per slot (a scale and a zero point). The group a sequence is still
 * filling keeps its K in float32 inside the cache, in an entry of its *open-group pool*
 * (max_seqs entries, each kvh · MHA_KV_GROUP · d_k floats, counted by mha_kv_cache_size),
 * until the group is complete; a new token sees its own group's keys at full precision and the
 * groups before it as stored. An entry is tagged with its group's block, slot and the positions
 * it holds: a step whose sequence's table or n_past does not match what the cache holds gets
 * MHA_ERR_STATE, never wrong numbers. An MLA config's cache is its latent
 * cache: one KV head per token, K = [normed latent | rotated k_rope] (kv_lora_rank +
 * qk_rope_head_dim) alone, V being its latent part (float32 or bf16; int8 not yet). The cache
 * is made for a config (d_model, heads, KV heads, RoPE, MLA, kv type) and works with any
 * engine of that model and kv type. One call at a time uses a cache (steps, copies, swaps,
 * releases); different caches are independent. */
typedef struct mha_kv_cache mha_kv_cache; /* opaque */
/* Slots per quantization group of an int8 cache's K (a block of fewer slots, or a block's last
 * slots past a multiple of it, is a group of its own). */
#define MHA_KV_GROUP 16
/* Bytes a cache of n_blocks blocks needs (mha_kv_cache_create_static's len); 0 if invalid.
 * max_seqs: for an int8 cache, the sequences that may have a K group open at once (the pool's
 * entries; 0: the config's max_batch); unused by float32 and bf16 caches, which keep nothing
 * per sequence. */
MHA_API size_t mha_kv_cache_size(const mha_config *cfg, int n_blocks, int block_size, int max_seqs);
/* The cache's memory is zeroed (its pages touched) here, not in the first steps. */
MHA_API mha_status mha_kv_cache_create(const mha_config *cfg, int n_blocks, int block_size, int max_seqs,
                                       mha_kv_cache **out);
/* In caller memory mem (64-byte aligned, at least mha_kv_cache_size bytes; outlives the cache). */
MHA_API mha_status mha_kv_cache_create_static(const mha_config *cfg, int n_blocks, int block_size, int max_seqs,
                                              void *mem, size_t len, mha_kv_cache **out);
MHA_API void mha_kv_cache_free(mha_kv_cache *c); /* accepts NULL */
/* The message of the cache's last failed block operation below (empty after a success). */
MHA_API const char *mha_kv_cache_last_error(const mha_kv_cache *c);

/* ---- block operations, for servers (vLLM's copy_blocks and swap; llama.cpp's sequence
 * copy and removal). Each checks everything first (ids within 0..n_blocks − 1, no block twice,
 * the pool's room): on failure it returns MHA_ERR_INVALID_ARG, MHA_ERR_SHAPE (an id out of
 * range), MHA_ERR_STATE (no room in the pool) or MHA_ERR_WORKSPACE (a buffer too small), with
 * mha_kv_cache_last_error saying what, and changes nothing. ---- */

/* Block dst[i] becomes a copy of block src[i] for i < n: every KV head's elements and, for an
 * int8 cache, the open groups src[i] holds (a fork: beam search, parallel sampling, or
 * copy-on-write of a shared prefix's last block before two sequences write into it). A
 * sequence continued on the copy gives the bits it would have given on the original. No dst
 * may be a src or appear twice. */
MHA_API mha_status mha_kv_cache_copy_blocks(mha_kv_cache *c, const int32_t *src, const int32_t *dst, int n);
/* Bytes mha_kv_cache_swap_out needs for blocks[0 .. n) (their elements, and an int8 cache's
 * open groups in them); 0 if an argument is invalid. */
MHA_API size_t mha_kv_cache_swap_size(const mha_kv_cache *c, const int32_t *blocks, int n);
/* Preemption: blocks[0 .. n) (a sequence's table, in order) and their open groups written into
 * dst (len bytes, at least mha_kv_cache_swap_size), then released (mha_kv_cache_release): the
 * blocks may be reused by others. */
MHA_API mha_status mha_kv_cache_swap_out(mha_kv_cache *c, const int32_t *blocks, int n, void *dst, size_t len);
/* The image of n blocks that swap_out wrote, back into blocks[0 .. n) (any free blocks of a
 * cache of the same layout, not necessarily the ones it left): the sequence continues with
 * them as its table, bit for bit as if it had never left. MHA_ERR_FORMAT: src is not such an
 * image. */
MHA_API mha_status mha_kv_cache_swap_in(mha_kv_cache *c, const int32_t *blocks, int n, const void *src, size_t len);
/* blocks[0 .. n) hold nothing any sequence continues from: an int8 cache's open groups in
 * them are dropped (a finished or cancelled sequence's blocks, before they are reused). A
 * server releases a sequence's blocks when it ends, or its open group keeps a pool entry. */
MHA_API mha_status mha_kv_cache_release(mha_kv_cache *c, const int32_t *blocks, int n);
/* Entries of the open-group pool in use (int8), out of mha_kv_cache_max_open. */
MHA_API int mha_kv_cache_open_groups(const mha_kv_cache *c);
MHA_API int mha_kv_cache_max_open(const mha_kv_cache *c);

/* One step: each sequence has n_past tokens cached and brings n_new tokens at positions
 * n_past .. n_past + n_new − 1 (a prefill chunk, one decode token, or 0: nothing). Their K and
 * V are written into the cache, then each new token attends causally (and within the window)
 * to its sequence's positions up to its own. */
typedef struct mha_step {
    int n_seqs;
    const int32_t *n_past;     /* (n_seqs): tokens already cached per sequence */
    const int32_t *n_new;      /* (n_seqs): new tokens per sequence, >= 0 */
    const int32_t *blocks;     /* (n_seqs, max_blocks): cache blocks in position order */
    int max_blocks;            /* row stride of blocks */
    const float *x;            /* (sum of n_new, d): new tokens, sequence after sequence */
} mha_step;
/* out: (sum of n_new, d). The whole step is checked before anything is written: n_seqs <=
 * max_batch, each n_new <= max_seq_q and their sum <= max_batch·max_seq_q, n_past + n_new <=
 * min(max_blocks·block_size, max_seq_kv), the block ids a sequence needs in range, the cache
 * made for this model, and for an int8 cache each open group the step continues held by the
 * cache as the sequence left it and room in its pool for the groups the step leaves open;
 * otherwise MHA_ERR_SHAPE / MHA_ERR_INVALID_ARG / MHA_ERR_CONFIG (another model's cache) /
 * MHA_ERR_STATE (an open group missing, stale or shared with another sequence of the step; a
 * full pool) with mha_engine_last_error saying what, and neither the cache nor out changes. Within one kernel table and precision, a sequence's output rows and the K and
 * V it writes have the same bits however its tokens are split into steps (one prefill,
 * chunks, token by token), whatever else the step holds (other sequences decoding or
 * prefilling, their number), for every thread count and block table, and equal one causal
 * mha_forward over it (docs/determinism.md). Allocates nothing. */
MHA_API mha_status mha_step_forward(mha_engine *e, mha_kv_cache *c, const mha_step *s, float *out);

/* ---- the attention core: Q, K, V given (after projection and RoPE), as PyTorch's SDPA ----
 *
 * out = softmax(scale·Q·Kᵀ + the engine's logit variants + masks) · V for every query head of
 * every sequence, with no projection: for servers that run their own projections (an HF
 * custom attention function) and to measure the core alone. The engine's config gives the
 * heads (n_heads, n_kv_heads: GQA as repeat_kv), head_dim, scale, softcap, ALiBi, the
 * window, the precision (bf16: Q, K, V and the probabilities rounded as the forward rounds
 * them) and the capacity (max_batch, max_seq_q, max_seq_kv); d_model, RoPE, QK-norm and the
 * weights play no part (no mha_set_weights needed). Positions: key j at j, query i at
 * i + seq_kv − seq_q (PyTorch's bottom-right causal alignment), as mha_forward.
 *
 * Tensors are float32, or with dtype MHA_DTYPE_BF16 bfloat16 (uint16_t, the high half of a
 * float32; an engine of precision bf16 only: its products round to bf16 anyway, so the
 * results equal those of the same values in float32, and out is rounded to bf16 from them),
 * with each row's head_dim features contiguous (v's and out's: v_head_dim; v may be k itself
 * with k's strides, its rows' first v_head_dim features read in place); element (b, h, i, c)
 * of q is q[b·q_stride[0] + h·q_stride[1] + i·q_stride[2] + c] (strides in elements, >= 0), k
 * and v likewise over the KV heads and seq_kv rows, out over the query heads and seq_q rows.
 * Strides of all zeros mean contiguous (batch, heads, rows, features), SDPA's layout; HF's
 * (batch, rows, heads, head_dim) is {rows·heads·head_dim, head_dim, heads·head_dim}. */
typedef enum { MHA_DTYPE_F32 = 0, MHA_DTYPE_BF16 = 1 } mha_dtype;
typedef struct mha_core_input {
    int batch, seq_q, seq_kv;
    mha_dtype dtype;               /* of q, k, v and out: MHA_DTYPE_F32 (0) or MHA_DTYPE_BF16 */
    const void *q, *k, *v;
    ptrdiff_t q_stride[3], k_stride[3], v_stride[3];
    const int32_t *q_lengths;      /* NULL or (batch): valid query rows; out's other rows are 0 */
    const int32_t *kv_lengths;     /* NULL or (batch): key padding */
    int causal;                    /* 1: causal mask, bottom-right aligned as PyTorch */
    const uint8_t *mask;           /* NULL or (seq_q, seq_kv), 0 = hidden */
    const float *sinks;            /* config sinks: (n_heads) logits; else NULL */
} mha_core_input;
/* out: element (b, h, i, c) at out[b·out_stride[0] + h·out_stride[1] + i·out_stride[2] + c]
 * (out_stride NULL or all zeros: contiguous (batch, n_heads, seq_q, v_head_dim)); no two of its
 * elements may share an address, and out must not overlap q, k or v. Everything is checked
 * before anything is written (sizes against the capacity, lengths, NULLs, strides, sinks
 * given exactly when the config has them): MHA_ERR_SHAPE / MHA_ERR_INVALID_ARG with
 * mha_engine_last_error saying what, out untouched. A row with no visible key is 0. Within
 * a kernel table and precision, a row's bits depend on its own query and its sequence's
 * keys alone (not the batch, the thread count or the strides), and equal mha_forward's
 * attention of the same Q, K, V. Allocates nothing; MHA_ERR_STATE inside an active OpenMP
 * parallel region with threads > 1. */
MHA_API mha_status mha_core_forward(mha_engine *e, const mha_core_input *in, void *out, const ptrdiff_t out_stride[3]);

/* The message of the engine's last failed call (set_weights, forward), naming the field
 * and values ("batch 3 > max_batch 2"); "" after a success. Never NULL. A failed create
 * has no engine: mha_config_check gives its message. */
MHA_API const char *mha_engine_last_error(const mha_engine *e);

/* Accessors. */
MHA_API const char *mha_engine_blis_arch(const mha_engine *e); /* BLIS sub-config in use */
MHA_API const char *mha_engine_isa(const mha_engine *e);       /* kernel table; "" for NULL */
/* What runs the matrix products: "blis-<sub-config>" (f32), or for bf16 "amx-bf16" (AMX
 * tiles), "avx512-bf16" (vdpbf16ps), "fma-bf16" (bf16 storage, float32 FMA, AVX-512),
 * "avx2-bf16" (the same on AVX2) or "ref-bf16" (portable C). "" for NULL. */
MHA_API const char *mha_engine_kernel(const mha_engine *e);
MHA_API int mha_engine_threads(const mha_engine *e);            /* worker threads */
MHA_API int mha_engine_q_block(const mha_engine *e);            /* query-block rows */
MHA_API size_t mha_engine_workspace_size(const mha_engine *e);  /* arena bytes */
/* The CPU each worker ran on at the start of the last forward (-1: not run yet).
 * Writes min(n, threads) entries; returns how many were written. */
MHA_API int mha_engine_worker_cpus(const mha_engine *e, int *cpus, int n);

/* RoPE's frequencies as the engine uses them: inv_freq[i] for i < rotary_dim / 2 (float32,
 * as HF computes them) and the factor cos and sin are scaled by (yarn's attention factor,
 * else 1). Key j is rotated by angle j·inv_freq[i] (a float32 product), query i of a forward
 * by (i + seq_kv − seq_q)·inv_freq[i]. MHA_ERR_INVALID_ARG for a NULL pointer or an odd or
 * non-positive rotary_dim. */
MHA_API mha_status mha_rope_inv_freq(const mha_rope *rope, int rotary_dim, float *inv_freq, float *attention_factor);

/* The CPUs this process may use, ascending, into cpus[0 .. min(n, max)); returns n, or -1.
 * When OpenMP binds threads (OMP_PROC_BIND/OMP_PLACES), libgomp pins the initial thread to
 * one place before main, so this is the union of OpenMP's places; otherwise it is the
 * calling thread's affinity mask. threads = 0 and the close/spread pinnings use this set. */
MHA_API int mha_cpus_allowed(int *cpus, int max);
MHA_API size_t mha_l2_bytes(void); /* per-core L2 cache; 0 if unknown */

/* The kernel table "auto" picks on this CPU: "avx512" (AVX-512 F/DQ/BW/VL and FMA), "avx2"
 * (AVX2, FMA and F16C) or "ref" (portable C). Each table holds every ISA-specific operation
 * of the engine; results are bit for bit the same within a table and precision, and may
 * differ across tables (float rounding). */
MHA_API const char *mha_isa_auto(void);
/* Whether this CPU (and the OS) has `feature`, as the kernel tables test it: x86-64's names as
 * /proc/cpuinfo's flags ("avx512f", "avx2", "amx_bf16"), aarch64's from the auxiliary vector
 * ("asimd", "fphp", "asimddp", "bf16", "i8mm", "sve", "sve2"); 0 for a name it does not know. */
MHA_API int mha_cpu_has_feature(const char *feature);
/* The name of kernel table i of this build, widest first ("avx512", "avx2", "ref" on x86-64;
 * "ref" on aarch64), or NULL past the last: what isa may name. */
MHA_API const char *mha_isa_table(int i);
/* What kernel table `isa` holds, as one line into buf: the CPU features it needs, whether this
 * CPU runs it, its BLIS sub-configs, its bf16 kernels and its integer products for int16
 * activations, the one an engine here takes marked ("needs avx2 fma f16c; runs here; BLIS
 * haswell zen3 zen2 zen; bf16 avx2-bf16; int16 products avx2-vnni avx2 (here) ref").
 * MHA_ERR_CONFIG for an unknown name (buf says which exist), MHA_ERR_INVALID_ARG for NULL. */
MHA_API mha_status mha_isa_describe(const char *isa, char *buf, size_t len);
/* The BLIS sub-config "auto" picks on this CPU (the auto table's default), and the version of
 * the BLIS linked in. */
MHA_API const char *mha_blis_arch_auto(void);
/* The bf16 kernel "auto" picks here (within the auto table), named as mha_engine_kernel names
 * it: "amx-bf16", "avx512-bf16" (AMD), "fma-bf16", "avx2-bf16" or "ref-bf16". Asks the OS for
 * nothing: an engine on amx-bf16 requests Linux's tile data permission at create. */
MHA_API const char *mha_bf16_kernel_auto(void);
MHA_API const char *mha_blis_version(void);

#ifdef __cplusplus
}
#endif
#endif /* MHA_H */
