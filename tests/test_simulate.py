"""Tests of the embedded study's simulator (fixtures/): determinism, truth, schema, leakage.

The true estimands in truth.json are recomputed here by methods independent of
fixtures/truth.py: scipy.integrate.quad over the verdict rule written from scratch (logistic
CDF thresholds), and seeded Monte Carlo of the whole generative process. The simulated data are
compared with the truth at a tolerance of 4 standard errors, the standard errors clustered on the
opponent response (each opponent answer is reused across runs, so contests sharing one are
correlated; vignette effects are fixed by conditioning on these vignettes).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import integrate
from statsmodels.stats.proportion import proportion_confint

from honestci.audit.errors import InputError
from honestci.fixtures import (
    DEFAULT_SEED,
    DEFAULT_STUDY_DIR,
    claims,
    composed_study,
    default_claim_path,
    design,
    population_studies,
    simulate_study,
    write_study,
)
from honestci.fixtures import simulate as sim

REPO_ROOT = Path(__file__).resolve().parents[1]
MAIN_SYSTEMS = {design.POLICY: 720, design.POLICY_V1: 480, design.BASE: 120, design.REFERENCE: 240}
Z_TOLERANCE = 4.0  # standard errors; P(|N(0,1)| > 4) = 6e-5 per comparison


@pytest.fixture(scope="module")
def study():
    return simulate_study()


def _contests(study, judge: str) -> pd.DataFrame:
    """One row per (system response, opponent response) contest judged by ``judge``, with the
    verdict when the system's response was shown first and when it was shown second."""
    system_of = dict(zip(study.responses["response_id"], study.responses["system"]))
    rows = study.judgments[study.judgments["judge"] == judge]
    first_system = rows["response_first"].map(system_of)
    system_first = first_system != design.OPPONENT
    table = pd.DataFrame(
        {
            "response": np.where(system_first, rows["response_first"], rows["response_second"]),
            "opponent": np.where(system_first, rows["response_second"], rows["response_first"]),
            "order": np.where(system_first, "system_first", "system_second"),
            "verdict": rows["verdict"].to_numpy(),
            "vignette_id": rows["vignette_id"].to_numpy(),
        }
    )
    wide = table.pivot(index=["response", "opponent", "vignette_id"], columns="order", values="verdict").reset_index()
    wide["system"] = wide["response"].map(system_of)
    return wide


def _score(contests: pd.DataFrame) -> pd.DataFrame:
    """Contest scores (1 win both, 0 lose both, 0.5 otherwise), invalid contests left out."""
    valid = contests[(contests["system_first"] != "invalid") & (contests["system_second"] != "invalid")].copy()
    win_both = (valid["system_first"] == "first") & (valid["system_second"] == "second")
    lose_both = (valid["system_first"] == "second") & (valid["system_second"] == "first")
    valid["score"] = np.where(win_both, 1.0, np.where(lose_both, 0.0, 0.5))
    return valid


def _clustered_mean_se(values: np.ndarray, clusters: np.ndarray) -> tuple[float, float]:
    """Mean and its cluster-robust (CR0) standard error: sqrt(sum_g (sum_i (y_i - ybar))^2) / n."""
    values = np.asarray(values, dtype=float)
    mean = values.mean()
    sums = pd.Series(values - mean).groupby(np.asarray(clusters)).sum().to_numpy()
    return float(mean), float(np.sqrt(np.sum(sums**2)) / len(values))


# --- determinism -----------------------------------------------------------------------------


def test_same_seed_writes_identical_bytes(tmp_path):
    first = write_study(tmp_path / "a", seed=7)
    second = write_study(tmp_path / "b", seed=7)
    assert (
        [p.relative_to(tmp_path / "a").as_posix() for p in first]
        == [p.relative_to(tmp_path / "b").as_posix() for p in second]
        == sorted(
            list(design.TABLE_FILES.values())
            + ["claim.yaml", "truth.json", *claims.OTHER_CLAIM_FILES]
            + [
                f"{population_studies.OFFDIST_DIR}/{name}"
                for name in [design.TABLE_FILES[t] for t in population_studies.OFFDIST_TABLES]
                + ["truth.json", *population_studies.OFFDIST_CLAIM_FILES]
            ]
            + [
                f"{population_studies.SEEDS_DIR}/{name}"
                for name in [design.TABLE_FILES[t] for t in population_studies.OFFDIST_TABLES]
                + ["truth.json", *population_studies.SEEDS_CLAIM_FILES]
            ]
            + [
                f"{composed_study.COMPOSED_DIR}/{name}"
                for name in [design.TABLE_FILES[t] for t in composed_study.COMPOSED_TABLES]
                + ["truth.json", *composed_study.COMPOSED_CLAIM_FILES]
            ]
        )
    )
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_committed_study_equals_fresh_generation(tmp_path):
    # The off-distribution, seeds and composed studies lie in their own folders (offdist/, seeds/,
    # composed/), each drawn from its own stream.
    written = write_study(tmp_path, seed=DEFAULT_SEED)
    committed = sorted(p.relative_to(DEFAULT_STUDY_DIR).as_posix() for p in DEFAULT_STUDY_DIR.rglob("*") if p.is_file())
    assert committed == [p.relative_to(tmp_path).as_posix() for p in written]
    for path in written:
        assert (DEFAULT_STUDY_DIR / path.relative_to(tmp_path)).read_bytes() == path.read_bytes(), (
            f"{path.name} differs: regenerate with "
            "`python -c 'from honestci.fixtures import write_study, DEFAULT_STUDY_DIR; "
            "write_study(DEFAULT_STUDY_DIR)'`"
        )


