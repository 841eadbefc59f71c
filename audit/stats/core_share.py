"""How many threads a parallel numba kernel may use when it runs beside other work.

The audit fits its Bayesian model on a background thread while its main thread computes the
interval table and the checks (:func:`honestci.audit.pipeline.audit_context`). A kernel that took
every core then would slow the main thread, the audit's critical path, while the background fit
waits for its slowest worker (numba splits a ``prange`` evenly between its threads). A
:class:`CoreShare` gives a background kernel one core fewer than numba's thread count while the
foreground works, and every core once the foreground waits for it; the kernel's thread asks
before each launch (:func:`kernel_threads`), so the share changes between launches.

Outside a :func:`sharing_cores` block (any caller other than the audit's background fit) kernels use
numba's full thread count, as before. Results never depend on the thread count: each kernel's
iterations are independent, and each writes its own outputs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar


class CoreShare:
    """The cores of a background computation: all but one while the foreground works, all once
    it waits (:meth:`foreground_waits`)."""

    def __init__(self) -> None:
        self._foreground_waiting = threading.Event()

    def foreground_waits(self) -> None:
        """The foreground has nothing left to do but wait for the background: give it every core."""
        self._foreground_waiting.set()

    def threads(self, available: int) -> int:
        """Threads for the next kernel out of ``available`` (numba's thread count)."""
        return available if self._foreground_waiting.is_set() else max(1, available - 1)


_SHARE: ContextVar[CoreShare | None] = ContextVar("honestci_core_share", default=None)


@contextlib.contextmanager
def sharing_cores(share: CoreShare) -> Iterator[None]:
    """Within this block (in this thread), parallel kernels take the threads ``share`` allows."""
    token = _SHARE.set(share)
    try:
        yield
    finally:
        _SHARE.reset(token)


def kernel_threads() -> int:
    """Set and return numba's thread count for the next parallel kernel launched from this thread:
    what the enclosing :func:`sharing_cores` allows, else numba's full count."""
    import numba

    available = numba.config.NUMBA_NUM_THREADS
    share = _SHARE.get()
    threads = available if share is None else share.threads(available)
    numba.set_num_threads(threads)
    return threads
