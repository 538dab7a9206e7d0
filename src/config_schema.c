/* config_schema.c — the one table of config keys (DESIGN.md §6): name, type, range, default
 * and where the value goes. It drives mha_config_init's defaults, the range checks of
 * mha_config_check, the YAML loader (config_load.c) and docs/config.md's key table (`mha schema`),
 * so a key is added in one place and its messages say the same thing everywhere. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "status.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define ENG(f) offsetof(mha_config, f) /* engine keys: offsets in mha_config */
#define NONE ((size_t)-1)

_Static_assert(sizeof(mha_pinning) == sizeof(int) && sizeof(mha_precision) == sizeof(int) && sizeof(mha_qk_norm_kind) == sizeof(int) &&
                   sizeof(mha_kv_type) == sizeof(int) && sizeof(mha_weight_type) == sizeof(int) && sizeof(mha_activations) == sizeof(int),
               "enum fields are stored as int");

static const mha_config_name pinning_names[] = {
    {"none", MHA_PIN_NONE}, {"close", MHA_PIN_CLOSE}, {"spread", MHA_PIN_SPREAD}, {"cpus", MHA_PIN_CPUS}};
static const mha_config_name rope_style_names[] = {
    {"none", MHA_ROPE_NONE}, {"neox", MHA_ROPE_NEOX}, {"gptj", MHA_ROPE_GPTJ}};
static const mha_config_name rope_scaling_names[] = {{"none", MHA_ROPE_SCALING_NONE},
    {"linear", MHA_ROPE_SCALING_LINEAR}, {"llama3", MHA_ROPE_SCALING_LLAMA3}, {"yarn", MHA_ROPE_SCALING_YARN}};
static const mha_config_name qk_norm_names[] = {{"none", MHA_QK_NORM_NONE}, {"head", MHA_QK_NORM_HEAD}, {"full", MHA_QK_NORM_FULL}};
static const mha_config_name precision_names[] = {{"f32", MHA_PRECISION_F32}, {"bf16", MHA_PRECISION_BF16}};
static const mha_config_name kv_type_names[] = {
    {"auto", MHA_KV_AUTO}, {"f32", MHA_KV_F32}, {"bf16", MHA_KV_BF16}, {"int8", MHA_KV_INT8}};
/* the types the engine holds projections in (mha.h's mha_weight_type; F16 and BF16 are
 * converted at load, never held) */
static const mha_config_name weight_type_names[] = {{"f32", MHA_WEIGHT_F32}, {"q8_0", MHA_WEIGHT_Q8_0},
    {"q4_0", MHA_WEIGHT_Q4_0}, {"q4_1", MHA_WEIGHT_Q4_1}, {"q5_0", MHA_WEIGHT_Q5_0}, {"q5_1", MHA_WEIGHT_Q5_1},
    {"q4_k", MHA_WEIGHT_Q4_K}, {"q5_k", MHA_WEIGHT_Q5_K}, {"q6_k", MHA_WEIGHT_Q6_K}};
static const mha_config_name activations_names[] = {
    {"f32", MHA_ACTIVATIONS_F32}, {"int16", MHA_ACTIVATIONS_INT16}, {"bf16", MHA_ACTIVATIONS_BF16}};
#define NAMES(a) a, (int)N_OF(a)

/* K(key, engine field, type, min, max, max entries, required, enum text, default text, doc),
 * then destination, count destination, default value, enum names */
#define K(key, field, type, lo, hi, count, req, values, dtext, doc) {key, field, type, lo, hi, count, req, values, dtext, doc, 0, 0, 0}
#define KEY(pub, off, count_off, def, ...) {pub, off, count_off, def, __VA_ARGS__, 0.0} /* ...: enum names, count */
/* a float key of the engine: (lo, hi], its default */
#define FLOAT_KEY(key, field, lo, hi, dtext, doc, off, fdef)                                      \
    {{key, field, MHA_KEY_FLOAT, 0, 0, 0, 0, NULL, dtext, doc, lo, hi, 1}, off, NONE, 0, NULL, 0, fdef}
/* the same from lo included */
#define FLOAT_KEY_FROM(key, field, lo, hi, dtext, doc, off, fdef)                                 \
    {{key, field, MHA_KEY_FLOAT, 0, 0, 0, 0, NULL, dtext, doc, lo, hi, 0}, off, NONE, 0, NULL, 0, fdef}
