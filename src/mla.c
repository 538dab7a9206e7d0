/* mla.c — multi-head latent attention's forward in the absorbed form (mla.h). HF's
 * DeepseekV3Attention computes, per head h, scores over [q_nope_h | q_rope_h]·[k_nope_h,t |
 * k_rope_t] with k_nope_h,t = W_uk,h·c_t, and values v_h,t = W_uv,h·c_t. The absorbed form
 * moves W_uk to the query side (q_lat_h = W_uk,hᵀ·q_nope_h, so q_nope·k_nope = q_lat·c) and
 * W_uv past the sum (Σ p·v_h = W_uv,h·Σ p·c): attention with one KV head [c | k_rope] whose V
 * is c, shared by every query head — what a latent cache holds, so decode and prefill can run
 * one order. */
#include "mla.h"

#include <math.h>
#include <string.h>

#include "bgemm.h"
#include "gemm.h"
#include "rope.h"
#include "status.h"

/* Elements of a packed kk × n operand, its start kept 64-byte aligned. */
static size_t lin_elems(int kk, int n, int bw, int bf16)
{
    const size_t e = bf16 ? mha_bk_b_elems(kk, n) : (size_t)kk * mha_round_up((size_t)n, (size_t)bw);
    return mha_round_up(e, bf16 ? 32 : 16);
}

static mha_mla_lin lin_at(size_t *cursor, int kk, int n, int bw, int bf16, size_t count)
{
    const mha_mla_lin l = {*cursor, kk, n};
    *cursor += count * lin_elems(kk, n, bw, bf16);
    return l;
}

void mha_mla_plan_make(const mha_dims *dims, int bw, mha_mla_plan *p)
{
    memset(p, 0, sizeof *p);
    const mha_mla *m = &dims->mla;
    if (!m->kv_lora_rank)
        return;
    const int h = dims->h, d = dims->d, bf16 = dims->bf16, kvl = m->kv_lora_rank, rope = m->qk_rope_head_dim;
    const int qk = m->qk_nope_head_dim + rope, ql = m->q_lora_rank;
    size_t at = 0;
    p->on = 1;
    if (ql)
        p->qa = lin_at(&at, d, ql, bw, bf16, 1);
    p->qb = lin_at(&at, ql ? ql : d, h * qk, bw, bf16, 1);
    p->kva = lin_at(&at, d, kvl + rope, bw, bf16, 1);
    p->uk_stride = lin_elems(m->qk_nope_head_dim, kvl, bw, bf16);
    p->uk = lin_at(&at, m->qk_nope_head_dim, kvl, bw, bf16, (size_t)h);
    p->uv_stride = lin_elems(kvl, m->v_head_dim, bw, bf16);
    p->uv = lin_at(&at, kvl, m->v_head_dim, bw, bf16, (size_t)h);
    p->o = lin_at(&at, h * m->v_head_dim, d, bw, bf16, 1);
    p->weights = at;
    size_t v = 0;
    p->qa_norm = v, v += (size_t)ql;
    p->kva_norm = v, v += (size_t)kvl;
    p->b_qa = v, v += dims->bias ? (size_t)ql : 0;
    p->b_kva = v, v += dims->bias ? (size_t)(kvl + rope) : 0;
    p->b_o = v, v += dims->bias ? (size_t)d : 0;
    p->vectors = v;
    const size_t project = (size_t)MHA_MLA_ROWS * ((size_t)ql + (size_t)h * qk);
    const size_t out = (size_t)MHA_MLA_ROWS * (size_t)h * m->v_head_dim;
    p->scratch = project > out ? project : out;
}

int mha_mla_deepest(const mha_dims *dims, int deepest)
{
    const mha_mla *m = &dims->mla;
    const int kk[] = {dims->d, m->q_lora_rank, m->qk_nope_head_dim, m->kv_lora_rank, dims->h * m->v_head_dim};
    for (size_t i = 0; i < sizeof kk / sizeof kk[0]; i++)
        deepest = kk[i] > deepest ? kk[i] : deepest;
    return deepest;
}

