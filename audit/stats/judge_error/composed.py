"""One interval for a win-rate claim that corrects judge error, clustering, leakage and selection at once.

The claimed system's win rate on the *non-leaked* vignettes (vignettes weighted equally, human
labels the ground truth) is estimated by clustered PPI++ for each of the K candidates it was
selected from (K = 1 without selection); the K estimates get one joint vignette-clustered
covariance, and when the claimed system was selected as the best of K on the same data, AKM
hybrid inference on the winner replaces the plain t interval. :class:`ComposedInterval` shows
it beside the naive iid interval and each single correction, with what each did to the CI-low.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special, stats

from honestci.audit.errors import InputError
from honestci.audit.policy import DEFAULT_SEED, THRESHOLDS, Verdict
from honestci.audit.stats.estimands import vignette_means
from honestci.audit.stats.frequentist.iid import proportion_ci
from honestci.audit.stats.intervals import RATE_SPACE, bound_to_space
from honestci.audit.stats.judge_error.ppi import ppi_mean
from honestci.audit.stats.selection.winner import selection_null, winner_inference

#: Monte Carlo draws for the AKM critical value (c_β) in the composed interval.
COMPOSED_PROJECTION_DRAWS = 20_000

#: The rows of the decomposition, in order: (method, what it corrects).
DECOMPOSITION = (
    ("naive", "none: Wilson, every contest independent, judge scores, all vignettes"),
    ("clustering", "vignette clustering only (t, G - 1 df, judge scores, all vignettes)"),
    ("judge", "judge error only (PPI++ with human labels, iid)"),
    ("leakage", "leaked vignettes excluded only (Wilson, judge scores)"),
    ("selection", "selection only (AKM hybrid, iid covariance, judge scores)"),
    ("composed", "all four: clustered PPI++ on non-leaked vignettes, AKM hybrid when selected"),
)


@dataclass(frozen=True)
class JointPPI:
    """Clustered PPI++ estimates of K candidates' equal-vignette rates with their joint covariance."""

    candidates: tuple[str, ...]
    estimates: np.ndarray
    covariance: np.ndarray
    lam: np.ndarray
    n_clusters: int
    df: float
    n_labelled_vignettes: int

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "candidate": list(self.candidates),
                "estimate": self.estimates,
                "se": np.sqrt(np.diag(self.covariance)),
                "lambda": self.lam,
                "n_clusters": self.n_clusters,
                "n_labelled_vignettes": self.n_labelled_vignettes,
                "df": self.df,
            }
        )


def _weighted_ppi(
    y: np.ndarray, f: np.ndarray, labelled: np.ndarray, codes: np.ndarray, n_clusters: int, lam: float | None
) -> tuple[float, np.ndarray, float, float]:
    """(θ̂, ψ_g, λ, variance inflation for tuned λ) of one candidate; see :func:`joint_ppi`."""
    sizes = np.bincount(codes, minlength=n_clusters).astype(float)
    w = 1.0 / sizes[codes]  # equal weight per vignette
    unl, lab = ~labelled, labelled
    if not lab.any() or not unl.any():
        raise InputError(
            "the composed interval needs labelled and unlabelled contests for every candidate "
            f"(got {int(lab.sum())} labelled, {int(unl.sum())} unlabelled).",
            fix="add human labels to a random subset of each candidate's contests",
        )
    w_u, w_l = w[unl] / w[unl].sum(), w[lab] / w[lab].sum()
    f_tilde, f_bar, y_bar = float(w_u @ f[unl]), float(w_l @ f[lab]), float(w_l @ y[lab])
    a = np.bincount(codes[unl], w_u * (f[unl] - f_tilde), n_clusters) - np.bincount(
        codes[lab], w_l * (f[lab] - f_bar), n_clusters
    )
    b = np.bincount(codes[lab], w_l * (y[lab] - y_bar), n_clusters)
    tuned = lam is None
    if lam is None:
        lam = float(np.clip(-(a @ b) / (a @ a), 0.0, 1.0)) if a @ a > 0 else 0.0
    inflation = 1.0
    if tuned and 0.0 < lam < 1.0:
        inflation = float(1.0 + (f_tilde - f_bar) ** 2 / (n_clusters * (a @ a)))
    return lam * f_tilde + y_bar - lam * f_bar, lam * a + b, lam, inflation


