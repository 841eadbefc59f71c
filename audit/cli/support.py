"""Shared pieces of the command line: bad input exits 2 with a readable message, no traceback; the
one ``--seed``, ``--level`` and ``--policy`` options; the group that imports a command only when it
is used; the opening of the one-check commands and the claim's contests."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import DEFAULT_SEED, EXIT_BAD_INPUT, EXIT_BLOCKED, EXIT_PASS, Policy, Verdict

if TYPE_CHECKING:  # annotations only: the command line's startup imports no pandas (tests/test_cli_startup.py)
    from honestci.audit.data.claims import Claim
    from honestci.audit.data.contests import ContestTable
    from honestci.audit.data.io import Study

#: What the Bayesian fit imports from the bayes extra (audit/stats/bayes*.py import them lazily).
BAYES_MODULES = ("pymc", "arviz", "nutpie", "xarray", "h5netcdf")

#: The one ``--seed`` option of every command that draws random numbers: same name, type, default
#: (the policy's seed, so a rerun reproduces its output) and help everywhere.
seed_option = click.option(
    "--seed",
    type=int,
    default=DEFAULT_SEED,
    show_default=True,
    help="Seed of every random draw this command makes (bootstraps, MCMC, order shuffles, sampling).",
)

#: The one type of every ``--level``: a confidence level strictly between 0 and 1.
LEVEL = click.FloatRange(0.0, 1.0, min_open=True, max_open=True)

#: The one ``--level`` option of every command that takes a confidence level (default: the policy's;
#: a gate always uses the policy's level).
level_option = click.option(
    "--level",
    type=LEVEL,
    default=None,
    help="Confidence level of the intervals, in (0, 1) (default: the policy's, 0.95 built in).",
)

#: The auditor's policy file: every command that judges a claim reads its rules from it.
policy_option = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The auditor's policy file (YAML; docs/claims.md): level, gate intervals, required gates, thresholds, "
    "scoring of invalid verdicts. Default: the built-in policy. A claim may only tighten it.",
)


def fail_cleanly(command):
    """Print domain input errors as a readable message (no traceback) and exit 2; an estimator
    that cannot give a trustworthy answer from valid data (:class:`EstimationError`) makes the
    command's result INCONCLUSIVE: its reason is printed and it exits 1, as a gate that is not
    PASS does (``honestci audit`` turns the same error into the check's INCONCLUSIVE gate)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            click.secho("error: " + exc.render(), fg="red", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except EstimationError as exc:
            click.secho(f"INCONCLUSIVE: no trustworthy estimate from these data: {exc}", fg="yellow", err=True)
            sys.exit(EXIT_BLOCKED)

    return wrapper


class LazyGroup(click.Group):
    """A click group whose commands from other modules are imported only when run or asked for
    their own ``--help``: ``honestci --help`` lists them from ``lazy_commands`` (name -> ("module:attr",
    one-line help)) without importing pandas, PyMC or torch behind them."""

    def __init__(self, *args, lazy_commands: dict[str, tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not ctx.resilient_parsing:
            refuse_repeated_options(ctx, name or "", command, rest)
        return name, command, rest

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module, _, attr = self.lazy_commands[cmd_name][0].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own listing calls get_command on every name, which would import them all.
        commands = [
            (name, self.commands.get(name) or click.Command(name, help=self.lazy_commands[name][1]))
            for name in self.list_commands(ctx)
        ]
        commands = [(name, command) for name, command in commands if not command.hidden]
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in commands])


def refuse_repeated_options(parent: click.Context, name: str, command: click.Command, args: list[str]) -> None:
    """Exit 2 naming the option when ``args`` give a single-valued option of ``command`` (or of a
    subcommand of it) twice: click keeps the last silently, so ``--policy strict.yaml --policy
    lax.yaml`` would audit under the second. Options meant to repeat (``multiple=True``), counts and
    flags are left alone. The args are read by the command's own parser (so ``--out=x``, ``-o x``
    and an option-looking value are read as click reads them); anything it cannot parse is left
    for click's own parse to report."""
    probe = click.Context(command, parent=parent, info_name=name, resilient_parsing=True)
    parser = command.make_parser(probe)
    parser.ignore_unknown_options = True
    try:
        _, rest, order = parser.parse_args(list(args))
    except click.ClickException:
        return
    seen: set[str] = set()
    for param in order:
        if not isinstance(param, click.Option) or param.multiple or param.count or param.is_flag:
            continue
        if param.name in seen:
            error = InputError(
                f"{probe.command_path}: option {param.opts[0]} is given more than once; it takes one value, and "
                "click would keep the last silently.",
                fix=f"give {param.opts[0]} once",
            )
            click.secho("error: " + error.render(), fg="red", err=True)
            sys.exit(EXIT_BAD_INPUT)
        seen.add(param.name or "")
    if isinstance(command, click.Group) and rest:
        sub = command.get_command(probe, rest[0])
        if sub is not None:
            refuse_repeated_options(probe, rest[0], sub, rest[1:])


def exit_by_gate(gate) -> None:
    """Print a check command's gate line and exit by it, as ``honestci audit`` does for the
    release: 0 only when the gate PASSes, 1 otherwise (WARN, INCONCLUSIVE, FAIL)."""
    click.echo(f"\ngate {gate.name}: {gate.verdict} - {gate.message}")
    sys.exit(EXIT_PASS if gate.verdict == Verdict.PASS else EXIT_BLOCKED)


def audit_policy_and_level(policy_file: Path | None, level: float | None) -> tuple[Policy, float]:
    """The opening of the one-check commands (audit/cli/checks.py): the auditor's policy from
    ``--policy`` (the built-in one when None) and the confidence level, ``--level`` or else the
    policy's."""
    from honestci.audit.data.policy_file import load_policy

    rules = load_policy(policy_file)
    return rules, rules.thresholds.confidence_level if level is None else level


def claim_contests(claim: Claim, study: Study, system: str) -> ContestTable:
    """The contests of ``system`` against the claim's opponent, judged as the claim says (its
    judge, or its panel by its rule; single-order contests as its policy says)."""
    from honestci.audit.data.contests import build_claim_contests

    return build_claim_contests(
        study,
        system,
        claim.spec.opponent,
        judge=claim.spec.judge,
        panel=claim.spec.panel,
        panel_rule=claim.spec.panel_rule,
        missing_orders=claim.policy.missing_orders,
    )
