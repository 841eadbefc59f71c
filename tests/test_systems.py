"""K systems: win rates, Bradley–Terry strengths, multiplicity and rank intervals (audit/stats/selection/systems.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import special

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.frequentist.compare import paired_difference
from honestci.audit.stats.selection.systems import (
    benjamini_hochberg,
    bradley_terry,
    holm,
    k_system_winrates,
    rank_intervals,
)

OPPONENT = "O"


def simulate_battles(
    strengths: dict[str, float],
    pairs: list[tuple[str, str]],
    G: int,
    per_pair: int,
    rng: np.random.Generator,
    nu: float | None = None,
) -> pd.DataFrame:
    """Battles with a correct Bradley–Terry (or, given ``nu``, Davidson) mean and vignette clustering.

    In vignette g, P(a beats b) = π_ab + 0.9 π_ab(1 − π_ab)(d_ga − d_gb)/2 with π_ab = expit(s_a − s_b)
    and d_gk ~ U(−1, 1) per system and vignette (stays in [0, 1], averages to π_ab over vignettes, so
    the population BT coefficients are exactly ``strengths``). A contest is judged in both orders:
    score = (W1 + W2)/2 with W ~ Bernoulli(p), so ties (½) occur.

    With ``nu``: one Davidson outcome per contest (1 win, ½ tie, 0 loss) with Davidson's
    probabilities (w, t, l) at ``strengths`` and ν, moved in vignette g to (w + δ, t, l − δ),
    δ = 0.9 min(w, l)(d_ga − d_gb)/2: mean zero over vignettes, so the population Davidson
    parameters are exactly ``strengths`` and ``nu``.
    """
    names = sorted(strengths)
    rows = []
    for g in range(G):
        d = dict(zip(names, rng.uniform(-1, 1, len(names))))
        for a, b in pairs:
            if nu is None:
                pi = special.expit(strengths[a] - strengths[b])
                p = pi + 0.9 * pi * (1 - pi) * (d[a] - d[b]) / 2
                wins = rng.binomial(2, p, size=per_pair)
                rows += [(a, b, f"v{g}", w / 2) for w in wins]
            else:
                pa, pb = math.exp(strengths[a]), math.exp(strengths[b])
                tie = nu * math.sqrt(pa * pb)
                w, t, loss = pa / (pa + pb + tie), tie / (pa + pb + tie), pb / (pa + pb + tie)
                delta = 0.9 * min(w, loss) * (d[a] - d[b]) / 2
                outcome = rng.choice([1.0, 0.5, 0.0], size=per_pair, p=[w + delta, t, loss - delta])
                rows += [(a, b, f"v{g}", float(o)) for o in outcome]
    return pd.DataFrame(rows, columns=["system_a", "system_b", "vignette_id", "score"])


def against_opponent(battles: pd.DataFrame) -> pd.DataFrame:
    return battles.rename(columns={"system_a": "system"})[["system", "vignette_id", "score"]]


def test_holm_and_bh_match_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = np.array([0.01, 0.04, 0.03, 0.005, 0.2, 0.04, 0.9])
    np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], atol=1e-12)
    np.testing.assert_allclose(benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1], atol=1e-12)
    with pytest.raises(InputError):
        holm([0.5, 1.5])


def test_bradley_terry_matches_statsmodels_glm_cluster():
    """Strengths and CR1S covariance equal statsmodels' GLM(Binomial, cov_type="cluster") to 1e-6."""
    import statsmodels.api as sm

    strengths = {"O": 0.0, "A": 0.6, "B": 0.2, "C": -0.3}
    battles = simulate_battles(
        strengths, list(itertools.combinations(sorted(strengths), 2)), 15, 2, np.random.default_rng(5)
    )
    result = bradley_terry(battles, reference="O", vcov="CR1S")
    names = ["A", "B", "C"]
    X = np.zeros((len(battles), 3))
    for j, name in enumerate(names):
        X[:, j] = (battles["system_a"] == name).to_numpy(float) - (battles["system_b"] == name).to_numpy(float)
    groups = pd.factorize(battles["vignette_id"])[0]
    reference = sm.GLM(battles["score"].to_numpy(float), X, family=sm.families.Binomial()).fit(
        cov_type="cluster", cov_kwds={"groups": groups}
    )
    table = result.to_frame().set_index("system")
    np.testing.assert_allclose(table.loc[names, "estimate"], reference.params, atol=1e-6)
    np.testing.assert_allclose(table.loc[names, "se"], reference.bse, atol=1e-6)
    pairs = result.pairs.set_index(["system_a", "system_b"])
    c = np.array([1.0, -1.0, 0.0])  # A − B
    np.testing.assert_allclose(pairs.loc[("A", "B"), "se"], math.sqrt(c @ reference.cov_params() @ c), atol=1e-6)


