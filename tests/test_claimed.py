"""The claimed-figure audit: which methods reproduce a stated interval, and what is flagged."""

import numpy as np
import pytest
import yaml

from honestci.audit.checks.claimed import (
    IID_FLAG_DEFF,
    audit_claimed_figures,
    audit_claimed_table,
    reproduces,
    stated_decimals,
)
from honestci.audit.gates import gate_claimed_figures_reproduce
from honestci.audit.policy import Verdict
from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_table


@pytest.fixture(scope="module")
def clustered_table():
    rng = np.random.default_rng(4)
    clusters = np.repeat(np.arange(6), 120)
    p = 1 / (1 + np.exp(-(1.6 + rng.normal(0, 0.6, 6))))
    scores = (rng.random((2, clusters.size)) < p[clusters]).mean(axis=0)
    return winrate_table(scores, clusters, methods=ALL_METHODS, seed=1)


def _stated(table, computed_with, **extra):
    """The figures as a card would state them after computing the interval ``computed_with``."""
    row = table.get(computed_with)
    return {
        "point": round(row.estimate, 3),
        "n": row.n,
        "ci_low": round(row.ci_low, 3),
        "method": computed_with,
        "level": 0.95,
        **extra,
    }


def test_stated_rounding():
    assert stated_decimals(0.776) == 3 and stated_decimals(0.8) == 1 and stated_decimals(1.0) == 0
    assert reproduces(0.77649, 0.776) and not reproduces(0.7766, 0.776)


def test_a_labelled_wilson_interval_reproduces_but_warns_that_it_ignores_clustering(clustered_table):
    audit = audit_claimed_figures(_stated(clustered_table, "wilson"), clustered_table)
    assert "wilson" in audit.reproducing_methods and "cr2" not in audit.reproducing_methods
    assert audit.design_effect >= IID_FLAG_DEFF
    gate = gate_claimed_figures_reproduce(audit)
    assert gate.verdict == Verdict.WARN and "reproduces, but the method ignores clustering" in gate.message
    assert "'wilson'" in gate.message and "unlabelled" not in gate.message


@pytest.mark.parametrize("method", ["cr2", "cr2_logit"])
def test_a_labelled_clustered_interval_reproduces_and_passes(clustered_table, method):
    audit = audit_claimed_figures(_stated(clustered_table, method), clustered_table)
    gate = gate_claimed_figures_reproduce(audit)
    assert gate.verdict == Verdict.PASS and method in gate.message


def test_a_labelled_wilson_interval_passes_when_contests_barely_cluster():
    # 60 vignettes with no vignette effect: design effect near 1 (< IID_FLAG_DEFF), Wilson is fine.
    rng = np.random.default_rng(11)
    clusters = np.repeat(np.arange(60), 10)
    scores = (rng.random((2, clusters.size)) < 0.8).mean(axis=0)
    table = winrate_table(scores, clusters, methods=ALL_METHODS, seed=1)
    audit = audit_claimed_figures(_stated(table, "wilson"), table)
    assert audit.design_effect < IID_FLAG_DEFF
    assert gate_claimed_figures_reproduce(audit).verdict == Verdict.PASS


def test_an_iid_interval_stated_as_cr2_fails(clustered_table):
    stated = _stated(clustered_table, "wilson", method="cr2")
    gate = gate_claimed_figures_reproduce(audit_claimed_figures(stated, clustered_table))
    assert gate.verdict == Verdict.FAIL and "stated method 'cr2' does not reproduce" in gate.message


def test_an_unlabelled_iid_interval_on_clustered_data_warns(clustered_table):
    stated = _stated(clustered_table, "wilson", method=None)
    audit = audit_claimed_figures(stated, clustered_table)
    assert audit.design_effect >= 2
    gate = gate_claimed_figures_reproduce(audit)
    assert gate.verdict == Verdict.WARN and "unlabelled iid interval" in gate.message


def test_a_point_that_does_not_reproduce_fails(clustered_table):
    stated = _stated(clustered_table, "wilson", point=0.9)
    assert gate_claimed_figures_reproduce(audit_claimed_figures(stated, clustered_table)).verdict == Verdict.FAIL


def test_no_method_reproduces_an_invented_interval(clustered_table):
    stated = _stated(clustered_table, "wilson", ci_low=0.5)
    gate = gate_claimed_figures_reproduce(audit_claimed_figures(stated, clustered_table))
    assert gate.verdict == Verdict.FAIL and "no interval method reproduces" in gate.message


def test_a_table_mixing_methods_is_flagged(clustered_table):
    headline = audit_claimed_figures(_stated(clustered_table, "wilson"), clustered_table)
    same = audit_claimed_table(
        headline, {"other": audit_claimed_figures(_stated(clustered_table, "wilson"), clustered_table)}
    )
    assert not same.table_flags  # one method: no table flag (each Wilson row still warns on its own)
    mixed = audit_claimed_table(
        headline, {"other": audit_claimed_figures(_stated(clustered_table, "cr2"), clustered_table)}
    )
    gate = gate_claimed_figures_reproduce(mixed)
    assert gate.verdict == Verdict.WARN and "different interval methods" in gate.message


def test_the_fixture_card_table_is_audited_row_by_row(tmp_path):
    from honestci.audit.pipeline import run_audit
    from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

    claim = yaml.safe_load((DEFAULT_STUDY_DIR / "claim.yaml").read_text())
    claim["data"] = {table: str(DEFAULT_STUDY_DIR / name) for table, name in claim["data"].items()}
    # r1-reference vs gpt-4-0314 on the fixture: 0.773, CR2 [0.726, 0.820], Wilson [0.716, 0.821].
    claim["claimed"]["table"] = [{"system": "r1-reference", "point": 0.773, "n": 240, "ci_low": 0.726, "method": "cr2"}]
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim))
    result = run_audit(path, bayes=False, allow_outside_data=True)
    gate = next(g for g in result.gates if g.name == "claimed_figures_reproduce")
    assert gate.verdict == Verdict.WARN and "different interval methods" in gate.message
    assert "cr2" in gate.evidence["table"]["r1-reference"]