def joint_ppi(
    candidate,
    vignette,
    judge,
    human,
    *,
    lam: float | None = None,
) -> JointPPI:
    """Clustered PPI++ for K candidates at once, with their joint vignette-clustered covariance.

    Contest i of candidate k has judge score f_i ∈ [0, 1] and, on a random subset, a human score
    Y_i (``human`` is NaN elsewhere). Each contest of vignette g weighs w_i = 1/m_gk (m_gk the
    candidate's contests there), so the estimand is the equal-vignette rate (1/G) Σ_g p_g. With
    W-normalised means over the unlabelled (f̃̄) and labelled (f̄, Ȳ) contests,
    θ̂_k = λ_k f̃̄ + Ȳ − λ_k f̄, and vignette g contributes ψ_gk = λ_k a_gk + b_gk,
    a_gk = Σ_{g, unl} w̃(f − f̃̄) − Σ_{g, lab} w̄(f − f̄), b_gk = Σ_{g, lab} w̄(Y − Ȳ)
    (the linearisation of the ratio means). λ_k is tuned per candidate as in
    :func:`honestci.audit.stats.judge_error.ppi.ppi_mean_clustered` (λ̂ = −Σa b/Σa², clipped to [0, 1]).

    Joint covariance: Σ_jk = s_j s_k · G/(G − p) Σ_g ψ_gj ψ_gk, p = 2 when λ is tuned (1 when
    given), s_k² = 1 + D_k²/(G Σ_g a_gk²) for interior λ̂_k (1 otherwise), D_k = f̃̄ − f̄: the
    cross-covariances treat each λ̂ as fixed, the variances carry λ̂'s error exactly as the
    one-candidate estimator does. df = G_lab − p, G_lab the fewest vignettes with a human label
    over the candidates (the human residuals b_g, which carry the variance the judge cannot
    remove, come from those vignettes only; G_lab = G when every vignette has a label). With one
    candidate, equal vignette sizes and equal labels per vignette this is
    :func:`ppi_mean_clustered` exactly.

    References: Angelopoulos, Duchi & Zrnic (2023), arXiv:2311.01453 (PPI++); Donald & Lang
    (2007), Rev. Econ. Stat. 89:221 (G − p df).
    Validated against: :func:`honestci.audit.stats.judge_error.ppi.ppi_mean_clustered` (balanced,
    ``tests/test_composed.py``); off-diagonals against the sample covariance of the candidates'
    vignette-level ψ computed directly.
    """
    cand = np.asarray(candidate).reshape(-1)
    groups = np.asarray(vignette).reshape(-1)
    f = np.asarray(judge, dtype=float).reshape(-1)
    y = np.asarray(human, dtype=float).reshape(-1)
    if not (cand.size == groups.size == f.size == y.size):
        raise InputError("candidate, vignette, judge and human must have one entry per contest.", fix="align them")
    if not np.all(np.isfinite(f)):
        raise InputError("judge scores contain NaN or infinite values.", fix="drop contests without a judge score")
    labels, codes = np.unique(groups, return_inverse=True)
    G = labels.size
    fitted = 2 if lam is None else 1
    if fitted >= G:
        raise InputError(
            f"{G} vignette(s): the clustered PPI++ covariance needs more than {fitted}.", fix="add vignettes"
        )
    names = tuple(dict.fromkeys(cand.tolist()))
    estimates, psi, lams, scale = [], [], [], []
    for name in names:
        rows = cand == name
        est, contrib, lam_k, inflation = _weighted_ppi(y[rows], f[rows], np.isfinite(y[rows]), codes[rows], G, lam)
        estimates.append(est)
        psi.append(contrib)
        lams.append(lam_k)
        scale.append(math.sqrt(inflation))
    psi_matrix = np.column_stack(psi)
    s = np.asarray(scale)
    covariance = G / (G - fitted) * (psi_matrix.T @ psi_matrix) * np.outer(s, s)
    # The human residuals b_g are nonzero only in vignettes with a label: with labels in few
    # vignettes the variance rests on those few, so df counts them (the fewest over candidates).
    labelled_vignettes = min(np.unique(codes[(cand == name) & np.isfinite(y)]).size for name in names)
    df = float(max(labelled_vignettes - fitted, 1))
    return JointPPI(names, np.asarray(estimates), covariance, np.asarray(lams), G, df, labelled_vignettes)


