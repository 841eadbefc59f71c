"""Training seeds as a level of the model: each seed's rate, the between-seed variance and a new seed.

When the claim lists ``seeds:`` (independent training seeds of the claimed recipe, the policy among
them, each judged against the claim's opponent by the claim's judge), this check reports:

- each seed's win rate with its CR2 interval clustered by vignette
  (:func:`honestci.audit.stats.selection.systems.k_system_winrates`, seeds as systems);
- the between-seed variance component and the win rate of a **new seed** of the recipe, on these
  vignettes and on new vignettes (:func:`honestci.audit.stats.selection.seeds.seed_decomposition`, on the
  vignettes every seed was judged on);
- when the policy is the best of the K seeds on these contests, the card reports a selected maximum:
  Andrews–Kitagawa–McCloskey inference on the best seed (:func:`best_of_k_inference` on the K
  rates and their CR2 covariance: logit scale, few-cluster t scaling).

The claim's ``policy`` must be one of the seeds (the seed the card reports). A claim about the
recipe (``population: new_seeds``, where the policy allows it) is gated on the new-seed interval on
new vignettes (:meth:`SeedsCheck.interval_row`); with fewer than the policy's ``min_seeds`` seeds no
new-seed interval is given (the between-seed variance would rest on one degree of freedom; see
docs/methods.md "Seeds and runs") and that gate is INCONCLUSIVE. A claim about one checkpoint has its
bar gate judge the policy's own seed; when the policy is the observed best of the seeds, the
``winners_curse`` gate reads the best seed's AKM hybrid interval against the bar and is required
(:func:`honestci.audit.gates.gate_best_seed_selection`).

Validated against: tests/test_seeds.py (the section's figures equal the stats functions called
directly on the seeds' contests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.checks.selection import WinnerInference, best_of_k_inference
from honestci.audit.checks.systems import claim_system_scores
from honestci.audit.errors import EstimationError
from honestci.audit.policy import NEW_SEED_METHOD, Verdict
from honestci.audit.stats.intervals import IntervalResult
from honestci.audit.stats.selection.seeds import SeedDecomposition, seed_decomposition, seed_table
from honestci.audit.stats.selection.systems import KSystemResult, k_system_winrates

#: The population of the new-seed interval as the bar gate reads it (a new seed, new vignettes).
NEW_SEED_POPULATION = "new_seeds"
NEW_SEED_LABEL = (
    "new-seed interval: a new training seed of the recipe on new vignettes (seed x vignette, Satterthwaite)"
)


@dataclass(frozen=True)
class SeedsCheck:
    """Per-seed win rates, the new-seed decomposition (None below ``min_seeds``) and the best seed."""

    policy: str
    opponent: str
    level: float
    min_seeds: int
    winrates: KSystemResult
    #: Vignettes every seed was judged on (the decomposition's G).
    n_shared_vignettes: int
    decomposition: SeedDecomposition | None
    #: AKM inference on the best seed when the policy is it (None otherwise).
    selection: WinnerInference | None
    #: The claim's population: ``new_seeds`` (a claim about the recipe) has its bar gate read the
    #: new-seed interval; any other, the policy's own seed.
    population: str = "new_vignettes"

    def table(self) -> tuple[dict, ...]:
        """One row per seed: its win rate and CR2 interval, and whether it is the claim's policy."""
        rates = self.winrates.to_frame()
        return tuple(
            {
                "seed": str(row.system),
                "policy": str(row.system) == self.policy,
                "G": int(row.n_vignettes),
                "win_rate": float(row.estimate),
                "ci_low": float(row.ci_low),
                "ci_high": float(row.ci_high),
            }
            for row in rates.sort_values("system").itertuples()
        )

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.table()))

    def interval_row(self) -> IntervalResult:
        """The new-seed interval on new vignettes as the bar gate's row (population ``new_seeds``);
        INCONCLUSIVE with its reason below ``min_seeds``."""
        d = self.decomposition
        n = int(self.winrates.to_frame()["n_contests"].sum())
        if d is None:
            return new_seed_row_without_interval(
                f"{len(self.winrates.systems)} seeds is fewer than the policy's min_seeds = {self.min_seeds}: "
                "the between-seed variance cannot be estimated honestly from so few",
                self.level,
                n=n,
                n_clusters=self.n_shared_vignettes,
            )
        return _new_seed_row(
            d.level,
            n,
            d.n_vignettes,
            estimate=d.estimate,
            ci_low=d.ci_new[0],
            ci_high=d.ci_new[1],
            se=d.se_new,
            df=d.df_new,
            note=f"{d.n_seeds} seeds on {d.n_vignettes} shared vignettes",
            details={"seeds": list(d.seeds), "seed_means": list(d.seed_means)},
        )

    def summary_lines(self) -> list[str]:
        k = len(self.winrates.systems)
        pct = f"{self.level:.0%}"
        lines = [
            f"{k} training seeds of the recipe against {self.opponent}; each seed's rate weights its vignettes "
            f"equally, {pct} CR2 interval clustered by vignette; the claim's policy is {self.policy}"
        ]
        d = self.decomposition
        if d is None:
            lines.append(
                f"no new-seed interval: {k} seeds is fewer than the policy's min_seeds = {self.min_seeds}; "
                "the between-seed variance cannot be estimated honestly from so few (INCONCLUSIVE for a claim "
                "about the recipe)"
            )
        else:
            low, high = d.var_seed_ci
            lines += [
                f"between seeds (on {d.n_vignettes} shared vignettes): sd {d.sd_seed:.3f} of the rate, variance "
                f"{d.var_seed:.5f}, {pct} CI [{low:.5f}, {high:.5f}] (Ting et al. 1990)",
                f"a new seed on new vignettes: {d.estimate:.3f}, {pct} CI [{d.ci_new[0]:.3f}, {d.ci_new[1]:.3f}] "
                f"(seed + vignette − cell mean squares, Satterthwaite df {d.df_new:.1f}); the interval for a claim "
                "about the recipe",
                f"a new seed on these vignettes: {d.estimate:.3f}, {pct} CI [{d.ci_these[0]:.3f}, "
                f"{d.ci_these[1]:.3f}] (t on the {k} seed means, df {d.df_these:.0f})",
            ]
        if self.selection is not None:
            s = self.selection
            lines.append(
                f"the policy is the best of the {k} seeds: its rate {s.naive_estimate:.3f} is a selected maximum; "
                f"corrected for the selection (AKM hybrid): {s.hybrid_estimate:.3f} "
                f"[{s.hybrid_ci[0]:.3f}, {s.hybrid_ci[1]:.3f}]"
            )
        if self.population == NEW_SEED_POPULATION:
            lines.append(
                "the claim is about the recipe (population new_seeds): the bar gate reads the new-seed interval "
                "on new vignettes above, not the policy's own seed"
            )
        else:
            lines.append(
                "the bar gate judges the policy's own seed; the winners_curse gate reads the selection-corrected "
                "interval"
                if self.selection is not None
                else "the bar gate judges the policy's own seed (not the best seed, so no selection to correct)"
            )
        return lines

    def report_section(self) -> ReportSection:
        return ReportSection(
            "seeds", "Training seeds: per-seed rates and a new seed", tuple(self.summary_lines()), self.table()
        )


