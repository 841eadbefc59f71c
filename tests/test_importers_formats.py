"""Importers for FastChat Arena battles, lm-evaluation-harness --log_samples, inspect_ai JSON logs,
and AlpacaEval result files with differing baselines: round trips through the written tables and
the CLI, and malformed rows reported by file, line and field (exit 2)."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from honestci.audit.cli.judges import import_command
from honestci.audit.data.io import load_study
from honestci.audit.errors import InputError
from honestci.judges.importers_alpaca import import_alpaca_eval
from honestci.judges.importers_fastchat import import_arena
from honestci.judges.importers_inspect import import_inspect
from honestci.judges.importers_lm_eval import import_lm_eval
from honestci.judges.tables import read_rows

DATA = Path(__file__).parent / "data"
ARENA = DATA / "arena" / "clean_battle_20230501.json"
LM_EVAL = [
    DATA / "lm_eval" / model / "samples_arc_easy_2024-05-01T12-00-00.000000.jsonl"
    for model in ("pythia-160m", "pythia-410m")
]
INSPECT = [DATA / "inspect" / "capitals_paris-or-tokyo.json", DATA / "inspect" / "capitals_lima.json"]


def _round_trip(tables, tmp_path):
    """Write the tables, load them back through honestci's own validating loader."""
    paths = tables.write(tmp_path / "judgments.jsonl")
    study = load_study({k: v for k, v in paths.items() if k in ("judgments", "vignettes", "responses")})
    return paths, study


def _cli(args):
    return CliRunner().invoke(import_command, args)


# --------------------------------------------------------------------------------------------- Arena
def test_arena_battles_one_order_each_with_model_a_first(tmp_path):
    tables = import_arena(ARENA)
    battles = json.loads(ARENA.read_text())
    assert len(tables.judgments) == len(battles) == 5
    for judgment, battle in zip(tables.judgments, battles):
        assert judgment["vignette_id"] == battle["question_id"]  # the cluster
        assert judgment["response_first"] == f"{battle['question_id']}:{battle['model_a']}:turn{battle['turn']}"
        assert judgment["response_second"] == f"{battle['question_id']}:{battle['model_b']}:turn{battle['turn']}"
        assert judgment["judge"] == battle["judge"] and judgment["raw"] == battle["winner"]
    assert [j["verdict"] for j in tables.judgments] == ["first", "second", "tie", "tie", "second"]
    # No conversations in a clean_battle file: judgments only.
    paths = tables.write(tmp_path / "arena.jsonl")
    assert set(paths) == {"judgments"}
    assert [r.values["verdict"] for r in read_rows(paths["judgments"])] == ["first", "second", "tie", "tie", "second"]


def test_arena_with_conversations_writes_vignettes_and_responses(tmp_path):
    battle = json.loads(ARENA.read_text())[0]
    battle["conversation_a"] = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello A"}]
    battle["conversation_b"] = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello B"}]
    path = tmp_path / "battles.jsonl"
    path.write_text(json.dumps(battle) + "\n")
    _, study = _round_trip(import_arena(path), tmp_path)
    assert study.vignettes.frame["text"].tolist() == ["Hi?"]
    assert sorted(study.responses.frame["text"]) == ["Hello A", "Hello B"]


