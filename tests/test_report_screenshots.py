"""The HTML report as a reader sees it: headless Chromium screenshots of the fixture's PASS and FAIL
reports and of a 1,000-vignette synthetic report, saved as test artifacts (``$HONESTCI_ARTIFACTS``,
else the test's tmp folder; the path is printed). Each page must name its blocking gates in the
first screenful of text, log no console error, and stay within 1 MB."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chromium_support import CHROMIUM, SKIP_REASON, Chromium

from honestci.audit.pipeline import run_audit
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR
from honestci.reports.render import write_report
from honestci.reports.summary import blocking_gates

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)]

#: The size bound on a report page, 1,000 vignettes included.
MAX_HTML_BYTES = 1_000_000
#: The first screen: a common laptop viewport.
VIEWPORT = (1280, 900)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("HONESTCI_ARTIFACTS") or tmp_path_factory.mktemp("artifacts")) / "report-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nreport screenshots: {folder}")
    return folder


def _large_study(folder: Path) -> Path:
    from synthetic_study import claim_dict, study_rows, write_study

    rows = study_rows(n_vignettes=1000, pairs=3, seed=11)
    return write_study(folder, rows, claim_dict(name="synthetic study, 1,000 vignettes", bar=0.68))


CASES = {
    "pass": lambda claims: claims["pass"],
    "fail": lambda claims: DEFAULT_STUDY_DIR / "claim-committee.yaml",
    "vignettes-1000": lambda claims: _large_study(claims["tmp"] / "large"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_report_reads_right_in_a_browser(case, artifacts, passing_claim, no_length_rule, tmp_path):
    claim = CASES[case]({"pass": passing_claim, "tmp": tmp_path})
    # the fixture's answers are 1.42x longer in every contest: the built-in policy's length rule
    # would block both fixture cases; what is shown here is the report of one blocking gate or none
    report = run_audit(claim, policy=no_length_rule, bayes=False).report()
    data = report.data
    paths = write_report(report, artifacts / case)
    size = paths["html"].stat().st_size
    assert size <= MAX_HTML_BYTES, f"{case}: report.html is {size} bytes"

    with Chromium(tmp_path / "profile", *VIEWPORT) as browser:
        browser.open(paths["html"])
        browser.screenshot(artifacts / f"{case}-first-screen.png")
        browser.screenshot(artifacts / f"{case}-full.png", full_page=True)
        first_screen = browser.first_screen_text()
        errors = browser.console_errors()
    assert errors == [], f"{case}: console errors {errors}"
    assert f"Verdict: {data['verdict']}" in first_screen
    blocking = [g["gate"] for g in blocking_gates(data)]
    assert (data["exit_code"] == 0) == (blocking == [])
    for gate in blocking:
        assert gate in first_screen, f"{case}: blocking gate {gate} is not on the first screen"
    if case == "fail":
        assert blocking == ["ci_low_clears_bar"] and "vs bar 0.773" in first_screen
    if case == "pass":
        assert data["verdict"] == "PASS" and "Blocking gates: none" in first_screen


def test_the_harness_sees_console_errors_and_only_the_first_screen(tmp_path):
    # Positive control: an error, an uncaught exception and text below the fold are told apart.
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body><p>top words</p><div style='height:3000px'></div><p>bottom words</p>"
        "<script>console.error('boom'); throw new Error('uncaught');</script></body></html>"
    )
    with Chromium(tmp_path / "profile", *VIEWPORT) as browser:
        browser.open(page)
        text, errors = browser.first_screen_text(), browser.console_errors()
    assert "top words" in text and "bottom words" not in text
    assert any("boom" in e for e in errors) and any("uncaught" in e for e in errors)
