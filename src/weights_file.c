/* weights_file.c — the four namings DESIGN.md §5 accepts:
 *   nn.MultiheadAttention:   in_proj_weight (3d, d), in_proj_bias (3d), out_proj.weight, out_proj.bias
 *   nn.Linear per projection: {q,k,v,o}_proj.weight (d, d) and .bias (d)
 *   BLOOM:                   query_key_value.weight (3d, d), rows as (heads, 3, d_k), and .bias;
 *                            dense.weight (d, d) and .bias
 *   the reference class:     W_q, W_k, W_v, W_o (d, d) in x·W layout, b_q, b_k, b_v, b_o (d)
 * All but the last are (d_out, d_in) matrices: MHA_LAYOUT_TORCH. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "safetensors.h"
#include "status.h"

typedef struct want { const char *name; int rows, cols; float *dst; } want;

/* Reads prefix+name, which must be a float tensor of shape (rows, cols), or (rows) if cols = 0. */
static mha_status take(const mha_st_file *sf, const char *path, const char *prefix, const want *w, char *err, size_t err_len)
{
    char full[512], found[128];
    snprintf(full, sizeof full, "%s%s", prefix, w->name);
    const mha_st_tensor *t = mha_st_find(sf, full);
    if (!t)
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' is missing", path, full);
    mha_shape_text(t->shape, t->rank, found, sizeof found);
    int rank = w->cols ? 2 : 1;
    if (t->rank != rank || t->shape[0] != w->rows || (rank == 2 && t->shape[1] != w->cols)) {
        if (rank == 2)
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected (%d, %d)",
                              path, full, found, w->rows, w->cols);
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected (%d,)", path, full, found, w->rows);
    }
    if (!mha_st_is_float(t->dtype))
        return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16",
                          path, full, mha_st_dtype_name(t->dtype));
    char why[256];
    mha_status st = mha_st_read_f32(sf, t, w->dst, why, sizeof why);
    if (st != MHA_OK)
        return mha_errorf(err, err_len, st, "%s: %s", path, why);
    /* a NaN or Inf weight poisons every output row: refuse it where it can be named */
    size_t count = (size_t)w->rows * (size_t)(w->cols ? w->cols : 1);
    for (size_t i = 0; i < count; i++)
        if (!isfinite(w->dst[i]))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s' holds %s at element %zu: weights must be finite",
                              path, full, isnan(w->dst[i]) ? "NaN" : "an infinity", i);
    return MHA_OK;
}

static int has(const mha_st_file *sf, const char *prefix, const char *name)
{
    char full[512];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return mha_st_find(sf, full) != NULL;
}

/* The namings a weights file may use, told apart by their first weight (w[0]): PyTorch's
 * nn.MultiheadAttention (q, k and v rows in one tensor), nn.Linear per projection (HF's
 * names), BLOOM's fused query_key_value (rows as (heads, 3, d_k)), the reference class's
 * x·W. w and b: the q, k, v and o weights and biases (a fused naming: w[0], b[0] the fused
 * one); the o bias is optional (Qwen2 has q, k and v biases only). */
