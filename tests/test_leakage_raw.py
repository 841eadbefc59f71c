"""Leakage: the raw-JSONL fast path (n-grams hashed from the line bytes) equals the exact path (orjson, normalize)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from honestci.audit.checks import corpus_reader, ngram_index
from honestci.audit.checks import leakage as L
from honestci.audit.checks import ngram_kernel as K
from honestci.audit.checks.corpus_reader import DEFAULT_CHUNK_BYTES, iter_corpus
from honestci.audit.checks.leakage import (
    JsonlBlockBuffers,
    byte_ranges,
    scan_batch,
    scan_corpus,
    scan_jsonl_block,
    summarize_matches,
)
from honestci.audit.checks.ngram_index import build_index, hash_documents
from honestci.audit.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "study"
WORDS = ["alpha", "Beta", "GAMMA", "d3lta", "x", "yy", "z_z", "it's", "don't", "a-b", "42"]
PIECES = [
    '"',
    "\\",
    "/",
    "\n",
    "\t",
    "\r",
    "\b",
    "\f",
    "\x7f",
    ",",
    ".",
    "  ",
]  # JSON writes them as the fast path reads
OTHER = ["naïve", "ﬁne", "東京", "\x01", "é", "\u2028", "😀"]  # \u escapes or bytes >= 128: the exact path
KEYS = ["doc_id", "source", "text_", "xtext", "context", "Text", "meta", "n"]


def _exact(index, path, text_field="text", id_field="doc_id", chunk_bytes=DEFAULT_CHUNK_BYTES, byte_range=None):
    """The exact path: iter_corpus (orjson, one JSON array per block) and scan_batch (normalize + kernel)."""
    total = L._Matches()
    for ids, texts in iter_corpus(path, text_field, id_field, chunk_bytes, byte_range):
        total.merge(scan_batch(index, ids, texts))
    return total


def _fast(index, path, text_field="text", id_field="doc_id", chunk_bytes=DEFAULT_CHUNK_BYTES, byte_range=None):
    assert corpus_reader.corpus_kind(str(path)) == "jsonl"
    total = L._Matches()
    for part in L._scan_file(index, str(path), text_field, id_field, chunk_bytes, None, 0.0, byte_range):
        total.merge(part)
    return total


def _assert_same(index, a, b):
    assert (a.n_docs, a.n_bytes) == (b.n_docs, b.n_bytes)
    assert a.doc_ids == b.doc_ids
    sa, sb = summarize_matches(index, a, 0.5), summarize_matches(index, b, 0.5)
    assert sa.items.equals(sb.items)
    assert sa.documents.equals(sb.documents)


def _text(rng) -> str:
    pieces = PIECES + OTHER if rng.random() < 0.3 else PIECES
    parts = []
    for _ in range(int(rng.integers(0, 40))):
        parts.append(str(rng.choice(WORDS)) if rng.random() < 0.8 else str(rng.choice(pieces)))
        parts.append(" " if rng.random() < 0.8 else str(rng.choice(pieces)))
    return "".join(parts)


def _value(rng, depth=0):
    kind = int(rng.integers(0, 8 if depth < 3 else 5))
    if kind == 0:
        return _text(rng)[:20]
    if kind == 1:
        return int(rng.integers(-(10**12), 10**12))
    if kind == 2:
        return float(rng.normal() * 10.0 ** int(rng.integers(-30, 30)))
    if kind == 3:
        return [None, True, False][int(rng.integers(0, 3))]
    if kind == 4:
        return ""
    if kind in (5, 6):
        return {str(rng.choice(KEYS)): _value(rng, depth + 1) for _ in range(int(rng.integers(0, 3)))}
    return [_value(rng, depth + 1) for _ in range(int(rng.integers(0, 3)))]


def _line(rng, d: int) -> str:
    """One valid JSONL line with a string text: random fields before and after, separators, escapes."""
    fields = [("doc_id", f"d{d}" if rng.random() < 0.9 else int(d))] if rng.random() < 0.9 else []
    fields += [(str(rng.choice(KEYS)), _value(rng)) for _ in range(int(rng.integers(0, 4)))]
    for _ in range(1 + (rng.random() < 0.1)):  # sometimes a duplicate text key: orjson keeps the last one
        fields.insert(int(rng.integers(0, len(fields) + 1)), ("text", _text(rng)))
    ascii_only = bool(rng.random() < 0.5)  # json.dumps writes non-ASCII raw or as \u escapes
    comma, colon = [(", ", ": "), (",", ":"), (" ,\t", " :  ")][int(rng.integers(0, 3))]
    body = comma.join(json.dumps(k) + colon + json.dumps(v, ensure_ascii=ascii_only) for k, v in fields)
    line = [" {", "{", "{ \t"][int(rng.integers(0, 3))] + body + ["}", " } ", "}\t"][int(rng.integers(0, 3))]
    return line + ("\r" if rng.random() < 0.2 else "")


def _corpus(rng, n_lines: int, planted: list[str]) -> str:
    lines = []
    for d in range(n_lines):
        if rng.random() < 0.05:
            lines.append(["", "   ", "\t\r", "\x0b"][int(rng.integers(0, 4))])  # blank lines
        line = _line(rng, d)
        if planted and rng.random() < 0.15:  # an eval answer inside the text, escaped as JSON
            record = json.loads(line)
            record["text"] = record["text"] + " " + planted[int(rng.integers(0, len(planted)))] + " tail"
            line = json.dumps(record, ensure_ascii=bool(rng.random() < 0.5))
        lines.append(line)
    return "\n".join(lines) + ("\n" if rng.random() < 0.5 else "")


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_equals_the_exact_path_on_randomized_corpora(tmp_path, seed):
    rng = np.random.default_rng(seed)
    answers = {f"e{i}": " ".join(rng.choice(WORDS[:8], 12)) + ' say "hi"\\n' for i in range(8)}
    answers["uni"] = "naïve ﬁne 東京 café straße tower one two three four five"
    index = build_index(answers, 3)
    path = tmp_path / "c.jsonl"
    path.write_text(_corpus(rng, 400, list(answers.values())), encoding="utf-8")
    for chunk_bytes in (1, 997, 1 << 20):
        exact, fast = _exact(index, path, chunk_bytes=chunk_bytes), _fast(index, path, chunk_bytes=chunk_bytes)
        _assert_same(index, exact, fast)
    assert fast.n_docs == sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
    assert summarize_matches(index, fast, 0.5).items["matched_ngrams"].sum() > 0  # the test can fail
    # byte ranges with no id field: documents named <file>@<offset> in both paths
    for r in byte_ranges(path, 4099):
        _assert_same(
            index, _exact(index, path, id_field=None, byte_range=r), _fast(index, path, id_field=None, byte_range=r)
        )


def _kernel(block: bytes, n: int, text_field: str = "text", buffers: JsonlBlockBuffers | None = None):
    """The compiled block scan with a bitmap that passes every n-gram (hash, doc, position, fast, chars)."""
    b = buffers or JsonlBlockBuffers()
    data = np.frombuffer(block, np.uint8)
    b.fit(data.size)
    key = np.frombuffer(text_field.encode(), np.uint8)
    bitmap, shift = ngram_index._PASS_ALL
    while True:
        args = (b.tokens, b.scratch, b.hashes, b.doc, b.position, b.line, b.start, b.end, b.fast)
        docs, found, chars, status = K.scan_jsonl_block(
            data,
            data[: data.size // 8 * 8].view(np.uint64),
            key,
            ngram_index.BYTE_TABLE,
            K.STRING_CLASS,
            K.SIMPLE_ESCAPE,
            n,
            bitmap,
            np.uint64(shift),
            *args,
        )
        if status == 0:
            return b.hashes[:found], b.doc[:found], b.position[:found], b.fast[:docs].astype(bool), chars
        b.grow_docs() if status == 1 else b.grow_ngrams()


@pytest.mark.parametrize(
    ("line", "fast"),
    [
        ('{"text": "plain words here"}', True),
        ('{"text": "tab\\tquote\\" slash\\/ back\\\\ nl\\n cr\\r bs\\b ff\\f"}', True),
        ('{"doc_id": 3, "meta": {"a": [1, -2.5e-07, {"b": null}], "c": []}, "text": "x y z", "z": true}', True),
        ('{"context": "not it", "text_": "nor this", "xtext": "no", "text": "yes this"}', True),
        ('{"text": "caf\\u00e9"}', False),  # \u escape
        ('{"text": "café"}', False),  # a byte >= 128
        ('{"doc_id": "é", "text": "ascii"}', False),  # non-ASCII elsewhere in the line
        ('{"text": "a", "text": "b c d"}', False),  # duplicate key: orjson keeps the last
        ('{"te\\u0078t": "escaped key"}', False),
        ('{"n": 1e999, "text": "inf"}', False),  # orjson refuses an infinite number
        ('{"n": 12345678901234567890123456, "text": "long"}', False),
        ('{"n": ' + "[" * 70 + "]" * 70 + ', "text": "nested deeper than 64"}', False),
        ('{"n": ' + "[" * 60 + "]" * 60 + ', "text": "nested 60 deep"}', True),
        ('{"n": 01, "text": "leading zero"}', False),
        ('{"n": tru, "text": "bad literal"}', False),
        ('{"text": 5}', False),
        ('{"doc_id": "no text"}', False),
        ("[1, 2]", False),
        ('{"text": "unterminated}', False),
        ('{"text": "ok"} trailing', False),
        ('{"text": "ctrl \x01 byte"}', False),
    ],
)
def test_kernel_takes_only_lines_it_can_hash_exactly(line, fast):
    hashes, _doc, position, is_fast, chars = _kernel((line + "\n").encode(), 1)
    assert is_fast.tolist() == [fast]
    if fast:
        text = json.loads(line)["text"]
        assert hashes.tolist() == hash_documents([text], 1).hashes.tolist()
        assert position.tolist() == list(range(hashes.size)) and chars == len(text)
    else:
        assert hashes.size == 0 and chars == 0


def test_kernel_equals_hash_documents_and_grows_its_buffers():
    rng = np.random.default_rng(11)
    lines = [_line(rng, d) for d in range(300)]
    block = ("\n\n".join(lines) + "\n").encode()
    records = [json.loads(line) for line in lines]
    tiny = JsonlBlockBuffers()
    tiny.hashes, tiny.doc, tiny.position = np.empty(1, np.uint64), np.empty(1, np.int32), np.empty(1, np.int32)
    tiny.line, tiny.start, tiny.end, tiny.fast = (np.empty(1, a.dtype) for a in (tiny.line,) * 3 + (tiny.fast,))
    for n in (1, 2, 5, 8):
        hashes, doc, position, fast, chars = _kernel(block, n, buffers=tiny if n == 5 else None)
        assert fast.size == len(lines) and 0.2 < fast.mean() < 0.9  # both paths exercised
        texts = [r["text"] for r, f in zip(records, fast) if f]
        expected = hash_documents(texts, n)
        assert hashes.tolist() == expected.hashes.tolist()
        assert doc.tolist() == np.flatnonzero(fast)[expected.doc].tolist()
        assert position.tolist() == expected.position.tolist() and chars == sum(map(len, texts))
    assert tiny.hashes.size > 1 and tiny.line.size > 1


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(st.text(max_size=60) | st.text(alphabet='ab cD,."\\/\n\té', max_size=40), max_size=5),
    n=st.sampled_from([1, 2, 3, 8]),
    ascii_only=st.booleans(),
)
def test_kernel_equals_the_exact_hashes_on_arbitrary_text(texts, n, ascii_only):
    block = "".join(json.dumps({"text": t}, ensure_ascii=ascii_only) + "\n" for t in texts).encode()
    hashes, doc, position, fast, chars = _kernel(block, n)
    kept = [t for t, f in zip(texts, fast) if f]
    expected = hash_documents(kept, n)
    assert hashes.tolist() == expected.hashes.tolist()
    assert doc.tolist() == np.flatnonzero(fast)[expected.doc].tolist()
    assert position.tolist() == expected.position.tolist()
    assert chars == sum(map(len, kept))
    # fast: every character written as itself or as one of the escapes \" \\ \b \f \n \r \t
    # (json.dumps writes DEL as \u007f when ensure_ascii)
    plain = " " + "".join(map(chr, range(0x21, 0x7F))) + ("" if ascii_only else "\x7f") + "\n\t\r\b\f"
    assert fast.tolist() == [all(c in plain for c in t) for t in texts]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not json", "c.jsonl:3: not valid JSON"),
        ('{"doc_id": "x"}', "c.jsonl:3: no text field 'text'"),
        ('{"text": 5}', "c.jsonl:3: no text field"),
    ],
)
def test_a_bad_line_is_an_input_error_naming_it(tmp_path, bad, message):
    path = tmp_path / "c.jsonl"
    path.write_text('{"doc_id": "a", "text": "fine"}\n\n' + bad + '\n{"text": "after"}\n')
    index = build_index({"e": "one two three four"}, 2)
    for scan in (_exact, _fast):
        with pytest.raises(InputError, match=message):
            scan(index, path)
    with pytest.raises(InputError, match=message):
        scan_corpus(index, path)


def test_the_fixture_corpus_leaks_are_found_by_the_fast_path():
    truth = json.loads((FIXTURE / "truth.json").read_text())["leakage"]
    responses = [json.loads(line) for line in (FIXTURE / "responses.jsonl").read_text().splitlines()]
    index = build_index({r["response_id"]: r["text"] for r in responses}, 8)
    path = FIXTURE / "corpus.jsonl"
    fast = _fast(index, path)
    _assert_same(index, _exact(index, path), fast)
    scan = summarize_matches(index, fast, 0.5)
    planted = {leak["response_id"]: leak["doc_id"] for leak in truth["verbatim"]}
    assert set(scan.leaked_items) == set(planted)
    items = scan.items.set_index("item_id")
    assert all(items.loc[r, "doc_ids"] == d for r, d in planted.items())


def test_scan_jsonl_block_names_documents_by_line_without_ids():
    index = build_index({"e": "one two three four"}, 2)
    block = b'{"text": "zero"}\n\n{"text": "x one two y"}\n{"text": "one two \\u00e9"}\n'
    out = scan_jsonl_block(index, block, corpus_reader.Locator("f.jsonl", 10, 0, block), id_field=None)
    assert out.doc_ids == ["f.jsonl:13", "f.jsonl:14"] and out.n_docs == 3
    assert out.n_bytes == len("zero") + len("x one two y") + len("one two é")


@pytest.mark.parametrize("special", ['"', "\\", "/", "\n", "é", "\x01", "\x7f", "\u2028"])
def test_the_eight_byte_string_scan_stops_at_a_special_byte_at_every_offset(special):
    # the text is read a word (8 bytes) at a time: put the byte that ends a plain run at every
    # offset of the word, after the key's own offset, and in the last partial word of the block
    texts = ["ab" * (k // 2) + "a" * (k % 2) + special + " cd ef" for k in range(24)]
    texts += [t + "x" * k for k, t in enumerate(texts[:8])]
    for ascii_only in (True, False):
        lines = [json.dumps({"text": t}, ensure_ascii=ascii_only) for t in texts]
        block = ("\n".join(lines) + "\n").encode()
        hashes, doc, position, fast, chars = _kernel(block, 2)
        kept = [t for t, f in zip(texts, fast) if f]
        expected = hash_documents(kept, 2)
        assert hashes.tolist() == expected.hashes.tolist() and chars == sum(map(len, kept))
        assert doc.tolist() == np.flatnonzero(fast)[expected.doc].tolist()
        assert position.tolist() == expected.position.tolist()
        assert fast.all() == (special in '"\\/\n' or (special == "\x7f" and not ascii_only))


def test_a_line_much_longer_than_the_block_is_scanned_whole(tmp_path):
    rng = np.random.default_rng(8)
    answer = "consider that the delay was caused by traffic not by a lack of care for you"
    long_text = " ".join(rng.choice(WORDS, 300_000)) + " " + answer + ' "end"'
    path = tmp_path / "c.jsonl"
    lines = [{"doc_id": "a", "text": "short"}, {"doc_id": "long", "text": long_text}, {"doc_id": "b", "text": "x"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    index = build_index({"e": answer}, 8)
    fast = _fast(index, path, chunk_bytes=4096)
    _assert_same(index, _exact(index, path, chunk_bytes=4096), fast)
    assert fast.doc_ids == ["long"] and summarize_matches(index, fast, 0.5).leaked_items == ("e",)
