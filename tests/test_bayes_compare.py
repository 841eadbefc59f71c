import numpy as np
import pandas as pd
import pytest

from honestci.audit.stats.bayes_compare import fit_paired_difference_bayes
from honestci.audit.stats.compare import paired_difference


def _per_order(rng, logits, n_per_vignette):
    """Per-order outcomes (no ties) of one system with the given per-vignette logits."""
    rows = []
    for v, logit in enumerate(logits):
        for first in (True, False):
            wins = rng.random(n_per_vignette) < 1 / (1 + np.exp(-logit))
            rows += [{"vignette_id": f"v{v}", "policy_first": first, "value": float(x)} for x in wins]
    return pd.DataFrame(rows)


def test_recovers_a_known_difference_and_agrees_with_the_clustered_test():
    rng = np.random.default_rng(7)
    u = rng.normal(0, 0.5, 8)
    logits_b = 0.6 + u
    logits_a = 0.6 + 0.8 + u  # A is better on every vignette by 0.8 on the logit scale
    frame_a, frame_b = _per_order(rng, logits_a, 60), _per_order(rng, logits_b, 60)
    result = fit_paired_difference_bayes(
        frame_a, frame_b, system_a="a", system_b="b", opponent="o", chains=4, draws=1000, tune=1000, seed=3
    )
    assert result.converged and result.diagnostics.divergences == 0
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    truth_these = float(np.mean(expit(logits_a) - expit(logits_b)))
    assert result.difference_these.lower <= truth_these <= result.difference_these.upper
    assert result.p_a_beats_b_these > 0.99 and result.p_a_beats_b_new > 0.9
    # Same data as contest-free per-order rows: the CR2 clustered difference points the same way
    # and the two intervals overlap substantially.
    cr2 = paired_difference(
        frame_a["value"],
        frame_a["vignette_id"],
        frame_b["value"],
        frame_b["vignette_id"],
        system_a="a",
        system_b="b",
        opponent="o",
    )
    assert cr2.ci_low > 0
    assert abs(result.difference_these.mean - cr2.estimate) < 0.02


def test_systems_on_different_vignettes_are_refused():
    from honestci.audit.errors import InputError

    rng = np.random.default_rng(1)
    frame_a, frame_b = _per_order(rng, [0.1, 0.2], 5), _per_order(rng, [0.1, 0.2, 0.3], 5)
    with pytest.raises(InputError, match="same vignettes"):
        fit_paired_difference_bayes(frame_a, frame_b, system_a="a", system_b="b", opponent="o")


def test_an_edited_joint_model_refuses_the_density(monkeypatch):
    import honestci.audit.stats.bayes_compare as bayes_compare
    from honestci.audit.stats.bayes import DensityMismatchError

    original = bayes_compare._model

    def edited_model(labels, data):  # a developer's edit of the joint model
        import pymc as pm

        model = original(labels, data)
        with model:
            pm.Deterministic("edited_term", 2.0 * model["delta"])
        return model

    monkeypatch.setattr(bayes_compare, "_model", edited_model)
    rng = np.random.default_rng(2)
    frame_a, frame_b = _per_order(rng, [0.1, 0.2], 5), _per_order(rng, [0.1, 0.2], 5)
    with pytest.raises(DensityMismatchError, match="joint model of two systems no longer matches"):
        fit_paired_difference_bayes(frame_a, frame_b, system_a="a", system_b="b", opponent="o", sampler="nutpie")