enum { FUSED_NONE, FUSED_ROWS, FUSED_PER_HEAD };
typedef struct naming {
    const char *scheme; /* what mha run reports */
    mha_layout layout;
    int fused;
    const char *what;   /* a fused naming's owner, for the message that refuses GQA or head_dim */
    const char *w[4], *b[4];
} naming;
static const naming namings[] = {
    {"nn.MultiheadAttention (in_proj_weight)", MHA_LAYOUT_TORCH, FUSED_ROWS, "nn.MultiheadAttention's",
     {"in_proj_weight", NULL, NULL, "out_proj.weight"}, {"in_proj_bias", NULL, NULL, "out_proj.bias"}},
    {"nn.Linear per projection (q_proj.weight)", MHA_LAYOUT_TORCH, FUSED_NONE, NULL,
     {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"},
     {"q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias"}},
    {"BLOOM (query_key_value, dense)", MHA_LAYOUT_TORCH, FUSED_PER_HEAD, "BLOOM's fused projection",
     {"query_key_value.weight", NULL, NULL, "dense.weight"}, {"query_key_value.bias", NULL, NULL, "dense.bias"}},
    {"reference class (W_q, x·W)", MHA_LAYOUT_XW, FUSED_NONE, NULL, {"W_q", "W_k", "W_v", "W_o"},
     {"b_q", "b_k", "b_v", "b_o"}},
};

/* The tensors a naming holds, in the order they are read: its q, k, v weights (or the fused
 * one: into fused for BLOOM, else in place at wq, which wk and wv follow), o's, then the q,
 * k, v biases (to[]: wq, wk, wv, wo, bq, bk, bv). Returns how many. */
static int naming_list(const naming *nm, int bias, int d, int qd, int kvd, float *const to[7], float *fused, want *list)
{
    const int xw = nm->layout == MHA_LAYOUT_XW;
    int n = 0;
    if (nm->fused)
        list[n++] = (want){nm->w[0], 3 * d, d, fused ? fused : to[0]};
    else {
        list[n++] = (want){nm->w[0], xw ? d : qd, xw ? qd : d, to[0]};
        list[n++] = (want){nm->w[1], xw ? d : kvd, xw ? kvd : d, to[1]};
        list[n++] = (want){nm->w[2], xw ? d : kvd, xw ? kvd : d, to[2]};
    }
    list[n++] = (want){nm->w[3], xw ? qd : d, xw ? d : qd, to[3]};
    if (bias && nm->fused)
        list[n++] = (want){nm->b[0], 3 * d, 0, fused ? fused + (size_t)3 * d * d : to[4]};
    else if (bias) {
        list[n++] = (want){nm->b[0], qd, 0, to[4]};
        list[n++] = (want){nm->b[1], kvd, 0, to[5]};
        list[n++] = (want){nm->b[2], kvd, 0, to[6]};
    }
    return n;
}

/* The tensor-name prefix as given, with a '.' after it unless it has one ("" for none). */
static mha_status dotted_prefix(const char *in, char out[256], char *err, size_t err_len)
{
    out[0] = '\0';
    if (in && in[0]) {
        const size_t n = strlen(in);
        if (n + 2 > 256)
            return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "prefix '%s' is too long", in);
        snprintf(out, 256, "%s%s", in, in[n - 1] == '.' ? "" : ".");
    }
    return MHA_OK;
}

/* BLOOM's fused query_key_value (weight rows, then the bias): row (h·3 + t)·dk + c is row
 * h·dk + c of Q, K or V (t = 0, 1, 2) into dst[t] (rows of d) and bdst[t]. */
static void split_per_head(const float *fused, int heads, int dk, int d, int bias, float *dst[3], float *bdst[3])
{
    for (int h = 0; h < heads; h++)
        for (int t = 0; t < 3; t++)
            for (int c = 0; c < dk; c++) {
                const size_t from = ((size_t)h * 3 + t) * dk + c, to = (size_t)h * dk + c;
                memcpy(dst[t] + to * d, fused + from * d, (size_t)d * sizeof *fused);
                if (bias)
                    bdst[t][to] = fused[(size_t)3 * d * d + from];
            }
}

/* The error for a file of none of the namings: what it looked for and what the file holds. */
static mha_status no_naming(const mha_st_file *sf, const char *path, const char *prefix, char *err, size_t err_len)
{
    char names[256] = "";
    for (int i = 0; i < sf->n && strlen(names) < 200; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "", sf->t[i].name);
    return mha_errorf(err, err_len, MHA_ERR_FORMAT,
                      "%s: no attention weights under prefix '%s' (looked for in_proj_weight, q_proj.weight, "
                      "query_key_value.weight, W_q); the file holds %s%s",
                      path, prefix, sf->n ? names : "no tensors", sf->n > 8 ? ", …" : "");
}

/* An MLA layer under HF DeepseekV3Attention's names (the file already open): every tensor the
 * config needs, with its shape, into one buffer; a bias the config has none of is refused. */
