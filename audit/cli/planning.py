"""``honestci plan``: how many vignettes × contests per vignette the bar gate needs
(:mod:`honestci.audit.stats.design.planning`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from honestci.audit.cli.support import claim_contests, fail_cleanly, policy_option, seed_option
from honestci.audit.errors import InputError
from honestci.audit.policy import Policy, Thresholds

if TYPE_CHECKING:  # annotations only: `honestci plan --help` imports no SciPy
    from honestci.audit.data.claims import Claim
    from honestci.audit.stats.design.planning import Plan, Truth


def _contest_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma list of whole numbers") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter("every number of contests per vignette must be at least 1")
    return counts


@click.command("plan")
@click.argument("claim", type=click.Path(path_type=Path), required=False)
@click.option(
    "--rate",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=None,
    help="True new-vignette win rate to plan for (default: the pilot CLAIM's estimate).",
)
@click.option(
    "--sd",
    type=click.FloatRange(0.0),
    default=None,
    help="Between-vignette sd of the logit win rates (default: the pilot's estimate).",
)
@click.option(
    "--icc",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=None,
    help="ICC of contest scores instead of --sd (converted to the sd at the planned rate).",
)
@click.option(
    "--ties",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=None,
    help="Share of judged orders that are ties (default: the pilot's, else 0).",
)
@click.option(
    "--order-bias",
    type=float,
    default=0.0,
    show_default=True,
    help="First-position bias of the judge on the logit scale.",
)
@click.option(
    "--power",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=0.8,
    show_default=True,
    help="Probability that the gate passes the claim when the rate is true.",
)
@click.option(
    "--contests",
    "contests",
    default="2,5,10,20",
    show_default=True,
    callback=_contest_list,
    help="Contests per vignette to tabulate (comma list).",
)
@click.option(
    "--bar",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=None,
    help="The bar the gate's CI-low must clear (default: the claim's).",
)
@click.option(
    "--population",
    type=click.Choice(["new_vignettes", "these_vignettes"]),
    default=None,
    help="Population of the claim (default: the claim's, else the policy's default).",
)
@click.option(
    "--reps",
    type=click.IntRange(0),
    default=100,
    show_default=True,
    help="Simulated replications per G the search simulates, each G on its own seeds (0: the approximation only).",
)
@click.option(
    "--verify-reps",
    type=click.IntRange(0),
    default=1600,
    show_default=True,
    help="Fresh-seed replications checking the recommended design (1600: MC-SE about 1 point at 80%).",
)
@click.option(
    "--vignette-cost",
    type=click.FloatRange(0.0),
    default=0.0,
    show_default=True,
    help="Cost of one more vignette, in contests (cost = vignettes × (contests + this)).",
)
@click.option(
    "--agreement",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=None,
    help="The judge's true agreement with human preferences: also plan the human labels the "
    "judge_calibrated gate needs (analytic).",
)
@click.option(
    "--rater-accuracy",
    type=click.FloatRange(0.5, 1.0),
    default=1.0,
    show_default=True,
    help="Probability that a human label names the truly preferred response.",
)
@click.option("--processes", type=click.IntRange(1), default=1, show_default=True, help="Worker processes.")
@seed_option
@policy_option
@fail_cleanly
def plan_command(
    claim: Path | None,
    rate: float | None,
    sd: float | None,
    icc: float | None,
    ties: float | None,
    order_bias: float,
    power: float,
    contests: tuple[int, ...],
    bar: float | None,
    population: str | None,
    reps: int,
    verify_reps: int,
    vignette_cost: float,
    agreement: float | None,
    rater_accuracy: float,
    processes: int,
    seed: int,
    policy_file: Path | None,
) -> None:
    """Vignettes × contests per vignette for the bar gate to pass a true rate with the given power."""
    from honestci.audit.data.policy_file import load_policy
    from honestci.audit.stats.design import planning

    if sd is not None and icc is not None:
        raise InputError("Give --sd or --icc, not both.")
    policy = load_policy(policy_file)
    thresholds = policy.thresholds
    pilot = None
    if claim is not None:
        loaded, pilot = _read_pilot(claim, policy, order_bias)
        thresholds = loaded.thresholds
        bar = loaded.spec.bar if bar is None else bar
        population = population or loaded.spec.population
    population = population or thresholds.default_population
    if population == "new_seeds":
        raise InputError(
            "`honestci plan` plans the vignettes of one checkpoint; it cannot plan a claim about the recipe "
            "(population new_seeds).",
            fix="plan with --population new_vignettes; the new-seed interval's width is set mostly by how many "
            "seeds are trained (docs/methods.md, 'Seeds and runs')",
        )
    if bar is None:
        raise InputError("No bar to plan for.", fix="give --bar, or a CLAIM whose bar it is")
    truth = _planned_truth(rate, sd, icc, ties, order_bias, pilot)
    result = planning.plan_design(
        truth,
        bar,
        power,
        population,
        contests,
        thresholds=thresholds,
        method=policy.gate_method(population),
        reps=reps,
        verify_reps=verify_reps,
        seed=seed,
        vignette_cost=vignette_cost,
        processes=processes,
    )
    click.echo(
        f"plan: rate {truth.rate:.3f}, vignette logit sd {truth.sd:.2f} (ICC {truth.icc:.3f}), "
        f"ties {truth.ties:.1%}, order bias {truth.order_bias:g}; bar {bar:g} on {population.replace('_', ' ')}, "
        f"gate {result.method} at {thresholds.confidence_level:.0%}; target power {power:.0%}"
    )
    frame = result.to_frame()
    click.echo(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"))
    if agreement is not None:
        _echo_human_labels(agreement, rater_accuracy, power, thresholds)
    _echo_recommendation(result, power)


def _read_pilot(claim: Path, policy: Policy, order_bias: float) -> tuple[Claim, Truth]:
    """The pilot CLAIM (judged by ``policy``) and the truth its contests estimate; says what it read."""
    from honestci.audit.data.claims import load_claim
    from honestci.audit.data.io import load_study
    from honestci.audit.stats.design import planning

    loaded = load_claim(claim, policy=policy)
    contests_table = claim_contests(loaded, load_study(loaded.data_paths), loaded.spec.policy)
    scored = contests_table.scores("both_orders", invalid=loaded.policy.invalid_verdicts)
    pilot = planning.truth_from_pilot(scored.values, scored.clusters, order_bias)
    icc_text = "undefined: no score varies" if pilot.icc != pilot.icc else f"{pilot.icc:.3f}"  # NaN
    click.echo(
        f"pilot {claim}: {scored.clusters.size} contests on {len(set(scored.clusters))} vignettes; "
        f"rate {pilot.rate:.3f}, vignette logit sd {pilot.sd:.2f} (ICC {icc_text}), "
        f"ties {pilot.ties:.1%} of judged orders"
    )
    return loaded, pilot


def _planned_truth(
    rate: float | None, sd: float | None, icc: float | None, ties: float | None, order_bias: float, pilot: Truth | None
) -> Truth:
    """The truth to plan for: each of --rate, --sd (or --icc) and --ties where given, else the pilot's."""
    from honestci.audit.stats.design import planning

    rate = rate if rate is not None else (pilot.rate if pilot else None)
    if rate is None:
        raise InputError("No rate to plan for.", fix="give --rate, or a pilot CLAIM")
    if sd is None and icc is None and pilot is None:
        raise InputError("No between-vignette spread to plan with.", fix="give --sd or --icc, or a pilot CLAIM")
    tie_share = ties if ties is not None else (pilot.ties if pilot else 0.0)
    # The tie half-width and σ depend on each other through the rate: two passes.
    spread = sd if sd is not None else (pilot.sd if pilot and icc is None else 0.0)
    halfwidth = 0.0
    for _ in range(2):
        halfwidth = planning.halfwidth_for_ties(tie_share, rate, spread, order_bias)
        if icc is not None:
            spread = planning.sd_for_icc(icc, rate, halfwidth, order_bias)
    return planning.Truth(rate, spread, halfwidth, order_bias)