const mha_config_row mha_keys[] = {
    KEY(K("model.d_model", "d_model", MHA_KEY_INT, 1, MHA_MAX_WIDTH, 0, 1, NULL, "512", "model width d"),
        ENG(d_model), NONE, 512, NULL, 0),
    KEY(K("model.heads", "n_heads", MHA_KEY_INT, 1, 65536, 0, 1, NULL, "8", "attention heads h; divides d_model unless head_dim is set"),
        ENG(n_heads), NONE, 8, NULL, 0),
    KEY(K("model.bias", "bias", MHA_KEY_BOOL, 0, 1, 0, 0, NULL, "true", "q, k, v and output projection biases"),
        ENG(bias), NONE, 1, NULL, 0),
    KEY(K("model.kv_heads", "n_kv_heads", MHA_KEY_INT, 0, 65536, 0, 0, NULL, "heads", "key/value heads (grouped-query attention; 1: multi-query); divides heads; 0: heads"),
        ENG(n_kv_heads), NONE, 0, NULL, 0),
    KEY(K("model.head_dim", "head_dim", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "d_model / heads", "d_k of every head (Qwen3, Gemma 2, gpt-oss: not d_model / heads); heads·head_dim <= 65536; 0: d_model / heads"),
        ENG(head_dim), NONE, 0, NULL, 0),
    KEY(K("model.v_head_dim", "v_head_dim", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "head_dim", "V's features per head, at most head_dim (an MLA model's absorbed core: K of kv_lora + rope, V its first kv_lora); runs mha_core_forward / mha run --core only; 0: head_dim"),
        ENG(v_head_dim), NONE, 0, NULL, 0),
    KEY(K("model.window", "window", MHA_KEY_INT, 0, 1 << 20, 0, 0, NULL, "0", "sliding window W: position p sees keys p-W < j <= p (causal implied); 0: none"),
        ENG(window), NONE, 0, NULL, 0),
    FLOAT_KEY_FROM("model.scale", "scale", 0, 1e6, "1/sqrt(head_dim)", "the scores' factor (Gemma 2: query_pre_attn_scalar^-0.5); 0: 1/sqrt(head_dim)", ENG(scale), 0.0),
    FLOAT_KEY_FROM("model.softcap", "softcap", 0, 1e6, "0", "logit softcapping (Gemma 2): s -> softcap·tanh(s/softcap) after the scale, before ALiBi and masks; 0: none", ENG(softcap), 0.0),
    KEY(K("model.sinks", "sinks", MHA_KEY_BOOL, 0, 1, 0, 0, NULL, "false", "a learned logit per head (tensor sinks) in every softmax denominator (gpt-oss)"),
        ENG(sinks), NONE, 0, NULL, 0),
    KEY(K("model.qk_norm.kind", "qk_norm.kind", MHA_KEY_ENUM, 0, 0, 0, 0, "none, head, full", "none", "RMSNorm of Q and K before RoPE: head over each head's d_k (Qwen3, Gemma 3; tensors q_norm.weight, k_norm.weight of d_k), full over the whole projection (OLMo 2; heads·d_k and kv_heads·d_k)"),
        ENG(qk_norm.kind), NONE, MHA_QK_NORM_NONE, NAMES(qk_norm_names)),
    FLOAT_KEY("model.qk_norm.eps", "qk_norm.eps", 0, 1, "1e-6", "QK-norm: the RMSNorm epsilon", ENG(qk_norm.eps), 1e-6),
    KEY(K("model.qk_norm.weight_offset", "qk_norm.weight_offset", MHA_KEY_INT, 0, 1, 0, 0, NULL, "0", "QK-norm: 1 multiplies by (1 + w), as Gemma's RMSNorm"),
        ENG(qk_norm.weight_offset), NONE, 0, NULL, 0),
    FLOAT_KEY_FROM("model.alibi.max_bias", "alibi_max_bias", 0, 1024, "0", "ALiBi (BLOOM: 8): score - slope_h·|p_q - p_k|, BLOOM's slopes; 0: none; not with RoPE", ENG(alibi_max_bias), 0.0),
    KEY(K("model.rope.style", "rope.style", MHA_KEY_ENUM, 0, 0, 0, 0, "none, neox, gptj", "none", "rotary embeddings: neox rotates halves (Llama, HF rotate_half), gptj adjacent pairs"),
        ENG(rope.style), NONE, MHA_ROPE_NONE, NAMES(rope_style_names)),
    FLOAT_KEY("model.rope.theta", "rope.theta", 0, 1e12, "10000", "RoPE base", ENG(rope.theta), 10000.0),
    KEY(K("model.rope.rotary_dim", "rope.rotary_dim", MHA_KEY_INT, 0, 65536, 0, 0, NULL, "d_k", "features rotated per head, even, <= d_k; 0: d_k"),
        ENG(rope.rotary_dim), NONE, 0, NULL, 0),
    KEY(K("model.rope.scaling", "rope.scaling", MHA_KEY_ENUM, 0, 0, 0, 0, "none, linear, llama3, yarn", "none", "scaling of the frequencies, as HF's rope_type"),
        ENG(rope.scaling), NONE, MHA_ROPE_SCALING_NONE, NAMES(rope_scaling_names)),
    FLOAT_KEY("model.rope.factor", "rope.factor", 0, 1e6, "1", "linear, llama3, yarn: the scaling factor", ENG(rope.factor), 1.0),
    FLOAT_KEY("model.rope.low_freq_factor", "rope.low_freq_factor", 0, 1e6, "1", "llama3", ENG(rope.low_freq_factor), 1.0),
    FLOAT_KEY("model.rope.high_freq_factor", "rope.high_freq_factor", 0, 1e6, "4", "llama3; above low_freq_factor", ENG(rope.high_freq_factor), 4.0),
    KEY(K("model.rope.original_max_position", "rope.original_max_position", MHA_KEY_INT, 0, 1 << 24, 0, 0, NULL, "0", "llama3, yarn: the pre-training context (required by both)"),
        ENG(rope.original_max_position), NONE, 0, NULL, 0),
    FLOAT_KEY("model.rope.beta_fast", "rope.beta_fast", 0, 1e6, "32", "yarn; above beta_slow", ENG(rope.beta_fast), 32.0),
    FLOAT_KEY("model.rope.beta_slow", "rope.beta_slow", 0, 1e6, "1", "yarn", ENG(rope.beta_slow), 1.0),
    KEY(K("model.rope.truncate", "rope.truncate", MHA_KEY_BOOL, 0, 1, 0, 0, NULL, "true", "yarn: round the correction range out to whole dimensions (HF's truncate; gpt-oss: false)"),
        ENG(rope.truncate), NONE, 1, NULL, 0),
    KEY(K("batch.size", "max_batch", MHA_KEY_INT, 1, 65536, 0, 0, NULL, "1", "sequences per forward (engine capacity)"),
        ENG(max_batch), NONE, 1, NULL, 0),
    KEY(K("batch.seq_len", "max_seq_q", MHA_KEY_INT, 1, 1 << 20, 0, 0, NULL, "128", "query tokens per sequence"),
        ENG(max_seq_q), NONE, 128, NULL, 0),
    KEY(K("batch.kv_len", "max_seq_kv", MHA_KEY_INT, 1, 1 << 20, 0, 0, NULL, "seq_len", "key/value tokens per sequence; other than seq_len means cross-attention"),
        ENG(max_seq_kv), NONE, 128, NULL, 0),
    KEY(K("threads.count", "threads", MHA_KEY_INT, 0, MHA_MAX_THREADS, 0, 0, NULL, "0", "worker threads; 0: every CPU the process may use"),
        ENG(threads), NONE, 0, NULL, 0),
    KEY(K("threads.pinning", "pinning", MHA_KEY_ENUM, 0, 0, 0, 0, "none, close, spread, cpus", "none (cpus with a cpus list)", "where workers run"),
        ENG(pinning), NONE, MHA_PIN_NONE, NAMES(pinning_names)),
    KEY(K("threads.cpus", "cpus", MHA_KEY_INT_LIST, 0, 1023, MHA_MAX_CPUS, 0, NULL, "none", "CPUs for pinning cpus: worker t on cpus[t % n]"),
        ENG(cpus), ENG(n_cpus), 0, NULL, 0),
    FLOAT_KEY_FROM("model.rope.mscale", "rope.mscale", 0, 1e6, "0", "yarn, DeepSeek's mscale (with mscale_all_dim: cos and sin scaled by m(mscale)/m(mscale_all_dim)); 0: unset", ENG(rope.mscale), 0.0),
    FLOAT_KEY_FROM("model.rope.mscale_all_dim", "rope.mscale_all_dim", 0, 1e6, "0", "yarn, DeepSeek's mscale_all_dim (an MLA layer's scale times m(mscale_all_dim)^2); 0: unset", ENG(rope.mscale_all_dim), 0.0),
    KEY(K("model.mla.kv_lora_rank", "mla.kv_lora_rank", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "0", "multi-head latent attention (DeepSeek V2/V3, Kimi K2): the latent's width (HF kv_lora_rank); 0: none"),
        ENG(mla.kv_lora_rank), NONE, 0, NULL, 0),
    KEY(K("model.mla.q_lora_rank", "mla.q_lora_rank", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "0", "MLA: Q through q_a_proj, q_a_layernorm, q_b_proj of this rank; 0: q_proj"),
        ENG(mla.q_lora_rank), NONE, 0, NULL, 0),
    KEY(K("model.mla.qk_nope_head_dim", "mla.qk_nope_head_dim", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "0", "MLA: each head's Q and K features without RoPE (required with kv_lora_rank)"),
        ENG(mla.qk_nope_head_dim), NONE, 0, NULL, 0),
    KEY(K("model.mla.qk_rope_head_dim", "mla.qk_rope_head_dim", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "0", "MLA: each head's Q and K features with RoPE (K's shared by every head), even"),
        ENG(mla.qk_rope_head_dim), NONE, 0, NULL, 0),
    KEY(K("model.mla.v_head_dim", "mla.v_head_dim", MHA_KEY_INT, 0, MHA_MAX_WIDTH, 0, 0, NULL, "0", "MLA: each head's V after kv_b_proj (required with kv_lora_rank)"),
        ENG(mla.v_head_dim), NONE, 0, NULL, 0),
    FLOAT_KEY("model.mla.eps", "mla.eps", 0, 1, "1e-6", "MLA: the latent RMSNorms' epsilon (HF's rms_norm_eps)", ENG(mla.eps), 1e-6),
    KEY(K("engine.q_block", "q_block", MHA_KEY_INT, 0, 1 << 20, 0, 0, NULL, "0", "query rows per score tile; 0: the engine's choice"),
        ENG(q_block), NONE, 0, NULL, 0),
    KEY(K("engine.blis_arch", "blis_arch", MHA_KEY_STRING, 0, 15, 0, 0, NULL, "auto", "BLIS sub-config of the isa (avx512: skx; avx2: haswell, zen, zen2, zen3; neon: cortexa57, generic; ref: generic, sandybridge, penryn); auto: the isa's for this CPU"),
        ENG(blis_arch), NONE, 0, NULL, 0),
    KEY(K("engine.precision", "precision", MHA_KEY_ENUM, 0, 0, 0, 0, "f32, bf16", "f32", "arithmetic of the matrix products: bf16 stores weights in bfloat16 and runs on AMX tiles (or the best fallback), its softmax's exp a polynomial within 3e-6 of exp (the probabilities are rounded to bf16 after it)"),
        ENG(precision), NONE, MHA_PRECISION_F32, NAMES(precision_names)),
    KEY(K("engine.kv_cache", "kv_type", MHA_KEY_ENUM, 0, 0, 0, 0, "auto, f32, bf16, int8", "auto", "KV cache elements: auto (the precision's), or int8: K per feature over groups of 16 slots with a scale and zero point, V per token with a scale and zero point (about 0.3 of f32's bytes; either precision; the cache keeps each sequence's open K group)"),
        ENG(kv_type), NONE, MHA_KV_AUTO, NAMES(kv_type_names)),
    KEY(K("engine.bf16_kernel", "bf16_kernel", MHA_KEY_STRING, 0, 15, 0, 0, NULL, "auto", "bf16 kernel of the isa: amx-bf16, avx512-bf16, fma-bf16 (avx512), avx2-bf16 (avx2), neon-bfdot, neon-bf16 (neon), ref-bf16 (ref); auto: the fastest this CPU runs"),
        ENG(bf16_kernel), NONE, 0, NULL, 0),
    KEY(K("engine.isa", "isa", MHA_KEY_STRING, 0, 15, 0, 0, NULL, "auto", "kernel table: avx512, avx2 (x86-64), neon (aarch64), ref; auto: the widest this CPU runs (with blis_arch set: the widest that runs it)"),
        ENG(isa), NONE, 0, NULL, 0),
    KEY(K("weights.type", "weight_type", MHA_KEY_ENUM, 0, 0, 0, 0, "f32, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k", "f32 (mha run --weights M.gguf: the file's types)", "how the engine holds Wq, Wk, Wv and Wo (one type for the four): f32, or ggml's blocks, quantized at load from float weights (as llama.cpp's reference quantizer) or taken as a GGUF file stores them"),
        ENG(weight_type), NONE, MHA_WEIGHT_F32, NAMES(weight_type_names)),
    KEY(K("weights.activations", "weight_activations", MHA_KEY_ENUM, 0, 0, 0, 0, "f32, int16, bf16", "f32", "what block-type weights multiply: f32 (the activations as they are: float32 FMA chains, the f32 contract), int16 (activations rounded to int16 per 32 inputs, exact integer dot products: several times faster, within a stated bound: docs/quant.md), or bf16 (precision bf16 only: the engine's bf16 products on the weights dequantized into bf16, prefills at the bf16 engine's speed); int16 and bf16 need a block weights.type"),
        ENG(weight_activations), NONE, MHA_ACTIVATIONS_F32, NAMES(activations_names)),
};
const int mha_n_keys = (int)N_OF(mha_keys);

