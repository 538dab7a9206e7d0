/* affinity.c — Linux CPU affinity and topology queries, for the scheduler and the engine. */
#define _GNU_SOURCE
#include "affinity.h"

#include <sched.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(mha_cpumask) == sizeof(cpu_set_t), "mha_cpumask mirrors cpu_set_t");

int mha_affinity_allowed(int *cpus, int max)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        if (n < max)
            cpus[n] = c;
        n++;
    }
    return n;
}

int mha_affinity_get(mha_cpumask *m)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    memcpy(m, &set, sizeof set);
    return 0;
}

int mha_affinity_set(const mha_cpumask *m)
{
    cpu_set_t set;
    memcpy(&set, m, sizeof set);
    return sched_setaffinity(0, sizeof set, &set);
}

int mha_affinity_pin(int cpu)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

int mha_affinity_current_cpu(void)
{
    return sched_getcpu();
}

size_t mha_affinity_l2_bytes(void)
{
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? (size_t)l2 : 0;
}
