"""Populations beyond the eval vignettes: the transfer gap between two groups of vignettes.

Vignette families (the ``family`` column) split the vignettes into disjoint groups: the
in-distribution vignettes and, say, fresh scenarios. Each group's win rate weights its vignettes
equally (:mod:`honestci.audit.stats.estimands`); the transfer gap is the difference of the two
new-vignette rates,

    Δ = θ_in − θ_fresh,   θ_A = E_{v ∈ A}[p_v],

estimated by OLS of the per-vignette means ȳ_g on an intercept and a fresh indicator (one row per
vignette, so every vignette weighs the same) with the CR2 covariance clustered by vignette and
Bell–McCaffrey/Satterthwaite degrees of freedom (Bell & McCaffrey 2002; Pustejovsky & Tipton
2018). The families share no vignette, so this is a two-sample difference: with one row per
cluster CR2 is HC2, whose variance here is Welch's s²_in/G_in + s²_fresh/G_fresh, and the
Satterthwaite df under the working model Var(ε) = σ²I is Imbens & Kolesár's (2016, eq. 10)
K = (1/G_in + 1/G_fresh)² / (1/(G_in²(G_in − 1)) + 1/(G_fresh²(G_fresh − 1))).

Validated against: ``scipy.stats.ttest_ind(equal_var=False)`` (the standard error) and the closed
form of Imbens & Kolesár (2016) for the df (tests/test_populations.py); coverage by a seeded
simulation in the same file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.estimands import vignette_means
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, bound_to_space


@dataclass(frozen=True)
class TransferGap:
    """θ_in − θ_fresh with its vignette-clustered CR2 interval (see the module docstring)."""

    estimate: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    level: float
    rate_in: float
    rate_fresh: float
    n_vignettes_in: int
    n_vignettes_fresh: int
    label_in: str = "in-distribution"
    label_fresh: str = "fresh"

    def to_frame(self) -> pd.DataFrame:
        """One row: both groups' rates, the gap, its SE, df and interval."""
        return pd.DataFrame(
            [
                {
                    "in": self.label_in,
                    "fresh": self.label_fresh,
                    "rate_in": self.rate_in,
                    "rate_fresh": self.rate_fresh,
                    "gap": self.estimate,
                    "se": self.se,
                    "df": self.df,
                    "ci_low": self.ci_low,
                    "ci_high": self.ci_high,
                    "level": self.level,
                    "vignettes_in": self.n_vignettes_in,
                    "vignettes_fresh": self.n_vignettes_fresh,
                }
            ]
        )

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False, float_format=lambda x: f"{x:.3f}")


def transfer_gap(
    scores,
    clusters,
    fresh,
    level: float = 0.95,
    *,
    label_in: str = "in-distribution",
    label_fresh: str = "fresh",
) -> TransferGap:
    """The transfer gap θ_in − θ_fresh between two disjoint groups of vignettes.

    Parameters
    ----------
    scores
        Per-contest scores in [0, 1].
    clusters
        The vignette of each contest.
    fresh
        Per contest, True when its vignette belongs to the fresh group (constant within a vignette).
    level
        Confidence level of the t interval.

    Raises
    ------
    InputError
        When the inputs' lengths differ or a vignette is in both groups.
    EstimationError
        When a group has fewer than two vignettes (no spread between vignettes to estimate).
    """
    scores = np.asarray(scores, dtype=float)
    clusters = np.asarray(clusters)
    fresh = np.asarray(fresh, dtype=bool)
    if not (scores.shape == clusters.shape == fresh.shape) or scores.ndim != 1:
        raise InputError(
            "scores, clusters and the fresh indicator must be 1-D arrays of one length.",
            fix="pass one value per contest in each",
        )
    means = vignette_means(scores, clusters)
    labels, codes = np.unique(clusters, return_inverse=True)
    share = np.bincount(codes, weights=fresh.astype(float)) / np.bincount(codes)
    if np.any((share > 0) & (share < 1)):
        raise InputError(
            "A vignette is in both groups of the transfer gap.",
            fix="give every vignette one family; the groups must be disjoint",
        )
    return vignette_transfer_gap(means.means, labels, share == 1, level, label_in=label_in, label_fresh=label_fresh)


def vignette_transfer_gap(
    rates,
    vignettes,
    fresh,
    level: float = 0.95,
    *,
    label_in: str = "in-distribution",
    label_fresh: str = "fresh",
) -> TransferGap:
    """:func:`transfer_gap` from one entry per vignette: its mean score (``rates``, as
    :func:`~honestci.audit.stats.estimands.vignette_means` gives them), its label and whether it is
    fresh. Splitting one set of vignettes in several ways (one family against the rest, for each
    family) then groups its contests once.

    Raises
    ------
    EstimationError
        When a group has fewer than two vignettes (no spread between vignettes to estimate).
    """
    rates, vignettes = np.asarray(rates, dtype=float), np.asarray(vignettes)
    is_fresh = np.asarray(fresh, dtype=bool)
    if not (rates.shape == vignettes.shape == is_fresh.shape) or rates.ndim != 1:
        raise InputError(
            "rates, vignettes and the fresh indicator must be 1-D arrays of one length.",
            fix="pass one value per vignette in each",
        )
    n_fresh, n_in = int(is_fresh.sum()), int((~is_fresh).sum())
    if min(n_fresh, n_in) < 2:
        raise EstimationError(
            f"The transfer gap needs two or more vignettes in each group; got {n_in} in "
            f"{label_in!r} and {n_fresh} in {label_fresh!r}: no spread between vignettes can be estimated."
        )
    # Intercept = θ_in; the indicator's coefficient = θ_fresh − θ_in.
    X = np.column_stack([np.ones(vignettes.size), is_fresh.astype(float)])
    fit = cluster_robust_ols(X, rates, vignettes, vcov="CR2", level=level, df="satterthwaite")
    low, high = bound_to_space(-fit.ci_high[1], -fit.ci_low[1], DIFFERENCE_SPACE)  # a difference of two rates
    return TransferGap(
        estimate=float(-fit.coef[1]),
        se=float(fit.se[1]),
        df=float(fit.df[1]),
        ci_low=low,
        ci_high=high,
        level=level,
        rate_in=float(rates[~is_fresh].mean()),
        rate_fresh=float(rates[is_fresh].mean()),
        n_vignettes_in=n_in,
        n_vignettes_fresh=n_fresh,
        label_in=label_in,
        label_fresh=label_fresh,
    )
