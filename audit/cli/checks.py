"""Command-line entry points of the calibration and position-bias checks.

``honestci calibrate-judge`` and ``honestci position-bias`` read either a claim file (its data
and judge) or explicit table paths, and print the figures with their clustered intervals.
Register them in the CLI group with ``main.add_command``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from honestci.audit.cli.support import (
    audit_policy_and_level,
    exit_by_gate,
    fail_cleanly,
    level_option,
    policy_option,
    seed_option,
)
from honestci.audit.errors import InputError
from honestci.audit.stats.frequentist.clustered_estimate import ESTIMATE_COLUMNS

if TYPE_CHECKING:
    from honestci.audit.data.contests import ContestTable

_TABLE_OPTIONS = {
    "judgments": "judgments",
    "responses": "responses",
    "human_pairs": "human-pairs",
    "human_ratings": "human-ratings",
}


def _tables(claim: Path | None, explicit: dict[str, Path | None], allow_outside_data: bool):
    """(tables by name, the claim or None): the claim's data, overridden by any explicit path."""
    from honestci.audit.data.io import load_table

    tables, spec = {}, None
    if claim is not None:
        from honestci.audit.data.claims import load_claim
        from honestci.audit.data.io import load_study

        loaded = load_claim(claim, allow_outside=allow_outside_data)
        spec = loaded.spec
        study = load_study(loaded.data_paths)
        tables = {name: table for name, table in study.tables().items() if table is not None}
    for name, path in explicit.items():
        if path is not None:
            tables[name] = load_table(path, name)
    return tables, spec


#: ``--allow-outside-data``, the same on every command that reads a claim's tables.
_allow_outside_data = click.option(
    "--allow-outside-data", is_flag=True, help="Let the claim's data paths resolve outside its folder."
)


def _frame_text(frame, columns) -> str:
    shown = frame[[c for c in columns if c in frame.columns]]
    return shown.to_string(index=False, float_format=lambda x: f"{x:.4f}")


def _path_option(name: str):
    return click.option(
        f"--{_TABLE_OPTIONS[name]}",
        name,
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"{name} table (JSONL/CSV/Parquet); overrides the claim's.",
    )


def _option_stack(*decorators):
    """One decorator that applies ``decorators`` as if they were written in this order above the
    command (click lists the options in --help in that order)."""

    def apply(command):
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


def _claim_and_tables(*tables: str):
    """The optional CLAIM argument and a path option for each of ``tables`` (read by :func:`_tables`)."""
    claim = click.argument("claim", required=False, type=click.Path(dir_okay=False, path_type=Path))
    return _option_stack(claim, *map(_path_option, tables))


def _common_check_options(*, seed: bool = True):
    """The options every one-check command ends with: --level, --seed (where the check draws random
    numbers), --policy and --allow-outside-data (read by :func:`audit_policy_and_level` and
    :func:`_tables`)."""
    return _option_stack(level_option, *([seed_option] if seed else []), policy_option, _allow_outside_data)


@click.command("calibrate-judge")
@_claim_and_tables("judgments", "human_pairs", "human_ratings")
@click.option("--judge", default=None, help="Judge to calibrate (default: the claim's judge, or the only judge).")
@click.option(
    "--source",
    type=click.Choice(["auto", "pairs", "ratings"]),
    default="auto",
    show_default=True,
    help="Human reference: pairwise labels (majority) or ratings (higher mean rating).",
)
@click.option(
    "--min-margin",
    type=float,
    default=0.0,
    show_default=True,
    help="From ratings: a mean-rating difference at or below this is a tie.",
)
@click.option(
    "--split",
    type=click.Choice(["tie", "first_rater"]),
    default="tie",
    show_default=True,
    help="Pairwise labels without a majority: a tie, or the first rater's label (PandaLM's rule).",
)
@click.option(
    "--invalid-as",
    type=click.Choice(["disagreement", "tie", "exclude"]),
    default="disagreement",
    show_default=True,
    help="Invalid (unparseable, refused, empty) verdicts: count as disagreements (conservative), as ties "
    "(PandaLM's rule), or leave out (counted in the report).",
)
@_common_check_options()
@fail_cleanly
def calibrate_judge_command(
    claim,
    judgments,
    human_pairs,
    human_ratings,
    judge,
    source,
    min_margin,
    split,
    invalid_as,
    level,
    seed,
    policy_file,
    allow_outside_data,
) -> None:
    """Agreement of a judge with human preferences, with vignette-clustered intervals."""
    from honestci.audit.checks.calibration import calibrate_judge
    from honestci.audit.gates import gate_judge_calibrated

    rules, level = audit_policy_and_level(policy_file, level)
    thresholds = rules.thresholds
    tables, spec = _tables(
        claim, {"judgments": judgments, "human_pairs": human_pairs, "human_ratings": human_ratings}, allow_outside_data
    )
    if "judgments" not in tables:
        raise InputError("no judgments table.", fix="pass a claim file or --judgments PATH")
    if "human_pairs" not in tables and "human_ratings" not in tables:
        raise InputError(
            "calibration needs human preferences.", fix="pass --human-pairs or --human-ratings (or a claim with them)"
        )
    judges = sorted(set(tables["judgments"].frame["judge"].astype(str)))
    judge = judge or (spec.judge if spec is not None else None) or (judges[0] if len(judges) == 1 else None)
    if judge is None:
        raise InputError(f"several judges in the judgments: {', '.join(judges)}.", fix="name one with --judge")
    if judge not in judges:
        raise InputError(f"judge {judge!r} is not in the judgments.", fix=f"use one of: {', '.join(judges)}")
    result = calibrate_judge(
        judge,
        judgments=tables["judgments"],
        human_pairs=tables.get("human_pairs"),
        human_ratings=tables.get("human_ratings"),
        source=source,
        min_margin=min_margin,
        split=split,
        invalid_as=invalid_as,
        level=level,
        seed=seed,
        thresholds=thresholds,
    )
    section = result.report_section()
    for line in section.lines:
        click.echo(f"- {line}")
    click.echo("")
    click.echo(
        _frame_text(
            result.to_frame(),
            (*ESTIMATE_COLUMNS, "verdict", "note"),
        )
    )
    click.echo(
        f"\naccuracy {result.metrics.accuracy:.4f}  macro-P {result.metrics.macro_precision:.4f}  "
        f"macro-R {result.metrics.macro_recall:.4f}  macro-F1 {result.metrics.macro_f1:.4f}  (3 classes)"
    )
    exit_by_gate(gate_judge_calibrated(result, thresholds))


