"""The composed interval of the claim: judge error, clustering, leakage and selection corrected at once.

Built from the claim's data when humans labelled some of its contests
(:func:`honestci.audit.checks.calibration_items.contest_human_scores`): the candidates of the selection pool
when the claim's policy was selected among them on that pool (the winner's-curse check), else the
claim's contests alone; the leakage check's leaked answers exclude their vignettes. The statistics are
:func:`honestci.audit.stats.judge_error.composed.composed_interval`; the bar gate reads the composed row when the
policy's gate method for the population is ``"composed"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.intervals import IntervalResult
from honestci.audit.stats.judge_error.composed import ComposedInterval, composed_interval

#: The name of the composed interval as a gate method (audit/policy.py CERTIFIED_GATE_METHODS).
COMPOSED_METHOD = "composed"
#: The one population whose rate the composed interval estimates (its non-leaked vignettes).
COMPOSED_POPULATION = "new_vignettes"


@dataclass(frozen=True)
class ComposedCheck:
    """The composed interval of the claim with its decomposition (canonical table: :meth:`to_frame`)."""

    interval: ComposedInterval
    source: str
    n_labelled: int

    def to_frame(self) -> pd.DataFrame:
        return self.interval.to_frame()

    def interval_row(self) -> IntervalResult:
        """The composed row as the bar gate's interval (population ``new_vignettes``)."""
        row = self.interval.composed
        return IntervalResult(
            method=COMPOSED_METHOD,
            label="composed: clustered PPI++ on non-leaked vignettes, AKM hybrid when selected",
            population=COMPOSED_POPULATION,
            estimate=None if math.isnan(row.estimate) else row.estimate,
            ci_low=row.ci_low,
            ci_high=row.ci_high,
            level=self.interval.level,
            n=row.n_contests,
            n_clusters=row.n_clusters,
            icc=math.nan,
            design_effect=math.nan,
            n_effective=math.nan,
            verdict=row.verdict,
            note=row.note,
            seed=self.interval.seed,
        )

    def report_section(self) -> ReportSection:
        result = self.interval
        row = result.composed
        lines = [
            f"Estimand: {result.estimand}.",
            f"Data: {self.source}; {self.n_labelled} contests with a human label; "
            + (
                f"leaked vignettes excluded: {', '.join(map(str, result.leaked_vignettes))}."
                if result.leaked_vignettes
                else "no leaked vignettes."
            ),
        ]
        if row.ci_low is None:
            lines.append(f"Composed interval: INCONCLUSIVE ({row.note}).")
        else:
            lines.append(
                f"Composed {result.level:.0%} interval {row.estimate:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}] "
                f"({row.note}); the table shows what each correction alone does to the naive CI-low."
            )
        table = tuple(
            {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in rec.items()}
            for rec in self.to_frame().to_dict(orient="records")
        )
        return ReportSection(
            "composed", "Composed interval (judge error, clustering, leakage, selection)", tuple(lines), table
        )


def _leaked_vignettes(context: AuditContext, scored: pd.DataFrame) -> tuple:
    """Vignettes of contests with an answer the leakage check found in the training corpus."""
    from honestci.audit.checks.leakage import LeakageCheck

    leakage = context.checks.get("leakage")
    if not isinstance(leakage, LeakageCheck):
        return ()
    leaked = set(leakage.scan.leaked_items)
    flag = scored["policy_response"].isin(leaked) | scored["opponent_response"].isin(leaked)
    return tuple(sorted(set(scored.loc[flag, "vignette_id"])))


def composed_check(context: AuditContext) -> ComposedCheck | None:
    """The claim's composed interval; None without human labels on its contests (or nothing judged).

    With a winner's-curse analysis in which the claim's policy is a candidate and its evidence
    includes the selection pool, the K candidates' selection-pool contests are used and the
    policy's selection is corrected (AKM); otherwise the claim's contests alone. Reads the
    ``winners_curse`` and ``leakage`` checks, so it runs after them (registry order).
    """
    from honestci.audit.checks.calibration_items import calibration_items, contest_human_scores
    from honestci.audit.checks.selection import SelectionAnalysis, pool_scores

    study, contests = context.study, context.contests
    if contests is None or contests.panel or (study.human_pairs is None and study.human_ratings is None):
        return None
    spec, thresholds = context.claim.spec, context.claim.thresholds
    try:
        items = calibration_items(
            human_pairs=study.human_pairs, human_ratings=study.human_ratings, judgments=study.judgments
        )
    except InputError:
        return None
    selection = context.checks.get("winners_curse")
    frames = []
    if (
        isinstance(selection, SelectionAnalysis)
        and selection.policy_is_candidate
        and selection.claim_uses_selection_pool
    ):
        for name in selection.selection.candidates:
            scored, pools, _ = pool_scores(study, name, spec.opponent, contests.judge)
            frames.append(scored.frame.loc[pools == "selection"].assign(candidate=name))
        source = f"selection pool, {len(frames)} candidates judged by {contests.judge} (the policy selected among them)"
        selected = True
    else:
        scored_claim = contests.scores("both_orders", invalid=context.claim.policy.invalid_verdicts)
        frames.append(scored_claim.frame.assign(candidate=spec.policy))
        source = f"the claim's contests judged by {contests.judge}"
        selected = False
    data = pd.concat(frames, ignore_index=True)
    human = contest_human_scores(data, items)
    mine = data["candidate"].to_numpy() == spec.policy
    if np.isfinite(human[mine]).sum() < 2:
        return None
    try:
        interval = composed_interval(
            data["candidate"].to_numpy(),
            data["vignette_id"].to_numpy(),
            data["score"].to_numpy(dtype=float),
            human,
            claimed=spec.policy,
            selected=selected,
            leaked_vignettes=_leaked_vignettes(context, data),
            level=thresholds.confidence_level,
            seed=context.seed,
            min_vignettes=thresholds.composed_min_vignettes,
        )
    except InputError as error:  # e.g. a candidate without unlabelled contests
        raise EstimationError(f"no composed interval from these data: {error}") from error
    return ComposedCheck(interval, source, int(np.isfinite(human).sum()))
