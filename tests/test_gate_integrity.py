"""Gate integrity: over random gate outcomes, an audit never says PASS or exits 0 while a required
gate has not passed (with --allow-inconclusive: only INCONCLUSIVE may pass; WARN and FAIL block)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from honestci.audit.gate_registry import overall_verdict
from honestci.audit.pipeline import AuditResult
from honestci.audit.policy import EXIT_BLOCKED, EXIT_PASS, GATE_ORDER, GateResult, Verdict
from honestci.audit.stats.intervals import IntervalTable

settings.register_profile("gate-integrity", derandomize=True, max_examples=300, deadline=None)

outcomes = st.dictionaries(st.sampled_from(GATE_ORDER), st.sampled_from(list(Verdict)))
required_sets = st.sets(st.sampled_from(GATE_ORDER))


def audit_result(gates: dict[str, Verdict], required) -> AuditResult:
    """A minimal AuditResult holding only gate outcomes (nothing else affects verdict or exit code)."""
    return AuditResult(
        claim_name="c",
        claim_path="claim.yaml",
        policy="p",
        opponent="o",
        judge="j",
        bar=0.5,
        population="new_vignettes",
        gate_method="cr2",
        intervals=IntervalTable("win rate", ()),
        n_contests=0,
        n_invalid=0,
        dropped={},
        gates=tuple(GateResult(name, verdict, f"{name} says {verdict}") for name, verdict in gates.items()),
        required_gates=tuple(required),
        claimed=None,
        claimed_audit=None,
        comparisons=(),
        bayes_summary=None,
        per_vignette=(),
        sections=(),
        provenance={},
    )


def required_verdicts(gates: dict[str, Verdict], required) -> list[Verdict]:
    """The verdict of each required gate; a required gate that did not run is INCONCLUSIVE."""
    return [gates.get(name, Verdict.INCONCLUSIVE) for name in required]


@settings(settings.get_profile("gate-integrity"))
@given(outcomes, required_sets)
def test_never_pass_or_exit_0_unless_every_required_gate_passes(gates, required):
    result = audit_result(gates, required)
    all_pass = all(v == Verdict.PASS for v in required_verdicts(gates, required))
    assert (result.verdict == Verdict.PASS) == all_pass
    assert (result.exit_code() == EXIT_PASS) == all_pass
    document = result.to_dict()
    assert (document["verdict"] == "PASS") == all_pass and (document["exit_code"] == 0) == all_pass


@settings(settings.get_profile("gate-integrity"))
@given(outcomes, required_sets)
def test_allow_inconclusive_lets_only_inconclusive_through(gates, required):
    # A required gate with no result did not run: it blocks even with --allow-inconclusive.
    result = audit_result(gates, required)
    verdicts = required_verdicts(gates, required)
    allowed = set(required) <= set(gates) and all(v in (Verdict.PASS, Verdict.INCONCLUSIVE) for v in verdicts)
    assert (result.exit_code(allow_inconclusive=True) == EXIT_PASS) == allowed
    if Verdict.WARN in verdicts or Verdict.FAIL in verdicts:
        assert result.exit_code(allow_inconclusive=True) == EXIT_BLOCKED


def test_allow_inconclusive_never_passes_a_required_gate_that_did_not_run():
    ran = audit_result(
        {"enough_clusters": Verdict.PASS, "leakage": Verdict.INCONCLUSIVE}, ("enough_clusters", "leakage")
    )
    assert ran.exit_code(allow_inconclusive=True) == EXIT_PASS
    not_run = replace(
        ran, gates=(ran.gates[0], GateResult("leakage", Verdict.INCONCLUSIVE, "not run: no corpus", ran=False))
    )
    assert not_run.exit_code(allow_inconclusive=True) == EXIT_BLOCKED
    assert replace(not_run, allow_inconclusive=True).to_dict()["exit_code"] == EXIT_BLOCKED
    assert replace(ran, allow_inconclusive=True).to_dict()["exit_code"] == EXIT_PASS  # verdict.json = the process


@settings(settings.get_profile("gate-integrity"))
@given(outcomes, required_sets)
def test_verdict_is_the_worst_required_and_ignores_optional_gates(gates, required):
    verdict = overall_verdict(audit_result(gates, required).gates, required)
    assert verdict == max(required_verdicts(gates, required), default=Verdict.PASS)
    optional_flipped = {name: (Verdict.FAIL if name not in required else v) for name, v in gates.items()}
    assert overall_verdict(audit_result(optional_flipped, required).gates, required) == verdict


def test_warn_behind_inconclusive_blocks_even_when_inconclusive_is_allowed():
    # The bug this guards: the worst verdict was INCONCLUSIVE, so --allow-inconclusive exited 0
    # although a required gate said WARN.
    result = audit_result(
        {"enough_clusters": Verdict.WARN, "ci_low_clears_bar": Verdict.INCONCLUSIVE},
        ("enough_clusters", "ci_low_clears_bar"),
    )
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.exit_code(allow_inconclusive=True) == EXIT_BLOCKED


def test_a_required_gate_that_did_not_run_never_passes():
    result = audit_result({"enough_clusters": Verdict.PASS}, ("enough_clusters", "ci_low_clears_bar"))
    assert result.verdict == Verdict.INCONCLUSIVE and result.exit_code() == EXIT_BLOCKED


@pytest.mark.parametrize("required", [[], ["enough_clusters"]])
def test_a_claim_cannot_drop_a_required_gate(tmp_path, required):
    # `required_gates: []` or a short list would let a claim skip the bar gate: exit 2, naming the
    # key and the gates it leaves out, and nothing is written.
    from click.testing import CliRunner
    from synthetic_study import claim_dict, write_study

    from honestci.audit.cli import main

    claim = write_study(tmp_path / "study", claim=claim_dict(required_gates=required, bar=0.99))
    result = CliRunner().invoke(main, ["audit", str(claim), "--out", str(tmp_path / "out"), "--no-bayes"])
    assert result.exit_code == 2, result.output
    assert "required_gates" in result.output and "ci_low_clears_bar" in result.output
    assert "policy file" in result.output
    assert not (tmp_path / "out").exists()