@dataclass(frozen=True)
class ComposedRow:
    """One interval of the decomposition (``ci_low``/``ci_high`` None when INCONCLUSIVE)."""

    method: str
    corrects: str
    estimate: float
    ci_low: float | None
    ci_high: float | None
    n_contests: int
    n_clusters: int
    verdict: Verdict = Verdict.PASS
    note: str = ""


@dataclass(frozen=True)
class ComposedInterval:
    """The composed interval beside the naive one and each single correction.

    The canonical table is :meth:`to_frame`: one row per method (naive, clustering, judge,
    leakage, selection, composed) with the estimate, interval, and ``change_in_ci_low`` — the
    row's CI-low minus the naive CI-low (what that correction alone, or all four for
    ``composed``, did to the CI-low).
    """

    claimed: str
    candidates: tuple[str, ...]
    selected: bool
    selection_method: str
    leaked_vignettes: tuple
    estimand: str
    level: float
    seed: int | None
    rows: tuple[ComposedRow, ...]

    def row(self, method: str) -> ComposedRow:
        for r in self.rows:
            if r.method == method:
                return r
        raise KeyError(f"no row {method!r}; rows are {[r.method for r in self.rows]}")

    @property
    def composed(self) -> ComposedRow:
        return self.row("composed")

    def to_frame(self) -> pd.DataFrame:
        naive_low = self.row("naive").ci_low
        records = []
        for r in self.rows:
            change = None if r.ci_low is None or naive_low is None else r.ci_low - naive_low
            records.append(
                {
                    "method": r.method,
                    "corrects": r.corrects,
                    "estimate": r.estimate,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "change_in_ci_low": change,
                    "n_contests": r.n_contests,
                    "n_clusters": r.n_clusters,
                    "verdict": str(r.verdict),
                    "note": r.note,
                }
            )
        return pd.DataFrame(records)

    def __str__(self) -> str:
        return f"{self.estimand}\n" + self.to_frame().drop(columns=["corrects"]).to_string(index=False)


def _akm(
    estimates: np.ndarray,
    covariance: np.ndarray,
    claimed: int,
    names: Sequence[str],
    df: float | None,
    level: float,
    seed: int | np.random.Generator,
    n_draws: int,
) -> tuple[float, float, float, str]:
    """(estimate, low, high, method) for the claimed candidate's rate, on the logit scale, shown as rates.

    As :func:`honestci.audit.checks.selection.candidate_winner_inference`: Y = logit X,
    Σ_Y = D Σ D, D = diag(1/(X(1 − X))) (the delta method; logit is increasing, so the winner
    and the selection event are unchanged), and Σ_Y is scaled by (t_df/z)² (Σ estimated from G
    vignettes: with K = 1 this is the t interval). AKM hybrid when the claimed candidate is the
    argmax of the estimates; otherwise the level-(1 − α) projection interval Y_k ± c_α √Σ_Y,kk,
    valid under any selection rule. Other candidates' estimates are clipped into [1e-6, 1 − 1e-6]
    (they only bound the winner); the claimed one must lie in (0, 1) (the caller checks).
    """
    alpha = 1.0 - level
    x = np.clip(np.asarray(estimates, dtype=float), 1e-6, 1 - 1e-6)
    derivative = 1.0 / (x * (1.0 - x))
    # a candidate estimated without variance (all its labels equal) would divide by zero in c_β
    covariance = covariance + np.diag(np.maximum(1e-12 - np.diag(covariance), 0.0))
    covariance = covariance * np.outer(derivative, derivative)
    if df is not None:
        covariance = covariance * (stats.t.ppf(1 - alpha / 2, df) / stats.norm.ppf(1 - alpha / 2)) ** 2
    logit = special.logit(x)
    if int(np.argmax(logit)) == claimed:
        result = winner_inference(logit, covariance, candidates=names, level=level, seed=seed, n_draws=n_draws)
        low, high = result.hybrid_ci
        return (
            float(special.expit(result.hybrid_estimate)),
            float(special.expit(low)),
            float(special.expit(high)),
            "AKM hybrid",
        )
    critical = selection_null(covariance, alpha, seed, n_draws).critical_value
    half = critical * math.sqrt(covariance[claimed, claimed])
    y = logit[claimed]
    return (
        float(x[claimed]),
        float(special.expit(y - half)),
        float(special.expit(y + half)),
        "projection (claimed is not the argmax of the estimates)",
    )


