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


def ppi_mean(y, f, f_unlabelled, *, lam: float | None = None, level: float = 0.95) -> PPIResult:
    """PPI++ mean with the iid CLT interval (Angelopoulos, Duchi & Zrnic 2023, "PPI++").

    θ̂ = mean_N(λ f̃) + mean_n(Y − λ f); λ̂ = Cov_n(Y, f) / ((1 + n/N) Var(f ∪ f̃)), clipped to
    [0, 1] (Cov with 1/n, Var with 1/(n + N − 1), as ``ppi_py``); SE² = Var(λ f̃)/N + Var(Y − λ f)/n
    (1/N and 1/n variances); normal interval.

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
    return PPIResult(
        estimate,
        se,
        estimate - z * se,
        estimate + z * se,
        lam,
        float(y.mean()),
        float(y.mean() - z * classical_se),
        float(y.mean() + z * classical_se),
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
) -> PPIResult:
    """PPI++ mean with a vignette-clustered variance from cluster sums.

    With labelled residual means removed, each cluster g contributes
    ψ_g(λ) = λ a_g + b_g, a_g = Σ_{g, unlabelled}(f̃ − f̃̄)/N − Σ_{g, labelled}(f − f̄)/n,
    b_g = Σ_{g, labelled}(Y − Ȳ)/n, so the labelled and unlabelled items of one vignette are
    correlated as they should be. Var(θ̂) = G/(G − 1) Σ_g ψ_g²; λ̂ = −Σ a_g b_g / Σ a_g² (the
    minimiser of that variance), clipped to [0, 1]; t interval with G − 1 df. INCONCLUSIVE below
    ``min_clusters`` vignettes.

    With one item per cluster and λ fixed, the variance is the iid PPI variance times G/(G − 1).
    Validated against: :func:`ppi_mean` on singleton clusters and a seeded clustered coverage
    simulation (``tests/test_calibration.py``).
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
        variance="clustered (cluster sums)",
    )
    no_interval = None
    if max(min_clusters, 2) > G:
        no_interval = f"{G} cluster(s) < {max(min_clusters, 2)}"
    else:
        scale = G / (G - 1)
        se = float(np.sqrt(scale * np.sum((lam * a + b) ** 2)))
        classical_se = float(np.sqrt(scale * np.sum(b**2)))
        t = float(stats.t.ppf(0.5 + level / 2, G - 1))
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
    return PPIResult(
        estimate,
        se,
        estimate - t * se,
        estimate + t * se,
        lam,
        classical_ci_low=float(y.mean() - t * classical_se),
        classical_ci_high=float(y.mean() + t * classical_se),
        df=float(G - 1),
        **common,
    )
