"""Render a report in one format, or write all of them."""

from __future__ import annotations

from pathlib import Path

from honestci.audit.report_model import Report
from honestci.reports.writing import atomic_write_texts

FORMATS = ("md", "html", "json")


def render(report: Report, fmt: str) -> str:
    if fmt == "md":
        from honestci.reports.markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from honestci.reports.html import render_html

        return render_html(report)
    if fmt == "json":
        return report.document + "\n"
    raise ValueError(f"unknown format {fmt!r}; use one of {FORMATS}")


def write_report(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write ``verdict.json``, ``report.md`` and ``report.html`` atomically into ``out_dir``.

    Every format is rendered and staged before any file is replaced, so a renderer that fails or a
    full disk leaves the previous report whole rather than a new verdict beside an old report.
    """
    out = Path(out_dir)
    paths = {"json": out / "verdict.json", "md": out / "report.md", "html": out / "report.html"}
    atomic_write_texts({path: render(report, fmt) for fmt, path in paths.items()})
    return paths
