/* arena.c — sizing and carving share this one plan, so they can never disagree. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "arena.h"

#include <stdlib.h>
#include <sys/mman.h>

#include <stdint.h>

/* Reserve count × elem bytes at the cursor, aligned; flags overflow instead of wrapping. */
static size_t take(size_t *cursor, size_t count, size_t elem, size_t align, int *overflow)
{
    size_t bytes, start, end;
    if (__builtin_mul_overflow(count, elem, &bytes) ||
        __builtin_add_overflow(*cursor, align - 1, &start)) {
        *overflow = 1;
        return 0;
    }
    start &= ~(align - 1);
    if (__builtin_add_overflow(start, bytes, &end)) {
        *overflow = 1;
        return 0;
    }
    *cursor = end;
    return start;
}

static size_t product(size_t a, size_t b, size_t c, int *overflow)
{
    size_t ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) {
        *overflow = 1;
        return 0;
    }
    return abc;
}

int mha_arena_plan_make(const mha_dims *dims, const mha_kernel *k, size_t engine_bytes, mha_arena_kind kind,
                        mha_arena_plan *p)
{
    int of = 0;
    size_t d = (size_t)dims->d, h = (size_t)dims->h, dk = (size_t)dims->dk;
    size_t batch = (size_t)dims->batch, threads = (size_t)dims->threads;
    size_t rows = (size_t)(dims->seq_q > dims->seq_kv ? dims->seq_q : dims->seq_kv);
    /* bf16 engines have bw a multiple of 16 (engine.c checks): head columns (multiples of
     * dkp) start on whole bf16 B panels too */
    size_t w = (size_t)k->bw, dkp = (dk + w - 1) / w * w, kvp = ((size_t)dims->seq_kv + w - 1) / w * w;
    size_t dp = (d + w - 1) / w * w, lds = ((size_t)dims->seq_kv + 15) / 16 * 16;
    size_t cur = 0;
    p->dkp = (int)dkp;
    p->ld_scores = (ptrdiff_t)lds;
    p->w_ps = dims->bf16 ? mha_bk_ps(dims->d) : 0;
    p->bf16 = dims->bf16;
    const size_t welem = dims->bf16 ? sizeof(mha_bf16) : sizeof(float);
    const size_t wrows = dims->bf16 ? mha_bk_kp(dims->d) : d; /* k of the weights, padded to tiles */

    p->engine = take(&cur, 1, engine_bytes, MHA_ALIGN, &of);
    p->wqkv = p->bqkv = p->wo = p->bo = MHA_ARENA_ABSENT;
    if (kind != MHA_ARENA_ENGINE_SHARED) {
        const size_t kvh = (size_t)dims->kvh, per_group = (size_t)dims->group + 2;
        p->wqkv = take(&cur, product(kvh, wrows, per_group * dkp, &of), welem, MHA_ALIGN, &of);
        p->bqkv = take(&cur, product(kvh, per_group, dkp, &of), sizeof(float), MHA_ALIGN, &of);
        p->wo = take(&cur, product(wrows, dims->bf16 ? mha_round_up(d, MHA_BT_N) : dp, 1, &of), welem, MHA_ALIGN, &of);
        p->bo = take(&cur, d, sizeof(float), MHA_ALIGN, &of);
    }
    if (kind == MHA_ARENA_WEIGHTS) {
        p->z = p->xpack = p->order = p->deps = p->xdeps = p->worker_cpu = p->pin_cpu = p->scratch = MHA_ARENA_ABSENT;
        p->rope_cos = p->rope_sin = p->step_row0 = p->partial = MHA_ARENA_ABSENT;
        p->xpack_stride = p->scratch_stride = p->kt = p->scores = p->apack = p->inv = p->dec = p->vb = p->pb = 0;
        p->total = cur;
        return of ? -1 : 0;
    }
    p->z = take(&cur, product(batch, (size_t)dims->seq_q, d, &of), sizeof(float), MHA_ALIGN, &of);
    p->xpack_stride = mha_gemm_packed_a_floats(k, (size_t)dims->seq_q, d); /* seq_q, d <= 2^20, 2^16: no overflow */
    if (dims->bf16) /* bf16 A panels, in floats' room */
        p->xpack_stride = (product(mha_round_up((size_t)dims->seq_q, MHA_BT_M), mha_bk_kp(dims->d), 1, &of) + 1) / 2;
    p->xpack = take(&cur, product(batch, p->xpack_stride, 1, &of), sizeof(float), MHA_ALIGN, &of);
    p->order = take(&cur, batch, sizeof(int), MHA_ALIGN, &of);
    p->deps = take(&cur, product(batch, h, 1, &of), 1, MHA_ALIGN, &of);
    p->xdeps = take(&cur, product(batch, ((size_t)dims->seq_q + MHA_PACK_BLOCK - 1) / MHA_PACK_BLOCK, 1, &of), 1,
                    MHA_ALIGN, &of);
    p->worker_cpu = take(&cur, threads, sizeof(int), MHA_ALIGN, &of);
    p->pin_cpu = take(&cur, threads, sizeof(int), MHA_ALIGN, &of);
    p->step_row0 = take(&cur, batch + 1, sizeof(int), MHA_ALIGN, &of);
    const size_t chunks = ((size_t)dims->seq_kv + MHA_KV_CHUNK - 1) / MHA_KV_CHUNK;
    const size_t dec_q = (size_t)dims->group * MHA_DECODE_ROWS; /* queries of one decode task */
    p->partial = take(&cur, product(batch * (size_t)dims->kvh, chunks, dec_q * (dk + 2), &of), sizeof(float), MHA_ALIGN, &of);
    p->rope_cos = p->rope_sin = MHA_ARENA_ABSENT;
    if (dims->rope.style != MHA_ROPE_NONE) {
        const size_t half = (size_t)dims->rope.rotary_dim / 2;
        p->rope_cos = take(&cur, product((size_t)dims->positions, half, 1, &of), sizeof(float), MHA_ALIGN, &of);
        p->rope_sin = take(&cur, product((size_t)dims->positions, half, 1, &of), sizeof(float), MHA_ALIGN, &of);
    }

    /* One worker slice: its head's Q/K/V, Kᵀ, its score tile, its A packing buffer. */
    size_t slice = 0;
    take(&slice, product(rows, 3, dkp, &of), sizeof(float), MHA_ALIGN, &of);
    size_t kt_bytes = product(dk, kvp, sizeof(float), &of);
    size_t apack_bytes = mha_gemm_apack_floats(k) * sizeof(float);
    if (dims->bf16) {
        /* Kᵀ: (dk, seq_kv) in B panels; A packing for the deepest product: d, or a whole key row */
        const size_t kt16 = product(mha_bk_b_elems(dims->dk, dims->seq_kv), sizeof(mha_bf16), 1, &of);
        const size_t deepest = (size_t)(dims->d > dims->seq_kv ? dims->d : dims->seq_kv);
        const size_t ap16 = product(mha_bgemm_apack_elems((int)deepest), sizeof(mha_bf16), 1, &of);
        kt_bytes = kt_bytes > kt16 ? kt_bytes : kt16;
        apack_bytes = apack_bytes > ap16 ? apack_bytes : ap16;
    }
    p->kt = take(&slice, kt_bytes, 1, MHA_ALIGN, &of);
    p->scores = take(&slice, product((size_t)dims->q_block, lds, 1, &of), sizeof(float), MHA_ALIGN, &of);
    p->apack = take(&slice, apack_bytes, 1, MHA_ALIGN, &of);
    /* V (seq_kv, dk) in B panels; a key chunk may start 16 rows into a k tile and read a
     * tile past its end (those rows meet zero probabilities): one tile of room */
    p->vb = p->pb = 0;
    if (dims->bf16) {
        p->vb = take(&slice, product(mha_bk_b_elems(dims->seq_kv + MHA_BT_K, dims->dk), sizeof(mha_bf16), 1, &of), 1,
                     MHA_ALIGN, &of);
        /* the probabilities of a query block against one chunk of keys, rounded to bf16 in A
         * panels as each row is exp'd (the A·V product reads them packed) */
        const size_t chunk = MHA_KV_CHUNK, kv = mha_round_up((size_t)dims->seq_kv, (size_t)k->bw);
        p->pb = take(&slice, product(mha_bk_a_elems(dims->q_block, (int)(kv < chunk ? kv : chunk)), sizeof(mha_bf16), 1, &of),
                     1, MHA_ALIGN, &of);
    }
    p->inv = take(&slice, product(mha_attention_state_floats((size_t)dims->q_block, dk), 1, 1, &of), sizeof(float),
                  MHA_ALIGN, &of);
    p->dec = take(&slice, product(dec_q, MHA_KV_CHUNK + dk, 1, &of), sizeof(float), MHA_ALIGN, &of);
    p->scratch_stride = take(&slice, 0, 1, MHA_PAGE, &of); /* round the slice up to a page */
    p->scratch = take(&cur, threads, p->scratch_stride, MHA_PAGE, &of);
    p->total = cur;
    return of ? -1 : 0;
}

