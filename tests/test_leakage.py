"""Leakage: normalisation, vectorised n-gram hashing, streaming scans, fixture leaks, gate, Dask."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from honestci.audit.checks.corpus_reader import iter_corpus
from honestci.audit.checks.leakage import (
    byte_ranges,
    check_claim_leakage,
    leak_effect,
    scan_corpus,
    scan_corpus_dask,
    scan_texts,
)
from honestci.audit.checks.ngram_index import (
    build_index,
    hash_documents,
    normalize,
    reference_ngram_hashes,
    reference_token_hash,
    tokenize,
)
from honestci.audit.data.claims import load_claim
from honestci.audit.data.contests import build_contests
from honestci.audit.data.io import load_study
from honestci.audit.errors import InputError
from honestci.audit.gate_registry import run_gate
from honestci.audit.policy import Verdict

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "study"

EVAL = {
    "a1": "Your coworker may well have expected you to speak up and add your part in the meeting.",
    "a2": "Consider that the delay was caused by traffic, not by a lack of care for you.",
    "short": "too short",
}
LEAK_DOC = (
    "Forum post. " + "Consider that the delay was caused by traffic, not by a lack of care for you." + " Thanks all."
)


def test_normalize_nfkc_case_punctuation_whitespace():
    assert normalize("It’s  FINE—really_.\n\tOK") == "it s fine really ok"
    assert normalize("ﬁne ｆｕｌｌ Ⅻ") == "fine full xii"  # NFKC folds ligatures, full width, numerals


def test_kernel_hashes_equal_the_pure_python_oracle():
    texts = [
        "Hello, World! a b c d e f g h i j",
        "Ünïcode ｆｕｌｌwidth ﬁ a b c d e f g h",
        "",
        "x y",
        "  --__  ",
        "ÀÉÎ straße İstanbul ΣΊΣΥΦΟΣ 東京 タワー",
        "tab\tnew\nline\r\x00nul x_y",
    ]
    for n in (1, 2, 3, 8, 13):
        chunk = hash_documents(texts, n)
        for d, text in enumerate(texts):
            expected = reference_ngram_hashes(text, n)
            assert chunk.hashes[chunk.doc == d].tolist() == expected
            assert chunk.position[chunk.doc == d].tolist() == list(range(len(expected)))
        assert chunk.n_tokens.tolist() == [len(normalize(t).split()) for t in texts]
    assert tokenize("Ünïcode ｆｕｌｌwidth") == normalize("Ünïcode ｆｕｌｌwidth").encode().split()


def test_token_hash_is_fnv1a_then_splitmix64():
    # FNV-1a-64 of b"a" is 0xaf63dc4c8601ec8c (the FNV reference test vector); splitmix64 of it
    # by the published constants (Steele, Lea & Flood 2014; Vigna's splitmix64.c)
    x = (0xAF63DC4C8601EC8C + 0x9E3779B97F4A7C15) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    assert reference_token_hash(b"a") == x ^ (x >> 31)
    # a unigram is the token hash mixed once more (Σ over one token, then splitmix64)
    assert hash_documents(["A"], 1).hashes.tolist() == reference_ngram_hashes("a", 1)


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(st.text(max_size=80) | st.text(alphabet="ab cD,.é", max_size=60), max_size=6),
    n=st.sampled_from([1, 2, 3, 5, 8, 13]),
)
def test_kernel_equals_the_oracle_on_arbitrary_text(texts, n):
    chunk = hash_documents(texts, n)
    for d, text in enumerate(texts):
        assert chunk.hashes[chunk.doc == d].tolist() == reference_ngram_hashes(text, n)
    assert chunk.n_tokens.tolist() == [len(normalize(t).split()) for t in texts]


def test_prefilter_keeps_every_indexed_ngram_and_drops_most_others():
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(500)]
    items = {f"e{i}": " ".join(rng.choice(vocab, 30)) for i in range(50)}
    index = build_index(items, 4)
    docs = [" ".join(rng.choice(vocab, 300)) for _ in range(200)] + list(items.values())
    every, kept = hash_documents(docs, 4), hash_documents(docs, 4, index)
    in_index = np.isin(every.hashes, index.keys)
    assert set(zip(every.doc[in_index].tolist(), every.position[in_index].tolist())) <= set(
        zip(kept.doc.tolist(), kept.position.tolist())
    )
    assert in_index.sum() >= 50 * 27 and kept.hashes.size < 0.05 * every.hashes.size


def test_ngrams_never_span_documents():
    assert hash_documents(["a b c", "d e f"], 4).hashes.size == 0
    assert hash_documents(["a b c d e f"], 4).hashes.size == 3
    # the same tokens across a document boundary do not form the n-gram
    assert hash_documents(["a b", "c d"], 4).hashes.size == 0


def test_scan_against_a_set_of_ngram_tuples(tmp_path):
    """Oracle: Python sets of normalised n-gram tuples (the baseline of bench/bench_leakage.py)."""
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(60)]
    eval_items = {f"e{i}": " ".join(rng.choice(vocab, 30)) for i in range(20)}
    docs = [" ".join(rng.choice(vocab, 200)) for _ in range(300)]
    docs[5] += " " + eval_items["e3"]
    docs[77] = eval_items["e9"][:60] + " filler " + docs[77]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"doc_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)))
    n = 5
    scan = scan_corpus(build_index(eval_items, n), path, chunk_bytes=4096)

    def grams(text):
        tokens = normalize(text).split()
        return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]

    corpus_grams = set().union(*(set(grams(t)) for t in docs))
    for row in scan.items.itertuples():
        item = set(grams(eval_items[row.item_id]))
        assert row.matched_ngrams == len(item & corpus_grams)
        assert row.overlap == pytest.approx(len(item & corpus_grams) / len(grams(eval_items[row.item_id])), abs=0.05)
    e3 = scan.items.set_index("item_id").loc["e3"]
    assert e3["longest_span"] == 30 and "d5" in e3["doc_ids"].split(";") and e3["leaked"]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet", ".txt", ".txt.gz"])
def test_every_corpus_format_finds_the_leak(tmp_path, suffix):
    docs = [("d0", "Nothing to see here, move along please."), ("d1", LEAK_DOC), ("d2", "Another clean one.")]
    path = tmp_path / f"corpus{suffix}"
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"doc_id": [d for d, _ in docs], "text": [t for _, t in docs]}), path)
    else:
        lines = (
            "".join(json.dumps({"doc_id": d, "text": t}) + "\n" for d, t in docs)
            if "jsonl" in suffix
            else "".join(t + "\n" for _, t in docs)
        )
        data = lines.encode()
        path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    scan = scan_corpus(build_index(EVAL, 8), path)
    assert scan.leaked_items == ("a2",)
    expected_doc = "d1" if "txt" not in suffix else f"{path.name}:2"
    assert scan.documents["doc_id"].tolist() == [expected_doc]
    short = scan.items.set_index("item_id").loc["short"]
    assert short["n_ngrams"] == 0 and not short["leaked"]  # shorter than n words: reported, never flagged


def test_bad_corpus_line_is_an_input_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"doc_id": "x", "text": "ok"}\nnot json\n')
    with pytest.raises(InputError, match="bad.jsonl:2"):
        scan_corpus(build_index(EVAL, 8), path)


@pytest.mark.parametrize("chunk_bytes", [1, 37, 1 << 20])
def test_iter_corpus_blocks_keep_line_numbers_blank_lines_and_missing_ids(tmp_path, chunk_bytes):
    lines = [
        '{"doc_id": "a", "text": "one"}',
        "",
        '{"text": "two"}',
        "   ",
        '{"doc_id": 7, "text": "thr\\u00e9e"}',
        '{"text": "four"}\r',
    ]
    path = tmp_path / "c.jsonl"
    path.write_bytes(("\n".join(lines) + "\n\n").encode())
    ids, texts = map(lambda parts: sum(parts, []), zip(*iter_corpus(path, chunk_bytes=chunk_bytes)))
    assert ids == ["a", "c.jsonl:3", "7", "c.jsonl:6"] and texts == ["one", "two", "thrée", "four"]
    path.write_bytes(("\n".join(lines[:3] + ["{not json"] + lines[3:])).encode())
    with pytest.raises(InputError, match="c.jsonl:4: not valid JSON"):
        list(iter_corpus(path, chunk_bytes=chunk_bytes))


@pytest.mark.parametrize("suffix", [".jsonl", ".txt"])
def test_byte_ranges_partition_the_lines_and_name_them_by_offset(tmp_path, suffix):
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(["x", "yy", "zzz"], rng.integers(0, 9))) for _ in range(60)]
    body = (
        "".join(json.dumps({"text": t}) + "\n" for t in texts)
        if suffix == ".jsonl"
        else "".join(t + "\n" for t in texts)
    ).encode()
    path = tmp_path / f"c{suffix}"
    path.write_bytes(body)
    whole_ids, whole = map(lambda parts: sum(parts, []), zip(*iter_corpus(path, id_field=None)))
    assert whole == texts and whole_ids == [f"{path.name}:{i + 1}" for i in range(60)]
    parts = [
        batch for r in byte_ranges(path, 53) for batch in iter_corpus(path, id_field=None, chunk_bytes=40, byte_range=r)
    ]
    ids, ranged = sum([p[0] for p in parts], []), sum([p[1] for p in parts], [])
    assert ranged == texts
    line_starts = np.concatenate(([0], np.flatnonzero(np.frombuffer(body, np.uint8) == 10)[:-1] + 1))
    assert ids == [f"{path.name}@{s}" for s in line_starts]


# ---------------------------------------------------------------------------- the fixture


@pytest.fixture(scope="module")
def fixture_check():
    claim = load_claim(FIXTURE / "claim-leakage.yaml")
    study = load_study(claim.data_paths)
    contests = build_contests(study, claim.spec.policy, claim.spec.opponent, claim.spec.judge)
    return claim, study, contests, check_claim_leakage(study, contests)


def test_every_planted_leak_is_found_with_no_false_positive(fixture_check):
    *_, check = fixture_check
    truth = json.loads((FIXTURE / "truth.json").read_text())["leakage"]
    planted = {leak["response_id"]: leak["doc_id"] for leak in truth["verbatim"]}
    items = check.scan.items.set_index("item_id")
    assert set(check.scan.leaked_items) == set(planted)
    for response, doc in planted.items():
        assert items.loc[response, "doc_ids"] == doc
        assert items.loc[response, "overlap"] == 1.0
        assert items.loc[response, "longest_span"] == items.loc[response, "n_tokens"]
    flagged_docs = set(check.scan.documents.loc[check.scan.documents["leaks"] != "", "doc_id"])
    assert flagged_docs == set(planted.values())
    paraphrase = truth["paraphrase"][0]
    assert check.scan.near_duplicate_items == (paraphrase["response_id"],)
    assert items.loc[paraphrase["response_id"], "near_doc_id"] == paraphrase["doc_id"]
    assert not items.loc[paraphrase["response_id"], "leaked"]  # exact 8-grams alone miss the paraphrase


def test_clean_vs_leaked_scores_and_gate(fixture_check):
    _claim, _study, contests, check = fixture_check
    effect = check.effect
    # the 4 leaked opponent answers each meet the policy in 3 runs: 12 contests
    assert effect.n_leaked == 12 and effect.n_contests == 720
    scored = contests.scores("both_orders")
    assert effect.clean_estimate == pytest.approx(
        scored.values[
            ~scored.frame["contest_id"].isin(
                contests.frame.loc[contests.frame["opponent_response"].isin(check.scan.leaked_items), "contest_id"]
            )
        ].mean()
    )
    assert effect.difference_ci[0] <= effect.difference <= effect.difference_ci[1]

    class Ctx:
        checks = {"leakage": check}

    gate = run_gate("leakage", Ctx)
    assert gate.verdict == Verdict.FAIL and "gpt4-v3-33" in gate.message
    Ctx.checks = {"leakage": None}
    assert run_gate("leakage", Ctx).verdict == Verdict.INCONCLUSIVE
    section = check.report_section()
    assert section.key == "leakage" and len(section.table) >= 5


def test_leak_effect_matches_a_two_group_ols():
    # with one contest per row, OLS on [1, leaked] gives the difference of group means
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(10), 8)
    leaked = rng.random(80) < 0.3
    y = rng.integers(0, 3, 80) / 2
    effect = leak_effect(y, clusters, leaked)
    assert effect.difference == pytest.approx(y[leaked].mean() - y[~leaked].mean())
    assert effect.clean_estimate == pytest.approx(y[~leaked].mean())


def test_check_returns_none_without_a_corpus(fixture_check):
    from honestci.audit.checks.leakage import leakage_check

    claim, study, contests, _ = fixture_check

    class Ctx:
        pass

    ctx = Ctx()
    ctx.claim, ctx.contests = claim, contests
    ctx.study = type(study)(study.vignettes, study.responses, study.judgments)
    assert leakage_check(ctx) is None


# ---------------------------------------------------------------------------- distributed


def test_dask_local_cluster_scan_equals_the_serial_scan(tmp_path):
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(50)]
    docs = [" ".join(rng.choice(vocab, 120)) for _ in range(400)]
    docs[123] += " " + EVAL["a1"]
    docs[399] = EVAL["a2"]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"doc_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)))
    index = build_index(EVAL, 8)
    serial = scan_corpus(index, path)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        parallel = scan_corpus_dask(index, path, client, block_bytes=7919)  # many ranges, cut mid-line
    assert parallel.n_docs == serial.n_docs == 400
    assert parallel.leaked_items == serial.leaked_items == ("a1", "a2")
    cols = ["item_id", "matched_ngrams", "longest_span", "doc_ids"]
    assert parallel.items[cols].equals(serial.items[cols])


def test_scan_texts_equals_scan_corpus(tmp_path):
    docs = [("d0", "clean text only"), ("d1", LEAK_DOC)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"doc_id": d, "text": t}) + "\n" for d, t in docs))
    index = build_index(EVAL, 8)
    a = scan_corpus(index, path)
    b = scan_texts(index, [d for d, _ in docs], [t for _, t in docs])
    assert a.items.drop(columns=[]).equals(b.items)


def test_cli_leakage_exits_1_on_the_fixture_leaks_and_2_on_bad_input(tmp_path):
    from click.testing import CliRunner

    from honestci.audit.cli.selection import leakage

    runner = CliRunner()
    result = runner.invoke(
        leakage,
        ["--eval", str(FIXTURE / "responses.jsonl"), "--corpus", str(FIXTURE / "corpus.jsonl"), "--out", str(tmp_path)],
    )
    assert result.exit_code == 1, result.output
    assert "gpt4-v3-33" in result.output and (tmp_path / "leakage_items.csv").exists()
    clean = tmp_path / "clean.jsonl"
    clean.write_text('{"doc_id": "d1", "text": "nothing from the eval answers is written here at all"}\n')
    passed = runner.invoke(leakage, ["--eval", str(FIXTURE / "responses.jsonl"), "--corpus", str(clean)])
    assert passed.exit_code == 0 and "gate leakage: PASS" in passed.output, passed.output
    bad = runner.invoke(
        leakage,
        ["--eval", str(FIXTURE / "responses.jsonl"), "--eval-id", "nope", "--corpus", str(FIXTURE / "corpus.jsonl")],
    )
    assert bad.exit_code == 2 and "nope" in bad.output
