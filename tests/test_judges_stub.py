"""The stub judge: verdicts from its stated rule, recorded verdicts where it has them, a name that says stub."""

from pathlib import Path

import pandas as pd
import pytest

from honestci.audit.errors import InputError
from honestci.judges.backends.stub import StubBackend
from honestci.judges.prompts import get_template
from honestci.judges.run import load_texts, run_judging
from honestci.judges.schedule import Contest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "study"


@pytest.fixture(scope="module")
def texts():
    return load_texts(FIXTURE / "vignettes.jsonl", FIXTURE / "responses.jsonl")


def _contests(texts, n: int = 12) -> list[Contest]:
    """n pairs of different-length answers of one vignette (ids in fixture order)."""
    by_vignette: dict[str, list[str]] = {}
    for rid, vid in texts.response_vignette.items():
        by_vignette.setdefault(vid, []).append(rid)
    ids = by_vignette["v1"]
    pairs = [(a, b) for a, b in zip(ids[::2], ids[1::2]) if len(texts.responses[a]) != len(texts.responses[b])]
    return [Contest("v1", a, b) for a, b in pairs[:n]]


def _judge(texts, backend, contests, path) -> pd.DataFrame:
    run_judging(contests, texts, backend, get_template(), path, seed=0, progress=False)
    return pd.read_json(path, lines=True, dtype=False)


@pytest.mark.parametrize("rule", ["shorter", "longer"])
def test_length_rules_pick_by_characters_in_both_orders(tmp_path, texts, rule):
    rows = _judge(texts, StubBackend(rule, texts.responses), _contests(texts), tmp_path / "j.jsonl")
    first_len = rows["response_first"].map(lambda r: len(texts.responses[r]))
    second_len = rows["response_second"].map(lambda r: len(texts.responses[r]))
    first_wins = first_len < second_len if rule == "shorter" else first_len > second_len
    assert len(rows) == 24 and (rows["verdict"] == first_wins.map({True: "first", False: "second"})).all()
    assert set(rows["judge"]) == {f"stub:{rule}"}


def test_first_rule_always_names_the_first_shown(tmp_path, texts):
    rows = _judge(texts, StubBackend("first", texts.responses), _contests(texts), tmp_path / "j.jsonl")
    assert set(rows["verdict"]) == {"first"}


def test_recorded_pairs_are_replayed_and_the_rest_follow_the_rule(tmp_path, texts):
    contests = _contests(texts, 6)
    recorded = tmp_path / "recorded.jsonl"
    # Every recorded verdict is "tie", which the shorter rule never gives on different lengths.
    c = contests[0]
    pd.DataFrame(
        [
            {
                "judge": "human-proxy",
                "vignette_id": "v1",
                "response_first": c.response_a,
                "response_second": c.response_b,
                "verdict": "tie",
            },
            {
                "judge": "human-proxy",
                "vignette_id": "v1",
                "response_first": c.response_b,
                "response_second": c.response_a,
                "verdict": "tie",
            },
        ]
    ).to_json(recorded, orient="records", lines=True)
    backend = StubBackend("shorter", texts.responses, recorded)
    rows = _judge(texts, backend, contests, tmp_path / "j.jsonl")
    replayed = rows["response_first"].isin([c.response_a, c.response_b]) & rows["response_second"].isin(
        [c.response_a, c.response_b]
    )
    assert (rows.loc[replayed, "verdict"] == "tie").all() and replayed.sum() == 2 == backend.n_replayed
    assert (rows.loc[~replayed, "verdict"] != "tie").all()
    assert backend.judge_name == "stub:shorter+replay:human-proxy" and "stub judge (no model)" in backend.describe()


def test_unknown_rule_is_refused(texts):
    with pytest.raises(InputError, match="rule 'oracle' is unknown"):
        StubBackend("oracle", texts.responses)


def test_agreement_keeps_the_rules_choice_at_its_rate_in_either_order(texts):
    import asyncio

    from honestci.judges.backends.base import JudgeRequest

    rid_short, rid_long = sorted(list(texts.responses)[:2], key=lambda r: len(texts.responses[r]))
    assert len(texts.responses[rid_short]) < len(texts.responses[rid_long])
    backend = StubBackend("shorter", texts.responses, agreement=0.8, seed=3)
    n = 2000  # distinct prompts; kept share ~ Binomial(n, 0.8)/n, MC-SE sqrt(0.8 * 0.2 / n) = 0.0089

    async def verdicts(first: str, second: str) -> list[str]:
        out = []
        for i in range(n):
            request = JudgeRequest("v1", first, second, ({"role": "user", "content": f"prompt {i}"},), {})
            out.append((await backend.complete(request)).text)
        return out

    shorter_first = asyncio.run(verdicts(rid_short, rid_long))
    shorter_second = asyncio.run(verdicts(rid_long, rid_short))
    kept_first = sum(t.endswith("[[A]]") for t in shorter_first) / n
    kept_second = sum(t.endswith("[[B]]") for t in shorter_second) / n
    assert abs(kept_first - 0.8) < 4 * 0.0089 and abs(kept_second - 0.8) < 4 * 0.0089  # 4 MC-SE
    assert backend.judge_name == "stub:shorter@0.8"
    assert shorter_first == asyncio.run(verdicts(rid_short, rid_long))  # deterministic for a seed
    with pytest.raises(InputError, match="agreement 0.3 is outside"):
        StubBackend("shorter", texts.responses, agreement=0.3)
