"""Importers: published AlpacaEval and PandaLM figures recomputed from the imported tables, plus
FastChat MT-Bench and generic imports on small fixtures in the tools' own formats."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from honestci.audit.errors import InputError
from honestci.judges.importers import prompt_id
from honestci.judges.importers_alpaca import import_alpaca_eval, import_pandalm
from honestci.judges.importers_fastchat import import_mtbench
from honestci.judges.importers_generic import import_generic
from honestci.judges.tables import read_rows

SCORE_OF_SECOND = {"second": 1.0, "tie": 0.5, "first": 0.0}


@pytest.mark.reference
@pytest.mark.shared_data
def test_alpaca_eval_reproduces_published_win_rate_and_se(shared_data, tmp_path):
    """AlpacaEval's leaderboard: win_rate = 100·mean(pref − 1) with draws as ½, standard_error =
    100·sd(ddof=1)/√n over non-null rows (alpaca_eval/metrics: pairwise_to_winrate; the shared
    data README's recount). Published values: leaderboards/alpaca_eval_gpt4_leaderboard.csv."""
    annotations = sorted((shared_data / "alpaca_eval" / "raw_annotations").glob("*.annotations.json.gz"))
    assert len(annotations) == 9
    tables = import_alpaca_eval(annotations)
    paths = tables.write(tmp_path / "alpaca.jsonl")
    judgments = [r.values for r in read_rows(paths["judgments"])]
    system = {r.values["response_id"]: r.values["system"] for r in read_rows(paths["responses"])}
    assert len(judgments) == 9 * 805
    with open(shared_data / "alpaca_eval" / "leaderboards" / "alpaca_eval_gpt4_leaderboard.csv") as handle:
        published = {row[""]: row for row in csv.DictReader(handle)}
    for model in {system[j["response_second"]] for j in judgments}:
        scores = np.array(
            [
                SCORE_OF_SECOND[j["verdict"]]
                for j in judgments
                if system[j["response_second"]] == model and j["verdict"] != "invalid"
            ]
        )
        win_rate = 100 * scores.mean()
        standard_error = 100 * scores.std(ddof=1) / np.sqrt(len(scores))
        assert len(scores) == int(published[model]["n_total"]), model
        assert win_rate == pytest.approx(float(published[model]["win_rate"]), abs=1e-9), model
        assert standard_error == pytest.approx(float(published[model]["standard_error"]), abs=1e-9), model
    # Vignette ids are AlpacaEval's derived prompt ids; the baseline is shown first.
    with open(shared_data / "alpaca_eval" / "alpaca_eval_gpt4_preferences_long.csv") as handle:
        derived_ids = {row["prompt_id"] for row in csv.DictReader(handle)}
    vignettes = [r.values for r in read_rows(paths["vignettes"])]
    assert len(vignettes) == 805 and {v["vignette_id"] for v in vignettes} == derived_ids
    assert all(system[j["response_first"]] == "text_davinci_003" for j in judgments)
    assert sum(j["verdict"] == "invalid" for j in judgments) == 8  # the null preferences, kept and counted


def _pandalm_metrics(judge, judgments, human_pairs):
    """PandaLM's data/compute_metrics.py: majority of 3 annotators (3-way split -> annotator1),
    judge Tie and garbage as class 0, accuracy and macro P/R/F1 over {0, 1, 2}."""
    code = {"tie": 0, "a": 1, "b": 2}
    labels = {}
    for pair in human_pairs:
        labels.setdefault(pair["response_a"], {})[pair["rater_id"]] = code[pair["label"]]
    judge_code = {"first": 1, "second": 2, "tie": 0, "invalid": 0}
    truth, predicted = [], []
    for j in judgments:
        if j["judge"] != judge:
            continue
        votes = labels[j["response_first"]]
        values = [votes["annotator1"], votes["annotator2"], votes["annotator3"]]
        counts = {v: values.count(v) for v in values}
        top = max(counts.values())
        truth.append(values[0] if top == 1 else next(v for v in values if counts[v] == top))
        predicted.append(judge_code[j["verdict"]])
    truth, predicted = np.array(truth), np.array(predicted)
    precision, recall, f1 = [], [], []
    for cls in (0, 1, 2):
        tp = np.sum((predicted == cls) & (truth == cls))
        p = tp / max(np.sum(predicted == cls), 1)
        r = tp / max(np.sum(truth == cls), 1)
        precision.append(p)
        recall.append(r)
        f1.append(0.0 if p + r == 0 else 2 * p * r / (p + r))
    return np.mean(truth == predicted), np.mean(precision), np.mean(recall), np.mean(f1)


@pytest.mark.reference
@pytest.mark.shared_data
def test_pandalm_reproduces_published_accuracy_and_macro_f1(shared_data, tmp_path):
    folder = shared_data / "pandalm"
    tables = import_pandalm(
        folder / "testset-v1.json", [folder / "gpt-3.5-turbo-testset-v1.json", folder / "pandalm-7b-testset-v1.json"]
    )
    paths = tables.write(tmp_path / "pandalm.csv")
    judgments = [r.values for r in read_rows(paths["judgments"])]
    human_pairs = [r.values for r in read_rows(paths["human_pairs"])]
    vignettes = read_rows(paths["vignettes"])
    assert len(vignettes) == 170 and len(human_pairs) == 3 * 999 and len(judgments) == 2 * 999
    # Published (PandaLM README / data/compute_metrics.py), 4 decimals.
    for judge, (accuracy, precision, recall, f1) in {
        "gpt-3.5-turbo": (0.7107, 0.5879, 0.5736, 0.5755),
        "pandalm-7b": (0.6677, 0.5738, 0.5750, 0.5743),
    }.items():
        got = _pandalm_metrics(judge, judgments, human_pairs)
        assert np.round(got, 4).tolist() == [accuracy, precision, recall, f1], (judge, got)
    assert sum(j["verdict"] == "invalid" for j in judgments if j["judge"] == "gpt-3.5-turbo") == 25  # "garbage"


@pytest.mark.reference
@pytest.mark.shared_data
def test_pandalm_agreement_matches_the_reference_input_csv(shared_data):
    """The imported gpt-3.5 verdicts and clusters agree row by row with data/reference's CSV."""
    folder = shared_data / "pandalm"
    tables = import_pandalm(folder / "testset-v1.json", {"gpt35": folder / "gpt-3.5-turbo-testset-v1.json"})
    with open(shared_data / "reference" / "input_pandalm_gpt35_agreement.csv") as handle:
        reference = list(csv.DictReader(handle))
    code = {"first": "1", "second": "2", "tie": "0", "invalid": "0"}
    clusters = {}
    for row, judgment in zip(reference, tables.judgments):
        assert judgment["response_first"] == f"pandalm-{row['idx']}-1"
        assert code[judgment["verdict"]] == row["gpt35"]
        clusters.setdefault(row["prompt_cluster"], set()).add(judgment["vignette_id"])
    assert len(clusters) == 170 and all(len(v) == 1 for v in clusters.values())


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# Rows shaped exactly as FastChat's play_a_match_pair writes them (fastchat/llm_judge/common.py).
MTBENCH_ROWS = [
    {
        "question_id": 81,
        "model_1": "alpaca-13b",
        "model_2": "gpt-3.5-turbo",
        "g1_winner": "model_2",
        "g2_winner": "model_2",
        "judge": ["gpt-4", "pair-v2"],
        "g1_user_prompt": "...",
        "g1_judgment": "Assistant B is more engaging. [[B]]",
        "g2_user_prompt": "...",
        "g2_judgment": "Assistant A is more engaging. [[A]]",
        "turn": 1,
        "tstamp": 1687000000.0,
    },
    {
        "question_id": 81,
        "model_1": "alpaca-13b",
        "model_2": "gpt-3.5-turbo",
        "g1_winner": "tie",
        "g2_winner": "model_1",
        "judge": ["gpt-4", "pair-v2-multi-turn"],
        "g1_user_prompt": "...",
        "g1_judgment": "[[C]]",
        "g2_user_prompt": "...",
        "g2_judgment": "[[B]]",
        "turn": 2,
        "tstamp": 1687000001.0,
    },
    {
        "question_id": 82,
        "model_1": "alpaca-13b",
        "model_2": "gpt-3.5-turbo",
        "g1_winner": "error",
        "g2_winner": "model_1",
        "judge": ["gpt-4", "pair-v2"],
        "g1_user_prompt": "...",
        "g1_judgment": "I cannot tell.",
        "g2_user_prompt": "...",
        "g2_judgment": "[[B]]",
        "turn": 1,
        "tstamp": 1687000002.0,
    },
]


def test_mtbench_both_games_map_to_first_and_second(tmp_path):
    path = _write_jsonl(tmp_path / "gpt-4_pair.jsonl", MTBENCH_ROWS)
    questions = _write_jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a travel blog post.", "Rewrite it."]},
            {"question_id": 82, "category": "writing", "turns": ["Draft an email.", "Shorten it."]},
        ],
    )
    answers = tmp_path / "model_answer"
    answers.mkdir()
    for model in ("alpaca-13b", "gpt-3.5-turbo"):
        _write_jsonl(
            answers / f"{model}.jsonl",
            [
                {
                    "question_id": q,
                    "answer_id": "x",
                    "model_id": model,
                    "choices": [{"index": 0, "turns": [f"{model} t1", f"{model} t2"]}],
                }
                for q in (81, 82)
            ],
        )
    tables = import_mtbench(path, questions=questions, answers_dir=answers)
    got = [(j["vignette_id"], j["response_first"], j["response_second"], j["verdict"]) for j in tables.judgments]
    assert got == [
        ("81", "81:alpaca-13b:turn1", "81:gpt-3.5-turbo:turn1", "second"),  # g1: model_2 (shown second) won
        ("81", "81:gpt-3.5-turbo:turn1", "81:alpaca-13b:turn1", "first"),  # g2: model_2 (shown first) won
        ("81", "81:alpaca-13b:turn2", "81:gpt-3.5-turbo:turn2", "tie"),
        ("81", "81:gpt-3.5-turbo:turn2", "81:alpaca-13b:turn2", "second"),  # g2: model_1 (shown second) won
        ("82", "82:alpaca-13b:turn1", "82:gpt-3.5-turbo:turn1", "invalid"),  # "error" is kept, counted
        ("82", "82:gpt-3.5-turbo:turn1", "82:alpaca-13b:turn1", "second"),
    ]
    assert {j["judge"] for j in tables.judgments} == {"gpt-4"}
    assert tables.judgments[0]["raw"] == "Assistant B is more engaging. [[B]]"
    assert len(tables.vignettes) == 2 and len(tables.responses) == 8
    # Every judged response exists and belongs to its vignette.
    owner = {r["response_id"]: r["vignette_id"] for r in tables.responses}
    assert all(owner[j["response_first"]] == j["vignette_id"] == owner[j["response_second"]] for j in tables.judgments)
    written = tables.write(tmp_path / "out.jsonl")
    assert set(written) == {"judgments", "vignettes", "responses"}
    assert len(read_rows(written["judgments"])) == 6


