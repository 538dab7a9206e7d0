/* cli.h — the mha command: shared pieces of its subcommands. Only src/cli/ prints or exits. */
#ifndef MHA_CLI_H
#define MHA_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"
#include "mha_io.h"
#include "config_file.h"

/* Exit codes (DESIGN.md §5). */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

int mha_cli_run(int argc, char **argv);
int mha_cli_info(int argc, char **argv);
/* mha info M.gguf (gguf_info.c): the file's model, its layers' configs, attention tensors and types. */
int cli_gguf_info(const char *path);
int mha_cli_schema(int argc, char **argv);
/* mha run on a config with a decode block (decode.c): the files it reads and writes (NULL:
 * none): weights under a prefix; --input (batch, seq, d_model) tokens with --lengths, put
 * through the cache instead of generated ones, and --output their rows. */
typedef struct cli_decode_files {
    const char *weights, *prefix, *input, *lengths, *output;
    const mha_gguf *gguf;       /* weights is a GGUF file, open: layer's weights (mha_gguf_layer_weights) */
    int layer;
} cli_decode_files;
int cli_decode(const cli_config *fc, const char *config, const cli_decode_files *files, int check, int json);
int mha_cli_scale(int argc, char **argv);
/* mha run --core (core.c): mha_core_forward on seeded Q, K, V of the config's heads and batch
 * (causal: --causal over the config's mask), timed, check rows against a double reference. */
int cli_core(const cli_config *fc, const char *config, int causal, int check, int json);

/* "mha: <message>" on stderr (on a terminal, replacing a progress line). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Exit code for a library status: bad input (config, file, shape, affinity) is 2, the rest 1. */
int cli_exit_code(mha_status st);
/* Parses an integer option value in [lo, hi]; 0 and a message on failure. */
int cli_parse_int(const char *opt, const char *text, long lo, long hi, long *out);
/* --precision f32|bf16; 0 and a message on anything else. */
int cli_parse_precision(const char *text, mha_precision *out);
int cli_parse_kv_type(const char *text, mha_kv_type *out); /* --kv-cache: auto, f32, bf16, int8 */
/* --weights-type: f32, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k (weights.type's words); 0 and a message else. */
int cli_parse_weight_type(const char *text, mha_weight_type *out);
/* --activations: f32, int16 (weights.activations' words); 0 and a message naming the flag else. */
int cli_parse_activations(const char *text, mha_activations *out);
const char *cli_weight_type_name(mha_weight_type t); /* "q4_1", "f16"; "?" for others */
/* --isa NAME over the config's engine.isa: the name checked with the config (an unknown table,
 * one this CPU cannot run, or one that contradicts engine.blis_arch or bf16_kernel); 0 and a
 * message "--isa NAME: why" otherwise. NULL: nothing to apply. */
int cli_apply_isa(mha_config *cfg, const char *isa);
/* --bf16-kernel NAME over the config's engine.bf16_kernel (after --precision and --isa): refused
 * with a message unless the precision is bf16 and NAME is a kernel of the table this CPU runs;
 * 0 then. NULL: nothing to apply. */
int cli_apply_bf16_kernel(mha_config *cfg, const char *name);
/* --kv-cache KV over the config's engine.kv_cache (after --precision): a cache type the
 * precision cannot read is refused naming the option; 0 then. */
int cli_apply_kv_type(mha_config *cfg, mha_kv_type kv);
/* What an engine of this config runs on, as its accessors say: the kernel table ("avx512"),
 * BLIS's sub-config ("skx") and the products' kernel ("blis-skx", "amx-bf16"); 0 if no engine
 * of it can be made. */
typedef struct cli_kernels_used { char isa[16], blis_arch[16], kernel[24]; } cli_kernels_used;
int cli_kernels(const mha_config *cfg, cli_kernels_used *k);

double cli_now_ms(void);

/* A progress line on stderr for long runs: only on a terminal and not for --json output, once
 * the run has lasted a second, at most every 250 ms, each line replacing the last;
 * cli_progress_end clears it. Never called inside a timed region. */
typedef struct cli_progress { int on, shown; double start, last; } cli_progress;
void cli_progress_begin(cli_progress *p, int json);
void cli_progress_show(cli_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_progress_end(cli_progress *p);

/* Prints a JSON object on one line (6 significant digits for reals) and frees it. */
struct json_t;
void cli_print_json(struct json_t *j);

/* What OpenMP's environment asked for: the binding policy and the place list, in words. */
void cli_openmp_binding(char *out, size_t n);

/* The CPU's name (x86: /proc/cpuinfo's model name; aarch64: its core, from the implementer and
 * part) and the features that decide kernels (x86: /proc/cpuinfo's flags; aarch64: the
 * auxiliary vector's, as the library reads them); "unknown" when /proc/cpuinfo cannot be read,
 * flags empty: none of them (CLI_NO_FEATURES). */
void cli_cpu_info(char *model, size_t nm, char *flags, size_t nf);
#if defined(__aarch64__)
#define CLI_NO_FEATURES "no Advanced SIMD"
#else
#define CLI_NO_FEATURES "none of the AVX family"
#endif

/* Seeded data: splitmix64 → uniform floats in [lo, hi). */
void cli_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state);
/* n of them in [-1, 1), malloc'd (NULL when out of memory). */
float *cli_uniform_floats(size_t n, uint64_t *seed);

