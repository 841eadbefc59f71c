"""The gate candidates' power on the non-informative cells of the full coverage grid (issue 31).

Runs exactly what ``run_coverage_study(grid=NONINFORMATIVE_GRID, methods=GATE_CANDIDATES)`` runs
(each cell's child seed is ``SeedSequence(seed).spawn(n_cells)[i]`` of its index in the grid), but
cell by cell, writing the CSV after every cell so that a stopped run keeps what it measured. Cells
with rates 0.6 and 0.95 run first (the extremes), then 0.8 and 0.9.

    python bench/coverage_power.py --reps 300 --seed 20261205 --out docs/coverage-power.csv
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from honestci.audit.stats.design.coverage_study import FULL_GRID, GATE_CANDIDATES, Grid, _run_cell

#: The full grid without the informative size laws (the cells the power goal is stated for).
NONINFORMATIVE_GRID = Grid(
    FULL_GRID.clusters, ("balanced", "unbalanced"), FULL_GRID.sd, FULL_GRID.rate, FULL_GRID.tie_halfwidth
)


GATE = "bayes_logit_normal"
#: The goal (issue 31): the gate's raw power at least this share of the best candidate's
#: size-adjusted power, by G (G = 6: 0.5; G >= 12: 0.75); two-sided coverage 95 +- 1.5 points.
GOAL = {6: 0.5}
GOAL_LARGE_G = 0.75
COVERAGE_WINDOW = 0.015


def per_cell(csv: str) -> pd.DataFrame:
    """One row per cell: the gate's raw power, the best candidate's size-adjusted power and their
    ratio (with its Monte Carlo SE, the two powers' binomial SEs combined as if independent), the
    gate's two-sided coverage and its two one-sided misses (upper: reported intervals whose CI-high
    lies below the truth = share reported - coverage - CI-low above the truth)."""
    frame = pd.read_csv(csv)
    keys = ["n_clusters", "sizes", "sd", "rate", "tie_halfwidth"]
    gate = frame[frame["method"] == GATE].set_index(keys)
    best = frame.loc[frame.groupby(keys)["power_size_adjusted"].idxmax()].set_index(keys)
    out = pd.DataFrame(
        {
            "ties": gate["ties"],
            "gate_power": gate["power"],
            "gate_power_adjusted": gate["power_size_adjusted"],
            "best_adjusted": best["power_size_adjusted"],
            "best_method": best["method"],
            "coverage": gate["coverage"],
            "low_above": gate["low_above_truth"],
            "high_below": gate["share_reported"] - gate["coverage"] - gate["low_above_truth"],
            "reps": gate["reps"],
        }
    ).reset_index()
    reps = out["reps"]
    out["ratio"] = out["gate_power"] / out["best_adjusted"]
    var = lambda p: p * (1 - p) / reps  # noqa: E731
    out["ratio_se"] = out["ratio"] * np.sqrt(
        var(out["gate_power"]) / out["gate_power"].clip(lower=1 / reps) ** 2
        + var(out["best_adjusted"]) / out["best_adjusted"] ** 2
    )
    out["goal"] = out["n_clusters"].map(lambda g: GOAL.get(g, GOAL_LARGE_G))
    return out


def summarise(csv: str) -> None:
    cells = per_cell(csv)
    reps = int(cells["reps"].iloc[0])
    mc_two = np.sqrt(0.95 * 0.05 / reps)
    print(f"{len(cells)} cells, {reps} reps; coverage MC-SE {100 * mc_two:.2f} points")
    print(
        "| G | sizes | cells | ratio min | ratio median | below goal | below goal by > 2 MC-SE | gate raw power median | best size-adj. median |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (g, sizes), group in cells.groupby(["n_clusters", "sizes"]):
        below = group["ratio"] < group["goal"]
        clear = group["ratio"] + 2 * group["ratio_se"] < group["goal"]
        print(
            f"| {g} | {sizes} | {len(group)} | {group['ratio'].min():.2f} | {group['ratio'].median():.2f} | "
            f"{below.sum()} | {clear.sum()} | {100 * group['gate_power'].median():.0f}% | {100 * group['best_adjusted'].median():.0f}% |"
        )
    print()
    print(
        "| G | coverage min-max | median | outside 95 +- 1.5 | outside by > 2 MC-SE | CI-low above truth max | CI-high below truth max |"
    )
    print("|---|---|---|---|---|---|---|")
    for g, group in cells.groupby("n_clusters"):
        dev = (group["coverage"] - 0.95).abs()
        print(
            f"| {g} | {100 * group['coverage'].min():.1f}-{100 * group['coverage'].max():.1f} | "
            f"{100 * group['coverage'].median():.1f} | {(dev > COVERAGE_WINDOW).sum()}/{len(group)} | "
            f"{(dev > COVERAGE_WINDOW + 2 * mc_two).sum()} | {100 * group['low_above'].max():.1f}% | {100 * group['high_below'].max():.1f}% |"
        )
    print()
    print("best candidate by size-adjusted power (cells):", cells["best_method"].value_counts().to_dict())
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(cells.drop(columns=["reps"]).round(3).to_string(index=False))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261205)
    parser.add_argument("--out", default="docs/coverage-power.csv")
    parser.add_argument("--summarise", action="store_true", help="print the summary tables of --out and exit")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.out)
        return
    cells = NONINFORMATIVE_GRID.cells()
    children = np.random.SeedSequence(args.seed).spawn(len(cells))
    order = sorted(range(len(cells)), key=lambda i: (cells[i][3] not in (0.6, 0.95), i))
    rows: list[dict] = []
    start = time.time()
    for done, i in enumerate(order, 1):
        tic = time.time()
        rows.extend(_run_cell((cells[i], children[i], args.reps, 0.95, GATE_CANDIDATES)))
        pd.DataFrame(rows).to_csv(args.out, index=False)
        print(f"{done}/{len(cells)} {cells[i]} {time.time() - tic:.1f}s total {time.time() - start:.0f}s", flush=True)
    print(f"wall {time.time() - start:.0f}s")


if __name__ == "__main__":
    main()
