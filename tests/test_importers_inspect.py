"""inspect_ai logs: the zipped ``.eval`` format (zstd and deflate members), graded scorers with a
grader model role as metric contests, and pairwise scorers as judgments. Every log here is a real
inspect_ai 0.3.285 log (tests/data/inspect/make_logs.py, mockllm models with scripted replies)."""

import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from inspect_support import rewrite_eval as _rewrite

from honestci.audit.cli.judges import import_command
from honestci.audit.data.io import load_study
from honestci.audit.errors import InputError
from honestci.judges.importers_inspect import import_inspect

DATA = Path(__file__).parent / "data" / "inspect"
CAPITALS = {tag: DATA / f"capitals_{tag}" for tag in ("paris-or-tokyo", "lima")}
GRADED = [DATA / "graded_paris-or-tokyo.eval", DATA / "graded_lima.eval"]
PAIRWISE = DATA / "pairwise.eval"


def _study(tables, tmp_path):
    paths = tables.write(tmp_path / "judgments.jsonl")
    return load_study({k: v for k, v in paths.items() if k in ("judgments", "vignettes", "responses")})


# ------------------------------------------------------------------------------------------ .eval
def test_eval_logs_import_exactly_as_their_json_twins(tmp_path):
    """The same two scripted runs written by inspect_ai as .json and as .eval (zstd members)."""
    as_json = import_inspect([f"{tag}={path}.json" for tag, path in CAPITALS.items()])
    as_eval = import_inspect([f"{tag}={path}.eval" for tag, path in CAPITALS.items()])
    assert as_eval.judgments == as_json.judgments and len(as_eval.judgments) == 3 * 2 * 2
    assert as_eval.vignettes == as_json.vignettes and as_eval.responses == as_json.responses
    with zipfile.ZipFile(f"{CAPITALS['lima']}.eval") as archive:
        assert {info.compress_type for info in archive.infolist()} == {93}  # zstd, inspect_ai's default
    # Deflate members (older inspect_ai) read through the stdlib; same tables.
    deflated = _rewrite(Path(f"{CAPITALS['lima']}.eval"), tmp_path / "lima.eval")
    again = import_inspect([f"paris-or-tokyo={CAPITALS['paris-or-tokyo']}.eval", f"lima={deflated}"])
    assert again.judgments == as_json.judgments
    study = _study(as_eval, tmp_path)
    assert study.vignettes.n_rows == 3 and study.responses.n_rows == 12


