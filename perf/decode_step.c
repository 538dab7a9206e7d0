/* decode_step.c — decode steps alone, for comparing builds of the step's kernels: the
 * llama3-8b decode shape of `make decode-bench` (d 4096, 32 heads, 8 KV heads of 128; SEQS
 * sequences (16), one new token each at position CONTEXT − 1) on a cache whose blocks are
 * shuffled and zeroed (mha_kv_cache_create touches its pages): no prefill, so a run takes
 * seconds, not the minute of `mha run configs/llama3-8b-decode.yaml`. The values in the
 * cache do not change the work. Reports the median step, min–max, and bytes moved
 * (weights + the cache read) per second of the median step. Run two builds alternately
 * (perf/ab.sh does it for `mha run`): single runs on a shared VM swing by 10–30%.
 *
 * usage: decode_step [f32|bf16] [KV_HEADS (8) | mla] [CONTEXT (2048)] [STEPS (30)] [THREADS (2)]
 *                    [SEQS (16)] [ISA (auto)] [KV_CACHE (auto: the precision's; int8)]
 *                    [BF16_KERNEL (auto; a kernel of the table, e.g. fma-bf16)] [BLOCK_SIZE (16)]
 *                    [ORDER (shuffled | in-order: each sequence's blocks consecutive, as the
 *                    vLLM peer of `make bench-core` lays its cache out)]
 * KV_HEADS mla: DeepSeek-V3's attention layer instead (configs/deepseek-v3-attn.yaml: d 7168,
 * 128 heads, q_lora 1536, a latent cache of kv_lora 512 + rope 64 a token; issue 34's
 * benchmark shape with CONTEXT 4096); its step reads the weights and each token's latent row
 * (576 values: K, and V its first 512).
 * CONTEXT 1 leaves the projections alone: a step at CONTEXT minus that one is the attention
 * phase. The engine holds at least MIN_KV positions whatever the context: its Q/K/V scratch
 * holds max(seq_q, seq_kv) rows, and a step's projection tasks take at most that many, so an
 * engine of one position would project the sequences one row per task. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (perf_util.h) under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"
#include "perf_util.h"

enum { D = 4096, HEADS = 32, DK = 128, MAX_SEQS = 256, WARMUP = 3, MIN_KV = 256 };
/* DeepSeek-V3's MLA layer */
enum { MLA_D = 7168, MLA_HEADS = 128, MLA_QL = 1536, MLA_KVL = 512, MLA_NOPE = 128, MLA_ROPE = 64, MLA_V = 128 };

