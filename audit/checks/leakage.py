"""Leakage of held-out eval answers into training text: hashed word n-grams, streamed.

Pipeline: normalise (Unicode NFKC, lower-case, punctuation → space, whitespace collapsed) → word
n-grams (n = 8 by default; 13 reproduces GPT-3's decontamination) → 64-bit hashes → an index of
the eval answers' n-grams (:class:`NgramIndex`) → a streaming scan of training corpora (JSONL,
JSONL.gz, Parquet, plain text) whose memory is bounded by the index and one chunk, never by the
corpus (:func:`scan_corpus`) → per-item evidence (overlap fraction, longest matching span, the
documents), per-document flags, and the claim's score on clean vs leaked contests with a
vignette-clustered interval for the difference (:func:`leak_effect`). An optional near-duplicate
pass (word-shingle Jaccard against windows of the documents) catches paraphrases that exact
n-grams miss.

Normalising, hashing and the index live in :mod:`honestci.audit.checks.ngram_index`, reading corpus
files in bounded batches in :mod:`honestci.audit.checks.corpus_reader`; this module scans and judges.
JSONL is read in blocks of whole lines; a scan hashes each block from its raw bytes
(:func:`scan_jsonl_block`: a compiled per-line JSON reader finds the top-level text string and
hashes it in the same pass, no Python strings), and only lines it cannot read exactly go through
orjson and :func:`normalize`; :func:`iter_corpus` parses a block with one ``orjson.loads`` call.
Measured: 280–378 MB of JSONL per CPU-second on one core, median 335, in fifteen runs on a shared
machine (bench/bench_leakage.py, docs/leakage.md).

References: Brown et al. (2020), "Language Models are Few-Shot Learners", App. C (13-gram
overlap); datatrove ``NGramsDecontFilter``; lm-evaluation-harness ``decontamination/janitor.py``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.checks.corpus_files import corpus_name, corpus_size, expand_corpus, is_url
from honestci.audit.checks.corpus_reader import (
    DEFAULT_CHUNK_BYTES,
    Locator,
    corpus_kind,
    iter_blocks,
    iter_corpus,
    iter_parquet,
    json_loads,
    parquet_row_groups,
    parse_jsonl_line,
)
from honestci.audit.checks.ngram_index import (
    BYTE_TABLE,
    DEFAULT_NGRAM,
    EncodedDocuments,
    NgramIndex,
    build_index,
    encode_documents,
    hash_documents,
)
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.progress import ProgressLike, as_progress

if TYPE_CHECKING:
    import pandas as pd

#: Near duplicates: word shingles of this length, and the window Jaccard that flags a document.
NEAR_SHINGLE = 1
NEAR_THRESHOLD = 0.35


# --------------------------------------------------------------------------------------------
# Scanning


@dataclass
class _Matches:
    """Matches accumulated over chunks (plain lists: matches are rare)."""

    doc_ids: list[str] = field(default_factory=list)
    doc: list[np.ndarray] = field(default_factory=list)
    doc_position: list[np.ndarray] = field(default_factory=list)
    item: list[np.ndarray] = field(default_factory=list)
    item_position: list[np.ndarray] = field(default_factory=list)
    near: list[tuple[int, str, float]] = field(default_factory=list)
    n_docs: int = 0
    n_bytes: int = 0

    def merge(self, other: _Matches) -> None:
        offset = len(self.doc_ids)
        self.doc_ids += other.doc_ids
        self.doc += [d + offset for d in other.doc]
        self.doc_position += other.doc_position
        self.item += other.item
        self.item_position += other.item_position
        self.near += other.near
        self.n_docs += other.n_docs
        self.n_bytes += other.n_bytes


def scan_batch(
    index: NgramIndex,
    ids: Sequence[str],
    texts: Sequence[str],
    near_index: NgramIndex | None = None,
    near_threshold: float = NEAR_THRESHOLD,
) -> _Matches:
    """Matches of one batch of documents against the index (only matching documents are kept)."""
    encoded = encode_documents(texts)
    chunk = hash_documents(encoded, index.n, index)
    out = _match(index, chunk.hashes, chunk.doc, chunk.position, ids.__getitem__)
    out.n_docs, out.n_bytes = len(texts), sum(map(len, texts))
    if near_index is not None:
        out.near = _near_duplicates(near_index, ids, encoded, near_threshold)
    return out


def _match(
    index: NgramIndex, hashes: np.ndarray, doc: np.ndarray, position: np.ndarray, id_of: Callable[[int], str]
) -> _Matches:
    """The n-grams (hash, document, position) of a batch confirmed in the index; ``id_of`` names a matched document."""
    out = _Matches()
    rows, keys = index.lookup(hashes)
    if rows.size:
        counts = index.occurrence_start[keys + 1] - index.occurrence_start[keys]
        expanded_rows = np.repeat(rows, counts)
        occurrence = np.repeat(index.occurrence_start[keys] - np.cumsum(counts) + counts, counts) + np.arange(
            counts.sum()
        )
        docs = doc[expanded_rows]
        matched_docs, local = np.unique(docs, return_inverse=True)
        out.doc_ids = [id_of(int(d)) for d in matched_docs]
        out.doc.append(local.astype(np.int64))
        out.doc_position.append(position[expanded_rows])
        out.item.append(index.occurrence_item[occurrence])
        out.item_position.append(index.occurrence_position[occurrence])
    return out


class JsonlBlockBuffers:
    """Output and scratch arrays of :func:`scan_jsonl_block`, reused across blocks and grown on demand.

    Fresh multi-MB arrays per block cost a page fault per 4 KB touched (15-20 % of the scan's CPU
    time before they were reused).
    """

    def __init__(self) -> None:
        self.tokens = np.empty(0, np.uint64)
        self.scratch = np.empty(0, np.uint8)
        self.hashes = np.empty(1 << 14, np.uint64)
        self.doc = np.empty(1 << 14, np.int32)
        self.position = np.empty(1 << 14, np.int32)
        self.line = np.empty(1 << 12, np.int64)
        self.start = np.empty(1 << 12, np.int64)
        self.end = np.empty(1 << 12, np.int64)
        self.fast = np.empty(1 << 12, np.uint8)

    def fit(self, block_size: int) -> None:
        """Scratch space for a block of ``block_size`` bytes (numpy leaves untouched pages unallocated)."""
        if self.scratch.size < block_size:
            self.tokens = np.empty(block_size // 2 + 8, np.uint64)
            self.scratch = np.empty(block_size, np.uint8)

    def grow_docs(self) -> None:
        self.line, self.start, self.end, self.fast = (
            np.empty(2 * a.size, a.dtype) for a in (self.line, self.start, self.end, self.fast)
        )

    def grow_ngrams(self) -> None:
        self.hashes, self.doc, self.position = (
            np.empty(2 * a.size, a.dtype) for a in (self.hashes, self.doc, self.position)
        )


def scan_jsonl_block(
    index: NgramIndex,
    block: bytes,
    locate: Locator,
    text_field: str = "text",
    id_field: str | None = "doc_id",
    buffers: JsonlBlockBuffers | None = None,
    loads=None,
) -> _Matches:
    """:func:`scan_batch` of a block of whole JSONL lines, hashed from the raw bytes (no Python strings).

    The compiled :func:`honestci.audit.checks.ngram_kernel.scan_jsonl_block` finds each line's
    top-level ``text_field`` string and hashes its n-grams in the same pass; a line it cannot
    take as it is (a ``\\u`` escape, a byte >= 128, a missing or non-string text, a duplicate text
    key, anything unusual or invalid) goes through the exact path (orjson, :func:`normalize`,
    :func:`hash_documents`), which raises :class:`InputError` naming a bad line. Ids are read
    (by orjson, from the line) only for documents with a match. Results equal
    ``scan_batch(index, *parsed block)``, documents numbered in line order.
    """
    from honestci.audit.checks.ngram_kernel import SIMPLE_ESCAPE, STRING_CLASS
    from honestci.audit.checks.ngram_kernel import scan_jsonl_block as kernel

    buffers = buffers if buffers is not None else JsonlBlockBuffers()
    loads = loads if loads is not None else json_loads()
    data = np.frombuffer(block if block.endswith(b"\n") else block + b"\n", np.uint8)
    buffers.fit(data.size)
    words = data[: data.size // 8 * 8].view(np.uint64)
    key = np.frombuffer(text_field.encode("utf-8"), np.uint8)
    shift = np.uint64(index.bitmap_shift)
    while True:
        b = buffers
        n_docs, found, n_chars, status = kernel(
            data, words, key, BYTE_TABLE, STRING_CLASS, SIMPLE_ESCAPE, index.n, index.bitmap, shift,
            b.tokens, b.scratch, b.hashes, b.doc, b.position, b.line, b.start, b.end, b.fast,
        )  # fmt: skip
        if status == 0:
            break
        buffers.grow_docs() if status == 1 else buffers.grow_ngrams()
    hashes, doc, position = b.hashes[:found], b.doc[:found], b.position[:found]
    slow = np.flatnonzero(b.fast[:n_docs] == 0)
    slow_ids: dict[int, str] = {}
    if slow.size:
        parsed = [
            parse_jsonl_line(block[b.start[d] : b.end[d]], int(b.line[d]), locate, text_field, id_field, loads)
            for d in slow
        ]
        slow_ids = {int(d): doc_id for d, (doc_id, _) in zip(slow, parsed)}
        texts = [text for _, text in parsed]
        n_chars += sum(map(len, texts))
        chunk = hash_documents(texts, index.n, index)
        hashes = np.concatenate([hashes, chunk.hashes])
        doc = np.concatenate([doc, slow[chunk.doc].astype(np.int32)])
        position = np.concatenate([position, chunk.position])

    def id_of(d: int) -> str:
        if d in slow_ids:
            return slow_ids[d]
        return parse_jsonl_line(block[b.start[d] : b.end[d]], int(b.line[d]), locate, text_field, id_field, loads)[0]

    out = _match(index, hashes, doc, position, id_of)
    out.n_docs, out.n_bytes = int(n_docs), int(n_chars)
    return out


def _near_duplicates(
    index: NgramIndex, ids, encoded: EncodedDocuments, threshold: float
) -> list[tuple[int, str, float]]:
    """(item, doc id, Jaccard): per document, the item whose shingle set best matches a window.

    Candidates: a document holding at least ``threshold`` of an item's distinct shingles (a
    necessary condition for a window with Jaccard ≥ threshold). For each candidate every window
    of the item's length is scored by the exact Jaccard of shingle sets (a sliding multiset, so
    O(document length)); candidates are few, so no MinHash estimate is needed.
    """
    chunk = hash_documents(encoded, index.n, index)
    rows, keys = index.lookup(chunk.hashes)
    found: list[tuple[int, str, float]] = []
    if rows.size == 0:
        return found
    docs = chunk.doc[rows]
    key_items = np.repeat(np.arange(index.keys.size), np.diff(index.occurrence_start))
    for d in np.unique(docs):
        doc_keys = np.unique(keys[docs == d])
        # distinct shared shingles per item, from the index's occurrence lists (vectorised)
        starts, stops = index.occurrence_start[doc_keys], index.occurrence_start[doc_keys + 1]
        occurrences = np.repeat(starts - np.cumsum(stops - starts) + (stops - starts), stops - starts) + np.arange(
            int((stops - starts).sum())
        )
        pairs = np.unique(
            index.occurrence_item[occurrences].astype(np.int64) * index.keys.size + key_items[occurrences]
        )
        shared = np.bincount(pairs // index.keys.size, minlength=len(index.item_ids))
        sizes = np.array([k.size for k in index.item_keys])
        candidates = np.flatnonzero((sizes > 0) & (shared >= threshold * sizes))
        doc_hashes, scores = None, {}
        for item in candidates.tolist():
            if doc_hashes is None:
                # every shingle of the document in order, those outside the index included
                start, stop = encoded.starts[d], encoded.starts[d + 1]
                one_doc = EncodedDocuments(encoded.buffer[start:stop], np.array([0, stop - start], np.int64))
                doc_hashes = hash_documents(one_doc, index.n).hashes.tolist()
            scores[item] = _best_window_jaccard(
                doc_hashes, set(index.keys[index.item_keys[item]].tolist()), int(index.item_ngrams[item])
            )
        # a document is attributed to its best-matching item(s): templated answers share phrases
        # with their siblings, which would otherwise all be flagged by one copied answer
        top = max(scores.values(), default=0.0)
        if top >= threshold:
            found += [(item, ids[int(d)], score) for item, score in scores.items() if score == top]
    return found


def _best_window_jaccard(sequence: list[int], target: set[int], width: int) -> float:
    """max over windows of ``width`` consecutive elements of |W ∩ T| / |W ∪ T| (W, T as sets)."""
    from collections import Counter

    width = max(1, min(width, len(sequence)))
    counts: Counter = Counter(sequence[:width])
    inside = sum(1 for h in counts if h in target)
    best = inside / (len(counts) + len(target) - inside)
    for right in range(width, len(sequence)):
        incoming, outgoing = sequence[right], sequence[right - width]
        if counts[incoming] == 0:
            inside += incoming in target
        counts[incoming] += 1
        counts[outgoing] -= 1
        if counts[outgoing] == 0:
            del counts[outgoing]
            inside -= outgoing in target
        best = max(best, inside / (len(counts) + len(target) - inside))
    return float(best)


@dataclass(frozen=True)
class LeakageScan:
    """Per-eval-item evidence and per-document flags of one scan.

    ``items``: one row per eval item (item_id, n_ngrams, matched_ngrams, overlap, longest_span
    in tokens, n_docs, doc_ids, leaked, near_duplicate, near_jaccard). ``documents``: one row per
    flagged document (doc_id, matched_ngrams, items). ``leaked`` uses overlap ≥ ``min_overlap``.
    """

    n: int
    min_overlap: float
    items: pd.DataFrame = field(repr=False)
    documents: pd.DataFrame = field(repr=False)
    n_docs: int
    n_bytes: int
    seconds: float

    @property
    def leaked_items(self) -> tuple[str, ...]:
        return tuple(self.items.loc[self.items["leaked"], "item_id"])

    @property
    def near_duplicate_items(self) -> tuple[str, ...]:
        return tuple(self.items.loc[self.items["near_duplicate"] & ~self.items["leaked"], "item_id"])

    def to_frame(self):
        """Per-item evidence (the canonical table); ``documents`` holds the per-document flags."""
        return self.items.copy()

    def __str__(self) -> str:
        flagged = self.items[self.items["matched_ngrams"] > 0]
        return (
            f"{self.n}-gram scan of {self.n_docs} documents ({self.n_bytes / 1e6:.1f} MB): "
            f"{len(self.leaked_items)} leaked item(s), {len(self.near_duplicate_items)} near-duplicate(s)\n"
            + flagged.to_string(index=False)
        )


def summarize_matches(index: NgramIndex, matches: _Matches, min_overlap: float, seconds: float = 0.0) -> LeakageScan:
    """Per-item overlap fraction and longest span, per-document flags, from accumulated matches."""
    import pandas as pd

    n_items = len(index.item_ids)
    if matches.doc:
        doc = np.concatenate(matches.doc)
        doc_pos = np.concatenate(matches.doc_position)
        item = np.concatenate(matches.item).astype(np.int64)
        item_pos = np.concatenate(matches.item_position).astype(np.int64)
    else:
        doc = doc_pos = item = item_pos = np.zeros(0, np.int64)
    matched = np.zeros(n_items, np.int64)
    longest = np.zeros(n_items, np.int64)
    docs_of: list[list[str]] = [[] for _ in range(n_items)]
    if item.size:
        pairs = np.unique(np.stack([item, item_pos]), axis=1)
        matched = np.bincount(pairs[0], minlength=n_items)
        # runs of consecutive doc positions on one diagonal (doc_pos − item_pos) of one (doc, item)
        diagonal = doc_pos - item_pos
        order = np.lexsort((doc_pos, diagonal, item, doc))
        d, it, dg, dp = doc[order], item[order], diagonal[order], doc_pos[order]
        new_run = np.ones(d.size, bool)
        new_run[1:] = (d[1:] != d[:-1]) | (it[1:] != it[:-1]) | (dg[1:] != dg[:-1]) | (dp[1:] != dp[:-1] + 1)
        run_id = np.cumsum(new_run) - 1
        run_length = np.bincount(run_id)
        run_item = it[new_run]
        np.maximum.at(longest, run_item, run_length)
        for i, dd in set(zip(item.tolist(), doc.tolist())):
            docs_of[i].append(matches.doc_ids[dd])
    n_ngrams = index.item_ngrams.astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        overlap = np.where(n_ngrams > 0, matched / np.maximum(n_ngrams, 1), 0.0)
    near: dict[int, tuple[float, str]] = {}  # item -> (best Jaccard, its document)
    for i, doc_id, jaccard in matches.near:
        if jaccard > near.get(i, (0.0, None))[0]:
            near[i] = (jaccard, doc_id)
    items = pd.DataFrame(
        {
            "item_id": list(index.item_ids),
            "n_tokens": index.item_tokens,
            "n_ngrams": n_ngrams,
            "matched_ngrams": matched,
            "overlap": overlap,
            "longest_span": np.where(longest > 0, longest + index.n - 1, 0),
            "n_docs": [len(x) for x in docs_of],
            "doc_ids": [";".join(sorted(x)) for x in docs_of],
            "leaked": overlap >= min_overlap,
            "near_duplicate": [i in near for i in range(n_items)],
            "near_jaccard": [near[i][0] if i in near else np.nan for i in range(n_items)],
            "near_doc_id": [near[i][1] if i in near else None for i in range(n_items)],
        }
    )
    doc_rows = []
    if doc.size:
        for dd in np.unique(doc):
            sel = doc == dd
            names = sorted({index.item_ids[i] for i in item[sel].tolist()})
            doc_rows.append(
                {
                    "doc_id": matches.doc_ids[dd],
                    "matched_ngrams": int(np.unique(doc_pos[sel]).size),
                    "items": ";".join(names),
                    "leaks": ";".join(n for n in names if bool(items.loc[index.item_ids.index(n), "leaked"])),
                }
            )
    documents = pd.DataFrame(doc_rows, columns=["doc_id", "matched_ngrams", "items", "leaks"])
    return LeakageScan(index.n, min_overlap, items, documents, matches.n_docs, matches.n_bytes, seconds)


def scan_corpus(
    index: NgramIndex,
    paths: Iterable[str | Path] | str | Path,
    *,
    text_field: str = "text",
    id_field: str | None = "doc_id",
    min_overlap: float = 0.5,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    near_index: NgramIndex | None = None,
    near_threshold: float = NEAR_THRESHOLD,
    progress: ProgressLike = None,
    storage_options: Mapping | None = None,
) -> LeakageScan:
    """Stream corpus files through the index, one chunk at a time (memory: index + one chunk).

    Parameters
    ----------
    index
        :func:`build_index` of the held-out eval items.
    paths
        Corpus files: local paths, globs or fsspec URLs (see :func:`iter_corpus` for formats).
    storage_options
        fsspec options for URLs (credentials, ``endpoint_url``, ...; see
        :mod:`honestci.audit.checks.corpus_files`).
    min_overlap
        An item is leaked when at least this fraction of its distinct n-grams occur in the corpus.
    near_index, near_threshold
        Optional shingle index (:func:`build_index` with small n, e.g. 3) for near duplicates.
    progress
        Meters the bytes read of the files' total size (fsspec ``info`` for URLs), in MB with MB/s and ETA
        (:func:`honestci.audit.progress.as_progress`; default none).

    Validated against
    -----------------
    The fixture corpus's planted leaks (fixtures/study/truth.json ``leakage``) and a pure-Python
    set-of-n-grams oracle (tests/test_leakage.py).
    """
    import time

    started = time.perf_counter()
    files = expand_corpus(paths, storage_options)
    total = _Matches()
    size = sum(corpus_size(path, storage_options) for path in files)
    with as_progress(progress).meter(size, "leakage scan", "MB", scale=1e6) as meter:
        for path in files:
            for part in _scan_file(
                index,
                path,
                text_field,
                id_field,
                chunk_bytes,
                near_index,
                near_threshold,
                on_bytes=meter.advance,
                storage_options=storage_options,
            ):
                total.merge(part)
                meter.update(meter.done, documents=total.n_docs)
    return summarize_matches(index, total, min_overlap, time.perf_counter() - started)


def _scan_file(
    index: NgramIndex,
    path: str,
    text_field: str,
    id_field: str | None,
    chunk_bytes: int,
    near_index: NgramIndex | None,
    near_threshold: float,
    byte_range: tuple[int, int] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    storage_options: Mapping | None = None,
) -> Iterator[_Matches]:
    """The matches of each block of one corpus file: JSONL from the raw bytes (:func:`scan_jsonl_block`),
    other formats, and any scan with near duplicates, through :func:`iter_corpus` and :func:`scan_batch`."""
    if near_index is None and corpus_kind(path) == "jsonl":
        buffers, loads = JsonlBlockBuffers(), json_loads()
        for block, locate in iter_blocks(path, chunk_bytes, byte_range, on_bytes, storage_options):
            yield scan_jsonl_block(index, block, locate, text_field, id_field, buffers, loads)
        return
    for ids, texts in iter_corpus(path, text_field, id_field, chunk_bytes, byte_range, on_bytes, storage_options):
        yield scan_batch(index, ids, texts, near_index, near_threshold)


def scan_texts(
    index: NgramIndex,
    ids: Sequence[str],
    texts: Sequence[str],
    *,
    min_overlap: float = 0.5,
    near_index: NgramIndex | None = None,
    near_threshold: float = NEAR_THRESHOLD,
    batch_docs: int = 4096,
) -> LeakageScan:
    """:func:`scan_corpus` for documents already in memory (e.g. a study's corpus table)."""
    total = _Matches()
    for start in range(0, len(texts), batch_docs):
        total.merge(
            scan_batch(
                index, ids[start : start + batch_docs], texts[start : start + batch_docs], near_index, near_threshold
            )
        )
    return summarize_matches(index, total, min_overlap)


# --------------------------------------------------------------------------------------------
# Distributed scan (Dask)


def byte_ranges(path: str | Path, block_bytes: int, storage_options: Mapping | None = None) -> list[tuple[int, int]]:
    """Split an uncompressed file into [start, stop) ranges; each line belongs to the range it starts in."""
    size = corpus_size(path, storage_options)
    return [(start, min(size, start + block_bytes)) for start in range(0, size, block_bytes)] or [(0, 0)]


@dataclass(frozen=True)
class CorpusTask:
    """One task of a distributed scan: a file (path or URL), and a byte range or a run of row groups.

    Only the URL and its storage options travel to the worker, which reads the bytes itself.
    """

    path: str
    size: int  # bytes of the file this task covers (for progress)
    byte_range: tuple[int, int] | None = None
    row_groups: tuple[int, ...] | None = None


def plan_tasks(
    paths: Iterable[str | Path] | str | Path, block_bytes: int, storage_options: Mapping | None = None
) -> list[CorpusTask]:
    """Tasks of about ``block_bytes``: byte ranges of uncompressed JSONL/text, runs of Parquet row
    groups (by compressed size), and a gzip file whole. Local paths are made absolute (a worker's
    working directory is not the client's); ids use the file name only, so results do not change."""
    tasks = []
    for path in expand_corpus(paths, storage_options):
        path = path if is_url(path) else os.path.abspath(path.removeprefix("file://"))
        name, size = corpus_name(path).lower(), corpus_size(path, storage_options)
        if name.endswith(".parquet"):
            runs = parquet_row_groups(path, block_bytes, storage_options)
            tasks += [CorpusTask(path, size // len(runs), row_groups=tuple(run)) for run in runs]
        elif name.endswith(".gz"):
            tasks.append(CorpusTask(path, size))
        else:
            tasks += [
                CorpusTask(path, b - a, byte_range=(a, b)) for a, b in byte_ranges(path, block_bytes, storage_options)
            ]
    return tasks


def _scan_range(
    index: NgramIndex, task: CorpusTask, text_field, id_field, chunk_bytes, near_index, near_threshold, storage_options
) -> _Matches:
    if task.row_groups is not None:
        batches = iter_parquet(
            task.path, text_field, id_field, chunk_bytes, row_groups=task.row_groups, storage_options=storage_options
        )
        parts: Iterable[_Matches] = (
            scan_batch(index, ids, texts, near_index, near_threshold) for ids, texts in batches
        )
    else:
        parts = _scan_file(
            index, task.path, text_field, id_field, chunk_bytes, near_index, near_threshold, task.byte_range,
            storage_options=storage_options,
        )  # fmt: skip
    total = _Matches()
    with _malloc_keeps_chunk_buffers():
        for part in parts:
            total.merge(part)
    return total


_MALLOC_LOCK = threading.Lock()
_MALLOC_USERS = [0]


@contextlib.contextmanager
def _malloc_keeps_chunk_buffers():
    """While a task scans, let glibc reuse the chunk buffers instead of mapping fresh pages for each.

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``. Setting any malloc threshold
    turns off glibc's dynamic mmap threshold, so every buffer over 128 KiB (each ~4 MB block, its
    JSON array, the encoded text) is a fresh ``mmap`` whose pages fault in one by one: measured
    (bench/bench_leakage_workers.py, 400 MB) 2.9x the minor page faults and sys time 0.5 → 1.45 s,
    the whole CPU gap between a worker and one process (the same variable reproduces it in a plain
    process). For the task's duration the mmap threshold is raised to 32 MiB (glibc's maximum) and
    the trim threshold to 256 MiB; afterwards both go back and ``malloc_trim(0)`` returns the heap
    to the OS, as the worker's setting intends. Nothing is done off glibc, or without the variable.
    """
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    libc = None
    if trim is not None and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            libc.mallopt  # noqa: B018 (glibc only)
            libc.malloc_trim  # noqa: B018
        except (OSError, AttributeError):
            libc = None
    if libc is None:
        yield
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    with _MALLOC_LOCK:
        _MALLOC_USERS[0] += 1
        if _MALLOC_USERS[0] == 1:
            libc.mallopt(m_mmap_threshold, 32 << 20)
            libc.mallopt(m_trim_threshold, 256 << 20)
    try:
        yield
    finally:
        with _MALLOC_LOCK:
            _MALLOC_USERS[0] -= 1
            if _MALLOC_USERS[0] == 0:
                libc.mallopt(m_mmap_threshold, int(os.environ.get("MALLOC_MMAP_THRESHOLD_", 128 << 10)))
                libc.mallopt(m_trim_threshold, int(trim) if trim.isdigit() else 128 << 10)
                libc.malloc_trim(0)


def scan_corpus_dask(
    index: NgramIndex,
    paths: Iterable[str | Path] | str | Path,
    client,
    *,
    text_field: str = "text",
    id_field: str | None = "doc_id",
    min_overlap: float = 0.5,
    block_bytes: int = 64 << 20,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    near_index: NgramIndex | None = None,
    near_threshold: float = NEAR_THRESHOLD,
    progress: ProgressLike = None,
    storage_options: Mapping | None = None,
) -> LeakageScan:
    """The same scan on a Dask cluster: one task per file block, the index broadcast once.

    Uncompressed JSONL/text files are split into ``block_bytes`` ranges (a line belongs to the range
    it starts in), Parquet files into runs of row groups of about ``block_bytes`` compressed; a gzip
    file is one task. Each task carries the file's path or URL and ``storage_options``, and the
    worker reads its bytes itself (so every worker must reach the store: a shared file system, or
    an fsspec URL with credentials in the options or in the workers' environment). Results equal
    :func:`scan_corpus`'s (tests/test_leakage.py and tests/test_leakage_remote.py check this on
    local clusters of threads and of processes, reading from a local S3 server). ``progress``
    meters the bytes of the tasks finished (MB, MB/s, ETA).
    """
    import time

    from distributed import as_completed

    started = time.perf_counter()
    tasks = plan_tasks(paths, block_bytes, storage_options)
    # hash=False: a fresh key, so a second scan of the same index cannot race the release of the first
    index_future = client.scatter(index, broadcast=True, hash=False)
    near_future = client.scatter(near_index, broadcast=True, hash=False) if near_index is not None else None
    options = dict(storage_options or {})
    futures = [
        client.submit(
            _scan_range,
            index_future,
            task,
            text_field,
            id_field,
            chunk_bytes,
            near_future,
            near_threshold,
            options,
            pure=False,
        )
        for task in tasks
    ]
    size_of = {future.key: task.size for future, task in zip(futures, tasks)}
    with as_progress(progress).meter(
        sum(size_of.values()), f"leakage scan ({len(futures)} tasks)", "MB", scale=1e6
    ) as meter:
        for future in as_completed(futures):
            meter.advance(size_of[future.key])
    total = _Matches()
    for part in client.gather(futures):  # merged in task order, as the in-process scan does
        total.merge(part)
    return summarize_matches(index, total, min_overlap, time.perf_counter() - started)


# --------------------------------------------------------------------------------------------
# What a leak did to the claimed score


@dataclass(frozen=True)
class LeakEffect:
    """The claim's win rate on contests free of leaked answers vs contests with one.

    Estimand: θ_leaked − θ_clean, by OLS of contest scores on [1, leaked] with a CR2 covariance
    clustered by vignette and Satterthwaite df; ``clean`` is the win rate on clean contests alone
    (CR2 interval).
    """

    n_contests: int
    n_leaked: int
    clean_estimate: float
    clean_ci: tuple[float, float]
    leaked_estimate: float | None
    difference: float | None
    difference_ci: tuple[float, float] | None
    n_clusters: int
    level: float

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "n_contests": self.n_contests,
                    "n_leaked": self.n_leaked,
                    "clean_estimate": self.clean_estimate,
                    "clean_ci_low": self.clean_ci[0],
                    "clean_ci_high": self.clean_ci[1],
                    "leaked_estimate": self.leaked_estimate,
                    "difference": self.difference,
                    "difference_ci_low": None if self.difference_ci is None else self.difference_ci[0],
                    "difference_ci_high": None if self.difference_ci is None else self.difference_ci[1],
                    "n_clusters": self.n_clusters,
                    "level": self.level,
                }
            ]
        )


