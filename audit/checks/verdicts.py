"""Invalid verdicts and missing orders as evidence: how many, where, and how far they could move
the gate's CI-low.

A verdict the judge failed to give (unparseable, refused, empty) stays in the data as ``invalid``.
The policy says how it scores (``invalid_verdicts``: against the claim by default). Whatever the
scoring, this check bounds what the invalid verdicts could change: the bar gate's interval is
recomputed with every invalid order scored as a loss for the policy and as a win; when the two
CI-lows fall on different sides of the bar, the invalid verdicts alone could decide the verdict
and the ``valid_verdicts`` gate fails.

An order never judged (a mixed design: some contests judged in both orders, some in one) is the
same kind of gap, chosen by whoever ran the judge: judging the lost contests in one order only and
leaving them out is the cheapest way to shape a win rate. The policy says how a missing order
counts (``missing_orders``: against the claim by default); this check bounds what the missing
orders could change the same way, and tests whether they are missing at random with respect to the
outcome: the judged order's value in the single-order contests against the same order's value in
the complete ones (:func:`missing_at_random`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.data.contests import INVALID_ORDER_VALUE, MIXED, ContestTable
from honestci.audit.data.io import Study
from honestci.audit.errors import EstimationError
from honestci.audit.policy import THRESHOLDS, Thresholds
from honestci.audit.stats.estimands import unique_inverse
from honestci.audit.stats.frequentist.cluster_robust import ContrastResult, cluster_robust_ols, linear_contrast
from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_ci
from honestci.audit.stats.intervals import IntervalResult


@dataclass(frozen=True)
class MissingOrders:
    """The contests judged in one order only, and what their missing orders could change.

    ``n_contests`` counts every contest, the single-order ones included (left out or not, as the
    policy's ``scoring`` says). ``ci_low_if_all_lost``/``..._won`` are the bar gate's CI-low over
    every contest with each missing order scored as a loss / a win for the policy (None without an
    honest interval); ``point_if_all_lost``/``..._won`` the win rates. ``difference`` (with its
    interval at the policy's level) is the judged order's mean value in the single-order contests
    minus the same order's in the complete ones (:func:`missing_at_random`); None when it cannot be
    estimated, with ``difference_note`` saying why.
    """

    scoring: str
    n_contests: int
    n_single_order: int
    missing_policy_first: int
    missing_policy_second: int
    ci_low_if_all_lost: float | None
    ci_low_if_all_won: float | None
    point_if_all_lost: float
    point_if_all_won: float
    difference: float | None
    difference_low: float | None
    difference_high: float | None
    difference_note: str = ""

    @property
    def share(self) -> float:
        return self.n_single_order / self.n_contests if self.n_contests else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "share": self.share}


@dataclass(frozen=True)
class VerdictValidity:
    """Invalid verdicts of the claim's contests, counted, and the bound on their effect.

    ``ci_low_against``/``ci_low_for`` are the bar gate's CI-low (``method`` at ``level``) with
    every invalid order scored as a loss / a win for the policy; None without an honest interval.
    ``point_against``/``point_for`` are the win rates under the same two scorings.
    """

    judge: str
    scoring: str
    method: str
    level: float
    bar: float
    n_contests: int
    n_invalid_contests: int
    invalid_policy_first: int
    invalid_policy_second: int
    ci_low_against: float | None
    ci_low_for: float | None
    point_against: float | None = None
    point_for: float | None = None
    #: Every judge of the study: judge, judgments, invalid ones (for imbalance between judges).
    by_judge: tuple[dict, ...] = ()
    #: The contests judged in one order only (None in a design without any).
    missing: MissingOrders | None = None

    def to_frame(self) -> pd.DataFrame:
        """One row per judge of the study: judgments and invalid verdicts."""
        return pd.DataFrame(list(self.by_judge), columns=["judge", "judgments", "invalid"])

    def report_section(self) -> ReportSection:
        lines = [
            f"judge {self.judge}: {self.n_invalid_contests} of {self.n_contests} contests have an invalid verdict "
            f"({self.invalid_policy_first} with the policy shown first, {self.invalid_policy_second} shown second), "
            f"scored {self.scoring.replace('_', ' ')} by the policy",
        ]
        if self.n_invalid_contests and self.ci_low_against is not None and self.ci_low_for is not None:
            lines.append(
                f"bar gate's CI-low ({self.method}) with every invalid order lost by the policy: "
                f"{self.ci_low_against:.3f}; won: {self.ci_low_for:.3f}; bar {self.bar:.3f}"
            )
        if self.missing is not None:
            m = self.missing
            lines.append(
                f"{m.n_single_order} of {m.n_contests} contests judged in one order only ({m.missing_policy_first} "
                f"missing the policy-first order, {m.missing_policy_second} the policy-second), scored "
                f"{m.scoring.replace('_', ' ')} by the policy"
            )
            if m.ci_low_if_all_lost is not None and m.ci_low_if_all_won is not None:
                lines.append(
                    f"bar gate's CI-low ({self.method}) with every missing order lost by the policy: "
                    f"{m.ci_low_if_all_lost:.3f}; won: {m.ci_low_if_all_won:.3f}; bar {self.bar:.3f}"
                )
            if m.difference is not None:
                lines.append(
                    f"judged order in single-order minus complete contests: {m.difference:+.3f} "
                    f"[{m.difference_low:+.3f}, {m.difference_high:+.3f}] (missing at random: 0)"
                )
            elif m.difference_note:
                lines.append(f"missing at random not tested: {m.difference_note}")
        return ReportSection(
            "valid_verdicts", "Invalid verdicts and missing orders", tuple(lines), tuple(self.by_judge)
        )


def verdict_validity(
    contests: ContestTable,
    study: Study,
    *,
    method: str,
    level: float,
    bar: float,
    scoring: str,
    seed: int,
    thresholds: Thresholds = THRESHOLDS,
    computed: Mapping[str, IntervalResult] | None = None,
    missing_orders: str = "against_claim",
) -> VerdictValidity:
    """Count the invalid verdicts and the missing orders of ``contests`` and bound their effect on
    the bar gate's CI-low (``missing_orders``: how the policy counts a missing order).

    ``computed``: the bar gate's interval (``method`` at ``level`` on these contests) already
    computed under a scoring of the invalid verdicts, by that scoring (the audit's own interval,
    under the policy's scoring); taken as it is instead of computed again.
    """
    computed = computed or {}

    def gate_ci_low(table: ContestTable, invalid: str) -> tuple[float | None, float]:
        """The bar gate's CI-low (None without an honest interval) and the win rate of ``table``."""
        scored = table.scores("both_orders", invalid=invalid)
        # the vignettes coded once, in sorted-label order (every interval groups by np.unique, whose
        # order the codes keep: the same figures without sorting a million labels per interval)
        clusters = unique_inverse(scored.clusters)[1]
        row = winrate_ci(
            scored.values,
            clusters,
            method,
            level,
            seed=seed,
            thresholds=thresholds,
            trials_per_contest=table.trials_per_contest,
        )
        return None if row.bounds is None else row.bounds[0], float(scored.values.mean())

    frame = contests.frame
    first_invalid = int((frame["outcome_policy_first"] == "invalid").sum())
    second_invalid = int((frame["outcome_policy_second"] == "invalid").sum())
    n_invalid = contests.n_invalid
    bounds: dict[str, float | None] = {"against_claim": None, "for_claim": None}
    points = dict(bounds)
    if n_invalid:
        for end in bounds:
            if end in computed:
                row = computed[end]
                bounds[end] = None if row.bounds is None else row.bounds[0]
                points[end] = float(contests.scores("both_orders", invalid=end).values.mean())
            else:
                bounds[end], points[end] = gate_ci_low(contests, end)
    missing = None
    every = contests.with_single_order()
    judged_first, judged_second = every.judged_orders()
    if contests.design == MIXED and (judged_first != judged_second).any():
        lost, won = every, replace(every, missing_order_value=INVALID_ORDER_VALUE["for_claim"])
        (low, point_lost), (high, point_won) = gate_ci_low(lost, scoring), gate_ci_low(won, scoring)
        difference, note = missing_at_random(every, level, thresholds.min_clusters)
        missing = MissingOrders(
            missing_orders,
            len(every.frame),
            int((judged_first != judged_second).sum()),
            int((~judged_first).sum()),
            int((~judged_second).sum()),
            low,
            high,
            point_lost,
            point_won,
            None if difference is None else difference.estimate,
            None if difference is None else difference.ci_low,
            None if difference is None else difference.ci_high,
            note,
        )
    judgments = study.judgments.frame
    # per judge (sorted, as a groupby gives them; judgments without a judge left out as it does)
    codes, judges = pd.factorize(judgments["judge"], sort=True)
    judged = codes >= 0
    counts = np.bincount(codes[judged], minlength=len(judges))
    invalid = np.bincount(
        codes[judged],
        weights=(judgments["verdict"] == "invalid").to_numpy(dtype=bool, na_value=False)[judged],
        minlength=len(judges),
    )
    by_judge = tuple(
        {"judge": str(judge), "judgments": int(count), "invalid": int(bad)}
        for judge, count, bad in zip(judges, counts, invalid)
    )
    return VerdictValidity(
        contests.judge,
        scoring,
        method,
        level,
        bar,
        int(len(frame)),
        n_invalid,
        first_invalid,
        second_invalid,
        bounds["against_claim"],
        bounds["for_claim"],
        points["against_claim"],
        points["for_claim"],
        by_judge,
        missing,
    )


def missing_at_random(contests: ContestTable, level: float, min_clusters: int) -> tuple[ContrastResult | None, str]:
    """Whether the single-order contests' judged orders went like the complete contests' orders.

    Every judged order with a valid verdict is one observation y (its value for the policy); OLS of
    y on [1, s, f] with s = 1 for an order of a single-order contest and f = 1 when the policy was
    shown first, CR2 covariance clustered by vignette and Satterthwaite df (Pustejovsky & Tipton
    2018): the coefficient of s is the difference in the judged order's mean value between the
    single-order and the complete contests at the same position. Missing at random with respect to
    the outcome it is 0; an order left unjudged where the policy lost makes it negative.

    Returns the contrast (None when it cannot be estimated: no complete or no single-order
    contest, fewer than ``min_clusters`` vignettes, or a singular design) and why not.
    """
    frame = contests.frame
    judged_first, judged_second = contests.judged_orders()
    single = judged_first != judged_second
    if single.all() or not single.any():
        return None, "every contest has the same number of judged orders"
    values = np.concatenate([frame["value_policy_first"].to_numpy(float), frame["value_policy_second"].to_numpy(float)])
    shown_first = np.repeat([1.0, 0.0], len(frame))
    observed = np.concatenate([judged_first, judged_second]) & ~np.isnan(values)
    clusters = np.tile(frame["vignette_id"].to_numpy(dtype=object), 2)[observed]
    if len(np.unique(clusters)) < min_clusters:
        return None, f"fewer than {min_clusters} vignettes (min_clusters)"
    design = np.column_stack([np.ones(observed.sum()), np.tile(single, 2)[observed], shown_first[observed]])
    try:
        fit = cluster_robust_ols(
            design, values[observed], clusters, level=level, coef_names=("intercept", "single_order", "policy_first")
        )
        return linear_contrast(fit, {"single_order": 1.0}, label="single-order minus complete"), ""
    except EstimationError as error:
        return None, str(error)


def valid_verdicts_check(context: AuditContext) -> VerdictValidity | None:
    """The audit's check: None before anything is judged (the training pipeline's preflight)."""
    if context.contests is None:
        return None
    claim = context.claim
    # the bar gate's own interval: computed with every other interval, under the policy's scoring
    rows = () if context.intervals is None else context.intervals.rows
    gate_row = next((r for r in rows if r.method == context.contest_method and r.method in ALL_METHODS), None)
    return verdict_validity(
        context.contests,
        context.study,
        method=context.contest_method,
        level=claim.thresholds.confidence_level,
        bar=claim.spec.bar,
        scoring=claim.policy.invalid_verdicts,
        seed=context.seed,
        thresholds=claim.thresholds,
        computed={} if gate_row is None else {claim.policy.invalid_verdicts: gate_row},
        missing_orders=claim.policy.missing_orders,
    )
