/* scheduler.c — OpenMP tasks over (batch × KV heads), the only file with #pragma omp.
 *
 * One parallel region per forward; one worker produces the tasks, all of them run them.
 * Each head task (a KV head and its query heads) runs on one worker with that worker's
 * scratch slice, and every GEMM in it
 * is single-threaded, so a task's result does not depend on which worker ran it or how
 * many there are: outputs are bitwise identical for every thread count and schedule.
 * Tasks are tied (the default) and never yield, so a slice is never used by two at once. */
#include "scheduler.h"

#include <omp.h>
#include <string.h>

#include "affinity.h"
#include "arena.h"

static long work_of(const mha_fwd *f, int b)
{
    long ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    long kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    return ql * (kl + f->d);
}

void mha_sched_order(const mha_fwd *f, int *order)
{
    for (int i = 0; i < f->call->batch; i++)
        order[i] = i;
    /* shell sort: no allocation, O(n^1.3) for the batch sizes seen in serving */
    for (int gap = f->call->batch / 2; gap > 0; gap /= 2)
        for (int i = gap; i < f->call->batch; i++) {
            int cur = order[i], j = i;
            long w = work_of(f, cur);
            while (j >= gap) {
                long wp = work_of(f, order[j - gap]);
                if (wp > w || (wp == w && order[j - gap] < cur))
                    break;
                order[j] = order[j - gap];
                j -= gap;
            }
            order[j] = cur;
        }
}

/* Pin the calling worker for the region, remembering its mask; 1 if it must be restored. */
static int pin_enter(const mha_sched *s, int t, mha_cpumask *saved)
{
    int pinned = s->pin_cpu && mha_affinity_get(saved) == 0 && mha_affinity_pin(s->pin_cpu[t]) == 0;
    s->worker_cpu[t] = mha_affinity_current_cpu();
    return pinned;
}

static void pin_leave(int pinned, const mha_cpumask *saved)
{
    if (pinned)
        mha_affinity_set(saved);
}

/* One parallel region of the engine's team: each worker pinned (when the config asks) and in
 * bk's hardware context (AMX: its tile configuration, once for all its tasks), one of them
 * running produce(s, arg), whose tasks every worker runs; the barrier completes them before
 * the context ends.
 *
 * The producer is the team's worker 1, never the calling thread: LLVM's libomp keeps a
 * finished task's memory on the free lists of the thread that ran it, owned by the thread that
 * created it, and frees an exiting thread's memory — so tasks created by a caller that then
 * exits leave a pooled worker with freed blocks, and a later caller's region corrupts the heap
 * (tests/test_embedding.c). A worker lives as long as the runtime. */
static void run_region(const mha_sched *s, const mha_bkernel *bk, void (*produce)(const mha_sched *, const void *),
                       const void *arg)
{
    for (int t = 0; t < s->threads; t++)
        s->worker_cpu[t] = -1;
#pragma omp parallel num_threads(s->threads)
    {
        mha_cpumask saved;
        int pinned = pin_enter(s, omp_get_thread_num(), &saved);
        mha_bk_begin(bk);
        if (omp_get_thread_num() == (omp_get_num_threads() > 1)) /* worker 1; a team of one: the caller */
            produce(s, arg);
#pragma omp barrier
        mha_bk_end(bk);
        pin_leave(pinned, &saved);
    }
}

/* A forward's tasks (run_region's producer; arg: the mha_fwd). */
static void forward_tasks(const mha_sched *s, const void *arg)
{
    const mha_fwd *f = arg;
    const int nh = f->kvh; /* one task per KV head: its K and V are made once */
    for (int i = 0; i < f->call->batch; i++) {
        const int b = s->order[i];
        char *tok = s->deps + (size_t)b * nh, *ntok = s->deps + ((size_t)f->call->batch + b) * nh;
        char *xtok = s->xdeps + (size_t)b * s->pack_chunks;
        (void)tok, (void)ntok, (void)xtok; /* only in depend clauses, which gcc 12 does not count */
        const int rows = mha_attention_packed_rows(f, b);
        const int nc = (rows + MHA_PACK_BLOCK - 1) / MHA_PACK_BLOCK;
        for (int c = 0; c < nc; c++) {
            const int r0 = c * MHA_PACK_BLOCK, r1 = r0 + MHA_PACK_BLOCK < rows ? r0 + MHA_PACK_BLOCK : rows;
#pragma omp task firstprivate(b, r0, r1) depend(out : xtok[c])
            mha_attention_pack_rows(f, b, r0, r1);
        }
        const int nn = f->buf.q_ss ? nh : 0; /* QK-norm full: every row's norm before its heads */
        for (int h = 0; h < nn; h++) {
#pragma omp task firstprivate(b, h) depend(iterator(c = 0 : nc), in : xtok[c]) depend(out : ntok[h])
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                mha_attention_norm_sums(f, b, h, &sc);
            }
        }
        for (int h = 0; h < nh; h++) {
#pragma omp task firstprivate(b, h) depend(iterator(c = 0 : nc), in : xtok[c]) depend(iterator(j = 0 : nn), in : ntok[j]) depend(out : tok[h])
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                mha_attention_group(f, b, h, &sc);
            }
        }
        for (int r0 = 0; r0 < f->call->seq_q; r0 += MHA_OUT_BLOCK) {
            const int r1 = r0 + MHA_OUT_BLOCK < f->call->seq_q ? r0 + MHA_OUT_BLOCK : f->call->seq_q;
#pragma omp task firstprivate(b, r0, r1) depend(iterator(j = 0 : nh), in : tok[j])
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                mha_attention_out_rows(f, b, r0, r1, &sc);
            }
        }
    }
}

