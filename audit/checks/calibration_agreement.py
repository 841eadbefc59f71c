"""How far a judge agrees with human preferences, and humans with each other: every figure on the codes.

Agreement under three tie policies (:data:`TIE_POLICIES`) with vignette-clustered intervals,
3-class accuracy and macro P/R/F1, Cohen's (weighted) kappa, Krippendorff's alpha across raters,
the human-human ceiling (leave one rater out), and the differences a judge is read on: judge minus
ceiling, judge minus judge. Codes, items and tie policies: :mod:`honestci.audit.checks.calibration`;
:data:`CLASSES`, :data:`INVALID_CODE` and :func:`majority_preference` are
:mod:`honestci.audit.checks.calibration_items`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from honestci.audit.checks.calibration_items import TIE, majority_preference, preference_from_difference
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import GATE_TIE_POLICY, THRESHOLDS
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols, linear_contrast
from honestci.audit.stats.frequentist.clustered_estimate import (
    DEFAULT_BOOTSTRAP_DRAWS,
    ClusteredEstimate,
    clustered_mean,
    from_contrast,
)
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, RATE_SPACE
from honestci.audit.stats.random_state import resolve_rng

#: Tie policies of agreement (:mod:`honestci.audit.checks.calibration`); the gate reads the second.
TIE_POLICIES = ("as_class", "human_decided", "decided")


# --- point metrics --------------------------------------------------------------------------


def _class_index(codes: np.ndarray) -> np.ndarray:
    return np.round(codes).astype(int) + 1  # -1, 0, +1, INVALID_CODE -> 0, 1, 2, 3


def confusion_table(judge_codes, human_codes) -> np.ndarray:
    """4 x 3 counts: rows the judge's class (:data:`CLASSES` order, then invalid), columns the human class.

    The fourth row holds invalid verdicts coded :data:`INVALID_CODE` (``invalid_as="disagreement"``);
    it is all zero under the other conventions.
    """
    j, h = np.asarray(judge_codes, float), np.asarray(human_codes, float)
    ok = ~np.isnan(j) & ~np.isnan(h)
    table = np.zeros((4, 3))
    np.add.at(table, (_class_index(j[ok]), _class_index(h[ok])), 1.0)
    return table


@dataclass(frozen=True)
class ClassificationMetrics:
    """3-class accuracy and macro-averaged precision, recall and F1 of a judge against humans.

    Macro F1 is the mean of the per-class F1 scores (scikit-learn's ``average="macro"``; a class
    with no predictions has precision 0), the definition of PandaLM's ``compute_metrics.py``.
    Invalid verdicts coded :data:`INVALID_CODE` are wrong: they count in accuracy's denominator
    and in each human class's recall, and predict no class.
    """

    accuracy: float
    macro_precision: float
    macro_recall: float
    macro_f1: float
    n: int
    confusion: tuple[tuple[float, ...], ...] = field(repr=False)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "accuracy": self.accuracy,
                    "macro_precision": self.macro_precision,
                    "macro_recall": self.macro_recall,
                    "macro_f1": self.macro_f1,
                    "n": self.n,
                }
            ]
        )


def classification_metrics(judge_codes, human_codes) -> ClassificationMetrics:
    """Accuracy and macro P/R/F1 over the classes {b, tie, a} (items missing either code are left out)."""
    table = confusion_table(judge_codes, human_codes)
    n = table.sum()
    if n == 0:
        raise InputError("no item has both a judge verdict and a human label.", fix="check the item matching")
    tp = np.diag(table[:3])
    predicted, actual = table[:3].sum(axis=1), table.sum(axis=0)
    precision = np.divide(tp, predicted, out=np.zeros(3), where=predicted > 0)
    recall = np.divide(tp, actual, out=np.zeros(3), where=actual > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(3), where=precision + recall > 0)
    return ClassificationMetrics(
        float(tp.sum() / n),
        float(precision.mean()),
        float(recall.mean()),
        float(f1.mean()),
        int(n),
        tuple(map(tuple, table)),
    )


def agreement_indicator(judge_codes, human_codes, ties: str = GATE_TIE_POLICY) -> tuple[np.ndarray, np.ndarray]:
    """(rows kept, 1.0 where the judge matches the human reference) under a tie policy.

    The tie policies are described in :mod:`honestci.audit.checks.calibration`.
    """
    if ties not in TIE_POLICIES:
        raise InputError(f"ties={ties!r} is not one of {TIE_POLICIES}.", fix=f"use one of {', '.join(TIE_POLICIES)}")
    j, h = np.asarray(judge_codes, float), np.asarray(human_codes, float)
    keep = ~np.isnan(j) & ~np.isnan(h)
    if ties in ("human_decided", "decided"):
        keep &= h != TIE
    if ties == "decided":
        keep &= j != TIE
    return keep, (j[keep] == h[keep]).astype(float)


def agreement_ci(
    judge_codes,
    human_codes,
    clusters,
    *,
    ties: str = GATE_TIE_POLICY,
    level: float = 0.95,
    rng: int | None = 0,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
    name: str | None = None,
) -> ClusteredEstimate:
    """Agreement of a judge with the human reference, with a vignette-clustered interval.

    Estimand: P(judge code = human code) over judged rows kept by the tie policy ``ties``, for a
    new vignette. Point: the share of kept rows that agree. Intervals: CR2 on ``lm(agree ~ 1)``
    with Satterthwaite df (Bell & McCaffrey 2002; Pustejovsky & Tipton 2018) and the percentile
    cluster bootstrap.

    Validated against: R clubSandwich 0.5.8 (PandaLM GPT-3.5 agreement, CR2 to 1e-6) and a seeded
    coverage simulation (``tests/test_calibration.py``).
    """
    keep, agree = agreement_indicator(judge_codes, human_codes, ties)
    groups = np.asarray(clusters).reshape(-1)
    if groups.size != keep.size:
        raise InputError(f"{groups.size} cluster labels for {keep.size} judged rows.", fix="one vignette per row")
    return clustered_mean(
        agree,
        groups[keep],
        name or f"agreement ({ties})",
        level=level,
        rng=rng,
        bootstrap_draws=bootstrap_draws,
        min_clusters=min_clusters,
        space=RATE_SPACE,
    )


# --- kappa ----------------------------------------------------------------------------------


def _agreement_weights(weights: str | None) -> np.ndarray:
    """4 x 3 agreement weights: judge class (b, tie, a, invalid) against human class (b, tie, a)."""
    distance = np.abs(np.subtract.outer(np.arange(3), np.arange(3))) / 2.0
    invalid = np.zeros((1, 3))  # an invalid verdict agrees with no human class
    if weights is None:
        return np.vstack([np.eye(3), invalid])
    if weights == "linear":
        return np.vstack([1.0 - distance, invalid])
    if weights == "quadratic":
        return np.vstack([1.0 - distance**2, invalid])
    raise InputError(
        f"weights={weights!r} is not None, 'linear' or 'quadratic'.", fix="use None, 'linear' or 'quadratic'"
    )


def _kappa_from_tables(tables: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Kappa of each 4 x 3 count table in ``tables`` (..., 4, 3)."""
    p = tables / tables.sum(axis=(-2, -1), keepdims=True)
    rows, cols = p.sum(axis=-1), p.sum(axis=-2)
    observed = (w * p).sum(axis=(-2, -1))
    expected = np.einsum("ij,...i,...j->...", w, rows, cols)
    return (observed - expected) / (1.0 - expected)


