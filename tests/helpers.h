/* helpers.h — shared test helpers: seeded data, the double-precision reference, comparisons,
 * and the allocation counter the counted copy of libmha calls into. */
#ifndef MHA_TEST_HELPERS_H
#define MHA_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include <criterion/parameterized.h>

#include "mha.h"

/* ---- seeded data ---- */
typedef struct { uint64_t s; } rng;
uint64_t rng_next(rng *r);
float rng_uniform(rng *r, float lo, float hi);
void fill_uniform(float *x, size_t n, float lo, float hi, rng *r);

/* ---- a test problem: weights in x·W layout, inputs, masks ---- */
typedef struct problem {
    int d, h, batch, seq_q, seq_kv;
    int dk;           /* d_k: d / h unless problem_set_head_dim */
    int bias, causal;
    int cross;        /* 0: k = v = q (one buffer); 1: separate k and v; 2: k = v, its own buffer */
    float *wq, *wk, *wv, *wo;  /* (d, h·dk), (d, kvh·dk) ×2, (h·dk, d); x·W */
    float *bq, *bk, *bv, *bo;  /* (h·dk), (kvh·dk) ×2, (d); or NULL */
    float *q, *k, *v;          /* (batch, seq, d) */
    int32_t *q_len, *kv_len;   /* NULL or (batch) */
    uint8_t *mask;             /* NULL or (seq_q, seq_kv) */
    int kvh;                   /* KV heads (problem_set_kv_heads); h by default */
    mha_rope rope;             /* style NONE by default */
    int window;                /* 0: none */
    /* the attention variants (issue 21), all off by default */
    float scale, softcap;      /* 0: 1/sqrt(dk); 0: none */
    float alibi_max_bias;      /* 0: none */
    mha_qk_norm qk_norm;       /* kind NONE by default (problem_set_qk_norm) */
    float *q_norm, *k_norm;    /* HF's RMSNorm weights: (dk) each, or (h·dk), (kvh·dk) for full */
    float *sinks;              /* NULL or (h) (problem_set_sinks) */
} problem;

/* Unit-scale inputs, weights ~ U(-1, 1)/sqrt(d) as nn.Linear's init, so activations stay unit scale. */
void problem_make(problem *p, int d, int h, int batch, int seq_q, int seq_kv, int bias, int cross, uint64_t seed);
void problem_free(problem *p);
/* Grouped-query attention: wk, wv (and bk, bv) become (d, kvh·d_k), redrawn from seed. */
void problem_set_kv_heads(problem *p, int kvh, uint64_t seed);
/* Heads of dk features, not d / h (Qwen3, Gemma 2): every weight and bias redrawn from seed. */
void problem_set_head_dim(problem *p, int dk, uint64_t seed);
/* QK-norm per head or over the whole projection (kind; eps 1e-6) with weights drawn around 1
 * (offset 0) or around 0 (offset 1: Gemma's 1 + w), from seed. */
void problem_set_qk_norm(problem *p, mha_qk_norm_kind kind, int weight_offset, uint64_t seed);
/* A sink logit per head, U(-2, 2) from seed. */
void problem_set_sinks(problem *p, uint64_t seed);
/* The attention variants of current models, by bits: V_SCALE a scale of 0.2 (not
 * 1/sqrt(dk)), V_SOFTCAP softcap 3 (small, so that tanh bends unit-scale scores), V_SINKS,
 * V_QK_NORM (Qwen3) or V_QK_NORM_GEMMA (1 + w) per head, V_QK_NORM_FULL over the whole
 * projection (OLMo 2), V_ALIBI (max_bias 8; RoPE off). Set the KV heads first. */
enum { V_SCALE = 1, V_SOFTCAP = 2, V_SINKS = 4, V_QK_NORM = 8, V_QK_NORM_GEMMA = 16, V_ALIBI = 32, V_QK_NORM_FULL = 64 };
void problem_set_variants(problem *p, unsigned variants, uint64_t seed);
mha_input problem_input(const problem *p);
/* Weights for the engine in the given layout; transposed copies are kept in *scratch (free it). */
mha_weights problem_weights(const problem *p, mha_layout layout, float **scratch);
void problem_config(const problem *p, mha_config *cfg, int threads);
/* Both: the problem's config and its weights in the given layout (free *scratch). */
mha_weights problem_ready(const problem *p, mha_config *cfg, int threads, mha_layout layout, float **scratch);

