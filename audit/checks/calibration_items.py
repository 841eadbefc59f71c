"""Calibration's inputs: human and judge preferences coded on one scale, the items, the judged rows.

The codes (``+1`` a preferred, ``0`` tie, ``-1`` b preferred, :data:`INVALID_CODE` or NaN for an
invalid verdict by ``invalid_as``), the human reference of an item, and the tables they are read
from are described in :mod:`honestci.audit.checks.calibration`, the check that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from honestci.audit.errors import InputError

PREFERS_A, TIE, PREFERS_B = 1.0, 0.0, -1.0
#: Ordered classes (b preferred < tie < a preferred), the order of every confusion table.
CLASSES = (PREFERS_B, TIE, PREFERS_A)
LABEL_CODES = {"a": PREFERS_A, "tie": TIE, "b": PREFERS_B}
#: Code of an invalid verdict under ``invalid_as="disagreement"``: off the -1/0/+1 scale, so it
#: equals no human code, and its class index (code + 1 = 3) is the fourth row of the confusion table.
INVALID_CODE = 2.0
#: How invalid verdicts count in calibration (:mod:`honestci.audit.checks.calibration`); the first is the default.
INVALID_AS = ("disagreement", "tie", "exclude")
#: The audit policy's ``invalid_verdicts`` (:data:`honestci.audit.policy.INVALID_SCORING`) read for calibration.
INVALID_AS_FROM_POLICY = {"against_claim": "disagreement", "tie": "tie", "exclude": "exclude"}
SOURCES = ("auto", "pairs", "ratings")


# --- codes ----------------------------------------------------------------------------------


def verdict_to_preference(
    verdict, response_first, response_second, response_a, response_b, invalid_as: str = "disagreement"
) -> np.ndarray:
    """Code each judged order's verdict as a preference between the item's responses a and b.

    ``first`` prefers ``response_first``, ``second`` prefers ``response_second``; the preferred
    response is coded +1 if it is a and -1 if it is b; ``tie`` is 0; ``invalid`` is
    :data:`INVALID_CODE` (``invalid_as="disagreement"``), 0 (``"tie"``, PandaLM's rule for
    unparseable output) or NaN (``"exclude"``).

    Raises
    ------
    InputError
        A judged pair that is not {a, b}, or an unknown verdict.
    """
    verdict = np.asarray(verdict, dtype=object)
    first, second = np.asarray(response_first, dtype=object), np.asarray(response_second, dtype=object)
    a, b = np.asarray(response_a, dtype=object), np.asarray(response_b, dtype=object)
    same = ((first == a) & (second == b)) | ((first == b) & (second == a))
    if not same.all():
        raise InputError(
            f"{int((~same).sum())} judged order(s) compare responses other than their item's a and b.",
            fix="match judgments to items by their unordered response pair",
        )
    check_invalid_as(invalid_as)
    known = np.isin(verdict, ("first", "second", "tie", "invalid"))
    if not known.all():
        raise InputError(f"unknown verdict {verdict[~known][0]!r}", fix="use first, second, tie or invalid")
    first_is_a = first == a
    code = np.where(
        verdict == "first",
        np.where(first_is_a, PREFERS_A, PREFERS_B),
        np.where(
            verdict == "second",
            np.where(first_is_a, PREFERS_B, PREFERS_A),
            np.where(verdict == "tie", TIE, {"disagreement": INVALID_CODE, "tie": TIE, "exclude": np.nan}[invalid_as]),
        ),
    )
    return code.astype(float)


def check_invalid_as(invalid_as: str) -> None:
    """:class:`InputError` unless ``invalid_as`` is one of :data:`INVALID_AS`."""
    if invalid_as not in INVALID_AS:
        raise InputError(
            f"invalid_as={invalid_as!r} is not one of {INVALID_AS}.",
            fix="use 'disagreement' (default: a failed verdict counts against the judge), 'tie' or 'exclude'",
        )


def preference_from_difference(difference, min_margin: float = 0.0) -> np.ndarray:
    """+1 when ``difference`` (a minus b) exceeds ``min_margin``, -1 below ``-min_margin``, else 0 (NaN stays NaN)."""
    if not (np.isfinite(min_margin) and min_margin >= 0):
        raise InputError(f"min_margin = {min_margin!r} must be a finite number >= 0.", fix="use e.g. 0 or 0.5")
    d = np.asarray(difference, dtype=float)
    return np.where(np.isnan(d), np.nan, np.where(d > min_margin, PREFERS_A, np.where(d < -min_margin, PREFERS_B, TIE)))


def majority_preference(rater_codes, split: str = "tie") -> np.ndarray:
    """Majority of each row's rater codes (NaN = no label); ties explicit.

    The most frequent code wins; when two or more codes share the top count the item is a tie
    (``split="tie"``) or takes the first rater's label (``split="first_rater"``: the first column
    with a label, PandaLM's rule). A row without labels is NaN.
    """
    codes = np.asarray(rater_codes, dtype=float)
    if codes.ndim != 2:
        raise InputError("rater codes must be an items x raters matrix.", fix="one column per rater")
    if split not in ("tie", "first_rater"):
        raise InputError(f"split={split!r} is not 'tie' or 'first_rater'.", fix="use 'tie' (default) or 'first_rater'")
    counts = np.stack([(codes == c).sum(axis=1) for c in CLASSES], axis=1)
    top = counts.max(axis=1)
    unique_top = (counts == top[:, None]).sum(axis=1) == 1
    winner = np.asarray(CLASSES)[counts.argmax(axis=1)]
    labelled = ~np.isnan(codes)
    first_label = codes[np.arange(len(codes)), labelled.argmax(axis=1)] if len(codes) else np.zeros(0)
    fallback = TIE if split == "tie" else first_label
    out = np.where(unique_top, winner, fallback)
    return np.where(top > 0, out, np.nan)


# --- from tables: items, judged rows ----------------------------------------------------------


def pair_key(vignette, x, y) -> np.ndarray:
    """Key of the unordered pair {x, y} of a vignette."""
    x, y = np.asarray(x, dtype=str), np.asarray(y, dtype=str)
    low, high = np.where(x <= y, x, y), np.where(x <= y, y, x)
    return np.char.add(
        np.char.add(np.asarray(vignette, dtype=str), "\x1f"), np.char.add(np.char.add(low, "\x1f"), high)
    )


@dataclass(frozen=True, eq=False)
class CalibrationItems:
    """Items (unordered response pairs with human preferences) and each rater's code per item.

    ``items`` has one row per item: item_key, vignette_id, response_a, response_b, human (the
    reference code). ``rater_codes`` is items x raters (NaN: not labelled); ``rater_differences``
    (from ratings only) is each rater's score difference a − b.
    """

    source: str
    items: pd.DataFrame
    rater_ids: tuple[str, ...]
    rater_codes: np.ndarray = field(repr=False)
    rater_differences: np.ndarray | None = field(repr=False)
    min_margin: float = 0.0
    split: str = "tie"

    def to_frame(self) -> pd.DataFrame:
        return self.items.copy()


def _frame(table) -> pd.DataFrame | None:
    if table is None:
        return None
    frame = getattr(table, "frame", table)
    if isinstance(frame, (list, tuple)):
        frame = pd.DataFrame(list(frame))
    return frame if len(frame) else None


def calibration_items(
    *,
    human_pairs=None,
    human_ratings=None,
    judgments=None,
    source: str = "auto",
    min_margin: float = 0.0,
    split: str = "tie",
) -> CalibrationItems:
    """Build calibration items from human pairwise labels or from human ratings.

    ``source="pairs"``: items are the labelled pairs; each rater's label (a, b, tie; a row with a
    and b swapped is flipped), the reference is the raters' majority (``split``).
    ``source="ratings"``: items are the pairs of ``human_pairs`` if given, else every pair the
    judgments compare, whose two responses both have ratings; a rater's code is the sign of their
    score difference, the reference the sign of the mean difference over raters who rated both
    beyond ``min_margin``. ``"auto"``: pairs when present, else ratings.
    Tables may be :class:`honestci.audit.data.validation.LoadedTable`, DataFrames or lists of row dicts.
    """
    pairs, ratings, judged = _frame(human_pairs), _frame(human_ratings), _frame(judgments)
    if source not in SOURCES:
        raise InputError(f"source={source!r} is not one of {SOURCES}.", fix="use auto, pairs or ratings")
    if source == "auto":
        source = "pairs" if pairs is not None else "ratings"
    if source == "pairs" and pairs is None:
        raise InputError(
            "calibration from pairwise labels needs a human_pairs table.", fix="add human_pairs to the claim's data"
        )
    if source == "ratings" and ratings is None:
        raise InputError(
            "calibration from ratings needs a human_ratings table.", fix="add human_ratings to the claim's data"
        )
    if source == "pairs":
        return _items_from_pairs(pairs, split)
    return _items_from_ratings(ratings, pairs, judged, min_margin)


def _orient(keys, vignettes, a, b) -> pd.DataFrame:
    """One row per distinct key, oriented as its first appearance."""
    frame = pd.DataFrame(
        {
            "item_key": keys,
            "vignette_id": np.asarray(vignettes, dtype=str),
            "response_a": np.asarray(a, dtype=str),
            "response_b": np.asarray(b, dtype=str),
        }
    )
    return frame.drop_duplicates("item_key").reset_index(drop=True)


def _items_from_pairs(pairs: pd.DataFrame, split: str) -> CalibrationItems:
    keys = pair_key(pairs["vignette_id"], pairs["response_a"], pairs["response_b"])
    items = _orient(keys, pairs["vignette_id"], pairs["response_a"], pairs["response_b"])
    index = pd.Index(items["item_key"]).get_indexer(keys)
    raters = tuple(pd.unique(pairs["rater_id"].astype(str)))
    rater_index = pd.Index(raters).get_indexer(pairs["rater_id"].astype(str))
    labels = pairs["label"].astype(str).map(LABEL_CODES).to_numpy(dtype=float)
    if np.isnan(labels).any():
        bad = pairs["label"].astype(str)[np.isnan(labels)].iloc[0]
        raise InputError(f"human pair label {bad!r} is not a, b or tie.", fix="use a, b or tie")
    swapped = pairs["response_a"].astype(str).to_numpy() != items["response_a"].to_numpy()[index]
    labels = np.where(swapped, -labels, labels)
    duplicate = pd.Series(list(zip(index, rater_index))).duplicated()
    if duplicate.any():
        raise InputError(
            f"{int(duplicate.sum())} pair(s) were labelled twice by the same rater.",
            fix="keep one label per (pair, rater)",
        )
    codes = np.full((len(items), len(raters)), np.nan)
    codes[index, rater_index] = labels
    items["human"] = majority_preference(codes, split=split)
    return CalibrationItems("pairs", items, raters, codes, None, 0.0, split)


def _items_from_ratings(ratings: pd.DataFrame, pairs, judged, min_margin: float) -> CalibrationItems:
    scores = ratings.pivot_table(index="response_id", columns="rater_id", values="score", aggfunc="mean")
    if pairs is not None:
        vig, a, b = pairs["vignette_id"], pairs["response_a"], pairs["response_b"]
    elif judged is not None:
        vig, a, b = judged["vignette_id"], judged["response_first"], judged["response_second"]
    else:
        raise InputError(
            "calibration from ratings needs the pairs to compare (human_pairs or judgments).",
            fix="add the judgments table",
        )
    items = _orient(pair_key(vig, a, b), vig, a, b)
    rated = items["response_a"].isin(scores.index) & items["response_b"].isin(scores.index)
    items = items[rated.to_numpy()].reset_index(drop=True)
    if items.empty:
        raise InputError("no compared pair has ratings of both responses.", fix="rate both responses of judged pairs")
    differences = scores.loc[items["response_a"]].to_numpy() - scores.loc[items["response_b"]].to_numpy()
    codes = preference_from_difference(differences, 0.0)
    counted = (~np.isnan(differences)).sum(axis=1)
    mean = np.where(counted > 0, np.nansum(differences, axis=1) / np.maximum(counted, 1), np.nan)
    items["human"] = preference_from_difference(mean, min_margin)
    return CalibrationItems("ratings", items, tuple(map(str, scores.columns)), codes, differences, float(min_margin))


def judged_rows(items: CalibrationItems, judgments, judge: str, invalid_as: str = "disagreement") -> pd.DataFrame:
    """The judge's verdicts on the items, one row per judged order, invalid verdicts included.

    Columns: item (index into ``items.items``), vignette_id, response_first, verdict, status
    (``"valid"`` or ``"invalid"``), judge_code (see :func:`verdict_to_preference`; how an invalid
    verdict is coded follows ``invalid_as``), human (the item's reference code).
    """
    frame = _frame(judgments)
    if frame is None:
        raise InputError("no judgments to calibrate.", fix="add the judgments table")
    frame = frame[frame["judge"].astype(str) == judge]
    keys = pair_key(frame["vignette_id"], frame["response_first"], frame["response_second"])
    index = pd.Index(items.items["item_key"]).get_indexer(keys)
    frame, index = frame[index >= 0], index[index >= 0]
    item = items.items.iloc[index]
    return pd.DataFrame(
        {
            "item": index,
            "vignette_id": item["vignette_id"].to_numpy(),
            "response_first": frame["response_first"].astype(str).to_numpy(),
            "verdict": frame["verdict"].astype(str).to_numpy(),
            "status": np.where(frame["verdict"].astype(str).to_numpy() == "invalid", "invalid", "valid"),
            "judge_code": verdict_to_preference(
                frame["verdict"].to_numpy(),
                frame["response_first"].to_numpy(),
                frame["response_second"].to_numpy(),
                item["response_a"].to_numpy(),
                item["response_b"].to_numpy(),
                invalid_as=invalid_as,
            ),
            "human": item["human"].to_numpy(),
        }
    )


def judges_other_than(judgments, judge: str) -> tuple[str, ...]:
    """Every judge with verdicts in ``judgments`` except ``judge``, in order of appearance (none without judgments)."""
    frame = _frame(judgments)
    return () if frame is None else tuple(j for j in pd.unique(frame["judge"].astype(str)) if j != judge)


def contest_human_scores(scored: pd.DataFrame, items: CalibrationItems) -> np.ndarray:
    """The human score of each scored contest on the policy's scale, NaN where humans gave none.

    ``scored`` has one row per contest with ``vignette_id``, ``policy_response`` and
    ``opponent_response`` (``ContestTable.scores(...).frame``). Y = 1 when humans prefer the
    policy's response, ½ on a human tie, 0 otherwise, matched on the unordered pair of responses.
    """
    keys = pair_key(scored["vignette_id"], scored["policy_response"], scored["opponent_response"])
    index = pd.Index(items.items["item_key"]).get_indexer(keys)
    labelled = index >= 0
    y = np.full(len(scored), np.nan)
    item = items.items.iloc[index[labelled]]
    human = item["human"].to_numpy(dtype=float)
    policy_is_a = item["response_a"].to_numpy() == scored["policy_response"].to_numpy()[labelled]
    y[labelled] = np.where(policy_is_a, (human + 1) / 2, (1 - human) / 2)
    return y
