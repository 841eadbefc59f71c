"""The audit: from a claim file to gate verdicts, a report and an exit code.

Steps: load and validate the claim and its data → assemble both-order contests → every win-rate
interval side by side (+ the Bayesian hierarchical model) → claimed-figure audit and comparisons →
gates (see :mod:`honestci.audit.gates`) → report files.
"""

from __future__ import annotations

import hashlib
import math
import platform
import subprocess
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from honestci import __version__
from honestci.audit.checks.context import AuditContext, BayesCheck, CheckFailed, ComparisonCheck
from honestci.audit.errors import ClaimError, InputError, Problem
from honestci.audit.policy import (
    DEFAULT_SEED,
    EXIT_BLOCKED,
    EXIT_PASS,
    NEW_SEED_METHOD,
    GateResult,
    Policy,
    Verdict,
)
from honestci.audit.progress import ProgressLike, as_progress
from honestci.audit.report_model import POSTERIOR_FILE, Report, json_safe
from honestci.audit.stats.core_share import CoreShare, sharing_cores, single_threaded_blas
from honestci.audit.stats.intervals import IntervalResult, IntervalTable

# The modules behind the audit's steps (pydantic, pandas, scipy behind them) are imported by the
# functions that run the steps, so that the first progress line comes before ~2 s of imports.
if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from honestci.audit.checks.claimed import ClaimedFigureAudit
    from honestci.audit.data.claims import Claim
    from honestci.audit.data.contests import ContestTable
    from honestci.audit.data.io import Study
    from honestci.audit.stats.bayesian.hierarchical import BayesWinRateResult


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
    required_gates: tuple[str, ...]
    claimed: dict | None
    claimed_audit: ClaimedFigureAudit | None
    comparisons: tuple[ComparisonCheck, ...]
    bayes_summary: dict | None
    per_vignette: tuple[dict, ...]
    sections: tuple[dict, ...]
    provenance: dict = field(compare=False)
    #: The policy the claim was judged by: name, sha256, level, scoring of invalid verdicts, and
    #: every deviation from the built-in defaults with its source.
    audit_policy: dict = field(default_factory=dict, compare=False)
    #: The interval the claim's ``method`` names: shown beside the gate's, never gated on.
    claim_method: str | None = None
    #: ``--allow-inconclusive``: required gates that ran and are INCONCLUSIVE do not block.
    allow_inconclusive: bool = False
    #: The judging design of the claim's contests (:data:`honestci.audit.data.contests.DESIGNS`)
    #: and what it implies for the win rate and position bias.
    design: str = ""
    design_note: str = ""
    #: The claim's panel of judges (empty for one judge) and its panel rule.
    panel: tuple[str, ...] = ()
    panel_rule: str | None = None
    #: The main Bayesian fit's posterior (arviz.InferenceData); :func:`honestci.reports.render.write_outputs`
    #: saves it as :data:`honestci.audit.report_model.POSTERIOR_FILE`. None without a converged Bayesian fit.
    posterior: Any = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> Verdict:
        from honestci.audit.gate_registry import overall_verdict

        return overall_verdict(self.gates, self.required_gates)

    def blocking_gates(self, allow_inconclusive: bool | None = None) -> tuple[GateResult, ...]:
        """The required gates that block the release, in gate order: a WARN or FAIL, an
        INCONCLUSIVE (unless ``allow_inconclusive``, default: as the audit was run, and the gate
        ran), and a required gate with no result (as an INCONCLUSIVE that did not run)."""
        from honestci.audit.gates import gate_without_result

        allow = self.allow_inconclusive if allow_inconclusive is None else allow_inconclusive
        passable = (Verdict.PASS, Verdict.INCONCLUSIVE) if allow else (Verdict.PASS,)
        by_name = {g.name: g for g in self.gates}
        blocking = []
        for name in self.required_gates:
            gate = by_name.get(name) or gate_without_result(name)
            if not (gate.verdict in passable and (gate.verdict == Verdict.PASS or gate.ran)):
                blocking.append(gate)
        order = {name: i for i, name in enumerate(g.name for g in self.gates)}
        return tuple(sorted(blocking, key=lambda g: order.get(g.name, len(order))))

    def exit_code(self, allow_inconclusive: bool | None = None) -> int:
        """0 only when no required gate blocks (:meth:`blocking_gates`): every required gate
        passes or, with ``allow_inconclusive`` (default: as the audit was run), is PASS or an
        INCONCLUSIVE that ran. A WARN or FAIL, a required gate that did not run (missing evidence,
        check or extra) or one with no result always blocks."""
        return EXIT_BLOCKED if self.blocking_gates(allow_inconclusive) else EXIT_PASS

    def gate_interval(self) -> IntervalResult:
        return self.intervals.get(self.gate_method, self.population)

    def report(self) -> Report:
        """The report model every renderer reads."""
        return Report.from_dict(json_safe(self.to_dict()))

    def to_dict(self) -> dict:
        return {
            "schema_version": 1,
            "audit_policy": self.audit_policy,
            "allow_inconclusive": self.allow_inconclusive,
            "claim": {
                "method": self.claim_method,
                "name": self.claim_name,
                "path": self.claim_path,
                "policy": self.policy,
                "opponent": self.opponent,
                "judge": self.judge,
                "panel": list(self.panel) or None,
                "panel_rule": self.panel_rule,
                "bar": self.bar,
                "population": self.population,
                "claimed": self.claimed,
            },
            "verdict": str(self.verdict),
            "exit_code": self.exit_code(),
            "blocking_gates": [g.as_row() for g in self.blocking_gates()],
            "gate_method": self.gate_method,
            "required_gates": list(self.required_gates),
            "gates": [
                g.as_row() | {"required": g.name in self.required_gates, "evidence": g.evidence} for g in self.gates
            ],
            "contests": {
                "n": self.n_contests,
                "n_invalid": self.n_invalid,
                "dropped": self.dropped,
                "design": self.design,
                "design_note": self.design_note,
            },
            "intervals": [r.as_row() for r in self.intervals.rows],
            "bayes": self.bayes_summary,
            "per_vignette": list(self.per_vignette),
            "sections": list(self.sections),
            "claimed_audit": None
            if self.claimed_audit is None
            else {
                "reproducing_methods": list(self.claimed_audit.reproducing_methods),
                "flags": list(self.claimed_audit.all_flags()),
                "checks": self.claimed_audit.to_frame().to_dict(orient="records"),
            },
            "comparisons": [
                {
                    "against": c.against,
                    "kind": c.kind,
                    "statement": c.statement,
                    "against_point": c.against_point,
                    "error": c.error,
                    "paired_difference": None if c.paired is None else c.paired.to_frame().to_dict(orient="records")[0],
                    "bayes": None if c.bayes is None else c.bayes.to_frame().to_dict(orient="records"),
                }
                for c in self.comparisons
            ],
            "provenance": self.provenance,
        }


