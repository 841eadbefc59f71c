"""Plug-in checks of the audit (calibration, position bias, winner's curse, leakage, training).

A check module registers ``function(context) -> result`` with :func:`register_check`; the audit
runs every registered check on the :class:`honestci.audit.pipeline.AuditContext`, stores the results in
``context.checks[key]`` for the gates to read (see :func:`honestci.audit.gates.register_gate`), and puts
each result's :meth:`report_section` into the report. A check that does not apply to a claim (its
inputs are absent) returns ``None`` and its gate reports INCONCLUSIVE ("not run: needs …").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Modules that register checks; imported by the audit before it runs them.
CHECK_MODULES = (
    "honestci.audit.checks.calibration",
    "honestci.audit.checks.position_bias",
    "honestci.audit.checks.selection",
    "honestci.audit.checks.leakage",
    "honestci.audit.checks.training_health",
)
_CHECKS: dict[str, Callable[[Any], Any]] = {}


@dataclass(frozen=True)
class ReportSection:
    """What a check contributes to the report: a title, short lines of text and one table."""

    key: str
    title: str
    lines: tuple[str, ...] = ()
    table: tuple[dict, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"key": self.key, "title": self.title, "lines": list(self.lines), "table": [dict(r) for r in self.table]}


def register_check(key: str) -> Callable[[Callable], Callable]:
    """Register ``function(context) -> result | None`` under ``key``.

    The result must offer ``report_section() -> ReportSection``.
    """

    def decorator(function: Callable) -> Callable:
        _CHECKS[key] = function
        return function

    return decorator


def load_check_modules() -> None:
    """Import every module of :data:`CHECK_MODULES` that exists (a missing one has not landed)."""
    for name in CHECK_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def _module_rank(function: Callable) -> int:
    module = function.__module__
    return CHECK_MODULES.index(module) if module in CHECK_MODULES else len(CHECK_MODULES)


def run_checks(context) -> dict[str, Any]:
    """Run every registered check, in the order of :data:`CHECK_MODULES` whatever the import
    order; the value is None where a check does not apply."""
    load_check_modules()
    ordered = sorted(_CHECKS.items(), key=lambda item: (_module_rank(item[1]), item[0]))
    return {key: function(context) for key, function in ordered}


def run_check(key: str, context) -> Any:
    """Run the one registered check ``key`` (after loading the check modules).

    Raises
    ------
    KeyError
        When no module registers ``key`` (its module has not landed): callers that must not
        proceed without it fail closed.
    """
    load_check_modules()
    return _CHECKS[key](context)
