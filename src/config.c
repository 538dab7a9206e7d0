/* config.c — config defaults, validation with messages that name the field, resolution
 * of the engine's own choices (thread count, query block). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "affinity.h"
#include "quant.h"
#include "rope.h"
#include "status.h"

/* Query rows per block: 48 or 96 (multiples of every microkernel's row panel: 6, 12, 16),
 * the larger when its score tile (q_block × seq_kv floats) fits 1 MiB, the smallest L2 of
 * the cores mha targets (Zen 2–5 1 MiB, Ice Lake 1.25 MiB, Sapphire Rapids 2 MiB). A fixed
 * budget, not the L2 of the CPU at hand, keeps the workspace size a function of the config
 * (mha_workspace_size on one thread, mha_create_static on another). Fewer rows read each
 * head's K and V more often for the same queries; more rows push the score tile out of L2. */
#define Q_BLOCK_BUDGET (1u << 20)
static int default_q_block(int seq_q, int seq_kv)
{
    int qb = (size_t)96 * sizeof(float) * (size_t)seq_kv <= Q_BLOCK_BUDGET ? 96 : 48;
    return qb > seq_q ? seq_q : qb;
}

/* An MLA layer's default scale, as HF's DeepseekV3Attention: 1/sqrt(qk_nope + qk_rope), times
 * yarn's m(mscale_all_dim)² when the config's yarn sets it (in double, then rounded once). */
static float mla_scale(const mha_config *cfg)
{
    double s = 1.0 / sqrt((double)(cfg->mla.qk_nope_head_dim + cfg->mla.qk_rope_head_dim));
    const mha_rope *r = &cfg->rope;
    if (r->style != MHA_ROPE_NONE && r->scaling == MHA_ROPE_SCALING_YARN && r->mscale_all_dim > 0.0f) {
        const double m = mha_yarn_mscale(r->factor, r->mscale_all_dim);
        s *= m * m;
    }
    return (float)s;
}

/* The weights' types: all four floats, or all four blocks of types the engine reads, whole
 * blocks of their inputs (d_model for Wq, Wk, Wv; n_heads·d_k for Wo), and no MLA. */
static mha_status weight_types_check(const mha_config *cfg, mha_problem *pr)
{
    static const char *const names[MHA_W_COUNT] = {"weight_type[0]", "weight_type[1]", "weight_type[2]",
                                                    "weight_type[3]"};
    int blocks = 0;
    for (int i = 0; i < MHA_W_COUNT; i++) {
        const mha_weight_type t = cfg->weight_type[i];
        const mha_qtype *q = mha_qtype_of(t);
        if (t != MHA_WEIGHT_F32 && !q)
            return mha_problemf(pr, MHA_ERR_CONFIG, names[i], "%d (%s) is not a type the engine holds weights in "
                                "(f32, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)", (int)t,
                                mha_weight_type_name(t) ? mha_weight_type_name(t) : "unknown");
        blocks += q != NULL;
        if (!q)
            continue;
        if (cfg->mla.kv_lora_rank)
            return mha_problemf(pr, MHA_ERR_CONFIG, names[i], "%s with MLA: an MLA engine holds float weights",
                                q->name);
        const long long inputs = i == MHA_W_O ? (long long)cfg->n_heads * mha_config_head_dim(cfg) : cfg->d_model;
        if (inputs % q->qk)
            return mha_problemf(pr, MHA_ERR_CONFIG, names[i], "%s needs whole blocks of %d inputs; %s is %lld",
                                q->name, q->qk, i == MHA_W_O ? "n_heads·head_dim" : "d_model", inputs);
    }
    if (cfg->weight_activations != MHA_ACTIVATIONS_F32 && !blocks)
        return mha_problemf(pr, MHA_ERR_CONFIG, "weight_activations", "%s multiplies block-type weights; "
                            "these are f32 (set weight_type, or weights.type)",
                            cfg->weight_activations == MHA_ACTIVATIONS_BF16 ? "bf16" : "int16");
    if (cfg->weight_activations == MHA_ACTIVATIONS_BF16 && cfg->precision != MHA_PRECISION_BF16)
        return mha_problemf(pr, MHA_ERR_CONFIG, "weight_activations", "bf16 runs the block weights on a bf16 "
                            "engine's products; this engine's precision is f32 (set precision bf16)");
    if (blocks && blocks < MHA_W_COUNT) /* every name is known: each passed the loop */
        return mha_problemf(pr, MHA_ERR_CONFIG, "weight_type", "%s %s %s %s: all four f32, or all four block types",
                            mha_weight_type_name(cfg->weight_type[0]), mha_weight_type_name(cfg->weight_type[1]),
                            mha_weight_type_name(cfg->weight_type[2]), mha_weight_type_name(cfg->weight_type[3]));
    return MHA_OK;
}

