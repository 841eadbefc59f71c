"""Every audit threshold, and the verdict ladder PASS < WARN < INCONCLUSIVE < FAIL.

All numbers that decide a verdict live here, so a reviewer can read the whole policy on one page
and a claim file can override them by name (see :data:`THRESHOLDS`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable


class Verdict(enum.IntEnum):
    """Ordered verdicts; the worst one decides a release."""

    PASS = 0
    WARN = 1
    INCONCLUSIVE = 2
    FAIL = 3

    def __str__(self) -> str:
        return self.name


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe verdict of ``verdicts`` (PASS when there are none)."""
    return max(verdicts, default=Verdict.PASS)


@dataclass(frozen=True)
class Thresholds:
    """Numbers that decide verdicts. Override by name in a claim's ``thresholds:`` block."""

    #: Nominal confidence level of every interval a gate reads.
    confidence_level: float = 0.95
    #: Below this many clusters (vignettes) a clustered interval is INCONCLUSIVE, not a number.
    #: CR2 with Satterthwaite df and the Webb wild bootstrap are usable from about G = 5
    #: (Pustejovsky & Tipton 2018; MacKinnon & Webb 2017); below that no variance between
    #: clusters can be estimated with any reliability.
    min_clusters: int = 5
    #: Below this many clusters the report notes that coverage of the few-cluster intervals is
    #: only approximately nominal (see docs/coverage.md).
    few_clusters: int = 12
    #: Population the bar is tested on when a claim does not name one.
    default_population: str = "new_vignettes"
    #: Default interval method for the gate's CI-low.
    default_method: str = "cr2"
    #: Rounding tolerance when matching a claimed figure (half a unit in the last stated digit
    #: is added on top of this).
    claimed_figure_tolerance: float = 0.0005


THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class GateResult:
    """The outcome of one gate: its verdict, a one-line reason and the figures behind it."""

    name: str
    verdict: Verdict
    message: str
    evidence: dict = field(default_factory=dict, compare=False)

    def as_row(self) -> dict:
        return {"gate": self.name, "verdict": str(self.verdict), "message": self.message}


def gate_enough_clusters(n_clusters: int, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """INCONCLUSIVE below ``min_clusters`` vignettes; otherwise PASS, noting when clusters are few."""
    evidence = {"n_clusters": n_clusters, "min_clusters": thresholds.min_clusters,
                "few_clusters": thresholds.few_clusters}
    if n_clusters < thresholds.min_clusters:
        return GateResult("enough_clusters", Verdict.INCONCLUSIVE,
                          f"{n_clusters} vignette(s) < {thresholds.min_clusters}: no interval on new vignettes "
                          "can be trusted; add vignettes", evidence)
    if n_clusters < thresholds.few_clusters:
        return GateResult("enough_clusters", Verdict.PASS,
                          f"{n_clusters} vignettes: enough for CR2/wild-bootstrap intervals, but few "
                          f"(coverage is only approximately nominal below {thresholds.few_clusters})",
                          evidence)
    return GateResult("enough_clusters", Verdict.PASS, f"{n_clusters} vignettes", evidence)


def gate_ci_low_clears_bar(ci_low: float | None, bar: float, method: str, population: str,
                           reason_if_missing: str = "") -> GateResult:
    """PASS when the honest interval's lower bound is at or above the bar; FAIL when below.

    INCONCLUSIVE when the interval could not be computed honestly (too few clusters, an
    unconverged sampler): a missing interval never passes.
    """
    evidence = {"ci_low": ci_low, "bar": bar, "method": method, "population": population}
    if ci_low is None:
        return GateResult("ci_low_clears_bar", Verdict.INCONCLUSIVE,
                          f"no honest {method} interval for {population}: {reason_if_missing}", evidence)
    if ci_low >= bar:
        return GateResult("ci_low_clears_bar", Verdict.PASS,
                          f"{method} CI-low {ci_low:.3f} >= bar {bar:.3f} ({population})", evidence)
    return GateResult("ci_low_clears_bar", Verdict.FAIL,
                      f"{method} CI-low {ci_low:.3f} < bar {bar:.3f} ({population})", evidence)


# --- registry -------------------------------------------------------------------------------
# A gate is a function of the audit context (claim, study, contests, intervals, check results)
# returning a GateResult. Check modules register theirs with @register_gate; a gate whose check
# has not landed reports INCONCLUSIVE ("not run: needs …"), never PASS.

GATE_ORDER = (
    "enough_clusters", "ci_low_clears_bar", "sampler_converged", "comparison_valid",
    "claimed_figures_reproduce", "judge_calibrated", "position_bias", "winners_curse", "leakage",
    "training_healthy",
)
DEFAULT_REQUIRED_GATES = ("enough_clusters", "ci_low_clears_bar", "sampler_converged", "comparison_valid",
                          "claimed_figures_reproduce")
NOT_YET_IMPLEMENTED = {
    "judge_calibrated": "the judge-calibration check (human preference labels vs the judge)",
    "position_bias": "the position-bias check on both-order verdicts",
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
