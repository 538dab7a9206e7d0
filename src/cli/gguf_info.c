/* gguf_info.c — `mha info M.gguf`: what a GGUF model file holds for mha: the file, the model,
 * the engine's config of its layers (layers alike share a block), the attention tensors of
 * each layer (likewise) with their types, dims and bytes, and the file's tensor types. Bad
 * input: exit 2, the library's message naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* "0-4, 6-10, 12" of the layers l with group[l] == g. */
static void layer_ranges(const int *group, int n, int g, char *out, size_t len)
{
    out[0] = '\0';
    for (int l = 0; l < n;) {
        if (group[l] != g) {
            l++;
            continue;
        }
        int e = l;
        while (e + 1 < n && group[e + 1] == g)
            e++;
        size_t k = strlen(out);
        if (k + 24 >= len) { /* a long alternation: cut */
            snprintf(out + k, len - k, ", …");
            return;
        }
        if (e > l)
            snprintf(out + k, len - k, "%s%d-%d", k ? ", " : "", l, e);
        else
            snprintf(out + k, len - k, "%s%d", k ? ", " : "", l);
        l = e + 1;
    }
}

/* A layer's config as two lines (the model's fields only): equal text, equal config. */
static void config_text(const mha_config *c, char *out, size_t n)
{
    const mha_rope *r = &c->rope;
    char window[32] = "none", softcap[32] = "none", scale[48], qk[48] = "none", scaling[96] = "none";
    const int dk = mha_config_head_dim(c), dv = mha_config_v_head_dim(c);
    if (c->window)
        snprintf(window, sizeof window, "%d", c->window);
    if (c->softcap)
        snprintf(softcap, sizeof softcap, "%g", c->softcap);
    if (c->scale)
        snprintf(scale, sizeof scale, "%g", c->scale);
    else
        snprintf(scale, sizeof scale, "1/sqrt(%d)", dk);
    if (c->qk_norm.kind)
        snprintf(qk, sizeof qk, "%s, eps %g", c->qk_norm.kind == MHA_QK_NORM_HEAD ? "per head" : "whole projection",
                 c->qk_norm.eps);
    if (r->scaling == MHA_ROPE_SCALING_LINEAR)
        snprintf(scaling, sizeof scaling, "linear, factor %g", r->factor);
    else if (r->scaling == MHA_ROPE_SCALING_LLAMA3)
        snprintf(scaling, sizeof scaling, "llama3, factor %g, low/high_freq_factor %g/%g, original context %d",
                 r->factor, r->low_freq_factor, r->high_freq_factor, r->original_max_position);
    else if (r->scaling == MHA_ROPE_SCALING_YARN)
        snprintf(scaling, sizeof scaling, "yarn, factor %g, original context %d, beta %g/%g", r->factor,
                 r->original_max_position, r->beta_fast, r->beta_slow);
    char vdim[32] = "";
    if (dv != dk)
        snprintf(vdim, sizeof vdim, " (V %d)", dv);
    snprintf(out, n,
             "  attention d_model %d, %d heads, %d KV heads, head_dim %d%s, biases %s, QK-norm %s, window %s, "
             "softcap %s, scale %s\n"
             "  rope      %s, theta %g, %d of %d features rotated, scaling %s\n",
             c->d_model, c->n_heads, c->n_kv_heads ? c->n_kv_heads : c->n_heads, dk, vdim, c->bias ? "q, k, v" : "none",
             qk, window, softcap, scale, r->style == MHA_ROPE_NEOX ? "neox" : r->style == MHA_ROPE_GPTJ ? "gptj" : "none",
             r->theta, r->rotary_dim ? r->rotary_dim : dk, dk, scaling);
}

/* Layers past this many are not described one by one (a real model has a few hundred). */
#define SHOWN_LAYERS 4096

/* The engine's config of every layer, layers alike sharing a block: each layer's text is
 * compared with the blocks' first layers only. */
static int print_configs(const mha_gguf *g, int n_layers, char *err, size_t err_len)
{
    enum { TEXT = 512 };
    const int n = n_layers < SHOWN_LAYERS ? n_layers : SHOWN_LAYERS;
    char *text = malloc((size_t)n * TEXT), line[TEXT]; /* the blocks' texts, in order */
    int *group = malloc((size_t)n * sizeof *group), *first = malloc((size_t)n * sizeof *first), blocks = 0;
    int rc = EXIT_OK;
    if (!text || !group || !first) {
        snprintf(err, err_len, "out of memory");
        rc = EXIT_RUNTIME;
    }
    for (int l = 0; rc == EXIT_OK && l < n; l++) {
        mha_config c;
        mha_config_init(&c);
        mha_status st = mha_gguf_layer_config(g, l, &c, err, err_len);
        if (st != MHA_OK) {
            rc = cli_exit_code(st);
            break;
        }
        config_text(&c, line, sizeof line);
        int b = 0;
        while (b < blocks && strcmp(text + (size_t)b * TEXT, line))
            b++;
        if (b == blocks)
            memcpy(text + (size_t)blocks * TEXT, line, TEXT), first[blocks++] = l;
        group[l] = first[b];
    }
    if (rc == EXIT_OK)
        printf("the engine's config of each layer (mha_gguf_layer_config)\n");
    for (int b = 0; rc == EXIT_OK && b < blocks; b++) {
        char layers[160];
        layer_ranges(group, n, first[b], layers, sizeof layers);
        printf("layers %s\n%s", layers, text + (size_t)b * TEXT);
    }
    if (rc == EXIT_OK && n < n_layers)
        printf("(layers %d-%d not shown)\n", n, n_layers - 1);
    free(text);
    free(group);
    free(first);
    return rc;
}

