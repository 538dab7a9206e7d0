/* step_parts.h — what the files of a decoding step share among themselves: step.c (the
 * projections, the output and the choice of strategies), step_groups.c (an int8 cache's K
 * groups), step_prefill.c (the context gathered for the forward's attention) and
 * step_decode.c (attention straight from the cache). Other layers call step.h's tasks. */
#ifndef MHA_STEP_PARTS_H
#define MHA_STEP_PARTS_H

#include "step.h"

/* The first key a step's rows of sequence seq may see: the window's start for its first new
 * token (its later tokens' windows start later), 0 without a window. */
static inline int mha_step_first_key(const mha_step_job *j, int seq)
{
    const int n_past = j->step->n_past[seq];
    return mha_visible_keys(n_past, 1, j->f.window, n_past + j->step->n_new[seq]).lo;
}

/* The worker's room for an int8 cache's V parameters where the engine's chunks apply them
 * (mha_step_ops.v_params), else NULL. */
static inline float *mha_step_v_params(const mha_step_job *j, const mha_scratch *s)
{
    return j->ops->v_params ? s->kvs : NULL;
}

/* ---- an int8 cache's K groups (step_groups.c) ---- */

/* Kᵀ of keys [k0, k1) of (seq, g) as a query whose group starts at `own` sees them: a group
 * before its own as stored, its own (and the later ones, which it does not see) at full
 * precision; float32 into dst (feature c of key k0 + u at dst[c · ld + u]). */
void mha_step_k_view(const mha_step_job *j, int seq, int g, int own, int k0, int k1, float *dst, size_t ld,
                     const mha_scratch *s);
/* Prefill: the same into the float32 microkernel's panels (s->kt, key t at column t), a group
 * at a time through s->k8. */
void mha_step_k_view_panels(const mha_step_job *j, int seq, int g, int own, int k0, int k1, const mha_scratch *s);
/* The integer scores of nq queries q (rows dk apart) against the keys [k0, k1) of (seq, g), each
 * in a group stored before the queries' own, into sc (query qi's key k0 at sc[qi · ld]); groups
 * ending by `stored` read from the cache, the others quantized here as k_commit stores them. */
void mha_step_int8_scores(const mha_step_job *j, int seq, int g, const float *q, int nq, int k0, int k1, float *sc,
                          size_t ld, int stored, const mha_scratch *s);
/* After the step's attention of (seq, g): each group its new tokens complete quantized into the
 * cache, the new tokens of the group still filling into its open-group entry. The two halves:
 * store_groups (before its attention when one task reads (seq, g): the prefill's), keep_tail
 * (after it: the entry holds the earlier rows of n_past's group until then). */
void mha_step_k_commit(const mha_step_job *j, int seq, int g);
void mha_step_k_store_groups(const mha_step_job *j, int seq, int g);
void mha_step_k_keep_tail(const mha_step_job *j, int seq, int g);

/* ---- prefill (step_prefill.c) ---- */

/* bf16 engines: the keys [t_begin, t_end) of a sequence (its block table) from a bf16 or int8
 * cache straight into the bf16 kernel's B panels (s->kt16, s->v16 of vps elements per panel),
 * key t at column / row t − base; int8: V's values themselves, their parameters into vs. */
void mha_step_gather_panels16(const mha_step_job *j, const int32_t *table, int g, int t_begin, int t_end, int base,
                              size_t vps, const mha_scratch *s, float *vs);

/* The strategies mha_step_ops_of chooses among (step.h's mha_step_ops says what each does):
 * gathers into float32 panels of an unscaled cache's elements, of a scaled one's read back (or
 * its values with their parameters in vs), or into bf16 panels; the rows attended all at once
 * or group by group; decode on the float32 tiles or the bf16 tiles (each of an unscaled cache or
 * of an int8 one), or on the forward's bf16 chunk step over gathered panels; an int8 cache's
 * completed groups stored, or nothing; an int8 cache's decode scores, integer or float32. */
void mha_step_gather_floats(const mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs);
void mha_step_gather_scaled(const mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs);
void mha_step_gather_bf16(const mha_step_job *j, int seq, int g, int t_begin, int ctx, const mha_scratch *s, float *vs);
void mha_step_attend_rows(const mha_step_job *j, int seq, int g, int t_begin, const mha_scratch *s, const float *vs);
void mha_step_attend_groups(const mha_step_job *j, int seq, int g, int t_begin, const mha_scratch *s, const float *vs);
void mha_step_scores_integer(const mha_step_job *j, int seq, int g, int k0, int k1, const float *qv, float *sc,
                             const mha_scratch *s);
void mha_step_scores_float(const mha_step_job *j, int seq, int g, int k0, int k1, const float *qv, float *sc,
                           const mha_scratch *s);
void mha_step_chunk_tiles(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                          const mha_scratch *s);
void mha_step_chunk_tiles_scaled(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p,
                                 float *vs, const mha_scratch *s);
void mha_step_chunk_tiles16(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p, float *vs,
                            const mha_scratch *s);
void mha_step_chunk_tiles16_scaled(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p,
                                   float *vs, const mha_scratch *s);
void mha_step_chunk_panels16(const mha_step_job *j, int seq, int g, int k0, int k1, mha_chunk_at next, float *p,
                             float *vs, const mha_scratch *s);

#endif
