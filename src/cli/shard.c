/* shard.c — the balanced contiguous partition of shard.h. */
#include "shard.h"

#include <stdlib.h>

uint64_t shard_cost(int32_t len)
{
    return len > 1 ? (uint64_t)len * (uint64_t)len : 1;
}

/* First index k with p[k] >= v (n + 1 if none); p is nondecreasing, n + 1 entries. */
static int first_at_least(const uint64_t *p, int n, uint64_t v)
{
    int lo = 0, hi = n + 1;
    while (lo < hi) {
        int m = lo + (hi - lo) / 2;
        if (p[m] >= v)
            hi = m;
        else
            lo = m + 1;
    }
    return lo;
}

/* Last index k with p[k] <= v (-1 if none); every p[k] < 2⁶³, so v + 1 cannot wrap when it
 * matters. */
static int last_at_most(const uint64_t *p, int n, uint64_t v)
{
    return v >= p[n] ? n : first_at_least(p, n, v + 1) - 1;
}

/* Reachable shard ends after j = 1..parts shards whose costs lie in [lo, lo + c]: the prefix
 * values in [a_j, b_j] (a_j, b_j are indices). Returns 0 if some step overshoots the total
 * (reachable set empty), else 1 with a[], b[] filled (index 0 is the start). */
static int reach(const uint64_t *p, int n, int parts, uint64_t lo, uint64_t c, int *a, int *b)
{
    a[0] = b[0] = 0;
    for (int j = 1; j <= parts; j++) {
        uint64_t from = p[a[j - 1]] + lo, to; /* both terms < 2⁶³: no wrap */
        if (__builtin_add_overflow(p[b[j - 1]] + lo, c, &to))
            to = UINT64_MAX;
        if (from > p[n])
            return 0;
        a[j] = first_at_least(p, n, from);
        b[j] = last_at_most(p, n, to);
        if (b[j] < a[j])
            return 0;
    }
    return 1;
}

int shard_balance(const uint64_t *cost, int n, int parts, int *bounds)
{
    if (parts < 1 || n < 0)
        return -1;
    uint64_t *p = malloc(((size_t)n + 1) * sizeof *p);
    int *a = malloc(((size_t)parts + 1) * sizeof *a), *b = malloc(((size_t)parts + 1) * sizeof *b);
    int rc = -1;
    if (!p || !a || !b)
        goto out;
    uint64_t c = 0;
    p[0] = 0;
    for (int i = 0; i < n; i++) {
        if (__builtin_add_overflow(p[i], cost[i], &p[i + 1]) || p[i + 1] > (UINT64_MAX >> 1))
            goto out;
        c = cost[i] > c ? cost[i] : c;
    }
    const uint64_t total = p[n];
    /* the lowest lo whose window reaches the total (an overshoot counts as reaching it) */
    uint64_t lo = 0, hi = total;
    while (lo < hi) {
        uint64_t m = lo + (hi - lo) / 2;
        if (!reach(p, n, parts, m, c, a, b) || p[b[parts]] >= total)
            hi = m;
        else
            lo = m + 1;
    }
    if (!reach(p, n, parts, lo, c, a, b) || p[a[parts]] > total || p[b[parts]] < total)
        goto out; /* not expected: a window of width c always fits (see shard.h) */
    /* walk back from the end, each shard end inside its reachable interval */
    bounds[parts] = n;
    for (int j = parts - 1; j >= 1; j--) {
        uint64_t end = p[bounds[j + 1]];
        uint64_t low = end >= lo + c ? end - lo - c : 0, high = end >= lo ? end - lo : 0;
        if (p[a[j]] > low)
            low = p[a[j]];
        if (p[b[j]] < high)
            high = p[b[j]];
        int k = first_at_least(p, n, low);
        if (k > b[j] || p[k] > high || k > bounds[j + 1])
            goto out;
        bounds[j] = k;
    }
    bounds[0] = 0;
    rc = 0;
out:
    free(p), free(a), free(b);
    return rc;
}
