/* config.c — config defaults, validation with messages that name the field, resolution
 * of the engine's own choices (thread count, query block). */
#include "config.h"

#include <string.h>

#include "affinity.h"
#include "status.h"

MHA_API void mha_config_init(mha_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->d_model = 512;
    cfg->n_heads = 8;
    cfg->max_batch = 1;
    cfg->max_seq_q = 128;
    cfg->max_seq_kv = 128;
    cfg->bias = 1;
    cfg->threads = 0;
    cfg->pinning = MHA_PIN_NONE;
    cfg->q_block = 0;
}

/* Query rows per block: 48 or 96 (multiples of every microkernel's row panel: 6, 12, 16),
 * the larger when its score tile (q_block × seq_kv floats) fits the L2 cache. Measured on
 * the Ice Lake VM (perf/RESULTS.md): 16 rows cost 1.9× at S=8192, 256 rows 1.2× at S=512. */
static int default_q_block(int seq_q, int seq_kv)
{
    size_t l2 = mha_affinity_l2_bytes();
    if (l2 == 0)
        l2 = 1u << 20;
    int qb = (size_t)96 * sizeof(float) * (size_t)seq_kv <= l2 ? 96 : 48;
    return qb > seq_q ? seq_q : qb;
}

mha_status mha_config_resolve(const mha_config *cfg, mha_dims *dims, char *err, size_t err_len)
{
    if (!cfg)
        return mha_errorf(err, err_len, MHA_ERR_INVALID_ARG, "config is NULL");
    const struct { const char *name; int value; } positive[] = {
        {"d_model", cfg->d_model},       {"n_heads", cfg->n_heads},
        {"max_batch", cfg->max_batch},   {"max_seq_q", cfg->max_seq_q},
        {"max_seq_kv", cfg->max_seq_kv},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        if (positive[i].value <= 0)
            return mha_errorf(err, err_len, MHA_ERR_CONFIG, "%s: must be positive, got %d",
                        positive[i].name, positive[i].value);
    if (cfg->d_model % cfg->n_heads != 0)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "n_heads: %d does not divide d_model %d",
                    cfg->n_heads, cfg->d_model);
    if (cfg->bias != 0 && cfg->bias != 1)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "bias: must be 0 or 1, got %d", cfg->bias);
    if (cfg->threads < 0 || cfg->threads > MHA_MAX_THREADS)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "threads: must be in 0..%d, got %d",
                    MHA_MAX_THREADS, cfg->threads);
    if (cfg->q_block < 0)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "q_block: must be >= 0, got %d", cfg->q_block);
    switch (cfg->pinning) {
    case MHA_PIN_NONE: case MHA_PIN_CLOSE: case MHA_PIN_SPREAD:
        break;
    case MHA_PIN_CPUS:
        if (cfg->n_cpus < 1 || cfg->n_cpus > MHA_MAX_CPUS)
            return mha_errorf(err, err_len, MHA_ERR_CONFIG, "n_cpus: must be in 1..%d with pinning cpus, got %d",
                        MHA_MAX_CPUS, cfg->n_cpus);
        for (int i = 0; i < cfg->n_cpus; i++)
            if (cfg->cpus[i] < 0)
                return mha_errorf(err, err_len, MHA_ERR_CONFIG, "cpus[%d]: must be >= 0, got %d", i, cfg->cpus[i]);
        break;
    default:
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "pinning: unknown value %d", (int)cfg->pinning);
    }
    if (memchr(cfg->blis_arch, '\0', sizeof cfg->blis_arch) == NULL)
        return mha_errorf(err, err_len, MHA_ERR_CONFIG, "blis_arch: not NUL-terminated");

    int threads = cfg->threads;
    if (threads == 0) {
        threads = mha_affinity_allowed(NULL, 0);
        if (threads < 1)
            threads = 1;
        if (threads > MHA_MAX_THREADS)
            threads = MHA_MAX_THREADS;
    }
    if (dims) {
        dims->d = cfg->d_model;
        dims->h = cfg->n_heads;
        dims->dk = cfg->d_model / cfg->n_heads;
        dims->batch = cfg->max_batch;
        dims->seq_q = cfg->max_seq_q;
        dims->seq_kv = cfg->max_seq_kv;
        dims->threads = threads;
        dims->q_block = cfg->q_block > 0 ? (cfg->q_block < cfg->max_seq_q ? cfg->q_block : cfg->max_seq_q)
                                         : default_q_block(cfg->max_seq_q, cfg->max_seq_kv);
        dims->bias = cfg->bias;
    }
    if (err && err_len)
        err[0] = '\0';
    return MHA_OK;
}
