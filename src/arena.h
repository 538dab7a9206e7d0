/* arena.h — the one plan that both sizes the workspace and carves it. */
#ifndef MHA_ARENA_H
#define MHA_ARENA_H

#include <stddef.h>

#include "alloc.h"
#include "attention.h"
#include "bgemm.h"
#include "blocking.h"
#include "dims.h"
#include "kernel.h"
#include "mla.h"

/* The arena's regions, in layout order: name, element type of its view, alignment, and who
 * holds it: ENGINE (each engine its own), WEIGHTS (the packed weights: an engine's own, or a
 * packed-weights block that engines share, mha_create_shared taking their views), or BOTH
 * (the engine struct, or the block's header). This list is the layout: it makes the plan's
 * offsets, the views, the carve and the sharing; each size is written once, in
 * region_bytes() (arena.c). A region of 0 bytes is absent (its view NULL). The worker slices
 * come last, so everything before `scratch` is the engine's shared state. */
enum { MHA_HELD_ENGINE = 1, MHA_HELD_WEIGHTS = 2, MHA_HELD_BOTH = 3 };
#define MHA_ARENA_REGIONS(X)                                                                                  \
    X(engine, void, MHA_ALIGN, BOTH)            /* the engine struct, or the packed-weights header */         \
    X(wqkv, float, MHA_ALIGN, WEIGHTS)          /* f32: per KV head g, panels (d, (group + 2)·dkp):           \
                                                   x · [Wq_{g·group} | Wk_g | Wv_g | Wq_{g·group+1} …] */     \
    X(wqkv16, mha_bf16, MHA_ALIGN, WEIGHTS)     /* bf16: the same in B panels (bgemm.h) */                    \
    X(wqkvq, unsigned char, MHA_ALIGN, WEIGHTS) /* block types: the same in panels of MHA_QP outputs          \
                                                   (qgemm.h: mha_qmat_qkv) */                                 \
    X(bqkv, float, MHA_ALIGN, WEIGHTS)          /* (kvh, (group + 2)·dkp) */                                  \
    X(wo, float, MHA_ALIGN, WEIGHTS)            /* f32: panels (qd, round_up(d, bw)): Z · Wo */               \
    X(wo16, mha_bf16, MHA_ALIGN, WEIGHTS)       /* bf16: the same in B panels */                              \
    X(woq, unsigned char, MHA_ALIGN, WEIGHTS)   /* block types: Wo in panels (mha_qmat_o) */                 \
    X(bo, float, MHA_ALIGN, WEIGHTS)            /* (d) */                                                     \
    X(qk_norm, float, MHA_ALIGN, WEIGHTS)       /* Q's then K's RMSNorm factors (w or 1 + w), dk              \
                                                   each (head) or h·dk, kvh·dk (full); absent without */      \
    X(sinks, float, MHA_ALIGN, WEIGHTS)         /* (h): each head's sink logit; absent without sinks */       \
    X(z, float, MHA_ALIGN, ENGINE)              /* (batch, seq_q, qd): the heads' outputs, concatenated */    \
    X(xpack, float, MHA_ALIGN, ENGINE)          /* (batch, xpack_stride): A panels of each x_b */             \
    X(order, int, MHA_ALIGN, ENGINE)            /* (batch): sequences, most work first */                     \
    X(deps, char, MHA_ALIGN, ENGINE)            /* (2, batch, h): a token per head task, then per             \
                                                   norm task (kvh of h used) */                               \
    X(xdeps, char, MHA_ALIGN, ENGINE)           /* (batch, ceil(seq_q / MHA_PACK_BLOCK)): packing tasks */    \
    X(worker_cpu, int, MHA_ALIGN, ENGINE)       /* (threads): CPU each worker last ran on */                  \
    X(pin_cpu, int, MHA_ALIGN, ENGINE)          /* (threads): CPU each worker is pinned to, -1 none */        \
    X(step_row0, int, MHA_ALIGN, ENGINE)        /* (batch + 1): a step's first row of each sequence */        \
    X(step_tails, float *, MHA_ALIGN, ENGINE)   /* int8 cache: (batch) a step's open groups' rows */          \
    X(partial, float, MHA_ALIGN, ENGINE)        /* (batch, kvh, chunks, mha_step_partial_floats):             \
                                                   decode partial results */                                  \
    X(qk_ss, double, MHA_ALIGN, ENGINE)         /* QK-norm full: each row's sums of squares, one per          \
                                                   KV head's part: Q's (batch·seq_q, kvh), then K's           \
                                                   (batch·max(seq_q, seq_kv), kvh); absent otherwise */       \
    X(k_saved, float, MHA_ALIGN, ENGINE)        /* QK-norm full: K as the norm tasks projected it,            \
                                                   (batch·max(seq_q, seq_kv), kvh·dk); absent otherwise */    \
    X(mla_w, float, MHA_ALIGN, WEIGHTS)         /* f32 MLA: its weights in panels (mha_mla_plan) */           \
    X(mla_w16, mha_bf16, MHA_ALIGN, WEIGHTS)    /* bf16 MLA: the same in B panels */                          \
    X(mla_v, float, MHA_ALIGN, WEIGHTS)         /* MLA: the RMSNorms' factors and the biases */               \
    X(mla_k, float, MHA_ALIGN, ENGINE)          /* MLA: (batch·seq_kv, dk): [c | k_rope] of each token */     \
    X(mla_z, float, MHA_ALIGN, ENGINE)          /* MLA: (batch·seq_q, h·dv): each head's latent output */     \
    X(k_full, float, MHA_ALIGN, ENGINE)         /* int8 cache: a step's new K at full precision,              \
                                                   (batch·seq_q, kvh·dk); absent otherwise */                 \
    X(rope_cos, float, MHA_ALIGN, ENGINE)       /* (positions, r/2); absent without RoPE */                   \
    X(rope_sin, float, MHA_ALIGN, ENGINE)       /* (positions, r/2) */                                        \
    X(alibi, float, MHA_ALIGN, ENGINE)          /* (h): ALiBi's slopes; absent without ALiBi */               \
    X(scratch, unsigned char, MHA_PAGE, ENGINE) /* (threads, scratch_stride): the worker slices */

