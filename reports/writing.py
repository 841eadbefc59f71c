"""Atomic file writes: a report is either the old one or the new one, never half of each."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from audit.errors import InputError


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    Raises
    ------
    InputError
        When the folder cannot be created or written (read-only, full disk), saying which.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"Cannot write into {path.parent}: {exc.strerror}.",
                         fix="choose an output folder you can write to (--out DIR)") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"Cannot write {path}: {exc.strerror}.",
                         fix="free disk space or choose another output folder (--out DIR)") from None
    return path
