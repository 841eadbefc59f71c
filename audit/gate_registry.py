"""The one gate registry: each gate of :data:`honestci.audit.policy.GATE_RECORDS` as a function of
the audit context, run in the policy's order, and the overall verdict of the required ones.

A rule (:mod:`honestci.audit.gates`) is a function of the figures it reads; here each gate reads
those figures from the :class:`~honestci.audit.checks.context.AuditContext` (the check its record
names, or the audit's own intervals, fit and comparisons) and applies its rule. A gate whose check
failed to estimate did not run: INCONCLUSIVE, never PASS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from honestci.audit.checks.context import AuditContext, CheckFailed
from honestci.audit.checks.length_bias import LengthBiasCheck
from honestci.audit.checks.seeds import SeedsCheck
from honestci.audit.checks.systems import SystemsCheck
from honestci.audit.gates import (
    gate_best_of_systems_selection,
    gate_best_seed_selection,
    gate_ci_low_clears_bar,
    gate_claimed_figures_reproduce,
    gate_comparison_valid,
    gate_enough_clusters,
    gate_evidence_intact,
    gate_judge_calibrated,
    gate_leakage,
    gate_length_bias,
    gate_multiple_comparisons,
    gate_panel_position_bias,
    gate_position_bias,
    gate_sampler_converged,
    gate_training_healthy,
    gate_valid_verdicts,
    gate_winners_curse,
)
from honestci.audit.policy import (
    GATE_CHECK,
    GATE_ORDER,
    NEW_SEED_METHOD,
    REQUIRED_WHEN_EVIDENCE_GIVEN,
    GateResult,
    Verdict,
    length_bias_required,
    worst,
)
from honestci.audit.stats.estimands import size_association

if TYPE_CHECKING:
    from honestci.audit.stats.intervals import IntervalResult

Rule = Callable[[AuditContext], GateResult]
_RULES: dict[str, Rule] = {}


def _rule_of(name: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as gate ``name``'s rule on the audit context."""

    def register(rule: Rule) -> Rule:
        _RULES[name] = rule
        return rule

    return register


def evidence_given(context: AuditContext) -> tuple[str, ...]:
    """The gates of :data:`honestci.audit.policy.REQUIRED_WHEN_EVIDENCE_GIVEN` whose evidence the
    claim supplies (their check ran); ``winners_curse`` also when the claim says the policy is the
    best of its ``systems``, or the policy is the observed best of its training ``seeds`` (a
    selection on the claim's own contests); ``length_bias`` when the policy's rule
    :func:`honestci.audit.policy.length_bias_required` finds the two systems' answers differ in length."""
    given = [gate for gate, check in REQUIRED_WHEN_EVIDENCE_GIVEN.items() if context.checks.get(check) is not None]
    if "winners_curse" not in given and _selections_on_claim_data(context):
        given.append("winners_curse")
    if _length_bias_required(context) is not None:
        given.append("length_bias")
    return tuple(given)


def _length_bias_required(context: AuditContext) -> str | None:
    """Why the policy requires ``length_bias`` on this claim (None when it does not)."""
    check = context.checks.get("length_bias")
    if not isinstance(check, LengthBiasCheck):
        return None
    result = check.result
    return length_bias_required(result.median_length_policy, result.median_length_opponent, context.claim.thresholds)


def _nothing_judged(name: str) -> GateResult:
    return GateResult(name, Verdict.INCONCLUSIVE, "not run: nothing has been judged yet", ran=False)


@_rule_of("enough_clusters")
def _enough_clusters(context: AuditContext) -> GateResult:
    if context.intervals is None:
        return _nothing_judged("enough_clusters")
    return gate_enough_clusters(context.intervals.rows[0].n_clusters, context.claim.thresholds)


@_rule_of("ci_low_clears_bar")
def _ci_low_clears_bar(context: AuditContext) -> GateResult:
    spec, method = context.claim.spec, context.gate_method
    if context.intervals is None:
        return _nothing_judged("ci_low_clears_bar")
    try:
        row = context.intervals.get(method, spec.population)
    except KeyError:
        return gate_ci_low_clears_bar(
            None,
            spec.bar,
            method,
            spec.population,
            reason_if_missing=f"method {method} gives no {spec.population} interval",
        )
    result = gate_ci_low_clears_bar(
        row.ci_low if row.reportable else None, spec.bar, method, spec.population, reason_if_missing=row.note
    )
    if method == NEW_SEED_METHOD:
        return _on_the_new_seed_interval(result, row, context)
    return _with_size_association(result, context)


