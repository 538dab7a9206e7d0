/* avx512_int8_scores.c — the avx512 table's int8_scores (isa.h) on AVX512_VNNI and VBMI: a
 * group's 16 slots of a feature pair in one zmm, their codes widened to int16 and interleaved
 * by pair, one vpdpwssd a query against its u pair broadcast. The sums are exact integers, so
 * the bits are the model's (ref.c) and avx2's, which the table takes on a CPU without either. */
#include <string.h>

#include "avx512.h"
#include "kvcache.h"
#include "loops.h"

#define VNNI "avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni,avx512vbmi"
#define VNNI_INLINE __attribute__((target(VNNI), always_inline)) static inline

/* Queries scored at a time against a group's widened codes (their sums in registers), and
 * queries whose pass scales (32767 / max |q|) are kept at once. */
enum { QB = 16, QMAX = 64 };

/* The largest lane of m (the lanes' maxps, halves then pairs: NaN aside, any order's value). */
VNNI_INLINE float max16(__m512 m)
{
    __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(m), _mm512_extractf32x8_ps(m, 1));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
}

/* A group's pass of np features (par: its scales, par + dk its zero points): the scales over
 * their largest |scale| into sr and the zero points into z, as float32, zeros past np up to
 * whole 16s; returns the largest |scale| (NaN where a scale is NaN). */
VNNI_INLINE float group_params(const mha_f16 *par, int dk, int np, float *restrict sr, float *restrict z)
{
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 m = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int c = 0; c < np; c += 16) {
        const __mmask16 live = first16(np - c);
        const __m512 s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, par + c));
        _mm512_store_ps(sr + c, s);
        _mm512_store_ps(z + c, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, par + dk + c)));
        m = _mm512_max_ps(m, _mm512_and_ps(s, absm));
        nan |= _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);
    }
    const float ms = max16(m);
    const __m512 rs = _mm512_set1_ps(ms > 0.0f ? 1.0f / ms : 0.0f);
    for (int c = 0; c < np; c += 16)
        _mm512_store_ps(sr + c, _mm512_mul_ps(_mm512_load_ps(sr + c), rs));
    return nan ? NAN : ms;
}

/* One query's u over the pass (q: its features, rq: 32767 / their max |q|; sr, z: zeros past np
 * up to whole 16s) into u ((q·rq)·sr rounded by cvtps2dq, then a saturating narrowing:
 * packssdw's values, a NaN's −32768), and its zero points' sum: feature c on chain c mod 16 (a
 * lane each), then chains j and j + 8, j and j + 4, j and j + 2, 0 and 1 added. */
VNNI_INLINE float query_u(const float *q, float rq, const float *restrict sr, const float *restrict z, int np,
                          int16_t *restrict u)
{
    const __m512 r = _mm512_set1_ps(rq);
    __m512 ch = _mm512_setzero_ps();
    for (int c = 0; c < np; c += 16) {
        const __m512 x = _mm512_maskz_loadu_ps(first16(np - c), q + c);
        const __m512i w = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(x, r), _mm512_load_ps(sr + c)));
        _mm256_store_si256((__m256i *)(void *)(u + c), _mm512_cvtsepi32_epi16(w));
        ch = _mm512_fmadd_ps(x, _mm512_load_ps(z + c), ch);
    }
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(ch), _mm512_extractf32x8_ps(ch, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1)));
}

/* Pair i of a group's codes over a pass of np features (k: Kᵀ, rows ld apart; lanes past its
 * `live` slots read as zeros): rows 2i and 2i + 1 (an odd pass's last with zeros) side by side in
 * a ymm, their bytes interleaved by slot (vpermb) and widened, so that lane t holds slot t's
 * pair; a line of the next group's Kᵀ (ahead, rows ld apart) and of the value rows (rows, up to
 * rows_end) prefetched. */
