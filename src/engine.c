/* engine.c — the public engine: create (heap or caller memory), weights, forward, accessors.
 * Everything an engine owns lives in one arena laid out by arena.c; a forward pass only
 * validates its arguments, fills a job description and hands it to the scheduler. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity.h"
#include "arena.h"
#include "config.h"
#include "attention.h"
#include "kernel.h"
#include "kvcache.h"
#include "mha.h"
#include "mha_io.h"
#include "qgemm.h"
#include "rope.h"
#include "scheduler.h"
#include "isa/isa.h"
#include "status.h"
#include "weights.h"

struct mha_engine {
    mha_dims dims;
    mha_arena_plan plan;
    mha_arena_views views;  /* weight views point into a shared packed copy when shared */
    mha_kernel kernel;      /* BLIS's microkernel and the kernel table (kernel.isa) */
    mha_fwd model;          /* what every pass reads, made once the views are final (make_model),
                             * never changed after: a pass copies it and sets .call (a step's
                             * copy an MLA engine's dv too) */
    mha_attention_ops attn_ops; /* its attention's strategy, resolved from the table (make_model) */
    mha_step_ops step_ops;  /* a step's strategies on this engine's cache type (make_model) */
    mha_qmat qkv_q, o_q;    /* block-type weights: what model.wqkv and model.wo point to */
    const mha_bkernel *bkernel; /* bf16 engines; NULL: float32 */
    char kernel_name[24];   /* mha_engine_kernel */
    mha_sched sched;
    void *owned;      /* the arena when mha_create allocated it, else NULL */
    int weights_set;
    int shared;       /* reads an mha_packed_weights: set_weights is refused */
    char last_error[256];
};

/* One packed copy of a model's weights (mha_pack_weights): the header at the start of its own
 * block, the weight regions of an engine's arena after it. */
struct mha_packed_weights {
    mha_dims dims;          /* d, h, dk, bias, bf16: what an engine must match */
    const char *arch;       /* the kernel it was packed for (panel width bw, dkp) */
    int bw, dkp;
    size_t bytes;
    mha_arena_views views;  /* its weight regions (the arena list's WEIGHTS), which shared engines take */
};

/* What create decides before it touches any memory. */
typedef struct prepared {
    mha_dims dims;
    mha_arena_plan plan;
    mha_kernel kernel;
    const mha_bkernel *bkernel; /* precision bf16; else NULL */
    int pin[MHA_MAX_THREADS]; /* CPU per worker */
    int pinning;
} prepared;

/* What a create asks of the process before the first forward (AMX: the tile data permission);
 * a check never does. */
static mha_status acquire(const prepared *p, mha_problem *pr)
{
    return mha_bkernel_enable(p->bkernel) ? MHA_OK
                                          : mha_problemf(pr, MHA_ERR_CONFIG, "bf16_kernel", "%s: Linux refused the tile "
                                                         "data permission it needs", p->bkernel->name);
}

/* Every check a config must pass, in the order a user would fix them; nothing allocated. */
static mha_status prepare(const mha_config *cfg, mha_arena_kind kind, prepared *p, mha_problem *pr)
{
    mha_status st = mha_config_resolve(cfg, &p->dims, pr);
    if (st != MHA_OK)
        return st;
    if ((st = mha_kernel_choose(cfg, p->dims.bf16, &p->kernel, &p->bkernel, pr)) != MHA_OK)
        return st;
    if (p->dims.bf16) {
        if (p->kernel.bw % MHA_BT_N != 0) /* head columns and 16-column groups of C on whole panels */
            return mha_problemf(pr, MHA_ERR_CONFIG, "precision", "bf16 needs B panels of a multiple of 16 columns; "
                                "BLIS '%s' has %d", p->kernel.arch, p->kernel.bw);
    }
    size_t header = kind == MHA_ARENA_WEIGHTS ? sizeof(mha_packed_weights) : sizeof(mha_engine);
    if (mha_arena_plan_make(&p->dims, &p->kernel, header, kind, &p->plan) != 0)
        return mha_problemf(pr, MHA_ERR_CONFIG, "max_batch",
                            "%d with max_seq_q %d, max_seq_kv %d, d_model %d and %d threads: the workspace size "
                            "overflows size_t", cfg->max_batch, cfg->max_seq_q, cfg->max_seq_kv, cfg->d_model,
                            p->dims.threads);
    p->pinning = cfg->pinning != MHA_PIN_NONE;
    return mha_affinity_plan(cfg, p->dims.threads, p->pin, pr);
}

/* A status with its problem written as "field: what" into err. */
static mha_status report(mha_status st, const mha_problem *pr, char *err, size_t err_len)
{
    if (st != MHA_OK)
        mha_problem_text(pr, err, err_len);
    else if (err && err_len)
        err[0] = '\0';
    return st;
}

