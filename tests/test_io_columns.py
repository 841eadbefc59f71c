"""The by-columns Parquet path (``validate_arrow``) builds exactly the table of the per-record path,
and hands every file with a problem to the per-record path (which names it)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from honestci.audit.data import io as loaders
from honestci.audit.data import readers, validation
from honestci.audit.data.schema import table_spec
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

TABLES = ("vignettes", "responses", "judgments", "human_ratings", "human_pairs", "corpus")


def both_paths(table: pa.Table, name: str):
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=max(1, table.num_rows // 3))  # several row groups
    data = buffer.getvalue()
    arrow = readers._arrow_table(data, "t.parquet")
    fast = validation.validate_arrow(arrow, table_spec(name), "t.parquet", "sha")
    try:
        slow = validation.validate_records(
            readers.read_parquet(data, "t.parquet", arrow), table_spec(name), "t.parquet", "sha"
        )
    except loaders.SchemaError as error:
        slow = error
    return fast, slow


def assert_same(fast, slow):
    assert fast is not None
    pd.testing.assert_frame_equal(fast.frame, slow.frame)
    assert list(fast.frame.dtypes) == list(slow.frame.dtypes)
    np.testing.assert_array_equal(fast.lines, slow.lines)
    assert fast.dropped == slow.dropped


@pytest.mark.parametrize("name", TABLES)
def test_fixture_tables_load_the_same_by_columns(name):
    frame = loaders.load_table(DEFAULT_STUDY_DIR / f"{name}.jsonl", name).frame
    fast, slow = both_paths(pa.Table.from_pandas(frame, preserve_index=False), name)
    assert_same(fast, slow)


def test_types_converted_as_per_record():
    # ints as ids, floats as ints, an empty optional string, an extra column, an absent optional one
    table = pa.table(
        {
            "response_id": pa.array([1, 2, 3]),
            "vignette_id": ["v1", "v1", "v2"],
            "system": ["a", "b", "a"],
            "text": ["", "x", "y"],
            "run": ["", None, "r2"],
            "seed": pa.array([1.0, None, 3.0]),
            "extra": [{"k": 1}, None, {"k": 2}],
        }
    )
    fast, slow = both_paths(table.drop_columns(["extra"]), "responses")
    assert_same(fast, slow)
    assert fast.frame["response_id"].tolist() == ["1", "2", "3"] and fast.frame["run"].isna().tolist()[:2] == [
        True,
        True,
    ]
    # an extra column (here nested) is kept as read, as the per-record path keeps it
    fast, slow = both_paths(table, "responses")
    assert_same(fast, slow)
    assert fast.frame["extra"].tolist() == [{"k": 1}, None, {"k": 2}]


@pytest.mark.parametrize(
    "name, columns",
    [
        ("vignettes", {"vignette_id": ["v1", "v1"], "text": ["a", "b"]}),  # a repeated key
        ("vignettes", {"vignette_id": ["v1", " "], "text": ["a", "b"]}),  # a blank required value
        ("vignettes", {"vignette_id": ["v1", "v\x002"], "text": ["a", "b"]}),  # a control character in an id
        ("vignettes", {"vignette_id": ["v1", None], "text": ["a", "b"]}),  # a null required value
        ("vignettes", {"text": ["a", "b"]}),  # a required column missing
        ("responses", {"response_id": ["r1"], "vignette_id": ["v1"], "system": ["s"], "text": ["t"], "pool": ["x"]}),
        ("responses", {"response_id": ["r1"], "vignette_id": ["v1"], "system": ["s"], "text": ["t"], "seed": [1.5]}),
        (
            "judgments",
            {
                "judge": ["j", "j"],
                "vignette_id": ["v", "v"],
                "response_first": ["a", "b"],
                "response_second": ["b", "b"],  # a response against itself
                "verdict": ["first", "tie"],
            },
        ),
        (
            "judgments",
            {
                "judge": ["j", "j"],
                "vignette_id": ["v", "v"],
                "response_first": ["a", "a"],
                "response_second": ["b", "b"],  # the same ordered pair twice
                "verdict": ["first", "tie"],
            },
        ),
        (
            "judgments",
            {
                "judge": ["j"],
                "vignette_id": ["v"],
                "response_first": ["a"],
                "response_second": ["b"],
                "verdict": ["first"],
                "prompt_sha256": ["abc"],  # not 64 hex digits
            },
        ),
        (
            "human_pairs",
            {
                "vignette_id": ["v", "v"],
                "response_a": ["a", "b"],
                "response_b": ["b", "a"],
                "label": ["a", "b"],
                "rater_id": ["r", "r"],
            },
        ),  # the unordered pair twice
    ],
)
def test_a_problem_goes_to_the_per_record_path(name, columns):
    fast, slow = both_paths(pa.table(columns), name)
    assert fast is None
    assert isinstance(slow, loaders.SchemaError)
    with pytest.raises(loaders.SchemaError) as caught:
        buffer = io.BytesIO()
        pq.write_table(pa.table(columns), buffer)
        path = DEFAULT_STUDY_DIR.parent / "never-written.parquet"  # only its name is used in messages
        validation.validate_records(readers.read_parquet(buffer.getvalue(), str(path)), table_spec(name), str(path), "")
    assert caught.value.problems


def test_references_by_columns_match_row_by_row():
    tables = {
        name: loaders.load_table(DEFAULT_STUDY_DIR / f"{name}.jsonl", name)
        for name in ("vignettes", "responses", "judgments", "human_ratings", "human_pairs")
    }
    assert loaders._references_resolve(tables) and loaders.check_references(tables) == []
    judgments = tables["judgments"]
    frame = judgments.frame.copy()
    # a categorical column (the judgments' spec) takes a new value once it is a category
    frame["response_first"] = frame["response_first"].cat.add_categories(["no-such-response"])
    frame.loc[3, "response_first"] = "no-such-response"
    broken = {**tables, "judgments": validation.LoadedTable("judgments", "j", "", frame, judgments.lines)}
    assert not loaders._references_resolve(broken)
    [problem] = loaders.check_references(broken)
    assert problem.line == int(judgments.lines[3]) and problem.field == "response_first"
    frame = tables["responses"].frame.copy()
    frame.loc[0, "vignette_id"] = "v2" if frame.loc[0, "vignette_id"] != "v2" else "v1"
    moved = {**tables, "responses": validation.LoadedTable("responses", "r", "", frame, tables["responses"].lines)}
    assert not loaders._references_resolve(moved) and loaders.check_references(moved)


# --- JSON Lines read by pyarrow (arrow_jsonl) ------------------------------------------------


def jsonl_paths(data: bytes, name: str):
    """The table by pyarrow's reader and by columns (None where it is not taken), and by records."""
    arrow = readers.arrow_jsonl(data, table_spec(name))
    fast = None if arrow is None else validation.validate_arrow(arrow, table_spec(name), "t.jsonl", "sha")
    try:
        slow = validation.validate_records(readers.read_jsonl(data, "t.jsonl"), table_spec(name), "t.jsonl", "sha")
    except loaders.SchemaError as error:
        slow = error
    return fast, slow


