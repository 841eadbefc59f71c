"""Load and validate input tables (JSON Lines, CSV, Parquet) and whole studies.

Every loader reads the whole file and reports **every** problem at once, each located by file,
line and field (JSONL: 1-based physical line; CSV: 1-based physical line with the header as line 1,
so a record that spans several lines inside quotes is named by its first line; Parquet: 1-based
row), then raises :class:`~honestci.audit.errors.SchemaError`. Identifiers are read as strings. No row is
dropped silently: blank lines are counted in :attr:`LoadedTable.dropped`.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from honestci.audit.data.schema import TYPE_WORDS, Column, TableSpec, UniqueKey, table_spec
from honestci.audit.errors import InputError, Problem, SchemaError

EXTENSIONS = (".jsonl", ".jsonl.gz", ".csv", ".parquet")
REQUIRED_STUDY_TABLES = ("vignettes", "responses", "judgments")
_BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Characters no id may hold: NUL and the other C0/C1 controls (they break file names, terminals
#: and report renderers, and never belong in an identifier).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_INT64 = (-(2**63), 2**63 - 1)
_SEE_DOCS = "see docs/data-formats.md"


@dataclass(frozen=True, eq=False)
class LoadedTable:
    """One validated table.

    ``frame`` has the spec's columns in order (strings as ``str``, or as categoricals with sorted
    categories where the spec is :attr:`~honestci.audit.data.schema.TableSpec.categorical`;
    integers as ``Int64``, numbers as ``float64``; missing optional values are NA) followed by any
    extra columns as read.
    ``lines[i]`` is the source line (CSV/JSONL) or row (Parquet, frames) of ``frame`` row ``i``.
    ``dropped`` maps a reason to the number of rows left out on purpose (e.g. blank lines).
    """

    table: str
    path: str
    sha256: str
    frame: pd.DataFrame
    lines: np.ndarray
    dropped: Mapping[str, int] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return len(self.frame)

    def to_frame(self) -> pd.DataFrame:
        """One row for the rows kept (reason ``loaded``) and one per reason rows were dropped."""
        reasons = {"loaded": self.n_rows, **self.dropped}
        return pd.DataFrame(
            {
                "table": self.table,
                "path": self.path,
                "sha256": self.sha256,
                "reason": list(reasons),
                "rows": list(reasons.values()),
            }
        )


@dataclass
class _Raw:
    """Records as a reader found them, before validation."""

    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    #: Column names declared by the file (CSV header, Parquet schema); None for JSONL.
    header: list[str] | None = None
    #: Whether values are text still to be parsed (CSV) rather than typed (JSON, Parquet).
    from_text: bool = False
    #: Line of the header, where a missing column is reported (CSV: 1).
    header_line: int | None = None


# ---------------------------------------------------------------------------------------------
# Readers: bytes -> records


def _utf8_problem(file: str, line: int, raw: bytes, error: UnicodeDecodeError) -> Problem:
    return Problem(
        file,
        line,
        None,
        f"is not valid UTF-8: byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line",
        "re-save the file as UTF-8",
    )


class _BadJSONObject(ValueError):
    """A JSON object that parses but cannot be trusted: a key given twice, or a lone surrogate."""

    def __init__(self, message: str, key: str | None):
        super().__init__(message)
        self.key = key


def _checked_object(pairs: list[tuple[str, Any]]) -> dict:
    """``json.loads``'s object hook: refuse a key given twice (the plain parser keeps the last,
    so a second ``"verdict"`` would silently overrule the first) and strings holding lone
    surrogates (``"\\ud800"``: valid JSON escapes, not valid Unicode text)."""
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record:
            raise _BadJSONObject(f"gives the key {_short(key)} twice", key)
        for text in (key, value):
            if isinstance(text, str) and _SURROGATE.search(text):
                raise _BadJSONObject("holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text", key)
        record[key] = value
    return record


def _read_jsonl(data: bytes, file: str) -> _Raw:
    raw = _Raw()
    for line, chunk in enumerate(data.removeprefix(_BOM).splitlines(), start=1):
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as error:
            raw.problems.append(_utf8_problem(file, line, chunk, error))
            continue
        if not text.strip():
            raw.dropped["blank line"] = raw.dropped.get("blank line", 0) + 1
            continue
        try:
            record = json.loads(text, object_pairs_hook=_checked_object)
        except json.JSONDecodeError as error:
            raw.problems.append(
                Problem(
                    file,
                    line,
                    None,
                    f"is not valid JSON ({error.msg} at column {error.colno})",
                    "write one complete JSON object per line; a cut-off line often means the file "
                    "was truncated while being written",
                )
            )
            continue
        except _BadJSONObject as error:
            raw.problems.append(Problem(file, line, error.key, str(error), "write each key once, as valid Unicode"))
            continue
        except RecursionError:
            raw.problems.append(Problem(file, line, None, "nests JSON too deeply to read", "flatten the row"))
            continue
        except ValueError as error:  # e.g. an integer past Python's digit limit
            raw.problems.append(Problem(file, line, None, f"is not valid JSON ({error})", _SEE_DOCS))
            continue
        if not isinstance(record, dict):
            raw.problems.append(
                Problem(
                    file,
                    line,
                    None,
                    f"is a JSON {type(record).__name__}, not an object",
                    'write each row as a JSON object, e.g. {"vignette_id": "v1", ...}',
                )
            )
            continue
        raw.records.append((line, record))
    return raw


def _read_csv(data: bytes, file: str) -> _Raw:
    raw = _Raw(from_text=True, header_line=1)
    data = data.removeprefix(_BOM)
    for line, chunk in enumerate(data.splitlines(), start=1):
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError as error:
            raw.problems.append(_utf8_problem(file, line, chunk, error))
    # io.StringIO(newline="") splits lines exactly as bytes.splitlines does, so csv's line_num
    # counts physical lines.
    # strict: a quote that never closes is an error, not a field that swallows the rest of the file
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace"), newline=""), strict=True)
    # A response text may exceed csv's default 128 KiB field limit; the file's own size bounds it.
    csv.field_size_limit(max(csv.field_size_limit(), len(data) + 1))
    try:
        raw.header = [name.strip() for name in next(reader)]
    except StopIteration:
        return raw  # an empty file: reported as having no rows
    except csv.Error as error:
        raw.problems.append(Problem(file, 1, None, f"header is not valid CSV ({error})", _SEE_DOCS))
        return raw
    for name in {name for name in raw.header if raw.header.count(name) > 1}:
        raw.problems.append(
            Problem(file, 1, name, "column appears more than once in the header", "rename or remove the copy")
        )
    previous_end = reader.line_num
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raw.problems.append(
                Problem(file, previous_end + 1, None, f"is not valid CSV ({error})", "check the quoting")
            )
            break
        line, previous_end = previous_end + 1, reader.line_num
        if not values:
            raw.dropped["blank line"] = raw.dropped.get("blank line", 0) + 1
        elif len(values) != len(raw.header):
            raw.problems.append(
                Problem(
                    file,
                    line,
                    None,
                    f"has {len(values)} fields but the header has {len(raw.header)}",
                    "quote values that contain commas or line breaks",
                )
            )
        else:
            raw.records.append((line, dict(zip(raw.header, values))))
    return raw


def _arrow_table(data: bytes, file: str):
    import pyarrow.parquet as pq

    try:
        # string columns as dictionaries: ids repeat across rows, and each distinct value is then
        # decoded (and validated, _validate_arrow) once
        schema = pq.read_schema(io.BytesIO(data))
        strings = [f.name for f in schema if str(f.type) in ("string", "large_string")]
        return pq.read_table(io.BytesIO(data), read_dictionary=strings)
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise _unreadable(file, error) from error


class _ParquetColumns:
    """A Parquet file's columns, each read when :func:`_validate_arrow` asks for it (string columns
    as dictionaries, as :func:`_arrow_table` reads them), so that one column at a time is decoded."""

    def __init__(self, data: bytes, file: str):
        import pyarrow.parquet as pq

        self.file = file
        try:
            schema = pq.read_schema(io.BytesIO(data))
            strings = [f.name for f in schema if str(f.type) in ("string", "large_string")]
            self.parquet = pq.ParquetFile(io.BytesIO(data), read_dictionary=strings)
        except Exception as error:  # pyarrow raises several types for a damaged file
            raise _unreadable(file, error) from error
        self.num_rows = self.parquet.metadata.num_rows
        self.column_names = list(self.parquet.schema_arrow.names)

    def column(self, name: str):
        try:
            return self.parquet.read(columns=[name]).column(0)
        except Exception as error:
            raise _unreadable(self.file, error) from error


def _unreadable(file: str, error: Exception) -> InputError:
    return InputError(
        f"{file}: not a readable Parquet file ({error})",
        fix="write the file again with pandas.DataFrame.to_parquet or pyarrow",
    )


#: The most brackets a JSON line may open for pyarrow to read it (deeper nesting is refused by
#: the record reader's parser anyway, at Python's recursion limit).
_ARROW_JSON_OPENINGS = 500


def _arrow_jsonl(data: bytes, spec: TableSpec):
    """JSON Lines read by pyarrow (C++, no Python object per row) for :func:`_validate_arrow`: or
    None when pyarrow may read the file otherwise than :func:`_read_jsonl` (which then reads it and
    names every problem). pyarrow refuses what that refuses (bad JSON or UTF-8, a key given twice,
    a lone surrogate, a line that is not an object) but skips blank lines (whose rows and count
    :func:`_read_jsonl` reports), reads a line holding two objects as two rows, ends lines at a lone
    carriage return differently, types extra columns by its own inference and crashes on deep
    nesting: each case is left to the record reader."""
    import pyarrow as pa
    import pyarrow.json as pj

    if data.count(b"\r") != data.count(b"\r\n") or re.search(rb"\}[ \t]*\{", data):
        return None
    # pyarrow's parser recurses without a limit (100,000 nested lists crash the process); a line
    # nests no deeper than it opens brackets
    if max((line.count(b"[") + line.count(b"{") for line in io.BytesIO(data)), default=0) > _ARROW_JSON_OPENINGS:
        return None
    try:
        # the spec's strings as strings: pyarrow would infer a timestamp from "2024-01-01"
        strings = pa.schema([(c.name, pa.string()) for c in spec.columns if c.type == "str"])
        arrow = pj.read_json(io.BytesIO(data), parse_options=pj.ParseOptions(explicit_schema=strings))
        arrow.validate(full=True)  # its strings are valid UTF-8 (the reader does not check)
    except Exception:  # pyarrow raises several types; the record reader names the problem
        return None
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    extras = [f for f in arrow.schema if f.name not in spec.names]
    plain = (pa.types.is_string, pa.types.is_integer, pa.types.is_boolean, pa.types.is_null)
    if arrow.num_rows != lines or not all(any(test(f.type) for test in plain) for f in extras):
        return None
    return arrow


def _read_parquet(data: bytes, file: str, arrow=None) -> _Raw:
    arrow = _arrow_table(data, file) if arrow is None else arrow
    return _Raw(records=list(enumerate(arrow.to_pylist(), start=1)), header=list(arrow.column_names))


_READERS = {".jsonl": _read_jsonl, ".jsonl.gz": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet}


# ---------------------------------------------------------------------------------------------
# Validation: records -> frame, or every problem


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _wrong_type(column: Column, value: Any) -> str:
    return f"expected {TYPE_WORDS[column.type]}, got {type(value).__name__} {_short(value)}"


def _coerce(column: Column, value: Any, from_text: bool) -> tuple[Any, str | None]:
    """Turn one read value into the column's Python type: (value, None), (None, None) for a
    missing value, or (None, problem)."""
    if isinstance(value, float) and math.isnan(value) and column.type == "int":
        # an integer column has no NaN of its own: a written NaN is not a missing seed
        return None, "is NaN, not an integer (leave the field out, or null, for a missing value)"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, None
    if column.type == "str":
        if isinstance(value, str):
            return (value if value or column.required else None), None
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value), None
        return None, _wrong_type(column, value)
    number = value
    if from_text:
        text = value.strip()
        if not text:
            return None, None
        try:
            number = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else float(text)
        except ValueError:
            return None, _wrong_type(column, value)
        if math.isnan(number):
            return (None, None) if column.type == "float" else (None, f"is {text!r}, not an integer")
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return None, _wrong_type(column, value)
    if not math.isfinite(number):
        return None, f"is {number}, not a finite number"
    if column.type == "int":
        if number != int(number):
            return None, _wrong_type(column, value)
        if not _INT64[0] <= int(number) <= _INT64[1]:
            return None, "is beyond the 64-bit integer range"
        return int(number), None
    return float(number), None


def _check_value(column: Column, value: Any) -> str | None:
    if column.non_empty and not value.strip():
        return "is empty"
    if (column.name.endswith("_id") or column.name.startswith("response_")) and _CONTROL.search(value):
        return f"{_short(value)} holds a control character (NUL, newline, ...), which no id may"
    if column.allowed and value not in column.allowed:
        return f"{_short(value)} is not one of: {', '.join(column.allowed)}"
    if column.pattern and not re.fullmatch(column.pattern[0], value):
        return f"{_short(value)} is not {column.pattern[1]}"
    return None


def _fix_for(column: Column) -> str:
    if column.allowed:
        return f"use one of: {', '.join(column.allowed)}"
    non_empty = "a non-empty string" if column.non_empty else TYPE_WORDS[column.type]
    return f"give {non_empty}: {column.doc}"


def _cell(column: Column, value: Any, from_text: bool) -> tuple[Any, str | None]:
    """The validated value of one cell and the problem with it, if any."""
    coerced, message = _coerce(column, value, from_text)
    if message is None and coerced is None and column.required:
        message = "required value is " + ("empty" if from_text else "null" if value is None else "NaN")
    if message is None and coerced is not None and column.type == "str":
        message = _check_value(column, coerced)
    return coerced, message


#: A record's field that is not there (distinct from a null value).
_ABSENT = object()


def _column_cells(column: Column, cells: list, from_text: bool, absent: bool) -> tuple[list, list[tuple[int, str]]]:
    """One column's validated values (``cells``: the records' values, :data:`_ABSENT` where a
    record lacks the field; ``absent``: the whole column is missing, already reported) and the
    (row, message) of every cell with a problem.

    :func:`_cell` depends on the value alone, so it runs once per distinct value (ids and verdicts
    repeat down a column); cells that are unhashable, or equal across types that it tells apart
    (1, 1.0 and True; 0.0 and -0.0), are checked one by one.
    """
    missing = "required field is missing" if column.required and not absent else None
    try:
        distinct = set(cells)
    except TypeError:  # a list or object in the column
        distinct = None
    # by the cells' types, not the distinct values': {1.0, True} is one value to a set, so True
    # would be read as 1.0 through the first's outcome
    numeric = set(map(type, cells)) & {int, float, bool} if distinct is not None else set()
    if distinct is not None and len(numeric) <= 1 and not (float in numeric and 0.0 in distinct):
        outcome = {
            value: (None, missing) if value is _ABSENT else _cell(column, value, from_text) for value in distinct
        }
        if all(coerced is value for value, (coerced, _) in outcome.items()):
            values = cells  # every cell is already its own validated value (strings, usually)
        else:
            values = list(map({value: coerced for value, (coerced, _) in outcome.items()}.__getitem__, cells))
        bad = {value: message for value, (_, message) in outcome.items() if message}
        return values, [(row, bad[value]) for row, value in enumerate(cells) if value in bad] if bad else []
    values, problems = [], []
    for row, value in enumerate(cells):
        coerced, message = (None, missing) if value is _ABSENT else _cell(column, value, from_text)
        values.append(coerced)
        if message:
            problems.append((row, message))
    return values, problems


def _validate(raw: _Raw, spec: TableSpec, file: str, sha256: str) -> LoadedTable:
    problems = list(raw.problems)
    absent: set[str] = set()
    if raw.header is not None:
        absent = {c.name for c in spec.columns if c.name not in raw.header}
        for column in spec.columns:
            if column.required and column.name in absent:
                problems.append(
                    Problem(
                        file,
                        raw.header_line,
                        column.name,
                        "required column is missing",
                        f"add the column: {column.doc}",
                    )
                )
    values: dict[str, list[Any]] = {}
    cell_problems: list[tuple[int, int, Problem]] = []
    for position, column in enumerate(spec.columns):
        cells = [record.get(column.name, _ABSENT) for _, record in raw.records]
        values[column.name], found = _column_cells(column, cells, raw.from_text, column.name in absent)
        cell_problems += [
            (row, position, Problem(file, raw.records[row][0], column.name, message, _fix_for(column)))
            for row, message in found
        ]
    # row by row, each row's columns in order
    problems += [problem for _, _, problem in sorted(cell_problems, key=lambda found: found[:2])]
    lines = np.array([line for line, _ in raw.records], dtype=np.int64)
    import pyarrow as pa
    import pyarrow.compute as pc

    types = {c.name: c.type for c in spec.columns}

    def encoded(name: str) -> tuple[Any, Any]:
        array = pc.dictionary_encode(pa.array(values[name], type=_ARROW_TYPES[types[name]]))
        return array.dictionary, array.indices

    coded = _Codes(encoded)

    for a, b in spec.distinct:
        if _equal_rows(coded[a], coded[b]).any():
            problems += _distinct_problems(a, b, values, lines, file)
    for key in spec.unique:
        if _has_duplicate(key, coded):
            problems += _unique_problems(key, values, lines, file)
    if not raw.records and not raw.problems:
        problems.append(Problem(file, None, None, "has no rows", f"write at least one {spec.name} row; {_SEE_DOCS}"))
    if problems:
        problems.sort(key=lambda problem: problem.line or 0)
        raise SchemaError(
            f"{file}: {len(problems)} problem(s) in the {spec.name} table",
            problems,
            fix=f"correct the rows listed above ({_SEE_DOCS})",
        )
    frame = pd.DataFrame(
        {
            c.name: (
                _categorical(coded[c.name])
                if spec.categorical and c.type == "str"
                else pd.Series(values[c.name], dtype=_PANDAS_TYPES[c.type])
            )
            for c in spec.columns
        },
        copy=False,
    )
    extras = dict.fromkeys(name for _, record in raw.records for name in record if name not in values)
    for name in extras:
        frame[name] = pd.Series([record.get(name) for _, record in raw.records], dtype=object)
    return LoadedTable(spec.name, file, sha256, frame, lines, dict(raw.dropped))


_PANDAS_TYPES = {"str": "str", "int": "Int64", "float": "float64"}


_ARROW_TYPES = {"str": "large_string", "int": "int64", "float": "float64"}


@dataclass(frozen=True)
class _Coded:
    """A column as integer codes: ``categories`` are its distinct values, sorted, and ``codes[i]``
    the position of row i's value among them (-1 where missing)."""

    codes: np.ndarray
    categories: pd.Index

    @property
    def size(self) -> int:
        return max(len(self.categories), 1)

    def recoded(self, categories: pd.Index) -> np.ndarray:
        """The codes among ``categories`` (-1 where the value is missing or not one of them)."""
        return np.append(categories.get_indexer(self.categories), -1)[self.codes]