# --- the run --------------------------------------------------------------------------------


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).resolve().parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _provenance(claim: Claim, study: Study, seed: int) -> dict:
    import numpy
    import pandas
    import scipy

    return {
        "honestci": __version__,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "packages": {m.__name__: m.__version__ for m in (numpy, scipy, pandas)},
        "seed": seed,
        "claim_sha256": hashlib.sha256(claim.path.read_bytes()).hexdigest(),
        "inputs_sha256": dict(study.sha256),
    }


def _contests_in_pool(contests: ContestTable, study: Study, pool: str) -> ContestTable:
    """Only the contests whose policy response belongs to ``pool`` (the claim's ``pool:`` key)."""
    from honestci.audit.errors import ClaimError

    pools = dict(zip(study.responses.frame["response_id"], study.responses.frame["pool"]))

    def in_pool(frame: pd.DataFrame) -> np.ndarray:
        return (frame["policy_response"].map(pools) == pool).to_numpy(dtype=bool)

    if not in_pool(contests.frame).any():
        raise ClaimError(
            f"No contest of {contests.policy} uses a response of pool '{pool}'.",
            fix="check the responses' pool column, or drop `pool:` from the claim",
        )
    return contests.where(in_pool, f"not_in_pool_{pool}")


def _contests_in_families(contests: ContestTable, study: Study, families: tuple[str, ...], path: Path) -> ContestTable:
    """Only the contests on vignettes of ``families`` (the claim's ``family:``/``families:`` key):
    a claim about a family rests on that family's vignettes alone, never on the others'."""
    vignettes = study.vignettes.frame
    known = set(vignettes["family"].dropna()) if "family" in vignettes else set()
    missing = [f for f in families if f not in known]
    if missing:
        raise ClaimError(
            f"Claim file {path} names vignette families that no vignette belongs to.",
            [
                Problem(
                    str(path),
                    None,
                    "family",
                    f"{missing} not among the vignettes' families ({sorted(known) or 'none: no family column'})",
                )
            ],
            fix="fix the family name, or give the vignettes a `family` column",
        )
    chosen = set(vignettes.loc[vignettes["family"].isin(families), "vignette_id"])

    def in_families(frame: pd.DataFrame) -> np.ndarray:
        return frame["vignette_id"].isin(chosen).to_numpy(dtype=bool)

    if not in_families(contests.frame).any():
        raise ClaimError(
            f"No contest of {contests.policy} is on a vignette of {list(families)}.",
            fix="check the contests' vignettes and the vignettes' family column",
        )
    return contests.where(in_families, "not_in_claim_families")


