"""Compiled byte-level kernel of the leakage scan: tokens, word n-gram hashes and the index bitmap in one pass.

Imported only by the leakage scan's modules (:mod:`honestci.audit.checks.ngram_index`,
:mod:`honestci.audit.checks.corpus_reader`, :mod:`honestci.audit.checks.leakage`) when they hash or read
text (numba is a heavy import: about 0.6 s and 130 MB of resident LLVM). The kernels are compiled on first use (about 6 s) and cached on
disk (``cache=True``: beside this module in ``__pycache__``, or numba's per-user cache directory
when the install is read-only; with neither writable they are compiled in every process).

Definition (``honestci.audit.checks.ngram_index.reference_ngram_hashes`` is the pure-Python oracle of the same thing):

- a byte is mapped by ``table`` (ASCII letters lower-cased, digits and bytes ≥ 128 kept, every other
  byte → space); a token is a maximal run of non-space bytes inside one document;
- token hash t = splitmix64(FNV-1a-64(token bytes));
- the hash of the n-gram starting at token i is splitmix64(Σ_{m<n} t_{i+m} · B^(n−1−m) mod 2⁶⁴), B the
  golden-ratio constant 0x9E3779B97F4A7C15, updated as a rolling hash (subtract the leaving token
  times B^(n−1), multiply by B, add the entering token); n-grams never span two documents;
- an n-gram is returned when its bit ``hash >> shift`` is set in the packed ``bitmap`` (uint64 words).

:func:`scan_jsonl_block` applies the same definition to the top-level text string of each line
of a raw JSONL block, reading the JSON in the same compiled pass; lines it cannot read exactly are
left to the caller's exact path.
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
def count_newlines(block):
    """Newline bytes in a uint8 block (vectorised; ``bytes.count`` took about 1 ns a byte)."""
    count = 0
    for i in range(block.size):
        count += block[i] == 10
    return count


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


# --------------------------------------------------------------------------------------------
# Raw JSONL blocks: the text field's n-grams straight from the line bytes

#: Byte classes inside a JSON string: 0 plain (printable ASCII), 1 ``"``, 2 ``\``, 3 anything the fast
#: path leaves to the exact one (control bytes, the line's newline, bytes >= 128).
STRING_CLASS = np.array(
    [3 if (b < 32 or b >= 128) else 1 if b == 34 else 2 if b == 92 else 0 for b in range(256)], np.uint8
)
#: Escapes decoded by the fast path (``\" \\ \/ \b \f \n \r \t``; all decode to non-word bytes, i.e. a separator).
SIMPLE_ESCAPE = np.array([b in b'"\\/bfnrt' for b in range(256)], np.uint8)
_NEWLINE, _QUOTE, _MAX_DEPTH = 10, 34, 64


@njit_cached(nogil=True, inline="always")
def _skip_ws(block, i):
    """The first byte at or after ``i`` that is not JSON whitespace inside a line (space, tab, CR)."""
    c = block[i]
    while c == 32 or c == 9 or c == 13:
        i += 1
        c = block[i]
    return i


@njit_cached(nogil=True)
def _skip_string(block, i, string_class, simple_escape):
    """Index after the closing quote of the string whose body starts at ``i``; -1 to leave the line to the exact path."""
    while True:
        k = string_class[block[i]]
        if k == 0:
            i += 1
        elif k == 1:
            return i + 1
        elif k == 2 and simple_escape[block[i + 1]]:
            i += 2
        else:
            return -1


@njit_cached(nogil=True)
def _skip_number(block, i):
    """Index after the JSON number at ``i`` (RFC 8259 grammar); -1 for anything else, or one too long to be sure of.

    At most 24 bytes and 2 exponent digits: every such number is finite as a double, which orjson requires.
    """
    start = i
    if block[i] == 45:  # -
        i += 1
    c = block[i]
    if c == 48:  # 0
        i += 1
    elif 49 <= c <= 57:
        while 48 <= block[i] <= 57:
            i += 1
    else:
        return -1
    if block[i] == 46:  # .
        i += 1
        if not 48 <= block[i] <= 57:
            return -1
        while 48 <= block[i] <= 57:
            i += 1
    if block[i] == 101 or block[i] == 69:  # e E
        i += 1
        if block[i] == 43 or block[i] == 45:
            i += 1
        digits = 0
        while 48 <= block[i] <= 57:
            i += 1
            digits += 1
        if digits == 0 or digits > 2:
            return -1
    return i if i - start <= 24 else -1


@njit_cached(nogil=True)
def _skip_literal(block, i, word):
    for m in range(word.size):  # byte by byte, so a mismatch stops at the line's newline at the latest
        if block[i + m] != word[m]:
            return -1
    return i + word.size


_TRUE, _FALSE, _NULL = (np.frombuffer(w, np.uint8).copy() for w in (b"true", b"false", b"null"))


@njit_cached(nogil=True)
def _skip_member_key(block, i, string_class, simple_escape):
    """Index after ``"key" :`` at ``i`` inside a nested object; -1 for anything else."""
    if block[i] != _QUOTE:
        return -1
    i = _skip_string(block, i + 1, string_class, simple_escape)
    if i < 0:
        return -1
    i = _skip_ws(block, i)
    return i + 1 if block[i] == 58 else -1  # :


@njit_cached(nogil=True)
def _skip_value(block, i, string_class, simple_escape, stack):
    """Index after the JSON value at ``i`` (nested objects and arrays validated); -1 to leave the line to the exact path."""
    depth = 0
    while True:
        i = _skip_ws(block, i)
        c = block[i]
        if c == _QUOTE:
            i = _skip_string(block, i + 1, string_class, simple_escape)
        elif c == 123 or c == 91:  # { [
            i = _skip_ws(block, i + 1)
            if block[i] == c + 2:  # } ]: empty
                i += 1
            else:
                if depth == stack.size:
                    return -1
                stack[depth] = c
                depth += 1
                if c == 123:
                    i = _skip_member_key(block, i, string_class, simple_escape)
                    if i < 0:
                        return -1
                continue  # the first member's value
        elif c == 45 or 48 <= c <= 57:
            i = _skip_number(block, i)
        elif c == 116:
            i = _skip_literal(block, i, _TRUE)
        elif c == 102:
            i = _skip_literal(block, i, _FALSE)
        elif c == 110:
            i = _skip_literal(block, i, _NULL)
        else:
            return -1
        if i < 0:
            return -1
        # a value ended: close containers until another member or element follows
        while True:
            if depth == 0:
                return i
            i = _skip_ws(block, i)
            c = block[i]
            top = stack[depth - 1]
            if c == 44:  # ,
                i = _skip_ws(block, i + 1)
                if top == 123:
                    i = _skip_member_key(block, i, string_class, simple_escape)
                    if i < 0:
                        return -1
                break
            if c == top + 2:
                depth -= 1
                i += 1
            else:
                return -1


_HIGH = np.uint64(0x8080808080808080)
_ONES = np.uint64(0x0101010101010101)
_SPACES = np.uint64(0x2020202020202020)
_QUOTES = np.uint64(0x2222222222222222)
_BACKSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)


@njit_cached(nogil=True)
def _plain_end(block, words, i, string_class):
    """The first index at or after ``i`` whose byte is not plain string content (``string_class`` != 0).

    Eight bytes at a time (SWAR): a word holds a byte >= 128, < 32, ``"`` or ``\\`` exactly when
    ``w & H``, ``(w - 0x20..) & ~w & H`` or the zero-byte test of ``w ^ 0x22..`` or ``w ^ 0x5C..``
    is non-zero (no false negatives); that word is then read byte by byte.
    """
    while i & 7 and string_class[block[i]] == 0:
        i += 1
    if i & 7:
        return i
    w = i >> 3
    while w < words.size:
        x = words[w]
        q = x ^ _QUOTES
        b = x ^ _BACKSLASHES
        special = (x | ((x - _SPACES) & ~x) | ((q - _ONES) & ~q) | ((b - _ONES) & ~b)) & _HIGH
        if special:
            break
        w += 1
    i = w << 3
    while string_class[block[i]] == 0:
        i += 1
    return i


@njit_cached(nogil=True, inline="always")
def _fnv_step(tokens, count, state, in_token, c):
    """One byte (already table-mapped) of the branch-free token loop of :func:`ngram_hashes`."""
    separator = c == _SPACE
    tokens[count] = state
    count += in_token & separator
    in_token = 1 - separator
    state = FNV_OFFSET if separator else (state ^ np.uint64(c)) * FNV_PRIME
    return count, state, in_token


@njit_cached(nogil=True)
def _token_states(src, start, stop, table, tokens):
    """FNV-1a-64 states of the tokens of ``table[src[start:stop]]`` into ``tokens``; returns their number.

    The FNV multiply chain (xor, multiply, select: about 5 cycles a byte) bounds one stream, so
    the text is cut at a separator near its middle and the two halves are hashed in one loop as
    two independent chains; a token never spans the cut, so the tokens are the same.
    """
    mid = start + (stop - start) // 2
    while mid < stop and table[src[mid]] != _SPACE:
        mid += 1
    # slices indexed by range variables: numba then emits no negative-index wraparound code
    # (which made this loop 30 % slower)
    src_a, src_b = src[start:mid], src[mid:stop]
    offset = src_a.size // 2 + 2  # the second half's tokens go after room for the first half's
    tokens_a, tokens_b = tokens[:offset], tokens[offset:]
    count_a, state_a, in_a = 0, FNV_OFFSET, 0
    count_b, state_b, in_b = 0, FNV_OFFSET, 0
    common = min(src_a.size, src_b.size)
    for k in range(common):
        count_a, state_a, in_a = _fnv_step(tokens_a, count_a, state_a, in_a, table[src_a[k]])
        count_b, state_b, in_b = _fnv_step(tokens_b, count_b, state_b, in_b, table[src_b[k]])
    for k in range(common, src_a.size):
        count_a, state_a, in_a = _fnv_step(tokens_a, count_a, state_a, in_a, table[src_a[k]])
    for k in range(common, src_b.size):
        count_b, state_b, in_b = _fnv_step(tokens_b, count_b, state_b, in_b, table[src_b[k]])
    tokens_a[count_a] = state_a
    count_a += in_a
    tokens_b[count_b] = state_b
    count_b += in_b
    for k in range(count_b):
        tokens[count_a + k] = tokens_b[k]
    return count_a + count_b


@njit_cached(nogil=True)
def _emit_ngrams(tokens, count, n, top, bitmap, shift, doc, out_hash, out_doc, out_pos, found):
    """The n-grams of one document's ``count >= n`` token states that pass the bitmap, appended at ``found``.

    Returns the new ``found``, or -1 when the output buffers are full.
    """
    for j in range(count):
        tokens[j] = splitmix64(tokens[j])
    rolling = np.uint64(0)
    for j in range(n):
        rolling = rolling * GOLDEN + tokens[j]
    entering = tokens[n:count]  # a slice, so no wraparound code for tokens[k + n]
    last = count - n
    for k in range(last + 1):  # the n-gram starting at token k
        h = splitmix64(rolling)
        bit = h >> shift
        if (bitmap[bit >> _S6] >> (bit & _LOW6)) & _ONE:
            if found == out_hash.size:
                return -1
            out_hash[found] = h
            out_doc[found] = doc
            out_pos[found] = k
            found += 1
        if k < last:
            rolling = (rolling - tokens[k] * top) * GOLDEN + entering[k]
    return found


@njit_cached(nogil=True)
def scan_jsonl_block(
    block,
    words,
    key,
    table,
    string_class,
    simple_escape,
    n,
    bitmap,
    shift,
    tokens,
    scratch,
    out_hash,
    out_doc,
    out_pos,
    doc_line,
    doc_start,
    doc_end,
    doc_fast,
):
    """Scan a block of whole JSONL lines: per line, the top-level ``key`` string's n-grams that pass the bitmap.

    ``block`` uint8, ending with a newline; ``words`` its first ``block.size // 8`` words as uint64;
    ``key`` the field name's bytes; ``tokens`` (uint64, at
    least ``block.size // 2 + 8``) and ``scratch`` (uint8, at least ``block.size``) scratch space;
    ``out_*`` and ``doc_*`` reused output buffers. Returns
    (documents, n-grams found, characters of the fast documents' texts, status): status 0 done, 1
    the document buffers or 2 the n-gram buffers are full (grow them and scan the block again).

    Each non-blank line (blank: only space, tab, CR, VT, FF, as ``bytes.strip`` sees it) is one
    document, numbered in line order, with its line index and byte span in ``doc_*``. It is
    *fast* (``doc_fast`` 1) when the line is one JSON object, printable ASCII only, whose strings
    use no escape but ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``, whose keys have no escape, that holds ``key``
    exactly once with a string value, and whose other values are strings, numbers that are
    finite doubles (at most 24 bytes, 2 exponent digits), literals, or arrays and objects nested
    at most 64 deep. Its text's tokens are hashed while the string is read: the decoded escapes
    are all non-word bytes, so each is a separator, and the bytes in between go through
    ``table`` exactly as :func:`ngram_hashes` maps them, so the n-grams equal those of the
    decoded text (see the module docstring). Any other line (invalid JSON included) is
    ``doc_fast`` 0 and left to the exact path (orjson, ``normalize``, :func:`ngram_hashes`),
    which also names a bad line.
    """
    size = block.size
    top = np.uint64(1)  # B^(n-1)
    for _ in range(n - 1):
        top = top * GOLDEN
    stack = np.empty(_MAX_DEPTH, np.uint8)
    n_docs = 0
    found = 0
    n_chars = 0
    line = 0
    s = 0
    while s < size:
        # blank line?
        i = s
        c = block[i]
        while c == 32 or c == 9 or c == 13 or c == 11 or c == 12:
            i += 1
            c = block[i]
        if c == _NEWLINE:
            s = i + 1
            line += 1
            continue
        if n_docs == doc_line.size:
            return n_docs, found, n_chars, 1
        fast = False
        seen = False
        count = 0
        chars = 0
        i = _skip_ws(block, s)
        if block[i] == 123:  # {
            i = _skip_ws(block, i + 1)
            while block[i] == _QUOTE:
                # a key: plain bytes only
                j = i + 1
                while string_class[block[j]] == 0:
                    j += 1
                if block[j] != _QUOTE:
                    break
                is_key = j - i - 1 == key.size
                if is_key:
                    for m in range(key.size):
                        if block[i + 1 + m] != key[m]:
                            is_key = False
                            break
                i = _skip_ws(block, j + 1)
                if block[i] != 58:  # :
                    break
                i = _skip_ws(block, i + 1)
                if is_key:
                    if seen or block[i] != _QUOTE:
                        break  # a second text field (orjson keeps the last), or not a string
                    seen = True
                    i += 1
                    j = _plain_end(block, words, i, string_class)
                    if block[j] == _QUOTE:  # no escape: hash the bytes where they are
                        count = _token_states(block, i, j, table, tokens)
                        chars = j - i
                    else:  # escapes: copy the string, each escape as one space (a separator)
                        o = j - i
                        scratch[:o] = block[i:j]
                        while block[j] == 92 and simple_escape[block[j + 1]]:
                            scratch[o] = _SPACE
                            o += 1
                            run = j + 2
                            j = _plain_end(block, words, run, string_class)
                            scratch[o : o + j - run] = block[run:j]
                            o += j - run
                        if block[j] != _QUOTE:
                            seen = False
                            break
                        count = _token_states(scratch, 0, o, table, tokens)
                        chars = o
                    i = j + 1
                else:
                    j = _skip_value(block, i, string_class, simple_escape, stack)
                    if j < 0:
                        break
                    i = j
                i = _skip_ws(block, i)
                if block[i] == 44:  # ,
                    i = _skip_ws(block, i + 1)
                    continue
                if block[i] == 125:  # }
                    i = _skip_ws(block, i + 1)
                    fast = seen and block[i] == _NEWLINE
                break
        while block[i] != _NEWLINE:
            i += 1
        doc_line[n_docs] = line
        doc_start[n_docs] = s
        doc_end[n_docs] = i
        doc_fast[n_docs] = fast
        if fast:
            n_chars += chars
            if count >= n:
                found = _emit_ngrams(tokens, count, n, top, bitmap, shift, n_docs, out_hash, out_doc, out_pos, found)
                if found < 0:
                    return n_docs, out_hash.size, n_chars, 2
        n_docs += 1
        s = i + 1
        line += 1
    return n_docs, found, n_chars, 0
