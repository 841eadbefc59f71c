"""The pooled Beta-binomial model: the conjugate special case that checks the sampling path.

p ~ Beta(a, b) with the quasi-binomial likelihood of :mod:`honestci.audit.stats.bayesian.model`,
sampled, diagnosed and summarised by the code every Bayesian fit uses
(:mod:`honestci.audit.stats.bayesian.sampling`), beside its closed-form posterior
Beta(a + w, b + n - w) (scipy.stats.beta).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from honestci.audit.errors import InputError
from honestci.audit.policy import THRESHOLDS, Thresholds
from honestci.audit.stats.bayesian.model import quasi_binomial_loglik
from honestci.audit.stats.bayesian.sampling import (
    PosteriorSummary,
    SamplerDiagnostics,
    check_sampling_sizes,
    diagnose_sampler,
    resolve_seed,
    sample_posterior,
    stacked_draws,
    summarise_draws,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass(frozen=True)
class PooledBetaBinomialResult:
    """Pooled win rate with a Beta(a, b) prior, sampled by the same machinery as the main model.

    ``exact_*`` are the closed-form Beta(a + w, b + n - w) values, reported beside the sampled
    ones so the sampling path can be checked against them.
    """

    summary: PosteriorSummary | None
    diagnostics: SamplerDiagnostics
    posterior_sd: float | None
    exact_mean: float
    exact_lower: float
    exact_upper: float
    a: float
    b: float
    wins: float
    n: int
    sampler: str
    sampler_note: str
    seed: int

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        summary = self.summary
        return pd.DataFrame(
            [
                {
                    "source": "sampled",
                    "mean": math.nan if summary is None else summary.mean,
                    "lower": math.nan if summary is None else summary.lower,
                    "upper": math.nan if summary is None else summary.upper,
                },
                {
                    "source": "closed_form",
                    "mean": self.exact_mean,
                    "lower": self.exact_lower,
                    "upper": self.exact_upper,
                },
            ]
        )


def _build_pooled_model(a: float, b: float, n: float, wins: float):
    """p ~ Beta(a, b) with the quasi-binomial likelihood of ``wins`` in ``n`` (PyMC)."""
    import pymc as pm

    with pm.Model() as model:
        total = pm.Data("total", np.array(float(n)))
        successes = pm.Data("successes", np.array(float(wins)))
        p = pm.Beta("p", alpha=a, beta=b)
        pm.Potential("quasi_binomial_loglik", quasi_binomial_loglik(pm.math.logit(p), total, successes))
    return model


def fit_pooled_beta_binomial(
    wins: float,
    n: int,
    a: float = 1.0,
    b: float = 1.0,
    sampler: str = "auto",
    chains: int = 4,
    draws: int = 1000,
    tune: int = 1000,
    seed: int | np.random.Generator = 0,
    level: float = 0.95,
    thresholds: Thresholds = THRESHOLDS,
) -> PooledBetaBinomialResult:
    r"""Pooled model p ~ Beta(a, b), w | p ~ Binomial(n, p): no vignette and no order effect.

    The posterior is Beta(a + w, b + n - w) in closed form; sampling it with the same
    likelihood, sampler, summary and diagnostics code as
    :func:`~honestci.audit.stats.bayesian.hierarchical.fit_winrate_hierarchical` (by default nutpie on a hand-written
    compiled density through the same interface,
    :func:`honestci.audit.stats.bayesian.density.pooled_nutpie_model`) checks that path. Validated
    against scipy.stats.beta.
    """
    if n < 1 or not 0 <= wins <= n:
        raise InputError(f"wins={wins}, n={n} is not a valid count.", fix="Use 0 <= wins <= n, n >= 1.")
    if a <= 0 or b <= 0:
        raise InputError(f"Beta({a}, {b}) is not a proper prior.", fix="Use a > 0 and b > 0.")
    check_sampling_sizes(chains, draws, tune, level)
    seed_int = resolve_seed(seed)

    def density_model():
        from honestci.audit.stats.bayesian.density import pooled_nutpie_model

        return pooled_nutpie_model(a, b, float(n), float(wins))

    idata, sampler_used, note = sample_posterior(
        lambda: _build_pooled_model(a, b, n, wins), density_model, sampler, chains, draws, tune, seed_int, False
    )
    diagnostics = diagnose_sampler(idata, ["p"], chains, draws, tune, thresholds)
    from scipy import stats

    exact = stats.beta(a + wins, b + n - wins)
    tail = (1.0 - level) / 2.0
    p_draws = stacked_draws(idata, "p")
    return PooledBetaBinomialResult(
        summary=summarise_draws(p_draws, level) if diagnostics.converged else None,
        diagnostics=diagnostics,
        posterior_sd=float(p_draws.std(ddof=1)) if diagnostics.converged else None,
        exact_mean=float(exact.mean()),
        exact_lower=float(exact.ppf(tail)),
        exact_upper=float(exact.ppf(1.0 - tail)),
        a=a,
        b=b,
        wins=float(wins),
        n=int(n),
        sampler=sampler_used,
        sampler_note=note,
        seed=seed_int,
    )


__all__ = [
    "PooledBetaBinomialResult",
    "fit_pooled_beta_binomial",
]
