/* test_cli.c — the mha command on PyTorch's golden cases (tests/gen_golden.py), its exit codes,
 * its JSON, and files that are complete or absent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glob.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "config_file.h"
#include "helpers.h"
#include "mha_io.h"

#define D "tests/data/"

typedef struct golden { char name[24]; char args[400]; char config[48]; int bf16; } golden;

/* bf16: 1, a PyTorch bf16 golden NAME_bf16_out.npy exists (gen_golden.py); 2, mha's bf16 is held
 * to the float32 golden alone (gen_golden_hf.py's cases) */
static const golden goldens[] = {
    {"mha_self", "--weights " D "mha.safetensors --input " D "x.npy", D "golden.yaml", 1},
    {"mha_keypad", "--weights " D "mha.safetensors --input " D "x.npy --lengths " D "lengths.npy", D "golden.yaml", 0},
    {"mha_causal", "--weights " D "mha.safetensors --input " D "x.npy --causal", D "golden.yaml", 0},
    {"mha_causal_pad", "--weights " D "mha.safetensors --input " D "x.npy --causal --lengths " D "lengths.npy",
     D "golden.yaml", 1},
    {"mha_cross", "--weights " D "mha.safetensors --input " D "q5.npy --kv " D "kv.npy --kv-lengths " D "kv_lengths.npy",
     D "golden.yaml", 0},
    {"proj_f16", "--weights " D "proj_f16.safetensors --prefix model.layers.0.self_attn --input " D "x.npy",
     D "golden.yaml", 0},
    {"xw_bf16", "--weights " D "xw_bf16.safetensors --input " D "x.npy --causal --lengths " D "lengths.npy",
     D "golden.yaml", 0},
    /* decoder layers after HF's Llama / Qwen2 / Mistral / GPT-J attention (GQA, RoPE, window) */
    {"llama_gqa", "--weights " D "llama_gqa.safetensors --prefix model.layers.0.self_attn --input " D "x128.npy",
     D "llama_gqa.yaml", 1},
    {"qwen2_bias", "--weights " D "qwen2_bias.safetensors --prefix model.layers.0.self_attn --input " D "x64.npy "
     "--lengths " D "lengths12.npy", D "qwen2_bias.yaml", 1},
    {"mistral_window", "--weights " D "mistral_window.safetensors --prefix model.layers.0.self_attn --input " D "x64.npy",
     D "mistral_window.yaml", 1},
    {"gptj_partial", "--weights " D "gptj_partial.safetensors --prefix model.layers.0.self_attn --input " D "x64.npy",
     D "gptj_partial.yaml", 1},
    /* current open models' attention, from HF transformers' own modules (gen_golden_hf.py) */
#define HF_GOLDEN(name) {name, "--weights " D name ".safetensors --prefix model.layers.0.self_attn --input " D name "_x.npy", \
                         D name ".yaml", 2}
    HF_GOLDEN("qwen3_qknorm"), HF_GOLDEN("gemma2_softcap"), HF_GOLDEN("gemma3_qknorm"), HF_GOLDEN("gptoss_sinks"),
    HF_GOLDEN("bloom_alibi"), HF_GOLDEN("olmo2_qknorm"),
    /* multi-head latent attention, HF's DeepseekV3Attention (gen_golden_mla.py) */
    HF_GOLDEN("mla_lora"), HF_GOLDEN("mla_qproj"),
#undef HF_GOLDEN
};

ParameterizedTestParameters(cli, reproduces_pytorch)
{
    return cr_make_param_array(golden, goldens, sizeof goldens / sizeof goldens[0]);
}

/* Runs a golden case with extra options; out: its output, shape s. */
static float *run_golden(const golden *g, const char *extra, int64_t s[3], char **out)
{
    char dir[64], args[760], path[128];
    tmpdir_make(dir, sizeof dir);
    snprintf(args, sizeof args, "run %s %s %s --output %s/out.npy --iters 1 --warmup 0", g->config, g->args, extra, dir);
    char *err;
    int rc = run_cli(args, out, &err);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", g->name, rc, err);
    free(err);
    snprintf(path, sizeof path, "%s/out.npy", dir);
    float *got = read_npy(path, 3, s);
    tmpdir_remove(dir);
    return got;
}

/* ‖got − want‖ / ‖want‖ over n values; a zero in want (a padded row) must be exactly 0 in got. */
static double golden_error(const golden *g, const float *got, const char *file, const int64_t s[3])
{
    char path[128];
    int64_t w[3];
    snprintf(path, sizeof path, D "%s", file);
    float *want = read_npy(path, 3, w);
    cr_assert(s[0] == w[0] && s[1] == w[1] && s[2] == w[2], "%s: shape differs from %s", g->name, file);
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)(s[0] * s[1] * s[2]); i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
        if (want[i] == 0.0f) /* padded rows are exactly 0 */
            cr_assert_eq(got[i], 0.0f, "%s: [%zu] = %g, want exactly 0", g->name, i, got[i]);
    }
    free(want);
    return sqrt(num / den);
}

