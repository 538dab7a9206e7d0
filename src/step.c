/* step.c — one decoding step on the paged KV cache (step.h): its projections, its output and
 * the choice of its strategies here; an int8 cache's K groups in step_groups.c, prefill in
 * step_prefill.c, decode in step_decode.c (step_parts.h is what they share).
 *
 * Three phases, each a set of tasks (scheduler.c), after the new tokens are packed once into
 * the GEMM's A panels: (1) per KV head and block of rows, the new
 * tokens' K|V (one GEMM over every sequence's rows, so the weights are read once per step,
 * not once per sequence) rotated at their positions and stored in the cache, and the group's
 * Q rotated into z; (2) per sequence and KV head, either (prefill: more than
 * MHA_DECODE_MAX_NEW new tokens) the context's K and V gathered from the cache into the worker's
 * panel scratch, Kᵀ packed once, and the forward's attention (mha_attention_rows) for each
 * query head of the group, with query i at position n_past + i; or (decode) per chunk of
 * MHA_KV_CHUNK keys, the forward's chunks: float32 dot products and value updates read
 * straight from the cache blocks in the microkernel's sums, each key and value row once for
 * all queries of the group; bf16 the same tiles on the cache's elements with the bf16
 * kernels' sums where the kernel sums even first, else the chunk gathered into the kernel's
 * panels and the forward's own chunk step; then the chunks merged in order by the forward's rule
 * (flash-decoding: long contexts spread over the workers; the result independent of how many
 * there are, and of how the sequence's steps were cut); (3) the output projection over all
 * rows. bf16 (engine and cache): the rows are packed to bf16 A panels and every product of
 * the forward runs on its bf16 kernel; K and V are rounded to bf16 as they are stored and
 * gathered straight into the kernel's B panels. An int8 cache (either engine): V stored with a
 * scale and zero point per token and KV head (a bf16 engine reads the int8 values themselves,
 * exact in bf16, and the chunk applies the parameters; a float32 engine's tiles read each value
 * back, q·scale + zero, as they load it); K per feature over groups of MHA_KV_GROUP slots with a zero point, the group
 * still filling kept at full precision (the step's new K in j->k_full, the earlier ones of its
 * group in the cache's open-group pool) until complete: each query reads Kᵀ as its own group sees it
 * (k_view: the groups before as stored, its own at full precision) into the panels or the
 * decode tiles' rows, then k_commit stores what the step completed (a prefill stores its
 * completed groups before its rows attend: mha_step_k_store_groups). Prefill and decode read
 * the same values. An int8 cache's scores in either engine are integer scores (isa.h's
 * int8_scores, where the table has them; else float32 products on K as stored) for a key in a
 * group stored before the query's own, float32 products on K at full precision for one of its
 * own group (a bf16 engine's on its queries unrounded: K is not
 * rounded to bf16 on top of int8; its probabilities and V are bf16's). QK-norm runs before RoPE;
 * the logits and the sink are the forward's (mha_attention_logits, mha_softmax_sink). */
#include "step_parts.h"

#include <string.h>

#include "isa/isa.h"
#include "rope.h"

static void commit_none(const mha_step_job *j, int seq, int g)
{
    (void)j, (void)seq, (void)g; /* an unscaled cache's keys are whole as stored */
}

/* Row i of the Q/K/V scratch (the step's row `row`), K at dkp and V at 2·dkp, into slot `slot`
 * of a cache block (mha_step_ops.store, one per cache family). An unscaled type's elements:
 * K transposed (feature c at c · block_size + slot), V as a row (MLA: no V, it is read from
 * K), through the type's put a panel's run at a time. */
static void store_kv(const mha_step_job *j, mha_mat qkv, int i, int row, int block, int g, int slot,
                     const mha_scratch *s)
{
    (void)row, (void)s; /* whole as stored: nothing kept at full precision */
    const mha_kernel *k = j->f.kernel;
    const mha_kv_cache *c = j->cache;
    const mha_kv_traits *kv = mha_kv_traits_of(c->type);
    const int dk = j->f.dk, dkp = j->f.dkp, bs = c->block_size;
    const size_t kt = mha_kv_kt_at(c, block, g) + (size_t)slot, v = c->mla ? 0 : mha_kv_v_at(c, block, g, slot);
    for (int c0 = 0; c0 < dk; c0 += k->bw) {
        const int n = dk - c0 < k->bw ? dk - c0 : k->bw;
        kv->put(mha_mat_at(k, qkv, i, dkp + c0), n, c->data, kt + (size_t)c0 * bs, (size_t)bs);
        if (!c->mla)
            kv->put(mha_mat_at(k, qkv, i, 2 * dkp + c0), n, c->data, v + (size_t)c0, 1);
    }
}

/* The same on a scaled type (int8; never MLA): V's whole row, through the worker's s->k8 (its
 * scale is over all d_k features); K kept at full precision in j->k_full until its group is
 * complete (mha_step_k_commit). */
