/* bench_quant.c — llama3-8b's attention layer (d 4096, 32 heads over 8 KV heads of 128, RoPE
 * neox θ 500000 with llama3 scaling, no biases) with each weight type the engine holds
 * (mha_config.weight_type; float weights, quantized at load as ggml's reference quantizer):
 *   step1   a decode step of one sequence at context 1 (mha_step_forward through a KV cache;
 *           the weights are the step's bytes: 42M of them, the cache one slot)
 *   step8   the same step for 8 sequences (8 rows, context 1)
 *   prefill one causal forward of 1 × 2048 tokens (mha_forward)
 * Types: f32 (precision f32), bf16 (precision bf16, float weights held as bf16), and the block
 * types q8_0, q4_0, q4_1, q4_k, q6_k held as stored, in an engine of precision QPREC (bf16 by
 * default: the bf16 engine's attention, the block products as the engine does them).
 *
 * Each round measures every (type, workload) once, types in turn, the first type rotating with
 * the round index (ROUND) so that no type always follows the same one; a step's figure in a
 * round is the median of STEPS steps after 3 untimed ones, a prefill's the median of ITERS
 * forwards after one untimed one. perf/bench_quant.py runs rounds of this program alternating
 * with ggml's test-backend-ops and takes medians over them.
 *
 * A type the engine cannot hold prints "n/a" with mha's reason: mha_create or mha_set_weights
 * refusing it, or the engine ignoring the type (its step's output bit for bit that of the float
 * engine of its precision, which no quantization of these weights leaves). Each type's line also gives the
 * bytes mha_pack_weights holds for it and the step's error against the f32 engine
 * (‖y − y_f32‖ / ‖y_f32‖ over the 8 rows).
 *
 * COLD > 0 (MB): as many engines per type as make COLD MB of its weights (at most 64), each
 * with its own copy, the steps going round them (layer after layer, as a model's decode does):
 * with COLD above the last-level cache, a step's weights come from memory, not from the cache
 * where the step before left them (0: one engine, as ggml's test-backend-ops repeats one
 * product).
 *
 * usage: bench_quant [--rounds N (1)] [--round R (0)] [--threads T (2)] [--steps S (20)]
 *                    [--iters I (1; 0: no prefill)] [--cold MB (0)] [--qprec f32|bf16]
 *                    [--types f32,bf16,q8_0,q4_0,q4_1,q4_k,q6_k] [--seq S (2048)]
 *                    [--activations f32|int16|bf16 (f32): what the block types multiply,
 *                     weight_activations; bf16 needs QPREC bf16]
 * Output: one line per (round, type, workload): "bench_quant round=R type=T work=W ms=M
 * min=A max=B n=STEPS layers=L" or "... status=n/a reason=...", after a setup line per type. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (perf_util.h) under -std=c11 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"
#include "perf_util.h"

enum { D = 4096, HEADS = 32, KV_HEADS = 8, DK = 128, ROWS = 8, WARMUP = 3, MIN_KV = 256, MAX_TYPES = 8,
       MAX_LAYERS = 64 };
static const size_t KVD = (size_t)KV_HEADS * DK;

typedef struct bq_type {
    const char *name;
    mha_weight_type wt;
    int bf16;                     /* engine precision: 1 bf16, 0 f32, -1 QPREC */
    double bytes_per_weight;      /* the type's own bytes (blocks: bytes per block / qk) */
} bq_type;

static const bq_type TYPES[] = {
    {"f32", MHA_WEIGHT_F32, 0, 4.0},           {"bf16", MHA_WEIGHT_F32, 1, 2.0},
    {"q8_0", MHA_WEIGHT_Q8_0, -1, 34.0 / 32},  {"q4_0", MHA_WEIGHT_Q4_0, -1, 18.0 / 32},
    {"q4_1", MHA_WEIGHT_Q4_1, -1, 20.0 / 32},  {"q4_k", MHA_WEIGHT_Q4_K, -1, 144.0 / 256},
    {"q6_k", MHA_WEIGHT_Q6_K, -1, 210.0 / 256},
};
enum { N_KNOWN = sizeof TYPES / sizeof TYPES[0] };

