"""Validation of input tables: records → a :class:`LoadedTable`, or every problem, each located by
file, line and field, in one :class:`~honestci.audit.errors.SchemaError`.

:func:`validate_records` checks the records a reader found (:mod:`honestci.audit.data.readers`) one
column at a time; :func:`validate_arrow` builds the same table from a pyarrow table by columns,
or hands the file back (None) when it might hold a problem.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from honestci.audit.data.readers import SEE_DOCS, RawRecords, short_repr
from honestci.audit.data.schema import TYPE_WORDS, Column, TableSpec, UniqueKey
from honestci.audit.errors import Problem, SchemaError

#: Characters no id may hold: NUL and the other C0/C1 controls (they break file names, terminals
#: and report renderers, and never belong in an identifier).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_INT64 = (-(2**63), 2**63 - 1)


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


def _wrong_type(column: Column, value: Any) -> str:
    return f"expected {TYPE_WORDS[column.type]}, got {type(value).__name__} {short_repr(value)}"


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
        return f"{short_repr(value)} holds a control character (NUL, newline, ...), which no id may"
    if column.allowed and value not in column.allowed:
        return f"{short_repr(value)} is not one of: {', '.join(column.allowed)}"
    if column.pattern and not re.fullmatch(column.pattern[0], value):
        return f"{short_repr(value)} is not {column.pattern[1]}"
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


def validate_records(raw: RawRecords, spec: TableSpec, file: str, sha256: str) -> LoadedTable:
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
        problems.append(Problem(file, None, None, "has no rows", f"write at least one {spec.name} row; {SEE_DOCS}"))
    if problems:
        problems.sort(key=lambda problem: problem.line or 0)
        raise SchemaError(
            f"{file}: {len(problems)} problem(s) in the {spec.name} table",
            problems,
            fix=f"correct the rows listed above ({SEE_DOCS})",
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


def validate_arrow(arrow, spec: TableSpec, file: str, sha256: str) -> LoadedTable | None:
    """The table :func:`validate_records` would build from a Parquet file's records (``arrow``: a
    pyarrow table, or :class:`~honestci.audit.data.readers.ParquetColumns`), by columns: or None
    when any cell, key or pair might hold a problem (the caller then runs :func:`validate_records`, which
    names every problem with its row).

    Each column is dictionary-encoded and :func:`_cell` (the per-cell rule of :func:`validate_records`)
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
    """One validated column as :func:`validate_records` types it (str, Int64, float64)."""
    if kind == "str":
        return pd.Series(array, dtype="str")
    if kind == "int":
        return pd.Series(pd.array(array.to_pandas(types_mapper={array.type: pd.Int64Dtype()}.get), dtype="Int64"))
    return pd.Series(array.to_numpy(zero_copy_only=False), dtype="float64")


def _distinct_problems(a: str, b: str, values: dict[str, list], lines: np.ndarray, file: str) -> list[Problem]:
    return [
        Problem(file, int(line), b, f"equals {a} ({short_repr(x)})", f"{a} and {b} must name two different responses")
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
