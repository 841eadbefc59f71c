"""Judge calibration against human preferences: agreement, kappa, alpha, the human ceiling.

Unit of analysis. An *item* is an unordered pair of responses {a, b} of one vignette with human
preferences. Each presentation order the judge saw is one judged row of that item (both-order
verdicts give two rows per item), so agreement is the share of judged orders that name the
human-preferred response. Every interval clusters by vignette (prompt).

Preferences are coded on an ordered scale: ``+1`` a preferred, ``0`` tie, ``-1`` b preferred,
NaN missing. The verdict → preferred mapping
(:func:`honestci.audit.checks.calibration_items.verdict_to_preference`):

==========  =======================  ==========
verdict     preferred response       code
==========  =======================  ==========
first       ``response_first``       +1 if it is a, -1 if it is b
second      ``response_second``      +1 if it is a, -1 if it is b
tie         none                     0
invalid     none (a failed verdict)  by ``invalid_as`` (below)
==========  =======================  ==========

Invalid verdicts (unparseable, refused, empty) are rows with a status, never dropped silently.
``invalid_as`` (:data:`honestci.audit.checks.calibration_items.INVALID_AS`, the calibration reading of
the audit policy's ``invalid_verdicts``, :data:`honestci.audit.policy.INVALID_SCORING`) says how they count:

- ``"disagreement"`` (default, conservative; policy ``against_claim``): code
  :data:`honestci.audit.checks.calibration_items.INVALID_CODE`, a judge class of its own that
  matches no human class. It counts as a disagreement in every agreement figure and in accuracy,
  and in kappa as a fourth judge row with weight 0 against every human class (the table is 4 x 3).
  This reproduces published tables that count parse failures as wrong.
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

Modules: the codes, items and judged rows in :mod:`honestci.audit.checks.calibration_items`; every
agreement figure (agreement, accuracy, kappa, alpha, the ceiling) in
:mod:`honestci.audit.checks.calibration_agreement`; choosing among judges in
:mod:`honestci.audit.checks.judge_selection`; here, one judge's calibration and the audit check.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import pandas as pd

from honestci.audit.checks.calibration_agreement import (
    TIE_POLICIES,
    AlphaResult,
    ClassificationMetrics,
    agreement_ci,
    agreement_indicator,
    classification_metrics,
    cohen_kappa,
    compare_judges,
    human_ceiling,
    krippendorff_alpha,
    leave_one_rater_out,
    stacked_difference,
)
from honestci.audit.checks.calibration_items import (
    INVALID_AS_FROM_POLICY,
    TIE,
    CalibrationItems,
    calibration_items,
    check_invalid_as,
    contest_human_scores,
    judged_rows,
    judges_other_than,
    pair_key,
)
from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.checks.judge_selection import JudgeSelection, select_unbiased_judge
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import DEFAULT_SEED, GATE_TIE_POLICY, THRESHOLDS
from honestci.audit.stats.frequentist.clustered_estimate import (
    DEFAULT_BOOTSTRAP_DRAWS,
    ESTIMATE_COLUMNS,
    ClusteredEstimate,
)
from honestci.audit.stats.intervals import RATE_SPACE

if TYPE_CHECKING:
    from honestci.audit.policy import Thresholds
    from honestci.audit.stats.judge_error.ppi import PPIResult


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
    check_invalid_as(invalid_as)
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
    agreement, kappa, weighted = _agreement_figures(judge, rows, seed, common)
    per_item = (~np.isnan(items.rater_codes)).sum(axis=1)
    max_raters_per_item = int(per_item.max()) if per_item.size else 0
    keep_j, agree_j = agreement_indicator(rows["judge_code"], rows["human"], GATE_TIE_POLICY)
    gate_agreement = (agree_j, rows["vignette_id"].to_numpy()[keep_j])
    alpha = ceiling = gap = None
    if max_raters_per_item >= 2:
        alpha, ceiling, gap = _human_ceiling_figures(judge, items, gate_agreement, split, seed, common)
    if other_judges is None:
        other_judges = judges_other_than(judgments, judge)
    comparisons, candidates, rows_by_judge = _other_judge_figures(
        judge, rows, gate_agreement, items, judgments, other_judges, invalid_as, seed, common
    )
    selection, excluded = select_unbiased_judge(
        candidates, rows_by_judge, items, thresholds=thresholds, level=level, seed=seed, min_clusters=min_clusters
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
        n_raters=int(items.rater_codes.shape[1]),
        max_raters_per_item=max_raters_per_item,
        agreement=agreement,
        metrics=classification_metrics(rows["judge_code"], rows["human"]),
        kappa=kappa,
        weighted_kappa=weighted,
        alpha=alpha,
        ceiling=ceiling,
        gap_to_ceiling=gap,
        comparisons=comparisons,
        selection=selection,
        ppi=None,
        level=level,
        seed=seed,
        position_bias_excluded=excluded,
    )


def _agreement(judge: str, rows: pd.DataFrame, ties: str, seed: int, common: _IntervalOptions) -> ClusteredEstimate:
    """A judge's agreement with the human reference on its judged rows under the tie policy ``ties``."""
    return agreement_ci(
        rows["judge_code"],
        rows["human"],
        rows["vignette_id"],
        ties=ties,
        rng=seed,
        name=f"{judge} agreement ({ties})",
        **common,
    )


