"""Contests: assembly from both-order judgments, outcome mapping, scoring rules."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from honestci.audit.data.contests import MIXED, build_contests, score_contests
from honestci.audit.data.io import load_study
from honestci.audit.errors import InputError, SchemaError

RESPONSES = [
    # vignette v1: policy P (run-2) vs opponent O; v2 and v3: runs left empty
    {"response_id": "p1", "vignette_id": "v1", "system": "P", "text": "a", "run": "run-2"},
    {"response_id": "o1", "vignette_id": "v1", "system": "O", "text": "b", "run": "run-2"},
    {"response_id": "p2", "vignette_id": "v2", "system": "P", "text": "c"},
    {"response_id": "o2", "vignette_id": "v2", "system": "O", "text": "d"},
    {"response_id": "p3", "vignette_id": "v3", "system": "P", "text": "e"},
    {"response_id": "o3", "vignette_id": "v3", "system": "O", "text": "f"},
    {"response_id": "q3", "vignette_id": "v3", "system": "Q", "text": "g"},
]


def judgment(first, second, verdict, judge="J", vignette=None):
    return {
        "judge": judge,
        "vignette_id": vignette or "v" + first[-1],
        "response_first": first,
        "response_second": second,
        "verdict": verdict,
    }


# Hand-worked contests (outcomes from P's point of view, P first / P second):
JUDGMENTS = [
    judgment("p1", "o1", "first"),  # line 1: P first, P wins
    judgment("o1", "p1", "second"),  # line 2: P second, P wins      -> win, win
    judgment("p2", "o2", "first"),  # line 3: P first, P wins
    judgment("o2", "p2", "first"),  # line 4: P second, O wins      -> win, loss (order flips)
    judgment("o3", "p3", "tie"),  # line 5: P second, tie
    judgment("p3", "o3", "second"),  # line 6: P first, O wins       -> loss, tie
    judgment("p3", "q3", "first"),  # line 7: P vs Q: not in P vs O
]


def study(tmp_path, judgments=JUDGMENTS, responses=RESPONSES):
    paths = {
        "vignettes": tmp_path / "vignettes.jsonl",
        "responses": tmp_path / "responses.jsonl",
        "judgments": tmp_path / "judgments.jsonl",
    }
    tables = {
        "vignettes": [{"vignette_id": f"v{i}", "text": "t"} for i in (1, 2, 3)],
        "responses": responses,
        "judgments": judgments,
    }
    for name, rows in tables.items():
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return load_study(paths)


def test_contests_pair_both_orders_from_the_policys_side(tmp_path):
    contests = build_contests(study(tmp_path), "P", "O")
    frame = contests.to_frame()
    assert frame["policy_response"].tolist() == ["p1", "p2", "p3"]
    assert frame["opponent_response"].tolist() == ["o1", "o2", "o3"]
    assert frame["outcome_policy_first"].tolist() == ["win", "win", "loss"]
    assert frame["outcome_policy_second"].tolist() == ["win", "loss", "tie"]
    assert frame["line_policy_first"].tolist() == [1, 3, 6]
    assert frame["line_policy_second"].tolist() == [2, 4, 5]
    assert frame["run"].tolist() == ["run-2", "run-1", "run-1"]  # an empty run is run-1
    assert frame["judge"].tolist() == ["J"] * 3 and contests.judge == "J"
    assert frame["contest_id"].is_unique and contests.n_invalid == 0 and dict(contests.dropped) == {}


def test_contest_strings_are_categoricals_of_the_values_present(tmp_path):
    # a million contests name a few thousand responses and vignettes: codes, not one string per row
    contests = build_contests(study(tmp_path), "P", "O")
    expected = {
        "judge": ["J"],
        "vignette_id": ["v1", "v2", "v3"],
        "run": ["run-1", "run-2"],
        "policy_response": ["p1", "p2", "p3"],
        "opponent_response": ["o1", "o2", "o3"],  # q3 (system Q) is no contest's
        "outcome_policy_first": ["invalid", "loss", "tie", "win"],
        "outcome_policy_second": ["invalid", "loss", "tie", "win"],
    }
    for frame in (contests.frame, contests.scores().frame):
        for name, categories in expected.items():
            if name in frame:
                assert frame[name].cat.categories.tolist() == categories, name
                # object categories: to_numpy() points at them instead of making a string per row
                rows = frame[name].to_numpy()
                assert rows[0] is frame[name].cat.categories[frame[name].cat.codes[0]]
        assert frame["contest_id"].dtype == "str"
    assert contests.scores().frame.columns.tolist() == [
        "contest_id",
        "vignette_id",
        "run",
        "score",
        "policy_response",
        "opponent_response",
    ]


def test_scores_by_hand(tmp_path):
    contests = build_contests(study(tmp_path), "P", "O")
    # both_orders: win+win = 1, win+loss = 1/2 (order-inconsistent), loss+tie = 1/2
    assert contests.scores("both_orders").values.tolist() == [1.0, 0.5, 0.5]
    # order_average: (1+1)/2, (1+0)/2, (0+0.5)/2
    assert contests.scores("order_average").values.tolist() == [1.0, 0.5, 0.25]


@pytest.mark.parametrize(
    "first, second, both, average",
    [
        ("win", "win", 1.0, 1.0),
        ("loss", "loss", 0.0, 0.0),
        ("win", "loss", 0.5, 0.5),
        ("loss", "win", 0.5, 0.5),
        ("tie", "tie", 0.5, 0.5),
        ("win", "tie", 0.5, 0.75),
        ("tie", "loss", 0.5, 0.25),
        ("invalid", "win", np.nan, np.nan),
        ("loss", "invalid", np.nan, np.nan),
    ],
)
def test_score_rules_on_each_outcome_pair(first, second, both, average):
    np.testing.assert_equal(score_contests([first], [second], "both_orders"), [both])
    np.testing.assert_equal(score_contests([first], [second], "order_average"), [average])
    # the same from per-order values (win 1, tie 0.5, loss 0, invalid NaN)
    values = {"win": 1.0, "tie": 0.5, "loss": 0.0, "invalid": np.nan}
    np.testing.assert_equal(
        score_contests(np.array([values[first]]), np.array([values[second]]), "both_orders"), [both]
    )


def test_score_rejects_unknown_rule_and_outcome():
    with pytest.raises(InputError, match="both_orders, order_average"):
        score_contests(["win"], ["win"], "majority")
    with pytest.raises(InputError, match="unknown contest outcome 'draw'"):
        score_contests(["win"], ["draw"])
    with pytest.raises(InputError, match="unknown contest outcome"):
        score_contests([1.0], [0.7])


@pytest.mark.parametrize("rule", ["both_orders", "order_average"])
def test_swapping_policy_and_opponent_gives_one_minus_the_score(tmp_path, rule):
    loaded = study(tmp_path)
    forward = build_contests(loaded, "P", "O").scores(rule).to_frame()
    backward = build_contests(loaded, "O", "P").scores(rule).to_frame()
    assert forward["score"].tolist() != [0.5] * 3  # the check below is not trivially true
    np.testing.assert_allclose(backward["score"].to_numpy(), 1 - forward["score"].to_numpy())


def test_invalid_verdicts_are_counted_not_scored(tmp_path):
    judgments = [*JUDGMENTS[:3], judgment("o2", "p2", "invalid"), *JUDGMENTS[4:]]
    contests = build_contests(study(tmp_path, judgments), "P", "O")
    assert contests.n_invalid == 1 and contests.n_invalid_orders == 1
    scores = contests.scores()
    assert scores.to_frame()["contest_id"].tolist() == ["J:p1:o1", "J:p3:o3"]
    assert scores.values.tolist() == [1.0, 0.5] and scores.n_invalid == 1
    assert "1 contest(s) with an invalid verdict left out" in str(scores)


@pytest.mark.parametrize(
    "invalid, scores, order_average",
    [
        # Contest 2 is P first: win, P second: invalid. Contests 1 and 3 stay (1.0 and 0.5).
        ("against_claim", [1.0, 0.5, 0.5], [1.0, 0.5, 0.25]),  # invalid = loss: win/loss flips -> 1/2
        ("tie", [1.0, 0.5, 0.5], [1.0, 0.75, 0.25]),
        ("for_claim", [1.0, 1.0, 0.5], [1.0, 1.0, 0.25]),  # invalid = win: win/win -> 1
        ("exclude", [1.0, 0.5], [1.0, 0.25]),
    ],
)
def test_invalid_verdicts_score_as_the_policy_says(tmp_path, invalid, scores, order_average):
    judgments = [*JUDGMENTS[:3], judgment("o2", "p2", "invalid"), *JUDGMENTS[4:]]
    contests = build_contests(study(tmp_path, judgments), "P", "O")
    assert contests.scores(invalid=invalid).values.tolist() == scores
    assert contests.scores("order_average", invalid=invalid).values.tolist() == order_average
    assert contests.scores(invalid=invalid).n_invalid == 1


def test_an_unknown_scoring_of_invalid_verdicts_is_refused(tmp_path):
    with pytest.raises(InputError, match="unknown scoring of invalid verdicts"):
        build_contests(study(tmp_path), "P", "O").scores(invalid="drop")


def test_per_order_outcomes(tmp_path):
    long = build_contests(study(tmp_path), "P", "O").per_order_outcomes()
    assert list(long.columns) == ["contest_id", "vignette_id", "run", "judge", "policy_first", "value"]
    assert long["policy_first"].tolist() == [True, False] * 3
    assert long["value"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.5]
    assert long["vignette_id"].tolist() == ["v1", "v1", "v2", "v2", "v3", "v3"]


def test_duplicate_judgment_names_both_lines(tmp_path):
    with pytest.raises(SchemaError) as caught:
        study(tmp_path, [*JUDGMENTS, judgment("o2", "p2", "second")])
    text = str(caught.value)
    assert "judgments.jsonl, line 8" in text and "on lines 4, 8" in text


def test_duplicate_judgment_in_frames_is_caught_too():
    frames = {"responses": pd.DataFrame(RESPONSES), "judgments": pd.DataFrame([*JUDGMENTS, JUDGMENTS[0]])}
    with pytest.raises(SchemaError, match="on lines 1, 8"):
        build_contests(frames, "P", "O")


def test_frames_with_unknown_responses_are_refused():
    frames = {
        "responses": pd.DataFrame(RESPONSES),
        "judgments": pd.DataFrame([*JUDGMENTS, judgment("p2", "x2", "tie")]),
    }
    with pytest.raises(
        SchemaError, match=r"<judgments frame>, line 8, field 'response_second': response 'x2' is not in"
    ):
        build_contests(frames, "P", "O")


def test_contests_from_frames_match_contests_from_files(tmp_path):
    frames = {"responses": pd.DataFrame(RESPONSES), "judgments": pd.DataFrame(JUDGMENTS)}
    pd.testing.assert_frame_equal(
        build_contests(frames, "P", "O").frame, build_contests(study(tmp_path), "P", "O").frame
    )


def test_single_order_contest_is_an_error_when_refused(tmp_path):
    loaded = study(tmp_path, [judgment for judgment in JUDGMENTS if judgment["verdict"] != "tie"])
    with pytest.raises(SchemaError) as caught:
        build_contests(loaded, "P", "O", single_order="refuse")
    (problem,) = caught.value.problems
    assert problem.file.endswith("judgments.jsonl") and problem.line == 5
    text = str(caught.value)
    assert "judge 'J' judged policy response 'p3' vs opponent response 'o3' only with the policy shown first" in text
    assert "missing_orders:" in text


def test_single_order_contests_can_be_left_out_and_counted(tmp_path):
    loaded = study(tmp_path, [judgment for judgment in JUDGMENTS if judgment["verdict"] != "tie"])
    contests = build_contests(loaded, "P", "O", single_order="exclude")
    assert contests.frame["policy_response"].tolist() == ["p1", "p2"]
    assert dict(contests.dropped) == {"single_order": 1}


@pytest.mark.parametrize(
    ("dropped_line", "expected"),
    [
        (2, [0.5, 0.5, 0.5]),  # contest 1: P first won, P second unjudged: win and loss flip, 1/2 (was 1)
        (3, [1.0, 0.0, 0.5]),  # contest 2: P second lost, P first unjudged: a loss twice, 0 (was 1/2)
        (5, [1.0, 0.5, 0.0]),  # contest 3: P first lost, P second unjudged: a loss twice, 0 (was 1/2)
        (6, [1.0, 0.5, 0.5]),  # contest 3: P second tied, P first unjudged: tie and loss, 1/2 (as before)
    ],
)
def test_a_missing_order_is_scored_against_the_claim_and_never_raises_a_score(tmp_path, dropped_line, expected):
    for name in ("all", "mixed"):
        (tmp_path / name).mkdir()
    complete_table = build_contests(study(tmp_path / "all"), "P", "O")
    complete = complete_table.scores().values
    kept = [j for line, j in enumerate(JUDGMENTS, start=1) if line != dropped_line]
    contests = build_contests(study(tmp_path / "mixed", kept), "P", "O", single_order="against_claim")
    scores = contests.scores()
    assert contests.design == MIXED and contests.n_missing_orders == 1 and not contests.dropped
    np.testing.assert_array_equal(scores.values, expected)
    assert (scores.values <= complete).all()
    # the same with order-averaged scores: the missing order is worth 0 to the policy
    averaged = contests.scores("order_average").values
    assert (averaged <= complete_table.scores("order_average").values).all()


def test_no_judgments_between_the_systems_lists_what_exists(tmp_path):
    with pytest.raises(InputError) as caught:
        build_contests(study(tmp_path), "O", "Q")
    text = str(caught.value)
    assert "no judgments compare 'O' with 'Q'" in text and "(O, P, Q)" in text and "P vs Q" in text


def test_judge_must_be_named_when_several_judged(tmp_path):
    loaded = study(
        tmp_path, [*JUDGMENTS, judgment("p1", "o1", "first", judge="K"), judgment("o1", "p1", "tie", judge="K")]
    )
    with pytest.raises(InputError, match="several judges compared 'P' with 'O': J, K"):
        build_contests(loaded, "P", "O")
    with pytest.raises(InputError, match="use one of: J, K"):
        build_contests(loaded, "P", "O", judge="L")
    contests = build_contests(loaded, "P", "O", judge="K")
    assert contests.frame[["outcome_policy_first", "outcome_policy_second"]].values.tolist() == [["win", "tie"]]
