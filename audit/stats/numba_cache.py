"""numba compilation cached on disk, and in memory where no cache location is writable.

``cache=True`` stores the machine code beside the module (``__pycache__``) or, for a read-only
install, in numba's per-user cache directory; with neither writable numba refuses ``cache=True``
at decoration ("no locator available"), so the function is compiled in every process instead.
Imported only by the compiled kernels (:mod:`honestci.audit.checks.ngram_kernel`, :mod:`honestci.audit.stats.bayes_density`).
"""

from __future__ import annotations

import warnings

import numba


def njit_cached(**options):
    """Decorator: ``numba.njit(cache=True, **options)``, or without the cache (module docstring)."""
    return _cached(numba.njit, options)


def guvectorize_cached(signatures, layout, **options):
    """Decorator: ``numba.guvectorize(signatures, layout, cache=True, **options)``, or without the cache."""
    return _cached(lambda **all_options: numba.guvectorize(signatures, layout, **all_options), options)


def _cached(compiler, options):
    def decorate(function):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", numba.NumbaWarning)
            try:
                return compiler(cache=True, **options)(function)
            except RuntimeError:  # "cannot cache function ...: no locator available"
                return compiler(**options)(function)

    return decorate