static void *at(unsigned char *base, size_t offset)
{
    return offset == MHA_ARENA_ABSENT ? NULL : base + offset;
}

void mha_arena_carve(const mha_arena_plan *p, void *base, mha_arena_views *v)
{
    unsigned char *b = base;
    v->engine = at(b, p->engine);
    v->wqkv = p->bf16 ? NULL : at(b, p->wqkv);
    v->wqkv16 = p->bf16 ? at(b, p->wqkv) : NULL;
    v->bqkv = at(b, p->bqkv);
    v->wo = p->bf16 ? NULL : at(b, p->wo);
    v->wo16 = p->bf16 ? at(b, p->wo) : NULL;
    v->bo = at(b, p->bo);
    v->z = at(b, p->z);
    v->xpack = at(b, p->xpack);
    v->order = at(b, p->order);
    v->deps = at(b, p->deps);
    v->xdeps = at(b, p->xdeps);
    v->worker_cpu = at(b, p->worker_cpu);
    v->pin_cpu = at(b, p->pin_cpu);
    v->rope_cos = at(b, p->rope_cos);
    v->rope_sin = at(b, p->rope_sin);
    v->step_row0 = at(b, p->step_row0);
    v->partial = at(b, p->partial);
    v->scratch = at(b, p->scratch);
}

void *mha_alloc_pages(size_t bytes)
{
    const size_t align = bytes >= MHA_HUGE_PAGE ? MHA_HUGE_PAGE : MHA_PAGE;
    const size_t rounded = (bytes + align - 1) / align * align;
    void *p = rounded < bytes ? NULL : aligned_alloc(align, rounded);
    if (p && align == MHA_HUGE_PAGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: without THP the pages stay small */
    return p;
}
