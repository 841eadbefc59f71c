"""Report rendering: snapshots of Markdown and JSON, and the HTML in headless Chromium."""

import json
import math
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from honestci.audit.pipeline import run_audit
from honestci.audit.report_model import Report, json_safe
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR
from honestci.reports.render import render

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
#: Provenance fields that change with the machine or the commit, not with the audit.
VOLATILE = ("git_commit", "python", "packages")


@pytest.fixture(scope="module")
def headline_report() -> Report:
    result = run_audit(DEFAULT_STUDY_DIR / "claim.yaml", bayes=False)
    data = json_safe(result.to_dict())
    for key in VOLATILE:
        data["provenance"][key] = {} if key == "packages" else "<volatile>"
    data["claim"]["path"] = "<claim path>"
    return Report.from_dict(data)


@pytest.mark.parametrize("fmt, name", [("md", "headline_report.md"), ("json", "headline_verdict.json")])
def test_snapshot(headline_report, fmt, name):
    text = render(headline_report, fmt)
    path = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
    expected = path.read_text()
    if fmt == "json":
        # Floats from numerical integration (AKM) and BLAS differ in the last digits between
        # machines: every float is compared to 1e-8 relative, everything else exactly.
        assert _same(json.loads(text), json.loads(expected)), (
            f"{name} changed; review the diff, then UPDATE_SNAPSHOTS=1 to accept"
        )
    else:
        assert text == expected, f"{name} changed; review the diff, then UPDATE_SNAPSHOTS=1 to accept"


def _same(left, right) -> bool:
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_same(x, y) for x, y in zip(left, right))
    if isinstance(left, float) and isinstance(right, float):
        return math.isclose(left, right, rel_tol=1e-8, abs_tol=1e-12)
    return left == right


def test_markdown_has_every_gate_and_no_model_card_for_a_warn(headline_report):
    # The fixture's card labels a Wilson interval (WARN): every gate is listed, no figure is published.
    text = render(headline_report, "md")
    for gate in (
        "enough_clusters",
        "ci_low_clears_bar",
        "comparison_valid",
        "claimed_figures_reproduce",
        "judge_calibrated",
        "position_bias",
        "winners_curse",
        "leakage",
        "training_healthy",
    ):
        assert f"| {gate} |" in text
    assert headline_report.data["verdict"] == "WARN"
    assert "model-index:" not in text and "iid Wilson (optimistic)" in text


def test_report_model_rejects_other_documents():
    from honestci.audit.errors import InputError

    with pytest.raises(InputError, match="missing"):
        Report.from_dict({"schema_version": 1})
    with pytest.raises(InputError, match="schema version 99"):
        Report.from_dict(
            {k: {} for k in ("claim", "verdict", "gates", "intervals", "contests", "provenance")}
            | {"schema_version": 99}
        )


def test_written_files_are_complete_and_atomic(tmp_path, headline_report):
    from honestci.reports.render import write_report

    paths = write_report(headline_report, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md", "verdict.json"]
    assert json.loads(paths["json"].read_text())["verdict"] == headline_report.data["verdict"]


def test_unwritable_output_folder_is_a_clear_error(tmp_path, headline_report):
    from honestci.audit.errors import InputError
    from honestci.reports.render import write_report

    blocker = tmp_path / "out"
    blocker.write_text("a file where the output folder should be")  # fails for root too
    with pytest.raises(InputError, match="Cannot write"):
        write_report(headline_report, blocker / "report")


def test_interrupted_write_leaves_the_previous_report_intact(tmp_path, headline_report, monkeypatch):
    from honestci.reports import writing
    from honestci.reports.render import write_report

    write_report(headline_report, tmp_path)
    before = (tmp_path / "report.md").read_text()

    def crash(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writing.os, "replace", crash)
    with pytest.raises(Exception, match="No space left"):
        write_report(headline_report, tmp_path)
    assert (tmp_path / "report.md").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md", "verdict.json"]


# --- HTML in a real browser -------------------------------------------------------------------

#: Debian and Ubuntu name the browser `chromium` or `chromium-browser`; Playwright's and Google's
#: headless builds install `chromium-headless-shell`. Any of them renders the report.
CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser", "chromium-headless-shell") if (found := shutil.which(name))),
    None,
)


#: Hosts Chromium itself calls in the background (update, time and account services), whatever
#: the page: they are not requests made by the report.
BROWSER_OWN_HOSTS = ("google.com", "googleapis.com", "gvt1.com", "gstatic.com")


