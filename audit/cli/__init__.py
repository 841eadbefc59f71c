"""The ``honestci`` command line.

Exit codes: 0 release allowed, 1 blocked (a gate failed or is inconclusive), 2 bad input or a
missing extra. Heavy libraries are imported inside the commands that need them, and the commands
of other modules only when used (:data:`LAZY_COMMANDS`), so ``honestci --help`` stays instant.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from pathlib import Path

import click

from honestci import __version__
from honestci.audit.cli.support import (
    BAYES_MODULES,
    LazyGroup,
    claim_contests,
    level_option,
    policy_option,
    seed_option,
)
from honestci.audit.cli.support import fail_cleanly as _fail_cleanly
from honestci.audit.errors import InputError, require_extra
from honestci.audit.policy import DEFAULT_SEED
from honestci.audit.progress import Progress

#: Commands defined in other modules: name -> ("module:attr", the one-line help `honestci --help`
#: lists without importing them; tests/test_cli_startup.py checks it against each command's own).
LAZY_COMMANDS = {
    "judge": (
        "honestci.audit.cli.judges:judge_command",
        "Judge every contest in CONTESTS (vignette_id, response_a, response_b) in both orders.",
    ),
    "import": (
        "honestci.audit.cli.judges:import_command",
        "Import judgments or per-item scores made by another tool (FORMAT below).",
    ),
    "calibrate-judge": (
        "honestci.audit.cli.checks:calibrate_judge_command",
        "Agreement of a judge with human preferences, with vignette-clustered intervals.",
    ),
    "position-bias": (
        "honestci.audit.cli.checks:position_bias_command",
        "Position bias of a judge from both-order verdicts (single-order data: not identifiable).",
    ),
    "length-bias": (
        "honestci.audit.cli.checks:length_bias_command",
        "Length and style bias of a judge, and length-controlled win rates (AlpacaEval 2.0's GLM).",
    ),
    "compare": (
        "honestci.audit.cli.checks:compare_command",
        "K systems against a common opponent: win rates, pairwise differences, Bradley–Terry strengths and rank intervals.",
    ),
    "plan": (
        "honestci.audit.cli.planning:plan_command",
        "Vignettes × contests per vignette for the bar gate to pass a true rate with the given power.",
    ),
    "winners-curse": (
        "honestci.audit.cli.selection:winners_curse",
        "Winner's-curse analysis of the selection pool of CLAIM's study.",
    ),
    "leakage": (
        "honestci.audit.cli.selection:leakage",
        "Scan training corpora for held-out eval answers; exit 1 when any answer leaked.",
    ),
    "train": (
        "honestci.audit.cli.training:train_group",
        "Train reward models or a GRPO policy from a YAML config (see training/configs/).",
    ),
    "generate": (
        "honestci.audit.cli.training:generate_command",
        "Generate fresh answers per vignette into a responses table (tagged run and pool).",
    ),
    "pipeline": (
        "honestci.audit.cli.training:pipeline_command",
        "Leakage check -> reward models -> GRPO -> generation -> judging -> audit; figures go into the model card only when every required gate passes (exit 1 otherwise).",
    ),
}


@click.group(cls=LazyGroup, lazy_commands=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="honestci")
def main() -> None:
    """honestci: audit LLM-judge win-rate claims with intervals that respect how the data were
    collected, and block a release whose honest CI-low misses its bar."""


def run() -> None:
    """The ``honestci`` program (console script and ``python -m honestci``): :func:`main`, then
    the exit-time handlers, and an exit without the interpreter's teardown of its modules.

    After an audit of a million contests that teardown (pandas, SciPy, numba's threads, xarray,
    matplotlib) took 0.4-0.6 s past the last output, with every file already written and closed;
    the ``atexit`` handlers still run, and both streams are flushed. Under a profiler or a tracer
    (``python -m cProfile``, coverage), which write their data as the interpreter exits, it exits
    as Python does. Tests call :func:`main`.
    """
    try:
        main()
        code: int = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:  # sys.exit("message"): the message goes to standard error, as Python would print it
            print(stop.code, file=sys.stderr)
            code = 1
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing left to write
            stream.flush()
    os._exit(code)


def _out_option(help_text: str, *, folder: bool, required: bool = False, default: Path | None = None):
    """``--out``: the folder (``out_dir``) or the file (``out_file``) a command writes; a default
    is shown in --help."""
    return click.option(
        "--out",
        "out_dir" if folder else "out_file",
        type=click.Path(file_okay=not folder, dir_okay=folder, path_type=Path),
        required=required,
        default=default,
        show_default=default is not None,
        help=help_text,
    )


@main.command()
@_out_option("Folder to write the study into (created if missing).", folder=True, required=True)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Simulator seed (default: the seed the embedded study was generated with, "
    "honestci.fixtures.design.DEFAULT_SEED: a property of the study, not the audit's --seed).",
)
@_fail_cleanly
def simulate(out_dir: Path, seed: int | None) -> None:
    """Regenerate the embedded fixture study (byte-identical for the same seed)."""
    from honestci.fixtures.design import DEFAULT_SEED
    from honestci.fixtures.simulate import write_study

    paths = write_study(out_dir, seed=DEFAULT_SEED if seed is None else seed)
    for path in paths:
        click.echo(str(path))


def _echo_summary(data: dict) -> None:
    """The head of the report (honestci.reports.summary; ``data``: the report model,
    ``Report.data``), first on the console as in report.md."""
    from honestci.reports.summary import summarize

    summary = summarize(data)
    lines = summary.lines()
    click.secho(lines[0], fg="green" if summary.exit_code == 0 else "red", bold=True)
    for line in lines[1:]:
        click.echo(line)
    click.echo("")


def _run_and_report(
    claim: Path,
    out_dir: Path,
    bayes: bool,
    seed: int,
    allow_outside_data: bool,
    policy_file: Path | None = None,
    allow_inconclusive: bool = False,
    *,
    quiet: bool = False,
    as_json: bool = False,
    junit: Path | None = None,
):
    """Run the audit, write its reports (and ``junit``, and the GitHub step summary when
    ``$GITHUB_STEP_SUMMARY`` is set) and print it: the full account, only the verdict line
    (``quiet``), or the machine-readable verdict on standard output (``as_json``)."""
    import functools
    import json
    import os

    from honestci.audit.pipeline import run_audit
    from honestci.reports.render import load_renderers, write_outputs

    if bayes:  # before any work, so a missing extra never reaches a verdict
        require_extra(
            "bayes", *BAYES_MODULES, needed_by="the Bayesian model", instead="pass --no-bayes", import_them=False
        )
    policy = None  # the built-in policy (run_audit's default), without importing the policy-file parser
    if policy_file is not None:
        from honestci.audit.data.policy_file import load_policy

        policy = load_policy(policy_file)
    result = run_audit(
        claim,
        policy=policy,
        bayes=bayes,
        seed=seed,
        allow_outside_data=allow_outside_data,
        allow_inconclusive=allow_inconclusive,
        progress=Progress(enabled=not quiet),  # --quiet silences every progress line and bar
        while_fitting=lambda: load_renderers(posterior=bayes),
    )
    from honestci.reports.ci import junit_xml, step_summary, verdict_line
    from honestci.reports.writing import append_text, atomic_write_text

    # built once, while posterior.nc is written (write_outputs)
    report = functools.cache(result.report)
    paths = write_outputs(report, out_dir, posterior=result.posterior)
    data = report().data
    if junit is not None:
        paths["junit"] = atomic_write_text(junit, junit_xml(data))
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        append_text(Path(summary_file), step_summary(data))
    if as_json:
        gates = [{key: row[key] for key in ("gate", "verdict", "required", "ran", "message")} for row in data["gates"]]
        machine = {
            "verdict": data["verdict"],
            "exit_code": data["exit_code"],
            "claim": data["claim"]["path"],
            "blocking_gates": data["blocking_gates"],
            "gates": gates,
            "files": {name: str(path) for name, path in paths.items()},
        }
        click.echo(json.dumps(machine, indent=2))
        return result
    if not quiet:
        _echo_summary(data)  # summarize only reads it
        rules = result.audit_policy
        click.echo(
            f"policy: {rules['name']} (sha256 {rules['sha256'][:12]}), level {rules['confidence_level']:g}, "
            f"{len(rules['deviations'])} deviation(s) from the built-in rules"
        )
        click.echo(str(result.intervals))
        click.echo("")
        for gate in result.gates:
            click.echo(f"  gate {gate.name:<26} {gate.verdict!s:<13} {gate.message}")
        click.echo("")
        click.echo(f"report:    {paths['md']}")
        click.echo(f"           {paths['html']}")
        click.echo(f"json:      {paths['json']}")
        for name in ("posterior", "junit"):
            if name in paths:
                click.echo(f"{name + ':':<10} {paths[name]}")
    colour = "green" if result.exit_code() == 0 else "red"
    click.secho(verdict_line(data), fg=colour, bold=True)
    return result


@main.command()
@click.argument("claim", type=click.Path(path_type=Path))
@_out_option(
    "Folder for report.md, report.html, verdict.json (and posterior.nc with --bayes).", folder=True, required=True
)
@click.option("--bayes/--no-bayes", default=True, show_default=True, help="Fit the Bayesian hierarchical model.")
@seed_option
@policy_option
@click.option(
    "--allow-inconclusive",
    is_flag=True,
    help="Exit 0 when every required gate is PASS or an INCONCLUSIVE that ran; a required gate that could not "
    "run (missing evidence or extra) still blocks.",
)
@click.option("--allow-outside-data", is_flag=True, help="Let data paths resolve outside the claim's folder.")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write a JUnit XML file, one testcase per gate (failure: blocking WARN/FAIL; error: blocking "
    "INCONCLUSIVE; skipped: a gate that does not block).",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only errors and the final verdict line.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the verdict as JSON on standard output (verdict, exit code, blocking gates, every gate, files) "
    "instead of the text account.",
)
@_fail_cleanly
def audit(
    claim: Path,
    out_dir: Path,
    bayes: bool,
    seed: int,
    policy_file: Path | None,
    allow_inconclusive: bool,
    allow_outside_data: bool,
    junit: Path | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Audit CLAIM (a claim YAML file): exit 0 if the release may go ahead, 1 if blocked, 2 on bad input.

    When $GITHUB_STEP_SUMMARY is set (GitHub Actions), a Markdown summary of the verdict and the
    blocking gates is appended to it.
    """
    result = _run_and_report(
        claim,
        out_dir,
        bayes,
        seed,
        allow_outside_data,
        policy_file,
        allow_inconclusive,
        quiet=quiet,
        as_json=as_json,
        junit=junit,
    )
    sys.exit(result.exit_code())


