/* core.c — the attention core's tasks (mha_core_forward: Q, K, V given after projection and
 * RoPE, strided, float32 or bf16; scheduler.c runs a task per sequence, KV head and block of
 * its query heads). K and V of the KV head are read once from the caller's tensors into what
 * the chunks read, then each query head runs mha_attention_rows (attention.c): its rows equal
 * the forward's attention bit for bit. A few queries a head (at most MHA_DECODE_MAX_NEW, as
 * decode brings) run the group's heads as the rows of one query block instead (core_few_rows),
 * K and V read as decode reads a cache; what each precision does for them (few_fits,
 * pack_kv_few: products.c's tables) is here too, as it reads the core's tensors. */
#include "attention.h"

#include "isa/isa.h"
#include "kvcache.h"

#include <math.h>
#include <string.h>

int mha_attention_few_fits_f32(const mha_fwd *f)
{
    return f->dk <= f->kernel->kc;
}

int mha_attention_few_fits_bf16(const mha_fwd *f)
{
    (void)f;
    return 1;
}

/* K's and V's rows of (sequence b, KV head g) from key k0 in the core's tensors. */
static mha_mat core_k(const mha_fwd *f, const mha_core_io *io, int b, int g, int k0)
{
    return mha_mat_rows(f->kernel, (const float *)io->k + b * io->k_st[0] + g * io->k_st[1] + k0 * io->k_st[2],
                        io->k_st[2]);
}
static mha_mat core_v(const mha_fwd *f, const mha_core_io *io, int b, int g, int k0)
{
    return mha_mat_rows(f->kernel, (const float *)io->v + b * io->v_st[0] + g * io->v_st[1] + k0 * io->v_st[2],
                        io->v_st[2]);
}

/* Whether the core's few queries read K's rows (the table has the kernel for them: have): d_k
 * within its reach and a KV head of at least min_group queries. */
static int few_rows(int dk, int group, int have, int min_group)
{
    return have && dk <= MHA_ROWS_SCORES_DK && group >= min_group;
}

/* float32: the table's rows_scores reads K in place. bf16: K's and V's rows read the decode
 * tiles' way where the table has rows_scores16 and value tiles, and they sum in the kernel's
 * order: even first, or odd first with d_k even. Otherwise the panels. */
int mha_attention_few_rows(const mha_bkernel *bk, const mha_isa *isa, int dk, int group)
{
    if (!bk)
        return few_rows(dk, group, isa->rows_scores != NULL, isa->rows_scores_group);
    const mha_bk_order order = bk->order;
    return few_rows(dk, group,
                    isa->rows_scores16 && isa->decode_values16 && (isa->decode16_orders >> order & 1u) &&
                        (order == MHA_BK_EVEN_FIRST || (order == MHA_BK_ODD_FIRST && dk % 2 == 0)),
                    4); /* bf16: K widened into floats first, then float32 products; with fewer
                         * queries the bf16 kernel's panels are the faster on every table */
}

/* K and V of (sequence b, KV head g), kl keys from key k0, into what the chunks read (from
 * their key 0): float32 tensors by pack_kv, bf16 ones (bf16 engines only) by pack_kv16. */
static void core_kv_by(const mha_fwd *f, const mha_scratch *s, const mha_core_io *io, int b, int g, int k0, int kl,
                       void (*pack_kv)(const mha_fwd *, const mha_scratch *, int, mha_mat, mha_mat),
                       void (*pack_kv16)(const mha_fwd *, const mha_scratch *, int, const mha_bf16 *, ptrdiff_t,
                                         const mha_bf16 *, ptrdiff_t))
{
    if (kl <= 0)
        return;
    if (io->bf16)
        pack_kv16(f, s, kl, (const mha_bf16 *)io->k + b * io->k_st[0] + g * io->k_st[1] + k0 * io->k_st[2],
                  io->k_st[2], (const mha_bf16 *)io->v + b * io->v_st[0] + g * io->v_st[1] + k0 * io->v_st[2],
                  io->v_st[2]);
    else
        pack_kv(f, s, kl, core_k(f, io, b, g, k0), core_v(f, io, b, g, k0));
}

