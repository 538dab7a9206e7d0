/* isa.h — one table of the engine's instruction-set-specific operations per ISA, chosen once
 * per engine (mha_config.isa), in the spirit of BLIS's context: the drivers (gemm.c, bgemm.c,
 * attention.c, step.c) hold the loops, blocking and bookkeeping and call through the table;
 * every intrinsic and target attribute of the library lives in src/isa/. Adding an ISA is a
 * new file and a row in mha_isa_tables.
 *
 *   ref     portable C: a complete engine and the definition of the numerics; every vector
 *           table is tested against it where it promises the same bits
 *   avx2    AVX2 + FMA + F16C (AMD Zen 1-3, Intel Haswell and later client parts)
 *   avx512  AVX-512 F/BW/VL/DQ, with the AVX512_BF16 and AMX-BF16 products where present
 *   neon    aarch64's Advanced SIMD (every ARMv8-A core), its bf16 products ref's
 *
 * A table's operations give the same bits as ref's wherever the comment says so; where they
 * do not (softmax's exp lanes, bf16 products in another pair order) the tests hold them to
 * the double reference. */
#ifndef MHA_ISA_H
#define MHA_ISA_H

/* Every table's promise of the same bits as ref's, and of one order for every sum, assumes
 * IEEE arithmetic as written: -ffast-math (or -Ofast) reassociates sums, contracts products
 * into FMAs and flushes denormals, so results would change with blocking and ISA. */
#ifdef __FAST_MATH__
#error "mha must not be built with -ffast-math or -Ofast: the engine's bitwise guarantees (same bits for every thread count, each vector kernel equal to the portable one) need IEEE arithmetic as written"
#endif

#include <stddef.h>
#include <stdint.h>

#include "bgemm.h"
#include "blocking.h"
#include "gemm.h"
#include "kvcache.h" /* MHA_KV_TYPES: the per-type operations */
#include "qkernels.h"
#include "softmax.h"

/* Memory to bring into cache while a tile computes from cache: n regions of `bytes` each
 * (bf16 decode's values: the next chunk's regions of the KV head, one per block). */
typedef struct mha_prefetch {
    const void *at[MHA_KV_CHUNK];
    int n;
    size_t bytes;
} mha_prefetch;

/* A walk over a prefetch list, `per` lines into L2 a step (a value tile steps it once a key or
 * key pair), from region r's byte off on. */
typedef struct mha_prefetch_walk {
    const mha_prefetch *pf;
    int r, per;
    size_t off;
} mha_prefetch_walk;

/* The lines a float32 value tile's walk brings in a key (decode_values' w): the next chunk's
 * 128 KiB (a group of 4 queries' keys, float32) in about 512 of its key steps. */
enum { MHA_VALUES_PREFETCH = 4 };

static inline __attribute__((always_inline)) void mha_prefetch_step(mha_prefetch_walk *w)
{
    for (int i = 0; i < w->per && w->r < w->pf->n; i++) {
        __builtin_prefetch((const char *)w->pf->at[w->r] + w->off, 0, 2); /* prefetcht1: into L2 */
        if ((w->off += 64) >= w->pf->bytes)
            w->r++, w->off = 0;
    }
}

/* Rows to bring into cache as a few queries' scores read K's rows (rows_scores): key t's row
 * at at + t·ld (bytes), its first `bytes`: the keys' value rows, for the values after. */
typedef struct mha_rows_ahead {
    const char *at;
    size_t ld, bytes;
} mha_rows_ahead;

/* n keys as rows, key t's dk features at k + t·ld: K where the core's caller keeps it, as its few
 * queries' scores read it (rows_scores, rows_scores16); v (or NULL): the keys' value rows, to
 * bring into L2 as their scores are summed. */
typedef struct mha_key_rows {
    const float *k;
    ptrdiff_t ld;
    int n;
    const mha_rows_ahead *v;
} mha_key_rows;

/* int8_scores' pass: at most this many features' products in one int32 sum (|u| <= 32767,
 * |code| <= 128: 512 · 32767 · 128 < 2^31); and the largest |q| of a pass below which its
 * queries' u are 0 (32767 / mq would overflow float32 near 1e-34; such a query's scores are
 * its zero points' sums, which its products would change by less than 1e-25). */