def _composed_row(
    cand: np.ndarray,
    groups: np.ndarray,
    f: np.ndarray,
    y: np.ndarray,
    keep: np.ndarray,
    claimed: str,
    selected: bool,
    level: float,
    seed: int | np.random.Generator,
    n_draws: int,
    min_vignettes: int,
) -> ComposedRow:
    """The composed row of :func:`composed_interval` (INCONCLUSIVE with the reason when it cannot be formed)."""
    n_clean, g_clean = int((keep & (cand == claimed)).sum()), int(np.unique(groups[keep & (cand == claimed)]).size)

    def inconclusive(note: str) -> ComposedRow:
        return ComposedRow(
            "composed", DECOMPOSITION[5][1], math.nan, None, None, n_clean, g_clean, Verdict.INCONCLUSIVE, note
        )

    if g_clean < min_vignettes:
        return inconclusive(
            f"{g_clean} non-leaked vignette(s) < {min_vignettes}, the smallest G where the composed interval was shown honest"
        )
    try:
        joint = joint_ppi(cand[keep], groups[keep], f[keep], y[keep])
    except InputError as error:  # a candidate without human labels (or unlabelled contests) there
        return inconclusive(str(error))
    if joint.n_labelled_vignettes < min_vignettes:
        return inconclusive(
            f"human labels in {joint.n_labelled_vignettes} non-leaked vignette(s) of some candidate < {min_vignettes}, "
            "the smallest G where the composed interval was shown honest"
        )
    k = joint.candidates.index(claimed)
    if not joint.covariance[k, k] > 0:
        return inconclusive("zero variance")
    if not 0.0 < joint.estimates[k] < 1.0:
        return inconclusive(f"estimate {joint.estimates[k]:.3f} outside (0, 1): no logit-scale interval")
    if selected and len(joint.candidates) > 1:
        est, lo, hi, how = _akm(joint.estimates, joint.covariance, k, joint.candidates, joint.df, level, seed, n_draws)
    else:  # nothing selected: the t(df) interval on the logit scale (delta method)
        est = float(joint.estimates[k])
        half = stats.t.ppf(0.5 + level / 2, joint.df) * math.sqrt(joint.covariance[k, k]) / (est * (1 - est))
        lo, hi = float(special.expit(special.logit(est) - half)), float(special.expit(special.logit(est) + half))
        how = "t interval on the logit scale (no selection)"
    return ComposedRow("composed", DECOMPOSITION[5][1], est, lo, hi, n_clean, g_clean, note=how)


