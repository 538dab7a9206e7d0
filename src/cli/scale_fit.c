/* scale_fit.c — speedup, efficiency, Karp–Flatt and the Amdahl fit (scale_fit.h). */
#include "scale_fit.h"

#include <math.h>

double scale_speedup(int weak, int p, double t1, double tp)
{
    return (weak ? (double)p : 1.0) * t1 / tp;
}

double scale_efficiency(double speedup, int p)
{
    return speedup / p;
}

double scale_karp_flatt(double speedup, int p)
{
    if (p <= 1)
        return NAN;
    return (1.0 / speedup - 1.0 / p) / (1.0 - 1.0 / p);
}

int scale_amdahl_fit(const int *p, const double *speedup, int n, scale_amdahl *fit)
{
    double sxy = 0, sxx = 0;
    int used = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 1)
            continue;
        double x = 1.0 - 1.0 / p[i], y = 1.0 / speedup[i] - 1.0 / p[i];
        sxy += x * y, sxx += x * x, used++;
    }
    if (!used)
        return -1;
    double f = sxy / sxx, ss = 0;
    for (int i = 0; i < n; i++) {
        double r = 1.0 / speedup[i] - (f + (1.0 - f) / p[i]);
        ss += r * r;
    }
    fit->serial = f;
    fit->max_speedup = f > 0 ? 1.0 / f : INFINITY;
    fit->rms = sqrt(ss / n);
    fit->points = used;
    return 0;
}