def _coded(dictionary, indices: np.ndarray) -> _Coded:
    """The codes of a dictionary-encoded column: ``dictionary`` (pyarrow) holds validated values
    (null for a missing one; a value may repeat when coercion merged two), ``indices`` each row's
    entry (-1 for a null). Sorted by pyarrow: no Python object per value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    order = pc.array_sort_indices(dictionary, null_placement="at_end").to_numpy()[
        : len(dictionary) - dictionary.null_count
    ]
    ordered = dictionary.take(order)
    new = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        new[1:] = pc.not_equal(ordered[1:], ordered[:-1]).to_numpy(zero_copy_only=False)
    categories = ordered.filter(pa.array(new))
    # codes in the narrowest integer type that holds them (-1 to len - 1): int8 for a verdict
    recode = np.full(len(dictionary) + 1, -1, dtype=np.min_scalar_type(-max(len(categories), 1)))
    recode[order] = np.cumsum(new) - 1
    index = (
        pd.Index(pd.array(categories, dtype="str"))
        if pa.types.is_large_string(categories.type)
        else pd.Index(categories.to_numpy())
    )
    return _Coded(recode[indices], index)


class _Codes(dict):
    """Each column's :class:`_Coded`, made when first asked for from ``encoded(name)``: the
    column's validated distinct values and each row's index among them (pyarrow; null: missing)."""

    def __init__(self, encoded):
        super().__init__()
        self.encoded = encoded

    def __missing__(self, name: str) -> _Coded:
        dictionary, indices = self.encoded(name)
        self[name] = coded = _coded(dictionary, indices.fill_null(-1).to_numpy(zero_copy_only=False))
        return coded


def _categorical(coded: _Coded) -> pd.Series:
    """A string column held as a pandas categorical (:attr:`TableSpec.categorical`)."""
    return pd.Series(pd.Categorical.from_codes(coded.codes, dtype=pd.CategoricalDtype(coded.categories)))


def _equal_rows(a: _Coded, b: _Coded) -> np.ndarray:
    """Whether each row holds the same (present) value in columns a and b."""
    return (a.codes >= 0) & (a.codes == b.recoded(a.categories))


def _has_duplicate(key: UniqueKey, coded: Mapping[str, _Coded]) -> bool:
    """Whether two rows with every column of ``key`` present share the key's values."""
    coded = {name: coded[name] for name in key.columns}
    if key.unordered:  # the unordered pair's two columns coded among the values of both
        a, b = key.unordered
        joint = coded[a].categories.union(coded[b].categories)
        coded = {**coded, a: _Coded(coded[a].recoded(joint), joint), b: _Coded(coded[b].recoded(joint), joint)}
    parts = [coded[name].codes for name in key.columns]
    complete = np.logical_and.reduce([part >= 0 for part in parts])
    if not complete.all():
        parts = [part[complete] for part in parts]
    if key.unordered:
        i, j = (key.columns.index(name) for name in key.unordered)
        parts[i], parts[j] = np.minimum(parts[i], parts[j]), np.maximum(parts[i], parts[j])
    sizes = [coded[name].size for name in key.columns]
    if math.prod(sizes) >= 2**62:  # the combined code would overflow
        return bool(pd.DataFrame(dict(enumerate(parts))).duplicated().any())
    combined = np.zeros(len(parts[0]), dtype=np.int64)
    for part, size in zip(parts, sizes):  # in place: one array of the table's length
        combined *= size
        combined += part
    combined.sort()
    return combined.size > 1 and bool((combined[1:] == combined[:-1]).any())


