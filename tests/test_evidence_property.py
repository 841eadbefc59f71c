"""Property (issue 32): evidence shaped by the claimant never turns a failing claim into a pass,
and a pure relabelling never turns a passing one into a failure.

The study is written here (random-word prompts and answers, a per-vignette win probability), not
the embedded fixture; its bar is set from its own gate CI-low: 0.02 above it (failing, where a copy
of every vignette would clear it) or 0.05 below it (passing). Hypothesis applies one to three edits an interested party
could make before handing the data over: drop the orders or whole contests the policy lost (their
responses stay in the generation record), copy vignettes (exactly, re-cased and re-spaced, or
with one word changed) with their responses and judgments under new ids, re-add won contests
under copied responses, and move lost contests to a look-alike (confusable) system name. The
auditor requires only the gates these edits aim at (the bar, valid verdicts, evidence integrity,
enough clusters), so no other gate blocks on their behalf.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from honestci.audit.errors import HonestCIError
from honestci.audit.pipeline import run_audit
from honestci.audit.policy import THRESHOLDS, Policy, Verdict

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

POLICY, OPPONENT, JUDGE = "policy-model", "opponent-model", "judge-one"
TABLES = ("vignettes", "responses", "judgments")
#: The gates the edits aim at; the length rule off (the answers' lengths are random).
AUDITOR = Policy(
    name="evidence-property",
    thresholds=replace(THRESHOLDS, length_bias_required_ratio=1e9),
    required_gates=("enough_clusters", "ci_low_clears_bar", "valid_verdicts", "evidence_intact"),
)
#: Look-alikes: Latin "o" and "e" as their Cyrillic twins.
CONFUSABLE = str.maketrans({"o": "\u043e", "e": "\u0435"})


def _words(rng: np.random.Generator, n: int) -> str:
    syllables = ("ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "va", "ze", "bri", "dal", "fen", "gor", "hup")
    return " ".join("".join(rng.choice(syllables, size=rng.integers(2, 4))) for _ in range(n))


def study_rows(seed: int = 3, n_vignettes: int = 10, contests: int = 6) -> dict:
    """Vignettes with random-word prompts, ``contests`` policy/opponent pairs on each, both orders judged."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {table: [] for table in TABLES}
    for g in range(n_vignettes):
        vid = f"v{g:02d}"
        rows["vignettes"].append({"vignette_id": vid, "text": _words(rng, 30)})
        p_win = rng.uniform(0.45, 0.9)
        for k in range(contests):
            pol, opp = f"{vid}-p{k}", f"{vid}-o{k}"
            rows["responses"] += [
                {"response_id": pol, "vignette_id": vid, "system": POLICY, "text": _words(rng, 20)},
                {"response_id": opp, "vignette_id": vid, "system": OPPONENT, "text": _words(rng, 20)},
            ]
            for first, second, policy_first in ((pol, opp, True), (opp, pol, False)):
                wins = bool(rng.random() < p_win)
                rows["judgments"].append(
                    {
                        "judge": JUDGE,
                        "vignette_id": vid,
                        "response_first": first,
                        "response_second": second,
                        "verdict": "first" if wins == policy_first else "second",
                    }
                )
    return rows


def write(folder: Path, rows: dict, bar: float, policy: str = POLICY, opponent: str = OPPONENT) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for table in TABLES:
        (folder / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[table]), encoding="utf-8")
    claim = {
        "version": 1,
        "name": "evidence property",
        "policy": policy,
        "opponent": opponent,
        "judge": rows["judgments"][0]["judge"],
        "bar": round(bar, 4),
        "population": "new_vignettes",
        "data": {table: f"{table}.jsonl" for table in TABLES},
    }
    path = folder / "claim.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _gate(result, name: str):
    return next(g for g in result.gates if g.name == name)


def _ci_low(result) -> float:
    return _gate(result, "ci_low_clears_bar").evidence["ci_low"]


BASE = study_rows()


@pytest.fixture(scope="module")
def bars(tmp_path_factory) -> dict[str, float]:
    """The base study's gate CI-low and point, and the two bars set from them."""
    result = run_audit(write(tmp_path_factory.mktemp("base"), BASE, 0.5), policy=AUDITOR, bayes=False)
    low, point = _ci_low(result), _gate(result, "ci_low_clears_bar").evidence["contest_weighted_rate"]
    assert low < point - 0.04, "the study must leave room for a bar between its CI-low and its point"
    return {"ci_low": low, "failing": low + 0.02, "passing": low - 0.05}


# --- the edits -----------------------------------------------------------------------------------


def _contests(rows: dict) -> dict[tuple[str, str], list[dict]]:
    """The judgments of each (policy response, opponent response) contest."""
    system = {r["response_id"]: r["system"] for r in rows["responses"]}
    contests: dict[tuple[str, str], list[dict]] = {}
    for j in rows["judgments"]:
        first_is_policy = system[j["response_first"]] == POLICY
        pair = (
            (j["response_first"], j["response_second"])
            if first_is_policy
            else (j["response_second"], j["response_first"])
        )
        contests.setdefault(pair, []).append(j)
    return contests


