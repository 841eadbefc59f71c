"""Many systems and families of comparisons: the policy ranked among the claim's ``systems``, and
every claimed comparison tested with the policy's multiplicity control.

When the claim lists ``systems:`` (other systems judged against the same opponent on the same
vignettes), or claims two or more comparisons, this check runs the K-system analysis of
:mod:`honestci.audit.stats.selection.systems` on the policy and those systems against the claim's opponent,
judged by the claim's judge and scored as the policy says:

- win rates with CR2 intervals clustered by vignette, simultaneous intervals and rank intervals
  (Klein, Wright & Wieczorek 2020) from the simultaneous procedure: Holm-adjusted CR2 t tests, or
  the max-|t| wild cluster bootstrap when the policy's ``multiplicity`` is ``maxt``;
- Bradley–Terry strengths of the same battles with their clustered intervals;
- the length-controlled win rate of each system (AlpacaEval 2.0's GLM with a per-vignette
  difficulty term from the other systems, :func:`honestci.audit.checks.length_bias.controlled_winrate_table`)
  when the responses carry texts.

The **family** is what the card claims: each ``claimed.comparisons`` entry ("beats X"), and with
``claimed.best_of_systems`` the policy against every listed system. Each member is the paired,
vignette-clustered difference θ_policy − θ_X from the stacked CR2 fit, its two-sided p-value
adjusted over the family by the policy's procedure (Holm 1979, family-wise; Benjamini–Hochberg
1995, false discovery rate; ``maxt``: the single-step max-|t| adjusted p over every pair of the
systems, family-wise and simultaneous). A member holds when its adjusted p ≤ 1 − level and the
difference favours the policy. The ``multiple_comparisons`` gate FAILs when a member does not hold,
and names those that clear 0 alone but not after the correction: an uncorrected best-of-many
reading. Choosing the policy as the best of K systems on the same data also inflates its own win
rate: with ``best_of_systems`` the winner of the K win rates gets Andrews–Kitagawa–McCloskey
inference (audit/checks/selection.py, on the K estimates and their CR2 covariance), and the
``winners_curse`` gate reads its hybrid interval against the bar when no selection pool is given.

Validated against: the stats module's tests (statsmodels' clustered GLM, ``multipletests``,
seeded family-wise error and coverage simulations in tests/test_systems.py); this layer's tests
(tests/test_systems_check.py) compare its family table with those functions called directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.checks.length_bias import controlled_winrate_table
from honestci.audit.checks.selection import WinnerInference, best_of_k_inference
from honestci.audit.data.contests import build_contests
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.selection.systems import (
    KSystemResult,
    benjamini_hochberg,
    bradley_terry,
    holm,
    k_system_winrates,
)

#: Draws of the max-|t| wild cluster bootstrap when the policy's multiplicity is ``maxt``.
MAXT_DRAWS = 1999
PROCEDURE_NAMES = {
    "holm": "Holm (family-wise)",
    "bh": "Benjamini–Hochberg (false discovery rate)",
    "maxt": "max-|t| wild cluster bootstrap (family-wise, simultaneous over every pair)",
}


@dataclass(frozen=True)
class FamilyMember:
    """One claimed comparison of the policy with another system, inside its family."""

    against: str
    #: "comparison" (a ``claimed.comparisons`` entry) or "best_of_systems".
    source: str
    estimate: float
    ci_low: float
    ci_high: float
    p: float
    p_adjusted: float
    holds: bool
    holds_uncorrected: bool


@dataclass(frozen=True)
class SystemsCheck:
    """The K-system analysis around the claim's policy and the test of its claimed family."""

    policy: str
    opponent: str
    multiplicity: str
    level: float
    winrates: KSystemResult
    strengths: KSystemResult
    #: Raw and length-controlled win rate per system (empty without answer texts).
    controlled: tuple[dict, ...]
    controlled_note: str | None
    family: tuple[FamilyMember, ...]
    best_of_systems: bool
    #: With ``best_of_systems``: AKM inference on the best of the K win rates (the winner's curse).
    selection: WinnerInference | None = None

    def table(self) -> tuple[dict, ...]:
        """One row per system: win rate with its CR2 and simultaneous intervals, rank interval,
        Bradley–Terry strength and (with texts) the length-controlled rate."""
        rates = self.winrates.to_frame().set_index("system")
        strengths = self.strengths.to_frame().set_index("system")
        controlled = {row["system"]: row for row in self.controlled}
        simultaneous = _simultaneous_against(self.winrates, self.policy)
        rows = []
        for system in rates.sort_values("estimate", ascending=False).index:
            rate, strength = rates.loc[system], strengths.loc[system]
            low, high = int(rate["rank_low"]), int(rate["rank_high"])
            row: dict = {
                "system": system,
                "G": int(rate["n_vignettes"]),
                "win_rate": float(rate["estimate"]),
                "ci_low": float(rate["ci_low"]),
                "ci_high": float(rate["ci_high"]),
                "rank": f"{int(rate['rank'])} ({low}–{high})" if low != high else str(low),
                "strength": float(strength["estimate"]),
                "strength_low": float(strength["ci_low"]),
                "strength_high": float(strength["ci_high"]),
            }
            if system in simultaneous:
                row["vs_policy"], row["vs_policy_low"], row["vs_policy_high"] = simultaneous[system]
            lc = controlled.get(system, {})
            if "lc" in lc:
                row["lc_win_rate"], row["lc_low"], row["lc_high"] = lc["lc"], lc["lc_low"], lc["lc_high"]
            rows.append(row)
        return tuple(rows)

    def family_frame(self) -> pd.DataFrame:
        return pd.DataFrame([m.__dict__ for m in self.family])

    def summary_lines(self) -> list[str]:
        k = len(self.winrates.systems)
        decided = int((self.winrates.pairs["decision"] != "?").sum())
        lines = [
            f"{k} systems against {self.opponent} on shared vignettes; win rates with CR2 intervals clustered by "
            f"vignette at level {self.level:g}; rank intervals (1 = best) from "
            f"{'the max-|t| wild cluster bootstrap' if self.winrates.simultaneous == 'maxt' else 'Holm-adjusted CR2 t tests'}: "
            f"{decided} of {len(self.winrates.pairs)} pairs of systems decided",
            "strength: Bradley–Terry log-odds against the opponent (0), clustered CR2 interval; "
            "vs policy: the policy's win rate minus the system's, with its simultaneous interval",
        ]
        if self.controlled:
            lines.append(
                "LC win rate: AlpacaEval 2.0's length-controlled rate (the judge's predicted preference at equal "
                "length, with a per-vignette difficulty from the other systems), never gated on; where a system's "
                "answers are seldom near the opponent's length it is an extrapolation, and its interval shows it"
            )
        elif self.controlled_note:
            lines.append(f"no length-controlled rates: {self.controlled_note}")
        if not self.family:
            lines.append("no family of comparisons is claimed: the table describes, it does not gate")
            return lines
        lines.append(
            f"claimed family ({len(self.family)} comparisons), corrected by {PROCEDURE_NAMES[self.multiplicity]} "
            "as the policy says:"
        )
        for m in self.family:
            state = "holds" if m.holds else "does NOT hold"
            if m.holds_uncorrected and not m.holds:
                state += " (clears 0 alone: an uncorrected reading)"
            lines.append(
                f"{self.policy} − {m.against}: {m.estimate:+.3f} [{m.ci_low:+.3f}, {m.ci_high:+.3f}], "
                f"p {m.p:.3g}, adjusted p {m.p_adjusted:.3g}: {state}"
            )
        if self.best_of_systems:
            rank = self.winrates.to_frame().set_index("system").loc[self.policy]
            lines.append(
                f"claimed best of {k} systems: the family above tests it (the policy against each system); its "
                f"rank interval {int(rank['rank_low'])}–{int(rank['rank_high'])} is joint over all {k} ranks, so "
                "every pair is corrected there and it can be wider"
            )
        if self.selection is not None:
            sel = self.selection
            lines.append(
                f"the best of the {k} on these contests is {sel.winner}: naive {sel.naive_estimate:.3f} "
                f"[{sel.naive_ci[0]:.3f}, {sel.naive_ci[1]:.3f}] is a selected maximum; corrected for the selection "
                f"(AKM hybrid, the winners_curse gate reads it against the bar): {sel.hybrid_estimate:.3f} "
                f"[{sel.hybrid_ci[0]:.3f}, {sel.hybrid_ci[1]:.3f}]"
            )
        return lines

    def report_section(self) -> ReportSection:
        return ReportSection(
            "systems", "Systems compared and the claimed family", tuple(self.summary_lines()), self.table()
        )


