"""Word n-grams of text and the index of the eval items' n-grams: what the leakage scan matches.

Normalise (Unicode NFKC, lower-case, punctuation → space, whitespace collapsed) → word n-grams →
64-bit hashes → :class:`NgramIndex`, the sorted hashes of the eval items with their occurrences.
:mod:`honestci.audit.checks.leakage` streams corpora through the index; near-duplicate passes
(:mod:`honestci.audit.checks.duplicates`) hash with the same function.

Hashing is one compiled pass over the bytes of a whole chunk (:mod:`honestci.audit.checks.ngram_kernel`, numba):
each document becomes normalised UTF-8 bytes (ASCII documents as they are, a byte table
lower-cases letters and turns every other ASCII byte into a space; other documents through
:func:`normalize`), the documents are joined into one buffer with their offsets, and the kernel
walks it once: a token is a run of non-space bytes, its hash t = splitmix64(FNV-1a-64(bytes)),
the hash of the n-gram starting at token i is splitmix64(Σ_{m<n} t_{i+m}·B^(n−1−m) mod 2⁶⁴) with
B = 0x9E3779B97F4A7C15 (a rolling hash, restarted at every document), and only n-grams whose bit
is set in the index's bitmap (its top hash bits) leave the kernel. They are confirmed by binary
search in the index's sorted keys. The index is built by the same kernel, so eval items and corpus
hash identically by construction; :func:`reference_ngram_hashes` is the pure-Python oracle.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from honestci.audit.errors import InputError

DEFAULT_NGRAM = 8
GPT3_NGRAM = 13

_MASK = (1 << 64) - 1
_NGRAM_BASE = 0x9E3779B97F4A7C15
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_NON_WORD = re.compile(r"[\W_]+")
#: ASCII bytes: letters lower-cased, digits kept, everything else a space; bytes >= 128 kept.
_ASCII_TABLE = bytes(
    (b + 32 if 65 <= b <= 90 else b) if (48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122 or b >= 128) else 32
    for b in range(256)
)
#: :data:`_ASCII_TABLE` as the array the compiled kernels map bytes through.
BYTE_TABLE = np.frombuffer(_ASCII_TABLE, np.uint8)
#: A bitmap that lets every n-gram through (1 bit of hash, both values set).
_PASS_ALL = (np.array([3], np.uint64), 63)


# --------------------------------------------------------------------------------------------
# Normalisation and hashing


def normalize(text: str) -> str:
    """NFKC, lower-case, every run of non-word characters (punctuation, ``_``, whitespace) → one space.

    >>> normalize("It’s  FINE—really_.")
    'it s fine really'
    """
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def _normalized_bytes(text: str) -> bytes:
    if text.isascii():  # O(1) in CPython; the kernel's byte table does the rest
        return text.encode("ascii")
    return normalize(text).encode("utf-8")


def tokenize(text: str) -> list[bytes]:
    """Normalised word tokens (UTF-8 bytes) of ``text``: ``normalize(text).encode().split()``."""
    return _normalized_bytes(text).translate(_ASCII_TABLE).split()


@dataclass(frozen=True)
class EncodedDocuments:
    """Documents as one buffer of (not yet table-mapped) normalised bytes plus offsets."""

    buffer: np.ndarray  # uint8
    starts: np.ndarray  # int64, n_docs + 1


def encode_documents(texts: Sequence[str]) -> EncodedDocuments:
    """Join the documents' normalised bytes (:func:`_normalized_bytes`) into one buffer with offsets."""
    parts = list(map(_normalized_bytes, texts))
    starts = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=starts[1:])
    return EncodedDocuments(np.frombuffer(b"".join(parts), np.uint8), starts)


@dataclass(frozen=True)
class HashedChunk:
    """The n-gram hashes of a batch of documents: hash, document index and token position.

    With a prefilter only the n-grams that pass its bitmap appear (a superset of those in the
    index; no other n-gram can match).
    """

    hashes: np.ndarray
    doc: np.ndarray
    position: np.ndarray
    n_tokens: np.ndarray  # per document


def hash_documents(texts: Sequence[str] | EncodedDocuments, n: int, prefilter: NgramIndex | None = None) -> HashedChunk:
    """Hash the word n-grams of every text in one compiled pass (see the module docstring).

    Token hash t = splitmix64(FNV-1a-64(token bytes)); the n-gram starting at token i hashes to
    splitmix64(Σ_m t_{i+m}·B^(n−1−m) mod 2⁶⁴), B = 0x9E3779B97F4A7C15. An n-gram never spans two
    documents. With ``prefilter`` (an index of the same n) only n-grams whose bit is set in its
    bitmap are returned.
    """
    from honestci.audit.checks.ngram_kernel import ngram_hashes

    if n < 1:
        raise InputError(f"n = {n} must be at least 1", fix="use e.g. 8, or 13 for GPT-3-style checks")
    if prefilter is not None and prefilter.n != n:
        raise InputError(f"prefilter index has n = {prefilter.n}, not {n}", fix="hash with the index's n")
    encoded = texts if isinstance(texts, EncodedDocuments) else encode_documents(texts)
    bitmap, shift = (prefilter.bitmap, prefilter.bitmap_shift) if prefilter is not None else _PASS_ALL
    hashes, doc, position, n_tokens = ngram_hashes(
        encoded.buffer, encoded.starts, BYTE_TABLE, n, bitmap, np.uint64(shift)
    )
    return HashedChunk(hashes, doc, position, n_tokens)


