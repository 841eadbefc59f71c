"""The policy decides, not the claim: policy files, and claims that may only tighten them."""

from __future__ import annotations

import pytest
import yaml
from synthetic_study import claim_dict, write_study

from honestci.audit.data.claims import load_claim
from honestci.audit.data.policy_file import PolicyError, load_policy
from honestci.audit.data.yaml_io import MAX_DEPTH, read_yaml_mapping
from honestci.audit.errors import ClaimError, InputError
from honestci.audit.policy import (
    DEFAULT_REQUIRED_GATES,
    TIGHTENS,
    Policy,
    Thresholds,
    loosening,
)


def _policy_file(tmp_path, **content):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "acme", **content}))
    return path


def test_the_built_in_policy_has_no_deviation_and_a_stable_hash():
    policy = load_policy(None)
    assert policy == Policy() and policy.deviations() == ()
    assert policy.sha256 == Policy().sha256 and len(policy.sha256) == 64
    assert policy.gate_method("new_vignettes") == "bayes_logit_normal"


def test_a_policy_file_sets_the_rules_and_names_its_deviations(tmp_path):
    path = _policy_file(
        tmp_path,
        thresholds={"confidence_level": 0.9, "min_clusters": 8},
        required_gates=["enough_clusters", "ci_low_clears_bar", "leakage"],
        invalid_verdicts="tie",
        missing_orders="exclude",
    )
    policy = load_policy(path)
    assert policy.thresholds.confidence_level == 0.9 and policy.thresholds.min_clusters == 8
    assert policy.required_gates == ("enough_clusters", "ci_low_clears_bar", "leakage")
    assert policy.sha256 != Policy().sha256
    deviations = {d["key"]: d for d in policy.deviations()}
    assert set(deviations) == {
        "thresholds.confidence_level",
        "thresholds.min_clusters",
        "required_gates",
        "invalid_verdicts",
        "missing_orders",
    }
    assert policy.missing_orders == "exclude"
    assert deviations["thresholds.confidence_level"]["default"] == 0.95
    assert all(str(path.resolve()) in d["source"] for d in deviations.values())


@pytest.mark.parametrize(
    "content, field",
    [
        ({"gate_methods": {"new_vignettes": "cr1"}}, "gate_methods"),
        ({"gate_methods": {"new_vignettes": "iid_wilson"}}, "gate_methods"),
        ({"thresholds": {"confidence_level": 1.5}}, "thresholds.confidence_level"),
        ({"thresholds": {"min_clusters": 1}}, "thresholds.min_clusters"),
        ({"thresholds": {"no_such_threshold": 1}}, "thresholds"),
        ({"required_gates": ["no_such_gate"]}, "required_gates"),
        ({"invalid_verdicts": "for_claim"}, "invalid_verdicts"),
        ({"missing_orders": "for_claim"}, "missing_orders"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_policy_file_cannot_set_what_a_gate_cannot_use(tmp_path, content, field):
    with pytest.raises(PolicyError) as error:
        load_policy(_policy_file(tmp_path, **content))
    assert any(p.field is not None and p.field.startswith(field) for p in error.value.problems), error.value


@pytest.mark.parametrize(
    "thresholds",
    [
        {"confidence_level": 0.5},
        {"min_clusters": 3},
        {"rhat_max": 1.1},
        {"min_judge_agreement": 0.5},
        {"position_bias_tolerance": 0.5},
        {"leakage_min_overlap": 0.9},
        {"training_window_fraction": 0.3},  # no strict direction: a policy file's to set
    ],
)
def test_a_claim_cannot_loosen_a_threshold(tmp_path, thresholds):
    claim = write_study(tmp_path / "study", claim=claim_dict(thresholds=thresholds))
    with pytest.raises(ClaimError) as error:
        load_claim(claim)
    (name,) = thresholds
    assert [p.field for p in error.value.problems] == [f"thresholds.{name}"]
    assert "policy file" in str(error.value)


def test_a_claim_may_tighten_and_the_report_can_say_so(tmp_path):
    claim_path = write_study(
        tmp_path / "study",
        claim=claim_dict(
            thresholds={"confidence_level": 0.99, "min_clusters": 6},
            required_gates=[*DEFAULT_REQUIRED_GATES, "leakage"],
        ),
    )
    claim = load_claim(claim_path)
    assert claim.thresholds.confidence_level == 0.99 and claim.thresholds.min_clusters == 6
    assert claim.policy.required_gates == (*DEFAULT_REQUIRED_GATES, "leakage")
    sources = {d["key"]: d["source"] for d in claim.policy.deviations()}
    assert set(sources) == {"thresholds.confidence_level", "thresholds.min_clusters", "required_gates"}
    assert all(source.startswith("claim ") for source in sources.values())


def test_a_claim_is_judged_by_the_auditors_policy_not_the_default(tmp_path):
    policy = load_policy(_policy_file(tmp_path, thresholds={"min_clusters": 8}))
    claim_path = write_study(tmp_path / "study", claim=claim_dict(thresholds={"min_clusters": 6}))
    with pytest.raises(ClaimError, match="loosens the policy's 8"):
        load_claim(claim_path, policy=policy)
    tighter = write_study(tmp_path / "tighter", claim=claim_dict(thresholds={"min_clusters": 10}))
    assert load_claim(tighter, policy=policy).thresholds.min_clusters == 10


def test_every_directed_threshold_refuses_the_lax_way_and_accepts_the_strict_one():
    defaults = Thresholds()
    for name, direction in TIGHTENS.items():
        value = getattr(defaults, name)
        step = 1 if isinstance(value, int) else 0.01
        stricter, laxer = (value + step, value - step) if direction == "higher" else (value - step, value + step)
        assert loosening(defaults, name, stricter) is None, name
        assert loosening(defaults, name, laxer) is not None, name
        assert loosening(defaults, name, value) is None, name


@pytest.mark.parametrize(
    "text, needle",
    [
        (
            "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(6)),
            "alias bomb",
        ),
        ("x: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n", "deeper"),
        ("bar: 0.9\nbar: 0.1\n", "duplicate key"),
        ("- 1\n- 2\n", "mapping"),
        ("", "empty"),
        ("x: !!python/name:os.system\n", "not valid YAML"),
    ],
)
def test_hostile_yaml_is_an_input_error_naming_the_file(tmp_path, text, needle):
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        read_yaml_mapping(path, "Claim file")
    assert str(path) in str(error.value)
    assert needle in str(error.value)