def _validate_arrow(arrow, spec: TableSpec, file: str, sha256: str) -> LoadedTable | None:
    """The table :func:`_validate` would build from a Parquet file's records (``arrow``: a
    pyarrow table, or :class:`_ParquetColumns`), by columns: or None
    when any cell, key or pair might hold a problem (the caller then runs :func:`_validate`, which
    names every problem with its row).

    Each column is dictionary-encoded and :func:`_cell` (the per-cell rule of :func:`_validate`)
    runs once per distinct value, so the checks are the same functions on the same values; the
    distinct-pair and unique-key checks, and the frame, are built from integer codes, without a
    Python object per row. Columns of a type other than string, integer, floating point, boolean
    or null take the per-record path.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = arrow.num_rows
    header = list(arrow.column_names)
    if n == 0 or len(set(header)) != len(header):
        return None
    # each column as its validated distinct values and each row's index among them (null: missing)
    encoded_columns: dict[str, tuple[Any, Any]] = {}
    for column in spec.columns:
        arrow_type = pa.type_for_alias(_ARROW_TYPES[column.type])
        if column.name not in header:
            if column.required:
                return None
            encoded_columns[column.name] = (pa.array([], type=arrow_type), pa.nulls(n, pa.int32()))
            continue
        chunked = arrow.column(column.name)
        array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        if pa.types.is_dictionary(array.type):
            # a dictionary with repeated values (unified row groups) is encoded afresh: one code per value
            encoded = array
            if len(array.dictionary) != pc.count_distinct(array.dictionary).as_py():
                encoded = pc.dictionary_encode(array.dictionary.take(array.indices))
        elif not _plain_arrow_type(array.type):
            return None  # a list, struct, map, date, ...: the record path names it (pyarrow cannot encode some)
        else:
            encoded = pc.dictionary_encode(array)
        kind = encoded.dictionary.type
        if not _plain_arrow_type(kind):
            return None
        if encoded.null_count and column.required:
            return None
        distinct = encoded.dictionary.to_pylist()
        coerced = (
            _plain_strings(column, distinct) if pa.types.is_string(kind) or pa.types.is_large_string(kind) else None
        )
        if coerced is None:
            coerced = []
            for value in distinct:
                cell, message = _cell(column, value, False)
                if message is not None:
                    return None
                coerced.append(cell)
        encoded_columns[column.name] = (pa.array(coerced, type=arrow_type), encoded.indices)
    coded = _Codes(encoded_columns.__getitem__)
    for a, b in spec.distinct:
        if _equal_rows(coded[a], coded[b]).any():
            return None
    for key in spec.unique:
        if _has_duplicate(key, coded):
            return None
    frame = pd.DataFrame(
        {
            c.name: (
                _categorical(coded[c.name])
                if spec.categorical and c.type == "str"
                else _arrow_to_pandas(encoded_columns[c.name][0].take(encoded_columns[c.name][1]), c.type)
            )
            for c in spec.columns
        },
        copy=False,
    )
    for name in header:
        if name not in frame:
            frame[name] = pd.Series(arrow.column(name).to_pylist(), dtype=object)
    return LoadedTable(spec.name, file, sha256, frame, np.arange(1, n + 1, dtype=np.int64), {})


def _plain_arrow_type(kind) -> bool:
    """Whether a column of pyarrow type ``kind`` can be dictionary-encoded and checked by value."""
    import pyarrow as pa

    tests = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_floating)
    return any(test(kind) for test in tests) or pa.types.is_boolean(kind) or pa.types.is_null(kind)


def _plain_strings(column: Column, values: list) -> list | None:
    """The column's validated values when ``values`` (distinct strings of a string column) certainly
    pass :func:`_check_value`, in one pass over all of them; None when any might not (the caller
    then checks each with :func:`_cell`)."""
    if column.type != "str":
        return None
    if column.non_empty and not all(map(str.strip, values)):
        return None
    # no value holds a control character iff their space-joined text holds none (a space is not one)
    if (column.name.endswith("_id") or column.name.startswith("response_")) and _CONTROL.search(" ".join(values)):
        return None
    if column.allowed and not set(values) <= set(column.allowed):
        return None
    if column.pattern and not all(map(re.compile(column.pattern[0]).fullmatch, values)):
        return None
    return values if column.required else [value or None for value in values]


def _arrow_to_pandas(array, kind: str) -> pd.Series:
    """One validated column as :func:`_validate` types it (str, Int64, float64)."""
    if kind == "str":
        return pd.Series(array, dtype="str")
    if kind == "int":
        return pd.Series(pd.array(array.to_pandas(types_mapper={array.type: pd.Int64Dtype()}.get), dtype="Int64"))
    return pd.Series(array.to_numpy(zero_copy_only=False), dtype="float64")


def _distinct_problems(a: str, b: str, values: dict[str, list], lines: np.ndarray, file: str) -> list[Problem]:
    return [
        Problem(file, int(line), b, f"equals {a} ({_short(x)})", f"{a} and {b} must name two different responses")
        for line, x, y in zip(lines, values[a], values[b])
        if x is not None and x == y
    ]


def _unique_problems(key: UniqueKey, values: dict[str, list], lines: np.ndarray, file: str) -> list[Problem]:
    problems = []
    seen: dict[tuple, list[int]] = defaultdict(list)
    for row, line in enumerate(lines):
        parts = {name: values[name][row] for name in key.columns}
        if None in parts.values():
            continue  # already reported as missing
        if key.unordered:
            a, b = key.unordered
            parts[a], parts[b] = sorted((parts[a], parts[b]))
        seen[tuple(parts.values())].append(int(line))
    for key_values, key_lines in seen.items():
        if len(key_lines) > 1:
            shown = ", ".join(f"{name}={value!r}" for name, value in zip(key.columns, key_values))
            problems.append(
                Problem(
                    file,
                    key_lines[1],
                    ", ".join(key.columns),
                    f"{shown} occurs {len(key_lines)} times, on lines {', '.join(map(str, key_lines))}",
                    "keep one row per key and remove the others",
                )
            )
    return problems


# ---------------------------------------------------------------------------------------------
# Public loaders


def _extension(path: Path) -> str:
    name = path.name.lower()
    for extension in sorted(EXTENSIONS, key=len, reverse=True):
        if name.endswith(extension):
            return extension
    raise InputError(
        f"{path}: cannot tell the file's format from its name", fix=f"use one of the extensions {', '.join(EXTENSIONS)}"
    )


def load_table(path: str | Path, table: str) -> LoadedTable:
    """Load and validate one table from ``path``.

    Parameters
    ----------
    path
        A ``.jsonl``, ``.jsonl.gz``, ``.csv`` or ``.parquet`` file; the extension picks the format.
    table
        The table's kind: ``vignettes``, ``responses``, ``human_ratings``, ``human_pairs``,
        ``judgments`` or ``corpus`` (see :data:`honestci.audit.data.schema.TABLES`).

    Raises
    ------
    SchemaError
        Listing every problem in the file, each with file, line and field.
    InputError
        The file cannot be read, or its extension is not one of the above.
    """
    spec = table_spec(table)
    path = Path(path)
    extension = _extension(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"{path}: cannot read the {table} file ({error.strerror})", fix="check the path") from error
    sha256 = hashlib.sha256(data).hexdigest()
    if extension == ".jsonl.gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise InputError(
                f"{path}: not a readable gzip file ({error})", fix="compress it again with gzip"
            ) from error
    if extension == ".parquet":
        fast = _validate_arrow(_ParquetColumns(data, str(path)), spec, str(path), sha256)
        return fast if fast is not None else _validate(_read_parquet(data, str(path)), spec, str(path), sha256)
    if extension in (".jsonl", ".jsonl.gz"):
        arrow = _arrow_jsonl(data, spec)
        fast = None if arrow is None else _validate_arrow(arrow, spec, str(path), sha256)
        if fast is not None:
            return fast
    return _validate(_READERS[extension](data, str(path)), spec, str(path), sha256)


def table_from_frame(frame: pd.DataFrame, table: str, name: str | None = None) -> LoadedTable:
    """Validate an in-memory frame as ``table`` (rows are numbered from 1, as for Parquet).

    ``sha256`` is then the hash of the frame's contents (:func:`pandas.util.hash_pandas_object`).
    """
    name = name or f"<{table} frame>"
    records = frame.astype(object).where(frame.notna(), None).to_dict("records")
    raw = _Raw(records=list(enumerate(records, start=1)), header=[str(c) for c in frame.columns])
    digest = hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()).hexdigest()
    return _validate(raw, table_spec(table), name, digest)


# ---------------------------------------------------------------------------------------------
# Studies


@dataclass(frozen=True, eq=False)
class Study:
    """The validated, cross-checked tables of one study; :meth:`to_frame` is its provenance."""

    vignettes: LoadedTable
    responses: LoadedTable
    judgments: LoadedTable
    human_ratings: LoadedTable | None = None
    human_pairs: LoadedTable | None = None
    corpus: LoadedTable | None = None

    def tables(self) -> dict[str, LoadedTable]:
        """The tables present, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def sha256(self) -> dict[str, str]:
        """SHA-256 of every input file, by table."""
        return {name: table.sha256 for name, table in self.tables().items()}

    def to_frame(self) -> pd.DataFrame:
        """One row per table and reason (rows loaded, rows dropped), with path and SHA-256."""
        return pd.concat([table.to_frame() for table in self.tables().values()], ignore_index=True)


