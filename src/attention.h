/* attention.h — the attention's interface: what a pass reads (mha_call, mha_fwd), a worker's
 * scratch, a chunk's operands, and the work of the files that run it, in sections:
 * attention.c (what every path shares: a chunk row's math, the merge rule, the query blocks),
 * chunk.c (the chunk step of each precision and the packing of its operands), core.c (the
 * attention core's tasks) and forward.c (the forward's tasks). */
#ifndef MHA_ATTENTION_H
#define MHA_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "bgemm.h"
#include "blocking.h"
#include "gemm.h"
#include "mha.h"
#include "products.h"
#include "softmax.h"

/* Whether a sub-config's microkernel keeps that promise: one chunk in one KC pass, on whole B
 * panels (true of every BLIS 0.9 sub-config; an engine refuses one that does not). */
static inline int mha_attention_chunk_fits(const mha_kernel *k)
{
    return k->kc >= MHA_KV_CHUNK && MHA_KV_CHUNK % k->bw == 0;
}

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

/* How the attention packs a KV head's K and V and runs its chunks, one of three strategies
 * chosen once per engine (mha_attention_ops_of, chunk.c): float32 on BLIS's microkernel; bf16
 * on the engine's bf16 kernel; or bf16 whose chunks run the float32 stream on operands rounded
 * to bf16, where the table's stream sums as the bf16 kernel does (the same bits without
 * widening bf16 for every block: avx2). The forward, the core and the steps call through the
 * model's f->attn and never ask which. */
struct mha_fwd;
struct mha_scratch;
struct mha_chunk_rows;
struct mha_kv_view;
struct mha_core_io;
typedef struct mha_attention_ops {
    /* 1: K and V are float32 panels (float32 engines, and bf16 on the float32 stream); 0: the
     * bf16 kernel's B panels. */
    int float_panels;
    /* A KV head's kl keys, K's rows km and V's rows vm (float32), into what its chunks read
     * (mha_attention_rows' view): float32 Kᵀ in s->kt's panels and V in the Q/K/V scratch's V
     * columns (where the forward projects it: vm elsewhere is copied there); bf16 Kᵀ and V in
     * s->kt16 and s->v16's B panels; bf16 on the float32 stream: float32's, rounded to bf16
     * (with the attention weights, the B panels: their chunks are the bf16 kernel's). */
    void (*pack_kv)(const struct mha_fwd *f, const struct mha_scratch *s, int kl, mha_mat km, mha_mat vm);
    /* The same from bf16 rows (the core's bf16 tensors: K's rows ldk apart, V's ldv apart; bf16
     * engines only, NULL in float32's). */
    void (*pack_kv16)(const struct mha_fwd *f, const struct mha_scratch *s, int kl, const mha_bf16 *k16,
                      ptrdiff_t ldk, const mha_bf16 *v16, ptrdiff_t ldv);
    /* A query block's queries as every chunk of the block reads them: bf16 without the
     * attention weights packs them once into s->q16 (from r's float rows, or copies r's bf16
     * rows) and returns them; NULL: each chunk reads r->q (float32; bf16 with the weights or an
     * int8 cache's V, kv->vs; the float32 stream's chunks, which round their queries). */
    const mha_bf16 *(*block_queries)(const struct mha_fwd *f, const struct mha_scratch *s,
                                     const struct mha_chunk_rows *r, const struct mha_kv_view *kv);
    /* The core's few queries of a KV head as one block (core.c's core_few_rows): whether
     * the engine runs them so (float32: where d_k fits one KC pass, the decode tiles' sums
     * being the microkernel's), and the K and V of (sequence b, KV head g) of the core's
     * tensors io (kl keys from key k0) packed for it, *kv set to what the chunks then read (float32: K's
     * rows in place for the table's rows_scores, or Kᵀ in the decode tiles' panels, and V in
     * rows dv apart, read in place where the tensor's are, else copied into the Q/K/V scratch;
     * bf16, on the float32 stream too: K's rows as floats of their bf16 values and V's bf16
     * rows for rows_scores16 and decode_values16 where the table has them, else the kernel's B
     * panels, *kv as the caller set it). */
    int (*few_fits)(const struct mha_fwd *f);
    void (*pack_kv_few)(const struct mha_fwd *f, const struct mha_scratch *s, const struct mha_core_io *io, int b,
                        int g, int k0, int kl, struct mha_kv_view *kv);
    /* Whether the core's few queries read K's and V's rows in place (the table's rows_scores,
     * or bf16's rows_scores16 and decode_values16 in the kernel's order) rather than panels:
     * pack_kv_few's way, fixed by the table, the kernel, d_k and the group (core.c). */
    int few_rows;
    /* A causal block's diagonal chunk runs by groups of group_rows rows, each to the last key
     * its rows see rounded up to a multiple of group_keys (chunk.c's chunk_groups): the bf16
     * kernel's 32 rows and k tile, or two of the float32 microkernel's A panels and 1. */
    int group_rows, group_keys;
    /* One chunk: mha_attention_chunk's contract (attention.h). */
    void (*chunk)(const struct mha_fwd *f, const struct mha_scratch *s, const struct mha_chunk_rows *r,
                  const struct mha_kv_view *kv, int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx,
                  float *sum, ptrdiff_t st);
    /* A chunk row's exp (softmax.h's contract) in the engine's precision: the table's
     * softmax_row, or a bf16 engine's softmax_row_bf16. Its bf16 forms: exp_row16 rounds each
     * entry into a row of A tiles at p (as mha_bk_pack_a_row), exp_row_rounded leaves each as
     * the float of its bf16 rounding (as round_bf16_floats); exp_rows, exp_rows_rounded and
     * exp_rows16 are the three on softmax_rows' whole rows (row i's A tiles at d +
     * mha_bk_a_row(i, kp(n) / 32)). Each the table's one-pass function where it has one, else
     * its parts in turn or row by row, the same bits (mha_attention_exp_ops): no chunk asks
     * the table what it holds. */
    mha_softmax_fn exp_row;
    float (*exp_row16)(const struct mha_fwd *f, float *restrict s, int n, int visible, const uint8_t *restrict mask,
                       float *max_io, mha_bf16 *p);
    float (*exp_row_rounded)(const struct mha_fwd *f, float *restrict s, int n, int visible,
                             const uint8_t *restrict mask, float *max_io);
    void (*exp_rows)(const struct mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                     ptrdiff_t st);
    void (*exp_rows_rounded)(const struct mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                             ptrdiff_t st);
    void (*exp_rows16)(const struct mha_fwd *f, float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum,
                       ptrdiff_t st, mha_bf16 *d);
} mha_attention_ops;

