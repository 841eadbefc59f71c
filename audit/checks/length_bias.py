"""Length and style bias of the judge on the claim's contests, and the length-controlled win rate.

The contest scores of the claim (invalid verdicts scored as the policy says) are regressed on the
length (and markdown style) difference between the policy's and the opponent's answers by
:func:`honestci.audit.stats.judge_error.length_bias.length_bias`; the ``length_bias`` gate reads the judge's
length effect (the win-rate change when the policy's answer is one sd longer) against the policy's
``length_bias_tolerance``. Without answer texts (or lengths that never differ) the effect is not
identifiable and the gate is INCONCLUSIVE.

A length effect is an association: longer answers may also be better. It is a judge bias only in
so far as length does not carry quality; the length-controlled win rate answers AlpacaEval 2.0's
counterfactual question ("what would the judge prefer at equal length?") and is shown beside the
raw rate, never gated on.

Validated against: statsmodels' clustered GLM (through the stats module) and the published
AlpacaEval 2.0 figures (``tests/test_length_bias.py``, docs/methods.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.data.contests import ContestTable
from honestci.audit.data.io import Study
from honestci.audit.errors import InputError
from honestci.audit.policy import THRESHOLDS
from honestci.audit.stats.judge_error.length_bias import LengthBiasResult, length_bias_from_counts, style_counts


def length_bias_from_contests(
    contests: ContestTable,
    responses: pd.DataFrame,
    *,
    invalid: str = "against_claim",
    kept: pd.DataFrame | None = None,
    level: float = THRESHOLDS.confidence_level,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> LengthBiasResult:
    """:func:`honestci.audit.stats.judge_error.length_bias.length_bias_from_counts` on ``contests`` (scored by
    ``invalid``), with the answers' texts from the ``responses`` table (response_id, text), each
    distinct answer's :func:`~honestci.audit.stats.judge_error.length_bias.style_counts` counted once.

    ``kept``: covariates kept at their observed values, one row per scored contest (e.g.
    :func:`honestci.audit.stats.judge_error.length_bias.instruction_difficulty` mapped to each contest's vignette).
    """
    scored = contests.scores("both_orders", invalid=invalid)
    # Each distinct answer counted once (a response meets many opponents), then gathered per contest.
    factorized = [
        pd.factorize(scored.frame[column], use_na_sentinel=False) for column in ("policy_response", "opponent_response")
    ]
    ids = pd.Index(responses["response_id"])
    rows = [ids.get_indexer(judged) for _, judged in factorized]
    missing = sorted({str(r) for (_, judged), at in zip(factorized, rows) for r in judged[at < 0]})
    if missing:
        raise InputError(
            f"{len(missing)} response(s) of the contests have no row in the responses table (e.g. {missing[0]}).",
            fix="give every judged response its text in the responses table",
        )
    texts = responses["text"]
    sides = []
    for (codes, _), at in zip(factorized, rows):
        counts = style_counts(texts.iloc[at].fillna("").tolist())
        sides.append(pd.DataFrame(counts.to_numpy()[codes], columns=counts.columns))
    return length_bias_from_counts(
        scored.values,
        scored.clusters,
        sides[0],
        sides[1],
        policy=contests.policy,
        opponent=contests.opponent,
        judge=contests.judge,
        kept=kept,
        level=level,
        min_clusters=min_clusters,
    )


@dataclass(frozen=True)
class LengthBiasCheck:
    """The claim judge's length-bias result and the tolerance the gate reads it against."""

    result: LengthBiasResult
    tolerance: float

    def report_section(self) -> ReportSection:
        lines = [
            *self.result.summary_lines(),
            f"tolerance on the length effect: ±{self.tolerance:.2f} (win-rate change for a one-sd longer answer)",
            "the length effect is an association (longer answers may be better); the controlled rates are "
            "counterfactual predictions at equal length and style, shown beside the raw rate, never gated on",
        ]
        table = tuple(
            {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in self.result.to_frame().to_dict(orient="records")
        )
        return ReportSection("length_bias", "Length and style bias of the judge", tuple(lines), table)


def length_bias_check(context: AuditContext) -> LengthBiasCheck | None:
    """The judge's length and style bias on the claim's contests (None before anything is judged)."""
    contests = context.contests
    if contests is None:
        return None
    thresholds = context.claim.thresholds
    result = length_bias_from_contests(
        contests,
        context.study.responses.frame,
        invalid=context.claim.policy.invalid_verdicts,
        level=thresholds.confidence_level,
        min_clusters=thresholds.min_clusters,
    )
    return LengthBiasCheck(result, thresholds.length_bias_tolerance)


def verbosity_family(system: str) -> str:
    """AlpacaEval's naming of verbosity-prompted variants: ``m_concise`` and ``m_verbose`` are ``m``."""
    for suffix in ("_concise", "_verbose"):
        if system.endswith(suffix):
            return system.removesuffix(suffix)
    return system


def controlled_winrate_table(
    study: Study | Mapping[str, Any],
    systems: list[str],
    opponent: str,
    *,
    judge: str | None = None,
    invalid: str = "against_claim",
    difficulty: bool = True,
    level: float = THRESHOLDS.confidence_level,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> pd.DataFrame:
    """Raw, length-controlled and style-controlled win rate of each of ``systems`` against ``opponent``
    (``study``: a loaded study, or its tables by name as the check commands hold them).

    With ``difficulty`` each system's GLM keeps a per-vignette term estimated from the *other*
    systems' scores on the same vignettes (:func:`honestci.audit.stats.judge_error.length_bias.instruction_difficulty`;
    variants of the same model by :func:`verbosity_family` are left out too), in the place of
    AlpacaEval 2.0's instruction difficulty, which is not published with its data.
    One row per system: raw, lc (with CI), sc (with CI), length_effect (with CI), the length
    coefficient, n and G.
    """
    from honestci.audit.data.contests import build_contests
    from honestci.audit.stats.judge_error.length_bias import instruction_difficulty

    responses = (study["responses"] if isinstance(study, Mapping) else study.responses).frame
    contests = {s: build_contests(study, s, opponent, judge=judge, single_order="exclude") for s in systems}
    scores = {}
    for system, table in contests.items():
        frame = table.scores("both_orders", invalid=invalid).to_frame()
        scores[system] = pd.Series(frame["score"].to_numpy(float), index=frame["vignette_id"].to_numpy())
    rows = []
    for system, table in contests.items():
        kept = None
        others = {s: v for s, v in scores.items() if verbosity_family(s) != verbosity_family(system)}
        if difficulty and others:
            frame = table.scores("both_orders", invalid=invalid).to_frame()
            term = instruction_difficulty(others).reindex(frame["vignette_id"].to_numpy())
            # A vignette no other system was scored on gets the mean difficulty (no information).
            kept = pd.DataFrame({"difficulty": term.fillna(term.mean()).to_numpy(float)})
        result = length_bias_from_contests(
            table, responses, invalid=invalid, kept=kept, level=level, min_clusters=min_clusters
        )
        row: dict[str, object] = {"system": system, "n": result.n, "n_clusters": result.n_clusters}
        if result.length is not None:
            row |= {"raw": result.length.raw, "length_coef": float(result.length.fit.coef[1])}
            for key, estimate in (
                ("lc", result.length.controlled),
                ("sc", None if result.style is None else result.style.controlled),
                ("length_effect", result.length.length_effect),
            ):
                if estimate is not None:
                    row |= {key: estimate.estimate, f"{key}_low": estimate.ci_low, f"{key}_high": estimate.ci_high}
        else:
            row["note"] = result.note
        rows.append(row)
    return pd.DataFrame(rows)
