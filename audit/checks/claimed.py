"""Claimed-figure audit: do the model card's numbers come out of the raw data, and by which method?

Each stated figure (point, n, CI bounds) is recomputed from the raw data and compared at the
card's own rounding (a figure stated with d decimals matches when it is within ½·10^−d). For the
interval, every method honestci knows is tried — from the raw data, and, for the iid methods,
also from the stated point and n alone — and the ones that reproduce it are named.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from honestci.audit.errors import EstimationError
from honestci.audit.stats.frequentist import iid
from honestci.audit.stats.frequentist.winrate import IID_METHODS
from honestci.audit.stats.intervals import IntervalTable

#: Design effect from which an iid interval on clustered data is flagged: unlabelled, it counts as
#: presented as the honest one; labelled (``method: wilson``), it reproduces but ignores clustering.
#: At 2 the iid interval is at most 1/√2 of the clustered width.
IID_FLAG_DEFF = 2.0


def stated_decimals(value: float) -> int:
    """Decimals of a figure as written (0.776 → 3; 0.8 → 1)."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0
    return len(text.split(".")[1].rstrip("0")) or 0


def reproduces(computed: float | None, stated: float) -> bool:
    """``computed`` rounds to ``stated`` at the stated number of decimals."""
    if computed is None:
        return False
    return abs(computed - stated) <= 0.5 * 10 ** -stated_decimals(stated) + 1e-12


@dataclass(frozen=True)
class MethodCheck:
    method: str
    source: str
    ci_low: float | None
    ci_high: float | None
    reproduces: bool


@dataclass(frozen=True)
class ClaimedFigureAudit:
    """Which claimed figures reproduce, by which methods, and what is wrong with how they are shown."""

    stated: dict
    point: float
    n: int
    n_effective: float
    design_effect: float
    point_reproduces: bool | None
    n_reproduces: bool | None
    checks: tuple[MethodCheck, ...]
    flags: tuple[str, ...]
    #: Other rows of the card's table, (system, audit of that row), and flags about the table.
    table_rows: tuple = ()
    table_flags: tuple[str, ...] = ()

    def all_flags(self) -> tuple[str, ...]:
        """This row's flags, every other row's (prefixed by its system) and the table's."""
        rows = tuple(f"{f[:6]}{system}: {f[6:]}" for system, audit in self.table_rows for f in audit.flags)
        return self.flags + rows + self.table_flags

    @property
    def reproducing_methods(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.method for c in self.checks if c.reproduces))

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([c.__dict__ for c in self.checks])


def audit_claimed_figures(stated: dict, intervals: IntervalTable) -> ClaimedFigureAudit:
    """Recompute ``stated`` (keys point, n, ci_low, ci_high, method, level) from ``intervals``.

    ``intervals`` must hold every method at the stated level, computed from the raw data.
    """
    reference = intervals.rows[0]
    if reference.estimate is None:
        raise EstimationError(
            f"The {reference.label} row has no point estimate: the claimed figures cannot be recomputed."
        )
    point, n = float(reference.estimate), int(reference.n)
    point_ok = reproduces(point, stated["point"]) if stated.get("point") is not None else None
    n_ok = (int(stated["n"]) == n) if stated.get("n") is not None else None
    bounds = {k: stated[k] for k in ("ci_low", "ci_high") if stated.get(k) is not None}

    checks: list[MethodCheck] = []
    if bounds:
        for row in intervals.rows:
            ok = row.reportable and all(reproduces(getattr(row, k), v) for k, v in bounds.items())
            checks.append(MethodCheck(row.method, "raw data", row.ci_low, row.ci_high, ok))
        if stated.get("point") is not None and stated.get("n") is not None:
            for method in IID_METHODS:
                low, high = iid.proportion_ci(
                    stated["point"] * stated["n"], int(stated["n"]), method=method, level=stated.get("level", 0.95)
                )
                ok = all(reproduces(v, bounds[k]) for k, v in (("ci_low", low), ("ci_high", high)) if k in bounds)
                checks.append(MethodCheck(method, "stated point and n", low, high, ok))

    flags: list[str] = []
    if point_ok is False:
        flags.append(f"FAIL: stated point {stated['point']} does not reproduce (raw data give {point:.4f})")
    if n_ok is False:
        flags.append(f"FAIL: stated n {stated['n']} does not match the {n} scored contests")
    matched = [c.method for c in checks if c.reproduces]
    stated_method = (stated.get("method") or "").lower() or None
    if bounds and not matched:
        flags.append("FAIL: no interval method reproduces the stated interval")
    elif bounds and stated_method and stated_method not in matched:
        flags.append(
            f"FAIL: the stated method '{stated_method}' does not reproduce the interval; "
            f"{', '.join(dict.fromkeys(matched))} does"
        )
    elif (
        bounds
        and not stated_method
        and all(m in IID_METHODS for m in matched)
        and reference.design_effect >= IID_FLAG_DEFF
    ):
        flags.append(
            f"WARN: an unlabelled iid interval ({', '.join(dict.fromkeys(matched))}) is presented while "
            f"contests cluster on {reference.n_clusters} vignettes (design effect "
            f"{reference.design_effect:.1f}, n_effective {reference.n_effective:.1f} of n {n})"
        )
    elif bounds and stated_method in IID_METHODS and reference.design_effect >= IID_FLAG_DEFF:
        # the stated method is among the matched here (the branch above took the other case)
        flags.append(
            f"WARN: the interval reproduces, but the method ignores clustering: '{stated_method}' treats the "
            f"{n} contests as independent while they cluster on {reference.n_clusters} vignettes (design effect "
            f"{reference.design_effect:.1f}, n_effective {reference.n_effective:.1f})"
        )
    if stated.get("n") is not None and n_ok and reference.design_effect >= IID_FLAG_DEFF:
        # n counted in contests misleads only when the interval beside it does not account for
        # clustering; beside a clustered interval it is a note.
        severity = "NOTE" if stated_method and stated_method not in IID_METHODS else "WARN"
        if severity == "NOTE" or not stated_method:
            flags.append(
                f"{severity}: n is counted in contests ({n}) although n_effective is {reference.n_effective:.1f}"
            )
    return ClaimedFigureAudit(
        dict(stated),
        point,
        n,
        float(reference.n_effective),
        float(reference.design_effect),
        point_ok,
        n_ok,
        tuple(checks),
        tuple(flags),
    )


def audit_claimed_table(headline: ClaimedFigureAudit, rows: dict[str, ClaimedFigureAudit]) -> ClaimedFigureAudit:
    """Add the card table's other rows to the headline's audit, and flag a table whose rows can
    only be reproduced by different interval methods (its CI column then mixes methods)."""
    from dataclasses import replace

    with_intervals = {"headline": headline, **rows}
    method_sets = {
        name: set(audit.reproducing_methods) for name, audit in with_intervals.items() if audit.reproducing_methods
    }
    table_flags = []
    if len(method_sets) > 1 and not set.intersection(*method_sets.values()):
        listed = "; ".join(f"{name}: {', '.join(sorted(methods))}" for name, methods in method_sets.items())
        table_flags.append(
            f"WARN: rows of one table use different interval methods ({listed}); state one method per column"
        )
    return replace(headline, table_rows=tuple(rows.items()), table_flags=tuple(table_flags))
