"""Judge calibration against human preferences: agreement, kappa, alpha, the human ceiling.

Unit of analysis. An *item* is an unordered pair of responses {a, b} of one vignette with human
preferences. Each presentation order the judge saw is one judged row of that item (both-order
verdicts give two rows per item), so agreement is the share of judged orders that name the
human-preferred response. Every interval clusters by vignette (prompt).

Preferences are coded on an ordered scale: ``+1`` a preferred, ``0`` tie, ``-1`` b preferred,
NaN missing. The verdict → preferred mapping (:func:`verdict_to_preference`):

==========  =======================  ==========
verdict     preferred response       code
==========  =======================  ==========
first       ``response_first``       +1 if it is a, -1 if it is b
second      ``response_second``      +1 if it is a, -1 if it is b
tie         none                     0
invalid     none (a failed verdict)  by ``invalid_as`` (below)
==========  =======================  ==========

Invalid verdicts (unparseable, refused, empty) are rows with a status, never dropped silently.
``invalid_as`` (:data:`INVALID_AS`, the calibration reading of the audit policy's
``invalid_verdicts``, :data:`honestci.audit.policy.INVALID_SCORING`) says how they count:

- ``"disagreement"`` (default, conservative; policy ``against_claim``): code
  :data:`INVALID_CODE`, a judge class of its own that matches no human class. It counts as a
  disagreement in every agreement figure and in accuracy, and in kappa as a fourth judge row
  with weight 0 against every human class (the table is 4 x 3). This reproduces published
  tables that count parse failures as wrong.
- ``"tie"`` (policy ``tie``): code 0, PandaLM's rule for unparseable output.
- ``"exclude"`` (policy ``exclude``): NaN, left out of every figure and counted in the report.

Human reference per item: the majority of the raters' pairwise labels (an unresolved split is a
tie, or goes to the first rater with ``split="first_rater"`` as PandaLM does), or, from ratings,
the response with the higher mean rating over the raters who rated both (a tie unless the
difference exceeds ``min_margin``).

Tie policies of agreement (``ties``):

- ``"as_class"``: 3-class accuracy, all items; a tie matches only a tie (PandaLM's accuracy).
- ``"human_decided"``: items where humans prefer one response; a judge tie counts as a
  disagreement (the gate's policy; MT-Bench's agreement "with ties counted against the judge").
- ``"decided"``: items where both humans and the judge prefer one ("without ties").

References: Cohen (1960, 1968) kappa and weighted kappa; Fleiss, Cohen & Everitt (1969) its
large-sample variance; Krippendorff (2011) "Computing Krippendorff's alpha-reliability"; Zheng et
al. (2023) MT-Bench agreement and the human-human ceiling; Wang et al. (2023) PandaLM.
Validated against: PandaLM's published accuracy and macro-F1 (exact), R clubSandwich (CR2 of
GPT-3.5's agreement, 1e-6), statsmodels ``cohens_kappa``, the ``krippendorff`` package, and
seeded coverage simulations (``tests/test_calibration.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import DEFAULT_SEED, GATE_TIE_POLICY, THRESHOLDS
from honestci.audit.stats.cluster_robust import cluster_robust_ols, linear_contrast
from honestci.audit.stats.clustered_estimate import (
    DEFAULT_BOOTSTRAP_DRAWS,
    ESTIMATE_COLUMNS,
    ClusteredEstimate,
    clustered_mean,
    from_contrast,
)
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, RATE_SPACE
from honestci.audit.stats.random_state import resolve_rng

if TYPE_CHECKING:
    from honestci.audit.checks.position_bias import PositionBiasResult
    from honestci.audit.checks.selection import WinnerInference
    from honestci.audit.policy import Thresholds
    from honestci.audit.stats.ppi import PPIResult

PREFERS_A, TIE, PREFERS_B = 1.0, 0.0, -1.0
#: Ordered classes (b preferred < tie < a preferred), the order of every confusion table.
CLASSES = (PREFERS_B, TIE, PREFERS_A)
TIE_POLICIES = ("as_class", "human_decided", "decided")
LABEL_CODES = {"a": PREFERS_A, "tie": TIE, "b": PREFERS_B}
#: Code of an invalid verdict under ``invalid_as="disagreement"``: off the -1/0/+1 scale, so it
#: equals no human code, and its class index (code + 1 = 3) is the fourth row of the confusion table.
INVALID_CODE = 2.0
#: How invalid verdicts count in calibration (module docstring); the first is the default.
INVALID_AS = ("disagreement", "tie", "exclude")
#: The audit policy's ``invalid_verdicts`` (:data:`honestci.audit.policy.INVALID_SCORING`) read for calibration.
INVALID_AS_FROM_POLICY = {"against_claim": "disagreement", "tie": "tie", "exclude": "exclude"}
SOURCES = ("auto", "pairs", "ratings")


# --- codes ----------------------------------------------------------------------------------


def verdict_to_preference(
    verdict, response_first, response_second, response_a, response_b, invalid_as: str = "disagreement"
) -> np.ndarray:
    """Code each judged order's verdict as a preference between the item's responses a and b.

    ``first`` prefers ``response_first``, ``second`` prefers ``response_second``; the preferred
    response is coded +1 if it is a and -1 if it is b; ``tie`` is 0; ``invalid`` is
    :data:`INVALID_CODE` (``invalid_as="disagreement"``), 0 (``"tie"``, PandaLM's rule for
    unparseable output) or NaN (``"exclude"``).

    Raises
    ------
    InputError
        A judged pair that is not {a, b}, or an unknown verdict.
    """
    verdict = np.asarray(verdict, dtype=object)
    first, second = np.asarray(response_first, dtype=object), np.asarray(response_second, dtype=object)
    a, b = np.asarray(response_a, dtype=object), np.asarray(response_b, dtype=object)
    same = ((first == a) & (second == b)) | ((first == b) & (second == a))
    if not same.all():
        raise InputError(
            f"{int((~same).sum())} judged order(s) compare responses other than their item's a and b.",
            fix="match judgments to items by their unordered response pair",
        )
    _check_invalid_as(invalid_as)
    known = np.isin(verdict, ("first", "second", "tie", "invalid"))
    if not known.all():
        raise InputError(f"unknown verdict {verdict[~known][0]!r}", fix="use first, second, tie or invalid")
    first_is_a = first == a
    code = np.where(
        verdict == "first",
        np.where(first_is_a, PREFERS_A, PREFERS_B),
        np.where(
            verdict == "second",
            np.where(first_is_a, PREFERS_B, PREFERS_A),
            np.where(verdict == "tie", TIE, {"disagreement": INVALID_CODE, "tie": TIE, "exclude": np.nan}[invalid_as]),
        ),
    )
    return code.astype(float)


def _check_invalid_as(invalid_as: str) -> None:
    if invalid_as not in INVALID_AS:
        raise InputError(
            f"invalid_as={invalid_as!r} is not one of {INVALID_AS}.",
            fix="use 'disagreement' (default: a failed verdict counts against the judge), 'tie' or 'exclude'",
        )


def preference_from_difference(difference, min_margin: float = 0.0) -> np.ndarray:
    """+1 when ``difference`` (a minus b) exceeds ``min_margin``, -1 below ``-min_margin``, else 0 (NaN stays NaN)."""
    if not (np.isfinite(min_margin) and min_margin >= 0):
        raise InputError(f"min_margin = {min_margin!r} must be a finite number >= 0.", fix="use e.g. 0 or 0.5")
    d = np.asarray(difference, dtype=float)
    return np.where(np.isnan(d), np.nan, np.where(d > min_margin, PREFERS_A, np.where(d < -min_margin, PREFERS_B, TIE)))


def majority_preference(rater_codes, split: str = "tie") -> np.ndarray:
    """Majority of each row's rater codes (NaN = no label); ties explicit.

    The most frequent code wins; when two or more codes share the top count the item is a tie
    (``split="tie"``) or takes the first rater's label (``split="first_rater"``: the first column
    with a label, PandaLM's rule). A row without labels is NaN.
    """
    codes = np.asarray(rater_codes, dtype=float)
    if codes.ndim != 2:
        raise InputError("rater codes must be an items x raters matrix.", fix="one column per rater")
    if split not in ("tie", "first_rater"):
        raise InputError(f"split={split!r} is not 'tie' or 'first_rater'.", fix="use 'tie' (default) or 'first_rater'")
    counts = np.stack([(codes == c).sum(axis=1) for c in CLASSES], axis=1)
    top = counts.max(axis=1)
    unique_top = (counts == top[:, None]).sum(axis=1) == 1
    winner = np.asarray(CLASSES)[counts.argmax(axis=1)]
    labelled = ~np.isnan(codes)
    first_label = codes[np.arange(len(codes)), labelled.argmax(axis=1)] if len(codes) else np.zeros(0)
    fallback = TIE if split == "tie" else first_label
    out = np.where(unique_top, winner, fallback)
    return np.where(top > 0, out, np.nan)


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
    """(rows kept, 1.0 where the judge matches the human reference) under a tie policy (module doc)."""
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


# --- judge selection --------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeSelection:
    """Selection of one judge among K candidates by agreement, reported as a selection.

    The chosen judge's agreement on the data it was chosen on is a winner's estimate (biased
    upward); the honest figure is its agreement on the held-out vignettes, which played no part
    in the choice. ``winner`` is the selection on all vignettes, corrected as a winner: the
    Andrews-Kitagawa-McCloskey hybrid interval (:func:`honestci.audit.checks.selection.
    candidate_winner_inference`) for the equal-vignette-weight agreement of the judge with the
    highest agreement (None with ``winner_note`` saying why). ``excluded``: candidates whose
    position-bias gate FAILs on the calibration items, with the reason; they are never selected.
    """

    candidates: tuple[str, ...]
    selected: str
    selection_vignettes: tuple[str, ...]
    heldout_vignettes: tuple[str, ...]
    selection_estimates: dict
    in_sample: ClusteredEstimate
    heldout: ClusteredEstimate
    seed: int | None
    excluded: tuple[tuple[str, str], ...] = ()
    winner: WinnerInference | None = None
    winner_note: str | None = None

    def to_frame(self) -> pd.DataFrame:
        rows = [
            {"judge": judge, "split": "selection", "estimate": value, "selected": judge == self.selected}
            for judge, value in self.selection_estimates.items()
        ]
        rows += [{"judge": judge, "split": "excluded: " + reason, "selected": False} for judge, reason in self.excluded]
        if self.winner is not None:
            rows += [
                {
                    "judge": self.winner.winner,
                    "split": f"all vignettes, {method}",
                    "estimate": estimate,
                    "ci_low": ci_low,
                    "ci_high": ci_high,
                    "selected": True,
                }
                for method, estimate, ci_low, ci_high in self.winner.to_frame()[
                    ["method", "estimate", "ci_low", "ci_high"]
                ].itertuples(index=False)
            ]
        rows.append(
            {
                "judge": self.selected,
                "split": "held-out",
                "estimate": self.heldout.estimate,
                "ci_low": self.heldout.ci_low,
                "ci_high": self.heldout.ci_high,
                "selected": True,
            }
        )
        return pd.DataFrame(rows)

    def text(self) -> str:
        return (
            f"{self.selected} chosen among {len(self.candidates)} judges on {len(self.selection_vignettes)} "
            f"vignette(s) (agreement there {self.selection_estimates[self.selected]:.3f}, a winner's figure, "
            f"biased upward); on {len(self.heldout_vignettes)} held-out vignette(s) it agrees "
            f"{self.heldout.text()} (seed {self.seed})"
            + "".join(f"; {judge} never selected: {reason}" for judge, reason in self.excluded)
            + (
                f"; on all vignettes the best judge is {self.winner.winner}, agreement {self.winner.naive_estimate:.3f} "
                f"(a winner's figure), corrected for the selection among {len(self.winner.candidates)} "
                f"(AKM hybrid) {self.winner.hybrid_estimate:.3f} [{self.winner.hybrid_ci[0]:.3f}, "
                f"{self.winner.hybrid_ci[1]:.3f}]"
                if self.winner is not None
                else f"; no selection-corrected figure: {self.winner_note}"
                if self.winner_note
                else ""
            )
        )


def select_judge(
    agreement_by_judge: dict[str, tuple],
    *,
    heldout_fraction: float = 0.5,
    level: float = 0.95,
    rng: int | np.random.Generator = 0,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> JudgeSelection:
    """Choose the judge with the highest agreement on a seeded split of vignettes; report it on the rest.

    ``agreement_by_judge`` maps each candidate to ``(agree indicators, vignette of each row)``.
    Vignettes (not rows) are split, so held-out rows share no prompt with the selection rows.
    """
    if len(agreement_by_judge) < 2:
        raise InputError("judge selection needs at least two candidate judges.", fix="pass two or more judges")
    if not 0 < heldout_fraction < 1:
        raise InputError(f"heldout_fraction = {heldout_fraction!r} must lie in (0, 1).", fix="use e.g. 0.5")
    generator, seed = resolve_rng(rng)
    vignettes = np.unique(np.concatenate([np.asarray(c).reshape(-1) for _, c in agreement_by_judge.values()]))
    if vignettes.size < 2:
        raise InputError("judge selection needs at least two vignettes to split.", fix="add vignettes")
    shuffled = generator.permutation(vignettes)
    n_heldout = min(max(1, int(round(heldout_fraction * vignettes.size))), vignettes.size - 1)
    heldout, selection = np.sort(shuffled[:n_heldout]), np.sort(shuffled[n_heldout:])
    estimates = {}
    for judge, (agree, clusters) in agreement_by_judge.items():
        agree, clusters = np.asarray(agree, float), np.asarray(clusters).reshape(-1)
        rows = np.isin(clusters, selection)
        estimates[judge] = float(agree[rows].mean()) if rows.any() else float("nan")
    chosen = max(estimates, key=lambda judge: (np.nan_to_num(estimates[judge], nan=-1.0), judge))
    agree, clusters = (np.asarray(x) for x in agreement_by_judge[chosen])
    clusters = clusters.reshape(-1)
    in_sample_rows, heldout_rows = np.isin(clusters, selection), np.isin(clusters, heldout)
    in_sample = clustered_mean(
        agree[in_sample_rows],
        clusters[in_sample_rows],
        f"{chosen} on its selection vignettes",
        level=level,
        rng=None,
        min_clusters=min_clusters,
        space=RATE_SPACE,
    )
    held = clustered_mean(
        agree[heldout_rows],
        clusters[heldout_rows],
        f"{chosen} on held-out vignettes",
        level=level,
        rng=None,
        min_clusters=min_clusters,
        space=RATE_SPACE,
    )
    return JudgeSelection(
        tuple(agreement_by_judge),
        chosen,
        tuple(map(str, selection)),
        tuple(map(str, heldout)),
        estimates,
        in_sample,
        held,
        seed,
    )


# --- from tables: items, judged rows ----------------------------------------------------------


def _pair_key(vignette, x, y) -> np.ndarray:
    """Key of the unordered pair {x, y} of a vignette."""
    x, y = np.asarray(x, dtype=str), np.asarray(y, dtype=str)
    low, high = np.where(x <= y, x, y), np.where(x <= y, y, x)
    return np.char.add(
        np.char.add(np.asarray(vignette, dtype=str), "\x1f"), np.char.add(np.char.add(low, "\x1f"), high)
    )


@dataclass(frozen=True, eq=False)
class CalibrationItems:
    """Items (unordered response pairs with human preferences) and each rater's code per item.

    ``items`` has one row per item: item_key, vignette_id, response_a, response_b, human (the
    reference code). ``rater_codes`` is items x raters (NaN: not labelled); ``rater_differences``
    (from ratings only) is each rater's score difference a − b.
    """

    source: str
    items: pd.DataFrame
    rater_ids: tuple[str, ...]
    rater_codes: np.ndarray = field(repr=False)
    rater_differences: np.ndarray | None = field(repr=False)
    min_margin: float = 0.0
    split: str = "tie"

    def to_frame(self) -> pd.DataFrame:
        return self.items.copy()


def _frame(table) -> pd.DataFrame | None:
    if table is None:
        return None
    frame = getattr(table, "frame", table)
    if isinstance(frame, (list, tuple)):
        frame = pd.DataFrame(list(frame))
    return frame if len(frame) else None


def calibration_items(
    *,
    human_pairs=None,
    human_ratings=None,
    judgments=None,
    source: str = "auto",
    min_margin: float = 0.0,
    split: str = "tie",
) -> CalibrationItems:
    """Build calibration items from human pairwise labels or from human ratings.

    ``source="pairs"``: items are the labelled pairs; each rater's label (a, b, tie; a row with a
    and b swapped is flipped), the reference is the raters' majority (``split``).
    ``source="ratings"``: items are the pairs of ``human_pairs`` if given, else every pair the
    judgments compare, whose two responses both have ratings; a rater's code is the sign of their
    score difference, the reference the sign of the mean difference over raters who rated both
    beyond ``min_margin``. ``"auto"``: pairs when present, else ratings.
    Tables may be :class:`honestci.audit.data.io.LoadedTable`, DataFrames or lists of row dicts.
    """
    pairs, ratings, judged = _frame(human_pairs), _frame(human_ratings), _frame(judgments)
    if source not in SOURCES:
        raise InputError(f"source={source!r} is not one of {SOURCES}.", fix="use auto, pairs or ratings")
    if source == "auto":
        source = "pairs" if pairs is not None else "ratings"
    if source == "pairs" and pairs is None:
        raise InputError(
            "calibration from pairwise labels needs a human_pairs table.", fix="add human_pairs to the claim's data"
        )
    if source == "ratings" and ratings is None:
        raise InputError(
            "calibration from ratings needs a human_ratings table.", fix="add human_ratings to the claim's data"
        )
    if source == "pairs":
        return _items_from_pairs(pairs, split)
    return _items_from_ratings(ratings, pairs, judged, min_margin)


def _orient(keys, vignettes, a, b) -> pd.DataFrame:
    """One row per distinct key, oriented as its first appearance."""
    frame = pd.DataFrame(
        {
            "item_key": keys,
            "vignette_id": np.asarray(vignettes, dtype=str),
            "response_a": np.asarray(a, dtype=str),
            "response_b": np.asarray(b, dtype=str),
        }
    )
    return frame.drop_duplicates("item_key").reset_index(drop=True)


def _items_from_pairs(pairs: pd.DataFrame, split: str) -> CalibrationItems:
    keys = _pair_key(pairs["vignette_id"], pairs["response_a"], pairs["response_b"])
    items = _orient(keys, pairs["vignette_id"], pairs["response_a"], pairs["response_b"])
    index = pd.Index(items["item_key"]).get_indexer(keys)
    raters = tuple(pd.unique(pairs["rater_id"].astype(str)))
    rater_index = pd.Index(raters).get_indexer(pairs["rater_id"].astype(str))
    labels = pairs["label"].astype(str).map(LABEL_CODES).to_numpy(dtype=float)
    if np.isnan(labels).any():
        bad = pairs["label"].astype(str)[np.isnan(labels)].iloc[0]
        raise InputError(f"human pair label {bad!r} is not a, b or tie.", fix="use a, b or tie")
    swapped = pairs["response_a"].astype(str).to_numpy() != items["response_a"].to_numpy()[index]
    labels = np.where(swapped, -labels, labels)
    duplicate = pd.Series(list(zip(index, rater_index))).duplicated()
    if duplicate.any():
        raise InputError(
            f"{int(duplicate.sum())} pair(s) were labelled twice by the same rater.",
            fix="keep one label per (pair, rater)",
        )
    codes = np.full((len(items), len(raters)), np.nan)
    codes[index, rater_index] = labels
    items["human"] = majority_preference(codes, split=split)
    return CalibrationItems("pairs", items, raters, codes, None, 0.0, split)


def _items_from_ratings(ratings: pd.DataFrame, pairs, judged, min_margin: float) -> CalibrationItems:
    scores = ratings.pivot_table(index="response_id", columns="rater_id", values="score", aggfunc="mean")
    if pairs is not None:
        vig, a, b = pairs["vignette_id"], pairs["response_a"], pairs["response_b"]
    elif judged is not None:
        vig, a, b = judged["vignette_id"], judged["response_first"], judged["response_second"]
    else:
        raise InputError(
            "calibration from ratings needs the pairs to compare (human_pairs or judgments).",
            fix="add the judgments table",
        )
    items = _orient(_pair_key(vig, a, b), vig, a, b)
    rated = items["response_a"].isin(scores.index) & items["response_b"].isin(scores.index)
    items = items[rated.to_numpy()].reset_index(drop=True)
    if items.empty:
        raise InputError("no compared pair has ratings of both responses.", fix="rate both responses of judged pairs")
    differences = scores.loc[items["response_a"]].to_numpy() - scores.loc[items["response_b"]].to_numpy()
    codes = preference_from_difference(differences, 0.0)
    counted = (~np.isnan(differences)).sum(axis=1)
    mean = np.where(counted > 0, np.nansum(differences, axis=1) / np.maximum(counted, 1), np.nan)
    items["human"] = preference_from_difference(mean, min_margin)
    return CalibrationItems("ratings", items, tuple(map(str, scores.columns)), codes, differences, float(min_margin))


def judged_rows(items: CalibrationItems, judgments, judge: str, invalid_as: str = "disagreement") -> pd.DataFrame:
    """The judge's verdicts on the items, one row per judged order, invalid verdicts included.

    Columns: item (index into ``items.items``), vignette_id, response_first, verdict, status
    (``"valid"`` or ``"invalid"``), judge_code (see :func:`verdict_to_preference`; how an invalid
    verdict is coded follows ``invalid_as``), human (the item's reference code).
    """
    frame = _frame(judgments)
    if frame is None:
        raise InputError("no judgments to calibrate.", fix="add the judgments table")
    frame = frame[frame["judge"].astype(str) == judge]
    keys = _pair_key(frame["vignette_id"], frame["response_first"], frame["response_second"])
    index = pd.Index(items.items["item_key"]).get_indexer(keys)
    frame, index = frame[index >= 0], index[index >= 0]
    item = items.items.iloc[index]
    return pd.DataFrame(
        {
            "item": index,
            "vignette_id": item["vignette_id"].to_numpy(),
            "response_first": frame["response_first"].astype(str).to_numpy(),
            "verdict": frame["verdict"].astype(str).to_numpy(),
            "status": np.where(frame["verdict"].astype(str).to_numpy() == "invalid", "invalid", "valid"),
            "judge_code": verdict_to_preference(
                frame["verdict"].to_numpy(),
                frame["response_first"].to_numpy(),
                frame["response_second"].to_numpy(),
                item["response_a"].to_numpy(),
                item["response_b"].to_numpy(),
                invalid_as=invalid_as,
            ),
            "human": item["human"].to_numpy(),
        }
    )


# --- judge selection on the calibration items: position bias, winner's correction ----------------


def judge_position_bias(
    rows: pd.DataFrame,
    items: CalibrationItems,
    judge: str,
    *,
    level: float = 0.95,
    rng: int = 0,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> PositionBiasResult:
    """Position bias of a judge on the calibration items it judged in both orders.

    Each item is a contest of its response a against b: the outcome of a when shown first and
    when shown second (win, loss, tie; an invalid verdict stays invalid and the position-bias
    check leaves that item out, counted). The figures and their intervals are those of
    :func:`honestci.audit.checks.position_bias.position_bias`; the first verdict of each order
    is used when an order was judged more than once.
    """
    from honestci.audit.checks.position_bias import position_bias

    a_first = rows["response_first"].to_numpy() == items.items["response_a"].to_numpy()[rows["item"].to_numpy()]
    code = rows["judge_code"].to_numpy()  # already relative to a: +1 names a, -1 names b
    outcome = np.where(
        rows["status"].to_numpy() == "invalid",
        "invalid",
        np.where(code > 0, "win", np.where(code < 0, "loss", "tie")),
    )
    frame = pd.DataFrame({"item": rows["item"].to_numpy(), "a_first": a_first, "outcome": outcome})
    frame = frame.drop_duplicates(["item", "a_first"])
    wide = frame.pivot(index="item", columns="a_first", values="outcome")
    both = wide.dropna() if wide.shape[1] == 2 else wide.iloc[:0]
    vignettes = items.items["vignette_id"].to_numpy()[both.index.to_numpy()]
    return position_bias(
        both[True] if len(both) else [],
        both[False] if len(both) else [],
        vignettes,
        judge=judge,
        policy="response a",
        opponent="response b",
        n_single_order=int(len(wide) - len(both)),
        level=level,
        rng=rng,
        min_clusters=min_clusters,
    )


def judge_winner(
    candidates: dict[str, tuple], *, level: float = 0.95, seed: int = 0, n_draws: int | None = None
) -> tuple[WinnerInference | None, str | None]:
    """The best judge's agreement on all vignettes, corrected for the selection among ``candidates``.

    ``candidates`` maps judge → (agreement indicators, vignette of each row). Estimand: the chosen
    judge's equal-vignette-weight agreement (mean of its vignette means over the vignettes every
    candidate judged). Interval: the AKM hybrid interval on the logit scale with Σ estimated from
    the vignettes (:func:`honestci.audit.checks.selection.candidate_winner_inference`; reference
    Andrews, Kitagawa & McCloskey 2024); ``n_draws``: its projection draws (default the selection
    module's). Returns (None, why) when it cannot be computed.

    Validated against: seeded coverage simulation of naive, AKM hybrid and projection intervals
    (``tests/test_calibration_single_rater.py``; figures in docs/methods.md).
    """
    from honestci.audit.checks.selection import (
        DEFAULT_PROJECTION_DRAWS,
        candidate_winner_inference,
        selection_covariance,
    )

    draws = DEFAULT_PROJECTION_DRAWS if n_draws is None else n_draws
    try:
        return candidate_winner_inference(selection_covariance(candidates), level=level, seed=seed, n_draws=draws), None
    except (EstimationError, InputError) as error:
        return None, str(error)


# --- one judge, everything -------------------------------------------------------------------

#: Seed of the vignette split of judge selection and of the bootstraps inside the audit check.
CHECK_SEED = DEFAULT_SEED


@dataclass(frozen=True)
class CalibrationResult:
    """Calibration of one judge against human preferences (see the module docstring).

    ``agreement`` holds one estimate per tie policy (:data:`TIE_POLICIES` order); the gate reads
    the ``"human_decided"`` one, the human ceiling and the judge's gap to it. ``max_raters_per_item``
    < 2 (one rater, e.g. gold labels) means no inter-rater ceiling: ``ceiling``,
    ``gap_to_ceiling`` and ``alpha`` are None and :attr:`single_rater` is true.
    """

    judge: str
    source: str
    min_margin: float
    invalid_as: str
    n_items: int
    n_items_human_tie: int
    n_rows: int
    n_invalid: int
    n_orders_per_item: float
    n_raters: int
    max_raters_per_item: int
    agreement: tuple[ClusteredEstimate, ...]
    metrics: ClassificationMetrics
    kappa: ClusteredEstimate
    weighted_kappa: ClusteredEstimate
    alpha: AlphaResult | None
    ceiling: ClusteredEstimate | None
    gap_to_ceiling: ClusteredEstimate | None
    comparisons: tuple[tuple[str, ClusteredEstimate, ClusteredEstimate], ...]
    selection: JudgeSelection | None
    ppi: PPIResult | None
    level: float
    seed: int | None
    #: Candidate judges whose position-bias gate FAILs on the calibration items (never selected), with why.
    position_bias_excluded: tuple[tuple[str, str], ...] = ()

    @property
    def single_rater(self) -> bool:
        """One human label per item: no inter-rater ceiling can be estimated."""
        return self.max_raters_per_item < 2

    def agreement_for(self, ties: str = GATE_TIE_POLICY) -> ClusteredEstimate:
        return self.agreement[TIE_POLICIES.index(ties)]

    def to_frame(self) -> pd.DataFrame:
        """One row per figure: what, estimate, CR2 interval, cluster-bootstrap interval, n, G."""
        rows = [self.agreement_for(t) for t in TIE_POLICIES] + [self.kappa, self.weighted_kappa]
        rows += [r for r in (self.ceiling, self.gap_to_ceiling) if r is not None]
        for _other, agreement, difference in self.comparisons:
            rows += [agreement, difference]
        frame = pd.DataFrame([r.as_row() for r in rows])
        frame.insert(0, "judge", self.judge)
        return frame

    def __str__(self) -> str:
        return "\n".join(self.report_section().lines)

    def report_section(self) -> ReportSection:
        decided = self.agreement_for(GATE_TIE_POLICY)
        lines = [
            f"judge {self.judge} against human preferences from {self.source}"
            + (f" (min margin {self.min_margin:g})" if self.source == "ratings" else "")
            + f": {self.n_items} items ({self.n_items_human_tie} human ties), {self.n_rows} judged orders "
            f"({self.n_orders_per_item:.1f} per item), {self.n_invalid} invalid verdict(s) "
            + {
                "disagreement": "counted as disagreements",
                "tie": "counted as ties",
                "exclude": "left out",
            }[self.invalid_as],
            f"agreement with the human-preferred response (judge ties count against it): {decided.text()}",
            f"3-class accuracy {self.metrics.accuracy:.3f}, macro-F1 {self.metrics.macro_f1:.3f}; "
            f"Cohen's kappa {self.kappa.text()}; weighted kappa {self.weighted_kappa.text()}",
        ]
        if self.single_rater:
            lines.append(
                f"one rater: no inter-rater ceiling ({self.n_raters} rater id(s), at most one label per item); "
                "the judge is read on its agreement alone"
            )
        if self.ceiling is not None and self.gap_to_ceiling is not None:  # computed together (>= 2 raters)
            lines.append(
                f"human-human ceiling (each rater vs the rest, leave one rater out): {self.ceiling.text()}; "
                f"judge minus ceiling {self.gap_to_ceiling.text()}"
            )
        if self.alpha is not None:
            lines.append(f"Krippendorff's alpha across human raters: {self.alpha.text()}")
        for other, agreement, difference in self.comparisons:
            lines.append(
                f"vs judge {other} on the same items: its agreement {agreement.text()}; "
                f"{self.judge} minus {other} {difference.text()}"
            )
        if self.selection is not None:
            lines.append("judge selection: " + self.selection.text())
        else:
            lines += [f"{judge} is never selected: {reason}" for judge, reason in self.position_bias_excluded]
        if self.ppi is not None:
            lines.append("judge-error-corrected (PPI++) win rate, human-preference scale: " + self.ppi.text())
        table = tuple(
            {k: v for k, v in row.items() if k in ("judge", *ESTIMATE_COLUMNS, "note")}
            for row in self.to_frame().to_dict(orient="records")
        )
        return ReportSection("calibration", "Judge calibration against human preferences", tuple(lines), table)


class _IntervalOptions(TypedDict):
    """The interval settings every figure of :func:`calibrate_judge` shares."""

    level: float
    bootstrap_draws: int
    min_clusters: int


def _agree_series(rows: pd.DataFrame, ties: str) -> pd.Series:
    """Agreement per judged order (NaN where the tie policy leaves the row out), keyed by (item, first)."""
    keep, agree = agreement_indicator(rows["judge_code"], rows["human"], ties)
    values = np.full(len(rows), np.nan)
    values[keep] = agree
    return pd.Series(values, index=pd.MultiIndex.from_arrays([rows["item"], rows["response_first"]]))


def calibrate_judge(
    judge: str,
    *,
    judgments,
    human_pairs=None,
    human_ratings=None,
    source: str = "auto",
    min_margin: float = 0.0,
    split: str = "tie",
    invalid_as: str = "disagreement",
    other_judges: tuple[str, ...] | None = None,
    thresholds: Thresholds | None = None,
    level: float = 0.95,
    seed: int = CHECK_SEED,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> CalibrationResult:
    """Every calibration figure of ``judge``: agreement (3 tie policies), kappa, alpha, ceiling, comparisons.

    ``other_judges``: judges to compare with on the same judged orders and to select among
    (default: every other judge with verdicts on the items); a candidate whose position-bias
    gate (on the calibration items, ``thresholds``: default the built-in) FAILs is never
    selected. ``invalid_as``: how invalid
    verdicts count (module docstring; default ``"disagreement"``). With one label per item (one
    rater, gold labels) agreement and kappa are reported without a human ceiling. Raises
    :class:`InputError` when the judge has no verdict on any human-labelled item.
    """
    _check_invalid_as(invalid_as)
    items = calibration_items(
        human_pairs=human_pairs,
        human_ratings=human_ratings,
        judgments=judgments,
        source=source,
        min_margin=min_margin,
        split=split,
    )
    rows = judged_rows(items, judgments, judge, invalid_as)
    if rows.empty:
        raise InputError(
            f"judge {judge!r} judged none of the {len(items.items)} human-labelled pairs.",
            fix="judge the human-labelled pairs, or label pairs the judge saw",
        )
    common = _IntervalOptions(level=level, bootstrap_draws=bootstrap_draws, min_clusters=min_clusters)
    agreement = tuple(
        agreement_ci(
            rows["judge_code"],
            rows["human"],
            rows["vignette_id"],
            ties=t,
            rng=seed,
            name=f"{judge} agreement ({t})",
            **common,
        )
        for t in TIE_POLICIES
    )
    kappa = cohen_kappa(rows["judge_code"], rows["human"], rows["vignette_id"], rng=seed, **common)
    weighted = cohen_kappa(rows["judge_code"], rows["human"], rows["vignette_id"], weights="linear", rng=seed, **common)
    n_raters = items.rater_codes.shape[1]
    per_item = (~np.isnan(items.rater_codes)).sum(axis=1)
    max_raters_per_item = int(per_item.max()) if per_item.size else 0
    clusters = items.items["vignette_id"].to_numpy()
    keep_j, agree_j = agreement_indicator(rows["judge_code"], rows["human"], GATE_TIE_POLICY)
    alpha = ceiling = gap = None
    if max_raters_per_item >= 2:
        try:
            alpha = krippendorff_alpha(
                items.rater_codes, clusters, level=level, rng=seed, bootstrap_draws=bootstrap_draws
            )
        except EstimationError:  # every label alike: alpha undefined, the ceiling below still says it
            alpha = None
        ceiling = human_ceiling(
            items.rater_codes,
            clusters,
            rater_differences=items.rater_differences,
            min_margin=items.min_margin,
            split=split,
            rng=seed,
            **common,
        )
        own, rest = leave_one_rater_out(
            items.rater_codes, rater_differences=items.rater_differences, min_margin=items.min_margin, split=split
        )
        keep_h, agree_h = agreement_indicator(own.ravel(), rest.ravel(), GATE_TIE_POLICY)
        gap = stacked_difference(
            agree_j,
            rows["vignette_id"].to_numpy()[keep_j],
            agree_h,
            np.repeat(clusters, n_raters)[keep_h],
            f"{judge} minus human ceiling",
            level=level,
            min_clusters=min_clusters,
        )
    if other_judges is None:
        frame = _frame(judgments)  # None only without judgments: no other judge then
        other_judges = () if frame is None else tuple(j for j in pd.unique(frame["judge"].astype(str)) if j != judge)
    mine = _agree_series(rows, GATE_TIE_POLICY)
    comparisons, candidates = [], {judge: (agree_j, rows["vignette_id"].to_numpy()[keep_j])}
    rows_by_judge = {judge: rows}
    vignette_of_item = items.items["vignette_id"].to_numpy()
    for other in other_judges:
        other_rows = judged_rows(items, judgments, other, invalid_as)
        if other_rows.empty:
            continue
        theirs = _agree_series(other_rows, GATE_TIE_POLICY)
        common_index = mine.index.intersection(theirs.index)
        keep_o, agree_o = agreement_indicator(other_rows["judge_code"], other_rows["human"], GATE_TIE_POLICY)
        candidates[other] = (agree_o, other_rows["vignette_id"].to_numpy()[keep_o])
        rows_by_judge[other] = other_rows
        comparisons.append(
            (
                other,
                agreement_ci(
                    other_rows["judge_code"],
                    other_rows["human"],
                    other_rows["vignette_id"],
                    ties=GATE_TIE_POLICY,
                    rng=seed,
                    name=f"{other} agreement ({GATE_TIE_POLICY})",
                    **common,
                ),
                compare_judges(
                    mine.loc[common_index].to_numpy(),
                    theirs.loc[common_index].to_numpy(),
                    vignette_of_item[common_index.get_level_values(0)],
                    name=f"{judge} minus {other} (paired)",
                    rng=seed,
                    **common,
                ),
            )
        )
    selection, excluded = None, []
    if len(candidates) >= 2:
        from dataclasses import replace

        from honestci.audit.policy import THRESHOLDS as BUILT_IN

        tolerance = (thresholds or BUILT_IN).position_bias_tolerance
        for candidate, candidate_rows in rows_by_judge.items():
            bias = judge_position_bias(
                candidate_rows, items, candidate, level=level, rng=seed, min_clusters=min_clusters
            )
            effect = None if bias is None else bias.order_effect
            if bias is not None and effect is not None and bias.favours_a_position(tolerance):
                excluded.append(
                    (
                        candidate,
                        f"position-bias gate FAILs on the calibration items ({bias.judge}: order effect "
                        f"{effect.text()} lies outside ±{tolerance:.2f}: the judge favours a position)",
                    )
                )
        eligible = {k: v for k, v in candidates.items() if k not in dict(excluded)}
        if len(eligible) >= 2:
            winner, note = judge_winner(eligible, level=level, seed=seed)
            selection = replace(
                select_judge(eligible, level=level, rng=seed, min_clusters=min_clusters),
                excluded=tuple(excluded),
                winner=winner,
                winner_note=note,
            )
    n_items_judged = rows["item"].nunique()
    return CalibrationResult(
        judge=judge,
        source=items.source,
        min_margin=items.min_margin,
        invalid_as=invalid_as,
        n_items=int(len(items.items)),
        n_items_human_tie=int((items.items["human"] == TIE).sum()),
        n_rows=int(len(rows)),
        n_invalid=int((rows["verdict"] == "invalid").sum()),
        n_orders_per_item=float(len(rows) / n_items_judged),
        n_raters=int(n_raters),
        max_raters_per_item=max_raters_per_item,
        agreement=agreement,
        metrics=classification_metrics(rows["judge_code"], rows["human"]),
        kappa=kappa,
        weighted_kappa=weighted,
        alpha=alpha,
        ceiling=ceiling,
        gap_to_ceiling=gap,
        comparisons=tuple(comparisons),
        selection=selection,
        ppi=None,
        level=level,
        seed=seed,
        position_bias_excluded=tuple(excluded),
    )


def contest_human_scores(scored: pd.DataFrame, items: CalibrationItems) -> np.ndarray:
    """The human score of each scored contest on the policy's scale, NaN where humans gave none.

    ``scored`` has one row per contest with ``vignette_id``, ``policy_response`` and
    ``opponent_response`` (``ContestTable.scores(...).frame``). Y = 1 when humans prefer the
    policy's response, ½ on a human tie, 0 otherwise, matched on the unordered pair of responses.
    """
    keys = _pair_key(scored["vignette_id"], scored["policy_response"], scored["opponent_response"])
    index = pd.Index(items.items["item_key"]).get_indexer(keys)
    labelled = index >= 0
    y = np.full(len(scored), np.nan)
    item = items.items.iloc[index[labelled]]
    human = item["human"].to_numpy(dtype=float)
    policy_is_a = item["response_a"].to_numpy() == scored["policy_response"].to_numpy()[labelled]
    y[labelled] = np.where(policy_is_a, (human + 1) / 2, (1 - human) / 2)
    return y


def ppi_winrate(
    contests, items: CalibrationItems, *, level: float = 0.95, min_clusters: int = THRESHOLDS.min_clusters
) -> PPIResult | None:
    """PPI++ win rate of the contests' policy on the human-preference scale (clustered by vignette).

    Y = :func:`contest_human_scores` (on contests with a human reference); f = the judge's
    both-order contest score. Labelled: contests with a human reference; unlabelled: the rest.
    None when no contest has a human reference.
    """
    from honestci.audit.stats.ppi import ppi_mean_clustered

    scored = contests.scores("both_orders").frame  # carries each contest's policy and opponent responses
    keys = _pair_key(scored["vignette_id"], scored["policy_response"], scored["opponent_response"])
    labelled = pd.Index(items.items["item_key"]).get_indexer(keys) >= 0
    if labelled.sum() < 2 or (~labelled).sum() < 1:
        return None
    y = contest_human_scores(scored, items)[labelled]
    ok = ~np.isnan(y)
    f = scored["score"].to_numpy()
    vignettes = scored["vignette_id"].to_numpy()
    return ppi_mean_clustered(
        y[ok],
        f[labelled][ok],
        f[~labelled],
        vignettes[labelled][ok],
        vignettes[~labelled],
        level=level,
        min_clusters=min_clusters,
        space=RATE_SPACE,
    )


# --- the audit check -----------------------------------------------------------------------


def calibration_check(context: AuditContext) -> CalibrationResult | None:
    """The claim's judge against the study's human preferences, with the PPI-corrected win rate
    (invalid verdicts counted as the policy's ``invalid_verdicts`` says, :data:`INVALID_AS_FROM_POLICY`);
    None without human data, before anything is judged (no contests), or when the human data
    cannot calibrate the judge (InputError: e.g. the judge judged none of the human-labelled pairs)."""
    study, contests = context.study, context.contests
    if contests is None or (study.human_pairs is None and study.human_ratings is None):
        return None  # nothing judged yet (the training pipeline's preflight), or no human data
    if contests.panel:
        raise EstimationError(
            f"calibration of a panel ({', '.join(contests.panel)}) against human labels is not implemented; "
            "calibrate each panel judge with `honestci calibrate-judge`"
        )
    thresholds = context.claim.thresholds
    level = thresholds.confidence_level
    try:
        result = calibrate_judge(
            contests.judge,
            judgments=study.judgments,
            human_pairs=study.human_pairs,
            human_ratings=study.human_ratings,
            level=level,
            min_clusters=thresholds.min_clusters,
            seed=context.seed,
            invalid_as=INVALID_AS_FROM_POLICY[context.claim.policy.invalid_verdicts],
            thresholds=thresholds,
        )
        items = calibration_items(
            human_pairs=study.human_pairs, human_ratings=study.human_ratings, judgments=study.judgments
        )
    except InputError:
        return None
    from dataclasses import replace

    return replace(result, ppi=ppi_winrate(contests, items, level=level, min_clusters=thresholds.min_clusters))
