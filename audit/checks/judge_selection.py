"""Choosing one judge among several by agreement with human preferences, reported as a selection.

The choice is made on a seeded split of vignettes and the chosen judge is read on the held-out
rest (:func:`select_judge`); on all vignettes the best judge's agreement carries the winner's
correction (:func:`judge_winner`, AKM hybrid); a candidate whose position-bias gate FAILs on the
calibration items (:func:`judge_position_bias`) is never selected (:func:`select_unbiased_judge`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from honestci.audit.checks.calibration_items import CalibrationItems
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import THRESHOLDS
from honestci.audit.stats.frequentist.clustered_estimate import ClusteredEstimate, clustered_mean
from honestci.audit.stats.intervals import RATE_SPACE
from honestci.audit.stats.random_state import resolve_rng

if TYPE_CHECKING:
    from honestci.audit.checks.position_bias import PositionBiasResult
    from honestci.audit.checks.selection import WinnerInference
    from honestci.audit.policy import Thresholds


# --- judge selection --------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeSelection:
    """Selection of one judge among K candidates by agreement, reported as a selection.

    The chosen judge's agreement on the data it was chosen on is a winner's estimate (biased
    upward); the honest figure is its agreement on the held-out vignettes, which played no part
    in the choice. ``winner`` is the selection on all vignettes, corrected as a winner: the
    Andrews-Kitagawa-McCloskey hybrid interval (:func:`honestci.audit.checks.selection.
    candidate_winner_inference`) for the equal-vignette-weight agreement of the judge with the
    highest agreement (None with ``winner_note`` saying why). ``excluded``: candidates whose
    position-bias gate FAILs on the calibration items, with the reason; they are never selected.
    """

    candidates: tuple[str, ...]
    selected: str
    selection_vignettes: tuple[str, ...]
    heldout_vignettes: tuple[str, ...]
    selection_estimates: dict
    in_sample: ClusteredEstimate
    heldout: ClusteredEstimate
    seed: int | None
    excluded: tuple[tuple[str, str], ...] = ()
    winner: WinnerInference | None = None
    winner_note: str | None = None

    def to_frame(self) -> pd.DataFrame:
        rows = [
            {"judge": judge, "split": "selection", "estimate": value, "selected": judge == self.selected}
            for judge, value in self.selection_estimates.items()
        ]
        rows += [{"judge": judge, "split": "excluded: " + reason, "selected": False} for judge, reason in self.excluded]
        if self.winner is not None:
            rows += [
                {
                    "judge": self.winner.winner,
                    "split": f"all vignettes, {method}",
                    "estimate": estimate,
                    "ci_low": ci_low,
                    "ci_high": ci_high,
                    "selected": True,
                }
                for method, estimate, ci_low, ci_high in self.winner.to_frame()[
                    ["method", "estimate", "ci_low", "ci_high"]
                ].itertuples(index=False)
            ]
        rows.append(
            {
                "judge": self.selected,
                "split": "held-out",
                "estimate": self.heldout.estimate,
                "ci_low": self.heldout.ci_low,
                "ci_high": self.heldout.ci_high,
                "selected": True,
            }
        )
        return pd.DataFrame(rows)

    def text(self) -> str:
        return (
            f"{self.selected} chosen among {len(self.candidates)} judges on {len(self.selection_vignettes)} "
            f"vignette(s) (agreement there {self.selection_estimates[self.selected]:.3f}, a winner's figure, "
            f"biased upward); on {len(self.heldout_vignettes)} held-out vignette(s) it agrees "
            f"{self.heldout.text()} (seed {self.seed})"
            + "".join(f"; {judge} never selected: {reason}" for judge, reason in self.excluded)
            + (
                f"; on all vignettes the best judge is {self.winner.winner}, agreement {self.winner.naive_estimate:.3f} "
                f"(a winner's figure), corrected for the selection among {len(self.winner.candidates)} "
                f"(AKM hybrid) {self.winner.hybrid_estimate:.3f} [{self.winner.hybrid_ci[0]:.3f}, "
                f"{self.winner.hybrid_ci[1]:.3f}]"
                if self.winner is not None
                else f"; no selection-corrected figure: {self.winner_note}"
                if self.winner_note
                else ""
            )
        )


def select_judge(
    agreement_by_judge: dict[str, tuple],
    *,
    heldout_fraction: float = 0.5,
    level: float = 0.95,
    rng: int | np.random.Generator = 0,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> JudgeSelection:
    """Choose the judge with the highest agreement on a seeded split of vignettes; report it on the rest.

    ``agreement_by_judge`` maps each candidate to ``(agree indicators, vignette of each row)``.
    Vignettes (not rows) are split, so held-out rows share no prompt with the selection rows.
    """
    if len(agreement_by_judge) < 2:
        raise InputError("judge selection needs at least two candidate judges.", fix="pass two or more judges")
    if not 0 < heldout_fraction < 1:
        raise InputError(f"heldout_fraction = {heldout_fraction!r} must lie in (0, 1).", fix="use e.g. 0.5")
    generator, seed = resolve_rng(rng)
    vignettes = np.unique(np.concatenate([np.asarray(c).reshape(-1) for _, c in agreement_by_judge.values()]))
    if vignettes.size < 2:
        raise InputError("judge selection needs at least two vignettes to split.", fix="add vignettes")
    shuffled = generator.permutation(vignettes)
    n_heldout = min(max(1, int(round(heldout_fraction * vignettes.size))), vignettes.size - 1)
    heldout, selection = np.sort(shuffled[:n_heldout]), np.sort(shuffled[n_heldout:])
    estimates = {}
    for judge, (agree, clusters) in agreement_by_judge.items():
        agree, clusters = np.asarray(agree, float), np.asarray(clusters).reshape(-1)
        rows = np.isin(clusters, selection)
        estimates[judge] = float(agree[rows].mean()) if rows.any() else float("nan")
    chosen = max(estimates, key=lambda judge: (np.nan_to_num(estimates[judge], nan=-1.0), judge))
    agree, clusters = (np.asarray(x) for x in agreement_by_judge[chosen])
    clusters = clusters.reshape(-1)
    in_sample_rows, heldout_rows = np.isin(clusters, selection), np.isin(clusters, heldout)
    in_sample = _agreement_on(
        agree, clusters, in_sample_rows, f"{chosen} on its selection vignettes", level=level, min_clusters=min_clusters
    )
    held = _agreement_on(
        agree, clusters, heldout_rows, f"{chosen} on held-out vignettes", level=level, min_clusters=min_clusters
    )
    return JudgeSelection(
        tuple(agreement_by_judge),
        chosen,
        tuple(map(str, selection)),
        tuple(map(str, heldout)),
        estimates,
        in_sample,
        held,
        seed,
    )


def _agreement_on(
    agree: np.ndarray, clusters: np.ndarray, rows: np.ndarray, name: str, *, level: float, min_clusters: int
) -> ClusteredEstimate:
    """The chosen judge's agreement on ``rows`` (the selection or the held-out vignettes), CR2 only."""
    return clustered_mean(
        agree[rows], clusters[rows], name, level=level, rng=None, min_clusters=min_clusters, space=RATE_SPACE
    )