def _on_the_new_seed_interval(result: GateResult, row: IntervalResult, context: AuditContext) -> GateResult:
    """A claim about the recipe: the bar gate's message and evidence say it read the seeds check's
    new-seed interval on new vignettes, and show the policy seed's own CI-low beside it (what a claim
    about the checkpoint would have read; never gated on here)."""
    rules = context.claim.policy
    own_method = rules.contest_method(context.claim.spec.population)
    rows = () if context.intervals is None else context.intervals.rows
    own = next((r for r in rows if r.method == own_method and r.population == "new_vignettes"), None)
    own_low = own.ci_low if own is not None and own.reportable else None
    evidence = {
        **result.evidence,
        "interval": "new-seed interval (seeds check): a new training seed of the recipe on new vignettes",
        "n_seeds": len(row.details.get("seeds", ())),
        "n_shared_vignettes": row.n_clusters,
        "df": row.df,
        "policy_seed_method": own_method,
        "policy_seed_ci_low": own_low,
    }
    if result.evidence["ci_low"] is None:
        message = f"no new-seed interval for a claim about the recipe: {row.note}"
    else:
        relation = ">=" if result.verdict == Verdict.PASS else "<"
        message = (
            f"new-seed interval CI-low {row.ci_low:.3f} {relation} bar {result.evidence['bar']:.3f} (a new training seed "
            f"of the recipe on new vignettes: {row.note}, df {row.df:.1f})"
        )
        if own_low is not None:
            message += f"; the policy's own seed alone: {own_method} CI-low {own_low:.3f}, not what this claim asserts"
    return replace(result, message=message, evidence=evidence)


def _with_size_association(result: GateResult, context: AuditContext) -> GateResult:
    """The bar gate's evidence gains whether vignette sizes are informative (estimands): the gate
    reads an equal-weight interval either way (each vignette once in the posterior's likelihood,
    bayesian.grid.rate_posterior), and says so when weighting by contests would differ."""
    if context.contests is None:
        return result
    scored = context.contests.scores("both_orders", invalid=context.claim.policy.invalid_verdicts)
    sizes = size_association(scored.values, scored.clusters)
    alpha = context.claim.thresholds.informative_sizes_alpha
    evidence = {
        **result.evidence,
        "sizes_kendall_tau": sizes.tau,
        "sizes_p_value": sizes.p_value,
        "equal_weight_rate": sizes.equal_weight,
        "contest_weighted_rate": sizes.contest_weighted,
        "sizes_informative": sizes.informative(alpha),
    }
    message = result.message
    if sizes.informative(alpha):
        message += (
            f"; vignette sizes are informative (Kendall tau {sizes.tau:+.2f}, p = {sizes.p_value:.3g}): "
            f"the pooled share of contests is {sizes.contest_weighted:.3f} against the equal-weight rate "
            f"{sizes.equal_weight:.3f} the gate reads"
        )
    return replace(result, evidence=evidence, message=message)


@_rule_of("valid_verdicts")
def _valid_verdicts(context: AuditContext) -> GateResult:
    return gate_valid_verdicts(context.checks.get("valid_verdicts"), context.claim.thresholds)


@_rule_of("sampler_converged")
def _sampler_converged(context: AuditContext) -> GateResult:
    return gate_sampler_converged(context.bayes)


@_rule_of("comparison_valid")
def _comparison_valid(context: AuditContext) -> GateResult:
    return gate_comparison_valid(context.comparisons)


@_rule_of("multiple_comparisons")
def _multiple_comparisons(context: AuditContext) -> GateResult:
    return gate_multiple_comparisons(context.checks.get("systems"))


@_rule_of("claimed_figures_reproduce")
def _claimed_figures_reproduce(context: AuditContext) -> GateResult:
    return gate_claimed_figures_reproduce(context.claimed_audit)


@_rule_of("judge_calibrated")
def _judge_calibrated(context: AuditContext) -> GateResult:
    return gate_judge_calibrated(context.checks.get("calibration"), context.claim.thresholds)


