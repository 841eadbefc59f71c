"""Evidence integrity (issue 32): copied prompts, copied contests, over-judged contests and
look-alike names, each tried on a copy of the fixture study's committee claim (bar 0.773, honest
CI-low 0.726), are found, merged where they can be, and never turn the verdict into a PASS; a pure
relabelling changes nothing.

The attacks' CI-lows as given clear the bar (copied vignettes 0.788, as the tester measured; copied
won contests 0.810 here, 0.801 in the tester's variant); merged, both are back below it.
"""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest

from honestci.audit.checks.duplicates import confusable_groups, near_duplicate_pairs, normalized_text, skeleton
from honestci.audit.checks.evidence import FINDING_KINDS, scan_evidence
from honestci.audit.data.io import load_study
from honestci.audit.pipeline import run_audit
from honestci.audit.policy import DEFAULT_REQUIRED_GATES, GATE_ORDER, Verdict
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

POLICY, OPPONENT, JUDGE = "reappraisal-4b-grpo", "gpt-4-0314", "llama-3.1-70b"
CLAIM = "claim-committee.yaml"


# --- the pure helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "real, lookalike",
    [
        ("gpt-4-0314", "gpt-4-\u043e314".replace("\u043e", "0").replace("-0", "-\u041e", 1)),  # Cyrillic О for 0
        ("reappraisal-4b-grpo", "reappraisal-4b-grp\u043e"),  # Cyrillic о
        ("llama", "ll\u0430ma"),  # Cyrillic а
        ("gemma", "g\u0435mma"),  # Cyrillic е
        ("qwen-omni", "qwen-\u03bfmni"),  # Greek ο
        ("gpt", "\uff47\uff50\uff54"),  # fullwidth letters
        ("llama", "l1ama"),  # digit one for l
    ],
)
def test_skeleton_joins_real_confusables(real, lookalike):
    assert real != lookalike and skeleton(real) == skeleton(lookalike)
    assert confusable_groups([real, lookalike, "other-system"]) == [tuple(sorted((real, lookalike)))]


def test_skeleton_keeps_distinct_names_apart():
    names = ["grpo-ckpt-1", "grpo-ckpt-2", "llama-3.1-70b", "llama-3.1-405b", "small-judge", "gpt-4-0314"]
    assert confusable_groups(names) == []
    assert confusable_groups(["Qwen", "qwen"]) == [("Qwen", "qwen")]  # case alone: read alike too


def test_normalised_text():
    assert normalized_text("  It’s FINE—really.  ") == "it s fine really"
    assert normalized_text("STRASSE") == normalized_text("straße")  # full case folding
    assert normalized_text("\uff28\uff49  there!") == "hi there"  # NFKC: fullwidth
    assert normalized_text(unicodedata.normalize("NFD", "café")) == normalized_text("café")


def test_near_duplicates_by_word_ngrams_and_short_prompts():
    text = "Your partner cancelled the dinner you had planned for weeks, an hour before you were due to leave home."
    edited = text.replace("dinner", "lunch")  # one word in 19: bigram Jaccard 0.80
    rewritten = text.replace("an hour before you were due to leave home.", "and did not say why, again.")
    pairs = near_duplicate_pairs([normalized_text(t) for t in (text, edited, rewritten)], 2, 0.75)
    assert [(i, j) for i, j, _ in pairs] == [(0, 1)]
    # a short prompt with one word changed is another question; an exact short copy is not
    short = ["what is 2 2", "what is 3 3", "what is 2 2"]
    assert [(i, j) for i, j, _ in near_duplicate_pairs(short, 2, 0.75)] == [(0, 2)]
    assert near_duplicate_pairs(["hello", "hello"], 2, 0.75) == [(0, 1, 1.0)]


# --- attacks on a copy of the fixture study ------------------------------------------------------


def _read(folder: Path, table: str) -> list[dict]:
    return [json.loads(line) for line in (folder / f"{table}.jsonl").read_text().splitlines() if line.strip()]


