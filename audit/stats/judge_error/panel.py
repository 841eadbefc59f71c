"""Several judges on the same contests (a panel): how far they agree, and how far their win rates differ.

Inputs are a complete (contests × judges) array of contest scores in [0, 1] and the vignette of
each contest (the cluster). Every interval resamples or models vignettes, never contests.

- :func:`krippendorff_alpha`: Krippendorff's α of the judges' verdicts (nominal: the side each
  judge's score favours, policy / tie / opponent) or of their scores (interval metric), with a
  percentile cluster-bootstrap interval that resamples vignettes.
- :func:`judge_differences`: every pairwise difference of the judges' win rates (equal vignette
  weight), each with a t interval on the vignette means of the paired per-contest differences,
  Bonferroni-adjusted over the pairs so that the largest one is covered with the stated level.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from honestci.audit.errors import InputError
from honestci.audit.stats.estimands import vignette_means
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, bound_to_space
from honestci.audit.stats.random_state import resolve_rng

ALPHA_METRICS = ("nominal", "interval")
#: Cluster-bootstrap draws of the α interval.
ALPHA_BOOTSTRAP_DRAWS = 1999


def verdict_codes(scores) -> np.ndarray:
    """The side each contest score favours: 2 policy (s > ½), 1 tie (s = ½), 0 opponent (s < ½)."""
    scores = np.asarray(scores, dtype=float)
    return np.where(scores > 0.5, 2, np.where(scores < 0.5, 0, 1))


def _check(ratings, clusters) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(ratings, dtype=float)
    groups = np.asarray(clusters).reshape(-1)
    if values.ndim != 2 or values.shape[1] < 2 or values.shape[0] != groups.size:
        raise InputError(
            f"ratings must be a (contests × judges) array with two or more judges and one cluster per contest "
            f"(got {values.shape} and {groups.size} clusters)",
            fix="pass one row per contest and one column per judge",
        )
    if not np.isfinite(values).all():
        raise InputError("ratings must be complete and finite", fix="leave out contests a judge did not score")
    return values, groups


def _alpha_parts(values: np.ndarray, metric: str, codes: np.ndarray) -> np.ndarray:
    """Per-vignette sufficient statistics: [observed disagreement sum, n values, then metric sums]."""
    m = values.shape[1]
    if metric == "nominal":
        v = verdict_codes(values)
        counts = np.stack([(v == c).sum(axis=1) for c in range(3)], axis=1).astype(float)
        # Σ_{i≠j} 1{v_i ≠ v_j} within a contest = m(m−1) − Σ_c n_c(n_c − 1)
        within = (m * (m - 1) - (counts * (counts - 1)).sum(axis=1)) / (m - 1)
        extra = counts
    elif metric == "interval":
        s1, s2 = values.sum(axis=1), (values**2).sum(axis=1)
        # Σ_{i≠j} (x_i − x_j)² = 2mΣx² − 2(Σx)²
        within = (2 * m * s2 - 2 * s1**2) / (m - 1)
        extra = np.column_stack([s1, s2])
    else:
        raise InputError(f"unknown metric {metric!r}", fix=f"use one of: {', '.join(ALPHA_METRICS)}")
    per_contest = np.column_stack([within, np.full(len(values), float(m)), extra])
    n_groups = int(codes.max()) + 1
    return np.stack([np.bincount(codes, weights=col, minlength=n_groups) for col in per_contest.T], axis=1)


def _alpha_from_parts(parts: np.ndarray, metric: str) -> np.ndarray:
    """α from (draws × statistics) sums; NaN where the expected disagreement is 0."""
    observed, n = parts[..., 0], parts[..., 1]
    if metric == "nominal":
        counts = parts[..., 2:]
        expected = (n**2 - (counts**2).sum(axis=-1)) / (n * (n - 1))
    else:
        s1, s2 = parts[..., 2], parts[..., 3]
        expected = (2 * n * s2 - 2 * s1**2) / (n * (n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected > 0, 1 - (observed / n) / expected, np.nan)


@dataclass(frozen=True)
class AlphaResult:
    """Krippendorff's α of a panel with its vignette-clustered bootstrap interval (None when the
    judges' values do not vary at all, where α is undefined)."""

    metric: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    level: float
    n_contests: int
    n_judges: int
    n_clusters: int
    draws: int
    seed: int | None

    def as_row(self) -> dict:
        return {
            "figure": f"Krippendorff's alpha ({self.metric})",
            "estimate": self.estimate,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n_contests,
            "n_clusters": self.n_clusters,
            "note": f"percentile cluster bootstrap over vignettes, {self.draws} draws, seed {self.seed}",
        }


