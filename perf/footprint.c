/* footprint.c — memory facts for the README: arena sizes for a few shapes, and how many
 * allocations a forward pass makes in the whole process (libmha, BLIS, libgomp).
 *
 * Process-wide counting: this program defines malloc & co. itself, so every call in the
 * process (shared libraries included) lands here and is forwarded to glibc's __libc_*. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_long n_alloc;

void *malloc(size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_malloc(n); }
void *calloc(size_t n, size_t s) { atomic_fetch_add(&n_alloc, 1); return __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n)
{
    atomic_fetch_add(&n_alloc, 1);
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}
void free(void *p) { __libc_free(p); }

static void arena(const char *name, int d, int h, int batch, int seq, int threads)
{
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = d, cfg.n_heads = h, cfg.max_batch = batch;
    cfg.max_seq_q = cfg.max_seq_kv = seq, cfg.threads = threads;
    mha_engine *e;
    if (mha_create(&cfg, &e) != MHA_OK) {
        printf("%-28s create failed\n", name);
        return;
    }
    double scores = (double)h * batch * seq * seq * 4;
    printf("%-28s d=%-5d h=%-3d B=%-2d S=%-5d threads=%d q_block=%-4d arena %8.1f MiB  (score tensor %9.1f MiB)\n",
           name, d, h, batch, seq, threads, mha_engine_q_block(e), mha_engine_workspace_size(e) / 1048576.0,
           scores / 1048576.0);
    mha_free(e);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    arena("bert-base S=128", 768, 12, 8, 128, threads);
    arena("bert-base S=512", 768, 12, 8, 512, threads);
    arena("long context", 1024, 16, 1, 8192, threads);

    /* allocations per forward, first and after warm-up */
    const int d = 768, h = 12, B = 8, S = 128, iters = 50;
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.d_model = d, cfg.n_heads = h, cfg.max_batch = B, cfg.max_seq_q = cfg.max_seq_kv = S;
    cfg.threads = threads;
    mha_engine *e;
    if (mha_create(&cfg, &e) != MHA_OK)
        return 1;
    size_t dd = (size_t)d * d, nx = (size_t)B * S * d;
    float *w = __libc_calloc(4 * dd + 4 * (size_t)d, sizeof *w), *x = __libc_calloc(nx, sizeof *x);
    float *y = __libc_calloc(nx, sizeof *y);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)(i % 17) / 17.0f;
    for (size_t i = 0; i < 4 * dd; i++)
        w[i] = (float)((i * 7) % 13) / 130.0f - 0.05f;
    float *b = w + 4 * dd;
    mha_weights wt = {w, w + dd, w + 2 * dd, w + 3 * dd, b, b + d, b + 2 * d, b + 3 * d, MHA_LAYOUT_XW};
    mha_input in = {.batch = B, .seq_q = S, .seq_kv = S, .q = x, .k = x, .v = x};
    if (mha_set_weights(e, &wt) != MHA_OK)
        return 1;
    long first = atomic_load(&n_alloc);
    mha_forward(e, &in, y, NULL);
    long after_first = atomic_load(&n_alloc);
    for (int i = 0; i < 5; i++)
        mha_forward(e, &in, y, NULL);
    long start = atomic_load(&n_alloc);
    for (int i = 0; i < iters; i++)
        mha_forward(e, &in, y, NULL);
    long total = atomic_load(&n_alloc) - start;
    printf("allocations, whole process: first forward %ld, then %.2f per forward over %d "
           "(B=%d S=%d d=%d h=%d, %d threads: %d packing + %d head + %d output tasks each)\n",
           after_first - first, (double)total / iters, iters, B, S, d, h, threads, B * ((S + 191) / 192), B * h,
           B * ((S + 127) / 128));
    mha_free(e);
    return 0;
}