def _echo_human_labels(agreement: float, rater_accuracy: float, power: float, thresholds: Thresholds) -> None:
    """The human labels the judge_calibrated gate needs at this power (--agreement)."""
    from honestci.audit.stats.design import planning

    items = planning.human_labels_needed(agreement, power, rater_accuracy=rater_accuracy, thresholds=thresholds)
    observed = planning.observed_agreement(agreement, rater_accuracy)
    click.echo(
        f"human labels: about {items} labelled items (both orders judged) for the judge_calibrated gate "
        f"(observed agreement {observed:.3f} vs minimum {thresholds.min_judge_agreement:g}) at {power:.0%} power "
        "(analytic, unclustered; not simulated)"
        if items is not None
        else f"human labels: the observed agreement {observed:.3f} is not above the minimum "
        f"{thresholds.min_judge_agreement:g}: no number of labels passes the judge_calibrated gate"
    )


def _echo_recommendation(result: Plan, power: float) -> None:
    """The recommended design and how its power was checked, or that no design reaches ``power``."""
    best = result.recommended
    if best is None or best.vignettes is None:
        click.echo("recommendation: none of these designs reaches the target power (see the table).")
        return
    search, check = best.search, best.verified
    if search is None:
        checked = "approximation only (--reps 0)"
    else:
        low, high = search.interval
        checked = (
            f"fitted power {search.fitted_power:.3f} ± {search.fitted_se:.3f} (probit in √G on {search.reps} "
            f"replications, seed {search.seed}; G for {power:.0%} power {low:.1f} to {high:.1f}, 95%)"
        )
        if check is not None:
            checked += f"; fresh-seed check {check.power:.3f} ± {check.mc_se:.3f} ({check.reps} replications)"
    click.echo(
        f"recommendation: {best.vignettes} vignettes × {best.contests_per_vignette} contests per vignette "
        f"(both orders judged; {best.vignettes * best.contests_per_vignette} contests); {checked}."
    )
