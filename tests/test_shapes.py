"""No study shape without a verdict (issue 34): sparse designs (one or two contests per vignette),
many vignettes with one contest each, one vignette holding most contests, and the heavy-tailed
sizes of a leaderboard-style evaluation, each written in the project's input formats by
:mod:`honestci.fixtures.shapes` at small size and audited end to end by the command line. Each ends
in a verdict (exit 0 or 1, never a traceback or a bad-input exit), and every gate that could not
decide says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from honestci.audit.policy import EXIT_BAD_INPUT, GATE_ORDER, Verdict
from honestci.fixtures.shapes import JUDGES, realistic_sizes, write_shaped_study

SHAPES = {
    "one contest per vignette": np.ones(300, dtype=int),
    "two contests per vignette": np.full(300, 2),
    "many vignettes, one contest each (collapsed sampler)": np.ones(3000, dtype=int),
    "one vignette holds most contests": np.r_[np.full(29, 5), [2000]],
    "heavy-tailed sizes": realistic_sizes(150, 8000, np.random.default_rng(34)),
}


def test_realistic_sizes_are_heavy_tailed_within_range():
    sizes = realistic_sizes(5000, 1_000_000, np.random.default_rng(1))
    assert sizes.min() >= 1 and sizes.max() <= 1000
    assert abs(sizes.sum() - 1_000_000) <= 1000
    assert sizes.max() / np.median(sizes) > 10  # a long right tail
    assert (sizes == 1).sum() > 0 and (sizes == 1000).sum() > 0
    with pytest.raises(ValueError, match="cannot be spread"):
        realistic_sizes(10, 5, np.random.default_rng(1))


def test_a_shaped_study_has_the_features_real_judge_data_have(tmp_path):
    sizes = np.array([1, 3, 40, 200])
    write_shaped_study(tmp_path, sizes, seed=3, one_order_share=0.1)
    judgments = pd.read_parquet(tmp_path / "judgments.parquet")
    assert set(judgments["judge"]) == set(JUDGES)
    claim_judge = judgments[judgments["judge"] == JUDGES[0]]
    contests = claim_judge.assign(
        pair=claim_judge[["response_first", "response_second"]].apply(sorted, axis=1).map(tuple)
    )
    orders = contests.groupby("pair").size()
    assert len(orders) == sizes.sum()
    assert 0.03 < (orders == 1).mean() < 0.2  # some contests judged in one order only
    assert 0.1 < (claim_judge["verdict"] == "tie").mean() < 0.35
    assert claim_judge.groupby("vignette_id")["response_first"].count().max() > 2 * 150  # the sizes are kept
    assert not judgments["vignette_id"].is_monotonic_increasing  # rows in random order


@pytest.mark.e2e
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_ends_in_a_verdict(shape, tmp_path):
    claim = write_shaped_study(tmp_path / "study", SHAPES[shape], seed=20261206)
    out = tmp_path / "audit"
    result = subprocess.run(
        [sys.executable, "-m", "honestci", "audit", str(claim), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1) and result.returncode != EXIT_BAD_INPUT, result.stdout + result.stderr
    verdict = json.loads(Path(out, "verdict.json").read_text())
    assert verdict["verdict"] in {v.name for v in Verdict}
    gates = {gate["gate"]: gate for gate in verdict["gates"]}
    assert tuple(gates) == GATE_ORDER
    assert all(gate["message"].strip() for gate in gates.values())
    bar_gate = gates["ci_low_clears_bar"]
    # the bar gate read a number, or says why it has none
    assert bar_gate["verdict"] in ("PASS", "FAIL") or "no honest" in bar_gate["message"]
