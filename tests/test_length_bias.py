"""Length and style bias of the judge, the length-controlled win rate and the ``length_bias`` gate."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special

from honestci.audit.gates import gate_length_bias
from honestci.audit.policy import Thresholds, Verdict
from honestci.audit.stats.judge_error.length_bias import (
    controlled_winrate,
    fit_logistic_glm,
    length_bias,
    style_counts,
)


def _clustered_data(seed: int, n_clusters: int = 30, per: int = 10, theta: float = -0.5, beta: float = 1.0):
    """Contest scores whose mean follows the logistic model exactly, correlated within vignettes.

    feature x = tanh(a_g + e_i) (a vignette part and a contest part); y_i = 1{Φ(ρ u_g + √(1−ρ²) ε_i) <
    expit(θ + β x_i)}: a Gaussian copula keeps E[y | x] = expit(θ + β x) while draws of one vignette
    are positively correlated (ρ = 0.6), so ignoring the clusters would under-cover.
    """
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_clusters), per)
    x = np.tanh(rng.normal(0, 0.8, n_clusters)[groups] + rng.normal(0, 0.6, groups.size))
    latent = 0.6 * rng.normal(size=n_clusters)[groups] + 0.8 * rng.normal(size=groups.size)
    y = (special.ndtr(latent) < special.expit(theta + beta * x)).astype(float)
    return y, x, groups


# ------------------------------------------------------------------------------ outside reference
def test_glm_matches_statsmodels_clustered_binomial_glm():
    # Outside reference: statsmodels GLM(y, X, family=Binomial()).fit(cov_type="cluster",
    # cov_kwds={"groups": g}) -- its default small-sample factor G/(G-1)·(n-1)/(n-k) is our CR1S.
    # Fractional outcomes (a quasi-binomial fit, as AlpacaEval's continuous preferences are).
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(20261201)
    y, x, groups = _clustered_data(7, n_clusters=25, per=8)
    y = np.clip(0.7 * y + 0.3 * rng.uniform(size=y.size), 0, 1)
    X = np.column_stack([np.ones(y.size), x, rng.normal(size=y.size)])
    ours = fit_logistic_glm(y, X, groups, vcov="CR1S")
    reference = sm.GLM(y, X, family=sm.families.Binomial()).fit(cov_type="cluster", cov_kwds={"groups": groups})
    np.testing.assert_allclose(ours.coef, reference.params, atol=1e-6)
    np.testing.assert_allclose(ours.se, reference.bse, atol=1e-6)


def test_glm_refuses_separated_data_unless_asked_for_firth():
    from honestci.audit.errors import EstimationError

    x = np.linspace(-1, 1, 40)
    y, X, groups = (x > 0).astype(float), np.column_stack([np.ones(40), x]), np.arange(40) // 4
    with pytest.raises(EstimationError, match="did not converge"):
        fit_logistic_glm(y, X, groups)
    fit = fit_logistic_glm(y, X, groups, separation="firth")
    assert np.all(np.isfinite(fit.coef)) and np.all(np.isfinite(fit.ci_low)) and np.all(np.isfinite(fit.ci_high))
    assert fit.coef[1] > 5


def _firth_by_scipy(y: np.ndarray, X: np.ndarray) -> np.ndarray:
    """An independent Firth fit on the rows: maximise ℓ(β) + ½ log|X'WX| with scipy's BFGS (no
    score equations, no cells, no Newton steps: the definition of Firth 1993 / Heinze & Schemper 2002)."""
    from scipy import optimize

    def negative(beta):
        eta = X @ beta
        mu = special.expit(eta)
        loglik = np.sum(y * special.log_expit(eta) + (1 - y) * special.log_expit(-eta))
        return -(loglik + 0.5 * np.linalg.slogdet((X * (mu * (1 - mu))[:, None]).T @ X)[1])

    return optimize.minimize(negative, np.zeros(X.shape[1]), method="BFGS", options={"gtol": 1e-10}).x


@pytest.mark.parametrize("separated", [True, False])
def test_firth_fit_matches_a_direct_maximisation_of_the_penalised_likelihood(separated):
    # Outside reference: _firth_by_scipy above (scipy.optimize.minimize(method="BFGS") on
    # -(ℓ(β) + ½ log|I(β)|) over the rows), against firth_logistic_cells on the cells (repeated
    # covariate rows, fractional outcomes among them).
    from honestci.audit.stats.frequentist.cells import design_cells
    from honestci.audit.stats.judge_error.length_bias import firth_logistic_cells

    rng = np.random.default_rng(31)
    x = np.repeat(np.round(rng.normal(size=20), 1), 3)
    y = (x > 0).astype(float) if separated else (rng.uniform(size=x.size) < special.expit(0.3 + x)).astype(float)
    y[:3] = 0.5 if not separated else y[:3]  # ties (½) where the data are not separated
    X = np.column_stack([np.ones(x.size), x])
    cells = design_cells(X, np.zeros(x.size, dtype=int))
    ours, _ = firth_logistic_cells(cells.X, cells.counts.astype(float), cells.sums(y))
    np.testing.assert_allclose(ours, _firth_by_scipy(y, X), atol=1e-5)


def test_firth_fit_of_a_saturated_2x2_table_is_the_haldane_correction():
    # Known closed form: with one binary covariate the model is saturated (h = 1 in each of the two
    # cells), and Firth's estimate is the ML estimate of the 2x2 table with ½ added to every cell
    # (Firth 1993; Heinze & Schemper 2002 use it to explain the method).
    from honestci.audit.stats.judge_error.length_bias import firth_logistic_cells

    # x = 0: 10 rows, 5 events; x = 1: 10 rows, 10 events (quasi-complete separation).
    X = np.array([[1.0, 0.0], [1.0, 1.0]])
    beta, h = firth_logistic_cells(X, np.array([10.0, 10.0]), np.array([5.0, 10.0]))
    # Closed form for one binary covariate: Firth adds ½ to each cell of the 2x2 table, so
    # logit(5.5/11) = 0 and logit(10.5/11) = log(21): β = (0, log 21); h = (1, 1).
    np.testing.assert_allclose(beta, [0.0, math.log(21.0)], atol=1e-8)
    np.testing.assert_allclose(h, [1.0, 1.0], atol=1e-8)


def test_style_counts_of_a_markdown_answer():
    text = "# Title\n\nSome **bold** and __more__.\n\n## Part\n- one\n- two\n1. first\n2) second\nnot # a header"
    counts = style_counts([text, ""]).to_dict(orient="records")
    assert counts[0] == {"length": len(text), "headers": 2, "bold": 2, "lists": 4}
    assert counts[1] == {"length": 0, "headers": 0, "bold": 0, "lists": 0}


# -------------------------------------------------------------------------------------- coverage
def _coverage(reps: int, seed: int) -> dict[str, float]:
    theta, beta = -0.5, 1.0
    truths = {
        "beta": beta,
        "controlled": float(special.expit(theta)),
        "effect": float(special.expit(theta + beta * math.tanh(1.0)) - special.expit(theta)),
    }
    hits = dict.fromkeys(truths, 0)
    for rep in range(reps):
        y, x, groups = _clustered_data(seed + rep, theta=theta, beta=beta)
        result = controlled_winrate(y, groups, pd.DataFrame({"tanh_length": x}))
        hits["beta"] += result.fit.ci_low[1] <= beta <= result.fit.ci_high[1]
        hits["controlled"] += result.controlled.ci_low <= truths["controlled"] <= result.controlled.ci_high
        hits["effect"] += result.length_effect.ci_low <= truths["effect"] <= result.length_effect.ci_high
    return {key: value / reps for key, value in hits.items()}


@pytest.mark.coverage
def test_length_coefficient_and_controlled_rate_cover_at_nominal_level_quick():
    # 300 seeded replications, G = 30 vignettes of 10 contests: MC SE of a 95% coverage is 1.26
    # points; 3 MC SE = 3.8 points either side.
    coverage = _coverage(300, seed=1000)
    for key, value in coverage.items():
        assert abs(value - 0.95) <= 0.038, (key, coverage)


@pytest.mark.slow
@pytest.mark.coverage
def test_length_coefficient_and_controlled_rate_cover_at_nominal_level():
    # 2000 replications: MC SE 0.49 points; within 95 ± 1.5 (3 MC SE).
    coverage = _coverage(2000, seed=50_000)
    for key, value in coverage.items():
        assert abs(value - 0.95) <= 0.015, (key, coverage)


# ------------------------------------------------------------------------------------------ gate
def _texts(lengths) -> list[str]:
    return ["x" * int(n) for n in lengths]


def _result(seed: int, beta: float, n_clusters: int = 40, per: int = 20):
    """Scores from the logistic model on the tanh of the standardised length difference."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_clusters), per)
    opponent = rng.integers(200, 800, groups.size)
    policy = np.clip(opponent + rng.normal(0, 250, groups.size), 1, None).astype(int)
    delta = policy - opponent
    y = (rng.uniform(size=groups.size) < special.expit(0.2 + beta * np.tanh(delta / delta.std(ddof=1)))).astype(float)
    return length_bias(y, groups, _texts(policy), _texts(opponent))