def leak_effect(scores, clusters, leaked, level: float = 0.95) -> LeakEffect:
    """Clean-vs-leaked comparison of contest scores (see :class:`LeakEffect`).

    Validated against: :func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols` (pinned to R clubSandwich).
    """
    from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols

    y = np.asarray(scores, float)
    groups = np.asarray(clusters)
    flag = np.asarray(leaked, bool)
    clean = cluster_robust_ols(np.ones((~flag).sum()), y[~flag], groups[~flag], vcov="CR2", level=level)
    diff = diff_ci = leaked_mean = None
    if flag.any():
        leaked_mean = float(y[flag].mean())
        try:
            fit = cluster_robust_ols(
                np.column_stack([np.ones_like(y), flag.astype(float)]),
                y,
                groups,
                vcov="CR2",
                level=level,
                coef_names=("clean", "leaked_minus_clean"),
            )
            diff, diff_ci = float(fit.coef[1]), (float(fit.ci_low[1]), float(fit.ci_high[1]))
        except (EstimationError, InputError):
            diff = leaked_mean - float(clean.coef[0])
    return LeakEffect(
        int(y.size),
        int(flag.sum()),
        float(clean.coef[0]),
        (float(clean.ci_low[0]), float(clean.ci_high[0])),
        leaked_mean,
        diff,
        diff_ci,
        int(np.unique(groups).size),
        level,
    )


