"""Contests between a policy and an opponent, assembled from both-order judgments, and their scores.

A *contest* is the unordered pair {policy response, opponent response} of one vignette judged by
one judge; it is complete when the judge saw both presentation orders. Outcomes are from the
policy's point of view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from honestci.audit.data.io import LoadedTable, Study, check_references, table_from_frame
from honestci.audit.errors import InputError, Problem, SchemaError

OUTCOMES = ("win", "loss", "tie", "invalid")
#: Value of one judged order for the policy; an invalid verdict has no value.
OUTCOME_VALUE = {"win": 1.0, "tie": 0.5, "loss": 0.0, "invalid": np.nan}
RULES = ("both_orders", "order_average")
DEFAULT_RUN = "run-1"


def _outcome_values(outcomes) -> np.ndarray:
    """Per-order values (win 1, tie 0.5, loss 0, invalid NaN) from outcome strings or values."""
    array = np.asarray(outcomes)
    if array.dtype.kind in "fiu":
        values = array.astype(float)
        known = np.isnan(values) | np.isin(values, (0.0, 0.5, 1.0))
    else:
        values = np.array([OUTCOME_VALUE.get(str(outcome), -1.0) for outcome in array.ravel()]).reshape(array.shape)
        known = values != -1.0
    if not known.all():
        bad = array[~known].ravel().tolist()[0]
        raise InputError(
            f"unknown contest outcome {bad!r}", fix=f"use one of {', '.join(OUTCOMES)}, or the values 1, 0.5, 0 and NaN"
        )
    return values


def score_contests(outcome_first, outcome_second, rule: str = "both_orders") -> np.ndarray:
    """Score contests for the policy from its outcomes in the two presentation orders.

    Parameters
    ----------
    outcome_first, outcome_second
        Arrays of ``"win"``, ``"loss"``, ``"tie"``, ``"invalid"`` (or the per-order values 1, 0,
        0.5, NaN): the policy's outcome when shown first and when shown second.
    rule
        ``"both_orders"``: s = 1 if the policy wins both orders, 0 if it loses both, ½ otherwise
        (a tie, or a verdict that flips with the order). ``"order_average"``: s = (v₁ + v₂)/2
        with per-order values v = 1 (win), ½ (tie), 0 (loss).

    Returns
    -------
    numpy.ndarray
        One score per contest in [0, 1]; NaN where either order's verdict is invalid.

    Notes
    -----
    The both-orders rule is the position-debiased contest score of Zheng et al. (2023), "Judging
    LLM-as-a-judge with MT-Bench and Chatbot Arena" (a win counts only if it survives swapping).
    Both rules are antisymmetric: swapping policy and opponent maps s to 1 - s.
    Validated against: hand-computed examples in tests/test_contests.py.
    """
    first, second = _outcome_values(outcome_first), _outcome_values(outcome_second)
    if first.shape != second.shape:
        raise InputError(
            f"outcome arrays differ in shape: {first.shape} and {second.shape}",
            fix="give both orders' outcomes of the same contests",
        )
    if rule == "both_orders":
        scores = np.where((first == 1) & (second == 1), 1.0, np.where((first == 0) & (second == 0), 0.0, 0.5))
        return np.where(np.isnan(first) | np.isnan(second), np.nan, scores)
    if rule == "order_average":
        return (first + second) / 2
    raise InputError(f"unknown contest scoring rule {rule!r}", fix=f"use one of: {', '.join(RULES)}")


#: What an invalid order's verdict is worth to the policy under each scoring of invalid verdicts
#: (``policy.INVALID_SCORING``); "exclude" leaves the contest out instead.
INVALID_ORDER_VALUE = {"against_claim": 0.0, "tie": 0.5, "for_claim": 1.0}


def _invalid_value(invalid: str) -> float:
    if invalid not in INVALID_ORDER_VALUE:
        raise InputError(
            f"unknown scoring of invalid verdicts {invalid!r}",
            fix=f"use one of: exclude, {', '.join(INVALID_ORDER_VALUE)}",
        )
    return INVALID_ORDER_VALUE[invalid]


@dataclass(frozen=True, eq=False)
class ContestScores:
    """Scores of the contests; ``n_invalid`` of them had an invalid verdict, scored by ``invalid``
    (left out when it is ``"exclude"``)."""

    rule: str
    policy: str
    opponent: str
    judge: str
    frame: pd.DataFrame
    n_invalid: int
    invalid: str = "exclude"

    @property
    def values(self) -> np.ndarray:
        return self.frame["score"].to_numpy(dtype=float)

    @property
    def clusters(self) -> np.ndarray:
        """The vignette of each scored contest (the cluster of every clustered interval)."""
        return self.frame["vignette_id"].to_numpy()

    def to_frame(self) -> pd.DataFrame:
        """One row per valid contest: contest_id, vignette_id, run, score."""
        return self.frame.copy()

    def __str__(self) -> str:
        treated = "left out" if self.invalid == "exclude" else f"scored {self.invalid.replace('_', ' ')}"
        return (
            f"{len(self.frame)} contests of {self.policy} vs {self.opponent} (judge {self.judge}) scored by "
            f"rule {self.rule}; {self.n_invalid} contest(s) with an invalid verdict {treated}"
        )


@dataclass(frozen=True, eq=False)
class ContestTable:
    """Complete contests of ``policy`` against ``opponent`` by one ``judge``.

    ``frame`` has one row per contest: contest_id, judge, vignette_id, run, policy_response,
    opponent_response, outcome_policy_first, outcome_policy_second, line_policy_first,
    line_policy_second. ``dropped`` counts contests left out on purpose (``single_order``).
    """

    frame: pd.DataFrame
    policy: str
    opponent: str
    judge: str
    dropped: Mapping[str, int] = field(default_factory=dict)

    @property
    def n_invalid(self) -> int:
        """Contests with an invalid verdict in either order."""
        return int(self._invalid_contests().sum())

    def _invalid_contests(self) -> np.ndarray:
        return (
            (self.frame["outcome_policy_first"] == "invalid") | (self.frame["outcome_policy_second"] == "invalid")
        ).to_numpy()

    def to_frame(self) -> pd.DataFrame:
        """One row per contest (a copy of :attr:`frame`)."""
        return self.frame.copy()

    def scores(self, rule: str = "both_orders", invalid: str = "exclude") -> ContestScores:
        """Scores of the contests under ``rule`` (see :func:`score_contests`).

        ``invalid`` says what an order with an invalid verdict is worth to the policy: nothing
        (``"against_claim"``: scored as a loss, the conservative choice), half (``"tie"``), all
        (``"for_claim"``: the other end of the bound the ``valid_verdicts`` gate computes), or
        ``"exclude"`` (contests with one are left out, as if never judged).
        """
        first, second = (_outcome_values(self.frame[c]) for c in ("outcome_policy_first", "outcome_policy_second"))
        if invalid != "exclude":
            first, second = (np.where(np.isnan(v), _invalid_value(invalid), v) for v in (first, second))
        scores = score_contests(first, second, rule)
        invalid_contests = self._invalid_contests()
        keep = ~invalid_contests if invalid == "exclude" else np.ones(len(self.frame), dtype=bool)
        frame = self.frame.loc[keep, ["contest_id", "vignette_id", "run"]].reset_index(drop=True)
        frame["score"] = scores[keep]
        return ContestScores(
            rule, self.policy, self.opponent, self.judge, frame, int(invalid_contests.sum()), invalid=invalid
        )

    def per_order_outcomes(self, invalid: str = "exclude") -> pd.DataFrame:
        """One row per judged order: contest_id, vignette_id, run, judge, policy_first (bool) and
        value (1 win, 0.5 tie, 0 loss), for per-order models.

        An order with an invalid verdict is scored as :meth:`scores` says for ``invalid``, or left
        out (``"exclude"``; :attr:`n_invalid_orders` counts them)."""
        keys = self.frame[["contest_id", "vignette_id", "run", "judge"]]
        values = [_outcome_values(self.frame[c]) for c in ("outcome_policy_first", "outcome_policy_second")]
        if invalid != "exclude":
            values = [np.where(np.isnan(v), _invalid_value(invalid), v) for v in values]
        long = pd.concat(
            [keys.assign(policy_first=True, value=values[0]), keys.assign(policy_first=False, value=values[1])]
        ).sort_index(kind="stable")
        return long[long["value"].notna()].reset_index(drop=True)

    @property
    def n_invalid_orders(self) -> int:
        """Judged orders with an invalid verdict."""
        return int((self.frame[["outcome_policy_first", "outcome_policy_second"]] == "invalid").to_numpy().sum())


def _contest_inputs(
    study_or_frames: Study | Mapping[str, LoadedTable | pd.DataFrame],
) -> tuple[LoadedTable, LoadedTable]:
    """The (responses, judgments) tables, validated and cross-checked when given as frames."""
    if isinstance(study_or_frames, Study):
        return study_or_frames.responses, study_or_frames.judgments
    tables = {}
    for name in ("responses", "judgments"):
        if name not in study_or_frames:
            raise InputError(
                f"contests need the {name} table", fix="pass a Study, or a mapping with 'responses' and 'judgments'"
            )
        table = study_or_frames[name]
        tables[name] = table if isinstance(table, LoadedTable) else table_from_frame(table, name)
    problems = check_references(tables)
    if problems:
        raise SchemaError(
            "judgments refer to responses that do not match",
            problems,
            fix="make every response id refer to a response of the judgment's vignette",
        )
    return tables["responses"], tables["judgments"]


def build_contests(
    study_or_frames: Study | Mapping[str, LoadedTable | pd.DataFrame],
    policy: str,
    opponent: str,
    judge: str | None = None,
    allow_single_order: bool = False,
) -> ContestTable:
    """Assemble the both-order contests of ``policy`` against ``opponent`` judged by ``judge``.

    Parameters
    ----------
    study_or_frames
        A :class:`~honestci.audit.data.io.Study`, or a mapping with ``responses`` and ``judgments`` given as
        :class:`~honestci.audit.data.io.LoadedTable` or DataFrames (validated and cross-checked here).
    policy, opponent
        Systems (the responses' ``system``) to compare; outcomes are the policy's.
    judge
        The judge to use; may be omitted when only one judge compared the two systems.
    allow_single_order
        Leave out contests judged in one order only (counted in ``dropped["single_order"]``)
        instead of raising: position bias is not identifiable from such a contest.

    Returns
    -------
    ContestTable
        One row per complete contest, in the order the judgments file first mentions them.

    Raises
    ------
    SchemaError
        A contest judged in one order only (unless allowed), or invalid frames.
    InputError
        No judgment compares the two systems, or the judge is ambiguous or unknown.
    """
    responses, judgments = _contest_inputs(study_or_frames)
    system = dict(zip(responses.frame["response_id"], responses.frame["system"]))
    run = dict(zip(responses.frame["response_id"], responses.frame["run"].fillna(DEFAULT_RUN)))
    if policy == opponent:
        raise InputError(f"policy and opponent are both {policy!r}", fix="compare two different systems")
    j = judgments.frame
    first_system, second_system = j["response_first"].map(system), j["response_second"].map(system)
    policy_first = ((first_system == policy) & (second_system == opponent)).to_numpy()
    policy_second = ((first_system == opponent) & (second_system == policy)).to_numpy()
    selected = policy_first | policy_second
    if not selected.any():
        judged = sorted({" vs ".join(sorted(pair)) for pair in zip(first_system, second_system)})
        raise InputError(
            f"no judgments compare {policy!r} with {opponent!r}",
            fix=f"name systems from the responses table ({', '.join(sorted(set(system.values())))}); pairs judged: {'; '.join(judged)}",
        )
    judges = sorted(set(j.loc[selected, "judge"]))
    if judge is None and len(judges) > 1:
        raise InputError(
            f"several judges compared {policy!r} with {opponent!r}: {', '.join(judges)}", fix="name the judge to use"
        )
    judge = judge if judge is not None else judges[0]
    if judge not in judges:
        raise InputError(
            f"judge {judge!r} did not compare {policy!r} with {opponent!r}", fix=f"use one of: {', '.join(judges)}"
        )
    rows = selected & (j["judge"] == judge).to_numpy()
    pf = policy_first[rows]
    verdict = j.loc[rows, "verdict"].to_numpy()
    orders = pd.DataFrame(
        {
            "vignette_id": j.loc[rows, "vignette_id"].to_numpy(),
            "policy_response": np.where(pf, j.loc[rows, "response_first"], j.loc[rows, "response_second"]),
            "opponent_response": np.where(pf, j.loc[rows, "response_second"], j.loc[rows, "response_first"]),
            "policy_first": pf,
            # verdict "first" is a win for the policy when it was shown first, a loss otherwise
            "outcome": np.select(
                [verdict == "first", verdict == "second"],
                [np.where(pf, "win", "loss"), np.where(pf, "loss", "win")],
                default=verdict,
            ),
            "line": judgments.lines[rows],
        }
    )
    key = ["vignette_id", "policy_response", "opponent_response"]
    contests = pd.merge(
        orders[orders["policy_first"]].drop(columns="policy_first"),
        orders[~orders["policy_first"]].drop(columns="policy_first"),
        on=key,
        how="outer",
        suffixes=("_policy_first", "_policy_second"),
        indicator="orders",
    )
    single = contests[contests["orders"] != "both"]
    if len(single) and not allow_single_order:
        problems = [
            Problem(
                judgments.path,
                int(row.line_policy_first if row.orders == "left_only" else row.line_policy_second),
                "response_first",
                f"judge {judge!r} judged policy response {row.policy_response!r} vs opponent response "
                f"{row.opponent_response!r} only with the {'policy' if row.orders == 'left_only' else 'opponent'} shown first",
                "judge the missing order",
            )
            for row in single.itertuples()
        ]
        raise SchemaError(
            f"{len(single)} contest(s) of {policy!r} vs {opponent!r} were judged in one order only: position bias is not identifiable from them",
            problems,
            fix="judge the missing orders, or set `allow_single_order: true` in the claim to leave these contests out (they are counted)",
        )
    contests = contests[contests["orders"] == "both"]
    # contests in the order the file first mentions them
    contests = contests.iloc[
        np.argsort(np.minimum(contests["line_policy_first"], contests["line_policy_second"]), kind="stable")
    ]
    frame = pd.DataFrame(
        {
            "contest_id": judge + ":" + contests["policy_response"] + ":" + contests["opponent_response"],
            "judge": pd.Series(judge, index=contests.index, dtype="str"),
            "vignette_id": contests["vignette_id"],
            "run": contests["policy_response"].map(run).astype("str"),
            "policy_response": contests["policy_response"],
            "opponent_response": contests["opponent_response"],
            "outcome_policy_first": contests["outcome_policy_first"].astype("str"),
            "outcome_policy_second": contests["outcome_policy_second"].astype("str"),
            "line_policy_first": contests["line_policy_first"].astype(np.int64),
            "line_policy_second": contests["line_policy_second"].astype(np.int64),
        }
    ).reset_index(drop=True)
    dropped = {"single_order": len(single)} if len(single) else {}
    return ContestTable(frame, policy, opponent, judge, dropped)
