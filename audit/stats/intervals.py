"""The common result of every win-rate interval, and the side-by-side table they form."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from honestci.audit.policy import Verdict

if TYPE_CHECKING:
    import pandas as pd


#: The parameter space of a rate or proportion (a win rate, an agreement, a consistency rate).
RATE_SPACE = (0.0, 1.0)
#: The parameter space of a difference of two rates (a paired gap, an order effect in probability points).
DIFFERENCE_SPACE = (-1.0, 1.0)


def bound_to_space(low, high, space: tuple[float, float] | None = RATE_SPACE):
    """(low, high) truncated to the parameter ``space``: the one place every interval on a rate's
    (or a difference of rates') scale is bounded.

    A symmetric interval (Wald, CR0-CR2 with a t quantile, PPI, a linearised kappa) is centred on
    its estimate and knows nothing of the parameter's range, so near an edge it reaches past it: a
    win rate's CR2 interval was seen at [0.93, 1.016]. No parameter value lies out there, so
    truncating never lowers coverage: the true value lies in the space, hence in the truncated
    interval exactly when it lies in the original one (the interval loses only values no parameter
    can take). Both ends are clamped into the space, so an interval that lay wholly outside it
    becomes a zero-width one at the edge, which the callers refuse as INCONCLUSIVE. ``None``
    bounds (no interval) and ``space=None`` (an unbounded scale: a logit, a Bradley-Terry
    strength) pass through unchanged. ``low`` and ``high`` are numbers (floats come back) or
    arrays/Series of them (a table's columns, bounded element by element).

    Examples
    --------
    >>> bound_to_space(0.93, 1.016)
    (0.93, 1.0)
    >>> bound_to_space(-1.2, 0.4, DIFFERENCE_SPACE)
    (-1.0, 0.4)
    """
    if space is None or low is None or high is None:
        return low, high
    low, high = np.clip(low, *space), np.clip(high, *space)  # NaN (no interval) stays NaN
    if np.ndim(low) == 0 and np.ndim(high) == 0:
        return float(low), float(high)
    return low, high


def reportable_bounds(verdict: Verdict, low: float | None, high: float | None) -> tuple[float, float] | None:
    """(low, high) of an interval a gate may read: None when INCONCLUSIVE or a bound is missing."""
    if verdict == Verdict.INCONCLUSIVE or low is None or high is None:
        return None
    return low, high


@dataclass(frozen=True)
class IntervalResult:
    """One interval for one estimand, population and method, with the clustering beside it.

    ``ci_low``/``ci_high`` are ``None`` whenever ``verdict`` is INCONCLUSIVE: honestci never
    reports a zero-width or unconverged interval as a number.
    """

    method: str
    label: str
    population: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    level: float
    n: int
    n_clusters: int
    icc: float
    design_effect: float
    n_effective: float
    se: float | None = None
    df: float | None = None
    verdict: Verdict = Verdict.PASS
    note: str = ""
    seed: int | None = None
    details: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def reportable(self) -> bool:
        return self.bounds is not None

    @property
    def bounds(self) -> tuple[float, float] | None:
        """(CI-low, CI-high) when the interval may be reported, else None."""
        return reportable_bounds(self.verdict, self.ci_low, self.ci_high)

    def as_row(self) -> dict:
        row = asdict(self)
        row.pop("details")
        row["verdict"] = str(self.verdict)
        return row


@dataclass(frozen=True)
class IntervalTable:
    """Intervals side by side (the canonical table is :meth:`to_frame`)."""

    estimand: str
    rows: tuple[IntervalResult, ...]

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([r.as_row() for r in self.rows])

    def get(self, method: str, population: str | None = None) -> IntervalResult:
        for row in self.rows:
            if row.method == method and (population is None or row.population == population):
                return row
        available = sorted({(r.method, r.population) for r in self.rows})
        raise KeyError(f"no interval with method={method!r}, population={population!r}; available: {available}")

    def __str__(self) -> str:
        lines = [f"{self.estimand}:"]
        for r in self.rows:
            ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.reportable else "INCONCLUSIVE"
            est = f"{r.estimate:.3f}" if r.estimate is not None and not math.isnan(r.estimate) else "  -  "
            # n_effective is undefined (NaN) when every vignette has one contest.
            n_eff = "n/a" if r.n_effective is None or math.isnan(r.n_effective) else f"{r.n_effective:.1f}"
            lines.append(f"  {r.label:<56} {r.population:<16} {est} {ci}  n={r.n} G={r.n_clusters} n_eff={n_eff}")
        return "\n".join(lines)