int main(int argc, char **argv)
{
    const int bf16 = argc > 1 && !strcmp(argv[1], "bf16");
    const int mla = argc > 2 && !strcmp(argv[2], "mla");
    const int kvh = mla ? 1 : argc > 2 ? atoi(argv[2]) : 8, context = argc > 3 ? atoi(argv[3]) : 2048;
    const int steps = argc > 4 ? atoi(argv[4]) : 30, threads = argc > 5 ? atoi(argv[5]) : 2;
    const int seqs = argc > 6 ? atoi(argv[6]) : 16;
    const char *isa = argc > 7 ? argv[7] : "auto";
    const int int8 = argc > 8 && !strcmp(argv[8], "int8");
    const char *bk = argc > 9 ? argv[9] : "auto";
    const int block = argc > 10 ? atoi(argv[10]) : 16, in_order = argc > 11 && !strcmp(argv[11], "in-order");
    if ((argc > 1 && !bf16 && strcmp(argv[1], "f32")) || kvh < 1 || HEADS % kvh || context < 1 || context > 1 << 20 ||
        steps < 1 || threads < 1 || seqs < 1 || seqs > MAX_SEQS || strlen(isa) >= sizeof((mha_config){0}.isa) ||
        (argc > 8 && !int8 && strcmp(argv[8], "auto")) || strlen(bk) >= sizeof((mha_config){0}.bf16_kernel) ||
        block < 1 || block > 4096 || (argc > 11 && !in_order && strcmp(argv[11], "shuffled"))) {
        fprintf(stderr,
                "usage: decode_step [f32|bf16] [KV_HEADS dividing %d | mla] [CONTEXT 1..%d] [STEPS >= 1] [THREADS >= 1] "
                "[SEQS 1..%d] [ISA auto|avx512|avx2|ref] [KV_CACHE auto|int8] [BF16_KERNEL auto|NAME] "
                "[BLOCK_SIZE 1..4096] [ORDER shuffled|in-order]\n",
                HEADS, 1 << 20, MAX_SEQS);
        return 2;
    }
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = mla ? MLA_D : D, cfg.n_heads = mla ? MLA_HEADS : HEADS, cfg.n_kv_heads = mla ? 0 : kvh, cfg.bias = 0;
    /* int8: a step may refill the open K group of its last position (below) */
    cfg.max_batch = seqs, cfg.max_seq_q = int8 ? MHA_KV_GROUP : 1, cfg.max_seq_kv = context > MIN_KV ? context : MIN_KV;
    cfg.threads = threads, cfg.pinning = MHA_PIN_CLOSE;
    cfg.precision = bf16 ? MHA_PRECISION_BF16 : MHA_PRECISION_F32;
    cfg.kv_type = int8 ? MHA_KV_INT8 : MHA_KV_AUTO;
    cfg.rope = (mha_rope){.style = MHA_ROPE_NEOX, .theta = 500000.0f};
    if (mla) {
        cfg.mla = (mha_mla){.kv_lora_rank = MLA_KVL, .q_lora_rank = MLA_QL, .qk_nope_head_dim = MLA_NOPE,
                            .qk_rope_head_dim = MLA_ROPE, .v_head_dim = MLA_V, .eps = 1e-6f};
        cfg.rope = (mha_rope){.style = MHA_ROPE_GPTJ, .theta = 10000.0f};
    }
    snprintf(cfg.isa, sizeof cfg.isa, "%s", isa);
    snprintf(cfg.bf16_kernel, sizeof cfg.bf16_kernel, "%s", bk);

    const size_t kvd = (size_t)kvh * DK, d = (size_t)cfg.d_model;
    const int per_seq = (context + block - 1) / block, n_blocks = seqs * per_seq;
    /* the weights' floats, one after another (XW: (in, out)): MHA's Wq, Wk, Wv, Wo; MLA's q_a,
     * q_b, kv_a, kv_b, o, then the two latent norms (ones) */
    const size_t mq = (size_t)MLA_HEADS * (MLA_NOPE + MLA_ROPE), mkv = MLA_KVL + MLA_ROPE;
    const size_t mb = (size_t)MLA_HEADS * (MLA_NOPE + MLA_V), mo = (size_t)MLA_HEADS * MLA_V;
    const size_t n_mat = mla ? d * MLA_QL + MLA_QL * mq + d * mkv + MLA_KVL * mb + mo * d : 2 * d * d + 2 * d * kvd;
    uint64_t seed = 42;
    float *wm = random_floats(n_mat + MLA_QL + MLA_KVL, 0.02f, &seed);
    float *x = random_floats((size_t)seqs * d, 1.0f, &seed), *out = malloc((size_t)seqs * MHA_KV_GROUP * d * sizeof *out); /* (the refill's rows too) */
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks), past[MAX_SEQS], add[MAX_SEQS];
    double *ms = malloc((size_t)steps * sizeof *ms);
    mha_engine *e = NULL;
    mha_kv_cache *cache = NULL;
    int32_t fill_past[MAX_SEQS], fill_new[MAX_SEQS];
    float *fill_x = NULL;
    const char *what = "out of memory";
    mha_status st = MHA_ERR_NOMEM;
    if (!wm || !x || !out || !blocks || !ms)
        goto done;
    for (size_t i = n_mat; i < n_mat + MLA_QL + MLA_KVL; i++)
        wm[i] = 1.0f;
    if ((st = mha_create(&cfg, &e)) != MHA_OK) {
        what = "mha_create";
        goto done;
    }
    if (mla) {
        const float *q_a = wm, *q_b = q_a + d * MLA_QL, *kv_a = q_b + MLA_QL * mq, *kv_b = kv_a + d * mkv;
        const float *o = kv_b + MLA_KVL * mb, *norms = o + mo * d;
        const mha_mla_weights w = {.layout = MHA_LAYOUT_XW, .q_a = q_a, .q_a_norm = norms, .q_b = q_b, .kv_a = kv_a,
                                   .kv_a_norm = norms + MLA_QL, .kv_b = kv_b, .o = o};
        st = mha_set_mla_weights(e, &w);
    } else {
        const mha_weights w = {.w_q = wm, .w_k = wm + d * d, .w_v = wm + d * d + d * kvd, .w_o = wm + d * d + 2 * d * kvd,
                               .layout = MHA_LAYOUT_XW};
        st = mha_set_weights(e, &w);
    }
    if (st != MHA_OK) {
        what = "setting the weights";
        goto done;
    }
    if ((st = mha_kv_cache_create(&cfg, n_blocks, block, 0, &cache)) != MHA_OK) {
        what = "mha_kv_cache_create";
        goto done;
    }
    shuffled_blocks(blocks, n_blocks, &seed);
    for (int i = 0; in_order && i < n_blocks; i++)
        blocks[i] = i;
    for (int s = 0; s < seqs; s++)
        past[s] = context - 1, add[s] = 1;
    /* int8: the group holding position CONTEXT − 1 is open before the step, which completes or
     * continues it: an untimed step writes its earlier positions again before each timed one
     * (the cache keeps an open group's K at full precision, which the timed step consumes) */
    const int open = int8 ? (context - 1) % MHA_KV_GROUP : 0;
    for (int s = 0; s < seqs; s++)
        fill_past[s] = context - 1 - open, fill_new[s] = open;
    if (open && !(fill_x = random_floats((size_t)seqs * open * d, 1.0f, &seed))) {
        st = MHA_ERR_NOMEM;
        goto done;
    }
    const mha_step step = {.n_seqs = seqs, .n_past = past, .n_new = add, .blocks = blocks, .max_blocks = per_seq, .x = x};
    const mha_step fill = {.n_seqs = seqs, .n_past = fill_past, .n_new = fill_new, .blocks = blocks,
                           .max_blocks = per_seq, .x = fill_x};
    for (int i = 0; i < WARMUP + steps; i++) { /* the same step again: the same work */
        if (open && (st = mha_step_forward(e, cache, &fill, out)) != MHA_OK) {
            what = "mha_step_forward (the open group's refill)";
            goto done;
        }
        const double t0 = now_ms();
        if ((st = mha_step_forward(e, cache, &step, out)) != MHA_OK) {
            what = "mha_step_forward";
            goto done;
        }
        if (i >= WARMUP)
            ms[i - WARMUP] = now_ms() - t0;
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    const double elem = bf16 ? 2.0 : 4.0, median = ms[steps / 2];
    /* the cache's bytes a slot (every KV head, an int8 cache's parameters too), as the library
     * lays a block out; MLA: each token's latent row (K, and V its first kv_lora values) */
    const double slot = (double)(mha_kv_cache_size(&cfg, 2, block, 0) - mha_kv_cache_size(&cfg, 1, block, 0)) / block;
    const double bytes = elem * (double)n_mat + slot * seqs * context;
    printf("decode_step %s%s, kv %s, isa %s (%s), %d sequences, %d KV heads, context %d, %d threads: median %.2f ms "
           "(min %.2f, max %.2f) over %d steps, %.1f GB/s\n",
           bf16 ? "bf16" : "f32", mla ? " MLA (DeepSeek-V3)" : "", int8 ? "int8" : bf16 ? "bf16" : "f32", mha_engine_isa(e), mha_engine_kernel(e), seqs, kvh,
           context, threads, median, ms[0], ms[steps - 1], steps, bytes / median / 1e6);
done:
    if (st != MHA_OK) {
        char why[256] = "";
        if (!e)
            mha_config_check(&cfg, why, sizeof why);
        fprintf(stderr, "decode_step: %s: %s: %s\n", what, mha_status_str(st), e ? mha_engine_last_error(e) : why);
    }
    free(wm), free(x), free(out), free(blocks), free(ms), free(fill_x);
    mha_kv_cache_free(cache);
    mha_free(e);
    return st == MHA_OK ? 0 : 1;
}