def _mix(x: int) -> int:
    x = (x + _NGRAM_BASE) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def reference_token_hash(token: bytes) -> int:
    """splitmix64(FNV-1a-64(token)) in plain Python (the oracle of the kernel's token hash)."""
    h = _FNV_OFFSET
    for byte in token:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return _mix(h)


def reference_ngram_hashes(text: str, n: int) -> list[int]:
    """The hashes of :func:`hash_documents`, one n-gram at a time in plain Python ints (a test oracle).

    Tokens are ``normalize(text).encode("utf-8").split()`` (no byte table, no fast path).
    """
    tokens = [reference_token_hash(t) for t in normalize(text).encode("utf-8").split()]
    out = []
    for i in range(len(tokens) - n + 1):
        h = 0
        for t in tokens[i : i + n]:
            h = (h * _NGRAM_BASE + t) & _MASK
        out.append(_mix(h))
    return out


# --------------------------------------------------------------------------------------------
# The index of eval items


@dataclass(frozen=True, eq=False)
class NgramIndex:
    """Sorted distinct n-gram hashes of the eval items, each with its (item, position) occurrences.

    A packed bitmap over the top ``64 − bitmap_shift`` bits of the hashes (about 64 bits per key)
    rejects almost every corpus n-gram inside the kernel; the survivors are confirmed by binary
    search in ``keys``.
    """

    n: int
    item_ids: tuple[str, ...]
    item_ngrams: np.ndarray  # per item: number of n-grams
    item_tokens: np.ndarray  # per item: number of tokens
    keys: np.ndarray
    occurrence_start: np.ndarray  # CSR into occurrence_item / occurrence_position
    occurrence_item: np.ndarray
    occurrence_position: np.ndarray
    bitmap: np.ndarray = field(repr=False)  # uint64 words
    bitmap_shift: int
    item_keys: tuple = field(repr=False, default=())  # per item: its key indices (for near duplicates)

    @property
    def nbytes(self) -> int:
        return int(
            sum(
                a.nbytes
                for a in (self.keys, self.occurrence_start, self.occurrence_item, self.occurrence_position, self.bitmap)
            )
        )

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indices into ``hashes`` that are in the index, their key indices)."""
        if hashes.size == 0 or self.keys.size == 0:
            empty = np.zeros(0, np.int64)
            return empty, empty
        found = np.minimum(np.searchsorted(self.keys, hashes), self.keys.size - 1)
        hit = np.flatnonzero(self.keys[found] == hashes)
        return hit, found[hit]


def build_index(items: Mapping[str, str], n: int = DEFAULT_NGRAM) -> NgramIndex:
    """Index the word n-grams of eval items (id → text: held-out answers and, optionally, prompts)."""
    if not items:
        raise InputError("no eval items to index", fix="give at least one held-out answer")
    ids = tuple(items)
    chunk = hash_documents([items[i] for i in ids], n)
    item_ngrams = np.bincount(chunk.doc, minlength=len(ids))
    order = np.lexsort((chunk.position, chunk.doc, chunk.hashes))
    hashes, doc, position = chunk.hashes[order], chunk.doc[order], chunk.position[order]
    keys, first = np.unique(hashes, return_index=True)
    starts = np.append(first, hashes.size).astype(np.int64)
    bits = int(min(30, max(16, np.ceil(np.log2(max(1, keys.size) * 64)))))
    shift = 64 - bits
    bitmap = np.zeros(1 << (bits - 6), np.uint64)
    slots = keys >> np.uint64(shift)
    np.bitwise_or.at(bitmap, slots >> np.uint64(6), np.uint64(1) << (slots & np.uint64(63)))
    key_of_row = np.repeat(np.arange(keys.size), np.diff(starts))
    item_keys = tuple(np.unique(key_of_row[doc == j]) for j in range(len(ids)))
    return NgramIndex(
        n,
        ids,
        item_ngrams,
        chunk.n_tokens,
        keys,
        starts,
        doc.astype(np.int32),
        position.astype(np.int32),
        bitmap,
        shift,
        item_keys,
    )
