"""Every interval's confidence level is checked by one helper (honestci.audit.errors.check_level):
a level outside (0, 1), or NaN, is bad input naming the level, in every entry point that takes one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from honestci.audit.errors import InputError, check_level, level_problem
from honestci.audit.stats.frequentist.cluster_bootstrap import cluster_bootstrap_ci
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols, linear_contrast
from honestci.audit.stats.frequentist.iid import proportion_ci
from honestci.audit.stats.frequentist.wild_bootstrap import wild_cluster_ci
from honestci.audit.stats.selection.winner import winner_inference

BAD_LEVELS = [0.0, 1.0, -0.5, 1.5, math.nan]
rng = np.random.default_rng(0)
Y = rng.random(24)
CLUSTERS = np.repeat(np.arange(8), 3)
X = np.ones((24, 1))
FIT = cluster_robust_ols(X, Y, CLUSTERS)

ENTRY_POINTS = {
    "proportion_ci": lambda level: proportion_ci(5, 10, level=level),
    "cluster_robust_ols": lambda level: cluster_robust_ols(X, Y, CLUSTERS, level=level),
    "linear_contrast": lambda level: linear_contrast(FIT, [1.0], level=level),
    "cluster_bootstrap_ci": lambda level: cluster_bootstrap_ci(Y, CLUSTERS, B=99, level=level, rng=0),
    "wild_cluster_ci": lambda level: wild_cluster_ci(X, Y, CLUSTERS, level=level, B=99, rng=0),
    "winner_inference": lambda level: winner_inference([0.6, 0.5], np.eye(2) * 1e-3, level=level, seed=0),
}


@pytest.mark.parametrize("level", BAD_LEVELS)
def test_the_helper_names_the_level(level):
    assert level_problem(level) == f"level = {level!r} must lie strictly between 0 and 1"
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        check_level(level)


@pytest.mark.parametrize("level", [1e-9, 0.5, 0.95, 1 - 1e-9])
def test_levels_inside_pass(level):
    assert level_problem(level) is None
    check_level(level)


@pytest.mark.parametrize("level", BAD_LEVELS)
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_refuses_a_bad_level(entry, level):
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        ENTRY_POINTS[entry](level)