def test_two_systems_reduce_to_paired_difference():
    battles = simulate_battles({"O": 0, "A": 0.5, "B": 0.1}, [("A", "O"), ("B", "O")], 10, 1, np.random.default_rng(4))
    scores = against_opponent(battles)
    result = k_system_winrates(scores, opponent=OPPONENT)
    a, b = (scores[scores.system == s] for s in ("A", "B"))
    reference = paired_difference(
        a.score, a.vignette_id, b.score, b.vignette_id, system_a="A", system_b="B", opponent=OPPONENT
    )
    row = result.pairs.iloc[0]
    assert (row.system_a, row.system_b) == ("A", "B")
    np.testing.assert_allclose(
        [row.estimate, row.se, row.df, row.p], [reference.estimate, reference.se, reference.df, reference.p], atol=1e-12
    )
    assert abs(row.estimate) > 0.02  # a real difference, not a degenerate 0
    # Raw win rates are the plain means when each vignette has one contest per system.
    np.testing.assert_allclose(result.to_frame().set_index("system")["estimate"], scores.groupby("system").score.mean())


def test_rank_intervals_from_decisions():
    est = np.array([0.9, 0.5, 0.4, 0.1])
    decisions = np.zeros((4, 4), dtype=int)
    decisions[0, 1:] = 1  # first certainly beats all
    decisions[1:, 0] = -1
    decisions[1, 3], decisions[3, 1] = 1, -1
    point, low, high = rank_intervals(est, decisions)
    assert point.tolist() == [1, 2, 3, 4]
    assert low.tolist() == [1, 2, 2, 3]
    assert high.tolist() == [1, 3, 4, 4]


def test_inputs_are_checked():
    battles = simulate_battles({"O": 0, "A": 0.5, "B": 0.1}, [("A", "O"), ("B", "O")], 8, 1, np.random.default_rng(3))
    scores = against_opponent(battles)
    # A system missing a vignette is averaged over its own vignettes (a leaderboard's rate).
    partial = scores[~((scores.system == "A") & (scores.vignette_id == "v0"))]
    table = k_system_winrates(partial, opponent=OPPONENT).to_frame().set_index("system")
    assert table.loc["A", "n_vignettes"] == 7
    np.testing.assert_allclose(table["estimate"], partial.groupby("system").score.mean())
    with pytest.raises(InputError, match="at least two systems"):
        k_system_winrates(scores[scores.system == "A"], opponent=OPPONENT)
    split = pd.concat([battles, pd.DataFrame([("X", "Y", "v0", 1.0)], columns=battles.columns)])
    with pytest.raises(InputError, match="never meet"):
        bradley_terry(split, reference="O")


