"""What a reader needs first, built once from the report model: the verdict, the gates that block
the release (each with a one-line reason), the gate interval against the bar, and what would
change the verdict. Markdown, HTML and the console of ``honestci audit`` all print this summary.

Everything here is read from ``verdict.json`` (the report model); nothing is re-estimated. The
one derived figure, the number of vignettes (or contests) that would lift the CI-low to the bar,
is a labelled approximation (:func:`units_to_clear_bar`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from honestci.audit.policy import GATE_REMEDY
from honestci.audit.report_model import gate_row

__all__ = ["BlockingGate", "VerdictSummary", "blocking_gates", "sig", "summarize", "units_to_clear_bar"]

#: A reason longer than this is cut at its first clause (the full message is in the gates table).
MAX_REASON = 180


def sig(value: float | int | None, digits: int = 3) -> str:
    """``value`` at ``digits`` significant digits, without exponent between 1e-3 and 1e6
    (0.726, -0.00833, 5.00, 1440); integers as they are; None as an en dash."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 10**digits and abs(value) < 1e6:
        return str(round(value))
    if abs(value) < 1e-3:
        return f"{value:.{digits - 1}e}"
    text = f"{value:#.{digits}g}"
    return text[:-1] if text.endswith(".") else text


def _distinct(low: float, bar: float) -> tuple[str, str]:
    """Two figures at 3 significant digits, or more where 3 would make them look equal (a CI-low
    of 0.6075 against a bar of 0.608 must not read "0.608 < 0.608")."""
    for digits in range(3, 8):
        a, b = sig(low, digits), sig(bar, digits)
        if a != b or low == bar:
            return a, b
    return sig(low, 8), sig(bar, 8)


@dataclass(frozen=True)
class BlockingGate:
    """A required gate that keeps the release from passing, and why, in one line."""

    name: str
    verdict: str
    reason: str
    remedy: str


@dataclass(frozen=True)
class VerdictSummary:
    """The head of every report and of the console."""

    verdict: str
    exit_code: int
    blocking: tuple[BlockingGate, ...]
    #: Which interval the bar gate reads: "LABEL; POPULATION; 95%".
    interval_label: str
    #: "0.843 [0.726, 0.885] vs bar 0.773", or "not computed, vs bar 0.773".
    interval_figures: str
    #: Sentences: what would change the verdict.
    change: tuple[str, ...]

    @property
    def gate_interval(self) -> str:
        return f"gate interval ({self.interval_label}): {self.interval_figures}"

    @property
    def headline(self) -> str:
        outcome = "release allowed" if self.exit_code == 0 else "release blocked"
        return f"summary: {self.verdict}, {outcome} (exit code {self.exit_code})"

    def lines(self) -> list[str]:
        """Plain text, for the console."""
        out = [self.headline]
        if self.blocking:
            out.append("blocking gates:")
            out += [f"  {g.name} ({g.verdict}): {g.reason}" for g in self.blocking]
        else:
            out.append("blocking gates: none")
        out.append(self.gate_interval)
        out += [f"to change the verdict: {self.change[0]}", *(f"  {s}" for s in self.change[1:])]
        return out


def blocking_gates(data: dict) -> list[dict]:
    """The required gates that block the release, by the rule of
    :meth:`honestci.audit.pipeline.AuditResult.exit_code`: every required gate that is not PASS,
    except an INCONCLUSIVE that ran when the audit allowed inconclusive gates; a required gate
    with no result at all blocks too (returned as a stub)."""
    required = data.get("required_gates") or [g["gate"] for g in data["gates"] if g.get("required")]
    by_name = {g["gate"]: g for g in data["gates"]}
    allow = bool(data.get("allow_inconclusive"))
    out = []
    for name in required:
        gate = by_name.get(name)
        if gate is None:
            out.append({"gate": name, "verdict": "INCONCLUSIVE", "message": "no result", "ran": False, "evidence": {}})
        elif gate["verdict"] == "PASS" or (allow and gate["verdict"] == "INCONCLUSIVE" and gate.get("ran", True)):
            continue
        else:
            out.append(gate)
    return out


def units_to_clear_bar(
    estimate: float, ci_low: float, bar: float, units: int, level: float = 0.95, power: float = 0.5
) -> int | None:
    """Approximately how many vignettes (or contests) in all the gate needs to clear the bar with
    probability ``power`` if the true rate is the estimate (the planner's normal approximation,
    :mod:`honestci.audit.stats.design.planning`, with the observed spread).

    The gate's SE is read off the interval, SE = h / z with h = estimate − CI-low and
    z = z_((1+level)/2), and taken to shrink as 1/√units; the CI-low clears the bar with probability
    ``power`` when estimate − bar = (z + z_power)·SE·√(units/units′), i.e.
    units′ = units·(h (z + z_power) / (z (estimate − bar)))². At ``power`` = 0.5 that is
    units·(h / (estimate − bar))²: the size at which the CI-low reaches the bar if the estimate held.
    It ignores the t quantile's and the prior's change with more data, so it is a planning
    figure, not a promise (``honestci plan`` checks a design by simulation). None when the
    estimate is at or below the bar (no amount of data at this estimate clears it) or the
    interval has no width.
    """
    half, margin = estimate - ci_low, estimate - bar
    if margin <= 0 or half <= 0 or units <= 0:
        return None
    normal = NormalDist()
    z = normal.inv_cdf(0.5 + level / 2.0)
    factor = (z + normal.inv_cdf(power)) / z
    return max(units + 1, math.ceil(units * (half * factor / margin) ** 2))