ParameterizedTestParameters(cli, reproduces_pytorch_in_bf16)
{
    static golden cases[sizeof goldens / sizeof goldens[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof goldens / sizeof goldens[0]; i++)
        if (goldens[i].bf16)
            cases[n++] = goldens[i];
    return cr_make_param_array(golden, cases, n);
}

/* mha --precision bf16 against PyTorch's float32 golden: within the bf16 contract, 1e-2; and
 * against PyTorch's own bf16 run of the same layer (gen_golden.py): two bf16 computations that
 * round differently (PyTorch rounds every activation to bf16, mha only the products'
 * operands), each within 1e-2 of the exact result, so within 2e-2 of each other (measured:
 * PyTorch's bf16 is 3.2e-3 to 4.5e-3 from its float32, mha's below 5e-3). */
ParameterizedTest(golden *g, cli, reproduces_pytorch_in_bf16, .timeout = 60)
{
    int64_t s[3];
    char *out, file[64];
    float *got = run_golden(g, "--precision bf16", s, &out);
    snprintf(file, sizeof file, "%s_out.npy", g->name);
    const double to_f32 = golden_error(g, got, file, s);
    snprintf(file, sizeof file, "%s_bf16_out.npy", g->name);
    const double to_bf16 = g->bf16 == 1 ? golden_error(g, got, file, s) : 0.0; /* 2: no PyTorch bf16 run */
    if (g->bf16 == 1)
        cr_log_info("%s: bf16 against PyTorch float32 %.2e, against PyTorch bf16 %.2e", g->name, to_f32, to_bf16);
    else
        cr_log_info("%s: bf16 against PyTorch float32 %.2e", g->name, to_f32);
    cr_assert_leq(to_f32, 1e-2, "%s: relative error %g against PyTorch's float32", g->name, to_f32);
    cr_assert_leq(to_bf16, 2e-2, "%s: relative error %g against PyTorch's bf16", g->name, to_bf16);
    cr_assert(names_bf16_kernel(out, "kernel "), "%s: the summary does not name the bf16 kernel: %s", g->name, out);
    free(got), free(out);
}

/* The expected outputs are PyTorch's float32 results (or float64 from the stored, rounded
 * weights); mha's fp32 path is within ~1e-7 of them, so ‖out − ref‖ / ‖ref‖ ≤ 1e-5. */
ParameterizedTest(golden *g, cli, reproduces_pytorch, .timeout = 60)
{
    int64_t s[3];
    char *out, file[64];
    float *got = run_golden(g, "", s, &out);
    snprintf(file, sizeof file, "%s_out.npy", g->name);
    const double e = golden_error(g, got, file, s);
    cr_assert_leq(e, 1e-5, "%s: relative error %g", g->name, e);
    cr_assert(strstr(out, "relative error") && strstr(out, "(bound 0.0001, float32: "),
              "%s: the summary has no reference check with its bound: %s", g->name, out);
    free(got), free(out);
}

Test(cli, json_has_the_documented_keys, .timeout = 60)
{
    char *out, *err;
    int rc = run_cli("run --json --iters 2 --warmup 0", &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    const char *keys[] = {"name", "d_model", "heads", "batch", "seq_q", "seq_kv", "mask", "threads", "pinning",
                          "blis_arch", "iters", "median_ms", "min_ms", "max_ms", "gflops", "tokens_per_s", "check_rows", "check_rel_error",
                          "check_bound"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char k[40];
        snprintf(k, sizeof k, "\"%s\":", keys[i]);
        cr_assert(strstr(out, k), "JSON lacks %s: %s", keys[i], out);
    }
    cr_assert_eq(out[0], '{');
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "one line of JSON");
    free(out), free(err);
}

Test(cli, built_in_default_runs_and_checks_itself, .timeout = 60)
{
    char *out, *err;
    int rc = run_cli("run --iters 2", &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "built-in default"), "%s", out);
    const char *e = strstr(out, "relative error ");
    cr_assert(e, "%s", out);
    double rel = atof(e + strlen("relative error "));
    cr_assert_leq(rel, 1e-5, "random model differs from the double reference by %g", rel);
    free(out), free(err);
}

/* --precision bf16: the JSON names the precision and the kernel that ran, and the check
 * against the double reference holds the bf16 contract. */
