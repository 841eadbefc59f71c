"""Scalar softplus and inverse logit for the compiled kernels (numba, cached on disk).

Shared by the hand-derived NUTS densities (:mod:`honestci.audit.stats.bayesian.density`) and the
collapsed sampler (:mod:`honestci.audit.stats.bayesian.collapsed`); importing this module compiles
nothing (the densities' gufuncs load when their module is imported, ~1.3 s).
"""

from __future__ import annotations

import math

from honestci.audit.stats.numba_cache import njit_cached


@njit_cached()
def log1pexp(x: float) -> float:
    """log(1 + e^x), stable for either sign of x."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit_cached()
def expit(x: float) -> float:
    """1 / (1 + e^-x), stable for either sign of x."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit_cached()
def log1pexp_and_expit(x: float) -> tuple[float, float]:
    """``(log1pexp(x), expit(x))`` from one ``exp``: the same branches and operations, so the
    same values to the last bit (both take exp(-|x|); at x = 0, e / (1 + e) = 1 / (1 + 1))."""
    if x > 0.0:
        e = math.exp(-x)
        return x + math.log1p(e), 1.0 / (1.0 + e)
    e = math.exp(x)
    return math.log1p(e), e / (1.0 + e)
