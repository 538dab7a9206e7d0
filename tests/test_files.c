/* test_files.c — what the loaders and writers do with paths that are not plain files: a FIFO
 * is refused at once (opening one for reading once blocked forever), a directory is named as
 * such, and an output that is a FIFO, a device or a symbolic link is written through or
 * followed, never replaced by a new regular file; new outputs get 0666 less the umask. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "config_file.h"
#include "helpers.h"
#include "mha_io.h"
#include "npy.h"

Test(files, fifo_and_directory_inputs_are_refused_at_once, .timeout = 20)
{
    char dir[64], fifo[128], args[512];
    tmpdir_make(dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/pipe", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    char err[512];
    mha_config cfg;
    mha_config_init(&cfg);
    const char *paths[] = {fifo, dir};
    const char *want[] = {"not a regular file", "is a directory"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(mha_config_load(paths[i], &cfg, err, sizeof err), MHA_ERR_IO);
        cr_assert(strstr(err, paths[i]) && strstr(err, want[i]), "config: %s", err);
        int64_t shape[3];
        float *data = NULL;
        cr_assert_eq(mha_npy_load_f32(paths[i], 3, shape, &data, err, sizeof err), MHA_ERR_IO);
        cr_assert(strstr(err, want[i]), "npy: %s", err);
        mha_weights_file wf;
        cr_assert_eq(mha_weights_file_load(paths[i], NULL, &cfg, &wf, err, sizeof err), MHA_ERR_IO);
        cr_assert(strstr(err, want[i]), "weights: %s", err);
    }
    /* the command line the same way, for each file option */
    const char *opts[] = {"run %s", "run --input %s", "run --weights %s", "run tests/data/golden.yaml --lengths %s --input tests/data/x.npy"};
    for (int i = 0; i < 4; i++) {
        char fmt[96];
        snprintf(fmt, sizeof fmt, "%s --iters 1", opts[i]);
        snprintf(args, sizeof args, fmt, fifo);
        char *out, *cerr;
        cr_assert_eq(run_cli(args, &out, &cerr), 2, "%s", args);
        cr_assert(strstr(cerr, "not a regular file"), "%s: %s", args, cerr);
        free(out), free(cerr);
    }
    tmpdir_remove(dir);
}

static void *drain(void *arg)
{
    const char *path = arg;
    static long got;
    int fd = open(path, O_RDONLY);
    char buf[4096];
    ssize_t n;
    got = 0;
    while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
        got += n;
    if (fd >= 0)
        close(fd);
    return &got;
}

static const float data[6] = {1, 2, 3, 4, 5, 6};
static const int64_t shape[2] = {2, 3};

Test(files, outputs_that_are_not_regular_files_are_written_through, .timeout = 20)
{
    char dir[64], path[128], err[512];
    struct stat st;
    tmpdir_make(dir, sizeof dir);
    /* a FIFO: written through to its reader, still a FIFO after */
    snprintf(path, sizeof path, "%s/pipe", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, drain, path), 0);
    cr_assert_eq(mha_npy_save_f32(path, data, 2, shape, err, sizeof err), MHA_OK, "%s", err);
    void *got;
    pthread_join(th, &got);
    cr_assert_eq(*(long *)got, 128 + (long)sizeof data, "the reader got %ld bytes", *(long *)got);
    cr_assert(stat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    /* a character device (a null device of our own, where root may make one) */
    snprintf(path, sizeof path, "%s/null", dir);
    if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        cr_assert_eq(mha_npy_save_f32(path, data, 2, shape, err, sizeof err), MHA_OK, "%s", err);
        cr_assert(stat(path, &st) == 0 && S_ISCHR(st.st_mode), "the device node was replaced by a regular file");
    } else {
        cr_log_info("mknod: %s: the device case needs root", strerror(errno));
    }
    /* a directory: refused, still a directory */
    cr_assert_eq(mha_npy_save_f32(dir, data, 2, shape, err, sizeof err), MHA_ERR_IO);
    cr_assert(strstr(err, "is a directory"), "%s", err);
    tmpdir_remove(dir);
}