def cohen_kappa(
    judge_codes,
    human_codes,
    clusters,
    *,
    weights: str | None = None,
    level: float = 0.95,
    rng: int | None = 0,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> ClusteredEstimate:
    """Cohen's kappa (``weights=None``) or weighted kappa (``"linear"``/``"quadratic"``) over the 3 ordered classes.

    κ = (p_o − p_e)/(1 − p_e) with p_o = Σ w_ij p_ij and p_e = Σ w_ij r_i c_j (r, c: the judge's and
    the humans' class shares; w = 1 − |i − j|/2 linear, 1 − (i − j)²/4 quadratic; an invalid verdict
    coded :data:`INVALID_CODE` is a fourth judge row with w = 0 against every class). Interval: CR2 on
    the linearised pseudo-values κ + IF_k, with the influence function
    IF_k = [(w_{i_k j_k} − p_o) − (1 − κ)(Σ_j w_{i_k j} c_j + Σ_i w_{i j_k} r_i − 2 p_e)]/(1 − p_e)
    (delta method; with one item per cluster and CR0 this is the Fleiss-Cohen-Everitt variance),
    and a percentile cluster bootstrap of κ itself.

    References: Cohen (1960, 1968); Fleiss, Cohen & Everitt (1969), Psychol. Bull. 72:323.
    Validated against: statsmodels ``cohens_kappa`` (estimate and, for unweighted kappa, its
    asymptotic SE; with invalid verdicts, the table padded to 4 x 4 with disagreement weights
    1 − w), and seeded coverage of the clustered interval (``tests/test_calibration.py``,
    ``tests/test_calibration_single_rater.py``).
    """
    w = _agreement_weights(weights)
    j, h = np.asarray(judge_codes, float), np.asarray(human_codes, float)
    groups = np.asarray(clusters).reshape(-1)
    ok = ~np.isnan(j) & ~np.isnan(h)
    ji, hi, groups = _class_index(j[ok]), _class_index(h[ok]), groups[ok]
    name = "Cohen's kappa" if weights is None else f"weighted kappa ({weights})"
    n = ji.size
    if n == 0:
        raise InputError("no item has both a judge verdict and a human label.", fix="check the item matching")
    table = np.zeros(w.shape)
    np.add.at(table, (ji, hi), 1.0)
    p = table / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    observed, expected = float((w * p).sum()), float(rows @ w @ cols)
    if expected >= 1.0:
        return ClusteredEstimate.inconclusive(
            name, None, n, int(np.unique(groups).size), level, "one class only: kappa is undefined"
        )
    kappa = (observed - expected) / (1.0 - expected)
    influence = ((w[ji, hi] - observed) - (1.0 - kappa) * ((w @ cols)[ji] + (rows @ w)[hi] - 2.0 * expected)) / (
        1.0 - expected
    )
    # kappa lies in [-1, 1] (p_e <= 1), the space its linearised interval is truncated to
    linear = clustered_mean(
        kappa + influence, groups, name, level=level, rng=None, min_clusters=min_clusters, space=DIFFERENCE_SPACE
    )
    if not linear.reportable:
        return ClusteredEstimate.inconclusive(name, kappa, n, linear.n_clusters, level, linear.note)
    boot, seed = (
        (None, None)
        if rng is None
        else _bootstrap_tables(
            _cluster_tables(ji, hi, groups, w.shape), lambda t: _kappa_from_tables(t, w), bootstrap_draws, rng, level
        )
    )
    return ClusteredEstimate(
        name,
        kappa,
        linear.se,
        linear.df,
        linear.ci_low,
        linear.ci_high,
        None if boot is None else boot[0],
        None if boot is None else boot[1],
        n,
        linear.n_clusters,
        level,
        seed,
    )


def _cluster_tables(rows: np.ndarray, cols: np.ndarray, groups: np.ndarray, shape, weights=None) -> np.ndarray:
    """Per-cluster count tables (G, *shape)."""
    _, g = np.unique(groups, return_inverse=True)
    tables = np.zeros((g.max() + 1, *shape))
    np.add.at(tables, (g, rows, cols), 1.0 if weights is None else weights)
    return tables


def _bootstrap_tables(tables: np.ndarray, statistic, draws: int, rng, level: float):
    """Percentile cluster bootstrap of a statistic of summed per-cluster tables; (interval, seed)."""
    generator, seed = resolve_rng(rng)
    picks = generator.integers(0, tables.shape[0], size=(draws, tables.shape[0]))
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample with one class: undefined, dropped below
        values = statistic(tables[picks].sum(axis=1))
    values = values[np.isfinite(values)]
    if values.size == 0:  # every resample undefined: no bootstrap interval
        return None, seed
    alpha = 1.0 - level
    return (float(np.quantile(values, alpha / 2)), float(np.quantile(values, 1 - alpha / 2))), seed


# --- Krippendorff's alpha --------------------------------------------------------------------

ALPHA_LEVELS = ("nominal", "ordinal", "interval")


def _alpha_from_coincidences(o: np.ndarray, values: np.ndarray, level: str) -> np.ndarray:
    """Krippendorff's alpha from coincidence matrices o (..., C, C) over the value domain ``values``."""
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    C = values.size
    if level == "nominal":
        delta = np.broadcast_to(1.0 - np.eye(C), o.shape)
    elif level == "interval":
        delta = np.broadcast_to(np.subtract.outer(values, values) ** 2, o.shape)
    else:  # ordinal: (sum_{g=c..k} n_g - (n_c + n_k)/2)^2
        cum = np.cumsum(n_c, axis=-1)
        lo, hi = np.minimum.outer(np.arange(C), np.arange(C)), np.maximum.outer(np.arange(C), np.arange(C))
        between = cum[..., hi] - cum[..., lo] + n_c[..., lo]
        delta = (between - (n_c[..., :, None] + n_c[..., None, :]) / 2.0) ** 2
    observed = (o * delta).sum(axis=(-2, -1))
    expected = np.einsum("...c,...k,...ck->...", n_c, n_c, delta)
    return 1.0 - (n - 1.0) * observed / expected


def _coincidences(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-unit coincidence contributions (U, C, C) of a raters x units code matrix."""
    counts = np.stack([(codes == v).sum(axis=0) for v in values], axis=1).astype(float)  # (U, C)
    m = counts.sum(axis=1)
    pairable = m >= 2
    per_unit = counts[:, :, None] * counts[:, None, :] - np.einsum("uc,ck->uck", counts, np.eye(values.size))
    return np.where(pairable[:, None, None], per_unit / np.where(pairable, m - 1.0, 1.0)[:, None, None], 0.0)


@dataclass(frozen=True)
class AlphaResult:
    """Krippendorff's alpha across raters, with a percentile cluster-bootstrap interval."""

    level_of_measurement: str
    estimate: float
    boot_low: float | None
    boot_high: float | None
    n_units: int
    n_raters: int
    n_clusters: int
    level: float
    seed: int | None

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([self.__dict__])

    def text(self) -> str:
        if self.boot_low is None:
            return f"{self.estimate:.3f} ({self.level_of_measurement})"
        return (
            f"{self.estimate:.3f} [{self.boot_low:.3f}, {self.boot_high:.3f}] "
            f"({self.level_of_measurement}; cluster bootstrap, G = {self.n_clusters})"
        )


def krippendorff_alpha(
    rater_codes,
    clusters=None,
    *,
    level_of_measurement: str = "nominal",
    level: float = 0.95,
    rng: int | None = 0,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
) -> AlphaResult:
    """Krippendorff's alpha of an items x raters code matrix (NaN = not rated).

    α = 1 − D_o/D_e = 1 − (n − 1) Σ_ck o_ck δ_ck / Σ_ck n_c n_k δ_ck, with the coincidence matrix
    o_ck = Σ_u (#pairs of values c, k in unit u)/(m_u − 1) over units with m_u ≥ 2 values and
    δ the nominal, ordinal or interval metric (Krippendorff 2011). The interval resamples whole
    clusters (vignettes): coincidences add over units, so each draw sums per-cluster matrices.

    Validated against: the ``krippendorff`` PyPI package (0.9.0), all three levels
    (``tests/test_calibration.py``).
    """
    if level_of_measurement not in ALPHA_LEVELS:
        raise InputError(
            f"level_of_measurement={level_of_measurement!r} is not one of {ALPHA_LEVELS}.",
            fix="use 'nominal', 'ordinal' or 'interval'",
        )
    codes = np.asarray(rater_codes, dtype=float)
    values = np.unique(codes[~np.isnan(codes)])
    if values.size < 2:
        # Valid labels (every rater gave the same class): the expected disagreement is 0 and alpha is 0/0.
        raise EstimationError(
            "Krippendorff's alpha is undefined: every human label has the same value, so there is no "
            "expected disagreement to compare the observed one with; label items whose answer is not one-sided"
        )
    per_unit = _coincidences(codes.T, values)
    estimate = float(_alpha_from_coincidences(per_unit.sum(axis=0), values, level_of_measurement))
    groups = np.arange(codes.shape[0]) if clusters is None else np.asarray(clusters).reshape(-1)
    _, g = np.unique(groups, return_inverse=True)
    boot, seed = (None, None)
    if rng is not None:
        tables = np.zeros((g.max() + 1, values.size, values.size))
        np.add.at(tables, g, per_unit)
        boot, seed = _bootstrap_tables(
            tables, lambda t: _alpha_from_coincidences(t, values, level_of_measurement), bootstrap_draws, rng, level
        )
    return AlphaResult(
        level_of_measurement,
        estimate,
        None if boot is None else boot[0],
        None if boot is None else boot[1],
        int(((~np.isnan(codes)).sum(axis=1) >= 2).sum()),
        int(codes.shape[1]),
        int(g.max() + 1),
        level,
        seed,
    )


# --- human ceiling, judge vs ceiling, judge vs judge -------------------------------------------


def leave_one_rater_out(
    rater_codes, *, rater_differences=None, min_margin: float = 0.0, split: str = "tie"
) -> tuple[np.ndarray, np.ndarray]:
    """Each rater's code and the reference of the other raters, as (own, rest) items x raters matrices.

    From pairwise labels the rest's reference is their majority (``split`` as in
    :func:`majority_preference`); from ratings (``rater_differences``: items x raters score
    difference a − b) it is the sign of the others' mean difference beyond ``min_margin``.
    """
    codes = np.asarray(rater_codes, dtype=float)
    rest = np.full_like(codes, np.nan)
    for r in range(codes.shape[1]):
        others = np.delete(np.arange(codes.shape[1]), r)
        if rater_differences is None:
            rest[:, r] = majority_preference(codes[:, others], split=split)
        else:
            diffs = np.asarray(rater_differences, dtype=float)[:, others]
            has = (~np.isnan(diffs)).any(axis=1)
            mean = np.where(has, np.nansum(diffs, axis=1) / np.maximum((~np.isnan(diffs)).sum(axis=1), 1), np.nan)
            rest[:, r] = preference_from_difference(mean, min_margin)
    return codes, rest


def human_ceiling(
    rater_codes,
    clusters,
    *,
    rater_differences=None,
    min_margin: float = 0.0,
    split: str = "tie",
    ties: str = GATE_TIE_POLICY,
    level: float = 0.95,
    rng: int | None = 0,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> ClusteredEstimate:
    """Human-human ceiling: each rater against the reference of the rest (leave one rater out).

    Estimand: P(a rater's label = the other raters' reference) over (item, rater) rows kept by
    the tie policy, clustered by vignette (rows of one item and of one vignette are dependent).
    MT-Bench (Zheng et al. 2023, sec. 4.2) and AlpacaEval report this ceiling beside a judge.
    """
    own, rest = leave_one_rater_out(
        rater_codes, rater_differences=rater_differences, min_margin=min_margin, split=split
    )
    groups = np.repeat(np.asarray(clusters).reshape(-1, 1), own.shape[1], axis=1)
    return agreement_ci(
        own.ravel(),
        rest.ravel(),
        groups.ravel(),
        ties=ties,
        level=level,
        rng=rng,
        bootstrap_draws=bootstrap_draws,
        min_clusters=min_clusters,
        name=f"human ceiling ({ties})",
    )


def stacked_difference(
    values_a,
    clusters_a,
    values_b,
    clusters_b,
    name: str,
    *,
    level: float = 0.95,
    min_clusters: int = THRESHOLDS.min_clusters,
    space: tuple[float, float] | None = DIFFERENCE_SPACE,
) -> ClusteredEstimate:
    """mean(a) − mean(b) from ``lm(y ~ 1 + is_a)`` on the stacked rows, CR2 clustered by vignette.

    Rows of a and b sharing a vignette are dependent; stacking with one cluster variable keeps
    that covariance in the CR2 variance (Pustejovsky & Tipton 2018). The interval is truncated to
    ``space``, by default [−1, 1], where a difference of two agreement rates lies.
    """
    a, b = np.asarray(values_a, float), np.asarray(values_b, float)
    y = np.concatenate([a, b])
    groups = np.concatenate([np.asarray(clusters_a).reshape(-1), np.asarray(clusters_b).reshape(-1)])
    n_clusters = int(np.unique(groups).size)
    point = float(a.mean() - b.mean()) if a.size and b.size else None
    if point is None or n_clusters < max(min_clusters, 2):
        return ClusteredEstimate.inconclusive(
            name,
            point,
            int(y.size),
            n_clusters,
            level,
            f"{n_clusters} cluster(s) < {max(min_clusters, 2)}" if point is not None else "no rows",
        )
    X = np.column_stack([np.ones(y.size), np.r_[np.ones(a.size), np.zeros(b.size)]])
    try:
        fit = cluster_robust_ols(X, y, groups, vcov="CR2", level=level, coef_names=("b", "a_minus_b"))
    except EstimationError:
        return ClusteredEstimate.inconclusive(
            name, point, int(y.size), n_clusters, level, "no variation: no variance to estimate"
        )
    return from_contrast(linear_contrast(fit, {"a_minus_b": 1.0}, label=name), name, space=space)


def compare_judges(
    agree_a,
    agree_b,
    clusters,
    *,
    name: str = "judge A − judge B",
    level: float = 0.95,
    rng: int | None = 0,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> ClusteredEstimate:
    """Paired difference in agreement of two judges on the same judged rows (NaN rows dropped).

    Estimand: P(A agrees) − P(B agrees) on a new vignette; the per-row difference is averaged and
    CR2-clustered by vignette (a paired test: both judges' errors on one item are correlated).
    """
    a, b = np.asarray(agree_a, float), np.asarray(agree_b, float)
    groups = np.asarray(clusters).reshape(-1)
    if not (a.shape == b.shape == groups.shape):
        raise InputError(
            "paired comparison needs both judges' rows on the same items.",
            fix="align the two judges' agreement indicators item by item",
        )
    ok = ~np.isnan(a) & ~np.isnan(b)
    return clustered_mean(
        a[ok] - b[ok],
        groups[ok],
        name,
        level=level,
        rng=rng,
        bootstrap_draws=bootstrap_draws,
        min_clusters=min_clusters,
        space=DIFFERENCE_SPACE,
    )
