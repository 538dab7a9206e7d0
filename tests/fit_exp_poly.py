#!/usr/bin/env python3
"""The exp polynomial of src/isa/exp_poly.h (MHA_EXP_P0..P4): exp(r) = 1 + r + r^2 P(r) on
[-ln2/2, ln2/2], P of degree 4, fitted to the minimax of exp's relative error by Lawson's
iteration (weighted least squares whose weights grow where the error is largest) on a fine
grid. Prints P's coefficients, highest degree first as exp_poly.h lists them, rounded to
float32, and the fit's relative error. numpy only: python3 tests/fit_exp_poly.py [DEGREE]."""
import sys

import numpy as np

degree = int(sys.argv[1]) if len(sys.argv) > 1 else 4
half = np.log(2.0) / 2
r = np.linspace(-half, half, 20001)
r = r[np.abs(r) > 1e-6]
# P's target (e^r - 1 - r) / r^2, by its series where expm1 - r would cancel
series = sum(r ** k / np.prod(np.arange(1.0, k + 3)) for k in range(12))
target = np.where(np.abs(r) < 0.05, series, (np.expm1(r) - r) / r ** 2)
weight = r ** 2 / np.exp(r)  # P's error times this is exp's relative error
basis = np.vstack([r ** k for k in range(degree + 1)]).T
lawson = np.full(r.size, 1.0 / r.size)
for _ in range(3000):
    w = np.sqrt(lawson) * weight
    coef = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)[0]
    err = np.abs((basis @ coef - target) * weight)
    lawson *= err
    lawson /= lawson.sum()
print(f"relative error {err.max():.3g}")
for k, c in enumerate(coef[::-1]):
    print(f"#define MHA_EXP_P{k} {np.float32(c):.10e}f")
