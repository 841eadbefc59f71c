"""Seeded simulation study of the coverage of every win-rate interval.

Design (DESIGN.md / issue "win-rate inference core"): G vignettes ∈ {6, 12, 30}, ICC of the contest
score ∈ {0, 0.1, 0.3}, true win rate ∈ {0.6, 0.8}, ``per_vignette`` contests per vignette. Each
vignette has a win probability p_g ~ Beta(μa, (1−μ)a); each contest's two judged orders are
Bernoulli(p_g) and its score is their mean (0, ½, 1). The score ICC is then 2/(a + 2), so
a = 2/ICC − 2 (ICC = 0: p_g = μ for every vignette).

Truths: *new vignettes* μ; *these vignettes* the mean of the drawn p_g. Clustered intervals are
scored against μ, the stratified interval against the these-vignettes truth, iid intervals against
both (they are usually read as the former).

Run: ``honestci coverage-study --reps 1000 --processes 2 --out docs/coverage.md``. Resampling
intervals use :data:`STUDY_BOOTSTRAP_DRAWS` draws here (the audit uses more).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from honestci.audit.policy import THRESHOLDS
from honestci.audit.stats.winrate import ALL_METHODS, IID_METHODS, method_label, winrate_ci

GRID_CLUSTERS = (6, 12, 30)
GRID_ICC = (0.0, 0.1, 0.3)
GRID_RATE = (0.6, 0.8)
#: Methods whose intervals the docs call honest for their population, by population.
HONEST_METHODS = ("stratified", "cr2_logit")


def simulate_scores(
    rng: np.random.Generator, n_clusters: int, per_vignette: int, rate: float, icc: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Scores, vignette labels and the these-vignettes truth for one replication."""
    if icc == 0:
        p = np.full(n_clusters, rate)
    else:
        concentration = 2.0 / icc - 2.0
        p = rng.beta(rate * concentration, (1 - rate) * concentration, n_clusters)
    clusters = np.repeat(np.arange(n_clusters), per_vignette)
    wins = rng.random((2, clusters.size)) < p[clusters]
    return wins.mean(axis=0), clusters, float(p.mean())


@dataclass(frozen=True)
class CoverageStudy:
    """Coverage of every method in every cell; :meth:`to_frame` is the canonical table."""

    rows: tuple[dict, ...]
    reps: int
    per_vignette: int
    seed: int
    level: float

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.rows))

    def honest_at_or_above(self, n_clusters: int, tolerance: float = 0.015) -> pd.DataFrame:
        """Rows of the honest methods at G >= ``n_clusters`` whose coverage misses level ± tolerance."""
        frame = self.to_frame()
        honest = frame[frame["method"].isin(HONEST_METHODS) & (frame["n_clusters"] >= n_clusters)]
        return honest[(honest["coverage"] - self.level).abs() > tolerance]

    def honest_from(self, group: pd.DataFrame, tolerance: float = 0.015) -> int | None:
        """Smallest G of the grid from which every cell of ``group`` (one method and truth) is
        within level ± tolerance, or None."""
        ok = group.groupby("n_clusters")["coverage"].apply(lambda c: bool(((c - self.level).abs() <= tolerance).all()))
        honest_from = None
        for n_clusters in sorted(ok.index, reverse=True):
            if not ok[n_clusters]:
                break
            honest_from = int(n_clusters)
        return honest_from

    def to_markdown(self) -> str:
        frame = self.to_frame()
        mc_se = math.sqrt(self.level * (1 - self.level) / self.reps)
        lines = [
            "# Coverage of the win-rate intervals",
            "",
            f"Produced by `honestci coverage-study --reps {self.reps} --seed {self.seed}` "
            f"({self.per_vignette} contests per vignette, nominal {self.level:.0%}; Monte Carlo SE of a "
            f"coverage near {self.level:.0%}: {100 * mc_se:.2f} points). See `audit/coverage_study.py` "
            "for the data-generating process.",
            "",
            "Each cell: coverage in % (mean interval width). Intervals that report INCONCLUSIVE (fewer than "
            f"{THRESHOLDS.min_clusters} vignettes, no variance) count as not covering.",
            "",
        ]
        frame = frame.assign(
            cell=frame.apply(lambda r: f"{100 * r['coverage']:.1f} ({r['mean_width']:.3f})", axis=1),
            condition=frame.apply(lambda r: f"G={r['n_clusters']}, ICC={r['icc']}, p={r['rate']}", axis=1),
        )
        for target, group in frame.groupby("truth", sort=False):
            lines += [f"## Against the {target.replace('_', ' ')} win rate", ""]
            table = group.pivot(index="condition", columns="label", values="cell")
            table = table.reindex(group["condition"].drop_duplicates())
            lines.append("| condition | " + " | ".join(table.columns) + " |")
            lines.append("|---|" + "---|" * len(table.columns))
            for condition, values in table.iterrows():
                lines.append(f"| {condition} | " + " | ".join(str(v) for v in values) + " |")
            lines.append("")
        new = frame[frame["truth"] == "new_vignettes"]
        low_table = (
            new.assign(cell=(100 * new["low_above_truth"]).map("{:.1f}".format))
            .pivot(index="condition", columns="label", values="cell")
            .reindex(new["condition"].drop_duplicates())
        )
        lines += [
            "## CI-low above the new-vignettes truth",
            "",
            f"A bar gate reads the CI-low, so the error that matters to it is one-sided: the share of "
            f"replications (%) whose CI-low lies above the truth; nominal {50 * (1 - self.level):.1f}%.",
            "",
            "| condition | " + " | ".join(low_table.columns) + " |",
            "|---|" + "---|" * len(low_table.columns),
        ]
        lines += [f"| {condition} | " + " | ".join(values) + " |" for condition, values in low_table.iterrows()]
        lines += [""]
        lines += [
            "## Where each interval is honest",
            "",
            f"Smallest G from which every condition on the grid covers within {self.level:.0%} ± 1.5 "
            "points (for that G and every larger G on the grid):",
            "",
            "| method | population | honest from | worst coverage at G ≥ 12 |",
            "|---|---|---|---|",
        ]
        for (label, truth), group in frame.groupby(["label", "truth"], sort=False):
            honest_from = self.honest_from(group)
            worst = group[group["n_clusters"] >= 12]["coverage"]
            worst_text = f"{100 * worst.loc[(worst - self.level).abs().idxmax()]:.1f}%" if len(worst) else "–"
            lines.append(
                f"| {label} | {truth.replace('_', ' ')} | "
                f"{'G = ' + str(honest_from) if honest_from else 'not on this grid'} | {worst_text} |"
            )
        misses = self.honest_at_or_above(12)
        lines += ["", "## Verdict", ""]
        honest = "; ".join(
            f"{method_label(m)} for {'these' if m == 'stratified' else 'new'} vignettes" for m in HONEST_METHODS
        )
        lines.append(
            f"The intervals called honest are {honest} (the new-vignette one is what the bar gate reads). "
            + (
                f"At G ≥ 12 each covers within {self.level:.0%} ± 1.5 points in every condition."
                if misses.empty
                else "At G ≥ 12 these of their cells miss 95% ± 1.5 points: "
                + "; ".join(
                    f"{r.label} at G={r.n_clusters}, ICC={r.icc}, p={r.rate}: {100 * r.coverage:.1f}%"
                    for r in misses.itertuples()
                )
                + "."
            )
        )
        lines += [
            "",
            "The symmetric t intervals (CR1, CR2, wild bootstrap) under-cover where vignette win "
            "probabilities pile up near 1 (ICC 0.3, p 0.8) until G = 30: the mean of a few skewed "
            "vignette rates is skewed, and its CI-low then sits above the truth too often. On the "
            "logit scale the same CR2 standard error gives an asymmetric interval that keeps its coverage there "
            "and cuts that one-sided excess (table above). "
            "Read the G = 6 rows before trusting a six-vignette claim: iid intervals under-cover badly "
            "whenever ICC > 0, and the pairs cluster bootstrap under-covers at small G.",
        ]
        return "\n".join(lines) + "\n"