void mha_attention_pack_kv_few_f32(const mha_fwd *f, const mha_scratch *s, const mha_core_io *io, int b, int g,
                                   int k0, int kl, mha_kv_view *kv)
{
    const mha_kernel *k = f->kernel;
    const int dv = f->dv;
    const mha_mat km = core_k(f, io, b, g, k0), vm = core_v(f, io, b, g, k0); /* float32 tensors: float32 engines' */
    /* K read in place by rows_scores, or transposed into the decode tiles' panels */
    const int rows = f->attn->few_rows;
    if (kl > 0 && !rows)
        k->isa->pack_rows(km, k->bw, 0, kl, 0, f->dk, MHA_TILE_KEYS, s->kt);
    float *vc = s->qkv;
    for (int j = 0; vm.ld != dv && j < kl; j++)
        memcpy(vc + (size_t)j * dv, vm.p + j * vm.ld, (size_t)dv * sizeof *vc);
    *kv = (mha_kv_view){.ktp = rows ? NULL : s->kt, .vp = vm.ld == dv ? vm.p : vc, .kr = rows ? km.p : NULL,
                        .krl = km.ld, .kl = kl};
}

void mha_attention_pack_kv_few_bf16(const mha_fwd *f, const mha_scratch *s, const mha_core_io *io, int b, int g,
                                    int k0, int kl, mha_kv_view *kv)
{
    if (!f->attn->few_rows) { /* the chunk's panels, as the caller's view says */
        core_kv_by(f, s, io, b, g, k0, kl, mha_attention_pack_kv_bf16, mha_attention_pack_kv16_bf16);
        return;
    }
    /* K's rows as floats of their bf16 values (widened, or rounded) into s->kt; V's bf16 rows
     * dv apart, in place where the tensor holds them so, else copied (or rounded) into s->v16 */
    const int dk = f->dk, dv = f->dv;
    const mha_kv_traits *t16 = mha_kv_traits_of(MHA_KV_BF16);
    float *kr = s->kt;
    mha_bf16 *vc = s->v16;
    const mha_bf16 *vr = vc;
    if (io->bf16) {
        const mha_bf16 *k16 = (const mha_bf16 *)io->k + b * io->k_st[0] + g * io->k_st[1] + k0 * io->k_st[2];
        const mha_bf16 *v16 = (const mha_bf16 *)io->v + b * io->v_st[0] + g * io->v_st[1] + k0 * io->v_st[2];
        for (int j = 0; j < kl; j++)
            t16->floats(k16 + j * io->k_st[2], 0, dk, kr + (size_t)j * dk);
        if (io->v_st[2] == dv)
            vr = v16;
        else
            for (int j = 0; j < kl; j++)
                memcpy(vc + (size_t)j * dv, v16 + j * io->v_st[2], (size_t)dv * sizeof *vc);
    } else {
        const mha_mat km = core_k(f, io, b, g, k0), vm = core_v(f, io, b, g, k0);
        for (int j = 0; j < kl; j++) {
            memcpy(kr + (size_t)j * dk, km.p + j * km.ld, (size_t)dk * sizeof *kr);
            t16->put(vm.p + j * vm.ld, dv, vc, (size_t)j * dv, 1);
        }
        f->kernel->isa->round_bf16_floats(kr, kl * dk);
    }
    *kv = (mha_kv_view){.kr = kr, .krl = dk, .vr16 = vr};
}

/* The core's tensors: the address of element offset off of p, in io's dtype. */
static const char *core_at(const mha_core_io *io, const void *p, ptrdiff_t off)
{
    return (const char *)p + off * (io->bf16 ? (ptrdiff_t)sizeof(mha_bf16) : (ptrdiff_t)sizeof(float));
}