static void store_kv_scaled(const mha_step_job *j, mha_mat qkv, int i, int row, int block, int g, int slot,
                            const mha_scratch *s)
{
    const mha_kernel *k = j->f.kernel;
    const mha_kv_cache *c = j->cache;
    const int dk = j->f.dk, dkp = j->f.dkp;
    const size_t v = mha_kv_v_at(c, block, g, slot);
    float *full = j->k_full + ((size_t)row * j->f.kvh + g) * dk, *par = mha_kv_v_params(c, block, g) + 2 * (size_t)slot;
    mha_mat_get_rows(k, mha_mat_sub(k, qkv, i, 0), 1, dkp, dk, full, dk);
    mha_mat_get_rows(k, mha_mat_sub(k, qkv, i, 0), 1, 2 * dkp, dk, s->k8, dk); /* V's row, whole */
    mha_kv_traits_of(c->type)->quantize(s->k8, 1, dk, 0, c->data, v, 1, &par[0], &par[1]);
}

mha_step_ops mha_step_ops_of(const mha_fwd *f, mha_kv_type kv)
{
    const int scaled = mha_kv_traits_of(kv)->scaled;
    const mha_isa *isa = f->kernel->isa;
    /* bf16 decode runs the table's tiles on the cache itself where the table has them and the
     * engine's kernel sums as they do */
    const int tiles16 = f->bk && isa->decode_scores16 && (isa->decode16_orders >> f->bk->order & 1u);
    return (mha_step_ops){
        .gather = !f->attn->float_panels ? mha_step_gather_bf16 : scaled ? mha_step_gather_scaled : mha_step_gather_floats,
        .attend = scaled ? mha_step_attend_groups : mha_step_attend_rows,
        .chunk = !f->bk ? (scaled ? mha_step_chunk_tiles_scaled : mha_step_chunk_tiles)
                 : tiles16 ? (scaled ? mha_step_chunk_tiles16_scaled : mha_step_chunk_tiles16)
                           : mha_step_chunk_panels16,
        .store = scaled ? store_kv_scaled : store_kv,
        .commit = scaled ? mha_step_k_commit : commit_none,
        .scores = !scaled ? NULL : f->kernel->int8_scores ? mha_step_scores_integer : mha_step_scores_float,
        .v_params = f->bk && scaled,
        .packed_queries = f->bk && !tiles16 && !scaled,
    };
}

/* The sequence of row r, walking forward from sequence seq (rows only grow). */
static int seq_of(const mha_step_job *j, int r, int seq)
{
    while (r >= j->row0[seq + 1])
        seq++;
    return seq;
}

/* The position of row r, which belongs to sequence seq. */
static int pos_of(const mha_step_job *j, int r, int seq)
{
    return j->step->n_past[seq] + (r - j->row0[seq]);
}

static const float *packed_rows(const mha_step_job *j, int r0)
{
    const mha_products *p = j->f.prod;
    return (const float *)(const void *)((const char *)j->f.buf.xpack + (size_t)r0 * p->a_row(j->f.d) * p->esz);
}

int mha_step_panel(const mha_step_job *j)
{
    return j->f.prod->a_panel(j->f.kernel);
}

void mha_step_pack_rows(const mha_step_job *j, int r0, int r1)
{
    const mha_kernel *k = j->f.kernel;
    j->f.prod->pack_a(k, mha_mat_rows(k, j->step->x, j->f.d), r0, r1 - r0, j->f.d, (void *)packed_rows(j, r0));
}

void mha_step_norm_sums(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const float *x = j->step->x + (size_t)r0 * j->f.d;
    const float *xp = r0 % mha_step_panel(j) == 0 ? packed_rows(j, r0) : NULL;
    mha_attention_norm_part(&j->f, s, g, r1 - r0, x, xp, (size_t)r0, r1 - r0, x, xp, (size_t)r0);
}