Test(cli, precision_bf16_runs_and_says_which_kernel, .timeout = 60)
{
    char *out, *err;
    int rc = run_cli("run --json --iters 2 --warmup 0 --precision bf16", &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    char want[64];
    const char *auto_k = mha_bf16_kernel_auto();
    snprintf(want, sizeof want, "\"kernel\":\"%s\"", auto_k);
    cr_assert(strstr(out, "\"precision\":\"bf16\"") && strstr(out, want), "%s (want %s)", out, want);
    const char *e = strstr(out, "\"check_rel_error\":");
    cr_assert(e, "%s", out);
    double rel = atof(e + strlen("\"check_rel_error\":"));
    cr_assert(rel > 0 && rel <= 1e-2, "bf16 run differs from the double reference by %g", rel);
    free(out), free(err);
    rc = run_cli("info", &out, &err);
    snprintf(want, sizeof want, "bf16 would run on '%s'", auto_k);
    cr_assert(rc == 0 && strstr(out, want), "%s", out);
    free(out), free(err);
}

Test(cli, info_names_blis_kernel_and_cpus, .timeout = 30)
{
    char *out, *err;
    cr_assert_eq(run_cli("info", &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "BLIS") && strstr(out, "OpenMP") && strstr(out, "CPUs"), "%s", out);
    char want[96];
    snprintf(want, sizeof want, "%s runs here (auto): f32 on BLIS '%s', bf16 on '%s'", mha_isa_auto(), mha_blis_arch_auto(),
             mha_bf16_kernel_auto());
    const char *at = strstr(out, mha_isa_auto());
    cr_assert(at && strstr(out, "runs here (auto)"), "%s", out);
    /* the table's name is padded in its column: compare from "runs here" on */
    cr_assert(strstr(out, strstr(want, "runs here")), "%s (want %s)", out, want);
    cr_assert(strstr(out, "ref       runs here"), "the portable table runs everywhere: %s", out);
    free(out), free(err);
}

/* --isa runs the table named (run output and JSON say which) and refuses a name it does not
 * know, or a table that contradicts the config, with exit 2 naming --isa. */
Test(cli, isa_option_chooses_the_table, .timeout = 60)
{
    char *out, *err;
    cr_assert_eq(run_cli("run --json --iters 1 --warmup 0 --isa ref", &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "\"isa\":\"ref\"") && strstr(out, "\"blis_arch\":\"" TEST_REF_ARCH "\""), "%s", out);
    free(out), free(err);
    cr_assert_eq(run_cli("run --iters 1 --warmup 0 --isa avx9", &out, &err), 2);
    cr_assert(strstr(err, "--isa avx9: unknown (auto, " TEST_TABLES ")"), "%s", err);
    free(out), free(err);
    cr_assert_eq(run_cli("scale --isa ref", &out, &err), 2, "no config: usage error");
    free(out), free(err);
}

Test(cli, bad_usage_exits_2)
{
    const char *cases[] = {"", "frobnicate", "run --threads many", "run --iters 0", "run --no-such-flag",
                           "run a.yaml b.yaml", "run --kv-lengths " D "kv_lengths.npy", "run --prefix x", "info extra",
                           "run --precision fp8", "scale x.yaml --precision",
                           "run --activations q4"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = run_cli(cases[i], &out, &err);
        cr_assert_eq(rc, 2, "'mha %s' exited %d", cases[i], rc);
        cr_assert(strstr(err, "mha") || strstr(err, "usage"), "'mha %s': no message: %s", cases[i], err);
        free(out), free(err);
    }
}

Test(cli, outputs_are_complete_or_absent, .timeout = 60)
{
    char dir[64], args[300], path[128];
    tmpdir_make(dir, sizeof dir);
    /* a directory that does not exist: exit non-zero and nothing written anywhere */
    snprintf(args, sizeof args, "run --iters 1 --output %s/missing/out.npy", dir);
    char *out, *err;
    int rc = run_cli(args, &out, &err);
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "out.npy"), "%s", err);
    free(out), free(err);
    /* success: the file and nothing else (no temporary left behind) */
    snprintf(args, sizeof args, "run --iters 1 --output %s/y.npy --attn %s/a.npy", dir, dir);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    free(out), free(err);
    snprintf(args, sizeof args, "ls %s | wc -l | grep -qx 2", dir);
    cr_assert_eq(system(args), 0, "the output folder holds more than y.npy and a.npy");
    int64_t shape[4];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    float *attn = read_npy(path, 4, shape);
    cr_assert(shape[0] == 2 && shape[1] == 4 && shape[2] == 64 && shape[3] == 64);
    for (int row = 0; row < 2 * 4 * 64; row++) {
        double sum = 0;
        for (int j = 0; j < 64; j++)
            sum += attn[(size_t)row * 64 + j];
        cr_assert(fabs(sum - 1) < 1e-5, "attention row %d sums to %g", row, sum);
    }
    free(attn);
    tmpdir_remove(dir);
}

Test(cli, every_shipped_config_is_valid)
{
    glob_t g;
    cr_assert_eq(glob("configs/*.yaml", 0, NULL, &g), 0);
    cr_assert_geq(g.gl_pathc, 12, "configs/ has its configs");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char err[512];
        const char *path = g.gl_pathv[i];
        static cli_config fc;
        cr_assert_eq(cli_config_load(path, &fc, err, sizeof err), MHA_OK, "%s", err);
        cr_assert_gt(mha_workspace_size(&fc.engine), 0, "%s", path);
    }
    globfree(&g);
}

