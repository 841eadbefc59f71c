"""The hierarchical model's data: judged verdicts or contest scores, validated and summed into cells.

A cell is (vignette, order, run, judge) for judged orders (:func:`aggregate_cells`) and (vignette,
run, judge) for contest scores (:func:`aggregate_contest_cells`, tempered by the quasi-binomial
dispersion of :func:`contest_dispersion`). The model of :mod:`honestci.audit.stats.bayesian.hierarchical` reads
the cells' sums only, so a million verdicts cost what their cells cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from honestci.audit.errors import InputError, Problem
from honestci.audit.stats.estimands import unique_inverse


@dataclass(frozen=True)
class WinRateCells:
    """Verdicts aggregated to cells (vignette, order, run, judge).

    ``wins`` is the sum of outcomes (ties count 1/2), so it may be fractional.
    """

    vignette_index: np.ndarray  # int64, index into vignette_labels
    order: np.ndarray  # float64, +0.5 policy first, -0.5 policy second
    run_index: np.ndarray  # int64
    judge_index: np.ndarray  # int64
    n: np.ndarray  # int64 verdicts per cell
    wins: np.ndarray  # float64
    vignette_labels: tuple[str, ...]
    run_labels: tuple[str, ...]
    judge_labels: tuple[str, ...]
    has_ties: bool
    #: "verdict" (cells of judged orders, :func:`aggregate_cells`) or "contest" (cells of
    #: both-order contest scores, :func:`aggregate_contest_cells`, order 0 in every cell).
    unit: str = "verdict"
    #: Contests per cell ("contest" cells only; ``n`` and ``wins`` are then scaled trials).
    contests: np.ndarray | None = None
    #: Quasi-binomial dispersion phi the contest cells' ``n`` and ``wins`` were divided by (1 for
    #: verdict cells), and its Pearson estimate before the floor at 1 (None when not estimable).
    dispersion: float = 1.0
    dispersion_estimate: float | None = None
    #: Judged orders per contest ("contest" cells: 2, or 1 for single-order designs).
    trials_per_contest: int = 2

    @property
    def n_vignettes(self) -> int:
        return len(self.vignette_labels)

    @property
    def n_runs(self) -> int:
        return len(self.run_labels)

    @property
    def n_judges(self) -> int:
        return len(self.judge_labels)

    @property
    def n_verdicts(self) -> int:
        """Judged orders (``trials_per_contest`` per contest for contest cells)."""
        return int(self.n.sum()) if self.contests is None else self.trials_per_contest * self.n_contests

    @property
    def n_contests(self) -> int:
        return 0 if self.contests is None else int(self.contests.sum())

    @property
    def units_per_cell(self) -> np.ndarray:
        """Verdicts (verdict cells) or contests (contest cells) per cell."""
        return self.n if self.contests is None else self.contests


def _labels_and_index(values: Any, name: str, n: int) -> tuple[tuple[str, ...], np.ndarray]:
    if values is None:
        return ("all",), np.zeros(n, dtype=np.int64)
    array = np.asarray(values)
    if array.shape != (n,):
        raise InputError(
            f"'{name}' has {array.size} entries but 'outcome' has {n}.",
            fix=f"Pass one {name} per verdict.",
        )
    import pandas as pd

    if array.dtype == object and array.size and pd.api.types.infer_dtype(array, skipna=False) == "string":
        labels, index = unique_inverse(array)  # the same sorted labels, hashed rather than sorted
    else:
        labels, index = np.unique(array.astype(str), return_inverse=True)
    return tuple(str(x) for x in labels), index.astype(np.int64)


def _vignette_labels_and_index(vignette: Any, n: int) -> tuple[tuple[str, ...], np.ndarray]:
    """:func:`_labels_and_index` of the vignettes, refusing fewer than two: the hierarchical model
    estimates the variation between them."""
    labels, index = _labels_and_index(vignette, "vignette", n)
    if vignette is None or len(labels) < 2:
        raise InputError(
            "The hierarchical model needs at least two vignettes.",
            fix="With one vignette there is no between-vignette variation to estimate; "
            "report the per-vignette win rate instead.",
        )
    return labels, index


def unique_rows(*columns: tuple[np.ndarray, int]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)`` for integer codes given
    with their number of levels, through one mixed-radix int64 key (the same lexicographic order;
    a 1-D sort instead of a sort of rows, ~30x faster at a million rows)."""
    key = np.zeros(columns[0][0].size, dtype=np.int64)
    for codes, levels in columns:
        key = key * levels + codes
    distinct, inverse = np.unique(key, return_inverse=True)
    rows = np.empty((distinct.size, len(columns)), dtype=np.int64)
    for position in range(len(columns) - 1, -1, -1):
        levels = columns[position][1]
        rows[:, position] = distinct % levels
        distinct = distinct // levels
    return rows, inverse.ravel()


