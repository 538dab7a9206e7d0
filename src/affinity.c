/* affinity.c — Linux CPU affinity and topology queries, for the scheduler and the engine, and
 * the pinning plan a create makes from them (mha_affinity_plan). */
#define _GNU_SOURCE
#include "affinity.h"
#include "status.h"
#include "mha.h"

#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(mha_cpumask) == sizeof(cpu_set_t), "mha_cpumask mirrors cpu_set_t");

/* With OMP_PROC_BIND / OMP_PLACES set, libgomp binds the initial thread to its first place
 * before main, so that thread's mask is one place, not the process's CPUs. OpenMP's place
 * list is then what the process was given (libgomp builds it from the startup mask). */
static int places_mask(cpu_set_t *set)
{
    int places = omp_get_num_places();
    if (places < 1 || omp_get_proc_bind() == omp_proc_bind_false)
        return 0;
    CPU_ZERO(set);
    int ids[CPU_SETSIZE];
    for (int p = 0; p < places; p++) {
        int n = omp_get_place_num_procs(p);
        if (n < 0 || n > CPU_SETSIZE)
            return 0;
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPU_SETSIZE)
                CPU_SET(ids[i], set);
    }
    return CPU_COUNT(set) > 0;
}

int mha_affinity_allowed(int *cpus, int max)
{
    cpu_set_t set;
    if (!places_mask(&set) && sched_getaffinity(0, sizeof set, &set) != 0)
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

MHA_API int mha_cpus_allowed(int *cpus, int max)
{
    if (max < 0 || (max > 0 && !cpus))
        return -1;
    return mha_affinity_allowed(cpus, max);
}

MHA_API size_t mha_l2_bytes(void)
{
    return mha_affinity_l2_bytes();
}

/* How many CPUs a sysfs CPU list ("0-3,8") names; 0 if it cannot be read. */
static int cpus_in_list(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0, a, b;
    char sep;
    while (fscanf(f, "%d", &a) == 1) {
        b = a;
        if ((sep = (char)fgetc(f)) == '-' && fscanf(f, "%d", &b) == 1)
            sep = (char)fgetc(f);
        n += b >= a ? b - a + 1 : 0;
        if (sep != ',')
            break;
    }
    fclose(f);
    return n;
}

/* glibc answers from CPUID on x86-64 and 0 on aarch64; Linux's sysfs has the caches wherever
 * the firmware describes them (Arm servers' ACPI PPTT or device tree): cpu0's level-2 one, its
 * size shared among the CPUs that share it (a cluster's L2 on some Arm cores). */
size_t mha_affinity_sysfs_l2_bytes(void)
{
    for (int i = 0; i < 8; i++) {
        char path[96];
        int level = 0;
        unsigned long kib = 0;
        char unit = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        const int got = fscanf(f, "%d", &level);
        fclose(f);
        if (got != 1 || level != 2)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r")))
            return 0;
        const int n = fscanf(f, "%lu%c", &kib, &unit);
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list", i);
        const int sharing = cpus_in_list(path);
        if (n != 2 || unit != 'K' || kib >= ((size_t)1 << 40))
            return 0;
        return (size_t)kib * 1024 / (size_t)(sharing > 1 ? sharing : 1);
    }
    return 0;
}

size_t mha_affinity_l2_bytes(void)
{
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? (size_t)l2 : mha_affinity_sysfs_l2_bytes();
}

static int contains(const int *set, int n, int cpu)
{
    for (int i = 0; i < n; i++)
        if (set[i] == cpu)
            return 1;
    return 0;
}

mha_status mha_affinity_plan(const mha_config *cfg, int threads, int *pin, mha_problem *pr)
{
    enum { MAX = 1024 };
    int allowed[MAX];
    int n = mha_affinity_allowed(allowed, MAX);
    if (n < 1)
        return mha_problemf(pr, MHA_ERR_AFFINITY, "pinning", "cannot read the allowed CPUs");
    if (n > MAX)
        n = MAX;
    if (cfg->pinning == MHA_PIN_CPUS)
        for (int i = 0; i < cfg->n_cpus; i++)
            if (!contains(allowed, n, cfg->cpus[i])) {
                char field[24];
                snprintf(field, sizeof field, "cpus[%d]", i);
                return mha_problemf(pr, MHA_ERR_AFFINITY, field, "CPU %d is not one this process may use", cfg->cpus[i]);
            }
    for (int t = 0; t < threads; t++) {
        switch (cfg->pinning) {
        case MHA_PIN_CLOSE:
            pin[t] = allowed[t % n];
            break;
        case MHA_PIN_SPREAD: /* as far apart as the allowed set lets them be */
            pin[t] = threads <= n ? allowed[(int)((long)t * n / threads)] : allowed[t % n];
            break;
        case MHA_PIN_CPUS:
            pin[t] = cfg->cpus[t % cfg->n_cpus];
            break;
        default:
            pin[t] = -1;
        }
    }
    return MHA_OK;
}