def _write(folder: Path, table: str, rows: list[dict]) -> None:
    (folder / f"{table}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@pytest.fixture
def study_dir(tmp_path) -> Path:
    folder = tmp_path / "study"
    shutil.copytree(DEFAULT_STUDY_DIR, folder, ignore=shutil.ignore_patterns("composed", "offdist", "seeds"))
    return folder


def _gates(folder: Path) -> dict:
    result = run_audit(folder / CLAIM, bayes=False)
    return {"verdict": result.verdict} | {g.name: g for g in result.gates}


def _copy_vignettes(folder: Path, edit=lambda text: text, suffix: str = "-copy") -> None:
    """Every vignette again under a new id (text through ``edit``), with its responses and judgments."""
    vignettes, responses, judgments = (_read(folder, t) for t in ("vignettes", "responses", "judgments"))
    _write(
        folder,
        "vignettes",
        vignettes + [v | {"vignette_id": v["vignette_id"] + suffix, "text": edit(v["text"])} for v in vignettes],
    )
    _write(
        folder,
        "responses",
        responses
        + [r | {"response_id": r["response_id"] + suffix, "vignette_id": r["vignette_id"] + suffix} for r in responses],
    )
    copies = [
        j
        | {
            "vignette_id": j["vignette_id"] + suffix,
            "response_first": j["response_first"] + suffix,
            "response_second": j["response_second"] + suffix,
        }
        for j in judgments
    ]
    _write(folder, "judgments", judgments + copies)


def _copy_won_contests(folder: Path) -> int:
    """The policy's contests it won in both orders (the claim's judge) again, under copied responses."""
    responses, judgments = _read(folder, "responses"), _read(folder, "judgments")
    system = {r["response_id"]: r["system"] for r in responses}
    won: dict[tuple[str, str], list[dict]] = {}
    for j in judgments:
        first, second = system[j["response_first"]], system[j["response_second"]]
        if j["judge"] == JUDGE and {first, second} == {POLICY, OPPONENT}:
            mine = j["response_first"] if first == POLICY else j["response_second"]
            other = j["response_second"] if first == POLICY else j["response_first"]
            won.setdefault((mine, other), []).append(j)
    pairs = {
        pair: rows
        for pair, rows in won.items()
        if len(rows) == 2
        and all(
            (r["verdict"] == "first") == (system[r["response_first"]] == POLICY) and r["verdict"] != "tie" for r in rows
        )
    }
    by_id = {r["response_id"]: r for r in responses}
    new_responses, new_judgments = [], []
    for k, ((mine, other), rows) in enumerate(pairs.items()):
        rename = {mine: f"{mine}-again-{k}", other: f"{other}-again-{k}"}
        new_responses += [by_id[old] | {"response_id": new} for old, new in rename.items()]
        new_judgments += [
            r | {"response_first": rename[r["response_first"]], "response_second": rename[r["response_second"]]}
            for r in rows
        ]
    _write(folder, "responses", responses + new_responses)
    _write(folder, "judgments", judgments + new_judgments)
    return len(pairs)


def test_the_clean_fixture_passes_and_the_gate_is_required():
    assert "evidence_intact" in DEFAULT_REQUIRED_GATES and "evidence_intact" in GATE_ORDER
    gates = _gates(DEFAULT_STUDY_DIR)
    gate = gates["evidence_intact"]
    assert gate.verdict == Verdict.PASS, gate.message
    # no copied prompt, no look-alike name, no opponent rows under the policy's name; the
    # templated answers repeat a text pair in 4 of 720 contests (merged: below the share that warns)
    kinds = {f["kind"] for f in gate.evidence["findings"]}
    assert kinds <= {"duplicate_response", "over_judged"} and kinds <= set(FINDING_KINDS)
    assert gate.evidence["n_contests_unmerged"] == 720 and gate.evidence["n_contests_merged"] == 716
    assert abs(gate.evidence["ci_low_unmerged"] - 0.7254) < 5e-4
    assert gates["ci_low_clears_bar"].verdict == Verdict.FAIL


def test_copied_vignettes_are_merged_and_block(study_dir):
    _copy_vignettes(study_dir)
    gates = _gates(study_dir)
    gate = gates["evidence_intact"]
    assert gate.verdict == Verdict.FAIL and "changes the bar verdict" in gate.message
    assert abs(gate.evidence["ci_low_unmerged"] - 0.788) < 0.002  # the attack's figure as given
    assert gate.evidence["n_clusters_unmerged"] == 12 and gate.evidence["n_clusters_merged"] == 6
    assert gate.evidence["ci_low_merged"] < 0.773 and gates["ci_low_clears_bar"].verdict == Verdict.FAIL
    assert gates["enough_clusters"].evidence.get("n_clusters", 6) == 6
    assert {f["kind"] for f in gate.evidence["findings"]} >= {"duplicate_vignette", "duplicate_response", "over_judged"}
    assert gates["verdict"] != Verdict.PASS


def test_near_duplicate_prompts_with_small_edits_are_merged(study_dir):
    _copy_vignettes(
        study_dir, edit=lambda text: text.replace("your", "thy", 1).replace(" a ", " one ", 1), suffix="-ed"
    )
    gates = _gates(study_dir)
    gate = gates["evidence_intact"]
    kinds = {f["kind"] for f in gate.evidence["findings"]}
    assert "near_duplicate_vignette" in kinds or "duplicate_vignette" in kinds
    assert gate.evidence["n_clusters_merged"] == 6 and gate.verdict == Verdict.FAIL
    assert gates["ci_low_clears_bar"].verdict == Verdict.FAIL and gates["verdict"] != Verdict.PASS


def test_won_contests_under_copied_responses_count_once(study_dir):
    assert _copy_won_contests(study_dir) > 300
    gates = _gates(study_dir)
    gate = gates["evidence_intact"]
    assert gate.verdict == Verdict.FAIL and "changes the bar verdict" in gate.message
    # as given the copies clear the bar (0.810 here, every contest won in both orders copied; the
    # tester's variant gave 0.801); merged they are the clean fixture's contests again
    assert gate.evidence["ci_low_unmerged"] > 0.773 > gate.evidence["ci_low_merged"]
    assert gate.evidence["n_contests_merged"] == 716  # the clean fixture's merged contests
    assert gates["ci_low_clears_bar"].verdict == Verdict.FAIL and gates["verdict"] != Verdict.PASS


def test_a_lookalike_of_a_claim_name_fails(study_dir):
    responses = _read(study_dir, "responses")
    lookalike = POLICY.replace("o", "\u043e", 1)  # one Cyrillic о
    _write(
        study_dir, "responses", [r | {"system": lookalike} if r["system"] == "grpo-ckpt-5" else r for r in responses]
    )
    gate = _gates(study_dir)["evidence_intact"]
    assert gate.verdict == Verdict.FAIL and "wrong system" in gate.message
    assert [f["kind"] for f in gate.evidence["findings"] if f["verdict"] == "FAIL"] == ["confusable_names"]


def test_a_lookalike_pair_the_claim_does_not_read_warns(study_dir):
    responses = _read(study_dir, "responses")
    _write(
        study_dir,
        "responses",
        [r | {"system": "grpo-ckpt-l"} if r["system"] == "grpo-ckpt-5" else r for r in responses],
    )
    gate = _gates(study_dir)["evidence_intact"]
    assert gate.verdict == Verdict.WARN and "grpo-ckpt-l" in json.dumps(gate.evidence["findings"])


def test_an_opponent_answer_under_the_policys_name_is_listed_and_counted_as_lost(study_dir):
    """Independent models answer alike now and then: one such answer is listed, its contests counted
    as lost by the policy, and it cannot decide this verdict (the attack is in
    tests/test_evidence_property.py, where the copies turn losses into ties and FAIL)."""
    responses = _read(study_dir, "responses")
    opponent_text = next(r["text"] for r in responses if r["system"] == OPPONENT and r["vignette_id"] == "v1")
    first = next(i for i, r in enumerate(responses) if r["system"] == POLICY and r["vignette_id"] == "v1")
    responses[first] = responses[first] | {"text": opponent_text}
    _write(study_dir, "responses", responses)
    gate = _gates(study_dir)["evidence_intact"]
    found = [f for f in gate.evidence["findings"] if f["kind"] == "other_system_rows"]
    assert len(found) == 1 and found[0]["count"] == 1 and found[0]["verdict"] == "PASS"


def test_an_over_judged_contest_keeps_the_verdict_least_favourable_to_the_policy(study_dir):
    responses, judgments = _read(study_dir, "responses"), _read(study_dir, "judgments")
    system = {r["response_id"]: r["system"] for r in responses}
    lost = next(
        j
        for j in judgments
        if j["judge"] == JUDGE
        and system[j["response_first"]] == POLICY
        and system[j["response_second"]] == OPPONENT
        and j["verdict"] == "second"
    )
    copy = next(r for r in responses if r["response_id"] == lost["response_first"]) | {"response_id": "again"}
    _write(study_dir, "responses", responses + [copy])
    _write(study_dir, "judgments", judgments + [lost | {"response_first": "again", "verdict": "first"}])
    study = load_study({t: study_dir / f"{t}.jsonl" for t in ("vignettes", "responses", "judgments")})
    scan = scan_evidence(study, policy=POLICY, opponent=OPPONENT, judges=(JUDGE,))
    merged = scan.study.judgments.frame
    row = merged[
        (merged["response_first"] == lost["response_first"])
        & (merged["response_second"] == lost["response_second"])
        & (merged["judge"] == JUDGE)
    ]
    assert list(row["verdict"].astype(str)) == ["second"]  # the loss, not the added win
    assert "again" not in set(scan.study.responses.frame["response_id"])
    assert any(f.kind == "over_judged" for f in scan.findings)
    assert scan.study.judgments.dropped.get("merged_duplicates", 0) >= 1


def test_a_pure_relabelling_changes_nothing(study_dir):
    before = _gates(study_dir)
    vignettes, responses = _read(study_dir, "vignettes"), _read(study_dir, "responses")
    vid = {v["vignette_id"]: f"scenario-{k:03d}" for k, v in enumerate(vignettes)}
    rid = {r["response_id"]: f"answer-{k:05d}" for k, r in enumerate(responses)}
    _write(study_dir, "vignettes", [v | {"vignette_id": vid[v["vignette_id"]]} for v in vignettes])
    renamed = {"vignette_id": vid, "response_id": rid, "response_first": rid, "response_second": rid}
    renamed |= {"response_a": rid, "response_b": rid}
    for table in ("responses", "judgments", "human_ratings", "human_pairs"):
        rows = _read(study_dir, table)
        _write(study_dir, table, [{k: renamed[k][v] if k in renamed else v for k, v in r.items()} for r in rows])
    after = _gates(study_dir)
    assert after["verdict"] == before["verdict"]
    for name in GATE_ORDER:
        assert after[name].verdict == before[name].verdict, name
    for key in ("ci_low_merged", "ci_low_unmerged", "n_contests_merged"):
        assert after["evidence_intact"].evidence[key] == pytest.approx(before["evidence_intact"].evidence[key]), key


def _unjudge(folder: Path, lost_only: bool, at_most: int | None = None) -> int:
    """Leave out every judgment by the claim's judge of some policy responses (those of contests the
    policy lost in an order, with ``lost_only``; the first ``at_most`` otherwise): how many."""
    responses, judgments = _read(folder, "responses"), _read(folder, "judgments")
    system = {r["response_id"]: r["system"] for r in responses}
    chosen: list[str] = []
    for j in judgments:
        if j["judge"] != JUDGE or {system[j["response_first"]], system[j["response_second"]]} != {POLICY, OPPONENT}:
            continue
        mine = j["response_first"] if system[j["response_first"]] == POLICY else j["response_second"]
        lost = j["verdict"] != "tie" and (j["verdict"] == "first") != (mine == j["response_first"])
        if (lost or not lost_only) and mine not in chosen:
            chosen.append(mine)
    gone = set(chosen[:at_most])
    _write(
        folder,
        "judgments",
        [j for j in judgments if not (j["judge"] == JUDGE and {j["response_first"], j["response_second"]} & gone)],
    )
    return len(gone)


def test_a_few_unjudged_responses_are_listed(study_dir):
    assert _unjudge(study_dir, lost_only=False, at_most=3) == 3
    gate = _gates(study_dir)["evidence_intact"]
    found = [f for f in gate.evidence["findings"] if f["kind"] == "unjudged_responses"]
    assert len(found) == 1 and found[0]["count"] == 3 and found[0]["verdict"] == "PASS"
    assert gate.verdict == Verdict.PASS


def test_lost_contests_left_out_whole_block_the_release(study_dir):
    """Every contest the policy lost in an order judged in neither: no missing order to count, the
    bar gate passes on what is left, and the responses left unjudged decide the verdict."""
    assert _unjudge(study_dir, lost_only=True) > 100
    gates = _gates(study_dir)
    assert gates["ci_low_clears_bar"].verdict == Verdict.PASS  # what the attack was for
    gate = gates["evidence_intact"]
    found = [f for f in gate.evidence["findings"] if f["kind"] == "unjudged_responses"]
    assert len(found) == 1 and found[0]["verdict"] == "FAIL" and found[0]["count"] > 90 and found[0]["items"]
    assert (
        gate.verdict == Verdict.FAIL and "could decide the release" in gate.message and gates["verdict"] != Verdict.PASS
    )