def composed_interval(
    candidate,
    vignette,
    judge,
    human,
    *,
    claimed: str,
    selected: bool,
    leaked_vignettes: Sequence = (),
    level: float = 0.95,
    seed: int | np.random.Generator = DEFAULT_SEED,
    n_draws: int = COMPOSED_PROJECTION_DRAWS,
    min_vignettes: int = THRESHOLDS.composed_min_vignettes,
) -> ComposedInterval:
    """The composed interval of the claimed system's win rate, with its decomposition.

    Estimand: the claimed system's equal-vignette win rate on the population of *non-leaked*
    vignettes, E_v[p_v | v not leaked], human labels the truth (leaked vignettes are excluded,
    not bounded). Inputs are one entry per contest: ``candidate`` (the system; only ``claimed``
    when nothing was selected), ``vignette``, ``judge`` score in [0, 1], ``human`` score in
    [0, 1] or NaN when unlabelled. ``selected``: the claimed system was picked as the best of
    the candidates on these same contests.

    Composed: :func:`joint_ppi` on the non-leaked contests (K candidates when ``selected``,
    else the claimed one), then with selection :func:`honestci.audit.stats.selection.winner.winner_inference`
    (AKM hybrid, β = α/10) on the logit-scale estimates with Σ_Y·(t_df/z)² (:func:`_akm`),
    otherwise the t(df) interval on the logit scale, expit(logit θ̂ ± t_df √Σ/(θ̂(1 − θ̂)))
    (df = G_lab − 2, :func:`joint_ppi`). INCONCLUSIVE below ``min_vignettes``
    non-leaked vignettes, or non-leaked vignettes with a human label for every candidate (the
    smallest G at which the seeded coverage study found it honest, docs/coverage.md).

    Single corrections (each alone, on the claimed system): ``clustering`` the mean of vignette
    means of judge scores ± t_{G−1} sd/√G; ``judge`` :func:`honestci.audit.stats.judge_error.ppi.ppi_mean`
    (iid PPI++); ``leakage`` Wilson on the non-leaked contests; ``selection`` AKM hybrid with
    the iid diagonal covariance Var(f_k)/n_k of the candidates' judge means.

    References: Angelopoulos, Duchi & Zrnic (2023), arXiv:2311.01453 (PPI++); Andrews,
    Kitagawa & McCloskey (2024), QJE 139:305 (inference on winners).
    Validated against: :func:`ppi_mean_clustered` (K = 1, no leakage, no selection), and the
    seeded coverage study :func:`composed_coverage` (docs/coverage.md, "The composed interval").
    """
    cand = np.asarray(candidate).reshape(-1)
    groups = np.asarray(vignette).reshape(-1)
    f = np.asarray(judge, dtype=float).reshape(-1)
    y = np.asarray(human, dtype=float).reshape(-1)
    if not (cand.size == groups.size == f.size == y.size):
        raise InputError("candidate, vignette, judge and human must have one entry per contest.", fix="align them")
    if claimed not in set(cand.tolist()):
        raise InputError(f"the claimed system {claimed!r} has no contests.", fix="pass its contests")
    if not selected:
        keep = cand == claimed
        cand, groups, f, y = cand[keep], groups[keep], f[keep], y[keep]
    names = tuple(dict.fromkeys(cand.tolist()))
    k_claimed = names.index(claimed)
    selected = selected and len(names) > 1
    leaked = np.isin(groups, np.asarray(list(leaked_vignettes), dtype=groups.dtype))
    mine = cand == claimed
    labelled = np.isfinite(y)
    rows: list[ComposedRow] = []

    fm, gm = f[mine], groups[mine]
    n_all, g_all = int(mine.sum()), int(np.unique(gm).size)
    lo, hi = proportion_ci(float(fm.sum()), n_all, "wilson", level)
    rows.append(ComposedRow("naive", DECOMPOSITION[0][1], float(fm.mean()), lo, hi, n_all, g_all))

    means = vignette_means(fm, gm).means
    if means.size >= 2:
        half = stats.t.ppf(0.5 + level / 2, means.size - 1) * means.std(ddof=1) / math.sqrt(means.size)
        low, high = bound_to_space(means.mean() - half, means.mean() + half, RATE_SPACE)
        rows.append(
            ComposedRow(
                "clustering",
                DECOMPOSITION[1][1],
                float(means.mean()),
                low,
                high,
                n_all,
                g_all,
            )
        )
    else:
        rows.append(
            ComposedRow(
                "clustering",
                DECOMPOSITION[1][1],
                float(means.mean()),
                None,
                None,
                n_all,
                g_all,
                Verdict.INCONCLUSIVE,
                "one vignette",
            )
        )

    lab_m = labelled[mine]
    if lab_m.sum() >= 2 and (~lab_m).any():
        ppi = ppi_mean(y[mine][lab_m], fm[lab_m], fm[~lab_m], level=level, space=RATE_SPACE)
        rows.append(ComposedRow("judge", DECOMPOSITION[2][1], ppi.estimate, ppi.ci_low, ppi.ci_high, n_all, g_all))
    else:
        rows.append(
            ComposedRow(
                "judge",
                DECOMPOSITION[2][1],
                float(fm.mean()),
                None,
                None,
                n_all,
                g_all,
                Verdict.INCONCLUSIVE,
                "fewer than 2 human labels",
            )
        )

    clean = mine & ~leaked
    n_clean, g_clean = int(clean.sum()), int(np.unique(groups[clean]).size)
    if n_clean:
        lo, hi = proportion_ci(float(f[clean].sum()), n_clean, "wilson", level)
        rows.append(ComposedRow("leakage", DECOMPOSITION[3][1], float(f[clean].mean()), lo, hi, n_clean, g_clean))
    else:
        rows.append(
            ComposedRow(
                "leakage",
                DECOMPOSITION[3][1],
                math.nan,
                None,
                None,
                0,
                0,
                Verdict.INCONCLUSIVE,
                "every vignette leaked",
            )
        )

    if selected:
        x = np.array([f[cand == c].mean() for c in names])
        var = np.array([f[cand == c].var() / (cand == c).sum() for c in names])
        est, lo, hi, how = _akm(x, np.diag(var), k_claimed, names, None, level, seed, n_draws)
        rows.append(ComposedRow("selection", DECOMPOSITION[4][1], est, lo, hi, n_all, g_all, note=how))
    else:
        naive = rows[0]
        rows.append(
            ComposedRow(
                "selection",
                DECOMPOSITION[4][1],
                naive.estimate,
                naive.ci_low,
                naive.ci_high,
                n_all,
                g_all,
                note="nothing selected: the naive interval",
            )
        )

    rows.append(_composed_row(cand, groups, f, y, ~leaked, claimed, selected, level, seed, n_draws, min_vignettes))

    recorded = seed if isinstance(seed, int) else None
    return ComposedInterval(
        claimed,
        names,
        selected,
        "AKM hybrid" if selected else "none",
        tuple(sorted(set(np.asarray(leaked_vignettes).tolist()))),
        "claimed system's equal-vignette win rate on non-leaked vignettes (new-vignette population, human labels)",
        level,
        recorded,
        tuple(rows),
    )