def test_systems_equal_on_every_vignette_are_undecided_not_an_error():
    # Two systems with the same mean on every vignette (it happens with few vignettes and coarse
    # scores): their difference is 0 with SE 0, so p = 1 and neither ranks above the other.
    battles = simulate_battles({"O": 0, "A": 0.5, "B": 0.1}, [("A", "O"), ("B", "O")], 8, 4, np.random.default_rng(3))
    scores = against_opponent(battles)
    twin = scores[scores.system == "A"].assign(system="A2")
    result = k_system_winrates(pd.concat([scores, twin]), opponent=OPPONENT)
    pair = result.pairs.set_index(["system_a", "system_b"]).loc[("A", "A2")]
    assert pair["estimate"] == 0 and pair["se"] == 0 and pair["p"] == 1 and pair["p_holm"] == 1
    ranks = result.to_frame().set_index("system")
    assert ranks.loc["A", "rank_low"] == ranks.loc["A2", "rank_low"] == 1
    # A nonzero difference that is the same on every vignette has no clustered SE: refused, with the reason.
    constant = twin.assign(system="A3", score=0.75)
    with pytest.raises(EstimationError, match="same on every vignette"):
        k_system_winrates(pd.concat([scores, constant, constant.assign(system="A4", score=0.5)]), opponent=OPPONENT)


def _fwer(method: str, G: int, reps: int, seed: int) -> float:
    """Share of replications in which some pair of K = 4 equal systems is declared different."""
    rng = np.random.default_rng(seed)
    equal = {"O": 0.0, "A": 0.3, "B": 0.3, "C": 0.3, "D": 0.3}
    errors = 0
    for r in range(reps):
        battles = simulate_battles(equal, [(s, "O") for s in "ABCD"], G, 2, rng)
        result = k_system_winrates(
            against_opponent(battles), opponent=OPPONENT, simultaneous=method, B=399, rng=seed + r
        )
        errors += bool((result.pairs["decision"] != "?").any())
    return errors / reps


@pytest.mark.parametrize("method", ["holm", "maxt"])
@pytest.mark.parametrize("G", [12, 30])
def test_familywise_error_with_equal_systems(method, G):
    reps = 200
    fwer = _fwer(method, G, reps, seed=1800 + G)
    # Nominal 5% plus 3 Monte Carlo SEs of a 5% rate at these reps.
    assert fwer <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), fwer


def _bt_coverage(G: int, reps: int, seed: int) -> tuple[float, float]:
    """(coverage of the CR2 strength intervals over all strengths, joint rank-interval coverage)."""
    rng = np.random.default_rng(seed)
    truth = {"O": 0.0, "A": 0.9, "B": 0.45, "C": -0.4}
    pairs = list(itertools.combinations(sorted(truth), 2))
    true_rank = {s: 1 + sum(v > truth[s] for v in truth.values()) for s in truth}
    covered = total = ranks_ok = 0
    for _ in range(reps):
        result = bradley_terry(simulate_battles(truth, pairs, G, 1, rng), reference="O")
        table = result.to_frame().set_index("system").drop("O")
        s = pd.Series(truth).reindex(table.index)
        covered += int(((table.ci_low <= s) & (s <= table.ci_high)).sum())
        total += len(table)
        full = result.to_frame().set_index("system")
        rank = pd.Series(true_rank).reindex(full.index)
        ranks_ok += bool(((full.rank_low <= rank) & (rank <= full.rank_high)).all())
    return covered / total, ranks_ok / reps


def test_bradley_terry_coverage_and_rank_intervals_modest():
    reps = 300
    coverage, ranks = _bt_coverage(G=12, reps=reps, seed=1812)
    # 3 strengths per replication are dependent; 3 MC-SEs of 95% at `reps` independent draws.
    assert abs(coverage - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / reps), coverage
    assert ranks >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / reps), ranks


@pytest.mark.slow
@pytest.mark.coverage
@pytest.mark.parametrize("G", [12, 30])
def test_bradley_terry_coverage_full(G):
    coverage, ranks = _bt_coverage(G=G, reps=2000, seed=18_000 + G)
    assert abs(coverage - 0.95) <= 0.015, coverage
    assert ranks >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 2000), ranks


DAVIDSON_TRUTH = {"O": 0.0, "A": 0.9, "B": 0.45, "C": -0.4}


