"""Every audit threshold, and the verdict ladder PASS < WARN < INCONCLUSIVE < FAIL.

All numbers that decide a verdict live here, so a reviewer can read the whole policy on one page
and a claim file can override them by name (see :data:`THRESHOLDS`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
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
    #: Below this many clusters a result is reported, but with a WARN: coverage of the
    #: few-cluster intervals is only approximately nominal (see docs/coverage.md).
    few_clusters_warn: int = 12
    #: Population the bar is tested on when a claim does not name one.
    default_population: str = "new_vignettes"
    #: Default interval method for the gate's CI-low.
    default_method: str = "cr2"
    #: Rounding tolerance when matching a claimed figure (half a unit in the last stated digit
    #: is added on top of this).
    claimed_figure_tolerance: float = 0.0005
    #: Sampler diagnostics a Bayesian posterior must meet before any number from it is reported
    #: (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021: rank-normalised split R-hat <= 1.01,
    #: bulk and tail ESS >= 400, i.e. 100 per chain for 4 chains); divergent transitions signal
    #: regions the sampler could not explore, so none are allowed.
    rhat_max: float = 1.01
    ess_bulk_min: float = 400.0
    ess_tail_min: float = 400.0
    divergences_max: int = 0


THRESHOLDS = Thresholds()
