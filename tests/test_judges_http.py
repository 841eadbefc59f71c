"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 that injects faults."""

import json
import sqlite3
from collections import Counter

import pytest

from honestci.audit.errors import InputError
from honestci.judges.backends.base import BackendFatalError
from honestci.judges.backends.openai_http import OpenAICompatibleBackend
from honestci.judges.backends.replay import ReplayBackend
from honestci.judges.prompts import get_template
from honestci.judges.run import load_texts, run_judging
from honestci.judges.stub_server import FAULTS, StubConfig, StubJudgeServer, preferred_position, write_stub_study
from honestci.judges.tables import read_rows


def _backend(server, **options):
    # A client timeout far above a stub's answer time even on a loaded machine: only a stall fault reaches it.
    settings = dict(concurrency=8, timeout_s=5.0, max_retries=4, backoff_base_s=0.005, backoff_cap_s=0.02, seed=1)
    settings.update(options)
    return OpenAICompatibleBackend(server.base_url, "stub-judge", **settings)


def _output(path):
    return [row.values for row in read_rows(path)]


def test_every_contest_ends_judged_or_counted_invalid_under_faults(tmp_path):
    study = write_stub_study(tmp_path, n_contests=40)
    doomed = ("7", "6")  # this ordered pair always gets HTTP 500: retries run out
    config = StubConfig(
        stall_s=4.0,  # well past the client's timeout below, which an unstalled answer never reaches
        seed=3,
        always_fail_pairs=frozenset({doomed}),
        scripted=FAULTS,
        fault_rates={
            "timeout": 0.04,
            "429": 0.1,
            "500": 0.1,
            "garbage": 0.05,
            "garbage_json": 0.05,
            "unparseable": 0.05,
        },
    )
    with StubJudgeServer(config) as server:
        summary = run_judging(
            study["contests"],
            load_texts(study["vignettes"], study["responses"]),
            _backend(server, timeout_s=1.5),
            get_template(),
            tmp_path / "out.jsonl",
            seed=11,
            progress=False,
        )
        log = list(server.log)
    rows = _output(tmp_path / "out.jsonl")
    pairs = Counter((r["response_first"], r["response_second"]) for r in rows)
    assert len(rows) == 80 and len(pairs) == 80  # both orders of 40 contests, each exactly once
    assert all((b, a) in pairs for a, b in pairs)
    outcomes = Counter(entry.outcome for entry in log)
    assert all(outcomes[fault] > 0 for fault in FAULTS)
    # Every request the server saw is an attempt recorded in the output: nothing vanished.
    assert sum(int(r["attempts"]) for r in rows) == len(log)
    assert summary.n_retries == len(log) - 80 and summary.n_retried_calls > 0
    for row in rows:
        pair = (row["response_first"], row["response_second"])
        final = [e.outcome for e in log if (e.first, e.second) == pair][-1]
        if pair == doomed:
            assert row["verdict"] == "invalid" and row["attempts"] == "5"
            assert row["invalid_reason"] == "gave up after 5 attempts; last: HTTP 500"
        elif final == "unparseable":
            assert row["verdict"] == "invalid" and row["invalid_reason"].startswith("unparseable")
        elif final == "ok":
            assert row["verdict"] == preferred_position(*pair)
            assert row["prompt_sha256"] == get_template().sha256
        else:  # the last attempt failed too: counted invalid with its reason, never guessed
            assert row["verdict"] == "invalid" and row["invalid_reason"].startswith("gave up")
    assert summary.n_invalid == sum(r["verdict"] == "invalid" for r in rows) >= 1
    assert summary.n_failed == sum(r["status"] == "failed" for r in rows) >= 1


def test_rerun_asks_nothing_and_retry_failed_asks_only_failures(tmp_path):
    study = write_stub_study(tmp_path, n_contests=6)
    texts = load_texts(study["vignettes"], study["responses"])
    config = StubConfig(always_fail_pairs=frozenset({("1", "0")}))
    with StubJudgeServer(config) as server:
        run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=1),
            get_template(),
            tmp_path / "a.jsonl",
            progress=False,
        )
        first_run = len(server.log)
        again = run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=1),
            get_template(),
            tmp_path / "a.jsonl",
            progress=False,
        )
        assert len(server.log) == first_run and again.n_asked == 0 and again.n_from_cache == 12
        retried = run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=1),
            get_template(),
            tmp_path / "a.jsonl",
            progress=False,
            retry_failed=True,
        )
        assert retried.n_asked == 1 and len(server.log) == first_run + 2
        # A different sampling setting is a different judgment: all asked again.
        other = run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=1),
            get_template(),
            tmp_path / "a.jsonl",
            progress=False,
            sampling={"temperature": 0.7, "max_tokens": 64},
        )
        assert other.n_asked == 12


