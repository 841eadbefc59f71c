"""Tests of the Bayesian hierarchical win rate (audit/stats/bayesian/hierarchical.py).

Outside references: scipy.stats.beta (conjugate posterior), scipy.integrate.quad (quadrature),
scipy.stats halfnorm / halfcauchy / t (sigma prior densities), and seeded simulations from the
model with known parameters (recovery, coverage). Fits use 2 chains on aggregated cells: the
machine has 2 shared cores.
"""

from __future__ import annotations

import importlib
import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit

from honestci.audit.errors import DensityMismatchError, InputError
from honestci.audit.policy import THRESHOLDS, Verdict, clears_bar
from honestci.audit.stats.bayesian import density as bayes_density
from honestci.audit.stats.bayesian.cells import aggregate_cells
from honestci.audit.stats.bayesian.hierarchical import fit_winrate_hierarchical, fit_winrate_hierarchical_frame
from honestci.audit.stats.bayesian.model import (
    SIGMA_PRIORS,
    _build_hierarchical_model,
    normal_quadrature,
    winrate_estimand_draws,
)
from honestci.audit.stats.bayesian.pooled import fit_pooled_beta_binomial
from honestci.audit.stats.bayesian.sampling import DensityMismatchWarning

TEST_SAMPLING = dict(chains=2, draws=2000, tune=500)  # 2 x 1000 gave bulk ESS ~300-450
ORIGINAL_HIERARCHICAL_MODEL = _build_hierarchical_model


def simulate_verdicts(rng, mu=0.3, sigma=0.5, beta=0.4, n_vignettes=6, per_order=120, n_runs=1):
    """Per-verdict data from the model (no ties) and the true values of both estimands."""
    u = rng.normal(0.0, sigma, n_vignettes)
    vignette, order, outcome, run = [], [], [], []
    for v in range(n_vignettes):
        for o in (0.5, -0.5):
            for r in range(n_runs):
                m = per_order // n_runs
                outcome.append(rng.binomial(1, expit(mu + u[v] + beta * o), m).astype(float))
                vignette += [f"v{v}"] * m
                order += [o] * m
                run += [f"run{r}"] * m
    true_these = float(np.mean([(expit(mu + uv + beta / 2) + expit(mu + uv - beta / 2)) / 2 for uv in u]))
    true_new = integrate.quad(
        lambda z: stats.norm.pdf(z) * (expit(mu + sigma * z + beta / 2) + expit(mu + sigma * z - beta / 2)) / 2,
        -np.inf,
        np.inf,
    )[0]
    return (np.array(vignette), np.array(order), np.concatenate(outcome), np.array(run)), true_these, true_new


@pytest.fixture(scope="module")
def simulated():
    return simulate_verdicts(np.random.default_rng(20240611))


@pytest.fixture(scope="module")
def fitted(simulated, tmp_path_factory):
    (vignette, order, outcome, _), _, _ = simulated
    path = tmp_path_factory.mktemp("idata") / "fit.nc"
    return fit_winrate_hierarchical(vignette, order, outcome, bar=0.5, seed=11, idata_path=path, **TEST_SAMPLING)


# ---------------------------------------------------------------- pure numerics (no sampling)
@pytest.mark.parametrize("mu,sigma", [(0.0, 0.3), (1.2, 1.0), (-2.0, 2.5), (3.5, 5.0), (4.0, 10.0), (-1.0, 20.0)])
def test_normal_quadrature_matches_scipy_quad(mu, sigma):
    nodes, weights = normal_quadrature()
    quadrature = float(np.sum(weights * expit(mu + sigma * nodes)))
    # scipy.integrate.quad of expit(mu + sigma z) phi(z) over the real line
    reference = integrate.quad(
        lambda z: expit(mu + sigma * z) * stats.norm.pdf(z), -np.inf, np.inf, epsabs=1e-13, limit=200
    )[0]
    assert quadrature == pytest.approx(reference, abs=1e-9)


def test_estimands_closed_form_cases():
    # sigma = 0 and u = 0: both populations equal the order average of expit(mu +- beta/2).
    mu, beta = np.array([0.4, -1.0]), np.array([0.6, 0.0])
    out = winrate_estimand_draws(mu, beta, np.zeros(2), np.zeros((2, 3)))
    expected = (expit(mu + beta / 2) + expit(mu - beta / 2)) / 2
    np.testing.assert_allclose(out["winrate_these"], expected, rtol=1e-12)
    np.testing.assert_allclose(out["winrate_new"], expected, rtol=1e-12)
    np.testing.assert_allclose(out["order_effect_new"], expit(mu + beta / 2) - expit(mu - beta / 2), rtol=1e-12)
    # mu = 0, beta = 0: symmetry makes the new-vignette win rate exactly 1/2 for any sigma.
    out = winrate_estimand_draws(np.zeros(1), np.zeros(1), np.array([2.0]), np.array([[1.0, -0.3]]))
    assert out["winrate_new"][0] == pytest.approx(0.5, abs=1e-12)
    assert out["winrate_these"][0] == pytest.approx((expit(1.0) + expit(-0.3)) / 2, rel=1e-12)