void mha_step_project(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const mha_step *st = j->step;
    const int d = f->d, dk = f->dk, dkp = f->dkp, m = r1 - r0, bs = j->cache->block_size;
    const float *x = st->x + (size_t)r0 * d;
    const mha_mat qkv = mha_mat_panels(k, s->qkv, f->rows);
    const int first = seq_of(j, r0, 0);

    /* K and V of the new rows: one GEMM into scratch columns [dkp, 3·dkp), K's QK-norm, then
     * row by row RoPE at the row's position and a copy into its cache slot */
    /* these rows in A panels (mha_step_pack_rows) where they start one; else packed here */
    const float *xp = r0 % mha_step_panel(j) == 0 ? packed_rows(j, r0) : NULL;
    const double *kss = f->buf.k_ss ? f->buf.k_ss + (size_t)r0 * f->kvh : NULL;
    const double *qss = f->buf.q_ss ? f->buf.q_ss + (size_t)r0 * f->kvh : NULL;
    if (f->buf.k_saved) { /* QK-norm full: K projected by mha_step_norm_sums, V here */
        mha_attention_project(f, s, m, x, xp, g, 2 * dkp, 2 * dkp, dkp);
        mha_mat_set_rows(k, qkv, m, dkp, dk, f->buf.k_saved + (size_t)r0 * f->kvh * dk + (size_t)g * dk,
                         (ptrdiff_t)f->kvh * dk);
    } else
        mha_attention_project(f, s, m, x, xp, g, dkp, dkp, 2 * dkp);
    mha_attention_norm_rows(f, qkv, m, dkp, 1, g, kss);
    for (int i = 0, seq = first; i < m; i++) {
        seq = seq_of(j, r0 + i, seq);
        const int pos = pos_of(j, r0 + i, seq);
        if (f->rope != MHA_ROPE_NONE)
            mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, dkp, pos, f->rope, f->rope_dim, f->rope_cos, f->rope_sin);
        const mha_kv_run at = mha_kv_run_at(st->blocks + (size_t)seq * st->max_blocks, bs, pos, pos + 1);
        j->ops->store(j, qkv, i, r0 + i, at.block, g, at.slot, s);
    }
    /* Q of each query head of the group (QK-norm full: already in z), rotated, into its
     * columns of z */
    for (int h = 0; h < f->group; h++) {
        float *z = f->buf.z + (size_t)r0 * f->qd + (size_t)(g * f->group + h) * dk;
        if (f->buf.k_saved)
            mha_mat_set_rows(k, qkv, m, 0, dk, z, f->qd);
        else
            mha_attention_project(f, s, m, x, xp, g, h == 0 ? 0 : (h + 2) * dkp, 0, dkp);
        mha_attention_norm_rows(f, qkv, m, 0, 0, g * f->group + h, qss);
        for (int i = 0, seq = first; i < m && f->rope != MHA_ROPE_NONE; i++) {
            seq = seq_of(j, r0 + i, seq);
            mha_rope_rows(k, mha_mat_sub(k, qkv, i, 0), 1, 0, pos_of(j, r0 + i, seq), f->rope, f->rope_dim, f->rope_cos,
                          f->rope_sin);
        }
        mha_mat_get_rows(k, qkv, m, 0, dk, z, f->qd);
    }
}

void mha_step_project_mla(const mha_step_job *j, int g, int r0, int r1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_step *st = j->step;
    const int m = r1 - r0, dk = f->dk, dkp = f->dkp, bs = j->cache->block_size, first = seq_of(j, r0, 0);
    int pos[MHA_MLA_ROWS];
    for (int i = 0, seq = first; i < m; i++) {
        seq = seq_of(j, r0 + i, seq);
        pos[i] = pos_of(j, r0 + i, seq);
    }
    /* rows of 3·dkp in the scratch: K at dkp, V at 2·dkp, as mha_step_ops.store reads them */
    float *kv = s->qkv;
    const ptrdiff_t ld = 3 * (ptrdiff_t)dkp;
    mha_mla_rows(f, st->x + (size_t)r0 * f->d, m, 0, pos, f->buf.z + (size_t)r0 * f->qd, kv + dkp, ld, s);
    for (int i = 0, seq = first; i < m; i++) {
        seq = seq_of(j, r0 + i, seq);
        memcpy(kv + i * ld + 2 * dkp, kv + i * ld + dkp, (size_t)dk * sizeof *kv);
        const mha_kv_run at = mha_kv_run_at(st->blocks + (size_t)seq * st->max_blocks, bs, pos[i], pos[i] + 1);
        j->ops->store(j, mha_mat_rows(f->kernel, kv, ld), i, r0 + i, at.block, g, at.slot, s);
    }
}

void mha_step_out_mla(const mha_step_job *j, int r0, int r1, const mha_scratch *s)
{
    mha_mla_values(&j->f, r1 - r0, j->f.buf.z + (size_t)r0 * j->f.qd, j->f.dk, j->f.call->out + (size_t)r0 * j->f.d, s);
}

void mha_step_out_rows(const mha_step_job *j, int r0, int r1, int c0, int c1, const mha_scratch *s)
{
    const mha_fwd *f = &j->f;
    const mha_kernel *k = f->kernel;
    const ptrdiff_t d = f->d, zd = f->qd;
    const mha_mat om = mha_mat_rows(k, f->call->out + (size_t)r0 * d + c0, d);
    const mha_mat zm = mha_mat_rows(k, f->buf.z + (size_t)r0 * zd, zd);
    const mha_gemm_ctx gc = mha_fwd_gemm(f, s);
    f->prod->gemm(&gc, r1 - r0, c1 - c0, f->qd, NULL, zm, f->wo, c0, f->has_bias ? f->bo + c0 : NULL,
                  om); /* c0: whole panels of either kind */
}
