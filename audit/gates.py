"""Every audit threshold, and the verdict ladder PASS < WARN < INCONCLUSIVE < FAIL.

All numbers that decide a verdict live here, so a reviewer can read the whole policy on one page
and a claim file can override them by name (see :data:`THRESHOLDS`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable


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
