/* gguf_model.c — a GGUF model's attention as mha computes it (mha_io.h, docs/gguf.md): one row
 * per architecture, the engine's config of a layer from the metadata (read as llama.cpp's
 * src/llama-model.cpp load_hparams reads it, for HF transformers' modules), and the layer's
 * tensors checked against that config.
 *
 * Weights as llama.cpp's converter (convert_hf_to_gguf.py) writes them differ from HF's in two
 * ways a loader must undo to give HF's module's outputs:
 *
 * 1. Arch llama (the converter's LlamaModel with undo_permute = True: Llama 1–3, Mistral,
 *    Mixtral, SmolLM, IQuestCoder, Llava's text model …; DeciModel likewise, not read here)
 *    permutes the rows of q_proj and k_proj, weights and biases, per head for ggml's RoPE, which
 *    rotates adjacent pairs (GPT-J's order), while HF rotates halves (rotate_half, mha's neox):
 *        permute(w, n_head) = w.reshape(n_head, 2, rows / n_head / 2, *rest).swapaxes(1, 2).reshape(w.shape)
 *    with n_head = head_count for Q and head_count_kv for K. With d = head_dim, row h·d + 2i + j
 *    of the file (i < d/2, j = 0, 1) is row h·d + j·d/2 + i of HF's weight: a loader gives HF's
 *    rows back by reading HF row h·d + j·d/2 + i from file row h·d + 2i + j. (Kept as they are,
 *    with mha's gptj rotation, the attention's output is the same — Q and K share the
 *    permutation within each head, so their dot products do — but K sits in the cache in the
 *    file's order.) qwen2, qwen3, gemma2, gemma3, olmo2 and phi3 are not permuted: ggml rotates
 *    them in NeoX order (llama_model_rope_type).
 * 2. Gemma 2 and 3 (Gemma2Model, Gemma3Model.modify_tensors) store every RMSNorm weight as
 *    1 + w (HF's Gemma RMSNorm multiplies by 1 + w, ggml's by w): QK-norm's weight_offset is 0
 *    for them here, not HF's 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "gguf.h"
#include "status.h"

/* What each architecture reads beyond llama's keys (llama.cpp's load_hparams). */
typedef struct arch_row {
    const char *name;
    int qk_permuted;           /* the converter permuted Q and K rows (above) */
    int fused_qkv;             /* blk.N.attn_qkv.weight: Q, K then V rows (phi3) */
    int reads_window;          /* {arch}.attention.sliding_window is read (llama.cpp ignores it elsewhere) */
    int64_t window_default;    /* when that key is absent: a window (Gemma 2: 4096), 0 none, -1 required */
    int swa_pattern;           /* with a window, layer l slides when l % n < n - 1 (llama.cpp's
                                  set_swa_pattern; 0: every layer); attention.sliding_window_pattern overrides */
    double swa_theta;          /* sliding layers' RoPE base when rope.freq_base_swa is absent (Gemma 3:
                                  10000, unscaled); 0: the same RoPE as the others */
    double softcap_default;    /* attn_logit_softcapping is read, with this default (Gemma 2: 50); 0: not read */
    int big_layers;            /* Gemma's 27B (by layer count, as llama.cpp tells it): scores scaled by
                                  1/sqrt(d_model / heads), gemma_pytorch's query_pre_attn_scalar; else
                                  1/sqrt(head_dim) */
} arch_row;

static const arch_row archs[] = {
    {"llama", 1, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2", 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", 0, 0, 0, 0, 0, 0, 0, 0},
    {"gemma2", 0, 0, 1, 4096, 2, 0, 50, 46},
    {"gemma3", 0, 0, 1, -1, 6, 10000, 0, 62},
    {"olmo2", 0, 0, 1, 0, 4, 0, 0, 0},
    /* HF's Phi-3 slides every layer by config.sliding_window; llama.cpp disables it (its PR 13676) */
    {"phi3", 0, 1, 1, 0, 0, 0, 0, 0},
};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

MHA_API const char *mha_gguf_architectures(void)
{
    return "llama, qwen2, qwen3, gemma2, gemma3, olmo2, phi3";
}

static const arch_row *find_arch(const char *name)
{
    for (int i = 0; i < N_ARCHS; i++)
        if (!strcmp(archs[i].name, name))
            return &archs[i];
    return NULL;
}

/* ---- keys ---- */

