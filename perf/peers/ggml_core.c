/* ggml_core.c — ggml's flash attention (ggml_flash_attn_ext, llama.cpp's attention kernel) on
 * the CPU backend, timed as bench-core times the other peers: Q float32 (its only Q type), K
 * and V float32 ("f32": the kernel's tiled float32 path) or float16 ("bf16" column: llama.cpp's
 * default cache type; ggml's CPU kernel has no bf16 K/V path of its own, so this row's numerics
 * are fp16's, reported as such), float32 accumulation (the CPU kernel's at its default
 * precision). Causal is
 * bottom-right aligned (query i sees keys j <= i + skv − sq) through ggml's float16 mask.
 * One output row is checked against a double-precision softmax of the same values. Prints
 * {"median_ms", "min_ms", "max_ms", "precision", "max_rel_error"}.
 * usage: ggml_core B H KVH SQ SKV DK CAUSAL THREADS ITERS WARMUP f32|bf16 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t state = 42;
static float uniform(void) /* [-1, 1) */
{
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* element (c, i, head, b) of a ggml 4-d tensor as float */
static float at(const struct ggml_tensor *t, int c, int i, int h, int b)
{
    const char *p = (const char *)t->data + c * t->nb[0] + i * t->nb[1] + h * t->nb[2] + b * t->nb[3];
    return t->type == GGML_TYPE_F16 ? ggml_fp16_to_fp32(*(const ggml_fp16_t *)(const void *)p) : *(const float *)(const void *)p;
}

static void fill(struct ggml_tensor *t)
{
    const int64_t n = ggml_nelements(t);
    for (int64_t i = 0; i < n; i++) {
        const float x = uniform();
        if (t->type == GGML_TYPE_F16)
            ((ggml_fp16_t *)t->data)[i] = ggml_fp32_to_fp16(x);
        else
            ((float *)t->data)[i] = x;
    }
}

int main(int argc, char **argv)
{
    if (argc != 12) {
        fprintf(stderr, "usage: ggml_core B H KVH SQ SKV DK CAUSAL THREADS ITERS WARMUP f32|bf16\n");
        return 2;
    }
    const int b = atoi(argv[1]), h = atoi(argv[2]), kvh = atoi(argv[3]), sq = atoi(argv[4]), skv = atoi(argv[5]);
    const int dk = atoi(argv[6]), causal = atoi(argv[7]), threads = atoi(argv[8]), iters = atoi(argv[9]);
    const int warmup = atoi(argv[10]);
    const enum ggml_type kv = strcmp(argv[11], "bf16") == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    const size_t esz = kv == GGML_TYPE_F16 ? 2 : 4;
    const size_t bytes = (size_t)b * h * sq * dk * 4 * 2 + (size_t)b * kvh * skv * dk * esz * 2 + (size_t)skv * sq * 2 +
                         ggml_graph_overhead() + 16 * ggml_tensor_overhead() + (1u << 20);
    struct ggml_init_params ip = {bytes, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx)
        return 1;
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, dk, sq, h, b);
    struct ggml_tensor *k = ggml_new_tensor_4d(ctx, kv, dk, skv, kvh, b);
    struct ggml_tensor *v = ggml_new_tensor_4d(ctx, kv, dk, skv, kvh, b);
    struct ggml_tensor *m = NULL;
    fill(q), fill(k), fill(v);
    if (causal) {
        m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, skv, sq, 1, 1);
        for (int i = 0; i < sq; i++)
            for (int j = 0; j < skv; j++)
                ((ggml_fp16_t *)m->data)[(size_t)i * skv + j] = ggml_fp32_to_fp16(j <= i + skv - sq ? 0.0f : -INFINITY);
    }
    const float scale = 1.0f / sqrtf((float)dk);
    struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0f, 0.0f);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    struct ggml_cplan plan = ggml_graph_plan(gf, threads, NULL);
    plan.work_data = malloc(plan.work_size ? plan.work_size : 1);
    double *times = malloc(sizeof *times * (size_t)(iters > 0 ? iters : 1));
    if (!plan.work_data || !times)
        return 1;
    for (int i = 0; i < warmup + iters; i++) {
        const double t0 = now_ms();
        if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS)
            return 1;
        if (i >= warmup)
            times[i - warmup] = now_ms() - t0;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp);
    /* row check: the last query of head h − 1, sequence b − 1 (out is (dk, heads, sq, b)) */
    const int hb = h - 1, bb = b - 1, qi = sq - 1, g = hb / (h / kvh), nv = causal ? qi + skv - sq + 1 : skv;
    double *p = malloc(sizeof *p * (size_t)skv), mx = -INFINITY, sum = 0, num = 0, den = 0;
    for (int j = 0; j < nv; j++) {
        double s = 0;
        for (int c = 0; c < dk; c++)
            s += (double)at(q, c, qi, hb, bb) * at(k, c, j, g, bb);
        p[j] = s * scale, mx = p[j] > mx ? p[j] : mx;
    }
    for (int j = 0; j < nv; j++)
        p[j] = exp(p[j] - mx), sum += p[j];
    for (int c = 0; c < dk; c++) {
        double z = 0;
        for (int j = 0; j < nv; j++)
            z += p[j] * at(v, c, j, g, bb);
        z /= sum;
        const double got = at(out, c, hb, qi, bb);
        num += (got - z) * (got - z), den += z * z;
    }
    printf("{\"median_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f, \"precision\": \"q f32, kv %s\", "
           "\"max_rel_error\": %.3g}\n",
           times[iters / 2], times[0], times[iters - 1], kv == GGML_TYPE_F16 ? "f16" : "f32", sqrt(num / den));
    free(p), free(times), free(plan.work_data);
    ggml_free(ctx);
    return 0;
}
