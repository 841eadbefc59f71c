"""Every gate rule and the one gate registry.

The numbers the rules compare against live in :mod:`honestci.audit.policy`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from honestci.audit.policy import GATE_ORDER, THRESHOLDS, GateResult, Thresholds, Verdict, clears_bar, worst


def gate_enough_clusters(n_clusters: int, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """INCONCLUSIVE below ``min_clusters`` vignettes; otherwise PASS, noting when clusters are few."""
    evidence = {
        "n_clusters": n_clusters,
        "min_clusters": thresholds.min_clusters,
        "few_clusters": thresholds.few_clusters,
    }
    if n_clusters < thresholds.min_clusters:
        return GateResult(
            "enough_clusters",
            Verdict.INCONCLUSIVE,
            f"{n_clusters} vignette(s) < {thresholds.min_clusters}: no interval on new vignettes "
            "can be trusted; add vignettes",
            evidence,
        )
    if n_clusters < thresholds.few_clusters:
        return GateResult(
            "enough_clusters",
            Verdict.PASS,
            f"{n_clusters} vignettes: enough for CR2/wild-bootstrap intervals, but few "
            f"(coverage is only approximately nominal below {thresholds.few_clusters})",
            evidence,
        )
    return GateResult("enough_clusters", Verdict.PASS, f"{n_clusters} vignettes", evidence)


def gate_ci_low_clears_bar(
    ci_low: float | None, bar: float, method: str, population: str, reason_if_missing: str = ""
) -> GateResult:
    """PASS when the honest interval's lower bound is at or above the bar; FAIL when below.

    INCONCLUSIVE when the interval could not be computed honestly (too few clusters, an
    unconverged sampler): a missing interval never passes.
    """
    evidence = {"ci_low": ci_low, "bar": bar, "method": method, "population": population}
    if ci_low is None:
        return GateResult(
            "ci_low_clears_bar",
            Verdict.INCONCLUSIVE,
            f"no honest {method} interval for {population}: {reason_if_missing}",
            evidence,
        )
    if clears_bar(ci_low, bar):
        return GateResult(
            "ci_low_clears_bar", Verdict.PASS, f"{method} CI-low {ci_low:.3f} >= bar {bar:.3f} ({population})", evidence
        )
    return GateResult(
        "ci_low_clears_bar", Verdict.FAIL, f"{method} CI-low {ci_low:.3f} < bar {bar:.3f} ({population})", evidence
    )


# --- registry -------------------------------------------------------------------------------
# A gate is a function of the audit context (claim, study, contests, intervals, check results)
# returning a GateResult. Check modules register theirs with @register_gate; a gate whose check
# has not landed reports INCONCLUSIVE ("not run: needs …"), never PASS.

NOT_YET_IMPLEMENTED = {
    "winners_curse": "the winner's-curse check on selection and held-out pools",
    "leakage": "the n-gram leakage scan of the training corpus",
    "training_healthy": "the training-health check of the trainer's logs",
}
_REGISTRY: dict[str, Callable] = {}


def register_gate(name: str) -> Callable[[Callable], Callable]:
    """Register ``function(context) -> GateResult`` as the gate ``name``."""
    if name not in GATE_ORDER:
        raise ValueError(f"unknown gate {name!r}; add it to GATE_ORDER first")

    def decorator(function: Callable) -> Callable:
        _REGISTRY[name] = function
        return function

    return decorator


def run_gate(name: str, context) -> GateResult:
    """Run one gate; a gate with no registered check is INCONCLUSIVE."""
    function = _REGISTRY.get(name)
    if function is None:
        needs = NOT_YET_IMPLEMENTED.get(name, "a check that is not registered")
        return GateResult(name, Verdict.INCONCLUSIVE, f"not run: needs {needs}")
    return function(context)


def overall_verdict(results: Iterable[GateResult], required: Iterable[str]) -> Verdict:
    """The worst verdict among the required gates (gates not required inform but never block).

    A required gate with no result counts as INCONCLUSIVE: a gate that did not run never passes.
    """
    required = set(required)
    results = list(results)
    missing = required - {r.name for r in results}
    return worst([r.verdict for r in results if r.name in required] + [Verdict.INCONCLUSIVE] * bool(missing))