/* blk.N.attn_* → N and the suffix ("attn_q.weight"), or -1. */
static int attn_layer(const char *name, const char **suffix)
{
    *suffix = "";
    if (strncmp(name, "blk.", 4) || name[4] < '0' || name[4] > '9')
        return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    if (l > 1 << 20 || strncmp(end, ".attn_", 6))
        return -1;
    *suffix = end + 1;
    return (int)l;
}

/* The order a layer's tensors are listed in: the norm before, the projections, their biases, QK-norm. */
static int rank_of(const mha_gguf_tensor *t)
{
    const char *s;
    attn_layer(t->name, &s);
    static const char *const order[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                        "attn_qkv.weight", "attn_output.weight", "attn_q.bias", "attn_k.bias",
                                        "attn_v.bias", "attn_qkv.bias", "attn_output.bias", "attn_q_norm.weight",
                                        "attn_k_norm.weight"};
    for (int i = 0; i < (int)(sizeof order / sizeof order[0]); i++)
        if (!strcmp(s, order[i]))
            return i;
    return 100;
}

typedef struct layer_list { const mha_gguf_tensor **t; int n; } layer_list;

static int same_tensors(const layer_list *a, const layer_list *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const char *sa, *sb;
        attn_layer(a->t[i]->name, &sa), attn_layer(b->t[i]->name, &sb);
        if (strcmp(sa, sb) || a->t[i]->type != b->t[i]->type || memcmp(a->t[i]->ne, b->t[i]->ne, sizeof a->t[i]->ne))
            return 0;
    }
    return 1;
}

static void dims(const mha_gguf_tensor *t, char *out, size_t n)
{
    out[0] = '\0';
    for (int d = 0; d < (t->n_dims < 1 ? 1 : t->n_dims); d++)
        snprintf(out + strlen(out), n - strlen(out), "%s%lld", d ? " x " : "", (long long)t->ne[d]);
}

/* Each layer's blk.N.attn_* tensors, layers alike sharing a block; returns their bytes. */
static uint64_t print_attention_tensors(const mha_gguf *g, int n_layers)
{
    const int64_t nt = mha_gguf_info_of(g)->n_tensors;
    layer_list *lists = calloc((size_t)n_layers, sizeof *lists);
    const mha_gguf_tensor **all = malloc((size_t)(nt ? nt : 1) * sizeof *all);
    const int shown = n_layers < SHOWN_LAYERS ? n_layers : SHOWN_LAYERS;
    int *group = malloc((size_t)(shown ? shown : 1) * sizeof *group), *first = malloc((size_t)(shown ? shown : 1) * sizeof *first);
    uint64_t total = 0;
    if (!lists || !all || !group || !first) {
        printf("tensors     (out of memory)\n");
        goto done;
    }
    const char *suffix;
    for (int64_t i = 0; i < nt; i++) { /* counts, then each layer's slice of `all` */
        int l = attn_layer(mha_gguf_tensor_at(g, i)->name, &suffix);
        if (l >= 0 && l < n_layers)
            lists[l].n++;
    }
    for (int l = 0, at = 0; l < n_layers; l++)
        lists[l].t = all + at, at += lists[l].n, lists[l].n = 0;
    for (int64_t i = 0; i < nt; i++) {
        const mha_gguf_tensor *t = mha_gguf_tensor_at(g, i);
        int l = attn_layer(t->name, &suffix);
        if (l >= 0 && l < n_layers) {
            layer_list *ll = &lists[l];
            int k = ll->n++; /* insertion by rank, file order among equals */
            while (k > 0 && rank_of(ll->t[k - 1]) > rank_of(t)) {
                ll->t[k] = ll->t[k - 1];
                k--;
            }
            ll->t[k] = t;
            total += t->bytes;
        }
    }
    printf("attention tensors of each layer (\"mha\": as a projection's weight, mha_gguf_check_projection)\n");
    int blocks = 0; /* the blocks' first layers: first[0 .. blocks) */
    for (int l = 0; l < shown; l++) {
        int b = 0;
        while (b < blocks && !same_tensors(&lists[first[b]], &lists[l]))
            b++;
        if (b == blocks)
            first[blocks++] = l;
        group[l] = first[b];
    }
    for (int b = 0; b < blocks; b++) {
        const int l = first[b];
        char layers[160];
        uint64_t bytes = 0;
        layer_ranges(group, shown, l, layers, sizeof layers);
        printf("layers %s\n", layers);
        if (!lists[l].n)
            printf("  (no blk.%d.attn_* tensors)\n", l);
        for (int i = 0; i < lists[l].n; i++) {
            const mha_gguf_tensor *t = lists[l].t[i];
            const mha_ggml_type_info *ti = mha_ggml_type_get(t->type);
            char d[64];
            dims(t, d, sizeof d);
            attn_layer(t->name, &suffix);
            const int projection = t->n_dims == 2 && strstr(suffix, ".weight") && !strstr(suffix, "norm");
            printf("  %-20s %-8s %-14s %12llu bytes%s%s\n", suffix, mha_ggml_type_name(t->type), d,
                   (unsigned long long)t->bytes, projection ? "  mha: " : "",
                   !projection ? "" : ti->projection == MHA_GGML_SUPPORTED ? "supported"
                                      : ti->projection == MHA_GGML_PLANNED ? "planned" : "not supported");
            bytes += t->bytes;
        }
        printf("  %llu bytes a layer\n", (unsigned long long)bytes);
    }
    if (shown < n_layers)
        printf("(layers %d-%d not shown)\n", shown, n_layers - 1);
done:
    free(lists);
    free(all);
    free(group);
    free(first);
    return total;
}