def _contests_on_vignettes(other: ContestTable, claim_contests: ContestTable) -> ContestTable:
    """``other``'s contests on the claim's vignettes only: a claim restricted to a pool is compared
    with another system on the same vignettes (the pairing), not on the other system's whole data."""
    vignettes = set(claim_contests.frame["vignette_id"])
    return other.where(
        lambda frame: frame["vignette_id"].isin(vignettes).to_numpy(dtype=bool), "not_on_claim_vignettes"
    )


def _same_judging(claim: Claim, study: Study, contests: ContestTable, system: str) -> ContestTable:
    """The contests of ``system`` against the claim's opponent, judged as the claim's are (its
    judge, or its panel by the same rule)."""
    from honestci.audit.data.contests import build_claim_contests

    return build_claim_contests(
        study,
        system,
        claim.spec.opponent,
        judge=contests.judge,
        panel=contests.panel,
        panel_rule=contests.panel_rule,
        missing_orders=claim.policy.missing_orders,
    )


def _claimed_rows(
    claim: Claim, study: Study, contests: ContestTable, level: float, seed: int
) -> dict[str, ClaimedFigureAudit]:
    """Audit each other row of the claimed table from its own contests (same opponent and judge or panel)."""
    from honestci.audit.checks.claimed import audit_claimed_figures
    from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_table

    spec, audits = claim.spec, {}
    for row in () if spec.claimed is None else spec.claimed.table:
        row_contests = _same_judging(claim, study, contests, row.system)
        scored = row_contests.scores("both_orders", invalid=claim.policy.invalid_verdicts)
        table = winrate_table(
            scored.values,
            scored.clusters,
            methods=ALL_METHODS,
            level=level,
            seed=seed,
            thresholds=claim.thresholds,
            trials_per_contest=row_contests.trials_per_contest,
        )
        audits[row.system] = audit_claimed_figures({**row.model_dump(exclude={"system"}), "level": level}, table)
    return audits


def _per_vignette(scored, study: Study, level: float, trials_per_contest: int) -> tuple[dict, ...]:
    """Per-vignette win rate with a within-vignette t interval and, from two vignettes on, the
    partially pooled rate and interval of the gate's logit-normal model
    (:func:`honestci.audit.stats.bayesian.grid.vignette_rate_posteriors`) for the caterpillar plot.

    The vignettes are coded once in sorted-label order and every per-vignette sum is a bincount:
    the same figures as grouping the contests, without a million-row groupby."""
    import numpy as np
    from scipy import stats

    from honestci.audit.stats.bayesian.grid import vignette_rate_posteriors
    from honestci.audit.stats.estimands import unique_inverse

    texts = dict(zip(study.vignettes.frame["vignette_id"], study.vignettes.frame["text"]))
    values = scored.values
    labels, codes = unique_inverse(scored.clusters)
    pooled = {}
    if labels.size >= 2:
        # the codes keep the labels' sorted order, so the fit's vignettes are the codes 0 … G − 1
        fit = vignette_rate_posteriors(values, codes, level, trials_per_contest)
        pooled = {int(g): (m, lo, hi) for g, m, lo, hi in zip(fit.vignettes, fit.mean, fit.low, fit.high)}
    sizes = np.bincount(codes, minlength=labels.size)
    means = np.bincount(codes, weights=values, minlength=labels.size) / sizes
    squares = np.bincount(codes, weights=(values - means[codes]) ** 2, minlength=labels.size)
    several = sizes > 1
    half = np.full(labels.size, np.nan)
    half[several] = (
        stats.t.ppf(0.5 + level / 2, sizes[several] - 1)
        * np.sqrt(squares[several] / (sizes[several] - 1))
        / np.sqrt(sizes[several])
    )
    # fmax/fmin: a single contest (no interval, NaN) spans [0, 1]
    low, high = np.fmax(0.0, means - half), np.fmin(1.0, means + half)
    rows = []
    for g, vignette in enumerate(labels):
        rows.append(
            {
                "vignette_id": str(vignette),
                "text": texts.get(vignette, ""),
                "n": int(sizes[g]),
                "estimate": float(means[g]),
                "ci_low": float(low[g]),
                "ci_high": float(high[g]),
            }
        )
        if g in pooled:
            rows[-1].update(zip(("pooled", "pooled_low", "pooled_high"), map(float, pooled[g])))
    return tuple(rows)


