"""Loaders: every error kind located by file, line and field, in each format where it matters."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json

import pandas as pd
import pytest

from honestci.audit.data.io import load_study, load_table, table_from_frame
from honestci.audit.errors import InputError, SchemaError

FORMATS = ("jsonl", "csv", "parquet")


def write(path, rows, columns=None):
    """Write ``rows`` (dicts) to ``path`` in the format its extension names; return the path."""
    columns = columns or list(dict.fromkeys(name for row in rows for name in row))
    if path.suffix == ".parquet":
        pd.DataFrame(rows, columns=columns).to_parquet(path, index=False)
    elif path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
    else:
        text = "".join(json.dumps(row) + "\n" for row in rows)
        path.write_bytes(gzip.compress(text.encode()) if path.name.endswith(".gz") else text.encode())
    return path


def line_of(index: int, fmt: str) -> int:
    """Source line of the row ``rows[index]``: CSV counts the header as line 1."""
    return index + (2 if fmt == "csv" else 1)


def problems_of(path, table):
    with pytest.raises(SchemaError) as caught:
        load_table(path, table)
    return caught.value


def assert_problem(error: SchemaError, file, line, field, fragment):
    """Exactly one located problem matches, and the rendered message shows it."""
    matching = [p for p in error.problems if p.line == line and p.field == field and fragment in p.message]
    assert matching, f"no problem at line {line}, field {field!r} with {fragment!r} in:\n{error}"
    text = str(error)
    assert str(file) in text
    if line is not None:
        assert f"line {line}" in text
    if field:
        assert f"field '{field}'" in text
    for problem in error.problems:
        assert "\n" not in str(problem)


RESPONSE = {"response_id": "r1", "vignette_id": "v1", "system": "P", "text": "an answer"}


def responses(*overrides):
    return [{**RESPONSE, "response_id": f"r{i + 1}", **override} for i, override in enumerate(overrides)]


# ----- round trip -------------------------------------------------------------------------------


def test_same_table_reads_identically_from_every_format(tmp_path):
    rows = [
        {"response_id": 17, "vignette_id": 3, "system": "P", "text": "", "run": "run-2", "seed": 1, "sample_idx": 0},
        {
            "response_id": 18,
            "vignette_id": 3,
            "system": "O",
            "text": 'b, "quoted"\nsecond line',
            "run": None,
            "seed": None,
            "sample_idx": 1,
        },
    ]
    frames = [load_table(write(tmp_path / f"r.{ext}", rows), "responses").frame for ext in (*FORMATS, "jsonl.gz")]
    for frame in frames[1:]:
        pd.testing.assert_frame_equal(frame, frames[0])
    first = frames[0]
    assert list(first.columns[:9]) == [
        "response_id",
        "vignette_id",
        "system",
        "text",
        "raw",
        "run",
        "pool",
        "seed",
        "sample_idx",
    ]
    assert first["response_id"].tolist() == ["17", "18"]  # ids are strings
    assert first["seed"].dtype == "Int64" and first["seed"].isna().tolist() == [False, True]
    assert first["text"].tolist() == ["", rows[1]["text"]]  # an empty answer is kept


def test_loaded_table_records_hash_lines_and_extras(tmp_path):
    path = write(tmp_path / "v.jsonl", [{"vignette_id": "v1", "text": "t", "note": 5}])
    table = load_table(path, "vignettes")
    assert table.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert table.n_rows == 1 and table.lines.tolist() == [1]
    assert table.frame["note"].tolist() == [5]
    assert table.to_frame()[["reason", "rows"]].values.tolist() == [["loaded", 1]]


def test_blank_jsonl_lines_are_counted_not_hidden(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text('{"vignette_id": "v1", "text": "t"}\n\n  \n{"vignette_id": "v2", "text": "u"}\n')
    table = load_table(path, "vignettes")
    assert table.lines.tolist() == [1, 4]
    assert dict(table.dropped) == {"blank line": 2}
    assert table.to_frame()[["reason", "rows"]].values.tolist() == [["loaded", 2], ["blank line", 2]]


def test_frames_validate_like_files():
    table = table_from_frame(pd.DataFrame({"vignette_id": [1, 2], "text": ["a", "b"]}), "vignettes")
    assert table.frame["vignette_id"].tolist() == ["1", "2"]
    with pytest.raises(SchemaError) as caught:
        table_from_frame(pd.DataFrame({"vignette_id": ["v1", "v2"], "text": ["a", " "]}), "vignettes")
    assert_problem(caught.value, "<vignettes frame>", 2, "text", "is empty")


# ----- JSON Lines only ------------------------------------------------------------------------------


def test_truncated_json_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(RESPONSE) + '\n{"response_id": "r2", "vignette_id": "v')
    assert_problem(problems_of(path, "responses"), path, 2, None, "is not valid JSON")


def test_json_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(RESPONSE) + '\n["r2", "v1"]\n')
    assert_problem(problems_of(path, "responses"), path, 2, None, "is a JSON list, not an object")


def test_missing_field_in_a_json_line(tmp_path):
    rows = responses({}, {})
    del rows[1]["system"]
    path = write(tmp_path / "r.jsonl", rows)
    assert_problem(problems_of(path, "responses"), path, 2, "system", "required field is missing")


# ----- every format ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_missing_required_column(tmp_path, fmt):
    path = write(tmp_path / f"r.{fmt}", [{k: v for k, v in RESPONSE.items() if k != "system"}])
    error = problems_of(path, "responses")
    assert_problem(error, path, 1 if fmt == "csv" else None, "system", "required column is missing")
    assert len(error.problems) == 1  # reported once, not once per row


@pytest.mark.parametrize("fmt", FORMATS)
def test_null_in_required_field(tmp_path, fmt):
    rows = [{"response_id": "r1", "rater_id": "a", "score": 3.0}, {"response_id": "r2", "rater_id": "a", "score": None}]
    path = write(tmp_path / f"h.{fmt}", rows)
    assert_problem(problems_of(path, "human_ratings"), path, line_of(1, fmt), "score", "required value is")


def test_nan_in_required_json_field(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"response_id": "r1", "rater_id": "a", "score": NaN}\n')
    assert_problem(problems_of(path, "human_ratings"), path, 1, "score", "required value is NaN")


@pytest.mark.parametrize("fmt", FORMATS)
def test_score_that_is_not_a_number(tmp_path, fmt):
    rows = [
        {"response_id": "r1", "rater_id": "a", "score": "4"},
        {"response_id": "r2", "rater_id": "a", "score": "high"},
    ]
    path = write(tmp_path / f"h.{fmt}", rows)
    error = problems_of(path, "human_ratings")
    assert_problem(error, path, line_of(1, fmt), "score", "expected a number, got str 'high'")
    # text is parsed in CSV only; a typed format must store a number
    assert len(error.problems) == (1 if fmt == "csv" else 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_seed_that_is_not_an_integer(tmp_path, fmt):
    path = write(tmp_path / f"r.{fmt}", responses({"seed": 1.0}, {"seed": 1.5}))
    error = problems_of(path, "responses")
    assert_problem(error, path, line_of(1, fmt), "seed", "expected an integer")
    assert len(error.problems) == 1  # 1.0 is an integer written as a float


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_finite_score(tmp_path, fmt):
    rows = [
        {"response_id": "r1", "rater_id": "a", "score": 2.0},
        {"response_id": "r2", "rater_id": "a", "score": float("inf")},
    ]
    path = write(tmp_path / f"h.{fmt}", rows)
    assert_problem(problems_of(path, "human_ratings"), path, line_of(1, fmt), "score", "is inf, not a finite number")


@pytest.mark.parametrize("fmt", FORMATS)
def test_verdict_outside_allowed_values(tmp_path, fmt):
    row = {"judge": "J", "vignette_id": "v1", "response_first": "r1", "response_second": "r2", "verdict": "first"}
    path = write(tmp_path / f"j.{fmt}", [row, {**row, "response_first": "r3", "verdict": "A"}])
    error = problems_of(path, "judgments")
    assert_problem(error, path, line_of(1, fmt), "verdict", "'A' is not one of: first, second, tie, invalid")


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_vignette_text(tmp_path, fmt):
    path = write(tmp_path / f"v.{fmt}", [{"vignette_id": "v1", "text": "t"}, {"vignette_id": "v2", "text": ""}])
    assert_problem(problems_of(path, "vignettes"), path, line_of(1, fmt), "text", "is empty")


@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicate_response_id_names_both_lines(tmp_path, fmt):
    path = write(tmp_path / f"r.{fmt}", responses({}, {}, {"response_id": "r1"}))
    a, b = line_of(0, fmt), line_of(2, fmt)
    assert_problem(problems_of(path, "responses"), path, b, "response_id", f"on lines {a}, {b}")


def test_human_pair_labelled_twice_in_either_order_is_a_duplicate(tmp_path):
    row = {"vignette_id": "v1", "response_a": "r1", "response_b": "r2", "label": "a", "rater_id": "x"}
    path = write(tmp_path / "p.jsonl", [row, {**row, "response_a": "r2", "response_b": "r1", "label": "b"}])
    assert_problem(problems_of(path, "human_pairs"), path, 2, "response_a, response_b, rater_id", "on lines 1, 2")


@pytest.mark.parametrize("fmt", FORMATS)
def test_file_without_rows(tmp_path, fmt):
    path = tmp_path / f"v.{fmt}"
    if fmt == "parquet":
        pd.DataFrame({"vignette_id": pd.Series([], dtype=str), "text": pd.Series([], dtype=str)}).to_parquet(path)
    else:
        path.write_text("vignette_id,text\n" if fmt == "csv" else "\n")
    error = problems_of(path, "vignettes")
    assert_problem(error, path, None, None, "has no rows")
    assert len(error.problems) == 1


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_non_utf8_bytes_name_line_and_byte(tmp_path, fmt):
    path = tmp_path / f"v.{fmt}"
    good, bad = (
        ('{"vignette_id": "v1", "text": "ok"}', '{"vignette_id": "v2", "text": "caf\xe9"}')
        if fmt == "jsonl"
        else ("v1,ok", "v2,caf\xe9")
    )
    header = "" if fmt == "jsonl" else "vignette_id,text\n"
    path.write_bytes(f"{header}{good}\n{bad}\n".encode("latin-1"))
    line = 2 if fmt == "jsonl" else 3
    column = bad.encode("latin-1").index(b"\xe9") + 1
    assert_problem(
        problems_of(path, "vignettes"), path, line, None, f"not valid UTF-8: byte 0xe9 at byte {column} of the line"
    )


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_utf8_bom_is_accepted(tmp_path, fmt):
    path = tmp_path / f"v.{fmt}"
    text = '{"vignette_id": "v1", "text": "t"}\n' if fmt == "jsonl" else "vignette_id,text\nv1,t\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_table(path, "vignettes").frame["vignette_id"].tolist() == ["v1"]


def test_every_problem_is_reported_not_only_the_first(tmp_path):
    path = write(tmp_path / "r.csv", responses({"seed": "x"}, {"pool": "train"}, {"system": ""}, {"response_id": "r1"}))
    error = problems_of(path, "responses")
    assert [(p.line, p.field) for p in error.problems] == [(2, "seed"), (3, "pool"), (4, "system"), (5, "response_id")]
    assert "'train' is not one of: selection, heldout" in str(error)


def test_csv_lines_count_physical_lines_of_quoted_fields(tmp_path):
    path = tmp_path / "v.csv"
    path.write_text('vignette_id,text\n,"three\nline\ntext"\nv2,\nv3,a,b\n')
    error = problems_of(path, "vignettes")
    assert_problem(error, path, 2, "vignette_id", "is empty")  # a record is named by its first line
    assert_problem(error, path, 5, "text", "is empty")
    assert_problem(error, path, 6, None, "has 3 fields but the header has 2")


def test_unknown_extension_and_table(tmp_path):
    with pytest.raises(InputError, match=r"\.jsonl, \.jsonl\.gz, \.csv, \.parquet"):
        load_table(tmp_path / "v.xlsx", "vignettes")
    with pytest.raises(InputError, match="use one of: vignettes, responses"):
        load_table(tmp_path / "v.csv", "prompts")


# ----- studies and cross-references --------------------------------------------------------------


def study_files(tmp_path, judgments=None, responses_rows=None, **extra):
    vignettes = [{"vignette_id": "v1", "text": "a"}, {"vignette_id": "v2", "text": "b"}]
    responses_rows = responses_rows or [
        {"response_id": "p1", "vignette_id": "v1", "system": "P", "text": "x"},
        {"response_id": "o1", "vignette_id": "v1", "system": "O", "text": "y"},
        {"response_id": "p2", "vignette_id": "v2", "system": "P", "text": "z"},
    ]
    judgments = judgments or [
        {"judge": "J", "vignette_id": "v1", "response_first": "p1", "response_second": "o1", "verdict": "first"}
    ]
    paths = {
        "vignettes": write(tmp_path / "vignettes.jsonl", vignettes),
        "responses": write(tmp_path / "responses.csv", responses_rows),
        "judgments": write(tmp_path / "judgments.jsonl", judgments),
    }
    for name, rows in extra.items():
        paths[name] = write(tmp_path / f"{name}.jsonl", rows)
    return paths


def test_study_records_every_input_hash(tmp_path):
    paths = study_files(tmp_path)
    study = load_study(paths)
    assert study.sha256 == {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in paths.items()}
    assert study.to_frame()["table"].tolist() == ["vignettes", "responses", "judgments"]
    assert study.human_pairs is None


def test_loading_a_study_hands_pyarrows_unused_memory_back(tmp_path, monkeypatch):
    # the pool keeps what the tables' arrow arrays freed, which numpy cannot reuse
    import pyarrow as pa

    released = []

    class Pool:
        def release_unused(self):
            released.append(True)

    monkeypatch.setattr(pa, "default_memory_pool", Pool)
    load_study(study_files(tmp_path))
    assert released == [True]


def test_study_needs_its_core_tables(tmp_path):
    paths = study_files(tmp_path)
    del paths["judgments"]
    with pytest.raises(InputError, match="needs the judgments table"):
        load_study(paths)


def test_study_reports_problems_of_all_files_at_once(tmp_path):
    paths = study_files(
        tmp_path,
        judgments=[
            {"judge": "J", "vignette_id": "v1", "response_first": "p1", "response_second": "o1", "verdict": "?"}
        ],
    )
    paths["vignettes"].write_text('{"vignette_id": "v1"}\n')
    with pytest.raises(SchemaError) as caught:
        load_study(paths)
    assert {(p.file, p.field) for p in caught.value.problems} == {
        (str(paths["vignettes"]), "text"),
        (str(paths["judgments"]), "verdict"),
    }


def test_cross_references(tmp_path):
    judgment = {"judge": "J", "vignette_id": "v1", "verdict": "tie"}
    paths = study_files(
        tmp_path,
        responses_rows=[
            {"response_id": "p1", "vignette_id": "v1", "system": "P", "text": "x"},
            {"response_id": "o1", "vignette_id": "v1", "system": "O", "text": "y"},
            {"response_id": "p2", "vignette_id": "v2", "system": "P", "text": "z"},
            {"response_id": "p9", "vignette_id": "v9", "system": "P", "text": "w"},
        ],
        judgments=[
            {**judgment, "response_first": "p1", "response_second": "o1"},
            {**judgment, "response_first": "o1", "response_second": "nope"},
            {**judgment, "response_first": "p2", "response_second": "o1"},
            {**judgment, "response_first": "p1", "response_second": "p1"},
        ],
        human_ratings=[{"response_id": "ghost", "rater_id": "a", "score": 3}],
        human_pairs=[{"vignette_id": "v1", "response_a": "p1", "response_b": "p2", "label": "a", "rater_id": "a"}],
    )
    # response_first == response_second is a row-level problem, found before references
    with pytest.raises(SchemaError) as caught:
        load_study(paths)
    assert_problem(caught.value, paths["judgments"], 4, "response_second", "equals response_first")
    lines = paths["judgments"].read_text().splitlines()
    paths["judgments"].write_text("\n".join(lines[:3]) + "\n")
    with pytest.raises(SchemaError) as caught:
        load_study(paths)
    error = caught.value
    assert_problem(error, paths["responses"], 5, "vignette_id", "vignette 'v9' is not in the vignettes table")
    assert_problem(error, paths["judgments"], 2, "response_second", "response 'nope' is not in the responses table")
    assert_problem(error, paths["judgments"], 3, "response_first", "response 'p2' belongs to vignette 'v2', not 'v1'")
    assert_problem(error, paths["human_ratings"], 1, "response_id", "response 'ghost' is not in the responses table")
    assert_problem(error, paths["human_pairs"], 1, "response_b", "response 'p2' belongs to vignette 'v2', not 'v1'")
    assert len(error.problems) == 5
