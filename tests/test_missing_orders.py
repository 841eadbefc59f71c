"""Missing orders (a mixed design) as an adversary would shape them: every contest the policy lost
in some order judged in that one order only, the order it did best in kept. The policy decides how a
missing order counts; the valid_verdicts gate bounds what the missing orders could change and tests
whether they are missing at random with respect to the outcome."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from honestci.audit.checks.evidence import scan_evidence
from honestci.audit.checks.verdicts import missing_at_random
from honestci.audit.data.contests import build_contests
from honestci.audit.data.io import load_study
from honestci.audit.pipeline import run_audit
from honestci.audit.policy import EXIT_BLOCKED, Verdict
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR


def _lost_orders_dropped(folder: Path) -> tuple[Path, int]:
    """A copy of the fixture study where every contest with a lost order keeps only its best order,
    and how many single-order contests the audit reads in it (copied responses merged first)."""
    shutil.copytree(DEFAULT_STUDY_DIR, folder)
    study = load_study({t: folder / f"{t}.jsonl" for t in ("vignettes", "responses", "judgments")})
    frame = build_contests(study, "reappraisal-4b-grpo", "gpt-4-0314", judge="llama-3.1-70b").frame
    first, second = frame["value_policy_first"].to_numpy(), frame["value_policy_second"].to_numpy()
    lost = (first == 0) | (second == 0)
    # the order kept is the one the policy did best in; the other one's line goes
    drop = np.where(first >= second, frame["line_policy_second"], frame["line_policy_first"])[lost]
    path = folder / "judgments.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    gone = {int(line) for line in drop}
    path.write_text("".join(line for number, line in enumerate(lines, start=1) if number not in gone))
    claim = folder / "claim.yaml"
    claim.write_text("\n".join(line for line in claim.read_text().splitlines() if not line.startswith("claimed:")))
    attacked = load_study({t: folder / f"{t}.jsonl" for t in ("vignettes", "responses", "judgments")})
    merged = scan_evidence(attacked, policy="reappraisal-4b-grpo", opponent="gpt-4-0314", judges=("llama-3.1-70b",))
    read = build_contests(
        merged.study, "reappraisal-4b-grpo", "gpt-4-0314", judge="llama-3.1-70b", single_order="against_claim"
    )
    # a copy's contest merges into its original's: at most as many as were dropped
    assert 0 <= lost.sum() - read.n_missing_orders <= 4
    return claim, read.n_missing_orders


def _gate(result, name):
    return next(g for g in result.gates if g.name == name)


def _ci_low(result) -> float:
    return _gate(result, "ci_low_clears_bar").evidence["ci_low"]


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    return _lost_orders_dropped(tmp_path_factory.mktemp("attack") / "study")


def test_dropping_lost_orders_cannot_raise_the_ci_low_under_the_built_in_policy(
    attacked, passing_claim, no_length_rule
):
    claim, n_lost = attacked
    complete = run_audit(passing_claim, policy=no_length_rule, bayes=False)
    result = run_audit(claim, policy=no_length_rule, bayes=False)
    assert n_lost > 100
    assert _ci_low(result) <= _ci_low(complete)
    gate = _gate(result, "valid_verdicts")
    missing = gate.evidence["missing_orders"]
    assert missing["n_single_order"] == n_lost and missing["scoring"] == "against_claim"
    assert (
        missing["n_contests"] == gate.evidence["n_contests"] == _gate(complete, "valid_verdicts").evidence["n_contests"]
    )
    # the judged orders left went worse for the policy than the complete contests' orders
    assert missing["difference_high"] < 0
    assert gate.verdict >= Verdict.WARN and "not missing at random" in gate.message


def test_leaving_them_out_raises_the_ci_low_and_the_gate_blocks_it(attacked, passing_claim, no_length_rule):
    claim, n_lost = attacked
    leave_out = replace(no_length_rule, missing_orders="exclude")
    complete = run_audit(passing_claim, policy=leave_out, bayes=False)
    result = run_audit(claim, policy=leave_out, bayes=False)
    missing = _gate(result, "valid_verdicts").evidence["missing_orders"]
    assert missing["n_single_order"] == n_lost and missing["scoring"] == "exclude"
    assert _ci_low(result) > _ci_low(complete)  # what the attack was for
    gate = _gate(result, "valid_verdicts")
    assert gate.verdict == Verdict.FAIL and "raises the win rate" in gate.message
    assert result.exit_code() == EXIT_BLOCKED


def test_orders_missing_at_random_are_not_flagged(tmp_path):
    """Half the contests lose one order chosen by a coin: the difference's interval covers 0, and
    the share (50%) is what the gate WARNs of."""
    folder = tmp_path / "study"
    shutil.copytree(DEFAULT_STUDY_DIR, folder)
    path = folder / "judgments.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    study = load_study({t: folder / f"{t}.jsonl" for t in ("vignettes", "responses", "judgments")})
    frame = build_contests(study, "reappraisal-4b-grpo", "gpt-4-0314", judge="llama-3.1-70b").frame
    rng = np.random.default_rng(5)
    chosen = rng.random(len(frame)) < 0.5
    drop = np.where(rng.random(len(frame)) < 0.5, frame["line_policy_first"], frame["line_policy_second"])[chosen]
    gone = {int(line) for line in drop}
    path.write_text("".join(json.dumps(r) + "\n" for n, r in enumerate(rows, start=1) if n not in gone))
    contests = build_contests(
        load_study({t: folder / f"{t}.jsonl" for t in ("vignettes", "responses", "judgments")}),
        "reappraisal-4b-grpo",
        "gpt-4-0314",
        judge="llama-3.1-70b",
        single_order="against_claim",
    )
    difference, note = missing_at_random(contests, 0.95, 5)
    assert note == "" and difference is not None and difference.ci_low < 0 < difference.ci_high
