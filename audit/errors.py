"""Domain errors. Each says what went wrong, why it matters, and what to do.

The CLI maps :class:`InputError` (and subclasses) to exit code 2 and prints the message without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

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


class SchemaError(InputError):
    """A data file does not match its table's schema."""


class ClaimError(InputError):
    """A claim file is malformed or refers to data that does not exist."""


class EstimationError(HonestCIError):
    """An estimator cannot produce a trustworthy answer from these data (not a user error).

    Callers turn this into an INCONCLUSIVE verdict rather than a number.
    """
