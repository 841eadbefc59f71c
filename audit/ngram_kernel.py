"""Compiled byte-level kernel of the leakage scan: tokens, word n-gram hashes and the index bitmap in one pass.

Imported only by :mod:`audit.leakage` when it hashes text (numba is a heavy import). The kernels
are compiled on first use and cached on disk (``cache=True``: beside this module in
``__pycache__``, or numba's per-user cache directory when that is read-only).

Definition (``audit.leakage.reference_ngram_hashes`` is the pure-Python oracle of the same thing):

- a byte is mapped by ``table`` (ASCII letters lower-cased, digits and bytes ≥ 128 kept, every other
  byte → space); a token is a maximal run of non-space bytes inside one document;
- token hash t = splitmix64(FNV-1a-64(token bytes));
- the hash of the n-gram starting at token i is splitmix64(Σ_{m<n} t_{i+m} · B^(n−1−m) mod 2⁶⁴), B the
  golden-ratio constant 0x9E3779B97F4A7C15, updated as a rolling hash (subtract the leaving token
  times B^(n−1), multiply by B, add the entering token); n-grams never span two documents;
- an n-gram is returned when its bit ``hash >> shift`` is set in the packed ``bitmap`` (uint64 words).
"""

from __future__ import annotations

import numba
import numpy as np

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_S6, _LOW6, _ONE = np.uint64(6), np.uint64(63), np.uint64(1)
_SPACE = np.uint8(32)


@numba.njit(cache=True, nogil=True, inline="always")
def splitmix64(x):
    z = x + GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@numba.njit(cache=True, nogil=True)
def ngram_hashes(buffer, doc_starts, table, n, bitmap, shift):
    """(hashes, doc, position, n_tokens): the n-grams of every document that pass the bitmap.

    ``buffer`` uint8 (the documents' bytes back to back), ``doc_starts`` int64 (n_docs + 1 offsets),
    ``table`` uint8[256], ``n`` ≥ 1, ``bitmap`` uint64 words, ``shift`` uint64 (64 − bitmap bits).
    """
    n_docs = doc_starts.size - 1
    n_tokens = np.zeros(n_docs, np.int64)
    capacity = 1024
    out_hash = np.empty(capacity, np.uint64)
    out_doc = np.empty(capacity, np.int64)
    out_pos = np.empty(capacity, np.int64)
    count = 0
    ring = np.zeros(n, np.uint64)
    top = np.uint64(1)  # B^(n-1)
    for _ in range(n - 1):
        top = top * GOLDEN
    for d in range(n_docs):
        k = 0
        slot = 0
        rolling = np.uint64(0)
        token = FNV_OFFSET
        in_token = False
        stop = doc_starts[d + 1]
        for i in range(doc_starts[d], stop + 1):
            c = table[buffer[i]] if i < stop else _SPACE
            if c != _SPACE:
                token = (token ^ np.uint64(c)) * FNV_PRIME
                in_token = True
            elif in_token:
                t = splitmix64(token)
                if k >= n:
                    rolling = rolling - ring[slot] * top
                rolling = rolling * GOLDEN + t
                ring[slot] = t
                slot += 1
                if slot == n:
                    slot = 0
                k += 1
                if k >= n:
                    h = splitmix64(rolling)
                    bit = h >> shift
                    if (bitmap[bit >> _S6] >> (bit & _LOW6)) & _ONE:
                        if count == capacity:
                            capacity *= 2
                            out_hash = _grow(out_hash, capacity)
                            out_doc = _grow(out_doc, capacity)
                            out_pos = _grow(out_pos, capacity)
                        out_hash[count] = h
                        out_doc[count] = d
                        out_pos[count] = k - n
                        count += 1
                token = FNV_OFFSET
                in_token = False
        n_tokens[d] = k
    return out_hash[:count].copy(), out_doc[:count].copy(), out_pos[:count].copy(), n_tokens


@numba.njit(cache=True, nogil=True)
def _grow(array, capacity):
    bigger = np.empty(capacity, array.dtype)
    bigger[:array.size] = array
    return bigger