def _davidson_nll(theta: np.ndarray, battles: pd.DataFrame, names: list[str]) -> float | complex:
    """Davidson (1970) negative log-likelihood, written from the paper's probabilities (π = exp s).

    Plain numpy on the input's dtype, so it also takes a complex θ (complex-step derivatives).
    """
    strength = {"O": 0.0, **dict(zip(names, theta[:-1]))}
    pa = np.exp(np.array([strength[a] for a in battles.system_a]))
    pb = np.exp(np.array([strength[b] for b in battles.system_b]))
    tie = np.exp(theta[-1]) * np.sqrt(pa * pb)
    score = battles.score.to_numpy()
    numerator = np.where(score == 1.0, pa, np.where(score == 0.5, tie, pb))
    return -np.sum(np.log(numerator / (pa + pb + tie)))


def _complex_step_gradient(theta: np.ndarray, battles: pd.DataFrame, names: list[str]) -> np.ndarray:
    h = 1e-20
    return np.array([_davidson_nll(theta + 1j * h * e, battles, names).imag / h for e in np.eye(theta.size)])


def _davidson_battles(seed: int, G: int = 15) -> pd.DataFrame:
    pairs = list(itertools.combinations(sorted(DAVIDSON_TRUTH), 2))
    return simulate_battles(DAVIDSON_TRUTH, pairs, G, 2, np.random.default_rng(seed), nu=0.8)


def test_davidson_mle_matches_scipy_minimize():
    from scipy import optimize

    battles = _davidson_battles(61)
    result = bradley_terry(battles, reference="O", ties="davidson")
    names = ["A", "B", "C"]
    reference = optimize.minimize(
        _davidson_nll,
        np.zeros(4),
        args=(battles, names),
        jac=_complex_step_gradient,
        method="BFGS",
        options={"gtol": 1e-7},  # |grad| ≤ 1e-7: θ to ~1e-8 at this curvature
    )
    assert reference.success, reference.message
    table = result.to_frame().set_index("system")
    np.testing.assert_allclose(table.loc[names, "estimate"], reference.x[:3], atol=1e-6)
    np.testing.assert_allclose(result.log_nu.estimate, reference.x[3], atol=1e-6)
    assert result.nu[1] < result.nu[0] < result.nu[2]
    assert any("Davidson tie parameter" in line for line in result.summary_lines())


def test_davidson_cluster_sandwich_matches_finite_differences():
    """CR0 covariance = H⁻¹(Σ_g u_g u_g')H⁻¹ with u_g and H by central differences of the likelihood."""
    battles = _davidson_battles(62)
    result = bradley_terry(battles, reference="O", ties="davidson", vcov="CR0")
    names = ["A", "B", "C"]
    theta = np.append(result.to_frame().set_index("system").loc[names, "estimate"], result.log_nu.estimate)
    h = 1e-5
    step = np.eye(4) * h
    groups = [battles[battles.vignette_id == g] for g in battles.vignette_id.unique()]
    scores = np.array(
        [
            [(_davidson_nll(theta - e, g, names) - _davidson_nll(theta + e, g, names)) / (2 * h) for e in step]
            for g in groups
        ]
    )
    hh = 1e-4
    f = lambda t: _davidson_nll(t, battles, names)  # noqa: E731
    hessian = np.array(
        [
            [
                (
                    f(theta + hh * (ei + ej))
                    - f(theta + hh * (ei - ej))
                    - f(theta - hh * (ei - ej))
                    + f(theta - hh * (ei + ej))
                )
                / (4 * hh**2)
                for ej in np.eye(4)
            ]
            for ei in np.eye(4)
        ]
    )
    bread = np.linalg.inv(hessian)
    vcov = bread @ (scores.T @ scores) @ bread
    table = result.to_frame().set_index("system")
    np.testing.assert_allclose(table.loc[names, "se"], np.sqrt(np.diag(vcov))[:3], atol=1e-5)
    np.testing.assert_allclose(result.log_nu.se, math.sqrt(vcov[3, 3]), atol=1e-5)
    c = np.array([1.0, -1.0, 0.0, 0.0])  # A − B
    pairs = result.pairs.set_index(["system_a", "system_b"])
    np.testing.assert_allclose(pairs.loc[("A", "B"), "se"], math.sqrt(c @ vcov @ c), atol=1e-5)