# --------------------------------------------------------------------------------------------
# The audit check


@dataclass(frozen=True)
class LeakageCheck:
    """The claim's eval answers scanned against its training corpus, and what leaks did to it."""

    scan: LeakageScan
    effect: LeakEffect | None
    item_kind: dict = field(default_factory=dict, repr=False)

    def to_frame(self):
        return self.scan.to_frame()

    def report_section(self) -> ReportSection:
        scan = self.scan
        lines = [
            f"{len(scan.items)} eval answers of the claim's contests indexed as {scan.n}-grams (normalised: "
            f"NFKC, lower-case, punctuation stripped); {scan.n_docs} corpus documents scanned.",
            f"Leaked (overlap >= {scan.min_overlap:g}): {', '.join(scan.leaked_items) or 'none'}; near duplicates "
            f"(paraphrases): {', '.join(scan.near_duplicate_items) or 'none'}.",
        ]
        if self.effect is not None and self.effect.difference is not None:
            e = self.effect
            ci = "" if e.difference_ci is None else f" [{e.difference_ci[0]:+.3f}, {e.difference_ci[1]:+.3f}]"
            lines.append(
                f"Win rate on {e.n_contests - e.n_leaked} clean contests {e.clean_estimate:.3f} "
                f"[{e.clean_ci[0]:.3f}, {e.clean_ci[1]:.3f}]; on {e.n_leaked} contests with a leaked answer "
                f"{e.leaked_estimate:.3f}; difference {e.difference:+.3f}{ci} (CR2 by vignette)."
            )
        items = scan.items
        partial = int(((items["matched_ngrams"] > 0) & ~items["leaked"]).sum())
        lines.append(
            f"{partial} other answer(s) share some {scan.n}-grams with the corpus (below the leak threshold); "
            f"the table lists leaks, near duplicates and overlaps >= {scan.min_overlap / 2:g} (at most 25)."
        )
        shown = items["leaked"] | items["near_duplicate"] | (items["overlap"] >= scan.min_overlap / 2)
        flagged = items[shown].sort_values("overlap", ascending=False).head(25)
        table = tuple(
            {
                k: (None if isinstance(v, float) and np.isnan(v) else (v.item() if hasattr(v, "item") else v))
                for k, v in row.items()
            }
            for row in flagged.to_dict(orient="records")
        )
        return ReportSection("leakage", "Leakage of eval answers into the training corpus", tuple(lines), table)


