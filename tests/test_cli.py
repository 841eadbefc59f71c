"""The command line end to end: exit codes 0 (pass), 1 (blocked), 2 (bad input)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from honestci.audit.errors import InputError
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[1]


def honestci(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "honestci", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO_ROOT,
        timeout=600,
    )


def _claim_beside_fixture(tmp_path: Path, **changes) -> Path:
    """A copy of the headline claim in tmp_path whose data paths point at the embedded study."""
    claim = yaml.safe_load((DEFAULT_STUDY_DIR / "claim.yaml").read_text())
    claim["data"] = {table: str(DEFAULT_STUDY_DIR / name) for table, name in claim["data"].items()}
    claim.update(changes)
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False))
    return path


def test_headline_claim_warns_on_its_wilson_interval_and_writes_reports(tmp_path):
    # The bar gate passes (the posterior CI-low clears 0.608), but the card states an iid Wilson
    # interval on 6 vignettes: claimed_figures_reproduce WARNs, and a WARN blocks (exit 1).
    result = honestci("audit", DEFAULT_STUDY_DIR / "claim.yaml", "--out", tmp_path, "--no-bayes")
    assert result.returncode == 1, result.stderr
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    gates = {g["gate"]: g["verdict"] for g in verdict["gates"]}
    # length_bias is required by the policy (median answers 184 vs 130 characters) and INCONCLUSIVE:
    # the policy's answer is the longer in every contest, so length and quality are confounded.
    assert verdict["verdict"] == "INCONCLUSIVE" and verdict["exit_code"] == 1
    assert gates["ci_low_clears_bar"] == "PASS" and gates["claimed_figures_reproduce"] == "WARN"
    assert gates["length_bias"] == "INCONCLUSIVE" and "length_bias" in verdict["required_gates"]
    assert (tmp_path / "report.md").read_text().startswith("# honestci audit")
    assert "<html" in (tmp_path / "report.html").read_text()


def test_bar_above_the_honest_ci_low_is_blocked(tmp_path):
    # The CR2 (new-vignette) CI-low of the fixture is about 0.78 while the iid Wilson CI-low is
    # about 0.815: a bar between them passes the naive interval but must be blocked.
    claim = _claim_beside_fixture(tmp_path, bar=0.80)
    result = honestci("audit", claim, "--out", tmp_path / "out", "--no-bayes", "--allow-outside-data")
    assert result.returncode == 1, result.stdout + result.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    wilson = next(r for r in verdict["intervals"] if r["method"] == "wilson")
    assert wilson["ci_low"] > 0.80  # the naive interval would have let it through
    gate = next(g for g in verdict["gates"] if g["gate"] == "ci_low_clears_bar")
    assert gate["verdict"] == "FAIL"


def test_data_outside_the_claim_folder_needs_the_flag(tmp_path):
    claim = _claim_beside_fixture(tmp_path)
    result = honestci("audit", claim, "--out", tmp_path / "out", "--no-bayes")
    assert result.returncode == 2
    assert "outside the claim's folder" in result.stderr and "Traceback" not in result.stderr


def test_malformed_judgments_exit_2_with_file_line_and_field(tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    for name in ("vignettes.jsonl", "responses.jsonl", "judgments.jsonl"):
        (study / name).write_bytes((DEFAULT_STUDY_DIR / name).read_bytes())
    lines = (study / "judgments.jsonl").read_text().splitlines()
    row = json.loads(lines[41])
    row["verdict"] = "A"
    lines[41] = json.dumps(row)
    lines[99] = lines[99][:30]  # truncated JSON
    (study / "judgments.jsonl").write_text("\n".join(lines) + "\n")
    claim = yaml.safe_load((DEFAULT_STUDY_DIR / "claim.yaml").read_text())
    claim["data"] = {"vignettes": "vignettes.jsonl", "responses": "responses.jsonl", "judgments": "judgments.jsonl"}
    (study / "claim.yaml").write_text(yaml.safe_dump(claim))
    result = honestci("audit", study / "claim.yaml", "--out", tmp_path / "out", "--no-bayes")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "judgments.jsonl, line 42, field 'verdict'" in result.stderr
    assert "judgments.jsonl, line 100" in result.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_too_few_vignettes_block_even_with_allow_inconclusive(tmp_path):
    # Below min_clusters the bar gate has no interval to compare: it did not run, so
    # --allow-inconclusive does not let it through, and verdict.json says the same exit code.
    claim = _claim_beside_fixture(tmp_path, thresholds={"min_clusters": 7})
    blocked = honestci("audit", claim, "--out", tmp_path / "a", "--no-bayes", "--allow-outside-data")
    assert blocked.returncode == 1
    assert json.loads((tmp_path / "a" / "verdict.json").read_text())["verdict"] == "INCONCLUSIVE"
    allowed = honestci(
        "audit", claim, "--out", tmp_path / "b", "--no-bayes", "--allow-outside-data", "--allow-inconclusive"
    )
    written = json.loads((tmp_path / "b" / "verdict.json").read_text())
    assert allowed.returncode == 1 == written["exit_code"] and written["allow_inconclusive"] is True
    bar = next(g for g in written["gates"] if g["gate"] == "ci_low_clears_bar")
    assert bar["verdict"] == "INCONCLUSIVE" and bar["ran"] is False


def test_invalid_comparison_claim_is_blocked_with_that_reason(tmp_path):
    result = honestci("audit", DEFAULT_STUDY_DIR / "claim-r1-comparison.yaml", "--out", tmp_path, "--no-bayes")
    assert result.returncode == 1
    gate = next(
        g for g in json.loads((tmp_path / "verdict.json").read_text())["gates"] if g["gate"] == "comparison_valid"
    )
    assert gate["verdict"] == "FAIL" and "invalid comparison" in gate["message"]


def test_committee_claim_is_blocked_by_the_gate_interval_not_by_its_comparison(tmp_path):
    # Six vignettes near 0.84: the symmetric CR2 CI-low (0.779) clears the bar set at R1's point
    # (0.773); the gate's posterior CI-low (0.726) does not. The paired test still passes.
    result = honestci("audit", DEFAULT_STUDY_DIR / "claim-committee.yaml", "--out", tmp_path, "--no-bayes")
    assert result.returncode == 1, result.stdout + result.stderr
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert gates["ci_low_clears_bar"]["verdict"] == "FAIL"
    assert "bayes_logit_normal" in gates["ci_low_clears_bar"]["message"]
    assert gates["comparison_valid"]["verdict"] == "PASS"
    rows = {r["method"]: r for r in verdict["intervals"] if r["population"] == "new_vignettes"}
    assert rows["bayes_logit_normal"]["ci_low"] < verdict["claim"]["bar"] <= rows["cr2"]["ci_low"]


def test_report_rerenders_a_verdict_file(tmp_path):
    assert honestci("audit", DEFAULT_STUDY_DIR / "claim.yaml", "--out", tmp_path, "--no-bayes").returncode == 1
    for fmt in ("md", "html", "json"):
        result = honestci("report", tmp_path / "verdict.json", "--format", fmt, "--out", tmp_path / f"again.{fmt}")
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "again.md").read_text() == (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads((tmp_path / "verdict.json").read_text())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = honestci("report", bad)
    assert result.returncode == 2 and "not valid JSON" in result.stderr


def test_simulate_regenerates_the_embedded_study_byte_identically(tmp_path):
    result = honestci("simulate", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    for path in DEFAULT_STUDY_DIR.rglob("*"):
        if path.is_file():
            relative = path.relative_to(DEFAULT_STUDY_DIR)
            assert (tmp_path / relative).read_bytes() == path.read_bytes(), relative


def test_winrate_prints_the_side_by_side_table():
    result = honestci("winrate", DEFAULT_STUDY_DIR / "claim.yaml", "--method", "wilson", "--method", "cr2")
    assert result.returncode == 0, result.stderr
    assert "Wilson" in result.stdout and "CR2" in result.stdout and "n_effective" in result.stdout


@pytest.mark.slow
def test_demo_runs_end_to_end_with_the_bayesian_model(tmp_path):
    result = honestci("demo", "--out", tmp_path / "demo")
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "demo" / "report.md") in result.stdout
    verdict = json.loads((tmp_path / "demo" / "verdict.json").read_text())
    assert any(r["method"].startswith("bayes") for r in verdict["intervals"])
    import arviz as az

    assert verdict["bayes"]["posterior_file"] == "posterior.nc"
    posterior = az.from_netcdf(tmp_path / "demo" / "posterior.nc")
    assert {"mu", "sigma", "u", "winrate_new"} <= set(posterior.posterior.data_vars)
    assert int(posterior.sample_stats["diverging"].sum()) == verdict["bayes"]["divergences"]


def _put(target, data: bytes) -> None:
    """Write ``data`` to ``target``, a path or a file-like object (posterior.nc is written into
    memory first, reports.render.write_posterior)."""
    if hasattr(target, "write"):
        target.write(data)
    else:
        Path(target).write_bytes(data)


class _StubPosterior:
    def to_netcdf(self, path):
        _put(path, b"posterior")


def test_posterior_is_written_only_together_with_the_reports(tmp_path, monkeypatch):
    from honestci.audit.pipeline import run_audit
    from honestci.reports.render import write_outputs

    report = run_audit(DEFAULT_STUDY_DIR / "claim.yaml", bayes=False).report()
    paths = write_outputs(report, tmp_path / "ok", posterior=_StubPosterior())
    assert paths["posterior"].read_bytes() == b"posterior" and paths["md"].exists()
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == [
        "posterior.nc",
        "report.html",
        "report.md",
        "verdict.json",
    ]

    def full_disk(*_):
        raise OSError("No space left on device")

    # The posterior fails while the reports render beside it: the previous outputs stay whole.
    before = {p.name: p.read_bytes() for p in (tmp_path / "ok").iterdir()}

    class _FailingPosterior:
        def to_netcdf(self, path):
            _put(path, b"part of a posterior")
            raise OSError("No space left on device")

    other = run_audit(DEFAULT_STUDY_DIR / "claim.yaml", bayes=False, seed=7).report()
    with pytest.raises(InputError, match="No space left on device"):
        write_outputs(other, tmp_path / "ok", posterior=_FailingPosterior())
    assert {p.name: p.read_bytes() for p in (tmp_path / "ok").iterdir()} == before

    monkeypatch.setattr("honestci.reports.render.atomic_write_texts", full_disk)
    with pytest.raises(InputError, match="No space left on device"):
        write_outputs(report, tmp_path / "failed", posterior=_StubPosterior())
    assert list((tmp_path / "failed").iterdir()) == []


def test_the_report_model_is_built_while_the_posterior_is_written(tmp_path):
    """write_outputs takes the function that builds the report and calls it once, after the
    posterior has started to be written: the two overlap (the CLI builds the report model there)."""
    import threading

    from honestci.audit.pipeline import run_audit
    from honestci.reports.render import write_outputs

    result = run_audit(DEFAULT_STUDY_DIR / "claim.yaml", bayes=False)
    writing = threading.Event()
    built: list[int] = []

    class _SlowPosterior:
        def to_netcdf(self, path):
            writing.set()
            _put(path, b"posterior")

    def build_report():
        assert writing.wait(timeout=30)  # the posterior is being written already
        built.append(1)
        return result.report()

    paths = write_outputs(build_report, tmp_path / "out", posterior=_SlowPosterior())
    assert built == [1] and paths["posterior"].read_bytes() == b"posterior"
    assert paths["json"].read_text() == result.report().document + "\n"
    # without a posterior the function is called, once, all the same
    built.clear()
    write_outputs(lambda: built.append(1) or result.report(), tmp_path / "plain")
    assert built == [1] and (tmp_path / "plain" / "report.md").exists()


@pytest.mark.parametrize(
    "claim, gate, reason",
    [
        ("claim-leakage.yaml", "leakage", "occur in the training corpus"),
        ("claim-best-of-n.yaml", "winners_curse", "selection pool"),
    ],
)
def test_fixture_claims_with_compromised_evidence_are_blocked(tmp_path, claim, gate, reason):
    result = honestci("audit", DEFAULT_STUDY_DIR / claim, "--out", tmp_path, "--no-bayes")
    assert result.returncode == 1, result.stdout + result.stderr
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    row = next(g for g in verdict["gates"] if g["gate"] == gate)
    assert row["verdict"] == "FAIL" and row["required"] and reason in row["message"]


def test_best_of_n_claimed_on_the_heldout_pool_is_not_a_winners_curse_failure(tmp_path):
    claim = yaml.safe_load((DEFAULT_STUDY_DIR / "claim-best-of-n.yaml").read_text())
    claim["data"] = {table: str(DEFAULT_STUDY_DIR / name) for table, name in claim["data"].items()}
    claim["pool"] = "heldout"
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False))
    honestci("audit", path, "--out", tmp_path / "out", "--no-bayes", "--allow-outside-data")
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    gate = next(g for g in verdict["gates"] if g["gate"] == "winners_curse")
    # Not a FAIL (the evidence is fresh), but with 8 candidates on 6 vignettes the AKM hybrid
    # interval for the selected candidate reaches below the bar 0.608: the gate cannot pass it.
    assert gate["verdict"] == "INCONCLUSIVE" and "reaches below the bar" in gate["message"], gate
    assert verdict["contests"]["n"] == 60 and verdict["contests"]["dropped"]["not_in_pool_heldout"] == 60