def test_aggregate_cells_counts_ties_as_half():
    cells = aggregate_cells(
        ["a", "a", "a", "b", "b"], [0.5, 0.5, -0.5, 0.5, -0.5], [1, 0.5, 0, 1, 1], run=["r1", "r1", "r1", "r1", "r2"]
    )
    assert cells.n_vignettes == 2 and cells.n_runs == 2 and cells.has_ties
    assert cells.n_verdicts == 5
    first_a = (cells.vignette_index == 0) & (cells.order == 0.5)
    assert cells.n[first_a].tolist() == [2] and cells.wins[first_a].tolist() == [1.5]


@pytest.mark.parametrize(
    "arguments,match",
    [
        ((["a", "b"], [0.5, -0.5], [1, 0.3]), "invalid"),
        ((["a", "b"], [1, -0.5], [1, 0]), "invalid"),
        ((["a", "a"], [0.5, -0.5], [1, 0]), "two vignettes"),
        ((["a", "b"], [0.5, 0.5], [1, 0]), "same presentation order"),
        ((["a", "b"], [0.5], [1, 0]), "'order' has 1"),
    ],
)
def test_aggregate_cells_rejects_bad_input(arguments, match):
    with pytest.raises(InputError, match=match):
        aggregate_cells(*arguments)


@pytest.mark.parametrize("key", sorted(SIGMA_PRIORS))
def test_sigma_prior_density_matches_scipy(key):
    import pymc as pm

    from honestci.audit.stats.bayesian.model import _sigma_with_prior

    prior = SIGMA_PRIORS[key]
    with pm.Model() as model:
        _sigma_with_prior(prior)
    logp = model.compile_logp(jacobian=False)
    sigmas = np.array([0.05, 0.4, 1.0, 2.7])
    ours = np.array([logp({"sigma_log__": np.log(s)}) for s in sigmas])
    if prior.family == "halfnormal":
        reference = stats.halfnorm(scale=prior.scale).logpdf(sigmas)
    elif prior.family == "halfcauchy":
        reference = stats.halfcauchy(scale=prior.scale).logpdf(sigmas)
    else:
        reference = stats.t(df=prior.nu, scale=prior.scale).logpdf(sigmas)  # half-t: same shape
    # equal up to the normalising constant
    np.testing.assert_allclose(ours - ours[0], reference - reference[0], atol=1e-10)


def test_thresholds_hold_sampler_gate_numbers():
    assert (THRESHOLDS.rhat_max, THRESHOLDS.ess_bulk_min, THRESHOLDS.ess_tail_min, THRESHOLDS.divergences_max) == (
        1.01,
        400.0,
        400.0,
        0,
    )


# ---------------------------------------------------------------- sampling
def test_conjugate_beta_binomial_matches_scipy_beta():
    wins, n, a, b = 131.5, 240, 2.0, 3.0  # a fractional (tie-scored) count keeps conjugacy
    result = fit_pooled_beta_binomial(wins, n, a, b, seed=3, **TEST_SAMPLING)
    assert result.diagnostics.converged, result.diagnostics.problems
    exact = stats.beta(a + wins, b + n - wins)  # closed-form posterior
    ess_bulk, ess_tail = result.diagnostics.ess_bulk_min, result.diagnostics.ess_tail_min
    mcse_mean = exact.std() / math.sqrt(ess_bulk)
    assert abs(result.summary.mean - exact.mean()) < 4 * mcse_mean
    for q, sampled in ((0.025, result.summary.lower), (0.5, result.summary.median), (0.975, result.summary.upper)):
        x_q = exact.ppf(q)
        mcse_quantile = math.sqrt(q * (1 - q) / (ess_tail if q != 0.5 else ess_bulk)) / exact.pdf(x_q)
        assert abs(sampled - x_q) < 4 * mcse_quantile, (q, sampled, x_q, mcse_quantile)
    assert result.exact_mean == pytest.approx(exact.mean(), rel=1e-12)


def test_recovery_covers_true_values(simulated, fitted):
    _, true_these, true_new = simulated
    result = fitted
    assert result.converged and result.diagnostics.divergences == 0
    assert result.diagnostics.rhat_max <= 1.01
    assert result.parameterization == "centred"  # 240 verdicts per vignette
    assert result.winrate_these.lower <= true_these <= result.winrate_these.upper
    assert result.winrate_new.lower <= true_new <= result.winrate_new.upper
    # the new-vignette interval carries between-vignette spread: much wider than these-vignettes
    width_these = result.winrate_these.upper - result.winrate_these.lower
    width_new = result.winrate_new.upper - result.winrate_new.lower
    assert width_new > 2 * width_these
    assert result.sigma.lower < 0.5 < result.sigma.upper
    assert result.order_effect_logit.lower < 0.4 < result.order_effect_logit.upper


def test_result_table_ppc_and_saved_idata(fitted):
    import arviz as az

    frame = fitted.to_frame()
    assert list(frame["estimand"]) == [
        "win_rate",
        "win_rate",
        "order_effect",
        "order_effect",
        "order_effect_logit_beta",
        "between_vignette_sd_sigma",
    ]
    assert frame.loc[frame["gated"], "population"].tolist() == ["new_vignettes"]
    assert 0 <= frame.loc[1, "p_above_bar"] <= 1
    # 6 vignettes: at best WARN (few clusters), never PASS
    assert fitted.verdict >= Verdict.WARN
    ppc = fitted.ppc.to_frame()
    assert len(ppc) == 6 and ppc["p_value"].between(0, 1).all()
    assert not fitted.ppc.any_flagged  # data simulated from the model itself
    idata = az.from_netcdf(fitted.idata_path)
    assert {"winrate_new", "winrate_these", "mu", "sigma"} <= set(idata.posterior.data_vars)
    assert int(idata.constant_data["cell_n"].sum()) == fitted.n_verdicts
    assert "verdict" in str(fitted)


