/* test_scheduler.c — task order: the most work first, ties by index. */
#include <stdlib.h>

#include <criterion/criterion.h>

#include "scheduler.h"

Test(scheduler, longest_sequences_start_first)
{
    int32_t ql[7] = {10, 50, 50, 0, 128, 3, 77};
    int32_t kl[7] = {10, 50, 60, 0, 128, 3, 77};
    const mha_call c = {.batch = 7, .seq_q = 128, .seq_kv = 128, .q_len = ql, .kv_len = kl};
    mha_fwd f = {.d = 16, .call = &c};
    int order[7];
    mha_sched_order(&f, order);
    const int want[7] = {4, 6, 2, 1, 0, 5, 3};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(order[i], want[i], "position %d: sequence %d, want %d", i, order[i], want[i]);
}

Test(scheduler, equal_work_keeps_index_order)
{
    const mha_call c = {.batch = 100, .seq_q = 8, .seq_kv = 8};
    mha_fwd f = {.d = 16, .call = &c};
    int order[100];
    mha_sched_order(&f, order);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(order[i], i);
}

Test(scheduler, order_is_a_permutation_for_large_batches)
{
    enum { N = 1000 };
    int32_t len[N];
    for (int i = 0; i < N; i++)
        len[i] = (i * 7919) % 513;
    const mha_call c = {.batch = N, .seq_q = 512, .seq_kv = 512, .q_len = len, .kv_len = len};
    mha_fwd f = {.d = 64, .call = &c};
    int order[N], seen[N] = {0};
    mha_sched_order(&f, order);
    for (int i = 0; i < N; i++) {
        cr_assert(order[i] >= 0 && order[i] < N && !seen[order[i]]);
        seen[order[i]] = 1;
        if (i)
            cr_assert_geq(len[order[i - 1]], len[order[i]], "not descending at %d", i);
    }
}
