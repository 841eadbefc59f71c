"""How many threads the audit's compiled kernels and BLAS may use when they run beside other work.

The audit fits its Bayesian model on a background thread while its main thread computes the
interval table and the checks (:func:`honestci.audit.pipeline.audit_context`). A kernel that took
every core then would slow the main thread, the audit's critical path, while the background fit
waits for its slowest worker (numba splits a ``prange`` evenly between its threads). A
:class:`CoreShare` gives a background kernel one core fewer than numba's thread count while the
foreground works, and every core once the foreground waits for it; the kernel's thread asks
before each launch (:func:`kernel_threads`), so the share changes between launches.

A launch through :func:`kernel_threads` also asks OpenMP (numba's threading layer here) to put
its idle workers to sleep rather than spin, unless ``OMP_WAIT_POLICY`` is set already. BLAS runs
single-threaded in the audit and in planning (:func:`single_threaded_blas`).

Outside a :func:`sharing_cores` block (any caller other than the audit's background fit) kernels use
numba's full thread count, as before. Results never depend on the thread count: each kernel's
iterations are independent, and each writes its own outputs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from threadpoolctl import threadpool_limits


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
    # numba's OpenMP workers otherwise busy-wait after each kernel (0.9 CPU-s over 200 launches
    # of a tiny kernel, measured), on the core the foreground needs; libgomp reads this once, when
    # numba first starts its threads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numba

    available = numba.config.NUMBA_NUM_THREADS
    share = _SHARE.get()
    threads = available if share is None else share.threads(available)
    numba.set_num_threads(threads)
    return threads


def single_threaded_blas() -> threadpool_limits:
    """BLAS limited to one thread (a context manager, or a limit kept while the object lives) for
    the BLAS libraries loaded so far. The audit's and the planner's products are small (a few
    columns), and a multithreaded OpenBLAS's workers busy-wait after each call: up to 10x the CPU
    (planning: 0.37 against 0.04 CPU-s a fit at G = 13, m = 10) and, in the audit, about 1.3 CPU-s
    of spinning beside the 2.6 the checks' own thread used at a million contests, on the core the
    Bayesian fit runs on."""
    return threadpool_limits(limits=1, user_api="blas")