mha_status mha_config_check_problem(const mha_config *cfg, mha_problem *pr)
{
    prepared p;
    return prepare(cfg, MHA_ARENA_ENGINE, &p, pr);
}

MHA_API mha_status mha_config_check(const mha_config *cfg, char *err, size_t err_len)
{
    mha_problem pr;
    return report(mha_config_check_problem(cfg, &pr), &pr, err, err_len);
}

/* What every pass shares, made once when the engine's views are final (build; a shared
 * engine again once it takes the packed block's): the kernel, the sizes, the numerics, the
 * weights' views and the engine's buffers. A call adds its mha_call. */
static void make_model(mha_engine *e)
{
    const mha_dims *dm = &e->dims;
    const mha_arena_views *v = &e->views;
    e->qkv_q = mha_qmat_qkv(dm, e->plan.dkp, v->wqkvq);
    e->o_q = mha_qmat_o(dm, v->woq);
    e->model = (mha_fwd){
        .kernel = &e->kernel,
        .d = dm->d, .h = dm->h, .dk = dm->dk, .dv = dm->dv, .dkp = e->plan.dkp, .q_block = dm->q_block, .qd = dm->qd,
        .rows = dm->seq_q > dm->seq_kv ? dm->seq_q : dm->seq_kv,
        .ld_scores = e->plan.ld_scores,
        .has_bias = dm->bias,
        .kvh = dm->kvh, .group = dm->group, .window = dm->window,
        .scale = dm->scale, .softcap = dm->softcap, .sinks = v->sinks, .alibi = v->alibi,
        .q_norm = v->qk_norm, .norm_eps = dm->qk_norm.eps,
        .k_norm = v->qk_norm ? v->qk_norm + mha_qk_norm_len(dm->qk_norm.kind, dm->h, dm->dk) : NULL,
        .rope = dm->rope.style, .rope_dim = dm->rope.rotary_dim,
        .rope_cos = v->rope_cos, .rope_sin = v->rope_sin,
        .prod = mha_products_of(e->bkernel, dm->quant, dm->acts), .bk = e->bkernel,
        .attn = mha_attention_ops_of(&e->attn_ops, e->bkernel, &e->kernel, dm->dk, dm->group),
        .wqkv = dm->quant ? (const void *)&e->qkv_q : dm->bf16 ? (const void *)v->wqkv16 : v->wqkv, .bqkv = v->bqkv,
        .wo = dm->quant ? (const void *)&e->o_q : dm->bf16 ? (const void *)v->wo16 : v->wo, .bo = v->bo,
        .mla = e->plan.mla.on ? &e->plan.mla : NULL, .mla_dims = dm->mla,
        .mla_w = dm->bf16 ? (const void *)v->mla_w16 : v->mla_w, .mla_v = v->mla_v,
        .buf = {.z = v->z, .xpack = v->xpack, .xpack_stride = e->plan.xpack_stride,
                .q_ss = v->qk_ss, .k_ss = v->qk_ss ? v->qk_ss + (size_t)dm->batch * dm->seq_q * dm->kvh : NULL,
                .k_saved = v->k_saved, .mla_k = v->mla_k, .mla_z = v->mla_z},
    };
    e->step_ops = mha_step_ops_of(&e->model, dm->kv_type);
}

/* Lay the engine out in ws (at least plan.total bytes, 64-byte aligned). */
static mha_engine *build(const prepared *p, void *ws)
{
    mha_arena_views v;
    mha_arena_carve(&p->plan, ws, &v);
    /* every page before the worker slices touched now (the slices by their workers below):
     * no first-touch page faults inside the first forwards and steps */
    memset(ws, 0, p->plan.off[MHA_REGION_scratch]);
    mha_engine *e = v.engine;
    e->dims = p->dims;
    e->plan = p->plan;
    e->views = v;
    e->kernel = p->kernel;
    e->bkernel = p->bkernel;
    if (p->dims.bf16)
        snprintf(e->kernel_name, sizeof e->kernel_name, "%s", p->bkernel->name);
    else
        snprintf(e->kernel_name, sizeof e->kernel_name, "blis-%s", p->kernel.arch);
    for (int t = 0; t < p->dims.threads; t++) {
        v.pin_cpu[t] = p->pin[t];
        v.worker_cpu[t] = -1;
    }
    e->sched = (mha_sched){
        .threads = p->dims.threads,
        .pin_cpu = p->pinning ? v.pin_cpu : NULL,
        .worker_cpu = v.worker_cpu,
        .scratch = v.scratch,
        .plan = &e->plan,
        .order = v.order,
        .deps = v.deps,
        .xdeps = v.xdeps,
        .pack_chunks = (p->dims.seq_q + MHA_PACK_BLOCK - 1) / MHA_PACK_BLOCK,
    };
    mha_sched_first_touch(&e->sched);
    if (p->dims.rope.style != MHA_ROPE_NONE)
        mha_rope_table(&p->dims.rope, p->dims.rope.rotary_dim, p->dims.positions, v.rope_cos, v.rope_sin);
    if (v.alibi)
        mha_alibi_slopes(p->dims.h, p->dims.alibi_max_bias, v.alibi);
    make_model(e);
    return e;
}