/* n elements of a core tensor at element offset off as floats (bf16 widened: exact). */
static void core_get(const mha_core_io *io, const void *p, ptrdiff_t off, int n, float *dst)
{
    if (!io->bf16) {
        memcpy(dst, core_at(io, p, off), (size_t)n * sizeof *dst);
        return;
    }
    const mha_bf16 *restrict src = (const mha_bf16 *)p + off;
    uint32_t *restrict bits = (uint32_t *)(void *)dst; /* a float's bits: bf16 is its high half */
    for (int c = 0; c < n; c++)
        bits[c] = (uint32_t)src[c] << 16;
}

/* n floats into out at element offset off (bf16: rounded by the table, as mha_bf16_round; z
 * NULL: zeros). */
static void core_put(const mha_fwd *f, const mha_core_io *io, ptrdiff_t off, const float *z, int n)
{
    char *dst = (char *)core_at(io, io->out, off);
    if (!z) {
        memset(dst, 0, (size_t)n * (io->bf16 ? sizeof(mha_bf16) : sizeof(float)));
        return;
    }
    if (!io->bf16) {
        memcpy(dst, z, (size_t)n * sizeof *z);
        return;
    }
    f->kernel->isa->round_to_bf16(z, n, (mha_bf16 *)(void *)dst);
}

/* Whether the core's KV head of ql queries runs as core_few_rows: 1 to MHA_DECODE_MAX_NEW queries
 * (more amortise the per-head passes) whose softmax state and Z fit the A-packing region
 * (which no product of theirs uses: float32 reads Q in place, bf16 packs it into s->q16, sized
 * for group·MHA_DECODE_MAX_NEW rows); float32: one pass over the features (dk <= KC: the tiles'
 * sums are the microkernel's). */
static int core_few(const mha_fwd *f, int ql)
{
    const size_t m = (size_t)f->group * ql;
    return f->attn->few_fits(f) && ql >= 1 && ql <= MHA_DECODE_MAX_NEW && ql <= f->q_block &&
           m * (4 + 2 * (size_t)f->dk) <= mha_gemm_apack_floats(f->kernel);
}

/* The few queries of KV head g's query heads as the rows of one block (row r: query head
 * g·group + r / ql, query r % ql), into q (rows dk apart), with K's and V's keys [k0, k0 + kl)
 * packed by the engine's pack_kv_few into *kv (from the view's key 0); bf16 on K's rows: the
 * queries' bf16 values, as the kernel's A panels hold them. The block's rows. */
static mha_chunk_rows few_block(const mha_fwd *f, const mha_core_io *io, int b, int g, const mha_scratch *s, int ql,
                                int k0, int kl, float *q, mha_kv_view *kv)
{
    const mha_kernel *k = f->kernel;
    const int dk = f->dk, m = f->group * ql, h0 = g * f->group;
    *kv = (mha_kv_view){.kt16 = s->kt16, .v16 = s->v16, .kps = mha_attention_kt16_ps(f),
                        .vps = mha_attention_v16_ps(kl)};
    f->attn->pack_kv_few(f, s, io, b, g, k0, kl, kv);
    for (int r = 0; r < m; r++)
        core_get(io, io->q, b * io->q_st[0] + (h0 + r / ql) * io->q_st[1] + (r % ql) * io->q_st[2], dk, q + (size_t)r * dk);
    if (kv->kr && f->bk)
        k->isa->round_bf16_floats(q, m * dk);
    return (mha_chunk_rows){.m = m, .pos0 = f->call->seq_kv - f->call->seq_q, .period = ql, .causal = f->call->causal,
                            .head0 = h0, .q = mha_mat_rows(k, q, dk), .mask = f->call->mask};
}

/* The keys [*begin, end) that sequence b's ql queries see (mha_attention_rows' one query block
 * of them, from a chunk's start). Returns end. */