VNNI_INLINE __m512i code_pair(const int8_t *k, size_t ld, __mmask16 live, int np, int i, const char *ahead,
                              const char *rows, size_t rows_end)
{
    /* byte b: slot b / 2 of row (b odd) */
    const __m256i by_slot = _mm256_setr_epi8(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                             11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm_prefetch(ahead + (size_t)i * 2 * ld, _MM_HINT_T0);
    _mm_prefetch(rows + ((size_t)i * 64 < rows_end ? (size_t)i * 64 : rows_end), _MM_HINT_T0);
    const int8_t *r = k + (size_t)i * 2 * ld;
    const __m128i r0 = _mm_maskz_loadu_epi8(live, r);
    const __m128i r1 = 2 * i + 1 < np ? _mm_maskz_loadu_epi8(live, r + ld) : _mm_setzero_si128();
    return _mm512_cvtepi8_epi16(_mm256_permutexvar_epi8(by_slot, _mm256_inserti128_si256(_mm256_castsi128_si256(r0), r1, 1)));
}

/* A group's pass of codes, widened (code_pair), and what to prefetch as it is read: k, ld and
 * live as code_pair takes them; pk: the next group's Kᵀ (NULL: none), pv (pvb bytes) this
 * group's value rows (NULL: none). */
typedef struct group_codes {
    const int8_t *k;
    size_t ld;
    __mmask16 live;
    const char *ahead, *rows;
    size_t rows_end;
} group_codes;

VNNI_INLINE group_codes codes_of(const int8_t *k, size_t ld, __mmask16 live, const int8_t *pk, const char *pv,
                                 size_t pvb)
{
    return (group_codes){k, ld, live, pk ? (const char *)pk : (const char *)k, pvb ? pv : (const char *)k,
                         pvb ? pvb - 1 : 0};
}

/* The group's widened pairs into w, for the query blocks after to read. */
VNNI_INLINE void widen_codes(const group_codes *g, int np, __m512i *restrict w)
{
    for (int i = 0; i < (np + 1) / 2; i++)
        w[i] = code_pair(g->k, g->ld, g->live, np, i, g->ahead, g->rows, g->rows_end);
}

/* acc + the pairs of w times u's pair broadcast (vpdpwssd from memory): GCC 12's intrinsic copied
 * each accumulator to another register and back every pair. */
VNNI_INLINE __m512i dp_pairs(__m512i acc, __m512i w, const int32_t *u)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*u));
    return acc;
}

/* R <= QB queries' exact sums (u: their int16 features, MHA_INT8_PASS apart) against a group's
 * codes over np features, one vpdpwssd a query and pair, the pairs widened as they are read (g;
 * w NULL: the only query block of the group) or read from w; then each query's value fma(step,
 * isum, zsum) into y. */
VNNI_INLINE void group_sums(const int R, const group_codes *g, const __m512i *w, int np,
                            const int16_t (*u)[MHA_INT8_PASS], const float *step, const float *zsum, __m512 *y)
{
    __m512i acc[QB];
    for (int qi = 0; qi < R; qi++)
        acc[qi] = _mm512_setzero_si512();
    for (int i = 0; i < (np + 1) / 2; i++) {
        const __m512i wi = w ? _mm512_load_si512(w + i) : code_pair(g->k, g->ld, g->live, np, i, g->ahead, g->rows, g->rows_end);
        for (int qi = 0; qi < R; qi++)
            acc[qi] = dp_pairs(acc[qi], wi, (const int32_t *)(const void *)u[qi] + i);
    }
    for (int qi = 0; qi < R; qi++)
        y[qi] = _mm512_fmadd_ps(_mm512_set1_ps(step[qi]), _mm512_cvtepi32_ps(acc[qi]), _mm512_set1_ps(zsum[qi]));
}

/* R <= QB queries (q rows dk apart; rq, dq their pass's 32767 / max |q| and its inverse) against
 * a group's pass (its scales over their max in sr, its zero points in z, ms that max, g its
 * codes, w NULL or them widened), their u into the caller's room: each query's u and zero points' sum, then the sums; the pass's value into out (query
 * qi's slots at out + qi · ld, the `live` ones), added to the passes' before (p0 > 0), times
 * scale after the last. */
VNNI_INLINE void block_sums(const int R, const float *q, int dk, const float *rq, const float *dq, const float *sr,
                            const float *z, float ms, const group_codes *g, const __m512i *w, int np, int p0, int last,
                            float scale, float *out, size_t ld, int16_t (*restrict u)[MHA_INT8_PASS])
{
    float step[QB], zsum[QB];
    for (int qi = 0; qi < R; qi++) {
        zsum[qi] = query_u(q + (size_t)qi * dk + p0, rq[qi], sr, z, np, u[qi]);
        step[qi] = dq[qi] * ms;
    }
    __m512 y[QB];
    group_sums(R, g, w, np, (const int16_t (*)[MHA_INT8_PASS])u, step, zsum, y);
    for (int qi = 0; qi < R; qi++) {
        float *o = out + (size_t)qi * ld;
        const __m512 v = p0 == 0 ? y[qi] : _mm512_add_ps(_mm512_maskz_loadu_ps(g->live, o), y[qi]);
        _mm512_mask_storeu_ps(o, g->live, last ? _mm512_mul_ps(v, _mm512_set1_ps(scale)) : v);
    }
}