mha_status mha_config_resolve(const mha_config *cfg, mha_dims *dims, mha_problem *pr)
{
    if (!cfg)
        return mha_problemf(pr, MHA_ERR_INVALID_ARG, "config", "NULL");
    mha_key_problem p;
    if (mha_config_verify(cfg, &p) != MHA_OK)
        return mha_config_problem(&p, pr);

    mha_status st = weight_types_check(cfg, pr);
    if (st != MHA_OK)
        return st;

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
        dims->dk = mha_config_head_dim(cfg);
        dims->dv = mha_config_v_head_dim(cfg);
        dims->qd = cfg->n_heads * dims->dk;
        dims->batch = cfg->max_batch;
        dims->seq_q = cfg->max_seq_q;
        dims->seq_kv = cfg->max_seq_kv;
        dims->threads = threads;
        dims->q_block = cfg->q_block > 0 ? (cfg->q_block < cfg->max_seq_q ? cfg->q_block : cfg->max_seq_q)
                                         : default_q_block(cfg->max_seq_q, cfg->max_seq_kv);
        dims->bias = cfg->bias;
        dims->bf16 = cfg->precision == MHA_PRECISION_BF16;
        dims->kv_type = cfg->kv_type != MHA_KV_AUTO ? cfg->kv_type : dims->bf16 ? MHA_KV_BF16 : MHA_KV_F32;
        dims->kvh = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->mla.kv_lora_rank ? 1 : cfg->n_heads;
        dims->group = cfg->n_heads / dims->kvh;
        dims->window = cfg->window;
        dims->scale = cfg->scale > 0.0f ? cfg->scale : 1.0f / sqrtf((float)dims->dk);
        memset(&dims->mla, 0, sizeof dims->mla);
        if (cfg->mla.kv_lora_rank) {
            dims->mla = cfg->mla;
            if (!(cfg->scale > 0.0f))
                dims->scale = mla_scale(cfg);
        }
        dims->softcap = cfg->softcap;
        dims->sinks = cfg->sinks;
        memset(&dims->qk_norm, 0, sizeof dims->qk_norm);
        if (cfg->qk_norm.kind != MHA_QK_NORM_NONE)
            dims->qk_norm = cfg->qk_norm;
        dims->alibi_max_bias = cfg->alibi_max_bias;
        /* RoPE with the fields its style and scaling do not read zeroed: two configs of one
         * model compare equal (a KV cache checks this) */
        const mha_rope *r = &cfg->rope;
        memset(&dims->rope, 0, sizeof dims->rope);
        if (r->style != MHA_ROPE_NONE) {
            dims->rope = (mha_rope){.style = r->style, .theta = r->theta, .scaling = r->scaling,
                                    .rotary_dim = r->rotary_dim            ? r->rotary_dim
                                                  : cfg->mla.kv_lora_rank ? cfg->mla.qk_rope_head_dim
                                                                          : dims->dk};
            if (r->scaling != MHA_ROPE_SCALING_NONE)
                dims->rope.factor = r->factor;
            if (r->scaling == MHA_ROPE_SCALING_LLAMA3)
                dims->rope.low_freq_factor = r->low_freq_factor, dims->rope.high_freq_factor = r->high_freq_factor;
            if (r->scaling == MHA_ROPE_SCALING_LLAMA3 || r->scaling == MHA_ROPE_SCALING_YARN)
                dims->rope.original_max_position = r->original_max_position;
            if (r->scaling == MHA_ROPE_SCALING_YARN)
                dims->rope.beta_fast = r->beta_fast, dims->rope.beta_slow = r->beta_slow, dims->rope.truncate = r->truncate,
                dims->rope.mscale = r->mscale, dims->rope.mscale_all_dim = r->mscale_all_dim;
        }
        dims->positions = cfg->max_seq_q > cfg->max_seq_kv ? cfg->max_seq_q : cfg->max_seq_kv;
        dims->quant = mha_qtype_of(cfg->weight_type[MHA_W_Q]) != NULL; /* all four or none */
        for (int i = 0; i < MHA_W_COUNT; i++)
            dims->wtype[i] = cfg->weight_type[i];
        dims->acts = cfg->weight_activations;
    }
    return MHA_OK;
}
