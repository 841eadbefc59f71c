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
    # length_bias is required (the policy's answers are 1.42x longer at the median) and INCONCLUSIVE
    # (longer in every contest: the judge's length preference is confounded with quality).
    assert headline_report.data["verdict"] == "INCONCLUSIVE"
    assert "| length_bias | yes | INCONCLUSIVE |" in text and "ratio of 1.42" in text
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


def test_hostile_names_are_escaped_and_only_a_pass_publishes_figures(tmp_path, passing_claim, no_length_rule):
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

    # The built-in policy requires length_bias on the fixture, where it cannot pass (conftest's
    # no_length_rule): under an auditor's policy without the length rule the honest card passes.
    passing = run_audit(passing_claim, bayes=False, policy=no_length_rule).report()
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


# --- what a reader sees first, and Markdown that renders everywhere ------------------------------


def _markdown_tokens(text: str):
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    flat = []
    for token in tokens:
        flat.append(token)
        flat.extend(token.children or [])
    return flat


def test_markdown_has_no_literal_blocks_or_raw_html(headline_report, passing_claim):
    # GitHub and the Hugging Face model-card viewer render CommonMark + GFM tables: an indented
    # line becomes a grey literal block, and raw HTML is stripped. The only code block is the
    # model card's YAML (a PASS); every table parses as a table.
    for report in (headline_report, run_audit(passing_claim, bayes=False).report()):
        text = render(report, "md")
        tokens = _markdown_tokens(text)
        kinds = {t.type for t in tokens}
        assert "code_block" not in kinds and not kinds & {"html_block", "html_inline"}
        assert [t.info for t in tokens if t.type == "fence"] == (["yaml"] if report.data["verdict"] == "PASS" else [])
        assert sum(t.type == "table_open" for t in tokens) >= 4
        claimed = text.split("## As claimed")[1].split("\n## ")[0]
        assert "Stated: point" in claimed and "```" not in claimed


def test_summary_heads_every_report_with_the_blocking_gate(tmp_path, headline_report):
    from honestci.reports.summary import summarize

    data = headline_report.data
    summary = summarize(data)
    assert [g.name for g in summary.blocking] == ["claimed_figures_reproduce", "length_bias"] and summary.exit_code == 1
    assert summary.interval_figures == "0.843 [0.728, 0.884] vs bar 0.608"
    markdown = render(headline_report, "md")
    head = markdown.split("## Claim and policy")[0]
    assert "**Verdict: INCONCLUSIVE**" in head and "**claimed_figures_reproduce** (WARN)" in head
    assert "vs bar 0.608" in head and "What would change the verdict" in head
    page = render(headline_report, "html")
    assert page.index('id="summary"') < page.index('id="gates"')


def test_a_failing_bar_gate_says_how_far_and_roughly_how_many_vignettes(headline_report):
    from honestci.reports.summary import summarize, units_to_clear_bar

    data = headline_report.data
    data["claim"]["bar"] = 0.773  # the committee claim's bar, on the same data
    gate = next(g for g in data["gates"] if g["gate"] == "ci_low_clears_bar")
    gate.update(verdict="FAIL", evidence=gate["evidence"] | {"bar": 0.773})
    summary = summarize(data)
    reason = next(g.reason for g in summary.blocking if g.name == "ci_low_clears_bar")
    assert reason == "the gate interval's lower end 0.728 is below the bar 0.773 (short by 0.0453)"
    # 6 * ((0.843 - 0.7254) / (0.843 - 0.773))^2 = 16.9 -> 17 vignettes, 11 more.
    assert any("about 11 more vignettes (17 in all" in s and "approximate" in s for s in summary.change)
    assert units_to_clear_bar(0.8, 0.7, 0.75, 10) == 40  # 10 * (0.1 / 0.05)^2
    # 80% power: 10 * (0.1 (z_0.975 + z_0.8) / (z_0.975 * 0.05))^2, quantiles from scipy.
    from scipy.stats import norm

    z, z_power = norm.ppf(0.975), norm.ppf(0.8)
    assert units_to_clear_bar(0.8, 0.7, 0.75, 10, 0.95, 0.8) == math.ceil(10 * (0.1 * (z + z_power) / (z * 0.05)) ** 2)
    row = next(
        r for r in data["intervals"] if r["method"] == data["gate_method"] and r["population"] == "new_vignettes"
    )
    planned = math.ceil(6 * ((row["estimate"] - row["ci_low"]) * (z + z_power) / (z * (row["estimate"] - 0.773))) ** 2)
    assert any(f"planning estimate: about {planned} vignettes in all would give 80% power" in s for s in summary.change)
    assert units_to_clear_bar(0.7, 0.6, 0.75, 10) is None  # the estimate itself misses the bar


