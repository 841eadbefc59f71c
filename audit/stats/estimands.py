"""The win-rate estimands, written once: what each population's figure is, and how it is estimated.

A *contest* is one policy response against one opponent response on one vignette, judged by one
judge in both presentation orders. Its **score** s is 1 if the policy wins both orders, 0 if it
loses both, 1/2 otherwise (a tie in either order, or the orders disagree); an order with an invalid
verdict is scored as the audit policy's ``invalid_scoring`` says (lost, a tie, or the contest left
out). A vignette's **rate** is p_g = E[s | vignette g], the expected score of a contest on it.

* **These vignettes**: θ_these = (1/G) Σ_g p_g, the equal-weight average over the G vignettes
  observed, conditional on them.
* **New vignettes**: θ_new = E_v[p_v], the rate on a vignette drawn from the population the
  vignettes were drawn from, each vignette counting once.

Both weight vignettes equally, because that is what "a new vignette" means: a prompt drawn from
the population is one prompt, however many contests an evaluation happened to run on it. Weighting
by contest counts n_g would estimate E[n_v p_v] / E[n_v] instead, which differs from θ_new
whenever the counts are *informative* (associated with the rates: more contests, or fewer lost
to invalid verdicts, where the policy does well). Every estimator honestci reports for these two
populations is therefore the equal-weight mean of vignette means, θ̂ = (1/G) Σ_g ȳ_g, which is
unbiased for θ_new under any sizes when vignettes are drawn independently (with their sizes), and
unbiased for θ_these given the vignettes. :func:`size_association` measures whether sizes are
informative. An unbiased point is not enough for a gate, which reads a CI-low: a model-based
interval that weights vignettes by their precision (a hierarchical likelihood with each vignette at
its own size) centres on the contest-weighted rate when sizes are informative, so the bar gate's
posterior enters every vignette at the harmonic mean size instead
(:func:`honestci.audit.stats.bayesian.grid.rate_posterior`), and the coverage study certifies its
CI-low on informative size laws (docs/coverage.md).

Truth of the simulations (:mod:`honestci.audit.stats.design.coverage_study`): vignette v has a logit
location η_v = μ + u_v, u_v ~ N(0, σ); per judged order the policy wins with probability
S(η_v ± b − t) and loses with probability S(−η_v ∓ b − t) (S the logistic CDF, b the first-position
bias, t the tie half-width; the two orders carry +b and −b), independently. Then
p(η) = W₁W₂ + (1 − W₁W₂ − L₁L₂)/2 and θ_new = E_Z[p(μ + σZ)] (:func:`new_vignette_rate`, by
Gauss–Hermite quadrature), θ_these = (1/G) Σ_v p(η_v) (:func:`vignette_rate`).

References: Cochran (1977), *Sampling Techniques*, ch. 9 (cluster samples of unequal sizes: the
unweighted mean of cluster means); Seaman, Pavlou & Copas (2014), "Review of methods for handling
confounding by cluster and informative cluster size", Stat Med 33 (equal cluster weight is the
population-of-clusters estimand); Zheng et al. (2023), MT-Bench (both-order judging).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats
from scipy.special import expit

#: Gauss–Hermite nodes of the truth integral (smooth integrand; 96 nodes agree with adaptive
#: quadrature to 1e-12 on the study's grid, tests/test_estimands.py).
_QUADRATURE_NODES = 96


@dataclass(frozen=True)
class VignetteMeans:
    """One row per vignette: its label, number of scored contests and mean score."""

    labels: np.ndarray
    sizes: np.ndarray
    means: np.ndarray

    @property
    def estimate(self) -> float:
        """θ̂ = (1/G) Σ_g ȳ_g: the estimate of both populations' rate."""
        return float(self.means.mean())

    @property
    def contest_weighted(self) -> float:
        """Σ_g n_g ȳ_g / n: the pooled share of score, an estimate of neither population's rate
        when sizes are informative (shown beside the estimate, never gated on)."""
        return float(np.sum(self.sizes * self.means) / self.sizes.sum())