/* The attention variants through the command on generated weights (QK-norm factors and sinks
 * drawn with the rest): the summary names them, and the forward's check against the CLI's own
 * double reference and a decode run's check against one forward both pass. */
Test(cli, attention_variants_run_and_check, .timeout = 60)
{
    static const struct { const char *model, *says; } models[] = {
        {"model: { d_model: 64, heads: 4, kv_heads: 2, head_dim: 24, bias: true, window: 9, scale: 0.3, softcap: 4,\n"
         "         sinks: true, qk_norm: { kind: head, weight_offset: 1 }, rope: { style: neox } }\n",
         "\"variants\":\"scale 0.3, softcap 4, sinks, QK-norm head (1 + w)\""},
        {"model: { d_model: 96, heads: 6, bias: false, sinks: true, alibi: { max_bias: 8 } }\n",
         "\"variants\":\"sinks, ALiBi max_bias 8\""},
        {"model: { d_model: 64, heads: 4, kv_heads: 2, head_dim: 24, bias: true, qk_norm: { kind: full }, rope: { style: neox } }\n",
         "\"variants\":\"QK-norm full\""},
    };
    char dir[64], path[128], args[256], yaml[512];
    tmpdir_make(dir, sizeof dir);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        for (int decode = 0; decode < 2; decode++) {
            snprintf(yaml, sizeof yaml, "%sbatch: { size: 2, seq_len: 20, mask: causal }\nrun: { iters: 1, warmup: 0 }\n%s",
                     models[i].model, decode ? "decode: { seqs: 2, context: 30, new: 2, steps: 3, block_size: 8 }\n" : "");
            write_config(dir, "v.yaml", yaml, path, sizeof path);
            snprintf(args, sizeof args, "run %s --json", path);
            char *out, *err;
            cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
            if (!decode)
                cr_assert(strstr(out, models[i].says), "model %zu: no %s in %s", i, models[i].says, out);
            const char *at = strstr(out, "\"check_rel_error\":");
            cr_assert(at, "%s", out);
            const double e = strtod(at + strlen("\"check_rel_error\":"), NULL);
            cr_assert_leq(e, 1e-4, "model %zu, decode %d: check %g in %s", i, decode, e, out);
            free(out), free(err);
        }
    tmpdir_remove(dir);
}

/* A config with a decode block: prefill and decode through the KV cache, the step-versus-
 * forward check, the documented JSON keys; file options that do not apply are refused. */
Test(cli, decode_block_runs_steps_through_the_cache, .timeout = 60)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "dec.yaml",
                 "model: { d_model: 128, heads: 8, kv_heads: 2, bias: true, window: 40, rope: { style: neox } }\n"
                 "decode: { seqs: 3, context: 50, new: 2, steps: 6, block_size: 8, prefill_chunk: 16 }\n",
                 path, sizeof path);
    snprintf(args, sizeof args, "run %s --json", path);
    char *out, *err;
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    const char *keys[] = {"\"mode\":\"decode\"", "\"prefill_tokens_per_s\":", "\"step_median_ms\":", "\"step_p99_ms\":",
                          "\"decode_tokens_per_s\":", "\"kv_cache_bytes\":", "\"check_rows\":4", "\"check_rel_error\":",
                          "\"check_bound\":0.0001"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert(strstr(out, keys[i]), "no %s in %s", keys[i], out);
    double e = 1;
    const char *at = strstr(out, "\"check_rel_error\":");
    cr_assert(at && sscanf(at, "\"check_rel_error\":%lf", &e) == 1 && e < 1e-5, "steps against the forward: %s", out);
    long f32_bytes = 0, bf16_bytes = 0;
    at = strstr(out, "\"kv_cache_bytes\":");
    cr_assert(at && sscanf(at, "\"kv_cache_bytes\":%ld", &f32_bytes) == 1, "%s", out);
    free(out), free(err);
    /* bf16: a bf16 cache (half the bytes past its header), within the bf16 contract of the
     * float32 forward, the kernel named */
    snprintf(args, sizeof args, "run %s --json --precision bf16", path);
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "\"precision\":\"bf16\"") && names_bf16_kernel(out, "\"kernel\":\""), "%s", out);
    at = strstr(out, "\"kv_cache_bytes\":");
    cr_assert(at && sscanf(at, "\"kv_cache_bytes\":%ld", &bf16_bytes) == 1, "%s", out);
    cr_assert(bf16_bytes < f32_bytes && bf16_bytes * 2 > f32_bytes, "bf16 cache %ld bytes, f32 %ld", bf16_bytes,
              f32_bytes);
    at = strstr(out, "\"check_rel_error\":");
    cr_assert(at && sscanf(at, "\"check_rel_error\":%lf", &e) == 1 && e < 1e-2, "bf16 steps against the forward: %s", out);
    cr_assert(strstr(out, "\"check_bound\":0.0225") && strstr(out, "\"check_bound_path\":\"bf16\""),
              "the bf16 bound of float weights over 4 rows, 1.5e-2 x 1.5: %s", out);
    free(out), free(err);
    snprintf(args, sizeof args, "run %s --kv tests/data/x.npy", path);
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, "--kv: not with a decode config"), "%s", err);
    free(out), free(err);
    snprintf(args, sizeof args, "run %s --output %s/y.npy", path, dir);
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, "--output: only with --input in a decode config"), "%s", err);
    free(out), free(err);
    tmpdir_remove(dir);
}