def test_figures_round_to_three_significant_digits_and_never_blur_the_bar():
    from honestci.reports.summary import _distinct, sig

    assert [sig(v) for v in (0.7257478670493327, -0.008333, 5.000000001, 1440.0, 143.52, 0.0)] == [
        "0.726",
        "-0.00833",
        "5.00",
        "1440",
        "144",
        "0",
    ]
    assert sig(2.3e-5) == "2.30e-05" and sig(None) == "–" and sig(720) == "720"
    assert _distinct(0.6075, 0.608) == ("0.6075", "0.6080")  # 3 digits would read "0.608 < 0.608"


def test_section_tables_keep_the_checks_column_order(headline_report):
    from honestci.reports.tables import section_table

    section = next(s for s in headline_report.data["sections"] if s["key"] == "valid_verdicts")
    assert section_table(section)[0] == ["judge", "judgments", "invalid"]  # not alphabetical
    bias = next(s for s in headline_report.data["sections"] if s["key"] == "position_bias")
    headings = section_table(bias)[0]
    assert headings[:4] == ["judge", "figure", "estimate", "CI"] and "ci_low" not in headings
    old = {k: v for k, v in section.items() if k != "columns"}  # a report written before `columns`
    assert set(section_table(old)[0]) == {"judge", "judgments", "invalid"}


def test_many_vignettes_draw_a_fixed_size_caterpillar():
    import numpy as np

    from honestci.reports.plots import vignette_plot

    rng = np.random.default_rng(5)
    rows = []
    for g in range(1000):
        raw = float(rng.uniform(0.3, 1.0))
        rows.append(
            {
                "vignette_id": f"v{g}",
                "n": 3,
                "estimate": raw,
                "ci_low": max(0.0, raw - 0.2),
                "ci_high": min(1.0, raw + 0.1),
            }
            | {"pooled": 0.5 + 0.5 * (raw - 0.5), "pooled_low": 0.4, "pooled_high": 0.9}
        )
    gate = {"ci_low": 0.6, "ci_high": 0.7}
    many, few = vignette_plot(rows, gate, 0.65), vignette_plot(rows[:200], gate, 0.65)
    assert len(many) < 400_000 and abs(len(many) - len(few)) < 0.2 * len(few)  # 1,000 draw like 200
    height = float(many.split('height="')[1].split("pt")[0])
    assert height < 400  # points: a fixed-height figure, not 0.3 inch per vignette


def test_load_renderers_imports_what_writing_the_reports_imports():
    """Run in a fresh interpreter: after load_renderers(posterior=True), matplotlib's pyplot, the
    renderers and xarray's h5netcdf backend are loaded, and a failing warm-up write is not an error."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from honestci.reports.render import load_renderers\n"
        "load_renderers(posterior=True)\n"
        "loaded = {'matplotlib.pyplot', 'honestci.reports.html', 'honestci.reports.markdown', 'h5netcdf'}\n"
        "assert loaded <= set(sys.modules), loaded - set(sys.modules)\n"
        "import xarray\n"
        "def broken(*args, **kwargs):\n"
        "    raise OSError('no netCDF writer here')\n"
        "xarray.Dataset.to_netcdf = broken\n"
        "load_renderers(posterior=True)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