def test_different_seed_gives_different_data(study):
    other = simulate_study(DEFAULT_SEED + 1)
    assert other.seed == DEFAULT_SEED + 1 and other.truth["seed"] == DEFAULT_SEED + 1
    assert not other.judgments["verdict"].equals(study.judgments["verdict"])
    assert other.truth["u"] != study.truth["u"]
    assert other.truth["quality"] != study.truth["quality"]


def test_files_are_lf_only_and_free_of_timestamps(study):
    for path in (p for p in DEFAULT_STUDY_DIR.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert b"\r" not in data, path.name
        assert not re.search(rb"20\d\d-\d\d-\d\dT\d\d:\d\d", data), path.name


@pytest.mark.parametrize("bad_seed", [-1, 1.5, True, "3"])
def test_bad_seed_is_an_input_error(bad_seed):
    with pytest.raises(InputError, match="non-negative integer"):
        simulate_study(bad_seed)


def test_writing_over_a_file_is_an_input_error(tmp_path):
    target = tmp_path / "occupied"
    target.write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        write_study(target)


# --- truth: independent recomputation --------------------------------------------------------


def _logistic_cdf(x: float) -> float:
    """P(eps <= x) for eps ~ Logistic(0, 1)."""
    return 1.0 / (1.0 + math.exp(-x))


def _order_probs_from_rule(x: float, kappa: float, b: float, t: float) -> tuple[float, ...]:
    """From the verdict rule itself: z = kappa*diff + b + eps, eps ~ Logistic; first if z > t,
    second if z < -t. Returns P(system wins), P(system loses) with the system first, then second.
    """
    win_first = 1.0 - _logistic_cdf(t - kappa * x - b)  # z > t with diff = x
    lose_first = _logistic_cdf(-t - kappa * x - b)
    win_second = _logistic_cdf(-t + kappa * x - b)  # z < -t with diff = -x
    lose_second = 1.0 - _logistic_cdf(t + kappa * x - b)
    return win_first, lose_first, win_second, lose_second


def _quad_expectation(function, mean: float, sd: float) -> float:
    def density(x):
        return math.exp(-0.5 * ((x - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))

    value, error = integrate.quad(
        lambda x: function(x) * density(x), mean - 12 * sd, mean + 12 * sd, epsabs=1e-12, epsrel=1e-12, limit=200
    )
    assert error < 1e-9
    return value


@pytest.mark.parametrize("system", list(MAIN_SYSTEMS))
def test_per_vignette_truth_matches_adaptive_quadrature(study, system):
    truth = study.truth
    tau = truth["tau"]
    for judge, params in truth["judges"].items():
        kappa, b, t = params["kappa"], params["b"], params["t"]
        for vid, recorded in truth["estimands"][system][judge]["per_vignette"].items():
            mean = (
                truth["alpha"][system]
                - truth["alpha"][design.OPPONENT]
                + truth["u"][system][vid]
                - truth["u"][design.OPPONENT][vid]
            )

            def score(x):
                wf, lf, ws, ls = _order_probs_from_rule(x, kappa, b, t)
                return wf * ws + 0.5 * (1 - wf * ws - lf * ls)

            def order_effect(x):
                wf, _, ws, _ = _order_probs_from_rule(x, kappa, b, t)
                return wf - ws

            sd = math.sqrt(2) * tau
            # truth.json rounds to 9 decimals; quad is accurate to ~1e-12.
            assert recorded["contest_score"] == pytest.approx(_quad_expectation(score, mean, sd), abs=2e-9)
            assert recorded["order_effect"] == pytest.approx(_quad_expectation(order_effect, mean, sd), abs=2e-9)


def _monte_carlo_contests(rng, n, alpha_diff, sigma_sys, sigma_opp, tau, params):
    """Simulate n new-vignette contests from scratch: vignette effects, response terms,
    logistic noise, thresholds. Returns per-contest (score, win_first - win_second, consistent)."""
    diff = (
        alpha_diff
        + rng.normal(0, sigma_sys, n)
        - rng.normal(0, sigma_opp, n)
        + rng.normal(0, tau, n)
        - rng.normal(0, tau, n)
    )
    kappa, b, t = params["kappa"], params["b"], params["t"]
    z_first = kappa * diff + b + rng.logistic(0, 1, n)  # system shown first
    z_second = -kappa * diff + b + rng.logistic(0, 1, n)  # system shown second
    win_first, lose_first = z_first > t, z_first < -t
    win_second, lose_second = z_second < -t, z_second > t
    tie_first = ~win_first & ~lose_first
    tie_second = ~win_second & ~lose_second
    win_both, lose_both = win_first & win_second, lose_first & lose_second
    score = np.where(win_both, 1.0, np.where(lose_both, 0.0, 0.5))
    consistent = win_both | lose_both | (tie_first & tie_second)
    return score, win_first.astype(float) - win_second, consistent.astype(float)


@pytest.mark.parametrize("system", list(MAIN_SYSTEMS))
def test_new_vignette_truth_matches_monte_carlo(study, system):
    truth = study.truth
    rng = np.random.default_rng(12345)
    n = 400_000  # SE of a contest-score mean <= 0.5 / sqrt(n) = 0.0008
    for judge, params in truth["judges"].items():
        recorded = truth["estimands"][system][judge]["new_vignette"]
        score, order, consistent = _monte_carlo_contests(
            rng,
            n,
            truth["alpha"][system] - truth["alpha"][design.OPPONENT],
            truth["sigma"][system],
            truth["sigma"][design.OPPONENT],
            truth["tau"],
            params,
        )
        for value, key in ((score, "contest_score"), (order, "order_effect"), (consistent, "consistency_rate")):
            se = value.std() / math.sqrt(n)
            assert abs(value.mean() - recorded[key]) < Z_TOLERANCE * se, (judge, key)


def test_checkpoint_truth_matches_monte_carlo(study):
    truth = study.truth
    rng = np.random.default_rng(2024)
    n = 400_000
    params = truth["judges"][design.CHECKPOINT_JUDGE]
    bon = truth["best_of_n"]
    for ckpt in design.CHECKPOINTS[:3]:
        # Shared and own vignette effects are independent normals: their sum has the recorded SD.
        assert truth["sigma"][ckpt] == pytest.approx(math.hypot(bon["sigma_shared"], bon["sigma_own"]), abs=1e-9)
        score, _, _ = _monte_carlo_contests(
            rng, n, truth["alpha"][ckpt], truth["sigma"][ckpt], truth["sigma"][design.OPPONENT], truth["tau"], params
        )
        se = score.std() / math.sqrt(n)
        recorded = bon["candidates"][ckpt]["win_rate_new_vignette"]
        assert abs(score.mean() - recorded) < Z_TOLERANCE * se


def test_human_agreement_truth_matches_monte_carlo(study):
    """Agreement of each judged order with the raters' summed-score preference, simulated."""
    truth = study.truth
    rating = truth["human_rating_model"]
    biases = np.array([rating["rater_bias"][r] for r in design.RATERS])
    rng = np.random.default_rng(99)
    for judge, params in truth["judges"].items():
        agree_parts, pref_parts = [], []
        for vid in truth["u"][design.OPPONENT]:
            for system, weight in rating["rated_contests_per_vignette"].items():
                n = 8_000 * weight
                q_a = truth["alpha"][system] + truth["u"][system][vid] + rng.normal(0, truth["tau"], n)
                q_b = (
                    truth["alpha"][design.OPPONENT] + truth["u"][design.OPPONENT][vid] + rng.normal(0, truth["tau"], n)
                )

                def scores(q):
                    latent = (
                        rating["intercept"]
                        + rating["slope"] * q[:, None]
                        + biases
                        + rng.normal(0, rating["noise_sd"], (n, len(biases)))
                    )
                    return np.clip(np.round(latent), 1, 7).sum(axis=1)

                human = np.sign(scores(q_a) - scores(q_b))
                z_a_first = params["kappa"] * (q_a - q_b) + params["b"] + rng.logistic(0, 1, n)
                z_b_first = params["kappa"] * (q_b - q_a) + params["b"] + rng.logistic(0, 1, n)
                judge_a_first = np.where(z_a_first > params["t"], 1, np.where(z_a_first < -params["t"], -1, 0))
                judge_b_first = np.where(z_b_first > params["t"], -1, np.where(z_b_first < -params["t"], 1, 0))
                agree = ((judge_a_first == human) & (human != 0)).astype(float) + (
                    (judge_b_first == human) & (human != 0)
                )
                agree_parts.append(agree)
                pref_parts.append(2.0 * (human != 0))
        agree, pref = np.concatenate(agree_parts), np.concatenate(pref_parts)
        ratio = agree.sum() / pref.sum()
        se = np.std(agree - ratio * pref) / math.sqrt(len(agree)) / pref.mean()
        recorded = truth["human_agreement"][judge]["agreement"]
        assert abs(ratio - recorded) < Z_TOLERANCE * se, (judge, ratio, recorded, se)


def test_truth_parameters_are_the_ones_that_generated_the_data(study):
    truth = study.truth
    system_of = dict(zip(study.responses["response_id"], study.responses["system"]))
    vignette_of = dict(zip(study.responses["response_id"], study.responses["vignette_id"]))
    assert set(truth["quality"]) == set(system_of)
    e = np.array(
        [
            q - truth["alpha"][system_of[r]] - truth["u"][system_of[r]][vignette_of[r]]
            for r, q in truth["quality"].items()
        ]
    )
    # e ~ N(0, tau): mean SE = tau / sqrt(n), SD SE ~= tau / sqrt(2 n).
    n = len(e)
    assert abs(e.mean()) < Z_TOLERANCE * truth["tau"] / math.sqrt(n)
    assert abs(e.std() - truth["tau"]) < Z_TOLERANCE * truth["tau"] / math.sqrt(2 * n)
    # The parameter values the brief asks for.
    assert truth["alpha"][design.OPPONENT] == 0.0
    alphas = [truth["best_of_n"]["candidates"][c]["alpha"] for c in design.CHECKPOINTS]
    assert max(alphas) - min(alphas) <= 0.1
    assert all(abs(a - design.CHECKPOINT_ALPHA_CENTRE) <= 0.05 for a in alphas)
    judges = truth["judges"]
    assert set(judges) == {"llama-3.1-70b", "llama-3.1-405b", "small-judge"}
    assert truth["position_bias"]["llama-3.1-405b"]["b_logit"] == judges["llama-3.1-405b"]["b"]


def test_true_win_rates_are_near_the_model_card(study):
    new = {s: study.truth["estimands"][s][design.CLAIM_JUDGE]["new_vignette"]["contest_score"] for s in MAIN_SYSTEMS}
    targets = {design.POLICY: 0.80, design.POLICY_V1: 0.58, design.BASE: 0.46, design.REFERENCE: 0.77}
    for system, target in targets.items():
        assert new[system] == pytest.approx(target, abs=0.01)
    # Spread of the policy's per-vignette win rate over the vignette population (a property of
    # the parameters, not of one seed's draws): its 10th and 90th percentiles, at the quantiles
    # of u_policy - u_opponent ~ N(0, sqrt(sigma_p^2 + sigma_o^2)), span roughly 0.65-0.92.
    truth = study.truth
    sd = math.hypot(truth["sigma"][design.POLICY], truth["sigma"][design.OPPONENT])
    z90 = 1.2815515655446004  # scipy.stats.norm.ppf(0.9)
    params = truth["judges"][design.CLAIM_JUDGE]
    quantile_rates = []
    for u in (-z90 * sd, z90 * sd):
        mean = truth["alpha"][design.POLICY] - truth["alpha"][design.OPPONENT] + u

        def score(x):
            wf, lf, ws, ls = _order_probs_from_rule(x, params["kappa"], params["b"], params["t"])
            return wf * ws + 0.5 * (1 - wf * ws - lf * ls)

        quantile_rates.append(_quad_expectation(score, mean, math.sqrt(2) * truth["tau"]))
    assert 0.62 < quantile_rates[0] < 0.70 and 0.88 < quantile_rates[1] < 0.95, quantile_rates


# --- the data agree with the truth -------------------------------------------------------


@pytest.mark.parametrize("judge", list(design.JUDGES))
def test_empirical_win_rates_match_truth_on_these_vignettes(study, judge):
    scored = _score(_contests(study, judge))
    for system in MAIN_SYSTEMS:
        rows = scored[scored["system"] == system]
        mean, se = _clustered_mean_se(rows["score"], rows["opponent"])
        truth = study.truth["estimands"][system][judge]["these_vignettes"]["contest_score"]
        assert abs(mean - truth) < Z_TOLERANCE * se, (system, mean, truth, se)


def test_empirical_per_vignette_policy_rates_match_truth(study):
    scored = _score(_contests(study, design.CLAIM_JUDGE))
    truth = study.truth["estimands"][design.POLICY][design.CLAIM_JUDGE]["per_vignette"]
    for vid, rows in scored[scored["system"] == design.POLICY].groupby("vignette_id"):
        mean, se = _clustered_mean_se(rows["score"], rows["opponent"])
        assert abs(mean - truth[vid]["contest_score"]) < Z_TOLERANCE * se, vid


def _order_effect(study, judge):
    contests = _contests(study, judge)
    contests = contests[
        (contests["system"] == design.POLICY)
        & (contests["system_first"] != "invalid")
        & (contests["system_second"] != "invalid")
    ]
    difference = (contests["system_first"] == "first").astype(float) - (contests["system_second"] == "second").astype(
        float
    )
    return _clustered_mean_se(difference.to_numpy(), contests["opponent"].to_numpy())


def test_position_biased_judge_shows_a_large_order_effect(study):
    effect, se = _order_effect(study, "llama-3.1-405b")
    truth = study.truth["position_bias"]["llama-3.1-405b"]["these_vignettes"]["order_effect"]
    assert effect > 0.15
    assert abs(effect - truth) < Z_TOLERANCE * se


def test_calibrated_judge_order_effect_is_near_zero(study):
    effect, se = _order_effect(study, design.CLAIM_JUDGE)
    truth = study.truth["position_bias"][design.CLAIM_JUDGE]["these_vignettes"]["order_effect"]
    assert abs(effect) < 0.05
    assert abs(effect - truth) < Z_TOLERANCE * se


def test_invalid_and_tie_rates(study):
    judgments = study.judgments
    for judge, params in design.JUDGES.items():
        verdicts = judgments.loc[judgments["judge"] == judge, "verdict"]
        n = len(verdicts)
        invalid = (verdicts == "invalid").mean()
        se = math.sqrt(params.pi * (1 - params.pi) / n)
        if params.pi == 0:
            assert invalid == 0, judge
        else:
            assert abs(invalid - params.pi) < Z_TOLERANCE * se, judge
        # Tie rate of the policy's judged orders against its truth, and "a few percent".
        contests = _contests(study, judge)
        contests = contests[contests["system"] == design.POLICY]
        orders = pd.concat(
            [
                contests[["system_first", "opponent"]].set_axis(["v", "o"], axis=1),
                contests[["system_second", "opponent"]].set_axis(["v", "o"], axis=1),
            ]
        )
        orders = orders[orders["v"] != "invalid"]
        tie, tie_se = _clustered_mean_se((orders["v"] == "tie").to_numpy(float), orders["o"])
        truth = study.truth["estimands"][design.POLICY][judge]["these_vignettes"]["p_tie"]
        assert abs(tie - truth) < Z_TOLERANCE * tie_se, (judge, tie, truth)
        assert 0.01 < truth < 0.08, (judge, truth)


# --- design counts ------------------------------------------------------------------------


def test_contest_counts_and_both_orders(study):
    assert len(study.vignettes) == 6
    assert set(study.judgments["judge"]) == set(design.JUDGES)
    for judge in design.JUDGES:
        contests = _contests(study, judge)
        # Both orders present for every contest: the pivot has no missing cell.
        assert contests[["system_first", "system_second"]].notna().all().all()
        counts = contests.groupby("system").size().to_dict()
        for system, n in MAIN_SYSTEMS.items():
            assert counts[system] == n, (judge, system)
        if judge == design.CHECKPOINT_JUDGE:
            for ckpt in design.CHECKPOINTS:
                assert counts[ckpt] == 2 * 6 * design.CHECKPOINT_CONTESTS_PER_VIGNETTE
        else:
            assert not set(counts) & set(design.CHECKPOINTS)
    # 2 orders per contest, 3 judges for the main contests, 1 for the checkpoints.
    assert len(study.judgments) == 2 * (3 * sum(MAIN_SYSTEMS.values()) + 8 * 120)
    runs = study.responses.groupby("system")["run"].apply(lambda s: sorted(s.dropna().unique()))
    assert runs[design.POLICY] == ["run-1", "run-2", "run-3"]
    assert runs[design.POLICY_V1] == ["run-1", "run-2"]
    opponent = study.responses[study.responses["system"] == design.OPPONENT]
    assert (opponent.groupby("vignette_id").size() == 40).all()
    assert opponent["text"].is_unique
    pools = study.responses[study.responses["system"].isin(design.CHECKPOINTS)]
    assert (pools.groupby(["system", "pool", "vignette_id"]).size() == 10).all()
    assert set(pools["pool"]) == {"selection", "heldout"}


def test_human_calibration_subset(study):
    rated = set(study.truth["human_rating_model"]["rated_system_responses"])
    responses = study.responses.set_index("response_id")
    assert (responses.loc[sorted(rated), "run"] == "run-1").all()
    by_system = responses.loc[sorted(rated)].groupby(["vignette_id", "system"]).size()
    assert (by_system.xs(design.POLICY, level="system") == 12).all()
    assert (by_system.xs(design.POLICY_V1, level="system") == 8).all()
    ratings = study.human_ratings
    assert set(ratings["rater_id"]) == set(design.RATERS)
    assert ratings["score"].between(1, 7).all() and (ratings["score"] % 1 == 0).all()
    score = ratings.set_index(["response_id", "rater_id"])["score"]
    for row in study.human_pairs.itertuples():
        a, b = score[(row.response_a, row.rater_id)], score[(row.response_b, row.rater_id)]
        assert row.label == ("a" if a > b else "b" if b > a else "tie")
        assert row.response_a in rated
    assert len(study.human_pairs) == 5 * 6 * 20
    # Opponent answers in the subset are distinct, so each is rated once per rater.
    assert study.human_pairs.groupby("rater_id")["response_b"].apply(lambda s: s.is_unique).all()


def test_empirical_judge_agreement_matches_truth(study):
    """Per judged order, agreement with the raters' summed-score preference (SE by contest)."""
    summed = study.human_ratings.groupby("response_id")["score"].sum()
    pairs = study.human_pairs.drop_duplicates(["response_a", "response_b"])
    preferred = {}
    for row in pairs.itertuples():
        diff = summed[row.response_a] - summed[row.response_b]
        if diff != 0:
            preferred[(row.response_a, row.response_b)] = "a" if diff > 0 else "b"
    for judge in design.JUDGES:
        contests = _contests(study, judge).set_index(["response", "opponent"])
        agree, pref = [], []
        for key, human in preferred.items():
            first, second = contests.loc[key, ["system_first", "system_second"]]
            picks = [{"first": "a", "second": "b"}.get(first), {"first": "b", "second": "a"}.get(second)]
            valid = [first != "invalid", second != "invalid"]
            agree.append(sum(p == human and v for p, v in zip(picks, valid)))
            pref.append(sum(valid))
        agree, pref = np.array(agree, float), np.array(pref, float)
        ratio = agree.sum() / pref.sum()
        se = np.std(agree - ratio * pref) / math.sqrt(len(agree)) / pref.mean()
        truth = study.truth["human_agreement"][judge]["agreement"]
        assert abs(ratio - truth) < Z_TOLERANCE * se, (judge, ratio, truth, se)


# --- claim ----------------------------------------------------------------------------------


def test_claim_reproduces_from_the_data(study):
    claim = yaml.safe_load(default_claim_path().read_text())
    assert default_claim_path() == DEFAULT_STUDY_DIR / "claim.yaml"
    assert claim == study.claim
    assert claim["policy"] == design.POLICY and claim["opponent"] == design.OPPONENT
    assert claim["judge"] == "llama-3.1-70b" and claim["bar"] == 0.608
    assert claim["population"] == "new_vignettes" and claim["metric"] == "winrate"
    for filename in claim["data"].values():
        assert (DEFAULT_STUDY_DIR / filename).is_file()
    scored = _score(_contests(study, claim["judge"]))
    scores = scored.loc[scored["system"] == claim["policy"], "score"].to_numpy()
    assert len(scores) == claim["claimed"]["n"] == 720
    point = scores.mean()
    # Outside reference: statsmodels' Wilson interval on the mean contest score.
    low, _ = proportion_confint(point * len(scores), len(scores), alpha=0.05, method="wilson")
    assert claim["claimed"]["point"] == round(point, 3)
    assert claim["claimed"]["ci_low"] == round(low, 3)
    assert claim["claimed"]["method"] == "wilson" and claim["claimed"]["level"] == 0.95


# --- schema ---------------------------------------------------------------------------------


def _documented_columns() -> dict[str, dict[str, bool]]:
    """Columns and their required flags, parsed from docs/data-formats.md."""
    text = (REPO_ROOT / "docs" / "data-formats.md").read_text()
    tables: dict[str, dict[str, bool]] = {}
    current = None
    for line in text.splitlines():
        heading = re.match(r"^## (\w+)\s*$", line)
        if heading:
            current = heading.group(1)
            tables[current] = {}
            continue
        row = re.match(r"^\| `(\w+)` \| [^|]+ \| (yes|no) \|", line)
        if row and current:
            tables[current][row.group(1)] = row.group(2) == "yes"
    return tables


#: Documented optional columns the simulator never writes: its judges give categorical verdicts.
NOT_SIMULATED = {"judgments": ("preference_first",)}


def test_tables_have_exactly_the_documented_columns(study):
    documented = _documented_columns()
    assert set(documented) == set(design.TABLE_FILES)
    for name, columns in NOT_SIMULATED.items():
        for column in columns:
            assert documented[name].pop(column) is False  # optional
    for name, frame in study.tables.items():
        assert list(frame.columns) == list(documented[name]), name
        assert tuple(frame.columns) == design.TABLE_COLUMNS[name]
        for column, required in documented[name].items():
            if required:
                assert frame[column].notna().all(), (name, column)


def test_written_files_round_trip_to_the_tables(study):
    for name, filename in design.TABLE_FILES.items():
        lines = (DEFAULT_STUDY_DIR / filename).read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        frame = study.tables[name]
        assert len(records) == len(frame)
        assert all(list(r) == sorted(frame.columns) for r in records)
        expected = [{k: sim._plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
        assert records == expected, name


def test_ids_are_unique_and_references_resolve(study):
    assert study.vignettes["vignette_id"].is_unique
    assert study.responses["response_id"].is_unique
    assert study.corpus["doc_id"].is_unique
    assert not study.human_ratings.duplicated(["response_id", "rater_id"]).any()
    assert not study.human_pairs.duplicated(["response_a", "response_b", "rater_id"]).any()
    assert not study.judgments.duplicated(["judge", "response_first", "response_second"]).any()
    vignette_of = dict(zip(study.responses["response_id"], study.responses["vignette_id"]))
    assert set(study.responses["vignette_id"]) <= set(study.vignettes["vignette_id"])
    for column in ("response_first", "response_second"):
        assert (study.judgments[column].map(vignette_of) == study.judgments["vignette_id"]).all()
    for column in ("response_a", "response_b"):
        pairs = study.human_pairs
        assert (pairs[column].map(vignette_of) == pairs["vignette_id"]).all()
    assert study.human_ratings["response_id"].isin(vignette_of).all()
    assert set(study.judgments["verdict"]) == {"first", "second", "tie", "invalid"}
    assert study.judgments["prompt_sha256"].str.fullmatch(r"[0-9a-f]{64}").all()
    assert set(study.human_pairs["label"]) == {"a", "b", "tie"}
    seeds = study.responses.loc[study.responses["system"] != design.OPPONENT, "seed"]
    assert seeds.notna().all() and str(seeds.dtype) == "Int64"


def test_judge_raw_outputs_match_verdicts(study):
    marker = {"first": "[[A]]", "second": "[[B]]", "tie": "[[C]]"}
    for verdict, raw in zip(study.judgments["verdict"], study.judgments["raw"]):
        if verdict == "invalid":
            assert not re.search(r"\[\[[ABC]\]\]", raw)
        else:
            assert raw.endswith(marker[verdict])


def test_policy_raw_holds_a_reasoning_trace_then_the_answer(study):
    policy = study.responses[study.responses["system"] == design.POLICY]
    assert len(policy) == 720
    for raw, text in zip(policy["raw"], policy["text"]):
        assert raw.startswith("<think>") and raw.split("</think>", 1)[1].strip() == text
    for text in study.responses["text"]:
        assert len(re.findall(r"[.!?](?:\s|$)", text)) <= 2  # two sentences at most


# --- leakage ------------------------------------------------------------------------------


def _ngrams(text: str, n: int = 12) -> set[tuple[str, ...]]:
    words = re.sub(r"[^\w\s]", " ", text.lower()).split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_leaks_are_exactly_the_recorded_documents(study):
    responses = study.responses
    opponent = responses[responses["system"] == design.OPPONENT]
    others = responses[responses["system"] != design.OPPONENT]
    opponent_grams = {rid: _ngrams(text) for rid, text in zip(opponent["response_id"], opponent["text"])}
    # Every 12-word run of an opponent answer belongs to that answer alone ...
    counts: dict[tuple[str, ...], int] = {}
    for grams in opponent_grams.values():
        for gram in grams:
            counts[gram] = counts.get(gram, 0) + 1
    assert max(counts.values()) == 1
    # ... and appears in no other system's answer.
    other_grams = set().union(*(_ngrams(t) for t in others["text"]))
    assert not set(counts) & other_grams
    hits = set()
    for doc_id, text in zip(study.corpus["doc_id"], study.corpus["text"]):
        grams = _ngrams(text)
        assert not grams & other_grams, doc_id
        touched = {rid for rid, g in opponent_grams.items() if g & grams}
        # A document either holds a whole answer verbatim or shares no 12-gram with any.
        assert all(opponent_grams[rid] <= grams for rid in touched), doc_id
        hits |= {(doc_id, rid) for rid in touched}
    leaks = study.truth["leakage"]
    assert hits == {(item["doc_id"], item["response_id"]) for item in leaks["verbatim"]}
    assert len(leaks["verbatim"]) == 4 and len(leaks["paraphrase"]) == 1
    leaked = {item["response_id"] for item in leaks["verbatim"] + leaks["paraphrase"]}
    # Every leaked answer is a held-out opponent answer that the headline contests use.
    judged = set(_contests(study, design.CLAIM_JUDGE).query("system == @design.POLICY")["opponent"])
    assert leaked <= judged


def test_paraphrased_leak_is_close_but_not_verbatim(study):
    item = study.truth["leakage"]["paraphrase"][0]
    original = study.responses.set_index("response_id").loc[item["response_id"], "text"]
    doc = study.corpus.set_index("doc_id").loc[item["doc_id"], "text"]
    assert not _ngrams(original) & _ngrams(doc)
    original_words = set(re.sub(r"[^\w\s]", " ", original.lower()).split())
    doc_words = set(re.sub(r"[^\w\s]", " ", doc.lower()).split())
    # At least half of the answer's distinct words reappear in the document.
    assert len(original_words & doc_words) / len(original_words) >= 0.5


def test_study_folder_stays_small():
    # A guard against growth: 11,280 judgment rows each carrying a 64-hex prompt hash put the
    # folder at about 4.3 MB.
    total = sum(p.stat().st_size for p in DEFAULT_STUDY_DIR.iterdir() if p.is_file())
    assert total < 4.5e6
    # The off-distribution study (offdist/: 180 contests, three judges) is about 0.6 MB.
    assert sum(p.stat().st_size for p in (DEFAULT_STUDY_DIR / population_studies.OFFDIST_DIR).iterdir()) < 0.7e6
    # The seeds study (seeds/: 300 contests, the claim judge only) is about 0.35 MB.
    assert sum(p.stat().st_size for p in (DEFAULT_STUDY_DIR / population_studies.SEEDS_DIR).iterdir()) < 0.4e6
    # The composed study (composed/: 1,200 contests, one judge, 30 vignettes) is about 1.25 MB.
    assert sum(p.stat().st_size for p in (DEFAULT_STUDY_DIR / composed_study.COMPOSED_DIR).iterdir()) < 1.6e6


def test_to_frame_lists_every_estimand(study):
    frame = study.to_frame()
    assert list(frame.columns) == ["system", "judge", "population", "win_rate", "order_effect", "consistency_rate"]
    assert len(frame) == 2 * (4 * 3 + 8)
    assert "true win rates" in str(study)


@pytest.mark.slow
def test_empirical_win_rates_are_unbiased_across_seeds():
    """Over 30 seeds, (empirical - truth) / clustered SE should look like N(0, <=1): mean within
    4 SE of 0 (SE of a mean of 30 unit-variance values = 1/sqrt(30)), SD between 0.6 and 1.4
    (the opponent-clustered SE is slightly conservative; SD of an SD estimate at n=30 ~ 0.13)."""
    z = []
    for seed in range(30):
        study = simulate_study(seed)
        scored = _score(_contests(study, design.CLAIM_JUDGE))
        rows = scored[scored["system"] == design.POLICY]
        mean, se = _clustered_mean_se(rows["score"], rows["opponent"])
        truth = study.truth["estimands"][design.POLICY][design.CLAIM_JUDGE]["these_vignettes"]
        z.append((mean - truth["contest_score"]) / se)
    assert abs(np.mean(z)) < Z_TOLERANCE / math.sqrt(len(z))
    assert 0.6 < np.std(z) < 1.4


# --- the composed study (composed/) ------------------------------------------------------------


@pytest.fixture(scope="module")
def composed():
    return composed_study.simulate_composed_study(DEFAULT_SEED)


def test_composed_truth_matches_monte_carlo():
    # human_anchored_rates against the generative process drawn directly: D, the human's
    # preference (logistic threshold), and the judge's two orders flipped at the stated rates.
    from honestci.fixtures.truth import human_anchored_rates

    rng = np.random.default_rng(11)
    human, error, n = composed_study.COMPOSED_HUMAN, composed_study.COMPOSED_JUDGE_ERROR, 400_000
    mean, sd = 0.45, 0.95
    d = rng.normal(mean, sd, n)
    z = human.kappa * d + rng.logistic(0.0, 1.0, n)
    pref = np.where(z > human.t, 1, np.where(z < -human.t, -1, 0))
    orders = []
    for _ in range(2):
        r = rng.random(n)
        to_system = np.where(pref == 1, r >= error["to_opponent"], r < error["to_candidate"])
        orders.append(np.where(to_system, 1, np.where(pref == 0, 0, -1)))
    both_system = (orders[0] == 1) & (orders[1] == 1)
    both_opponent = (orders[0] == -1) & (orders[1] == -1)
    judge = np.where(both_system, 1.0, np.where(both_opponent, 0.0, 0.5))
    expected = human_anchored_rates(mean, sd, human, error["to_candidate"], error["to_opponent"])
    se = 0.5 / math.sqrt(n)
    assert abs(np.mean((pref == 1) + 0.5 * (pref == 0)) - expected["human_score"]) < Z_TOLERANCE * se
    assert abs(judge.mean() - expected["judge_score"]) < Z_TOLERANCE * se


def test_composed_study_design(composed):
    tables, truth = composed["tables"], composed["truth"]
    responses, judgments, pairs = tables["responses"], tables["judgments"], tables["human_pairs"]
    assert tables["vignettes"]["vignette_id"].nunique() == composed_study.COMPOSED_N_VIGNETTES == 30
    assert tables["vignettes"]["text"].nunique() == 30
    candidates = responses[responses["system"] != design.OPPONENT]
    assert set(candidates["pool"]) == {"selection"} and set(candidates["system"]) == set(
        composed_study.COMPOSED_CANDIDATES
    )
    assert len(candidates) == 4 * 30 * 10 and len(judgments) == 2 * len(candidates)
    # one label per labelled contest, on every candidate, about the stated share
    labelled = pairs["response_a"].map(dict(zip(responses["response_id"], responses["system"])))
    assert set(labelled) == set(composed_study.COMPOSED_CANDIDATES) and not pairs["response_a"].duplicated().any()
    assert abs(len(pairs) / len(candidates) - composed_study.COMPOSED_LABEL_SHARE) < 0.05
    assert (
        truth["estimand"]["value"]
        == truth["candidates"][truth["estimand"]["claimed"]]["new_vignettes_non_leaked"]["human_score"]
    )
    assert sorted(leak["vignette_id"] for leak in truth["leakage"]) == truth["leaked_vignettes"]
    assert len(truth["leaked_vignettes"]) == composed_study.COMPOSED_N_LEAKED


def test_composed_judge_errs_against_the_humans_at_the_stated_rates(composed):
    tables = composed["tables"]
    verdict = {(r.response_first, r.response_second): r.verdict for r in tables["judgments"].itertuples()}
    named = {"candidate": [], "opponent": [], "none": []}  # human preference -> judge's pick per order
    for row in tables["human_pairs"].itertuples():
        pref = {"a": "candidate", "b": "opponent", "tie": "none"}[row.label]
        for first, second, mine in (
            (row.response_a, row.response_b, "first"),
            (row.response_b, row.response_a, "second"),
        ):
            v = verdict[(first, second)]
            named[pref].append("candidate" if v == mine else ("none" if v == "tie" else "opponent"))
    rates = {pref: np.mean(np.asarray(picks) == "candidate") for pref, picks in named.items()}
    error = composed_study.COMPOSED_JUDGE_ERROR
    for pref, expected in (("opponent", error["to_candidate"]), ("none", error["to_candidate"])):
        n = len(named[pref])
        assert abs(rates[pref] - expected) < Z_TOLERANCE * math.sqrt(expected * (1 - expected) / n), pref
    n = len(named["candidate"])
    p = error["to_opponent"]
    assert abs((1 - rates["candidate"]) - p) < Z_TOLERANCE * math.sqrt(p * (1 - p) / n)
    assert set(named["candidate"]) <= {"candidate", "opponent"}  # a human preference is never judged a tie


def test_composed_claim_names_the_selection_pool_winner(composed):
    from honestci.audit.stats.estimands import vignette_means

    tables, claim = composed["tables"], composed["claims"]["claim-composed.yaml"]
    system = dict(zip(tables["responses"]["response_id"], tables["responses"]["system"]))
    verdict = {(r.response_first, r.response_second): r.verdict for r in tables["judgments"].itertuples()}
    rows = []
    for (first, second), v in verdict.items():
        if system[first] != design.OPPONENT:
            back = verdict[(second, first)]
            score = 1.0 if (v, back) == ("first", "second") else (0.0 if (v, back) == ("second", "first") else 0.5)
            rows.append((system[first], first.split("-")[1], score))
    frame = pd.DataFrame(rows, columns=["system", "vignette", "score"])
    means = {
        s: vignette_means(g["score"].to_numpy(), g["vignette"].to_numpy()).estimate for s, g in frame.groupby("system")
    }
    assert claim["policy"] == max(means, key=means.get)
    mine = frame[frame["system"] == claim["policy"]]["score"]
    assert claim["claimed"]["point"] == round(mine.mean(), 3) and claim["claimed"]["n"] == len(mine) == 300
