/* step.h — the work of one decoding step (mha_step_forward): projections of the new tokens
 * with their K and V written into the paged cache, attention of each sequence's new tokens
 * over its cached context, the output projection. */
#ifndef MHA_STEP_H
#define MHA_STEP_H

#include "attention.h"
#include "kvcache.h"
#include "mla.h"

/* A decode unit of a sequence: chunk c of its context for KV head g. */
typedef struct mha_chunk_at { int g, c; } mha_chunk_at;

struct mha_step_job;
/* A step's strategies on the paged cache, chosen once per engine (mha_step_ops_of) from its
 * products (float32, bf16, or bf16 on the float32 stream), its cache's family (scaled: int8)
 * and whether its table's bf16 decode tiles sum as its kernel does: the step's tasks call
 * them and never ask which (step_parts.h lists the candidates). */
typedef struct mha_step_ops {
    /* Prefill: the keys [t_begin, ctx) of sequence seq, KV head g, gathered from the cache into
     * what mha_attention_rows reads (float32: Kᵀ panels and V columns, a scaled cache's V read
     * back, or its values with their parameters in vs on the float32 stream, and its Kᵀ left to
     * attend; bf16: B panels, a scaled cache's V parameters into vs). */
    void (*gather)(const struct mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs);
    /* Prefill: the rows of (seq, g) attended over what gather left: all at once, or (scaled)
     * group by group, each seeing its own K group at full precision, the groups the step
     * completes stored first. */
    void (*attend)(const struct mha_step_job *j, int seq, int g, int t_begin, const mha_scratch *s, const float *vs);
    /* Decode: a chunk (keys [k0, k1)) of (seq, g) into its partials p, from the queries in the
     * worker's decode scratch; next: the (KV head, chunk) of seq the worker runs next (what to
     * prefetch; next.c < 0: none). */
    void (*chunk)(const struct mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                  const mha_scratch *s);
    /* A new row's K and V (row i of the Q/K/V scratch qkv, K at dkp and V at 2·dkp; the step's
     * row `row`) into slot `slot` of the cache's block `block`, KV head g: the elements (an
     * unscaled type's put), or (scaled) V quantized and K kept at full precision in j->k_full
     * until its group is complete (step.c). */
    void (*store)(const struct mha_step_job *j, mha_mat qkv, int i, int row, int block, int g, int slot,
                  const mha_scratch *s);
    /* Decode, after every chunk of (seq, g): the groups the step completed stored (scaled), or
     * nothing. */
    void (*commit)(const struct mha_step_job *j, int seq, int g);
    /* Decode on a scaled cache (NULL: unscaled): the scores of the chunk's keys [k0, k1) of
     * (seq, g) for the queries qv into sc (key k0's column, MHA_KV_CHUNK apart), integer for the
     * stored groups where the engine's table has int8_scores, else float32 products on K read
     * back (step_decode.c). */
    void (*scores)(const struct mha_step_job *j, int seq, int g, int k0, int k1, const float *qv, float *sc,
                   const mha_scratch *s);
    int v_params;              /* 1: the chunks take an int8 cache's V parameters (the worker's
                                * s->kvs: a bf16 engine's, which read V's values themselves) */
    int packed_queries;        /* 1: decode's queries packed into A panels once per unit (the
                                * forward's bf16 chunk step over gathered panels) */
} mha_step_ops;

typedef struct mha_step_job {
    mha_fwd f;                 /* the engine's step model and its buffers (engine.c), and the call: causal, out */
    const mha_step_ops *ops;   /* the engine's strategies (mha_step_ops_of) */
    const mha_kv_cache *cache;
    const mha_step *step;
    const int *row0;           /* (n_seqs + 1): each sequence's first row in x, z and out */
    int rows;                  /* new tokens in all: sum of n_new */
    int chunk_rows;            /* rows per projection task (<= f.rows): a function of the config only */
    float *partial;            /* decode: (max_batch, kvh, max_chunks) of mha_step_partial_floats */
    float *k_full;             /* int8 cache: the step's new K at full precision, row r's KV head g
                                * at (r·kvh + g)·dk (its group is quantized once complete) */
    float *const *tails;       /* int8 cache: (n_seqs) each sequence's open K group's rows in the
                                * cache's pool (mha_kv_open_step), NULL where it has none */
    int max_chunks;            /* ceil(max_seq_kv / MHA_KV_CHUNK) */
} mha_step_job;

