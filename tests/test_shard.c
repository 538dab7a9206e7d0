/* test_shard.c — the MPI runner's shard balancer: contiguous shards that cover the batch, whose
 * costs differ by at most one sequence's cost, on random ragged batches and edge cases. */
#include <stdlib.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "shard.h"

static void check(const uint64_t *cost, int n, int parts, const char *what)
{
    int *bounds = malloc(((size_t)parts + 1) * sizeof *bounds);
    cr_assert_eq(shard_balance(cost, n, parts, bounds), 0, "%s: n %d, parts %d", what, n, parts);
    cr_assert_eq(bounds[0], 0);
    cr_assert_eq(bounds[parts], n);
    uint64_t cmax = 0, lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < n; i++)
        cmax = cost[i] > cmax ? cost[i] : cmax;
    for (int r = 0; r < parts; r++) {
        cr_assert_leq(bounds[r], bounds[r + 1], "%s: shard %d runs backwards", what, r);
        uint64_t s = 0;
        for (int i = bounds[r]; i < bounds[r + 1]; i++)
            s += cost[i];
        lo = s < lo ? s : lo, hi = s > hi ? s : hi;
    }
    cr_assert_leq(hi - lo, cmax, "%s: n %d, parts %d: shard costs %llu..%llu differ by more than the largest sequence (%llu)",
                  what, n, parts, (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)cmax);
    free(bounds);
}

Test(shard, random_ragged_batches)
{
    rng r = {2026};
    uint64_t cost[400];
    for (int trial = 0; trial < 4000; trial++) {
        int n = 1 + (int)(rng_next(&r) % (trial < 2000 ? 12 : 400)), parts = 1 + (int)(rng_next(&r) % 24);
        for (int i = 0; i < n; i++) {
            int kind = (int)(rng_next(&r) % 4);
            int32_t len = kind == 0 ? 0 : kind == 1 ? (int32_t)(rng_next(&r) % 8) : (int32_t)(rng_next(&r) % 2048);
            cost[i] = shard_cost(len);
        }
        check(cost, n, parts, "random");
    }
}

Test(shard, single_sequences_equal_costs_and_one_long_sequence_balance)
{
    uint64_t one[] = {5}, equal[] = {4, 4, 4, 4, 4, 4}, spike[] = {1, 1, 1, 1000, 1, 1, 1};
    check(one, 1, 1, "one sequence, one rank");
    check(one, 1, 4, "more ranks than sequences");
    check(equal, 6, 3, "equal costs");
    check(equal, 6, 4, "equal costs, uneven split");
    check(spike, 7, 3, "one long sequence");
    int bounds[4];
    cr_assert_eq(shard_balance(equal, 6, 3, bounds), 0);
    cr_assert(bounds[1] == 2 && bounds[2] == 4, "equal costs split evenly: %d %d", bounds[1], bounds[2]);
    /* tokens², not sequence count: one 512-token sequence outweighs fifteen of 128 */
    uint64_t ragged[16];
    ragged[0] = shard_cost(512);
    for (int i = 1; i < 16; i++)
        ragged[i] = shard_cost(128);
    cr_assert_eq(shard_balance(ragged, 16, 2, bounds), 0);
    cr_assert_leq(bounds[1], 2, "the long sequence's shard has %d sequences", bounds[1]);
    cr_assert_eq(shard_balance(one, 1, 0, bounds), -1, "no ranks");
    uint64_t huge[] = {UINT64_MAX / 2, UINT64_MAX / 2};
    cr_assert_eq(shard_balance(huge, 2, 2, bounds), -1, "overflowing total");
}
