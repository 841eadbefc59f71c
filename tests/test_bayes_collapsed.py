"""The collapsed sampler of the hierarchical model (audit/stats/bayesian/collapsed.py) and the parts of
the fit it brought: exact posterior predictive tails, thinned predictive arrays, PosteriorGroups."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit

from honestci.audit.stats.bayesian import collapsed as bc
from honestci.audit.stats.bayesian.cells import aggregate_contest_cells
from honestci.audit.stats.bayesian.grid import rate_posterior
from honestci.audit.stats.bayesian.hierarchical import fit_contest_scores_hierarchical
from honestci.audit.stats.bayesian.model import COLLAPSED_MIN_VIGNETTES, uses_collapsed_sampler
from honestci.audit.stats.bayesian.predictive import check_replicates, replicate_cell_wins


def _contests(seed, vignettes, per_vignette, runs=1, sd=0.8, centre=0.6, run_shift=0.2):
    rng = np.random.default_rng(seed)
    effect = rng.normal(0.0, sd, vignettes)
    vignette = np.repeat(np.arange(vignettes), per_vignette)
    run = np.tile(np.arange(per_vignette) % runs, vignettes)
    p = expit(centre + effect[vignette] + run_shift * (run - (runs - 1) / 2))
    score = ((rng.random(vignette.size) < p).astype(float) + (rng.random(vignette.size) < p)) / 2.0
    labels = np.array([f"v{g:04d}" for g in vignette], dtype=object)
    return labels, score, (np.array([f"run-{r}" for r in run], dtype=object) if runs > 1 else None)


def _posterior(seed=3, vignettes=40, per_vignette=12, runs=2):
    labels, score, run = _contests(seed, vignettes, per_vignette, runs)
    return bc.CollapsedPosterior(aggregate_contest_cells(labels, score, run), 0.0, 1.0)


def test_vignette_integrals_match_scipy_quad():
    # Outside reference: scipy.integrate.quad of each vignette's integrand at a theta away from
    # the mode; the log marginal (without the prior) is their sum.
    posterior = _posterior(vignettes=6, per_vignette=3)
    theta = np.array([[0.4, math.log(1.3), 0.25]])
    mu, sigma, _, run_effect, _ = posterior.unpack(theta)
    total = 0.0
    for v in range(6):
        cells = slice(posterior.start[v], posterior.start[v + 1])
        kappa = mu[0] + run_effect[0, posterior.run_index[cells]]
        n, w = posterior.n[cells], posterior.w[cells]

        def integrand(u, kappa=kappa, n=n, w=w):
            eta = u + kappa
            return math.exp(np.sum(w * eta - n * np.logaddexp(0.0, eta))) * stats.norm.pdf(u, 0.0, sigma[0])

        total += math.log(integrate.quad(integrand, -12, 12, epsabs=0, epsrel=1e-12, limit=200)[0])
    got = posterior.log_density(theta)[0] - posterior.log_prior(theta)[0]
    # 5 adaptive nodes on 3 contests per vignette: the integrand is least normal here.
    assert got == pytest.approx(total, abs=2e-3)
    posterior.nodes, weights = np.polynomial.hermite.hermgauss(31)
    posterior.log_weights = np.log(weights)
    assert posterior.log_density(theta)[0] - posterior.log_prior(theta)[0] == pytest.approx(total, abs=1e-9)


def _effects_beside_the_integrals(posterior, thetas):
    _, effects, attempts = posterior.log_density_and_effects(thetas, np.random.default_rng(5))
    return effects, attempts / effects.size


def _effects_by_rejection_alone(posterior, thetas):
    unpacked = posterior.unpack(thetas)
    effects = np.full((thetas.shape[0], posterior.start.size - 1), np.nan)
    pending_draw, pending_vignette = np.nonzero(np.isnan(effects))
    attempts = bc._draw_pending(posterior, unpacked, np.random.default_rng(5), effects, pending_draw, pending_vignette)
    return effects, attempts / effects.size


@pytest.mark.parametrize("draw", [_effects_beside_the_integrals, _effects_by_rejection_alone])
def test_vignette_effects_follow_their_exact_conditional(draw):
    # Outside reference: the conditional CDF by scipy.integrate.quad; 20,000 draws of one
    # vignette's effect at a fixed theta, Kolmogorov-Smirnov against it. Both ways of drawing:
    # a first attempt beside the vignette's integral (tangents at its middle nodes), and the
    # attempts of the effects that one leaves undrawn (tangents around a Newton step).
    posterior = _posterior(vignettes=3, per_vignette=4)
    theta = np.array([0.3, math.log(0.9), -0.1])
    draws = 20_000
    thetas = np.tile(theta, (draws, 1))
    effects, attempts = draw(posterior, thetas)
    unpacked = posterior.unpack(thetas)
    mu, sigma, _, run_effect, _ = unpacked
    assert np.isfinite(effects).all()
    assert 1.0 < attempts < 1.25  # the three-tangent envelope accepts ~89% for a normal conditional
    cells = slice(posterior.start[1], posterior.start[2])
    kappa = mu[0] + run_effect[0, posterior.run_index[cells]]
    n, w = posterior.n[cells], posterior.w[cells]

    def density(u):
        eta = u + kappa
        return math.exp(np.sum(w * eta - n * np.logaddexp(0.0, eta)) - 0.5 * (u / sigma[0]) ** 2)

    norm = integrate.quad(density, -15, 15, epsrel=1e-12, limit=200)[0]
    cdf = np.vectorize(lambda x: integrate.quad(density, -15, x, epsrel=1e-10, limit=200)[0] / norm)
    grid = np.linspace(effects[:, 1].min(), effects[:, 1].max(), 400)
    table = cdf(grid)
    result = stats.kstest(effects[:, 1], lambda x: np.interp(x, grid, table))
    assert result.pvalue > 0.01


def test_sum_zero_basis_is_orthonormal_and_sums_to_zero():
    for levels in (2, 3, 5):
        basis = bc.sum_zero_basis(levels)
        np.testing.assert_allclose(basis.T @ basis, np.eye(levels - 1), atol=1e-14)
        np.testing.assert_allclose(basis.sum(axis=0), 0.0, atol=1e-14)


def test_new_vignette_rate_matches_the_grid_posterior():
    # Outside reference within the project: the deterministic grid posterior of the same model
    # with one run (bayes_grid.rate_posterior), its quantiles against the collapsed sampler's
    # draws; 4 x 1000 draws, tolerance ~4 Monte Carlo SEs of a quantile.
    labels, score, _ = _contests(11, 300, 8, runs=1)
    fit = fit_contest_scores_hierarchical(labels, score, sampler="collapsed", seed=2, draws=1000, level=0.9)
    assert fit.sampler == "collapsed" and fit.converged, fit.message
    grid = rate_posterior(score, np.asarray([int(x[1:]) for x in labels]))
    draws = np.asarray(fit.idata.posterior["winrate_new"].values).ravel()
    spread = grid.quantile(0.95) - grid.quantile(0.05)
    for q in (0.05, 0.5, 0.95):
        assert np.quantile(draws, q) == pytest.approx(grid.quantile(q), abs=0.08 * spread)
    assert fit.winrate_new.mean == pytest.approx(grid.mean, abs=0.03 * spread)


def test_auto_uses_the_collapsed_sampler_from_its_threshold():
    small = aggregate_contest_cells(*_contests(1, 30, 4)[:2])
    large = aggregate_contest_cells(*_contests(1, COLLAPSED_MIN_VIGNETTES, 1)[:2])
    assert not uses_collapsed_sampler("auto", small) and uses_collapsed_sampler("auto", large)
    assert uses_collapsed_sampler("collapsed", small) and not uses_collapsed_sampler("nutpie", large)


def test_posterior_file_reads_back_in_arviz(tmp_path):
    az = pytest.importorskip("arviz")
    labels, score, run = _contests(4, 60, 6, runs=2)
    path = tmp_path / "posterior.nc"
    fit = fit_contest_scores_hierarchical(labels, score, run, sampler="collapsed", seed=1, idata_path=path)
    read = az.from_netcdf(str(path))
    assert set(fit.idata.groups()) <= set(read.groups())
    np.testing.assert_array_equal(read.posterior["u"].values, fit.idata.posterior["u"].values)
    np.testing.assert_array_equal(read.log_likelihood["wins"].values, fit.idata.log_likelihood["wins"].values)
    assert az.loo(read).elpd_loo < 0


def test_exact_tails_where_replicates_cannot_resolve_them():
    # 500 one-cell groups, 400 draws: alpha / groups = 1e-4 is below the replicates' resolution
    # 1/400. Planted: v000 lost all 20 contests (tail ~1e-8: flagged), v001 won 5 (two-sided tail
    # ~3e-3: not flagged, though few or no replicates reach it). Their p-values are the exact
    # binomial tails, scipy.stats.binom's mean over the draws.
    rng = np.random.default_rng(8)
    labels = np.repeat(np.array([f"v{g:03d}" for g in range(500)], dtype=object), 20)
    score = (rng.random(labels.size) < 0.6).astype(float)
    score[:20], score[20:40] = 0.0, np.r_[np.ones(5), np.zeros(15)]
    cells = aggregate_contest_cells(labels, score, trials_per_contest=1)
    eta = np.log(0.6 / 0.4) + rng.normal(0, 0.05, (400, cells.n.size))
    replicated = replicate_cell_wins(cells, eta, rng)
    check = check_replicates(cells, replicated, 0.95, 0.05, eta)
    for group, wins in ((0, 0), (1, 5)):
        trials = max(1.0, np.rint(cells.n[group]))
        observed = cells.wins[group] / cells.n[group]
        reference = np.mean(stats.binom.cdf(np.floor(trials * observed + 1e-9), trials, expit(eta[:, group])))
        assert check.p_value[group] == pytest.approx(2 * reference, rel=1e-10), wins
    assert check.flagged[0] and not check.flagged[1]
    replicates_only = check_replicates(cells, replicated, 0.95, 0.05)
    assert replicates_only.p_value[1] < 0.05 / 500 < check.p_value[1]  # 0 of 400: a false flag


def test_predictive_arrays_are_thinned_at_scale():
    from honestci.audit.stats.bayesian import predictive as bayes_predictive

    labels, score, run = _contests(6, 200, 4, runs=2)
    old = bayes_predictive.PREDICTIVE_MAX_VALUES
    bayes_predictive.PREDICTIVE_MAX_VALUES = 100_000  # 4 x 250 draws x 400 cells = 400,000: every 4th draw
    try:
        fit = fit_contest_scores_hierarchical(labels, score, run, sampler="collapsed", seed=3, draws=250)
    finally:
        bayes_predictive.PREDICTIVE_MAX_VALUES = old
    assert fit.idata.posterior.sizes["draw"] == 250
    assert fit.idata.posterior_predictive.sizes["draw"] == 63
    np.testing.assert_array_equal(fit.idata.log_likelihood["draw"].values, np.arange(0, 250, 4))


def test_one_cell_groups_share_their_cells_replicates():
    # every group of contest cells is one cell: its replicated share is that cell's wins over its n,
    # gathered (not summed by the sparse membership product), in the product's (groups, S) layout
    labels, score, run = _contests(11, 50, 4, runs=2)
    cells = aggregate_contest_cells(labels, score, run)
    rng = np.random.default_rng(2)
    replicated = replicate_cell_wins(cells, rng.normal(0.4, 0.3, (300, cells.n.size)), rng)
    check = check_replicates(cells, replicated, 0.9, 0.05)
    cell_of = {
        (cells.vignette_labels[v], cells.run_labels[r]): c
        for c, (v, r) in enumerate(zip(cells.vignette_index, cells.run_index))
    }
    cell = np.array([cell_of[key] for key in zip(check.vignette, check.run)])
    share = (replicated.T[cell] / cells.n[cell][:, None]).T
    np.testing.assert_array_equal(check.predicted_mean, share.mean(axis=0))
    np.testing.assert_array_equal(check.predicted_lower, np.quantile(share, 0.05, axis=0))
    np.testing.assert_array_equal(check.observed_share, cells.wins[cell] / cells.n[cell])


def test_saved_predictive_group_holds_the_replicates_the_check_read():
    # the per-cell groups are built when read (deferred): the same seeded replicates as the check's
    labels, score, run = _contests(9, 80, 5, runs=2)
    fit = fit_contest_scores_hierarchical(labels, score, run, sampler="collapsed", seed=5, level=0.95)
    wins = fit.idata.posterior_predictive["wins"].values
    replicated = wins.reshape(-1, wins.shape[-1])
    check = check_replicates(aggregate_contest_cells(labels, score, run), replicated, 0.95, 0.05)
    np.testing.assert_array_equal(check.predicted_mean, fit.ppc.predicted_mean)
    assert fit.idata.posterior_predictive is fit.idata["posterior_predictive"]  # built once, then kept


def test_written_groups_are_the_checks_arrays_whether_kept_or_built_again(tmp_path):
    # The fit keeps its check's linear predictor and replicates for the file's first writing (each
    # let go once written); a second writing, or a fit that refits for prior sensitivity (which
    # keeps nothing), builds them again from the seed: the same arrays to the bit.
    xr = pytest.importorskip("xarray")
    labels, score, run = _contests(9, 80, 5, runs=2)
    fit = fit_contest_scores_hierarchical(labels, score, run, sampler="collapsed", seed=5, level=0.95)
    refit = fit_contest_scores_hierarchical(
        labels, score, run, sampler="collapsed", seed=5, level=0.95, prior_sensitivity=True
    )
    files = [tmp_path / "first.nc", tmp_path / "again.nc", tmp_path / "refit.nc"]
    for idata, path in zip((fit.idata, fit.idata, refit.idata), files):
        idata.to_netcdf(str(path))
    for group in ("posterior_predictive", "log_likelihood"):
        first, again, other = (xr.open_dataset(path, group=group, engine="h5netcdf")["wins"].values for path in files)
        assert np.array_equal(first, again) and np.array_equal(first, other), group
    np.testing.assert_array_equal(refit.ppc.p_value, fit.ppc.p_value)


def test_deferred_groups_are_built_when_read_or_written(tmp_path):
    xr = pytest.importorskip("xarray")
    from honestci.audit.stats.bayesian.posterior_groups import PosteriorGroups

    built = []

    def wins():
        built.append(True)
        return xr.Dataset({"wins": ("cell", np.arange(3.0))})

    groups = PosteriorGroups(posterior=xr.Dataset({"mu": ("draw", np.zeros(2))}), log_likelihood=wins)
    groups.to_netcdf(str(tmp_path / "a.nc"))  # built for the file only
    assert built == [True] and callable(groups._groups["log_likelihood"])
    assert groups.log_likelihood["wins"].values.tolist() == [0.0, 1.0, 2.0]  # built and kept
    groups.to_netcdf(str(tmp_path / "b.nc"))
    assert built == [True, True] and groups.log_likelihood is groups["log_likelihood"]
    read = xr.open_dataset(tmp_path / "a.nc", group="log_likelihood", engine="h5netcdf")
    assert read["wins"].values.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.slow
def test_collapsed_posterior_matches_nutpie_on_300_vignettes():
    # Outside reference: nutpie's NUTS on the same cells (4 x 1000 + 1000). Each summary within
    # 4 combined Monte Carlo SEs (posterior sd / sqrt(ESS) of both fits). (With seed 4 nutpie itself
    # missed the gate, R-hat 1.012 on winrate_new; the collapsed fit had 1.0004.)
    labels, score, run = _contests(21, 300, 20, runs=2)
    fits = {
        sampler: fit_contest_scores_hierarchical(labels, score, run, sampler=sampler, seed=5, draws=1000)
        for sampler in ("collapsed", "nutpie")
    }
    assert all(fit.converged for fit in fits.values())
    for name in ("mu", "sigma", "winrate_these", "winrate_new"):
        draws = {k: np.asarray(f.idata.posterior[name].values).ravel() for k, f in fits.items()}
        se = math.sqrt(sum(np.var(d) / 800.0 for d in draws.values()))
        assert abs(draws["collapsed"].mean() - draws["nutpie"].mean()) < 4 * se, name
        assert draws["collapsed"].std() == pytest.approx(draws["nutpie"].std(), rel=0.1), name
    u = {k: np.asarray(f.idata.posterior["u"].values).reshape(-1, 300) for k, f in fits.items()}
    z = (u["collapsed"].mean(0) - u["nutpie"].mean(0)) / np.sqrt(u["nutpie"].var(0) / 400.0)
    assert np.mean(np.abs(z) > 3) < 0.02
    np.testing.assert_allclose(u["collapsed"].std(0), u["nutpie"].std(0), rtol=0.2)