def aggregate_cells(
    vignette: Sequence | np.ndarray,
    order: Sequence | np.ndarray,
    outcome: Sequence | np.ndarray,
    run: Sequence | np.ndarray | None = None,
    judge: Sequence | np.ndarray | None = None,
) -> WinRateCells:
    """Validate per-verdict arrays and sum them into cells (vignette, order, run, judge).

    Raises
    ------
    InputError
        Mismatched lengths, outcomes outside {0, 1/2, 1}, orders outside {+1/2, -1/2}, fewer than
        two vignettes, or only one presentation order (the order effect, and hence the
        order-averaged win rate, would rest on the prior alone).
    """
    outcome_array = np.asarray(outcome, dtype=float)
    n = outcome_array.size
    if outcome_array.ndim != 1 or n == 0:
        raise InputError("No verdicts to fit.", fix="Pass one outcome per judged order.")
    order_array = np.asarray(order, dtype=float)
    problems: list[Problem] = []
    if order_array.shape != (n,):
        raise InputError(
            f"'order' has {order_array.size} entries but 'outcome' has {n}.",
            fix="Pass one order per verdict.",
        )
    bad_outcome = ~np.isin(outcome_array, (0.0, 0.5, 1.0))
    for row in np.flatnonzero(bad_outcome)[:20]:
        problems.append(
            Problem(
                "outcome",
                int(row),
                "outcome",
                f"value {outcome_array[row]!r} is not 0, 0.5 or 1",
                "code a win as 1, a tie as 0.5 and a loss as 0",
            )
        )
    bad_order = ~np.isin(order_array, (0.5, -0.5))
    for row in np.flatnonzero(bad_order)[:20]:
        problems.append(
            Problem(
                "order",
                int(row),
                "order",
                f"value {order_array[row]!r} is not +0.5 or -0.5",
                "use +0.5 when the policy is shown first and -0.5 when second",
            )
        )
    if problems:
        raise InputError(
            f"{int(bad_outcome.sum())} outcome(s) and {int(bad_order.sum())} order(s) are invalid.",
            problems,
            fix="Recode the verdicts before fitting.",
        )
    vignette_labels, vignette_index = _vignette_labels_and_index(vignette, n)
    if np.unique(order_array).size < 2:
        raise InputError(
            "All verdicts have the same presentation order.",
            fix="Judge both orders: with one order the position bias is not identifiable and the "
            "order-averaged win rate would rest on the prior for beta.",
        )
    run_labels, run_index = _labels_and_index(run, "run", n)
    judge_labels, judge_index = _labels_and_index(judge, "judge", n)
    order_index = (order_array > 0).astype(np.int64)
    cell_keys, cell_of_row = unique_rows(
        (vignette_index, len(vignette_labels)),
        (order_index, 2),
        (run_index, len(run_labels)),
        (judge_index, len(judge_labels)),
    )
    counts = np.bincount(cell_of_row, minlength=len(cell_keys)).astype(np.int64)
    wins = np.bincount(cell_of_row, weights=outcome_array, minlength=len(cell_keys))
    return WinRateCells(
        vignette_index=cell_keys[:, 0].astype(np.int64),
        order=np.where(cell_keys[:, 1] == 1, 0.5, -0.5),
        run_index=cell_keys[:, 2].astype(np.int64),
        judge_index=cell_keys[:, 3].astype(np.int64),
        n=counts,
        wins=wins,
        vignette_labels=vignette_labels,
        run_labels=run_labels,
        judge_labels=judge_labels,
        has_ties=bool(np.any(outcome_array == 0.5)),
    )


def contest_dispersion(
    cell_of_contest: np.ndarray, score: np.ndarray, trials_per_contest: int = 2
) -> tuple[float | None, int]:
    """Pearson estimate of the quasi-binomial dispersion of contest scores, and its df.

    Each contest enters the likelihood as m trials with m·s wins (m = ``trials_per_contest``: 2
    when both orders are judged, 1 for a single-order verdict or preference), whose binomial
    variance is m·p(1 − p). With the cell's mean score as p (the saturated within-cell fit),

        phi = sum_c sum_{i in c} m (s_i - ybar_c)^2 / (ybar_c (1 - ybar_c)) / sum_c (m_c - 1)

    over cells with 0 < ybar_c < 1 and m_c >= 2 contests (McCullagh & Nelder 1989, sec. 9.2).
    phi > 1 when the two orders of a contest agree more than independent verdicts would (a judge
    consistent across orders: scores pile at 0 and 1); phi < 1 when ties pull scores to 1/2
    (with independent orders and 30% ties, phi = 0.5-0.9). None when no cell qualifies.
    Validated against: the closed form Var(2s) / (2p(1 - p)) on simulated scores (tests/test_bayes.py).
    """
    count = np.bincount(cell_of_contest).astype(float)
    mean = np.bincount(cell_of_contest, weights=score) / count
    squares = np.bincount(cell_of_contest, weights=trials_per_contest * (score - mean[cell_of_contest]) ** 2)
    usable = (count >= 2) & (mean > 0.0) & (mean < 1.0)
    df = int(np.sum(count[usable] - 1))
    if df == 0:
        return None, 0
    return float(np.sum(squares[usable] / (mean[usable] * (1.0 - mean[usable]))) / df), df