/* The strategy of a float32 engine (bk NULL) or of a bf16 one (its kernel; on the float32
 * stream where kernel k's table has stream_rows16, bk sums even first and dk fits one KC pass),
 * for heads of dk features in groups of `group` query heads, into the engine's *ops, resolved
 * from k's table once. Returns ops. */
const mha_attention_ops *mha_attention_ops_of(mha_attention_ops *ops, const mha_bkernel *bk, const mha_kernel *k,
                                              int dk, int group);

/* One call's inputs and outputs: a forward's (mha_input), the core's sizes and masks, or a
 * step's (causal, out; its tokens come through mha_step_job). */
typedef struct mha_call {
    int batch, seq_q, seq_kv;
    int fused;                    /* q == k == v, seq_q == seq_kv: one GEMM gives Q|K|V */
    int kv_shared;                /* k == v: one GEMM gives K|V */
    int causal;
    const float *q, *k, *v;       /* (batch, seq_q, d), (batch, seq_kv, d) ×2 */
    const int32_t *q_len, *kv_len;/* NULL or (batch) */
    const uint8_t *mask;          /* NULL or (seq_q, seq_kv) */
    float *out;                   /* (batch, seq_q, d); a step's (rows, d) */
    float *attn;                  /* NULL or (batch, h, seq_q, seq_kv) */
} mha_call;

/* The engine's buffers that a pass's tasks write, each task its own rows (beside its worker's
 * mha_scratch and the call's out and attn): allocated in the arena at create, the pointers
 * fixed from then on. Nothing else a task reaches through mha_fwd is written during a pass. */
typedef struct mha_fwd_buffers {
    float *z;                     /* (batch, seq_q, qd) */
    float *xpack;                 /* per sequence (xpack_stride floats): q in A panels, all of d */
    size_t xpack_stride;
    double *q_ss, *k_ss;          /* kind full, else NULL: each row's sums of squares of Q (K),
                                   * kvh per row, one per KV head's part (mha_attention_norm_sums) */
    float *k_saved;               /* kind full, else NULL: K as those tasks projected it, row r
                                   * (forward: b·seq_kv + key; steps: the step's row) at
                                   * r·kvh·dk, KV head g's dk at g·dk; their Q goes in z */
    float *mla_k, *mla_z;         /* MLA, else NULL: (batch·seq_kv, dk): [c | k_rope]; (batch·seq_q,
                                   * h·dv): latent outputs */
} mha_fwd_buffers;

/* What every task of a pass sees, read-only during it (tasks take a const mha_fwd *), in three
 * parts: the call (set per pass on a copy of the engine's model), the buffers the tasks write
 * (buf), and the model, made once at create (engine.c's make_model) and never changed after:
 * sizes, numerics, strategies and the weights' views, every pointer to const. */