/* Plain double-precision multi-head attention (DESIGN.md §1): out (batch, seq_q, d),
 * attn NULL or (batch, h, seq_q, seq_kv). */
void reference_mha(const problem *p, double *out, double *attn);
/* Its attention part for sequence b (the problem's lengths, masks and variants), on projected
 * Q (seq_q, h·dk), K and V (seq_kv, kvh·dk): Z (seq_q, h·dk), zeroed first, rows past the query
 * length 0; attn as above (its rows of sequence b). */
void reference_attention(const problem *p, int b, const double *Q, const double *K, const double *V, double *Z,
                         double *attn);

/* ‖x − ref‖ / ‖ref‖ (‖ref‖ = 0: ‖x‖). */
double rel_error(const float *x, const double *ref, size_t n);
/* Index of the first differing float bit pattern, or -1. */
long first_bit_difference(const float *a, const float *b, size_t n);

/* Engine from the problem's config, no weights yet; asserts on failure. */
mha_engine *engine_bare(const problem *p, int threads);
/* Engine from the problem, weights set; asserts on failure. */
mha_engine *engine_for(const problem *p, int threads, mha_layout layout);

/* ---- kernel tables (src/isa/) ---- */
struct mha_isa;
struct mha_kernel;
struct mha_bkernel;
/* The table the engine tests run on: $MHA_TEST_ISA, else "" (auto). make test runs the engine
 * suites once per table (tests read the environment; the library never does). */
const char *test_isa(void);
/* cfg from mha_config_init, on test_isa()'s table (and $MHA_TEST_BF16_KERNEL's bf16 kernel
 * where set); a table or kernel this CPU cannot run skips the calling test with the reason
 * (Criterion's skip). */
void config_init(mha_config *cfg);
/* Table `name` ("" or "auto": the widest this CPU runs) if this CPU runs it, else NULL and the
 * reason in why (when not NULL). */
const struct mha_isa *isa_runnable(const char *name, const char **why);
/* A part of a test this CPU cannot run that is no table or bf16 kernel (a BLIS sub-config),
 * reported with why: "[SKIP] …" on stderr, always shown. Not cr_log_warn: Criterion 2.4's
 * runner exits 1 after any warning. */
