"""Every way a claim file once loosened its own audit (issue "the policy decides, not the claim"),
tried on the fixture's committee claim, whose honest CI-low (0.728 on the merged evidence, the posterior quantile)
misses its bar (0.773): each now exits as the built-in policy says."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from click.testing import CliRunner

from honestci.audit.cli import main
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

pytestmark = pytest.mark.e2e
JUDGE = "llama-3.1-70b"


@pytest.fixture
def study(tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(DEFAULT_STUDY_DIR, folder)
    return folder


def _claim(folder, **changes):
    claim = yaml.safe_load((folder / "claim-committee.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            claim.pop(key, None)
        elif isinstance(value, dict) and isinstance(claim.get(key), dict):
            claim[key] = {**claim[key], **value}
        else:
            claim[key] = value
    path = folder / "claim-test.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False))
    return path


def _audit(claim, out, *flags):
    result = CliRunner().invoke(main, ["audit", str(claim), "--out", str(out), "--no-bayes", *flags])
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() else None
    return result, verdict


@pytest.mark.parametrize(
    "changes",
    [
        {"method": "cr1"},
        {"method": "cluster_bootstrap_percentile"},
        {"claimed": {"level": 0.5}},
    ],
    ids=["method-cr1", "method-bootstrap", "claimed-level"],
)
def test_a_claimed_method_or_level_never_drives_the_gate(study, tmp_path, changes):
    result, verdict = _audit(_claim(study, **changes), tmp_path / "out")
    assert result.exit_code == 1, result.output
    gate = next(g for g in verdict["gates"] if g["gate"] == "ci_low_clears_bar")
    assert gate["verdict"] == "FAIL" and gate["evidence"]["method"] == "bayes_logit_normal"
    assert abs(gate["evidence"]["ci_low"] - 0.728) < 0.001 and verdict["exit_code"] == 1


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"thresholds": {"confidence_level": 0.5}}, "thresholds.confidence_level"),
        ({"required_gates": ["enough_clusters"], "bar": 0.95}, "required_gates"),
    ],
    ids=["level-0.5", "one-gate"],
)
def test_a_loosening_claim_exits_2_naming_the_key(study, tmp_path, changes, key):
    result, verdict = _audit(_claim(study, **changes), tmp_path / "out")
    assert result.exit_code == 2 and key in result.output and "policy file" in result.output
    assert verdict is None and not (tmp_path / "out").exists()


def test_an_unknown_method_with_allow_inconclusive_exits_2(study, tmp_path):
    result, verdict = _audit(_claim(study, method="cr3"), tmp_path / "out", "--allow-inconclusive")
    assert result.exit_code == 2 and "'cr3' is not one of" in result.output and verdict is None


def test_orders_the_policy_lost_relabelled_invalid_count_against_it(study, tmp_path):
    rows = [json.loads(line) for line in (study / "judgments.jsonl").read_text().splitlines()]
    system = {
        r["response_id"]: r["system"] for r in map(json.loads, (study / "responses.jsonl").read_text().splitlines())
    }
    relabelled = 0
    for row in rows:
        if row["judge"] != JUDGE or row["verdict"] not in ("first", "second"):
            continue
        winner = row["response_first"] if row["verdict"] == "first" else row["response_second"]
        if system[winner] == "gpt-4-0314" and {system[row["response_first"]], system[row["response_second"]]} == {
            "gpt-4-0314",
            "reappraisal-4b-grpo",
        }:
            row["verdict"], relabelled = "invalid", relabelled + 1
    (study / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert relabelled > 50
    result, verdict = _audit(_claim(study, bar=0.9, claimed=None), tmp_path / "out")
    assert result.exit_code == 1, result.output
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert gates["ci_low_clears_bar"]["verdict"] == "FAIL" and gates["ci_low_clears_bar"]["evidence"]["ci_low"] < 0.8
    assert gates["valid_verdicts"]["verdict"] == "FAIL"  # dropped, they would have decided it
    assert verdict["contests"]["n_invalid"] > 50


def test_a_judge_that_always_names_position_a_fails_even_with_allow_inconclusive(study, tmp_path):
    rows = [json.loads(line) for line in (study / "judgments.jsonl").read_text().splitlines()]
    for row in rows:
        if row["judge"] == JUDGE:
            row["verdict"] = "first"
    (study / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result, verdict = _audit(_claim(study, bar=0.3, claimed=None), tmp_path / "out", "--allow-inconclusive")
    assert result.exit_code == 1, result.output
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert gates["position_bias"]["verdict"] == "FAIL"
    assert verdict["exit_code"] == result.exit_code == 1


def test_an_inconclusive_claim_publishes_no_model_card_figure(study, tmp_path):
    result, verdict = _audit(_claim(study, claimed=None), tmp_path / "out", "--allow-inconclusive")
    assert verdict["verdict"] != "PASS"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "model-index" not in report and "value:" not in report
    assert verdict["exit_code"] == result.exit_code