#: CLAIM, the judgments and responses tables, and the judge and the two systems to examine (read by
#: :func:`_judged_pair`).
_judged_pair_options = _option_stack(
    _claim_and_tables("judgments", "responses"),
    click.option("--judge", default=None, help="Judge to examine (default: the claim's judge, or the only judge)."),
    click.option("--system", default=None, help="System whose wins are counted (default: the claim's policy)."),
    click.option("--opponent", default=None, help="The other system (default: the claim's opponent)."),
)


@dataclass(frozen=True)
class _JudgedPair:
    """The tables, the opponent and the judge :func:`_judged_pair` settled on, and the contests of
    the system against the opponent that have both orders judged."""

    tables: dict
    opponent: str
    judge: str | None
    contests: ContestTable


def _judged_pair(claim, judgments, responses, system, opponent, judge, allow_outside_data) -> _JudgedPair:
    """The judgments and responses tables, the two systems and the judge to examine (the options
    where given, else the claim's), and their contests."""
    from honestci.audit.data.contests import build_contests

    tables, spec = _tables(claim, {"judgments": judgments, "responses": responses}, allow_outside_data)
    missing = [name for name in ("judgments", "responses") if name not in tables]
    if missing:
        raise InputError(
            f"missing table(s): {', '.join(missing)}.", fix="pass a claim file or --judgments and --responses"
        )
    policy = system or (spec.policy if spec else None)
    opponent = opponent or (spec.opponent if spec else None)
    if policy is None or opponent is None:
        raise InputError("the two systems to compare are not named.", fix="pass --system and --opponent (or a claim)")
    judge = judge or (spec.judge if spec else None)
    contests = build_contests(tables, policy, opponent, judge=judge, single_order="exclude")
    return _JudgedPair(tables, opponent, judge, contests)


