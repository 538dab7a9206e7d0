/* fuzz_gguf.c — libFuzzer target: the GGUF reader (header, every value type, tensor infos,
 * layout checks, the name tables), every getter on every entry and element, each tensor's
 * bytes read through its pointer, then the model layer: the model's info, each layer's config,
 * tensors and weights (mha_gguf_layer_weights), every tensor as a projection. Any input must
 * give MHA_OK or an error with a message, and a failed open hands back no handle. */
#include <string.h>

#include "fuzz_input.h"
#include "mha_io.h"

/* Every getter on key, for element 0 and the last: most fail (wrong kind), none may crash. */
static unsigned getters(const mha_gguf *g, const mha_gguf_kv *kv)
{
    char err[512];
    unsigned sum = 0;
    int64_t i;
    double x;
    int b;
    const char *s;
    size_t len;
    const uint64_t at[2] = {0, kv->n ? kv->n - 1 : 0};
    for (int j = 0; j < 2; j++) {
        err[0] = '\0';
        if (mha_gguf_get_int_at(g, kv->key, at[j], &i, err, sizeof err) == MHA_OK)
            sum += (unsigned)i;
        else if (!err[0])
            abort(); /* every failure explains itself */
        if (mha_gguf_get_float_at(g, kv->key, at[j], &x, err, sizeof err) == MHA_OK)
            sum += x > 0;
        if (mha_gguf_get_bool_at(g, kv->key, at[j], &b, err, sizeof err) == MHA_OK)
            sum += (unsigned)b;
        if (mha_gguf_get_string_at(g, kv->key, at[j], &s, &len, err, sizeof err) == MHA_OK)
            for (size_t c = 0; c < len; c++) /* the string's bytes are in the mapping */
                sum += (unsigned char)s[c];
    }
    sum += mha_gguf_get_int(g, kv->key, &i, err, sizeof err) == MHA_OK;
    sum += mha_gguf_get_float(g, kv->key, &x, err, sizeof err) == MHA_OK;
    sum += mha_gguf_get_bool(g, kv->key, &b, err, sizeof err) == MHA_OK;
    sum += mha_gguf_get_string(g, kv->key, &s, &len, err, sizeof err) == MHA_OK;
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(data, size);
    char err[512] = "";
    mha_gguf *g = (mha_gguf *)err;
    mha_status st = mha_gguf_open(path, &g, err, sizeof err);
    if (st != MHA_OK) {
        if (!err[0] || g)
            abort();
        return 0;
    }
    const mha_gguf_info *info = mha_gguf_info_of(g);
    volatile unsigned sum = 0;
    for (int64_t i = 0; i < info->n_kv; i++) {
        const mha_gguf_kv *kv = mha_gguf_kv_at(g, i);
        if (mha_gguf_find_kv(g, kv->key) != kv)
            abort(); /* names are unique: the lookup finds this very entry */
        sum += getters(g, kv);
    }
    for (int64_t i = 0; i < info->n_tensors; i++) {
        const mha_gguf_tensor *t = mha_gguf_tensor_at(g, i);
        if (mha_gguf_find_tensor(g, t->name) != t || t->offset + t->bytes > info->file_size)
            abort();
        const unsigned char *b = t->data;
        for (uint64_t j = 0; j < t->bytes; j += 61) /* each tensor's bytes are readable */
            sum += b[j];
        if (t->bytes)
            sum += b[t->bytes - 1];
        (void)mha_gguf_check_projection(g, t, t->ne[0], t->ne[1], err, sizeof err);
    }
    mha_gguf_model m;
    if (mha_gguf_model_info(g, &m, err, sizeof err) == MHA_OK)
        for (int l = 0; l < m.n_layers && l < 8; l++) {
            mha_config cfg;
            mha_config_init(&cfg);
            err[0] = '\0';
            st = mha_gguf_layer_config(g, l, &cfg, err, sizeof err);
            if (st != MHA_OK && !err[0])
                abort();
            mha_gguf_layer t;
            if (st == MHA_OK && mha_gguf_layer_tensors(g, l, &cfg, &t, err, sizeof err) != MHA_OK && !err[0])
                abort();
            /* the weights loader: rows moved, vectors converted, every byte it reads inside the tensor */
            mha_gguf_weights w = {0}; /* freed whether or not the loader ran */
            err[0] = '\0';
            mha_status ws = st == MHA_OK ? mha_gguf_layer_weights(g, l, &cfg, &w, err, sizeof err) : MHA_ERR_CONFIG;
            if (st == MHA_OK && ws != MHA_OK && !err[0])
                abort();
            if (ws == MHA_OK && w.w.b_q)
                sum += w.w.b_q[0] > 0;
            mha_gguf_weights_free(&w);
        }
    mha_gguf_close(g);
    return 0;
}
