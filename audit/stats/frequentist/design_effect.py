"""How much clustering shrinks the information in n correlated scores: ICC, design effect, n_eff.

Reported beside every interval so a reader sees at a glance why 720 contests on 6 vignettes are
worth far fewer than 720 independent ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.estimands import unique_inverse


@dataclass(frozen=True)
class ClusteringSummary:
    """n, clusters, one-way ANOVA ICC, design effect and effective sample size of one outcome."""

    n: int
    n_clusters: int
    icc: float
    design_effect: float
    n_effective: float
    mean_cluster_size: float

    def to_frame(self):
        """One row with every field."""
        import pandas as pd

        return pd.DataFrame(
            {
                "n": [self.n],
                "n_clusters": [self.n_clusters],
                "mean_cluster_size": [self.mean_cluster_size],
                "icc": [self.icc],
                "design_effect": [self.design_effect],
                "n_effective": [self.n_effective],
            }
        )

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)


def icc_oneway(y: Any, clusters: Any) -> float:
    """One-way ANOVA estimate of the intraclass correlation, truncated at 0.

    With G clusters of sizes n_g (N = Σ n_g), cluster means ȳ_g and grand mean ȳ:

        MSB = Σ_g n_g (ȳ_g - ȳ)² / (G - 1),   MSW = Σ_g Σ_i (y_gi - ȳ_g)² / (N - G),
        n0  = (N - Σ_g n_g² / N) / (G - 1),
        ICC = max(0, (MSB - MSW) / (MSB + (n0 - 1) MSW)).

    For equal cluster sizes n0 = n_g, and when MSB > MSW the estimate equals the REML estimate
    σ²_u / (σ²_u + σ²_e) of the random-intercept model.

    Parameters
    ----------
    y
        Outcomes (e.g. contest scores in {0, ½, 1}), length N.
    clusters
        Cluster label of each outcome, length N.

    Returns
    -------
    float
        The ICC estimate in [0, 1].

    Raises
    ------
    InputError
        Mismatched lengths or non-finite outcomes.
    EstimationError
        Fewer than two clusters, no within-cluster replication (N = G), or no variation at all.

    References
    ----------
    Donner (1986), Int. Stat. Rev. 54:67; Searle, Casella & McCulloch (1992), Variance
    Components, section 3.5 (n0).

    Validated against
    -----------------
    A hand-computed example, R lme4 ``lmer(y ~ 1 + (1 | g), REML = TRUE)`` on balanced data and
    the ANOVA mean squares of R ``aov`` on unbalanced data (``tests/reference/``).
    """
    y_arr, cluster_index, sizes = _validate_clustered(y, clusters)
    n = y_arr.size
    n_clusters = sizes.size
    if n == n_clusters:
        raise EstimationError(
            "Every cluster has exactly one observation, so within-cluster variation (and the ICC) cannot be estimated."
        )
    cluster_means = np.bincount(cluster_index, weights=y_arr) / sizes
    grand_mean = y_arr.mean()
    ms_between = np.sum(sizes * (cluster_means - grand_mean) ** 2) / (n_clusters - 1)
    ms_within = np.sum((y_arr - cluster_means[cluster_index]) ** 2) / (n - n_clusters)
    n0 = (n - np.sum(sizes**2) / n) / (n_clusters - 1)
    denominator = ms_between + (n0 - 1) * ms_within
    if denominator <= 0:
        raise EstimationError("The outcome does not vary at all, so the ICC is undefined.")
    return float(max(0.0, (ms_between - ms_within) / denominator))


def design_effect(cluster_sizes: Any, icc: float) -> float:
    """Design effect of a mean over clusters of (possibly unequal) sizes with a common ICC.

        DEFF = 1 + ((cv² + 1) m̄ - 1) ICC,

    with m̄ the mean cluster size and cv = s_m / m̄ the coefficient of variation of the sizes,
    s_m using divisor G. Then (cv² + 1) m̄ = Σ m_g² / N, so DEFF = Var(ȳ) / (σ²/N) exactly for
    the grand mean under an exchangeable correlation ICC within clusters. Equal sizes give
    1 + (m̄ - 1) ICC.

    Parameters
    ----------
    cluster_sizes
        Number of observations in each cluster (positive integers).
    icc
        Intraclass correlation in [0, 1].

    Returns
    -------
    float

    References
    ----------
    Eldridge, Ashby & Kerry (2006), Int. J. Epidemiol. 35:1292, eq. (1); Kerry & Bland (2001),
    Stat. Med. 20:377.

    Validated against
    -----------------
    The exact variance of the grand mean under an exchangeable covariance matrix, computed
    numerically (``tests/test_design_effect.py``).
    """
    sizes = np.asarray(cluster_sizes, dtype=float).reshape(-1)
    problems = []
    if sizes.size == 0 or not np.all(np.isfinite(sizes)) or np.any(sizes < 1):
        problems.append("cluster_sizes must be a non-empty list of sizes >= 1")
    if not (np.isfinite(icc) and 0 <= icc <= 1):
        problems.append(f"icc = {icc!r} must lie in [0, 1]")
    if problems:
        raise InputError(
            "Cannot compute a design effect: " + "; ".join(problems) + ".",
            fix="pass the observation count of every cluster and an ICC estimate (see icc_oneway)",
        )
    mean_size = sizes.mean()
    cv_sq = sizes.var() / mean_size**2
    return float(1 + ((cv_sq + 1) * mean_size - 1) * icc)


def n_effective(n: float, deff: float) -> float:
    """Effective sample size n / DEFF: the number of independent observations worth as much.

    References
    ----------
    Kish (1965), Survey Sampling, section 8.2.

    Validated against
    -----------------
    Its definition (``tests/test_design_effect.py``).
    """
    if not (np.isfinite(n) and n > 0 and np.isfinite(deff) and deff > 0):
        raise InputError(
            f"Cannot compute n_effective from n = {n!r} and deff = {deff!r}: both must be positive.",
            fix="pass the number of observations and a design effect from design_effect()",
        )
    return float(n / deff)


def clustering_summary(y: Any, clusters: Any) -> ClusteringSummary:
    """n, G, one-way ICC, design effect and n_effective of ``y`` clustered by ``clusters``.

    Combines :func:`icc_oneway`, :func:`design_effect` (with the observed cluster sizes) and
    :func:`n_effective`.

    References
    ----------
    Eldridge, Ashby & Kerry (2006), Int. J. Epidemiol. 35:1292.

    Validated against
    -----------------
    The component functions' references (``tests/test_design_effect.py``).
    """
    y_arr, _, sizes = _validate_clustered(y, clusters)
    icc = icc_oneway(y_arr, clusters)
    deff = design_effect(sizes, icc)
    return ClusteringSummary(
        n=int(y_arr.size),
        n_clusters=int(sizes.size),
        icc=icc,
        design_effect=deff,
        n_effective=n_effective(y_arr.size, deff),
        mean_cluster_size=float(sizes.mean()),
    )


def _validate_clustered(y, clusters):
    y_arr = np.asarray(y, dtype=float).reshape(-1)
    cluster_arr = np.asarray(clusters).reshape(-1)
    if y_arr.size != cluster_arr.size or y_arr.size == 0 or not np.all(np.isfinite(y_arr)):
        raise InputError(
            f"y ({y_arr.size} values) and clusters ({cluster_arr.size} labels) must be equally long, "
            "non-empty, with finite outcomes.",
            fix="pass one finite outcome and one cluster label per observation",
        )
    cluster_index = cluster_codes(cluster_arr)
    sizes = np.bincount(cluster_index).astype(float)
    if sizes.size < 2:
        raise EstimationError("Only one cluster: between-cluster variation cannot be estimated.")
    return y_arr, cluster_index, sizes


def cluster_codes(cluster_arr: np.ndarray) -> np.ndarray:
    """0-based cluster index of each row (labels sorted)."""
    try:
        _, codes = unique_inverse(cluster_arr)
    except TypeError as error:
        raise InputError(
            "Cluster labels of mixed types cannot be ordered.",
            fix="give every cluster label the same type (e.g. all strings)",
        ) from error
    return codes.reshape(-1)