def _comparisons(
    claim: Claim,
    study: Study,
    contests: ContestTable,
    level: float,
    bayes: bool,
    seed: int,
    progress: ProgressLike = None,
) -> tuple[ComparisonCheck, ...]:
    from honestci.audit.stats.frequentist.compare import paired_difference

    spec, checks = claim.spec, []
    if spec.claimed is None:
        return ()
    invalid = claim.policy.invalid_verdicts
    policy_scores = contests.scores("both_orders", invalid=invalid)
    for comparison in spec.claimed.comparisons:
        try:
            other_contests = _same_judging(claim, study, contests, comparison.against)
            if spec.pool is not None or spec.vignette_families is not None:
                other_contests = _contests_on_vignettes(other_contests, contests)
            other = other_contests.scores("both_orders", invalid=invalid)
            paired = paired_difference(
                policy_scores.values,
                policy_scores.clusters,
                other.values,
                other.clusters,
                system_a=spec.policy,
                system_b=comparison.against,
                opponent=spec.opponent,
                level=level,
            )
            posterior = None
            # The joint Bayesian model of the difference is per judged order of one judge; a
            # panel's comparison rests on the clustered test of its panel scores alone.
            if bayes and not contests.panel:
                from honestci.audit.stats.bayesian.compare import fit_paired_difference_bayes

                posterior = fit_paired_difference_bayes(
                    policy_scores.values,
                    policy_scores.clusters,
                    other.values,
                    other.clusters,
                    system_a=spec.policy,
                    system_b=comparison.against,
                    opponent=spec.opponent,
                    level=level,
                    seed=seed,
                    thresholds=claim.thresholds,
                    trials_per_contest=contests.trials_per_contest,
                    progress=progress,
                )
            checks.append(
                ComparisonCheck(
                    comparison.against,
                    comparison.kind,
                    comparison.statement,
                    comparison.against_point,
                    paired,
                    bayes=posterior,
                )
            )
        except InputError as exc:
            checks.append(
                ComparisonCheck(
                    comparison.against,
                    comparison.kind,
                    comparison.statement,
                    comparison.against_point,
                    None,
                    error=exc.message,
                )
            )
    return tuple(checks)