def _simultaneous_against(result: KSystemResult, policy: str) -> dict[str, tuple[float, float, float]]:
    """The policy's win rate minus each other system's, with the simultaneous interval."""
    out = {}
    for row in result.pairs.itertuples():
        if policy not in (row.system_a, row.system_b):
            continue
        sign = 1.0 if row.system_a == policy else -1.0
        other = row.system_b if sign > 0 else row.system_a
        low, high = sorted((sign * row.sim_low, sign * row.sim_high))
        out[str(other)] = (sign * float(row.estimate), float(low), float(high))
    return out


def claimed_family(
    result: KSystemResult, policy: str, members: list[tuple[str, str]], multiplicity: str, level: float
) -> tuple[FamilyMember, ...]:
    """The claimed family's members, each with its p-value adjusted over the family.

    ``members``: (other system, source) pairs. Holm and BH adjust the members' CR2 p-values over the
    family (m = its size); ``maxt`` takes the single-step max-|t| adjusted p over every pair of
    ``result`` (computed with ``simultaneous="maxt"``).
    """
    pairs = result.pairs
    rows = []
    for other, source in members:
        match = pairs[
            ((pairs.system_a == policy) & (pairs.system_b == other))
            | ((pairs.system_a == other) & (pairs.system_b == policy))
        ].iloc[0]
        sign = 1.0 if match.system_a == policy else -1.0
        low, high = sorted((sign * match.ci_low, sign * match.ci_high))
        rows.append((other, source, sign * float(match.estimate), low, high, float(match.p), match))
    p = np.array([r[5] for r in rows])
    if multiplicity == "holm":
        adjusted = holm(p)
    elif multiplicity == "bh":
        adjusted = benjamini_hochberg(p)
    else:
        adjusted = np.array([float(r[6].p_simultaneous) for r in rows])
    alpha = 1 - level
    return tuple(
        FamilyMember(
            other,
            source,
            estimate,
            float(low),
            float(high),
            p_raw,
            float(p_adj),
            holds=bool(p_adj <= alpha and estimate > 0),
            holds_uncorrected=bool(p_raw <= alpha and estimate > 0),
        )
        for (other, source, estimate, low, high, p_raw, _), p_adj in zip(rows, adjusted)
    )


