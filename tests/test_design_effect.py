"""ICC, design effect and n_effective, pinned to a hand example, R lme4/aov and exact variances.

R values: tests/reference/icc_reference.csv (script cluster_robust_reference.R beside it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.frequentist.design_effect import (
    ClusteringSummary,
    clustering_summary,
    design_effect,
    icc_oneway,
    n_effective,
)

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "tests" / "reference"


def test_icc_hand_example_with_unequal_sizes():
    # Clusters [1, 3], [4, 6, 8], [9, 11]: means 2, 6, 10; grand mean 6; N = 7, G = 3.
    # MSB = (2·16 + 0 + 2·16)/2 = 32; MSW = (2 + 8 + 2)/4 = 3; n0 = (7 - 17/7)/2 = 16/7;
    # ICC = (32 - 3)/(32 + (16/7 - 1)·3) = 203/251.
    y = [1, 3, 4, 6, 8, 9, 11]
    clusters = ["a", "a", "b", "b", "b", "c", "c"]
    assert icc_oneway(y, clusters) == pytest.approx(203 / 251, rel=1e-14)


def test_icc_is_truncated_at_zero():
    # Identical cluster means: MSB = 0 < MSW, the raw estimate is negative.
    assert icc_oneway([0, 10, 0, 10, 0, 10], [1, 1, 2, 2, 3, 3]) == 0.0


@pytest.mark.reference
def test_icc_matches_r():
    reference = pd.read_csv(REFERENCE_DIR / "icc_reference.csv").set_index(["analysis", "method"]).icc
    balanced = pd.read_csv(REFERENCE_DIR / "input_balanced_icc.csv")
    unequal = pd.read_csv(REFERENCE_DIR / "input_unequal_clusters.csv")
    icc_balanced = icc_oneway(balanced.y, balanced.cluster)
    # Balanced data: the ANOVA estimator equals REML; lmer's optimiser agrees to ~1e-8.
    assert icc_balanced == pytest.approx(reference["balanced_icc", "lmer_reml"], rel=1e-6)
    assert icc_balanced == pytest.approx(reference["balanced_icc", "aov_anova"], rel=1e-10)
    assert icc_oneway(unequal.y, unequal.cluster) == pytest.approx(
        reference["unequal_clusters", "aov_anova"], rel=1e-10
    )


def test_icc_recovers_a_known_icc():
    # Normal random-intercept data with ICC = 0.1; SE of the estimate here is about 0.008.
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(400), 30)
    y = rng.normal(0, np.sqrt(0.1), 400)[clusters] + rng.normal(0, np.sqrt(0.9), clusters.size)
    assert icc_oneway(y, clusters) == pytest.approx(0.1, abs=0.03)


def exact_variance_ratio(sizes, icc):
    """Var(grand mean) / (σ²/N) under an exchangeable within-cluster correlation, from Σ itself."""
    n = int(np.sum(sizes))
    covariance = np.zeros((n, n))
    start = 0
    for size in sizes:
        block = slice(start, start + size)
        covariance[block, block] = icc
        start += size
    np.fill_diagonal(covariance, 1.0)
    return covariance.sum() / n


@pytest.mark.parametrize("sizes", [[10, 10, 10, 10], [5, 80, 12, 47, 23, 66], [1, 2, 3, 200]])
@pytest.mark.parametrize("icc", [0.0, 0.05, 0.3])
def test_design_effect_is_the_exact_variance_ratio(sizes, icc):
    assert design_effect(sizes, icc) == pytest.approx(exact_variance_ratio(sizes, icc), rel=1e-12)


def test_design_effect_equal_sizes_closed_form():
    assert design_effect([240] * 6, 0.1) == pytest.approx(1 + 239 * 0.1, rel=1e-14)


def test_summary_and_n_effective():
    reference = pd.read_csv(REFERENCE_DIR / "input_unequal_clusters.csv")
    summary = clustering_summary(reference.y, reference.cluster)
    sizes = np.bincount(reference.cluster)
    assert isinstance(summary, ClusteringSummary)
    assert (summary.n, summary.n_clusters) == (447, 12)
    assert summary.mean_cluster_size == pytest.approx(447 / 12)
    assert summary.icc == pytest.approx(icc_oneway(reference.y, reference.cluster))
    assert summary.design_effect == pytest.approx(1 + (np.sum(sizes**2) / 447 - 1) * summary.icc)
    assert summary.n_effective == pytest.approx(447 / summary.design_effect)
    assert n_effective(720, 7.2) == pytest.approx(100.0)
    assert list(summary.to_frame().columns) == [
        "n",
        "n_clusters",
        "mean_cluster_size",
        "icc",
        "design_effect",
        "n_effective",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.icc = 0.0


def test_errors():
    with pytest.raises(EstimationError):
        icc_oneway([1, 2, 3], [0, 0, 0])
    with pytest.raises(EstimationError):
        icc_oneway([1, 2, 3], [0, 1, 2])
    with pytest.raises(EstimationError):
        icc_oneway([1, 1, 1, 1], [0, 0, 1, 1])
    with pytest.raises(InputError):
        icc_oneway([1, 2, 3], [0, 1])
    with pytest.raises(InputError):
        icc_oneway([1, np.nan, 3, 4], [0, 0, 1, 1])
    with pytest.raises(InputError, match="mixed types"):
        icc_oneway([1, 2, 3, 4], np.array([1, "a", 1, "a"], dtype=object))
    with pytest.raises(InputError):
        design_effect([10, 0], 0.1)
    with pytest.raises(InputError):
        design_effect([10, 10], 1.5)
    with pytest.raises(InputError):
        n_effective(100, 0.0)