typedef enum {
#define MHA_ARENA_ENUM(name, type, align, held) MHA_REGION_##name,
    MHA_ARENA_REGIONS(MHA_ARENA_ENUM)
#undef MHA_ARENA_ENUM
    MHA_REGION_COUNT
} mha_arena_region;

/* The worker slice's parts: MHA_SLICE_REGIONS (attention.h), the list mha_scratch is made of. */
typedef enum {
#define MHA_SLICE_ENUM(name, type) MHA_SLICE_##name,
    MHA_SLICE_REGIONS(MHA_SLICE_ENUM)
#undef MHA_SLICE_ENUM
    MHA_SLICE_COUNT
} mha_slice_region;

#define MHA_ARENA_ABSENT ((size_t)-1)
typedef struct mha_arena_plan {
    size_t off[MHA_REGION_COUNT];   /* bytes from the base; MHA_ARENA_ABSENT for an absent region */
    size_t bytes[MHA_REGION_COUNT]; /* 0 for an absent region */
    size_t slice_off[MHA_SLICE_COUNT], slice_bytes[MHA_SLICE_COUNT]; /* inside a worker slice */
    size_t scratch_stride;  /* bytes per worker slice, a multiple of MHA_PAGE */
    size_t xpack_stride;    /* floats per sequence in xpack */
    int dkp;                /* d_k rounded up to whole B panels */
    ptrdiff_t ld_scores;    /* row stride of the score tile */
    mha_mla_plan mla;       /* MLA engines: where their weights sit (on 0 otherwise) */
    size_t total;
} mha_arena_plan;

typedef struct mha_arena_views {
#define MHA_ARENA_VIEW(name, type, align, held) type *name;
    MHA_ARENA_REGIONS(MHA_ARENA_VIEW)
#undef MHA_ARENA_VIEW
} mha_arena_views;

/* Which regions a plan lays out: an engine with its own weights, an engine that reads shared
 * packed weights (no weight regions), or a packed-weights block (the header struct in the
 * engine slot and the weight regions only). */
typedef enum { MHA_ARENA_ENGINE, MHA_ARENA_ENGINE_SHARED, MHA_ARENA_WEIGHTS } mha_arena_kind;

/* 0 on success, -1 if a size overflows size_t. */
int mha_arena_plan_make(const mha_dims *dims, const mha_kernel *k, size_t engine_bytes, mha_arena_kind kind,
                        mha_arena_plan *plan);
void mha_arena_carve(const mha_arena_plan *plan, void *base, mha_arena_views *views);
/* An engine that reads shared packed weights: every WEIGHTS region's view from the block's. */
void mha_arena_share_weights(mha_arena_views *engine, const mha_arena_views *packed);
/* Whether an arena of this kind holds region r (by the list's holder column). */
int mha_arena_kind_holds(mha_arena_kind kind, mha_arena_region r);
/* Worker t's scratch, in the slices that start at `scratch` (views.scratch). */
mha_scratch mha_arena_slice(const mha_arena_plan *plan, unsigned char *scratch, int t);

/* Names ("wqkv", "qkv") and alignments of the regions, for tests and messages. */
const char *mha_arena_region_name(mha_arena_region r);
size_t mha_arena_region_align(mha_arena_region r);
const char *mha_slice_region_name(mha_slice_region r);

#endif
