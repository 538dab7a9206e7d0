/* scale_fit.h — the arithmetic of a thread-scaling sweep: speedup, efficiency, the Karp–Flatt
 * serial fraction and a least-squares Amdahl fit. Pure functions, unit-tested on their own. */
#ifndef MHA_SCALE_FIT_H
#define MHA_SCALE_FIT_H

/* Speedup of p threads against 1 thread. Strong scaling (same work): t1 / tp. Weak scaling
 * (p times the work): p · t1 / tp, the throughput ratio. */
double scale_speedup(int weak, int p, double t1, double tp);
/* Parallel efficiency: speedup / p. */
double scale_efficiency(double speedup, int p);
/* Karp–Flatt experimentally determined serial fraction e = (1/S − 1/p) / (1 − 1/p);
 * NaN for p = 1, where it is undefined. */
double scale_karp_flatt(double speedup, int p);

typedef struct scale_amdahl {
    double serial;      /* f in S(p) = 1 / (f + (1 − f)/p) */
    double max_speedup; /* 1 / f: the limit as p → ∞ (Inf when f <= 0) */
    double rms;         /* RMS residual of t(p)/t(1) against the fitted f + (1 − f)/p */
    int points;         /* points with p > 1 that entered the fit */
} scale_amdahl;

/* Amdahl's serial fraction by least squares over strong-scaling points (p[i], speedup[i]).
 * Fitted in the time domain, where the model is linear in f: t(p)/t(1) = 1/S = f + (1 − f)/p,
 * i.e. 1/S − 1/p = f · (1 − 1/p), so f = Σ x·y / Σ x² with x = 1 − 1/p, y = 1/S − 1/p.
 * Points with p = 1 carry no information (x = 0). Returns 0, or -1 with no point p > 1. */
int scale_amdahl_fit(const int *p, const double *speedup, int n, scale_amdahl *fit);

#endif