@pytest.mark.parametrize("name", TABLES)
def test_fixture_jsonl_loads_the_same_by_pyarrow(name):
    fast, slow = jsonl_paths((DEFAULT_STUDY_DIR / f"{name}.jsonl").read_bytes(), name)
    assert_same(fast, slow)


def test_jsonl_that_pyarrow_reads_otherwise_goes_to_the_record_reader():
    good = b'{"vignette_id": "v1", "text": "a"}\n{"vignette_id": "v2", "text": "b"}\n'
    fast, slow = jsonl_paths(good, "vignettes")
    assert_same(fast, slow)
    cases = {
        "a blank line (counted, and it shifts the line numbers)": good.replace(b"\n", b"\n  \n", 1),
        "two objects on one line": good.replace(b"}\n{", b"} {"),
        "a lone carriage return": good.replace(b"\n", b"\r", 1),
        "a key given twice": b'{"vignette_id": "v1", "vignette_id": "v2", "text": "a"}\n',
        "a lone surrogate": b'{"vignette_id": "v\\ud800", "text": "a"}\n',
        "not UTF-8": b'{"vignette_id": "v\xe9", "text": "a"}\n',
        "a number as an id": b'{"vignette_id": 7, "text": "a"}\n',
        "an extra column of numbers": b'{"vignette_id": "v1", "text": "a", "x": 1}\n{"vignette_id": "v2", "text": "b", "x": 2.5}\n',
        "an extra nested column": b'{"vignette_id": "v1", "text": "a", "x": {"k": 1}}\n',
        "deep nesting (pyarrow's parser would crash)": b'{"vignette_id": "v1", "text": "a", "x": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}\n",
    }
    for case, data in cases.items():
        assert readers.arrow_jsonl(data, table_spec("vignettes")) is None, case
    # what the record reader then makes of them (the blank line counted, the integer id as text)
    fast, slow = jsonl_paths(cases["a blank line (counted, and it shifts the line numbers)"], "vignettes")
    assert slow.dropped == {"blank line": 1} and slow.lines.tolist() == [1, 3]
    fast, slow = jsonl_paths(cases["a number as an id"], "vignettes")
    assert slow.frame["vignette_id"].tolist() == ["7"]
    # a date-like id stays a string (pyarrow alone would infer a timestamp)
    fast, slow = jsonl_paths(b'{"vignette_id": "2024-01-01", "text": "a"}\n', "vignettes")
    assert_same(fast, slow)
    assert fast.frame["vignette_id"].tolist() == ["2024-01-01"]


def test_judgments_strings_are_categoricals_with_sorted_categories():
    frame = loaders.load_table(DEFAULT_STUDY_DIR / "judgments.jsonl", "judgments").frame
    for column in ("judge", "vignette_id", "response_first", "response_second", "verdict"):
        values = frame[column]
        assert isinstance(values.dtype, pd.CategoricalDtype) and not values.cat.ordered
        assert list(values.cat.categories) == sorted(set(values))
    # the other tables keep plain strings
    assert loaders.load_table(DEFAULT_STUDY_DIR / "responses.jsonl", "responses").frame["response_id"].dtype == "str"
