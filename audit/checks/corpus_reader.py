"""Corpus files read in bounded batches of documents: JSONL (``.gz`` allowed), Parquet, plain text.

:func:`iter_corpus` yields (doc ids, texts) batches of about ``chunk_bytes``; memory holds one
block of whole lines (or one Parquet row group's text column), never the corpus. The leakage scan
(:mod:`honestci.audit.checks.leakage`) reads through it, and hashes JSONL straight from the raw
blocks of :func:`iter_blocks`. Files are found and opened by :mod:`honestci.audit.checks.corpus_files`.
"""

from __future__ import annotations

import contextlib
import gzip
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from honestci.audit.checks.corpus_files import corpus_name, corpus_size, open_corpus
from honestci.audit.errors import InputError

DEFAULT_CHUNK_BYTES = 4 << 20


def iter_corpus(
    path: str | Path,
    text_field: str = "text",
    id_field: str | None = "doc_id",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    byte_range: tuple[int, int] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    storage_options: Mapping | None = None,
) -> Iterator[tuple[list[str], list[str]]]:
    """Yield (doc ids, texts) batches of about ``chunk_bytes`` from one corpus file.

    ``path`` is a local path or an fsspec URL (``s3://``, ``gs://``, ``hf://``, ``file://``; opened
    by :func:`honestci.audit.checks.corpus_files.open_corpus` with ``storage_options``).
    Formats by suffix: ``.jsonl``/``.json``/``.ndjson`` (one object per line; ``.gz`` allowed),
    ``.parquet`` (pyarrow, one row group at a time), anything else plain text with one document per
    line (``.gz`` allowed). A missing id field gives ``<file>:<line>``. ``byte_range`` (uncompressed
    JSONL/text only) reads the lines that start inside [start, stop), for distributed scans; ids
    then fall back to ``<file>@<byte offset>``.

    A block of whole lines is read at once; JSONL blocks are parsed by one ``orjson`` call as a
    JSON array (lines joined by commas), and only a block that does not parse as one object per
    line is parsed line by line, which names the bad line.

    ``on_bytes`` is called after each batch with the bytes of the file on disk it took (gzip:
    compressed bytes; Parquet: the file's size pro rata of rows), for progress meters.
    """
    path = os.fspath(path)
    kind = corpus_kind(path)
    if kind == "parquet":
        yield from iter_parquet(path, text_field, id_field, chunk_bytes, on_bytes, storage_options=storage_options)
        return
    loads = json_loads()
    for block, locate in iter_blocks(path, chunk_bytes, byte_range, on_bytes, storage_options):
        if kind == "jsonl":
            ids, texts, _ = _parse_jsonl_block(block, locate, text_field, id_field, loads)
        else:
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            ids, texts = (
                [locate(k) for k in range(len(lines))],
                [raw.decode("utf-8", errors="replace") for raw in lines],
            )
        yield ids, texts


def corpus_kind(path: str) -> str:
    """``"parquet"``, ``"jsonl"`` or ``"text"`` by the file name's suffix (see :func:`iter_corpus`)."""
    name = corpus_name(path).lower()
    if name.endswith(".parquet"):
        return "parquet"
    return "jsonl" if name.removesuffix(".gz").endswith((".jsonl", ".json", ".ndjson")) else "text"


def iter_blocks(
    path: str,
    chunk_bytes: int,
    byte_range: tuple[int, int] | None,
    on_bytes: Callable[[int], None] | None,
    storage_options: Mapping | None = None,
) -> Iterator[tuple[bytes, Locator]]:
    """Blocks of about ``chunk_bytes`` of whole lines of a JSONL or text file, each with its :class:`Locator`.

    ``byte_range``, ``on_bytes`` and ``storage_options`` as in :func:`iter_corpus`; ``on_bytes``
    is called when the consumer asks for the next block.
    """
    from honestci.audit.checks.ngram_kernel import count_newlines

    file_name = corpus_name(path)
    name = file_name.lower()
    if byte_range is not None and name.endswith(".gz"):
        raise InputError(f"{path}: a gzip file cannot be split by byte range", fix="scan it whole")
    with open_corpus(path, storage_options) as raw, _gunzip_if(name, raw) as handle:
        consumed = raw.tell()
        position: int = 0
        stop: int | None = None
        line_number: int | None = 0
        if byte_range is not None:
            start, stop = byte_range
            if start > 0:
                handle.seek(start - 1)
                if handle.read(1) != b"\n":
                    handle.readline()  # the line that starts before `start` belongs to the previous range
            position, line_number = handle.tell(), None  # line numbers are unknown inside a range
        while stop is None or position < stop:
            block = handle.read(chunk_bytes if stop is None else min(chunk_bytes, stop - position))
            if not block:
                break
            if not block.endswith(b"\n"):
                block += handle.readline()  # finish the last line (it starts before `stop`)
            yield block, Locator(file_name, line_number, position, block)
            if on_bytes is not None:
                now = raw.tell()
                on_bytes(now - consumed)
                consumed = now
            position += len(block)
            if line_number is not None:
                line_number += count_newlines(np.frombuffer(block, np.uint8)) + (not block.endswith(b"\n"))


def _gunzip_if(name: str, raw):
    """A gzip reader over ``raw`` for a ``.gz`` name (closing it leaves ``raw`` open), else ``raw``."""
    return gzip.GzipFile(fileobj=raw, mode="rb") if name.endswith(".gz") else contextlib.nullcontext(raw)


