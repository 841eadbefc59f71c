"""Property: no edit of a claim within its schema makes the audit pass a claim the policy fails.

Hypothesis mutates the claim (its stated level and method, the gate method it asks for, its
required gates, its thresholds, its bar) and the evidence (judged orders the policy lost
relabelled as invalid) and the auditor's --allow-inconclusive. Whenever the audit exits 0, the
auditor's policy (a policy file written here) must hold on its own terms, recomputed outside the
pipeline: the certified gate interval at the policy's level, with invalid verdicts scored against
the claim, has CI-low >= bar, and every gate the policy requires PASSed (or, under
--allow-inconclusive, ran and was INCONCLUSIVE).
"""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from synthetic_study import JUDGE, claim_dict, study_rows, write_study

from honestci.audit.data.contests import build_contests
from honestci.audit.data.io import load_study
from honestci.audit.data.policy_file import load_policy
from honestci.audit.errors import InputError
from honestci.audit.pipeline import run_audit
from honestci.audit.policy import GATE_ORDER, THRESHOLDS, TIGHTENS, Verdict
from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_ci

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

#: The auditor's policy for a study without human labels: every gate the synthetic study can feed.
AUDITOR_GATES = ["enough_clusters", "ci_low_clears_bar", "valid_verdicts", "comparison_valid",
                 "claimed_figures_reproduce", "position_bias"]  # fmt: skip
#: Four contests per vignette cannot bound the order effect within ±0.10: the auditor allows 0.5.
AUDITOR_POLICY = {
    "version": 1,
    "name": "auditor",
    "required_gates": AUDITOR_GATES,
    "thresholds": {"position_bias_tolerance": 0.5},
}


def _threshold_value(name: str):
    """Values around the default, either side of it: the lax ones must be refused."""
    default = getattr(THRESHOLDS, name)
    if isinstance(default, int):
        return st.integers(max(2 if name == "min_clusters" else 0, default - 3), default + 3)
    if default == 0:
        return st.floats(-0.1, 0.1)
    high = min(0.999, default * 1.5) if name.endswith("level") else default * 1.5
    return st.floats(default * 0.5, high)


claims = st.fixed_dictionaries(
    {
        "bar": st.floats(0.2, 0.7),
        "method": st.one_of(st.none(), st.sampled_from([*ALL_METHODS, "cr3"])),
        "required_gates": st.one_of(st.none(), st.lists(st.sampled_from(GATE_ORDER), unique=True, max_size=5)),
        "thresholds": st.dictionaries(st.sampled_from(sorted(TIGHTENS)), st.just(None), max_size=2).flatmap(
            lambda d: st.fixed_dictionaries({k: _threshold_value(k) for k in d})
        ),
        "claimed_level": st.one_of(st.none(), st.floats(0.5, 0.99)),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=claims, relabel=st.integers(0, 6), allow_inconclusive=st.booleans(), seed=st.integers(0, 3))
def test_an_audit_that_exits_0_satisfies_the_auditors_policy(
    tmp_path_factory, change, relabel, allow_inconclusive, seed
):
    folder = tmp_path_factory.mktemp("study")
    rows = study_rows(seed=seed)
    lost = [
        j for j in rows["judgments"] if (j["verdict"] == "first") != j["response_first"].split("-")[1].startswith("p")
    ]
    for judgment in lost[:relabel]:
        judgment["verdict"] = "invalid"  # orders the policy lost, relabelled: a gain only if dropped
    claim = claim_dict(bar=change["bar"], thresholds=change["thresholds"])
    for key in ("method", "required_gates"):
        if change[key] is not None:
            claim[key] = change[key]
    if change["claimed_level"] is not None:
        claim["claimed"] = {"point": 0.5, "level": change["claimed_level"]}
    claim_path = write_study(folder, rows, claim)
    policy_path = folder / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(AUDITOR_POLICY))
    policy = load_policy(policy_path)

    try:
        result = run_audit(claim_path, policy=policy, bayes=False, allow_inconclusive=allow_inconclusive)
    except InputError:
        event("exit 2")
        return  # refused, nothing passed
    event(f"exit {result.exit_code()}")
    if result.exit_code() != 0:
        return

    study = load_study({t: folder / f"{t}.jsonl" for t in ("vignettes", "responses", "judgments")})
    scored = build_contests(study, claim["policy"], claim["opponent"], judge=JUDGE).scores(invalid="against_claim")
    gate_row = winrate_ci(scored.values, scored.clusters, method=policy.gate_method("new_vignettes"),
                          level=policy.thresholds.confidence_level)  # fmt: skip
    assert gate_row.bounds is not None and gate_row.bounds[0] >= change["bar"]
    verdicts = {g.name: g for g in result.gates}
    for name in policy.required_gates:
        gate = verdicts[name]
        assert gate.verdict == Verdict.PASS or (
            allow_inconclusive and gate.verdict == Verdict.INCONCLUSIVE and gate.ran
        )


def test_the_property_can_see_a_pass(tmp_path):
    """The property is not vacuous: the unmutated claim passes the auditor's policy at a low bar."""
    claim_path = write_study(tmp_path, study_rows(), claim_dict(bar=0.3))
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(AUDITOR_POLICY))
    result = run_audit(claim_path, policy=load_policy(tmp_path / "policy.yaml"), bayes=False)
    assert result.exit_code() == 0, [
        (g.name, str(g.verdict), g.message) for g in result.gates if g.name in result.required_gates
    ]