def load_study(paths: Mapping[str, str | Path]) -> Study:
    """Load every table in ``paths`` (table name -> file), then check references between them.

    Vignettes, responses and judgments are required. Raises :class:`SchemaError` with every
    problem of every file; references are checked once all files are valid.
    """
    unknown = sorted(set(paths) - {f.name for f in fields(Study)})
    if unknown:
        raise InputError(
            f"unknown table(s): {', '.join(unknown)}",
            fix=f"name tables as one of: {', '.join(f.name for f in fields(Study))}",
        )
    missing = [name for name in REQUIRED_STUDY_TABLES if name not in paths]
    if missing:
        raise InputError(
            f"a study needs the {', '.join(missing)} table(s)",
            fix="give a file for each of: " + ", ".join(REQUIRED_STUDY_TABLES),
        )
    tables: dict[str, LoadedTable] = {}
    problems: list[Problem] = []
    for name, path in paths.items():
        try:
            tables[name] = load_table(path, name)
        except SchemaError as error:
            problems += error.problems
        except InputError as error:  # its message already starts with the file's name
            problems.append(Problem(str(path), None, None, error.message.removeprefix(f"{path}: "), error.fix))
    if problems:
        raise SchemaError(
            f"{len(problems)} problem(s) in the study's files",
            problems,
            fix=f"correct the rows listed above ({_SEE_DOCS})",
        )
    problems = check_references(tables)
    if problems:
        raise SchemaError(
            f"{len(problems)} reference(s) between the study's tables do not match",
            problems,
            fix="make every id refer to a row that exists, in the right vignette",
        )
    release_arrow_memory()
    return Study(**tables)