class Locator:
    """``<file>:<line>`` (or ``<file>@<byte offset>`` inside a byte range) of the k-th line of a block."""

    def __init__(self, name: str, first_line: int | None, position: int, block: bytes):
        self.name, self.first_line, self.position, self.block = name, first_line, position, block
        self._line_starts: list[int] | None = None

    def __call__(self, k: int) -> str:
        if self.first_line is not None:
            return f"{self.name}:{self.first_line + k + 1}"
        if self._line_starts is None:  # only when ids are missing inside a byte range
            newlines = np.flatnonzero(np.frombuffer(self.block, np.uint8) == 10)
            self._line_starts = np.concatenate(([0], newlines + 1)).tolist()
        return f"{self.name}@{self.position + self._line_starts[k]}"


def _parse_jsonl_block(
    block: bytes, locate: Locator, text_field: str, id_field: str | None, loads
) -> tuple[list[str], list[str], int]:
    """(ids, texts, newlines in the block) of a block of whole JSONL lines."""
    from honestci.audit.checks.ngram_kernel import jsonl_as_array

    array, n_lines, newlines = jsonl_as_array(np.frombuffer(block, np.uint8))
    try:
        records = loads(array.data)
    except ValueError:
        records = None
    if records is not None and len(records) == n_lines and all(type(r) is dict for r in records):
        texts = [r.get(text_field) for r in records]
        if all(type(t) is str for t in texts):
            if not id_field:
                return [locate(k) for k in range(n_lines)], texts, newlines
            ids = [r.get(id_field) for r in records]
            return [locate(k) if i is None else str(i) for k, i in enumerate(ids)], texts, newlines
    # not one object with a text per line (blank lines, a bad line): line by line, naming the bad one
    ids, texts = [], []
    for k, raw in enumerate(block.split(b"\n")):
        if raw.strip():
            doc_id, text = parse_jsonl_line(raw, k, locate, text_field, id_field, loads)
            ids.append(doc_id)
            texts.append(text)
    return ids, texts, newlines


def parse_jsonl_line(raw: bytes, k: int, locate: Locator, text_field: str, id_field: str | None, loads):
    """(id, text) of the k-th line of a block; :class:`InputError` naming the line if it has no text."""
    try:
        record = loads(raw)
    except ValueError as exc:
        raise InputError(f"{locate(k)}: not valid JSON ({exc})", fix="fix or drop the line") from exc
    text = record.get(text_field) if isinstance(record, dict) else None
    if not isinstance(text, str):
        raise InputError(f"{locate(k)}: no text field {text_field!r}", fix="name the text field")
    doc_id = record.get(id_field) if id_field else None
    return (str(doc_id) if doc_id is not None else locate(k)), text


def iter_parquet(
    path: str,
    text_field: str,
    id_field: str | None,
    chunk_bytes: int,
    on_bytes: Callable[[int], None] | None = None,
    row_groups: Sequence[int] | None = None,
    storage_options: Mapping | None = None,
):
    """Batches of a Parquet file read one row group at a time (memory: one row group's text column).

    ``row_groups`` (default: all) selects the groups, for one distributed task per group or run of
    groups; a missing id column gives ``<file>:<row>`` with the row counted over the whole file, so
    ids and results equal a whole-file read. ``on_bytes`` gets the file's size pro rata of the rows
    read (of the selected groups' rows when ``row_groups`` is given).
    """
    import pyarrow.parquet as pq

    with open_corpus(path, storage_options, sequential=False) as handle:
        parquet = pq.ParquetFile(handle)
        meta, names = parquet.metadata, parquet.schema_arrow.names
        if text_field not in names:
            raise InputError(f"{path}: no column {text_field!r}", fix="name the text column")
        columns = [text_field] + ([id_field] if id_field and id_field in names else [])
        group_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        first_row = np.concatenate(([0], np.cumsum(group_rows, dtype=np.int64))).tolist()
        groups = range(meta.num_row_groups) if row_groups is None else row_groups
        size = handle.size if hasattr(handle, "size") else corpus_size(path, storage_options)
        n_rows, done, reported = max(1, sum(group_rows[g] for g in groups)), 0, 0
        file_name = corpus_name(path)
        for group in groups:
            row = first_row[group]
            for batch in parquet.iter_batches(
                batch_size=max(1, chunk_bytes // 2048), row_groups=[group], columns=columns
            ):
                texts = batch.column(text_field).to_pylist()
                ids = (
                    batch.column(id_field).to_pylist()
                    if len(columns) == 2
                    else [f"{file_name}:{row + k + 1}" for k in range(len(texts))]
                )
                row += len(texts)
                done += len(texts)
                yield [str(i) for i in ids], [t or "" for t in texts]
                if on_bytes is not None:
                    share = size * done // n_rows
                    on_bytes(share - reported)
                    reported = share


def parquet_row_groups(path: str, target_bytes: int, storage_options: Mapping | None = None) -> list[list[int]]:
    """A Parquet file's row groups in runs of about ``target_bytes`` (compressed) each, one run per task."""
    import pyarrow.parquet as pq

    with open_corpus(path, storage_options, sequential=False) as handle:
        meta = pq.ParquetFile(handle).metadata
    runs: list[list[int]] = []
    run_bytes = 0
    for group in range(meta.num_row_groups):
        rg = meta.row_group(group)
        group_bytes = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        if not runs or run_bytes + group_bytes > target_bytes:
            runs.append([])
            run_bytes = 0
        runs[-1].append(group)
        run_bytes += group_bytes
    return runs or [[]]


def json_loads():
    """``orjson.loads`` where orjson is installed, else the standard library's ``json.loads``."""
    try:
        import orjson

        return orjson.loads
    except ModuleNotFoundError:  # orjson is optional; the standard library is ~3x slower
        import json

        return json.loads