typedef struct reader {
    const mha_gguf *g;
    const char *arch;
    char *err;
    size_t err_len;
} reader;

#define BAD(r, ...) mha_errorf((r)->err, (r)->err_len, MHA_ERR_FORMAT, __VA_ARGS__)

/* "{arch}.suffix" */
static const char *akey(const reader *r, const char *suffix, char key[128])
{
    snprintf(key, 128, "%s.%s", r->arch, suffix);
    return key;
}

static int has(const reader *r, const char *key)
{
    return mha_gguf_find_kv(r->g, key) != NULL;
}

/* An integer key (element i of a per-layer array, i < 0: a scalar) in [lo, hi]; def when absent
 * unless required. */
static mha_status int_key(const reader *r, const char *key, int64_t i, int required, int64_t def, int64_t lo,
                          int64_t hi, int64_t *v)
{
    if (!required && !has(r, key)) {
        *v = def;
        if (def < lo || def > hi) /* a default from other keys: d_model / heads */
            return BAD(r, "%s: key '%s' is absent and its default %lld is out of range (%lld..%lld)", mha_gguf_path(r->g),
                       key, (long long)def, (long long)lo, (long long)hi);
        return MHA_OK;
    }
    mha_status st = i < 0 ? mha_gguf_get_int(r->g, key, v, r->err, r->err_len)
                          : mha_gguf_get_int_at(r->g, key, (uint64_t)i, v, r->err, r->err_len);
    if (st == MHA_OK && (*v < lo || *v > hi)) {
        char which[32] = "";
        if (i >= 0 && mha_gguf_find_kv(r->g, key)->type == MHA_GGUF_ARRAY)
            snprintf(which, sizeof which, " (layer %lld's)", (long long)i);
        return BAD(r, "%s: key '%s'%s: %lld is out of range (%lld..%lld)", mha_gguf_path(r->g), key, which,
                   (long long)*v, (long long)lo, (long long)hi);
    }
    return st;
}

static mha_status float_key(const reader *r, const char *key, int required, double def, double lo, double hi,
                            double *v)
{
    if (!required && !has(r, key)) {
        *v = def;
        return MHA_OK;
    }
    mha_status st = mha_gguf_get_float(r->g, key, v, r->err, r->err_len);
    if (st == MHA_OK && !(*v >= lo && *v <= hi)) /* NaN fails too */
        return BAD(r, "%s: key '%s': %g is out of range (%g..%g)", mha_gguf_path(r->g), key, *v, lo, hi);
    return st;
}

/* A string key compared with s. */
static int string_is(const char *v, size_t len, const char *s)
{
    return len == strlen(s) && !memcmp(v, s, len);
}

/* ---- tensors of a layer ---- */

static const mha_gguf_tensor *layer_tensor(const mha_gguf *g, int layer, const char *suffix, char name[96])
{
    snprintf(name, 96, "blk.%d.%s", layer, suffix);
    return mha_gguf_find_tensor(g, name);
}

/* "576 x 192" */
static void dims_text(const mha_gguf_tensor *t, char *out, size_t n)
{
    int nd = t->n_dims < 1 ? 1 : t->n_dims;
    out[0] = '\0';
    for (int d = 0; d < nd; d++)
        snprintf(out + strlen(out), n - strlen(out), "%s%lld", d ? " x " : "", (long long)t->ne[d]);
}

/* "F32, F16, …" of the types with this support */
static void types_with(mha_ggml_support s, char *out, size_t n)
{
    out[0] = '\0';
    for (int ty = 0; ty < MHA_GGML_TYPE_COUNT; ty++) {
        const mha_ggml_type_info *ti = mha_ggml_type_get(ty);
        if (ti && ti->projection == s)
            snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? ", " : "", ti->name);
    }
}

MHA_API mha_status mha_gguf_check_projection(const mha_gguf *g, const mha_gguf_tensor *t, int64_t in, int64_t out,
                                             char *err, size_t err_len)
{
    if (!g || !t)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle or tensor is NULL");
    const mha_ggml_type_info *ti = mha_ggml_type_get(t->type);
    if (!ti || ti->projection != MHA_GGML_SUPPORTED) {
        char yes[160];
        types_with(MHA_GGML_SUPPORTED, yes, sizeof yes);
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: %s: type %s is not supported (supported: %s)",
                          g->info.path, t->name, mha_ggml_type_name(t->type), yes);
    }
    if (t->n_dims != 2 || t->ne[0] != in || t->ne[1] != out) {
        char dims[96];
        dims_text(t, dims, sizeof dims);
        return mha_errorf(err, err_len, MHA_ERR_FORMAT,
                          "%s: %s: dims %s, expected %lld x %lld (in features x out features, ggml's order)",
                          g->info.path, t->name, dims, (long long)in, (long long)out);
    }
    return MHA_OK;
}