typedef struct mha_fwd {
    /* the call */
    const mha_call *call;         /* this call's inputs and outputs */
    /* the buffers */
    mha_fwd_buffers buf;
    /* the model */
    const mha_kernel *kernel;     /* BLIS's microkernel and the kernel table (kernel->isa) */
    int d, h, dk, dkp, q_block;   /* dkp: dk rounded up to whole B panels */
    int dv;                       /* V's features per head, each head's output's: dk, or less
                                   * in the core (v_head_dim: V may be K's first dv features);
                                   * an MLA engine's step model: dk (V in its cache is K whole) */
    int qd;                       /* h·dk: the width of Z (and of Q) */
    int rows;                     /* capacity rows of the Q/K/V scratch: max(max_seq_q, max_seq_kv) */
    ptrdiff_t ld_scores;          /* row stride of the score tile */
    int has_bias;
    int kvh, group;               /* KV heads, query heads per KV head */
    int window;                   /* sliding window, 0: none */
    float scale, softcap;         /* the scores' factor; logit softcap (0: none) */
    const float *sinks;           /* NULL or (h): each head's sink logit, merged after the keys */
    const float *alibi;           /* NULL or (h): each head's ALiBi slope */
    const float *q_norm, *k_norm; /* NULL or QK-norm's RMSNorm factors (w or 1 + w): (dk), or
                                   * (qd) and (kvh·dk) for the whole projection (kind full) */
    float norm_eps;
    mha_rope_style rope;          /* MHA_ROPE_NONE: no rotation */
    int rope_dim;                 /* features rotated */
    const float *rope_cos, *rope_sin; /* (positions, rope_dim / 2) */
    const mha_products *prod;     /* the products on packed weights, in the engine's precision */
    const mha_attention_ops *attn;/* how its attention packs K and V and runs its chunks */
    const mha_bkernel *bk;        /* bf16 engines: the kernel of every product; NULL: float32 */
    const void *wqkv;             /* packed by prod (d rows, kvh·width columns, width (group + 2)·dkp):
                                   * KV head g's [Wq_{g·G} | Wk_g | Wv_g | Wq_{g·G+1} | …] at column
                                   * g·width, each part dkp wide */
    const float *bqkv;            /* per KV head: (width) */
    const void *wo;               /* packed by prod: (qd, d) */
    const float *bo;              /* (d) */
    /* MLA engines (mla.h), else NULL and zero: z holds Q_abs (rows of h·dk) */
    const struct mha_mla_plan *mla; /* where the weights sit */
    mha_mla mla_dims;             /* the config's widths */
    const void *mla_w;            /* the weights packed by prod, each at its offset (elements) */
    const float *mla_v;           /* the RMSNorms' factors and the biases */
} mha_fwd;

/* A worker's scratch slice: its parts in the order the arena plan carves them from the
 * slice's start, each MHA_ALIGN-aligned (arena.c sizes each in region_bytes; the slice's own
 * list, as MHA_ARENA_REGIONS is the arena's): name, element type, what it holds. */
#define MHA_SLICE_REGIONS(X)                                                                    \
    X(qkv, float)     /* panels (rows, 3·dkp): Q | K | V of the current head */                \
    X(kt, float)      /* panels (dk, round_up(seq_kv, bw)): Kᵀ (bf16: kt16, the larger) */     \
    X(scores, float)  /* (q_block, ld_scores) */                                               \
    X(apack, float)   /* mha_gemm_apack_floats (bf16: apack16, the larger) */                  \
    X(wq16, mha_bf16) /* bf16 engines with block weights: their panels dequantized (qgemm.h) */ \
    X(v16, mha_bf16)  /* bf16: V in B panels */                                                \
    X(p16, mha_bf16)  /* bf16: 32 rows' probabilities against one chunk in A panels (each row  \
                         rounded as exp'd) */                                                  \
    X(q16, mha_bf16)  /* bf16: a query block's queries in A panels, packed once for its chunks \
                         (or the core's few queries of a group); on the float32 stream, a    \
                         chunk's queries as float rows */                                      \
    X(state, float)   /* mha_attention_state_floats: each row's softmax sum (then its inverse) \
                         and max, a chunk's sum and max, a chunk's Z (q_block × dk) */         \
    X(dec, float)     /* decode: (group·MHA_DECODE_MAX_NEW) × (MHA_KV_CHUNK + 2·dk + 3):       \
                         scores, queries, a chunk's partials that its task folds, the rows'   \
                         V zero sums (step.c) */                                               \
    X(kvs, float)     /* bf16 engines with an int8 cache: V's parameters (scale, zero point)  \
                         of a context's keys (2 · seq_kv) */                                   \
    X(k8, float)      /* int8 cache: a group's Kᵀ as a query sees it (MHA_KV_GROUP · dk), the  \
                         parameters (2 · dk) and values (MHA_KV_GROUP · dk bytes) of a group    \
                         quantized in a step (step.c's k_view); or a group's integer scores   \
                         and a chunk's queries (mha_int8_keys_room, MHA_INT8_ROWS · dk) */     \
    X(mla, float)     /* MLA: a row block's q_a and Q, or its heads' values (mha_mla_plan's    \
                         scratch) */

