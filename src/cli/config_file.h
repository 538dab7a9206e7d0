/* config_file.h — a config file as the mha command reads it: the engine's keys (mha_config,
 * libmha's schema) and the command's own rows, loaded by libmha's one loader
 * (mha_config_load_with), so both kinds of key give the same "file:line: key: problem". */
#ifndef MHA_CLI_CONFIG_FILE_H
#define MHA_CLI_CONFIG_FILE_H

#include <stdint.h>

#include "mha.h"
#include "mha_io.h"

typedef enum { MHA_MASK_NONE, MHA_MASK_CAUSAL, MHA_MASK_PADDING } mha_mask_kind;
typedef enum { MHA_SCALE_STRONG, MHA_SCALE_WEAK, MHA_SCALE_BOTH } mha_scale_mode;

#define MHA_MAX_LENGTHS 4096
#define MHA_MAX_SCALE_POINTS 64

/* A whole config file: the engine's part and the command's blocks (generated batch, timing,
 * scaling sweep, decode). */
typedef struct cli_config {
    char path[256];                       /* where it was read from ("" for text) */
    char name[64];                        /* name:, or the file's stem */
    mha_config engine;                    /* model, threads, engine; batch shape as capacity */
    int cross;                            /* batch.cross, or kv_len different from seq_len */
    mha_mask_kind mask;                   /* batch.mask */
    int lengths[MHA_MAX_LENGTHS], n_lengths;        /* batch.lengths (repeat over the batch) */
    int kv_lengths[MHA_MAX_LENGTHS], n_kv_lengths;  /* batch.kv_lengths */
    int warmup, iters;                    /* run.* */
    uint64_t seed;
    int scale_threads[MHA_MAX_SCALE_POINTS], n_scale_threads;   /* scaling.* */
    mha_pinning scale_pinning[4];
    int n_scale_pinning;
    mha_scale_mode scale_mode;
    int scale_iters;
    int line_mask, line_lengths, line_threads; /* lines of batch.mask, batch.lengths, threads.count (0: absent) */
    int line_v_head_dim;                  /* line of model.v_head_dim (0: absent) */
    /* decode: mha run prefills seqs sequences to context tokens through the KV cache
     * (prefill_chunk tokens per sequence per step), then runs steps steps of new tokens each */
    int decode;                           /* 1: the file has a decode block */
    int decode_seqs, decode_context, decode_new, decode_steps, decode_block_size, decode_prefill_chunk;
} cli_config;

/* The schema's defaults: mha_config_init's engine, run { warmup 3, iters 20, seed 42 }, name
 * "default". */
void cli_config_default(cli_config *fc);
/* Reads and validates a config file (mha_config_load_with's statuses and messages); fc changes
 * only on success. */
mha_status cli_config_load(const char *path, cli_config *fc, char *err, size_t err_len);
/* The same over a base config (a GGUF layer's): the file's engine keys override it, none are
 * required (mha_config_client.base). */
mha_status cli_config_load_onto(const char *path, const mha_config *base, cli_config *fc, char *err, size_t err_len);
/* The same from text in memory; `origin` names it in messages. */
mha_status cli_config_parse(const char *text, size_t len, const char *origin, cli_config *fc, char *err, size_t err_len);
/* MHA_OK when the config's engine has projections (a forward, a decode, a scaling sweep), else
 * MHA_ERR_CONFIG with "file:line: model.v_head_dim: ..." in err: a V narrower than head_dim
 * runs in `mha run --core` alone. */
mha_status cli_config_projections(const cli_config *fc, char *err, size_t err_len);
/* The command's row i, NULL past the last; its row of a key, NULL if none. */
const mha_config_row *cli_config_row_at(int i);
const mha_config_row *cli_config_row(const char *key);

/* Names of the command's enum values as a config spells them ("?" for others). */
const char *cli_mask_name(int mask);
const char *cli_scale_mode_name(int mode);

#endif