class _RecordingProxy:
    """A TCP listener the browser is told to use as its proxy: it records every requested host."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.hosts: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                target = conn.recv(4096).split(b" ")[1].decode("latin-1")
            except (OSError, IndexError):
                target = "?"
            self.hosts.append(target.split("://")[-1].split("/")[0].split(":")[0])
            conn.close()

    def page_requests(self) -> list[str]:
        return [h for h in self.hosts if not any(h == d or h.endswith("." + d) for d in BROWSER_OWN_HOSTS)]


def _dump_dom(html_path: Path, proxy_port: int, tmp_path: Path) -> str:
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--proxy-server=http://127.0.0.1:{proxy_port}",
            "--proxy-bypass-list=<-loopback>",
            "--dump-dom",
            html_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="none of chromium, chromium-browser, chromium-headless-shell is on PATH (.ci/run installs Debian's chromium)",
)
def test_html_renders_offline_and_shows_script_as_text(tmp_path, headline_report):
    data = headline_report.data
    data["per_vignette"][0]["text"] = "<script>document.title='pwned'</script> a scenario"
    data["gates"][0]["message"] = "<img src='https://example.invalid/x.png'>"
    html_path = tmp_path / "report.html"
    html_path.write_text(render(Report.from_dict(data), "html"))
    proxy = _RecordingProxy()
    dom = _dump_dom(html_path, proxy.port, tmp_path)
    assert "<title>honestci audit:" in dom and "pwned" not in dom.split("</title>")[0]
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert "<img" not in dom
    assert dom.count("<svg") >= 2  # the inline plots rendered
    assert proxy.page_requests() == [], "the report made a network request"


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="none of chromium, chromium-browser, chromium-headless-shell is on PATH (.ci/run installs Debian's chromium)",
)
def test_the_request_recorder_sees_an_external_image(tmp_path):
    # Positive control: the same harness must notice a page that does load something external.
    page = tmp_path / "external.html"
    page.write_text("<html><body><img src='http://example.invalid/x.png'></body></html>")
    proxy = _RecordingProxy()
    _dump_dom(page, proxy.port, tmp_path)
    assert "example.invalid" in proxy.page_requests()


def test_hostile_names_are_escaped_and_only_a_pass_publishes_figures(tmp_path, passing_claim):
    """A claim name with HTML, a `$` in vignette ids (matplotlib would read `$...$` as mathtext)
    and a blocked verdict: the report renders, escapes the HTML, and writes no model-card figure."""
    import sys

    import yaml

    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_study import claim_dict, study_rows, write_study

    rows = study_rows()
    for table in ("vignettes", "responses", "judgments"):
        for row in rows[table]:
            row["vignette_id"] = f"${row['vignette_id']}^{{x}}_$"
    claim = write_study(tmp_path / "study", rows, claim_dict(name="<script>alert(1)</script> | x", bar=0.99))
    report = run_audit(claim, bayes=False).report()
    assert report.data["verdict"] != "PASS"
    markdown, page = render(report, "md"), render(report, "html")
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert "<script>alert" not in page
    assert "model-index" not in markdown and "No model-card figures" in markdown
    assert "$v0^{x}_$" in markdown

    passing = run_audit(passing_claim, bayes=False).report()
    block = render(passing, "md").split("```yaml\n")[1].split("```")[0]
    metric = yaml.safe_load(block)["model-index"][0]["results"][0]["metrics"][0]
    assert metric["type"] == "win_rate" and 0 < metric["value"] < 1


def test_a_second_writer_into_the_same_folder_is_refused_and_files_are_readable(tmp_path, headline_report):
    from honestci.audit.errors import InputError
    from honestci.reports.render import write_outputs
    from honestci.reports.writing import LOCK_NAME, out_dir_lock

    with out_dir_lock(tmp_path):  # another audit holds the folder
        with pytest.raises(InputError, match="Another honestci run is writing into"):
            write_outputs(headline_report, tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]
    old = os.umask(0o022)
    try:
        paths = write_outputs(headline_report, tmp_path)
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md", "verdict.json"]
    assert {oct(p.stat().st_mode & 0o777) for p in paths.values()} == {"0o644"}


def test_forest_plot_of_many_vignettes_is_drawn_dense_and_unlabelled(monkeypatch):
    import honestci.reports.plots as plots

    rows = [
        {"vignette_id": f"vignette-{i:04d}", "estimate": (i % 7) / 7, "ci_low": 0.0, "ci_high": 1.0}
        for i in range(plots.FOREST_MAX_ROWS + 40)
    ]
    pooled = {"method": "cr2", "estimate": 0.4, "ci_low": 0.35, "ci_high": 0.45}
    dense = plots.forest_plot(rows, pooled, 0.5)
    monkeypatch.setattr(plots, "FOREST_MAX_ROWS", 10**6)
    labelled = plots.forest_plot(rows, pooled, 0.5)
    # one label per vignette, drawn as paths, is what made 805 vignettes take ~15 s
    assert dense.startswith("<svg") and len(dense) < len(labelled) / 2
