/* alloc_count.c — the allocator that the counted copy of libmha calls (the Makefile renames
 * the library's malloc, calloc, … to mha_counted_*): counts calls, keeps the number of blocks
 * still live, and can make the n-th call fail. Tests may route other libraries' allocators
 * here too (jansson's json_set_alloc_funcs). */
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static atomic_long count, live;
static atomic_long fail_countdown;

long alloc_count(void) { return atomic_load(&count); }
long alloc_live(void) { return atomic_load(&live); }
void alloc_fail_after(long n) { atomic_store(&fail_countdown, n); }

static int counted(void)
{
    atomic_fetch_add(&count, 1);
    long left = atomic_load(&fail_countdown);
    if (left > 0 && atomic_fetch_sub(&fail_countdown, 1) == 1)
        return 0;
    return 1;
}

static void *track(void *p)
{
    if (p)
        atomic_fetch_add(&live, 1);
    return p;
}

void *mha_counted_malloc(size_t n) { return counted() ? track(malloc(n)) : NULL; }
void *mha_counted_calloc(size_t n, size_t s) { return counted() ? track(calloc(n, s)) : NULL; }
void *mha_counted_aligned_alloc(size_t a, size_t n) { return counted() ? track(aligned_alloc(a, n)) : NULL; }
void *mha_counted_memalign(size_t a, size_t n) { return counted() ? track(memalign(a, n)) : NULL; }
void *mha_counted_valloc(size_t n) { return counted() ? track(valloc(n)) : NULL; }
char *mha_counted_strdup(const char *s) { return counted() ? track(strdup(s)) : NULL; }

void *mha_counted_realloc(void *p, size_t n)
{
    if (!counted())
        return NULL; /* p stays valid, as realloc's failure leaves it */
    void *q = realloc(p, n);
    if (!p && q)
        atomic_fetch_add(&live, 1);
    else if (p && !q && n == 0)
        atomic_fetch_sub(&live, 1);
    return q;
}

int mha_counted_posix_memalign(void **p, size_t a, size_t n)
{
    if (!counted())
        return 12; /* ENOMEM */
    int rc = posix_memalign(p, a, n);
    if (rc == 0)
        atomic_fetch_add(&live, 1);
    return rc;
}

void mha_counted_free(void *p)
{
    if (p)
        atomic_fetch_sub(&live, 1);
    free(p);
}