def _lost(j: dict, system: dict[str, str]) -> bool:
    """Whether the policy lost this judged order."""
    winner = {"first": j["response_first"], "second": j["response_second"]}.get(j["verdict"])
    return winner is not None and system.get(winner) != POLICY


def drop_lost_orders(rows: dict, rng: np.random.Generator, share: float) -> dict:
    system = {r["response_id"]: r["system"] for r in rows["responses"]}
    gone = {
        id(next(j for j in js if _lost(j, system)))
        for js in _contests(rows).values()
        if len(js) == 2 and any(_lost(j, system) for j in js) and rng.random() < share
    }
    return {**rows, "judgments": [j for j in rows["judgments"] if id(j) not in gone]}


def drop_lost_contests(rows: dict, rng: np.random.Generator, share: float) -> dict:
    system = {r["response_id"]: r["system"] for r in rows["responses"]}
    gone = {
        id(j)
        for js in _contests(rows).values()
        if any(_lost(j, system) for j in js) and rng.random() < share
        for j in js
    }
    return {**rows, "judgments": [j for j in rows["judgments"] if id(j) not in gone]}


def _variant(text: str, how: str, rng: np.random.Generator) -> str:
    if how == "exact":
        return text
    if how == "respaced":
        return "  " + text.upper().replace(" ", "   ") + " "
    words = text.split()
    words[int(rng.integers(len(words)))] = "zorblat"
    return " ".join(words)


def copy_vignettes(rows: dict, rng: np.random.Generator, share: float, how: str) -> dict:
    chosen = [v for v in rows["vignettes"] if rng.random() < share] or rows["vignettes"][:1]
    out = {table: list(rows[table]) for table in rows}
    for n, v in enumerate(chosen):
        new = f"copy{n}-{rng.integers(10**6)}"
        out["vignettes"].append({**v, "vignette_id": new, "text": _variant(v["text"], how, rng)})
        ids = {
            r["response_id"]: f"{new}-{r['response_id']}"
            for r in rows["responses"]
            if r["vignette_id"] == v["vignette_id"]
        }
        out["responses"] += [
            {**r, "vignette_id": new, "response_id": ids[r["response_id"]]}
            for r in rows["responses"]
            if r["vignette_id"] == v["vignette_id"]
        ]
        out["judgments"] += [
            {
                **j,
                "vignette_id": new,
                "response_first": ids[j["response_first"]],
                "response_second": ids[j["response_second"]],
            }
            for j in rows["judgments"]
            if j["vignette_id"] == v["vignette_id"]
        ]
    return out


def copy_won_contests(rows: dict, rng: np.random.Generator, copies: int) -> dict:
    system = {r["response_id"]: r["system"] for r in rows["responses"]}
    response = {r["response_id"]: r for r in rows["responses"]}
    out = {table: list(rows[table]) for table in rows}
    for (pol, _), js in _contests(rows).items():
        if any(_lost(j, system) for j in js) or any(j["verdict"] != "first" and j["verdict"] != "second" for j in js):
            continue
        for c in range(copies):
            new = f"{pol}-again{c}-{rng.integers(10**6)}"
            out["responses"].append({**response[pol], "response_id": new})
            out["judgments"] += [{key: (new if value == pol else value) for key, value in j.items()} for j in js]
    return out


def move_lost_to_look_alike(rows: dict, rng: np.random.Generator, share: float, side: str) -> dict:
    """The lost contests' ``side`` (policy or opponent) responses renamed to a look-alike of its name."""
    system = {r["response_id"]: r["system"] for r in rows["responses"]}
    moved = {
        pair[0 if side == POLICY else 1]
        for pair, js in _contests(rows).items()
        if any(_lost(j, system) for j in js) and rng.random() < share
    }
    look_alike = side.translate(CONFUSABLE)
    responses = [{**r, "system": look_alike} if r["response_id"] in moved else r for r in rows["responses"]]
    return {**rows, "responses": responses}


def copy_opponent_into_lost(rows: dict, rng: np.random.Generator, share: float) -> dict:
    """The lost contests' policy answers replaced by the opponent's, their verdicts ties (what a judge
    gives two equal answers): a loss turned into half a win."""
    system = {r["response_id"]: r["system"] for r in rows["responses"]}
    text = {r["response_id"]: r["text"] for r in rows["responses"]}
    copied = {
        pair[0]: text[pair[1]]
        for pair, js in _contests(rows).items()
        if any(_lost(j, system) for j in js) and rng.random() < share
    }
    responses = [{**r, "text": copied.get(r["response_id"], r["text"])} for r in rows["responses"]]
    judgments = [
        {**j, "verdict": "tie"} if {j["response_first"], j["response_second"]} & set(copied) else j
        for j in rows["judgments"]
    ]
    return {**rows, "responses": responses, "judgments": judgments}


