"""A clustered mean (or linear contrast) with its CR2 and cluster-bootstrap intervals, as one row.

The common result behind the agreement, ceiling, consistency and order-effect figures of
:mod:`honestci.audit.checks.calibration` and :mod:`honestci.audit.checks.position_bias`: an estimate, the CR2 interval with
Satterthwaite df (:mod:`honestci.audit.stats.frequentist.cluster_robust`), the percentile cluster bootstrap
(:mod:`honestci.audit.stats.frequentist.cluster_bootstrap`) beside it, and INCONCLUSIVE (no interval, never a zero-width
one) below ``min_clusters`` or when the data have no variation to estimate a variance from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import THRESHOLDS, Verdict
from honestci.audit.stats.estimands import unique_inverse
from honestci.audit.stats.frequentist.cluster_bootstrap import cluster_bootstrap_ci
from honestci.audit.stats.frequentist.cluster_robust import ContrastResult, cluster_robust_ols
from honestci.audit.stats.intervals import bound_to_space, reportable_bounds

#: Bootstrap draws of every cluster-bootstrap interval in the calibration and position-bias checks.
DEFAULT_BOOTSTRAP_DRAWS = 1999


#: The columns that show a clustered estimate in a table (its figures and both intervals).
ESTIMATE_COLUMNS = ("name", "estimate", "ci_low", "ci_high", "boot_low", "boot_high", "df", "n", "n_clusters")


@dataclass(frozen=True)
class ClusteredEstimate:
    """One named estimate with its CR2 interval and, where computed, a cluster-bootstrap interval.

    ``ci_low``/``ci_high`` (CR2, Satterthwaite df) and ``boot_low``/``boot_high`` (percentile
    cluster bootstrap) are None when ``verdict`` is INCONCLUSIVE (``note`` says why).
    """

    name: str
    estimate: float | None
    se: float | None
    df: float | None
    ci_low: float | None
    ci_high: float | None
    boot_low: float | None
    boot_high: float | None
    n: int
    n_clusters: int
    level: float
    seed: int | None = None
    verdict: Verdict = Verdict.PASS
    note: str = ""
    #: How the interval was computed, as :meth:`text` names it.
    method: str = "CR2"

    @classmethod
    def inconclusive(
        cls, name: str, estimate: float | None, n: int, n_clusters: int, level: float, note: str
    ) -> ClusteredEstimate:
        """An estimate without an interval (INCONCLUSIVE), ``note`` saying why."""
        return cls(
            name,
            estimate,
            None,
            None,
            None,
            None,
            None,
            None,
            n,
            n_clusters,
            level,
            verdict=Verdict.INCONCLUSIVE,
            note=note,
        )

    @property
    def reportable(self) -> bool:
        return self.bounds is not None

    @property
    def bounds(self) -> tuple[float, float] | None:
        """(CI-low, CI-high) when the interval may be reported, else None."""
        return reportable_bounds(self.verdict, self.ci_low, self.ci_high)

    def as_row(self) -> dict:
        row = asdict(self)
        row["verdict"] = str(self.verdict)
        return row

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([self.as_row()])

    def text(self, digits: int = 3) -> str:
        """``0.803 [0.741, 0.861] (CR2, G = 6)`` or the reason there is no interval."""
        if self.estimate is None:
            return f"not estimable ({self.note})"
        if not self.reportable:
            return f"{self.estimate:.{digits}f} (no interval: {self.note})"
        return (
            f"{self.estimate:.{digits}f} [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}] "
            f"({self.method}, n = {self.n}, G = {self.n_clusters})"
        )

    def __str__(self) -> str:
        return f"{self.name}: {self.text()}"


def clustered_mean(
    values,
    clusters,
    name: str,
    *,
    level: float = 0.95,
    rng: int | None = 0,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
    space: tuple[float, float] | None = None,
) -> ClusteredEstimate:
    """Mean of ``values`` with a CR2 interval (``lm(y ~ 1)``, Satterthwaite df) and a cluster bootstrap.

    Estimand: the mean over new clusters of the per-row value (rows weighted equally).
    ``rng=None`` skips the bootstrap. ``space`` is the estimand's parameter space
    (:data:`~honestci.audit.stats.intervals.RATE_SPACE` for a proportion,
    :data:`~honestci.audit.stats.intervals.DIFFERENCE_SPACE` for a difference of two): the CR2
    interval, symmetric about the mean, is truncated to it (:func:`bound_to_space`; never lowers
    coverage); None leaves it as computed.

    Validated against: R clubSandwich via :func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols`
    (PandaLM agreement, ``tests/test_calibration.py``); coverage by seeded simulation.
    """
    y = np.asarray(values, dtype=float).reshape(-1)
    groups = np.asarray(clusters).reshape(-1)
    if y.shape != groups.shape:
        raise InputError(
            f"{name}: {y.size} values but {groups.size} cluster labels.",
            fix="give one cluster label (vignette) per value",
        )
    # Codes in sorted-label order: the fit and the bootstrap then group without sorting labels again.
    labels, groups = unique_inverse(groups) if y.size else (groups, groups)
    n, n_clusters = int(y.size), int(labels.size)
    if n == 0:
        return ClusteredEstimate.inconclusive(name, None, 0, 0, level, "no rows")
    estimate = float(y.mean())

    def without_interval(note: str) -> ClusteredEstimate:
        return ClusteredEstimate.inconclusive(name, estimate, n, n_clusters, level, note)

    if n_clusters < max(min_clusters, 2):
        return without_interval(f"{n_clusters} cluster(s) < {max(min_clusters, 2)}")
    try:
        fit = cluster_robust_ols(np.ones((n, 1)), y, groups, vcov="CR2", level=level)
    except EstimationError:
        return without_interval("every value is the same: no variance to estimate")
    cluster_means = np.bincount(groups, weights=y) / np.bincount(groups)
    if not np.isfinite(fit.se[0]) or fit.se[0] <= 0 or np.ptp(cluster_means) <= 1e-12 * max(1.0, np.abs(y).max()):
        # Values differ within vignettes but every vignette has the same mean: the sandwich (up to
        # rounding: its SE is then ~1e-17, not 0) and the cluster bootstrap both see no variance
        # between vignettes, and a zero-width interval is no answer.
        return without_interval("every vignette has the same mean: no variance between vignettes to estimate")
    boot_low = boot_high = None
    seed = None
    if rng is not None:
        try:
            boot = cluster_bootstrap_ci(y, groups, B=bootstrap_draws, level=level, rng=rng)
            boot_low, boot_high, seed = boot.ci_low, boot.ci_high, boot.seed
        except EstimationError:  # every resample alike (a few clusters hold all the variation): no bootstrap row
            pass
    low, high = bound_to_space(float(fit.ci_low[0]), float(fit.ci_high[0]), space)
    return ClusteredEstimate(
        name,
        estimate,
        float(fit.se[0]),
        float(fit.df[0]),
        low,
        high,
        boot_low,
        boot_high,
        n,
        n_clusters,
        level,
        seed,
    )


def from_contrast(
    contrast: ContrastResult,
    name: str,
    *,
    estimate: float | None = None,
    boot: tuple[float, float] | None = None,
    seed: int | None = None,
    space: tuple[float, float] | None = None,
) -> ClusteredEstimate:
    """A :class:`ClusteredEstimate` from a CR2 linear contrast (``estimate`` overrides the point
    when the contrast is the linearisation of a non-linear statistic); the interval truncated to
    the estimand's parameter ``space`` as in :func:`clustered_mean`."""
    point = contrast.estimate if estimate is None else estimate
    if not np.isfinite(contrast.se) or contrast.se <= 0:
        return ClusteredEstimate.inconclusive(
            name, point, contrast.n, contrast.n_clusters, contrast.level, "zero standard error: no variance to estimate"
        )
    half = contrast.ci_high - contrast.estimate
    low, high = bound_to_space(point - half, point + half, space)
    return ClusteredEstimate(
        name,
        point,
        contrast.se,
        contrast.df,
        low,
        high,
        None if boot is None else boot[0],
        None if boot is None else boot[1],
        contrast.n,
        contrast.n_clusters,
        contrast.level,
        seed,
    )