def krippendorff_alpha(
    ratings,
    clusters,
    *,
    metric: str = "nominal",
    level: float = 0.95,
    rng: int | np.random.Generator = 0,
    draws: int = ALPHA_BOOTSTRAP_DRAWS,
) -> AlphaResult:
    """Krippendorff's α of complete panel ratings, with a vignette-clustered bootstrap interval.

    α = 1 − D_o / D_e, with n = N·m pairable values (N contests, m judges),
    D_o = (1/n) Σ_u (1/(m − 1)) Σ_{i≠j} δ(v_ui, v_uj) and D_e = (1/(n(n − 1))) Σ_{all value pairs} δ;
    δ is 1{a ≠ b} (``nominal``, on :func:`verdict_codes`) or (a − b)² (``interval``, on the scores).
    The interval is the percentile interval of α over ``draws`` resamples of whole vignettes (the
    contests of a vignette share a prompt, so they are not independent units).

    Reference: Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability"; Hayes &
    Krippendorff (2007) for the bootstrap (here over clusters, not units).
    Validated against: the ``krippendorff`` package, ``krippendorff.alpha(reliability_data=ratings.T,
    level_of_measurement=...)`` (tests/test_panel.py).
    """
    values, groups = _check(ratings, clusters)
    _, codes = np.unique(groups, return_inverse=True)
    parts = _alpha_parts(values, metric, codes)
    estimate = float(_alpha_from_parts(parts.sum(axis=0), metric))
    generator, seed = resolve_rng(rng)
    n_clusters = parts.shape[0]
    low = high = None
    if np.isfinite(estimate) and n_clusters >= 2:
        weights = generator.multinomial(n_clusters, np.full(n_clusters, 1 / n_clusters), size=draws)
        boot = _alpha_from_parts(weights @ parts, metric)
        boot = boot[np.isfinite(boot)]
        if boot.size:
            low, high = (float(q) for q in np.quantile(boot, [(1 - level) / 2, (1 + level) / 2]))
    return AlphaResult(
        metric,
        estimate if np.isfinite(estimate) else None,
        low,
        high,
        level,
        int(values.shape[0]),
        int(values.shape[1]),
        int(n_clusters),
        draws,
        seed,
    )


@dataclass(frozen=True)
class JudgeDifferences:
    """Each pair of judges' win-rate difference with a Bonferroni-simultaneous interval.

    ``table`` has one row per pair: judge_a, judge_b, estimate (rate of a minus rate of b,
    vignettes weighted equally), ci_low, ci_high, df. ``level`` is the simultaneous level; each
    pair's interval is at 1 − (1 − level)/pairs. ``spread`` is the standard deviation of the
    judges' rates (descriptive: the judge main effect's size)."""

    judges: tuple[str, ...]
    rates: tuple[float, ...]
    table: pd.DataFrame
    level: float
    n_clusters: int
    spread: float

    @property
    def largest(self) -> dict:
        """The pair with the largest absolute difference."""
        return self.table.loc[self.table["estimate"].abs().idxmax()].to_dict()

    @property
    def judges_differ(self) -> bool:
        """Some pair's simultaneous interval excludes 0 (the judge main effect is not zero)."""
        return bool(((self.table["ci_low"] > 0) | (self.table["ci_high"] < 0)).any())


def judge_differences(scores, clusters, judges, *, level: float = 0.95) -> JudgeDifferences:
    """Pairwise differences of the judges' win rates on the same contests, clustered by vignette.

    For judges a, b: d = s_a − s_b per contest; θ̂_ab = (1/G) Σ_g d̄_g (the difference of the two
    judges' equal-vignette-weight rates), with the t interval θ̂ ± t_{G−1, 1−α'/2} · sd(d̄_g)/√G on
    the G vignette means (the CR2 interval of an intercept-only fit on them) at α' = (1 − level)/P
    for the P = K(K − 1)/2 pairs (Bonferroni), so that every pair, the largest included, is covered
    jointly with probability at least ``level``.

    Validated against: ``scipy.stats.ttest_1samp(d̄_g).confidence_interval(1 − α')``
    (tests/test_panel.py).
    """
    values, groups = _check(scores, clusters)
    judges = tuple(judges)
    if len(judges) != values.shape[1]:
        raise InputError(f"{len(judges)} judge names for {values.shape[1]} columns", fix="name every column")
    pairs = list(combinations(range(len(judges)), 2))
    each = 1 - (1 - level) / len(pairs)
    rows = []
    n_clusters = int(np.unique(groups).size)
    for a, b in pairs:
        means = vignette_means(values[:, a] - values[:, b], groups).means
        estimate = float(means.mean())
        df = n_clusters - 1
        if n_clusters < 2 or np.ptp(means) == 0:  # no interval: NaN, never a zero-width one
            low = high = float("nan")
        else:
            half = float(stats.t.ppf(0.5 + each / 2, df) * means.std(ddof=1) / np.sqrt(n_clusters))
            low, high = bound_to_space(estimate - half, estimate + half, DIFFERENCE_SPACE)  # of two rates
        rows.append(
            {"judge_a": judges[a], "judge_b": judges[b], "estimate": estimate, "ci_low": low, "ci_high": high, "df": df}
        )
    rates = tuple(float(vignette_means(values[:, k], groups).estimate) for k in range(len(judges)))
    return JudgeDifferences(judges, rates, pd.DataFrame(rows), level, n_clusters, float(np.std(rates, ddof=1)))