def systems_check(context: AuditContext) -> SystemsCheck | None:
    """The K-system analysis and the claimed family (module doc); None when the claim lists no
    ``systems`` and claims fewer than two comparisons, or before anything is judged."""
    spec, contests = context.claim.spec, context.contests
    comparisons = spec.claimed.comparisons if spec.claimed else ()
    if contests is None or (not spec.systems and len(comparisons) < 2):
        return None
    if contests.panel:
        raise EstimationError(
            f"the K-system analysis of a panel ({', '.join(contests.panel)}) is not implemented; "
            "compare the systems per judge with `honestci compare`"
        )
    best = bool(spec.claimed and spec.claimed.best_of_systems)
    members = [(c.against, "comparison") for c in comparisons]
    members += [(s, "best_of_systems") for s in spec.systems or () if best and s not in {m for m, _ in members}]
    others = list(dict.fromkeys([*(spec.systems or ()), *(c.against for c in comparisons)]))
    invalid = context.claim.policy.invalid_verdicts
    thresholds = context.claim.thresholds
    scores = claim_system_scores(context, [spec.policy, *others], "system")
    multiplicity = context.claim.policy.multiplicity
    options: dict[str, Any] = {
        "level": thresholds.confidence_level,
        "simultaneous": "maxt" if multiplicity == "maxt" else "holm",
        "B": MAXT_DRAWS,
        "rng": context.seed,
        "min_clusters": thresholds.min_clusters,
    }
    winrates = k_system_winrates(scores, opponent=spec.opponent, **options)
    battles = scores.rename(columns={"system": "system_a"})
    strengths = bradley_terry(battles.assign(system_b=spec.opponent), reference=spec.opponent, **options)
    controlled: tuple[dict, ...] = ()
    note = None
    try:
        frame = controlled_winrate_table(
            context.study,
            [spec.policy, *others],
            spec.opponent,
            judge=contests.judge,
            invalid=invalid,
            level=thresholds.confidence_level,
            min_clusters=thresholds.min_clusters,
        )
        controlled = tuple(frame.to_dict(orient="records")) if "lc" in frame else ()
        note = None if controlled else "the answers' lengths never differ, or the responses carry no texts"
    except (InputError, EstimationError) as exc:
        note = getattr(exc, "message", str(exc))
    selection = None
    if best:
        selection = best_of_k_inference(winrates, level=thresholds.confidence_level, seed=context.seed)
    return SystemsCheck(
        spec.policy,
        spec.opponent,
        multiplicity,
        thresholds.confidence_level,
        winrates,
        strengths,
        controlled,
        note,
        claimed_family(winrates, spec.policy, members, multiplicity, thresholds.confidence_level)
        if best or len(members) >= 2
        else (),
        best,
        selection,
    )


def claim_system_scores(context: AuditContext, systems: Sequence[str], kind: str) -> pd.DataFrame:
    """Contest scores of each of ``systems`` against the claim's opponent, on the claim's vignettes,
    judged by the claim's judge and scored as the policy says (the claim's own contests for its
    policy), one frame with ``system``, ``vignette_id``, ``score``, in the order of ``systems``.

    ``kind`` names the systems in an error ("system", "seed"). Raises
    :class:`~honestci.audit.errors.EstimationError` when a system's contests cannot be assembled.
    """
    spec, contests = context.claim.spec, context.contests
    assert contests is not None  # the callers return before anything is judged
    invalid = context.claim.policy.invalid_verdicts
    vignettes = set(contests.scores("both_orders", invalid=invalid).clusters)
    frames = []
    for system in systems:
        table = contests
        if system != spec.policy:
            try:
                table = build_contests(
                    context.study,
                    system,
                    spec.opponent,
                    judge=contests.judge,
                    single_order=context.claim.policy.missing_orders,
                )
            except InputError as exc:
                raise EstimationError(f"{kind} {system} against {spec.opponent}: {exc.message}") from None
        frame = table.scores("both_orders", invalid=invalid).to_frame()[["vignette_id", "score"]]
        frames.append(frame[frame["vignette_id"].isin(vignettes)].assign(system=system))
    return pd.concat(frames, ignore_index=True)