enum { MHA_INT8_PASS = 512 };
#define MHA_INT8_TINY 0x1p-100f

/* A chunk's keys as the decode score tiles read them (decode_scores, decode_scores16): `runs` runs
 * of slots, run r of n[r] slots with Kᵀ at kt[r] (feature c of slot t at element c · ld + t); a
 * scaled type's K parameters of run r's first group at kp[r] (kp NULL for an unscaled type); the
 * runs' value rows at vr[r], for a table to prefetch as it sums the scores (vr NULL: none). */
typedef struct mha_key_runs {
    int runs, ld;
    const int *n;
    const void *const *kt;
    const void *const *vr;
    const mha_f16 *const *kp;
} mha_key_runs;

/* nq >= 1 queries (q: rows dk apart) and where their scores go (query qi's at sc + qi · sc_ld),
 * each sum times scale. beta_fused: the engine's mha_kernel.beta_fused, how decode_scores ends
 * a pass after the first. */
typedef struct mha_score_rows {
    const float *q;
    int nq, dk;
    float scale;
    float *sc;
    size_t sc_ld;
    int beta_fused;
} mha_score_rows;

/* One kernel of int8_scores' contract (mha_isa.int8_scores): every one the same bits. */
typedef struct mha_int8_scores_ops {
    const char *name;  /* "avx512-vnni", "avx2", "ref" */
    const char *needs; /* CPU features beyond its table's, as lscpu names them ("" none) */
    void (*run)(const mha_score_rows *s, const mha_key_runs *k);
} mha_int8_scores_ops;

/* nq >= 1 queries' probabilities (query qi's row at e + qi · e_ld) and the dk features of the
 * partial Z a value tile adds their values into (query qi's at p + qi · ps). */
typedef struct mha_value_rows {
    const float *e;
    size_t e_ld;
    int nq, dk;
    float *p;
    size_t ps;
} mha_value_rows;

/* A product on operands holding bf16 values (as floats), as stream_rows16 takes it: C (m × n,
 * rows form) = alpha · A (m × kk) · B, the sums ended as the bf16 kernels end them: + 0 where
 * pad (kk not a multiple of their k tile), then times alpha. */
typedef struct mha_product16 {
    int m, n, kk;
    float alpha;
    int pad;
    mha_mat a, b, c;
} mha_product16;