@click.command("position-bias")
@_judged_pair_options
@_common_check_options()
@fail_cleanly
def position_bias_command(
    claim, judgments, responses, judge, system, opponent, level, seed, policy_file, allow_outside_data
) -> None:
    """Position bias of a judge from both-order verdicts (single-order data: not identifiable)."""
    from honestci.audit.checks.position_bias import position_bias_from_contests
    from honestci.audit.gates import gate_position_bias

    rules, level = audit_policy_and_level(policy_file, level)
    pair = _judged_pair(claim, judgments, responses, system, opponent, judge, allow_outside_data)
    result = position_bias_from_contests(pair.contests, level=level, rng=seed)
    for line in result.summary_lines():
        click.echo(f"- {line}")
    if result.identifiable:
        click.echo("")
        click.echo(
            _frame_text(
                result.to_frame(),
                ESTIMATE_COLUMNS,
            )
        )
        click.echo("")
        import pandas as pd

        click.echo(pd.DataFrame(list(result.per_vignette)).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    exit_by_gate(gate_position_bias(result, rules.thresholds))


@click.command("length-bias")
@_judged_pair_options
@click.option(
    "--all-systems",
    is_flag=True,
    help="Also tabulate raw, length- and style-controlled win rates of every system against the opponent "
    "(a per-vignette difficulty term from the other systems' scores).",
)
@_common_check_options(seed=False)
@fail_cleanly
def length_bias_command(
    claim, judgments, responses, judge, system, opponent, all_systems, level, policy_file, allow_outside_data
) -> None:
    """Length and style bias of a judge, and length-controlled win rates (AlpacaEval 2.0's GLM)."""
    from honestci.audit.checks.length_bias import controlled_winrate_table, length_bias_from_contests
    from honestci.audit.gates import gate_length_bias

    rules, level = audit_policy_and_level(policy_file, level)
    thresholds = rules.thresholds
    pair = _judged_pair(claim, judgments, responses, system, opponent, judge, allow_outside_data)
    tables, opponent, judge = pair.tables, pair.opponent, pair.judge
    invalid = rules.invalid_verdicts
    result = length_bias_from_contests(
        pair.contests, tables["responses"].frame, invalid=invalid, level=level, min_clusters=thresholds.min_clusters
    )
    for line in result.summary_lines():
        click.echo(f"- {line}")
    if result.length is not None:
        click.echo("")
        click.echo(result.to_frame().to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    if all_systems:
        systems = sorted(set(tables["responses"].frame["system"].astype(str)) - {opponent})
        click.echo("")
        table = controlled_winrate_table(
            tables, systems, opponent, judge=judge, invalid=invalid, level=level, min_clusters=thresholds.min_clusters
        )
        click.echo(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    exit_by_gate(gate_length_bias(result, thresholds))


@click.command("compare")
@_claim_and_tables("judgments", "responses")
@click.option("--system", "systems", multiple=True, help="A system to compare (repeat; default: every system judged).")
@click.option("--opponent", default=None, help="The common opponent (default: the claim's opponent).")
@click.option(
    "--judge", default=None, help="Judge whose verdicts count (default: the claim's judge, or the only judge)."
)
@click.option(
    "--simultaneous",
    type=click.Choice(["holm", "maxt"]),
    default="holm",
    show_default=True,
    help="Procedure behind the decisions and rank intervals: Holm-adjusted CR2 t, or the max-|t| wild cluster "
    "bootstrap (not certified for gates: its family-wise error measured about 6% at 5%, docs/methods.md).",
)
@click.option(
    "--draws", default=1999, show_default=True, type=click.IntRange(99), help="Draws of the max-|t| bootstrap."
)
@click.option(
    "--ties",
    type=click.Choice(["half", "davidson"]),
    default="half",
    show_default=True,
    help="Ties in the strength model: half a win (Bradley–Terry), or Davidson's (1970) tie parameter ν "
    "(needs scores 0, 1/2, 1).",
)
@_common_check_options()
@fail_cleanly
def compare_command(
    claim,
    judgments,
    responses,
    systems,
    opponent,
    judge,
    simultaneous,
    draws,
    ties,
    level,
    seed,
    policy_file,
    allow_outside_data,
) -> None:
    """K systems against a common opponent: win rates, pairwise differences, Bradley–Terry strengths and rank intervals."""
    import pandas as pd

    from honestci.audit.data.contests import build_contests
    from honestci.audit.stats.selection.systems import bradley_terry, k_system_winrates

    rules, level = audit_policy_and_level(policy_file, level)
    invalid = rules.invalid_verdicts
    tables, spec = _tables(claim, {"judgments": judgments, "responses": responses}, allow_outside_data)
    if "judgments" not in tables or "responses" not in tables:
        raise InputError("missing judgments or responses.", fix="pass a claim file or --judgments and --responses")
    opponent = opponent or (spec.opponent if spec else None)
    if opponent is None:
        raise InputError("the common opponent is not named.", fix="pass --opponent (or a claim)")
    judge = judge or (spec.judge if spec else None)
    if not systems:
        systems = tuple(sorted(set(tables["responses"].frame["system"].astype(str)) - {opponent}))
    frames = []
    for system in systems:
        scored = build_contests(tables, system, opponent, judge=judge, single_order="exclude").scores(
            "both_orders", invalid=invalid
        )
        frame = scored.to_frame()[["vignette_id", "score"]]
        frames.append(frame.assign(system=system))
    scores = pd.concat(frames, ignore_index=True)
    options = {
        "level": level,
        "simultaneous": simultaneous,
        "B": draws,
        "rng": seed,
        "min_clusters": rules.thresholds.min_clusters,
    }
    winrates = k_system_winrates(scores, opponent=opponent, **options)
    battles = scores.rename(columns={"system": "system_a"}).assign(system_b=opponent)
    strengths = bradley_terry(battles, reference=opponent, ties=ties, **options)
    number = lambda x: f"{x:.4f}"  # noqa: E731
    for result in (winrates, strengths):
        for line in result.summary_lines():
            click.echo(f"- {line}")
        click.echo("")
        click.echo(result.to_frame().to_string(index=False, float_format=number))
        click.echo("")
        columns = [
            "system_a",
            "system_b",
            "estimate",
            "ci_low",
            "ci_high",
            "p",
            "p_holm",
            "p_bh",
            "sim_low",
            "sim_high",
        ]
        click.echo(result.pairs[[*columns, "decision"]].to_string(index=False, float_format=number))
        click.echo("")
