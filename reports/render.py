"""Render a report in one format, or write all of them."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from honestci.audit.errors import InputError
from honestci.audit.report_model import POSTERIOR_FILE, Report
from honestci.reports.writing import atomic_write_texts, out_dir_lock, write_bytes

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


def load_renderers(posterior: bool = False) -> None:
    """Import what rendering and writing the reports import: the renderers with matplotlib's
    pyplot and, with ``posterior``, the netCDF writer of posterior.nc (xarray's h5netcdf backend,
    and the dask scheduler lookup it makes on a first write, here of a tiny in-memory file).

    The audit command calls it while the Bayesian fit runs and the main thread would otherwise
    wait (``run_audit(while_fitting=...)``): at a million contests these imports took ~0.5 s
    between the fit's end and the first report file."""
    import matplotlib.pyplot  # noqa: F401

    import honestci.reports.html
    import honestci.reports.markdown  # noqa: F401

    if posterior:
        import numpy as np
        import xarray as xr

        # Only a warm-up: should it fail, writing posterior.nc raises the error with its own message.
        with contextlib.suppress(Exception):
            xr.Dataset({"x": ("x", np.zeros(1))}).to_netcdf(io.BytesIO(), engine="h5netcdf")


def write_report(report: Report, out_dir: str | Path, posterior: Any | None = None) -> dict[str, Path]:
    """Write ``verdict.json``, ``report.md`` and ``report.html`` atomically into ``out_dir``
    (``posterior``: as for :func:`render`).

    Every format is rendered and staged before any file is replaced, so a renderer that fails or a
    full disk leaves the previous report whole rather than a new verdict beside an old report.
    """
    paths = _report_paths(out_dir)
    atomic_write_texts(_rendered(report, paths, posterior))
    return paths


def _report_paths(out_dir: str | Path) -> dict[str, Path]:
    """The report files of :func:`write_report` in ``out_dir``, by format."""
    out = Path(out_dir)
    return {"json": out / "verdict.json", "md": out / "report.md", "html": out / "report.html"}


def _rendered(report: Report, paths: dict[str, Path], posterior: Any | None) -> dict[Path, str]:
    """Each report file's path (``paths``, by format) and its text."""
    return {path: render(report, fmt, posterior) for fmt, path in paths.items()}


def _built(report: Report | Callable[[], Report]) -> Report:
    """``report``, or the report the function ``report`` builds."""
    return report() if callable(report) else report


def write_outputs(
    report: Report | Callable[[], Report], out_dir: str | Path, posterior: Any | None = None
) -> dict[str, Path]:
    """Write the reports into ``out_dir`` (:func:`write_report`) and, when given, the posterior
    (an ArviZ InferenceData) as ``posterior.nc``.

    The posterior is written to a staged file on a thread of its own while the report model is
    built (``report`` may be the function that builds it) and the reports render (its HDF5
    writes, and the NumPy work of a group built for writing, release the GIL); the reports
    replace the previous ones only once it is written, and the posterior moves into place last,
    so a failure leaves no new posterior beside an old report.
    """
    with out_dir_lock(out_dir):
        if posterior is None:
            return write_report(_built(report), out_dir)
        final = Path(out_dir) / POSTERIOR_FILE
        staged = final.with_name(f".{POSTERIOR_FILE}.partial")
        try:
            paths = _report_paths(out_dir)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="honestci-posterior") as writer:
                written = writer.submit(write_posterior, posterior, staged)
                texts = _rendered(_built(report), paths, posterior)
                written.result()
            atomic_write_texts(texts)
            os.replace(staged, final)
        except OSError as exc:
            raise InputError(
                f"Cannot write the posterior into {out_dir}: {exc.strerror or exc}.",
                fix="free disk space or choose another output folder (--out DIR)",
            ) from None
        finally:
            staged.unlink(missing_ok=True)
        return paths | {"posterior": final}


def write_posterior(posterior: Any, path: Path) -> Path:
    """Write ``posterior`` (an InferenceData, or :class:`PosteriorGroups`) as netCDF4 to ``path``.

    HDF5 writes the file into memory and Python copies it to disk: HDF5 that meets a full disk
    (ENOSPC, or EFBIG past ``ulimit -f``) raises a RuntimeError from h5py, not an OSError, and
    leaves its file half-closed, so that the process dies of a segmentation fault (exit 139) at
    exit, with the partial file and the output folder's lock left behind. A full disk now fails in
    a plain file write, as an OSError the caller reports (exit 2) and cleans up after. The cost
    is a copy of the file in memory while it is written.
    """
    buffer = io.BytesIO()
    if type(posterior).__module__.startswith("arviz"):
        _inference_data_netcdf(posterior, buffer)
    else:
        posterior.to_netcdf(buffer)  # PosteriorGroups writes into a file-like object itself
    write_bytes(path, buffer.getbuffer())
    return path


def _inference_data_netcdf(idata: Any, buffer: io.BytesIO) -> None:
    """An ``arviz.InferenceData`` written into ``buffer`` as ``InferenceData.to_netcdf`` writes a file
    (one netCDF4 group per group, numeric variables zlib-compressed), which takes only a path."""
    import numpy as np

    for position, name in enumerate(idata.groups()):
        dataset = getattr(idata, name)
        encoding = {
            var: {"zlib": True} for var, values in dataset.data_vars.items() if np.issubdtype(values.dtype, np.number)
        }
        dataset.to_netcdf(buffer, mode="w" if position == 0 else "a", group=name, engine="h5netcdf", encoding=encoding)
