"""Contests between a policy and an opponent, assembled from judgments, and their scores.

A *contest* is the unordered pair {policy response, opponent response} of one vignette judged by
one judge, in one or both presentation orders. Outcomes are from the policy's point of view.

The judging *design* is detected from the contests and named (:data:`DESIGNS`):

- ``"both orders"``: every contest was judged in both orders; its score is the both-orders rule;
- ``"one order, randomised"``: one order per contest, the policy shown first in some contests and
  second in others (AlpacaEval's annotators, most arenas); the score is that order's value, and
  position bias is estimated *between* contests;
- ``"one order, fixed"``: one order per contest, the policy always in the same position: the
  score is that order's value and position bias is not identifiable (it is part of every score);
- ``"mixed"``: some contests in both orders, some in one. The auditor's policy decides
  (``missing_orders``, :data:`MISSING_ORDERS`): by default every contest is kept and its missing
  order is scored against the claim (a loss for the policy), so leaving out an order can never
  raise the win rate; ``exclude`` leaves the single-order contests out (counted). Checks that need
  complete contests (position bias) ask for ``exclude``.

A *panel* (several judges on the same contests, :func:`build_panel_contests`) stacks each judge's
contests in one table; :meth:`ContestTable.scores` then turns the judges' contest scores of one
contest into one panel score by the panel rule (:func:`panel_score`, :data:`PANEL_RULES`).

A judgment may carry a continuous preference (``preference_first`` in [0, 1]) beside its verdict;
an order's value for the policy is then its preference (p when shown first, 1 - p when second), and
a contest's score averages its orders' values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from honestci.audit.data.io import (
    Study,
    check_references,
    codes_of,
    index_positions,
    release_arrow_memory,
    table_from_frame,
)
from honestci.audit.data.validation import LoadedTable
from honestci.audit.errors import InputError, Problem, SchemaError
from honestci.audit.policy import MISSING_ORDERS
from honestci.audit.policy import PANEL_RULES as POLICY_PANEL_RULES

OUTCOMES = ("win", "loss", "tie", "invalid")
#: Value of one judged order for the policy; an invalid verdict has no value.
OUTCOME_VALUE = {"win": 1.0, "tie": 0.5, "loss": 0.0, "invalid": np.nan}
RULES = ("both_orders", "order_average")
DEFAULT_RUN = "run-1"
BOTH_ORDERS, ONE_ORDER_RANDOMISED, ONE_ORDER_FIXED, MIXED = (
    "both orders",
    "one order, randomised",
    "one order, fixed",
    "mixed",
)
#: The judging designs :func:`build_contests` names (module doc).
DESIGNS = (BOTH_ORDERS, ONE_ORDER_RANDOMISED, ONE_ORDER_FIXED, MIXED)
#: What :func:`build_contests` does with the single-order contests of a mixed design: refuse the
#: design, keep them with the missing order scored against the claim, or leave them out.
SINGLE_ORDER_HANDLING = ("refuse", *MISSING_ORDERS)


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


#: How a panel's judges' contest scores of one contest become the panel's score (:func:`panel_score`).
PANEL_RULES = POLICY_PANEL_RULES


def panel_score(judge_scores, rule: str) -> np.ndarray:
    """The panel's score of each contest from its judges' contest scores.

    Parameters
    ----------
    judge_scores
        Array (contests × judges) of each judge's contest score in [0, 1] (NaN where invalid).
    rule
        ``"mean"``: s = (1/K) Σ_k s_k, the average of the K judges' scores. ``"majority"``: each
        judge's verdict is the side its score favours (policy when s_k > ½, opponent when
        s_k < ½, tie at ½); s = 1 when more than K/2 judges favour the policy, 0 when more than
        K/2 favour the opponent, ½ otherwise (no majority).

    Returns
    -------
    numpy.ndarray
        One score per contest; NaN where any judge's score is NaN.

    Notes
    -----
    Both rules are antisymmetric (swapping policy and opponent maps s to 1 − s), as the contest
    scores are. The mean's expectation is the average of the judges' expected scores, so the panel
    win rate of the mean rule is the average of the judges' win rates; the majority rule's is not.
    Validated against: hand-computed examples in tests/test_panel.py.
    """
    scores = np.asarray(judge_scores, dtype=float)
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise InputError(
            f"a panel needs a (contests × judges) array with at least two judges, got shape {scores.shape}",
            fix="pass one column per panel judge",
        )
    if rule == "mean":
        return scores.mean(axis=1)
    if rule == "majority":
        half = scores.shape[1] / 2
        for_policy, for_opponent = (scores > 0.5).sum(axis=1), (scores < 0.5).sum(axis=1)
        result = np.where(for_policy > half, 1.0, np.where(for_opponent > half, 0.0, 0.5))
        return np.where(np.isnan(scores).any(axis=1), np.nan, result)
    raise InputError(f"unknown panel rule {rule!r}", fix=f"use one of: {', '.join(PANEL_RULES)}")


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


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True) if array.base is not None else array
    array.flags.writeable = False
    return array


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

    @cached_property
    def values(self) -> np.ndarray:
        """The contest scores (read-only: computed once)."""
        return _read_only(self.frame["score"].to_numpy(dtype=float))

    @cached_property
    def clusters(self) -> np.ndarray:
        """The vignette of each scored contest (the cluster of every clustered interval; read-only:
        computed once)."""
        return _read_only(self.frame["vignette_id"].to_numpy())

    def to_frame(self) -> pd.DataFrame:
        """One row per valid contest: contest_id, vignette_id, run, score, policy_response, opponent_response."""
        return self.frame.copy()

    def __str__(self) -> str:
        treated = "left out" if self.invalid == "exclude" else f"scored {self.invalid.replace('_', ' ')}"
        return (
            f"{len(self.frame)} contests of {self.policy} vs {self.opponent} (judge {self.judge}) scored by "
            f"rule {self.rule}; {self.n_invalid} contest(s) with an invalid verdict {treated}"
        )


@dataclass(frozen=True, eq=False)
class ContestTable:
    """Contests of ``policy`` against ``opponent`` by one ``judge``.

    ``frame`` has one row per contest: contest_id, judge, vignette_id, run, policy_response,
    opponent_response, outcome_policy_first, outcome_policy_second (``win``, ``loss``, ``tie``,
    ``invalid``; missing where that order was not judged), value_policy_first,
    value_policy_second (the order's value for the policy: 1, ½, 0 or its continuous preference;
    NaN when invalid or not judged), line_policy_first, line_policy_second (missing where not
    judged). Its string columns but contest_id are categoricals with sorted categories: the values
    present, or the four outcomes (:func:`_contest_frame`). ``dropped`` counts contests left out
    on purpose (``single_order``); ``missing_order_value`` is the value of an unjudged order of a
    mixed design's kept single-order contests (:attr:`n_missing_orders`). ``design`` names the judging design (:data:`DESIGNS`) and
    ``design_note`` says what it implies; ``continuous`` is True when any judged order carries a
    continuous preference.

    A panel's table (:func:`build_panel_contests`) holds one row per judge and contest; ``panel``
    names its judges, ``panel_rule`` the rule that :meth:`scores` applies, and ``judge`` is the
    panel's label. :meth:`for_judge` gives one judge's table.
    """

    frame: pd.DataFrame
    policy: str
    opponent: str
    judge: str
    dropped: Mapping[str, int] = field(default_factory=dict)
    design: str = BOTH_ORDERS
    design_note: str = ""
    continuous: bool = False
    #: The panel's judges (empty for one judge) and its rule (:data:`PANEL_RULES`).
    panel: tuple[str, ...] = ()
    panel_rule: str | None = None
    #: The value for the policy of an order a mixed design left unjudged (0: against the claim);
    #: None where no order is imputed (a single-order contest then scores its one judged order).
    missing_order_value: float | None = None
    #: The contests left out as single-order (``dropped["single_order"]``), in the frame's columns.
    left_out: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        # A frame with outcomes only (built by hand) gets the per-order values from its outcomes.
        missing = [c for c in ("policy_first", "policy_second") if f"value_{c}" not in self.frame]
        if missing:
            frame = self.frame.copy()
            for column in missing:
                outcome = frame[f"outcome_{column}"]
                frame[f"value_{column}"] = _outcome_values(outcome.fillna("invalid").to_numpy(dtype=object))
            object.__setattr__(self, "frame", frame)

    @property
    def n_invalid(self) -> int:
        """Contests with an invalid verdict in a judged order."""
        return int(self._invalid_contests().sum())

    def _invalid_contests(self) -> np.ndarray:
        return (
            (self.frame["outcome_policy_first"] == "invalid") | (self.frame["outcome_policy_second"] == "invalid")
        ).to_numpy(dtype=bool)

    def _judged(self) -> tuple[np.ndarray, np.ndarray]:
        """Whether each contest's policy-first and policy-second orders were judged."""
        return (
            self.frame["outcome_policy_first"].notna().to_numpy(),
            self.frame["outcome_policy_second"].notna().to_numpy(),
        )

    def where(self, keep, reason: str) -> ContestTable:
        """Only the contests for which ``keep`` (a function of a contest frame, giving one bool per
        row) is true, the rest counted in ``dropped[reason]``; the single-order contests left out
        are restricted by the same rule."""
        rows = np.asarray(keep(self.frame), dtype=bool)
        dropped = {**self.dropped, reason: int((~rows).sum())}
        left_out = None if self.left_out is None else self.left_out[np.asarray(keep(self.left_out), dtype=bool)]
        return replace(
            self,
            frame=self.frame[rows].reset_index(drop=True),
            dropped=dropped,
            left_out=None if left_out is None else left_out.reset_index(drop=True),
        )

    def with_single_order(self) -> ContestTable:
        """Every contest, the single-order ones left out included, each missing order scored as a
        loss for the policy (what ``missing_orders: against_claim`` gives)."""
        frame = self.frame if self.left_out is None else pd.concat([self.frame, self.left_out], ignore_index=True)
        value = INVALID_ORDER_VALUE["against_claim"]
        return replace(self, frame=frame, left_out=None, dropped={}, missing_order_value=value)

    def judged_orders(self) -> tuple[np.ndarray, np.ndarray]:
        """Whether each contest's policy-first and policy-second orders were judged."""
        return self._judged()

    @property
    def n_missing_orders(self) -> int:
        """Contests kept with one order unjudged, that order scored at :attr:`missing_order_value`."""
        if self.missing_order_value is None:
            return 0
        judged_first, judged_second = self._judged()
        return int((judged_first != judged_second).sum())

    def _values(self, invalid: str) -> tuple[np.ndarray, np.ndarray]:
        """Each order's value for the policy, an invalid one scored as ``invalid`` says (NaN when
        it is ``"exclude"``), an unjudged one at :attr:`missing_order_value` (NaN when None)."""
        values = []
        for column, judged in zip(("policy_first", "policy_second"), self._judged()):
            value = self.frame[f"value_{column}"].to_numpy(dtype=float)
            if self.missing_order_value is not None:
                value = np.where(judged, value, self.missing_order_value)
            if invalid != "exclude":
                value = np.where(
                    (self.frame[f"outcome_{column}"] == "invalid").to_numpy(dtype=bool), _invalid_value(invalid), value
                )
            values.append(value)
        return values[0], values[1]

    @property
    def trials_per_contest(self) -> int:
        """Judged orders behind each contest score: 1 in a one-order design, else 2 (a mixed design
        reaching scoring has had its single-order contests left out or their missing orders scored)."""
        return 1 if self.design in (ONE_ORDER_RANDOMISED, ONE_ORDER_FIXED) else 2

    @property
    def policy_first(self) -> np.ndarray:
        """For single-order contests, whether the policy was shown first (True where both orders were judged)."""
        return self._judged()[0]

    def to_frame(self) -> pd.DataFrame:
        """One row per contest (a copy of :attr:`frame`)."""
        return self.frame.copy()

    def scores(self, rule: str = "both_orders", invalid: str = "exclude") -> ContestScores:
        """Scores of the contests under ``rule`` (see :func:`score_contests`).

        A contest judged in one order scores that order's value; with continuous preferences a
        both-order contest scores the mean of its two orders' values (``rule`` has no categorical
        verdicts to act on). ``invalid`` says what an order with an invalid verdict is worth to the
        policy: nothing (``"against_claim"``: scored as a loss, the conservative choice), half
        (``"tie"``), all (``"for_claim"``: the other end of the bound the ``valid_verdicts`` gate
        computes), or ``"exclude"`` (contests with one are left out, as if never judged).

        Computed once per (rule, invalid) and table: the audit asks for the same scores many
        times, and at a million contests each frame takes seconds to build.
        """
        cache = self.__dict__.setdefault("_scores_cache", {})
        if (rule, invalid) not in cache:
            cache[rule, invalid] = self._scores(rule, invalid)
        return cache[rule, invalid]

    def _scores(self, rule: str, invalid: str) -> ContestScores:
        scores, effective = self._row_scores(rule, invalid)
        invalid_contests = self._invalid_contests()
        if self.panel:
            return self._panel_scores(scores, effective, invalid)
        columns = ["contest_id", "vignette_id", "run", "policy_response", "opponent_response"]
        if invalid == "exclude" and invalid_contests.any():
            keep = ~invalid_contests
            frame, scores = self.frame.loc[keep, columns].reset_index(drop=True), scores[keep]
        else:  # every contest: the table's columns, shared until either frame is written to
            frame = self.frame[columns].reset_index(drop=True)
        frame.insert(3, "score", scores)
        return ContestScores(
            effective, self.policy, self.opponent, self.judge, frame, int(invalid_contests.sum()), invalid=invalid
        )

    def _row_scores(self, rule: str, invalid: str) -> tuple[np.ndarray, str]:
        """Each row's contest score (NaN where an order is invalid and ``invalid`` is "exclude")
        and the name of the rule in effect."""
        first, second = self._values(invalid)
        judged_first, judged_second = self._judged()
        both = judged_first & judged_second
        if self.missing_order_value is not None:  # every unjudged order has its value
            both = np.ones_like(both)
        if self.continuous:
            if rule not in RULES:
                raise InputError(f"unknown contest scoring rule {rule!r}", fix=f"use one of: {', '.join(RULES)}")
            paired = (first + second) / 2
        else:
            paired = score_contests(np.where(both, first, 0.0), np.where(both, second, 0.0), rule)
            paired = np.where(np.isnan(first) | np.isnan(second), np.nan, paired)
        scores = np.where(both, paired, np.where(judged_first, first, second))
        effective = rule
        if not both.all():
            effective = "one order" if not both.any() else f"{rule}; one order where only one was judged"
        if self.continuous:
            effective = "preference (mean over the judged orders)"
        return scores, effective

    def judge_scores(self, rule: str = "both_orders", invalid: str = "exclude") -> tuple[pd.DataFrame, np.ndarray]:
        """A panel's contests (vignette_id, policy_response, opponent_response, run, invalid: any
        judge's verdict invalid) and the (contests × judges) array of each judge's contest score,
        columns in the order of :attr:`panel` (NaN where invalid and ``invalid`` is "exclude")."""
        if not self.panel:
            raise InputError("judge_scores needs a panel's contests", fix="build them with build_panel_contests")
        return self._wide(self._row_scores(rule, invalid)[0])

    def _wide(self, scores: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        key = ["vignette_id", "policy_response", "opponent_response"]
        rows = self.frame[[*key, "run", "judge"]].assign(score=scores, invalid=self._invalid_contests())
        wide = rows.pivot(index=key, columns="judge", values="score")
        flags = rows.groupby(key, sort=False).agg(run=("run", "first"), invalid=("invalid", "any"))
        # contests in the order the table first lists them
        wide = wide.reindex(flags.index)[list(self.panel)]
        return flags.reset_index(), wide.to_numpy(dtype=float)

    def _panel_scores(self, scores: np.ndarray, effective: str, invalid: str) -> ContestScores:
        contests, matrix = self._wide(scores)
        keep = ~contests["invalid"].to_numpy(bool) if invalid == "exclude" else np.ones(len(contests), dtype=bool)
        frame = pd.DataFrame(
            {
                "contest_id": "panel:"
                + contests["policy_response"].astype(str)
                + ":"
                + contests["opponent_response"].astype(str),
                "vignette_id": contests["vignette_id"],
                "run": contests["run"],
                "score": panel_score(matrix, str(self.panel_rule)),
                "policy_response": contests["policy_response"],
                "opponent_response": contests["opponent_response"],
            }
        )[keep].reset_index(drop=True)
        rule = f"{effective}, panel {self.panel_rule} of {len(self.panel)} judges"
        n_invalid = int(contests["invalid"].sum())
        return ContestScores(rule, self.policy, self.opponent, self.judge, frame, n_invalid, invalid=invalid)

    def for_judge(self, judge: str) -> ContestTable:
        """One panel judge's contests, as :func:`build_contests` would give them (``dropped`` is the panel's)."""
        if judge not in self.panel:
            raise InputError(f"{judge!r} is not a judge of this panel", fix=f"use one of: {', '.join(self.panel)}")
        rows = (self.frame["judge"] == judge).to_numpy()
        return replace(self, frame=self.frame[rows].reset_index(drop=True), judge=judge, panel=(), panel_rule=None)

    def per_order_outcomes(self, invalid: str = "exclude") -> pd.DataFrame:
        """One row per judged order: contest_id, vignette_id, run, judge, policy_first (bool) and
        value (1 win, 0.5 tie, 0 loss, or the continuous preference for the policy), for
        per-order models.

        An order with an invalid verdict is scored as :meth:`scores` says for ``invalid``, or left
        out (``"exclude"``; :attr:`n_invalid_orders` counts them)."""
        keys = self.frame[["contest_id", "vignette_id", "run", "judge"]]
        values = self._values(invalid)
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


def _preference_problems(judgments: LoadedTable) -> list[Problem]:
    """Rows whose continuous preference is outside [0, 1] or contradicts their verdict."""
    frame = judgments.frame
    if "preference_first" not in frame:
        return []
    preferences = frame["preference_first"].to_numpy(dtype=float)
    given = np.flatnonzero(~np.isnan(preferences))
    verdicts = np.asarray(frame["verdict"].take(given), dtype=object)
    favoured = np.where(preferences[given] > 0.5, "first", np.where(preferences[given] < 0.5, "second", "tie"))
    # every row with a problem is suspect (an invalid verdict never equals a side); each is then named
    suspect = given[~((preferences[given] >= 0) & (preferences[given] <= 1) & (verdicts == favoured))]
    problems = []
    for line, verdict, preference in zip(
        judgments.lines[suspect].tolist(), frame["verdict"].take(suspect).tolist(), preferences[suspect].tolist()
    ):
        if not 0 <= preference <= 1:
            message, fix = f"{preference!r} is outside [0, 1]", "give the probability that the first response is better"
        elif verdict == "invalid":
            message, fix = (
                "an invalid verdict carries a preference",
                "leave preference_first empty, or give the verdict",
            )
        else:
            side = "first" if preference > 0.5 else "second" if preference < 0.5 else "tie"
            if verdict == side:
                continue
            message = f"preference {preference!r} favours {side!r} but the verdict is {verdict!r}"
            fix = "set the verdict to the side the preference favours (tie at exactly 0.5)"
        problems.append(Problem(judgments.path, int(line), "preference_first", message, fix))
    return problems


def build_contests(
    study_or_frames: Study | Mapping[str, LoadedTable | pd.DataFrame],
    policy: str,
    opponent: str,
    judge: str | None = None,
    single_order: str = "refuse",
) -> ContestTable:
    """Assemble the contests of ``policy`` against ``opponent`` judged by ``judge`` and name their design.

    Parameters
    ----------
    study_or_frames
        A :class:`~honestci.audit.data.io.Study`, or a mapping with ``responses`` and ``judgments`` given as
        :class:`~honestci.audit.data.validation.LoadedTable` or DataFrames (validated and cross-checked here).
    policy, opponent
        Systems (the responses' ``system``) to compare; outcomes are the policy's.
    judge
        The judge to use; may be omitted when only one judge compared the two systems.
    single_order
        What a mixed design (some contests judged in both orders, some in one) does with its
        single-order contests (:data:`SINGLE_ORDER_HANDLING`): ``"refuse"`` raises;
        ``"against_claim"`` keeps them, the missing order scored as a loss for the policy
        (``missing_order_value`` 0; the audit's default, the policy's ``missing_orders``);
        ``"exclude"`` leaves them out (counted in ``dropped["single_order"]``). A design with one
        order in every contest is detected and named whatever this says.

    Returns
    -------
    ContestTable
        One row per contest, in the order the judgments file first mentions them, with its
        ``design`` (module doc).

    Raises
    ------
    SchemaError
        A mixed design (when ``single_order`` is "refuse"), a preference outside [0, 1] or against its verdict, or
        invalid frames.
    InputError
        No judgment compares the two systems, or the judge is ambiguous or unknown.
    """
    responses, judgments = _contest_inputs(study_or_frames)
    problems = _preference_problems(judgments)
    if problems:
        raise SchemaError(
            f"{len(problems)} judgment(s) have a preference_first that cannot be used",
            problems,
            fix="give a probability in [0, 1] that agrees with the verdict (see docs/data-formats.md)",
        )
    if policy == opponent:
        raise InputError(f"policy and opponent are both {policy!r}", fix="compare two different systems")
    if single_order not in SINGLE_ORDER_HANDLING:
        raise InputError(
            f"unknown handling of single-order contests {single_order!r}", fix=f"use one of {SINGLE_ORDER_HANDLING}"
        )
    r, j = responses.frame, judgments.frame
    # Responses by position in the responses table (ids are unique and every judged response
    # exists: both are checked on loading), systems as a flag per response: no per-row Python below.
    response_ids = pd.Index(r["response_id"])
    first_pos = index_positions(response_ids, j["response_first"])
    second_pos = index_positions(response_ids, j["response_second"])
    # whether each response is the policy's, the opponent's (the last entry: position -1, unknown)
    is_policy, is_opponent = (
        np.append((r["system"] == name).to_numpy(dtype=bool), False) for name in (policy, opponent)
    )
    policy_first = is_policy[first_pos] & is_opponent[second_pos]
    selected = policy_first | (is_opponent[first_pos] & is_policy[second_pos])
    if not selected.any():
        system = dict(zip(r["response_id"], r["system"]))
        pairs = zip(j["response_first"].map(system), j["response_second"].map(system))
        judged = sorted({" vs ".join(sorted(pair)) for pair in pairs})
        raise InputError(
            f"no judgments compare {policy!r} with {opponent!r}",
            fix=f"name systems from the responses table ({', '.join(sorted(set(system.values())))}); pairs judged: {'; '.join(judged)}",
        )
    judges = sorted(j.loc[selected, "judge"].unique())
    if judge is None and len(judges) > 1:
        raise InputError(
            f"several judges compared {policy!r} with {opponent!r}: {', '.join(judges)}", fix="name the judge to use"
        )
    judge = judge if judge is not None else judges[0]
    if judge not in judges:
        raise InputError(
            f"judge {judge!r} did not compare {policy!r} with {opponent!r}", fix=f"use one of: {', '.join(judges)}"
        )
    rows = np.flatnonzero(selected & (j["judge"] == judge).to_numpy())
    contests, continuous = _judged_orders(len(r), j, judgments.lines, rows, first_pos, second_pos, policy_first)
    del first_pos, second_pos, policy_first, selected  # one per judgment: freed before the frame is built
    first_judged, second_judged = contests["line_policy_first"] >= 0, contests["line_policy_second"] >= 0
    both = first_judged & second_judged
    n_single, n_both = int((~both).sum()), int(both.sum())
    shown_first = int((first_judged & ~second_judged).sum())
    dropped: dict[str, int] = {}
    missing_order_value = None
    if n_single and n_both:
        if single_order == "refuse":
            single = pd.DataFrame({name: values[~both] for name, values in contests.items()}).assign(
                policy_first_only=first_judged[~both],
                policy_response=r["response_id"].to_numpy(dtype=object)[contests["policy_pos"][~both]],
                opponent_response=r["response_id"].to_numpy(dtype=object)[contests["opponent_pos"][~both]],
                vignette_id=r["vignette_id"].to_numpy(dtype=object)[contests["policy_pos"][~both]],
            )
            single = single.sort_values(["vignette_id", "policy_response", "opponent_response"], kind="stable")
            problems = [
                Problem(
                    judgments.path,
                    int(row.line_policy_first if row.policy_first_only else row.line_policy_second),
                    "response_first",
                    f"judge {judge!r} judged policy response {row.policy_response!r} vs opponent response "
                    f"{row.opponent_response!r} only with the {'policy' if row.policy_first_only else 'opponent'} shown first",
                    "judge the missing order",
                )
                for row in single.itertuples()
            ]
            raise SchemaError(
                f"{n_single} contest(s) of {policy!r} vs {opponent!r} were judged in one order only and {n_both} in "
                "both (a mixed design): the two kinds of contest score differently (a verdict that flips with the "
                "order is ½ in a both-order contest, a win or a loss in a single-order one), so they cannot be "
                "pooled into one win rate",
                problems,
                fix="judge the missing orders; how a missing order counts is the auditor's policy "
                "(`missing_orders:` in a policy file: against_claim, the default, or exclude)",
            )
        design = MIXED
        if single_order == "exclude":
            dropped = {"single_order": n_single}
            note = (
                f"mixed: {n_both} contest(s) judged in both orders, {n_single} in one order only; the single-order "
                "ones are left out (the policy's missing_orders: exclude), the rest scored by the both-orders rule"
            )
        else:
            missing_order_value = INVALID_ORDER_VALUE["against_claim"]
            note = (
                f"mixed: {n_both} contest(s) judged in both orders, {n_single} in one order only; every contest is "
                "scored by the both-orders rule, each missing order as a loss for the policy (the policy's "
                "missing_orders: against_claim)"
            )
    elif n_single:
        if 0 < shown_first < n_single:
            design = ONE_ORDER_RANDOMISED
            note = (
                f"one order per contest, the policy shown first in {shown_first} of {n_single} contests: the order "
                "is taken as randomised, so the win rate is order-balanced by design and position bias is "
                "estimated between contests (if the order was not random, both may be confounded)"
            )
        else:
            design = ONE_ORDER_FIXED
            note = (
                f"one order per contest, the policy always shown {'first' if shown_first else 'second'} "
                f"({n_single} contests): position bias is not identifiable, and every score carries it"
            )
    else:
        design, note = BOTH_ORDERS, f"both orders judged in all {n_both} contests"
    frame, left_out = _contest_frame(r, judge, contests), None
    if dropped:  # the single-order contests are kept aside: the valid_verdicts check reads them
        frame, left_out = frame[both].reset_index(drop=True), frame[~both].reset_index(drop=True)
    return ContestTable(
        frame,
        policy,
        opponent,
        judge,
        dropped,
        design,
        note,
        continuous,
        missing_order_value=missing_order_value,
        left_out=left_out,
    )


#: The per-order outcome codes (positions in :data:`OUTCOMES`) and their values for the policy.
_WIN, _LOSS, _TIE, _INVALID = range(4)
_CODE_VALUE = np.array([OUTCOME_VALUE[outcome] for outcome in OUTCOMES])


def _policy_outcomes(verdicts: pd.Series, rows: np.ndarray, policy_first: np.ndarray) -> np.ndarray:
    """The policy's outcome code (:data:`OUTCOMES`) in each of ``rows`` of the judgments, from its
    verdict ("first", "second", "tie", "invalid") and whether the policy was shown first; each
    distinct verdict is read once."""
    codes, labels = codes_of(verdicts)
    codes = codes[rows]
    as_first = {"first": _WIN, "second": _LOSS, "tie": _TIE, "invalid": _INVALID}
    unknown = [label for code, label in enumerate(labels) if label not in as_first and (codes == code).any()]
    if unknown or (codes < 0).any():
        _outcome_values(np.array((unknown or [np.nan])[:1], dtype=object))  # raises, naming it
    code = np.array([as_first.get(label, _INVALID) for label in labels], dtype=np.int8)[codes]
    swapped = np.array([_LOSS, _WIN, _TIE, _INVALID], dtype=np.int8)
    return np.where(policy_first, code, swapped[code])


def _judged_orders(
    n_responses: int,
    judgments: pd.DataFrame,
    lines: np.ndarray,
    rows: np.ndarray,
    first_pos: np.ndarray,
    second_pos: np.ndarray,
    policy_first: np.ndarray,
) -> tuple[dict[str, np.ndarray], bool]:
    """The contests (:func:`_pair_orders`) of the judgments' ``rows`` (one judge's, of the two
    systems; ``first_pos``, ``second_pos``: each judgment's responses by position, and whether the
    policy's was shown first) and whether any order carries a continuous preference."""
    pf = policy_first[rows]
    outcome = _policy_outcomes(judgments["verdict"], rows, pf)
    value = _CODE_VALUE[outcome]
    continuous = False
    # a column without a preference (the file's column absent, or empty) leaves the values as they
    # are: not read per row (three arrays of the judgments' length at a million contests)
    if "preference_first" in judgments and np.isfinite(judgments["preference_first"].to_numpy(dtype=float)).any():
        preference = judgments["preference_first"].to_numpy(dtype=float)[rows]
        continuous = bool(np.isfinite(preference).any())
        # the preference is for the response shown first: the policy's when it was
        value = np.where(np.isfinite(preference), np.where(pf, preference, 1 - preference), value)
    policy_pos = np.where(pf, first_pos[rows], second_pos[rows])
    opponent_pos = np.where(pf, second_pos[rows], first_pos[rows])
    return _pair_orders(n_responses, policy_pos, opponent_pos, pf, outcome, value, lines[rows]), continuous


def _pair_orders(
    n_responses: int,
    policy_pos: np.ndarray,
    opponent_pos: np.ndarray,
    policy_first: np.ndarray,
    outcome: np.ndarray,
    value: np.ndarray,
    lines: np.ndarray,
) -> dict[str, np.ndarray]:
    """One entry per contest (policy response, opponent response: their positions among the
    ``n_responses`` responses) from its judged orders, in the order the judgments first mention
    the contests: policy_pos, opponent_pos, and outcome_ (code, -1), value_ (NaN) and line_ (-1)
    policy_first and _policy_second, each marking where that order was not judged."""
    key = policy_pos.astype(np.int64) * max(n_responses, 1) + opponent_pos
    contest, keys = pd.factorize(key)  # numbered in the order of first mention when lines increase
    columns: dict[str, np.ndarray] = {
        "policy_pos": keys // max(n_responses, 1),
        "opponent_pos": keys % max(n_responses, 1),
    }
    for side, rows in (("policy_first", policy_first), ("policy_second", ~policy_first)):
        where = contest[rows]
        if np.bincount(where, minlength=keys.size).max(initial=0) > 1:  # the judgments' unique key forbids it
            raise InputError("a contest is judged twice in one order", fix="remove the duplicate judgment")
        index = np.full(keys.size, -1, dtype=np.int64)
        index[where] = np.flatnonzero(rows)
        has = index >= 0
        columns[f"outcome_{side}"] = np.where(has, outcome[index], -1).astype(np.int8)
        columns[f"value_{side}"] = np.where(has, value[index], np.nan)
        columns[f"line_{side}"] = np.where(has, lines[index], -1)
    first_line = np.where(
        columns["line_policy_first"] >= 0, columns["line_policy_first"], columns["line_policy_second"]
    )
    if (np.diff(first_line) < 0).any():
        first_line = np.where(
            (columns["line_policy_second"] >= 0) & (columns["line_policy_second"] < first_line),
            columns["line_policy_second"],
            first_line,
        )
        order = np.argsort(first_line, kind="stable")
        columns = {name: values[order] for name, values in columns.items()}
    return columns


def _contest_frame(responses: pd.DataFrame, judge: str, contests: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The frame of :class:`ContestTable` from the contests of :func:`_pair_orders`: every string
    column but contest_id a categorical (:func:`_categorical_of`; the outcomes' categories all
    four: a million contests name a few thousand vignettes and responses, and a code takes 1 to 4
    bytes where a string takes tens), contest_id built by pyarrow without a Python object per
    contest."""
    import pyarrow as pa
    import pyarrow.compute as pc

    policy_response = _categorical_of(responses["response_id"], contests["policy_pos"])
    opponent_response = _categorical_of(responses["response_id"], contests["opponent_pos"])

    def strings(values: pd.Categorical):
        return pa.array(values.categories, type=pa.large_string()).take(values.codes)

    separator = pa.scalar(":", pa.large_string())
    contest_id = pc.binary_join_element_wise(
        pa.scalar(judge, pa.large_string()), strings(policy_response), strings(opponent_response), separator
    )
    columns = {
        "contest_id": pd.Series(contest_id, dtype="str"),
        "judge": pd.Categorical.from_codes(np.zeros(len(contest_id), dtype=np.int8), categories=_objects([judge])),
        # a judged response's vignette is its judgment's (checked on loading)
        "vignette_id": _categorical_of(responses["vignette_id"], contests["policy_pos"]),
        "run": _categorical_of(responses["run"].fillna(DEFAULT_RUN), contests["policy_pos"]),
        "policy_response": policy_response,
        "opponent_response": opponent_response,
    }
    # the outcomes' codes (positions in OUTCOMES, -1 where not judged) among the sorted outcomes
    outcomes = sorted(OUTCOMES)
    recode = np.array([*(outcomes.index(outcome) for outcome in OUTCOMES), -1], dtype=np.int8)
    for side in ("policy_first", "policy_second"):
        columns[f"outcome_{side}"] = pd.Categorical.from_codes(
            recode[contests[f"outcome_{side}"]], categories=_objects(outcomes)
        )
    frame = pd.DataFrame(columns, copy=False)
    for side in ("policy_first", "policy_second"):
        frame[f"value_{side}"] = contests[f"value_{side}"]
    for side in ("policy_first", "policy_second"):
        line = contests[f"line_{side}"]
        frame[f"line_{side}"] = pd.arrays.IntegerArray(line, line < 0)
    release_arrow_memory()  # the response ids' strings joined into contest_id
    return frame


def _categorical_of(column: pd.Series, positions: np.ndarray) -> pd.Categorical:
    """``column``'s values at ``positions`` (no value missing) as a categorical whose categories
    are the values present, sorted (so that sorting and grouping by it order as by the strings)."""
    categorical = pd.Categorical(column)
    codes = categorical.codes[positions]
    present = np.bincount(codes, minlength=len(categorical.categories)) > 0
    recode = (np.cumsum(present) - 1).astype(codes.dtype)
    return pd.Categorical.from_codes(recode[codes], categories=_objects(categorical.categories[present]))


def _objects(categories) -> pd.Index:
    """Categories held as Python objects: the categorical's ``to_numpy()`` (which consumers call
    on a million rows) then points at them, where categories of the ``str`` dtype make one new
    string per row (~60 MB at a million contests)."""
    return pd.Index(categories, dtype=object)


def panel_label(judges) -> str:
    """How reports name a panel: ``panel(a, b, c)``."""
    return f"panel({', '.join(judges)})"


def build_panel_contests(
    study_or_frames: Study | Mapping[str, LoadedTable | pd.DataFrame],
    policy: str,
    opponent: str,
    judges,
    rule: str,
    single_order: str = "refuse",
) -> ContestTable:
    """The contests of ``policy`` against ``opponent`` judged by every judge of a panel.

    Each judge's contests are assembled by :func:`build_contests` and stacked; the table's
    :meth:`ContestTable.scores` gives one panel score per contest by ``rule`` (:func:`panel_score`).

    The panel must be *complete*: every judge judged every contest, in the same design. A contest
    some judges skipped would be scored by a different panel than the rest, and with judges of
    different leniency that moves the win rate by which contests they skipped.

    Raises
    ------
    InputError
        Fewer than two distinct judges, an unknown rule, or a judge that did not compare the
        two systems.
    SchemaError
        The judges judged different contests, or in different designs.
    """
    judges = tuple(str(j) for j in judges)
    if len(judges) < 2 or len(set(judges)) != len(judges):
        raise InputError(
            f"a panel needs at least two distinct judges, got {list(judges)}",
            fix="name two or more different judges in `panel:`, or name one in `judge:`",
        )
    if rule not in PANEL_RULES:
        raise InputError(f"unknown panel rule {rule!r}", fix=f"use one of: {', '.join(PANEL_RULES)}")
    tables = [build_contests(study_or_frames, policy, opponent, judge, single_order) for judge in judges]
    designs = {t.judge: t.design for t in tables}
    # a mixed design scores by both orders (its single-order contests left out or their missing orders scored)
    if len({BOTH_ORDERS if d == MIXED else d for d in designs.values()}) > 1:
        raise SchemaError(
            "the panel's judges judged in different designs: "
            + "; ".join(f"{judge}: {design}" for judge, design in designs.items()),
            fix="use judges of one design in a panel, or audit each judge alone (`judge:`)",
        )
    key = ["vignette_id", "policy_response", "opponent_response"]
    contests = {t.judge: set(map(tuple, t.frame[key].to_numpy().tolist())) for t in tables}
    every = set().union(*contests.values())
    judgments = study_or_frames.judgments if isinstance(study_or_frames, Study) else None
    path = judgments.path if judgments is not None else "judgments"
    problems = [
        Problem(
            path,
            None,
            "judge",
            f"judge {judge!r} did not judge policy response {contest[1]!r} vs opponent response {contest[2]!r} "
            f"(vignette {contest[0]!r}), which other panel judges judged",
            "judge it, or leave that judge out of the panel",
        )
        for judge, judged in contests.items()
        for contest in sorted(every - judged)
    ]
    if problems:
        raise SchemaError(
            f"the panel is incomplete: {len(problems)} judge-contest(s) missing of {len(every)} contests × "
            f"{len(judges)} judges",
            problems,
            fix="every panel judge must judge every contest; judge the missing ones or narrow the panel",
        )
    dropped: dict[str, int] = {}
    for table in tables:
        for name, count in table.dropped.items():
            dropped[name] = dropped.get(name, 0) + count
    first = next((t for t in tables if t.design == MIXED), tables[0])
    note = (first.design_note + "; " if first.design_note else "") + (
        f"a panel of {len(judges)} judges ({', '.join(judges)}), each contest scored by the panel rule {rule!r}"
    )
    return ContestTable(
        pd.concat([t.frame for t in tables], ignore_index=True),
        policy,
        opponent,
        panel_label(judges),
        dropped,
        first.design,
        note,
        any(t.continuous for t in tables),
        panel=judges,
        panel_rule=rule,
        missing_order_value=first.missing_order_value,
    )


def build_claim_contests(
    study_or_frames: Study | Mapping[str, LoadedTable | pd.DataFrame],
    policy: str,
    opponent: str,
    *,
    judge: str | None = None,
    panel=None,
    panel_rule: str | None = None,
    missing_orders: str = "against_claim",
) -> ContestTable:
    """The contests a claim names: a panel's when ``panel`` is given, else one judge's; a mixed
    design's single-order contests as the policy's ``missing_orders`` says (:func:`build_contests`)."""
    if panel:
        return build_panel_contests(study_or_frames, policy, opponent, panel, panel_rule or "", missing_orders)
    return build_contests(study_or_frames, policy, opponent, judge=judge, single_order=missing_orders)