MHA_API const mha_config_key *mha_config_key_at(int i)
{
    return i >= 0 && i < mha_n_keys ? &mha_keys[i].spec : NULL;
}

const mha_config_row *mha_key_find(const char *key)
{
    for (int i = 0; i < mha_n_keys; i++)
        if (!strcmp(mha_keys[i].spec.key, key))
            return &mha_keys[i];
    return NULL;
}

/* The engine key that fills the mha_config field spelled by its first n characters. */
static const mha_config_row *mha_key_find_field_n(const char *field, size_t n)
{
    for (int i = 0; i < mha_n_keys; i++) {
        const char *f = mha_keys[i].spec.field;
        if (f && strlen(f) == n && !strncmp(f, field, n))
            return &mha_keys[i];
    }
    return NULL;
}

MHA_API const char *mha_config_value_name(const mha_config_row *row, int value)
{
    for (int i = 0; row && i < row->n_names; i++)
        if (row->names[i].value == value)
            return row->names[i].name;
    return "?";
}

MHA_API const char *mha_pinning_name(mha_pinning p)
{
    return mha_config_value_name(mha_key_find("threads.pinning"), (int)p);
}

MHA_API const char *mha_precision_name(mha_precision p)
{
    return mha_config_value_name(mha_key_find("engine.precision"), (int)p);
}