def _new_seed_row(level: float, n: int, n_clusters: int, **figures: Any) -> IntervalResult:
    """A row of the new-seed interval (population ``new_seeds``) with ``figures`` (estimate, bounds, ...)."""
    nan = math.nan
    return IntervalResult(
        NEW_SEED_METHOD, NEW_SEED_LABEL, NEW_SEED_POPULATION, level=level, n=n, n_clusters=n_clusters,
        icc=nan, design_effect=nan, n_effective=nan, **figures,
    )  # fmt: skip


def new_seed_row_without_interval(reason: str, level: float, n: int = 0, n_clusters: int = 0) -> IntervalResult:
    """The bar gate's new-seed row when there is no new-seed interval: INCONCLUSIVE, ``reason`` its note."""
    return _new_seed_row(
        level,
        n,
        n_clusters,
        estimate=None,
        ci_low=None,
        ci_high=None,
        verdict=Verdict.INCONCLUSIVE,
        note=f"no new-seed interval: {reason}",
    )


def seeds_check(context: AuditContext) -> SeedsCheck | None:
    """The seeds analysis (module doc); None when the claim lists no ``seeds`` or before anything is judged."""
    spec, contests = context.claim.spec, context.contests
    if contests is None or not spec.seeds:
        return None
    if contests.panel:
        raise EstimationError(
            f"the seeds analysis of a panel ({', '.join(contests.panel)}) is not implemented; audit the seeds per judge"
        )
    thresholds = context.claim.thresholds
    scores = claim_system_scores(context, spec.seeds, "seed")
    level = thresholds.confidence_level
    winrates = k_system_winrates(
        scores, opponent=spec.opponent, level=level, rng=context.seed, min_clusters=thresholds.min_clusters
    )
    cells, names, shared = seed_table(scores.rename(columns={"system": "seed"}))
    decomposition = None
    if len(names) >= thresholds.min_seeds:
        if len(shared) < thresholds.min_clusters:
            raise EstimationError(
                f"the seeds share {len(shared)} vignette(s), fewer than min_clusters = {thresholds.min_clusters}: "
                "no new-seed interval can be formed"
            )
        decomposition = seed_decomposition(cells, names, level)
    frame = winrates.to_frame()
    selection = None
    if str(frame["system"].iloc[int(np.argmax(frame["estimate"].to_numpy(float)))]) == spec.policy:
        selection = best_of_k_inference(winrates, level=level, seed=context.seed)
    return SeedsCheck(
        policy=spec.policy,
        opponent=spec.opponent,
        level=level,
        min_seeds=thresholds.min_seeds,
        winrates=winrates,
        n_shared_vignettes=len(shared),
        decomposition=decomposition,
        selection=selection,
        population=spec.population,
    )
