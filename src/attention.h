/* attention.h — the work of one head task and of one output-projection task. */
#ifndef MHA_ATTENTION_H
#define MHA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "bgemm.h"
#include "gemm.h"
#include "mha.h"
#include "softmax.h"

/* Rows of one output-projection task and of one input-packing task: fixed, so results never
 * depend on the thread count. MHA_PACK_BLOCK is a multiple of every microkernel's row panel. */
#define MHA_OUT_BLOCK 128
#define MHA_PACK_BLOCK 192
/* Keys per chunk of the online softmax: long rows are processed this many keys at a time, so
 * the score chunk, Kᵀ's and V's slices stay in L2 (rounded up to whole B panels). */
#define MHA_KV_CHUNK 512

/* What a query may see: the one source of the visibility rule, asked by the forward's query
 * blocks and rows, a step's gathers and its decode chunks alike. A query at position p sees
 * the keys [lo, hi) of [0, n): hi = p + 1 when causal (a window implies it), else n; lo =
 * p − window + 1 with a window, else 0; both clipped to [0, n] (lo may exceed hi: nothing). */
typedef struct mha_key_span { int lo, hi; } mha_key_span;
static inline mha_key_span mha_visible_keys(int p, int causal, int window, int n)
{
    int hi = causal || window > 0 ? p + 1 : n, lo = window > 0 ? p - window + 1 : 0;
    hi = hi < 0 ? 0 : hi > n ? n : hi;
    lo = lo < 0 ? 0 : lo > n ? n : lo;
    return (mha_key_span){lo, hi};
}
/* Of the keys [c0, c0 + len), which v sees, as offsets from c0: [hidden, visible). */
static inline mha_key_span mha_keys_within(mha_key_span v, int c0, int len)
{
    int visible = v.hi - c0, hidden = v.lo - c0;
    visible = visible < 0 ? 0 : visible > len ? len : visible;
    hidden = hidden < 0 ? 0 : hidden > visible ? visible : hidden;
    return (mha_key_span){hidden, visible};
}

/* One forward pass, as every task sees it (read-only during the pass). */
typedef struct mha_fwd {
    const mha_kernel *kernel;     /* BLIS's microkernel and the kernel table (kernel->isa) */
    int d, h, dk, dkp, q_block;   /* dkp: dk rounded up to whole B panels */
    int batch, seq_q, seq_kv;
    int rows;                     /* capacity rows of the Q/K/V scratch: max(max_seq_q, max_seq_kv) */
    ptrdiff_t ld_scores;          /* row stride of the score tile */
    int fused;                    /* q == k == v, seq_q == seq_kv: one GEMM gives Q|K|V */
    int kv_shared;                /* k == v: one GEMM gives K|V */
    int causal, has_bias;
    int kvh, group;               /* KV heads, query heads per KV head */
    int window;                   /* sliding window, 0: none */
    mha_rope_style rope;          /* MHA_ROPE_NONE: no rotation */
    int rope_dim;                 /* features rotated */
    const float *rope_cos, *rope_sin; /* (positions, rope_dim / 2) */
    const float *q, *k, *v;       /* (batch, seq_q, d), (batch, seq_kv, d) ×2 */
    const int32_t *q_len, *kv_len;/* NULL or (batch) */
    const uint8_t *mask;          /* NULL or (seq_q, seq_kv) */
    const float *wqkv, *bqkv;     /* per KV head: panels (d, (group + 2)·dkp); ((group + 2)·dkp) */
    const float *wo, *bo;         /* panels (d, round_up(d, bw)); (d) */
    const mha_bkernel *bk;        /* bf16 engines: the kernel of every product; NULL: float32 */
    const mha_bf16 *wqkv16, *wo16;/* bf16 engines: wqkv, wo in bf16 B panels of w_ps elements */
    size_t w_ps;
    float *z;                     /* (batch, seq_q, d) */
    float *xpack;                 /* per sequence (xpack_stride floats): q in A panels, all of d */
    size_t xpack_stride;
    float *out;                   /* (batch, seq_q, d) */
    float *attn;                  /* NULL or (batch, h, seq_q, seq_kv) */
} mha_fwd;

/* A worker's scratch slice, carved by the arena plan. */
typedef struct mha_scratch {
    float *qkv;     /* panels (rows, 3·dkp): Q | K | V of the current head */
    float *kt;      /* panels (dk, round_up(seq_kv, bw)): Kᵀ */
    float *scores;  /* (q_block, ld_scores) */
    float *apack;   /* mha_gemm_apack_floats */
    float *inv;     /* (2·q_block): each row's softmax sum (then its inverse), and running max */
    float *dec;     /* decode: (group·MHA_DECODE_ROWS) × (MHA_DECODE_CHUNK + dk): scores, queries */
    mha_bf16 *kt16; /* bf16: Kᵀ in B panels (the kt region) */
    mha_bf16 *v16;  /* bf16: V in B panels */
    mha_bf16 *p16;  /* bf16: a query block's probabilities in A panels (each row rounded as exp'd) */
    mha_bf16 *apack16; /* bf16: A packing (the apack region) */
} mha_scratch;

/* bf16: panel strides of Kᵀ (dk × keys) in s->kt16 and of V (keys × dk) in s->v16, which has
 * a k tile of room past the keys: a chunk that starts 16 keys into a tile reads that far;
 * those rows (zero) meet zero probabilities. */
static inline size_t mha_attention_kt16_ps(const mha_fwd *f)
{
    return mha_bk_ps(f->dk);
}
static inline size_t mha_attention_v16_ps(int kl)
{
    return mha_bk_ps(kl + MHA_BT_K);
}

/* Rows the head tasks project from the query input of sequence b (packed beforehand). */
int mha_attention_packed_rows(const mha_fwd *f, int b);
/* Packs rows [r0, r1) of sequence b's query input into f->xpack (r0 a multiple of the panel). */
void mha_attention_pack_rows(const mha_fwd *f, int b, int r0, int r1);

/* Q/K/V scratch columns [ccol, ccol + n) of rows [0, m) = x (m × d) · W[:, wcol : wcol + n]
 * (+ bias) of KV head g's weights. xp: x in A panels (packed once per sequence; bf16 A panels
 * in a bf16 engine), or NULL to pack here. */
void mha_attention_project(const mha_fwd *f, const mha_scratch *s, int m, const float *x, const float *xp, int g,
                           int wcol, int ccol, int n);
/* Attention of query head h for ql query rows over kl keys, with Q in the scratch's columns
 * [0, dkp), the head's Kᵀ in s->kt and V in columns [2·dkp, 3·dkp): query block by query
 * block, scores, softmax (causal: row i sees keys j <= i + off; the window; f->mask), A·V
 * into z_seq's columns of head h (rows ql, row stride d), each row divided by its sum.
 * attn: NULL, or this head's (seq_q, seq_kv) weights of a forward. */
void mha_attention_rows(const mha_fwd *f, int h, const mha_scratch *s, int ql, int kl, int off, float *z_seq,
                        float *attn);
/* KV head g of sequence b: its K and V projected (and rotated) once, then for each query
 * head of the group its Q, and query block by query block: scores, softmax, A·V into the
 * head's columns of z (and attn). */
void mha_attention_group(const mha_fwd *f, int b, int g, const mha_scratch *s);
/* out rows [r0, r1) of sequence b: z · Wo + bo; rows past the query length are 0. */
void mha_attention_out_rows(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s);

#endif
