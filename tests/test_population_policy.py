"""The populations a claim may assert are the policy's (issue 32, "Population"): ``these_vignettes``
only by a policy file's leave, and ``new_seeds`` (a claim about the recipe) gated on the seeds
check's new-seed interval (audit/policy.py ``BUILTIN_POPULATIONS``, audit/checks/seeds.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from honestci.audit.cli import main
from honestci.audit.data.claims import load_claim
from honestci.audit.data.policy_file import PolicyError, load_policy
from honestci.audit.errors import ClaimError
from honestci.audit.gate_registry import run_gate
from honestci.audit.pipeline import audit_context
from honestci.audit.policy import POPULATION_LABELS, Policy, Verdict
from honestci.fixtures.population_studies import SEED_SYSTEMS, SEEDS_DIR
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

SEEDS = DEFAULT_STUDY_DIR / SEEDS_DIR
RECIPE_POLICY = "version: 1\nname: recipe-claims\npopulations: [new_vignettes, new_seeds]\n"


def _claim(folder: Path, source: Path, **changes) -> Path:
    """``source``'s claim with ``changes`` (None drops a key), written into ``folder`` beside its tables."""
    folder.mkdir(parents=True, exist_ok=True)
    claim = yaml.safe_load(source.read_text(encoding="utf-8"))
    for name in claim["data"].values():
        shutil.copy(source.parent / name, folder / name)
    for key, value in changes.items():
        if value is None:
            claim.pop(key, None)
        else:
            claim[key] = value
    path = folder / "claim.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False), encoding="utf-8")
    return path


def _policy(folder: Path, text: str) -> Path:
    path = folder / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _audit(claim: Path, out: Path, *flags: str):
    result = CliRunner().invoke(main, ["audit", str(claim), "--out", str(out), "--no-bayes", *flags])
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() else None
    return result, verdict


# --- the policy key ----------------------------------------------------------------------------


def test_the_built_in_policy_allows_new_vignettes_only_and_hashes_its_populations(tmp_path):
    assert Policy().populations == ("new_vignettes",)
    assert Policy().content()["populations"] == ["new_vignettes"]
    policy = load_policy(
        _policy(tmp_path, "version: 1\nname: lenient\npopulations: [new_vignettes, these_vignettes]\n")
    )
    assert policy.populations == ("new_vignettes", "these_vignettes") and policy.sha256 != Policy().sha256
    (deviation,) = [d for d in policy.deviations() if d["key"] == "populations"]
    assert deviation["default"] == ("new_vignettes",) and deviation["source"].startswith("policy file ")


def test_a_claim_cannot_set_its_own_populations(tmp_path):
    claim = _claim(tmp_path, DEFAULT_STUDY_DIR / "claim.yaml", populations=["these_vignettes"])
    with pytest.raises(ClaimError, match="populations"):
        load_claim(claim)


@pytest.mark.parametrize(
    "body, field",
    [
        ("populations: [new_vignettes, everyone]\n", "populations"),
        ("populations: []\n", "populations"),
        ("populations: [these_vignettes]\n", "thresholds.default_population"),
        ("thresholds: {default_population: new_seeds}\n", "thresholds.default_population"),
    ],
    ids=["unknown", "empty", "default-outside", "default-recipe"],
)
def test_a_policy_file_with_unusable_populations_is_refused(tmp_path, body, field):
    with pytest.raises(PolicyError) as error:
        load_policy(_policy(tmp_path, f"version: 1\nname: bad\n{body}"))
    assert field in str(error.value)


def test_a_policy_file_naming_an_unknown_population_exits_2(tmp_path):
    claim = _claim(tmp_path / "study", DEFAULT_STUDY_DIR / "claim.yaml")
    policy = _policy(tmp_path, "version: 1\nname: bad\npopulations: [new_vignettes, everyone]\n")
    result, verdict = _audit(claim, tmp_path / "out", "--policy", str(policy))
    assert result.exit_code == 2 and verdict is None
    assert "populations" in result.output and "everyone" in result.output


# --- these vignettes: only by the policy's leave --------------------------------------------------


def test_a_these_vignettes_claim_exits_2_under_the_built_in_policy(tmp_path):
    claim = _claim(tmp_path / "study", DEFAULT_STUDY_DIR / "claim.yaml", population="these_vignettes")
    result, verdict = _audit(claim, tmp_path / "out")
    assert result.exit_code == 2 and verdict is None, result.output
    (line,) = [line for line in result.output.splitlines() if "field 'population'" in line]
    assert str(claim) in line and "'these_vignettes'" in line
    assert "policy file (populations, --policy)" in line  # the fix: an auditor's policy file listing it


def test_a_these_vignettes_claim_runs_under_a_policy_that_allows_it(tmp_path):
    claim = _claim(tmp_path / "study", DEFAULT_STUDY_DIR / "claim.yaml", population="these_vignettes")
    policy = _policy(tmp_path, "version: 1\nname: lenient\npopulations: [new_vignettes, these_vignettes]\n")
    result, verdict = _audit(claim, tmp_path / "out", "--policy", str(policy))
    assert result.exit_code in (0, 1), result.output
    gate = next(g for g in verdict["gates"] if g["gate"] == "ci_low_clears_bar")
    assert gate["evidence"]["population"] == "these_vignettes" and gate["evidence"]["method"] == "stratified"
    assert any(d["key"] == "populations" for d in verdict["audit_policy"]["deviations"])