MHA_API const char *mha_kv_type_name(mha_kv_type t)
{
    return mha_config_value_name(mha_key_find("engine.kv_cache"), (int)t);
}

/* ---- defaults ---- */

void mha_config_rows_default(const mha_config_row *rows, int n, void *base)
{
    for (int i = 0; i < n; i++) {
        const mha_config_row *k = &rows[i];
        void *dst = (char *)base + k->off;
        switch (k->spec.type) {
        case MHA_KEY_INT: case MHA_KEY_BOOL: case MHA_KEY_ENUM:
            *(int *)dst = (int)k->def;
            break;
        case MHA_KEY_UINT64:
            *(uint64_t *)dst = (uint64_t)k->def;
            break;
        case MHA_KEY_FLOAT:
            *(float *)dst = (float)k->fdef;
            break;
        default: /* strings and lists start empty (zeroed by the caller) */
            break;
        }
    }
}

MHA_API int mha_config_head_dim(const mha_config *cfg)
{
    if (!cfg || cfg->n_heads < 1)
        return 0;
    if (cfg->mla.kv_lora_rank > 0) /* the absorbed core's one KV head: [latent | k_rope] */
        return cfg->mla.kv_lora_rank + cfg->mla.qk_rope_head_dim;
    return cfg->head_dim ? cfg->head_dim : cfg->d_model / cfg->n_heads;
}