Test(files, a_symlinked_output_replaces_its_target_and_modes_follow_the_umask)
{
    char dir[64], target[128], link[128], err[512];
    struct stat st;
    tmpdir_make(dir, sizeof dir);
    umask(022);
    snprintf(target, sizeof target, "%s/y.npy", dir);
    cr_assert_eq(mha_npy_save_f32(target, data, 2, shape, err, sizeof err), MHA_OK, "%s", err);
    cr_assert_eq(stat(target, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644, "a new file is 0666 less the umask, got %o", st.st_mode & 0777);
    /* an existing file keeps its mode */
    cr_assert_eq(chmod(target, 0640), 0);
    snprintf(link, sizeof link, "%s/link.npy", dir);
    cr_assert_eq(symlink("y.npy", link), 0);
    cr_assert_eq(mha_npy_save_f32(link, data, 2, shape, err, sizeof err), MHA_OK, "%s", err);
    cr_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the symbolic link was replaced");
    cr_assert(stat(target, &st) == 0 && (st.st_mode & 0777) == 0640, "target mode %o", st.st_mode & 0777);
    int64_t got[2];
    float *back = read_npy(target, 2, got);
    cr_assert(got[0] == 2 && got[1] == 3 && back[5] == 6.0f);
    free(back);
    /* nothing left beside it */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 2", dir);
    cr_assert_eq(system(cmd), 0, "a temporary file was left in %s", dir);
    tmpdir_remove(dir);
}

/* An F16 NaN payload once loaded as a weight and gave `max relative error nan` with exit 0:
 * non-finite weights are refused, naming the tensor and the element. */
Test(files, non_finite_weights_are_refused, .timeout = 30)
{
    char dir[64], path[128], err[512];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nan.safetensors", dir);
    const char *header = "{\"W_q\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[0,32]},"
                         "\"W_k\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[32,64]},"
                         "\"W_v\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[64,96]},"
                         "\"W_o\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[96,128]}}";
    write_safetensors_raw(path, header, 128, 0xff); /* 0xffff: an F16 NaN */
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 4, cfg.n_heads = 1, cfg.bias = 0;
    mha_weights_file wf;
    cr_assert_eq(mha_weights_file_load(path, NULL, &cfg, &wf, err, sizeof err), MHA_ERR_FORMAT);
    cr_assert(strstr(err, "tensor 'W_q' holds NaN at element 0"), "%s", err);
    cr_assert_null(wf.storage);
    write_safetensors_raw(path, header, 128, 0x3c); /* 0x3c3c: a finite F16 (about 1.06) */
    cr_assert_eq(mha_weights_file_load(path, NULL, &cfg, &wf, err, sizeof err), MHA_OK, "%s", err);
    mha_weights_file_free(&wf);
    tmpdir_remove(dir);
}

/* The Makefile honours CC and CFLAGS from the command line (it once forced gcc and its own
 * flags), and `make deps` works where there is no dpkg (it once failed there even with every
 * library installed). */
Test(files, makefile_honours_cc_cflags_and_builds_without_dpkg, .timeout = 60)
{
    char dir[64], cmd[512];
    tmpdir_make(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n -B DEBUG=0 CC=clang CFLAGS=-DMHA_MARKER build/obj/status.o > %s/n.txt 2>&1", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/n.txt", dir);
    char *n = read_text(cmd);
    cr_assert(strstr(n, "clang ") && strstr(n, "-DMHA_MARKER") && strstr(n, "src/status.c"), "%s", n);
    free(n);
    /* a PATH with no dpkg-query (nor anything else: the recipe needs only sh's builtins) */
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=%s /usr/bin/make -s deps > %s/deps.txt 2>&1", dir, dir);
    cr_assert_eq(system(cmd), 0, "make deps failed without dpkg");
    snprintf(cmd, sizeof cmd, "%s/deps.txt", dir);
    char *d = read_text(cmd);
    cr_assert(strstr(d, "no dpkg here"), "%s", d);
    free(d);
    tmpdir_remove(dir);
}

/* Grouped-query weights are checked against the config's KV heads, naming the tensor. */
Test(files, gqa_weights_must_match_kv_heads, .timeout = 30)
{
    char *out, *err;
    int rc = run_cli("run tests/data/llama_gqa.yaml --weights tests/data/llama_gqa.safetensors --input tests/data/x128.npy "
                     "--iters 1", &out, &err);
    cr_assert_eq(rc, 2, "without the prefix: %s", err);
    cr_assert(strstr(err, "no attention weights under prefix ''"), "%s", err);
    free(out), free(err);
    static cli_config fc;
    char e[512];
    cr_assert_eq(cli_config_load("tests/data/llama_gqa.yaml", &fc, e, sizeof e), MHA_OK, "%s", e);
    mha_config cfg = fc.engine;
    cfg.n_kv_heads = 4; /* the file has 2 */
    mha_weights_file wf;
    cr_assert_eq(mha_weights_file_load("tests/data/llama_gqa.safetensors", "model.layers.0.self_attn", &cfg, &wf, e, sizeof e),
                 MHA_ERR_FORMAT);
    cr_assert(strstr(e, "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (32, 128), expected (64, 128)"), "%s", e);
    cfg.n_kv_heads = 2;
    cr_assert_eq(mha_weights_file_load("tests/data/llama_gqa.safetensors", "model.layers.0.self_attn", &cfg, &wf, e, sizeof e),
                 MHA_OK, "%s", e);
    cr_assert_null(wf.w.b_o);
    mha_weights_file_free(&wf);
}

/* A head_dim model (Qwen3-style: 4 heads of 24 in a 64-wide model, 2 KV heads) loads from
 * HF's names and shapes: q_proj (96, 64), k_proj and v_proj (48, 64), o_proj (64, 96); an
 * o_proj of (64, 64), as if the heads were d_model / heads wide, is refused naming it; a d_model
 * that heads does not divide is fine with head_dim. */
Test(files, head_dim_weights_follow_hf_shapes, .timeout = 30)
{
    char dir[64], path[128], e[512], header[1024];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/qwen3.safetensors", dir);
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 64, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.head_dim = 24, cfg.bias = 0;
    const int o_cols[2] = {96, 64};
    for (int bad = 0; bad < 2; bad++) {
        const size_t q = 96 * 64 * 4, kv = 48 * 64 * 4, o = (size_t)64 * o_cols[bad] * 4;
        snprintf(header, sizeof header,
                 "{\"q_proj.weight\":{\"dtype\":\"F32\",\"shape\":[96,64],\"data_offsets\":[0,%zu]},"
                 "\"k_proj.weight\":{\"dtype\":\"F32\",\"shape\":[48,64],\"data_offsets\":[%zu,%zu]},"
                 "\"v_proj.weight\":{\"dtype\":\"F32\",\"shape\":[48,64],\"data_offsets\":[%zu,%zu]},"
                 "\"o_proj.weight\":{\"dtype\":\"F32\",\"shape\":[64,%d],\"data_offsets\":[%zu,%zu]}}",
                 q, q, q + kv, q + kv, q + 2 * kv, o_cols[bad], q + 2 * kv, q + 2 * kv + o);
        write_safetensors_raw(path, header, q + 2 * kv + o, 0);
        mha_weights_file wf;
        const mha_status st = mha_weights_file_load(path, "", &cfg, &wf, e, sizeof e);
        if (bad) {
            cr_assert_eq(st, MHA_ERR_FORMAT);
            cr_assert(strstr(e, "tensor 'o_proj.weight' has shape (64, 64), expected (64, 96)"), "%s", e);
            continue;
        }
        cr_assert_eq(st, MHA_OK, "%s", e);
        cr_assert_eq(wf.w.layout, MHA_LAYOUT_TORCH);
        mha_engine *eng;
        cfg.d_model = 66, cfg.n_heads = 4; /* 4 does not divide 66: fine with head_dim */
        cr_assert_eq(mha_config_check(&cfg, e, sizeof e), MHA_OK, "%s", e);
        cfg.d_model = 64;
        cr_assert_eq(mha_create(&cfg, &eng), MHA_OK);
        cr_assert_eq(mha_set_weights(eng, &wf.w), MHA_OK);
        mha_free(eng);
        mha_weights_file_free(&wf);
    }
    tmpdir_remove(dir);
}

/* An HF-named attention module of a 64-wide model with 4 heads of 24 over 2 KV heads, no
 * biases, with QK-norm weights of q_norm and k_norm floats and, when sinks, 4 sinks last
 * (zeros throughout): written to path. */
static void write_variant_module(const char *path, int q_norm, int k_norm, int sinks)
{
    char header[1400];
    const size_t q = 96 * 64 * 4, kv = 48 * 64 * 4, o = 64 * 96 * 4, w = q + 2 * kv + o;
    const size_t qn = (size_t)q_norm * 4, kn = (size_t)k_norm * 4, end = w + qn + kn + (sinks ? 16 : 0);
    int at = snprintf(header, sizeof header,
                      "{\"q_proj.weight\":{\"dtype\":\"F32\",\"shape\":[96,64],\"data_offsets\":[0,%zu]},"
                      "\"k_proj.weight\":{\"dtype\":\"F32\",\"shape\":[48,64],\"data_offsets\":[%zu,%zu]},"
                      "\"v_proj.weight\":{\"dtype\":\"F32\",\"shape\":[48,64],\"data_offsets\":[%zu,%zu]},"
                      "\"o_proj.weight\":{\"dtype\":\"F32\",\"shape\":[64,96],\"data_offsets\":[%zu,%zu]},"
                      "\"q_norm.weight\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
                      "\"k_norm.weight\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                      q, q, q + kv, q + kv, q + 2 * kv, q + 2 * kv, w, q_norm, w, w + qn, k_norm, w + qn, w + qn + kn);
    if (sinks)
        at += snprintf(header + at, sizeof header - at,
                       ",\"sinks\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[%zu,%zu]}", end - 16, end);
    snprintf(header + at, sizeof header - at, "}");
    write_safetensors_raw(path, header, end, 0);
}

/* QK-norm weights and sinks load by HF's names in any naming, and a missing, misshapen or
 * non-finite one is named; BLOOM's fused projection needs a model without GQA. */
Test(files, variant_tensors_are_named, .timeout = 30)
{
    char dir[64], path[128], e[512], header[1400];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/v.safetensors", dir);
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 64, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.head_dim = 24, cfg.bias = 0;
    cfg.qk_norm = (mha_qk_norm){.kind = MHA_QK_NORM_HEAD, .eps = 1e-6f}, cfg.sinks = 1;
    const struct { int k_norm; int sinks; const char *says; } files[] = {
        {16, 1, "tensor 'k_norm.weight' has shape (16,), expected (24,)"},
        {24, 0, "tensor 'sinks' is missing"},
        {24, 1, "tensor 'sinks' holds NaN at element 3: weights must be finite"},
        {24, 1, NULL},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        write_variant_module(path, 24, files[i].k_norm, files[i].sinks);
        if (i == 2) { /* the last sink a NaN */
            FILE *f = fopen(path, "r+b");
            cr_assert(f);
            cr_assert_eq(fseek(f, -4, SEEK_END), 0);
            const uint32_t nan_bits = 0x7fc00000u;
            cr_assert_eq(fwrite(&nan_bits, 4, 1, f), 1);
            fclose(f);
        }
        mha_weights_file wf;
        const mha_status st = mha_weights_file_load(path, "", &cfg, &wf, e, sizeof e);
        if (files[i].says) {
            cr_assert_eq(st, MHA_ERR_FORMAT, "file %zu", i);
            cr_assert(strstr(e, files[i].says), "file %zu: %s", i, e);
            continue;
        }
        cr_assert_eq(st, MHA_OK, "%s", e);
        cr_assert(wf.w.q_norm && wf.w.k_norm && wf.w.sinks);
        mha_engine *eng;
        cr_assert_eq(mha_create(&cfg, &eng), MHA_OK);
        cr_assert_eq(mha_set_weights(eng, &wf.w), MHA_OK, "%s", mha_engine_last_error(eng));
        mha_free(eng);
        mha_weights_file_free(&wf);
    }
    /* BLOOM's fused projection: refused for a model with KV heads of its own */
    snprintf(header, sizeof header,
             "{\"query_key_value.weight\":{\"dtype\":\"F32\",\"shape\":[192,64],\"data_offsets\":[0,49152]},"
             "\"dense.weight\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[49152,65536]}}");
    write_safetensors_raw(path, header, 65536, 0);
    mha_config_init(&cfg);
    cfg.d_model = 64, cfg.n_heads = 4, cfg.bias = 0;
    mha_weights_file wf;
    cr_assert_eq(mha_weights_file_load(path, "", &cfg, &wf, e, sizeof e), MHA_OK, "%s", e);
    cr_assert_str_eq(wf.scheme, "BLOOM (query_key_value, dense)");
    mha_weights_file_free(&wf);
    cfg.n_kv_heads = 2;
    cr_assert_eq(mha_weights_file_load(path, "", &cfg, &wf, e, sizeof e), MHA_ERR_FORMAT);
    cr_assert(strstr(e, "BLOOM's fused projection, which has neither grouped KV heads"), "%s", e);
    tmpdir_remove(dir);
}

/* OLMo 2's QK-norm spans the whole projection: q_norm.weight (n_heads·d_k) and k_norm.weight
 * (n_kv_heads·d_k) load with kind full, a per-head shape is refused naming the tensor, and
 * the engine takes the weights loaded. */
Test(files, whole_projection_qk_norm_tensors_load, .timeout = 30)
{
    char dir[64], path[128], e[512];
    tmpdir_make(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/olmo2.safetensors", dir);
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = 64, cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.head_dim = 24, cfg.bias = 0;
    cfg.qk_norm = (mha_qk_norm){.kind = MHA_QK_NORM_FULL, .eps = 1e-6f};
    cr_assert_eq(mha_config_qk_norm_len(&cfg, 0), 96);
    cr_assert_eq(mha_config_qk_norm_len(&cfg, 1), 48);
    const int k_norms[] = {24, 48};
    for (int i = 0; i < 2; i++) {
        write_variant_module(path, 96, k_norms[i], 0);
        mha_weights_file wf;
        const mha_status st = mha_weights_file_load(path, "", &cfg, &wf, e, sizeof e);
        if (i == 0) {
            cr_assert_eq(st, MHA_ERR_FORMAT);
            cr_assert(strstr(e, "tensor 'k_norm.weight' has shape (24,), expected (48,)"), "%s", e);
            continue;
        }
        cr_assert_eq(st, MHA_OK, "%s", e);
        mha_engine *eng;
        cr_assert_eq(mha_create(&cfg, &eng), MHA_OK);
        cr_assert_eq(mha_set_weights(eng, &wf.w), MHA_OK, "%s", mha_engine_last_error(eng));
        mha_free(eng);
        mha_weights_file_free(&wf);
    }
    tmpdir_remove(dir);
}
