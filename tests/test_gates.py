"""The gate registry: every gate of the policy's records is registered once, in
audit/gate_registry.py, and keeps the gate contract on the fixture study and on a context where no optional check ran; no other module
makes a verdict, and no check reaches above its floor."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from honestci.audit.checks.context import ComparisonCheck
from honestci.audit.checks.leakage import leakage_check
from honestci.audit.checks.registry import CHECKS
from honestci.audit.checks.systems import systems_check
from honestci.audit.checks.training_health import assess_training_log
from honestci.audit.data.io import load_table
from honestci.audit.gate_registry import GATES, run_gate, run_gates
from honestci.audit.gates import gate_ci_low_clears_bar, gate_comparison_valid
from honestci.audit.pipeline import audit_context
from honestci.audit.policy import GATE_ORDER, GATE_RECORDS, GATE_REMEDY, GateResult, Verdict
from honestci.audit.stats.frequentist.compare import PairedDifference
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

ROOT = Path(__file__).resolve().parents[1]
#: Gates that read a check or a model that may not have run: without it they must say "not run".
NEEDS_A_CHECK = (
    "sampler_converged",
    "judge_calibrated",
    "position_bias",
    "winners_curse",
    "leakage",
    "training_healthy",
)


def _training_log(path: Path) -> Path:
    """A short healthy GRPO log (reward rising, KL small, entropy and reward spread steady)."""
    rows = [
        {"step": s, "reward": 0.1 * s, "reward_std": 0.5, "kl": 0.01, "entropy": 1.5, "frac_reward_zero_std": 0.1}
        for s in range(1, 21)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fixture_context(tmp_path_factory):
    """The fixture's headline claim (Bayes off), with its corpus scanned, a training log read and
    two other systems ranked beside the policy, so every check of the registry has a result."""
    context = audit_context(DEFAULT_STUDY_DIR / "claim.yaml", bayes=False)
    with_corpus = replace(
        context, study=replace(context.study, corpus=load_table(DEFAULT_STUDY_DIR / "corpus.jsonl", "corpus"))
    )
    log = _training_log(tmp_path_factory.mktemp("training") / "training_log.jsonl")
    ranked = context.claim.spec.model_copy(update={"systems": ("reappraisal-4b-grpo-v1", "r1-reference")})
    checks = {
        **context.checks,
        "systems": systems_check(replace(context, claim=replace(context.claim, spec=ranked))),
        "leakage": leakage_check(with_corpus),
        "training_health": assess_training_log(log, context.claim.thresholds),
    }
    return replace(context, checks=checks)


@pytest.fixture(scope="module")
def bare_context(fixture_context):
    """The same claim where every optional check returned None and nothing optional was claimed."""
    return replace(
        fixture_context, bayes=None, claimed_audit=None, comparisons=(), checks={key: None for key, _ in CHECKS}
    )


def test_the_registry_holds_exactly_the_policy_gates_in_order():
    assert tuple(GATES) == GATE_ORDER == tuple(record.name for record in GATE_RECORDS)


def test_every_record_says_what_would_turn_its_gate():
    """The report summary's remedies come from the records: one for every gate, none for a gate
    that is not one, and every check a record reads is a check of the audit."""
    assert set(GATE_REMEDY) == set(GATE_ORDER)
    assert all(record.remedy.strip() for record in GATE_RECORDS)
    assert {record.reads for record in GATE_RECORDS} - {None} <= {key for key, _ in CHECKS}


def test_the_gate_rules_import_without_pandas_or_scipy():
    """A one-check command applies a rule without loading the estimators: the rules import only
    the policy at run time (the results they read are annotations)."""
    probe = "import sys, honestci.audit.gates; print(sorted({'pandas', 'scipy'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("which", ["fixture_context", "bare_context"])
def test_every_registered_gate_keeps_the_gate_contract(request, which):
    context = request.getfixturevalue(which)
    # the panel check applies only to a claim that names a panel (its gates: tests/test_panel.py);
    # the populations check (no gate) only to vignettes of two or more families (tests/test_populations.py),
    # the seeds check (no gate) only to a claim that lists training seeds (tests/test_seeds.py)
    applicable = [result for key, result in context.checks.items() if key not in ("panel", "populations", "seeds")]
    assert all(result is not None for result in applicable) == (which == "fixture_context")
    for name, gate in GATES.items():
        result = gate(context)
        assert isinstance(result, GateResult) and result.name == name
        assert isinstance(result.verdict, Verdict)
        assert isinstance(result.message, str) and result.message.strip(), name
        json.dumps(result.evidence, allow_nan=False)
        assert run_gate(name, context) == result
    assert tuple(g.name for g in run_gates(context)) == GATE_ORDER


def test_a_gate_whose_check_did_not_run_never_passes(bare_context, fixture_context):
    for name in NEEDS_A_CHECK:
        result = run_gate(name, bare_context)
        assert result.verdict == Verdict.INCONCLUSIVE and result.message.startswith("not run"), result
    ran = {g.name: g for g in run_gates(fixture_context)}
    # With their checks run, the fixture's planted leaks FAIL and the healthy log PASSes.
    assert ran["leakage"].verdict == Verdict.FAIL and ran["training_healthy"].verdict == Verdict.PASS
    assert not any(ran[name].message.startswith("not run") for name in NEEDS_A_CHECK if name != "sampler_converged")


@pytest.mark.parametrize("ci_low, verdict", [(0.05, Verdict.PASS), (0.0, Verdict.PASS), (-0.01, Verdict.FAIL)])
def test_every_lower_bound_meets_its_bar_by_the_one_rule(ci_low, verdict):
    # policy.clears_bar: a lower bound at the bar clears it, for the win rate and for a difference.
    assert gate_ci_low_clears_bar(0.6 + ci_low, 0.6, "cr2", "new_vignettes").verdict == verdict
    paired = PairedDifference("a", "b", "o", 0.1, 0.05, 5.0, 0.05, ci_low, 0.2, 0.95, 100, 100, 6)
    comparison = ComparisonCheck("b", "paired_difference", None, None, paired)
    assert gate_comparison_valid([comparison]).verdict == verdict


def test_an_unknown_gate_is_refused(fixture_context):
    with pytest.raises(KeyError, match="unknown gate 'vibes'"):
        run_gate("vibes", fixture_context)


# --- the floors, by reading the source ----------------------------------------------------------

#: Installed package folders (honestci.<name>) whose modules the AST checks read.
PACKAGES = ("audit", "judges", "training", "reports", "fixtures", "honestci")
#: What a check module may not import: every floor above the checks.
ABOVE_CHECKS = (
    "honestci.audit.gates",
    "honestci.audit.gate_registry",
    "honestci.audit.pipeline",
    "honestci.audit.cli",
    "honestci.reports",
    "honestci.judges",
    "honestci.training",
)


def _modules(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _imported(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names, at any depth (lazy imports too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _makes_a_verdict(tree: ast.AST) -> bool:
    """Whether the module calls ``GateResult(...)`` or names ``register_gate`` anywhere."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "GateResult"
        ):
            return True
        if (getattr(node, "id", None) or getattr(node, "attr", None)) == "register_gate" or (
            isinstance(node, ast.alias) and node.name == "register_gate"
        ):
            return True
    return False