void mha_sched_forward(const mha_sched *s, const mha_fwd *f)
{
    mha_sched_order(f, s->order);
    run_region(s, f->bk, forward_tasks, f);
}

typedef struct core_job { const mha_fwd *f; const mha_core_io *io; } core_job;

/* Decode units per task: a run of consecutive chunks of one sequence for a run of its KV heads,
 * chunk by chunk and head by head within a chunk (a block's regions of the heads follow each
 * other: the run reads each block as one stream, prefetching the next unit as it finishes
 * one). As many heads as DECODE_TASKS tasks per thread leave room for, then up to DECODE_RUN
 * chunks: fewer where the step has too few visible chunks. Heads before chunks: a run of one
 * head's chunks jumps from block to block, reading a few KiB of each; a run of a chunk's heads
 * reads each block's regions in the order they lie. The core's few queries split their keys
 * into runs of chunks likewise (core_run). */
enum { DECODE_RUN = 8, DECODE_TASKS = 8 };

/* Chunks a task of the core's few queries runs, as decode_units cuts a step's (one KV head a
 * task: the core's tensors hold each head's keys apart); 0: the keys not split (one thread, or
 * no partials to merge). */
static int core_run(const mha_sched *s, const mha_fwd *f, const mha_core_io *io)
{
    if (!io->partial || s->threads < 2)
        return 0;
    long units = 0;
    for (int b = 0, first; b < f->call->batch; b++)
        units += (long)(mha_attention_core_chunks(f, b, &first) - first) * f->kvh;
    const long per = units / ((long)s->threads * DECODE_TASKS);
    return per < 1 ? 1 : per > DECODE_RUN ? DECODE_RUN : (int)per;
}

/* Parts of each sequence's rows for the core's tasks (mha_attention_core_part): enough for two
 * tasks a thread where (sequence, KV head, head block) alone give fewer — a long prefill of a
 * few KV heads, which would otherwise leave threads idle or nothing to even out a slow one
 * with. Each part packs the keys its rows see: rows of a part are many blocks, so that is a
 * small share of its products. */
static int core_parts(const mha_sched *s, const mha_fwd *f)
{
    const int hb = mha_attention_head_block(f->group);
    const long tasks = (long)f->call->batch * f->kvh * ((f->group + hb - 1) / hb), want = 2L * s->threads;
    return s->threads < 2 || tasks >= want ? 1 : (int)((want + tasks - 1) / tasks);
}

/* The core's tasks (arg: a core_job): per sequence, KV head, block of its query heads and part
 * of its rows; a few queries' keys longer than a run split into runs of chunks, merged once
 * all have run. */