typedef struct mha_scratch {
#define MHA_SLICE_FIELD(name, type) type *name;
    MHA_SLICE_REGIONS(MHA_SLICE_FIELD)
#undef MHA_SLICE_FIELD
    mha_bf16 *kt16;    /* bf16: Kᵀ in B panels, in the kt part */
    mha_bf16 *apack16; /* bf16: A packing, in the apack part */
} mha_scratch;

/* The products' context of a worker of the model f (mha_products.gemm). */
static inline mha_gemm_ctx mha_fwd_gemm(const mha_fwd *f, const mha_scratch *s)
{
    return (mha_gemm_ctx){f->kernel, f->bk, f->bk ? (void *)s->apack16 : (void *)s->apack, s->wq16};
}

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

/* Floats of a worker's softmax state (s->state) for query blocks of q_block rows. */
static inline size_t mha_attention_state_floats(size_t q_block, size_t dk)
{
    return q_block * (4 + dk);
}

/* An int8 cache's stored K groups in a step's prefill (mha_kv_view.i8): the scores of the keys
 * before position `own` (every one in a group stored before the rows' own) are integer scores on the groups' codes (isa.h's int8_scores), the chunk's products on
 * them replaced: scores(i8, q, nq, k0, k1, sc, ld, s) puts nq queries' (q: rows dk apart) for the
 * keys [k0, k1) into sc (query qi's key k0 at sc[qi · ld]). What decode's tiles give the same
 * (query, key): one value however a step's rows were cut. */
typedef struct mha_int8_keys {
    int own;
    void (*scores)(const struct mha_int8_keys *i8, const float *q, int nq, int k0, int k1, float *sc, size_t ld,
                   const struct mha_scratch *s);
    const void *job; /* the step's (mha_step_job) */
    int seq, g;
} mha_int8_keys;

/* Rows of queries an int8 cache's chunk gathers at a time for mha_int8_keys.scores. s->k8 as
 * the integer scores take it (mha_step_int8_scores), in floats: a group's float16 parameters
 * (2 · dk) at 0, its codes quantized in a step (MHA_KV_GROUP · dk bytes) at INT8_CODES_AT · dk,
 * the scores of MHA_INT8_ROWS queries for a group cut short at INT8_PART_AT · dk; a chunk's
 * queries gathered past them all (mha_int8_keys_room). */
enum { MHA_INT8_ROWS = 32, MHA_INT8_CODES_AT = 1, MHA_INT8_PART_AT = 5 };
static inline size_t mha_int8_keys_room(int dk)
{
    return MHA_INT8_PART_AT * (size_t)dk + MHA_INT8_ROWS * MHA_KV_GROUP;
}

/* Kᵀ and V of the keys a chunk reads: float32 (kt: panels of dk rows; v: rows are keys), or
 * bf16 B panels (kt16 of kps, v16 of vps elements per panel). */
typedef struct mha_kv_view {
    mha_mat kt, v;
    const mha_bf16 *kt16, *v16;
    size_t kps, vps;
    const float *vs;        /* an int8 cache's V parameters of each key from the operands' key 0
                             * (mha_attention_chunk_row's pairs; the V panels then hold the int8
                             * values themselves, and the scores are
                             * float32 products on the queries unrounded and kt, Kᵀ as the cache
                             * holds it, as a float32 engine's, its stored groups' integer: i8);
                             * NULL: none */
    int kl;                 /* keys the operands hold (kt and v: the bf16 panels' room past them
                             * is zero; mha_attention_chunk_stream) */
    const float *ktp, *vp;  /* float32 engines, or NULL: Kᵀ in panels of MHA_TILE_KEYS keys (key
                             * j's feature c at (j / 16)·16·dk + c·16 + j % 16) and V in rows dk
                             * apart, from the operands' key 0, read by the table's decode tiles
                             * (decode_scores, decode_values: the microkernel's sums) in place of
                             * the kt and v panels */
    const float *kr;        /* or (the core's few queries, a table with rows_scores) K's rows in
                             * place, key j at kr + j·krl: rows_scores' scores, the same bits;
                             * bf16 engines: rows of bf16 values (rows_scores16), V's rows at
                             * vr16 (dv apart) read by decode_values16, the kernel's bits */
    ptrdiff_t krl;
    const mha_bf16 *vr16;
    const mha_int8_keys *i8; /* an int8 cache's stored groups (a step's prefill), or NULL */
} mha_kv_view;