def test_mtbench_unknown_winner_is_reported_with_line_and_field(tmp_path):
    rows = [dict(MTBENCH_ROWS[0]), dict(MTBENCH_ROWS[2], g2_winner="model_3")]
    with pytest.raises(InputError) as err:
        import_mtbench(_write_jsonl(tmp_path / "j.jsonl", rows))
    (problem,) = err.value.problems
    assert (problem.line, problem.field) == (2, "g2_winner")


def test_generic_import_with_column_and_value_mapping(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(
        "q,left,right,winner,why\nv1,r1,r2,A,left is kinder\nv1,r2,r1,B,right is kinder\nv2,r3,r4,draw,same\n"
    )
    tables = import_generic(
        path,
        {"vignette_id": "q", "response_first": "left", "response_second": "right", "verdict": "winner", "raw": "why"},
        {"A": "first", "B": "second", "draw": "tie"},
        judge="my-judge",
    )
    assert [j["verdict"] for j in tables.judgments] == ["first", "second", "tie"]
    assert {j["judge"] for j in tables.judgments} == {"my-judge"}
    # An unmapped value is an error at its line, never a guess.
    with pytest.raises(InputError) as err:
        import_generic(
            path,
            {"vignette_id": "q", "response_first": "left", "response_second": "right", "verdict": "winner"},
            {"A": "first", "B": "second"},
            judge="my-judge",
        )
    (problem,) = err.value.problems
    assert (problem.line, problem.field) == (4, "winner")


def test_generic_import_parses_raw_replies_when_no_verdict_column(tmp_path):
    path = _write_jsonl(
        tmp_path / "raw.jsonl",
        [
            {"judge": "j", "vid": "v", "a": "r1", "b": "r2", "reply": "Reasoning... [[B]]"},
            {"judge": "j", "vid": "v", "a": "r2", "b": "r1", "reply": "no idea"},
        ],
    )
    tables = import_generic(
        path, {"judge": "judge", "vignette_id": "vid", "response_first": "a", "response_second": "b", "raw": "reply"}
    )
    assert [j["verdict"] for j in tables.judgments] == ["second", "invalid"]


def test_duplicate_ordered_judgment_is_an_error(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("judge,vignette_id,response_first,response_second,verdict\nj,v,r1,r2,first\nj,v,r1,r2,second\n")
    mapping = {c: c for c in ("judge", "vignette_id", "response_first", "response_second", "verdict")}
    with pytest.raises(InputError) as err:
        import_generic(path, mapping)
    assert err.value.problems[0].line == 3


def test_prompt_id_is_sha1_prefix():
    # hashlib.sha1(b"abc").hexdigest() == "a9993e364706816aba3e25717850c26c9cd0d89d" (FIPS 180 test vector)
    assert prompt_id("abc") == "a9993e364706"


def test_assign_pools_splits_the_candidates_vignettes_at_random_and_leaves_others_alone():
    from honestci.judges.importers import ImportedTables, assign_pools

    responses = tuple(
        {"response_id": f"{v}:{s}", "vignette_id": f"v{v}", "system": s, "text": "x"}
        for v in range(10)
        for s in ("base", "a", "b")
    )
    tables = ImportedTables(judgments=(), responses=responses)
    split = assign_pools(tables, ["a", "b"], heldout_fraction=0.3, seed=4)
    pools = {(r["vignette_id"], r["system"]): r.get("pool") for r in split.responses}
    heldout = {v for (v, s), pool in pools.items() if pool == "heldout"}
    assert len(heldout) == 3  # round(0.3 * 10) vignettes, the same for both candidates
    assert all(pools[(v, "a")] == pools[(v, "b")] for v in (f"v{i}" for i in range(10)))
    assert all(pools[(f"v{i}", "base")] is None for i in range(10))
    assert assign_pools(tables, ["a", "b"], 0.3, seed=4) == split  # seeded
    assert {r["pool"] for r in assign_pools(tables, ["a"]).responses if r["system"] == "a"} == {"selection"}
    with pytest.raises(InputError, match="no responses of candidate"):
        assign_pools(tables, ["c"])