/* Real tokens through the cache (issue 35): the trained case's inputs (tests/data/
 * smollm2_trained*) prefilled in chunks of 24 to 64 tokens, the rest token by token, every
 * output row written; against HF's module the rows hold the forward's bounds (f32 1e-5, bf16
 * 1e-2; test_trained.c's reasons), an int8 cache issue 35's 1e-2; tokens beyond the block's
 * cache exit 2 naming the sizes, writing nothing. */
Test(cli, real_tokens_through_the_cache_reproduce_hf, .timeout = 120)
{
    char dir[64], path[128], args[768], y[96];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "sd.yaml",
                 "model: { d_model: 576, heads: 9, kv_heads: 3, head_dim: 64, bias: false,\n"
                 "         rope: { style: neox, theta: 100000 } }\n"
                 "decode: { seqs: 1, context: 64, new: 1, steps: 64, block_size: 16, prefill_chunk: 24 }\n",
                 path, sizeof path);
    /* a prefill that leaves an int8 K group open (40 = 2.5 groups of 16), run once untimed
     * first: the rewound cache's blocks are released, so the timed prefill finds room for its
     * open groups */
    char open_path[128];
    write_config(dir, "open.yaml",
                 "model: { d_model: 576, heads: 9, kv_heads: 3, head_dim: 64, bias: false,\n"
                 "         rope: { style: neox, theta: 100000 } }\n"
                 "decode: { seqs: 1, context: 40, new: 1, steps: 88, block_size: 16, prefill_chunk: 24 }\n"
                 "run: { warmup: 1 }\n",
                 open_path, sizeof open_path);
    snprintf(y, sizeof y, "%s/y.npy", dir);
    const struct { const char *config, *opts; double bound; int rc; } runs[] = {
        {path, "", 1e-5, 0}, {path, "--precision bf16", 1e-2, 0}, {path, "--kv-cache int8", 1e-2, 0},
        {open_path, "--kv-cache int8", 1e-2, 0}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args,
                 "run %s --weights " D "smollm2_trained.safetensors --prefix model.layers.26.self_attn. --input " D
                 "smollm2_trained_x.npy --lengths " D "smollm2_trained_lengths.npy --output %s --check 8 %s",
                 runs[i].config, y, runs[i].opts);
        char *out, *err;
        const int rc = run_cli(args, &out, &err);
        cr_assert_eq(rc, runs[i].rc, "%s: exit %d: %s", runs[i].opts, rc, err);
        cr_assert(strstr(out, "over 8 rows against one causal float32 forward over the inputs (bound"), "%s", out);
        int64_t s[3];
        float *got = read_npy(y, 3, s);
        const golden g = {"smollm2_trained", "", "", 0};
        const double e = golden_error(&g, got, "smollm2_trained_out.npy", s);
        cr_log_info("real tokens through the cache%s%s: %.2e against HF", runs[i].opts[0] ? ", " : "", runs[i].opts, e);
        cr_assert_leq(e, runs[i].bound, "%s: relative error %.3g against HF", runs[i].opts, e);
        free(got), free(out), free(err);
        remove(y);
    }
    /* 128 tokens into a cache of 64 + 1 × 8 */
    write_config(dir, "short.yaml",
                 "model: { d_model: 576, heads: 9, kv_heads: 3, head_dim: 64, bias: false }\n"
                 "decode: { seqs: 1, context: 64, new: 1, steps: 8 }\n",
                 path, sizeof path);
    snprintf(args, sizeof args, "run %s --input " D "smollm2_trained_x.npy --output %s", path, y);
    char *out, *err;
    cr_assert_eq(run_cli(args, &out, &err), 2, "%s", err);
    cr_assert(strstr(err, "sequence 0 has 128 tokens, more than the decode block's cache holds (context + new × steps = 72)"),
              "%s", err);
    cr_assert_neq(access(y, F_OK), 0, "a failed run wrote %s", y);
    free(out), free(err);
    tmpdir_remove(dir);
}

/* --check's double-precision reference runs head by head: it once held K and V of a whole
 * sequence in double (seq_kv × d × 16 bytes: 32 MiB here, 128 MiB at the long-context shape),
 * more than the engine. Checking 4 rows may now add at most one head's share. */
static double peak_rss_of(const char *args)
{
    char *out, *err;
    cr_assert_eq(run_cli(args, &out, &err), 0, "%s: %s", args, err);
    const char *at = strstr(out, "peak RSS ");
    double mib = -1;
    cr_assert(at && sscanf(at, "peak RSS %lf MiB", &mib) == 1, "no peak RSS in: %s", out);
    free(out), free(err);
    return mib;
}