/* nq <= QMAX queries (q rows dk apart) over every group of the runs, pass by pass: a group's
 * parameters once, its codes widened as they are read for one block of QB queries or fewer, or
 * once into w for every block. first: the first call of the
 * kernel's (it prefetches the value rows). */
static __attribute__((target(VNNI))) void scores_queries(const float *q, int nq, int dk, float scale,
                                                         const mha_key_runs *k, float *sc, size_t sc_ld, int first)
{
    _Alignas(64) float sr[MHA_INT8_PASS], z[MHA_INT8_PASS];
    _Alignas(64) __m512i w[MHA_INT8_PASS / 2];
    _Alignas(64) int16_t u[QB][MHA_INT8_PASS]; /* one room for every block size's inlined copy */
    float rq[QMAX], dq[QMAX];
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int p0 = 0; p0 < dk; p0 += MHA_INT8_PASS) {
        const int np = dk - p0 < MHA_INT8_PASS ? dk - p0 : MHA_INT8_PASS, last = p0 + np == dk;
        for (int qi = 0; qi < nq; qi++) { /* 32767 / max |q| over the pass */
            const float *qq = q + (size_t)qi * dk + p0;
            __m512 m = _mm512_setzero_ps();
            for (int c = 0; c < np; c += 16)
                m = _mm512_max_ps(m, _mm512_and_ps(_mm512_maskz_loadu_ps(first16(np - c), qq + c), absm));
            const float mq = max16(m);
            rq[qi] = mq > MHA_INT8_TINY ? 32767.0f / mq : 0.0f, dq[qi] = mq / 32767.0f;
        }
        for (int r = 0, at = 0; r < k->runs; at += k->n[r++])
            for (int g0 = 0; g0 < k->n[r]; g0 += MHA_KV_GROUP) {
                const mha_int8_group gr = mha_int8_group_at(k, r, g0, p0, dk, first);
                const float ms = group_params(gr.par, dk, np, sr, z);
                const group_codes gc = codes_of(gr.kt, (size_t)k->ld, first16(gr.slots), gr.next, gr.vr,
                                                gr.vr ? (size_t)gr.slots * (size_t)dk : 0);
                if (nq > QB)
                    widen_codes(&gc, np, w);
                for (int q0 = 0; q0 < nq; q0 += QB) { /* R constant in each: the accumulators in registers */
                    const float *qb = q + (size_t)q0 * dk;
                    float *out = sc + (size_t)q0 * sc_ld + at + g0;
                    switch (nq - q0 < QB ? nq - q0 : QB) {
#define BLOCK(R)                                                                                                       \
    case R:                                                                                                            \
        block_sums(R, qb, dk, rq + q0, dq + q0, sr, z, ms, &gc, nq > QB ? w : NULL, np, p0, last, scale, out, sc_ld, u); \
        break;
                        BLOCK(1) BLOCK(2) BLOCK(3) BLOCK(4) BLOCK(5) BLOCK(6) BLOCK(7) BLOCK(8)
                        BLOCK(9) BLOCK(10) BLOCK(11) BLOCK(12) BLOCK(13) BLOCK(14) BLOCK(15) BLOCK(16)
#undef BLOCK
                    }
                }
            }
    }
}

static __attribute__((target(VNNI))) void int8_scores_vnni(const mha_score_rows *s, const mha_key_runs *k)
{
    for (int q0 = 0; q0 < s->nq; q0 += QMAX)
        scores_queries(s->q + (size_t)q0 * s->dk, s->nq - q0 < QMAX ? s->nq - q0 : QMAX, s->dk, s->scale, k,
                       s->sc + (size_t)q0 * s->sc_ld, s->sc_ld, q0 == 0);
}

const mha_int8_scores_ops mha_int8_scores_avx512_vnni = {.name = "avx512-vnni", .needs = "avx512_vnni avx512vbmi",
                                                         .run = int8_scores_vnni};
