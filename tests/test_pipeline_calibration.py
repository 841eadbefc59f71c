"""The pipeline's calibration judgments: which pairs are judged, and a prior record bound to the judge,
the template and the human data (with the texts it labels), refused when any of them changed."""

from pathlib import Path

import pandas as pd
import pytest

from honestci.audit.errors import InputError
from honestci.judges.run import load_texts
from honestci.training.pipeline import (
    _calibration_bindings,
    _calibration_contests,
    load_calibration_record,
    write_calibration_record,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "study"


def test_each_human_labelled_pair_is_one_contest_whatever_its_order_or_raters():
    pairs = pd.DataFrame(
        {
            "vignette_id": ["v1", "v1", "v1", "v2"],
            "response_a": ["x", "y", "x", "z"],
            "response_b": ["y", "x", "w", "u"],
            "label": ["a", "b", "tie", "a"],
            "rater_id": ["r1", "r2", "r1", "r1"],
        }
    )
    contests = _calibration_contests(pairs)
    assert [(c.vignette_id, c.response_a, c.response_b) for c in contests] == [
        ("v1", "x", "y"),
        ("v1", "w", "x"),
        ("v2", "u", "z"),
    ]
    assert _calibration_contests(None) == []


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cal")
    pairs = pd.read_json(FIXTURE / "human_pairs.jsonl", lines=True, dtype=False)
    pairs[pairs["vignette_id"] == "v1"].to_json(folder / "human_pairs.jsonl", orient="records", lines=True)
    paths = {"human_pairs": folder / "human_pairs.jsonl"}
    return paths, load_texts(FIXTURE / "vignettes.jsonl", FIXTURE / "responses.jsonl")


def test_a_record_round_trips_and_a_stale_binding_is_refused_by_name(tmp_path, study):
    paths, texts = study
    bindings = _calibration_bindings("judge-a", "t" * 64, paths, texts)
    judged = pd.DataFrame([{"judge": "judge-a", "vignette_id": "v1", "response_first": "p", "response_second": "q"}])
    record = write_calibration_record(tmp_path / "record.json", bindings, judged)
    assert load_calibration_record(record, bindings).to_dict("records") == judged.to_dict("records")
    with pytest.raises(InputError, match="stale: judge is 'judge-a' there, 'judge-b' here"):
        load_calibration_record(record, _calibration_bindings("judge-b", "t" * 64, paths, texts))
    with pytest.raises(InputError, match="stale: template_sha256"):
        load_calibration_record(record, _calibration_bindings("judge-a", "u" * 64, paths, texts))


def test_the_human_data_binding_changes_with_a_label_or_a_labelled_text(tmp_path, study):
    paths, texts = study
    before = _calibration_bindings("j", "t", paths, texts)["human_data_sha256"]
    pairs = pd.read_json(paths["human_pairs"], lines=True, dtype=False)
    pairs.loc[0, "label"] = "a" if pairs.loc[0, "label"] != "a" else "b"
    relabelled = tmp_path / "human_pairs.jsonl"
    pairs.to_json(relabelled, orient="records", lines=True)
    assert _calibration_bindings("j", "t", {"human_pairs": relabelled}, texts)["human_data_sha256"] != before
    rid = pairs.loc[0, "response_a"]
    edited = type(texts)(texts.vignettes, {**texts.responses, rid: texts.responses[rid] + "!"}, texts.response_vignette)
    assert _calibration_bindings("j", "t", paths, edited)["human_data_sha256"] != before
    assert _calibration_bindings("j", "t", paths, texts)["human_data_sha256"] == before  # deterministic


def test_a_file_that_is_not_a_record_is_refused(tmp_path, study):
    paths, texts = study
    path = tmp_path / "x.json"
    path.write_text('{"version": 99}')
    with pytest.raises(InputError, match="not a version-1 calibration record"):
        load_calibration_record(path, _calibration_bindings("j", "t", paths, texts))
