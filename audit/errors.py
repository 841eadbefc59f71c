"""Domain errors. Each says what went wrong, why it matters, and what to do.

The CLI maps :class:`InputError` (and subclasses) to exit code 2 and prints the message without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass


class HonestCIError(Exception):
    """Base class of every error honestci raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One problem found in an input: where it is, what is wrong, and how to fix it."""

    file: str
    line: int | None
    field: str | None
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f", line {self.line}"
        if self.field:
            where += f", field '{self.field}'"
        text = f"{where}: {self.message}"
        if self.fix:
            text += f" ({self.fix})"
        return text


class InputError(HonestCIError):
    """Bad input: a file, claim or argument that cannot be audited as given (exit code 2).

    Parameters
    ----------
    message
        What is wrong, in one sentence.
    problems
        Every located problem found (all are reported at once, never only the first).
    fix
        What the user should do.
    """

    def __init__(self, message: str, problems: list[Problem] | tuple[Problem, ...] = (), fix: str = ""):
        self.message = message
        self.problems = tuple(problems)
        self.fix = fix
        super().__init__(self.render())

    def render(self, max_problems: int = 20) -> str:
        lines = [self.message]
        for problem in self.problems[:max_problems]:
            lines.append(f"  - {problem}")
        hidden = len(self.problems) - max_problems
        if hidden > 0:
            lines.append(f"  ... and {hidden} more problem(s) of the same kind")
        if self.fix:
            lines.append(f"What to do: {self.fix}")
        return "\n".join(lines)


def level_problem(level: float) -> str | None:
    """What is wrong with a confidence ``level`` (None when it lies strictly between 0 and 1; NaN
    does not)."""
    return None if 0 < level < 1 else f"level = {level!r} must lie strictly between 0 and 1"


def check_level(level: float) -> None:
    """Raise :class:`InputError` unless ``level`` lies strictly between 0 and 1."""
    problem = level_problem(level)
    if problem is not None:
        raise InputError(f"{problem}.", fix="use e.g. 0.95")


class SchemaError(InputError):
    """A data file does not match its table's schema."""


class ClaimError(InputError):
    """A claim file is malformed or refers to data that does not exist."""


class MissingExtraError(InputError):
    """A command needs an optional extra (``honestci[bayes]``, ...) that is not installed (exit code 2).

    The environment, not the data, is at fault, so no verdict is reached: a missing extra can never
    pass a gate (``--allow-inconclusive`` included).
    """

    def __init__(self, extra: str, needed_by: str, reason: str, instead: str = ""):
        fix = f"pip install 'honestci[{extra}]'" + (f" (or {instead})" if instead else "")
        super().__init__(f"{needed_by} needs the {extra} extra, and {reason}.", fix=fix)


def require_extra(extra: str, *modules: str, needed_by: str, instead: str = "", import_them: bool = True) -> None:
    """Import ``modules`` (all of the optional ``extra``) or raise :class:`MissingExtraError`.

    Call it where a command first needs the extra, before anything is written. ``needed_by`` names
    what needs it ("the Bayesian model"); ``instead`` is the way around it ("pass --no-bayes").
    The modules are imported, not only looked up, so a broken install is caught here too; with
    ``import_them=False`` they are only looked up (``importlib.util.find_spec``), for an extra
    whose import costs more than the work may take (the bayes extra: pymc, arviz and nutpie take
    ~8 s to import, which a fit by the collapsed sampler never does); a broken install then fails
    where the work imports it, still before anything is written.
    """
    for module in modules:
        try:
            if import_them:
                importlib.import_module(module)
            elif importlib.util.find_spec(module) is None:
                raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        except ImportError as exc:
            # The module itself or one it needs is absent, or present but broken (a version mismatch).
            missing = exc.name if isinstance(exc, ModuleNotFoundError) and exc.name else None
            reason = f"{missing} is not installed" if missing else f"importing {module} failed ({exc})"
            raise MissingExtraError(extra, needed_by, reason, instead) from exc


class EstimationError(HonestCIError):
    """An estimator cannot produce a trustworthy answer from these data (not a user error).

    Callers turn this into an INCONCLUSIVE verdict rather than a number.
    """


class DensityMismatchError(HonestCIError):
    """The hand-derived density no longer matches the PyMC model it was derived from
    (:class:`honestci.audit.stats.bayesian.density.Derivation`): sampling it would ignore the edit."""

    def __init__(self, message: str, fix: str):
        self.message, self.fix = message, fix
        super().__init__(f"{message}\nWhat to do: {fix}")