def _agreement_figures(
    judge: str, rows: pd.DataFrame, seed: int, common: _IntervalOptions
) -> tuple[tuple[ClusteredEstimate, ...], ClusteredEstimate, ClusteredEstimate]:
    """The judge's agreement under each tie policy (:data:`TIE_POLICIES` order), its kappa and linear weighted kappa."""
    agreement = tuple(_agreement(judge, rows, t, seed, common) for t in TIE_POLICIES)
    kappa = cohen_kappa(rows["judge_code"], rows["human"], rows["vignette_id"], rng=seed, **common)
    weighted = cohen_kappa(rows["judge_code"], rows["human"], rows["vignette_id"], weights="linear", rng=seed, **common)
    return agreement, kappa, weighted


def _human_ceiling_figures(
    judge: str,
    items: CalibrationItems,
    gate_agreement: tuple[np.ndarray, np.ndarray],
    split: str,
    seed: int,
    common: _IntervalOptions,
) -> tuple[AlphaResult | None, ClusteredEstimate, ClusteredEstimate]:
    """Krippendorff's alpha across the raters, the human ceiling, and the judge minus the ceiling.

    ``gate_agreement``: the judge's agreement indicators under :data:`GATE_TIE_POLICY` and the
    vignette of each. Needs two or more raters on some item.
    """
    level, bootstrap_draws, min_clusters = common["level"], common["bootstrap_draws"], common["min_clusters"]
    clusters = items.items["vignette_id"].to_numpy()
    try:
        alpha = krippendorff_alpha(items.rater_codes, clusters, level=level, rng=seed, bootstrap_draws=bootstrap_draws)
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
    agree_j, vignettes_j = gate_agreement
    gap = stacked_difference(
        agree_j,
        vignettes_j,
        agree_h,
        np.repeat(clusters, items.rater_codes.shape[1])[keep_h],
        f"{judge} minus human ceiling",
        level=level,
        min_clusters=min_clusters,
    )
    return alpha, ceiling, gap


def _other_judge_figures(
    judge: str,
    rows: pd.DataFrame,
    gate_agreement: tuple[np.ndarray, np.ndarray],
    items: CalibrationItems,
    judgments,
    other_judges: tuple[str, ...],
    invalid_as: str,
    seed: int,
    common: _IntervalOptions,
) -> tuple[tuple[tuple[str, ClusteredEstimate, ClusteredEstimate], ...], dict[str, tuple], dict[str, pd.DataFrame]]:
    """Each other judge's agreement and the paired difference on the judged orders both judged.

    Returns the comparisons, the selection candidates (judge → its agreement indicators under
    :data:`GATE_TIE_POLICY` and the vignette of each; ``judge`` first, as ``gate_agreement``) and
    each candidate's judged rows. A judge with no verdict on the items is left out.
    """
    mine = _agree_series(rows, GATE_TIE_POLICY)
    comparisons, candidates = [], {judge: gate_agreement}
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
                _agreement(other, other_rows, GATE_TIE_POLICY, seed, common),
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
    return tuple(comparisons), candidates, rows_by_judge


def ppi_winrate(
    contests, items: CalibrationItems, *, level: float = 0.95, min_clusters: int = THRESHOLDS.min_clusters
) -> PPIResult | None:
    """PPI++ win rate of the contests' policy on the human-preference scale (clustered by vignette).

    Y = :func:`contest_human_scores` (on contests with a human reference); f = the judge's
    both-order contest score. Labelled: contests with a human reference; unlabelled: the rest.
    None when no contest has a human reference.
    """
    from honestci.audit.stats.judge_error.ppi import ppi_mean_clustered

    scored = contests.scores("both_orders").frame  # carries each contest's policy and opponent responses
    keys = pair_key(scored["vignette_id"], scored["policy_response"], scored["opponent_response"])
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
    return replace(result, ppi=ppi_winrate(contests, items, level=level, min_clusters=thresholds.min_clusters))