static int few_keys(const mha_fwd *f, int b, int ql, int *begin)
{
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv, off = f->call->seq_kv - f->call->seq_q;
    return mha_attention_block_keys(f, off, ql - 1 + off, kl, MHA_KV_CHUNK, begin);
}

/* A few queries of every head of KV head g as the rows of one pass over the keys, as decode
 * reads a cache: float32, K's rows read in place by the table's rows_scores (or Kᵀ transposed
 * once into the decode tiles' panels) and V read in place (rows dv apart) or copied so, the
 * tiles' scores and values (the microkernel's sums); bf16, likewise on K's and V's rows through
 * bf16 decode's tiles (mha_attention_ops.few_rows), else K and V packed into the kernel's panels
 * as for more queries; then mha_attention_rows' chunks, logits, merge, sink and division: the
 * same bits as it, with one pass for the group's 1–4 rows per head. */
static void core_few_rows(const mha_fwd *f, const mha_core_io *io, int b, int g, const mha_scratch *s, int ql, int kl)
{
    const int dv = f->dv, m = f->group * ql;
    float *sc = s->dec, *q = sc + (size_t)m * MHA_KV_CHUNK; /* dec: (group·MHA_DECODE_MAX_NEW) × (chunk + dk) */
    float *z = s->apack + (size_t)m * (4 + dv); /* past mha_attention_block's state in the apack region */
    mha_kv_view kv;
    const mha_chunk_rows rows = few_block(f, io, b, g, s, ql, 0, kl, q, &kv);
    int kv_begin;
    const int kv_end = few_keys(f, b, ql, &kv_begin);
    mha_attention_block(f, s, &rows, &kv, kv_begin, kv_end, MHA_KV_CHUNK, sc, MHA_KV_CHUNK, z, dv, io->sinks, s->apack);
    for (int r = 0; r < m; r++)
        core_put(f, io, b * io->o_st[0] + (rows.head0 + r / ql) * io->o_st[1] + (r % ql) * io->o_st[2],
                 z + (size_t)r * dv, dv);
}

/* Zeros for the rows past sequence b's query length, of query heads [h0, h1). */
static void core_zero_rows(const mha_fwd *f, const mha_core_io *io, int b, int ql, int h0, int h1)
{
    for (int h = h0; h < h1; h++)
        for (int i = ql; i < f->call->seq_q; i++)
            core_put(f, io, b * io->o_st[0] + h * io->o_st[1] + i * io->o_st[2], NULL, f->dv);
}