def test_arena_bad_winner_exits_2_naming_file_line_field(tmp_path):
    battles = json.loads(ARENA.read_text())
    battles[3]["winner"] = "model_c"
    del battles[1]["judge"]
    path = tmp_path / "clean_battle_bad.json"
    path.write_text(json.dumps(battles))
    with pytest.raises(InputError) as err:
        import_arena(path)
    assert sorted((p.line, p.field) for p in err.value.problems) == [(2, "judge"), (4, "winner")]
    result = _cli(["arena", str(path), "--out", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 2
    assert f"{path}, line 4, field 'winner'" in result.output
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------------------------- lm_eval
def test_lm_eval_metric_contests_both_orders_and_round_trip(tmp_path):
    tables = import_lm_eval(LM_EVAL, metric="acc")
    acc = {path.parent.name: [json.loads(line)["acc"] for line in path.read_text().splitlines()] for path in LM_EVAL}
    assert acc == {"pythia-160m": [1.0, 1.0, 0.0, 0.0], "pythia-410m": [1.0, 1.0, 0.0, 1.0]}
    # 4 docs x 2 orders; a metric has no presentation order, so the two orders mirror each other.
    assert len(tables.judgments) == 8
    by_order = {(j["response_first"], j["response_second"]): j["verdict"] for j in tables.judgments}
    for doc in range(4):
        small, large = f"arc_easy:{doc}:pythia-160m", f"arc_easy:{doc}:pythia-410m"
        expected = "tie" if acc["pythia-160m"][doc] == acc["pythia-410m"][doc] else "second"
        assert by_order[(small, large)] == expected
        assert by_order[(large, small)] == {"tie": "tie", "second": "first"}[expected]
    assert {j["judge"] for j in tables.judgments} == {"lm_eval:acc"}
    paths, study = _round_trip(tables, tmp_path)
    assert study.judgments.n_rows == 8 and study.vignettes.n_rows == 4 and study.responses.n_rows == 8
    assert json.loads(read_rows(paths["judgments"])[0].values["raw"]) == {"score_first": 1.0, "score_second": 1.0}


def test_lm_eval_cluster_key_groups_docs(tmp_path):
    tables = import_lm_eval(LM_EVAL, metric="acc_norm", cluster_key="topic")
    assert {j["vignette_id"] for j in tables.judgments} == {
        "arc_easy:astronomy",
        "arc_easy:engineering",
        "arc_easy:biology",
    }
    assert sum(j["vignette_id"] == "arc_easy:astronomy" for j in tables.judgments) == 4  # docs 0 and 3
    _round_trip(tables, tmp_path)


def test_lm_eval_cli_names_models_and_needs_a_metric_choice(tmp_path):
    out = tmp_path / "lm.jsonl"
    args = ["lm_eval", f"small={LM_EVAL[0]}", f"large={LM_EVAL[1]}", "--out", str(out)]
    result = _cli(args)
    assert result.exit_code == 2 and "--metric" in result.output  # acc and acc_norm: never guessed
    result = _cli([*args, "--metric", "acc"])
    assert result.exit_code == 0, result.output
    systems = {r.values["system"] for r in read_rows(tmp_path / "lm.responses.jsonl")}
    assert systems == {"small", "large"}


def test_lm_eval_bad_metric_value_and_missing_doc(tmp_path):
    records = [json.loads(line) for line in LM_EVAL[1].read_text().splitlines()]
    records[2]["acc"] = "yes"
    bad = tmp_path / "m" / LM_EVAL[1].name
    bad.parent.mkdir()
    bad.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    with pytest.raises(InputError) as err:
        import_lm_eval([LM_EVAL[0], bad], metric="acc")
    (problem,) = err.value.problems
    assert (problem.file, problem.line, problem.field) == (str(bad), 3, "acc")
    bad.write_text("\n".join(json.dumps(r) for r in records[:2] + records[3:]) + "\n")  # doc 2 absent
    with pytest.raises(InputError) as err:
        import_lm_eval([LM_EVAL[0], bad], metric="acc")
    (problem,) = err.value.problems
    assert problem.file == str(LM_EVAL[0]) and problem.line == 3 and "'m'" in problem.message


def test_lm_eval_several_filters_need_one_chosen(tmp_path):
    paths = []
    for source in LM_EVAL:
        records = [json.loads(line) for line in source.read_text().splitlines()]
        both = [dict(r, filter=f) for r in records for f in ("strict-match", "flexible-extract")]
        path = tmp_path / source.parent.name / source.name
        path.parent.mkdir()
        path.write_text("\n".join(json.dumps(r) for r in both) + "\n")
        paths.append(path)
    with pytest.raises(InputError) as err:
        import_lm_eval(paths, metric="acc")
    assert err.value.problems[0].field == "doc_id" and "--filter" in err.value.problems[0].fix
    assert len(import_lm_eval(paths, metric="acc", filter_name="strict-match").judgments) == 8


def test_lm_eval_one_model_is_refused(tmp_path):
    with pytest.raises(InputError, match="needs two"):
        import_lm_eval(LM_EVAL[:1], metric="acc")


# ------------------------------------------------------------------------------------------- inspect
def test_inspect_real_logs_samples_by_epochs(tmp_path):
    """Two real inspect_ai 0.3.285 logs (tests/data/inspect/make_logs.py, mockllm/model): one model
    answers "Paris or Tokyo", the other "Lima"; match(location="any") scores C/I; 3 samples x 2 epochs."""
    tables = import_inspect([f"paris-or-tokyo={INSPECT[0]}", f"lima={INSPECT[1]}"])
    assert len(tables.judgments) == 3 * 2 * 2
    assert {j["judge"] for j in tables.judgments} == {"inspect:match"}
    winner = {}
    for j in tables.judgments:
        side = {"first": j["response_first"], "second": j["response_second"]}[j["verdict"]]
        winner.setdefault((j["vignette_id"], j["epoch"]), set()).add(side.split(":")[2])
    assert winner == {
        (f"capitals:{s}", e): {w}
        for s, w in (("fr", "paris-or-tokyo"), ("jp", "paris-or-tokyo"), ("pe", "lima"))
        for e in (1, 2)
    }
    paths, study = _round_trip(tables, tmp_path)
    assert study.vignettes.n_rows == 3 and study.responses.n_rows == 12
    assert {r.values["text"] for r in read_rows(paths["responses"])} == {"Paris or Tokyo", "Lima"}
    # Same eval.model in both logs: without NAME=PATH the second is refused, not merged.
    with pytest.raises(InputError, match="given twice"):
        import_inspect(INSPECT)


def test_inspect_bad_score_value_and_errored_sample(tmp_path):
    log = json.loads(INSPECT[1].read_text())
    log["samples"][4]["scores"]["match"]["value"] = "maybe"
    del log["samples"][1]["scores"]
    log["samples"][1]["error"] = {"message": "model timed out", "traceback": ""}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(log))
    args = ["inspect", f"a={INSPECT[0]}", f"b={bad}", "--out", str(tmp_path / "o.jsonl")]
    result = _cli(args)
    assert result.exit_code == 2
    assert f"{bad}, line 5, field 'samples[4].scores.match.value'" in result.output
    log["samples"][4]["scores"]["match"]["value"] = "I"
    bad.write_text(json.dumps(log))
    tables = import_inspect([f"a={INSPECT[0]}", f"b={bad}"])
    errored = [j for j in tables.judgments if "capitals:jp:b:epoch1" in (j["response_first"], j["response_second"])]
    assert [j["verdict"] for j in errored] == ["invalid", "invalid"]  # kept and counted, never dropped


# ---------------------------------------------------------------------------------------- AlpacaEval
@pytest.mark.shared_data
def test_alpaca_eval_files_whose_baselines_differ_import_as_distinct_responses(shared_data, tmp_path):
    """Real AlpacaEval 1.0 files; the second one's baseline (text_davinci_003) regenerated for one
    instruction, as happens between AlpacaEval releases."""
    raw = shared_data / "alpaca_eval" / "raw_annotations"
    first, second = sorted(raw.glob("*.annotations.json.gz"))[:2]
    single = import_alpaca_eval([first])
    records = json.loads(gzip.decompress(second.read_bytes()))
    records[7]["output_1"] += " (regenerated)"
    changed = tmp_path / second.name
    changed.write_bytes(gzip.compress(json.dumps(records).encode()))
    both = import_alpaca_eval([first, changed])
    # The single-file import is unchanged by the multi-file one: same ids, same rows.
    assert both.judgments[: len(single.judgments)] == single.judgments
    vid = both.judgments[len(single.judgments) + 7]["vignette_id"]
    baselines = [r for r in both.responses if r["vignette_id"] == vid and r["system"] == "text_davinci_003"]
    assert len(baselines) == 2 and baselines[0]["response_id"] == f"{vid}:text_davinci_003"
    assert baselines[1]["text"] == records[7]["output_1"]
    assert both.judgments[len(single.judgments) + 7]["response_first"] == baselines[1]["response_id"]
    # The other 804 baselines are shared, not duplicated.
    assert sum(r["system"] == "text_davinci_003" for r in both.responses) == 806
    _round_trip(both, tmp_path)
    # The CLI takes several files at once.
    shutil.copy(first, tmp_path / first.name)
    result = _cli(["alpaca_eval", str(tmp_path / first.name), str(changed), "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------------- AlpacaEval 2.0, continuous
def test_alpaca_eval_2_continuous_preferences_reproduce_the_published_leaderboard(shared_data, tmp_path):
    # Outside reference: the leaderboard CSV shipped with the annotations (tatsu-lab/alpaca_eval at
    # commit cd543a1). Through honestci's own path (import -> validating loader -> contests -> CR1
    # clustered by instruction, one contest each), with invalid (missing) preferences scored as
    # ties, the published convention: win_rate and standard_error agree to 1e-6 for every model.
    import pandas as pd

    from honestci.audit.data.contests import build_contests
    from honestci.audit.stats.frequentist.winrate import winrate_ci

    folder = shared_data / "alpaca_eval2"
    board = pd.read_csv(folder / "leaderboards" / "weighted_alpaca_eval_gpt4_turbo_leaderboard.csv", index_col=0)
    files = sorted((folder / "raw_annotations").glob("*.annotations.json.gz"))
    assert len(files) == 8
    for path in files:
        model = path.name.removesuffix(".annotations.json.gz")
        tables = import_alpaca_eval([path])
        assert "preference_first" in tables.extra_judgment_columns
        _, study = _round_trip(tables, tmp_path / model)
        contests = build_contests(study, policy=model, opponent="gpt4_1106_preview")
        scored = contests.scores("both_orders", invalid="tie")
        row = winrate_ci(scored.values, scored.clusters, method="cr1")
        assert 100 * row.estimate == pytest.approx(board.loc[model, "win_rate"], abs=1e-6), model
        assert 100 * row.se == pytest.approx(board.loc[model, "standard_error"], abs=1e-6), model