static mha_status load_mla(const mha_st_file *sf, const char *path, const char *prefix, const mha_config *cfg,
                           mha_weights_file *out, char *err, size_t err_len)
{
    const mha_mla *m = &cfg->mla;
    const int d = cfg->d_model, h = cfg->n_heads, ql = m->q_lora_rank, kvl = m->kv_lora_rank;
    const int qk = m->qk_nope_head_dim + m->qk_rope_head_dim, kva = kvl + m->qk_rope_head_dim;
    const int kvb = h * (m->qk_nope_head_dim + m->v_head_dim), ov = h * m->v_head_dim, bias = cfg->bias;
    want list[11];
    int n = 0;
    mha_mla_weights *w = &out->mla;
    if (ql) {
        list[n++] = (want){"q_a_proj.weight", ql, d, NULL};
        list[n++] = (want){"q_a_layernorm.weight", ql, 0, NULL};
        list[n++] = (want){"q_b_proj.weight", h * qk, ql, NULL};
        if (bias)
            list[n++] = (want){"q_a_proj.bias", ql, 0, NULL};
    } else
        list[n++] = (want){"q_proj.weight", h * qk, d, NULL};
    list[n++] = (want){"kv_a_proj_with_mqa.weight", kva, d, NULL};
    list[n++] = (want){"kv_a_layernorm.weight", kvl, 0, NULL};
    list[n++] = (want){"kv_b_proj.weight", kvb, kvl, NULL};
    list[n++] = (want){"o_proj.weight", d, ov, NULL};
    if (bias) {
        list[n++] = (want){"kv_a_proj_with_mqa.bias", kva, 0, NULL};
        list[n++] = (want){"o_proj.bias", d, 0, NULL};
    }
    static const char *const biases[] = {"q_a_proj.bias", "kv_a_proj_with_mqa.bias", "o_proj.bias", "q_proj.bias",
                                         "q_b_proj.bias", "kv_b_proj.bias"};
    for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) /* a bias the model has not */
        if (has(sf, prefix, biases[i]) && (!bias || i >= 3))
            return mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s%s' is a bias, but the model has %s", path,
                              prefix, biases[i], bias ? "none there (HF's DeepseekV3Attention)" : "bias: false");
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)list[i].rows * (size_t)(list[i].cols ? list[i].cols : 1);
    float *s = malloc(total * sizeof *s);
    if (!s)
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for the weights", path);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        list[i].dst = s + at;
        at += (size_t)list[i].rows * (size_t)(list[i].cols ? list[i].cols : 1);
    }
    mha_status st = MHA_OK;
    for (int i = 0; st == MHA_OK && i < n; i++)
        st = take(sf, path, prefix, &list[i], err, err_len);
    if (st != MHA_OK) {
        free(s);
        return st;
    }
    *w = (mha_mla_weights){.layout = MHA_LAYOUT_TORCH};
    for (int i = 0; i < n; i++) {
        const char *nm = list[i].name;
        const float **to = !strcmp(nm, "q_a_proj.weight")           ? &w->q_a
                           : !strcmp(nm, "q_a_layernorm.weight")      ? &w->q_a_norm
                           : !strcmp(nm, "q_b_proj.weight")           ? &w->q_b
                           : !strcmp(nm, "q_proj.weight")             ? &w->q
                           : !strcmp(nm, "kv_a_proj_with_mqa.weight") ? &w->kv_a
                           : !strcmp(nm, "kv_a_layernorm.weight")     ? &w->kv_a_norm
                           : !strcmp(nm, "kv_b_proj.weight")          ? &w->kv_b
                           : !strcmp(nm, "o_proj.weight")             ? &w->o
                           : !strcmp(nm, "q_a_proj.bias")             ? &w->b_q_a
                           : !strcmp(nm, "kv_a_proj_with_mqa.bias")   ? &w->b_kv_a
                                                                      : &w->b_o;
        *to = list[i].dst;
    }
    out->storage = s;
    out->n_floats = total;
    out->scheme = "DeepSeek MLA (kv_a_proj_with_mqa, kv_b_proj)";
    return MHA_OK;
}