/* Tensors and bytes per ggml type, most bytes first. */
static void print_types(const mha_gguf *g)
{
    int64_t count[MHA_GGML_TYPE_COUNT] = {0};
    uint64_t bytes[MHA_GGML_TYPE_COUNT] = {0};
    const int64_t nt = mha_gguf_info_of(g)->n_tensors;
    for (int64_t i = 0; i < nt; i++) {
        const mha_gguf_tensor *t = mha_gguf_tensor_at(g, i);
        count[t->type]++, bytes[t->type] += t->bytes;
    }
    printf("types      ");
    for (;;) {
        int best = -1;
        for (int ty = 0; ty < MHA_GGML_TYPE_COUNT; ty++)
            if (count[ty] && (best < 0 || bytes[ty] > bytes[best]))
                best = ty;
        if (best < 0)
            break;
        printf(" %s: %lld tensor%s, %llu bytes;", mha_ggml_type_name(best), (long long)count[best],
               count[best] == 1 ? "" : "s", (unsigned long long)bytes[best]);
        count[best] = 0;
    }
    printf("\n");
}

int cli_gguf_info(const char *path)
{
    char err[768];
    mha_gguf *g;
    mha_status st = mha_gguf_open(path, &g, err, sizeof err);
    if (st != MHA_OK) {
        cli_error("%s", err);
        return cli_exit_code(st);
    }
    const mha_gguf_info *fi = mha_gguf_info_of(g);
    printf("file       %s: GGUF v%u, %llu bytes; %lld metadata keys, %lld tensors, data from byte %llu (aligned to %u)\n",
           fi->path, fi->version, (unsigned long long)fi->file_size, (long long)fi->n_kv, (long long)fi->n_tensors,
           (unsigned long long)fi->data_offset, fi->alignment);
    mha_gguf_model m;
    if ((st = mha_gguf_model_info(g, &m, err, sizeof err)) != MHA_OK) {
        mha_gguf_close(g);
        cli_error("%s", err);
        return cli_exit_code(st);
    }
    char ctx[32] = "", eps[32] = "";
    if (m.context_length)
        snprintf(ctx, sizeof ctx, ", context %lld", (long long)m.context_length);
    if (m.rms_eps)
        snprintf(eps, sizeof eps, ", RMS eps %g", m.rms_eps);
    printf("model      %s%s%s%s, %d layers%s%s\n", m.arch, m.name[0] ? " \"" : "", m.name, m.name[0] ? "\"" : "",
           m.n_layers, ctx, eps);
    int rc = EXIT_OK;
    err[0] = '\0';
    if (!m.computed) {
        snprintf(err, sizeof err, "%s: general.architecture '%s' is not one whose attention mha computes (%s)", path,
                 m.arch, mha_gguf_architectures());
        rc = EXIT_USAGE;
    } else {
        rc = print_configs(g, m.n_layers, err, sizeof err);
    }
    if (m.qk_permuted)
        printf("note       Q and K rows are in llama.cpp's RoPE order (its converter permutes them for arch %s): a "
               "loader undoes it for HF's rotate_half (docs/gguf.md)\n", m.arch);
    if (m.fused_qkv)
        printf("note       Q, K and V in one tensor per layer (attn_qkv.weight: Q's rows, then K's, then V's)\n");
    uint64_t attn = print_attention_tensors(g, m.n_layers);
    printf("attention  %llu bytes in %d layers\n", (unsigned long long)attn, m.n_layers);
    print_types(g);
    printf("total      %lld tensors, %llu bytes of tensor data in a %llu-byte file\n", (long long)fi->n_tensors,
           (unsigned long long)fi->data_bytes, (unsigned long long)fi->file_size);
    mha_gguf_close(g);
    if (rc != EXIT_OK)
        cli_error("%s", err);
    return rc;
}