def test_a_policy_default_population_applies_to_a_claim_that_names_none(tmp_path):
    claim = _claim(tmp_path / "study", DEFAULT_STUDY_DIR / "claim.yaml", population=None)
    policy = load_policy(
        _policy(
            tmp_path,
            "version: 1\nname: conditional\npopulations: [these_vignettes]\n"
            "thresholds: {default_population: these_vignettes}\n",
        )
    )
    assert load_claim(claim, policy=policy).spec.population == "these_vignettes"
    assert load_claim(claim).spec.population == "new_vignettes"


# --- new seeds: a claim about the recipe -----------------------------------------------------------


def test_a_new_seeds_claim_needs_seeds_and_the_policys_leave(tmp_path):
    without = _claim(tmp_path / "a", SEEDS / "claim-seeds.yaml", population="new_seeds", seeds=None)
    with pytest.raises(ClaimError, match="seeds"):
        load_claim(without, policy=load_policy(_policy(tmp_path, RECIPE_POLICY)))
    recipe = _claim(tmp_path / "b", SEEDS / "claim-seeds.yaml", population="new_seeds")
    with pytest.raises(ClaimError, match="population"):
        load_claim(recipe)  # the built-in policy: new vignettes only


@pytest.fixture(scope="module")
def recipe_contexts(tmp_path_factory):
    """The seeds fixture claimed about the recipe (policy file allowing it) and about its checkpoint."""
    folder = tmp_path_factory.mktemp("recipe")
    policy = load_policy(_policy(folder, RECIPE_POLICY))
    recipe = _claim(folder / "recipe", SEEDS / "claim-seeds.yaml", population="new_seeds")
    checkpoint = _claim(folder / "checkpoint", SEEDS / "claim-seeds.yaml")
    return audit_context(recipe, policy=policy, bayes=False), audit_context(checkpoint, policy=policy, bayes=False)


def test_the_recipe_gate_reads_the_new_seed_ci_low_and_fails_where_the_checkpoint_clears(recipe_contexts):
    recipe, checkpoint = recipe_contexts
    check = recipe.checks["seeds"]
    gate = run_gate("ci_low_clears_bar", recipe)
    bar = recipe.claim.spec.bar
    # The number the gate reads is the seeds check's new-seed (new vignettes) CI-low, exactly.
    assert gate.evidence["ci_low"] == check.decomposition.ci_new[0]
    assert gate.evidence["method"] == "new_seed" and gate.evidence["population"] == "new_seeds"
    assert gate.evidence["n_seeds"] == len(SEED_SYSTEMS) and gate.evidence["n_shared_vignettes"] == 6
    # On this fixture the five seeds' spread puts a new seed's CI-low (0.588) below the bar 0.608,
    # while the claimed seed's own interval (0.628, the posterior quantile) clears it.
    own = run_gate("ci_low_clears_bar", checkpoint)
    assert check.decomposition.ci_new[0] < bar <= own.evidence["ci_low"]
    assert gate.evidence["policy_seed_ci_low"] == pytest.approx(own.evidence["ci_low"])
    assert gate.verdict == Verdict.FAIL and own.verdict == Verdict.PASS
    assert gate.message.startswith("new-seed interval CI-low 0.588 < bar 0.608") and "recipe" in gate.message
    assert any("the bar gate reads the new-seed interval" in line for line in check.summary_lines())


def test_the_recipe_gate_is_inconclusive_below_min_seeds(tmp_path):
    policy = load_policy(_policy(tmp_path, RECIPE_POLICY))
    claim = _claim(tmp_path / "s", SEEDS / "claim-seeds.yaml", population="new_seeds", thresholds={"min_seeds": 6})
    gate = run_gate("ci_low_clears_bar", audit_context(claim, policy=policy, bayes=False))
    assert gate.verdict == Verdict.INCONCLUSIVE and gate.ran is False
    assert "no new-seed interval" in gate.message and "min_seeds = 6" in gate.message


def test_a_recipe_claim_is_reported_with_its_population(tmp_path):
    policy = _policy(tmp_path, RECIPE_POLICY)
    claim = _claim(tmp_path / "study", SEEDS / "claim-seeds.yaml", population="new_seeds", bar=0.5)
    result, verdict = _audit(claim, tmp_path / "out", "--policy", str(policy))
    assert result.exit_code in (0, 1), result.output
    gate = next(g for g in verdict["gates"] if g["gate"] == "ci_low_clears_bar")
    assert gate["verdict"] == "PASS" and gate["message"].startswith("new-seed interval CI-low")
    row = next(r for r in verdict["intervals"] if r["population"] == "new_seeds")
    assert row["ci_low"] == gate["evidence"]["ci_low"]
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert POPULATION_LABELS["new_seeds"] in report
    assert POPULATION_LABELS["new_seeds"] in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