def audit_context(
    claim_path: str | Path,
    *,
    policy: Policy | None = None,
    bayes: bool = True,
    seed: int = DEFAULT_SEED,
    allow_outside_data: bool = False,
    progress: ProgressLike = None,
    while_fitting: Callable[[AuditContext], None] | None = None,
) -> AuditContext:
    """Everything the gates of one claim read: the claim and its data, every win-rate interval
    (with the Bayesian fit unless ``bayes`` is False), the claimed-figure audit, the comparisons
    and the result of every check of :data:`honestci.audit.checks.registry.CHECKS`.

    ``while_fitting`` (optional) is called with the context once the checks have run, before the
    Bayesian fit (which runs on a thread of its own) is waited for: its work overlaps the fit's,
    which has every core from then on (the fit, not this work, decides when the audit ends). Its
    context holds the checks and the intervals but for the Bayesian rows.

    ``policy`` (the built-in one when None) decides: the level and the interval of the bar gate,
    the thresholds, the required gates and how invalid verdicts score; the claim may only tighten
    it. The card's stated level and method are used to reproduce its figures, never to gate.

    Raises :class:`honestci.audit.errors.InputError` on bad input.
    """
    progress = as_progress(progress)
    progress("loading claim and data")
    from honestci.audit.data.claims import load_claim
    from honestci.audit.data.contests import build_claim_contests
    from honestci.audit.data.io import load_study

    # The modules of the intervals, the checks (SciPy behind them) and the Bayesian fit load on a
    # thread of their own while this one reads the data (reading holds the GIL little of the time).
    _start_in_background(_import_audit_modules, bayes)
    claim = load_claim(claim_path, allow_outside=allow_outside_data, policy=policy)
    spec, thresholds, rules = claim.spec, claim.thresholds, claim.policy
    study = load_study(claim.data_paths)
    from honestci.audit.checks.claimed import audit_claimed_figures, audit_claimed_table
    from honestci.audit.checks.composed import COMPOSED_METHOD
    from honestci.audit.checks.registry import run_checks
    from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_table

    if spec.method is not None and spec.method not in ALL_METHODS:
        raise ClaimError(
            f"Claim file {claim.path} names an unknown interval method.",
            [Problem(str(claim.path), None, "method", f"{spec.method!r} is not one of {list(ALL_METHODS)}")],
            fix="name one of the methods listed, or drop `method:` (the policy picks the gate's interval)",
        )
    # After the imports above, which load every BLAS library the audit calls.
    with single_threaded_blas():
        progress("checking the evidence for copies and look-alike names")
        from honestci.audit.checks.evidence import scan_evidence

        # Copies are merged before any contest is built: every interval and check reads the merged study.
        evidence = scan_evidence(
            study,
            policy=spec.policy,
            opponent=spec.opponent,
            judges=tuple(spec.panel or ()) or ((spec.judge,) if spec.judge else ()),
            thresholds=thresholds,
        )
        study = evidence.study

        def claim_contests(data: Study) -> tuple[ContestTable, ContestTable | None]:
            """The claim's contests of ``data`` and, with a family restriction, those before it."""
            built = build_claim_contests(
                data,
                spec.policy,
                spec.opponent,
                judge=spec.judge,
                panel=spec.panel,
                panel_rule=spec.panel_rule,
                missing_orders=rules.missing_orders,
            )
            if spec.pool is not None:
                built = _contests_in_pool(built, data, spec.pool)
            if spec.vignette_families is None:
                return built, None
            return _contests_in_families(built, data, spec.vignette_families, claim.path), built

        progress("assembling contests (design detected from the judgments)")
        contests, family_contests = claim_contests(study)
        unmerged_contests = None
        if evidence.merged:
            try:
                unmerged_contests = claim_contests(evidence.raw)[0]
            except InputError:  # the copies alone made the claim's contests buildable: compared with none
                unmerged_contests = None
        scored = contests.scores("both_orders", invalid=rules.invalid_verdicts)
        level = thresholds.confidence_level

        def interval_table(at_level: float, scored=scored, contests=contests) -> IntervalTable:
            return winrate_table(
                scored.values,
                scored.clusters,
                methods=ALL_METHODS,
                level=at_level,
                seed=seed,
                thresholds=thresholds,
                trials_per_contest=contests.trials_per_contest,
            )

        # The Bayesian fit reads only the contests: it runs on a thread of its own beside the
        # interval table and the checks (its sampler's kernels release the GIL and leave the main
        # thread a core), and is joined before what reads it (claimed figures, comparisons, gates).
        bayes_fit = None
        if bayes:
            progress("fitting the Bayesian hierarchical model (beside the intervals and the checks)")
            bayes_fit = _start_in_background(
                _fit_bayes_model, contests, spec.bar, level, seed, rules.invalid_verdicts, progress
            )
        try:
            progress("computing every interval")
            rows = list(interval_table(level).rows)
            # No check reads the Bayesian rows, the claimed-figure audit or the comparisons.
            context = AuditContext(
                claim,
                study,
                contests,
                IntervalTable("win rate", tuple(rows)),
                rules.gate_method(spec.population),
                None,
                None,
                (),
                seed=seed,
                family_contests=family_contests,
                evidence=evidence,
                unmerged_contests=unmerged_contests,
            )
            progress("running the checks")
            context.checks.update(run_checks(context))
            if bayes_fit is not None:  # the fit, not what is left here, is on the critical path
                bayes_fit.share.foreground_waits()
            if while_fitting is not None:
                while_fitting(context)
            bayes_result = None
            if bayes_fit is not None:
                bayes_result = _bayes_rows(bayes_fit.result(), rows[0], level, seed)
                rows.extend(bayes_result.interval_rows)
        finally:
            if bayes_fit is not None and not bayes_fit.future.done():
                progress("waiting for the Bayesian fit to finish")
                bayes_fit.finish()  # an error here is raised once the fit's thread is done
        intervals = IntervalTable("win rate", tuple(rows))

        claimed_audit = None
        if spec.claimed is not None:
            # The card's figures are reproduced at the card's level; the gate keeps the policy's.
            # The card's arithmetic is checked on the data as given (copies included: the card counted
            # them); whether those data can be trusted is the evidence_intact gate's question.
            stated_level = spec.claimed.level
            as_stated = intervals
            given_study, given = study, contests
            if unmerged_contests is not None:
                given_study, given = evidence.raw, unmerged_contests
                as_stated = interval_table(
                    stated_level, given.scores("both_orders", invalid=rules.invalid_verdicts), given
                )
            elif stated_level != level:
                as_stated = interval_table(stated_level)
            claimed_audit = audit_claimed_figures(spec.claimed.model_dump(exclude={"comparisons", "table"}), as_stated)
            if spec.claimed.table:
                progress("recomputing the other rows of the claimed table")
                claimed_audit = audit_claimed_table(
                    claimed_audit, _claimed_rows(claim, given_study, given, stated_level, seed)
                )
        context = replace(
            context,
            intervals=intervals,
            bayes=bayes_result,
            claimed_audit=claimed_audit,
            comparisons=_comparisons(claim, study, contests, level, bayes, seed, progress),
        )
        if context.gate_method == COMPOSED_METHOD:  # the policy gates on the composed interval
            context = replace(
                context, intervals=IntervalTable(intervals.estimand, (*intervals.rows, _composed_row(context)))
            )
        elif context.gate_method == NEW_SEED_METHOD:  # a claim about the recipe gates on a new seed
            context = replace(
                context, intervals=IntervalTable(intervals.estimand, (*intervals.rows, _new_seed_row(context)))
            )
        return context