/* A head's query rows: float32 (q), or bf16 rows ld16 apart (q16: the core's bf16 tensors, a bf16
 * engine without attention weights; q then unused). */
typedef struct mha_queries {
    mha_mat q;
    const mha_bf16 *q16;
    ptrdiff_t ld16;
} mha_queries;

/* Rows of a chunk: m query rows, row i at position pos0 + (first + i) % period (the forward:
 * one head's consecutive rows, first 0, period ≥ m; decode: rows first.. of query heads × new
 * tokens, period = new tokens). */
typedef struct mha_chunk_rows {
    int m, pos0, first, period, causal;
    int head0;              /* row i's query head: head0 + (first + i) / period */
    mha_mat q;              /* (m × dk) float32 queries (bf16: rounded as the kernel packs them) */
    const mha_bf16 *q16;    /* bf16: NULL, or those queries packed (mha_bk_pack_a), once for
                             * every chunk of the block */
    const mha_bf16 *q16_rows; /* bf16: NULL, or the queries as bf16 rows q16_ld apart (the core's
                               * bf16 tensors; q unused), copied into the packed form as they are */
    ptrdiff_t q16_ld;
    const uint8_t *mask;    /* NULL or the explicit mask at key c0 of the query at pos0: row i
                             * reads row (first + i) % period, rows seq_kv apart */
    int scored;             /* the scores are in sc already, rows ld apart (an int8 cache's in a
                             * step, the decode tiles' float32 products: mha_kv_view.vs): the
                             * chunk starts at the logits (bf16 without attention weights only:
                             * a step never wants them) */
} mha_chunk_rows;

/* ---- attention.c: what every path shares ---- */

/* The merge rule: chunk partial (zc: its unnormalised Z over dk features, exp'd against its
 * own max mc; sc: its sum) into the running (z, *m, *s), chunk after chunk in key order. The
 * forward and decode both merge with it, so they agree bit for bit. A chunk the row sees none
 * of (mc = −∞) changes nothing; the first one it sees is taken as it is (exp(0) = 1). Its
 * loops are the table's merge_row and scale_row (ref's bits in every table). */
void mha_softmax_merge(const struct mha_isa *isa, float *restrict z, float *m, float *s, const float *restrict zc,
                       float mc, float sc, int dk);

/* A sink logit (gpt-oss) merged into the running (z, *m, *s) after every chunk, by the merge
 * rule, as one more key whose value is zero; forward and decode alike. Returns the factor the
 * row's terms so far were scaled by (the attention weights of a forward need it). */
float mha_softmax_sink(const struct mha_isa *isa, float *z, float *m, float *s, float sink, int dk);

/* A row's end after its last chunk, forward and decode alike: the sink (NULL: none) merged,
 * then z divided by the sum (no key seen: a zero row). Returns what the row's exp'd terms so far
 * were multiplied by in all (the attention weights of a forward need it). */
float mha_softmax_end(const struct mha_isa *isa, float *z, float *m, float *s, const float *sink, int dk);

/* A chunk row's logits past the scaled scores, over the keys c0 + j the row sees (j in
 * [in.lo, in.hi)), in HF's order: the softcap, ALiBi's −slope·|pos − key| (head's slope), then
 * −∞ for j < in.lo (before the window). mha_attention_chunk_row calls it for every path: one
 * source of these bits. */
void mha_attention_logits(const mha_fwd *f, float *row, mha_key_span in, int pos, int c0, int head);
/* One row of a chunk's scores (n keys from c0; the row at position pos, query head `head`,
 * sees the keys in `in`) into its unnormalised softmax: the logits, the exp against the row's
 * max (*mx) with the mask (or NULL; a bf16 engine's exp, softmax_row_bf16, in every form,
 * rounded or not: the attention weights' too), then, with an int8 cache's V parameters (vs: key j's
 * scale at [2j], zero point at [2j + 1]; or NULL), *zs = Σ_j e_j·zero_j (key j into lane j % 8
 * of 8 sums, each in key order, then the lanes ((0 + 4) + (1 + 5)) + ((2 + 6) + (3 + 7)): 8
 * chains, where one would make each addition wait on the last) and each e_j times its scale:
 * Z = E·V is then (E·scales)·q + zs in every feature (mha_attention_v_zero).
 * Returns the sum (of E before the V scales). p: NULL, or E rounded to bf16 into a row of A
 * tiles at p (mha_bk_pack_a_row's; without V parameters f->attn->exp_row16), the row then left
 * as that leaves it; else rounded: E left in the row as the floats of its bf16 rounding (after
 * the V scales; without them f->attn->exp_row_rounded). The forward's chunks and every decode
 * path run it: one source of these bits. */
