"""Writes the seeded synthetic inputs of the R reference values (run once; outputs are committed).

Run from the repository root: python tests/reference/make_inputs.py
Then: cd tests/reference && Rscript cluster_robust_reference.R
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent


def contest_scores(rng: np.random.Generator, p_win: np.ndarray, p_tie: float) -> np.ndarray:
    """Scores in {0, 0.5, 1}: a tie with probability p_tie, else a win with probability p_win."""
    tie = rng.random(p_win.size) < p_tie
    win = rng.random(p_win.size) < p_win
    return np.where(tie, 0.5, win.astype(float))


def winrate_order(rng: np.random.Generator) -> pd.DataFrame:
    """(a) 6 vignettes x ~240 verdicts, score in {0, 0.5, 1}, order +0.5 (policy first) / -0.5."""
    sizes = np.array([236, 244, 240, 238, 242, 240])
    vignette = np.repeat(np.arange(6), sizes)
    order = rng.permutation(np.resize([0.5, -0.5], vignette.size))
    effect = rng.normal(0.0, 0.6, size=6)[vignette]
    p_win = 1 / (1 + np.exp(-(0.3 + effect + 0.5 * order)))
    return pd.DataFrame({"vignette": vignette, "order": order, "y": contest_scores(rng, p_win, 0.15)})


def paired_systems(rng: np.random.Generator) -> pd.DataFrame:
    """(b) two systems' contest scores on the same items, 8 vignettes of unequal size."""
    sizes = np.array([30, 45, 60, 38, 52, 41, 66, 35])
    vignette = np.repeat(np.arange(8), sizes)
    effect = rng.normal(0.0, 0.5, size=8)[vignette]
    p_a = 1 / (1 + np.exp(-(0.4 + effect)))
    p_b = 1 / (1 + np.exp(-(0.1 + 0.8 * effect + rng.normal(0, 0.3, size=8)[vignette])))
    return pd.DataFrame(
        {
            "vignette": vignette,
            "item": np.arange(vignette.size),
            "score_a": contest_scores(rng, p_a, 0.2),
            "score_b": contest_scores(rng, p_b, 0.2),
        }
    )


def unequal_clusters(rng: np.random.Generator) -> pd.DataFrame:
    """(c) G = 12 clusters of sizes 5..80, a continuous and a binary covariate, continuous y."""
    sizes = np.array([5, 80, 12, 47, 23, 66, 8, 35, 71, 17, 54, 29])
    cluster = np.repeat(np.arange(12), sizes)
    x = rng.normal(0, 1, cluster.size) + rng.normal(0, 1, 12)[cluster]
    z = (rng.random(cluster.size) < 0.4).astype(float)
    y = 0.5 + 0.3 * x - 0.2 * z + rng.normal(0, 0.7, 12)[cluster] + rng.normal(0, 1, cluster.size)
    return pd.DataFrame({"cluster": cluster, "x": x.round(6), "z": z, "y": y.round(6)})


def balanced_icc(rng: np.random.Generator) -> pd.DataFrame:
    """(d) 10 clusters x 20 scores in {0, 0.5, 1} with a clear cluster effect, for the ICC."""
    cluster = np.repeat(np.arange(10), 20)
    p_win = 1 / (1 + np.exp(-rng.normal(0.2, 1.0, 10)[cluster]))
    return pd.DataFrame({"cluster": cluster, "y": contest_scores(rng, p_win, 0.2)})


if __name__ == "__main__":
    rng = np.random.default_rng(20240611)
    winrate_order(rng).to_csv(HERE / "input_winrate_order.csv", index=False)
    paired_systems(rng).to_csv(HERE / "input_paired_systems.csv", index=False)
    unequal_clusters(rng).to_csv(HERE / "input_unequal_clusters.csv", index=False)
    balanced_icc(rng).to_csv(HERE / "input_balanced_icc.csv", index=False)
