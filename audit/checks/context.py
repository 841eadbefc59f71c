"""What every check and gate reads (the audit context) and what a check gives the report (a section).

:func:`honestci.audit.pipeline.run_audit` builds one :class:`AuditContext` per audit; the checks of
:mod:`honestci.audit.checks.registry` read it and fill ``context.checks``, and every gate of
:mod:`honestci.audit.gates` is a function of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from honestci.audit.policy import DEFAULT_SEED

if TYPE_CHECKING:
    from honestci.audit.checks.claimed import ClaimedFigureAudit
    from honestci.audit.checks.evidence import EvidenceScan
    from honestci.audit.data.claims import Claim
    from honestci.audit.data.contests import ContestTable
    from honestci.audit.data.io import Study
    from honestci.audit.stats.bayesian.compare import BayesDifference
    from honestci.audit.stats.bayesian.hierarchical import BayesWinRateResult
    from honestci.audit.stats.frequentist.compare import PairedDifference
    from honestci.audit.stats.intervals import IntervalResult, IntervalTable


@dataclass(frozen=True)
class ReportSection:
    """What a check contributes to the report: a title, short lines of text and one table."""

    key: str
    title: str
    lines: tuple[str, ...] = ()
    table: tuple[dict, ...] = field(default=())

    def to_dict(self) -> dict:
        # ``columns`` keeps the check's column order: verdict.json sorts every object's keys.
        return {
            "key": self.key,
            "title": self.title,
            "lines": list(self.lines),
            "table": [dict(r) for r in self.table],
            "columns": list(dict.fromkeys(k for r in self.table for k in r)),
        }


@dataclass(frozen=True)
class CheckFailed:
    """A check that could not estimate anything trustworthy from these data (an
    :class:`honestci.audit.errors.EstimationError`): its gate did not run, so it never passes."""

    key: str
    reason: str

    def report_section(self) -> ReportSection:
        return ReportSection(self.key, f"{self.key.replace('_', ' ')}: no result", (self.reason,))


@dataclass(frozen=True)
class ComparisonCheck:
    """One comparison the card made, and the honest test of it."""

    against: str
    kind: str
    statement: str | None
    against_point: float | None
    paired: PairedDifference | None
    error: str | None = None
    #: The Bayesian joint model's posterior of the difference (None with --no-bayes).
    bayes: BayesDifference | None = None


@dataclass(frozen=True)
class BayesCheck:
    """The Bayesian hierarchical fit of the claim's contests and the interval rows it adds."""

    result: BayesWinRateResult
    interval_rows: tuple[IntervalResult, ...]


@dataclass(frozen=True)
class AuditContext:
    """What the checks and gates read: the claim, its data and every check's result.

    ``contests`` and ``intervals`` are None only before anything is judged: the training
    pipeline's leakage preflight, which runs the leakage check alone.
    """

    claim: Claim
    study: Study
    contests: ContestTable | None
    intervals: IntervalTable | None
    gate_method: str
    bayes: BayesCheck | None
    claimed_audit: ClaimedFigureAudit | None
    comparisons: tuple[ComparisonCheck, ...]
    #: Seed of every resampling step of the audit (``--seed``); checks use it too.
    seed: int = DEFAULT_SEED
    #: Results of the checks of :data:`honestci.audit.checks.registry.CHECKS`, by key (None where a
    #: check does not apply); filled by :func:`honestci.audit.pipeline.run_audit`.
    checks: dict[str, Any] = field(default_factory=dict)
    #: The claim's contests before its ``family:``/``families:`` restriction (None when the claim
    #: has none): the per-family table of the populations check reads every family.
    family_contests: ContestTable | None = None
    #: The evidence-integrity scan of the study as loaded (``study`` is its merged study; None
    #: where no scan ran) and the claim's contests built from the unmerged study (None when
    #: merging changed nothing): the ``evidence_intact`` gate compares the two.
    evidence: EvidenceScan | None = None
    unmerged_contests: ContestTable | None = None

    @property
    def contest_method(self) -> str:
        """The interval a check recomputes on part of the claim's contests (a family, a judge, the
        invalid verdicts scored either way): the bar gate's, except for a claim about the recipe
        (``new_seeds``), whose gate reads every seed: then the policy seed's new-vignette interval
        (:meth:`honestci.audit.policy.Policy.contest_method`)."""
        return self.claim.policy.contest_method(self.claim.spec.population)