float mha_attention_chunk_row(const mha_fwd *f, float *row, int n, mha_key_span in, int pos, int c0, int head,
                              const uint8_t *mask, const float *vs, float *mx, mha_bf16 *p, int rounded, float *zs);
/* The exp forms of ops (mha_attention_ops.exp_row …) for a float32 engine (bf16 0) or a bf16
 * one on table isa: each the table's where it has it, else composed of its parts. */
void mha_attention_exp_ops(mha_attention_ops *ops, const struct mha_isa *isa, int bf16);
/* A row's Z (n features) plus its V zero points' share zs (mha_attention_chunk_row), after
 * the row's E·q: the same bits in the forward's chunk and the decode tiles. */
void mha_attention_v_zero(float *z, int n, float zs);
/* HF's RMSNorm factor of a row whose n features' squares sum to sq (summed in double: HF's
 * float32 mean within its rounding): rsqrt(mean(x²) + eps), as float32. QK-norm and MLA's
 * latent norms alike: one source of these bits. */
static inline float mha_rms_factor(double sq, int n, float eps)
{
    return 1.0f / sqrtf((float)(sq / n) + eps);
}
/* QK-norm of rows [0, rows) of the Q/K/V scratch at column col (Q at 0, K at dkp), of query
 * head `head` (is_k: of KV head `head`): each row's dk features times rsqrt(mean(x²) + eps),
 * then times the factors (f->q_norm, f->k_norm). The mean is over the row's dk features, or
 * with ss (kind full: the rows' sums of squares, kvh per row, row 0 first) over the whole
 * projection: the KV heads' parts summed in order. Nothing without QK-norm. Forward and
 * steps alike. */
void mha_attention_norm_rows(const mha_fwd *f, mha_mat qkv, int rows, int col, int is_k, int head, const double *ss);
/* Sums of squares of rows [0, rows) of the scratch at column col over dk features, in feature
 * order in double, into ss[i·kvh] (add: onto what is there): one KV head's part of each row. */
void mha_attention_sum_squares(const mha_fwd *f, mha_mat qkv, int rows, int col, double *ss, int add);

/* ALiBi's slope of each of h heads for max_bias, as BLOOM's build_alibi_tensor and ggml: with
 * n the largest power of two <= h, head i < n has m0^(i+1), m0 = 2^(−max_bias/n), and the rest
 * m1^(2(i−n)+1), m1 = 2^(−max_bias/(2n)). */
void mha_alibi_slopes(int h, float max_bias, float *slopes);

/* The keys [*begin, end) of a block of queries at positions p0 .. p1 (kl keys): from the chunk
 * (or with align, the multiple of align) holding p0's first visible key to p1's last one.
 * Returns end. */
static inline int mha_attention_block_keys(const mha_fwd *f, int p0, int p1, int kl, int align, int *begin)
{
    const int end = mha_visible_keys(p1, f->call->causal, f->window, kl).hi;
    const int b = mha_visible_keys(p0, f->call->causal, f->window, kl).lo / align * align;
    *begin = b > end ? end : b;
    return end;
}
/* One block of r->m rows (r->first 0) over the keys [kv_begin, kv_end), in chunks of step from
 * kv_begin (their scores in sc, ld apart): Z (z, rows zd apart) zeroed, the first chunk straight
 * into it (mha_softmax_merge would take it as it is), each later one into the state's cz, then
 * merged in key order; after every key, each row's head's sink, and each row / its sum (a row
 * with no visible key stays 0). st: the rows' sum and max, the chunk's, the chunk's Z (4·m +
 * m·dv floats); sum (st[i]) becomes what the attention weights are scaled by. The forward's
 * query blocks and the core's few queries alike: one source of these bits. */
void mha_attention_block(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                         int kv_begin, int kv_end, int step, float *sc, ptrdiff_t ld, float *z, ptrdiff_t zd,
                         const float *sinks, float *st);
/* Attention of query head h for ql query rows (of q: the scratch's columns [0, dkp), or the
 * core's Q in place) over kl keys, with the head's Kᵀ in s->kt and V in the scratch's columns
 * [2·dkp, 3·dkp) (bf16: both in B panels, s->kt16 and s->v16): query block by query
 * block, scores, softmax (causal: row i sees keys j <= i + off; the window; f->mask), A·V
 * into z (ql rows of dk features, ldz apart), each row divided by its sum. sinks: NULL, or
 * each head's sink logit. attn: NULL, or this head's (seq_q, seq_kv) weights of a forward.
 * vs: NULL, or an int8 cache's V parameters of the kl keys (mha_kv_view's); i8: NULL, or its
 * stored K groups (mha_kv_view's). */