int mha_attention_core_chunks(const mha_fwd *f, int b, int *first)
{
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    int begin;
    const int end = ql > 0 && core_few(f, ql) ? few_keys(f, b, ql, &begin) : 0;
    *first = end > 0 ? begin / MHA_KV_CHUNK : 0;
    return end > 0 ? (end + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK : 0;
}

/* Chunk c's partials of (sequence b, KV head g) in io->partial: each of the few rows' Z (dv),
 * running max and sum, rows dv + 2 apart (the rows of a decode step's partials, dk + 2 >= dv + 2
 * floats a row). */
static float *core_partial(const mha_fwd *f, const mha_core_io *io, int b, int g, int c)
{
    const size_t chunks = ((size_t)f->call->seq_kv + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK;
    return io->partial + (((size_t)b * f->kvh + g) * chunks + c) * mha_step_partial_floats(f->group, f->dk);
}

void mha_attention_core_keys(const mha_fwd *f, const mha_core_io *io, int b, int g, int c0, int c1,
                             const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q, dv = f->dv, m = f->group * ql;
    const ptrdiff_t ps = (ptrdiff_t)dv + 2;
    int first;
    const int kv_end = few_keys(f, b, ql, &first);
    const int k0 = c0 * MHA_KV_CHUNK > first ? c0 * MHA_KV_CHUNK : first;
    const int k1 = c1 * MHA_KV_CHUNK < kv_end ? c1 * MHA_KV_CHUNK : kv_end;
    float *sc = s->dec, *q = sc + (size_t)m * MHA_KV_CHUNK;
    float *fz = s->apack; /* a folded chunk's partials (m·(dv + 2) floats): where core_few_rows
                           * keeps mha_attention_block's state, which no chunk uses */
    mha_kv_view kv;
    const mha_chunk_rows rows = few_block(f, io, b, g, s, ql, k0, k1 - k0, q, &kv);
    const mha_bf16 *q16 = f->attn->block_queries(f, s, &rows, &kv);
    /* a run from the first chunk folds each later one into its partials as it goes, by the
     * merge's rule (mha_attention_block's order); later runs leave each chunk's own */
    float *acc = core_partial(f, io, b, g, k0 / MHA_KV_CHUNK);
    for (int c = k0; c < k1; c += MHA_KV_CHUNK) {
        const int n = k1 - c < MHA_KV_CHUNK ? k1 - c : MHA_KV_CHUNK, folded = k0 == first && c > k0;
        float *p = folded ? fz : core_partial(f, io, b, g, c / MHA_KV_CHUNK);
        mha_chunk_rows cr = rows;
        cr.q16 = q16;
        if (cr.mask)
            cr.mask += c;
        mha_attention_chunk(f, s, &cr, &kv, c - k0, c, n, sc, MHA_KV_CHUNK, mha_mat_rows(k, p, ps), p + dv, p + dv + 1,
                            ps);
        for (int r = 0; folded && r < m; r++) {
            float *a = acc + r * ps, *done = core_partial(f, io, b, g, c / MHA_KV_CHUNK) + r * ps;
            const float *pr = p + r * ps;
            mha_softmax_merge(k->isa, a, &a[dv], &a[dv + 1], pr, pr[dv], pr[dv + 1], dv);
            done[dv] = -INFINITY, done[dv + 1] = 0.0f; /* merged: the merge skips it */
        }
    }
}

void mha_attention_core_merge(const mha_fwd *f, const mha_core_io *io, int b, int g, const mha_scratch *s)
{
    const mha_isa *isa = f->kernel->isa;
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q, dv = f->dv, h0 = g * f->group;
    const ptrdiff_t ps = (ptrdiff_t)dv + 2;
    int first;
    const int end = mha_attention_core_chunks(f, b, &first);
    float *z = s->apack;
    for (int r = 0; r < f->group * ql; r++) {
        float mx = -INFINITY, sum = 0.0f;
        memset(z, 0, (size_t)dv * sizeof *z);
        for (int c = first; c < end; c++) { /* in chunk order, as mha_attention_block merges */
            const float *p = core_partial(f, io, b, g, c) + r * ps;
            mha_softmax_merge(isa, z, &mx, &sum, p, p[dv], p[dv + 1], dv);
        }
        mha_softmax_end(isa, z, &mx, &sum, io->sinks ? &io->sinks[h0 + r / ql] : NULL, dv);
        core_put(f, io, b * io->o_st[0] + (h0 + r / ql) * io->o_st[1] + (r % ql) * io->o_st[2], z, dv);
    }
    core_zero_rows(f, io, b, ql, h0, h0 + f->group);
}

int mha_attention_head_block(int group)
{
    int hb = group;
    while (hb > 16 && hb % 2 == 0)
        hb /= 2;
    return hb;
}

/* The keys a query block of sequence b's rows [r0, r1) reads (mha_attention_rows' chunks). */
static long block_keys(const mha_fwd *f, int r0, int r1, int kl)
{
    const int off = f->call->seq_kv - f->call->seq_q;
    int begin;
    const int end = mha_attention_block_keys(f, r0 + off, r1 - 1 + off, kl, 1, &begin);
    return (long)(end - begin) * (r1 - r0);
}

/* Where part p of `parts` of rows [0, ql) starts: the first block boundary by which the blocks'
 * keys reach p / parts of total. */
static int core_cut(const mha_fwd *f, int ql, int kl, long total, int p, int parts)
{
    if (p >= parts)
        return ql;
    long done = 0;
    int r = 0;
    for (const int qb = f->q_block; r < ql && done * parts < total * p; r += qb)
        done += block_keys(f, r, r + qb < ql ? r + qb : ql, kl);
    return r < ql ? r : ql;
}

void mha_attention_core_part(const mha_fwd *f, int b, int part, int parts, int *r0, int *r1)
{
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv, qb = f->q_block;
    if (parts < 2 || f->call->mask) {
        *r0 = 0, *r1 = part == 0 ? ql : 0;
        return;
    }
    long total = 0;
    for (int r = 0; r < ql; r += qb)
        total += block_keys(f, r, r + qb < ql ? r + qb : ql, kl);
    *r0 = core_cut(f, ql, kl, total, part, parts), *r1 = core_cut(f, ql, kl, total, part + 1, parts);
}

void mha_attention_core(const mha_fwd *f, const mha_core_io *io, int b, int g, int h0, int h1, int part, int parts,
                        const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q;
    const int kl = f->call->kv_len ? f->call->kv_len[b] : f->call->seq_kv;
    const int dv = f->dv;
    if (core_few(f, ql)) {
        if (h0 != g * f->group || part != 0)
            return;
        h1 = (g + 1) * f->group;
        core_few_rows(f, io, b, g, s, ql, kl);
    } else {
        /* Kᵀ packed from K in place (bf16 engines: V too, into bf16 B panels; on the float32
         * stream, V into the Q/K/V scratch's V columns, rounded), once for the block's query
         * heads; float32 V copied into the columns the forward projects it to (the microkernel
         * reads B in panels); float32 Q read and out written in place; bf16 Q copied into the A
         * panels (or rounded into float rows by each chunk), bf16 out rounded from float rows in
         * the scratch (the Q/K/V region's Q columns, which bf16 engines' core does not use
         * otherwise) */
        int r0, r1;
        mha_attention_core_part(f, b, part, parts, &r0, &r1);
        /* a part that ends before the last row: the keys to the end of the chunk holding the
         * last key its last row sees (a window implies causal: no earlier row sees more), as
         * the unsplit call packs them — a chunk's tiles read its keys past the last visible
         * one, and their products' zeros keep the signs of those values */
        const int off = f->call->seq_kv - f->call->seq_q;
        int kn = kl;
        if (r1 < ql) {
            const int hi = mha_visible_keys(r1 - 1 + off, f->call->causal, f->window, kl).hi;
            const int up = (hi + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK * MHA_KV_CHUNK;
            kn = up < kl ? up : kl;
        }
        core_kv_by(f, s, io, b, g, 0, r1 > r0 ? kn : 0, f->attn->pack_kv, f->attn->pack_kv16);
        float *zf = s->qkv;
        for (int h = h0; h < h1 && r1 > r0; h++) {
            const ptrdiff_t qo = b * io->q_st[0] + h * io->q_st[1] + r0 * io->q_st[2];
            const ptrdiff_t oo = b * io->o_st[0] + h * io->o_st[1] + r0 * io->o_st[2];
            const mha_queries q = io->bf16 ? (mha_queries){.q16 = (const mha_bf16 *)io->q + qo, .ld16 = io->q_st[2]}
                                           : (mha_queries){.q = mha_mat_rows(k, (const float *)io->q + qo, io->q_st[2])};
            mha_attention_rows(f, h, s, q, r1 - r0, kn, off + r0, io->bf16 ? zf : (float *)io->out + oo,
                               io->bf16 ? dv : io->o_st[2], io->sinks, NULL, NULL, NULL);
            for (int i = 0; io->bf16 && i < r1 - r0; i++)
                core_put(f, io, oo + i * io->o_st[2], zf + (size_t)i * dv, dv);
        }
    }
    if (part == 0)
        core_zero_rows(f, io, b, ql, h0, h1);
}
