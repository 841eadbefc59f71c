"""The audit: from a claim file to gate verdicts, a report and an exit code.

Steps: load and validate the claim and its data → assemble both-order contests → every win-rate
interval side by side (+ the Bayesian hierarchical model) → gates → report files.
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from audit import __version__
from audit.claims import Claim, load_claim
from audit.contests import build_contests
from audit.gates import GateResult, Thresholds, Verdict, gate_ci_low_clears_bar, gate_enough_clusters, worst
from audit.intervals import IntervalResult, IntervalTable
from audit.io import load_study
from audit.winrate import DEFAULT_METHODS, winrate_table

#: Exit codes of ``honestci audit``.
EXIT_PASS, EXIT_BLOCKED, EXIT_BAD_INPUT = 0, 1, 2
GATE_METHOD_FOR_POPULATION = {"new_vignettes": "cr2", "these_vignettes": "stratified"}


@dataclass(frozen=True)
class AuditResult:
    """Everything an audit found; the report renderers read only this."""

    claim_name: str
    claim_path: str
    policy: str
    opponent: str
    judge: str | None
    bar: float
    population: str
    gate_method: str
    intervals: IntervalTable
    n_contests: int
    n_invalid: int
    dropped: dict
    gates: tuple[GateResult, ...]
    claimed: dict | None
    provenance: dict = field(compare=False)

    @property
    def verdict(self) -> Verdict:
        return worst(g.verdict for g in self.gates)

    def exit_code(self, allow_inconclusive: bool = False) -> int:
        """0 only when every gate passes (or, with ``allow_inconclusive``, when the worst is
        INCONCLUSIVE); a WARN from a gate blocks like any other non-PASS."""
        verdict = self.verdict
        if verdict == Verdict.PASS or (verdict == Verdict.INCONCLUSIVE and allow_inconclusive):
            return EXIT_PASS
        return EXIT_BLOCKED

    def gate_interval(self) -> IntervalResult:
        return self.intervals.get(self.gate_method, self.population)

    def to_dict(self) -> dict:
        return {
            "schema_version": 1,
            "claim": {"name": self.claim_name, "path": self.claim_path, "policy": self.policy,
                      "opponent": self.opponent, "judge": self.judge, "bar": self.bar,
                      "population": self.population, "claimed": self.claimed},
            "verdict": str(self.verdict),
            "exit_code": self.exit_code(),
            "gate_method": self.gate_method,
            "gates": [g.as_row() | {"evidence": g.evidence} for g in self.gates],
            "contests": {"n": self.n_contests, "n_invalid": self.n_invalid, "dropped": self.dropped},
            "intervals": [r.as_row() for r in self.intervals.rows],
            "provenance": self.provenance,
        }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _provenance(claim: Claim, input_hashes: dict, seed: int) -> dict:
    import numpy, pandas, scipy, statsmodels  # noqa: E401 - versions only

    return {
        "honestci": __version__,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "packages": {m.__name__: m.__version__ for m in (numpy, scipy, pandas, statsmodels)},
        "seed": seed,
        "claim_sha256": input_hashes.pop("__claim__", None),
        "inputs_sha256": input_hashes,
    }


def run_audit(claim_path: str | Path, *, methods=DEFAULT_METHODS, bayes: bool = True, seed: int = 20261129,
              allow_outside_data: bool = False, progress: Callable[[str], None] = lambda _: None) -> AuditResult:
    """Run the audit of one claim. Raises :class:`audit.errors.InputError` on bad input."""
    import hashlib

    progress("loading claim and data")
    claim = load_claim(claim_path, allow_outside=allow_outside_data)
    spec, thresholds = claim.spec, claim.thresholds
    study = load_study(claim.data_paths)
    progress("assembling both-order contests")
    contests = build_contests(study, policy=spec.policy, opponent=spec.opponent, judge=spec.judge,
                              allow_single_order=spec.allow_single_order)
    scored = contests.scores("both_orders")
    scores, clusters = scored.values, scored.clusters

    progress("computing intervals")
    rows = list(winrate_table(scores, clusters, methods=methods, level=thresholds.confidence_level,
                              seed=seed, thresholds=thresholds).rows)
    if bayes:
        progress("fitting the Bayesian hierarchical model")
        rows.extend(_bayes_rows(contests, spec.bar, thresholds, seed, rows[0]))
    intervals = IntervalTable("win rate", tuple(rows))

    gate_method = spec.method or GATE_METHOD_FOR_POPULATION[spec.population]
    gates = _gates(intervals, gate_method, spec.population, spec.bar, thresholds)

    hashes = dict(study.sha256)
    hashes["__claim__"] = hashlib.sha256(claim.path.read_bytes()).hexdigest()
    return AuditResult(
        claim_name=spec.name, claim_path=str(claim.path), policy=spec.policy, opponent=spec.opponent,
        judge=contests.judge, bar=spec.bar, population=spec.population, gate_method=gate_method,
        intervals=intervals, n_contests=int(len(scores)), n_invalid=int(contests.n_invalid),
        dropped=dict(contests.dropped), gates=gates,
        claimed=spec.claimed.model_dump() if spec.claimed else None,
        provenance=_provenance(claim, hashes, seed))


def _gates(intervals: IntervalTable, method: str, population: str, bar: float,
           thresholds: Thresholds) -> tuple[GateResult, ...]:
    any_row = intervals.rows[0]
    try:
        row = intervals.get(method, population)
    except KeyError:
        row = None
    ci_gate = gate_ci_low_clears_bar(row.ci_low if row and row.reportable else None, bar, method, population,
                                     reason_if_missing=row.note if row else "method not computed")
    return (gate_enough_clusters(any_row.n_clusters, thresholds), ci_gate)


def _bayes_rows(contests, bar, thresholds, seed, reference: IntervalResult) -> list[IntervalResult]:
    from audit.bayes import fit_winrate_from_frame

    result = fit_winrate_from_frame(contests.per_order_outcomes(), bar=bar, seed=seed,
                                    level=thresholds.confidence_level)
    return list(result.interval_rows(reference))


def write_outputs(result: AuditResult, out_dir: str | Path) -> dict[str, Path]:
    """Write ``report.md`` and ``verdict.json`` atomically into ``out_dir``."""
    from reports.markdown import render_markdown
    from reports.writing import atomic_write_text

    out = Path(out_dir)
    paths = {"report": out / "report.md", "verdict": out / "verdict.json"}
    atomic_write_text(paths["verdict"], json.dumps(result.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
    atomic_write_text(paths["report"], render_markdown(result))
    return paths