def _import_audit_modules(bayes: bool) -> None:
    """Import the modules of the interval table and the checks and, with ``bayes``, what the
    Bayesian fit imports: its sampler (numba) and xarray, which imports dask at its first array.
    An error here is left for the step that needs the module to raise with its own message."""

    if not bayes:
        return
    import numpy as np
    import xarray as xr

    xr.Dataset({"imports": ("x", np.zeros(1))})


@dataclass(frozen=True)
class BackgroundWork:
    """Work on a thread of its own (:func:`_start_in_background`), with the cores it may use."""

    future: Future
    share: CoreShare

    def result(self) -> Any:
        """Wait for the work, giving it every core meanwhile; its value, or its error raised."""
        self.share.foreground_waits()
        return self.future.result()

    def finish(self) -> None:
        """Wait for the work to end, keeping any error of its own for :meth:`result`."""
        self.share.foreground_waits()
        self.future.exception()


def _start_in_background(function: Callable[..., Any], *args: Any) -> BackgroundWork:
    """``function(*args)`` on a thread of its own, its parallel kernels one core short while the
    caller works (:mod:`honestci.audit.stats.core_share`)."""
    share = CoreShare()

    def sharing() -> Any:
        with sharing_cores(share):
            return function(*args)

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honestci-background")
    try:
        return BackgroundWork(executor.submit(sharing), share)
    finally:
        executor.shutdown(wait=False)


def _new_seed_row(context: AuditContext) -> IntervalResult:
    """The seeds check's new-seed interval on new vignettes as a row of the interval table,
    INCONCLUSIVE with the reason when the check gives none (fewer than ``min_seeds`` seeds, or it
    could not run)."""
    from honestci.audit.checks.seeds import SeedsCheck, new_seed_row_without_interval

    check = context.checks.get("seeds")
    if isinstance(check, SeedsCheck):
        return check.interval_row()
    reason = check.reason if isinstance(check, CheckFailed) else "the seeds check did not run"
    return new_seed_row_without_interval(reason, context.claim.thresholds.confidence_level)


