"""Judging across several OpenAI-compatible endpoints (judges/backends/fleet.py) against stub servers."""

import json
import sqlite3

import pytest
import yaml
from click.testing import CliRunner

from honestci.audit.cli.judges import judge_command
from honestci.audit.errors import InputError
from honestci.judges.backends.base import BackendFatalError
from honestci.judges.backends.batch import OpenAIBatchBackend
from honestci.judges.backends.fleet import WINDOW_S, Endpoint, FleetBackend, _Window, load_endpoints
from honestci.judges.backends.openai_http import OpenAICompatibleBackend
from honestci.judges.prompts import get_template
from honestci.judges.run import load_texts, run_judging
from honestci.judges.stub_server import StubConfig, StubJudgeServer, preferred_position, write_stub_study
from honestci.judges.tables import read_rows

# Fast backoff, and a client timeout no local stub reaches even on a loaded machine: no test here
# waits on it, and a 2 s one timed out at load ~30 on 2 cores (issue 33).
FAST = dict(timeout_s=60.0, max_retries=4, backoff_base_s=0.005, backoff_cap_s=0.02, seed=1)


def _verdicts(path):
    return {(r.values["response_first"], r.values["response_second"]): r.values["verdict"] for r in read_rows(path)}


def _closed_url():
    with StubJudgeServer() as gone:
        return gone.base_url  # nothing listens here any more: connection refused


@pytest.mark.parametrize("failure", ["refused", "http500"])
def test_one_failing_endpoint_of_two_every_contest_judged_as_with_one_endpoint(tmp_path, failure):
    study = write_stub_study(tmp_path, n_contests=30)
    texts = load_texts(study["vignettes"], study["responses"])
    with StubJudgeServer() as good, StubJudgeServer(StubConfig(fault_rates={"500": 1.0})) as bad:
        bad_url = _closed_url() if failure == "refused" else bad.base_url
        single = OpenAICompatibleBackend(good.base_url, "stub-judge", concurrency=4, **FAST)
        run_judging(study["contests"], texts, single, get_template(), tmp_path / "one.jsonl", progress=False)
        n_single = len(good.log)
        fleet = FleetBackend(
            [
                Endpoint(bad_url, "stub-judge", max_concurrency=4),
                Endpoint(good.base_url, "stub-judge", max_concurrency=4),
            ],
            cooldown_s=0.05,
            **FAST,
        )
        summary = run_judging(study["contests"], texts, fleet, get_template(), tmp_path / "two.jsonl", progress=False)
        table = fleet.endpoint_table().set_index("endpoint")
        assert len(good.log) - n_single == 60 == table.loc[good.base_url, "served"]
        assert table.loc[bad_url, "served"] == 0 and table.loc[bad_url, "failed_attempts"] >= 1
        if failure == "http500":
            assert len(bad.log) == table.loc[bad_url, "failed_attempts"]
        # A rerun through another set of endpoints asks nothing: the cache key holds the judge, not the server.
        again = run_judging(
            study["contests"],
            texts,
            FleetBackend([Endpoint(bad_url, "stub-judge")], cooldown_s=0.05, **FAST),
            get_template(),
            tmp_path / "two.jsonl",
            progress=False,
        )
    assert summary.n_invalid == 0 and summary.n_jobs == 60 and again.n_asked == 0
    two = _verdicts(tmp_path / "two.jsonl")
    assert two == _verdicts(tmp_path / "one.jsonl")
    assert all(v == preferred_position(*pair) for pair, v in two.items())
    with sqlite3.connect(tmp_path / "two.jsonl.cache.sqlite") as db:
        assert db.execute("SELECT COUNT(*), SUM(status = 'ok') FROM judgments").fetchone() == (60, 60)


def test_requests_per_minute_budgets_split_the_requests_in_proportion(tmp_path):
    # 80 judgments against budgets of 60 and 20 requests a minute: the run fits in one window only
    # if each endpoint takes exactly its budget (the run takes a second, far under 60 s).
    study = write_stub_study(tmp_path, n_contests=40)
    with StubJudgeServer() as a, StubJudgeServer() as b:
        fleet = FleetBackend(
            [
                Endpoint(a.base_url, "stub-judge", max_concurrency=4, requests_per_minute=60),
                Endpoint(b.base_url, "stub-judge", max_concurrency=4, requests_per_minute=20),
            ],
            **FAST,
        )
        summary = run_judging(
            study["contests"],
            load_texts(study["vignettes"], study["responses"]),
            fleet,
            get_template(),
            tmp_path / "out.jsonl",
            progress=False,
        )
        assert (len(a.log), len(b.log)) == (60, 20)
    assert summary.n_invalid == 0 and summary.elapsed_s < WINDOW_S


