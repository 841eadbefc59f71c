"""The audit's Bayesian fit on a background thread (audit/pipeline.py): it runs beside the interval
table and the checks, its kernels a core short until the main thread waits for it, and neither
side's error is lost or leaves the other running."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numba
import pytest

from honestci.audit import pipeline
from honestci.audit.errors import InputError
from honestci.audit.stats.core_share import CoreShare, kernel_threads

CLAIM = Path(__file__).resolve().parents[1] / "fixtures" / "study" / "claim.yaml"


def test_the_background_function_runs_on_another_thread_and_returns_its_value():
    work = pipeline._start_in_background(lambda a, b: (a + b, threading.get_ident()), 2, 3)
    value, ident = work.result()
    assert value == 5 and ident != threading.get_ident()


def test_a_background_error_is_raised_by_result():
    def fail():
        raise InputError("no fit")

    with pytest.raises(InputError, match="no fit"):
        pipeline._start_in_background(fail).result()


def test_a_core_share_gives_all_but_one_core_until_the_foreground_waits():
    share = CoreShare()
    assert [share.threads(n) for n in (1, 2, 16)] == [1, 1, 15]
    share.foreground_waits()
    assert [share.threads(n) for n in (1, 2, 16)] == [1, 2, 16]


def test_background_kernels_leave_the_caller_a_core_until_it_waits():
    """Inside the background work numba gets one thread fewer than it has until the caller waits
    (BackgroundWork.result); elsewhere it keeps its full count."""
    available = numba.config.NUMBA_NUM_THREADS
    first_launch = threading.Event()
    seen: list[int] = []

    def kernels():
        seen.append(kernel_threads())
        first_launch.set()
        while kernel_threads() != available:  # until the caller waits
            time.sleep(0.01)
        return numba.get_num_threads()

    work = pipeline._start_in_background(kernels)
    assert first_launch.wait(timeout=30)
    assert work.result() == available
    assert seen == [max(1, available - 1)]
    assert kernel_threads() == available  # the caller, outside any share


def _slow_fit(finished: list[str]):
    def fit(*args, **kwargs):
        time.sleep(0.5)
        finished.append("fit")
        raise RuntimeError("the fit was not expected to be read")

    return fit


def test_an_error_in_the_checks_is_raised_after_the_fit_has_finished(monkeypatch):
    """A check's error propagates, but only once the background fit is done: no thread is left
    running, and the fit's own error (here a second one) does not mask the first."""
    finished: list[str] = []
    monkeypatch.setattr(pipeline, "_fit_bayes_model", _slow_fit(finished))

    def broken_checks(context):
        raise InputError("a check refused its input")

    monkeypatch.setattr("honestci.audit.checks.registry.run_checks", broken_checks)
    with pytest.raises(InputError, match="a check refused its input"):
        pipeline.audit_context(CLAIM, bayes=True)
    assert finished == ["fit"]


def test_an_error_in_the_fit_is_raised_by_the_audit(monkeypatch):
    finished: list[str] = []
    monkeypatch.setattr(pipeline, "_fit_bayes_model", _slow_fit(finished))
    with pytest.raises(RuntimeError, match="the fit was not expected to be read"):
        pipeline.audit_context(CLAIM, bayes=True)
    assert finished == ["fit"]


def test_without_the_bayesian_fit_only_the_modules_load_in_the_background(monkeypatch):
    started: list[tuple] = []
    monkeypatch.setattr(pipeline, "_start_in_background", lambda *args: started.append(args))
    context = pipeline.audit_context(CLAIM, bayes=False)
    assert started == [(pipeline._import_audit_modules, False)] and context.bayes is None
    assert all(row.method != "bayes_hierarchical" for row in context.intervals.rows)


def test_the_checks_run_with_single_threaded_blas(monkeypatch):
    """BLAS workers busy-wait after each call on the core the background fit needs: the audit
    limits every BLAS library it loaded to one thread, and lifts the limit when it is done."""
    from threadpoolctl import threadpool_info

    from honestci.audit.checks import registry

    seen: list[list[int]] = []
    real_checks = registry.run_checks

    def checks_recording_blas(context):
        seen.append([lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"])
        return real_checks(context)

    monkeypatch.setattr(registry, "run_checks", checks_recording_blas)
    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    pipeline.audit_context(CLAIM, bayes=False)
    assert seen and seen[0] and set(seen[0]) == {1}
    assert [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"] == before


def test_a_kernel_launch_asks_openmp_workers_to_sleep_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    kernel_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    kernel_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_while_fitting_runs_after_the_checks_and_beside_the_fit(monkeypatch):
    """run_audit builds its per-vignette table there: the context holds every check, and the fit
    is still running (it is waited for afterwards)."""
    events: list[str] = []
    real_fit = pipeline._fit_bayes_model

    def slow_fit(*args):
        time.sleep(1.0)
        result = real_fit(*args)
        events.append("fit done")
        return result

    def while_fitting(context):
        assert "valid_verdicts" in context.checks and context.bayes is None
        events.append("while fitting")

    monkeypatch.setattr(pipeline, "_fit_bayes_model", slow_fit)
    context = pipeline.audit_context(CLAIM, bayes=True, while_fitting=while_fitting)
    assert events == ["while fitting", "fit done"]
    assert context.bayes is not None
    assert [row.method for row in context.intervals.rows][-2:] == ["bayes_hierarchical"] * 2