mha_status mha_mla_weights_check(const mha_mla_weights *w, const mha_dims *dims, char *why, size_t why_len)
{
    if (!dims->mla.kv_lora_rank)
        return mha_errorf(why, why_len, MHA_ERR_CONFIG, "mha_mla_weights need an engine with model.mla "
                          "(kv_lora_rank > 0); this one takes mha_set_weights");
    if (!w)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "weights are NULL");
    if (w->layout != MHA_LAYOUT_XW && w->layout != MHA_LAYOUT_TORCH)
        return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "layout %d is neither MHA_LAYOUT_XW nor MHA_LAYOUT_TORCH",
                          (int)w->layout);
    const int lora = dims->mla.q_lora_rank > 0, bias = dims->bias;
    const struct { const char *name; const float *p; int wanted; } t[] = {
        {"q_a", w->q_a, lora}, {"q_a_norm", w->q_a_norm, lora}, {"q_b", w->q_b, lora}, {"q", w->q, !lora},
        {"kv_a", w->kv_a, 1}, {"kv_a_norm", w->kv_a_norm, 1}, {"kv_b", w->kv_b, 1}, {"o", w->o, 1},
        {"b_q_a", w->b_q_a, bias && lora}, {"b_kv_a", w->b_kv_a, bias}, {"b_o", w->b_o, bias},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!t[i].p != !t[i].wanted)
            return mha_errorf(why, why_len, MHA_ERR_INVALID_ARG, "%s is %s, but the config (q_lora_rank %d, bias %d) %s it",
                              t[i].name, t[i].p ? "set" : "NULL", dims->mla.q_lora_rank, bias,
                              t[i].wanted ? "needs" : "has no");
    return MHA_OK;
}

/* W (out × in as nn.Linear stores it; XW: in × out) into the packed B (in × out) of l;
 * rows: W's first row of this operand (TORCH: rows are outputs; XW: columns are), ld its row
 * stride. */
static void pack_lin(const mha_fwd *f, const mha_mla_lin *l, size_t extra, const float *w, ptrdiff_t ld, int transpose)
{
    const mha_kernel *k = f->kernel;
    f->prod->pack_b(k, mha_mat_rows(k, w, ld), transpose, l->kk, l->n,
                    (char *)(void *)f->mla_w + (l->off + extra) * f->prod->esz);
}

void mha_mla_weights_pack(const mha_mla_weights *w, const mha_fwd *f)
{
    const mha_mla_plan *p = f->mla;
    const mha_mla *m = &f->mla_dims;
    const int torch = w->layout == MHA_LAYOUT_TORCH, kvl = m->kv_lora_rank, nope = m->qk_nope_head_dim;
    const int nv = nope + m->v_head_dim, ql = m->q_lora_rank;
    /* a plain projection: TORCH (n × kk) transposed, XW (kk × n) as it is */
#define PLAIN(l, src) pack_lin(f, &(l), 0, (src), torch ? (l).kk : (l).n, torch)
    if (ql)
        PLAIN(p->qa, w->q_a);
    PLAIN(p->qb, ql ? w->q_b : w->q);
    PLAIN(p->kva, w->kv_a);
    PLAIN(p->o, w->o);
#undef PLAIN
    /* kv_b: TORCH (h·(nope + v), kvl), XW (kvl, h·(nope + v)); head h's W_uk is (nope × kvl) as
     * B, its W_uv (kvl × v) */
    for (int h = 0; h < f->h; h++) {
        const size_t r = (size_t)h * nv;
        if (torch) {
            pack_lin(f, &p->uk, h * p->uk_stride, w->kv_b + r * kvl, kvl, 0);
            pack_lin(f, &p->uv, h * p->uv_stride, w->kv_b + (r + nope) * kvl, kvl, 1);
        } else {
            pack_lin(f, &p->uk, h * p->uk_stride, w->kv_b + r, (ptrdiff_t)f->h * nv, 1);
            pack_lin(f, &p->uv, h * p->uv_stride, w->kv_b + r + nope, (ptrdiff_t)f->h * nv, 0);
        }
    }
    float *v = (float *)f->mla_v;
    if (ql)
        memcpy(v + p->qa_norm, w->q_a_norm, (size_t)ql * sizeof *v);
    memcpy(v + p->kva_norm, w->kv_a_norm, (size_t)kvl * sizeof *v);
    if (w->b_q_a)
        memcpy(v + p->b_qa, w->b_q_a, (size_t)ql * sizeof *v);
    if (w->b_kv_a)
        memcpy(v + p->b_kva, w->b_kv_a, (size_t)(kvl + m->qk_rope_head_dim) * sizeof *v);
    if (w->b_o)
        memcpy(v + p->b_o, w->b_o, (size_t)f->d * sizeof *v);
}