/* A bias or norm weight: 1-D of n elements, a float type. */
static mha_status check_vector(const mha_gguf *g, const mha_gguf_tensor *t, int64_t n, char *err, size_t err_len)
{
    if (t->type != MHA_GGML_F32 && t->type != MHA_GGML_F16 && t->type != MHA_GGML_BF16)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: %s: type %s, expected F32, F16 or BF16", g->info.path,
                          t->name, mha_ggml_type_name(t->type));
    if (t->n_dims != 1 || t->ne[0] != n) {
        char dims[96];
        dims_text(t, dims, sizeof dims);
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: %s: dims %s, expected %lld", g->info.path, t->name, dims,
                          (long long)n);
    }
    return MHA_OK;
}

/* ---- the model ---- */

MHA_API mha_status mha_gguf_model_info(const mha_gguf *g, mha_gguf_model *m, char *err, size_t err_len)
{
    if (!g || !m)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle or model output is NULL");
    mha_gguf_model out = {0};
    const char *s;
    size_t len;
    reader r = {g, out.arch, err, err_len};
    if (!mha_gguf_find_kv(g, "general.architecture"))
        return BAD(&r, "%s: key 'general.architecture' is missing (a model file names its architecture)", g->info.path);
    mha_status st = mha_gguf_get_string(g, "general.architecture", &s, &len, err, err_len);
    if (st != MHA_OK)
        return st;
    int ok = len > 0 && len < sizeof out.arch;
    for (size_t i = 0; ok && i < len; i++) /* it becomes the prefix of keys */
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.';
    if (!ok)
        return BAD(&r, "%s: key 'general.architecture': '%.*s' (%zu bytes) is not an architecture's name", g->info.path,
                   (int)(len < 40 ? len : 40), s, len);
    memcpy(out.arch, s, len);
    if (mha_gguf_find_kv(g, "general.name")) {
        if ((st = mha_gguf_get_string(g, "general.name", &s, &len, err, err_len)) != MHA_OK)
            return st;
        for (size_t i = 0; i < len && i + 1 < sizeof out.name && s[i]; i++)
            out.name[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    }
    char key[128];
    int64_t v;
    if ((st = int_key(&r, akey(&r, "block_count", key), -1, 0, 0, 1, 1 << 20, &v)) != MHA_OK)
        return st;
    out.n_layers = (int)v;
    if ((st = int_key(&r, akey(&r, "context_length", key), -1, 0, 0, 0, INT64_MAX, &out.context_length)) != MHA_OK ||
        (st = float_key(&r, akey(&r, "attention.layer_norm_rms_epsilon", key), 0, 0, 0, 1, &out.rms_eps)) != MHA_OK)
        return st;
    const arch_row *a = find_arch(out.arch);
    out.computed = a != NULL;
    out.qk_permuted = a && a->qk_permuted;
    out.fused_qkv = a && a->fused_qkv;
    *m = out;
    return MHA_OK;
}

/* llama3's per-frequency factors as the converter computes them (LlamaModel.generate_extra_tensors,
 * torch float32), for rotary_dim features of RoPE base theta. */
static float llama3_factor(int i, int dim, double theta, float factor, float low, float high, float old_ctx)
{
    const float freq = 1.0f / powf((float)theta, (float)(2 * i) / (float)dim);
    const float wavelen = (float)(2 * 3.14159265358979323846) / freq;
    const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    if (wavelen < high_wavelen)
        return 1.0f;
    if (wavelen > low_wavelen)
        return factor;
    const float smooth = (old_ctx / wavelen - low) / (high - low);
    return 1.0f / ((1.0f - smooth) / factor + smooth);
}

/* RoPE of the model's full-attention layers: base, rotated features, scaling. */
static mha_status read_rope(const reader *r, const arch_row *a, int head_dim, int64_t context, mha_rope *rope)
{
    char key[128];
    int64_t v;
    double theta, factor = 0;
    mha_status st = float_key(r, akey(r, "rope.freq_base", key), 0, 10000, 1e-30, 1e30, &theta);
    /* llama.cpp rotates no feature for 0, mha all of them: neither is a model's */
    if (st != MHA_OK || (st = int_key(r, akey(r, "rope.dimension_count", key), -1, 0, head_dim, 2, head_dim, &v)))
        return st;
    if (v % 2)
        return BAD(r, "%s: key '%s': %lld rotated features: not an even number", mha_gguf_path(r->g), key, (long long)v);
    if (a->qk_permuted && v != head_dim) /* the permutation spans the whole head (llama.cpp refuses it too) */
        return BAD(r, "%s: key '%s': %lld of head_dim %d features rotated: arch %s rotates them all", mha_gguf_path(r->g),
                   key, (long long)v, head_dim, a->name);
    rope->style = MHA_ROPE_NEOX;
    rope->theta = (float)theta;
    rope->rotary_dim = (int)v;
    rope->scaling = MHA_ROPE_SCALING_NONE;
    /* rope.scaling.type (llama.cpp's default: linear, of factor rope.scaling.factor or the old
     * rope.scale_linear; none when neither is set) */
    const char *type = "linear";
    size_t tlen = 6;
    if (has(r, akey(r, "rope.scaling.type", key)) &&
        (st = mha_gguf_get_string(r->g, key, &type, &tlen, r->err, r->err_len)) != MHA_OK)
        return st;
    if (has(r, akey(r, "rope.scaling.factor", key)) || has(r, akey(r, "rope.scale_linear", key)))
        if ((st = float_key(r, key, 1, 0, 0, 1e6, &factor)) != MHA_OK)
            return st;
    if (string_is(type, tlen, "linear")) {
        if (factor != 0 && factor != 1)
            rope->scaling = MHA_ROPE_SCALING_LINEAR, rope->factor = (float)factor;
    } else if (string_is(type, tlen, "yarn")) {
        double fast, slow, attn;
        if (factor < 1)
            return BAD(r, "%s: key '%s': yarn needs a factor of at least 1, found %g", mha_gguf_path(r->g),
                       akey(r, "rope.scaling.factor", key), factor);
        if ((st = int_key(r, akey(r, "rope.scaling.original_context_length", key), -1, 0, context, 1, INT32_MAX, &v)) ||
            (st = float_key(r, akey(r, "rope.scaling.yarn_beta_fast", key), 0, 32, 0, 1e6, &fast)) ||
            (st = float_key(r, akey(r, "rope.scaling.yarn_beta_slow", key), 0, 1, 0, 1e6, &slow)) ||
            (st = float_key(r, akey(r, "rope.scaling.attn_factor", key), 0, 1, 0, 1e6, &attn)))
            return st;
        if (attn != 1) /* HF's yarn derives it from the factor; an override is not computed */
            return BAD(r, "%s: key '%s': %g: mha computes yarn's attention factor from the factor, as HF does",
                       mha_gguf_path(r->g), key, attn);
        rope->scaling = MHA_ROPE_SCALING_YARN, rope->factor = (float)factor;
        rope->original_max_position = (int)v, rope->beta_fast = (float)fast, rope->beta_slow = (float)slow;
    } else if (!string_is(type, tlen, "none")) {
        return BAD(r, "%s: key '%s': '%.*s' is not a scaling mha computes (none, linear, yarn; llama3's from "
                   "rope_freqs.weight)", mha_gguf_path(r->g), akey(r, "rope.scaling.type", key), (int)(tlen < 40 ? tlen : 40),
                   type);
    }
    const mha_gguf_tensor *lr = mha_gguf_find_tensor(r->g, "rope_factors_long.weight");
    if (!lr)
        lr = mha_gguf_find_tensor(r->g, "rope_factors_short.weight");
    if (lr)
        return BAD(r, "%s: tensor '%s': LongRoPE (Phi-3's long-context scaling) is not computed", mha_gguf_path(r->g),
                   lr->name);
    /* llama3: the converter writes the per-frequency factors as rope_freqs.weight, not the
     * parameters; they are taken when they are llama3's formula with HF's defaults */
    const mha_gguf_tensor *ff = mha_gguf_find_tensor(r->g, "rope_freqs.weight");
    if (!ff)
        return MHA_OK;
    const int half = rope->rotary_dim / 2;
    if (rope->scaling != MHA_ROPE_SCALING_NONE)
        return BAD(r, "%s: tensor 'rope_freqs.weight' with rope.scaling.type '%.*s': two scalings", mha_gguf_path(r->g),
                   (int)(tlen < 40 ? tlen : 40), type);
    if (ff->type != MHA_GGML_F32 || ff->n_dims != 1 || ff->ne[0] != half)
        return BAD(r, "%s: tensor 'rope_freqs.weight': %s of %lld elements, expected F32 of %d (rotary_dim / 2)",
                   mha_gguf_path(r->g), mha_ggml_type_name(ff->type), (long long)ff->ne[0], half);
    float f = 1.0f;
    for (int i = 0; i < half; i++) {
        const float x = mha_gguf_f32_at(ff, i);
        if (!(x > 0 && x < 1e6f))
            return BAD(r, "%s: tensor 'rope_freqs.weight': element %d is %g", mha_gguf_path(r->g), i, x);
        f = x > f ? x : f;
    }
    if (f == 1.0f) /* all ones: no scaling */
        return MHA_OK;
    if ((st = int_key(r, akey(r, "rope.scaling.original_context_length", key), -1, 0, 8192, 1, INT32_MAX, &v)))
        return st;
    for (int i = 0; i < half; i++) {
        const float want = llama3_factor(i, rope->rotary_dim, theta, f, 1.0f, 4.0f, (float)v);
        const float x = mha_gguf_f32_at(ff, i);
        if (fabsf(x - want) > 1e-5f * want)
            return BAD(r, "%s: tensor 'rope_freqs.weight': element %d is %.9g where llama3's scaling (factor %g, "
                       "low_freq_factor 1, high_freq_factor 4, original context %lld) gives %.9g: factors mha does "
                       "not compute", mha_gguf_path(r->g), i, x, f, (long long)v, want);
    }
    rope->scaling = MHA_ROPE_SCALING_LLAMA3, rope->factor = f;
    rope->low_freq_factor = 1.0f, rope->high_freq_factor = 4.0f, rope->original_max_position = (int)v;
    return MHA_OK;
}

/* Whether layer l slides, and its window. */
static mha_status read_window(const reader *r, const arch_row *a, int layer, int64_t *window)
{
    char key[128];
    *window = 0;
    if (!a->reads_window)
        return MHA_OK;
    int64_t w, pattern = a->swa_pattern;
    mha_status st = int_key(r, akey(r, "attention.sliding_window", key), -1, a->window_default < 0, a->window_default,
                            0, INT32_MAX, &w);
    if (st != MHA_OK || w == 0)
        return st;
    int slides;
    const mha_gguf_kv *p = mha_gguf_find_kv(r->g, akey(r, "attention.sliding_window_pattern", key));
    if (p && p->type == MHA_GGUF_ARRAY && p->elem_type == MHA_GGUF_BOOL) { /* per layer: true slides */
        if ((st = mha_gguf_get_bool_at(r->g, key, (uint64_t)layer, &slides, r->err, r->err_len)) != MHA_OK)
            return st;
    } else {
        if (p && (st = int_key(r, key, -1, 1, 0, 0, INT32_MAX, &pattern)) != MHA_OK)
            return st;
        slides = pattern == 0 || layer % pattern < pattern - 1;
    }
    *window = slides ? w : 0;
    return MHA_OK;
}

/* Biases and QK-norm from the layer's tensors. */
static mha_status read_layer_tensors(const reader *r, const arch_row *a, int layer, double rms_eps, mha_config *c)
{
    char nq[96], nk[96], nv[96], no[96];
    const mha_gguf *g = r->g;
    const mha_gguf_tensor *bq, *bk, *bv, *bo = layer_tensor(g, layer, "attn_output.bias", no);
    if (a->fused_qkv) {
        bq = bk = bv = layer_tensor(g, layer, "attn_qkv.bias", nq);
    } else {
        bq = layer_tensor(g, layer, "attn_q.bias", nq), bk = layer_tensor(g, layer, "attn_k.bias", nk);
        bv = layer_tensor(g, layer, "attn_v.bias", nv);
        if ((bq || bk || bv) && !(bq && bk && bv))
            return BAD(r, "%s: tensor '%s' is there but '%s' is not: mha's biases are Q's, K's and V's together "
                       "(the output's optional)", mha_gguf_path(g), bq ? nq : bk ? nk : nv, !bq ? nq : !bk ? nk : nv);
    }
    if (bo && !bq)
        return BAD(r, "%s: tensor '%s' without Q, K and V biases: mha has an output bias only with them", mha_gguf_path(g),
                   no);
    c->bias = bq != NULL;
    const mha_gguf_tensor *qn = layer_tensor(g, layer, "attn_q_norm.weight", nq);
    const mha_gguf_tensor *kn = layer_tensor(g, layer, "attn_k_norm.weight", nk);
    c->qk_norm.kind = MHA_QK_NORM_NONE;
    if (!qn && !kn)
        return MHA_OK;
    if (!qn || !kn)
        return BAD(r, "%s: tensor '%s' is there but '%s' is not: QK-norm normalizes both", mha_gguf_path(g),
                   qn ? nq : nk, qn ? nk : nq);
    const int dk = c->head_dim;
    if (qn->ne[0] == dk)
        c->qk_norm.kind = MHA_QK_NORM_HEAD;       /* Qwen3, Gemma 3 */
    else if (qn->ne[0] == (int64_t)c->n_heads * dk)
        c->qk_norm.kind = MHA_QK_NORM_FULL;       /* OLMo 2 */
    else
        return BAD(r, "%s: tensor '%s' has %lld elements: neither head_dim %d (per head) nor heads x head_dim %lld "
                   "(over the whole projection)", mha_gguf_path(g), nq, (long long)qn->ne[0], dk,
                   (long long)c->n_heads * dk);
    if (rms_eps <= 0) {
        char key[128];
        return BAD(r, "%s: key '%s' is missing: QK-norm (tensor '%s') needs the RMS epsilon", mha_gguf_path(g),
                   akey(r, "attention.layer_norm_rms_epsilon", key), nq);
    }
    c->qk_norm.eps = (float)rms_eps;
    c->qk_norm.weight_offset = 0; /* Gemma's 1 + w is in the file (above) */
    return MHA_OK;
}

MHA_API mha_status mha_gguf_layer_config(const mha_gguf *g, int layer, mha_config *cfg, char *err, size_t err_len)
{
    if (!g || !cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle or config is NULL");
    mha_gguf_model m;
    mha_status st = mha_gguf_model_info(g, &m, err, err_len);
    if (st != MHA_OK)
        return st;
    const arch_row *a = find_arch(m.arch);
    reader r = {g, m.arch, err, err_len};
    if (!a)
        return BAD(&r, "%s: general.architecture '%s' is not one whose attention mha computes (%s)", g->info.path, m.arch,
                   mha_gguf_architectures());
    char key[128];
    if (!m.n_layers)
        return BAD(&r, "%s: key '%s' is missing", g->info.path, akey(&r, "block_count", key));
    if (layer < 0 || layer >= m.n_layers)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "%s: layer %d: the model has %d (0..%d)", g->info.path,
                          layer, m.n_layers, m.n_layers - 1);
    int64_t d, h, kvh, dk, dv, window;
    if ((st = int_key(&r, akey(&r, "embedding_length", key), -1, 1, 0, 1, MHA_MAX_WIDTH, &d)) ||
        (st = int_key(&r, akey(&r, "attention.head_count", key), layer, 1, 0, 1, MHA_MAX_WIDTH, &h)) ||
        (st = int_key(&r, akey(&r, "attention.head_count_kv", key), layer, 0, h, 1, h, &kvh)) ||
        (st = int_key(&r, akey(&r, "attention.key_length", key), -1, 0, d / h, 1, MHA_MAX_WIDTH, &dk)) ||
        (st = int_key(&r, akey(&r, "attention.value_length", key), -1, 0, d / h, 1, MHA_MAX_WIDTH, &dv)))
        return st;
    mha_config c = *cfg, init;
    mha_config_init(&init);
    c.d_model = (int)d, c.n_heads = (int)h, c.n_kv_heads = (int)kvh;
    c.head_dim = (int)dk, c.v_head_dim = dv == dk ? 0 : (int)dv;
    c.rope = init.rope;
    if ((st = read_rope(&r, a, (int)dk, m.context_length, &c.rope)) != MHA_OK ||
        (st = read_window(&r, a, layer, &window)) != MHA_OK)
        return st;
    c.window = (int)window;
    if (window && a->swa_theta) { /* Gemma 3's sliding layers: their own base, no scaling */
        double theta;
        if ((st = float_key(&r, akey(&r, "rope.freq_base_swa", key), 0, a->swa_theta, 1e-30, 1e30, &theta)))
            return st;
        c.rope.theta = (float)theta, c.rope.scaling = MHA_ROPE_SCALING_NONE;
    }
    c.scale = a->big_layers && m.n_layers == a->big_layers ? (float)(1.0 / sqrt((double)(d / h))) : 0.0f;
    double softcap = 0;
    if (a->softcap_default &&
        (st = float_key(&r, akey(&r, "attn_logit_softcapping", key), 0, a->softcap_default, 0, 1e6, &softcap)))
        return st;
    c.softcap = (float)softcap;
    c.sinks = 0, c.alibi_max_bias = 0;
    c.mla = init.mla;
    c.qk_norm = init.qk_norm;
    if ((st = read_layer_tensors(&r, a, layer, m.rms_eps, &c)) != MHA_OK)
        return st;
    mha_key_problem bad;
    if (mha_config_verify(&c, &bad) != MHA_OK) {
        char why[200];
        mha_config_problem_text(&bad, why, sizeof why);
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: layer %d: the engine refuses the metadata's config: %s",
                          g->info.path, layer, why);
    }
    *cfg = c;
    return MHA_OK;
}

