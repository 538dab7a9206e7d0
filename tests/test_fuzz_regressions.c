/* test_fuzz_regressions.c — every file under tests/data/fuzz/<loader>/ goes through its loader
 * in this process (so ASan and UBSan watch it under `make DEBUG=1 test`): each is malformed
 * on purpose or was found by `make fuzz`, and must be refused with a message and nothing
 * handed back. tests/fuzz/README.md says where each file came from. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "config_file.h"
#include "mha_io.h"
#include "npy.h"
#include "safetensors.h"

typedef mha_status (*loader)(const char *path, char *err, size_t err_len);

static mha_status load_config(const char *path, char *err, size_t n)
{
    cli_config fc;
    cli_config_default(&fc);
    return cli_config_load(path, &fc, err, n);
}

static mha_status load_safetensors(const char *path, char *err, size_t n)
{
    mha_st_file sf;
    mha_status st = mha_st_open(path, &sf, err, n);
    if (st != MHA_OK)
        return st;
    mha_st_close(&sf);
    /* a well-formed file (an empty header, say) must still be refused as weights */
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 32, cfg.n_heads = 4;
    mha_weights_file wf;
    st = mha_weights_file_load(path, NULL, &cfg, &wf, err, n);
    cr_assert(st != MHA_OK || wf.storage, "%s", path);
    if (st == MHA_OK)
        mha_weights_file_free(&wf);
    return st;
}

static mha_status load_npy(const char *path, char *err, size_t n)
{
    int64_t shape[3];
    float *x = NULL;
    mha_status st = mha_npy_load_f32(path, 3, shape, &x, err, n);
    cr_assert(st == MHA_OK || !x, "%s: a failed load handed back data", path);
    free(x);
    return st;
}

/* A GGUF file: opened, then the config and tensors of each layer (a well-formed file of an
 * architecture mha does not compute is refused there). */
static mha_status load_gguf(const char *path, char *err, size_t n)
{
    mha_gguf *g = NULL;
    mha_status st = mha_gguf_open(path, &g, err, n);
    cr_assert(st == MHA_OK || !g, "%s: a failed open handed back a handle", path);
    mha_gguf_model m = {0};
    if (st == MHA_OK)
        st = mha_gguf_model_info(g, &m, err, n);
    for (int l = 0; st == MHA_OK && l < (m.n_layers ? m.n_layers : 1); l++) {
        mha_config cfg;
        mha_config_init(&cfg);
        mha_gguf_layer t;
        if ((st = mha_gguf_layer_config(g, l, &cfg, err, n)) == MHA_OK)
            st = mha_gguf_layer_tensors(g, l, &cfg, &t, err, n);
    }
    mha_gguf_close(g);
    return st;
}

static int each_file(const char *kind, loader load)
{
    char dir[128];
    snprintf(dir, sizeof dir, "tests/data/fuzz/%s", kind);
    DIR *d = opendir(dir);
    cr_assert(d, "%s is missing", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], err[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        mha_status st = load(path, err, sizeof err);
        cr_expect_neq(st, MHA_OK, "%s was accepted", path);
        cr_expect(err[0] && strstr(err, path), "%s: the message does not name the file: '%s'", path, err);
        n++;
    }
    closedir(d);
    return n;
}

Test(fuzz_regressions, config_files, .timeout = 60) { cr_assert_gt(each_file("config", load_config), 0); }
Test(fuzz_regressions, safetensors_files, .timeout = 60) { cr_assert_gt(each_file("safetensors", load_safetensors), 0); }
Test(fuzz_regressions, npy_files, .timeout = 60) { cr_assert_gt(each_file("npy", load_npy), 0); }
Test(fuzz_regressions, gguf_files, .timeout = 60) { cr_assert_gt(each_file("gguf", load_gguf), 0); }
