/* alloc_count.c — the allocator that the counted copy of libmha calls (the Makefile renames
 * the library's malloc, calloc, … to mha_counted_*): counts calls and can make one fail. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static atomic_long count;
static atomic_long fail_countdown;

long alloc_count(void) { return atomic_load(&count); }
void alloc_fail_after(long n) { atomic_store(&fail_countdown, n); }

static int counted(void)
{
    atomic_fetch_add(&count, 1);
    long left = atomic_load(&fail_countdown);
    if (left > 0 && atomic_fetch_sub(&fail_countdown, 1) == 1)
        return 0;
    return 1;
}

void *mha_counted_malloc(size_t n) { return counted() ? malloc(n) : NULL; }
void *mha_counted_calloc(size_t n, size_t s) { return counted() ? calloc(n, s) : NULL; }
void *mha_counted_realloc(void *p, size_t n) { return counted() ? realloc(p, n) : NULL; }
void *mha_counted_aligned_alloc(size_t a, size_t n) { return counted() ? aligned_alloc(a, n) : NULL; }
void *mha_counted_memalign(size_t a, size_t n) { return counted() ? memalign(a, n) : NULL; }
void *mha_counted_valloc(size_t n) { return counted() ? valloc(n) : NULL; }
char *mha_counted_strdup(const char *s) { return counted() ? strdup(s) : NULL; }
int mha_counted_posix_memalign(void **p, size_t a, size_t n) { return counted() ? posix_memalign(p, a, n) : 12; }
void mha_counted_free(void *p) { free(p); }