static void core_tasks(const mha_sched *s, const void *arg)
{
    const mha_fwd *f = ((const core_job *)arg)->f;
    const mha_core_io *io = ((const core_job *)arg)->io;
    const int hb = mha_attention_head_block(f->group), run = core_run(s, f, io), parts = core_parts(s, f);
    int split = 0;
    for (int i = 0; i < f->call->batch; i++) {
        const int b = s->order[i];
        int first = 0;
        const int chunks = mha_attention_core_chunks(f, b, &first), end = run ? chunks : 0;
        const int np = chunks ? 1 : parts; /* a few queries run as one pass */
        for (int g = 0; g < f->kvh && end - first > run; g++)
            for (int c0 = first; c0 < end; c0 += run) {
                const int c1 = c0 + run < end ? c0 + run : end;
#pragma omp task firstprivate(b, g, c0, c1)
                {
                    const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                    mha_attention_core_keys(f, io, b, g, c0, c1, &sc);
                }
            }
        split |= end - first > run;
        for (int g = 0; g < f->kvh && end - first <= run; g++)
            for (int h0 = g * f->group; h0 < (g + 1) * f->group; h0 += hb)
                for (int part = 0; part < np; part++) {
                    const int h1 = h0 + hb;
#pragma omp task firstprivate(b, g, h0, h1, part, np)
                    {
                        const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                        mha_attention_core(f, io, b, g, h0, h1, part, np, &sc);
                    }
                }
    }
    if (!split)
        return;
#pragma omp taskwait
    for (int b = 0; b < f->call->batch; b++) {
        int first;
        const int end = mha_attention_core_chunks(f, b, &first);
        for (int g = 0; g < f->kvh && end - first > run; g++) {
#pragma omp task firstprivate(b, g)
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                mha_attention_core_merge(f, io, b, g, &sc);
            }
        }
    }
}

void mha_sched_core(const mha_sched *s, const mha_fwd *f, const mha_core_io *io)
{
    mha_sched_order(f, s->order);
    const core_job job = {f, io};
    run_region(s, f->bk, core_tasks, &job);
}

/* A task per sequence and block of MHA_MLA_ROWS rows, each running fn on its worker's slice.
 * (fn firstprivate by name, as it would be by default: clang 14 crashes generating a task that
 * calls an implicitly captured function-pointer parameter; so does row_tasks'.) */
static void mla_row_tasks(const mha_sched *s, const mha_fwd *f,
                          void (*fn)(const mha_fwd *, int, int, int, const mha_scratch *))
{
    const int seq = f->call->seq_q;
    for (int i = 0; i < f->call->batch; i++)
        for (int r0 = 0; r0 < seq; r0 += MHA_MLA_ROWS) {
            const int b = s->order[i], r1 = r0 + MHA_MLA_ROWS < seq ? r0 + MHA_MLA_ROWS : seq;
#pragma omp task firstprivate(b, r0, r1, fn)
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                fn(f, b, r0, r1, &sc);
            }
        }
}

/* An MLA forward's tasks in its three phases (arg: the mha_fwd). */
static void mla_tasks(const mha_sched *s, const void *arg)
{
    const mha_fwd *f = arg;
    mla_row_tasks(s, f, mha_mla_project);
#pragma omp taskwait
    mha_fwd core;
    mha_core_io io;
    mha_mla_core_view(f, mha_attention_head_block(f->h), &core, &io);
    core_tasks(s, &(core_job){&core, &io});
#pragma omp taskwait
    mla_row_tasks(s, f, mha_mla_out_rows);
}

void mha_sched_mla(const mha_sched *s, const mha_fwd *f)
{
    mha_sched_order(f, s->order);
    run_region(s, f->bk, mla_tasks, f);
}

/* A task per KV head and chunk of the step's rows, each running fn on its worker's slice. */
static void row_tasks(const mha_sched *s, const mha_step_job *j,
                      void (*fn)(const mha_step_job *, int, int, int, const mha_scratch *))
{
    for (int g = 0; g < j->f.kvh; g++)
        for (int r0 = 0; r0 < j->rows; r0 += j->chunk_rows) {
            const int r1 = r0 + j->chunk_rows < j->rows ? r0 + j->chunk_rows : j->rows;
#pragma omp task firstprivate(g, r0, r1, fn)
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                fn(j, g, r0, r1, &sc);
            }
        }
}

typedef struct decode_split { int heads, run; } decode_split;
static decode_split decode_units(const mha_sched *s, const mha_step_job *j)
{
    long units = 0;
    for (int q = 0; q < j->step->n_seqs; q++)
        if (j->step->n_new[q] > 0 && j->step->n_new[q] <= MHA_DECODE_MAX_NEW)
            units += (long)(mha_step_chunks(j, q) - mha_step_first_chunk(j, q)) * j->f.kvh;
    const long per = units / ((long)s->threads * DECODE_TASKS), kvh = j->f.kvh;
    const int heads = per >= kvh ? (int)kvh : per > 1 ? (int)per : 1;
    const long run = per / heads;
    return (decode_split){heads, run < 1 ? 1 : run > DECODE_RUN ? DECODE_RUN : (int)run};
}