def _composed_row(context: AuditContext) -> IntervalResult:
    """The composed check's interval as a row of the interval table, INCONCLUSIVE without one."""
    from honestci.audit.checks.composed import COMPOSED_METHOD, COMPOSED_POPULATION, ComposedCheck

    check = context.checks.get("composed")
    if isinstance(check, ComposedCheck):
        return check.interval_row()
    reason = check.reason if isinstance(check, CheckFailed) else "needs human labels on some of the claim's contests"
    first = context.intervals.rows[0] if context.intervals is not None else None
    return IntervalResult(
        method=COMPOSED_METHOD,
        label="composed: clustered PPI++ on non-leaked vignettes, AKM hybrid when selected",
        population=COMPOSED_POPULATION,
        estimate=None,
        ci_low=None,
        ci_high=None,
        level=context.claim.thresholds.confidence_level,
        n=0 if first is None else first.n,
        n_clusters=0 if first is None else first.n_clusters,
        icc=math.nan,
        design_effect=math.nan,
        n_effective=math.nan,
        verdict=Verdict.INCONCLUSIVE,
        note=f"no composed interval: {reason}",
    )


def run_audit(
    claim_path: str | Path,
    *,
    policy: Policy | None = None,
    bayes: bool = True,
    seed: int = DEFAULT_SEED,
    allow_outside_data: bool = False,
    allow_inconclusive: bool = False,
    progress: ProgressLike = None,
    while_fitting: Callable[[], None] | None = None,
) -> AuditResult:
    """Run the audit of one claim: :func:`audit_context`, then every gate.

    ``while_fitting`` (optional) runs once the checks and the per-vignette table are done, while
    the Bayesian fit may still run (the command line imports the renderers there).

    Raises :class:`honestci.audit.errors.InputError` on bad input.
    """
    per_vignette: list[tuple[dict, ...]] = []

    def per_vignette_table(context: AuditContext) -> None:
        assert context.contests is not None  # audit_context assembles them
        scored = context.contests.scores("both_orders", invalid=context.claim.policy.invalid_verdicts)
        per_vignette.append(
            _per_vignette(
                scored, context.study, context.claim.thresholds.confidence_level, context.contests.trials_per_contest
            )
        )
        if while_fitting is not None:
            while_fitting()

    context = audit_context(
        claim_path,
        policy=policy,
        bayes=bayes,
        seed=seed,
        allow_outside_data=allow_outside_data,
        progress=progress,
        while_fitting=per_vignette_table,  # the report's per-vignette table, beside the Bayesian fit
    )
    from honestci.audit.gate_registry import evidence_given, run_gates

    claim, contests, intervals, bayes_result = context.claim, context.contests, context.intervals, context.bayes
    # audit_context always assembles both; only the training pipeline's preflight context lacks them.
    assert contests is not None and intervals is not None
    spec, rules = claim.spec, claim.policy
    scored = contests.scores("both_orders", invalid=rules.invalid_verdicts)
    # --no-bayes is the auditor's choice on the command line: the sampler's gate is then not asked for.
    required = tuple(g for g in rules.required_gates if bayes or g != "sampler_converged") + tuple(
        gate for gate in evidence_given(context) if gate not in rules.required_gates
    )
    return AuditResult(
        claim_name=spec.name,
        claim_path=str(claim.path),
        policy=spec.policy,
        opponent=spec.opponent,
        judge=contests.judge,
        bar=spec.bar,
        population=spec.population,
        gate_method=context.gate_method,
        intervals=intervals,
        n_contests=int(len(scored.values)),
        n_invalid=int(contests.n_invalid),
        dropped=dict(contests.dropped),
        design=contests.design,
        design_note=contests.design_note,
        panel=contests.panel,
        panel_rule=contests.panel_rule,
        gates=run_gates(context),
        required_gates=required,
        claimed=spec.claimed.model_dump() if spec.claimed else None,
        claimed_audit=context.claimed_audit,
        comparisons=context.comparisons,
        bayes_summary=None if bayes_result is None else _bayes_summary(bayes_result),
        per_vignette=per_vignette[0],
        sections=tuple(result.report_section().to_dict() for result in context.checks.values() if result is not None),
        provenance=_provenance(claim, context.study, seed),
        audit_policy={
            "name": rules.name,
            "sha256": rules.sha256,
            "confidence_level": claim.thresholds.confidence_level,
            "invalid_verdicts": rules.invalid_verdicts,
            "deviations": list(rules.deviations()),
        },
        claim_method=spec.method,
        allow_inconclusive=allow_inconclusive,
        posterior=None if bayes_result is None else bayes_result.result.idata,
    )


