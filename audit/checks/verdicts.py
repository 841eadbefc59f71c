"""Invalid verdicts as evidence: how many, where, and how far they could move the gate's CI-low.

A verdict the judge failed to give (unparseable, refused, empty) stays in the data as ``invalid``.
The policy says how it scores (``invalid_verdicts``: against the claim by default). Whatever the
scoring, this check bounds what the invalid verdicts could change: the bar gate's interval is
recomputed with every invalid order scored as a loss for the policy and as a win; when the two
CI-lows fall on different sides of the bar, the invalid verdicts alone could decide the verdict
and the ``valid_verdicts`` gate fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.data.contests import ContestTable
from honestci.audit.data.io import Study
from honestci.audit.policy import THRESHOLDS, Thresholds
from honestci.audit.stats.estimands import unique_inverse
from honestci.audit.stats.intervals import IntervalResult
from honestci.audit.stats.winrate import ALL_METHODS, winrate_ci


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
        return ReportSection("valid_verdicts", "Invalid verdicts", tuple(lines), tuple(self.by_judge))


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
) -> VerdictValidity:
    """Count the invalid verdicts of ``contests`` and bound their effect on the bar gate's CI-low.

    ``computed``: the bar gate's interval (``method`` at ``level`` on these contests) already
    computed under a scoring of the invalid verdicts, by that scoring (the audit's own interval,
    under the policy's scoring); taken as it is instead of computed again.
    """
    computed = computed or {}
    frame = contests.frame
    first_invalid = int((frame["outcome_policy_first"] == "invalid").sum())
    second_invalid = int((frame["outcome_policy_second"] == "invalid").sum())
    n_invalid = contests.n_invalid
    bounds: dict[str, float | None] = {"against_claim": None, "for_claim": None}
    points = dict(bounds)
    if n_invalid:
        # Scored either way the invalid verdicts keep every contest, in one order: the vignettes are
        # coded once, in sorted-label order (every interval groups by np.unique, whose order the
        # codes keep: the same figures without sorting a million labels per interval).
        clusters = unique_inverse(contests.scores("both_orders", invalid="against_claim").clusters)[1]
        for end in bounds:
            scored = contests.scores("both_orders", invalid=end)
            row = (
                computed[end]
                if end in computed
                else winrate_ci(
                    scored.values,
                    clusters,
                    method,
                    level,
                    seed=seed,
                    thresholds=thresholds,
                    trials_per_contest=contests.trials_per_contest,
                )
            )
            bounds[end] = None if row.bounds is None else row.bounds[0]
            points[end] = float(scored.values.mean())
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
    )


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
    )
