"""Shared pieces of the command line: bad input exits 2 with a readable message, no traceback."""

from __future__ import annotations

import functools
import sys

import click

from audit.errors import InputError

#: Exit codes of every command: release allowed, blocked by a gate, bad input.
EXIT_PASS, EXIT_BLOCKED, EXIT_BAD_INPUT = 0, 1, 2
#: Seed of every resampling step of an audit unless ``--seed`` says otherwise.
DEFAULT_AUDIT_SEED = 20261129


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
