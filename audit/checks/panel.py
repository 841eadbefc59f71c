"""A panel of judges: each judge's win rate, how far the judges agree, and judge as a design factor.

The claim's win rate is the panel's (each contest scored by the panel rule,
:func:`honestci.audit.data.contests.panel_score`), and its intervals cluster by vignette as every
win rate does: the judges are nested in the contest, so the panel score of a contest is one
observation and no further clustering is needed. This check adds what a panel has beyond it:

- per judge: its win rate with the bar gate's interval (the policy's method for the claim's
  population), so a reader sees whether one lenient judge carries the panel;
- agreement: the share of contests on which every judge favours the same side (policy, tie or
  opponent), a vignette-weighted rate with its CR2 interval, and Krippendorff's α of the judges'
  verdicts (nominal) and of their scores (interval) with vignette-clustered bootstrap intervals;
- judge main effect: every pairwise difference of the judges' win rates with Bonferroni-
  simultaneous clustered intervals (:func:`honestci.audit.stats.judge_error.panel.judge_differences`); the
  largest one is reported, and the judges differ when some interval excludes 0.

Position bias is measured per panel judge by :mod:`honestci.audit.checks.position_bias`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.stats.frequentist.winrate import winrate_ci
from honestci.audit.stats.intervals import IntervalResult
from honestci.audit.stats.judge_error.panel import (
    AlphaResult,
    JudgeDifferences,
    judge_differences,
    krippendorff_alpha,
    verdict_codes,
)


@dataclass(frozen=True)
class PanelResult:
    """What the panel check found (module doc)."""

    judges: tuple[str, ...]
    rule: str
    n_contests: int
    per_judge: tuple[IntervalResult, ...]
    agreement: IntervalResult
    alpha_verdicts: AlphaResult
    alpha_scores: AlphaResult
    differences: JudgeDifferences

    def table(self) -> tuple[dict, ...]:
        rows: list[dict] = []
        for judge, row in zip(self.judges, self.per_judge):
            rows.append(
                {
                    "judge": judge,
                    "figure": "win rate",
                    "estimate": row.estimate,
                    "ci_low": row.ci_low if row.reportable else None,
                    "ci_high": row.ci_high if row.reportable else None,
                    "n": row.n,
                    "n_clusters": row.n_clusters,
                    "note": f"{row.label}, {row.population}" + (f"; {row.note}" if row.note else ""),
                }
            )
        a = self.agreement
        rows.append(
            {
                "judge": "all",
                "figure": "share of contests where every judge favours the same side",
                "estimate": a.estimate,
                "ci_low": a.ci_low if a.reportable else None,
                "ci_high": a.ci_high if a.reportable else None,
                "n": a.n,
                "n_clusters": a.n_clusters,
                "note": a.label,
            }
        )
        rows += [{"judge": "all", **alpha.as_row()} for alpha in (self.alpha_verdicts, self.alpha_scores)]
        for pair in self.differences.table.to_dict(orient="records"):
            rows.append(
                {
                    "judge": f"{pair['judge_a']} - {pair['judge_b']}",
                    "figure": "win-rate difference",
                    "estimate": pair["estimate"],
                    "ci_low": pair["ci_low"],
                    "ci_high": pair["ci_high"],
                    "n": self.n_contests,
                    "n_clusters": self.differences.n_clusters,
                    "note": f"t(G-1) on vignette means, Bonferroni over pairs, joint level {self.differences.level:g}",
                }
            )
        return tuple(rows)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(list(self.table()))

    def report_section(self) -> ReportSection:
        def text(value: float | None) -> str:
            return "n/a" if value is None or not np.isfinite(value) else f"{value:.3f}"

        largest = self.differences.largest
        lines = [
            f"panel of {len(self.judges)} judges ({', '.join(self.judges)}), rule {self.rule!r}: the win rate and "
            f"every gate read the panel score of each of the {self.n_contests} contests",
            "win rate by judge: "
            + "; ".join(f"{judge} {text(row.estimate)}" for judge, row in zip(self.judges, self.per_judge)),
            f"agreement: every judge on the same side in {text(self.agreement.estimate)} of contests; "
            f"Krippendorff's alpha {text(self.alpha_verdicts.estimate)} (verdicts), "
            f"{text(self.alpha_scores.estimate)} (scores)",
            f"judge main effect: rates spread with sd {text(self.differences.spread)}; largest difference "
            f"{largest['judge_a']} - {largest['judge_b']} {text(largest['estimate'])} "
            f"[{text(largest['ci_low'])}, {text(largest['ci_high'])}] (simultaneous {self.differences.level:g}): "
            + (
                "the judges differ"
                if self.differences.judges_differ
                else "no difference between judges is shown at this level"
            ),
        ]
        return ReportSection("panel", "Panel of judges", tuple(lines), self.table())


def panel_check(context: AuditContext) -> PanelResult | None:
    """The panel's per-judge results, agreement and judge effect; None unless the claim names a panel."""
    contests = context.contests
    if contests is None or not contests.panel:
        return None
    claim = context.claim
    thresholds, invalid = claim.thresholds, claim.policy.invalid_verdicts
    level = thresholds.confidence_level
    keys, matrix = contests.judge_scores("both_orders", invalid=invalid)
    keep = np.isfinite(matrix).all(axis=1)
    matrix, clusters = matrix[keep], keys["vignette_id"].to_numpy()[keep]
    per_judge = tuple(
        winrate_ci(
            matrix[:, k],
            clusters,
            context.contest_method,
            level,
            seed=context.seed,
            thresholds=thresholds,
            trials_per_contest=contests.trials_per_contest,
        )
        for k in range(matrix.shape[1])
    )
    sides = verdict_codes(matrix)
    unanimous = (sides == sides[:, :1]).all(axis=1).astype(float)
    agreement = winrate_ci(unanimous, clusters, "cr2", level, seed=context.seed, thresholds=thresholds)
    return PanelResult(
        contests.panel,
        str(contests.panel_rule),
        int(matrix.shape[0]),
        per_judge,
        agreement,
        krippendorff_alpha(matrix, clusters, metric="nominal", level=level, rng=context.seed),
        krippendorff_alpha(matrix, clusters, metric="interval", level=level, rng=context.seed),
        judge_differences(matrix, clusters, contests.panel, level=level),
    )