@main.command()
@_out_option("Folder for the demo report.", folder=True, default=Path("honestci-demo"))
@click.option("--bayes/--no-bayes", default=True, show_default=True, help="Fit the Bayesian hierarchical model.")
@policy_option
@_fail_cleanly
def demo(out_dir: Path, bayes: bool, policy_file: Path | None) -> None:
    """Audit the embedded fixture study's headline claim end to end."""
    from honestci.fixtures.simulate import default_claim_path

    claim = default_claim_path()
    click.echo(f"Auditing the embedded fixture claim {claim}", err=True)
    result = _run_and_report(claim, out_dir, bayes, DEFAULT_SEED, False, policy_file)
    click.echo(f"(`honestci audit` on this claim would exit {result.exit_code()})")


@main.command()
@click.argument("result", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json"]), default="md", show_default=True)
@_out_option("Write to this file (atomically) instead of standard output.", folder=False)
@_fail_cleanly
def report(result: Path, fmt: str, out_file: Path | None) -> None:
    """Render RESULT (a verdict.json from `honestci audit`) as Markdown, HTML or JSON.

    HTML draws the rank plots of the Bayesian fit from the posterior.nc beside RESULT when it is
    there and the bayes extra is installed."""
    from honestci.audit.report_model import POSTERIOR_FILE, Report
    from honestci.reports.render import render
    from honestci.reports.writing import atomic_write_text

    posterior = None
    saved = result.parent / POSTERIOR_FILE
    if fmt == "html" and saved.is_file():
        try:
            import arviz as az
        except ImportError:
            click.echo(f"note: {saved} is not plotted (the rank plots need the bayes extra)", err=True)
        else:
            try:
                posterior = az.from_netcdf(str(saved))
            except (OSError, ValueError) as exc:
                raise InputError(
                    f"Cannot read the posterior {saved}: {exc}.",
                    fix="restore the posterior.nc the audit wrote, or move it away to render without rank plots",
                ) from None
    text = render(Report.from_json(result), fmt, posterior)
    if out_file is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(out_file, text)
        click.echo(str(out_file))


@main.command()
@click.argument("claim", type=click.Path(path_type=Path))
@click.option("--method", "methods", multiple=True, help="Interval method (repeatable); default: all.")
@seed_option
@level_option
@click.option(
    "--system",
    "systems",
    multiple=True,
    help="Tabulate this system against the claim's opponent and judge instead of the claim's policy "
    "(repeatable: one block of rows per system).",
)
@_out_option("Also write the full table (every column, full precision) to this CSV file.", folder=False)
@policy_option
@_fail_cleanly
def winrate(
    claim: Path,
    methods: tuple[str, ...],
    seed: int,
    level: float | None,
    systems: tuple[str, ...],
    out_file: Path | None,
    policy_file: Path | None,
) -> None:
    """Print the side-by-side win-rate table (method, estimate, CI, SE, n, G, n_eff) for CLAIM's data."""
    import pandas as pd

    from honestci.audit.data.claims import load_claim
    from honestci.audit.data.io import load_study
    from honestci.audit.data.policy_file import load_policy
    from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_table
    from honestci.reports.writing import atomic_write_text

    loaded = load_claim(claim, policy=load_policy(policy_file))
    level = loaded.thresholds.confidence_level if level is None else level
    for m in methods:
        if m not in ALL_METHODS:
            raise InputError(f"Unknown method {m!r}.", fix=f"use one of {list(ALL_METHODS)}")
    study = load_study(loaded.data_paths)
    frames = []
    for system in systems or (loaded.spec.policy,):
        contests = claim_contests(loaded, study, system)
        scored = contests.scores("both_orders", invalid=loaded.policy.invalid_verdicts)
        table = winrate_table(
            scored.values,
            scored.clusters,
            methods=methods or ALL_METHODS,
            level=level,
            seed=seed,
            thresholds=loaded.thresholds,
            trials_per_contest=contests.trials_per_contest,
        )
        frames.append(table.to_frame().assign(system=system))
    full = pd.concat(frames, ignore_index=True)
    shown = ["label", "population", "estimate", "ci_low", "ci_high", "se", "n", "n_clusters", "n_effective", "verdict"]
    if systems:
        shown.insert(0, "system")
    # n_effective is undefined (NaN) when every vignette has one contest: shown as n/a.
    click.echo(full[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="n/a"))
    if out_file is not None:
        atomic_write_text(out_file, full[["system", *(c for c in full.columns if c != "system")]].to_csv(index=False))


@main.command("coverage-study")
@click.option("--reps", type=click.IntRange(10), default=1000, show_default=True, help="Replications per cell.")
@click.option(
    "--grid",
    type=click.Choice(["default", "full", "informative"]),
    default="default",
    show_default=True,
    help="Design cells: the default corners, the full realistic grid (G 6-100, size laws, sd, rates, ties), "
    "or the informative-size cells (contest counts that follow quality).",
)
@click.option(
    "--methods",
    default="all",
    show_default=True,
    help="Intervals to study: all (every interval method), gate (the intervals the policy's bar gates read), "
    "candidates (the gate candidates for new vignettes, with power), or a comma list of methods.",
)
@seed_option
@click.option("--processes", type=click.IntRange(1), default=1, show_default=True, help="Worker processes.")
@_out_option(
    "Markdown table to write, relative to the current folder (a CSV is written beside it).",
    folder=False,
    default=Path("coverage.md"),
)
@_fail_cleanly
def coverage_study(reps: int, grid: str, methods: str, seed: int, processes: int, out_file: Path) -> None:
    """Seeded simulation of every interval's two-sided coverage and one-sided (CI-low) error."""
    from honestci.audit.stats.design.coverage_study import (
        GATE_CANDIDATES,
        HONEST_METHODS,
        STUDY_METHODS,
        run_coverage_study,
    )
    from honestci.audit.stats.frequentist.winrate import ALL_METHODS
    from honestci.reports.writing import atomic_write_text

    named = {"all": ALL_METHODS, "gate": HONEST_METHODS, "candidates": GATE_CANDIDATES}
    chosen = named.get(methods) or tuple(methods.split(","))
    unknown = sorted(set(chosen) - set(STUDY_METHODS))
    if unknown:
        raise click.BadParameter(
            f"unknown methods {unknown}; choose from {list(STUDY_METHODS)}", param_hint="--methods"
        )
    study = run_coverage_study(
        reps=reps, grid=grid, methods=chosen, seed=seed, processes=processes, progress=Progress()
    )
    atomic_write_text(out_file, study.to_markdown())
    atomic_write_text(out_file.with_suffix(".csv"), study.to_frame().to_csv(index=False))
    click.echo(str(out_file))


if __name__ == "__main__":
    main()
