import numpy as np
import pytest

from honestci.audit.stats.bayesian.compare import fit_paired_difference_bayes
from honestci.audit.stats.frequentist.compare import paired_difference


def _expit(x):
    return 1 / (1 + np.exp(-x))


def _both_order_scores(rng, logits, contests_per_vignette):
    """Contest scores (mean of two independent judged orders, no ties) and their vignettes."""
    p = np.repeat(_expit(np.asarray(logits)), contests_per_vignette)
    wins = rng.random((2, p.size)) < p
    return wins.mean(axis=0), np.repeat([f"v{v}" for v in range(len(logits))], contests_per_vignette)


def _cr2(scores_a, clusters_a, scores_b, clusters_b):
    return paired_difference(scores_a, clusters_a, scores_b, clusters_b, system_a="a", system_b="b", opponent="o")


def test_recovers_a_known_difference_and_agrees_with_the_clustered_test():
    rng = np.random.default_rng(7)
    u = rng.normal(0, 0.5, 8)
    logits_b = 0.6 + u
    logits_a = 0.6 + 0.8 + u  # A is better on every vignette by 0.8 on the logit scale
    a, b = _both_order_scores(rng, logits_a, 60), _both_order_scores(rng, logits_b, 60)
    result = fit_paired_difference_bayes(
        *a, *b, system_a="a", system_b="b", opponent="o", chains=4, draws=1000, tune=1000, seed=3
    )
    assert result.converged and result.diagnostics.divergences == 0
    truth_these = float(np.mean(_expit(logits_a) - _expit(logits_b)))
    assert result.difference_these.lower <= truth_these <= result.difference_these.upper
    assert result.p_a_beats_b_these > 0.99 and result.p_a_beats_b_new > 0.9
    # The CR2 clustered difference of the same contest scores points the same way, close in size.
    cr2 = _cr2(*a, *b)
    assert cr2.ci_low > 0
    assert abs(result.difference_these.mean - cr2.estimate) < 0.02


def test_single_order_continuous_preferences_one_contest_per_vignette():
    """AlpacaEval 2.0's design: one judged order, a continuous preference in [0, 1] per contest,
    one contest per vignette (the per-order model could not fit it: the order effect rests on its
    prior alone). Truth: a Beta-distributed preference with mean expit(logit) per vignette."""
    rng = np.random.default_rng(11)
    g = 80  # with a 1.0 logit gap: the difference (~0.18) is ~8 SEs from 0, so both intervals exclude it
    u = rng.normal(0, 1.0, g)
    logits_a, logits_b = -1.0 + 1.0 + u, -1.0 + u
    clusters = np.array([f"v{v}" for v in range(g)])

    def preferences(logits):
        mean = _expit(logits)
        return rng.beta(10 * mean, 10 * (1 - mean))

    scores_a, scores_b = preferences(logits_a), preferences(logits_b)
    result = fit_paired_difference_bayes(
        scores_a, clusters, scores_b, clusters, system_a="a", system_b="b", opponent="o", seed=5, trials_per_contest=1
    )
    assert result.converged and result.diagnostics.divergences == 0
    cr2 = _cr2(scores_a, clusters, scores_b, clusters)
    # the same estimand as the clustered test: the posterior interval covers its estimate, and both
    # exclude 0 on this draw. One trial per vignette and system leaves the per-vignette gaps w_v
    # weakly identified, so the posterior is wider than CR2's interval (0.28 vs 0.09 here).
    diff = result.difference_these
    assert diff.lower <= cr2.estimate <= diff.upper
    assert cr2.ci_low > 0 and diff.lower > 0
    truth_these = float(np.mean(_expit(logits_a) - _expit(logits_b)))
    assert result.difference_these.lower <= truth_these <= result.difference_these.upper


def test_systems_on_different_vignettes_are_refused():
    from honestci.audit.errors import InputError

    rng = np.random.default_rng(1)
    a, b = _both_order_scores(rng, [0.1, 0.2], 5), _both_order_scores(rng, [0.1, 0.2, 0.3], 5)
    with pytest.raises(InputError, match="same vignettes"):
        fit_paired_difference_bayes(*a, *b, system_a="a", system_b="b", opponent="o")


def test_an_edited_joint_model_refuses_the_density(monkeypatch):
    import honestci.audit.stats.bayesian.compare as bayes_compare
    from honestci.audit.errors import DensityMismatchError

    original = bayes_compare._model

    def edited_model(labels, data):  # a developer's edit of the joint model
        import pymc as pm

        model = original(labels, data)
        with model:
            pm.Deterministic("edited_term", 2.0 * model["delta"])
        return model

    monkeypatch.setattr(bayes_compare, "_model", edited_model)
    rng = np.random.default_rng(2)
    a, b = _both_order_scores(rng, [0.1, 0.2], 5), _both_order_scores(rng, [0.1, 0.2], 5)
    with pytest.raises(DensityMismatchError, match="joint model of two systems no longer matches"):
        fit_paired_difference_bayes(*a, *b, system_a="a", system_b="b", opponent="o", sampler="nutpie")