def test_budget_window_waits_against_hand_computed_times():
    window = _Window()
    assert window.wait_s(0.0, 500, rpm=2, tpm=1000) == 0.0
    window.entries.extend([[0.0, 600.0], [10.0, 300.0]])
    # Two requests in the window: the third may go when the first leaves it, at 0 + 60 s.
    assert window.wait_s(20.0, 1, rpm=2, tpm=None) == pytest.approx(40.0)
    # 900 tokens spent: 100 more fit now; 400 more fit once the 600 leave (at 60 s); 800 once both leave (70 s).
    assert window.wait_s(20.0, 100, rpm=None, tpm=1000) == 0.0
    assert window.wait_s(20.0, 400, rpm=None, tpm=1000) == pytest.approx(40.0)
    assert window.wait_s(20.0, 800, rpm=None, tpm=1000) == pytest.approx(50.0)
    # After 60 s the first entry is gone; a request larger than the budget goes alone into an empty window.
    assert window.wait_s(65.0, 1, rpm=2, tpm=None) == 0.0 and len(window.entries) == 1
    assert _Window().wait_s(0.0, 5000, rpm=None, tpm=1000) == 0.0


def test_token_budget_is_corrected_by_the_usage_the_server_reports(tmp_path):
    study = write_stub_study(tmp_path, n_contests=3)
    with StubJudgeServer() as server:
        fleet = FleetBackend([Endpoint(server.base_url, "stub-judge", tokens_per_minute=10**6)], **FAST)
        run_judging(
            study["contests"],
            load_texts(study["vignettes"], study["responses"]),
            fleet,
            get_template(),
            tmp_path / "out.jsonl",
            sampling={"temperature": 0.0, "max_tokens": 4000},
            progress=False,
        )
    spent = [tokens for _, tokens in fleet._states[0].window.entries]
    # The stub reports len(user message) // 4 prompt tokens + 12 completion tokens, far under the
    # 4000-token estimate; the window holds the reported counts.
    assert len(spent) == 6 and all(12 < t < 4000 for t in spent)
    assert sum(spent) == fleet.endpoint_table()["reported_tokens"].sum()


def test_fleet_configuration_errors(tmp_path):
    with pytest.raises(BackendFatalError, match="different models"):
        FleetBackend([Endpoint("http://127.0.0.1:1/v1", "a"), Endpoint("http://127.0.0.1:2/v1", "b")])
    with pytest.raises(BackendFatalError, match="listed twice"):
        FleetBackend([Endpoint("http://127.0.0.1:1/v1", "a"), Endpoint("http://127.0.0.1:1/v1/", "a")])
    bad = tmp_path / "endpoints.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "endpoints": [
                    {"base_url": "http://127.0.0.1:1/v1", "requests_per_minute": 0},
                    {"model": "m", "tokens": 5},
                    "http://x",
                ]
            }
        )
    )
    with pytest.raises(InputError) as err:
        load_endpoints(bad, model="m")
    assert {p.field for p in err.value.problems} == {
        "endpoints[0].requests_per_minute",
        "endpoints[1].tokens",
        "endpoints[1].base_url",
        "endpoints[2]",
    }
    good = tmp_path / "good.yaml"
    good.write_text(
        "model: m\nmax_concurrency: 3\nendpoints:\n  - base_url: http://127.0.0.1:1/v1\n"
        "  - {base_url: 'http://127.0.0.1:2/v1', max_concurrency: 5, tokens_per_minute: 9000}\n"
    )
    assert load_endpoints(good) == [
        Endpoint("http://127.0.0.1:1/v1", "m", max_concurrency=3),
        Endpoint("http://127.0.0.1:2/v1", "m", max_concurrency=5, tokens_per_minute=9000),
    ]


