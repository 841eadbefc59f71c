"""Training seeds (or independent eval runs) as a level of the model: the win rate of a new seed.

K seeds of one training recipe are each judged against the opponent on the same G vignettes. With
ȳ_sg the mean contest score of seed s on vignette g (each vignette weighted equally,
:mod:`honestci.audit.stats.estimands`), the crossed random-effects model

    ȳ_sg = μ + a_s + b_g + e_sg,  a_s ~ (0, σ²_seed), b_g ~ (0, σ²_vignette), e_sg ~ (0, σ²_e)

(e_sg holds the seed × vignette interaction and the contests' sampling noise) gives the two-way
ANOVA mean squares (one observation per cell; Searle, Casella & McCulloch 1992, §4.7)

    MS_seed = G Σ_s (ȳ_s· − ȳ··)²/(K − 1),   E = σ²_e + G σ²_seed
    MS_vig  = K Σ_g (ȳ_·g − ȳ··)²/(G − 1),   E = σ²_e + K σ²_vignette
    MS_e    = Σ_sg (ȳ_sg − ȳ_s· − ȳ_·g + ȳ··)²/((K − 1)(G − 1)),   E = σ²_e.

The grand mean θ̂ = ȳ·· estimates two populations:

- **a new seed on these vignettes**, μ + (1/G)Σ_g b_g: Var(θ̂) = σ²_seed/K + σ²_e/(KG) = E[MS_seed]/(KG),
  so SE² = MS_seed/(KG) with K − 1 df: exactly the t_{K−1} interval on the K seed means;
- **a new seed on new vignettes**, μ: Var(θ̂) = σ²_seed/K + σ²_vignette/G + σ²_e/(KG)
  = E[MS_seed + MS_vig − MS_e]/(KG) — the two-way cluster-robust form V_seed + V_vignette − V_cell of
  Cameron, Gelbach & Miller (2011) for a balanced table. SE² = (MS_seed + MS_vig − MS_e)/(KG), floored
  at max(MS_seed, MS_vig)/(KG) (each one-way term alone under-states the variance; CGM 2011 §2.3), with
  Satterthwaite's (1946) df for a combination of mean squares,
  ν = (Σ c_i MS_i)² / Σ (c_i MS_i)²/ν_i. With few seeds ν is close to K − 1 whenever the seed term
  dominates: few seeds are few effective clusters, whatever G.

The between-seed variance component σ²_seed = (MS_seed − MS_e)/G (truncated at 0) gets the modified
large-sample interval of Ting, Burdick, Graybill, Jeyaratnam & Lu (1990) for c₁S₁ − c₂S₂ (Burdick &
Graybill 1992, eqs. 3.8–3.9), exact when MS_e = 0 (the χ²_{K−1} interval).

Validated against: statsmodels ``anova_lm`` of ``ols("y ~ C(seed) + C(vignette)")`` (the three mean
squares), ``scipy.stats.ttest_1samp``-style t_{K−1} interval on the seed means (these vignettes),
and seeded coverage simulations of both new-seed intervals and of the variance-component interval
(tests/test_seeds.py; figures in docs/methods.md "Seeds and runs").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.intervals import RATE_SPACE, bound_to_space

SEED_POPULATIONS = ("new_seed_new_vignettes", "new_seed_these_vignettes")


@dataclass(frozen=True)
class SeedDecomposition:
    """The K x G table's mean squares, the between-seed variance component and the new-seed intervals.

    ``to_frame()`` is the canonical table: one row per estimand (the two new-seed win rates and the
    between-seed variance component), with estimate, SE, df and interval.
    """

    seeds: tuple[str, ...]
    seed_means: tuple[float, ...]
    n_vignettes: int
    level: float
    estimate: float
    ms_seed: float
    ms_vignette: float
    ms_error: float
    se_these: float
    df_these: float
    ci_these: tuple[float, float]
    se_new: float
    df_new: float
    ci_new: tuple[float, float]
    #: (MS_seed − MS_e)/G truncated at 0, and its Ting et al. (1990) interval.
    var_seed: float
    var_seed_ci: tuple[float, float]

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    @property
    def sd_seed(self) -> float:
        return math.sqrt(self.var_seed)

    def to_frame(self) -> pd.DataFrame:
        rows = [
            ("new_seed_new_vignettes", self.estimate, self.se_new, self.df_new, *self.ci_new),
            ("new_seed_these_vignettes", self.estimate, self.se_these, self.df_these, *self.ci_these),
            ("between_seed_variance", self.var_seed, math.nan, float(self.n_seeds - 1), *self.var_seed_ci),
        ]
        frame = pd.DataFrame(rows, columns=["estimand", "estimate", "se", "df", "ci_low", "ci_high"])
        frame["level"] = self.level
        frame["seeds"] = self.n_seeds
        frame["vignettes"] = self.n_vignettes
        return frame

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False, float_format=lambda x: f"{x:.4f}")


def _satterthwaite(coefficients: np.ndarray, mean_squares: np.ndarray, dfs: np.ndarray) -> float:
    terms = coefficients * mean_squares
    denominator = float(np.sum(terms**2 / dfs))
    return float(np.sum(terms) ** 2 / denominator) if denominator > 0 else math.inf


def variance_component_interval(
    c1: float, s1: float, n1: float, c2: float, s2: float, n2: float, level: float
) -> tuple[float, float]:
    """Modified large-sample interval for γ = c₁S₁ − c₂S₂ (c's > 0, S_i mean squares with n_i df).

    Ting, Burdick, Graybill, Jeyaratnam & Lu (1990), J. Statist. Comput. Simul. 35:135; Burdick &
    Graybill (1992), *Confidence Intervals on Variance Components*, eqs. 3.8–3.9. Both ends are
    truncated at 0. With S₂ = 0 it is the exact χ²_{n₁} interval c₁S₁n₁/χ²_{n₁}.
    """
    a = (1 - level) / 2
    g1 = 1 - n1 / stats.chi2.ppf(1 - a, n1)
    h1 = n1 / stats.chi2.ppf(a, n1) - 1
    g2 = 1 - n2 / stats.chi2.ppf(1 - a, n2)
    h2 = n2 / stats.chi2.ppf(a, n2) - 1
    f_hi = stats.f.ppf(1 - a, n1, n2)
    f_lo = stats.f.ppf(a, n1, n2)
    g12 = ((f_hi - 1) ** 2 - g1**2 * f_hi**2 - h2**2) / f_hi
    h12 = ((1 - f_lo) ** 2 - h1**2 * f_lo**2 - g2**2) / f_lo
    gamma = c1 * s1 - c2 * s2
    v_low = g1**2 * c1**2 * s1**2 + h2**2 * c2**2 * s2**2 + g12 * c1 * c2 * s1 * s2
    v_high = h1**2 * c1**2 * s1**2 + g2**2 * c2**2 * s2**2 + h12 * c1 * c2 * s1 * s2
    low = gamma - math.sqrt(max(v_low, 0.0))
    high = gamma + math.sqrt(max(v_high, 0.0))
    return max(low, 0.0), max(high, 0.0)


def seed_decomposition(table, seeds=None, level: float = 0.95) -> SeedDecomposition:
    """Crossed seed × vignette decomposition of a complete K x G table of per-cell mean scores.

    Parameters
    ----------
    table
        K x G array: ȳ_sg, the mean contest score of seed s on vignette g (every cell present).
    seeds
        Names of the K seeds (default ``seed-0..``).
    level
        Confidence level of the intervals.

    Raises
    ------
    InputError
        When the table is not a complete 2-D array of finite scores in [0, 1].
    EstimationError
        With fewer than two seeds or two vignettes (no variance between them can be estimated), or
        when every cell is equal.

    Validated against: module docstring.
    """
    y = np.asarray(table, dtype=float)
    if y.ndim != 2 or not np.all(np.isfinite(y)) or np.any((y < 0) | (y > 1)):
        raise InputError(
            "the seed x vignette table must be a complete 2-D array of mean scores in [0, 1].",
            fix="give every seed a mean score on every vignette (use only the vignettes all seeds were judged on)",
        )
    k, g = y.shape
    names = tuple(seeds) if seeds is not None else tuple(f"seed-{j}" for j in range(k))
    if len(names) != k:
        raise InputError(f"{len(names)} seed names for {k} rows.", fix="name each row of the table once")
    if k < 2 or g < 2:
        raise EstimationError(
            f"the new-seed interval needs two or more seeds and two or more vignettes; got {k} seed(s) and "
            f"{g} vignette(s): no variance between them can be estimated."
        )
    grand = float(y.mean())
    row, col = y.mean(axis=1), y.mean(axis=0)
    resid = y - row[:, None] - col[None, :] + grand
    n_seed, n_vig, n_err = k - 1.0, g - 1.0, (k - 1.0) * (g - 1.0)
    ms_seed = g * float(np.sum((row - grand) ** 2)) / n_seed
    ms_vig = k * float(np.sum((col - grand) ** 2)) / n_vig
    ms_err = float(np.sum(resid**2)) / n_err
    if ms_seed <= 0 and ms_vig <= 0 and ms_err <= 0:
        raise EstimationError("every seed scores the same on every vignette: no interval can be formed.")
    alpha = 1 - level
    # These vignettes: MS_seed/(KG) with K − 1 df (the t interval on the K seed means).
    se_these = math.sqrt(ms_seed / (k * g))
    t_these = float(stats.t.ppf(1 - alpha / 2, n_seed))
    # New vignettes: the unbiased combination, floored at the larger one-way term.
    combined = ms_seed + ms_vig - ms_err
    floor = max(ms_seed, ms_vig)
    if combined >= floor:
        df_new = _satterthwaite(
            np.array([1.0, 1.0, -1.0]), np.array([ms_seed, ms_vig, ms_err]), np.array([n_seed, n_vig, n_err])
        )
    else:
        combined = floor
        df_new = n_seed if ms_seed >= ms_vig else n_vig
    se_new = math.sqrt(combined / (k * g))
    t_new = float(stats.t.ppf(1 - alpha / 2, df_new))
    var_seed = max((ms_seed - ms_err) / g, 0.0)
    var_ci = variance_component_interval(1 / g, ms_seed, n_seed, 1 / g, ms_err, n_err, level)
    return SeedDecomposition(
        seeds=names,
        seed_means=tuple(map(float, row)),
        n_vignettes=g,
        level=level,
        estimate=grand,
        ms_seed=ms_seed,
        ms_vignette=ms_vig,
        ms_error=ms_err,
        se_these=se_these,
        df_these=n_seed,
        ci_these=bound_to_space(grand - t_these * se_these, grand + t_these * se_these, RATE_SPACE),
        se_new=se_new,
        df_new=df_new,
        ci_new=bound_to_space(grand - t_new * se_new, grand + t_new * se_new, RATE_SPACE),
        var_seed=var_seed,
        var_seed_ci=var_ci,
    )


def seed_table(scores: pd.DataFrame) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
    """The K x G table of per-cell mean scores from contest rows (``seed``, ``vignette_id``, ``score``).

    Only the vignettes every seed was judged on enter (a cell mean per seed and vignette, so each
    vignette weighs the same for every seed). Returns (table, seeds, vignettes), both sorted.

    Raises
    ------
    InputError
        Missing columns, or no vignette shared by every seed.
    """
    missing = [c for c in ("seed", "vignette_id", "score") if c not in scores.columns]
    if missing:
        raise InputError(f"the seed table lacks column(s) {missing}.", fix="give seed, vignette_id and score")
    cells = scores.groupby(["seed", "vignette_id"], sort=True)["score"].mean().unstack("vignette_id")
    cells = cells.dropna(axis=1)
    if cells.shape[1] == 0:
        raise InputError(
            "no vignette was judged for every seed.", fix="judge every seed on the same vignettes (the seeds' design)"
        )
    return cells.to_numpy(float), tuple(map(str, cells.index)), tuple(map(str, cells.columns))