def test_unconverged_run_reports_no_estimate(simulated):
    (vignette, order, outcome, _), _, _ = simulated
    result = fit_winrate_hierarchical(
        vignette, order, outcome, bar=0.5, chains=2, draws=20, tune=5, seed=1, parameterization="centred"
    )  # no automatic refit
    assert not result.converged
    assert result.verdict == Verdict.INCONCLUSIVE
    assert result.winrate_new is None and result.winrate_these is None and result.ppc is None
    assert result.diagnostics.problems and "did not converge" in result.message
    assert result.to_frame()[["mean", "lower", "upper", "p_above_bar"]].isna().all().all()


def test_prior_sensitivity_table(simulated):
    (vignette, order, outcome, _), _, _ = simulated
    result = fit_winrate_hierarchical(
        vignette,
        order,
        outcome,
        bar=0.5,
        seed=5,
        prior_sensitivity=True,
        sensitivity_priors=("halfnormal0.5", "halfcauchy1"),
        **TEST_SAMPLING,
    )
    table = result.prior_sensitivity.to_frame()
    assert table["prior"].tolist() == ["HalfNormal(1)", "HalfNormal(0.5)", "HalfCauchy(1)"]
    assert table["converged"].all()
    # the tighter prior pulls sigma down relative to the heavy-tailed one
    assert table.loc[1, "sigma_mean"] < table.loc[2, "sigma_mean"]
    # these-vignettes estimates barely depend on the prior of sigma
    assert table["winrate_these_mean"].max() - table["winrate_these_mean"].min() < 0.01


def test_frame_wrapper_matches_arrays(simulated):
    import pandas as pd

    (vignette, order, outcome, run), _, _ = simulated
    frame = pd.DataFrame({"vignette_id": vignette, "policy_first": order > 0, "value": outcome, "run": run})
    result = fit_winrate_hierarchical_frame(frame, chains=2, draws=20, tune=5, seed=1, parameterization="centred")
    assert result.n_verdicts == len(frame) and result.n_runs == 1 and result.n_vignettes == 6
    with pytest.raises(InputError, match="lacks column"):
        fit_winrate_hierarchical_frame(frame.drop(columns="value"))


def test_seed_generator_is_recorded(simulated):
    (vignette, order, outcome, _), _, _ = simulated
    result = fit_winrate_hierarchical(
        vignette, order, outcome, chains=2, draws=20, tune=5, seed=np.random.default_rng(7), parameterization="centred"
    )
    assert result.seed == int(np.random.default_rng(7).integers(0, 2**31 - 1))


def test_bar_rule_is_clears_bar_and_p_above_bar_is_strict(fitted, simulated):
    """A gated lower end exactly at the bar passes (policy.clears_bar: ci_low >= bar), while
    P(win rate > bar) still counts draws strictly above it. The same seed gives the same draws."""
    (vignette, order, outcome, _), _, _ = simulated
    lower = fitted.winrate_new.lower
    at_bar = fit_winrate_hierarchical(vignette, order, outcome, bar=lower, seed=11, **TEST_SAMPLING)
    assert at_bar.winrate_new.lower == lower
    assert clears_bar(at_bar.winrate_new.lower, lower)
    assert at_bar.verdict == Verdict.WARN  # PASS on the bar, WARN for 6 vignettes; FAIL under "lower > bar"
    assert f">= bar {lower}" in at_bar.message
    draws = at_bar.idata.posterior["winrate_new"].values.ravel()
    assert at_bar.winrate_new.p_above_bar == np.mean(draws > lower) < 1.0