MHA_API size_t mha_workspace_size(const mha_config *cfg)
{
    prepared p;
    return prepare(cfg, MHA_ARENA_ENGINE, &p, NULL) == MHA_OK ? p.plan.total : 0;
}

/* What every create begins with: out checked and set to NULL, the config prepared for an arena
 * of that kind and what it needs from the system acquired. */
static mha_status create_begin(const mha_config *cfg, mha_arena_kind kind, mha_engine **out, prepared *p,
                               mha_problem *pr)
{
    if (!out)
        return mha_problemf(pr, MHA_ERR_INVALID_ARG, "out", "NULL");
    *out = NULL;
    const mha_status st = prepare(cfg, kind, p, pr);
    return st != MHA_OK ? st : acquire(p, pr);
}

/* The engine in pages of its own, which mha_free gives back. */
static mha_status build_owned(const prepared *p, mha_engine **e, mha_problem *pr)
{
    void *ws = mha_alloc_pages(p->plan.total);
    if (!ws)
        return mha_problemf(pr, MHA_ERR_NOMEM, "arena", "%zu bytes could not be had", p->plan.total);
    *e = build(p, ws);
    (*e)->owned = ws;
    return MHA_OK;
}

MHA_API mha_status mha_create_msg(const mha_config *cfg, mha_engine **out, char *err, size_t err_len)
{
    mha_problem pr;
    prepared p;
    mha_status st = create_begin(cfg, MHA_ARENA_ENGINE, out, &p, &pr);
    if (st == MHA_OK)
        st = build_owned(&p, out, &pr);
    return report(st, &pr, err, err_len);
}

MHA_API mha_status mha_create(const mha_config *cfg, mha_engine **out)
{
    return mha_create_msg(cfg, out, NULL, 0);
}

MHA_API mha_status mha_create_static_msg(const mha_config *cfg, void *ws, size_t ws_len, mha_engine **out, char *err,
                                         size_t err_len)
{
    mha_problem pr;
    prepared p;
    const mha_status st = create_begin(cfg, MHA_ARENA_ENGINE, out, &p, &pr);
    if (st != MHA_OK)
        return report(st, &pr, err, err_len);
    if (!ws)
        return report(mha_problemf(&pr, MHA_ERR_INVALID_ARG, "ws", "NULL"), &pr, err, err_len);
    if ((uintptr_t)ws % MHA_ALIGN != 0 || ws_len < p.plan.total)
        return report(mha_problemf(&pr, MHA_ERR_WORKSPACE, "ws", "%zu bytes at %p: this config needs %zu, %d-byte aligned",
                                   ws_len, ws, p.plan.total, MHA_ALIGN),
                      &pr, err, err_len);
    *out = build(&p, ws);
    return report(MHA_OK, &pr, err, err_len);
}

MHA_API mha_status mha_create_static(const mha_config *cfg, void *ws, size_t ws_len, mha_engine **out)
{
    return mha_create_static_msg(cfg, ws, ws_len, out, NULL, 0);
}

MHA_API void mha_free(mha_engine *e)
{
    if (e)
        free(e->owned); /* NULL for a static engine: its memory is the caller's */
}

/* ---- shared packed weights ---- */

MHA_API mha_status mha_pack_weights(const mha_config *cfg, const mha_weights *w, mha_packed_weights **out)
{
    if (!out)
        return MHA_ERR_INVALID_ARG;
    *out = NULL;
    prepared p;
    mha_status st = prepare(cfg, MHA_ARENA_WEIGHTS, &p, NULL);
    if (st != MHA_OK)
        return st;
    if ((st = mha_weights_check(w, &p.dims, NULL, 0)) != MHA_OK)
        return st;
    void *mem = mha_alloc_pages(p.plan.total);
    if (!mem)
        return MHA_ERR_NOMEM;
    mha_arena_views v;
    mha_arena_carve(&p.plan, mem, &v);
    mha_packed_weights *pw = v.engine;
    *pw = (mha_packed_weights){.dims = p.dims, .arch = p.kernel.arch, .bw = p.kernel.bw, .dkp = p.plan.dkp,
                               .bytes = p.plan.total, .views = v};
    mha_weights_pack(w, &p.dims, &p.kernel, p.plan.dkp, &v);
    *out = pw;
    return MHA_OK;
}

