"""Templates, both-order schedule, cache keys and the CLI."""

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from honestci.audit.cli.judges import import_command, judge_command
from honestci.audit.errors import InputError
from honestci.judges.cache import CachedJudgment, CacheKey, JudgmentCache, texts_sha256
from honestci.judges.importers_alpaca import import_alpaca_eval
from honestci.judges.prompts import DEFAULT_TEMPLATE, PairwiseTemplate, get_template
from honestci.judges.schedule import Contest, schedule_both_orders
from honestci.judges.stub_server import StubConfig, StubJudgeServer, preferred_position, write_stub_study
from honestci.judges.tables import read_rows


def test_default_template_asks_reappraisal_effectiveness_and_hash_is_pinned():
    template = get_template()
    assert template.label == DEFAULT_TEMPLATE == "reappraisal-effectiveness@v1"
    assert "more effectively reduce the negative emotion of the person in the scenario" in template.user
    assert all(token in template.user for token in ('"[[A]]"', '"[[B]]"', '"[[C]]"'))
    # The hash is of the template text; pinned so that any edit shows up as a new template version.
    expected = hashlib.sha256((template.system + "\x00" + template.user).encode()).hexdigest()
    assert template.sha256 == expected == "1bfde759c267c0fe0aecad2b6c214d778172ebf178fa1967df2f0bf1754301bc"


def test_render_shows_first_response_in_position_a_and_leaves_braces_alone():
    messages = get_template().render("scenario {x}", "first {response_b}", "second")
    user = messages[-1]["content"]
    assert messages[0]["role"] == "system"
    assert user.index("first {response_b}") < user.index("[Reappraisal B]") < user.index("second")
    with pytest.raises(InputError):
        PairwiseTemplate("broken", "1", "", "only {scenario} and {response_a}")