/* The strategies of an engine whose model is f (its products, kernel and bf16 kernel) on a
 * cache of kv type kv. */
mha_step_ops mha_step_ops_of(const mha_fwd *f, mha_kv_type kv);

/* Rows per A panel of the step's packed rows: the float32 microkernel's, or 16 for bf16. */
int mha_step_panel(const mha_step_job *j);
/* Rows [r0, r1) of the step's x into A panels at f.buf.xpack (r0 a multiple of MHA_PACK_BLOCK),
 * once for all the projections that read them. */
void mha_step_pack_rows(const mha_step_job *j, int r0, int r1);
/* QK-norm over the whole projection (kind full), before any mha_step_project: KV head g's
 * part of the sums of squares of rows [r0, r1)'s K and Q (f.buf.k_ss, f.buf.q_ss, row r at r·kvh);
 * K kept in f.buf.k_saved and each Q in its columns of z for mha_step_project (which then
 * projects only V). */
void mha_step_norm_sums(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s);
/* Rows [r0, r1) of the step, KV head g: K and V projected (QK-norm full: K read back),
 * rotated at their positions and written to the cache; Q of the group's heads projected (or
 * read back from z), rotated, into z. */
void mha_step_project(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s);
/* MLA (its one latent KV head, g 0): rows [r0, r1) (at most MHA_MLA_ROWS) projected as the
 * forward projects them (mha_mla_rows) at their positions: Q_abs into z, and each row's K
 * [latent | rotated k_rope] into its cache slot as K and, whole, as V (the values sum every
 * feature; the output reads the latent's). */
void mha_step_project_mla(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s);
/* MLA: out rows [r0, r1) from z (each head's latent output) through W_uv and o_proj. */
void mha_step_out_mla(const mha_step_job *j, int r0, int r1, const mha_scratch *s);
/* Sequence seq, KV head g: its context's K and V from the cache, then each query head of the
 * group attends from its new tokens (Q read from z, Z written over it). */
void mha_step_attend(const mha_step_job *j, int seq, int g, const mha_scratch *s);
/* Chunks of MHA_KV_CHUNK keys in sequence seq's context. */
int mha_step_chunks(const mha_step_job *j, int seq);
/* The first of them any of its new tokens sees (a sliding window leaves the earlier ones
 * unread: their partials only say so). */
int mha_step_first_chunk(const mha_step_job *j, int seq);
/* Decode (n_new <= MHA_DECODE_MAX_NEW): chunks [c0, c1) of sequence seq's context for the query
 * heads of KV heads [g0, g1), chunk by chunk and within a chunk head by head, read in place
 * from the cache: each query's running max, sum and unnormalised Z per (KV head, chunk). One
 * worker's run: while a unit's values are summed from cache, the next unit's regions are
 * prefetched (the same chunk's next KV head, whose regions follow in each block: a run of
 * heads reads a block's bytes as one stream), so memory does not idle between units. A run
 * from the first chunk with a visible key merges its later chunks into that one's partials as
 * it goes (the merge's rule and order: the same bits), marking theirs merged. */
void mha_step_decode_chunks(const mha_step_job *j, int seq, int g0, int g1, int c0, int c1, const mha_scratch *s);
/* Decode: the chunks of (seq, g) merged in order (log-sum-exp) into z. */
void mha_step_decode_merge(const mha_step_job *j, int seq, int g);
/* out rows [r0, r1), columns [c0, c1) (c0 a panel boundary) = z · Wo + bo. */
void mha_step_out_rows(const mha_step_job *j, int r0, int r1, int c0, int c1, const mha_scratch *s);

#endif