MHA_API mha_status mha_weights_file_load(const char *path, const char *prefix_in, const mha_config *cfg,
                                         mha_weights_file *out, char *err, size_t err_len)
{
    if (!out)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "weights output is NULL");
    memset(out, 0, sizeof *out);
    if (!path || !cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "weights path or config is NULL");
    mha_key_problem bad;
    if (mha_config_verify(cfg, &bad) != MHA_OK) {
        char why[200];
        mha_config_problem_text(&bad, why, sizeof why);
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: config: %s", path, why);
    }
    const int d = cfg->d_model, bias = cfg->bias, dk = mha_config_head_dim(cfg), qd = cfg->n_heads * dk;
    const int kvd = (cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads) * dk;
    char prefix[256];
    mha_status st = dotted_prefix(prefix_in, prefix, err, err_len);
    mha_st_file sf;
    if (st != MHA_OK || (st = mha_st_open(path, &sf, err, err_len)) != MHA_OK)
        return st;
    if (cfg->mla.kv_lora_rank) {
        st = load_mla(&sf, path, prefix, cfg, out, err, err_len);
        mha_st_close(&sf);
        return st;
    }

    /* one buffer: Wq (qd·d), Wk, Wv (kvd·d each), Wo (d·qd), then b_q (qd), b_k, b_v (kvd), b_o
     * (d), then q_norm, k_norm (dk each, or qd and kvd over the whole projection) and the sinks
     * (heads) when the model has them */
    const int nq = mha_config_qk_norm_len(cfg, 0), nk = mha_config_qk_norm_len(cfg, 1);
    const size_t dd = (size_t)qd * d, kd = (size_t)kvd * d, nw = 2 * dd + 2 * kd;
    const size_t nb = (size_t)qd + (size_t)d + 2 * (size_t)kvd;
    const size_t total = nw + nb + (size_t)nq + (size_t)nk + (cfg->sinks ? (size_t)cfg->n_heads : 0);
    float *s = malloc(total * sizeof *s);
    if (!s) {
        mha_st_close(&sf);
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for the weights", path);
    }
    float *wq = s, *wk = s + dd, *wv = wk + kd, *wo = wv + kd;
    float *bq = s + nw, *bk = bq + qd, *bv = bk + kvd, *bo = bv + kvd;
    float *qn = s + nw + nb, *kn = qn + nq, *sinks = kn + nk;
    want list[11];
    int n = 0;
    float *fused = NULL; /* BLOOM's query_key_value (weight rows, then bias), split below */
    const naming *nm = NULL;
    for (size_t i = 0; !nm && i < sizeof namings / sizeof namings[0]; i++)
        if (has(&sf, prefix, namings[i].w[0]))
            nm = &namings[i];
    if (!nm)
        st = no_naming(&sf, path, prefix, err, err_len);
    else if (nm->fused && (kvd != d || qd != d)) {
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s%s' is %s, which has neither grouped KV heads nor "
                        "a head_dim of its own; the model has kv_heads %d of %d heads of %d (d_model %d)", path, prefix,
                        nm->w[0], nm->what, kvd / dk, cfg->n_heads, dk, d);
    } else if (nm->fused == FUSED_PER_HEAD && !(fused = malloc((size_t)3 * d * (d + 1) * sizeof *fused))) {
        st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for %s", path, nm->w[0]);
    } else {
        out->scheme = nm->scheme;
        out->w.layout = nm->layout;
        n = naming_list(nm, bias, d, qd, kvd, (float *[7]){wq, wk, wv, wo, bq, bk, bv}, fused, list);
    }
    /* a bias that proves the file has biases, and the optional one */
    const char *bias_name = nm ? nm->b[0] : NULL, *o_bias = nm ? nm->b[3] : NULL;
    if (st == MHA_OK && !bias && (has(&sf, prefix, bias_name) || has(&sf, prefix, o_bias)))
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%s%s' is a bias, but the model has bias: false",
                        path, prefix, has(&sf, prefix, bias_name) ? bias_name : o_bias);
    /* the output projection's bias is optional (Qwen2 has q, k, v biases only) */
    const int with_o_bias = st == MHA_OK && bias && has(&sf, prefix, o_bias);
    if (with_o_bias)
        list[n++] = (want){o_bias, d, 0, bo};
    /* HF's names under the same prefix in every scheme: Qwen3's q_norm / k_norm (RMSNorm
     * modules), gpt-oss's sinks (a parameter of the attention module) */
    if (nq > 0) { /* OLMo 2's span the whole projection: (n_heads·d_k), (n_kv_heads·d_k) */
        list[n++] = (want){"q_norm.weight", nq, 0, qn};
        list[n++] = (want){"k_norm.weight", nk, 0, kn};
    }
    if (cfg->sinks)
        list[n++] = (want){"sinks", cfg->n_heads, 0, sinks};
    for (int i = 0; st == MHA_OK && i < n; i++)
        st = take(&sf, path, prefix, &list[i], err, err_len);
    mha_st_close(&sf);
    if (st == MHA_OK && fused)
        split_per_head(fused, cfg->n_heads, dk, d, bias, (float *[3]){wq, wk, wv}, (float *[3]){bq, bk, bv});
    free(fused);
    if (st != MHA_OK) {
        free(s);
        return st;
    }
    out->storage = s;
    out->n_floats = total;
    out->w.w_q = wq, out->w.w_k = wk, out->w.w_v = wv, out->w.w_o = wo;
    if (bias)
        out->w.b_q = bq, out->w.b_k = bk, out->w.b_v = bv, out->w.b_o = with_o_bias ? bo : NULL;
    if (nq > 0)
        out->w.q_norm = qn, out->w.k_norm = kn;
    if (cfg->sinks)
        out->w.sinks = sinks;
    return MHA_OK;
}

MHA_API void mha_weights_file_free(mha_weights_file *w)
{
    if (w) {
        free(w->storage);
        memset(w, 0, sizeof *w);
    }
}