def test_eval_bad_score_names_file_member_position_and_field(tmp_path):
    def bad_value(sample):
        sample["scores"]["match"]["value"] = "maybe"
        return sample

    bad = _rewrite(Path(f"{CAPITALS['lima']}.eval"), tmp_path / "bad.eval", {"samples/jp_epoch_2.json": bad_value})
    with zipfile.ZipFile(bad) as archive:
        position = [n for n in archive.namelist() if n.startswith("samples/")].index("samples/jp_epoch_2.json") + 1
    args = ["inspect", f"a={CAPITALS['paris-or-tokyo']}.eval", f"b={bad}", "--out", str(tmp_path / "o.jsonl")]
    result = CliRunner().invoke(import_command, args)
    assert result.exit_code == 2
    assert f"{bad}, line {position}, field 'samples/jp_epoch_2.json:scores.match.value'" in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_a_file_that_is_not_an_eval_zip_exits_2(tmp_path):
    fake = tmp_path / "x.eval"
    fake.write_text("not a zip")
    result = CliRunner().invoke(import_command, ["inspect", f"a={fake}", "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2 and f"{fake}: not a readable .eval log" in result.output


# ---------------------------------------------------------------------------------- graded + roles
def test_graded_scorer_with_a_grader_role_is_a_metric_contest_judged_by_the_grader(tmp_path):
    """model_graded_qa(partial_credit=True, model_role="grader"); the scripted grader gives C for the
    exact answer, P when the answer contains it, I otherwise. "Paris or Tokyo" is P on fr and jp, I on
    pe; "Lima" is I, I, C: the first model wins fr and jp, the second wins pe, in both orders."""
    tables = import_inspect(GRADED)
    assert {j["judge"] for j in tables.judgments} == {"inspect:model_graded_qa@mockllm/grader"}
    winners = {
        (j["vignette_id"], j["response_first"] if j["verdict"] == "first" else j["response_second"])
        for j in tables.judgments
    }
    assert winners == {
        ("capitals_graded:fr", "capitals_graded:fr:mockllm/paris-or-tokyo:epoch1"),
        ("capitals_graded:jp", "capitals_graded:jp:mockllm/paris-or-tokyo:epoch1"),
        ("capitals_graded:pe", "capitals_graded:pe:mockllm/lima:epoch1"),
    }
    assert [json.loads(j["raw"]) for j in tables.judgments if j["vignette_id"] == "capitals_graded:fr"] == [
        {"score_first": 0.5, "score_second": 0.0},
        {"score_first": 0.0, "score_second": 0.5},
    ]
    _study(tables, tmp_path)
    # A log graded by another model is not comparable: refused, naming both.
    other = _rewrite(
        GRADED[1],
        tmp_path / "other.eval",
        {"header.json": lambda h: {**h, "eval": {**h["eval"], "model_roles": {"grader": {"model": "mockllm/other"}}}}},
    )
    with pytest.raises(InputError, match="graded by different models") as err:
        import_inspect([GRADED[0], other])
    assert "by mockllm/other" in str(err.value) and "by mockllm/grader" in str(err.value)


# ------------------------------------------------------------------------------------------ pairwise
SUMS = [(3 + i, 5 + 2 * i) for i in range(24)]  # make_logs.py's questions


def _expected(a: int, b: int, policy_first: bool) -> str:
    """make_logs.py's scripted rules, restated: policy wrong iff (a+b) % 4 == 0, baseline wrong iff a
    is odd; the one correct answer wins, both right → first, both wrong → tie."""
    policy_right, baseline_right = (a + b) % 4 != 0, a % 2 == 0
    first_right, second_right = (policy_right, baseline_right) if policy_first else (baseline_right, policy_right)
    return "first" if first_right else "second" if second_right else "tie"


def test_pairwise_scorer_imports_one_judgment_per_judged_order_by_the_grader_role(tmp_path):
    tables = import_inspect([PAIRWISE])
    assert len(tables.judgments) == 2 * 24
    assert {j["judge"] for j in tables.judgments} == {"mockllm/grader"}
    got = {(j["vignette_id"], j["response_first"].split(":")[2]): j["verdict"] for j in tables.judgments}
    want = {
        (f"pairwise_sums:q{i + 1:02d}", first): _expected(a, b, first == "mockllm/policy")
        for i, (a, b) in enumerate(SUMS)
        for first in ("mockllm/policy", "baseline-v1")
    }
    assert got == want
    texts = {r["response_id"]: r["text"] for r in tables.responses}
    assert texts["pairwise_sums:q03:mockllm/policy"] == "14" and texts["pairwise_sums:q03:baseline-v1"] == "15"
    study = _study(tables, tmp_path)
    assert study.vignettes.n_rows == 24 and study.responses.n_rows == 48
    # --metric picks one presentation order (one scorer).
    assert len(import_inspect([PAIRWISE], scorer="pairwise1").judgments) == 24


def _edit_scores(edit):
    """An edit of every sample member of pairwise.eval."""
    with zipfile.ZipFile(PAIRWISE) as archive:
        names = [n for n in archive.namelist() if n.startswith("samples/")]

    def apply(sample):
        for entry in sample["scores"].values():
            edit(entry)
        return sample

    return dict.fromkeys(names, apply)


def test_pairwise_judge_falls_back_to_the_grader_role_then_refuses(tmp_path):
    no_judge = _rewrite(PAIRWISE, tmp_path / "a.eval", _edit_scores(lambda e: e["metadata"].pop("judge")))
    assert {j["judge"] for j in import_inspect([no_judge]).judgments} == {"mockllm/grader"}
    edits = _edit_scores(lambda e: e["metadata"].pop("judge"))
    edits["header.json"] = lambda h: {**h, "eval": {**h["eval"], "model_roles": None}}
    no_role = _rewrite(PAIRWISE, tmp_path / "b.eval", edits)
    result = CliRunner().invoke(import_command, ["inspect", str(no_role), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    assert f"{no_role}, line 1, field 'samples/q01_epoch_1.json:scores.pairwise.metadata.judge'" in result.output


def test_pairwise_unparsed_reply_is_an_invalid_verdict_and_a_bad_value_an_error(tmp_path):
    def unparsed(entry):
        if entry["metadata"]["model_a"] == "baseline-v1":
            entry["value"] = None

    tables = import_inspect([_rewrite(PAIRWISE, tmp_path / "a.eval", _edit_scores(unparsed))])
    assert Counter(j["verdict"] for j in tables.judgments)["invalid"] == 24  # kept and counted

    def bad(entry):
        entry["value"] = "C"

    bad_log = _rewrite(PAIRWISE, tmp_path / "b.eval", _edit_scores(bad))
    with pytest.raises(InputError) as err:
        import_inspect([bad_log])
    first = err.value.problems[0]
    assert (first.file, first.line, first.field) == (str(bad_log), 1, "samples/q01_epoch_1.json:scores.pairwise.value")