def release_arrow_memory() -> None:
    """Hand back to the system the memory pyarrow's allocator keeps for reuse after its arrays
    are freed. Its pool (mimalloc or jemalloc) keeps what reading and validating the tables freed
    for later pyarrow allocations, which are few once the tables are built, and numpy's allocator
    cannot reuse it: ~55 MB resident for the rest of an audit of a million contests."""
    if "pyarrow" in sys.modules:  # nothing to release where pyarrow never ran
        sys.modules["pyarrow"].default_memory_pool().release_unused()


def _references_resolve(tables: Mapping[str, LoadedTable]) -> bool:
    """Whether every reference :func:`check_references` checks resolves, by whole columns (False
    also when it cannot tell: the row-by-row check then names each problem)."""
    vignettes, responses = tables.get("vignettes"), tables.get("responses")
    known = pd.Index(vignettes.frame["vignette_id"]) if vignettes else None
    response_index = pd.Index(responses.frame["response_id"]) if responses else None
    if (known is not None and not known.is_unique) or (response_index is not None and not response_index.is_unique):
        return False
    # vignettes as codes among the responses' vignettes: a row's vignette matches its response's
    # iff the codes are equal (a vignette no response answers is -1, which no response's code is)
    vignette_codes, answered = pd.factorize(responses.frame["vignette_id"]) if responses else (None, None)
    checks = (
        ("responses", ()),
        ("judgments", ("response_first", "response_second")),
        ("human_pairs", ("response_a", "response_b")),
        ("human_ratings", ("response_id",)),
    )
    for name, columns in checks:
        table = tables.get(name)
        if table is None:
            continue
        if known is not None and name != "human_ratings" and not table.frame["vignette_id"].isin(known).all():
            return False
        if response_index is None or vignette_codes is None:
            continue
        same_vignette = name != "human_ratings"  # ratings name a response, not a vignette
        row_vignette = index_positions(pd.Index(answered), table.frame["vignette_id"]) if same_vignette else None
        for column in columns:
            position = index_positions(response_index, table.frame[column])
            if (position < 0).any():
                return False
            if same_vignette and not bool((vignette_codes[position] == row_vignette).all()):
                return False
    return True


