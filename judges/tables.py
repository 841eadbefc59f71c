"""Read and write the long tables of ``docs/data-formats.md`` (JSONL[.gz], CSV, Parquet).

A deliberately small reader for the judging side: it returns rows with their 1-based source line
(JSONL: line number; CSV: line number counting the header as line 1; Parquet: row number) so every
problem can be reported where it is. Writes are atomic (temporary file + ``os.replace``), so a
crash never leaves a half-written table behind.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from honestci.audit.errors import InputError, Problem

JUDGMENT_COLUMNS = ("judge", "vignette_id", "response_first", "response_second", "verdict", "raw", "prompt_sha256")
VIGNETTE_COLUMNS = ("vignette_id", "text", "family")
RESPONSE_COLUMNS = ("response_id", "vignette_id", "system", "text")
HUMAN_PAIR_COLUMNS = ("vignette_id", "response_a", "response_b", "label", "rater_id")
VERDICTS = ("first", "second", "tie", "invalid")


@dataclass(frozen=True)
class Row:
    """One input row and where it came from."""

    line: int
    values: dict


def table_format(path: str | Path) -> str:
    """``jsonl``, ``csv`` or ``parquet`` from the file name (``.jsonl.gz`` is ``jsonl``)."""
    name = Path(path).name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")):
        return "jsonl"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if name.endswith(".parquet"):
        return "parquet"
    raise InputError(f"{path}: unknown table format.", fix="name the file .jsonl, .jsonl.gz, .csv or .parquet")


def read_rows(path: str | Path) -> list[Row]:
    """Every row of a table file with its line number; raises :class:`InputError` listing all bad lines."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found.", fix="check the path")
    fmt = table_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            records = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise InputError(
                f"{path}: not a readable Parquet file ({exc}).",
                fix="write the file again with pandas.DataFrame.to_parquet or pyarrow",
            ) from None
        return [Row(i + 1, {k: _as_text(v) for k, v in rec.items()}) for i, rec in enumerate(records)]
    rows: list[Row] = []
    problems: list[Problem] = []
    text = _decoded_text(path)
    with io.StringIO(text, newline="") as handle:
        if fmt == "csv":
            reader = csv.DictReader(handle, strict=True)
            try:
                for record in reader:
                    rows.append(Row(reader.line_num, {k: _as_text(v) for k, v in record.items()}))
            except csv.Error as exc:
                problems.append(
                    Problem(str(path), reader.line_num, None, f"is not valid CSV ({exc})", "check the quoting")
                )
        else:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    problems.append(
                        Problem(
                            str(path), number, None, f"not valid JSON ({exc.msg})", "write one JSON object per line"
                        )
                    )
                    continue
                if not isinstance(record, dict):
                    problems.append(
                        Problem(str(path), number, None, "not a JSON object", "write one JSON object per line")
                    )
                    continue
                rows.append(Row(number, {k: _as_text(v) for k, v in record.items()}))
    if problems:
        raise InputError(f"{path}: {len(problems)} unreadable line(s).", problems)
    return rows


def _decoded_text(path: Path) -> str:
    """The file's text (gunzipped if ``.gz``); every line that is not UTF-8 is reported by number."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.name.lower().endswith(".gz") else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot be read ({exc}).", fix="pass the unchanged file") from None
    try:
        return data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError:
        pass
    problems = []
    for number, chunk in enumerate(data.splitlines(), start=1):
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(
                Problem(
                    str(path),
                    number,
                    None,
                    f"is not valid UTF-8: byte 0x{chunk[exc.start]:02x} at byte {exc.start + 1} of the line",
                    "re-save the file as UTF-8",
                )
            )
    raise InputError(f"{path}: {len(problems)} line(s) are not UTF-8 text.", problems)


def _as_text(value):
    """Identifiers and texts are strings; keep None as missing."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def require_columns(path: str | Path, rows: Sequence[Row], columns: Iterable[str]) -> None:
    """Raise one :class:`InputError` naming every row that lacks a required, non-empty column."""
    problems = []
    for row in rows:
        for column in columns:
            value = row.values.get(column)
            if value is None or value == "":
                problems.append(
                    Problem(str(path), row.line, column, "missing or empty", f"give every row a '{column}'")
                )
    if problems:
        raise InputError(f"{path}: required column(s) missing.", problems)


def write_table(records: Sequence[dict], path: str | Path, columns: Sequence[str]) -> Path:
    """Write ``records`` (only ``columns``, in that order) atomically to ``path``.

    The data go to a temporary file in the same folder, are flushed and fsynced, and only then
    replace ``path``: a reader sees the old file or the complete new one, never a partial one.

    CSV cells are written verbatim, including ones that look like spreadsheet formulas
    (``=HYPERLINK(...)``, ``+cmd``, ``@SUM``): these files are data for programs, and a prefix
    that neutralised a formula would change ids and texts on the round trip. Open them in a
    spreadsheet only through a text import (see docs/data-formats.md).

    Raises
    ------
    InputError
        When the folder cannot be created or the file cannot be written (read-only, disk full).
    """
    path = Path(path)
    fmt = table_format(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(
            f"Cannot write into {path.parent}: {exc.strerror}.", fix="choose an output path you can write to (--out)"
        ) from None
    os.close(handle)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions of a new file
    try:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table({c: [r.get(c) for r in records] for c in columns})
            pq.write_table(table, tmp)
        else:
            opener = gzip.open if path.name.lower().endswith(".gz") else open
            with opener(tmp, "wt", encoding="utf-8", newline="") as out:
                if fmt == "csv":
                    writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
                    writer.writeheader()
                    for record in records:
                        writer.writerow({c: ("" if record.get(c) is None else record.get(c)) for c in columns})
                else:
                    for record in records:
                        out.write(json.dumps({c: record.get(c) for c in columns}, ensure_ascii=False) + "\n")
        with open(tmp, "rb") as flushed:
            os.fsync(flushed.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(
            f"Cannot write {path}: {exc.strerror}.", fix="free disk space or choose another output path (--out)"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sibling_path(out: str | Path, table: str) -> Path:
    """``judgments.jsonl`` -> ``judgments.<table>.jsonl`` (same folder, same format)."""
    out = Path(out)
    name = out.name
    for suffix in (".jsonl.gz", ".csv.gz", ".jsonl", ".csv", ".parquet"):
        if name.lower().endswith(suffix):
            return out.with_name(name[: -len(suffix)] + f".{table}" + name[-len(suffix) :])
    return out.with_name(name + f".{table}")
