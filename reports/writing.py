"""Atomic file writes: a report is either the old one or the new one, never half of each."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from honestci.audit.errors import InputError


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    Raises
    ------
    InputError
        When the folder cannot be created or written (read-only, full disk), saying which.
    """
    path = Path(path)
    atomic_write_texts({path: text})
    return path


def atomic_write_texts(files: Mapping[Path, str]) -> None:
    """Write several files so that a failure leaves every one of them as it was.

    Every text is first written, flushed and fsynced to a temporary file beside its target (this
    is where a full disk or a read-only folder fails, and then no target has been touched); only
    then are the temporaries renamed over the targets with ``os.replace``.

    Raises
    ------
    InputError
        When a folder cannot be created or written, or a rename fails, saying which and why.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, text in files.items():
            path = Path(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            except OSError as exc:
                raise InputError(
                    f"Cannot write into {path.parent}: {exc.strerror}.",
                    fix="choose an output folder you can write to (--out DIR)",
                ) from None
            staged.append((tmp, path))
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                    handle.write(text)
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError as exc:
                raise InputError(
                    f"Cannot write {path}: {exc.strerror}.",
                    fix="free disk space or choose another output folder (--out DIR)",
                ) from None
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise InputError(
                    f"Cannot write {path}: {exc.strerror}.",
                    fix="free disk space or choose another output folder (--out DIR)",
                ) from None
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