/* one type's engines, or why it has none */
typedef struct bq_slot {
    const bq_type *t;
    mha_config cfg_step, cfg_fwd;
    mha_engine *step[MAX_LAYERS], *fwd;
    mha_kv_cache *cache[MAX_LAYERS];
    size_t held;        /* bytes mha_pack_weights holds for the layer; 0 unknown */
    int layers;         /* engines stepped in turn */
    double err;         /* the 8 step rows against the f32 engine's */
    char why[256];      /* "" when the engines run */
    char fwd_why[256];  /* the prefill engine's own failure, if only it failed */
} bq_slot;

static mha_activations acts; /* --activations: what the block types multiply (weight_activations) */

static void config_for(mha_config *cfg, const bq_type *t, int qprec_bf16, int threads, int batch, int seq_q,
                       int seq_kv)
{
    mha_config_init(cfg);
    cfg->d_model = D, cfg->n_heads = HEADS, cfg->n_kv_heads = KV_HEADS, cfg->bias = 0;
    cfg->max_batch = batch, cfg->max_seq_q = seq_q, cfg->max_seq_kv = seq_kv;
    cfg->threads = threads, cfg->pinning = MHA_PIN_CLOSE;
    cfg->precision = (t->bf16 < 0 ? qprec_bf16 : t->bf16) ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
    cfg->rope = (mha_rope){.style = MHA_ROPE_NEOX, .theta = 500000.0f, .scaling = MHA_ROPE_SCALING_LLAMA3,
                           .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                           .original_max_position = 8192};
    for (int i = 0; i < MHA_W_COUNT; i++)
        cfg->weight_type[i] = t->wt;
    if (t->wt != MHA_WEIGHT_F32)
        cfg->weight_activations = acts;
}

/* an engine of cfg holding w, or NULL with why filled */
static mha_engine *engine_for(const mha_config *cfg, const mha_weights *w, char *why, size_t len)
{
    mha_engine *e = NULL;
    char msg[200] = "";
    mha_status st = mha_create_msg(cfg, &e, msg, sizeof msg);
    if (st != MHA_OK) {
        snprintf(why, len, "mha_create: %s: %s", mha_status_str(st), msg);
        return NULL;
    }
    if ((st = mha_set_weights(e, w)) != MHA_OK) {
        snprintf(why, len, "mha_set_weights: %s: %s", mha_status_str(st), mha_engine_last_error(e));
        mha_free(e);
        return NULL;
    }
    return e;
}

/* one decode step of `rows` sequences at context 1 (each sequence its own block 0..rows−1) */
static mha_status step_once(mha_engine *e, mha_kv_cache *c, int rows, const float *x, float *out)
{
    int32_t past[ROWS], add[ROWS], blocks[ROWS];
    for (int s = 0; s < rows; s++)
        past[s] = 0, add[s] = 1, blocks[s] = s;
    const mha_step st = {.n_seqs = rows, .n_past = past, .n_new = add, .blocks = blocks, .max_blocks = 1, .x = x};
    return mha_step_forward(e, c, &st, out);
}

static void na(int round, const char *type, const char *work, const char *why)
{
    printf("bench_quant round=%d type=%s work=%s status=n/a reason=%s\n", round, type, work, why);
}

static int parse_types(const char *list, const bq_type **out)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const bq_type *t = NULL;
        for (int i = 0; i < N_KNOWN; i++)
            if (!strcmp(tok, TYPES[i].name))
                t = &TYPES[i];
        if (!t || n == MAX_TYPES)
            return -1;
        out[n++] = t;
    }
    return n;
}