def _private_imports(tree: ast.AST, prefixes: tuple[str, ...]) -> set[str]:
    """``module._name`` for each private name imported from a module starting with ``prefixes``."""
    return {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefixes)
        for alias in node.names
        if alias.name.startswith("_")
    }


def _parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_only_audit_gates_makes_a_gate_result():
    gate_modules = {ROOT / "audit" / "gates.py", ROOT / "audit" / "gate_registry.py"}
    offenders = [
        str(path.relative_to(ROOT))
        for path in _modules(*PACKAGES)
        if path not in gate_modules and _makes_a_verdict(_parse(path))
    ]
    assert offenders == []


def test_no_check_imports_a_floor_above_the_checks():
    offenders = {}
    for path in _modules("audit/checks"):
        above = sorted(name for name in _imported(_parse(path)) if name.startswith(ABOVE_CHECKS))
        if above:
            offenders[str(path.relative_to(ROOT))] = above
    assert offenders == {}


#: The deliberate loaders by name: the command line's lazy subcommands (so that `--help` imports
#: no pandas; tests/test_cli_startup.py checks every entry resolves), the probe of an optional
#: extra's third-party modules, and the fingerprint of the PyMC definitions a hand-derived density
#: was derived from (bayes imports the density module, so the density names bayes' functions).
NAME_LOADERS = {"audit/cli/support.py", "audit/errors.py", "audit/stats/bayesian/density.py"}


def test_no_module_is_loaded_by_a_string():
    # Checks and the leakage preflight are imported by name, so a missing one fails at import.
    loaders = {str(path.relative_to(ROOT)) for path in _modules(*PACKAGES) if "importlib" in _imported(_parse(path))}
    assert loaders == NAME_LOADERS


def test_judges_training_and_reports_use_public_names_of_the_core_and_of_the_plots():
    offenders = {}
    for path in _modules("judges", "training", "reports"):
        private = _private_imports(_parse(path), ("honestci.audit", "honestci.reports.plots"))
        if private:
            offenders[str(path.relative_to(ROOT))] = sorted(private)
    assert offenders == {}


def test_the_source_checks_see_a_violation():
    tree = ast.parse(
        "from honestci.audit.gates import register_gate\nfrom honestci.reports.plots import _svg\nimport importlib\n"
    )
    assert {"honestci.audit.gates", "importlib"} <= _imported(tree) and _makes_a_verdict(tree)
    assert _private_imports(tree, ("honestci.reports.plots",)) == {"honestci.reports.plots._svg"}
    assert _makes_a_verdict(ast.parse("from x import policy\npolicy.GateResult('g', 0, 'm')\n"))
    assert not _makes_a_verdict(ast.parse("from honestci.audit.policy import GateResult\nx: GateResult\n"))
