/* mla.h — multi-head latent attention (DeepSeek V2/V3, Kimi K2) in the absorbed form
 * (DESIGN.md §1 "Multi-head latent attention"): per row block, the latent projections, their
 * RMSNorms and RoPE, and each head's q_nope taken into latent space (W_uk); then the attention
 * core with one KV head of [c | k_rope] whose V is c, the query heads as its rows; then each
 * head's latent output through W_uv and o_proj. */
#ifndef MHA_MLA_H
#define MHA_MLA_H

#include <stddef.h>

#include "attention.h"
#include "dims.h"

/* One packed B operand (kk × n) at element off of the weights region: float32 panels of the
 * microkernel's width, or bf16 B panels (bgemm.h) of mha_bk_ps(kk) elements each. */
typedef struct mha_mla_lin { size_t off; int kk, n; } mha_mla_lin;

/* Where an MLA engine's weights and vectors sit, from the dims and the kernel: made once at
 * plan time (arena.c sizes the regions by it) and read by every pass. */
typedef struct mha_mla_plan {
    int on;                     /* 0: not an MLA engine (everything below 0) */
    mha_mla_lin qa, qb, kva, o; /* q_a_proj (absent without q_lora), q_b_proj or q_proj (kk = d),
                                 * kv_a_proj_with_mqa, o_proj */
    mha_mla_lin uk, uv;         /* head 0's W_uk (nope × kv_lora) and W_uv (kv_lora × v) */
    size_t uk_stride, uv_stride;/* elements from one head's to the next's */
    size_t weights;             /* elements of the weights region (float32 or bf16) */
    size_t qa_norm, kva_norm, b_qa, b_kva, b_o, vectors; /* floats of the vectors region */
    size_t scratch;             /* floats of a task's slice part: q_a and Q of a row block, or
                                 * the heads' values of one */
} mha_mla_plan;

/* The plan of dims (p->on 0 without MLA); bw: the float32 panel width, bf16: bf16 panels. */
void mha_mla_plan_make(const mha_dims *dims, int bw, mha_mla_plan *p);

/* The deepest product of an MLA engine or `deepest`, the larger (bf16's A packing). */
int mha_mla_deepest(const mha_dims *dims, int deepest);
/* Which weights w must hold for the config (dims): MHA_OK, or a status with why. */
mha_status mha_mla_weights_check(const mha_mla_weights *w, const mha_dims *dims, char *why, size_t why_len);
/* w packed into the engine's regions (f: its model, the views final). */
void mha_mla_weights_pack(const mha_mla_weights *w, const mha_fwd *f);

/* m rows of x (rows d apart, m <= MHA_MLA_ROWS), row i at position pos[i] (pos NULL: pos0 + i):
 * their Q_abs rows into qabs (h·dk apart: each head's W_ukᵀ·q_nope then its rotated q_rope)
 * and K rows into kr (ldk apart: the normed latent, then the rotated k_rope). The forward's
 * phase 1 and a step's projections: one source of these bits. */
void mha_mla_rows(const mha_fwd *f, const float *x, int m, int pos0, const int *pos, float *qabs, float *kr,
                  ptrdiff_t ldk, const mha_scratch *s);
/* out (m rows, d) = each head's latent output (its first kv_lora features of z: rows h·zh
 * apart, head hd at hd·zh) through W_uv, then o_proj (+ b_o). The forward's phase 3 and a
 * step's output rows. */
void mha_mla_values(const mha_fwd *f, int m, const float *z, ptrdiff_t zh, float *out, const mha_scratch *s);
/* Phase 1 of a forward, rows [r0, r1) of sequence b: Q_abs (f->buf.z, rows of h·dk: each head's
 * W_ukᵀ·q_nope then its rotated q_rope) and K (f->buf.mla_k, rows of dk: the normed latent, then
 * the rotated k_rope). */
void mha_mla_project(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s);
/* Phase 2: the attention core's view of Q_abs, K and its V (K's first dv features) and the
 * heads' latent outputs (f->buf.mla_z); core: f's model with head blocks of hb query heads as
 * its "KV heads" (K read with a zero head stride), so a task runs hb heads of a sequence
 * (hb: mha_attention_head_block(h), a divisor of h and a function of h alone). */
void mha_mla_core_view(const mha_fwd *f, int hb, mha_fwd *core, mha_core_io *io);
/* Phase 3, rows [r0, r1) of sequence b: each head's latent output through W_uv, then o_proj
 * (+ b_o) into the call's out; rows past the query length 0. */
void mha_mla_out_rows(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s);

#endif