/* c (m × l->n) = a (m × l->kk) · B(l, head's extra) (+ bias): on the engine's kernel. */
static void lin(const mha_fwd *f, const mha_scratch *s, int m, mha_mat a, const mha_mla_lin *l, size_t extra,
                const float *bias, mha_mat c)
{
    if (m <= 0)
        return;
    const mha_gemm_ctx gc = mha_fwd_gemm(f, s);
    f->prod->gemm(&gc, m, l->n, l->kk, NULL, a, (const char *)f->mla_w + (l->off + extra) * f->prod->esz, 0, bias, c);
}

/* HF's DeepseekV3RMSNorm of rows [0, m) (n features, rows ld apart): x·rsqrt(mean(x²) + eps)·w,
 * as QK-norm's (mha_rms_factor). */
static void rms_rows(float *x, int m, int n, ptrdiff_t ld, const float *w, float eps)
{
    for (int i = 0; i < m; i++) {
        float *r = x + i * ld;
        double sq = 0.0;
        for (int c = 0; c < n; c++)
            sq += (double)r[c] * r[c];
        const float inv = mha_rms_factor(sq, n, eps);
        for (int c = 0; c < n; c++)
            r[c] = r[c] * inv * w[c];
    }
}

/* RoPE of n features at column col of rows [0, m) of a (rows ld apart): row i at position
 * pos[i], or pos0 + i when pos is NULL. */
static void rotate(const mha_fwd *f, float *a, ptrdiff_t ld, int m, int col, int n, int pos0, const int *pos)
{
    const mha_kernel *k = f->kernel;
    if (f->rope == MHA_ROPE_NONE)
        return;
    if (!pos)
        mha_rope_rows(k, mha_mat_rows(k, a, ld), m, col, pos0, f->rope, n, f->rope_cos, f->rope_sin);
    for (int i = 0; pos && i < m; i++)
        mha_rope_rows(k, mha_mat_rows(k, a + i * ld, ld), 1, col, pos[i], f->rope, n, f->rope_cos, f->rope_sin);
}

void mha_mla_rows(const mha_fwd *f, const float *xr, int m, int pos0, const int *pos, float *qabs, float *kr,
                  ptrdiff_t ldk, const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const mha_mla_plan *p = f->mla;
    const mha_mla *ml = &f->mla_dims;
    const int h = f->h, kvl = ml->kv_lora_rank, rope = ml->qk_rope_head_dim, nope = ml->qk_nope_head_dim;
    const int qk = nope + rope, ql = ml->q_lora_rank, dk = f->dk;
    const float *v = f->mla_v;
    const mha_mat x = mha_mat_rows(k, xr, f->d);
    float *qa = s->mla, *q = qa + (size_t)MHA_MLA_ROWS * ql;
    /* K: [c | k_rope] = kv_a_proj_with_mqa(x), c normed, k_rope rotated */
    lin(f, s, m, x, &p->kva, 0, f->has_bias ? v + p->b_kva : NULL, mha_mat_rows(k, kr, ldk));
    rms_rows(kr, m, kvl, ldk, v + p->kva_norm, ml->eps);
    rotate(f, kr, ldk, m, kvl, rope, pos0, pos);
    /* Q = q_b_proj(RMSNorm(q_a_proj(x))), or q_proj(x); each head's rope features rotated */
    if (ql) {
        lin(f, s, m, x, &p->qa, 0, f->has_bias ? v + p->b_qa : NULL, mha_mat_rows(k, qa, ql));
        rms_rows(qa, m, ql, ql, v + p->qa_norm, ml->eps);
    }
    lin(f, s, m, ql ? mha_mat_rows(k, qa, ql) : x, &p->qb, 0, NULL, mha_mat_rows(k, q, (ptrdiff_t)h * qk));
    /* Q_abs row: per head [W_ukᵀ·q_nope | q_rope] */
    for (int hd = 0; hd < h; hd++) {
        rotate(f, q, (ptrdiff_t)h * qk, m, hd * qk + nope, rope, pos0, pos);
        lin(f, s, m, mha_mat_rows(k, q + (size_t)hd * qk, (ptrdiff_t)h * qk), &p->uk, hd * p->uk_stride, NULL,
            mha_mat_rows(k, qabs + (size_t)hd * dk, (ptrdiff_t)h * dk));
        for (int i = 0; i < m; i++)
            memcpy(qabs + (size_t)i * h * dk + (size_t)hd * dk + kvl, q + (size_t)i * h * qk + (size_t)hd * qk + nope,
                   (size_t)rope * sizeof *q);
    }
}

