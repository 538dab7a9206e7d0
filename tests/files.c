/* files.c — temporary directories, hand-made (often malformed) files, and running the CLI. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "npy.h"

#ifndef MHA_CLI
#define MHA_CLI "build/mha"
#endif

void tmpdir_make(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/mha-test-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp failed");
}

void tmpdir_remove(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

void write_config(const char *dir, const char *name, const char *yaml, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    write_file(path, yaml, strlen(yaml));
}

void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

void write_safetensors_raw(const char *path, const char *header, size_t data_len, unsigned char fill)
{
    size_t n = strlen(header);
    unsigned char *buf = malloc(8 + n + data_len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    memset(buf + 8 + n, fill, data_len);
    write_file(path, buf, 8 + n + data_len);
    free(buf);
}

void write_npy_raw(const char *path, int major, const char *dict, size_t data_len)
{
    size_t pre = major == 1 ? 10 : 12, n = strlen(dict);
    size_t hlen = (pre + n + 1 + 63) / 64 * 64 - pre;
    unsigned char *buf = calloc(1, pre + hlen + data_len);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, n);
    buf[pre + hlen - 1] = '\n';
    write_file(path, buf, pre + hlen + data_len);
    free(buf);
}

char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

int run_cli(const char *args, char **out, char **err)
{
    return run_cli_env("", args, out, err);
}

int run_cli_env(const char *env, const char *args, char **out, char **err)
{
    char dir[64], cmd[8192], o[96], e[96];
    tmpdir_make(dir, sizeof dir);
    snprintf(o, sizeof o, "%s/stdout", dir);
    snprintf(e, sizeof e, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "%s%s%s %s >%s 2>%s </dev/null", env[0] ? "env " : "", env, MHA_CLI, args, o, e);
    int status = system(cmd);
    if (out)
        *out = read_text(o);
    if (err)
        *err = read_text(e);
    tmpdir_remove(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

float *read_npy(const char *path, int rank, int64_t *shape)
{
    float *data = NULL;
    char err[512];
    mha_status st = mha_npy_load_f32(path, rank, shape, &data, err, sizeof err);
    cr_assert_eq(st, MHA_OK, "%s", err);
    return data;
}
