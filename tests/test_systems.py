"""K systems: win rates, Bradley–Terry strengths, multiplicity and rank intervals (audit/stats/systems.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import special

from honestci.audit.errors import InputError
from honestci.audit.stats.compare import paired_difference
from honestci.audit.stats.systems import (
    benjamini_hochberg,
    bradley_terry,
    holm,
    k_system_winrates,
    rank_intervals,
)

OPPONENT = "O"


def simulate_battles(
    strengths: dict[str, float], pairs: list[tuple[str, str]], G: int, per_pair: int, rng: np.random.Generator
) -> pd.DataFrame:
    """Battles with a correct Bradley–Terry mean and vignette clustering.

    In vignette g, P(a beats b) = π_ab + 0.9 π_ab(1 − π_ab)(d_ga − d_gb)/2 with π_ab = expit(s_a − s_b)
    and d_gk ~ U(−1, 1) per system and vignette (stays in [0, 1], averages to π_ab over vignettes, so
    the population BT coefficients are exactly ``strengths``). A contest is judged in both orders:
    score = (W1 + W2)/2 with W ~ Bernoulli(p), so ties (½) occur.
    """
    names = sorted(strengths)
    rows = []
    for g in range(G):
        d = dict(zip(names, rng.uniform(-1, 1, len(names))))
        for a, b in pairs:
            pi = special.expit(strengths[a] - strengths[b])
            p = pi + 0.9 * pi * (1 - pi) * (d[a] - d[b]) / 2
            wins = rng.binomial(2, p, size=per_pair)
            rows += [(a, b, f"v{g}", w / 2) for w in wins]
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
