"""Atomic file writes: a report is either the old one or the new one, never half of each."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator, Mapping
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
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the report from its readers
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


def write_bytes(path: Path, data) -> None:
    """Write ``data`` (bytes or a buffer) to ``path`` and fsync it: a full disk raises OSError
    here (on a write, or on the fsync that flushes delayed allocations), never later."""
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def append_text(path: str | Path, text: str) -> Path:
    """Append ``text`` to ``path`` (created if missing, with the umask's permissions), as
    GitHub Actions' ``$GITHUB_STEP_SUMMARY`` file expects.

    Raises
    ------
    InputError
        When the file cannot be opened or written, saying which and why.
    """
    path = Path(path)
    try:
        with path.open("a", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    except OSError as exc:
        raise InputError(
            f"Cannot append to {path}: {exc.strerror}.",
            fix="check the path in $GITHUB_STEP_SUMMARY, or unset it outside GitHub Actions",
        ) from None
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The lock file :func:`out_dir_lock` holds inside an output folder while it writes.
LOCK_NAME = ".honestci.lock"


@contextlib.contextmanager
def out_dir_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir`` while one audit writes into it.

    A second audit writing into the same folder is refused (exit 2) instead of interleaving its
    files with the first's. ``flock`` is released by the kernel if the process dies, and the lock
    file is removed on the way out; a waiter that locked a file already removed retries on the
    new one, so two writers never both hold the lock.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"Cannot write into {out}: {exc.strerror}.", fix="choose an output folder you can write to (--out DIR)"
        ) from None
    lock = out / LOCK_NAME
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(
                f"Cannot write into {out}: {exc.strerror}.", fix="choose an output folder you can write to (--out DIR)"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise InputError(
                f"Another honestci run is writing into {out}.",
                fix="wait for it to finish, or write into another folder (--out DIR)",
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed this file as we locked it: lock the current one
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)