def unique_inverse(values) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a 1-D array (labels sorted, each row's code).

    Labels that are all strings are hashed (``pandas.factorize``) and only the distinct ones
    sorted, by the same comparison of Python strings; integers within a range not much wider than
    their count (codes, such as :func:`unique_inverse` returns) are counted (``np.bincount``): the
    same labels and codes, without sorting a million labels (seconds for strings, 0.05 s for
    integers, each time); anything else goes to ``np.unique``.
    """
    array = np.asarray(values)
    if array.ndim == 1 and array.dtype.kind in "iu" and array.size:
        low, high = int(array.min()), int(array.max())
        if high - low <= 4 * array.size and high <= np.iinfo(np.intp).max:
            offsets = array.astype(np.intp, copy=False) - low
            present = np.bincount(offsets) > 0
            labels = (np.flatnonzero(present) + low).astype(array.dtype)
            return labels, (np.cumsum(present) - 1)[offsets]
    if array.ndim == 1 and array.dtype == object and array.size:
        import pandas as pd

        if pd.api.types.infer_dtype(array, skipna=False) == "string":
            codes, labels = pd.factorize(array, sort=True)
            return np.asarray(labels, dtype=object), codes.astype(np.intp)
    labels, codes = np.unique(array, return_inverse=True)
    return labels, codes.reshape(-1)


def vignette_means(scores, clusters) -> VignetteMeans:
    """Group contest scores by vignette (sorted by label)."""
    scores = np.asarray(scores, dtype=float)
    labels, codes = unique_inverse(clusters)
    sizes = np.bincount(codes)
    return VignetteMeans(labels, sizes, np.bincount(codes, weights=scores) / sizes)


@dataclass(frozen=True)
class SizeAssociation:
    """Whether the number of contests per vignette is associated with its mean score.

    ``tau`` is Kendall's tau-b between n_g and ȳ_g with its two-sided ``p_value`` (scipy
    ``kendalltau``); ``None`` when sizes do not vary (nothing can be informative).
    """

    tau: float | None
    p_value: float | None
    equal_weight: float
    contest_weighted: float

    def informative(self, alpha: float) -> bool:
        return self.p_value is not None and self.p_value < alpha


def size_association(scores, clusters) -> SizeAssociation:
    """Kendall's tau between vignette sizes and vignette mean scores, and the two weightings.

    Validated against: ``scipy.stats.kendalltau`` (it is the computation) and, in
    tests/test_estimands.py, simulations with and without informative sizes.
    """
    means = vignette_means(scores, clusters)
    tau = p_value = None
    if np.ptp(means.sizes) > 0 and np.ptp(means.means) > 0 and means.sizes.size >= 3:
        result = stats.kendalltau(means.sizes, means.means)
        tau, p_value = float(result.statistic), float(result.pvalue)
    return SizeAssociation(tau, p_value, means.estimate, means.contest_weighted)


# --------------------------------------------------------------------------------------------
# Truth of the simulation model (module docstring)
# --------------------------------------------------------------------------------------------
def vignette_rate(location, order_bias: float = 0.0, tie_halfwidth: float = 0.0):
    """p(η): expected contest score of a vignette with logit location η (vectorised)."""
    location = np.asarray(location, dtype=float)
    win_first = expit(location + order_bias - tie_halfwidth)
    win_second = expit(location - order_bias - tie_halfwidth)
    lose_first = expit(-location - order_bias - tie_halfwidth)
    lose_second = expit(-location + order_bias - tie_halfwidth)
    both_won = win_first * win_second
    return both_won + 0.5 * (1.0 - both_won - lose_first * lose_second)


@lru_cache(maxsize=4)
def standard_normal_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = np.polynomial.hermite_e.hermegauss(n)
    return nodes, weights / weights.sum()


def new_vignette_rate(mu: float, sd: float, order_bias: float = 0.0, tie_halfwidth: float = 0.0) -> float:
    """θ_new = E_Z[p(μ + σZ)], Z ~ N(0, 1), by Gauss–Hermite quadrature (Abramowitz & Stegun 25.4.46)."""
    nodes, weights = standard_normal_nodes(_QUADRATURE_NODES)
    return float(np.dot(weights, vignette_rate(mu + sd * nodes, order_bias, tie_halfwidth)))


def location_for_rate(rate: float, sd: float, order_bias: float = 0.0, tie_halfwidth: float = 0.0) -> float:
    """The μ at which :func:`new_vignette_rate` equals ``rate`` (it increases in μ from 0 to 1)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must lie in (0, 1), got {rate}")
    return float(
        optimize.brentq(lambda mu: new_vignette_rate(mu, sd, order_bias, tie_halfwidth) - rate, -40.0, 40.0, xtol=1e-13)
    )


def tie_share(mu: float, sd: float, order_bias: float, tie_halfwidth: float) -> float:
    """Expected share of judged orders that are ties on a new vignette (for labelling designs)."""
    nodes, weights = standard_normal_nodes(_QUADRATURE_NODES)
    location = mu + sd * nodes
    ties = [
        1.0 - expit(location + side * order_bias - tie_halfwidth) - expit(-location - side * order_bias - tie_halfwidth)
        for side in (1.0, -1.0)
    ]
    return float(np.dot(weights, 0.5 * (ties[0] + ties[1])))