#: Resampling draws per interval in the study (the audit itself uses more; coverage of the
#: bootstrap intervals barely depends on B beyond a few hundred draws).
STUDY_BOOTSTRAP_DRAWS = 999


def _run_cell(args) -> list[dict]:
    (n_clusters, icc, rate), child, reps, per_vignette, level, methods = args
    rng = np.random.default_rng(child)
    hits = {(m, t): 0 for m in methods for t in ("new_vignettes", "these_vignettes")}
    low_above = dict.fromkeys(hits, 0)  # the one-sided error a CI-low gate risks
    widths = {m: 0.0 for m in methods}
    reported = {m: 0 for m in methods}
    for _ in range(reps):
        scores, clusters, these_truth = simulate_scores(rng, n_clusters, per_vignette, rate, icc)
        for method in methods:
            row = winrate_ci(
                scores,
                clusters,
                method=method,
                level=level,
                seed=int(rng.integers(2**31)),
                bootstrap_draws=STUDY_BOOTSTRAP_DRAWS,
            )
            if row.bounds is None:
                continue
            low, high = row.bounds
            widths[method] += high - low
            reported[method] += 1
            for truth_name, truth in (("new_vignettes", rate), ("these_vignettes", these_truth)):
                hits[(method, truth_name)] += low <= truth <= high
                low_above[(method, truth_name)] += low > truth
    rows = []
    for method in methods:
        targets = (
            ("new_vignettes", "these_vignettes")
            if method in IID_METHODS
            else ("these_vignettes",)
            if method == "stratified"
            else ("new_vignettes",)
        )
        for truth_name in targets:
            rows.append(
                {
                    "n_clusters": n_clusters,
                    "icc": icc,
                    "rate": rate,
                    "method": method,
                    "label": method_label(method),
                    "truth": truth_name,
                    "coverage": hits[(method, truth_name)] / reps,
                    "low_above_truth": low_above[(method, truth_name)] / reps,
                    "mean_width": widths[method] / max(reported[method], 1),
                    "share_reported": reported[method] / reps,
                    "reps": reps,
                    "cell_seed": int(child.generate_state(1)[0]),
                }
            )
    return rows


def run_coverage_study(
    reps: int = 1000,
    per_vignette: int = 40,
    seed: int = 20261129,
    level: float = 0.95,
    methods=ALL_METHODS,
    clusters_grid=GRID_CLUSTERS,
    icc_grid=GRID_ICC,
    rate_grid=GRID_RATE,
    processes: int = 1,
    progress=None,
) -> CoverageStudy:
    """Run the study; each cell has its own child seed of ``seed``, so the result does not depend
    on ``processes``."""
    cells = list(itertools.product(clusters_grid, icc_grid, rate_grid))
    children = np.random.SeedSequence(seed).spawn(len(cells))
    tasks = [(cell, child, reps, per_vignette, level, tuple(methods)) for cell, child in zip(cells, children)]
    rows: list[dict] = []
    if processes > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(processes) as pool:
            for index, cell_rows in enumerate(pool.imap(_run_cell, tasks)):
                rows.extend(cell_rows)
                if progress:
                    progress(f"cell {index + 1}/{len(cells)} done")
    else:
        for index, task in enumerate(tasks):
            rows.extend(_run_cell(task))
            if progress:
                progress(f"cell {index + 1}/{len(cells)} done")
    return CoverageStudy(tuple(rows), reps, per_vignette, seed, level)