# --- judge selection on the calibration items: position bias, winner's correction ----------------


def judge_position_bias(
    rows: pd.DataFrame,
    items: CalibrationItems,
    judge: str,
    *,
    level: float = 0.95,
    rng: int = 0,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> PositionBiasResult:
    """Position bias of a judge on the calibration items it judged in both orders.

    Each item is a contest of its response a against b: the outcome of a when shown first and
    when shown second (win, loss, tie; an invalid verdict stays invalid and the position-bias
    check leaves that item out, counted). The figures and their intervals are those of
    :func:`honestci.audit.checks.position_bias.position_bias`; the first verdict of each order
    is used when an order was judged more than once.
    """
    from honestci.audit.checks.position_bias import position_bias

    a_first = rows["response_first"].to_numpy() == items.items["response_a"].to_numpy()[rows["item"].to_numpy()]
    code = rows["judge_code"].to_numpy()  # already relative to a: +1 names a, -1 names b
    outcome = np.where(
        rows["status"].to_numpy() == "invalid",
        "invalid",
        np.where(code > 0, "win", np.where(code < 0, "loss", "tie")),
    )
    frame = pd.DataFrame({"item": rows["item"].to_numpy(), "a_first": a_first, "outcome": outcome})
    frame = frame.drop_duplicates(["item", "a_first"])
    wide = frame.pivot(index="item", columns="a_first", values="outcome")
    both = wide.dropna() if wide.shape[1] == 2 else wide.iloc[:0]
    vignettes = items.items["vignette_id"].to_numpy()[both.index.to_numpy()]
    return position_bias(
        both[True] if len(both) else [],
        both[False] if len(both) else [],
        vignettes,
        judge=judge,
        policy="response a",
        opponent="response b",
        n_single_order=int(len(wide) - len(both)),
        level=level,
        rng=rng,
        min_clusters=min_clusters,
    )


def judge_winner(
    candidates: dict[str, tuple], *, level: float = 0.95, seed: int = 0, n_draws: int | None = None
) -> tuple[WinnerInference | None, str | None]:
    """The best judge's agreement on all vignettes, corrected for the selection among ``candidates``.

    ``candidates`` maps judge → (agreement indicators, vignette of each row). Estimand: the chosen
    judge's equal-vignette-weight agreement (mean of its vignette means over the vignettes every
    candidate judged). Interval: the AKM hybrid interval on the logit scale with Σ estimated from
    the vignettes (:func:`honestci.audit.checks.selection.candidate_winner_inference`; reference
    Andrews, Kitagawa & McCloskey 2024); ``n_draws``: its projection draws (default the selection
    module's). Returns (None, why) when it cannot be computed.

    Validated against: seeded coverage simulation of naive, AKM hybrid and projection intervals
    (``tests/test_calibration_single_rater.py``; figures in docs/methods.md).
    """
    from honestci.audit.checks.selection import (
        DEFAULT_PROJECTION_DRAWS,
        candidate_winner_inference,
        selection_covariance,
    )

    draws = DEFAULT_PROJECTION_DRAWS if n_draws is None else n_draws
    try:
        return candidate_winner_inference(selection_covariance(candidates), level=level, seed=seed, n_draws=draws), None
    except (EstimationError, InputError) as error:
        return None, str(error)


def select_unbiased_judge(
    candidates: dict[str, tuple],
    rows_by_judge: dict[str, pd.DataFrame],
    items: CalibrationItems,
    *,
    thresholds: Thresholds | None,
    level: float,
    seed: int,
    min_clusters: int,
) -> tuple[JudgeSelection | None, tuple[tuple[str, str], ...]]:
    """Select among the candidates whose position-bias gate does not FAIL on the calibration items.

    ``candidates`` maps judge → (agreement indicators, vignette of each row) and ``rows_by_judge``
    judge → its judged rows (:func:`honestci.audit.checks.calibration_items.judged_rows`). A
    candidate whose order effect lies outside ± the position-bias tolerance of ``thresholds``
    (default: the built-in) is excluded, with the reason. Returns (the selection among the
    eligible, with the winner's correction; None with fewer than two of them) and the excluded.
    """
    if len(candidates) < 2:
        return None, ()
    excluded: list[tuple[str, str]] = []
    tolerance = (thresholds or THRESHOLDS).position_bias_tolerance
    for candidate, candidate_rows in rows_by_judge.items():
        bias = judge_position_bias(candidate_rows, items, candidate, level=level, rng=seed, min_clusters=min_clusters)
        effect = None if bias is None else bias.order_effect
        if bias is not None and effect is not None and bias.favours_a_position(tolerance):
            excluded.append(
                (
                    candidate,
                    f"position-bias gate FAILs on the calibration items ({bias.judge}: order effect "
                    f"{effect.text()} lies outside ±{tolerance:.2f}: the judge favours a position)",
                )
            )
    eligible = {k: v for k, v in candidates.items() if k not in dict(excluded)}
    if len(eligible) < 2:
        return None, tuple(excluded)
    winner, note = judge_winner(eligible, level=level, seed=seed)
    selection = replace(
        select_judge(eligible, level=level, rng=seed, min_clusters=min_clusters),
        excluded=tuple(excluded),
        winner=winner,
        winner_note=note,
    )
    return selection, tuple(excluded)