@dataclass(frozen=True)
class ComposedCoverage:
    """Seeded simulation coverage of every row of :class:`ComposedInterval` in one design cell.

    ``to_frame()``: one row per method with two-sided coverage, the one-sided error rates
    (CI-low above the truth, CI-high below it), their Monte Carlo SEs √(c(1 − c)/reps), the mean
    width, and the share of INCONCLUSIVE results (which count as not covering).
    """

    n_clusters: int
    n_candidates: int
    judge_error: float
    reps: int
    seed: int | None
    methods: tuple[str, ...]
    covered: tuple[int, ...]
    low_above: tuple[int, ...]
    high_below: tuple[int, ...]
    width: tuple[float, ...]
    inconclusive: tuple[int, ...]

    def to_frame(self) -> pd.DataFrame:
        reps = self.reps
        cov = np.asarray(self.covered) / reps
        low = np.asarray(self.low_above) / reps
        high = np.asarray(self.high_below) / reps
        given = reps - np.asarray(self.inconclusive)
        return pd.DataFrame(
            {
                "G": self.n_clusters,
                "K": self.n_candidates,
                "judge_error": self.judge_error,
                "method": list(self.methods),
                "coverage": cov,
                "mc_se": np.sqrt(cov * (1 - cov) / reps),
                "low_above_truth": low,
                "low_mc_se": np.sqrt(np.maximum(low * (1 - low), 0.025 * 0.975) / reps),
                "high_below_truth": high,
                "mean_width": np.asarray(self.width) / np.maximum(given, 1),
                "inconclusive": np.asarray(self.inconclusive) / reps,
                "reps": reps,
                "seed": self.seed,
            }
        )


#: The simulation design of :func:`composed_coverage` (logit scale).
COVERAGE_DESIGN = {
    "base_location": 0.4,  # claimed-pool rates near 0.6
    "candidate_spacing": 0.05,  # close true rates: 0.6 ... 0.63 for K = 4
    "vignette_sd": 0.8,
    "candidate_vignette_sd": 0.3,
    "leak_share": 0.2,
    "leak_boost": 1.5,
    "label_share": 0.3,
    "min_contests": 4,
    "max_contests": 12,
}