MHA_API int mha_config_v_head_dim(const mha_config *cfg)
{
    if (!cfg || cfg->n_heads < 1)
        return 0;
    return cfg->v_head_dim ? cfg->v_head_dim : cfg->mla.kv_lora_rank ? cfg->mla.kv_lora_rank : mha_config_head_dim(cfg);
}

MHA_API int mha_config_qk_norm_len(const mha_config *cfg, int k)
{
    if (!cfg || cfg->n_heads < 1)
        return 0;
    const int heads = k && cfg->n_kv_heads > 0 ? cfg->n_kv_heads : cfg->n_heads;
    return mha_qk_norm_len(cfg->qk_norm.kind, heads, mha_config_head_dim(cfg));
}

MHA_API void mha_config_init(mha_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    mha_config_rows_default(mha_keys, mha_n_keys, cfg);
}

MHA_API void mha_config_client_init(const mha_config_client *client)
{
    if (!client || !client->dest)
        return;
    memset(client->dest, 0, client->size);
    mha_config_rows_default(client->rows, client->n_rows, client->dest);
}

/* ---- the table-driven check of an engine config ---- */

static mha_status fail(mha_key_problem *p, const mha_config_row *k, int index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static mha_status fail(mha_key_problem *p, const mha_config_row *k, int index, const char *fmt, ...)
{
    p->key = k;
    p->index = index;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    return MHA_ERR_CONFIG;
}

static int in_names(const mha_config_row *k, int v)
{
    for (int i = 0; i < k->n_names; i++)
        if (k->names[i].value == v)
            return 1;
    return 0;
}

int mha_rope_key_read(const mha_rope *r, const char *field)
{
    if (strncmp(field, "rope.", 5) != 0 || !strcmp(field, "rope.style"))
        return 1;
    if (r->style == MHA_ROPE_NONE)
        return 0;
    const char *f = field + 5;
    if (!strcmp(f, "theta") || !strcmp(f, "rotary_dim"))
        return 1;
    if (!strcmp(f, "scaling"))
        return 1;
    if (!strcmp(f, "factor"))
        return r->scaling != MHA_ROPE_SCALING_NONE;
    if (!strcmp(f, "low_freq_factor") || !strcmp(f, "high_freq_factor"))
        return r->scaling == MHA_ROPE_SCALING_LLAMA3;
    if (!strcmp(f, "original_max_position"))
        return r->scaling == MHA_ROPE_SCALING_LLAMA3 || r->scaling == MHA_ROPE_SCALING_YARN;
    return r->scaling == MHA_ROPE_SCALING_YARN; /* beta_fast, beta_slow, truncate, mscale, mscale_all_dim */
}

/* An MLA config's own rules: its widths, and the keys it replaces or does not run with. */
static mha_status mla_verify(const mha_config *cfg, mha_key_problem *p)
{
    const mha_mla *m = &cfg->mla;
    if (m->qk_nope_head_dim < 1)
        return fail(p, mha_key_find("model.mla.qk_nope_head_dim"), -1, "must be at least 1 with kv_lora_rank %d",
                    m->kv_lora_rank);
    if (m->v_head_dim < 1)
        return fail(p, mha_key_find("model.mla.v_head_dim"), -1, "must be at least 1 with kv_lora_rank %d",
                    m->kv_lora_rank);
    if (m->qk_rope_head_dim % 2)
        return fail(p, mha_key_find("model.mla.qk_rope_head_dim"), -1, "%d must be even", m->qk_rope_head_dim);
    const long long q = (long long)cfg->n_heads * (m->qk_nope_head_dim + m->qk_rope_head_dim);
    const long long kv = (long long)m->kv_lora_rank + m->qk_rope_head_dim;
    const long long lat = (long long)cfg->n_heads * m->kv_lora_rank, v = (long long)cfg->n_heads * m->v_head_dim;
    /* Q in latent space, every head's [latent | rope]: 73728 in DeepSeek-V3, so 4× the widest Q */
    const struct { const char *key; long long width, max; const char *what; } wide[] = {
        {"model.mla.qk_nope_head_dim", q, MHA_MAX_WIDTH, "Q (heads × (qk_nope_head_dim + qk_rope_head_dim))"},
        {"model.mla.kv_lora_rank", kv, MHA_MAX_WIDTH, "the latent and k_rope (kv_lora_rank + qk_rope_head_dim)"},
        {"model.mla.kv_lora_rank", lat, MHA_MAX_WIDTH, "the heads' latent outputs (heads × kv_lora_rank)"},
        {"model.mla.kv_lora_rank", (long long)cfg->n_heads * kv, 4LL * MHA_MAX_WIDTH,
         "Q in latent space (heads × (kv_lora_rank + qk_rope_head_dim))"},
        {"model.mla.v_head_dim", v, MHA_MAX_WIDTH, "the heads' values (heads × v_head_dim)"},
    };
    for (size_t i = 0; i < N_OF(wide); i++)
        if (wide[i].width > wide[i].max)
            return fail(p, mha_key_find(wide[i].key), -1, "%s is %lld wide, more than %lld", wide[i].what, wide[i].width,
                        wide[i].max);
    const struct { const char *key; int set; } other[] = {
        {"model.kv_heads", cfg->n_kv_heads != 0},  {"model.head_dim", cfg->head_dim != 0},
        {"model.v_head_dim", cfg->v_head_dim != 0}, {"model.qk_norm.kind", cfg->qk_norm.kind != MHA_QK_NORM_NONE},
        {"model.sinks", cfg->sinks != 0},           {"model.alibi.max_bias", cfg->alibi_max_bias > 0.0f},
        {"model.window", cfg->window != 0},         {"model.softcap", cfg->softcap > 0.0f},
    };
    for (size_t i = 0; i < N_OF(other); i++)
        if (other[i].set)
            return fail(p, mha_key_find(other[i].key), -1, "not with model.mla (its heads' widths are the mla block's; "
                        "one latent KV head serves every query head)");
    if (cfg->kv_type == MHA_KV_INT8)
        return fail(p, mha_key_find("engine.kv_cache"), -1, "int8 not with model.mla yet (its latent cache is the "
                    "precision's: f32 or bf16)");
    if (cfg->rope.style != MHA_ROPE_NONE && cfg->rope.rotary_dim && cfg->rope.rotary_dim != m->qk_rope_head_dim)
        return fail(p, mha_key_find("model.rope.rotary_dim"), -1, "%d with model.mla: must be qk_rope_head_dim %d (or 0)",
                    cfg->rope.rotary_dim, m->qk_rope_head_dim);
    if (cfg->rope.style != MHA_ROPE_NONE && !m->qk_rope_head_dim)
        return fail(p, mha_key_find("model.rope.style"), -1, "%s with model.mla.qk_rope_head_dim 0: no feature to rotate",
                    mha_config_value_name(mha_key_find("model.rope.style"), cfg->rope.style));
    return MHA_OK;
}

mha_status mha_config_verify(const mha_config *cfg, mha_key_problem *p)
{
    const char *base = (const char *)cfg;
    for (int i = 0; i < mha_n_keys; i++) {
        const mha_config_row *k = &mha_keys[i];
        if (!mha_rope_key_read(&cfg->rope, k->spec.field))
            continue; /* a RoPE parameter this style and scaling do not read: any value is fine */
        if (!cfg->mla.kv_lora_rank && !strcmp(k->spec.field, "mla.eps"))
            continue; /* read by MLA alone */
        if (k->off == ENG(weight_type))
            continue; /* weights.type fills all four; the engine's check judges each with its reason */
        const void *src = base + k->off;
        int v = 0;
        switch (k->spec.type) {
        case MHA_KEY_INT:
            v = *(const int *)src;
            if (v < k->spec.min || v > k->spec.max)
                return fail(p, k, -1, "must be in %lld..%lld, got %d", k->spec.min, k->spec.max, v);
            break;
        case MHA_KEY_BOOL:
            v = *(const int *)src;
            if (v != 0 && v != 1)
                return fail(p, k, -1, "must be 0 or 1 (false or true), got %d", v);
            break;
        case MHA_KEY_ENUM:
            v = *(const int *)src;
            if (!in_names(k, v))
                return fail(p, k, -1, "unknown value %d (one of %s)", v, k->spec.values);
            break;
        case MHA_KEY_FLOAT: {
            const float x = *(const float *)src;
            if (!(x <= k->spec.fmax && (k->spec.fmin_open ? x > k->spec.fmin : x >= k->spec.fmin)))
                return fail(p, k, -1, "must be in %s%g..%g, got %g", k->spec.fmin_open ? "(" : "", k->spec.fmin, k->spec.fmax,
                            (double)x);
            break;
        }
        case MHA_KEY_STRING:
            if (!memchr(src, '\0', (size_t)k->spec.max + 1))
                return fail(p, k, -1, "longer than %lld characters or not NUL-terminated", k->spec.max);
            break;
        case MHA_KEY_INT_LIST: {
            int n = *(const int *)(base + k->count_off);
            if (n < 0 || n > k->spec.max_count)
                return fail(p, k, -2, "must be in 0..%d, got %d", k->spec.max_count, n);
            for (int j = 0; j < n; j++) {
                v = ((const int *)src)[j];
                if (v < k->spec.min || v > k->spec.max)
                    return fail(p, k, j, "must be in %lld..%lld, got %d", k->spec.min, k->spec.max, v);
            }
            break;
        }
        default:
            break;
        }
    }
    /* what one key's range cannot say */
    const mha_mla *mla = &cfg->mla;
    if (mla->kv_lora_rank) {
        mha_status st = mla_verify(cfg, p);
        if (st != MHA_OK)
            return st;
    } else if (mla->q_lora_rank || mla->qk_nope_head_dim || mla->qk_rope_head_dim || mla->v_head_dim) {
        const char *key = mla->q_lora_rank ? "model.mla.q_lora_rank" : mla->qk_nope_head_dim ? "model.mla.qk_nope_head_dim"
                          : mla->qk_rope_head_dim ? "model.mla.qk_rope_head_dim" : "model.mla.v_head_dim";
        return fail(p, mha_key_find(key), -1, "needs model.mla.kv_lora_rank (the latent's width)");
    }
    if (!cfg->head_dim && !mla->kv_lora_rank && cfg->d_model % cfg->n_heads)
        return fail(p, mha_key_find("model.heads"), -1, "%d does not divide d_model %d (or set head_dim)", cfg->n_heads,
                    cfg->d_model);
    const int dk = mha_config_head_dim(cfg);
    if (!mla->kv_lora_rank && (long long)cfg->n_heads * dk > MHA_MAX_WIDTH) /* MLA: its own widths above */
        return fail(p, mha_key_find("model.head_dim"), -1, "%d with %d heads: Q is %lld wide, more than %d", dk,
                    cfg->n_heads, (long long)cfg->n_heads * dk, MHA_MAX_WIDTH);
    if (cfg->v_head_dim > dk)
        return fail(p, mha_key_find("model.v_head_dim"), -1, "%d is more than head_dim %d (V is at most K's width)",
                    cfg->v_head_dim, dk);
    if (cfg->n_kv_heads && (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads))
        return fail(p, mha_key_find("model.kv_heads"), -1, "%d does not divide heads %d", cfg->n_kv_heads, cfg->n_heads);
    const mha_rope *r = &cfg->rope;
    if (r->style == MHA_ROPE_NONE && r->scaling != MHA_ROPE_SCALING_NONE)
        return fail(p, mha_key_find("model.rope.scaling"), -1, "%s needs a rope style (neox or gptj)",
                    mha_config_value_name(mha_key_find("model.rope.scaling"), r->scaling));
    if (r->style != MHA_ROPE_NONE && !mla->kv_lora_rank && (r->rotary_dim % 2 || r->rotary_dim > dk))
        return fail(p, mha_key_find("model.rope.rotary_dim"), -1, "%d must be even and at most d_k %d", r->rotary_dim, dk);
    if ((r->scaling == MHA_ROPE_SCALING_LLAMA3 || r->scaling == MHA_ROPE_SCALING_YARN) && r->original_max_position < 1)
        return fail(p, mha_key_find("model.rope.original_max_position"), -1, "%s scaling needs it (the pre-training context)",
                    r->scaling == MHA_ROPE_SCALING_LLAMA3 ? "llama3" : "yarn");
    if (r->scaling == MHA_ROPE_SCALING_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
        return fail(p, mha_key_find("model.rope.high_freq_factor"), -1, "%g must be above low_freq_factor %g",
                    (double)r->high_freq_factor, (double)r->low_freq_factor);
    if (r->scaling == MHA_ROPE_SCALING_YARN && !(r->beta_fast > r->beta_slow))
        return fail(p, mha_key_find("model.rope.beta_fast"), -1, "%g must be above beta_slow %g", (double)r->beta_fast,
                    (double)r->beta_slow);
    if (cfg->alibi_max_bias > 0 && r->style != MHA_ROPE_NONE)
        return fail(p, mha_key_find("model.alibi.max_bias"), -1, "%g with model.rope.style %s: ALiBi and RoPE are two "
                    "position schemes (no model uses both); keep one", (double)cfg->alibi_max_bias,
                    mha_config_value_name(mha_key_find("model.rope.style"), r->style));
    if ((cfg->kv_type == MHA_KV_F32 && cfg->precision != MHA_PRECISION_F32) ||
        (cfg->kv_type == MHA_KV_BF16 && cfg->precision != MHA_PRECISION_BF16))
        return fail(p, mha_key_find("engine.kv_cache"), -1, "%s with precision %s: an engine reads its own precision's "
                    "cache (auto) or int8", mha_config_value_name(mha_key_find("engine.kv_cache"), cfg->kv_type),
                    mha_precision_name(cfg->precision));
    if (cfg->pinning == MHA_PIN_CPUS && cfg->n_cpus < 1)
        return fail(p, mha_key_find("threads.cpus"), -2, "must be in 1..%d with pinning cpus, got %d", MHA_MAX_CPUS,
                    cfg->n_cpus);
    return MHA_OK;
}

mha_status mha_config_problem(const mha_key_problem *p, mha_problem *pr)
{
    const mha_config_row *k = p->key;
    char field[48];
    if (p->index == -2) /* a list's length: its count field */
        snprintf(field, sizeof field, "n_%s", k->spec.field);
    else if (p->index >= 0)
        snprintf(field, sizeof field, "%s[%d]", k->spec.field, p->index);
    else
        snprintf(field, sizeof field, "%s", k->spec.field);
    return mha_problemf(pr, MHA_ERR_CONFIG, field, "%s", p->what);
}

mha_status mha_config_problem_text(const mha_key_problem *p, char *err, size_t err_len)
{
    mha_problem pr;
    mha_status st = mha_config_problem(p, &pr);
    mha_problem_text(&pr, err, err_len);
    return st;
}

const mha_config_row *mha_key_of_field(const char *field)
{
    size_t n = strcspn(field, "[");
    if (!strncmp(field, "n_", 2) && !mha_key_find_field_n(field, n)) /* a list's count: its list's key */
        field += 2, n -= 2;
    return mha_key_find_field_n(field, n);
}
