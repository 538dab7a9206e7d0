/* config_file.h — the whole YAML config of DESIGN.md §6, as the command line uses it.
 * mha_config_load (public) maps the engine's part of it onto an mha_config. */
#ifndef MHA_CONFIG_FILE_H
#define MHA_CONFIG_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

enum { MHA_MASK_NONE, MHA_MASK_CAUSAL, MHA_MASK_PADDING };
enum { MHA_SCALE_STRONG, MHA_SCALE_WEAK, MHA_SCALE_BOTH };

#define MHA_MAX_LENGTHS 4096
#define MHA_MAX_SCALE_POINTS 64

typedef struct mha_file_config {
    char path[256];
    char name[64];
    /* model */
    int d_model, heads, bias;
    /* batch: generated inputs; lengths repeat over the batch when shorter than it */
    int batch, seq_len, kv_len, cross, mask;
    int lengths[MHA_MAX_LENGTHS], n_lengths;
    int kv_lengths[MHA_MAX_LENGTHS], n_kv_lengths;
    /* threads */
    int threads;
    mha_pinning pinning;
    int cpus[MHA_MAX_CPUS], n_cpus;
    /* run */
    int warmup, iters;
    uint64_t seed;
    /* scaling */
    int scale_threads[MHA_MAX_SCALE_POINTS], n_scale_threads;
    mha_pinning scale_pinning[4];
    int n_scale_pinning;
    int scale_mode, scale_iters;
    /* engine */
    int q_block;
    char blis_arch[16];
    /* line of a few keys, for messages about them later (0: not in the file) */
    int line_mask, line_lengths, line_threads;
} mha_file_config;

/* Defaults of every field (the built-in default model: configs/default.yaml). */
void mha_file_config_default(mha_file_config *fc);
/* Loads and validates a YAML config. MHA_ERR_IO (cannot read), MHA_ERR_CONFIG (syntax, unknown
 * key, wrong type, out of range: the message starts "path:line: key:"), MHA_ERR_AFFINITY,
 * MHA_ERR_NOMEM. */
mha_status mha_file_config_load(const char *path, mha_file_config *fc, char *err, size_t err_len);
/* The engine config a file config describes (capacity = its batch shape). */
void mha_file_config_engine(const mha_file_config *fc, mha_config *cfg);
/* Names for enum values, as the YAML spells them. */
const char *mha_mask_name(int mask);
const char *mha_pinning_name(mha_pinning p);
const char *mha_scale_mode_name(int mode);

#endif