MHA_API void mha_packed_weights_free(mha_packed_weights *pw)
{
    free(pw); /* the header starts the block */
}

MHA_API size_t mha_packed_weights_size(const mha_packed_weights *pw)
{
    return pw ? pw->bytes : 0;
}

/* Whether an engine of p may read pw, and if not which field differs (the packed copy was made
 * for another model, or for another kernel's panels). */
static mha_status shared_matches(const prepared *p, const mha_packed_weights *pw, mha_problem *pr)
{
    const struct { const char *field; int engine, packed; } f[] = {
        {"d_model", p->dims.d, pw->dims.d},       {"n_heads", p->dims.h, pw->dims.h},
        {"n_kv_heads", p->dims.kvh, pw->dims.kvh}, {"head_dim", p->dims.dk, pw->dims.dk},
        {"bias", p->dims.bias, pw->dims.bias},
        {"qk_norm.kind", p->dims.qk_norm.kind, pw->dims.qk_norm.kind},
        {"qk_norm.weight_offset", p->dims.qk_norm.weight_offset, pw->dims.qk_norm.weight_offset},
        {"sinks", p->dims.sinks, pw->dims.sinks},
        {"precision", p->dims.bf16, pw->dims.bf16},
        {"mla.kv_lora_rank", p->dims.mla.kv_lora_rank, pw->dims.mla.kv_lora_rank}, /* packed weights are never MLA's */
        {"v_head_dim", p->dims.dv, pw->dims.dv},
        {"weight_type[0]", p->dims.wtype[MHA_W_Q], pw->dims.wtype[MHA_W_Q]},
        {"weight_type[1]", p->dims.wtype[MHA_W_K], pw->dims.wtype[MHA_W_K]},
        {"weight_type[2]", p->dims.wtype[MHA_W_V], pw->dims.wtype[MHA_W_V]},
        {"weight_type[3]", p->dims.wtype[MHA_W_O], pw->dims.wtype[MHA_W_O]},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].engine != f[i].packed)
            return mha_problemf(pr, MHA_ERR_CONFIG, f[i].field, "%d, but the packed weights were made for %d",
                                f[i].engine, f[i].packed);
    if (strcmp(p->kernel.arch, pw->arch) != 0 || p->kernel.bw != pw->bw || p->plan.dkp != pw->dkp)
        return mha_problemf(pr, MHA_ERR_CONFIG, "blis_arch", "'%s' (panels of %d), but the packed weights were made for "
                            "'%s' (panels of %d)", p->kernel.arch, p->kernel.bw, pw->arch, pw->bw);
    return MHA_OK;
}

MHA_API mha_status mha_create_shared_msg(const mha_config *cfg, const mha_packed_weights *pw, mha_engine **out,
                                         char *err, size_t err_len)
{
    mha_problem pr;
    if (out && !pw) {
        *out = NULL;
        return report(mha_problemf(&pr, MHA_ERR_INVALID_ARG, "pw", "NULL"), &pr, err, err_len);
    }
    prepared p;
    mha_status st = create_begin(cfg, MHA_ARENA_ENGINE_SHARED, out, &p, &pr);
    if (st != MHA_OK || (st = shared_matches(&p, pw, &pr)) != MHA_OK || (st = build_owned(&p, out, &pr)) != MHA_OK)
        return report(st, &pr, err, err_len);
    mha_engine *e = *out;
    mha_arena_share_weights(&e->views, &pw->views);
    make_model(e);
    e->weights_set = e->shared = 1;
    return report(MHA_OK, &pr, err, err_len);
}

MHA_API mha_status mha_create_shared(const mha_config *cfg, const mha_packed_weights *pw, mha_engine **out)
{
    return mha_create_shared_msg(cfg, pw, out, NULL, 0);
}

/* ---- weights and forward: failures leave a message in the engine ---- */

/* An engine of T > 1 threads called from inside the caller's own active parallel region would
 * run its team on one thread (libgomp does not nest by default) while reporting T: refused,
 * so a server sees the mistake instead of a slow engine (mha.h's threading contract). */
static int nested_refused(const mha_engine *e)
{
    return e->dims.threads > 1 && mha_sched_nested();
}


static mha_status failed(mha_engine *e, mha_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static mha_status failed(mha_engine *e, mha_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->last_error, sizeof e->last_error, fmt, ap);
    va_end(ap);
    return st;
}

