"""Position bias of a pairwise judge, from both-order verdicts.

For each contest (policy response vs opponent response of one vignette) the judge saw both
presentation orders. With W₁ = 1{policy wins when shown first} and W₂ = 1{policy wins when shown
second}:

- consistency rate: P(both orders name the same response, or both say tie);
- first-position preference: among inconsistent contests, the share in which the response shown
  first was favoured more often than the one shown second (½ without bias);
- order effect: δ = P(W₁ = 1) − P(W₂ = 1), the policy's win-rate gain from being shown first (an
  unbiased judge has δ = 0), and on the logit scale logit P(W₁) − logit P(W₂).

The gate's order-effect interval (:func:`order_effect_within_contests`) is Tango's score interval
for the paired difference, Rao-Scott adjusted by the CR2 design effect and referred to t with the
CR2 Satterthwaite df (:func:`honestci.audit.stats.frequentist.iid.paired_difference_ci`): with one contest per
vignette it is Tango's interval (the Wald one under-covers there when few contests are discordant),
with several it carries the clustering; where every D is the same it is the exact pooled bound of
:func:`exact_order_effect`. Its variance comes from CR2 with Satterthwaite df on the per-order model
``win ~ 1 + policy_first`` (δ is the slope; the logit contrast is its delta-method
linearisation through :func:`honestci.audit.stats.frequentist.cluster_robust.linear_contrast`), with a percentile cluster
bootstrap of the contest differences D = W₁ − W₂ beside it. The test of δ = 0 flips the order
label within contests: under no position bias each contest's two verdicts are exchangeable, so
D → −D independently per contest; the exact null law of Σ D is Binomial(#{D ≠ 0}, ½) on the
discordant contests (an exact McNemar test), checked by seeded Monte Carlo flips.

With one presentation order per contest (the design :func:`honestci.audit.data.contests.build_contests`
names), two cases:

- *one order, randomised* (the policy shown first in some contests, second in others): the order
  effect is estimated **between** contests, δ = E[v | policy shown first] − E[v | shown second] on
  the order's value v (1 win, ½ tie, 0 loss, or the continuous preference), as the slope of the
  OLS ``v ~ 1 + policy_first`` with a CR2 interval clustered by vignette (Satterthwaite df). Under
  a randomised order the slope is unbiased for δ, and the win rate, which mixes both orders, is
  order-balanced in expectation when about half the contests show the policy first. No
  consistency rate exists (no contest was seen twice).
- *one order, fixed* (the policy always in the same position): the order effect is confounded
  with which response was shown first, so it is NOT identifiable: the result is INCONCLUSIVE and
  carries no number; the ``position_bias`` gate stays INCONCLUSIVE unless the policy's
  ``fixed_order_position_bias_warn`` accepts the risk as a WARN.

References: Zheng et al. (2023), "Judging LLM-as-a-judge with MT-Bench and Chatbot Arena"
(consistency, position bias); Wang et al. (2023), "Large language models are not fair evaluators";
McNemar (1947); Pustejovsky & Tipton (2018) CR2.
Validated against: R clubSandwich through :mod:`honestci.audit.stats.frequentist.cluster_robust`; ``scipy.stats.binomtest``;
the fixture's exact truth (``fixtures/truth.py``) and seeded coverage simulations
(``tests/test_position_bias.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import logit

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.data.contests import BOTH_ORDERS, ONE_ORDER_FIXED, ONE_ORDER_RANDOMISED
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import DEFAULT_SEED, THRESHOLDS, Verdict
from honestci.audit.stats.estimands import unique_inverse
from honestci.audit.stats.frequentist.cells import cluster_robust_ols_of_cells, design_cells
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols, linear_contrast
from honestci.audit.stats.frequentist.clustered_estimate import (
    DEFAULT_BOOTSTRAP_DRAWS,
    ClusteredEstimate,
    clustered_mean,
    from_contrast,
)
from honestci.audit.stats.frequentist.iid import paired_difference_ci, proportion_ci
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, RATE_SPACE
from honestci.audit.stats.random_state import resolve_rng

PERMUTATION_DRAWS = 9999
#: Above this many signs (draws × discordant contests; 2^26, a 64 MB int8 matrix) the sign-flip
#: statistic is drawn from its binomial law instead (:func:`sign_flip_test`); below it the signs are
#: drawn in chunks of about :data:`SIGN_FLIP_CHUNK` from the same stream as before.
SIGN_FLIP_MATRIX_MAX = 2**26
SIGN_FLIP_CHUNK = 2**22
CHECK_SEED = DEFAULT_SEED


@dataclass(frozen=True)
class PositionBiasResult:
    """Position-bias figures of one judge on one policy-vs-opponent contest set.

    When ``identifiable`` is False (single-order data) every figure is None and ``verdict`` is
    INCONCLUSIVE.
    """

    judge: str
    policy: str
    opponent: str
    identifiable: bool
    n_contests: int
    n_invalid: int
    n_single_order: int
    consistency: ClusteredEstimate | None
    first_preference: ClusteredEstimate | None
    first_preference_exact_p: float | None
    order_effect: ClusteredEstimate | None
    order_effect_logit: ClusteredEstimate | None
    p_win_first: float | None
    p_win_second: float | None
    n_discordant: int
    exact_p: float | None
    permutation_p: float | None
    permutation_draws: int
    seed: int | None
    per_vignette: tuple[dict, ...]
    level: float
    note: str = ""
    #: The judging design (:data:`honestci.audit.data.contests.DESIGNS`) the figures come from.
    design: str = BOTH_ORDERS

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS if self.identifiable else Verdict.INCONCLUSIVE

    def favours_a_position(self, tolerance: float) -> bool:
        """The order effect's interval lies entirely outside ±``tolerance`` (what FAILs the
        ``position_bias`` gate; False when nothing honest was estimated)."""
        effect = self.order_effect if self.identifiable else None
        if effect is None or effect.bounds is None:
            return False
        low, high = effect.bounds
        return low > tolerance or high < -tolerance

    def to_frame(self) -> pd.DataFrame:
        """One row per figure (none when not identifiable: the row says so)."""
        if not self.identifiable:
            return pd.DataFrame(
                [
                    {
                        "judge": self.judge,
                        "name": "order effect",
                        "estimate": None,
                        "verdict": str(Verdict.INCONCLUSIVE),
                        "note": self.note,
                    }
                ]
            )
        rows = [
            r.as_row()
            for r in (self.order_effect, self.order_effect_logit, self.consistency, self.first_preference)
            if r is not None
        ]
        frame = pd.DataFrame(rows)
        frame.insert(0, "judge", self.judge)
        return frame

    def summary_lines(self) -> list[str]:
        head = f"judge {self.judge}, {self.policy} vs {self.opponent}"
        if not self.identifiable:
            return [f"{head}: position bias NOT identifiable ({self.note}); no number is reported"]
        if self.design == ONE_ORDER_RANDOMISED:
            return [
                f"{head}: {self.n_contests} contests judged in one order each (design: {self.design}; "
                f"{self.n_invalid} with an invalid verdict left out)",
                f"order effect between contests, mean score when shown first − when shown second = "
                f"{self.p_win_first:.3f} − {self.p_win_second:.3f}: {_text(self.order_effect)}",
                f"order effect on the logit scale: {_text(self.order_effect_logit)}",
                "consistency rate and first-position preference: not measured (no contest was judged in both orders)",
            ]
        return [
            f"{head}: {self.n_contests} both-order contests ({self.n_invalid} with an invalid verdict left out, "
            f"{self.n_single_order} single-order left out)",
            f"order effect P(win | shown first) − P(win | shown second) = {self.p_win_first:.3f} − "
            f"{self.p_win_second:.3f}: {_text(self.order_effect)}; exact sign-flip (McNemar) p = {self.exact_p:.3g} "
            f"on {self.n_discordant} discordant contests (Monte Carlo flips p = {self.permutation_p:.3g}, "
            f"{self.permutation_draws} draws, seed {self.seed})",
            f"order effect on the logit scale: {_text(self.order_effect_logit)}",
            f"consistency rate (same verdict in both orders): {_text(self.consistency)}",
            "first-position preference among inconsistent contests: "
            + _text(self.first_preference, "no inconsistent contest")
            + (
                ""
                if self.first_preference_exact_p is None
                else f" (exact binomial p = {self.first_preference_exact_p:.3g})"
            ),
        ]

    def __str__(self) -> str:
        return "\n".join(self.summary_lines())


def _text(figure: ClusteredEstimate | None, missing: str = "not estimated") -> str:
    """A figure's :meth:`~ClusteredEstimate.text`, or ``missing`` where there is none (an identifiable
    result always has the order effects and the consistency rate)."""
    return missing if figure is None else figure.text()


def not_identifiable(
    judge: str,
    policy: str,
    opponent: str,
    reason: str,
    *,
    n_single_order: int = 0,
    level: float = 0.95,
    design: str = BOTH_ORDERS,
) -> PositionBiasResult:
    """The result for data without both presentation orders: INCONCLUSIVE, never a number."""
    return PositionBiasResult(
        judge,
        policy,
        opponent,
        False,
        0,
        0,
        n_single_order,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        0,
        None,
        None,
        0,
        None,
        (),
        level,
        reason,
        design,
    )


#: The outcomes of one presentation order, as :func:`_outcome_codes` numbers them.
OUTCOMES = ("win", "loss", "tie", "invalid")
WIN, LOSS, TIE, INVALID = range(len(OUTCOMES))


def _outcome_codes(outcomes) -> np.ndarray:
    """Each outcome's index in :data:`OUTCOMES`, the distinct values hashed once whatever the column
    holds (objects, a categorical, pyarrow strings) instead of a million strings compared."""
    column = outcomes if isinstance(outcomes, pd.Series) else pd.Series(np.asarray(outcomes, dtype=object).reshape(-1))
    codes, labels = pd.factorize(column, use_na_sentinel=False)
    numbers = np.array([OUTCOMES.index(str(v)) if str(v) in OUTCOMES else -1 for v in labels], dtype=np.intp)
    if (numbers < 0).any():
        unknown = str(labels[int(np.flatnonzero(numbers < 0)[0])])
        raise InputError(f"unknown contest outcome {unknown!r}", fix="use win, loss, tie or invalid")
    return numbers[codes]


def sign_flip_test(differences, *, draws: int = PERMUTATION_DRAWS, rng: int | np.random.Generator = CHECK_SEED):
    """Exact and Monte Carlo sign-flip p-values for Σ D (D ∈ {−1, 0, 1} per contest).

    Exact: two-sided binomial test of #{D = +1} among the m discordant contests against ½ (the
    exact law of the flip distribution). Monte Carlo: p = (1 + #{|Σ s D| ≥ |Σ D|})/(draws + 1)
    with independent random signs s. Returns (exact_p, mc_p, m, seed).
    """
    d = np.asarray(differences, dtype=float)
    discordant = d[d != 0]
    m = int(discordant.size)
    if m == 0:
        return 1.0, 1.0, 0, resolve_rng(rng)[1]
    exact = float(stats.binomtest(int((discordant > 0).sum()), m, 0.5).pvalue)
    generator, seed = resolve_rng(rng)
    observed = abs(discordant.sum())
    if draws * m > SIGN_FLIP_MATRIX_MAX:
        # s_i D_i are iid ±1 whatever the D_i = ±1, so Σ s_i D_i = 2 B - m with B ~ Binomial(m, ½):
        # the same law, hence the same law of the p-value, drawn in O(draws) instead of O(draws m)
        flipped = np.abs(2.0 * generator.binomial(m, 0.5, size=draws) - m)
    else:
        # rows of signs in chunks of 4: the int8 stream is then the one a single call draws
        rows = max(4, SIGN_FLIP_CHUNK // max(m, 1) // 4 * 4)
        flipped = np.concatenate(
            [
                np.abs(
                    (generator.integers(0, 2, size=(min(rows, draws - start), m), dtype=np.int8) * 2 - 1) @ discordant
                )
                for start in range(0, draws, rows)
            ]
        )
    monte_carlo = float((1 + np.sum(flipped >= observed - 1e-9)) / (draws + 1))
    return exact, monte_carlo, m, seed


def exact_order_effect(difference, groups, level: float) -> ClusteredEstimate:
    """The order effect from exact Clopper-Pearson bounds on the pooled contests, for the data a
    clustered interval cannot take: no variance at all (a judge that names the same position in
    every verdict, or one that never changes its verdict with the order).

    Per contest d = 1[policy wins shown first] - 1[policy wins shown second] in {-1, 0, 1}, and
    δ = p⁺ - p⁻ with p⁺ = P(d = 1), p⁻ = P(d = -1). With k⁺ and k⁻ of the n contests at d = 1
    and d = -1,

        δ ∈ [L(k⁺) - U(k⁻), U(k⁺) - L(k⁻)],

    L and U the one-sided Clopper-Pearson bounds of a binomial proportion out of n, each at error
    α' = (1 - level)/4 (the two-sided interval at 1 - 2α' of
    :func:`honestci.audit.stats.frequentist.iid.proportion_ci`): each end misses with probability at most
    2α' = (1 - level)/2 (Bonferroni over its two bounds). Every d = 1 gives
    [2(α')^(1/n) - 1, 1], which excludes 0 from n = 6 contests at level 0.95 (0.844 at n = 54).

    What it covers depends on the design, and the method says which:

    - *one contest per vignette* (LLMBar, MT-Bench, AlpacaEval): the contests are independent
      draws, so the bound holds for new vignettes as well (``"exact, pooled contests"``);
    - *several contests per vignette*: the contests are independent given the vignettes, not
      across them, so the bound is on these vignettes, δ = Σ_i (p⁺_i - p⁻_i)/n over the observed
      contests (``"exact, these vignettes"``). Clopper-Pearson bounds stay conservative for the
      mean probability of independent trials with unequal probabilities (Hoeffding 1956,
      Theorem 4, at the tail counts these bounds turn on).

    This replaces per-vignette Bonferroni bounds (α/(4G) each, averaged over vignettes), which
    are vacuous with one contest per vignette (about [-1, 1] at any G) although a judge naming
    the first position in all 54 contests has an exact McNemar p of 1e-16.

    References: Clopper & Pearson (1934), Biometrika 26:404-413; Hoeffding (1956), Ann. Math.
    Statist. 27:713-721. Validated against: ``scipy.stats.binomtest(k, n).proportion_ci(method=
    "exact")`` at confidence 1 - 2α' (tests/test_position_bias.py), and seeded coverage
    simulations with one and several contests per vignette (the same file).
    """
    _, codes = unique_inverse(np.asarray(groups).reshape(-1))
    d = np.asarray(difference, dtype=float).reshape(-1)
    n, plus, minus = int(d.size), int((d > 0).sum()), int((d < 0).sum())
    one_each = bool(np.bincount(codes).max() == 1)
    bonferroni_level = 1 - (1 - level) / 2  # two-sided at 1 - 2α', α' = (1 - level)/4
    low_plus, high_plus = proportion_ci(plus, n, "clopper_pearson", bonferroni_level)
    low_minus, high_minus = proportion_ci(minus, n, "clopper_pearson", bonferroni_level)
    if one_each:
        method, note = (
            "exact, pooled contests",
            (
                "no variance: Clopper-Pearson bounds on the pooled contests (Bonferroni); one contest per "
                "vignette, so they hold for new vignettes"
            ),
        )
    else:
        method, note = (
            "exact, these vignettes",
            (
                "no variance: Clopper-Pearson bounds on the pooled contests (Bonferroni), independent given "
                "these vignettes"
            ),
        )
    return ClusteredEstimate(
        "order effect (probability points)",
        (plus - minus) / n,
        None,
        None,
        low_plus - high_minus,
        high_plus - low_minus,
        None,
        None,
        n,
        int(codes.max()) + 1,
        level,
        note=note,
        method=method,
    )


def _logit_order_effect(fit, p_first: float, p_second: float) -> ClusteredEstimate | None:
    """logit p₁ − logit p₂ from the fit of ``y ~ 1 + policy_first`` (coefficients p₂ and δ), by the
    delta method: the contrast (1/(p₁(1 − p₁)) − 1/(p₂(1 − p₂)), 1/(p₁(1 − p₁))); None at a
    probability of 0 or 1."""
    if not (0 < p_first < 1 and 0 < p_second < 1):
        return None
    slope_first, slope_second = 1 / (p_first * (1 - p_first)), 1 / (p_second * (1 - p_second))
    return from_contrast(
        linear_contrast(fit, [slope_first - slope_second, slope_first], label="order effect (logit)"),
        "order effect (logit scale)",
        estimate=float(logit(p_first) - logit(p_second)),
    )


def order_effect_within_contests(
    win_first,
    win_second,
    clusters,
    *,
    level: float = 0.95,
    rng: int | None = CHECK_SEED,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> tuple[ClusteredEstimate, ClusteredEstimate]:
    """The order effect δ = P(W₁ = 1) − P(W₂ = 1) of contests judged in both orders, pooled over
    vignettes, and its logit contrast: the figures the ``position_bias`` gate reads.

    Per contest D = W₁ − W₂ ∈ {−1, 0, 1}; δ̂ = D̄ is the slope of ``win ~ 1 + policy_first`` on
    the 2n judged orders, whose CR2 interval, clustered by vignette with the Satterthwaite df
    (:func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols`), holds for any design: with
    one contest per vignette the clusters are the contests (the cluster block of the hat matrix is
    I/n, as for the paired D̄), with several the vignette's contests share one cluster. A
    percentile cluster bootstrap of D̄ sits beside it (``rng=None`` skips it). Where the CR2
    interval degenerates because every D is the same (a judge naming one position in every
    verdict, or never changing its verdict with the order) the interval is the exact one of
    :func:`exact_order_effect`; with other data and no interval (fewer than ``min_clusters``
    vignettes, or no variance between vignettes) the effect is INCONCLUSIVE.

    ``win_first``/``win_second`` are booleans (policy wins when shown first / second), one per
    valid contest; ``clusters`` its vignette.

    References: Pustejovsky & Tipton (2018), JBES 36:672-683 (CR2, Satterthwaite df); Clopper &
    Pearson (1934). Validated against: R clubSandwich through ``cluster_robust_ols``, and seeded
    coverage simulations with one and several contests per vignette (tests/test_position_bias.py).
    """
    win_first = np.asarray(win_first, dtype=bool).reshape(-1)
    win_second = np.asarray(win_second, dtype=bool).reshape(-1)
    groups = np.asarray(clusters).reshape(-1)
    if not (win_first.shape == win_second.shape == groups.shape) or not groups.size:
        raise InputError(
            "win_first, win_second and clusters must have one entry per contest, and at least one",
            fix="pass aligned arrays of the valid contests",
        )
    codes = unique_inverse(groups)[1]
    n = int(win_first.size)
    difference = win_first.astype(float) - win_second.astype(float)
    p_first, p_second = float(win_first.mean()), float(win_second.mean())
    boot = clustered_mean(
        difference,
        codes,
        "order effect",
        level=level,
        rng=rng,
        bootstrap_draws=bootstrap_draws,
        min_clusters=min_clusters,
        space=DIFFERENCE_SPACE,
    )
    order_effect = logit_effect = None
    if boot.reportable:
        y = np.concatenate([win_first, win_second]).astype(float)
        X = np.column_stack([np.ones(2 * n), np.r_[np.ones(n), np.zeros(n)]])
        per_order = np.concatenate([codes, codes])
        options: dict[str, Any] = dict(vcov="CR2", level=level, coef_names=("p_win_second", "order_effect"))
        # fitted on its 2G cells (vignette x order): the rows' fit, from sums over the rows
        cells = design_cells(X, per_order)
        try:
            fit = cluster_robust_ols_of_cells(
                cells, cells.sums(y), lambda: cluster_robust_ols(X, y, per_order, **options), **options
            )
        except EstimationError:
            fit = None
        if fit is not None:
            order_effect = _score_interval(
                from_contrast(
                    linear_contrast(fit, {"order_effect": 1.0}, label="order effect"),
                    "order effect (probability points)",
                    boot=None if boot.boot_low is None or boot.boot_high is None else (boot.boot_low, boot.boot_high),
                    seed=boot.seed,
                    space=DIFFERENCE_SPACE,
                ),
                difference,
            )
            logit_effect = _logit_order_effect(fit, p_first, p_second)
    if order_effect is None and np.ptp(difference) == 0:
        order_effect = exact_order_effect(difference, codes, level)
    if order_effect is None:
        order_effect = boot
    if logit_effect is None:
        logit_effect = ClusteredEstimate.inconclusive(
            "order effect (logit scale)", None, n, boot.n_clusters, level, "a win probability of 0 or 1, or no variance"
        )
    return order_effect, logit_effect


def _score_interval(cr2: ClusteredEstimate, difference: np.ndarray) -> ClusteredEstimate:
    """The CR2 order effect with Tango's score interval in place of the Wald one, Rao–Scott
    adjusted by the CR2 design effect (:func:`honestci.audit.stats.frequentist.iid.paired_difference_ci`)."""
    if not cr2.reportable or cr2.se is None or cr2.df is None or cr2.estimate is None:
        return cr2
    n = difference.size
    plus, minus = float((difference > 0).sum()), float((difference < 0).sum())
    iid_variance = ((plus + minus) / n - cr2.estimate**2) / n
    # never narrower than independent contests: a design effect below 1 at few vignettes is noise
    design_effect = max(cr2.se**2 / iid_variance, 1.0) if iid_variance > 0 else 1.0
    low, high = paired_difference_ci(plus, minus, n, cr2.level, design_effect=design_effect, df=cr2.df)
    return replace(
        cr2,
        ci_low=low,
        ci_high=high,
        method="score, CR2",
        note=f"Tango score interval, CR2 design effect {design_effect:.2f}, t({cr2.df:.1f})",
    )


def position_bias(
    outcome_policy_first,
    outcome_policy_second,
    clusters,
    *,
    judge: str = "",
    policy: str = "",
    opponent: str = "",
    n_single_order: int = 0,
    level: float = 0.95,
    rng: int | np.random.Generator = CHECK_SEED,
    bootstrap_draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    permutation_draws: int = PERMUTATION_DRAWS,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> PositionBiasResult:
    """Position-bias figures from the policy's outcome in each order of each contest (module doc).

    Contests with an invalid verdict in either order are left out (counted).
    """
    first, second = _outcome_codes(outcome_policy_first), _outcome_codes(outcome_policy_second)
    groups = np.asarray(clusters).reshape(-1)
    if not (first.shape == second.shape == groups.shape):
        raise InputError(
            "both orders' outcomes and the clusters must have one entry per contest.", fix="pass aligned arrays"
        )
    valid = (first != INVALID) & (second != INVALID)
    if not valid.any():
        return not_identifiable(
            judge,
            policy,
            opponent,
            "no contest has valid verdicts in both orders",
            n_single_order=n_single_order,
            level=level,
        )
    # Vignettes as their codes in sorted-label order: every estimate below groups by np.unique,
    # whose order the codes keep, so the figures are the same without sorting the labels again.
    labels, codes = unique_inverse(groups)
    first, second, codes = first[valid], second[valid], codes[valid]
    win_first, win_second = first == WIN, second == WIN
    generator, seed = resolve_rng(rng)
    n = int(first.size)
    seeds = generator.integers(0, 2**31 - 1, size=3)

    consistent = first == second  # both orders name the same response, or both say tie
    consistency = clustered_mean(
        consistent.astype(float),
        codes,
        "consistency rate",
        level=level,
        rng=int(seeds[0]),
        bootstrap_draws=bootstrap_draws,
        min_clusters=min_clusters,
        space=RATE_SPACE,
    )
    # verdicts naming the response shown first: policy wins when first, or loses when second
    named_first = win_first.astype(int) + (second == LOSS).astype(int)
    named_second = (first == LOSS).astype(int) + win_second.astype(int)
    inconsistent = ~consistent
    first_preference = exact_first = None
    if inconsistent.any():
        prefers_first = (named_first > named_second)[inconsistent]
        first_preference = clustered_mean(
            prefers_first.astype(float),
            codes[inconsistent],
            "first-position preference (inconsistent contests)",
            level=level,
            rng=int(seeds[1]),
            bootstrap_draws=bootstrap_draws,
            min_clusters=min_clusters,
            space=RATE_SPACE,
        )
        exact_first = float(stats.binomtest(int(prefers_first.sum()), int(prefers_first.size), 0.5).pvalue)

    difference = win_first.astype(float) - win_second.astype(float)
    p_first, p_second = float(win_first.mean()), float(win_second.mean())
    order_effect, logit_effect = order_effect_within_contests(
        win_first,
        win_second,
        codes,
        level=level,
        rng=int(seeds[2]),
        bootstrap_draws=bootstrap_draws,
        min_clusters=min_clusters,
    )
    exact_p, permutation_p, n_discordant, _permutation_seed = sign_flip_test(
        difference, draws=permutation_draws, rng=generator
    )

    # per vignette (sorted by label): contests, the consistent share, the mean difference and,
    # among the inconsistent contests, the share favouring the first position (None without any)
    sizes, consistent_n, difference_sum, inconsistent_n, first_n = (
        np.bincount(c, weights=w, minlength=labels.size)
        for c, w in (
            (codes, None),
            (codes, consistent),
            (codes, difference),
            (codes[inconsistent], None),
            (codes[inconsistent], (named_first > named_second)[inconsistent]),
        )
    )
    per_vignette = tuple(
        {
            "vignette_id": str(labels[g]),
            "n": int(sizes[g]),
            "consistency": float(consistent_n[g] / sizes[g]),
            "order_effect": float(difference_sum[g] / sizes[g]),
            "first_preference": float(first_n[g] / inconsistent_n[g]) if inconsistent_n[g] else None,
        }
        for g in np.flatnonzero(sizes)
    )
    return PositionBiasResult(
        judge,
        policy,
        opponent,
        True,
        n,
        int((~valid).sum()),
        n_single_order,
        consistency,
        first_preference,
        exact_first,
        order_effect,
        logit_effect,
        p_first,
        p_second,
        n_discordant,
        exact_p,
        permutation_p,
        permutation_draws,
        seed,
        per_vignette,
        level,
    )


def position_bias_between_contests(
    values,
    policy_first,
    clusters,
    *,
    judge: str = "",
    policy: str = "",
    opponent: str = "",
    n_invalid: int = 0,
    level: float = 0.95,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> PositionBiasResult:
    """The order effect from contests judged in one randomised order each (module doc).

    δ̂ = v̄(shown first) − v̄(shown second) is the slope of the OLS ``v ~ 1 + policy_first`` on the
    contests' order values v ∈ [0, 1]; its interval is CR2 clustered by vignette with the
    Satterthwaite df (:func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols`), and the logit
    contrast logit v̄₁ − logit v̄₂ its delta-method linearisation. Below ``min_clusters``
    vignettes, or without contests in both positions, the effect carries no interval.

    References: Pustejovsky & Tipton (2018), CR2 and its Satterthwaite df; Zheng et al. (2023) on
    position bias. Validated against: R clubSandwich through ``cluster_robust_ols``, and a seeded
    coverage simulation with a known order effect (tests/test_position_bias.py).
    """
    v = np.asarray(values, dtype=float).reshape(-1)
    first = np.asarray(policy_first, dtype=bool).reshape(-1)
    groups = np.asarray(clusters).reshape(-1)
    if not (v.shape == first.shape == groups.shape):
        raise InputError("values, policy_first and clusters must have one entry per contest", fix="pass aligned arrays")
    valid = np.isfinite(v)
    v, first = v[valid], first[valid]
    labels, codes = unique_inverse(groups[valid])  # sorted labels, as np.unique gives them
    n, n_clusters = int(v.size), int(labels.size)
    name = "order effect (probability points)"
    if first.all() or not first.any():
        return not_identifiable(
            judge,
            policy,
            opponent,
            "no valid contest shows the policy in "
            + ("second" if first.all() and n else "first")
            + " position, so the two positions cannot be compared",
            n_single_order=n,
            level=level,
            design=ONE_ORDER_RANDOMISED,
        )
    p_first, p_second = float(v[first].mean()), float(v[~first].mean())
    estimate = p_first - p_second
    order_effect = logit_effect = None
    if n_clusters < min_clusters:
        reason = f"{n_clusters} vignettes, below the {min_clusters} a clustered interval needs"
    else:
        reason = "a win probability of 0 or 1, or no variance"
        X = np.column_stack([np.ones(n), first.astype(float)])
        try:
            fit = cluster_robust_ols(X, v, codes, vcov="CR2", level=level, coef_names=("p_win_second", "order_effect"))
        except EstimationError as error:
            fit, reason = None, str(error)
        if fit is not None:
            order_effect = from_contrast(
                linear_contrast(fit, {"order_effect": 1.0}, label="order effect"), name, space=DIFFERENCE_SPACE
            )
            logit_effect = _logit_order_effect(fit, p_first, p_second)
    if order_effect is None:
        order_effect = ClusteredEstimate.inconclusive(name, estimate, n, n_clusters, level, reason)
    if logit_effect is None:
        logit_effect = ClusteredEstimate.inconclusive("order effect (logit scale)", None, n, n_clusters, level, reason)
    # per vignette: contests, and the mean value shown first minus shown second where both occur
    sizes, first_n, first_sum, second_sum = (
        np.bincount(codes, weights=w, minlength=n_clusters)
        for w in (None, first, np.where(first, v, 0.0), np.where(first, 0.0, v))
    )
    second_n = sizes - first_n
    per_vignette = tuple(
        {
            "vignette_id": str(labels[g]),
            "n": int(sizes[g]),
            "consistency": None,
            "order_effect": float(first_sum[g] / first_n[g] - second_sum[g] / second_n[g])
            if first_n[g] and second_n[g]
            else None,
            "first_preference": None,
        }
        for g in range(n_clusters)
    )
    return PositionBiasResult(
        judge,
        policy,
        opponent,
        True,
        n,
        n_invalid,
        n,
        None,
        None,
        None,
        order_effect,
        logit_effect,
        p_first,
        p_second,
        0,
        None,
        None,
        0,
        None,
        per_vignette,
        level,
        "",
        ONE_ORDER_RANDOMISED,
    )


def position_bias_from_contests(contests, **kwargs) -> PositionBiasResult:
    """Position bias of an :class:`honestci.audit.data.contests.ContestTable`, by its design: within
    contests when both orders were judged (single-order contests of a mixed design are left out
    and counted), between contests when one randomised order was, and not identifiable when
    one fixed order was."""
    level = kwargs.get("level", 0.95)
    single = int(contests.dropped.get("single_order", 0))
    frame = contests.frame
    if contests.design == ONE_ORDER_FIXED:
        return not_identifiable(
            contests.judge,
            contests.policy,
            contests.opponent,
            contests.design_note or "one presentation order, the same in every contest",
            n_single_order=len(frame),
            level=level,
            design=ONE_ORDER_FIXED,
        )
    if contests.design == ONE_ORDER_RANDOMISED:
        invalid = contests.n_invalid
        values = np.fmax(  # the one judged order's value (NaN when invalid)
            frame["value_policy_first"].to_numpy(dtype=float), frame["value_policy_second"].to_numpy(dtype=float)
        )
        return position_bias_between_contests(
            values,
            contests.policy_first,
            frame["vignette_id"],
            judge=contests.judge,
            policy=contests.policy,
            opponent=contests.opponent,
            n_invalid=invalid,
            level=level,
            min_clusters=kwargs.get("min_clusters", THRESHOLDS.min_clusters),
        )
    # a mixed design's single-order contests kept with their missing order scored: within-contest
    # position bias reads the complete contests alone
    judged_first, judged_second = contests.judged_orders()
    if not (judged_first & judged_second).all():
        single += int((judged_first != judged_second).sum())
        frame = frame[judged_first & judged_second]
    if len(frame) == 0:
        return not_identifiable(
            contests.judge,
            contests.policy,
            contests.opponent,
            f"all {single} contest(s) were judged in one presentation order only",
            n_single_order=single,
            level=level,
        )
    return position_bias(
        frame["outcome_policy_first"],
        frame["outcome_policy_second"],
        frame["vignette_id"],
        judge=contests.judge,
        policy=contests.policy,
        opponent=contests.opponent,
        n_single_order=single,
        **kwargs,
    )


def position_bias_for_judge(study, policy: str, opponent: str, judge: str, **kwargs) -> PositionBiasResult:
    """Build the judge's contests of ``policy`` vs ``opponent`` (single-order ones left out, counted) and measure."""
    from honestci.audit.data.contests import build_contests

    return position_bias_from_contests(
        build_contests(study, policy, opponent, judge=judge, single_order="exclude"), **kwargs
    )


@dataclass(frozen=True)
class PositionBiasCheck:
    """The audit's position-bias check: the claim's judge, and every other judge of the same contests.

    For a panel, ``claim_judge`` is the first panel judge, ``others`` begins with the rest of the
    panel, and ``panel`` names its judges: :meth:`gated` are the results the gate reads (each panel
    judge's).
    """

    claim_judge: PositionBiasResult
    others: tuple[PositionBiasResult, ...]
    tolerance: float
    panel: tuple[str, ...] = ()

    def gated(self) -> tuple[PositionBiasResult, ...]:
        """The claim's judge, or every judge of its panel."""
        return (self.claim_judge, *(r for r in self.others if r.judge in self.panel))

    def to_frame(self) -> pd.DataFrame:
        return pd.concat([r.to_frame() for r in (self.claim_judge, *self.others)], ignore_index=True)

    def report_section(self) -> ReportSection:
        lines = list(self.claim_judge.summary_lines())
        for other in self.others:
            lines.append(
                f"{'panel' if other.judge in self.panel else 'other'} judge {other.judge}: "
                + (other.summary_lines()[1] if other.identifiable else other.summary_lines()[0])
            )
        lines.append(f"tolerance on the order effect: ±{self.tolerance:.2f}")
        if self.panel:
            lines.append(
                f"panel of {len(self.panel)} judges: the gate reads every panel judge's order effect and "
                "gives the worst verdict (one position-biased judge fails the panel, whatever the rule)"
            )
        table: list[dict[str, object]] = []
        for result in (self.claim_judge, *self.others):
            if not result.identifiable:
                table.append(
                    {
                        "judge": result.judge,
                        "figure": "order effect",
                        "estimate": None,
                        "verdict": "INCONCLUSIVE",
                        "note": result.note,
                    }
                )
                continue
            for figure in (result.order_effect, result.order_effect_logit, result.consistency, result.first_preference):
                if figure is not None:
                    table.append(
                        {
                            "judge": result.judge,
                            "figure": figure.name,
                            "estimate": figure.estimate,
                            "ci_low": figure.ci_low,
                            "ci_high": figure.ci_high,
                            "boot_low": figure.boot_low,
                            "boot_high": figure.boot_high,
                            "n": figure.n,
                            "n_clusters": figure.n_clusters,
                        }
                    )
        for row in self.claim_judge.per_vignette:
            table.append(
                {
                    "judge": self.claim_judge.judge,
                    "figure": f"vignette {row['vignette_id']}",
                    "estimate": row["order_effect"],
                    "n": row["n"],
                    "consistency": row["consistency"],
                    "first_preference": row["first_preference"],
                }
            )
        return ReportSection("position_bias", "Position bias of the judge", tuple(lines), tuple(table))


def position_bias_check(context: AuditContext) -> PositionBiasCheck | None:
    """Position bias of the claim's judge and of every other judge of the same two systems."""
    contests = context.contests
    if contests is None:
        return None
    thresholds = context.claim.thresholds
    options = dict(level=thresholds.confidence_level, min_clusters=thresholds.min_clusters, rng=context.seed)
    panel = [position_bias_from_contests(contests.for_judge(judge), **options) for judge in contests.panel]
    mine = panel[0] if panel else position_bias_from_contests(contests, **options)
    judgments = context.study.judgments.frame
    others = panel[1:]
    judges = {str(judge) for judge in pd.unique(judgments["judge"])}  # the distinct ones, not 2M strings
    for judge in sorted(judges - {contests.judge, *contests.panel}):
        try:
            others.append(position_bias_for_judge(context.study, contests.policy, contests.opponent, judge, **options))
        except InputError:
            continue  # this judge did not compare the claim's two systems
    return PositionBiasCheck(mine, tuple(others), thresholds.position_bias_tolerance, contests.panel)
