/* avx512_int8_scores.c — the avx512 table's int8_scores (isa.h) on AVX512_VNNI: a group's 16
 * slots of a feature pair in one zmm, their codes widened to int16 and interleaved by pair, one
 * vpdpwssd a query against its u pair broadcast. The sums are exact integers, so the bits are
 * the model's (ref.c) and avx2's, which the table takes on a CPU without VNNI. */
#include <string.h>

#include "avx512.h"
#include "kvcache.h"

#define VNNI "avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni,avx512vbmi"
#define VNNI_INLINE __attribute__((target(VNNI), always_inline)) static inline

/* Queries scored together against each group's widened codes (their sums stay in registers). */
enum { QB = 4 };

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

/* One query's u over the pass (qr: its features times 32767 / mq, qz: the features, zeros past
 * np up to whole 16s) into u (cvtps2dq then a saturating narrowing: packssdw's values, a NaN's
 * −32768), and its zero points' sum: feature c on chain c mod 16 (a lane each), then chains j
 * and j + 8, j and j + 4, j and j + 2, 0 and 1 added. */
VNNI_INLINE float query_u(const float *restrict qr, const float *restrict qz, const float *restrict sr,
                          const float *restrict z, int np, int16_t *restrict u)
{
    __m512 ch = _mm512_setzero_ps();
    for (int c = 0; c < np; c += 16) {
        const __m512i w = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(qr + c), _mm512_load_ps(sr + c)));
        _mm256_store_si256((__m256i *)(void *)(u + c), _mm512_cvtsepi32_epi16(w));
        ch = _mm512_fmadd_ps(_mm512_load_ps(qz + c), _mm512_load_ps(z + c), ch);
    }
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(ch), _mm512_extractf32x8_ps(ch, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1)));
}

/* Rows c and c + 1 of Kᵀ (k, rows ld apart; lanes past the group's slots read as zeros; r1: row
 * c + 1 or zeros) side by side in a ymm, their bytes interleaved by slot (vpermb) and widened:
 * lane t holds slot t's pair. */
VNNI_INLINE __m512i pair_codes(__m128i r0, __m128i r1)
{
    /* byte i: slot i / 2 of row (i odd) */
    const __m256i by_slot = _mm256_setr_epi8(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                             11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    return _mm512_cvtepi8_epi16(_mm256_permutexvar_epi8(by_slot, _mm256_inserti128_si256(_mm256_castsi128_si256(r0), r1, 1)));
}

/* acc + the pairs of w times u's pair broadcast (vpdpwssd from memory): GCC 12's intrinsic copied
 * each accumulator to another register and back every pair. */
VNNI_INLINE __m512i dp_pairs(__m512i acc, __m512i w, const int32_t *u)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*u));
    return acc;
}

/* R <= QB queries' exact sums against one group's `live` slots over a pass of np features: a
 * feature pair's codes (pair_codes) against each query's u pair, one vpdpwssd; then each
 * query's value fma(step, isum, zsum) into y. pk: the next group's Kᵀ (NULL: none) and pv
 * (bytes pvb): this group's value rows, a line of each prefetched a pair. */
VNNI_INLINE void group_sums(const int R, const int8_t *k, size_t ld, __mmask16 live, int np,
                            const int16_t (*u)[MHA_INT8_PASS], const float *step, const float *zsum, const int8_t *pk,
                            const char *pv, size_t pvb, __m512 *y)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    const char *ahead = pk ? (const char *)pk : (const char *)k, *rows = pvb ? pv : (const char *)k;
    const size_t rows_end = pvb ? pvb - 1 : 0;
    const int32_t *u0 = (const int32_t *)(const void *)u[0], *u1 = (const int32_t *)(const void *)u[R > 1];
    const int32_t *u2 = (const int32_t *)(const void *)u[R > 2 ? 2 : 0];
    const int32_t *u3 = (const int32_t *)(const void *)u[R > 3 ? 3 : 0];
#define PAIR_SUMS(w, i)                                                                                                \
    do {                                                                                                               \
        a0 = dp_pairs(a0, w, u0 + (i));                                                                                \
        if (R > 1)                                                                                                     \
            a1 = dp_pairs(a1, w, u1 + (i));                                                                            \
        if (R > 2)                                                                                                     \
            a2 = dp_pairs(a2, w, u2 + (i));                                                                            \
        if (R > 3)                                                                                                     \
            a3 = dp_pairs(a3, w, u3 + (i));                                                                            \
    } while (0)
    const int pairs = np / 2;
    for (int i = 0; i < pairs; i++, k += 2 * ld) {
        _mm_prefetch(ahead + (size_t)i * 2 * ld, _MM_HINT_T0);
        _mm_prefetch(rows + ((size_t)i * 64 < rows_end ? (size_t)i * 64 : rows_end), _MM_HINT_T0);
        const __m512i w = pair_codes(_mm_maskz_loadu_epi8(live, k), _mm_maskz_loadu_epi8(live, k + ld));
        PAIR_SUMS(w, i);
    }
    if (np % 2) { /* an odd pass's last feature, paired with zeros */
        const __m512i w = pair_codes(_mm_maskz_loadu_epi8(live, k), _mm_setzero_si128());
        PAIR_SUMS(w, pairs);
    }