def test_davidson_without_ties_is_logistic_bradley_terry():
    """No tie in the data: ν̂ = 0 (boundary) and the strengths, CR2 SEs and df are logistic BT's."""
    battles = _davidson_battles(63)
    decisive = battles[battles.score != 0.5]
    davidson = bradley_terry(decisive, reference="O", ties="davidson")
    logistic = bradley_terry(decisive, reference="O")
    assert davidson.nu == (0.0, pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True))
    columns = ["estimate", "se", "df", "ci_low", "ci_high"]
    np.testing.assert_allclose(
        davidson.to_frame()[columns].to_numpy(float), logistic.to_frame()[columns].to_numpy(float), atol=1e-6
    )
    # With ties the two models differ: ties carry information about ν, not about the strengths.
    with_ties = bradley_terry(battles, reference="O", ties="davidson").to_frame()["estimate"]
    assert not np.allclose(with_ties, bradley_terry(battles, reference="O").to_frame()["estimate"], atol=1e-3)


def test_davidson_inputs_and_maxt():
    battles = _davidson_battles(64)
    blurred = battles.assign(score=battles.score.replace({0.5: 0.25}))
    with pytest.raises(InputError, match="ties='half'"):
        bradley_terry(blurred, reference="O", ties="davidson")
    with pytest.raises(InputError, match="ties="):
        bradley_terry(battles, reference="O", ties="draws")  # type: ignore[arg-type]
    # The max-|t| score bootstrap runs on the Davidson working problem as on the GLM's.
    result = bradley_terry(battles, reference="O", ties="davidson", simultaneous="maxt", B=199, rng=7)
    holm_result = bradley_terry(battles, reference="O", ties="davidson")
    assert (result.B, result.seed) == (199, 7)
    pd.testing.assert_frame_equal(result.pairs[["estimate", "se"]], holm_result.pairs[["estimate", "se"]])
    # Single-step max-t intervals are wider than the marginal CR2 ones.
    assert ((result.pairs.sim_low < result.pairs.ci_low) & (result.pairs.ci_high < result.pairs.sim_high)).all()


def _davidson_coverage(G: int, reps: int, seed: int) -> tuple[float, float]:
    """(coverage of the CR2 Davidson strength intervals over all strengths, coverage of log ν's), ν = 0.8."""
    rng = np.random.default_rng(seed)
    pairs = list(itertools.combinations(sorted(DAVIDSON_TRUTH), 2))
    covered = total = nu_covered = 0
    for _ in range(reps):
        result = bradley_terry(
            simulate_battles(DAVIDSON_TRUTH, pairs, G, 1, rng, nu=0.8), reference="O", ties="davidson"
        )
        table = result.to_frame().set_index("system").drop("O")
        s = pd.Series(DAVIDSON_TRUTH).reindex(table.index)
        covered += int(((table.ci_low <= s) & (s <= table.ci_high)).sum())
        total += len(table)
        nu_covered += result.log_nu.ci_low <= math.log(0.8) <= result.log_nu.ci_high
    return covered / total, nu_covered / reps


def test_davidson_coverage_modest():
    # A quick guard against gross errors; the slow tier's 2000 replications hold 95 ± 1.5.
    reps = 100
    coverage, nu_coverage = _davidson_coverage(G=12, reps=reps, seed=1970)
    mcse = math.sqrt(0.95 * 0.05 / reps)  # of independent draws; 3 strengths per replication are dependent
    assert abs(coverage - 0.95) <= 3 * mcse, coverage
    assert abs(nu_coverage - 0.95) <= 3 * mcse, nu_coverage


@pytest.mark.slow
@pytest.mark.coverage
def test_davidson_coverage_full():
    coverage, nu_coverage = _davidson_coverage(G=12, reps=2000, seed=19_700)
    assert abs(coverage - 0.95) <= 0.015, coverage
    assert abs(nu_coverage - 0.95) <= 0.015, nu_coverage