/* --check's one rule, past its bound: bf16 on sharp attention (scores scaled by 300: Q and K
 * rounded to bf16 move the logits by units) is outside the bf16 bound of float weights (over 4
 * rows 2.25e-2, measured 5.8e-2 on every table) and of q8_0 blocks (over 16 rows 1.25e-2,
 * measured 2.5e-2); the run says so with the bound, its path and rule, and exits 1, its
 * report still written. */
Test(cli, a_check_above_its_bound_exits_1, .timeout = 60)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "sharp.yaml", "model: { d_model: 64, heads: 4, scale: 300 }\nbatch: { size: 1, seq_len: 32 }\n",
                 path, sizeof path);
    const struct { const char *opts, *err, *out; } t[] = {
        {"--check 4", "over 4 rows is above the bound 0.0225 of bf16 (",
         "against a double-precision reference (bound 0.0225, bf16: "},
        {"--check 16 --weights-type q8_0",
         "over 16 rows is above the bound 0.0125 of bf16, block weights (0.01 over a layer x (1 + 1/sqrt(16 rows))",
         "and dequantized (what the engine holds) (bound 0.0125, bf16, block weights: "},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        snprintf(args, sizeof args, "run %s --precision bf16 %s", path, t[i].opts);
        char *out, *err;
        const int rc = run_cli(args, &out, &err);
        cr_assert_eq(rc, 1, "%s: exit %d: %s", t[i].opts, rc, err);
        cr_assert(strstr(err, t[i].err), "%s: %s", t[i].opts, err);
        cr_assert(strstr(out, t[i].out), "%s: %s", t[i].opts, out);
        free(out), free(err);
    }
    tmpdir_remove(dir);
}

Test(cli, check_rows_cost_little_memory_next_to_the_engine, .timeout = 120)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "long.yaml", "model: { d_model: 256, heads: 4 }\nbatch: { size: 1, seq_len: 8192 }\nthreads: { count: 2 }\n",
                 path, sizeof path);
    snprintf(args, sizeof args, "run %s --iters 1 --warmup 0 --check 0", path);
    double without = peak_rss_of(args);
    snprintf(args, sizeof args, "run %s --iters 1 --warmup 0 --check 4", path);
    double with = peak_rss_of(args);
    cr_log_info("peak RSS %.0f MiB without --check, %.0f MiB with 4 rows", without, with);
    cr_assert_lt(with - without, 16.0, "--check 4 added %.0f MiB (K and V of the whole sequence are 32 MiB)", with - without);
    tmpdir_remove(dir);
}

/* mha run PATH --core --json --check ROWS in f32 and bf16: exit 0, every key in the JSON, and
 * the checked rows' relative error within the double reference's bound for the precision
 * (f32 1e-5: a float32 core's rounding; bf16 1e-2: Q, K, V and the probabilities rounded). */
static void core_checks_in_both_precisions(const char *path, int rows, const char *const *keys, size_t n_keys)
{
    const struct { const char *precision; double bound; } runs[] = {{"f32", 1e-5}, {"bf16", 1e-2}};
    for (int i = 0; i < 2; i++) {
        char args[256];
        snprintf(args, sizeof args, "run %s --core --json --check %d --precision %s", path, rows, runs[i].precision);
        char *out, *err;
        cr_assert_eq(run_cli(args, &out, &err), 0, "%s: %s", runs[i].precision, err);
        for (size_t k = 0; k < n_keys; k++)
            cr_assert(strstr(out, keys[k]), "no %s in %s", keys[k], out);
        double e = 1;
        const char *at = strstr(out, "\"check_rel_error\":");
        cr_assert(at && sscanf(at, "\"check_rel_error\":%lf", &e) == 1 && e <= runs[i].bound, "%s: %s", runs[i].precision,
                  out);
        free(out), free(err);
    }
}

/* mha run --core: the core alone on generated Q, K, V, checked against the double reference in
 * both precisions (GQA, a window, softcap and sinks); options that need weights or a cache are
 * refused. */
Test(cli, core_runs_the_attention_core_and_checks_it, .timeout = 60)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "core.yaml",
                 "model: { d_model: 16, heads: 6, kv_heads: 2, head_dim: 40, bias: false, window: 50, softcap: 4,\n"
                 "         sinks: true }\n"
                 "batch: { size: 3, seq_len: 300, mask: causal, lengths: [300, 0, 17] }\n"
                 "run: { warmup: 0, iters: 2 }\n",
                 path, sizeof path);
    const char *keys[] = {"\"mode\":\"core\"", "\"heads\":6", "\"kv_heads\":2", "\"head_dim\":40", "\"gflops\":",
                          "\"check_rows\":12"};
    core_checks_in_both_precisions(path, 12, keys, sizeof keys / sizeof keys[0]);
    snprintf(args, sizeof args, "run %s --core --weights w.safetensors", path);
    char *out, *err;
    cr_assert_eq(run_cli(args, &out, &err), 2);
    cr_assert(strstr(err, "--weights: not with --core"), "%s", err);
    free(out), free(err);
    tmpdir_remove(dir);
}