/* Median, min and max of n times (sorts t). */
typedef struct cli_stats { double median, min, max; } cli_stats;
cli_stats cli_stats_of(double *t, int n);

/* The problem a run works on, whatever its source. */
typedef struct cli_problem {
    int d, h, batch, seq_q, seq_kv, cross, causal;
    int kvh;                   /* KV heads (h without GQA) */
    int dk;                    /* d_k (head_dim, or d / h) */
    mha_rope rope;             /* rope.rotary_dim resolved (0 -> d_k) */
    int window;
    float scale, softcap;      /* scale resolved (0 -> 1/sqrt(d_k)); softcap 0: none */
    int sinks;
    mha_qk_norm qk_norm;
    int norm_len[2];           /* q_norm's and k_norm's lengths (mha_config_qk_norm_len) */
    float alibi_max_bias;      /* 0: no ALiBi */
    float *q, *kv;             /* (batch, seq_q, d); (batch, seq_kv, d) or NULL: self-attention */
    int32_t *q_len, *kv_len;   /* NULL or (batch) */
    mha_weights w;
    int bias;                  /* the config's */
    mha_mla mla;               /* multi-head latent attention (kv_lora_rank 0: none): dk is then
                                  kv_lora_rank + qk_rope_head_dim, and its weights are mw */
    mha_mla_weights mw;
} cli_problem;

/* ", MLA: latent 512 + rope 64 as one KV head, q_lora 1536, nope 128, v 128" for an MLA model,
 * "" otherwise: what a summary's model line adds. */
void cli_mla_text(const cli_problem *p, char *buf, size_t n);
/* bytes as "12.0 KiB", "3.3 MiB" or "1.2 GiB" (the unit that keeps a digit before the point). */
const char *cli_bytes_text(size_t bytes, char *buf, size_t n);
/* "engine: STATUS: why" for a create (e NULL: the config's check says why) or a set-weights (e
 * says why) that failed with st; returns its exit code. */
int cli_engine_failed(const mha_config *cfg, const mha_engine *e, mha_status st);
/* The problem's weights into e: mha_set_mla_weights for an MLA model, else mha_set_weights. */
mha_status cli_set_weights(mha_engine *e, const cli_problem *p);

/* The model part of a problem (d, heads, KV heads, RoPE, window) from an engine config. */
void cli_problem_model(cli_problem *p, const mha_config *cfg);
/* The config's generated problem for `batch` sequences: seeded uniform inputs (q, and kv
 * for cross-attention), lengths repeated over the batch, and for self-attention the query
 * lengths as key padding too. Returns EXIT_OK, or an exit code after a message. */
int cli_generate_inputs(const cli_config *fc, int batch, cli_problem *p);
/* Its shape alone: the model, sizes, lengths and mask, no inputs (q and kv stay NULL). */
int cli_generate_shape(const cli_config *fc, int batch, cli_problem *p);
/* Floats of a layer's weights and biases: Wq, Wo (d·h·d_k), Wk, Wv (d·kvh·d_k), their biases,
 * then QK-norm's weights (2·d_k) and the sinks (h) when the model has them; an MLA model's:
 * its five matrices, two RMSNorms' factors and (with bias) three biases. */
size_t cli_weight_floats(const cli_problem *p);
/* Seeded weights with nn.Linear's init, U(-1/sqrt(d), 1/sqrt(d)), into *buf (the caller
 * frees it) and p->w (x·W layout; biases when the config has them; QK-norm factors
 * U(0.5, 1.5) and sinks U(-1, 1) when it has those). */
int cli_generate_weights(const cli_config *fc, cli_problem *p, float **buf);
/* Lengths list, repeated over the batch (NULL when out of memory). */
int32_t *cli_cycle_lengths(const int *list, int n, int batch);
/* Self-attention: the query lengths pad the keys too (p->kv_len becomes a copy). */
int cli_self_key_padding(cli_problem *p);
/* The attention variants of the model as a summary says them ("scale 0.0625, softcap 50,
 * sinks, QK-norm head (1 + w), ALiBi max_bias 8"), "" when it has none. */