MHA_API mha_status mha_gguf_layer_tensors(const mha_gguf *g, int layer, const mha_config *cfg, mha_gguf_layer *t,
                                          char *err, size_t err_len)
{
    if (!g || !cfg || !t)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "GGUF handle, config or tensors output is NULL");
    mha_gguf_layer out = {0};
    const int64_t d = cfg->d_model, h = cfg->n_heads, kvh = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads;
    const int64_t dk = mha_config_head_dim(cfg), dv = mha_config_v_head_dim(cfg);
    char name[96];
    struct want { const char *suffix; const mha_gguf_tensor **to; int64_t in, out; int required; } w[13];
    int n = 0;
    const mha_gguf_tensor *fused = layer_tensor(g, layer, "attn_qkv.weight", name);
    if (fused) {
        w[n++] = (struct want){"attn_qkv.weight", &out.qkv, d, h * dk + kvh * (dk + dv), 1};
        w[n++] = (struct want){"attn_qkv.bias", &out.qkv_bias, h * dk + kvh * (dk + dv), 0, cfg->bias};
    } else {
        w[n++] = (struct want){"attn_q.weight", &out.q, d, h * dk, 1};
        w[n++] = (struct want){"attn_k.weight", &out.k, d, kvh * dk, 1};
        w[n++] = (struct want){"attn_v.weight", &out.v, d, kvh * dv, 1};
        w[n++] = (struct want){"attn_q.bias", &out.q_bias, h * dk, 0, cfg->bias};
        w[n++] = (struct want){"attn_k.bias", &out.k_bias, kvh * dk, 0, cfg->bias};
        w[n++] = (struct want){"attn_v.bias", &out.v_bias, kvh * dv, 0, cfg->bias};
    }
    w[n++] = (struct want){"attn_output.weight", &out.o, h * dv, d, 1};
    w[n++] = (struct want){"attn_output.bias", &out.o_bias, d, 0, 0};
    if (cfg->qk_norm.kind != MHA_QK_NORM_NONE) {
        w[n++] = (struct want){"attn_q_norm.weight", &out.q_norm, mha_config_qk_norm_len(cfg, 0), 0, 1};
        w[n++] = (struct want){"attn_k_norm.weight", &out.k_norm, mha_config_qk_norm_len(cfg, 1), 0, 1};
    }
    for (int i = 0; i < n; i++) {
        const mha_gguf_tensor *x = layer_tensor(g, layer, w[i].suffix, name);
        const int vector = w[i].out == 0;
        if (!x && w[i].required)
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' is missing", g->info.path, name);
        if (x && vector && !cfg->bias && strstr(w[i].suffix, ".bias"))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' is a bias, but the config has bias: false",
                              g->info.path, name);
        mha_status st = !x ? MHA_OK : vector ? check_vector(g, x, w[i].in, err, err_len)
                                             : mha_gguf_check_projection(g, x, w[i].in, w[i].out, err, err_len);
        if (st != MHA_OK)
            return st;
        *w[i].to = x;
    }
    *t = out;
    return MHA_OK;
}
