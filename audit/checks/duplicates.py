"""Pure text helpers of the evidence-integrity check: normalised text, confusable skeletons and
near-duplicate pairs by word n-gram Jaccard (the leakage scan's hashing reused).

Definitions:

- ``normalized_text``: NFKC, full case folding, every run of non-word characters (punctuation,
  ``_``, whitespace) one space (:func:`honestci.audit.checks.ngram_index.normalize` after casefold):
  ``"It’s  FINE—really."`` and ``"its fine really"`` differ, ``"it s fine really"`` is both.
- ``skeleton``: a name's confusable skeleton in the manner of Unicode TR39 §4: NFKC, each
  character replaced by its confusable class's representative, NFKC again. Two names with one
  skeleton can be read as each other (Cyrillic ``о`` and Latin ``o``, Greek ``ο``, fullwidth
  letters, ``l``/``1``/``I``). Classes are the connected components of the single-character pairs
  of Unicode's confusables data (shipped by ``confusable-homoglyphs``); the multi-character
  prototypes (``rn`` for ``m``) are left out. :func:`confusable_groups` also compares the
  casefolded skeletons, so names that differ in case alone are confusable too.
- near duplicates: two texts whose sets of word n-grams (n = ``ngram``, or the shorter text's
  length in words when it has fewer, so a short prompt is one shingle) have Jaccard
  |A ∩ B| / |A ∪ B| ≥ ``threshold``.

Validated against: tests/test_evidence.py (Cyrillic а/о/е, Greek ο, fullwidth letters).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

import numpy as np

from honestci.audit.checks.ngram_index import hash_documents, normalize


def normalized_text(text: str) -> str:
    """NFKC-casefolded text with punctuation and whitespace runs collapsed to one space.

    >>> normalized_text("  It’s FINE—really.  ")
    'it s fine really'
    """
    return normalize(unicodedata.normalize("NFKC", text).casefold())


@functools.cache
def _confusable_classes() -> dict[str, str]:
    """Each character of the confusables data → its class representative (smallest code point)."""
    import json
    from pathlib import Path

    import confusable_homoglyphs

    data = json.loads((Path(confusable_homoglyphs.__file__).parent / "confusables.json").read_text("utf-8"))
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for char, entries in data.items():
        if len(char) != 1:
            continue
        for entry in entries:
            other = entry["c"]
            if len(other) == 1:
                a, b = find(char), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {char: find(char) for char in parent}


def skeleton(name: str) -> str:
    """The confusable skeleton of ``name`` (module doc): equal skeletons read alike.

    >>> skeleton("gpt-4-0314") == skeleton("gpt-4-\\u041e314")  # Cyrillic capital O for the zero
    True
    """
    classes = _confusable_classes()
    return unicodedata.normalize("NFKC", "".join(classes.get(c, c) for c in unicodedata.normalize("NFKC", name)))


def confusable_groups(names: Sequence[str]) -> list[tuple[str, ...]]:
    """The groups (two or more distinct names, sorted) that read alike: names joined when their
    skeletons, or the skeletons of their casefolded forms, are equal.

    >>> confusable_groups(["gpt-4", "gpt-\u0034", "llama", "l1ama", "qwen"])
    [('l1ama', 'llama')]
    """
    distinct = sorted(set(names))
    groups: dict[str, int] = {}
    parent = list(range(len(distinct)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, name in enumerate(distinct):
        for key in (skeleton(name), skeleton(name.casefold())):
            j = groups.setdefault(key, i)
            parent[find(i)] = find(j)
    members: dict[int, list[str]] = {}
    for i, name in enumerate(distinct):
        members.setdefault(find(i), []).append(name)
    return sorted(tuple(group) for group in members.values() if len(group) > 1)


def near_duplicate_pairs(texts: Sequence[str], ngram: int, threshold: float) -> list[tuple[int, int, float]]:
    """(i, j, Jaccard) for every i < j whose word n-gram sets reach ``threshold`` (module doc).

    Each text is hashed once at ``ngram`` (:func:`honestci.audit.checks.ngram_index.hash_documents`);
    a text with fewer words is hashed whole at its own length. Candidate pairs are those sharing a
    hash (an inverted index), so the cost follows the shared shingles, not all pairs.
    """
    if len(texts) < 2:
        return []
    sets: list[np.ndarray] = [np.empty(0, np.uint64)] * len(texts)
    chunk = hash_documents(list(texts), ngram)
    for doc, hashes in _split(chunk.doc, chunk.hashes, len(texts)):
        sets[doc] = np.unique(hashes)
    short = [i for i, n in enumerate(chunk.n_tokens.tolist()) if 0 < n < ngram]
    for i in short:
        sets[i] = np.unique(hash_documents([texts[i]], int(chunk.n_tokens[i])).hashes)
    owner = np.concatenate([np.full(s.size, i, np.int64) for i, s in enumerate(sets)])
    keys = np.concatenate(sets)
    order = np.argsort(keys, kind="stable")
    keys, owner = keys[order], owner[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.diff(np.r_[starts, keys.size])
    shared: dict[tuple[int, int], int] = {}
    for start, count in zip(starts[counts > 1].tolist(), counts[counts > 1].tolist()):
        holders = sorted(set(owner[start : start + count].tolist()))
        for a in range(len(holders)):
            for b in range(a + 1, len(holders)):
                key = (holders[a], holders[b])
                shared[key] = shared.get(key, 0) + 1
    found = []
    for (i, j), both in sorted(shared.items()):
        jaccard = both / (sets[i].size + sets[j].size - both)
        if jaccard >= threshold:
            found.append((i, j, float(jaccard)))
    return found


def _split(doc: np.ndarray, hashes: np.ndarray, n_docs: int):
    """(document, its hashes) for each document with any (``doc`` is non-decreasing)."""
    bounds = np.searchsorted(doc, np.arange(n_docs + 1))
    for d in range(n_docs):
        if bounds[d + 1] > bounds[d]:
            yield d, hashes[bounds[d] : bounds[d + 1]]