/* A step's tasks in their phases (arg: the mha_step_job). */
static void step_tasks(const mha_sched *s, const void *arg)
{
    const mha_step_job *j = arg;
    const int kvh = j->f.kvh, n = j->step->n_seqs;
    for (int r0 = 0; !j->f.mla && r0 < j->rows; r0 += MHA_PACK_BLOCK) { /* whole panels each (MLA: none) */
        const int r1 = r0 + MHA_PACK_BLOCK < j->rows ? r0 + MHA_PACK_BLOCK : j->rows;
#pragma omp task firstprivate(r0, r1)
        mha_step_pack_rows(j, r0, r1);
    }
#pragma omp taskwait
    if (j->f.buf.q_ss) { /* QK-norm full: every row's norm first */
        row_tasks(s, j, mha_step_norm_sums);
#pragma omp taskwait
    }
    row_tasks(s, j, j->f.mla ? mha_step_project_mla : mha_step_project);
#pragma omp taskwait
    /* few new rows: chunks of the context straight from the cache, merged below;
     * more: the context gathered and the forward's attention */
    const decode_split ds = decode_units(s, j);
    for (int q = 0; q < n; q++) {
        const int add = j->step->n_new[q], chunks = mha_step_chunks(j, q);
        const int first = add > 0 && add <= MHA_DECODE_MAX_NEW ? mha_step_first_chunk(j, q) : 0;
        for (int g0 = 0; g0 < kvh && add > 0 && add <= MHA_DECODE_MAX_NEW; g0 += ds.heads)
            for (int c0 = 0, c1; c0 < chunks; c0 = c1) {
                /* the chunks before the window (only marked unread) in one task, then runs */
                c1 = c0 < first ? first : c0 + ds.run < chunks ? c0 + ds.run : chunks;
                const int g1 = g0 + ds.heads < kvh ? g0 + ds.heads : kvh;
#pragma omp task firstprivate(q, g0, g1, c0, c1)
                {
                    const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                    mha_step_decode_chunks(j, q, g0, g1, c0, c1, &sc);
                }
            }
        for (int g = 0; g < kvh && add > MHA_DECODE_MAX_NEW; g++) {
#pragma omp task firstprivate(q, g)
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                mha_step_attend(j, q, g, &sc);
            }
        }
    }
#pragma omp taskwait
    for (int q = 0; q < n; q++)
        for (int g = 0; g < kvh && j->step->n_new[q] > 0 && j->step->n_new[q] <= MHA_DECODE_MAX_NEW; g++) {
#pragma omp task firstprivate(q, g)
            mha_step_decode_merge(j, q, g);
        }
#pragma omp taskwait
    for (int r0 = 0; j->f.mla && r0 < j->rows; r0 += MHA_MLA_ROWS) { /* MLA: W_uv, then o_proj */
        const int r1 = r0 + MHA_MLA_ROWS < j->rows ? r0 + MHA_MLA_ROWS : j->rows;
#pragma omp task firstprivate(r0, r1)
        {
            const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
            mha_step_out_mla(j, r0, r1, &sc);
        }
    }
    if (j->f.mla)
        return;
    /* few rows (decode): split the columns too, so the whole of Wo is streamed by
     * every worker, not one; each element's sum is the same either way */
    const int cols = j->rows <= MHA_OUT_BLOCK ? MHA_OUT_COLS : j->f.d;
    for (int r0 = 0; r0 < j->rows; r0 += MHA_OUT_BLOCK)
        for (int c0 = 0; c0 < j->f.d; c0 += cols) {
            const int r1 = r0 + MHA_OUT_BLOCK < j->rows ? r0 + MHA_OUT_BLOCK : j->rows;
            const int c1 = c0 + cols < j->f.d ? c0 + cols : j->f.d;
#pragma omp task firstprivate(r0, r1, c0, c1)
            {
                const mha_scratch sc = mha_arena_slice(s->plan, s->scratch, omp_get_thread_num());
                mha_step_out_rows(j, r0, r1, c0, c1, &sc);
            }
        }
}

void mha_sched_step(const mha_sched *s, const mha_step_job *j)
{
    run_region(s, j->f.bk, step_tasks, j);
}

void mha_sched_first_touch(const mha_sched *s)
{
#pragma omp parallel num_threads(s->threads)
    {
        const int t = omp_get_thread_num();
        mha_cpumask saved;
        int pinned = pin_enter(s, t, &saved);
        memset(s->scratch + (size_t)t * s->plan->scratch_stride, 0, s->plan->scratch_stride);
        pin_leave(pinned, &saved);
    }
}

int mha_sched_nested(void)
{
    return omp_in_parallel();
}