void mha_attention_rows(const mha_fwd *f, int h, const mha_scratch *s, mha_queries q, int ql, int kl, int off, float *z,
                        ptrdiff_t ldz, const float *sinks, float *attn, const float *vs, const mha_int8_keys *i8);

/* ---- chunk.c: the chunk step of each precision and the packing of its operands ---- */

/* One chunk: the keys [c0, c0 + n) (kv's operands from key b0: the chunk's first key), scores
 * = Q·Kᵀ·f->scale into sc (row stride ld) and their logits (mha_attention_logits), each row's
 * visible keys exp'd against the row's own max in this chunk (mx[i·st]; −∞: nothing visible)
 * with their sum (sum[i·st]), and the unnormalised Z = E·V into zc (m × dk). With kv->vs, E
 * is multiplied by vs[key] as it enters A·V (the sum is of E itself): the attention of an int8
 * cache's V read back, its values exact in bf16.
 * bf16 without the attention weights: 32 rows at a time through scores, E (rounded into s->p16
 * as each row is exp'd) and A·V; with them, all m rows, E kept in float32 in sc (m <= q_block).
 * The chunk step of the forward and of bf16 decode: one source of their bits. */
void mha_attention_chunk(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                         int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                         ptrdiff_t st);
/* The attention's operations of each strategy (mha_attention_ops_of's tables). */
void mha_attention_chunk_f32(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                             int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                             ptrdiff_t st);
void mha_attention_chunk_bf16(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r, const mha_kv_view *kv,
                              int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc, float *mx, float *sum,
                              ptrdiff_t st);
void mha_attention_chunk_stream(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                const mha_kv_view *kv, int b0, int c0, int n, float *sc, ptrdiff_t ld, mha_mat zc,
                                float *mx, float *sum, ptrdiff_t st);
void mha_attention_pack_kv_f32(const mha_fwd *f, const mha_scratch *s, int kl, mha_mat km, mha_mat vm);
void mha_attention_pack_kv_bf16(const mha_fwd *f, const mha_scratch *s, int kl, mha_mat km, mha_mat vm);
void mha_attention_pack_kv_stream(const mha_fwd *f, const mha_scratch *s, int kl, mha_mat km, mha_mat vm);
void mha_attention_pack_kv16_bf16(const mha_fwd *f, const mha_scratch *s, int kl, const mha_bf16 *k16, ptrdiff_t ldk,
                                  const mha_bf16 *v16, ptrdiff_t ldv);
void mha_attention_pack_kv16_stream(const mha_fwd *f, const mha_scratch *s, int kl, const mha_bf16 *k16,
                                    ptrdiff_t ldk, const mha_bf16 *v16, ptrdiff_t ldv);
const mha_bf16 *mha_attention_block_queries_f32(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                                const mha_kv_view *kv);
const mha_bf16 *mha_attention_block_queries_bf16(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                                 const mha_kv_view *kv);
const mha_bf16 *mha_attention_block_queries_stream(const mha_fwd *f, const mha_scratch *s, const mha_chunk_rows *r,
                                                   const mha_kv_view *kv);

/* ---- core.c: the attention core's tasks ---- */

/* The attention core's tensors (mha_core_forward): element (b, head, row, c) of each at
 * p[b·st[0] + head·st[1] + row·st[2] + c], strides in elements (resolved: never all zero). */
typedef struct mha_core_io {
    const void *q, *k, *v; /* float32, or bf16 (mha_bf16) with bf16 set: a bf16 engine's */
    void *out;
    int bf16;
    ptrdiff_t q_st[3], k_st[3], v_st[3], o_st[3]; /* strides */
    const float *sinks; /* NULL or (h) */
    float *partial;     /* the few queries' chunk partials (the engine's decode partials region,
                         * mha_attention_core_keys), or NULL: no call's keys split */
} mha_core_io;
/* Query heads [h0, h1) (of KV head g's group) of sequence b of the core, part `part` of its
 * rows (of `parts`: mha_attention_core_part): the keys those rows see of g's K and V copied
 * into the scratch (Kᵀ packed once), then for each of those heads its Q and
 * mha_attention_rows into out (part 0: rows past the query length zeroed). A few queries a
 * head (core_few) run the group's heads as the rows of one pass: part 0 of the block with the
 * group's first head runs them all, the others nothing. A row's bits depend on neither the
 * block nor the part. f holds the call's sizes, lengths, mask and causal flag. */
void mha_attention_core(const mha_fwd *f, const mha_core_io *io, int b, int g, int h0, int h1, int part, int parts,
                        const mha_scratch *s);