def composed_coverage(
    n_clusters: int,
    n_candidates: int,
    judge_error: float,
    *,
    reps: int,
    rng: int | np.random.Generator,
    level: float = 0.95,
    n_draws: int = 5_000,
) -> ComposedCoverage:
    """Coverage of the composed interval and its single corrections where all four problems occur.

    Design (:data:`COVERAGE_DESIGN`): vignette g has effect u_g ~ N(0, 0.8²); candidate k has
    location η_gk = 0.4 + 0.05 k + u_g + w_gk, w_gk ~ N(0, 0.3²) (close true rates); each
    candidate has m_g ~ U{4, …, 12} contests in vignette g, each two orders, the human
    preferring the policy in each with probability expit(η_gk) (contest score the mean of the
    two). Each vignette is leaked with probability 0.2, and there η_gk += 1.5 (answers
    inflated). The judge flips a human loss to a win with probability e_g = clip(e(1 + z_g/2),
    0, 0.5), z_g ~ N(0, 1) (vignette-level judge error) and a win to a loss with e/3 (it errs
    against the opponent). Each contest carries human labels with probability 0.3. With K > 1
    the claimed system is the candidate with the highest mean judge score over all contests
    (selection on the same data). Truth: the claimed candidate's rate on the population of
    non-leaked vignettes, E[expit(0.4 + 0.05 k + N(0, 0.8² + 0.3²))]
    (:func:`honestci.audit.stats.estimands.new_vignette_rate`; leakage is independent of u).

    Each replicate calls :func:`composed_interval` with ``min_vignettes=3`` (so that coverage is
    measured below the policy's floor too) and a fresh seed from ``rng`` for the AKM draws.
    Validated against: the closed-form truth above (Gauss–Hermite quadrature).
    """
    from honestci.audit.stats.estimands import new_vignette_rate
    from honestci.audit.stats.random_state import resolve_rng

    gen, seed = resolve_rng(rng)
    d = COVERAGE_DESIGN
    G, K = int(n_clusters), int(n_candidates)
    sd_total = math.hypot(d["vignette_sd"], d["candidate_vignette_sd"])
    truths = [new_vignette_rate(d["base_location"] + d["candidate_spacing"] * k, sd_total) for k in range(K)]
    names = [f"c{k}" for k in range(K)]
    methods = tuple(m for m, _ in DECOMPOSITION)
    covered, low_above, high_below, inconclusive = (np.zeros(len(methods), int) for _ in range(4))
    width = np.zeros(len(methods))
    for _ in range(reps):
        u = gen.normal(0, d["vignette_sd"], G)
        leaked = gen.random(G) < d["leak_share"]
        error = np.clip(judge_error * (1 + gen.normal(size=G) / 2), 0.0, 0.5)
        sizes = gen.integers(int(d["min_contests"]), int(d["max_contests"]) + 1, G)
        g = np.repeat(np.arange(G), sizes)
        cand, vig, judge, human = [], [], [], []
        for k in range(K):
            eta = d["base_location"] + d["candidate_spacing"] * k + u + gen.normal(0, d["candidate_vignette_sd"], G)
            eta = eta + d["leak_boost"] * leaked
            p = 1 / (1 + np.exp(-eta[g]))
            wins = gen.random((2, g.size)) < p
            flip = np.where(wins, gen.random((2, g.size)) < judge_error / 3, gen.random((2, g.size)) < error[g])
            cand.append(np.full(g.size, names[k]))
            vig.append(g)
            judge.append((wins ^ flip).mean(axis=0))
            human.append(np.where(gen.random(g.size) < d["label_share"], wins.mean(axis=0), np.nan))
        cand_a, vig_a, judge_a, human_a = map(np.concatenate, (cand, vig, judge, human))
        claimed = int(np.argmax([judge_a[cand_a == n].mean() for n in names]))
        result = composed_interval(
            cand_a,
            vig_a,
            judge_a,
            human_a,
            claimed=names[claimed],
            selected=K > 1,
            leaked_vignettes=np.flatnonzero(leaked).tolist(),
            level=level,
            seed=int(gen.integers(2**31)),
            n_draws=n_draws,
            min_vignettes=3,
        )
        truth = truths[claimed]
        for i, row in enumerate(result.rows):
            if row.ci_low is None or row.ci_high is None:
                inconclusive[i] += 1
                continue
            covered[i] += row.ci_low <= truth <= row.ci_high
            low_above[i] += row.ci_low > truth
            high_below[i] += row.ci_high < truth
            width[i] += row.ci_high - row.ci_low
    return ComposedCoverage(
        G,
        K,
        float(judge_error),
        int(reps),
        seed,
        methods,
        tuple(map(int, covered)),
        tuple(map(int, low_above)),
        tuple(map(int, high_below)),
        tuple(map(float, width)),
        tuple(map(int, inconclusive)),
    )
