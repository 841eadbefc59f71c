"""Populations beyond the eval vignettes: the policy's win rate by vignette family, and the transfer gap.

When the claim's contests lie on vignettes of two or more families (the vignettes' ``family``
column), this check reports, for each family, its equal-vignette-weight win rate with the interval
the policy's bar gate reads for the claim's population (:meth:`honestci.audit.policy.Policy.gate_method`),
computed from that family's contests alone, and the family's gap to the other vignettes,
θ_rest − θ_family, with the vignette-clustered CR2 interval of
:func:`honestci.audit.stats.frequentist.populations.transfer_gap`.

A claim restricted to families (``family:``/``families:``) is audited on those families' contests
only (:func:`honestci.audit.pipeline.audit_context`): its interval never borrows the other
vignettes' strength. The section then also gives the ``transfer`` figure: θ_other − θ_claimed, the
rate the policy loses when it leaves the other vignettes for the claim's families. These figures
are computed here from the data; none is read from the claim, and none is gated on.

Validated against: tests/test_populations.py (the per-family rows equal :func:`winrate_ci` and
:func:`transfer_gap` called directly on each family's contests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.errors import EstimationError
from honestci.audit.stats.estimands import unique_inverse, vignette_means
from honestci.audit.stats.frequentist.populations import TransferGap, vignette_transfer_gap
from honestci.audit.stats.frequentist.winrate import winrate_ci
from honestci.audit.stats.intervals import IntervalResult

#: Family label of vignettes whose ``family`` is missing.
NO_FAMILY = "(no family)"


@dataclass(frozen=True)
class FamilyRow:
    """One family: its gate interval and its gap to the other vignettes (None with < 2 vignettes on a side)."""

    family: str
    n_vignettes: int
    n_contests: int
    interval: IntervalResult
    gap: TransferGap | None
    in_claim: bool


@dataclass(frozen=True)
class PopulationsCheck:
    """The policy's win rate by vignette family and the transfer gap of a family-restricted claim."""

    population: str
    gate_method: str
    level: float
    families: tuple[FamilyRow, ...]
    #: The claim's families (None: the claim covers every vignette).
    claim_families: tuple[str, ...] | None
    #: θ_other − θ_claimed for a family-restricted claim (None otherwise, or with < 2 vignettes a side).
    transfer: TransferGap | None

    def table(self) -> tuple[dict, ...]:
        rows = []
        for row in self.families:
            interval, gap = row.interval, row.gap
            rows.append(
                {
                    "family": row.family,
                    "in_claim": row.in_claim,
                    "vignettes": row.n_vignettes,
                    "contests": row.n_contests,
                    "estimate": interval.estimate,
                    "ci_low": interval.ci_low,
                    "ci_high": interval.ci_high,
                    "interval": interval.method,
                    "gap_rest_minus_family": None if gap is None else gap.estimate,
                    "gap_ci_low": None if gap is None else gap.ci_low,
                    "gap_ci_high": None if gap is None else gap.ci_high,
                    "gap_df": None if gap is None else gap.df,
                }
            )
        return tuple(rows)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(list(self.table()))

    def summary_lines(self) -> list[str]:
        pct = f"{self.level:.0%}"
        scope = (
            f"the claim's population: {self.population.replace('_', ' ')} of famil"
            f"{'y' if len(self.claim_families) == 1 else 'ies'} {', '.join(self.claim_families)}; only their "
            "vignettes' contests are its evidence"
            if self.claim_families
            else f"the claim's population: {self.population.replace('_', ' ')} of every family below, pooled"
        )
        lines = [
            scope,
            f"each family's rate weights its vignettes equally; its {pct} interval is the bar gate's "
            f"({self.gate_method}) on that family's contests alone",
            f"gap: the other vignettes' rate minus the family's, CR2 clustered by vignette with Satterthwaite df "
            f"({pct}); shown, never gated",
        ]
        if self.transfer is not None:
            t = self.transfer
            lines.append(
                f"transfer: {t.label_in} {t.rate_in:.3f} − {t.label_fresh} {t.rate_fresh:.3f} = {t.estimate:+.3f}, "
                f"{pct} CI [{t.ci_low:+.3f}, {t.ci_high:+.3f}] (df {t.df:.1f}; {t.n_vignettes_in} and "
                f"{t.n_vignettes_fresh} vignettes)"
            )
        return lines

    def report_section(self) -> ReportSection:
        return ReportSection(
            "populations", "Populations: win rate by vignette family", tuple(self.summary_lines()), self.table()
        )


def _gap(rates, vignettes, fresh, level: float, label_in: str, label_fresh: str) -> TransferGap | None:
    try:
        return vignette_transfer_gap(rates, vignettes, fresh, level, label_in=label_in, label_fresh=label_fresh)
    except EstimationError:
        return None


def populations_check(context: AuditContext) -> PopulationsCheck | None:
    """Per-family table and transfer gap; None when the contests lie on vignettes of fewer than two families."""
    contests = context.contests if context.family_contests is None else context.family_contests
    vignettes = context.study.vignettes.frame
    if contests is None or "family" not in vignettes:
        return None
    claim, rules = context.claim, context.claim.policy
    scored = contests.scores("both_orders", invalid=rules.invalid_verdicts)
    family_of = dict(zip(vignettes["vignette_id"], vignettes["family"].fillna(NO_FAMILY)))
    scores = scored.values
    labels, codes = unique_inverse(scored.clusters)
    families_of_labels = np.array([str(family_of.get(v, NO_FAMILY)) for v in labels])
    # the vignettes as their codes in sorted-label order: every method below groups by np.unique,
    # whose order the codes keep (the same figures, without sorting a million labels each time)
    clusters = codes
    names = sorted(set(families_of_labels.tolist()))  # every vignette has contests
    if len(names) < 2:
        return None
    # each contest's family as its index in ``names``: a million integers compared per family, not strings
    family_of_contest = np.searchsorted(names, families_of_labels)[codes]
    level = claim.thresholds.confidence_level
    claimed = claim.spec.vignette_families
    # Every gap splits the same vignettes: their rates are computed once (the vignettes as their
    # codes, as transfer_gap would label them), and each split is a mask over them.
    rates, vignette_codes = vignette_means(scores, clusters).means, np.arange(labels.size)
    rows = []
    for index, name in enumerate(names):
        inside = family_of_contest == index
        in_family = families_of_labels == name
        interval = winrate_ci(
            scores[inside],
            clusters[inside],
            method=context.contest_method,
            level=level,
            seed=context.seed,
            thresholds=claim.thresholds,
            trials_per_contest=contests.trials_per_contest,
        )
        rows.append(
            FamilyRow(
                family=name,
                n_vignettes=int(in_family.sum()),
                n_contests=int(inside.sum()),
                interval=interval,
                gap=_gap(rates, vignette_codes, in_family, level, "other vignettes", name),
                in_claim=claimed is None or name in claimed,
            )
        )
    transfer = None
    if claimed is not None:
        in_claim = np.isin(families_of_labels, claimed)
        if not in_claim.all():
            transfer = _gap(rates, vignette_codes, in_claim, level, "other vignettes", ", ".join(claimed))
    return PopulationsCheck(
        population=claim.spec.population,
        gate_method=context.contest_method,
        level=level,
        families=tuple(rows),
        claim_families=claimed,
        transfer=transfer,
    )
