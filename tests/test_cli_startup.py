"""`honestci --help` stays instant: it imports none of the heavy libraries and still lists every
command; commands of other modules load only when used; one --seed option everywhere."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from honestci.audit.cli import LAZY_COMMANDS, main
from honestci.audit.policy import DEFAULT_SEED

COMMANDS = {
    "audit",
    "calibrate-judge",
    "compare",
    "coverage-study",
    "demo",
    "generate",
    "import",
    "judge",
    "leakage",
    "length-bias",
    "pipeline",
    "plan",
    "position-bias",
    "report",
    "simulate",
    "train",
    "winners-curse",
    "winrate",
}
HEAVY = {"pandas", "numpy", "scipy", "matplotlib", "pyarrow", "numba", "pymc", "arviz", "nutpie", "torch", "httpx"}


def test_help_imports_no_heavy_library_and_lists_every_command():
    # -X importtime reports every module imported, on stderr: "import time: self | cumulative | name".
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "honestci", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "click" in imported  # the parse found the imports
    assert not imported & HEAVY
    listed = result.stdout.split("Commands:", 1)[1].split()
    assert set(listed) >= COMMANDS


def test_each_lazy_command_loads_and_its_listed_help_is_its_own():
    ctx = click.Context(main)
    assert set(main.list_commands(ctx)) == COMMANDS
    for name, (_, short_help) in LAZY_COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command.get_short_help_str(limit=10_000) == short_help, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_shows_its_own_help(name):
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: main {name}" in result.output


def _seed_options(group: click.Group, ctx: click.Context):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _seed_options(command, click.Context(command, parent=ctx))
        for param in command.params:
            if param.name == "seed":
                yield name, param


def test_every_seed_option_is_the_one_shared_option_except_the_simulators():
    options = dict(_seed_options(main, click.Context(main)))
    assert set(options) == {
        "audit",
        "calibrate-judge",
        "compare",
        "coverage-study",
        "generate",
        "import",
        "judge",
        "plan",
        "position-bias",
        "simulate",
        "winners-curse",
        "winrate",
    }
    simulator = options.pop("simulate")
    assert simulator.default is None and "not the audit's --seed" in simulator.help
    assert {(o.opts[0], o.type, o.default, o.help, o.show_default) for o in options.values()} == {
        ("--seed", click.INT, DEFAULT_SEED, options["audit"].help, True)
    }


def test_the_library_functions_behind_the_commands_default_to_the_same_seed():
    # A function called without a seed draws what the command (and `honestci audit`) draws by default.
    import inspect

    from honestci.audit.checks import calibration, position_bias, selection
    from honestci.audit.stats.design.coverage_study import run_coverage_study

    functions = (
        run_coverage_study,
        selection.analyse_selection,
        selection.winner_inference,
        selection.candidate_winner_inference,
    )
    assert {inspect.signature(f).parameters["seed"].default for f in functions} == {DEFAULT_SEED}
    assert calibration.CHECK_SEED == position_bias.CHECK_SEED == DEFAULT_SEED


class _Exited(Exception):
    def __init__(self, code):
        self.code = code


@pytest.mark.parametrize(
    "outcome, code, stderr",
    [(None, 0, ""), (0, 0, ""), (1, 1, ""), (2, 2, ""), ("a message", 1, "a message\n")],
)
def test_the_program_exits_with_its_commands_code_after_the_exit_handlers(monkeypatch, capsys, outcome, code, stderr):
    """run() (the console script) skips the interpreter's teardown but not the atexit handlers,
    and exits with the code the command gave (None: 0; a message: printed, then 1)."""
    import honestci.audit.cli as cli

    handlers: list[str] = []

    def command():
        if outcome is not None:
            sys.exit(outcome)

    def exit_now(value):
        raise _Exited(value)

    monkeypatch.setattr(cli, "main", command)
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    # the real handlers of this test process must not run here (they would shut its thread pools)
    monkeypatch.setattr(cli.atexit, "_run_exitfuncs", lambda: handlers.append("ran"))
    with pytest.raises(_Exited) as exited:
        cli.run()
    assert exited.value.code == code and handlers == ["ran"]
    assert capsys.readouterr().err == stderr


def test_the_program_exits_as_python_does_under_a_profiler(tmp_path):
    """Under ``python -m cProfile`` the program leaves through the interpreter's own exit, which
    is when the profiler writes its file (the bench's --profile reads it). cProfile itself ends
    with status 0 whatever the program's (it catches the SystemExit)."""
    profile = tmp_path / "audit.prof"
    program = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "honestci"]
    result = subprocess.run(
        [*program, "audit", "no-such-claim.yaml", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "no-such-claim.yaml" in result.stderr
    import pstats

    assert pstats.Stats(str(profile)).total_calls > 0


def test_python_m_honestci_runs_the_program_and_keeps_its_output():
    result = subprocess.run(
        [sys.executable, "-m", "honestci", "audit", "no-such-claim.yaml", "--out", "unused"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "no-such-claim.yaml" in result.stderr
    assert result.stderr.rstrip().endswith("pass the path of a claim file")