EDITS = st.lists(
    st.one_of(
        st.tuples(st.just(drop_lost_orders), st.floats(0.3, 1.0)),
        st.tuples(st.just(drop_lost_contests), st.floats(0.3, 1.0)),
        st.tuples(st.just(copy_vignettes), st.floats(0.2, 1.0), st.sampled_from(["exact", "respaced", "one_word"])),
        st.tuples(st.just(copy_won_contests), st.integers(1, 3)),
        st.tuples(st.just(move_lost_to_look_alike), st.floats(0.3, 1.0), st.sampled_from([POLICY, OPPONENT])),
        st.tuples(st.just(copy_opponent_into_lost), st.floats(0.3, 1.0)),
    ),
    min_size=1,
    max_size=3,
)


def _edited(edits, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rows = BASE
    for edit, *arguments in edits:
        rows = edit(rows, rng, *arguments)
    return rows


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=EDITS, seed=st.integers(0, 2**16))
def test_shaped_evidence_never_turns_a_failing_claim_into_a_pass(edits, seed, bars, tmp_path_factory):
    claim = write(tmp_path_factory.mktemp("shaped"), _edited(edits, seed), bars["failing"])
    try:
        result = run_audit(claim, policy=AUDITOR, bayes=False)
    except HonestCIError:  # refused as bad evidence (exit 2): not a pass
        return
    assert result.exit_code() != 0, [f"{g.name}: {g.verdict} {g.message}" for g in result.gates]


def _relabelled(rows: dict, rng: np.random.Generator) -> tuple[dict, str, str]:
    """Every id and name replaced one-to-one, every table's rows shuffled; the new policy and opponent names."""
    letters = list("abcdfghjkmnpqrstuvwxyz")  # no letter with a look-alike among the others

    def token() -> str:
        return "".join(rng.choice(letters, size=10))

    vignettes = {v["vignette_id"]: f"vg-{token()}" for v in rows["vignettes"]}
    responses = {r["response_id"]: f"rs-{token()}" for r in rows["responses"]}
    systems = {POLICY: f"pol-{token()}", OPPONENT: f"opp-{token()}"}
    judge = f"jd-{token()}"
    out = {
        "vignettes": [{**v, "vignette_id": vignettes[v["vignette_id"]]} for v in rows["vignettes"]],
        "responses": [
            {
                **r,
                "vignette_id": vignettes[r["vignette_id"]],
                "response_id": responses[r["response_id"]],
                "system": systems[r["system"]],
            }
            for r in rows["responses"]
        ],
        "judgments": [
            {
                **j,
                "judge": judge,
                "vignette_id": vignettes[j["vignette_id"]],
                "response_first": responses[j["response_first"]],
                "response_second": responses[j["response_second"]],
            }
            for j in rows["judgments"]
        ],
    }
    for table in TABLES:
        out[table] = [out[table][i] for i in rng.permutation(len(out[table]))]
    return out, systems[POLICY], systems[OPPONENT]


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16))
def test_a_relabelled_passing_study_keeps_passing(seed, bars, tmp_path_factory):
    rows, policy, opponent = _relabelled(BASE, np.random.default_rng(seed))
    claim = write(tmp_path_factory.mktemp("relabelled"), rows, bars["passing"], policy, opponent)
    result = run_audit(claim, policy=AUDITOR, bayes=False)
    assert result.exit_code() == 0, [f"{g.name}: {g.verdict} {g.message}" for g in result.gates]
    assert _ci_low(result) == pytest.approx(bars["ci_low"], abs=1e-9)


# --- the edits are attacks: without the defences each would pass -------------------------------


def test_copied_vignettes_would_clear_the_bar_unmerged(bars, tmp_path):
    """Every vignette copied: the unmerged CI-low clears the bar; the merged one and the gate do not."""
    rows = copy_vignettes(BASE, np.random.default_rng(0), 1.0, "respaced")
    result = run_audit(write(tmp_path, rows, bars["failing"]), policy=AUDITOR, bayes=False)
    gate = _gate(result, "evidence_intact")
    assert gate.evidence["ci_low_unmerged"] >= bars["failing"] > gate.evidence["ci_low_merged"]
    assert gate.verdict == Verdict.FAIL and result.exit_code() != 0


@pytest.mark.parametrize(
    ("edit", "blocking"),
    [
        pytest.param(
            lambda rows: drop_lost_contests(rows, np.random.default_rng(0), 1.0),
            "unjudged_responses",
            id="lost-contests-dropped",
        ),
        pytest.param(
            lambda rows: move_lost_to_look_alike(rows, np.random.default_rng(0), 1.0, OPPONENT),
            "confusable_names",
            id="lost-to-look-alike",
        ),
        pytest.param(
            lambda rows: copy_opponent_into_lost(rows, np.random.default_rng(0), 1.0),
            "other_system_rows",
            id="opponent-answers-copied-into-lost",
        ),
    ],
)
def test_hidden_lost_contests_clear_the_bar_but_not_the_evidence_gate(edit, blocking, bars, tmp_path):
    result = run_audit(write(tmp_path, edit(BASE), bars["failing"]), policy=AUDITOR, bayes=False)
    assert _gate(result, "ci_low_clears_bar").verdict == Verdict.PASS  # what the attack was for
    gate = _gate(result, "evidence_intact")
    assert gate.verdict == Verdict.FAIL and result.exit_code() != 0
    assert blocking in {f["kind"] for f in gate.evidence["findings"] if f["verdict"] == "FAIL"}
