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
    char prefix[256] = "";
    if (prefix_in && prefix_in[0]) {
        size_t n = strlen(prefix_in);
        if (n + 2 > sizeof prefix)
            return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "prefix '%s' is too long", prefix_in);
        snprintf(prefix, sizeof prefix, "%s%s", prefix_in, prefix_in[n - 1] == '.' ? "" : ".");
    }
    mha_st_file sf;
    mha_status st = mha_st_open(path, &sf, err, err_len);
    if (st != MHA_OK)
        return st;

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
    const char *bias_name = NULL, *o_bias = NULL; /* a bias that proves the file has biases; the optional one */
    if (has(&sf, prefix, "in_proj_weight")) {
        out->scheme = "nn.MultiheadAttention (in_proj_weight)";
        out->w.layout = MHA_LAYOUT_TORCH;
        if (kvd != d || qd != d) {
            st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%sin_proj_weight' is nn.MultiheadAttention's, "
                            "which has neither grouped KV heads nor a head_dim of its own; the model has kv_heads %d of "
                            "%d heads of %d (d_model %d)", path, prefix, kvd / dk, cfg->n_heads, dk, d);
        }
        list[n++] = (want){"in_proj_weight", 3 * d, d, s};  /* rows q, k, v: contiguous */
        list[n++] = (want){"out_proj.weight", d, d, wo};
        bias_name = "in_proj_bias", o_bias = "out_proj.bias";
        if (bias)
            list[n++] = (want){"in_proj_bias", 3 * d, 0, bq};
    } else if (has(&sf, prefix, "q_proj.weight")) {
        out->scheme = "nn.Linear per projection (q_proj.weight)";
        out->w.layout = MHA_LAYOUT_TORCH;
        list[n++] = (want){"q_proj.weight", qd, d, wq};
        list[n++] = (want){"k_proj.weight", kvd, d, wk};
        list[n++] = (want){"v_proj.weight", kvd, d, wv};
        list[n++] = (want){"o_proj.weight", d, qd, wo};
        if (bias) {
            list[n++] = (want){"q_proj.bias", qd, 0, bq};
            list[n++] = (want){"k_proj.bias", kvd, 0, bk};
            list[n++] = (want){"v_proj.bias", kvd, 0, bv};
        }
        bias_name = "q_proj.bias", o_bias = "o_proj.bias";
    } else if (has(&sf, prefix, "query_key_value.weight")) {
        out->scheme = "BLOOM (query_key_value, dense)";
        out->w.layout = MHA_LAYOUT_TORCH;
        if (kvd != d || qd != d)
            st = mha_errorf(err, err_len, MHA_ERR_FORMAT, "%s: tensor '%squery_key_value.weight' is BLOOM's fused "
                            "projection, which has neither grouped KV heads nor a head_dim of its own; the model has "
                            "kv_heads %d of %d heads of %d (d_model %d)", path, prefix, kvd / dk, cfg->n_heads, dk, d);
        else if (!(fused = malloc((size_t)3 * d * (d + 1) * sizeof *fused)))
            st = mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory for query_key_value", path);
        else {
            list[n++] = (want){"query_key_value.weight", 3 * d, d, fused};
            list[n++] = (want){"dense.weight", d, d, wo};
            if (bias)
                list[n++] = (want){"query_key_value.bias", 3 * d, 0, fused + (size_t)3 * d * d};
        }
        bias_name = "query_key_value.bias", o_bias = "dense.bias";
    } else if (has(&sf, prefix, "W_q")) {
        out->scheme = "reference class (W_q, x·W)";
        out->w.layout = MHA_LAYOUT_XW;
        list[n++] = (want){"W_q", d, qd, wq};
        list[n++] = (want){"W_k", d, kvd, wk};
        list[n++] = (want){"W_v", d, kvd, wv};
        list[n++] = (want){"W_o", qd, d, wo};
        if (bias) {
            list[n++] = (want){"b_q", qd, 0, bq};
            list[n++] = (want){"b_k", kvd, 0, bk};
            list[n++] = (want){"b_v", kvd, 0, bv};
        }
        bias_name = "b_q", o_bias = "b_o";
    } else {
        char names[256] = "";
        for (int i = 0; i < sf.n && strlen(names) < 200; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "", sf.t[i].name);
        st = mha_errorf(err, err_len, MHA_ERR_FORMAT,
                        "%s: no attention weights under prefix '%s' (looked for in_proj_weight, q_proj.weight, "
                        "query_key_value.weight, W_q); "
                        "the file holds %s%s", path, prefix, sf.n ? names : "no tensors", sf.n > 8 ? ", …" : "");
    }
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
    if (st == MHA_OK && fused) { /* row (h·3 + t)·dk + c of the fused map is row h·dk + c of Q, K or V (t) */
        float *dst[3] = {wq, wk, wv}, *bdst[3] = {bq, bk, bv};
        for (int h = 0; h < cfg->n_heads; h++)
            for (int t = 0; t < 3; t++)
                for (int c = 0; c < dk; c++) {
                    const size_t from = ((size_t)h * 3 + t) * dk + c, to = (size_t)h * dk + c;
                    memcpy(dst[t] + to * d, fused + from * d, (size_t)d * sizeof *fused);
                    if (bias)
                        bdst[t][to] = fused[(size_t)3 * d * d + from];
                }
    }
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
