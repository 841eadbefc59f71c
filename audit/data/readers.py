"""Readers of input tables: a file's bytes → its records as found, and every problem of reading them.

JSON Lines and CSV are read record by record (:func:`read_jsonl`, :func:`read_csv`), Parquet
through pyarrow (:func:`read_parquet`, or by columns with :class:`ParquetColumns`); a JSON Lines
file that pyarrow reads exactly as the record reader does is read by pyarrow (:func:`arrow_jsonl`).
:mod:`honestci.audit.data.validation` turns the records into a validated table.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

from honestci.audit.data.schema import TableSpec
from honestci.audit.errors import InputError, Problem

_BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Where the fix of a problem is explained: the input formats' documentation.
SEE_DOCS = "see docs/data-formats.md"


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 40 characters, for a problem's message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class RawRecords:
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
            raise _BadJSONObject(f"gives the key {short_repr(key)} twice", key)
        for text in (key, value):
            if isinstance(text, str) and _SURROGATE.search(text):
                raise _BadJSONObject("holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text", key)
        record[key] = value
    return record


def read_jsonl(data: bytes, file: str) -> RawRecords:
    raw = RawRecords()
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
            raw.problems.append(Problem(file, line, None, f"is not valid JSON ({error})", SEE_DOCS))
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


def read_csv(data: bytes, file: str) -> RawRecords:
    raw = RawRecords(from_text=True, header_line=1)
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
        raw.problems.append(Problem(file, 1, None, f"header is not valid CSV ({error})", SEE_DOCS))
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
        # decoded (and validated, validate_arrow) once
        schema = pq.read_schema(io.BytesIO(data))
        strings = [f.name for f in schema if str(f.type) in ("string", "large_string")]
        return pq.read_table(io.BytesIO(data), read_dictionary=strings)
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise _unreadable(file, error) from error


class ParquetColumns:
    """A Parquet file's columns, each read when :func:`~honestci.audit.data.validation.validate_arrow`
    asks for it (string columns as dictionaries, as :func:`_arrow_table` reads them), so that one
    column at a time is decoded."""

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


def arrow_jsonl(data: bytes, spec: TableSpec):
    """JSON Lines read by pyarrow (C++, no Python object per row) for
    :func:`~honestci.audit.data.validation.validate_arrow`: or None when pyarrow may read the file
    otherwise than :func:`read_jsonl` (which then reads it and names every problem). pyarrow refuses what that refuses (bad JSON or UTF-8, a key given twice,
    a lone surrogate, a line that is not an object) but skips blank lines (whose rows and count
    :func:`read_jsonl` reports), reads a line holding two objects as two rows, ends lines at a lone
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


def read_parquet(data: bytes, file: str, arrow=None) -> RawRecords:
    arrow = _arrow_table(data, file) if arrow is None else arrow
    return RawRecords(records=list(enumerate(arrow.to_pylist(), start=1)), header=list(arrow.column_names))


READERS = {".jsonl": read_jsonl, ".jsonl.gz": read_jsonl, ".csv": read_csv, ".parquet": read_parquet}