/* model.v_head_dim below head_dim (an MLA model's absorbed core): mha run --core reads V as K's
 * first features and checks them against the reference; the modes with projections refuse the
 * config naming the key and its line. */
Test(cli, a_narrower_v_runs_in_the_core_alone, .timeout = 60)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "mla.yaml",
                 "model: { d_model: 16, heads: 8, kv_heads: 1, head_dim: 72, v_head_dim: 64, bias: false }\n"
                 "batch: { size: 2, seq_len: 280, mask: causal }\n"
                 "run: { warmup: 0, iters: 1 }\n",
                 path, sizeof path);
    const char *keys[] = {"\"head_dim\":72", "\"v_head_dim\":64"};
    core_checks_in_both_precisions(path, 10, keys, 2);
    const char *modes[] = {"run %s", "scale %s --threads 1"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, modes[i], path);
        char *out, *err;
        cr_assert_eq(run_cli(args, &out, &err), 2, "%s", args);
        cr_assert(strstr(err, "mla.yaml:1: model.v_head_dim: 64 below head_dim 72 runs with mha run --core only"), "%s: %s",
                  args, err);
        free(out), free(err);
    }
    tmpdir_remove(dir);
}

/* An MLA config's core (mha run --core) is its absorbed core: one KV head of kv_lora + rope
 * features whose V is the latent, its first kv_lora (the engine's d_v; the check's reference
 * reads V there too), 32 query heads in the core's tasks of 16. */
Test(cli, an_mla_configs_core_is_the_absorbed_core, .timeout = 60)
{
    char dir[64], path[128];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "mla-core.yaml",
                 "model: { d_model: 64, heads: 32, mla: { kv_lora_rank: 40, qk_nope_head_dim: 8, qk_rope_head_dim: 8,\n"
                 "         v_head_dim: 8 } }\n"
                 "batch: { size: 2, seq_len: 70, mask: causal }\n"
                 "run: { warmup: 0, iters: 1 }\n",
                 path, sizeof path);
    const char *keys[] = {"\"head_dim\":48", "\"v_head_dim\":40"};
    core_checks_in_both_precisions(path, 10, keys, 2);
    tmpdir_remove(dir);
}

/* An MLA config runs a self-attention forward (generated weights checked against the double
 * reference) and a decode block through its latent cache (checked against one forward);
 * cross-attention and --attn are refused naming the key or option. */
Test(cli, mla_configs_run_forward_and_decode_and_refuse_the_rest, .timeout = 60)
{
    char dir[64], path[128], args[256];
    tmpdir_make(dir, sizeof dir);
    static const char model[] = "model: { d_model: 48, heads: 3, bias: true, rope: { style: gptj },\n"
                                "         mla: { kv_lora_rank: 12, q_lora_rank: 16, qk_nope_head_dim: 6, qk_rope_head_dim: 4,"
                                " v_head_dim: 5 } }\n";
    const struct { const char *name, *rest, *opts; int rc; const char *says; } t[] = {
        {"fwd.yaml", "batch: { size: 2, seq_len: 70, mask: causal, lengths: [70, 33] }\n", "--check 12", 0,
         "relative error"},
        {"bf16.yaml", "batch: { size: 2, seq_len: 70, mask: causal }\n", "--check 12 --precision bf16", 0,
         "(bound 0.0193, bf16: "},
        {"dec.yaml", "decode: { seqs: 3, context: 270, new: 2, steps: 3, block_size: 16, prefill_chunk: 100 }\n",
         "--check 6", 0, "relative error 0.00e+00 over 6 rows against one causal float32 forward"},
        {"dec16.yaml", "decode: { seqs: 2, context: 40, steps: 2 }\n", "--check 4 --precision bf16", 0,
         "(bound 0.0225, bf16: "},
        {"cross.yaml", "batch: { seq_len: 8, kv_len: 9 }\n", "", 2, "batch.kv_len: not with model.mla"},
        {"attn.yaml", "batch: { seq_len: 8 }\n", "--attn x.npy", 2, "--attn: not with model.mla"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char yaml[512];
        snprintf(yaml, sizeof yaml, "%s%s", model, t[i].rest);
        write_config(dir, t[i].name, yaml, path, sizeof path);
        snprintf(args, sizeof args, "run %s --iters 1 --warmup 0 %s", path, t[i].opts);
        char *out, *err;
        cr_assert_eq(run_cli(args, &out, &err), t[i].rc, "%s: %s%s", t[i].name, out, err);
        cr_assert(strstr(t[i].rc ? err : out, t[i].says), "%s: no '%s' in %s%s", t[i].name, t[i].says, out, err);
        free(out), free(err);
    }
    /* HF's DeepseekV3Attention golden through the latent cache: a prefill in chunks of 3, then
     * token by token, real tokens from --input; the output is the module's */
    char *yaml = NULL, *out = NULL, *err = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&yaml, &n);
    FILE *g = fopen(D "mla_lora.yaml", "r");
    cr_assert(f && g);
    char line[512];
    while (fgets(line, sizeof line, g))
        if (strncmp(line, "batch:", 6) != 0)
            fputs(line, f);
    fputs("decode: { seqs: 2, context: 6, new: 1, steps: 6, block_size: 4, prefill_chunk: 3 }\n", f);
    fclose(g), fclose(f);
    write_config(dir, "golden_dec.yaml", yaml, path, sizeof path);
    char a2[512];
    snprintf(a2, sizeof a2, "run %s --weights " D "mla_lora.safetensors --prefix model.layers.0.self_attn --input " D
             "mla_lora_x.npy --output %s/dec.npy --check 6", path, dir);
    cr_assert_eq(run_cli(a2, &out, &err), 0, "%s%s", out, err);
    snprintf(path, sizeof path, "%s/dec.npy", dir);
    int64_t s1[3], s2[3];
    float *got = read_npy(path, 3, s1), *want = read_npy(D "mla_lora_out.npy", 3, s2);
    cr_assert(!memcmp(s1, s2, sizeof s1));
    double num = 0, den = 0;
    for (size_t e = 0; e < (size_t)(s1[0] * s1[1] * s1[2]); e++)
        num += ((double)got[e] - want[e]) * ((double)got[e] - want[e]), den += (double)want[e] * want[e];
    cr_assert_leq(sqrt(num / den), 1e-5, "the golden through the latent cache: relative error %g", sqrt(num / den));
    free(got), free(want), free(yaml), free(out), free(err);
    tmpdir_remove(dir);
}

