"""Comparisons of two systems judged against the same opponent on the same vignettes.

"A beats reference R" is a test on the difference of their win rates, clustered by vignette —
never A's CI-low set against R's point estimate (which ignores R's own uncertainty and the pairing
through shared vignettes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from honestci.audit.errors import InputError
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, bound_to_space

#: Ways a model card may have compared two systems; only ``paired_difference`` is a test.
COMPARISON_KINDS = {
    "paired_difference": "a vignette-clustered test on the difference of win rates",
    "ci_low_vs_point": "one system's CI-low set against the other's point estimate (not a test)",
    "point_vs_point": "two point estimates set side by side (not a test)",
}


@dataclass(frozen=True)
class PairedDifference:
    """Win rate of ``system_a`` minus that of ``system_b`` against the same opponent.

    Estimand: θ_A − θ_B on new vignettes, with θ the expected contest score. Estimated by OLS of
    the stacked contest scores on [1, 1{A}] with a CR2 covariance clustered by vignette and the
    Bell–McCaffrey/Satterthwaite df of the 1{A} coefficient (Pustejovsky & Tipton 2018).
    Validated against: R clubSandwich ``coef_test(lm(y ~ system), vcov = "CR2", cluster = vignette)``
    (tests/reference, via :func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols`).
    """

    system_a: str
    system_b: str
    opponent: str
    estimate: float
    se: float
    df: float
    p: float
    ci_low: float
    ci_high: float
    level: float
    n_a: int
    n_b: int
    n_clusters: int
    method: str = "CR2, stacked, Satterthwaite df"

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(self)])


def paired_difference(
    scores_a, clusters_a, scores_b, clusters_b, *, system_a: str, system_b: str, opponent: str, level: float = 0.95
) -> PairedDifference:
    """Clustered difference of two systems' win rates on the vignettes both were judged on."""
    clusters_a, clusters_b = np.asarray(clusters_a), np.asarray(clusters_b)
    shared = np.intersect1d(clusters_a, clusters_b)
    only = sorted(set(np.setxor1d(clusters_a, clusters_b)))
    if only:
        raise InputError(
            f"{system_a} and {system_b} were not judged on the same vignettes (only one of them has {only[:5]}).",
            fix="compare systems on a shared set of vignettes",
        )
    if shared.size < 2:
        raise InputError(f"{system_a} and {system_b} share fewer than 2 vignettes: no clustered comparison.")
    y = np.concatenate([np.asarray(scores_a, float), np.asarray(scores_b, float)])
    is_a = np.concatenate([np.ones(len(scores_a)), np.zeros(len(scores_b))])
    design = np.column_stack([np.ones_like(is_a), is_a])
    fit = cluster_robust_ols(
        design,
        y,
        np.concatenate([clusters_a, clusters_b]),
        vcov="CR2",
        level=level,
        df="satterthwaite",
        coef_names=("intercept", "a_minus_b"),
    )
    low, high = bound_to_space(fit.ci_low[1], fit.ci_high[1], DIFFERENCE_SPACE)  # a difference of two rates
    return PairedDifference(
        system_a,
        system_b,
        opponent,
        float(fit.coef[1]),
        float(fit.se[1]),
        float(fit.df[1]),
        float(fit.p[1]),
        low,
        high,
        level,
        len(scores_a),
        len(scores_b),
        int(shared.size),
    )