MHA_API mha_status mha_set_weights(mha_engine *e, const mha_weights *w)
{
    if (!e)
        return MHA_ERR_INVALID_ARG;
    if (e->shared)
        return failed(e, MHA_ERR_STATE, "set_weights: this engine reads shared packed weights (mha_create_shared)");
    char why[224];
    mha_status st = mha_weights_check(w, &e->dims, why, sizeof why);
    if (st != MHA_OK)
        return failed(e, st, "set_weights: %s", why);
    mha_weights_pack(w, &e->dims, &e->kernel, e->plan.dkp, &e->views);
    e->weights_set = 1;
    e->last_error[0] = '\0';
    return MHA_OK;
}

MHA_API mha_status mha_set_mla_weights(mha_engine *e, const mha_mla_weights *w)
{
    if (!e)
        return MHA_ERR_INVALID_ARG;
    char why[224];
    mha_status st = mha_mla_weights_check(w, &e->dims, why, sizeof why);
    if (st != MHA_OK)
        return failed(e, st, "set_mla_weights: %s", why);
    mha_mla_weights_pack(w, &e->model);
    e->weights_set = 1;
    e->last_error[0] = '\0';
    return MHA_OK;
}

/* The first length outside [0, max], or -1. */
static int bad_length(const int32_t *len, int batch, int max)
{
    for (int b = 0; len && b < batch; b++)
        if (len[b] < 0 || len[b] > max)
            return b;
    return -1;
}

/* A call's sizes against the engine's capacity and its lengths against its sizes: MHA_OK, or
 * MHA_ERR_SHAPE with the message (what: "forward", "core") in e. */
static mha_status check_sizes(mha_engine *e, const char *what, int batch, int seq_q, int seq_kv, const int32_t *q_len,
                              const int32_t *kv_len)
{
    const mha_dims *dm = &e->dims;
    const struct { const char *name; int value, max; const char *cap; } size[] = {
        {"batch", batch, dm->batch, "max_batch"},
        {"seq_q", seq_q, dm->seq_q, "max_seq_q"},
        {"seq_kv", seq_kv, dm->seq_kv, "max_seq_kv"},
    };
    for (int i = 0; i < 3; i++) {
        if (size[i].value < 1)
            return failed(e, MHA_ERR_SHAPE, "%s: %s %d < 1", what, size[i].name, size[i].value);
        if (size[i].value > size[i].max)
            return failed(e, MHA_ERR_SHAPE, "%s: %s %d > %s %d", what, size[i].name, size[i].value, size[i].cap,
                          size[i].max);
    }
    int b;
    if ((b = bad_length(q_len, batch, seq_q)) >= 0)
        return failed(e, MHA_ERR_SHAPE, "%s: q_lengths[%d] = %d is outside 0..seq_q %d", what, b, q_len[b], seq_q);
    if ((b = bad_length(kv_len, batch, seq_kv)) >= 0)
        return failed(e, MHA_ERR_SHAPE, "%s: kv_lengths[%d] = %d is outside 0..seq_kv %d", what, b, kv_len[b], seq_kv);
    return MHA_OK;
}

MHA_API mha_status mha_forward(mha_engine *e, const mha_input *in, float *out, float *attn)
{
    if (!e)
        return MHA_ERR_INVALID_ARG;
    if (!in || !out || !in->q || !in->k || !in->v)
        return failed(e, MHA_ERR_INVALID_ARG, "forward: %s is NULL",
                      !in ? "in" : !out ? "out" : !in->q ? "in->q" : !in->k ? "in->k" : "in->v");
    if (!e->weights_set)
        return failed(e, MHA_ERR_STATE, "forward: no weights yet (call mha_set_weights, or mha_set_mla_weights for MLA, "
                      "first)");
    if (nested_refused(e))
        return failed(e, MHA_ERR_STATE, "forward: called inside an active OpenMP parallel region, where this engine's %d "
                      "threads would run as 1: call it outside, or create it with threads = 1", e->dims.threads);
    mha_status st = check_sizes(e, "forward", in->batch, in->seq_q, in->seq_kv, in->q_lengths, in->kv_lengths);
    if (st != MHA_OK)
        return st;

    const mha_call call = {.batch = in->batch, .seq_q = in->seq_q, .seq_kv = in->seq_kv,
                           .fused = in->q == in->k && in->k == in->v && in->seq_q == in->seq_kv,
                           .kv_shared = in->k == in->v, .causal = in->causal != 0, .q = in->q, .k = in->k, .v = in->v,
                           .q_len = in->q_lengths, .kv_len = in->kv_lengths, .mask = in->mask, .out = out, .attn = attn};
    mha_fwd f = e->model;
    f.call = &call;
    if (f.mla) { /* one latent KV head made from the queries' own tokens */
        if (!call.fused)
            return failed(e, MHA_ERR_INVALID_ARG, "forward: an MLA engine runs self-attention: in->q, in->k and in->v "
                          "one input, seq_q %d = seq_kv %d", in->seq_q, in->seq_kv);
        if (attn)
            return failed(e, MHA_ERR_INVALID_ARG, "forward: an MLA engine gives no attention weights (attn must be NULL)");
        mha_sched_mla(&e->sched, &f);
    } else
        mha_sched_forward(&e->sched, &f);
    e->last_error[0] = '\0';
    return MHA_OK;
}