void note_skipped(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- tests run once per kernel table, or per bf16 kernel of each table ----
 * TABLE_TEST(suite, name, options) { body with `isa` }: a Criterion test per table of
 * mha_isa_tables; BKERNEL_TEST(…) { body with `isa` and `bk` }: per bf16 kernel of every
 * table. An instance this CPU cannot run (the table, or the kernel: AMX without AMX) is
 * Criterion's skip with the reason, so the synthesis never counts it as passed. */
typedef struct table_param { int table, kernel; } table_param;
struct criterion_test_params table_params(int per_kernel);
/* The same instances into out (at most max); returns how many: for tests whose parameters
 * cross their own cases with the tables. */
int table_list(int per_kernel, table_param *out, int max);

/* The build's kernel tables as an unknown name's message lists them (isa.c's mha_isa_tables),
 * the ref table's BLIS sub-configs, its default first (ref.c's REF_ARCHS), and the table a
 * config naming only that default gets (the widest listing it). */
#define TEST_REF_ARCH "generic"
#if defined(__aarch64__)
#define TEST_TABLES "neon, ref"
#define TEST_REF_ARCHS TEST_REF_ARCH
#define TEST_GENERIC_TABLE "neon"
#else
#define TEST_TABLES "avx512, avx2, ref"
#define TEST_REF_ARCHS TEST_REF_ARCH ", sandybridge, penryn"
#define TEST_GENERIC_TABLE "ref"
#endif

/* A parameters function's result: every element of the array `shapes` on every table (or bf16
 * kernel), as elements {shape, table_param} of type T_on (a struct { T g; table_param on; }). */
#define TABLE_CASES(T_on, shapes, per_kernel)                                                                          \
    ({                                                                                                                 \
        static T_on cases_[sizeof(shapes) / sizeof((shapes)[0]) * 16];                                                 \
        table_param on_[16];                                                                                           \
        const int n_on_ = table_list(per_kernel, on_, 16);                                                             \
        size_t n_ = 0;                                                                                                 \
        for (size_t i_ = 0; i_ < sizeof(shapes) / sizeof((shapes)[0]); i_++)                                           \
            for (int t_ = 0; t_ < n_on_; t_++)                                                                         \
                cases_[n_++] = (T_on){(shapes)[i_], on_[t_]};                                                          \
        cr_make_param_array(T_on, cases_, n_);                                                                         \
    })
/* The instance's table (and *bk its bf16 kernel when bk is not NULL), or Criterion's skip. */
const struct mha_isa *table_or_skip(const table_param *p, const struct mha_bkernel **bk);
#define TABLE_TEST(suite, name, ...)                                                                                   \
    ParameterizedTestParameters(suite, name) { return table_params(0); }                                             \
    static void suite##_##name##_on(const struct mha_isa *isa);                                                      \
    ParameterizedTest(const table_param *tp, suite, name, ##__VA_ARGS__) { suite##_##name##_on(table_or_skip(tp, NULL)); } \
    static void suite##_##name##_on(const struct mha_isa *isa)
#define BKERNEL_TEST(suite, name, ...)                                                                                 \
    ParameterizedTestParameters(suite, name) { return table_params(1); }                                             \
    static void suite##_##name##_on(const struct mha_isa *isa, const struct mha_bkernel *bk);                        \
    ParameterizedTest(const table_param *tp, suite, name, ##__VA_ARGS__)                                              \
    {                                                                                                                  \
        const struct mha_bkernel *bk;                                                                                  \
        const struct mha_isa *isa = table_or_skip(tp, &bk);                                                           \
        suite##_##name##_on(isa, bk);                                                                                  \
    }                                                                                                                  \
    static void suite##_##name##_on(const struct mha_isa *isa, const struct mha_bkernel *bk)
/* Whether s names a bf16 kernel of this build's tables right after `before` (a summary's
 * "kernel ", a JSON's "\"kernel\":\""). */
int names_bf16_kernel(const char *s, const char *before);
/* A kernel of the auto table's default sub-config; asserts. */
void kernel_auto(struct mha_kernel *k);
/* A table's default kernel, and the same kernel on ref's table: a vector part and the scalar
 * one it must match; asserts. */
void kernel_and_ref(const struct mha_isa *isa, struct mha_kernel *k, struct mha_kernel *scalar);

/* ---- allocation counting (tests/alloc_count.c) ---- */
long alloc_count(void);
long alloc_live(void);         /* blocks allocated through the counter and not yet freed */
void alloc_fail_after(long n); /* the n-th allocation from now fails (n >= 1); 0 disables */
/* The counted allocator itself, for libraries that take allocation hooks (jansson). */
void *mha_counted_malloc(size_t n);
void mha_counted_free(void *p);

/* Key i of the whole schema: the engine's keys (mha_config_key_at), then the mha command's
 * (cli_config_row_at); NULL past the last. */
const struct mha_config_key *schema_key_at(int i);

#endif

/* ---- files and the command line (tests/files.c) ---- */
/* A fresh directory under /tmp; remove it with tmpdir_remove. */
void tmpdir_make(char *dir, size_t n);
void tmpdir_remove(const char *dir);
void write_file(const char *path, const void *data, size_t len);
/* dir/name holding yaml; its path into path. */
void write_config(const char *dir, const char *name, const char *yaml, char *path, size_t n);
/* A safetensors file: the header text as given, then data_len bytes of value fill. */
void write_safetensors_raw(const char *path, const char *header, size_t data_len, unsigned char fill);
/* A .npy file: magic, version major.0, the dict text padded to 64 bytes, data_len zero bytes. */
void write_npy_raw(const char *path, int major, const char *dict, size_t data_len);
/* Runs the built mha command with args (a shell fragment); its stdout and stderr are returned
 * in malloc'd strings (free them); the exit status is returned (-1 if it did not exit). */
int run_cli(const char *args, char **out, char **err);
/* The same with environment assignments first ("OMP_PLACES=cores OMP_PROC_BIND=close "). */
int run_cli_env(const char *env, const char *args, char **out, char **err);
/* A whole file as a malloc'd, NUL-terminated string; asserts on failure. */
char *read_text(const char *path);
/* Reads a float32 .npy with the library's reader; asserts on failure. */
float *read_npy(const char *path, int rank, int64_t *shape);