def test_custom_template_from_yaml(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: terse\nversion: 2\nsystem: ''\nuser: 'Q {scenario} A {response_a} B {response_b}'\n")
    template = get_template(path)
    assert template.label == "terse@v2" and template.render("q", "a", "b") == [
        {"role": "user", "content": "Q q A a B b"}
    ]
    with pytest.raises(InputError):
        get_template("no-such-template")


def test_schedule_has_both_orders_of_every_contest_in_seeded_order():
    contests = [Contest(f"v{i % 3}", f"r{2 * i}", f"r{2 * i + 1}") for i in range(20)]
    schedule = schedule_both_orders(contests, 5)
    ordered = [(j.response_first, j.response_second) for j in schedule.jobs]
    assert len(ordered) == 40 and len(set(ordered)) == 40
    assert all((b, a) in ordered for a, b in ordered)
    assert schedule.seed == 5
    assert ordered == [(j.response_first, j.response_second) for j in schedule_both_orders(contests, 5).jobs]
    assert ordered != [(j.response_first, j.response_second) for j in schedule_both_orders(contests, 6).jobs]
    # Interleaved: the swapped orders are not all at the end.
    swapped_positions = np.flatnonzero(schedule.to_frame()["swapped"].to_numpy())
    assert swapped_positions.min() < 20 <= swapped_positions.max()
    generator_schedule = schedule_both_orders(contests, np.random.default_rng(5))
    assert generator_schedule.seed == 5 and generator_schedule.jobs == schedule.jobs


def test_schedule_rejects_self_contests_and_duplicates():
    with pytest.raises(InputError) as err:
        schedule_both_orders([Contest("v", "a", "b"), Contest("v", "b", "a"), Contest("v", "c", "c")], 0)
    assert [p.line for p in err.value.problems] == [2, 3]


def _record(key, verdict="first"):
    return CachedJudgment(key, "v", verdict, "[[A]]", "f" * 64, "ok", None, 1)


def test_cache_key_covers_judge_template_order_texts_and_sampling(tmp_path):
    base = CacheKey("judge", "t" * 64, "r1", "r2", texts_sha256("s", "a", "b"), json.dumps({"temperature": 0}))
    variants = [
        CacheKey("other", *list(base.__dict__.values())[1:]),
        CacheKey(base.judge, "u" * 64, "r1", "r2", base.texts_sha256, base.sampling_json),
        CacheKey(base.judge, base.template_sha256, "r2", "r1", base.texts_sha256, base.sampling_json),
        CacheKey(base.judge, base.template_sha256, "r1", "r2", texts_sha256("s", "a", "b!"), base.sampling_json),
        CacheKey(base.judge, base.template_sha256, "r1", "r2", base.texts_sha256, '{"temperature":1}'),
    ]
    assert len({k.digest for k in [base, *variants]}) == 6
    with JudgmentCache(tmp_path / "c.sqlite") as cache:
        cache.put(_record(base))
        assert set(cache.get_many([base, *variants])) == {base.digest}
    with JudgmentCache(tmp_path / "c.sqlite") as reopened:  # committed, survives closing
        assert reopened.get_many([base])[base.digest].verdict == "first"
        assert reopened._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_cli_judge_and_import_round_trip(tmp_path):
    study = write_stub_study(tmp_path, n_contests=4)
    runner = CliRunner()
    with StubJudgeServer(StubConfig()) as server:
        result = runner.invoke(
            judge_command,
            [
                str(study["contests"]),
                "--vignettes",
                str(study["vignettes"]),
                "--responses",
                str(study["responses"]),
                "--out",
                str(tmp_path / "j.csv"),
                "--base-url",
                server.base_url,
                "--model",
                "stub-judge",
                "--no-progress",
            ],
        )
    assert result.exit_code == 0, result.output
    rows = [r.values for r in read_rows(tmp_path / "j.csv")]
    assert len(rows) == 8 and all(
        r["verdict"] == preferred_position(r["response_first"], r["response_second"]) for r in rows
    )
    result = runner.invoke(
        import_command,
        [
            "generic",
            str(tmp_path / "j.csv"),
            "--out",
            str(tmp_path / "g.jsonl"),
            "--map",
            "judge=judge",
            "--map",
            "vignette_id=vignette_id",
            "--map",
            "response_first=response_first",
            "--map",
            "response_second=response_second",
            "--map",
            "verdict=verdict",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [r.values["verdict"] for r in read_rows(tmp_path / "g.jsonl")] == [r["verdict"] for r in rows]


def test_cli_bad_input_exits_2_with_file_line_and_field(tmp_path):
    study = write_stub_study(tmp_path, n_contests=2)
    bad = tmp_path / "contests.csv"
    bad.write_text("vignette_id,response_a,response_b\nv0,0,404\n")
    result = CliRunner().invoke(
        judge_command,
        [
            str(bad),
            "--vignettes",
            str(study["vignettes"]),
            "--responses",
            str(study["responses"]),
            "--out",
            str(tmp_path / "o.jsonl"),
            "--backend",
            "replay",
            "--replay",
            str(tmp_path / "none.jsonl"),
        ],
    )
    assert result.exit_code == 2
    assert "none.jsonl: file not found" in result.output
    result = CliRunner().invoke(
        judge_command,
        [
            str(bad),
            "--vignettes",
            str(study["vignettes"]),
            "--responses",
            str(study["responses"]),
            "--out",
            str(tmp_path / "o.jsonl"),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ],
    )
    assert result.exit_code == 2 and "line 2, field 'response_b': unknown response '404'" in result.output
    result = CliRunner().invoke(
        import_command, ["generic", str(bad), "--out", str(tmp_path / "x.jsonl"), "--map", "nonsense"]
    )
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
    result = CliRunner().invoke(
        import_command, ["mtbench", str(tmp_path / "absent.jsonl"), "--out", str(tmp_path / "x.jsonl")]
    )
    assert result.exit_code == 2 and "absent.jsonl: file not found" in result.output


def test_alpaca_eval_keeps_continuous_preferences_and_rejects_out_of_range_with_record_number(tmp_path):
    path = tmp_path / "annotations.json"
    record = {
        "instruction": "Hi",
        "output_1": "a",
        "output_2": "b",
        "generator_1": "base",
        "generator_2": "m",
        "annotator": "weighted",
        "preference": 1.73,
    }
    # AlpacaEval 2.0's weighted preference 1 + P(output_2 better): output_1 is shown first.
    path.write_text(json.dumps([dict(record, preference=2), dict(record, instruction="Yo", preference=1.73)]))
    rows = import_alpaca_eval([path]).judgments
    assert rows[0]["verdict"] == "second" and "preference_first" not in rows[0]
    assert rows[1]["verdict"] == "second" and rows[1]["preference_first"] == pytest.approx(0.27, abs=1e-12)
    path.write_text(json.dumps([dict(record, preference=2), dict(record, instruction="Yo", preference=2.73)]))
    with pytest.raises(InputError) as err:
        import_alpaca_eval([path])
    (problem,) = err.value.problems
    assert (problem.line, problem.field) == (2, "preference")
