"""Render a report in one format, or write all of them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from honestci.audit.errors import InputError
from honestci.audit.report_model import POSTERIOR_FILE, Report
from honestci.reports.writing import atomic_write_texts, out_dir_lock

FORMATS = ("md", "html", "json")


def render(report: Report, fmt: str, posterior: Any | None = None) -> str:
    """``report`` in ``fmt``; ``posterior`` (the fit's arviz.InferenceData) adds the HTML's rank plots."""
    if fmt == "md":
        from honestci.reports.markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from honestci.reports.html import render_html

        return render_html(report, posterior)
    if fmt == "json":
        return report.document + "\n"
    raise ValueError(f"unknown format {fmt!r}; use one of {FORMATS}")


def write_report(report: Report, out_dir: str | Path, posterior: Any | None = None) -> dict[str, Path]:
    """Write ``verdict.json``, ``report.md`` and ``report.html`` atomically into ``out_dir``
    (``posterior``: as for :func:`render`).

    Every format is rendered and staged before any file is replaced, so a renderer that fails or a
    full disk leaves the previous report whole rather than a new verdict beside an old report.
    """
    out = Path(out_dir)
    paths = {"json": out / "verdict.json", "md": out / "report.md", "html": out / "report.html"}
    atomic_write_texts({path: render(report, fmt, posterior) for fmt, path in paths.items()})
    return paths


def write_outputs(report: Report, out_dir: str | Path, posterior: Any | None = None) -> dict[str, Path]:
    """Write the reports into ``out_dir`` (:func:`write_report`) and, when given, the posterior
    (an ArviZ InferenceData) as ``posterior.nc``.

    The posterior is staged first and moved into place only after the reports are written, so a
    failure leaves no new posterior beside an old report.
    """
    with out_dir_lock(out_dir):
        if posterior is None:
            return write_report(report, out_dir)
        final = Path(out_dir) / POSTERIOR_FILE
        staged = final.with_name(f".{POSTERIOR_FILE}.partial")
        try:
            posterior.to_netcdf(str(staged))
            paths = write_report(report, out_dir, posterior)
            os.replace(staged, final)
        except OSError as exc:
            raise InputError(
                f"Cannot write the posterior into {out_dir}: {exc.strerror or exc}.",
                fix="free disk space or choose another output folder (--out DIR)",
            ) from None
        finally:
            staged.unlink(missing_ok=True)
        return paths | {"posterior": final}