def codes_of(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Each value's integer code (-1 where missing) and the distinct values the codes index: a
    categorical's own codes and categories (no pass over the rows), else :func:`pandas.factorize`'s."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), values.cat.categories
    codes, distinct = pd.factorize(values)
    return codes, pd.Index(distinct)


def index_positions(index: pd.Index, values: pd.Series) -> np.ndarray:
    """``index.get_indexer(values)``: each value's position in ``index`` (unique), -1 where it is
    not there or missing; each distinct value is looked up once (ids repeat, and a categorical
    column is looked up by its codes)."""
    codes, distinct = codes_of(values)
    # positions in the narrowest integer type that holds them (-1 to len(index) - 1)
    lookup = np.append(index.get_indexer(distinct), -1).astype(np.min_scalar_type(-max(len(index), 1)))
    return lookup[codes]


def check_references(tables: Mapping[str, LoadedTable]) -> list[Problem]:
    """Every reference between the given tables that does not resolve (checks whose tables are
    absent are skipped): unknown vignettes and responses, and responses of another vignette."""
    if _references_resolve(tables):
        return []
    problems: list[Problem] = []
    vignettes = tables.get("vignettes")
    responses = tables.get("responses")
    known_vignettes = set(vignettes.frame["vignette_id"]) if vignettes else None
    vignette_of = dict(zip(responses.frame["response_id"], responses.frame["vignette_id"])) if responses else None

    def refs(table: LoadedTable, column: str, known, what: str, vignette_column: str | None = None) -> None:
        for line, value, vignette in zip(table.lines, table.frame[column], table.frame[vignette_column or column]):
            if value not in known:
                problems.append(
                    Problem(
                        table.path,
                        int(line),
                        column,
                        f"{what} {value!r} is not in the {what}s table",
                        f"add the {what} or correct the id",
                    )
                )
            elif vignette_column and known[value] != vignette:
                problems.append(
                    Problem(
                        table.path,
                        int(line),
                        column,
                        f"response {value!r} belongs to vignette {known[value]!r}, not {vignette!r}",
                        "pair only responses to the row's vignette",
                    )
                )

    for name, columns in (
        ("responses", ()),
        ("judgments", ("response_first", "response_second")),
        ("human_pairs", ("response_a", "response_b")),
    ):
        table = tables.get(name)
        if table is None:
            continue
        if known_vignettes is not None:
            refs(table, "vignette_id", known_vignettes, "vignette")
        if vignette_of is not None:
            for column in columns:
                refs(table, column, vignette_of, "response", vignette_column="vignette_id")
    if vignette_of is not None and "human_ratings" in tables:
        refs(tables["human_ratings"], "response_id", vignette_of, "response")
    return problems