/* The rows [*r0, *r1) of sequence b's queries that part `part` of `parts` runs: cut at query
 * blocks (f->q_block from row 0, so each block is the unsplit call's), the parts' blocks'
 * visible keys about equal (a causal sequence's later rows see more); parts 1 or an explicit
 * mask (whose rows mha_attention_rows takes from the call's first): all of them in part 0. */
void mha_attention_core_part(const mha_fwd *f, int b, int part, int parts, int *r0, int *r1);
/* A few queries' keys split over tasks, as a decode step splits a cache's (io->partial: the
 * results depend on neither the split nor the thread count). mha_attention_core_chunks: where
 * sequence b's queries run as one block of few rows (mha_attention_core's core_few), the end of
 * the chunks of MHA_KV_CHUNK keys they see and (*first) the first; else 0. core_keys: chunks
 * [c0, c1) of them (within those) into their partials; core_merge, after every chunk's: the
 * partials merged in chunk order, the sink and the division, into out (as mha_attention_core
 * writes it, zero rows past the query length). */
int mha_attention_core_chunks(const mha_fwd *f, int b, int *first);
void mha_attention_core_keys(const mha_fwd *f, const mha_core_io *io, int b, int g, int c0, int c1,
                             const mha_scratch *s);
void mha_attention_core_merge(const mha_fwd *f, const mha_core_io *io, int b, int g, const mha_scratch *s);
/* Query heads of a block of the core's tasks: the group, halved while above 16 and even (a
 * KV head of many query heads, MQA's or MLA's, is more than one task). */
int mha_attention_head_block(int group);
/* The core's few queries in each precision (products.c's tables: few_fits, pack_kv_few). */
int mha_attention_few_fits_f32(const mha_fwd *f);
int mha_attention_few_fits_bf16(const mha_fwd *f);
/* mha_attention_ops.few_rows of a float32 engine (bk NULL) or a bf16 one on table isa. */
int mha_attention_few_rows(const mha_bkernel *bk, const struct mha_isa *isa, int dk, int group);
void mha_attention_pack_kv_few_f32(const mha_fwd *f, const mha_scratch *s, const struct mha_core_io *io, int b, int g,
                                   int k0, int kl, mha_kv_view *kv);
void mha_attention_pack_kv_few_bf16(const mha_fwd *f, const mha_scratch *s, const struct mha_core_io *io, int b, int g,
                                    int k0, int kl, mha_kv_view *kv);

/* ---- forward.c: the forward's tasks ---- */

/* Rows the head tasks project from the query input of sequence b (packed beforehand). */
int mha_attention_packed_rows(const mha_fwd *f, int b);
/* Packs rows [r0, r1) of sequence b's query input into f->buf.xpack (r0 a multiple of the panel). */
void mha_attention_pack_rows(const mha_fwd *f, int b, int r0, int r1);

/* Q/K/V scratch columns [ccol, ccol + n) of rows [0, m) = x (m × d) · W[:, wcol : wcol + n]
 * (+ bias) of KV head g's weights. xp: x in A panels (packed once per sequence; bf16 A panels
 * in a bf16 engine), or NULL to pack here. */
void mha_attention_project(const mha_fwd *f, const mha_scratch *s, int m, const float *x, const float *xp, int g,
                           int wcol, int ccol, int n);
/* KV head g of sequence b: its K and V projected (and rotated) once, then for each query
 * head of the group its Q, and query block by query block: scores, softmax, A·V into the
 * head's columns of z (and attn). */
void mha_attention_group(const mha_fwd *f, int b, int g, const mha_scratch *s);
/* QK-norm over the whole projection (kind full), before any group task of sequence b: KV
 * head g's part of each row's sums of squares, its K's (f->buf.k_ss) and its query heads' Q's
 * (f->buf.q_ss), projected as mha_attention_group would project them; the projections kept for
 * it (K in f->buf.k_saved, each Q in its head's columns of z), so it projects only V. */
void mha_attention_norm_sums(const mha_fwd *f, int b, int g, const mha_scratch *s);
/* Its work and mha_step_norm_sums': KV head g's K of kl rows from xk (xkp: those rows packed,
 * or NULL), row i's part at row k0 + i of f->buf.k_ss and f->buf.k_saved, and its query heads' Q of
 * ql rows from xq (xqp), row i's part at row q0 + i of f->buf.q_ss and, projected, of z. */
void mha_attention_norm_part(const mha_fwd *f, const mha_scratch *s, int g, int kl, const float *xk, const float *xkp,
                             size_t k0, int ql, const float *xq, const float *xqp, size_t q0);
/* out rows [r0, r1) of sequence b: z · Wo + bo; rows past the query length are 0. */
void mha_attention_out_rows(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s);

#endif