typedef struct mha_isa {
    const char *name;            /* "avx512", "avx2", "ref" */
    const char *needs;           /* the CPU features it needs, as lscpu names them, space-
                                  * separated ("": none); mha_isa_runnable tests them */
    /* BLIS sub-configs it runs with, NULL-terminated: the first runnable one is its default
     * (the CPU's vendor may reorder: default_arch) */
    const char *archs[6];
    const char *(*default_arch)(void);
    /* bf16 kernels it holds, NULL-terminated, in the order "auto" prefers them; bf16_auto may
     * reorder by vendor */
    const mha_bkernel *bf16[5];
    const mha_bkernel *(*bf16_auto)(void);

    /* ---- float32 ---- */
    /* Rows [i0, i0 + rows) of a, columns [p0, p0 + kc) (a's panels w wide), into panels of pw
     * rows: dst[panel][p][r], zero rows padding the last panel. A packing, and Bᵀ packing
     * (the transpose's panels are panels of rows). Same bits in every table: a copy. */
    void (*pack_rows)(mha_mat a, int w, int i0, int rows, int p0, int kc, int pw, float *restrict dst);
    /* Rows streamed past register tiles with the microkernel's sums bit for bit (up to
     * MHA_STREAM_ROWS, or any number: stream_in_place), A read in place; NULL where the table
     * has none. stream_bw: the B panel width it takes and stream_arch the sub-config whose
     * microkernel's sums it reproduces (any other with the same microkernel streams too). */
    void (*stream_rows)(const mha_kernel *k, int m, int n, int kk, float alpha, mha_mat a, mha_mat b, float beta,
                        mha_mat c);
    int stream_bw;
    const char *stream_arch;
    /* Whether on this CPU the attention's products stream any number of rows, A read in
     * place (mha_gemm_in_place; read once, into mha_kernel.in_place), rather than up to
     * MHA_STREAM_ROWS as mha_gemm does; NULL: never. The same bits either way. */
    int (*stream_in_place)(void);
    /* The attention's bf16 products where the table streams in place (products.c: bf16 on the
     * float32 stream): stream_rows on the product p's operands, already rounded to bf16, summed
     * as the bf16 kernels of order MHA_BK_EVEN_FIRST sum them: under DAZ and FTZ with alpha 1
     * and beta 0, p->kk <= k->kc (one FMA chain per element in k order: the even-first model's
     * sums); then, in the caller's mode, + 0 where p->pad (the kernels' sums end on padding)
     * and times p->alpha (their epilogue's rounding). NULL where the table has none. */
    void (*stream_rows16)(const mha_kernel *k, const mha_product16 *p);
    /* RoPE on a run of n rotation pairs, angle j's cos c[j] and sin sign·s[j] (sign ±1: a
     * negative position reads the table at |p|): (x, y) ← (x·c − y·s', y·c + x·s'), each product
     * and the difference or sum rounded once (no FMA), so every table gives ref's bits.
     * rope_halves: x = a[j], y = b[j] (neox pairs j with j + r/2: two runs); rope_pairs:
     * x = x[2j], y = x[2j + 1] (gptj's neighbours: one run). rope.c cuts a row into runs that
     * stay inside the panels of its matrix. */
    void (*rope_halves)(float *a, float *b, const float *c, const float *s, float sign, int n);
    void (*rope_pairs)(float *x, const float *c, const float *s, float sign, int n);
    /* The unnormalised, masked softmax of a row or chunk (softmax.h). */
    mha_softmax_fn softmax_row;
    /* The merge rule's loops (attention.c's mha_softmax_merge, the division by the sum):
     * merge_row z[j] = z[j]·a + zc[j]·b, scale_row z[j] = x[j]·s (x may be z), for j < n, each
     * product and the sum rounded once (no FMA): ref's bits in every table. */
    void (*merge_row)(float *restrict z, float a, const float *restrict zc, float b, int n);
    void (*scale_row)(float *z, const float *x, float s, int n);
    /* softmax_row on m rows ld apart, each from max −∞ with all n entries visible and no mask:
     * row i's max and sum into mx[i·st] and sum[i·st], its bits softmax_row's. The vector
     * tables take row i + 1's max before row i's exps, so that its loads and reductions run
     * behind them rather than between rows. */
    void (*softmax_rows)(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
    /* The same with the bf16 engines' exp (exp_poly.h's MHA_EXP_B*): their softmax, which
     * softmax_row16 and softmax_row_rounded round (their max, sum and entries). */
    mha_softmax_fn softmax_row_bf16;
    /* Logit softcapping in place: s[j] = cap · tanh(s[j] / cap) for j < n, the tanh of
     * exp_poly.h (ref lane by lane as mha_tanh_poly; the vector tables with FMA: like their
     * exp, within a few ulp of ref's, not its bits). */
    void (*softcap_row)(float *s, int n, float cap);
    /* ---- per KV cache type: indexed by mha_kv_type (kvcache.h), NULL where the type has
     * none ---- */
    /* Decode scores (float32 products: a float32 engine's, and an int8 cache's in either where the
     * table has no int8_scores, or of a query's own group where it has) of the
     * queries s over the runs of one chunk, k (mha_key_runs): run r holds n[r] slots of a block, Kᵀ
     * at kt[r] (feature c of slot t at element c · ld + t of kt[r]), its scores following the
     * previous runs' in each row of sc. Over the features [c0, c1) of one pass, sc[qi · sc_ld +
     * slot] = scale · Σ_c q[qi · dk + c] · kt, plus sc when c0 > 0: the microkernel's sums (one
     * chain per score in feature order from zero, FMA in the vector tables, a multiply and an add
     * in ref on x86-64 (FMA on aarch64), then alpha·sum (+ C: in one rounding where
     * s->beta_fused)), so decode scores equal the forward's. Instruction-level parallelism comes
     * from slots of several blocks and from queries at once, never from splitting the features. A
     * scaled type's elements are read back as they are loaded (the values scale_rows gives, so the
     * same bits as reading the chunk back first): kp[r] the parameters of run r's first group (runs
     * of whole groups of MHA_KV_GROUP slots, from a group's start; mha_kv_k_params: float16),
     * q·scale + zero rounded twice; kp NULL for an unscaled type. vr (or NULL): run r's value rows
     * at vr[r] (slot t's dk elements at t · dk), for a table to prefetch as it sums the scores, so
     * the values find them in cache. Every table has F32 and INT8. */
    void (*decode_scores[MHA_KV_TYPES])(const mha_score_rows *s, int c0, int c1, const mha_key_runs *k);
    /* Integer scores on an int8 cache's stored K groups (kvcache.h: K per feature over groups of
     * MHA_KV_GROUP slots, a code, a float16 scale and zero point): the queries s against the
     * runs k as decode_scores takes them (every run from a group's start; kp[r] the parameters
     * of its first group, group g of the run at kp[r] + g · 2 · dk; vr[r] prefetched), all dk
     * features in one call, in passes of MHA_INT8_PASS features from 0. Per (query, group,
     * pass): mq = max |q_c|, ms = max |scale_c| (NaN where a scale is NaN), each feature's
     * u_c = rne((q_c · rq) · (scale_c · rs)) an int16 (|u| <= 32767), rq = 32767 / mq (0 where
     * mq <= MHA_INT8_TINY), rs = 1 / ms (0 where ms is not > 0); the exact int32 isum = Σ u_c ·
     * code_c; zsum = Σ q_c ·
     * zero_c in 16 FMA chains (feature c on chain c mod 16 of the pass, from +0), then chains j
     * and j + 8, j and j + 4, j and j + 2, 0 and 1 added; the pass's value fma((mq / 32767) · ms,
     * (float)isum, zsum). A score is its passes' values added in order, times scale. The same
     * bits in every table (ref the model). A NaN among a query's features or a group's scales
     * makes the scores NaN (which NaN, and the u on the way, as the table's max and conversion
     * give: ref as x86's, the sums wrapping). An int8 cache's scores of a key in a group stored
     * before its query's own, in decode and prefill alike (the groups a step completes
     * included), so that they keep one value per (query, key). The table's kernels,
     * NULL-terminated, fastest first: an engine takes the first this CPU runs
     * (mha_int8_scores_choose); {NULL}: the table scores an int8 cache by float32 products on K
     * read back (decode_scores[INT8], scale_rows[INT8]) instead, in decode and prefill alike. */
    const struct mha_int8_scores_ops *int8_scores[3];
    /* The same float32 scores of the queries s (dk <= MHA_ROWS_SCORES_DK) against the keys k
     * given as rows (mha_key_rows), all features in one pass: sc[qi · sc_ld + t] = scale · Σ_c
     * q·k, one FMA chain per score in feature order from zero, decode_scores' bits without Kᵀ
     * panels (the core's few queries read K where the caller keeps it); k->v (or NULL): the
     * keys' value rows, prefetched into L2 as their scores are summed (so the values after find
     * them there, not in memory). NULL: the table transposes K for decode_scores instead (an
     * engine decides which once: mha_attention_ops.few_rows). */
    void (*rows_scores)(const mha_score_rows *s, const mha_key_rows *k);
    /* The fewest queries of a KV head (its group) for which rows_scores reads K's rows: where
     * the queries are its lanes (neon: 4 to a register), fewer leave lanes empty and K
     * transposed into panels is the faster; 0: any group (avx512 makes the keys its lanes, avx2
     * too under 4 queries). */
    int rows_scores_group;
    /* The same on queries and K's rows holding bf16 values (as floats): decode_scores16's sums
     * and finish in the order asked (FMA under DAZ/FTZ, each feature pair even first, or with
     * dk even odd first; the k padding's + 0, then the scale), so a bf16 kernel's chunk scores
     * where decode16_orders has its order. NULL where the table has none. */
    void (*rows_scores16)(const mha_score_rows *s, const mha_key_rows *k, mha_bk_order order);
    /* Decode values of the rows (mha_value_rows): p[qi · ps + c] += Σ_t e[qi · e_ld + t] ·
     * v[t · dk + c] over n rows of v,
     * key by key in order (one chain per output, as the microkernel sums A·V over a chunk);
     * next (or NULL): what to prefetch as it goes; w (or NULL): a walk stepped once a key in
     * every tile (ref ignores it), the next chunk's memory into L2 while the values compute
     * from cache (its `per` MHA_VALUES_PREFETCH). A scaled type's rows read back as loaded:
     * vs their parameters (mha_kv_v_params: slot t's scale at [2t], zero point at [2t + 1]),
     * q·scale + zero rounded twice; vs NULL for an unscaled type. Every table has F32 and
     * INT8. */
    void (*decode_values[MHA_KV_TYPES])(const mha_value_rows *rows, const void *v, const float *vs, int n,
                                        const void *next, mha_prefetch_walk *w);
    /* bf16 decode (engines whose bf16 kernel sums in an order of decode16_orders: a bit
     * 1 << mha_bk_order each; order says which the engine's kernel sums in), straight
     * from a bf16 cache or (type INT8, the values only: an int8 cache's scores are float32
     * decode_scores in either engine) an int8 one, converted in registers: no panels (V's int8
     * values themselves, exact). q and e hold bf16 values (rounded as the kernels' A panels hold them); every sum
     * is the kernels' (mha_bk_block_model in that order): one chain from zero in increasing k
     * pairs, products exact, sums flushed to zero when denormal. Even first: FMA on widened
     * elements under DAZ/FTZ (avx2, avx512; ref the model's sums); odd first (avx512):
     * vdpbf16ps itself (so only on a CPU with AVX512_BF16: the one kernel that sums odd first
     * needs it). Scores: all dk features in one pass, + 0 for the zero features padding dk to
     * whole k tiles (a −0 sum becomes +0 there), then scale · sum unflushed: the forward's
     * chunk scores on those kernels, bit for bit; the runs' value rows (k->vr, as for values)
     * prefetched as their scores are summed, so the values find them in cache. Values: p += as
     * decode_values, over the runs of a chunk (run r: n[r] value rows at v[r], its
     * probabilities following the previous runs' in e), then + 0 for the keys padding the
     * chunk to whole k tiles; pf (or NULL): lines prefetched evenly over the key pairs as they
     * are summed (the odd-first tiles; the even-first ones ignore it: their FMAs, not memory,
     * bound them). NULL where the table has none (then bf16 decode gathers the chunk into the
     * kernels' panels). */
    unsigned decode16_orders;
    void (*decode_scores16)(const mha_score_rows *s, const mha_key_runs *k, mha_bk_order order);
    void (*decode_values16)(const mha_value_rows *rows, int runs, const void *const *v, const int *n, mha_kv_type type,
                            const mha_prefetch *pf, mha_bk_order order);
    /* A scaled type's block read back as float32 (indexed by mha_kv_type: INT8): rows × n
     * elements, src's rows ld_src elements apart, dst's ld_dst apart, dst[r][t] =
     * (float)src[r][t] · row_scales[r] (+ row_zeros[r] unless NULL): V (a scale and a zero
     * point per slot, a row) or Kᵀ (a scale and a zero point per feature, a row:
     * mha_kv_k_value). An exact conversion, a rounded multiply and a rounded add: the same
     * bits in every table. */
    void (*scale_rows[MHA_KV_TYPES])(const void *src, size_t ld_src, int rows, int n, const float *row_scales,
                                     const float *row_zeros, float *restrict dst, size_t ld_dst);

    /* ---- bf16 ---- */
    /* n contiguous floats at src, elements c .. c + n − 1 of a row of A, rounded to bf16 (as
     * mha_bf16_round: same bits in every table) into their places in A tiles, element e at
     * d[(e / 32)·MHA_BT_ELEMS + e % 32]. One call per run: a call per 16 elements cost more
     * than the rounding (AMX forwards). */
    void (*round_into_tiles)(const float *src, int c, int n, mha_bf16 *d);
    /* softmax_row_bf16 (the same max, sum and entries) with each entry rounded to bf16 (as
     * mha_bf16_round) into its place in a row of A tiles, d the row's element 0 (element e at
     * d[(e / 32)·MHA_BT_ELEMS + e % 32]), zeros past `visible` up to n rounded to the k tile;
     * s is left as it was or as softmax_row_bf16 leaves it. The bf16 chunks' probabilities
     * without a float pass between the exp and A·V. NULL where the table has none:
     * softmax_row_bf16, then round_into_tiles. */
    float (*softmax_row16)(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io,
                           mha_bf16 *d);
    /* softmax_row16 on softmax_rows' rows (in its order): row i rounded into row i of the A
     * panels at d (d + mha_bk_a_row(i, kp(n) / 32)), its bits softmax_row16's. NULL where
     * softmax_row16 is. */
    void (*softmax_rows16)(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st, mha_bf16 *d);
    /* softmax_row_bf16 (the same max and sum, of the entries unrounded) with each entry left as
     * the float of its bf16 rounding (round_bf16_floats' bits): bf16 probabilities as floats in
     * one pass (bf16 decode on the tables' tiles, bf16 on the float32 stream). NULL where the
     * table has none: softmax_row_bf16, then round_bf16_floats. */
    float (*softmax_row_rounded)(float *restrict s, int n, int visible, const uint8_t *restrict mask, float *max_io);
    /* softmax_row_rounded on softmax_rows' rows (in its order), its bits. NULL where
     * softmax_row_rounded is. */
    void (*softmax_rows_rounded)(float *s, ptrdiff_t ld, int m, int n, float *mx, float *sum, ptrdiff_t st);
    /* x[i] (i < n) in place: the float of its bf16 rounding (mha_bf16_round: same bits in
     * every table), as a kernel's A panels would hold it: bf16 decode's queries and
     * probabilities. */
    void (*round_bf16_floats)(float *x, int n);
    /* d[i] = mha_bf16_round(x[i]) for i < n (same bits in every table): bf16 outputs. */
    void (*round_to_bf16)(const float *restrict x, int n, mha_bf16 *restrict d);
    /* B (kk × n), or srcᵀ, into bf16 VNNI panels (mha_bk_pack_b's contract; same bits). */
    void (*pack_b16)(const mha_kernel *k, mha_mat src, int transpose, int kk, int n, mha_bf16 *dst, size_t ps);
    /* Pairs of rows of a type's elements into VNNI pairs, as bf16 B panels hold them
     * (indexed by mha_kv_type: BF16, INT8): for p < pairs and i < 16, dst[32p + 2i + e] = the
     * element (2p + e)·ld + i of src as bf16 (the type's bf16_at: a copy, or an int8 converted,
     * exact: |x| <= 127 needs 7 bits; the same bits in every table). A cache chunk's Kᵀ
     * (features in pairs, 16 keys) and V (keys in pairs, 16 features) into the kernels'
     * panels. next (or NULL): a line of what the caller reads next prefetched per pair,
     * next + 64·p for bf16, + 32·p for int8 (ref ignores it). */
    void (*interleave_pairs[MHA_KV_TYPES])(const void *src, size_t ld, int pairs, mha_bf16 *restrict dst,
                                           const char *next);
    /* A block's epilogue, rows i < rows, columns j < cols <= 32: C = alpha·acc[i·32 + j], then
     * + beta·C (beta 0: C not read), a multiply and an add each rounded (same bits in every
     * table); C's columns 0..15 of row i at c0 + i·ldc, 16..31 at c1 + i·ldc. */
    void (*epilogue_block)(float *c0, float *c1, ptrdiff_t ldc, const float *acc, int rows, int cols, float alpha,
                           float beta);

    /* ---- quantized weights ---- */
    const mha_qkernels *quant;
} mha_isa;

/* The vector tables' decode scores: a chunk's runs cut into slot vectors of w lanes (the
 * last of a run shorter): at most MHA_KV_CHUNK of them, the most slots of one call. */
typedef struct mha_slot_vec {
    const char *kt;    /* feature 0 of the vector's first slot (elements of esz bytes) */
    const char *v;     /* its first slot's value row (NULL: none given) */
    const mha_f16 *kp; /* int8 K: its group's parameters, each feature's scale then zero point
                        * (mha_kv_k_params, float16; NULL: none given) */
    int lanes, out;    /* slots in it; its first score's column in sc */
} mha_slot_vec;
/* vr: the runs' value rows (or NULL), row bytes apart; kp: int8 K, the parameters of each
 * run's first group (a run starts a group and its groups are whole MHA_KV_GROUP slots, their
 * parameters 2·dk float16s apart; w divides MHA_KV_GROUP), or NULL. */
static inline int mha_slot_vecs(int runs, const void *const *kt, const void *const *vr, size_t row,
                                const mha_f16 *const *kp, int dk, const int *n, int w, size_t esz, mha_slot_vec *v)
{
    int nv = 0;
    for (int r = 0, at = 0; r < runs; at += n[r++])
        for (int t = 0; t < n[r]; t += w)
            v[nv++] = (mha_slot_vec){(const char *)kt[r] + (size_t)t * esz, vr ? (const char *)vr[r] + (size_t)t * row : NULL,
                                     kp ? kp[r] + (size_t)(t / MHA_KV_GROUP) * 2 * (size_t)dk : NULL,
                                     n[r] - t < w ? n[r] - t : w, at + t};
    return nv;
}

/* Whether the n vectors at v are all w slots wide (a tile of them tests no lane). */
static inline int mha_slot_vecs_whole(const mha_slot_vec *v, int n, int w)
{
    for (int i = 0; i < n; i++)
        if (v[i].lanes != w)
            return 0;
    return 1;
}

extern const mha_isa mha_isa_ref, mha_isa_avx2, mha_isa_avx512;
extern const mha_isa mha_isa_neon; /* aarch64 builds only (neon.c) */
extern const mha_bkernel mha_bk_amx; /* the avx512 table's AMX products (amx.c) */
/* avx2's rows_scores and rows_scores16: four queries as the lanes of an xmm register (fewer:
 * rows_scores makes 8 keys the lanes of a ymm register; avx2_decode.c). */
void mha_rows_scores_avx2(const mha_score_rows *s, const mha_key_rows *k);
void mha_rows_scores16_avx2(const mha_score_rows *s, const mha_key_rows *k, mha_bk_order order);
/* The int8_scores kernels: the model (ref.c), avx2's (vpmaddwd; the avx512 table's where the
 * CPU lacks VNNI), avx512's on AVX512_VNNI (vpdpwssd): exact integer sums, so the same bits. */
extern const mha_int8_scores_ops mha_int8_scores_ref, mha_int8_scores_avx2, mha_int8_scores_avx512_vnni;
/* The first of the table's int8_scores kernels this CPU runs; NULL where it has none. */
const mha_int8_scores_ops *mha_int8_scores_choose(const struct mha_isa *isa);

/* Every table, widest first. */
extern const mha_isa *const mha_isa_tables[];
extern const int mha_isa_count;

/* request: "" or "auto" (the widest this CPU runs) or a table's name. MHA_ERR_CONFIG when
 * unknown or not runnable here; then *why says which names exist, or which features the
 * table needs and which of them the CPU lacks (why_buf holds that text). */
mha_status mha_isa_select(const char *request, const mha_isa **isa, char *why_buf, size_t why_len);
/* Whether this CPU has every feature the table needs. */
int mha_isa_runnable(const mha_isa *isa);
/* What "auto" picks on this CPU. */
const mha_isa *mha_isa_auto_table(void);
/* Whether a BLIS sub-config name is one the table runs with. */
int mha_isa_runs_arch(const mha_isa *isa, const char *arch);
/* The table of a BLIS sub-config: the first (widest) that lists it and this CPU runs; NULL if none. */
const mha_isa *mha_isa_of_arch(const char *arch);

/* request: "" or "auto" (isa->bf16_auto) or the name of one of the table's bf16 kernels.
 * MHA_ERR_CONFIG when it is not the table's or not runnable here, with why in why_buf. */
mha_status mha_bkernel_select(const mha_isa *isa, const char *request, const mha_bkernel **bk, char *why_buf,
                              size_t why_len);

/* CPU features by lscpu's name ("avx512f", "avx2", "fma", "f16c", ...): whether this CPU has
 * it; 0 for a name the library does not test. */
int mha_cpu_has(const char *feature);
/* Whether it has every feature of a space-separated list ("": yes). */
int mha_cpu_has_all(const char *needs);

#endif