int main(int argc, char **argv)
{
    int rounds = 1, round0 = 0, threads = 2, steps = 20, iters = 1, cold = 0, qprec_bf16 = 1, seq = 2048;
    const char *types_arg = "f32,bf16,q8_0,q4_0,q4_1,q4_k,q6_k";
    const struct {
        const char *flag;
        int *v;
    } ints[] = {{"--rounds", &rounds}, {"--round", &round0}, {"--threads", &threads}, {"--steps", &steps},
                {"--iters", &iters},   {"--cold", &cold}, {"--seq", &seq}};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 0;
        for (size_t j = 0; v && j < sizeof ints / sizeof ints[0]; j++)
            if (!strcmp(a, ints[j].flag))
                *ints[j].v = atoi(v), ok = 1;
        if (v && !strcmp(a, "--types"))
            types_arg = v, ok = 1;
        if (v && !strcmp(a, "--qprec") && (!strcmp(v, "f32") || !strcmp(v, "bf16")))
            qprec_bf16 = !strcmp(v, "bf16"), ok = 1;
        if (v && !strcmp(a, "--activations") && (!strcmp(v, "f32") || !strcmp(v, "int16") || !strcmp(v, "bf16")))
            acts = !strcmp(v, "int16") ? MHA_ACTIVATIONS_INT16 : !strcmp(v, "bf16") ? MHA_ACTIVATIONS_BF16
                                                                                  : MHA_ACTIVATIONS_F32,
            ok = 1;
        if (!ok)
            goto usage;
    }
    const bq_type *want[MAX_TYPES];
    const int n_types = parse_types(types_arg, want);
    if (n_types < 1 || rounds < 1 || round0 < 0 || threads < 1 || steps < 1 || iters < 0 || cold < 0 ||
        seq < 1 || seq > 1 << 16) {
    usage:
        fprintf(stderr, "usage: bench_quant [--rounds N] [--round R] [--threads T] [--steps S] [--iters I] "
                        "[--cold MB] [--qprec f32|bf16] [--activations f32|int16|bf16] [--seq S] "
                        "[--types f32,bf16,q8_0,q4_0,q4_1,q4_k,q6_k]\n");
        return 2;
    }

    /* the weights, TORCH layout (out, in): Wq (4096, 4096), Wk and Wv (1024, 4096), Wo (4096, 4096) */
    const size_t dd = (size_t)D * D, n_w = 2 * dd + 2 * KVD * D;
    uint64_t seed = 42;
    float *w = random_floats(n_w, 0.04f, &seed), *x = random_floats((size_t)seq * D, 1.0f, &seed);
    float *ref32 = malloc((size_t)ROWS * D * sizeof *ref32), *ref16 = malloc((size_t)ROWS * D * sizeof *ref16);
    float *out = malloc((size_t)(seq > 2 * ROWS ? seq : 2 * ROWS) * D * sizeof *out); /* (2 × 8 step rows) */
    double *ms = malloc((size_t)(steps > iters ? steps : iters) * sizeof *ms);
    bq_slot *slots = calloc((size_t)n_types, sizeof *slots);
    if (!w || !x || !ref32 || !ref16 || !out || !ms || !slots) {
        fprintf(stderr, "bench_quant: out of memory\n");
        return 1;
    }
    const mha_weights fw = {.w_q = w, .w_k = w + dd, .w_v = w + dd + KVD * D, .w_o = w + dd + 2 * KVD * D,
                            .layout = MHA_LAYOUT_TORCH};

    /* the float engines' 8 step rows, f32 and bf16: each type's error is measured against the
     * f32 engine's, and a block type's output equal to its precision's float engine's bit for
     * bit means the build ignored the type */
    float *ref[2] = {ref32, ref16};
    int have_ref[2] = {0, 0};
    for (int p = 0; p < 2; p++) {
        mha_config cfg;
        char why[256];
        config_for(&cfg, &TYPES[p], 0, threads, ROWS, 1, MIN_KV);
        mha_engine *e = engine_for(&cfg, &fw, why, sizeof why);
        mha_kv_cache *c = NULL;
        if (e && mha_kv_cache_create(&cfg, ROWS, 16, 0, &c) == MHA_OK && step_once(e, c, ROWS, x, ref[p]) == MHA_OK)
            have_ref[p] = 1;
        mha_kv_cache_free(c);
        mha_free(e);
    }

    for (int ti = 0; ti < n_types; ti++) {
        bq_slot *s = &slots[ti];
        s->t = want[ti], s->err = -1;
        config_for(&s->cfg_step, s->t, qprec_bf16, threads, ROWS, 1, MIN_KV);
        config_for(&s->cfg_fwd, s->t, qprec_bf16, threads, 1, seq, seq);
        mha_packed_weights *pw = NULL;
        if (mha_pack_weights(&s->cfg_step, &fw, &pw) == MHA_OK)
            s->held = mha_packed_weights_size(pw);
        mha_packed_weights_free(pw);
        const double layer_mb = (s->held ? (double)s->held : s->t->bytes_per_weight * (double)n_w) / 1e6;
        s->layers = (int)ceil(cold / layer_mb);
        s->layers = s->layers < 1 ? 1 : s->layers > MAX_LAYERS ? MAX_LAYERS : s->layers;
        /* the cold engines after the first take the blocks mha_weights_quantize writes (ggml's
         * reference bytes, what quantizing at load gives): the weights quantized once, not per engine */
        mha_weights bw = fw;
        void *qblocks = NULL;
        if (s->layers > 1 && s->t->wt != MHA_WEIGHT_F32 &&
            (qblocks = malloc(mha_weight_bytes(s->t->wt, (int64_t)n_w)))) {
            const size_t rows[MHA_W_COUNT] = {D, KVD, KVD, D};
            const float *src[MHA_W_COUNT] = {fw.w_q, fw.w_k, fw.w_v, fw.w_o};
            unsigned char *dst = qblocks;
            bw.w_q = bw.w_k = bw.w_v = bw.w_o = NULL;
            for (int i = 0; i < MHA_W_COUNT; i++) {
                mha_weights_quantize(s->t->wt, src[i], (int64_t)(rows[i] * D), dst);
                bw.type[i] = s->t->wt, bw.blocks[i] = dst, dst += mha_weight_bytes(s->t->wt, (int64_t)(rows[i] * D));
            }
        }
        for (int l = 0; l < s->layers && !s->why[0]; l++) {
            mha_status st;
            if (!(s->step[l] = engine_for(&s->cfg_step, l > 0 && qblocks ? &bw : &fw, s->why, sizeof s->why)))
                break;
            if ((st = mha_kv_cache_create(&s->cfg_step, ROWS, 16, 0, &s->cache[l])) != MHA_OK)
                snprintf(s->why, sizeof s->why, "mha_kv_cache_create: %s", mha_status_str(st));
        }
        free(qblocks);
        if (!s->why[0]) {
            mha_status st = step_once(s->step[0], s->cache[0], ROWS, x, out);
            if (st != MHA_OK) {
                snprintf(s->why, sizeof s->why, "mha_step_forward: %s: %s", mha_status_str(st),
                         mha_engine_last_error(s->step[0]));
            } else {
                const int p = s->cfg_step.precision == MHA_PRECISION_BF16;
                double num = 0, den = 0;
                int same = have_ref[p];
                for (size_t i = 0; i < (size_t)ROWS * D; i++) {
                    const double dy = (double)out[i] - ref32[i];
                    num += dy * dy, den += (double)ref32[i] * ref32[i];
                    same &= out[i] == ref[p][i];
                }
                s->err = have_ref[0] ? sqrt(num / den) : -1;
                if (s->t->wt != MHA_WEIGHT_F32 && same)
                    snprintf(s->why, sizeof s->why, "this build ignores weight_type %s: its step's output is the %s "
                             "float engine's bit for bit", s->t->name, p ? "bf16" : "f32");
            }
            /* the last cold engine (blocks handed as stored) computes the first's (quantized at load) bits */
            const int last = s->layers - 1;
            if (!s->why[0] && last > 0 && (st = step_once(s->step[last], s->cache[last], ROWS, x, out + ROWS * D)) ==
                                              MHA_OK && memcmp(out, out + ROWS * D, (size_t)ROWS * D * sizeof *out))
                snprintf(s->why, sizeof s->why, "engine %d's step differs from engine 0's", last);
        }
        if (!s->why[0] && iters > 0) {
            if ((s->fwd = engine_for(&s->cfg_fwd, &fw, s->fwd_why, sizeof s->fwd_why))) {
                const mha_input in = {.batch = 1, .seq_q = seq, .seq_kv = seq, .q = x, .k = x, .v = x, .causal = 1};
                mha_status st = mha_forward(s->fwd, &in, out, NULL); /* untimed: the first touches its arena */
                if (st != MHA_OK) {
                    snprintf(s->fwd_why, sizeof s->fwd_why, "mha_forward: %s: %s", mha_status_str(st),
                             mha_engine_last_error(s->fwd));
                    mha_free(s->fwd), s->fwd = NULL;
                }
            }
        }
        if (s->why[0]) /* free what was made: the other types need the memory */
            for (int l = 0; l < s->layers; l++)
                mha_kv_cache_free(s->cache[l]), mha_free(s->step[l]), s->cache[l] = NULL, s->step[l] = NULL;
        printf("bench_quant type=%s setup precision=%s held=%zu type_bytes=%.0f layers=%d err=%.3e isa=%s "
               "kernel=%s%s%s\n", s->t->name, s->cfg_step.precision == MHA_PRECISION_BF16 ? "bf16" : "f32", s->held,
               s->t->bytes_per_weight * (double)n_w, s->layers, s->err, s->step[0] ? mha_engine_isa(s->step[0]) : "-",
               s->step[0] ? mha_engine_kernel(s->step[0]) : "-", s->why[0] ? " status=n/a reason=" : "", s->why);
        fflush(stdout);
    }
    free(w);

    static const char *const works[] = {"step1", "step8", "prefill"};
    for (int r = round0; r < round0 + rounds; r++) {
        for (int k = 0; k < n_types; k++) {
            bq_slot *s = &slots[(k + r) % n_types];
            for (int wk = 0; wk < 3; wk++) {
                if (wk == 2 && iters == 0)
                    continue;
                if (s->why[0] || (wk == 2 && !s->fwd)) {
                    na(r, s->t->name, works[wk], s->why[0] ? s->why : s->fwd_why);
                    continue;
                }
                const int n = wk < 2 ? steps : iters, rows = wk == 0 ? 1 : ROWS;
                mha_status st = MHA_OK;
                mha_engine *failed = NULL;
                for (int i = 0; i < (wk < 2 ? WARMUP : 0) + n && st == MHA_OK; i++) {
                    const int l = i % s->layers;
                    const double t0 = now_ms();
                    if (wk < 2) {
                        st = step_once(s->step[l], s->cache[l], rows, x, out), failed = s->step[l];
                    } else {
                        const mha_input in = {.batch = 1, .seq_q = seq, .seq_kv = seq, .q = x, .k = x, .v = x,
                                              .causal = 1};
                        st = mha_forward(s->fwd, &in, out, NULL), failed = s->fwd;
                    }
                    const double t = now_ms() - t0;
                    if (wk == 2)
                        ms[i] = t;
                    else if (i >= WARMUP)
                        ms[i - WARMUP] = t;
                }
                if (st != MHA_OK) {
                    char why[300];
                    snprintf(why, sizeof why, "%s: %s", mha_status_str(st), mha_engine_last_error(failed));
                    na(r, s->t->name, works[wk], why);
                    continue;
                }
                qsort(ms, (size_t)n, sizeof *ms, cmp_double);
                printf("bench_quant round=%d type=%s work=%s ms=%.4f min=%.4f max=%.4f n=%d layers=%d\n", r,
                       s->t->name, works[wk], ms[n / 2], ms[0], ms[n - 1], n, wk < 2 ? s->layers : 1);
                fflush(stdout);
            }
        }
    }
    for (int ti = 0; ti < n_types; ti++) {
        for (int l = 0; l < slots[ti].layers; l++)
            mha_kv_cache_free(slots[ti].cache[l]), mha_free(slots[ti].step[l]);
        mha_free(slots[ti].fwd);
    }
    free(slots), free(x), free(ref32), free(ref16), free(out), free(ms);
    return 0;
}