#undef PAIR_SUMS
    const __m512i acc[QB] = {a0, a1, a2, a3};
    for (int qi = 0; qi < R; qi++)
        y[qi] = _mm512_fmadd_ps(_mm512_set1_ps(step[qi]), _mm512_cvtepi32_ps(acc[qi]), _mm512_set1_ps(zsum[qi]));
}

/* R <= QB queries (q rows dk apart) over every group of the runs, pass by pass. */
VNNI_INLINE void scores_block(const int R, const float *q, int dk, float scale, const mha_key_runs *k, float *sc,
                              size_t sc_ld, int first)
{
    _Alignas(64) float qr[QB][MHA_INT8_PASS], qz[QB][MHA_INT8_PASS], sr[MHA_INT8_PASS], z[MHA_INT8_PASS];
    _Alignas(64) int16_t u[QB][MHA_INT8_PASS];
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int p0 = 0; p0 < dk; p0 += MHA_INT8_PASS) {
        const int np = dk - p0 < MHA_INT8_PASS ? dk - p0 : MHA_INT8_PASS, last = p0 + np == dk;
        float dq[QB];
        for (int qi = 0; qi < R; qi++) { /* the queries times 32767 / max |q| */
            const float *qq = q + (size_t)qi * dk + p0;
            __m512 m = _mm512_setzero_ps();
            for (int c = 0; c < np; c += 16)
                m = _mm512_max_ps(m, _mm512_and_ps(_mm512_maskz_loadu_ps(first16(np - c), qq + c), absm));
            const float mq = max16(m);
            const __m512 rq = _mm512_set1_ps(mq > MHA_INT8_TINY ? 32767.0f / mq : 0.0f);
            dq[qi] = mq / 32767.0f;
            for (int c = 0; c < np; c += 16) {
                const __m512 x = _mm512_maskz_loadu_ps(first16(np - c), qq + c);
                _mm512_store_ps(qz[qi] + c, x), _mm512_store_ps(qr[qi] + c, _mm512_mul_ps(x, rq));
            }
        }
        for (int r = 0, at = 0; r < k->runs; at += k->n[r++])
            for (int g0 = 0; g0 < k->n[r]; g0 += MHA_KV_GROUP) {
                const int slots = k->n[r] - g0 < MHA_KV_GROUP ? k->n[r] - g0 : MHA_KV_GROUP;
                const int8_t *kg = (const int8_t *)k->kt[r] + g0 + (size_t)p0 * k->ld;
                const int8_t *pk = g0 + MHA_KV_GROUP < k->n[r] ? kg + MHA_KV_GROUP
                                   : r + 1 < k->runs           ? (const int8_t *)k->kt[r + 1] + (size_t)p0 * k->ld
                                                               : NULL;
                const char *pv = first && k->vr && p0 == 0 ? (const char *)k->vr[r] + (size_t)g0 * dk : NULL;
                const mha_f16 *par = k->kp[r] + (size_t)(g0 / MHA_KV_GROUP) * 2 * (size_t)dk + p0;
                const float ms = group_params(par, dk, np, sr, z);
                float step[QB], zsum[QB];
                for (int qi = 0; qi < R; qi++) {
                    zsum[qi] = query_u(qr[qi], qz[qi], sr, z, np, u[qi]);
                    step[qi] = dq[qi] * ms;
                }
                __m512 y[QB];
                group_sums(R, kg, (size_t)k->ld, first16(slots), np, (const int16_t (*)[MHA_INT8_PASS])u, step, zsum,
                           pk, pv, pv ? (size_t)slots * (size_t)dk : 0, y);
                const __mmask16 live = first16(slots);
                for (int qi = 0; qi < R; qi++) { /* a pass's value, added to the passes' before */
                    float *out = sc + (size_t)qi * sc_ld + at + g0;
                    __m512 v = p0 == 0 ? y[qi] : _mm512_add_ps(_mm512_maskz_loadu_ps(live, out), y[qi]);
                    _mm512_mask_storeu_ps(out, live, last ? _mm512_mul_ps(v, _mm512_set1_ps(scale)) : v);
                }
            }
    }
}

static __attribute__((target(VNNI))) void int8_scores_vnni(const mha_score_rows *s, const mha_key_runs *k)
{
    for (int q0 = 0; q0 < s->nq; q0 += QB) {
        const int nb = s->nq - q0 < QB ? s->nq - q0 : QB;
        const float *q = s->q + (size_t)q0 * s->dk;
        float *sc = s->sc + (size_t)q0 * s->sc_ld;
        if (nb == 4) /* R constant in each: the accumulators in registers */
            scores_block(4, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
        else if (nb == 3)
            scores_block(3, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
        else if (nb == 2)
            scores_block(2, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
        else
            scores_block(1, q, s->dk, s->scale, k, sc, s->sc_ld, q0 == 0);
    }
}

const mha_int8_scores_ops mha_int8_scores_avx512_vnni = {.name = "avx512-vnni", .needs = "avx512_vnni avx512vbmi",
                                                         .run = int8_scores_vnni};