def test_cli_repeated_base_url_and_endpoints_file(tmp_path):
    study = write_stub_study(tmp_path, n_contests=4)
    common = ["--vignettes", str(study["vignettes"]), "--responses", str(study["responses"]), "--no-progress"]
    common += ["--model", "stub-judge", "--backoff-base", "0.005", "--backoff-cap", "0.02", "--cooldown", "0.05"]
    dead = _closed_url()
    with StubJudgeServer() as server:
        out = tmp_path / "cli.jsonl"
        args = [str(study["contests"]), "--out", str(out), "--base-url", dead, "--base-url", server.base_url]
        result = CliRunner().invoke(judge_command, args + common)
        assert result.exit_code == 0, result.output
        assert "per endpoint:" in result.output and server.base_url in result.output
        assert set(_verdicts(out).values()) <= {"first", "second", "tie"} and len(_verdicts(out)) == 8
        spec = tmp_path / "endpoints.yaml"
        spec.write_text(yaml.safe_dump({"endpoints": [{"base_url": server.base_url, "requests_per_minute": 0}]}))
        bad = CliRunner().invoke(
            judge_command, [str(study["contests"]), "--out", str(out), "--endpoints", str(spec)] + common
        )
        assert bad.exit_code == 2 and "endpoints[0].requests_per_minute" in bad.output
        both = CliRunner().invoke(
            judge_command,
            [str(study["contests"]), "--out", str(out), "--endpoints", str(spec), "--base-url", dead] + common,
        )
        assert both.exit_code == 2 and "not both" in both.output


def test_batch_api_round_trip_through_the_cache(tmp_path):
    study = write_stub_study(tmp_path, n_contests=12)
    texts = load_texts(study["vignettes"], study["responses"])
    # About one request in five fails inside the batch (seeded draw): cached as failed, asked again on --retry-failed.
    with StubJudgeServer(StubConfig(fault_rates={"500": 0.2}, seed=4)) as server:
        live = OpenAICompatibleBackend(server.base_url, "stub-judge", **FAST)
        run_judging(study["contests"], texts, live, get_template(), tmp_path / "http.jsonl", progress=False)
        n_http = len(server.log)

        def batch_run(**options):
            backend = OpenAIBatchBackend(server.base_url, "stub-judge", poll_s=0.01)
            summary = run_judging(
                study["contests"], texts, backend, get_template(), tmp_path / "batch.jsonl", progress=False, **options
            )
            return summary, backend

        first, backend = batch_run()
        assert len(backend.batch_ids) == 1 and len(server.log) - n_http == 24
        uploaded = [json.loads(line) for line in server.files["file-0"].decode().splitlines()]
        assert len(uploaded) == 24 and all(
            set(line) == {"custom_id", "method", "url", "body"} and line["url"] == "/v1/chat/completions"
            for line in uploaded
        )
        failed = sum(e.outcome == "batch:500" for e in server.log[n_http:])
        assert failed >= 1 and first.n_failed == failed and "HTTP 500 (batch result)" in str(first.invalid_reasons)
        again, _ = batch_run()
        assert again.n_asked == 0
        retried, backend = batch_run(retry_failed=True)
        assert retried.n_asked == failed and len(server.log) - n_http == 24 + failed
    batch_verdicts = _verdicts(tmp_path / "batch.jsonl")
    http_verdicts = _verdicts(tmp_path / "http.jsonl")
    ok = {pair for pair, v in batch_verdicts.items() if v != "invalid"}
    assert all(batch_verdicts[p] == http_verdicts[p] == preferred_position(*p) for p in ok)
    assert len(ok) == 24 - retried.n_failed


def test_cli_batch_round_trip_and_misuse(tmp_path):
    study = write_stub_study(tmp_path, n_contests=3)
    common = ["--vignettes", str(study["vignettes"]), "--responses", str(study["responses"]), "--no-progress"]
    common += ["--model", "stub-judge", "--out", str(tmp_path / "b.jsonl"), str(study["contests"])]
    with StubJudgeServer() as server:
        result = CliRunner().invoke(
            judge_command, ["--batch", "--batch-poll", "0.01", "--base-url", server.base_url] + common
        )
        assert result.exit_code == 0, result.output
        assert len(server.batches) == 1 and len(_verdicts(tmp_path / "b.jsonl")) == 6
        two = ["--batch", "--base-url", server.base_url, "--base-url", _closed_url()]
        misuse = CliRunner().invoke(judge_command, two + common)
        assert misuse.exit_code == 2 and "single --base-url" in misuse.output