/* Issue 35's defects of the command: an explicit bf16 cache with the decode block's check (its
 * float32 forward took the cache type and was an invalid config), --kv-cache where no cache
 * exists (accepted, changed nothing), and --bf16-kernel on run and scale. */
Test(cli, kv_cache_and_bf16_kernel_options_apply_or_are_refused, .timeout = 60)
{
    char dir[64], path[128], args[320];
    tmpdir_make(dir, sizeof dir);
    write_config(dir, "dec.yaml",
                 "model: { d_model: 64, heads: 4, kv_heads: 2, bias: false, rope: { style: neox } }\n"
                 "engine: { precision: bf16, kv_cache: bf16 }\n"
                 "decode: { seqs: 2, context: 40, new: 1, steps: 3, block_size: 16 }\n",
                 path, sizeof path);
    char *out, *err;
    snprintf(args, sizeof args, "run %s --json", path);
    cr_assert_eq(run_cli(args, &out, &err), 0, "an explicit bf16 cache with --check: %s", err);
    cr_assert(strstr(out, "\"check_rows\":4"), "%s", out);
    free(out), free(err);
    const struct { const char *args, *says; } refused[] = {
        {"run --kv-cache int8", "--kv-cache: only with a decode block"},
        {"run --bf16-kernel ref-bf16", "only with precision bf16"},
        {"run --precision bf16 --isa ref --bf16-kernel amx-bf16", "not a kernel of isa ref"},
        {"scale configs/bert-base.yaml --bf16-kernel ref-bf16", "only with precision bf16"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        cr_assert_eq(run_cli(refused[i].args, &out, &err), 2, "%s", refused[i].args);
        cr_assert(strstr(err, refused[i].says), "%s: '%s' does not say '%s'", refused[i].args, err, refused[i].says);
        free(out), free(err);
    }
    cr_assert_eq(run_cli("run --precision bf16 --isa ref --bf16-kernel ref-bf16 --iters 1 --warmup 0 --json", &out, &err), 0,
                 "%s", err);
    cr_assert(strstr(out, "\"kernel\":\"ref-bf16\""), "%s", out);
    free(out), free(err);
    /* a cache the precision cannot read: the option is named, not the weights file it was
     * loaded beside, nor "invalid config" */
    char wpath[128];
    write_config(dir, "w.yaml",
                 "model: { d_model: 128, heads: 8, kv_heads: 2, bias: false, rope: { style: neox, theta: 500000, "
                 "scaling: llama3, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 64 } }\n"
                 "decode: { seqs: 2, context: 40, new: 1, steps: 2, block_size: 16 }\n",
                 wpath, sizeof wpath);
    const char *const with[] = {"", " --weights tests/data/llama_gqa.safetensors"};
    for (int w = 0; w < 2; w++) {
        snprintf(args, sizeof args, "run %s --precision f32 --kv-cache bf16%s", w ? wpath : path, with[w]);
        cr_assert_eq(run_cli(args, &out, &err), 2, "%s", args);
        cr_assert(strstr(err, "--kv-cache bf16 with precision f32") && !strstr(err, "safetensors") &&
                      !strstr(err, "invalid config"), "%s: '%s'", args, err);
        free(out), free(err);
    }
    tmpdir_remove(dir);
}