#: Power of the planning estimate in a failing bar gate's "what would change the verdict" line.
PLANNING_POWER = 0.8


def _reason(gate: dict) -> str:
    evidence = gate.get("evidence") or {}
    if gate["gate"] == "ci_low_clears_bar" and evidence.get("ci_low") is not None and gate["verdict"] == "FAIL":
        low, bar = _distinct(evidence["ci_low"], evidence["bar"])
        return (
            f"the gate interval's lower end {low} is below the bar {bar} "
            f"(short by {sig(evidence['bar'] - evidence['ci_low'])})"
        )
    message = " ".join(str(gate["message"]).split())
    if len(message) > MAX_REASON:
        first = message.split("; ")[0]
        message = (first if len(first) <= MAX_REASON else first[: MAX_REASON - 1].rstrip() + "…") + " (more in Gates)"
    return message


def _remedy(gate: dict, data: dict, row: dict | None) -> str:
    name, evidence = gate["gate"], gate.get("evidence") or {}
    if not gate.get("ran", True) and name != "ci_low_clears_bar":
        needs = _reason(gate).removeprefix("not run: ")
        return f"it did not run ({needs}); supply that evidence and re-audit"
    if name == "ci_low_clears_bar":
        return _bar_sentence(data, row)
    if name == "enough_clusters":
        return GATE_REMEDY[name].format(min_clusters=evidence.get("min_clusters", "the minimum"))
    return GATE_REMEDY[name]


def _bar_sentence(data: dict, row: dict | None) -> str:
    bar = data["claim"]["bar"]
    population = data["claim"]["population"]
    if population == "new_seeds":  # the recipe's interval: its width is mostly the seeds' spread
        if row is None or row.get("ci_low") is None or row.get("estimate") is None:
            return (
                "a new-seed interval: at least the policy's min_seeds training seeds of the recipe, each judged on "
                "the same vignettes (see the Training seeds section for why there is none)"
            )
        if row["estimate"] < bar:
            return (
                f"the new-seed estimate {sig(row['estimate'])} itself is not above the bar {sig(bar)}: more seeds "
                "at this spread do not clear it; only a better recipe would"
            )
        return (
            "more training seeds of the recipe judged on the same vignettes (the new-seed interval's df sit near "
            "K − 1 when the seeds differ, so each seed narrows it most), or seeds that differ less"
        )
    if row is None or row.get("ci_low") is None or row.get("estimate") is None:
        return "an honest gate interval: more vignettes (the interval needs enough of them to be computed)"
    units, what = (row["n_clusters"], "vignettes") if population == "new_vignettes" else (row["n"], "contests")
    needed = units_to_clear_bar(row["estimate"], row["ci_low"], bar, units)
    if needed is None:
        return (
            f"the estimate {sig(row['estimate'])} itself is not above the bar {sig(bar)}: no amount of data "
            "at this win rate clears it; only a better policy would"
        )
    planned = units_to_clear_bar(
        row["estimate"], row["ci_low"], bar, units, row.get("level", 0.95), PLANNING_POWER
    )  # not None: the same conditions as ``needed``
    return (
        f"about {needed - units} more {what} ({needed} in all, ≈{needed / units:.1f}× now) at this "
        f"heterogeneity would lift the CI-low to the bar, if the estimate held at {sig(row['estimate'])} "
        "(approximate: the lower half-width taken to shrink as 1/√" + ("G" if what == "vignettes" else "n") + "); "
        f"planning estimate: about {planned} {what} in all would give {PLANNING_POWER:.0%} power to clear the bar "
        "if the true rate is the estimate (normal approximation; `honestci plan` checks a design by simulation)"
    )


def summarize(data: dict) -> VerdictSummary:
    """The summary of a report model (``Report.data``)."""
    claim, row = data["claim"], gate_row(data)
    bar = claim["bar"]
    population = claim["population"].replace("_", " ")
    if row is not None and row.get("ci_low") is not None and row.get("verdict") != "INCONCLUSIVE":
        low, bar_text = _distinct(row["ci_low"], bar)
        label = f"{row['label']}; {population}; {round(100 * row['level'])}%"
        figures = f"{sig(row['estimate'])} [{low}, {sig(row['ci_high'])}] vs bar {bar_text}"
    else:
        label, figures = f"{data['gate_method']}; {population}", f"not computed, vs bar {sig(bar)}"
    blocking = tuple(
        BlockingGate(g["gate"], g["verdict"], _reason(g), _remedy(g, data, row)) for g in blocking_gates(data)
    )
    if blocking:
        change = tuple(f"{g.name}: {g.remedy}." for g in blocking)
    else:
        change = (_pass_margin(row, bar),)
    return VerdictSummary(data["verdict"], data["exit_code"], blocking, label, figures, change)


def _pass_margin(row: dict | None, bar: float) -> str:
    if row is None or row.get("ci_low") is None:
        return "any required gate that stops passing would block the release."
    return (
        f"the CI-low is {sig(row['ci_low'] - bar)} above the bar; a CI-low below the bar, or any required "
        "gate that stops passing, would block the release."
    )