def check_claim_leakage(
    study,
    contests,
    *,
    n: int = DEFAULT_NGRAM,
    min_overlap: float = 0.5,
    near_duplicates: bool = True,
    near_threshold: float = NEAR_THRESHOLD,
    level: float = 0.95,
) -> LeakageCheck:
    """Scan the study's corpus for the answers used in the claim's contests (both sides).

    With ``contests=None`` (before anything is judged, e.g. the training pipeline's preflight)
    every response of the study is an eval answer to protect, and no win-rate effect is computed.
    """
    responses = study.responses.frame
    text = dict(zip(responses["response_id"], responses["text"]))
    if contests is None:
        used = list(responses["response_id"])
    else:
        used = list(dict.fromkeys(list(contests.frame["opponent_response"]) + list(contests.frame["policy_response"])))
    items = {rid: text[rid] for rid in used if isinstance(text.get(rid), str)}
    index = build_index(items, n)
    near_index = build_index(items, NEAR_SHINGLE) if near_duplicates else None
    corpus = study.corpus.frame
    scan = scan_texts(
        index,
        list(corpus["doc_id"].astype(str)),
        list(corpus["text"].fillna("")),
        min_overlap=min_overlap,
        near_index=near_index,
        near_threshold=near_threshold,
    )
    if contests is None:
        return LeakageCheck(scan, None)
    leaked = set(scan.leaked_items)
    scored = contests.scores("both_orders")
    rows = scored.frame  # a panel's scores are one row per contest, not per judge
    flag = (rows["opponent_response"].isin(leaked) | rows["policy_response"].isin(leaked)).to_numpy()
    effect = leak_effect(scored.values, scored.clusters, flag, level) if scored.values.size else None
    return LeakageCheck(scan, effect)


def leakage_check(context: AuditContext) -> LeakageCheck | None:
    """The claim's eval answers scanned against its training corpus (None without a corpus).

    With ``context.contests`` None (nothing judged yet: the training pipeline's preflight) every
    response of the study is scanned and no win-rate effect is computed.
    """
    if context.study.corpus is None:
        return None
    t = context.claim.thresholds
    return check_claim_leakage(
        context.study,
        context.contests,
        n=t.leakage_ngram,
        min_overlap=t.leakage_min_overlap,
        near_duplicates=t.leakage_near_duplicate_jaccard <= 1,
        near_threshold=t.leakage_near_duplicate_jaccard,
        level=t.confidence_level,
    )