void mha_mla_project(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s)
{
    const size_t row0 = (size_t)b * f->call->seq_q + r0; /* key j at position j */
    mha_mla_rows(f, f->call->q + row0 * f->d, r1 - r0, r0, NULL, f->buf.z + row0 * (size_t)f->h * f->dk,
                 f->buf.mla_k + row0 * f->dk, f->dk, s);
}

void mha_mla_core_view(const mha_fwd *f, int hb, mha_fwd *core, mha_core_io *io)
{
    const mha_call *c = f->call;
    const ptrdiff_t h = f->h, dk = f->dk, dv = f->dv;
    *core = *f;
    core->kvh = f->h / hb, core->group = hb;
    *io = (mha_core_io){
        .q = f->buf.z, .k = f->buf.mla_k, .v = f->buf.mla_k, .out = f->buf.mla_z,
        .q_st = {c->seq_q * h * dk, dk, h * dk},
        .k_st = {c->seq_kv * dk, 0, dk}, .v_st = {c->seq_kv * dk, 0, dk}, /* every head block reads the one KV head */
        .o_st = {c->seq_q * h * dv, dv, h * dv},
    };
}

void mha_mla_values(const mha_fwd *f, int m, const float *z, ptrdiff_t zh, float *out, const mha_scratch *s)
{
    const mha_kernel *k = f->kernel;
    const mha_mla_plan *p = f->mla;
    const int h = f->h, nv = f->mla_dims.v_head_dim;
    float *o = s->mla;
    for (int hd = 0; hd < h; hd++) /* each head's values: its latent output through W_uv */
        lin(f, s, m, mha_mat_rows(k, z + (size_t)hd * zh, (ptrdiff_t)h * zh), &p->uv, hd * p->uv_stride, NULL,
            mha_mat_rows(k, o + (size_t)hd * nv, (ptrdiff_t)h * nv));
    lin(f, s, m, mha_mat_rows(k, o, (ptrdiff_t)h * nv), &p->o, 0, f->has_bias ? f->mla_v + p->b_o : NULL,
        mha_mat_rows(k, out, f->d));
}

void mha_mla_out_rows(const mha_fwd *f, int b, int r0, int r1, const mha_scratch *s)
{
    const int ql = f->call->q_len ? f->call->q_len[b] : f->call->seq_q, dv = f->dv;
    const int end = r1 < ql ? r1 : ql, m = end - r0;
    if (m > 0)
        mha_mla_values(f, m, f->buf.mla_z + ((size_t)b * f->call->seq_q + r0) * (size_t)f->h * dv, dv,
                       f->call->out + ((size_t)b * f->call->seq_q + r0) * f->d, s);
    const int zero_from = m > 0 ? end : r0;
    if (zero_from < r1)
        memset(f->call->out + ((size_t)b * f->call->seq_q + zero_from) * f->d, 0,
               (size_t)(r1 - zero_from) * f->d * sizeof(float));
}