/* ---- the attention core ---- */

/* A core tensor's strides (given: in, all zero for contiguous (n[0], n[1], n[2], dk), dk
 * features a row) into st, checked: none negative, the last element's offset within
 * PTRDIFF_MAX, and with distinct (out) no two elements at one address (each dimension of more
 * than one element, by increasing stride, steps past everything the smaller ones span). NULL,
 * or what is wrong. */
static const char *core_strides(const ptrdiff_t *in, const int n[3], int dk, int distinct, ptrdiff_t st[3])
{
    static const ptrdiff_t zero[3];
    if (!in || !memcmp(in, zero, sizeof zero)) {
        st[2] = dk;
        if (__builtin_mul_overflow(st[2], (ptrdiff_t)n[2], &st[1]) || __builtin_mul_overflow(st[1], (ptrdiff_t)n[1], &st[0]))
            return "the tensor's size overflows";
    } else {
        memcpy(st, in, 3 * sizeof *st);
        if (st[0] < 0 || st[1] < 0 || st[2] < 0)
            return "a stride is negative";
    }
    int order[3] = {0, 1, 2}; /* the dimensions by increasing stride */
    for (int i = 1; i < 3; i++)
        for (int j = i; j > 0 && st[order[j]] < st[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    ptrdiff_t span = dk; /* elements from the first to one past the last, so far */
    for (int i = 0; i < 3; i++) {
        const int a = order[i];
        if (n[a] == 1)
            continue;
        if (distinct && st[a] < span)
            return "two elements share an address (a stride smaller than what the smaller ones span)";
        ptrdiff_t ext;
        if (__builtin_mul_overflow(st[a], (ptrdiff_t)(n[a] - 1), &ext) || __builtin_add_overflow(span, ext, &span))
            return "the last element's offset overflows";
    }
    return NULL;
}

MHA_API mha_status mha_core_forward(mha_engine *e, const mha_core_input *in, void *out, const ptrdiff_t out_stride[3])
{
    if (!e)
        return MHA_ERR_INVALID_ARG;
    if (!in || !out || !in->q || !in->k || !in->v)
        return failed(e, MHA_ERR_INVALID_ARG, "core: %s is NULL",
                      !in ? "in" : !out ? "out" : !in->q ? "in->q" : !in->k ? "in->k" : "in->v");
    const mha_dims *dm = &e->dims;
    if (in->dtype != MHA_DTYPE_F32 && in->dtype != MHA_DTYPE_BF16)
        return failed(e, MHA_ERR_INVALID_ARG, "core: in->dtype %d is neither MHA_DTYPE_F32 (0) nor MHA_DTYPE_BF16 (1)",
                      (int)in->dtype);
    if (in->dtype == MHA_DTYPE_BF16 && !dm->bf16)
        return failed(e, MHA_ERR_INVALID_ARG, "core: in->dtype bf16 needs an engine of precision bf16 (this one is f32)");
    if (dm->sinks != (in->sinks != NULL))
        return failed(e, MHA_ERR_INVALID_ARG, dm->sinks ? "core: in->sinks is NULL, but the config has sinks (one logit "
                      "per head)" : "core: in->sinks given, but the config has no sinks");
    if (nested_refused(e))
        return failed(e, MHA_ERR_STATE, "core: called inside an active OpenMP parallel region, where this engine's %d "
                      "threads would run as 1: call it outside, or create it with threads = 1", dm->threads);
    mha_status st = check_sizes(e, "core", in->batch, in->seq_q, in->seq_kv, in->q_lengths, in->kv_lengths);
    if (st != MHA_OK)
        return st;
    mha_core_io io = {.q = in->q, .k = in->k, .v = in->v, .out = out, .bf16 = in->dtype == MHA_DTYPE_BF16,
                      .sinks = in->sinks, .partial = e->views.partial};
    const struct { const char *name; const ptrdiff_t *given; int n[4], distinct; ptrdiff_t *st; } t[] = {
        {"q_stride", in->q_stride, {in->batch, dm->h, in->seq_q, dm->dk}, 0, io.q_st},
        {"k_stride", in->k_stride, {in->batch, dm->kvh, in->seq_kv, dm->dk}, 0, io.k_st},
        {"v_stride", in->v_stride, {in->batch, dm->kvh, in->seq_kv, dm->dv}, 0, io.v_st},
        {"out_stride", out_stride, {in->batch, dm->h, in->seq_q, dm->dv}, 1, io.o_st},
    };
    for (int i = 0; i < 4; i++) {
        const char *why = core_strides(t[i].given, t[i].n, t[i].n[3], t[i].distinct, t[i].st);
        if (why)
            return failed(e, MHA_ERR_SHAPE, "core: %s {%td, %td, %td} over (%d, %d, %d, %d): %s", t[i].name,
                          t[i].st[0], t[i].st[1], t[i].st[2], t[i].n[0], t[i].n[1], t[i].n[2], t[i].n[3], why);
    }
    const mha_call call = {.batch = in->batch, .seq_q = in->seq_q, .seq_kv = in->seq_kv, .causal = in->causal != 0,
                           .q_len = in->q_lengths, .kv_len = in->kv_lengths, .mask = in->mask};
    mha_fwd f = e->model;
    f.call = &call;
    mha_sched_core(&e->sched, &f, &io);
    e->last_error[0] = '\0';
    return MHA_OK;
}

/* ---- decoding steps ---- */

/* The first failed check of a step, its status and message in e; MHA_OK when it may run. */
static mha_status step_check(mha_engine *e, const mha_kv_cache *c, const mha_step *s, const float *out, long *rows)
{
    const mha_dims *dm = &e->dims;
    if (!c || !s)
        return failed(e, MHA_ERR_INVALID_ARG, "step: %s is NULL", !c ? "the cache" : "the step");
    if (!e->weights_set)
        return failed(e, MHA_ERR_STATE, "step: no weights yet (call mha_set_weights, or mha_set_mla_weights for MLA, "
                      "first)");
    if (!mha_kv_cache_fits(c, dm))
        return failed(e, MHA_ERR_CONFIG, "step: the cache was made for another model (d_model %d, %d heads, %d KV heads "
                      "of %d, kv_cache %s, MLA latent %d, or another RoPE) than this engine's (d_model %d, %d heads, %d KV "
                      "heads of %d, kv_cache %s, MLA latent %d)", c->d, c->h, c->kvh, c->dk, mha_kv_type_name(c->type), c->mla,
                      dm->d, dm->h, dm->kvh, dm->dk, mha_kv_type_name(dm->kv_type), dm->mla.kv_lora_rank);
    if (s->n_seqs < 1 || s->n_seqs > dm->batch)
        return failed(e, MHA_ERR_SHAPE, "step: n_seqs %d is outside 1..max_batch %d", s->n_seqs, dm->batch);
    if (!s->n_past || !s->n_new || !s->blocks)
        return failed(e, MHA_ERR_INVALID_ARG, "step: %s is NULL", !s->n_past ? "n_past" : !s->n_new ? "n_new" : "blocks");
    if (s->max_blocks < 1)
        return failed(e, MHA_ERR_SHAPE, "step: max_blocks %d < 1", s->max_blocks);
    const long cap = (long)s->max_blocks * c->block_size < dm->seq_kv ? (long)s->max_blocks * c->block_size : dm->seq_kv;
    long total = 0;
    for (int q = 0; q < s->n_seqs; q++) {
        const long past = s->n_past[q], add = s->n_new[q];
        if (past < 0 || add < 0)
            return failed(e, MHA_ERR_SHAPE, "step: sequence %d: n_past %ld, n_new %ld: must be >= 0", q, past, add);
        if (add > dm->seq_q)
            return failed(e, MHA_ERR_SHAPE, "step: sequence %d: n_new %ld > max_seq_q %d", q, add, dm->seq_q);
        if (past + add > cap)
            return failed(e, MHA_ERR_SHAPE, "step: sequence %d: n_past %ld + n_new %ld > %ld (min of max_blocks %d × "
                          "block_size %d and max_seq_kv %d)", q, past, add, cap, s->max_blocks, c->block_size, dm->seq_kv);
        const int32_t *table = s->blocks + (size_t)q * s->max_blocks;
        for (long b = 0; add > 0 && b < (past + add + c->block_size - 1) / c->block_size; b++)
            if (table[b] < 0 || table[b] >= c->n_blocks)
                return failed(e, MHA_ERR_SHAPE, "step: sequence %d: block %ld of its table is %d, outside 0..%d", q, b,
                              table[b], c->n_blocks - 1);
        total += add;
    }
    if (total > (long)dm->batch * dm->seq_q)
        return failed(e, MHA_ERR_SHAPE, "step: %ld new tokens > max_batch %d × max_seq_q %d", total, dm->batch, dm->seq_q);
    if (total > 0 && (!s->x || !out))
        return failed(e, MHA_ERR_INVALID_ARG, "step: %s is NULL", !s->x ? "x" : "out");
    *rows = total;
    return MHA_OK;
}

MHA_API mha_status mha_step_forward(mha_engine *e, mha_kv_cache *c, const mha_step *s, float *out)
{
    if (!e)
        return MHA_ERR_INVALID_ARG;
    if (nested_refused(e))
        return failed(e, MHA_ERR_STATE, "step: called inside an active OpenMP parallel region, where this engine's %d "
                      "threads would run as 1: call it outside, or create it with threads = 1", e->dims.threads);
    long rows = 0;
    mha_status st = step_check(e, c, s, out, &rows);
    if (st != MHA_OK)
        return st;
    /* the last check, which changes the cache's open-group pool only when it passes */
    char why[sizeof e->last_error];
    if ((st = mha_kv_open_step(c, s->n_seqs, s->n_past, s->n_new, s->blocks, s->max_blocks, e->views.step_tails, why,
                               sizeof why)) != MHA_OK)
        return failed(e, st, "%s", why);
    int *row0 = e->views.step_row0;
    row0[0] = 0;
    for (int q = 0; q < s->n_seqs; q++)
        row0[q + 1] = row0[q] + s->n_new[q];
    if (rows > 0) {
        const mha_call call = {.causal = 1, .out = out}; /* a step's rows attend causally; its tokens are the job's */
        mha_step_job j = {.f = e->model, .cache = c, .step = s, .row0 = row0, .rows = (int)rows,
                          .ops = &e->step_ops, .partial = e->views.partial, .k_full = e->views.k_full,
                          .tails = e->views.step_tails,
                          .max_chunks = (e->dims.seq_kv + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK};
        j.f.call = &call;
        /* rows per projection task: what the Q/K/V scratch holds, whole A panels where it holds
         * one (then each task's rows start a panel of the packed rows) */
        const int panel = mha_step_panel(&j), cap = j.f.rows < MHA_PACK_BLOCK ? j.f.rows : MHA_PACK_BLOCK;
        j.chunk_rows = cap >= panel ? cap / panel * panel : cap;
        if (j.f.mla) /* MLA: its projections' row blocks; V in the cache is K whole (set on the job's
                      * copy, not held as a second model: the engine struct's size places the
                      * arena's regions, and decode's speed depends on where they fall) */
            j.chunk_rows = j.f.rows < MHA_MLA_ROWS ? j.f.rows : MHA_MLA_ROWS, j.f.dv = j.f.dk;
        mha_sched_step(&e->sched, &j);
    }
    e->last_error[0] = '\0';
    return MHA_OK;
}

MHA_API const char *mha_engine_last_error(const mha_engine *e)
{
    return e ? e->last_error : "engine is NULL";
}

MHA_API const char *mha_engine_blis_arch(const mha_engine *e)
{
    return e ? e->kernel.arch : "";
}

MHA_API const char *mha_engine_kernel(const mha_engine *e)
{
    return e ? e->kernel_name : "";
}

MHA_API int mha_engine_threads(const mha_engine *e)
{
    return e ? e->dims.threads : 0;
}

MHA_API int mha_engine_q_block(const mha_engine *e)
{
    return e ? e->dims.q_block : 0;
}

MHA_API size_t mha_engine_workspace_size(const mha_engine *e)
{
    return e ? e->plan.total : 0;
}

MHA_API int mha_engine_worker_cpus(const mha_engine *e, int *cpus, int n)
{
    if (!e || !cpus || n <= 0)
        return 0;
    int k = n < e->dims.threads ? n : e->dims.threads;
    memcpy(cpus, e->views.worker_cpu, (size_t)k * sizeof *cpus);
    return k;
}

MHA_API const char *mha_blis_arch_auto(void)
{
    return mha_isa_auto_table()->default_arch();
}

MHA_API const char *mha_bf16_kernel_auto(void)
{
    return mha_isa_auto_table()->bf16_auto()->name;
}

MHA_API const char *mha_isa_auto(void)
{
    return mha_isa_auto_table()->name;
}

MHA_API int mha_cpu_has_feature(const char *feature)
{
    return feature && mha_cpu_has(feature) ? 1 : 0;
}

MHA_API const char *mha_isa_table(int i)
{
    return i >= 0 && i < mha_isa_count ? mha_isa_tables[i]->name : NULL;
}

MHA_API const char *mha_engine_isa(const mha_engine *e)
{
    return e ? e->kernel.isa->name : "";
}

MHA_API const char *mha_blis_version(void)
{
    return mha_kernel_blis_version();
}
