"""Shared pieces of the command line: bad input exits 2 with a readable message, no traceback."""

from __future__ import annotations

import functools
import sys

import click

from honestci.audit.errors import InputError
from honestci.audit.policy import EXIT_BAD_INPUT

#: What the Bayesian fit imports from the bayes extra (audit/stats/bayes*.py import them lazily).
BAYES_MODULES = ("pymc", "arviz", "nutpie")


def fail_cleanly(command):
    """Print domain input errors as a readable message (no traceback) and exit 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            click.secho("error: " + exc.render(), fg="red", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper
