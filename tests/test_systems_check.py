"""The audit's K-system check and the ``multiple_comparisons`` gate on the fixture study: the
policy ranked among the claim's ``systems``, and a claimed family corrected as the policy says."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import yaml

from honestci.audit.checks.systems import systems_check
from honestci.audit.data.claims import ClaimedComparison, ClaimedFigures, ClaimError, load_claim
from honestci.audit.data.policy_file import load_policy
from honestci.audit.gate_registry import evidence_given
from honestci.audit.gates import gate_best_of_systems_selection, gate_multiple_comparisons
from honestci.audit.pipeline import audit_context
from honestci.audit.policy import Verdict
from honestci.audit.stats.selection.systems import holm
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

POLICY, OPPONENT = "reappraisal-4b-grpo", "gpt-4-0314"
OTHERS = ["reappraisal-4b-grpo-v1", "r1-reference", "qwen3-4b-base"]


def _claim(folder, **changes):
    for table in DEFAULT_STUDY_DIR.glob("*.jsonl"):
        shutil.copy(table, folder / table.name)
    claim = yaml.safe_load((DEFAULT_STUDY_DIR / "claim.yaml").read_text())
    claim.pop("claimed")
    claim.update(changes)
    path = folder / "claim.yaml"
    path.write_text(yaml.safe_dump(claim))
    return path


@pytest.fixture(scope="module")
def best_of_four(tmp_path_factory):
    path = _claim(tmp_path_factory.mktemp("systems"), systems=OTHERS, claimed={"point": 0.843, "best_of_systems": True})
    return audit_context(path, bayes=False)


def test_family_is_the_policy_against_each_system_with_holm_over_the_family(best_of_four):
    check = best_of_four.checks["systems"]
    family = check.family_frame().set_index("against")
    assert list(family.index) == OTHERS and set(family["source"]) == {"best_of_systems"}
    pairs = check.winrates.pairs
    raw = []
    for other in OTHERS:
        row = pairs[(pairs.system_a.isin([POLICY, other])) & (pairs.system_b.isin([POLICY, other]))].iloc[0]
        sign = 1 if row.system_a == POLICY else -1
        assert family.loc[other, "estimate"] == pytest.approx(sign * row.estimate, abs=1e-12)
        raw.append(row.p)
    # Holm over the claimed family (m = 3), not over all 6 pairs of the 4 systems.
    np.testing.assert_allclose(family["p_adjusted"], holm(raw), atol=1e-12)
    assert family["holds"].all()
    gate = gate_multiple_comparisons(check)
    assert gate.verdict is Verdict.PASS and "holm over 3" in gate.message


def test_section_ranks_every_system_with_rate_strength_and_length_controlled_rate(best_of_four):
    section = best_of_four.checks["systems"].report_section()
    assert section.table[0]["system"] == POLICY
    assert {row["system"] for row in section.table} == {POLICY, *OTHERS}
    rates = [row["win_rate"] for row in section.table]
    assert rates == sorted(rates, reverse=True)
    for row in section.table:
        assert row["ci_low"] <= row["win_rate"] <= row["ci_high"]
        assert row["strength_low"] <= row["strength"] <= row["strength_high"]
        assert "lc_win_rate" in row
    assert any("rank interval" in line for line in section.lines)


def test_the_correction_decides_and_an_uncorrected_reading_is_named(best_of_four):
    # The max-|t| bootstrap (a Policy built in code; policy files may not choose it) corrects over
    # all 6 pairs: r1-reference (p 0.025 alone) no longer holds.
    maxt = dataclasses.replace(best_of_four.claim.policy, multiplicity="maxt")
    check = systems_check(dataclasses.replace(best_of_four, claim=dataclasses.replace(best_of_four.claim, policy=maxt)))
    family = check.family_frame().set_index("against")
    assert family.loc["r1-reference", "holds_uncorrected"] and not family.loc["r1-reference", "holds"]
    gate = gate_multiple_comparisons(check)
    assert gate.verdict is Verdict.FAIL
    assert "r1-reference" in gate.message and "uncorrected" in gate.message


def test_policy_file_sets_multiplicity_and_a_claim_cannot(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nname: fdr\nmultiplicity: bh\n")
    assert load_policy(policy).multiplicity == "bh"
    # max-t's seeded family-wise error ran above nominal (docs/methods.md): no policy may gate on it.
    policy.write_text("version: 1\nname: fwer-bootstrap\nmultiplicity: maxt\n")
    with pytest.raises(Exception, match="not certified"):
        load_policy(policy)
    policy.write_text("version: 1\nname: bad\nmultiplicity: none\n")
    with pytest.raises(Exception, match="multiplicity"):
        load_policy(policy)
    with pytest.raises(ClaimError, match="multiplicity"):
        load_claim(_claim(tmp_path, systems=OTHERS, multiplicity="bh"))


def test_systems_key_is_checked(tmp_path):
    for bad in ([POLICY], [OPPONENT], ["r1-reference", "r1-reference"]):
        with pytest.raises(ClaimError, match="systems"):
            load_claim(_claim(tmp_path, systems=bad))
    with pytest.raises(ClaimError, match="best_of_systems"):
        load_claim(_claim(tmp_path, claimed={"best_of_systems": True}))


def _with_spec(context, **update):
    spec = context.claim.spec.model_copy(update=update)
    return dataclasses.replace(context, claim=dataclasses.replace(context.claim, spec=spec))


def test_no_family_claimed_passes_and_one_comparison_makes_no_family(best_of_four):
    assert gate_multiple_comparisons(None).verdict is Verdict.PASS
    one = ClaimedFigures(comparisons=(ClaimedComparison(against="r1-reference", kind="paired_difference"),))
    assert systems_check(_with_spec(best_of_four, systems=None, claimed=one)) is None
    # Systems listed without a claimed family: a descriptive table, and the gate passes.
    listed = systems_check(_with_spec(best_of_four, claimed=None))
    assert listed.family == () and gate_multiple_comparisons(listed).verdict is Verdict.PASS


def test_best_of_systems_is_a_selection_that_the_winners_curse_gate_corrects(tmp_path):
    # Eight close checkpoints: grpo-ckpt-5 is the observed best. Its own CR2 interval clears 0.65; the
    # AKM hybrid interval of the winner of eight, which conditions on that choice, does not.
    checkpoints = [f"grpo-ckpt-{i}" for i in range(1, 9)]
    claim = _claim(
        tmp_path,
        policy="grpo-ckpt-5",
        bar=0.65,
        systems=[c for c in checkpoints if c != "grpo-ckpt-5"],
        claimed={"best_of_systems": True},
    )
    context = audit_context(claim, bayes=False)
    check = context.checks["systems"]
    selection = check.selection
    assert selection.winner == "grpo-ckpt-5" and selection.candidates == tuple(sorted(checkpoints))
    rates = check.winrates.to_frame().set_index("system")
    np.testing.assert_allclose(np.sqrt(np.diag(check.winrates.covariance)), rates["se"], rtol=1e-12)
    assert rates.loc["grpo-ckpt-5", "ci_low"] >= 0.65 and selection.naive_ci[0] >= 0.65 > selection.hybrid_ci[0]
    # The few-cluster path: with 6 vignettes the naive winner interval is the logit t(5) interval,
    # wider than a normal one on the same covariance.
    z_width = 2 * 1.959964 * rates.loc["grpo-ckpt-5", "se"]
    assert selection.naive_ci[1] - selection.naive_ci[0] > z_width
    gate = gate_best_of_systems_selection(check, 0.65)
    assert gate.verdict is Verdict.INCONCLUSIVE and "best of 8" in gate.message
    # None of the seven leads is significant: the family fails as well.
    assert gate_multiple_comparisons(check).verdict is Verdict.FAIL
    assert "winners_curse" in evidence_given(context)
