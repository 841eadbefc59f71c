"""What CI reads from `honestci audit`: JUnit XML validated against the JUnit schema Jenkins reads
(tests/reference/junit.xsd), the GitHub step summary, --quiet and --json; and the command line's
consistency: one --level type, one name for the claim argument, coverage-study writing into the
working folder, files written with the umask's permissions, n_effective shown as n/a."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from honestci.audit.cli import main
from honestci.audit.cli.support import LEVEL
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR
from honestci.reports.ci import junit_xml, step_summary, verdict_line

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The Jenkins xUnit plugin's junit-10.xsd, as pytest ships it for validating its own JUnit files.
SCHEMA = Path(__file__).resolve().parent / "reference" / "junit.xsd"


def _schema():
    import xmlschema  # a dev dependency: the schema check never skips

    return xmlschema.XMLSchema(str(SCHEMA))


def _gate(name, verdict, message, required=True, ran=True):
    return {"gate": name, "verdict": verdict, "message": message, "required": required, "ran": ran, "evidence": {}}


def _data(gates, blocking):
    return {
        "claim": {
            "name": "p beats o",
            "path": "claim.yaml",
            "policy": "p",
            "opponent": "o",
            "bar": 0.6,
            "population": "new_vignettes",
        },
        "verdict": "FAIL",
        "exit_code": 1,
        "gate_method": "cr2",
        "audit_policy": {"name": "built-in", "sha256": "ab" * 32},
        "gates": gates,
        "blocking_gates": [{k: g[k] for k in ("gate", "verdict", "message", "ran")} for g in blocking],
    }


def _cases(xml_text):
    import xml.etree.ElementTree as ET

    suite = ET.fromstring(xml_text).find("testsuite")
    return suite, {case.get("name"): list(case) for case in suite.findall("testcase")}


def test_junit_maps_every_gate_to_one_testcase_by_what_blocks():
    bar = _gate("ci_low_clears_bar", "FAIL", "cr2 CI-low 0.55 < bar 0.6 | new")
    nothing = _gate("sampler_converged", "INCONCLUSIVE", "not run: the Bayesian model was disabled", ran=False)
    gates = [
        _gate("enough_clusters", "PASS", "12 vignettes"),
        bar,
        _gate("leakage", "FAIL", "2 answers leaked", required=False),
        _gate("judge_calibrated", "INCONCLUSIVE", "agreement interval straddles 0.65"),
        nothing,
    ]
    missing = _gate("position_bias", "INCONCLUSIVE", "no result: the gate did not run", ran=False)
    text = junit_xml(_data(gates, [bar, gates[3], nothing, missing]))
    _schema().validate(text)  # raises on any violation
    suite, cases = _cases(text)
    assert list(cases) == [g["gate"] for g in gates] + ["position_bias"]  # one testcase per gate
    assert cases["enough_clusters"] == []
    (failure,) = cases["ci_low_clears_bar"]
    assert failure.tag == "failure" and failure.get("type") == "FAIL"
    assert failure.get("message") == failure.text == "FAIL: cr2 CI-low 0.55 < bar 0.6 | new"
    assert [e.tag for e in cases["judge_calibrated"]] == ["error"]
    assert cases["sampler_converged"][0].get("message") == "INCONCLUSIVE: not run: the Bayesian model was disabled"
    assert cases["position_bias"][0].get("message") == "INCONCLUSIVE (not run): no result: the gate did not run"
    (skipped,) = cases["leakage"]  # a FAIL of a gate that is not required does not block
    assert skipped.tag == "skipped" and skipped.get("message") == "not blocking: FAIL: 2 answers leaked"
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "6",
        "failures": "1",
        "errors": "3",
        "skipped": "1",
    }
    assert suite.find("system-out").text == verdict_line(_data(gates, [bar, gates[3], nothing, missing]))


def test_the_junit_schema_rejects_files_ci_would_not_read():
    import xmlschema

    schema = _schema()
    good = junit_xml(_data([_gate("enough_clusters", "PASS", "ok")], []))
    assert schema.is_valid(good)
    for broken in (
        good.replace(' name="enough_clusters"', ""),  # a testcase without a name
        good.replace(' failures="0"', "", 1).replace(' failures="0"', ""),  # a testsuite without failures
        good.replace("<testcase ", "<testcase><bogus/></testcase><testcase ", 1),
    ):
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            schema.validate(broken)


def test_step_summary_names_the_verdict_and_each_blocking_gate_with_its_reason():
    bar = _gate("ci_low_clears_bar", "FAIL", "cr2 CI-low 0.55 < bar 0.6 | new")
    text = step_summary(_data([bar, _gate("valid_verdicts", "PASS", "none invalid")], [bar]))
    assert text.startswith("### honestci audit: p beats o: FAIL (release blocked, exit 1)")
    assert "| ci_low_clears_bar | FAIL | cr2 CI-low 0.55 &lt; bar 0.6 \\| new |" in text  # escaped for Markdown
    assert "valid_verdicts" not in text
    passed = step_summary(_data([_gate("valid_verdicts", "PASS", "none invalid")], []) | {"exit_code": 0})
    assert "No required gate blocks the release." in passed and "release allowed" in passed


# --- the command line ------------------------------------------------------------------------


def _options(name):
    ctx = click.Context(main)
    command = main.get_command(ctx, name)
    return {p.name: p for p in command.params}


def _all_commands():
    ctx = click.Context(main)
    return [n for n in main.list_commands(ctx) if not isinstance(main.get_command(ctx, n), click.Group)]


def test_every_level_option_is_the_one_open_unit_interval_and_rejects_0_and_1():
    with_level = [name for name in _all_commands() if "level" in _options(name)]
    assert set(with_level) == {"calibrate-judge", "compare", "length-bias", "position-bias", "winners-curse", "winrate"}
    for name in with_level:
        assert _options(name)["level"].type is LEVEL, name
        for bad in ("0", "1", "1.5", "-0.1"):
            result = CliRunner().invoke(main, [name, "claim.yaml", "--level", bad])
            assert result.exit_code == 2 and "Invalid value for '--level'" in result.output, (name, bad)


def test_the_claim_argument_has_one_name_in_every_command():
    takes_claim = {
        name: [p for p in _options(name).values() if isinstance(p, click.Argument) and "claim" in p.name]
        for name in _all_commands()
    }
    takes_claim = {name: args for name, args in takes_claim.items() if args}
    assert set(takes_claim) == {
        "audit",
        "calibrate-judge",
        "compare",
        "length-bias",
        "plan",
        "position-bias",
        "winners-curse",
        "winrate",
    }
    assert {arg.name for args in takes_claim.values() for arg in args} == {"claim"}


def test_coverage_study_writes_into_the_working_folder_by_default(monkeypatch, tmp_path):
    class Study:
        def to_markdown(self):
            return "| table |\n"

        def to_frame(self):
            import pandas as pd

            return pd.DataFrame({"a": [1]})

    monkeypatch.setattr("honestci.audit.stats.design.coverage_study.run_coverage_study", lambda **kwargs: Study())
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["coverage-study", "--reps", "10"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coverage.csv", "coverage.md"]
    assert (tmp_path / "coverage.md").read_text() == "| table |\n"


def honestci(*args, env=None, umask=0o022):
    return subprocess.run(
        [sys.executable, "-m", "honestci", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
        env={**os.environ, **(env or {})},
        umask=umask,
    )


@pytest.mark.e2e
def test_audit_writes_junit_and_the_step_summary_with_the_umask_permissions(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    out, junit = tmp_path / "out", tmp_path / "ci" / "audit.xml"
    claim = DEFAULT_STUDY_DIR / "claim-r1-comparison.yaml"
    result = honestci(
        "audit", claim, "--out", out, "--no-bayes", "--junit", junit, env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert result.returncode == 1, result.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    gate = next(g for g in verdict["gates"] if g["gate"] == "comparison_valid")
    assert gate["verdict"] == "FAIL"
    _schema().validate(str(junit))
    _, cases = _cases(junit.read_text())
    assert set(cases) == {g["gate"] for g in verdict["gates"]}
    assert [(e.tag, e.get("message")) for e in cases["comparison_valid"]] == [("failure", f"FAIL: {gate['message']}")]
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "FAIL (release blocked, exit 1)" in text
    assert f"| comparison_valid | FAIL | {gate['message'][:40]}" in text
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("verdict:")] == [lines[-1]]  # one verdict line, the last
    assert lines[-1].startswith("verdict: FAIL (exit 1); blocked by ") and "comparison_valid" in lines[-1]
    written = [out / "report.md", out / "report.html", out / "verdict.json", junit]
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {"0o644"}


@pytest.mark.e2e
def test_quiet_prints_only_the_verdict_line_and_json_only_the_verdict(tmp_path):
    claim = DEFAULT_STUDY_DIR / "claim-r1-comparison.yaml"
    quiet = honestci("audit", claim, "--out", tmp_path / "q", "--no-bayes", "--quiet", umask=0o027)
    assert quiet.returncode == 1 and quiet.stderr == ""
    assert quiet.stdout.splitlines() == [quiet.stdout.strip()] and quiet.stdout.startswith("verdict: FAIL (exit 1)")
    assert oct((tmp_path / "q" / "report.md").stat().st_mode & 0o777) == "0o640"  # the umask decides
    machine = honestci("audit", claim, "--out", tmp_path / "j", "--no-bayes", "--json")
    assert machine.returncode == 1
    document = json.loads(machine.stdout)  # nothing else on standard output
    written = json.loads((tmp_path / "j" / "verdict.json").read_text())
    assert document["verdict"] == written["verdict"] == "FAIL" and document["exit_code"] == 1
    assert document["blocking_gates"] == written["blocking_gates"]
    assert "comparison_valid" in {g["gate"] for g in document["blocking_gates"]}
    assert document["files"]["json"] == str(tmp_path / "j" / "verdict.json")


@pytest.mark.e2e
def test_winrate_shows_n_effective_as_n_a_when_each_vignette_has_one_contest(tmp_path):
    import pandas as pd

    claim = yaml.safe_load((DEFAULT_STUDY_DIR / "claim.yaml").read_text())
    responses = pd.read_json(DEFAULT_STUDY_DIR / "responses.jsonl", lines=True)
    judgments = pd.read_json(DEFAULT_STUDY_DIR / "judgments.jsonl", lines=True)
    system = dict(zip(responses["response_id"], responses["system"]))
    pairs = [frozenset(p) for p in zip(judgments["response_first"], judgments["response_second"])]
    ours = [
        {system[a], system[b]} == {claim["policy"], claim["opponent"]} and judge == claim["judge"]
        for a, b, judge in zip(judgments["response_first"], judgments["response_second"], judgments["judge"])
    ]
    first: dict = {}
    for vignette, pair, keep in zip(judgments["vignette_id"], pairs, ours):
        if keep:
            first.setdefault(vignette, pair)
    one = [keep and first[v] == pair for v, pair, keep in zip(judgments["vignette_id"], pairs, ours)]
    judgments[one].to_json(tmp_path / "judgments.jsonl", orient="records", lines=True)
    for name in ("vignettes.jsonl", "responses.jsonl"):
        (tmp_path / name).write_bytes((DEFAULT_STUDY_DIR / name).read_bytes())
    claim["data"] = {"vignettes": "vignettes.jsonl", "responses": "responses.jsonl", "judgments": "judgments.jsonl"}
    claim.pop("claimed")
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(claim))
    result = honestci("winrate", tmp_path / "claim.yaml", "--method", "cr2")
    assert result.returncode == 0, result.stderr
    assert sum(one) == 2 * len(first) == 12  # one contest (two judged orders) per vignette
    row = result.stdout.splitlines()[1].split()
    assert row[-2:] == ["n/a", "PASS"] and "nan" not in result.stdout
