"""Compiled byte-level kernel of the leakage scan: tokens, word n-gram hashes and the index bitmap in one pass.

Imported only by :mod:`honestci.audit.checks.leakage` when it hashes text (numba is a heavy import: about 0.6 s
and 130 MB of resident LLVM). The kernels are compiled on first use (about 6 s) and cached on
disk (``cache=True``: beside this module in ``__pycache__``, or numba's per-user cache directory
when the install is read-only; with neither writable they are compiled in every process).

Definition (``honestci.audit.checks.leakage.reference_ngram_hashes`` is the pure-Python oracle of the same thing):

- a byte is mapped by ``table`` (ASCII letters lower-cased, digits and bytes ≥ 128 kept, every other
  byte → space); a token is a maximal run of non-space bytes inside one document;
- token hash t = splitmix64(FNV-1a-64(token bytes));
- the hash of the n-gram starting at token i is splitmix64(Σ_{m<n} t_{i+m} · B^(n−1−m) mod 2⁶⁴), B the
  golden-ratio constant 0x9E3779B97F4A7C15, updated as a rolling hash (subtract the leaving token
  times B^(n−1), multiply by B, add the entering token); n-grams never span two documents;
- an n-gram is returned when its bit ``hash >> shift`` is set in the packed ``bitmap`` (uint64 words).
"""

from __future__ import annotations

import numpy as np

from honestci.audit.stats.numba_cache import njit_cached

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_S6, _LOW6, _ONE = np.uint64(6), np.uint64(63), np.uint64(1)
_SPACE = np.uint8(32)


@njit_cached(nogil=True, inline="always")
def splitmix64(x):
    z = x + GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit_cached(nogil=True)
def ngram_hashes(buffer, doc_starts, table, n, bitmap, shift):
    """(hashes, doc, position, n_tokens): the n-grams of every document that pass the bitmap.

    ``buffer`` uint8 (the documents' bytes back to back), ``doc_starts`` int64 (n_docs + 1 offsets),
    ``table`` uint8[256], ``n`` ≥ 1, ``bitmap`` uint64 words, ``shift`` uint64 (64 − bitmap bits).

    Two stages. (1) Token hashes, without a data-dependent branch per byte: the FNV state is
    stored at every byte and the token counter advances only at the byte that ends a token, so
    token ends never mispredict (1.3-1.5x faster than branching on separators). (2) Per
    document, the rolling n-gram hash over the token hashes and the bitmap test.
    """
    n_docs = doc_starts.size - 1
    # at most (length + 1) // 2 tokens per document, and at most one n-gram per token; the output
    # arrays are allocated untouched (virtual memory) and only survivors are written: growing
    # arrays inside the loop made it 4x slower
    capacity = (buffer.size + n_docs) // 2 + 1
    tokens = np.empty(capacity + 1, np.uint64)
    token_end = np.zeros(n_docs + 1, np.int64)
    count = 0
    for d in range(n_docs):
        state = FNV_OFFSET
        in_token = 0
        for i in range(doc_starts[d], doc_starts[d + 1]):
            c = table[buffer[i]]
            separator = c == _SPACE
            tokens[count] = state
            count += in_token & separator
            in_token = 1 - separator
            state = FNV_OFFSET if separator else (state ^ np.uint64(c)) * FNV_PRIME
        tokens[count] = state
        count += in_token
        token_end[d + 1] = count
    for j in range(count):
        tokens[j] = splitmix64(tokens[j])

    top = np.uint64(1)  # B^(n-1)
    for _ in range(n - 1):
        top = top * GOLDEN
    out_hash = np.empty(capacity, np.uint64)
    out_doc = np.empty(capacity, np.int32)
    out_pos = np.empty(capacity, np.int32)
    n_tokens = np.diff(token_end)
    found = 0
    for d in range(n_docs):
        first, last = token_end[d], token_end[d + 1]
        if last - first < n:
            continue
        rolling = np.uint64(0)
        for j in range(first, first + n):
            rolling = rolling * GOLDEN + tokens[j]
        for j in range(first + n, last + 1):  # the n-gram ending before token j
            h = splitmix64(rolling)
            bit = h >> shift
            if (bitmap[bit >> _S6] >> (bit & _LOW6)) & _ONE:
                out_hash[found] = h
                out_doc[found] = d
                out_pos[found] = j - n - first
                found += 1
            if j < last:
                rolling = (rolling - tokens[j - n] * top) * GOLDEN + tokens[j]
    return out_hash[:found].copy(), out_doc[:found].copy(), out_pos[:found].copy(), n_tokens


@njit_cached(nogil=True)
def jsonl_as_array(block):
    """(``[`` + the lines joined by commas + ``]``, lines in it, newlines in the block) of a uint8 JSONL block.

    Trailing whitespace is dropped; one pass, so a JSONL block is parsed by a single
    ``orjson.loads`` call instead of one call per line.
    """
    end = block.size
    trailing_newlines = 0
    while end > 0 and (block[end - 1] == 32 or block[end - 1] == 10 or block[end - 1] == 13 or block[end - 1] == 9):
        end -= 1
        trailing_newlines += block[end] == 10
    out = np.empty(end + 2, np.uint8)
    out[0] = 91  # [
    newlines = 0
    for i in range(end):
        c = block[i]
        is_newline = c == 10
        newlines += is_newline
        out[i + 1] = 44 if is_newline else c  # ,
    out[end + 1] = 93  # ]
    return out, (newlines + 1 if end > 0 else 0), newlines + trailing_newlines
