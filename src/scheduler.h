/* scheduler.h — the scheduler: the only module with OpenMP pragmas. */
#ifndef MHA_SCHEDULER_H
#define MHA_SCHEDULER_H

#include <stddef.h>

#include "attention.h"
#include "step.h"

typedef struct mha_sched {
    int threads;
    const int *pin_cpu;      /* (threads): CPU of each worker, or NULL: no pinning */
    int *worker_cpu;         /* (threads): where each worker ran, -1 if it did not */
    unsigned char *scratch;  /* (threads, plan->scratch_stride) worker slices */
    const struct mha_arena_plan *plan; /* their layout (mha_arena_slice) */
    int *order;              /* (batch) */
    char *deps;              /* (batch, h) task-dependency tokens */
    char *xdeps;             /* (batch, pack_chunks) tokens of the input-packing tasks */
    int pack_chunks;         /* ceil(max_seq_q / MHA_PACK_BLOCK) */
} mha_sched;

/* Sequences by descending work (ties by index), so long ones start first. */
void mha_sched_order(const mha_fwd *f, int *order);
/* One forward pass: per sequence, tasks that pack its input rows once, a task per head that
 * waits for them, then output-projection tasks per row block that wait only for that
 * sequence's heads. */
void mha_sched_forward(const mha_sched *s, const mha_fwd *f);
/* The attention core (mha_core_forward): a task per (sequence, KV head, block of its query
 * heads: mha_attention_head_block, part of its rows where those are fewer than two a thread),
 * longest sequences first, each running mha_attention_core on its worker's slice. */
void mha_sched_core(const mha_sched *s, const mha_fwd *f, const mha_core_io *io);
/* An MLA engine's forward (mla.h): the row blocks' projections, then the attention core by
 * head blocks, then the row blocks' values and output projection. */
void mha_sched_mla(const mha_sched *s, const mha_fwd *f);
/* One decoding step: projection tasks per (KV head, block of rows), then attention tasks per
 * (sequence, KV head), then output-projection tasks per block of rows. */
void mha_sched_step(const mha_sched *s, const mha_step_job *j);
/* Each worker writes its own scratch slice once, so its pages are placed near it. */
void mha_sched_first_touch(const mha_sched *s);
/* Whether the calling thread is inside an active OpenMP parallel region: a team of more than
 * one thread started there would get one thread (nested parallelism is off by default). */
int mha_sched_nested(void);

#endif
