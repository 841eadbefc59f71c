"""R-hat and ESS without ArviZ (audit/stats/bayesian/mcmc_diagnostics.py), pinned to ArviZ itself."""

from __future__ import annotations

import numpy as np
import pytest

from honestci.audit.stats.bayesian.mcmc_diagnostics import ess_bulk, ess_tail, rhat_rank

az = pytest.importorskip("arviz")
xr = pytest.importorskip("xarray")


def _chains(rng, chains, draws, variables, kind):
    x = rng.standard_normal((chains, draws, variables))
    if kind == "ar1":  # autocorrelated, so Geyer's sequences run past the first lags
        phi = 0.9
        for t in range(1, draws):
            x[:, t] = phi * x[:, t - 1] + np.sqrt(1 - phi**2) * x[:, t]
    elif kind == "ties":  # repeated values, as an independence sampler's rejections give
        x = np.round(x * 2) / 2
    elif kind == "stuck":  # chains at different places, one variable constant
        x = x + np.arange(chains)[:, None, None] * 0.7
        x[..., 0] = 1.0
    return x


@pytest.mark.parametrize("kind", ["iid", "ar1", "ties", "stuck"])
@pytest.mark.parametrize(("chains", "draws"), [(4, 250), (2, 37), (3, 1000), (1, 100)])
def test_diagnostics_equal_arviz(kind, chains, draws):
    # Outside reference: az.rhat(method="rank"), az.ess(method="bulk"/"tail") (ArviZ 0.23).
    rng = np.random.default_rng(hash((kind, chains, draws)) % 2**32)
    x = _chains(rng, chains, draws, 4, kind)
    dataset = xr.Dataset({"x": (("chain", "draw", "v"), x)})
    with np.errstate(all="ignore"):
        expected = {
            "rhat": az.rhat(dataset, method="rank")["x"].values,
            "bulk": az.ess(dataset, method="bulk")["x"].values,
            "tail": az.ess(dataset, method="tail")["x"].values,
        }
        got = {"rhat": rhat_rank(x), "bulk": ess_bulk(x), "tail": ess_tail(x)}
    for name, reference in expected.items():
        np.testing.assert_allclose(got[name], reference, rtol=1e-10, atol=1e-10, equal_nan=True, err_msg=name)


def test_nan_draws_and_single_chain_give_nan():
    x = np.random.default_rng(1).standard_normal((4, 50, 2))
    x[1, 3, 0] = np.nan
    assert np.isnan(rhat_rank(x)[0]) and np.isfinite(rhat_rank(x)[1])
    assert np.isnan(ess_bulk(x)[0]) and np.isnan(rhat_rank(x[:1])).all()


def test_many_variables_are_one_pass():
    # The collapsed sampler's fits have thousands of vignette effects; the result is per variable.
    x = np.random.default_rng(2).standard_normal((4, 100, 3000))
    values = ess_bulk(x)
    assert values.shape == (3000,) and 250 < np.median(values) < 550
