"""Render a report in one format, or write all of them."""

from __future__ import annotations

from pathlib import Path

from reports.model import Report
from reports.writing import atomic_write_text

FORMATS = ("md", "html", "json")


def render(report: Report, fmt: str) -> str:
    if fmt == "md":
        from reports.markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from reports.html import render_html

        return render_html(report)
    if fmt == "json":
        return report.document + "\n"
    raise ValueError(f"unknown format {fmt!r}; use one of {FORMATS}")


def write_report(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write ``verdict.json``, ``report.md`` and ``report.html`` atomically into ``out_dir``.

    Every format is rendered before any file is touched, so a renderer that fails leaves the
    previous report whole rather than a new verdict beside an old report.
    """
    out = Path(out_dir)
    paths = {"json": out / "verdict.json", "md": out / "report.md", "html": out / "report.html"}
    texts = {fmt: render(report, fmt) for fmt in paths}
    for fmt, path in paths.items():
        atomic_write_text(path, texts[fmt])
    return paths