def _bayes_summary(bayes: BayesCheck) -> dict:
    """The Bayesian fit's sampler, diagnostics and headline posterior figures for the report."""
    r, d = bayes.result, bayes.result.diagnostics
    out = {
        "sampler": r.sampler,
        "parameterization": r.parameterization,
        "prior_sigma": r.prior,
        "seed": r.seed,
        "chains": d.chains,
        "draws": d.draws,
        "tune": d.tune,
        "rhat_max": d.rhat_max,
        "ess_bulk_min": d.ess_bulk_min,
        "ess_tail_min": d.ess_tail_min,
        "divergences": d.divergences,
        "converged": r.converged,
        "estimand": "contest score (both orders), equal vignette weight",
        "dispersion_phi": r.dispersion,
        "ppc_groups_flagged": None if r.ppc is None else int(r.ppc.flagged.sum()),
        "ppc_groups": None if r.ppc is None else int(r.ppc.flagged.size),
        # The check's table as the gate read it, for the report's posterior predictive plot.
        "ppc": None
        if r.ppc is None
        else {"alpha": r.ppc.alpha, "level": r.level, "groups": r.ppc.to_frame().to_dict("records")},
        "withheld": r.withheld or None,
        "message": r.message,
        "runtime_seconds": r.runtime_seconds,
    }
    for population, summary in (("these_vignettes", r.winrate_these), ("new_vignettes", r.winrate_new)):
        if summary is not None:
            out[f"p_above_bar_{population}"] = summary.p_above_bar
    if r.sigma is not None:
        out["sigma_between_vignettes_mean"] = r.sigma.mean
    if r.order_effect_new is not None:
        out["order_effect_mean"] = r.order_effect_new.mean
    for population, values in (r.winrate_quantiles or {}).items():
        out[f"posterior_quantiles_{population}"] = list(values)
    if r.idata is not None:
        out["posterior_file"] = POSTERIOR_FILE
    return out


def _fit_bayes_model(
    contests: ContestTable, bar: float, level: float, seed: int, invalid: str, progress: ProgressLike = None
) -> BayesWinRateResult:
    """The Bayesian hierarchical fit of the claim's contest scores (:func:`audit_context`)."""
    from honestci.audit.stats.bayesian.hierarchical import fit_contest_scores_hierarchical

    # The contest scores every interval reads, invalid verdicts scored as the audit policy says:
    # the Bayesian figures are then the same estimands (equal-weight contest-score rates).
    scored = contests.scores("both_orders", invalid=invalid)
    return fit_contest_scores_hierarchical(
        scored.clusters,
        scored.values,
        run=scored.frame["run"].to_numpy(),
        bar=bar,
        level=level,
        seed=seed,
        trials_per_contest=contests.trials_per_contest,
        progress=progress,
    )


def _bayes_rows(result: BayesWinRateResult, reference: IntervalResult, level: float, seed: int) -> BayesCheck:
    """The fit's two interval rows (these and new vignettes), with ``reference``'s n, G and design effect."""
    common: dict[str, Any] = dict(
        level=level,
        n=reference.n,
        n_clusters=reference.n_clusters,
        icc=reference.icc,
        design_effect=reference.design_effect,
        n_effective=reference.n_effective,
        seed=seed,
    )
    rows = []
    for population, summary in (("these_vignettes", result.winrate_these), ("new_vignettes", result.winrate_new)):
        label = "Bayesian hierarchical (posterior median, equal-tailed)"
        if summary is None:  # not converged, or withheld by the posterior predictive check
            rows.append(
                IntervalResult(
                    "bayes_hierarchical",
                    label,
                    population,
                    None,
                    None,
                    None,
                    verdict=Verdict.INCONCLUSIVE,
                    note=result.message,
                    **common,
                )
            )
        else:
            rows.append(
                IntervalResult(
                    "bayes_hierarchical",
                    label,
                    population,
                    summary.median,
                    summary.lower,
                    summary.upper,
                    note=f"P(win rate > bar) = {summary.p_above_bar:.3f}; {result.sampler}, sigma ~ {result.prior}",
                    **common,
                )
            )
    return BayesCheck(result, tuple(rows))