def aggregate_contest_cells(
    vignette: Sequence | np.ndarray,
    score: Sequence | np.ndarray,
    run: Sequence | np.ndarray | None = None,
    judge: Sequence | np.ndarray | None = None,
    trials_per_contest: int = 2,
) -> WinRateCells:
    """Contest scores (1 won both orders, 0 lost both, 1/2 otherwise) summed into cells
    (vignette, run, judge) for the same model, on the contest-score estimand.

    A contest is 2 trials with 2s wins (``trials_per_contest`` = 2, both orders judged; 1 for a
    single-order verdict or preference: one trial with s wins, never two agreeing ones), so E[s | v] = expit(mu + u_v + a_r + b_j) and the model's
    win rates are the contest-score rates of :mod:`honestci.audit.stats.estimands`. The order
    covariate is 0 in every cell (each score already averages both orders; beta then keeps its
    prior and enters no estimand). The quasi-binomial dispersion phi of
    :func:`contest_dispersion` is floored at 1 and divides ``n`` and ``wins`` (a tempered
    likelihood): over-dispersion (orders agreeing) widens the posterior as it should, while the
    under-dispersion ties create is left in, so the within-vignette noise errs on the wide side.

    Raises
    ------
    InputError
        Mismatched lengths, scores outside [0, 1], or fewer than two vignettes.
    """
    score_array = np.asarray(score, dtype=float)
    n = score_array.size
    if score_array.ndim != 1 or n == 0:
        raise InputError("No contests to fit.", fix="Pass one score per contest.")
    # Continuous preferences and single-order scores lie in [0, 1] too: the quasi-binomial cell
    # likelihood only needs the mean, and the Pearson dispersion absorbs their variance.
    bad = ~((score_array >= 0) & (score_array <= 1))
    if bad.any():
        problems = [
            Problem(
                "score",
                int(row),
                "score",
                f"value {score_array[row]!r} is not in [0, 1]",
                "score contests in [0, 1] (1/0.5/0, or a preference)",
            )
            for row in np.flatnonzero(bad)[:20]
        ]
        raise InputError(f"{int(bad.sum())} contest score(s) are invalid.", problems, fix="Rescore the contests.")
    vignette_labels, vignette_index = _vignette_labels_and_index(vignette, n)
    run_labels, run_index = _labels_and_index(run, "run", n)
    judge_labels, judge_index = _labels_and_index(judge, "judge", n)
    cell_keys, cell_of_contest = unique_rows(
        (vignette_index, len(vignette_labels)), (run_index, len(run_labels)), (judge_index, len(judge_labels))
    )
    contests = np.bincount(cell_of_contest, minlength=len(cell_keys)).astype(np.int64)
    wins = trials_per_contest * np.bincount(cell_of_contest, weights=score_array, minlength=len(cell_keys))
    estimate, _ = contest_dispersion(cell_of_contest, score_array, trials_per_contest)
    dispersion = max(1.0, estimate) if estimate is not None else 1.0
    return WinRateCells(
        vignette_index=cell_keys[:, 0].astype(np.int64),
        order=np.zeros(len(cell_keys)),
        run_index=cell_keys[:, 1].astype(np.int64),
        judge_index=cell_keys[:, 2].astype(np.int64),
        n=trials_per_contest * contests / dispersion,
        wins=wins / dispersion,
        vignette_labels=vignette_labels,
        run_labels=run_labels,
        judge_labels=judge_labels,
        has_ties=bool(np.any(score_array == 0.5)),
        unit="contest",
        contests=contests,
        dispersion=dispersion,
        dispersion_estimate=estimate,
        trials_per_contest=trials_per_contest,
    )


__all__ = [
    "WinRateCells",
    "aggregate_cells",
    "aggregate_contest_cells",
    "contest_dispersion",
    "unique_rows",
]