@_rule_of("position_bias")
def _position_bias(context: AuditContext) -> GateResult:
    check = context.checks.get("position_bias")
    if check is None or not check.panel:
        return gate_position_bias(None if check is None else check.claim_judge, context.claim.thresholds)
    return gate_panel_position_bias(check.gated(), context.claim.thresholds)


@_rule_of("length_bias")
def _length_bias(context: AuditContext) -> GateResult:
    check: LengthBiasCheck | None = context.checks.get("length_bias")
    gate = gate_length_bias(None if check is None else check.result, context.claim.thresholds)
    why = _length_bias_required(context)
    return gate if why is None else replace(gate, evidence=gate.evidence | {"required_because": why})


def _selections_on_claim_data(context: AuditContext) -> dict[str, GateResult]:
    """The winners_curse findings of the selections made on the claim's own contests, by source."""
    systems, seeds, bar = context.checks.get("systems"), context.checks.get("seeds"), context.claim.spec.bar
    found = {}
    if isinstance(systems, SystemsCheck) and systems.selection is not None:
        found["best_of_systems"] = gate_best_of_systems_selection(systems, bar)
    if isinstance(seeds, SeedsCheck) and seeds.selection is not None:
        found["best_seed"] = gate_best_seed_selection(seeds, bar)
    return found


@_rule_of("winners_curse")
def _winners_curse(context: AuditContext) -> GateResult:
    pool = context.checks.get("winners_curse")
    results = _selections_on_claim_data(context)
    if pool is not None or not results:
        results = {
            "selection_pool": gate_winners_curse(pool, context.claim.spec.bar, context.claim.thresholds)
        } | results
    if len(results) == 1:
        return next(iter(results.values()))
    # Several selections (a selection pool, a best-of-systems claim, the best seed): each is checked, the worst decides.
    verdict = worst(r.verdict for r in results.values())
    return GateResult(
        "winners_curse",
        verdict,
        "; ".join(r.message for r in results.values() if r.verdict == verdict),
        {source: r.evidence for source, r in results.items()},
    )


@_rule_of("leakage")
def _leakage(context: AuditContext) -> GateResult:
    check = context.checks.get("leakage")
    return gate_leakage(None if check is None else check.scan)


@_rule_of("evidence_intact")
def _evidence_intact(context: AuditContext) -> GateResult:
    return gate_evidence_intact(context.checks.get("evidence"), context.claim.thresholds)


@_rule_of("training_healthy")
def _training_healthy(context: AuditContext) -> GateResult:
    return gate_training_healthy(context.checks.get("training_health"))


def run_gate(name: str, context: AuditContext) -> GateResult:
    """Run the gate ``name`` of :data:`GATES` on ``context``; a gate whose check failed to
    estimate did not run (INCONCLUSIVE, and never let through by ``--allow-inconclusive``)."""
    if name not in GATES:
        raise KeyError(f"unknown gate {name!r}; the gates are {', '.join(GATE_ORDER)}")
    failed = context.checks.get(GATE_CHECK.get(name, ""))
    if isinstance(failed, CheckFailed):
        return GateResult(
            name, Verdict.INCONCLUSIVE, f"not run: its check has no result from these data: {failed.reason}", ran=False
        )
    return GATES[name](context)


def run_gates(context: AuditContext) -> tuple[GateResult, ...]:
    """Every gate, in the order of :data:`honestci.audit.policy.GATE_ORDER`."""
    return tuple(run_gate(name, context) for name in GATE_ORDER)


def overall_verdict(results: Iterable[GateResult], required: Iterable[str]) -> Verdict:
    """The worst verdict among the required gates (gates not required inform but never block).

    A required gate with no result counts as INCONCLUSIVE: a gate that did not run never passes.
    """
    required = set(required)
    results = list(results)
    missing = required - {r.name for r in results}
    return worst([r.verdict for r in results if r.name in required] + [Verdict.INCONCLUSIVE] * bool(missing))


#: Every gate of :data:`honestci.audit.policy.GATE_ORDER`, in that order, as a function of the
#: audit context (a record without a rule fails here, at import).
GATES: Mapping[str, Rule] = MappingProxyType({name: _RULES[name] for name in GATE_ORDER})