def test_gate_fails_a_judge_that_prefers_longer_answers():
    gate = gate_length_bias(_result(1, beta=2.0))
    assert gate.verdict == Verdict.FAIL and "longer" in gate.message


def test_gate_passes_a_judge_indifferent_to_length():
    result = _result(2, beta=0.0, n_clusters=200)
    low, high = result.length_effect.bounds
    assert -0.10 < low < high < 0.10
    assert gate_length_bias(result).verdict == Verdict.PASS


def test_gate_warns_when_the_interval_reaches_beyond_the_tolerance():
    result = _result(3, beta=0.0, n_clusters=8, per=5)
    low, high = result.length_effect.bounds
    assert low < -0.10 or high > 0.10
    assert gate_length_bias(result).verdict == Verdict.WARN
    # A looser policy tolerance that contains the interval passes it.
    loose = Thresholds(length_bias_tolerance=max(abs(low), abs(high)) + 0.01)
    assert gate_length_bias(result, loose).verdict == Verdict.PASS


def test_gate_is_inconclusive_without_texts():
    y = np.tile([1.0, 0.0, 0.5], 10)
    result = length_bias(y, np.arange(30) // 3, [""] * 30, [""] * 30)
    assert result.length is None and "texts" in result.note
    gate = gate_length_bias(result)
    assert gate.verdict == Verdict.INCONCLUSIVE
    assert gate_length_bias(None).verdict == Verdict.INCONCLUSIVE and not gate_length_bias(None).ran


# ---------------------------------------------------------------------------- AlpacaEval 2.0 data
_AE2_TABLE: dict = {}


@pytest.fixture
def alpaca_eval2_table(shared_data, tmp_path_factory):
    # Computed once per session (about 10 s); the shared_data fixture skips when the data are absent.
    if not _AE2_TABLE:
        _AE2_TABLE["value"] = _alpaca_eval2_table(shared_data, tmp_path_factory)
    return _AE2_TABLE["value"]


def _alpaca_eval2_table(shared, tmp_path_factory):
    from honestci.audit.checks.length_bias import controlled_winrate_table
    from honestci.audit.data.io import load_study
    from honestci.judges.importers_alpaca import import_alpaca_eval

    files = sorted((shared / "alpaca_eval2" / "raw_annotations").glob("*.annotations.json.gz"))
    paths = import_alpaca_eval(files).write(tmp_path_factory.mktemp("ae2") / "judgments.jsonl")
    study = load_study({k: v for k, v in paths.items() if k in ("judgments", "vignettes", "responses")})
    systems = [f.name.removesuffix(".annotations.json.gz") for f in files]
    # Missing preferences scored as ties: the leaderboard's convention.
    table = controlled_winrate_table(study, systems, "gpt4_1106_preview", invalid="tie").set_index("system")
    board = pd.read_csv(
        shared / "alpaca_eval2" / "leaderboards" / "weighted_alpaca_eval_gpt4_turbo_leaderboard.csv", index_col=0
    )
    return table, board


@pytest.mark.shared_data
def test_alpaca_eval2_raw_rates_reproduce_and_lc_rates_come_close(alpaca_eval2_table):
    # Outside reference: the published leaderboard (tatsu-lab/alpaca_eval at cd543a1). Raw win
    # rates reproduce exactly; the LC rates differ because AlpacaEval's instruction difficulty
    # (fitted on its whole leaderboard), its L1 penalty with 5-fold CV and its regularisation
    # toward the gamed baselines are not available: measured gaps are within 2 points (docs/methods.md).
    table, board = alpaca_eval2_table
    for system, row in table.iterrows():
        assert 100 * row["raw"] == pytest.approx(board.loc[system, "win_rate"], abs=1e-6)
        assert abs(100 * row["lc"] - board.loc[system, "length_controlled_winrate"]) < 2.0, system
        assert row["lc_low"] < row["lc"] < row["lc_high"]


@pytest.mark.shared_data
@pytest.mark.parametrize("model", ["gpt-3.5-turbo-1106", "alpaca-7b"])
def test_verbosity_prompts_move_the_lc_rate_less_than_the_raw_rate(alpaca_eval2_table, model):
    # The same model told to be concise or verbose: on the logit scale, the largest move among the
    # trio's LC rates must be smaller than the largest move among its raw rates.
    table, _ = alpaca_eval2_table
    trio = table.loc[[f"{model}_concise", model, f"{model}_verbose"]]
    raw_spread = np.ptp(special.logit(trio["raw"].to_numpy(float)))
    lc_spread = np.ptp(special.logit(trio["lc"].to_numpy(float)))
    assert lc_spread < raw_spread, (model, lc_spread, raw_spread)


# ------------------------------------------------------------------------------------- separation
def _length_following(seed: int, n_clusters: int, per: int):
    """Answers of random lengths on both sides; the judge prefers the shorter answer in every contest."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_clusters), per)
    policy, opponent = rng.integers(20, 400, groups.size), rng.integers(20, 400, groups.size)
    y = np.where(policy < opponent, 1.0, np.where(policy > opponent, 0.0, 0.5))
    return y, groups, _texts(policy), _texts(opponent)


@pytest.mark.parametrize("per", [1, 4, 30])
def test_a_judge_whose_verdicts_follow_length_fails_the_gate(per):
    # Complete separation: no ML fit exists; Firth's does, and its interval is finite and beyond -0.10.
    # 12 vignettes: at 8 the intercept's CR2 interval (Satterthwaite df 2-4) is so wide that the
    # effect's box reaches inside -0.10 in some seeds (WARN, which blocks a required gate too).
    y, groups, policy, opponent = _length_following(11, n_clusters=12, per=per)
    result = length_bias(y, groups, policy, opponent)
    assert result.length is not None and result.length.penalised and not result.confounded
    low, high = result.length_effect.bounds
    assert np.isfinite(low) and np.isfinite(high) and high < -0.10
    gate = gate_length_bias(result)
    assert gate.verdict == Verdict.FAIL and "shorter" in gate.message and gate.evidence["firth_penalised"]


def test_lengths_on_one_side_only_are_confounded_with_quality():
    # The policy's answer is shorter in every contest and wins them all: the length preference
    # cannot be told from quality, so the gate is INCONCLUSIVE (and says why), not PASS.
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(8), 6)
    policy, opponent = rng.integers(10, 25, groups.size), rng.integers(100, 160, groups.size)
    result = length_bias(np.ones(groups.size), groups, _texts(policy), _texts(opponent))
    assert result.confounded and result.n_policy_shorter == groups.size
    gate = gate_length_bias(result)
    assert gate.verdict == Verdict.INCONCLUSIVE and "cannot be told apart" in gate.message


@pytest.mark.parametrize(("policy_range", "opponent_range"), [((15, 20), (120, 130)), ((10, 25), (120, 140))])
def test_lengths_far_apart_on_one_side_are_inconclusive_not_an_error(policy_range, opponent_range):
    # The tiny pipeline's shape (issue 31): 6 vignettes x 32 contests, the policy's answers all far
    # shorter than the opponent's and winning ~95%. tanh(Δℓ/sd) saturates at -1: exactly (a design
    # singular with the intercept) or to ~1e-8 (a fit whose rate at equal length is 1.0 in floats);
    # both used to raise InputError (exit 2) from the audit instead of an INCONCLUSIVE gate.
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(6), 32)
    policy, opponent = rng.integers(*policy_range, groups.size), rng.integers(*opponent_range, groups.size)
    y = (rng.random(groups.size) < 0.95).astype(float)
    result = length_bias(y, groups, _texts(policy), _texts(opponent))
    assert result.confounded and result.length is None and result.n_policy_shorter == groups.size
    gate = gate_length_bias(result)
    assert gate.verdict == Verdict.INCONCLUSIVE and "cannot be told apart" in gate.message


def test_separation_does_not_change_fits_that_have_an_ml_estimate():
    # Firth is used only when the ML fit does not exist: the coefficients stay statsmodels' ML ones.
    y, x, groups = _clustered_data(3)
    result = controlled_winrate(y, groups, pd.DataFrame({"tanh_length": x}))
    reference = fit_logistic_glm(y, np.column_stack([np.ones(y.size), x]), groups)
    assert not result.penalised
    np.testing.assert_allclose(result.fit.coef, reference.coef, atol=1e-12)


# ------------------------------------------------------------------------------------ command line
def _length_following_study(folder, pairs: int):
    """The synthetic study (tests/synthetic_study.py) on 20 vignettes, the policy's answers shorter
    on the whole (20-300 characters against 100-400: the lengths overlap, so the judge's preference
    is identifiable), judged in both orders by a judge that picks the shorter answer."""
    from synthetic_study import POLICY, study_rows, write_study

    rng = np.random.default_rng(31)
    rows = study_rows(n_vignettes=20, pairs=pairs, seed=31)
    length = {}
    for response in rows["responses"]:
        low, high = (20, 300) if response["system"] == POLICY else (100, 400)
        length[response["response_id"]] = int(rng.integers(low, high))
        response["text"] = ("word " * 100)[: length[response["response_id"]]]
    for judgment in rows["judgments"]:
        shorter_first = length[judgment["response_first"]] < length[judgment["response_second"]]
        judgment["verdict"] = "first" if shorter_first else "second"
    return write_study(folder, rows)


@pytest.mark.e2e
@pytest.mark.parametrize("pairs", [1, 4])
def test_commands_on_a_judge_that_always_prefers_the_shorter_answer(tmp_path, pairs):
    import json
    import subprocess
    import sys

    claim = _length_following_study(tmp_path / "study", pairs)

    def honestci(*args):
        return subprocess.run([sys.executable, "-m", "honestci", *map(str, args)], capture_output=True, text=True)

    checked = honestci("length-bias", claim)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stdout + checked.stderr
    assert "gate length_bias: FAIL" in checked.stdout and "shorter answers" in checked.stdout
    audited = honestci("audit", claim, "--out", tmp_path / "out", "--no-bayes")
    assert audited.returncode == 1 and "Traceback" not in audited.stderr, audited.stdout + audited.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    gate = next(g for g in verdict["gates"] if g["gate"] == "length_bias")
    assert gate["verdict"] == "FAIL" and gate["required"]
    assert "length_bias" in {g["gate"] for g in verdict["blocking_gates"]}
    assert "ratio of" in gate["evidence"]["required_because"]  # why the policy requires it