void cli_variants_text(const cli_problem *p, const mha_config *cfg, char *buf, size_t n);
/* Frees what a cli_problem owns (inputs and lengths, not the weights). */
void cli_problem_free(cli_problem *p);

/* FLOPs of one forward counting only unmasked work (DESIGN.md's count when nothing is
 * masked): projections 2·d² per valid query and per valid key ×2 plus the output
 * projection; scores and A·V 4·d per visible (query, key) pair. */
double cli_flops(const cli_problem *p);
/* Those FLOPs of the attention core alone: 4·h·d_k per visible (query, key) pair. */
double cli_attention_flops(const cli_problem *p);
/* Keys [*first, end) that query row i of sequence b sees (no explicit mask in the CLI): its
 * key length, causal (bottom-right), a sliding window (causal implied). Returns end. */
int cli_visible(const cli_problem *p, int b, int i, int *first);
/* Sampled row r of `want` spread over a sequence's ql valid rows. */
int cli_sample_row(int r, int want, int ql);
/* Query row i (at position i + seq_kv − seq_q) of head h in double: q (d_k) against the keys
 * [lo, nv) of K and V (key j's d_k features at j·ld), with the problem's scale, softcap, ALiBi
 * and the head's sink (p->w.sinks): zr (d_k) += its attention's output. a: seq_kv doubles of
 * scratch. */
void cli_ref_attention_row(const cli_problem *p, int h, int i, const double *q, const double *K, const double *V,
                           ptrdiff_t ld, int lo, int nv, double *a, double *zr);
/* Valid query tokens of one forward. */
double cli_tokens(const cli_problem *p);

/* ---- --check: one rule in every mode (forward, decode block, core) ----
 * The relative error of the rows checked, norm-wise over all of them together,
 * ‖got − ref‖ / ‖ref‖, held to the bound of the engine's precision, KV cache and weights
 * and the rows checked (cli_check_bound: float32 1e-4; bf16 1e-2 on block weights, 1.5e-2 on
 * floats, each over a layer and × (1 + 1/sqrt(rows)) for fewer; an int8 cache 2e-2). */
typedef struct cli_check { double num, den; int rows; } cli_check;
/* One more checked row of n values against its reference (in double, or in float32). */
void cli_check_row(cli_check *c, const float *got, const double *ref, int n);
void cli_check_row_f(cli_check *c, const float *got, const float *ref, int n);
double cli_check_error(const cli_check *c);  /* NaN when any value was */
/* The bound of a run (check.c) over `rows` rows checked: its precision, its cache (MHA_KV_AUTO:
 * a forward, none), how the engine held Wq, Wk, Wv, Wo (wt; NULL: no weights, --core's Q, K,
 * V) and what block weights multiplied (act): the bound, the path's name ("bf16, block
 * weights") and why (what was measured; for the paths whose few rows get more room, the rule). */
typedef struct cli_bound { double bound; const char *path; char why[160]; } cli_bound;
cli_bound cli_check_bound(mha_precision prec, mha_kv_type kv, const mha_weight_type *wt, mha_activations act,
                          int rows);
/* After the run's summary: the check's line (unless json; `against`: what the reference is),
 * naming the bound, its path and why, and its verdict: EXIT_OK, or EXIT_RUNTIME with a message
 * naming the error, rows and bound when the error is above the bound or NaN. Nothing checked:
 * EXIT_OK. */
int cli_check_verdict(const cli_check *c, mha_precision prec, mha_kv_type kv, const mha_weight_type *wt,
                      mha_activations act, const char *against, int json);
/* The check's JSON keys: check_rows, check_rel_error (null when nothing was checked),
 * check_bound, check_bound_path, check_bound_why. */
void cli_check_json(struct json_t *j, const cli_check *c, mha_precision prec, mha_kv_type kv,
                    const mha_weight_type *wt, mha_activations act);
/* The floats the check's reference multiplies by (check.c): the weights as the engine means
 * them, every matrix F32 in p's layout. A file's blocks (F16, BF16 too) dequantized: what the
 * file means; floats the engine quantizes at load (cfg->weight_type a block type) through the
 * same quantizer and back: what the engine holds; else p's own floats. `what` says which ("" for
 * the last). buf (owned) holds the converted matrices. MHA_ERR_NOMEM, or a conversion's status. */
typedef struct cli_ref_weights { mha_weights w; float *buf; char what[96]; } cli_ref_weights;
mha_status cli_ref_weights_make(const cli_problem *p, const mha_config *cfg, cli_ref_weights *r);
void cli_ref_weights_free(cli_ref_weights *r); /* zeroes *r */
/* Samples `rows` output rows (spread over the first and last sequence and their rows) and adds
 * them, each against a double-precision reference computed from p's inputs and weights. */
void cli_check_rows(const cli_problem *p, const float *out, int rows, cli_check *c);

#endif
