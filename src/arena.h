/* arena.h — the one plan that both sizes the workspace and carves it. */
#ifndef MHA_ARENA_H
#define MHA_ARENA_H

#include <stddef.h>

#include "bgemm.h"
#include "dims.h"
#include "kernel.h"
#include "step.h"

#define MHA_ALIGN 64   /* every region; also what mha_create_static requires of ws */
#define MHA_PAGE 4096  /* worker slices start on their own pages: first touch, no false sharing */
#define MHA_HUGE_PAGE (2u << 20)

/* At least `bytes`, page-aligned (free() it); from 2 MiB on, 2 MiB-aligned and rounded, with
 * Linux asked for transparent huge pages (madvise, where THP is "madvise"): weights and KV
 * caches streamed by every step then cost a TLB entry per 2 MiB, not per 4 KiB. NULL when it
 * cannot be had. */
void *mha_alloc_pages(size_t bytes);

/* Byte offsets of each region from the arena's base; MHA_ARENA_ABSENT for a region the plan's
 * kind leaves out. */
#define MHA_ARENA_ABSENT ((size_t)-1)
typedef struct mha_arena_plan {
    size_t engine;          /* the engine struct itself */
    size_t wqkv, bqkv;      /* packed per-head projection weights and biases */
    size_t wo, bo;          /* output projection */
    size_t z;               /* concatenated head outputs */
    size_t xpack;           /* the query input, packed once per sequence for the projections */
    size_t xpack_stride;    /* floats per sequence in it */
    size_t order, deps, xdeps; /* task order, task-dependency tokens */
    size_t worker_cpu, pin_cpu;
    size_t rope_cos, rope_sin; /* (positions, r/2) each; absent without RoPE */
    size_t step_row0;       /* (batch + 1) ints: a step's first row of each sequence */
    size_t partial;         /* decode partial results: (batch, kvh, chunks, group·DECODE_ROWS, dk + 2) */
    size_t dec;             /* offset in a worker slice: group·DECODE_ROWS × (KV_CHUNK + dk) floats */
    size_t scratch;         /* first worker slice */
    size_t scratch_stride;  /* bytes per worker slice, a multiple of MHA_PAGE */
    size_t kt, scores, apack, inv; /* offsets inside a worker slice (its Q/K/V panels start it) */
    size_t vb;              /* bf16: V in B panels, in a worker slice; else 0 */
    size_t pb;              /* bf16: a query block's probabilities in A panels, in a worker slice; else 0 */
    size_t w_ps;            /* bf16: elements per B panel of the weights (d rounded to k tiles · 16) */
    int dkp;                /* d_k rounded up to whole B panels */
    int bf16;
    ptrdiff_t ld_scores;    /* row stride of the score tile */
    size_t total;
} mha_arena_plan;

typedef struct mha_arena_views {
    void *engine;
    float *wqkv;            /* per KV head g, panels (d, (group + 2)·dkp):
                               x · [Wq_{g·group} | Wk_g | Wv_g | Wq_{g·group+1} | …] */
    float *bqkv;            /* (kvh, (group + 2)·dkp) */
    float *wo;              /* panels (d, round_up(d, bw)): Z · Wo */
    float *bo;              /* (d) */
    mha_bf16 *wqkv16, *wo16; /* bf16 engines: the same matrices in bf16 B panels (bgemm.h), and
                               wqkv, wo NULL; f32 engines: NULL */
    float *z;               /* (batch, seq_q, d) */
    float *xpack;           /* (batch, xpack_stride): A panels of x_b, every column */
    int *order;             /* (batch): sequences, most work first */
    char *deps;             /* (batch, h): one token per head task */
    char *xdeps;            /* (batch, ceil(seq_q / MHA_PACK_BLOCK)): one per packing task */
    int *worker_cpu;        /* (threads): CPU each worker last ran on */
    int *pin_cpu;           /* (threads): CPU each worker is pinned to, -1 none */
    float *rope_cos, *rope_sin; /* (positions, r/2), or NULL */
    int *step_row0;         /* (batch + 1) */
    float *partial;
    unsigned char *scratch; /* (threads, scratch_stride) */
} mha_arena_views;

/* Per worker slice (see attention.h): Q/K/V panels (max(seq_q, seq_kv), 3·dkp), Kᵀ panels
 * (dk, round_up(seq_kv, bw)), the score tile (q_block, ld_scores), A packing (mb × kc),
 * the rows' inverse softmax sums (q_block). bf16: Kᵀ and A packing in bf16 in the same
 * regions (each sized for the larger form), and V in B panels. */

/* Which regions a plan lays out: an engine with its own weights, an engine that reads shared
 * packed weights (no weight regions), or a packed-weights block (the header struct in the
 * engine slot and the weight regions only). */
typedef enum { MHA_ARENA_ENGINE, MHA_ARENA_ENGINE_SHARED, MHA_ARENA_WEIGHTS } mha_arena_kind;

/* 0 on success, -1 if a size overflows size_t. Regions a kind leaves out carve as NULL. */
int mha_arena_plan_make(const mha_dims *dims, const mha_kernel *k, size_t engine_bytes, mha_arena_kind kind,
                        mha_arena_plan *plan);
void mha_arena_carve(const mha_arena_plan *plan, void *base, mha_arena_views *views);

#endif
