"""numba compilation cached on disk, and in memory where no cache location is writable.

``cache=True`` stores the machine code beside the module (``__pycache__``) or, for a read-only
install, in numba's per-user cache directory; with neither writable numba refuses ``cache=True``
at decoration ("no locator available"), so the function is compiled in every process instead.

Cold caches are filled one process at a time. A gufunc is cached as two files, its kernel and
its wrapper, and the wrapper calls the kernel by a symbol whose ABI tag counts the functions the
process compiled before it; two processes compiling at once can leave a kernel from one beside a
wrapper from the other, and every later load of that pair segfaults (numba issue #10128, still
in numba 0.65; parallel test workers hit it on a fresh clone). :func:`guvectorize_cached`
therefore compiles, or loads, and saves under an exclusive ``flock`` on :func:`compile_lock_path`,
so both files always come from one process. ``njit`` caches need no lock: a cached ``njit``
function carries the code of the functions it calls and is written with one atomic rename.

Imported only by the compiled kernels (:mod:`honestci.audit.checks.ngram_kernel`,
:mod:`honestci.audit.stats.bayesian.density`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numba

#: The lock file's name, in numba's cache directory (``NUMBA_CACHE_DIR``) or the temporary one.
LOCK_NAME = "honestci-numba-compile.lock"


def njit_cached(**options):
    """Decorator: ``numba.njit(cache=True, **options)``, or without the cache (module docstring)."""
    return _cached(numba.njit, options)


def guvectorize_cached(signatures, layout, **options):
    """Decorator: ``numba.guvectorize(signatures, layout, cache=True, **options)``, compiled (or
    loaded) and saved under :func:`compile_lock`, or without the cache (module docstring)."""

    def compile_locked(**all_options):
        decorate = numba.guvectorize(signatures, layout, **all_options)

        def locked(function):
            with compile_lock():
                return decorate(function)

        return locked

    return _cached(compile_locked, options)


def compile_lock_path() -> Path:
    """``$NUMBA_CACHE_DIR/honestci-numba-compile.lock``, or the same name in the temporary folder.

    Every process that can share a cache on this machine sees the same temporary folder; a cache
    directory on a shared file system (``NUMBA_CACHE_DIR``) carries its own lock.
    """
    return Path(numba.config.CACHE_DIR or tempfile.gettempdir()) / LOCK_NAME


@contextlib.contextmanager
def compile_lock() -> Iterator[None]:
    """Hold the exclusive inter-process compile lock; wait for it if another process holds it.

    Where the lock file cannot be opened (a read-only folder) nothing is locked: numba cannot
    write a cache there either, so there is no cache to race on.
    """
    path = compile_lock_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies
        yield
    finally:
        os.close(fd)


def _cached(compiler, options):
    def decorate(function):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", numba.NumbaWarning)
            try:
                return compiler(cache=True, **options)(function)
            except RuntimeError:  # "cannot cache function ...: no locator available"
                return compiler(**options)(function)

    return decorate