def test_auto_sampler_samples_the_pymc_model_when_nutpie_is_not_installed(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nutpie", None)  # `import nutpie` then fails as where it is absent
    monkeypatch.delitem(sys.modules, "nutpie.compiled_pyfunc", raising=False)
    result = fit_pooled_beta_binomial(131.5, 240, 2.0, 3.0, seed=3, chains=2, draws=300, tune=300)
    assert result.sampler == "pymc"
    assert result.sampler_note.startswith("nutpie") and "could not be imported" in result.sampler_note
    with pytest.raises(ImportError):  # an explicit "nutpie" does not fall back
        fit_pooled_beta_binomial(131.5, 240, 2.0, 3.0, sampler="nutpie", chains=2, draws=10, tune=10)


def _edited_hierarchical_model(cells, prior, centred):
    """The PyMC model with a term added, as a developer editing _build_hierarchical_model would."""
    import pymc as pm

    model = ORIGINAL_HIERARCHICAL_MODEL(cells, prior, centred)
    with model:
        pm.Deterministic("edited_term", 2.0 * model["mu"])
    return model


def test_an_edited_pymc_model_refuses_the_density_loudly_and_is_sampled_itself(monkeypatch, simulated, tmp_path):
    import arviz as az

    import honestci.audit.stats.bayesian.model as bayes_model

    (vignette, order, outcome, _), _, _ = simulated
    monkeypatch.setattr(bayes_model, "_build_hierarchical_model", _edited_hierarchical_model)
    path = tmp_path / "edited.nc"
    with pytest.warns(DensityMismatchWarning, match="hierarchical win-rate model no longer matches"):
        result = fit_winrate_hierarchical(
            vignette, order, outcome, chains=2, draws=100, tune=100, seed=1, parameterization="centred", idata_path=path
        )
    assert result.sampler == "pymc"
    assert "hand-derived density refused itself" in result.message  # the message the report shows
    assert "edited_term" in az.from_netcdf(path).posterior  # the edit was sampled, not ignored
    with pytest.raises(DensityMismatchError, match="What to do: Re-derive"):
        fit_winrate_hierarchical(vignette, order, outcome, sampler="nutpie", chains=2, draws=10, tune=10)


@pytest.mark.parametrize(
    "density_model,error",
    [
        # a density that cannot be evaluated anywhere (NaN data from a bug upstream): nutpie's RuntimeError
        (lambda: bayes_density.pooled_nutpie_model(1.0, 1.0, 10.0, np.nan), "All initialization points failed"),
        # a bug before sampling: a cell table without wins
        (lambda: bayes_density.paired_nutpie_model(["a"], {"cell_vignette": [0]}), "cell_order"),
        # an import other than nutpie's or numba's
        (lambda: importlib.import_module("honestci.audit.stats.no_such_kernel"), "no_such_kernel"),
    ],
)
def test_auto_sampler_lets_every_other_failure_propagate(density_model, error):
    from honestci.audit.stats.bayesian.sampling import sample_posterior

    def pymc_model():
        pytest.fail("sampler='auto' fell back to PyMC instead of raising")

    with pytest.raises(Exception, match=error):
        sample_posterior(pymc_model, density_model, "auto", 2, 10, 10, 0, False)


# ---------------------------------------------------------------- slow tiers
@pytest.mark.slow
def test_fast_path_and_pymc_sampler_agree_within_monte_carlo_error():
    """nutpie on the hand-derived density (sampler="nutpie") against PyMC's NUTS on the PyMC model."""
    data, _true_these, _ = simulate_verdicts(np.random.default_rng(99), per_order=120, n_runs=3)
    vignette, order, outcome, run = data
    by_nutpie = fit_winrate_hierarchical(vignette, order, outcome, run=run, sampler="nutpie", seed=2, **TEST_SAMPLING)
    by_pymc = fit_winrate_hierarchical(vignette, order, outcome, run=run, sampler="pymc", seed=2, **TEST_SAMPLING)
    for result in (by_nutpie, by_pymc):
        assert result.converged and result.diagnostics.divergences == 0 and result.n_runs == 3
        # both samplers' posteriors carry the same labelled cells (PyMC's own model data replaced)
        assert set(result.idata.constant_data.data_vars) == {
            "cell_vignette",
            "cell_order",
            "cell_run",
            "cell_judge",
            "cell_n",
            "cell_wins",
        }
    z_975 = stats.norm.ppf(0.975)
    for name in ("winrate_these", "winrate_new", "sigma", "order_effect_logit"):
        a, b = getattr(by_nutpie, name), getattr(by_pymc, name)
        # Monte Carlo standard errors from the smallest ESS of each fit (conservative), with the
        # posterior SD and density at the 2.5% / 97.5% quantiles taken as normal's.
        sd = (a.upper - a.lower + b.upper - b.lower) / (4 * z_975)
        ess_bulk = (by_nutpie.diagnostics.ess_bulk_min, by_pymc.diagnostics.ess_bulk_min)
        ess_tail = (by_nutpie.diagnostics.ess_tail_min, by_pymc.diagnostics.ess_tail_min)
        mcse_mean = sd * math.sqrt(1 / ess_bulk[0] + 1 / ess_bulk[1])
        mcse_quantile = math.sqrt(0.025 * 0.975 * (1 / ess_tail[0] + 1 / ess_tail[1])) / (stats.norm.pdf(z_975) / sd)
        print(
            f"{name}: mean {a.mean:.4f} vs {b.mean:.4f} (MCSE {mcse_mean:.4f}), 2.5% {a.lower:.4f} vs "
            f"{b.lower:.4f}, 97.5% {a.upper:.4f} vs {b.upper:.4f} (MCSE {mcse_quantile:.4f})"
        )
        assert abs(a.mean - b.mean) < 4 * mcse_mean, (name, a.mean, b.mean, mcse_mean)
        assert abs(a.lower - b.lower) < 4 * mcse_quantile, (name, a.lower, b.lower, mcse_quantile)
        assert abs(a.upper - b.upper) < 4 * mcse_quantile, (name, a.upper, b.upper, mcse_quantile)


@pytest.mark.slow
@pytest.mark.coverage
def test_interval_coverage_small_study():
    """20 seeded replications; each 95% interval should miss about once."""
    covered_these = covered_new = unconverged = 0
    replications = 20
    for replication in range(replications):
        data, true_these, true_new = simulate_verdicts(np.random.default_rng(1000 + replication))
        result = fit_winrate_hierarchical(*data[:3], seed=replication)  # default 4 x (1000 + 1000)
        if not result.converged:  # reported INCONCLUSIVE, never an interval: count it as a miss
            unconverged += 1
            continue
        covered_these += result.winrate_these.lower <= true_these <= result.winrate_these.upper
        covered_new += result.winrate_new.lower <= true_new <= result.winrate_new.upper
    # Binomial(20, 0.95): P(X <= 15) = 0.016; nominal coverage passes with probability 0.98
    print(
        f"coverage: these {covered_these}/{replications}, new {covered_new}/{replications}, unconverged {unconverged}"
    )
    assert unconverged <= 2, unconverged
    assert covered_these >= 16 and covered_new >= 16, (covered_these, covered_new, unconverged)


# ---------------------------------------------------------------- contest scores (the audit's estimand)
def simulate_contests(rng, rate=0.7, sd=0.5, order_bias=0.3, tie_share=0.3, n_vignettes=12, per_vignette=150):
    """Both-order contests from the estimands' truth model (estimands module docstring): per order
    win S(eta +- b - t), loss S(-eta -+ b - t), tie otherwise, independently. Returns vignette
    labels, scores, and the contest-score and per-verdict rates of these vignettes and of new ones."""
    from scipy import optimize

    from honestci.audit.data.contests import score_contests
    from honestci.audit.stats import estimands

    def ties_at(width):  # the location depends on the tie width: solve both at once
        location = estimands.location_for_rate(rate, sd, order_bias, width)
        return estimands.tie_share(location, sd, order_bias, width) - tie_share

    tie = optimize.brentq(ties_at, 0.0, 10.0, xtol=1e-12)
    mu = estimands.location_for_rate(rate, sd, order_bias, tie)
    eta = mu + sd * rng.standard_normal(n_vignettes)
    clusters = np.repeat(np.arange(n_vignettes), per_vignette)
    orders = []
    for side in (1.0, -1.0):
        win = expit(eta[clusters] + side * order_bias - tie)
        lose = expit(-eta[clusters] - side * order_bias - tie)
        draw = rng.random(clusters.size)
        orders.append(np.where(draw < win, 1.0, np.where(draw < win + lose, 0.0, 0.5)))
    scores = score_contests(*orders)

    def per_verdict(location):
        return np.mean(
            [
                expit(location + s * order_bias - tie)
                + 0.5 * (1 - expit(location + s * order_bias - tie) - expit(-location - s * order_bias - tie))
                for s in (1.0, -1.0)
            ],
            axis=0,
        )

    nodes, weights = np.polynomial.hermite_e.hermegauss(96)
    truth = {
        "these": float(np.mean(estimands.vignette_rate(eta, order_bias, tie))),
        "new": estimands.new_vignette_rate(mu, sd, order_bias, tie),
        "these_per_verdict": float(np.mean(per_verdict(eta))),
        "new_per_verdict": float(np.dot(weights / weights.sum(), per_verdict(mu + sd * nodes))),
        "ties": float(np.mean(np.concatenate(orders) == 0.5)),
        "design_ties": estimands.tie_share(mu, sd, order_bias, tie),
    }
    return np.array([f"v{g:02d}" for g in clusters]), scores, truth


def test_contest_cells_are_two_trials_per_contest():
    from honestci.audit.stats.bayesian.cells import aggregate_contest_cells

    cells = aggregate_contest_cells(["a", "a", "a", "b", "b"], [1, 0.5, 0.5, 0, 1], run=["r", "r", "s", "r", "r"])
    # cells (a, r), (a, s), (b, r): contests 2, 1, 2; wins 2 * (1.5, 0.5, 1); dispersion: only
    # (a, r) and (b, r) have 2 contests and a mean strictly inside (0, 1)
    np.testing.assert_array_equal(cells.contests, [2, 1, 2])
    assert cells.unit == "contest" and (cells.order == 0).all() and cells.has_ties
    # Pearson by hand: (a, r) ybar 3/4: (2*(1/4))^2 * 2 / (2 * 3/4 * 1/4) = 4/3; (b, r) ybar 1/2: 2 / (1/2) = 4
    assert cells.dispersion_estimate == pytest.approx((4 / 3 + 4) / 2, rel=1e-12)
    assert cells.dispersion == cells.dispersion_estimate
    np.testing.assert_allclose(cells.n * cells.dispersion, [4, 2, 4])
    np.testing.assert_allclose(cells.wins * cells.dispersion, [3, 1, 2])
    assert cells.n_verdicts == 10
    with pytest.raises(InputError, match="invalid"):
        aggregate_contest_cells(["a", "b"], [1, 1.25])  # continuous scores in [0, 1] are accepted, not beyond


def test_contest_dispersion_matches_closed_form():
    """Independent orders with ties: phi = Var(2s) / (2p(1 - p)) < 1; a judge that never splits the
    orders (s in {0, 1}): Var(2s) = 4p(1 - p), phi = 2. 40 000 contests in 4 cells: MC-SE ~0.01."""
    from honestci.audit.data.contests import score_contests
    from honestci.audit.stats.bayesian.cells import contest_dispersion

    rng = np.random.default_rng(5)
    cell = np.repeat(np.arange(4), 10_000)
    win, lose = 0.65, 0.15  # per order, independently; ties 0.20
    orders = [rng.choice([1.0, 0.0, 0.5], size=cell.size, p=[win, lose, 1 - win - lose]) for _ in range(2)]
    scores = score_contests(*orders)
    both, neither = win**2, lose**2  # P(s = 1), P(s = 0)
    p = both + 0.5 * (1 - both - neither)
    closed_form = 4 * (both + 0.25 * (1 - both - neither) - p**2) / (2 * p * (1 - p))
    estimate, df = contest_dispersion(cell, scores)
    assert df == cell.size - 4 and closed_form < 1
    assert estimate == pytest.approx(closed_form, abs=0.04)
    consistent = (rng.random(cell.size) < 0.7).astype(float)
    assert contest_dispersion(cell, consistent)[0] == pytest.approx(2.0, abs=0.05)


@pytest.fixture(scope="module")
def contest_fit():
    vignette, scores, truth = simulate_contests(np.random.default_rng(20240615))
    from honestci.audit.stats.bayesian.hierarchical import fit_contest_scores_hierarchical

    return fit_contest_scores_hierarchical(vignette, scores, bar=0.6, seed=3, **TEST_SAMPLING), truth


def test_contest_fit_recovers_the_contest_score_rate_not_the_per_verdict_one(contest_fit):
    """30% ties per order at rate 0.7: the per-verdict rate lies ~8 points above the contest-score one. The
    posterior mean is within 3 posterior SD of the contest-score truth and nearer to it."""
    result, truth = contest_fit
    assert truth["design_ties"] == pytest.approx(0.3, abs=1e-6) and truth["ties"] > 0.25  # 0.323 drawn
    assert result.converged and result.unit == "contest" and result.n_contests == 12 * 150
    assert result.ppc is not None and not result.ppc.any_flagged and not result.withheld
    assert result.order_effect_logit is None and result.has_ties
    assert result.dispersion == 1.0 and result.dispersion_estimate < 1  # ties under-disperse
    draws = {name: result.idata.posterior[f"winrate_{name}"].values.ravel() for name in ("these", "new")}
    for name in ("these", "new"):
        mean, sd = draws[name].mean(), draws[name].std()
        gap = truth[f"{name}_per_verdict"] - truth[name]
        assert gap > 2 * sd, (name, gap, sd)  # the two estimands are distinguishable here
        assert abs(mean - truth[name]) < 3 * sd, (name, mean, truth[name], sd)
        assert abs(mean - truth[name]) < abs(mean - truth[f"{name}_per_verdict"])
    # the bar rule is the gate's: clears_bar on the gated (new vignettes) lower end
    assert (result.verdict != Verdict.FAIL) == clears_bar(result.winrate_new.lower, 0.6)


def test_contest_new_vignette_draws_are_the_estimands_quadrature(contest_fit):
    """One run and judge: each draw's new-vignette rate is estimands.new_vignette_rate(mu, sigma)."""
    from honestci.audit.stats import estimands

    result, _ = contest_fit
    posterior = result.idata.posterior
    mu, sigma = posterior["mu"].values.ravel()[:50], posterior["sigma"].values.ravel()[:50]
    expected = [estimands.new_vignette_rate(m, s) for m, s in zip(mu, sigma)]
    np.testing.assert_allclose(posterior["winrate_new"].values.ravel()[:50], expected, atol=1e-9)


def test_saved_posterior_is_a_complete_inference_data_for_loo_and_ppc(contest_fit, tmp_path):
    """posterior.nc as the audit writes it: every group ArviZ needs, no transformed value variables,
    the pointwise log-likelihood of each cell the binomial log pmf (phi = 1 here, whole counts), the
    saved replicates the ones the posterior predictive check used, and az.loo / az.plot_ppc run."""
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result, _ = contest_fit
    path = tmp_path / "posterior.nc"
    result.idata.to_netcdf(path)
    idata = az.from_netcdf(path)
    groups = {"posterior", "posterior_predictive", "log_likelihood", "observed_data", "constant_data", "sample_stats"}
    assert groups <= set(idata.groups())
    assert not [name for name in idata.posterior.data_vars if name.endswith("__")]
    assert {"mu", "sigma", "u", "winrate_these", "winrate_new"} <= set(idata.posterior.data_vars)
    cells = idata.constant_data
    n, wins = cells["cell_n"].values, idata.observed_data["wins"].values
    assert result.dispersion == 1.0 and np.array_equal(n, np.rint(n)) and np.array_equal(wins, np.rint(wins))
    assert np.array_equal(wins, cells["cell_wins"].values) and int(n.sum()) == 2 * result.n_contests
    assert "vignette, run, judge" in idata.observed_data.attrs["observation"]
    # One run and one judge: logit p of a cell is mu + u_v.
    posterior = idata.posterior
    eta = posterior["mu"].values[..., None] + posterior["u"].values
    expected = stats.binom.logpmf(wins, n, expit(eta))
    np.testing.assert_allclose(idata.log_likelihood["wins"].values, expected, rtol=1e-10)
    # One group per cell: the check's predicted shares are the saved replicates' mean share.
    replicated_share = idata.posterior_predictive["wins"].values / n
    np.testing.assert_allclose(replicated_share.mean(axis=(0, 1)), result.ppc.predicted_mean, rtol=1e-12)
    with warnings.catch_warnings():  # one cell per vignette: each u_v rests on its cell, Pareto k is high
        warnings.simplefilter("ignore", UserWarning)
        loo = az.loo(idata, pointwise=True)
    assert loo["n_data_points"] == 12 and loo["pareto_k"].size == 12 and np.isfinite(loo["elpd_loo"])
    axes = az.plot_ppc(idata, num_pp_samples=20, random_seed=1)
    assert np.size(axes) == 1
    plt.close("all")


def misfitting_contests(rng, n_vignettes=8, per_cell=40):
    """Two runs whose advantage flips sign between vignettes (a run x vignette interaction the
    model's additive run offset cannot reproduce): shares ~0.85 and ~0.15 in the two runs."""
    vignette, run, scores = [], [], []
    for g in range(n_vignettes):
        for r, p in (("run-a", 0.85), ("run-b", 0.15)) if g % 2 else (("run-a", 0.15), ("run-b", 0.85)):
            scores.append(rng.binomial(2, p, per_cell) / 2)  # independent orders, no ties
            vignette += [f"v{g}"] * per_cell
            run += [r] * per_cell
    return np.array(vignette), np.concatenate(scores), np.array(run)


def test_a_failed_ppc_withholds_the_win_rate():
    from honestci.audit.stats.bayesian.hierarchical import fit_contest_scores_hierarchical

    vignette, scores, run = misfitting_contests(np.random.default_rng(8))
    result = fit_contest_scores_hierarchical(vignette, scores, run=run, bar=0.4, seed=2, **TEST_SAMPLING)
    assert result.converged and result.ppc.any_flagged
    assert result.winrate_new is None and result.winrate_these is None and result.winrate_quantiles is None
    assert result.verdict == Verdict.INCONCLUSIVE
    assert "withheld" in result.withheld and result.withheld in result.message
    assert "16 of 16 groups (v0/run-a, v0/run-b" in result.withheld
    assert set(result.ppc.to_frame()["run"]) == {"run-a", "run-b"}


def _contest_table(vignette, scores, run):
    """A ContestTable whose both-order outcomes give ``scores`` (1: win/win, 0: loss/loss, 1/2: win/loss)."""
    import pandas as pd

    from honestci.audit.data.contests import ContestTable

    first = np.where(scores == 0, "loss", "win")
    second = np.where(scores == 1, "win", "loss")
    frame = pd.DataFrame(
        {
            "contest_id": [f"c{i}" for i in range(len(scores))],
            "judge": "judge-1",
            "vignette_id": vignette,
            "run": run,
            "policy_response": [f"p{i}" for i in range(len(scores))],
            "opponent_response": [f"o{i}" for i in range(len(scores))],
            "outcome_policy_first": first,
            "outcome_policy_second": second,
        }
    )
    return ContestTable(frame, "policy", "opponent", "judge-1")


def test_the_audit_fits_contest_scores_and_a_failed_ppc_reads_inconclusive():
    """The audit's Bayesian step (pipeline._fit_bayes_model, then _bayes_rows) fits the policy-scored contest scores, runs
    the PPC, and on the misfitting data withholds the figure in its interval rows, its report
    summary and the sampler_converged gate."""
    from honestci.audit.gates import gate_sampler_converged
    from honestci.audit.pipeline import _bayes_rows, _bayes_summary, _fit_bayes_model
    from honestci.audit.stats.intervals import IntervalResult

    vignette, scores, run = misfitting_contests(np.random.default_rng(8))
    table = _contest_table(vignette, scores, run)
    # two invalid verdicts, scored against the claim (a loss) as the built-in policy does
    table.frame.loc[[0, 1], "outcome_policy_first"] = "invalid"
    reference = IntervalResult(
        "cr2",
        "CR2",
        "new_vignettes",
        0.5,
        0.4,
        0.6,
        level=0.95,
        n=len(scores),
        n_clusters=8,
        icc=0.0,
        design_effect=1.0,
        n_effective=float(len(scores)),
    )
    fit = _fit_bayes_model(table, bar=0.4, level=0.95, seed=4, invalid="against_claim")
    check = _bayes_rows(fit, reference, level=0.95, seed=4)
    result = check.result
    assert result.unit == "contest" and result.n_contests == len(scores) and result.n_runs == 2
    assert result.converged and result.ppc.any_flagged and result.withheld
    assert [row.estimate for row in check.interval_rows] == [None, None]
    assert all(row.verdict == Verdict.INCONCLUSIVE and "withheld" in row.note for row in check.interval_rows)
    summary = _bayes_summary(check)
    assert summary["withheld"] == result.withheld and summary["ppc_groups_flagged"] == 16
    assert not any(key.startswith("posterior_quantiles") for key in summary)
    gate = gate_sampler_converged(check)
    assert gate.verdict == Verdict.INCONCLUSIVE and "withheld" in gate.message


@pytest.fixture(params=[False, True], ids=["one block", "many blocks"])
def replicate_blocks(request, monkeypatch):
    """Both ways: every array in one block, and blocks of 7 values (a draw or a group at a time)."""
    if request.param:
        monkeypatch.setattr("honestci.audit.stats.bayesian.predictive._REPLICATE_BLOCK_VALUES", 7)


def test_cell_linear_predictor_is_the_models_sum_to_the_bit(replicate_blocks):
    # Built in place term by term; the reference is the model's expression mu + u_v + beta o + a_r + b_j
    # as NumPy evaluates it left to right, on random shapes and scales (whole-array equality of bits).
    from types import SimpleNamespace

    from honestci.audit.stats.bayesian.predictive import cell_linear_predictor, replicate_cell_wins

    rng = np.random.default_rng(3)
    for _ in range(20):
        S, V, R, J, C = (int(rng.integers(1, k)) for k in (40, 30, 4, 4, 200))
        cells = SimpleNamespace(
            vignette_index=rng.integers(0, V, C),
            run_index=rng.integers(0, R, C),
            judge_index=rng.integers(0, J, C),
            order=rng.choice([-0.5, 0.0, 0.5], C),
            n=rng.uniform(1.0, 50.0, C),
        )
        mu, beta = rng.normal(size=S), rng.normal(size=S)
        u = rng.normal(size=(S, V)) * rng.choice([1e-8, 1.0, 1e8])
        run = rng.normal(size=(S, R)) if R > 1 else None
        judge = rng.normal(size=(S, J)) if J > 1 else None
        expected = mu[:, None] + u[:, cells.vignette_index] + beta[:, None] * cells.order[None, :]
        if run is not None:
            expected = expected + run[:, cells.run_index]
        if judge is not None:
            expected = expected + judge[:, cells.judge_index]
        eta = cell_linear_predictor(cells, mu, beta, u, run, judge)
        assert np.array_equal(eta.view(np.int64), expected.view(np.int64))
        # the replicates: Binomial(round(n), expit(eta)) rescaled to n, the same numbers in place
        trials = np.maximum(1.0, np.rint(cells.n))
        plain = np.random.default_rng(9).binomial(trials.astype(np.int64)[None, :], expit(eta))
        plain = plain * (cells.n / trials)[None, :]
        np.testing.assert_array_equal(replicate_cell_wins(cells, eta, np.random.default_rng(9)), plain)


def _check_in_one_piece(cells, replicated_wins, level, alpha):
    """The posterior predictive check's figures as one (S, groups) array gives them: the reference
    of :func:`test_posterior_predictive_check_is_the_same_in_blocks`."""
    from scipy import sparse

    from honestci.audit.stats.bayesian.cells import unique_rows

    _, group_of_cell = unique_rows(
        (cells.vignette_index, cells.n_vignettes), (cells.run_index, cells.n_runs), (cells.judge_index, cells.n_judges)
    )
    n_groups = int(group_of_cell.max()) + 1
    membership = sparse.csr_matrix(
        (np.ones(cells.n.size), (np.arange(cells.n.size), group_of_cell)), shape=(cells.n.size, n_groups)
    )
    n_group = membership.T @ cells.n
    share = np.asarray((membership.T @ replicated_wins.T).T) / n_group
    observed = (membership.T @ cells.wins) / n_group
    upper = np.sum(share >= observed - 1e-12, axis=0) / share.shape[0]
    lower = np.sum(share <= observed + 1e-12, axis=0) / share.shape[0]
    tail = (1.0 - level) / 2.0
    quantiles = np.quantile(share, [tail, 1.0 - tail], axis=0)
    return np.minimum(1.0, 2.0 * np.minimum(upper, lower)), share.mean(axis=0), quantiles[0], quantiles[1]


@pytest.mark.parametrize("unit", ["contest", "verdict"])
def test_posterior_predictive_check_is_the_same_in_blocks(unit, monkeypatch):
    # A block of groups at a time (one-cell groups gathered from the replicates, several-cell
    # groups summed first): the same figures as the whole (S, groups) array, however it is cut.
    from honestci.audit.stats.bayesian import predictive as bayes_predictive
    from honestci.audit.stats.bayesian.cells import aggregate_cells, aggregate_contest_cells

    rng = np.random.default_rng(11)
    vignette = rng.integers(0, 40, 3000).astype(str)
    run = rng.integers(0, 3, 3000).astype(str)
    if unit == "contest":
        cells = aggregate_contest_cells(vignette, rng.choice([0.0, 0.5, 1.0], 3000), run)
    else:
        cells = aggregate_cells(vignette, rng.choice([0.5, -0.5], 3000), rng.choice([0.0, 0.5, 1.0], 3000), run)
    replicated = rng.binomial(np.rint(cells.n).astype(np.int64)[None, :], 0.5, size=(300, cells.n.size)) * 1.0
    expected = _check_in_one_piece(cells, replicated, 0.9, 0.05)
    for block_values in (bayes_predictive._REPLICATE_BLOCK_VALUES, 7 * 300, 300):
        monkeypatch.setattr(bayes_predictive, "_REPLICATE_BLOCK_VALUES", block_values)
        check = bayes_predictive.check_replicates(cells, replicated, 0.9, 0.05)
        got = (check.p_value, check.predicted_mean, check.predicted_lower, check.predicted_upper)
        for name, a, b in zip(("p", "mean", "lower", "upper"), got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-15, atol=0, err_msg=name)
        if block_values == bayes_predictive._REPLICATE_BLOCK_VALUES:
            first = got
        else:  # and bit for bit the same however it is cut
            assert all(np.array_equal(a, b) for a, b in zip(got, first))
