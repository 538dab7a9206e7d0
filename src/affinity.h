/* affinity.h — the only module that talks to Linux about CPUs: allowed sets, pinning of
 * the calling thread, the CPU a thread runs on, cache sizes. */
#ifndef MHA_AFFINITY_H
#define MHA_AFFINITY_H

#include <stddef.h>

#include "mha.h"

/* A CPU mask with room for 1024 CPUs (the size of glibc's cpu_set_t). */
typedef struct mha_cpumask {
    unsigned long bits[1024 / (8 * sizeof(unsigned long))];
} mha_cpumask;

/* The CPUs this process may run on, ascending, at most max of them: OpenMP's place list
 * when OpenMP binds threads (OMP_PROC_BIND/OMP_PLACES), else the calling thread's mask.
 * Returns how many there are (may exceed max), or -1 on failure. */
int mha_affinity_allowed(int *cpus, int max);
int mha_affinity_get(mha_cpumask *m);     /* calling thread's mask; 0 on success */
int mha_affinity_set(const mha_cpumask *m); /* 0 on success */
int mha_affinity_pin(int cpu);            /* calling thread onto one CPU; 0 on success */
int mha_affinity_current_cpu(void);       /* -1 if unknown */
size_t mha_affinity_l2_bytes(void);       /* per-core L2 size; 0 if unknown */
size_t mha_affinity_sysfs_l2_bytes(void); /* the same from sysfs alone (where glibc says 0) */

/* The pinning plan of a create: worker t's CPU under cfg's policy into pin[t] (-1: none), from
 * the allowed set; MHA_ERR_AFFINITY, naming the field, if a CPU is not this process's. */
struct mha_problem;
mha_status mha_affinity_plan(const mha_config *cfg, int threads, int *pin, struct mha_problem *pr);

#endif
