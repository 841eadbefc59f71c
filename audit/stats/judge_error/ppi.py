"""Judge-error-corrected win rate: prediction-powered inference with power tuning (PPI++).

A small human-labelled subset (Y, with the judge's score f on it) corrects the judge's score on
all the other contests: θ̂ = λ·mean_N f(X̃) + mean_n (Y − λ f(X)). λ = 1 is PPI, λ = 0 the
classical human-only mean; PPI++ tunes λ to minimise the variance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats

from honestci.audit.errors import InputError
from honestci.audit.policy import THRESHOLDS, Verdict
from honestci.audit.stats.intervals import bound_to_space


@dataclass(frozen=True)
class PPIResult:
    """A prediction-powered mean with its interval, beside the classical (human-only) one."""

    estimate: float
    se: float | None
    ci_low: float | None
    ci_high: float | None
    lam: float
    classical_estimate: float
    classical_ci_low: float | None
    classical_ci_high: float | None
    judge_only_estimate: float
    n_labelled: int
    n_unlabelled: int
    n_clusters: int | None
    df: float | None
    level: float
    variance: str
    verdict: Verdict = Verdict.PASS
    note: str = ""

    def to_frame(self) -> pd.DataFrame:
        row = asdict(self)
        row["verdict"] = str(self.verdict)
        return pd.DataFrame([row])

    def text(self) -> str:
        if self.ci_low is None:
            return f"{self.estimate:.3f} (no interval: {self.note})"
        return (
            f"{self.estimate:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}] (PPI++, λ = {self.lam:.2f}, "
            f"{self.variance}; n = {self.n_labelled} labelled, N = {self.n_unlabelled} unlabelled; human-only "
            f"{self.classical_estimate:.3f}"
            + ("" if self.classical_ci_low is None else f" [{self.classical_ci_low:.3f}, {self.classical_ci_high:.3f}]")
            + f"; judge only {self.judge_only_estimate:.3f})"
        )


def _arrays(y, f, f_unlabelled):
    y, f, fu = (np.asarray(v, dtype=float).reshape(-1) for v in (y, f, f_unlabelled))
    if y.shape != f.shape:
        raise InputError(
            f"{y.size} human labels but {f.size} judge scores on the labelled subset.",
            fix="give the judge's score of every labelled item",
        )
    if y.size < 2 or fu.size < 1:
        raise InputError(
            f"PPI needs at least 2 labelled and 1 unlabelled item (got {y.size} and {fu.size}).",
            fix="label more items, or use the classical estimate",
        )
    if not (np.isfinite(y).all() and np.isfinite(f).all() and np.isfinite(fu).all()):
        raise InputError("PPI inputs contain NaN or infinite values.", fix="drop items without a valid score first")
    return y, f, fu


def ppi_mean(
    y, f, f_unlabelled, *, lam: float | None = None, level: float = 0.95, space: tuple[float, float] | None = None
) -> PPIResult:
    """PPI++ mean with the iid CLT interval (Angelopoulos, Duchi & Zrnic 2023, "PPI++").

    θ̂ = mean_N(λ f̃) + mean_n(Y − λ f); λ̂ = Cov_n(Y, f) / ((1 + n/N) Var(f ∪ f̃)), clipped to
    [0, 1] (Cov with 1/n, Var with 1/(n + N − 1), as ``ppi_py``); SE² = Var(λ f̃)/N + Var(Y − λ f)/n
    (1/N and 1/n variances); normal interval, truncated to the parameter ``space`` (RATE_SPACE
    for a rate; :func:`honestci.audit.stats.intervals.bound_to_space`, which never lowers coverage)
    when one is given, as is the classical interval beside it.

    References: Angelopoulos, Bates, Fannjiang, Jordan & Zrnic (2023), Science 382:669;
    Angelopoulos, Duchi & Zrnic (2023), arXiv:2311.01453.
    Validated against: ``ppi_py.ppi_mean_pointestimate`` and ``ppi_py.ppi_mean_ci`` 0.2.3
    (``tests/test_calibration.py``, values in ``tests/reference/ppi_reference.csv``).
    """
    y, f, fu = _arrays(y, f, f_unlabelled)
    n, N = y.size, fu.size
    if lam is None:
        cov = float(np.mean((y - y.mean()) * (f - f.mean())))
        var = float(np.var(np.concatenate([f, fu]), ddof=1))
        lam = float(np.clip(cov / ((1 + n / N) * var), 0.0, 1.0)) if var > 0 else 0.0
    estimate = float(np.mean(lam * fu) + np.mean(y - lam * f))
    se = float(np.sqrt(np.var(lam * fu) / N + np.var(y - lam * f) / n))
    z = float(stats.norm.ppf(0.5 + level / 2))
    classical_se = float(np.std(y) / np.sqrt(n))
    low, high = bound_to_space(estimate - z * se, estimate + z * se, space)
    classical_low, classical_high = bound_to_space(y.mean() - z * classical_se, y.mean() + z * classical_se, space)
    return PPIResult(
        estimate,
        se,
        low,
        high,
        lam,
        float(y.mean()),
        classical_low,
        classical_high,
        float(np.concatenate([f, fu]).mean()),
        n,
        N,
        None,
        None,
        level,
        "iid",
    )


def ppi_mean_clustered(
    y,
    f,
    f_unlabelled,
    clusters,
    clusters_unlabelled,
    *,
    lam: float | None = None,
    level: float = 0.95,
    min_clusters: int = THRESHOLDS.min_clusters,
    space: tuple[float, float] | None = None,
) -> PPIResult:
    """PPI++ mean with a vignette-clustered variance from cluster sums, valid at few vignettes.

    Both t intervals (PPI++ and the classical one) are truncated to the parameter ``space`` when
    one is given (RATE_SPACE for a rate; :func:`honestci.audit.stats.intervals.bound_to_space`,
    which never lowers coverage).

    With labelled residual means removed, each cluster g contributes
    ψ_g(λ) = λ a_g + b_g, a_g = Σ_{g, unlabelled}(f̃ − f̃̄)/N − Σ_{g, labelled}(f − f̄)/n,
    b_g = Σ_{g, labelled}(Y − Ȳ)/n, so the labelled and unlabelled items of one vignette are
    correlated as they should be. θ̂ = λ f̃̄ + Ȳ − λ f̄.

    * λ given: Var(θ̂) = G/(G − 1) Σ_g ψ_g², t interval with G − 1 df (CR1).
    * λ tuned: λ̂ = −Σ a_g b_g / Σ a_g² (the minimiser of Σ ψ_g²), clipped to [0, 1]. λ̂ is a
      second parameter fitted to the same G cluster sums, so
      Var(θ̂) = G/(G − 2) Σ_g ψ_g(λ̂)² · (1 + D²/(G Σ_g a_g²)), D = f̃̄ − f̄, t with G − 2 df. The
      factor is the variance that λ̂'s error adds through θ̂ − θ ∋ (λ̂ − λ*)·D, applied when λ̂
      is inside (0, 1) (on a bound λ̂ does not move with the data locally). On balanced
      clusters this is exactly the OLS intercept and its variance s²(1/G + d̄²/S_dd) in the
      regression of the vignette means Ȳ_g on d_g = f̄_g − f̃̄_g, and with jointly normal
      vignette means the t(G − 2) interval is exact for interior λ̂ (Donald & Lang 2007).
      The in-sample CR1 variance with G − 1 df covered 90.8–93.2% at G = 6 (docs/methods.md).

    The classical (human-only) interval is CR1 with G − 1 df. INCONCLUSIVE below
    ``min_clusters`` vignettes (and below 3 when λ is tuned), or with zero variance.

    References: Angelopoulos, Duchi & Zrnic (2023), arXiv:2311.01453 (PPI++);
    Donald & Lang (2007), "Inference with difference-in-differences and other panel data",
    Rev. Econ. Stat. 89:221 (t with G − K df for G cluster-level observations and K parameters).
    Validated against: statsmodels OLS of Ȳ_g on d_g (intercept, its SE and t(G − 2) CI) on
    balanced clusters; :func:`ppi_mean` on singleton clusters at fixed λ; and the seeded coverage
    simulation :func:`ppi_clustered_coverage` (``tests/test_ppi.py``).
    """
    y, f, fu = _arrays(y, f, f_unlabelled)
    g_lab, g_unl = np.asarray(clusters).reshape(-1), np.asarray(clusters_unlabelled).reshape(-1)
    if g_lab.size != y.size or g_unl.size != fu.size:
        raise InputError(
            "one cluster label per labelled and per unlabelled item is needed.", fix="pass the vignette of every item"
        )
    n, N = y.size, fu.size
    labels, index = np.unique(np.concatenate([g_lab, g_unl]), return_inverse=True)
    G = labels.size
    i_lab, i_unl = index[:n], index[n:]
    a = np.bincount(i_unl, fu - fu.mean(), G) / N - np.bincount(i_lab, f - f.mean(), G) / n
    b = np.bincount(i_lab, y - y.mean(), G) / n
    tuned = lam is None
    if lam is None:
        lam = float(np.clip(-(a @ b) / (a @ a), 0.0, 1.0)) if a @ a > 0 else 0.0
    estimate = float(lam * fu.mean() + np.mean(y - lam * f))
    common = dict(
        classical_estimate=float(y.mean()),
        judge_only_estimate=float(np.concatenate([f, fu]).mean()),
        n_labelled=n,
        n_unlabelled=N,
        n_clusters=G,
        level=level,
        variance="clustered (cluster sums" + (", λ tuned: G − 2 df)" if tuned else ")"),
    )
    fitted = 2 if tuned else 1  # parameters fitted to the G cluster sums: θ, and λ when tuned
    no_interval = None
    if max(min_clusters, fitted + 1) > G:
        no_interval = f"{G} cluster(s) < {max(min_clusters, fitted + 1)}"
    else:
        df = G - fitted
        var = G / df * np.sum((lam * a + b) ** 2)
        if tuned and 0.0 < lam < 1.0:
            var *= 1 + (fu.mean() - f.mean()) ** 2 / (G * (a @ a))
        se = float(np.sqrt(var))
        classical_se = float(np.sqrt(G / (G - 1) * np.sum(b**2)))
        t = float(stats.t.ppf(0.5 + level / 2, df))
        t_classical = float(stats.t.ppf(0.5 + level / 2, G - 1))
        if se == 0:
            no_interval = "zero variance"
    if no_interval is not None:
        return PPIResult(
            estimate,
            None,
            None,
            None,
            lam,
            classical_ci_low=None,
            classical_ci_high=None,
            df=None,
            verdict=Verdict.INCONCLUSIVE,
            note=no_interval,
            **common,
        )
    low, high = bound_to_space(estimate - t * se, estimate + t * se, space)
    classical_low, classical_high = bound_to_space(
        y.mean() - t_classical * classical_se, y.mean() + t_classical * classical_se, space
    )
    return PPIResult(
        estimate,
        se,
        low,
        high,
        lam,
        classical_ci_low=classical_low,
        classical_ci_high=classical_high,
        df=float(df),
        **common,
    )


@dataclass(frozen=True)
class PPICoverage:
    """Seeded simulation coverage of :func:`ppi_mean_clustered` in one design cell."""

    n_clusters: int
    corr: float
    icc: float
    outcome: str
    sizes: str
    reps: int
    coverage: float
    mc_se: float
    mean_width: float
    seed: int | None

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(self)])


def ppi_clustered_coverage(
    n_clusters: int,
    corr: float,
    icc: float,
    *,
    reps: int,
    rng: int | np.random.Generator,
    labelled_per_vignette: int = 5,
    unlabelled_per_vignette: int = 20,
    outcome: str = "gaussian",
    sizes: str = "balanced",
    level: float = 0.95,
    estimator=None,
) -> PPICoverage:
    """Coverage of the clustered PPI++ interval (λ tuned) of the mean human label, by simulation.

    Vignette g has a human effect u_g and a judge effect v_g (both N(0, 1)); item i of it has
    Y = √ICC u_g + √(1 − ICC) e_i and judge score f = 0.3 + ρ Y + √(1 − ρ²)(√ICC v_g +
    √(1 − ICC) ξ_i), so Corr(Y, f) = ρ, both have intra-vignette correlation ICC, and the judge
    is biased by 0.3 with its own vignette errors. Truth E[Y] = 0. ``outcome="binary"``
    thresholds: Y = 1{Y > −0.25} (truth Φ(0.25)), f = 1{f > 0}. Each vignette has
    ``labelled_per_vignette`` labelled and ``unlabelled_per_vignette`` unlabelled items;
    ``sizes="unbalanced"`` draws m_g ~ U{2, …, 10} labelled and 4 m_g + U{0, …, 2·unlabelled − 1}
    unlabelled items per vignette. ``estimator`` (default :func:`ppi_mean_clustered`) is called
    as ``estimator(y, f, f_unlabelled, clusters, clusters_unlabelled, level=level)``.

    An INCONCLUSIVE result counts as not covering; ``mean_width`` is over the intervals given.
    Monte Carlo SE = √(c(1 − c)/reps).
    Validated against: the closed-form truth of the design (0, or Φ(0.25) for binary labels);
    the figures are in docs/methods.md.
    """
    from honestci.audit.stats.random_state import resolve_rng

    gen, seed = resolve_rng(rng)
    if outcome not in ("gaussian", "binary") or sizes not in ("balanced", "unbalanced"):
        raise InputError(
            f"unknown design outcome={outcome!r}, sizes={sizes!r}.",
            fix='use outcome="gaussian" or "binary", sizes="balanced" or "unbalanced"',
        )
    estimator = ppi_mean_clustered if estimator is None else estimator
    G = int(n_clusters)
    truth = float(stats.norm.cdf(0.25)) if outcome == "binary" else 0.0
    covered, given, width = 0, 0, 0.0
    for _ in range(reps):
        u, v = gen.normal(size=G), gen.normal(size=G)
        if sizes == "balanced":
            m_lab, m_unl = np.full(G, labelled_per_vignette), np.full(G, unlabelled_per_vignette)
        else:
            m_lab = gen.integers(2, 11, G)
            m_unl = 4 * m_lab + gen.integers(0, 2 * unlabelled_per_vignette, G)
        g = np.concatenate([np.repeat(np.arange(G), m_lab), np.repeat(np.arange(G), m_unl)])
        labelled = np.arange(g.size) < m_lab.sum()
        y = np.sqrt(icc) * u[g] + np.sqrt(1 - icc) * gen.normal(size=g.size)
        judge_error = np.sqrt(icc) * v[g] + np.sqrt(1 - icc) * gen.normal(size=g.size)
        f = 0.3 + corr * y + np.sqrt(1 - corr**2) * judge_error
        if outcome == "binary":
            y, f = (y > -0.25).astype(float), (f > 0).astype(float)
        result = estimator(y[labelled], f[labelled], f[~labelled], g[labelled], g[~labelled], level=level)
        if result.ci_low is not None:  # an INCONCLUSIVE result covers nothing
            covered += result.ci_low <= truth <= result.ci_high
            given += 1
            width += result.ci_high - result.ci_low
    coverage = covered / reps
    return PPICoverage(
        G,
        float(corr),
        float(icc),
        outcome,
        sizes,
        int(reps),
        coverage,
        float(np.sqrt(coverage * (1 - coverage) / reps)),
        width / max(given, 1),
        seed,
    )
