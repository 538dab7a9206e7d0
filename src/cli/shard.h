/* shard.h — contiguous shards of a batch, balanced by work, for the MPI runner. Pure
 * arithmetic (no MPI), so the suite tests it on its own. */
#ifndef MHA_SHARD_H
#define MHA_SHARD_H

#include <stdint.h>

/* The work of a sequence of length len: len² (the score and A·V work, which dominates and
 * is what makes ragged batches uneven), at least 1 per sequence so that a batch of empty
 * sequences still spreads. */
uint64_t shard_cost(int32_t len);

/* Splits cost[0, n) into `parts` contiguous shards, shard r = [bounds[r], bounds[r + 1]),
 * bounds[0] = 0, bounds[parts] = n (shards may be empty when parts > n). The shards' costs
 * differ by at most the largest single cost: of all windows [lo, lo + max cost] that every
 * shard's cost can fit in, the lowest is found by bisection, where the set of reachable
 * shard ends after j shards is an interval of prefix sums (each step spans at least one
 * sequence's cost). Returns 0, or -1 if the total cost overflows 2⁶³ or parts < 1. */
int shard_balance(const uint64_t *cost, int n, int parts, int *bounds);

#endif