def test_a_reply_with_null_content_is_a_failed_request_retried_not_an_invalid_verdict(tmp_path):
    study = write_stub_study(tmp_path, n_contests=2)
    texts = load_texts(study["vignettes"], study["responses"])
    # The first two requests get `content: null`: each is retried and then judged.
    with StubJudgeServer(StubConfig(scripted=("null_content", "null_content"))) as server:
        summary = run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=2),
            get_template(),
            tmp_path / "a.jsonl",
            progress=False,
        )
        assert summary.n_failed == 0 and summary.n_invalid == 0 and summary.n_retries == 2
    # Always null: the calls are cached as failed (invalid with the reason), and --retry-failed asks again.
    with StubJudgeServer(StubConfig(fault_rates={"null_content": 1.0})) as server:
        failed = run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=1),
            get_template(),
            tmp_path / "b.jsonl",
            progress=False,
        )
        assert failed.n_failed == 4 and "content: null" in str(failed.invalid_reasons)
        asked = len(server.log)
        again = run_judging(
            study["contests"],
            texts,
            _backend(server, max_retries=1),
            get_template(),
            tmp_path / "b.jsonl",
            progress=False,
            retry_failed=True,
        )
        assert again.n_asked == 4 and len(server.log) == asked + 8


def test_api_key_is_sent_but_never_stored_or_shown(tmp_path, monkeypatch):
    secret = "sk-test-5f1d0c9a-do-not-log"
    monkeypatch.setenv("HONESTCI_TEST_KEY", secret)
    study = write_stub_study(tmp_path, n_contests=3)
    with StubJudgeServer(StubConfig(fault_rates={"500": 0.3}, seed=2)) as server:
        backend = _backend(server, api_key_env="HONESTCI_TEST_KEY")
        summary = run_judging(
            study["contests"],
            load_texts(study["vignettes"], study["responses"]),
            backend,
            get_template(),
            tmp_path / "out.jsonl",
            progress=False,
        )
        assert server.authorizations == {f"Bearer {secret}"}
    assert secret not in repr(backend) and secret not in str(summary)
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path


def test_misconfigured_server_stops_the_run_and_keeps_finished_judgments(tmp_path):
    study = write_stub_study(tmp_path, n_contests=3)
    texts = load_texts(study["vignettes"], study["responses"])
    with StubJudgeServer() as server:
        run_judging(study["contests"], texts, _backend(server), get_template(), tmp_path / "out.jsonl", progress=False)
        wrong = OpenAICompatibleBackend(server.base_url.replace("/v1", "/v2"), "stub-judge", max_retries=0)
        with pytest.raises(BackendFatalError, match="HTTP 404"):
            run_judging(
                study["contests"],
                texts,
                wrong,
                get_template(),
                tmp_path / "out.jsonl",
                progress=False,
                retry_failed=True,
                sampling={"temperature": 0.0, "max_tokens": 7},
            )
    with sqlite3.connect(tmp_path / "out.jsonl.cache.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0] == 6


def test_connection_refused_is_retried_then_invalid(tmp_path):
    study = write_stub_study(tmp_path, n_contests=2)
    with StubJudgeServer() as server:
        url = server.base_url
    backend = OpenAICompatibleBackend(url, "gone", max_retries=2, backoff_base_s=0.001, timeout_s=0.5)
    summary = run_judging(
        study["contests"],
        load_texts(study["vignettes"], study["responses"]),
        backend,
        get_template(),
        tmp_path / "out.jsonl",
        progress=False,
    )
    rows = _output(tmp_path / "out.jsonl")
    assert summary.n_failed == 4 and {r["verdict"] for r in rows} == {"invalid"}
    assert all("connection error" in r["invalid_reason"] for r in rows)


def test_replay_reproduces_a_recorded_run_without_calls(tmp_path):
    study = write_stub_study(tmp_path, n_contests=8)
    texts = load_texts(study["vignettes"], study["responses"])
    with StubJudgeServer(StubConfig(fault_rates={"unparseable": 0.2}, seed=5)) as server:
        run_judging(study["contests"], texts, _backend(server), get_template(), tmp_path / "live.jsonl", progress=False)
    replay = ReplayBackend(tmp_path / "live.jsonl")
    summary = run_judging(
        study["contests"], texts, replay, get_template(), tmp_path / "replayed.csv", seed=99, progress=False
    )
    live = {
        (r["response_first"], r["response_second"]): (r["verdict"], r["raw"]) for r in _output(tmp_path / "live.jsonl")
    }
    replayed = {
        (r["response_first"], r["response_second"]): (r["verdict"], r["raw"])
        for r in _output(tmp_path / "replayed.csv")
    }
    assert replayed == live and summary.judge == "stub-judge" and summary.n_retries == 0
    # A contest with no recording becomes invalid with its reason.
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"vignette_id": "v0", "response_a": "0", "response_b": "10"}) + "\n")
    run_judging(
        extra, texts, ReplayBackend(tmp_path / "live.jsonl"), get_template(), tmp_path / "x.jsonl", progress=False
    )
    rows = _output(tmp_path / "x.jsonl")
    assert [r["invalid_reason"] for r in rows] == ["no recorded judgment for this ordered pair"] * 2


def test_bad_contests_are_reported_with_file_line_and_field(tmp_path):
    study = write_stub_study(tmp_path, n_contests=2)
    texts = load_texts(study["vignettes"], study["responses"])
    bad = tmp_path / "bad.csv"
    bad.write_text("vignette_id,response_a,response_b\nv0,0,1\nv9,0,1\nv1,2,99\nv1,0,2\n")
    with pytest.raises(InputError) as err:
        run_judging(bad, texts, ReplayBackend.__new__(ReplayBackend), get_template(), tmp_path / "o.jsonl")
    located = {(p.line, p.field) for p in err.value.problems}
    assert located == {(3, "vignette_id"), (3, "response_a"), (3, "response_b"), (4, "response_b"), (5, "response_a")}
