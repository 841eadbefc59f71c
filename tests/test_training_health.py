"""The training-health gate separates a healthy GRPO log from collapsed ones.

Synthetic logs with known answers (seeded): a healthy run (reward rising, KL settling near 0.05,
entropy drifting from 2.0 to 1.6 nats, within-group reward sd steady), and three collapses the
seed project's recipe guards against: a KL blow-up, an entropy collapse and a reward-sd collapse.
"""

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from honestci.audit.checks.context import ReportSection
from honestci.audit.checks.training_health import assess_training_log, read_training_log, training_health_check
from honestci.audit.gate_registry import run_gate
from honestci.audit.gates import gate_training_healthy
from honestci.audit.policy import THRESHOLDS, Verdict
from honestci.reports.plots import plot_training_health

N_STEPS = 200


def synthetic_log(kind: str = "healthy", n: int = N_STEPS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1) / n
    reward = -0.5 + 1.0 * t + rng.normal(0, 0.05, n)
    kl = 0.05 * (1 - np.exp(-5 * t)) + np.abs(rng.normal(0, 0.005, n))
    entropy = 2.0 - 0.4 * t + rng.normal(0, 0.02, n)
    reward_std = 0.5 + rng.normal(0, 0.03, n)
    zero = np.clip(0.05 + rng.normal(0, 0.01, n), 0, 1)
    if kind == "kl_blowup":  # the policy runs away from the reference in the second half
        kl = kl + np.where(t > 0.5, 0.02 * np.exp(12 * (t - 0.5)), 0.0)
    elif kind == "entropy_collapse":
        entropy = 2.0 * np.exp(-8 * t) + 0.005
    elif kind == "reward_std_collapse":  # every completion of a group gets the same reward
        reward_std = 0.5 * np.exp(-8 * t)
        zero = np.clip(t * 1.2, 0, 1)
    elif kind == "reward_falling":
        reward = 0.5 - 1.0 * t + rng.normal(0, 0.05, n)
    return [
        {"step": i + 1, "loss": 0.01, "reward": r, "reward_std": s, "kl": k, "entropy": e, "frac_reward_zero_std": z}
        for i, (r, s, k, e, z) in enumerate(zip(reward, reward_std, kl, entropy, zero))
    ]


def write_jsonl(rows, path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def verdicts(result) -> dict[str, Verdict]:
    return {c.name: c.verdict for c in result.criteria}


def test_healthy_log_passes_every_criterion(tmp_path):
    result = assess_training_log(write_jsonl(synthetic_log(), tmp_path / "log.jsonl"))
    assert result.n_steps == N_STEPS and result.window == 40
    assert set(verdicts(result).values()) == {Verdict.PASS}
    assert gate_training_healthy(result).verdict == Verdict.PASS
    # The reward gain is the last 40 steps' mean minus the first 40 steps' mean (closed form ~0.8).
    rows = synthetic_log()
    rewards = np.array([r["reward"] for r in rows])
    gain = next(c.value for c in result.criteria if c.name == "reward rising")
    assert gain == pytest.approx(rewards[-40:].mean() - rewards[:40].mean(), abs=1e-12)
    assert gain == pytest.approx(0.8, abs=0.05)


@pytest.mark.parametrize(
    "kind, failing",
    [
        ("kl_blowup", "KL bounded"),
        ("entropy_collapse", "entropy alive"),
        ("reward_std_collapse", "reward spread alive"),
        ("reward_falling", "reward rising"),
    ],
)
def test_each_collapse_fails_its_own_criterion_and_only_it(tmp_path, kind, failing):
    result = assess_training_log(write_jsonl(synthetic_log(kind), tmp_path / "log.jsonl"))
    by_name = verdicts(result)
    assert by_name[failing] == Verdict.FAIL
    assert all(v == Verdict.PASS for name, v in by_name.items() if name != failing)
    gate = gate_training_healthy(result)
    assert gate.verdict == Verdict.FAIL and gate.name == "training_healthy"
    assert failing.split()[0].lower() in gate.message.lower() or "collapsed" in gate.message


@pytest.mark.parametrize("seed", range(20))
def test_separation_holds_across_noise_draws(tmp_path, seed):
    """No false alarm on 20 healthy draws and no miss on 20 draws of each collapse."""
    for kind in ("healthy", "kl_blowup", "entropy_collapse", "reward_std_collapse"):
        result = assess_training_log(write_jsonl(synthetic_log(kind, seed=seed), tmp_path / f"{kind}.jsonl"))
        assert (result.verdict == Verdict.PASS) == (kind == "healthy"), kind


def test_trainer_state_json_and_json_list_read_like_jsonl(tmp_path):
    rows = synthetic_log() + [{"train_runtime": 12.0, "step": N_STEPS}]  # the final summary row has no reward
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"global_step": N_STEPS, "log_history": rows}))
    listed = tmp_path / "log.json"
    listed.write_text(json.dumps(rows))
    a, b = assess_training_log(state), assess_training_log(listed)
    assert a.n_steps == b.n_steps == N_STEPS and a.criteria == b.criteria
    assert len(read_training_log(state)) == N_STEPS + 1


def test_too_few_steps_and_missing_kl_are_inconclusive_never_pass(tmp_path):
    short = assess_training_log(write_jsonl(synthetic_log(n=5), tmp_path / "short.jsonl"))
    assert short.verdict == Verdict.INCONCLUSIVE and "5 logged step" in gate_training_healthy(short).message
    no_kl = [{k: v for k, v in row.items() if k != "kl"} for row in synthetic_log()]  # a beta = 0 run logs no KL
    result = assess_training_log(write_jsonl(no_kl, tmp_path / "nokl.jsonl"))
    assert verdicts(result)["KL bounded"] == Verdict.INCONCLUSIVE and result.verdict == Verdict.INCONCLUSIVE


def test_non_finite_values_fail_as_divergence(tmp_path):
    rows = synthetic_log()
    rows[150]["kl"] = float("nan")
    path = tmp_path / "nan.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN, which json reads back
    result = assess_training_log(path)
    assert verdicts(result)["KL bounded"] == Verdict.FAIL and "diverged" in gate_training_healthy(result).message


def test_thresholds_are_read_from_the_claim(tmp_path):
    path = write_jsonl(synthetic_log(), tmp_path / "log.jsonl")
    strict = replace(THRESHOLDS, training_max_kl=0.01)
    assert verdicts(assess_training_log(path, strict))["KL bounded"] == Verdict.FAIL


def test_bad_log_files_are_input_errors(tmp_path):
    from honestci.audit.errors import InputError

    with pytest.raises(InputError, match="does not exist"):
        assess_training_log(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reward": 1}\nnot json\n')
    with pytest.raises(InputError, match="line 2"):
        read_training_log(bad)


def _context(tmp_path, training_log):
    spec = SimpleNamespace(training_log=training_log) if training_log is not None else SimpleNamespace()
    claim = SimpleNamespace(spec=spec, path=tmp_path / "claim.yaml", thresholds=THRESHOLDS)
    return SimpleNamespace(claim=claim, checks={})


def test_check_returns_none_without_training_log_and_gate_is_inconclusive(tmp_path):
    context = _context(tmp_path, None)  # a claim spec without the key at all (getattr)
    assert training_health_check(context) is None
    context.checks["training_health"] = None
    gate = run_gate("training_healthy", context)
    assert gate.verdict == Verdict.INCONCLUSIVE and gate.message.startswith("not run: needs")


def test_check_resolves_the_log_relative_to_the_claim_and_reports(tmp_path):
    (tmp_path / "runs").mkdir()
    write_jsonl(synthetic_log("entropy_collapse"), tmp_path / "runs" / "log.jsonl")
    context = _context(tmp_path, "runs/log.jsonl")
    result = training_health_check(context)
    context.checks["training_health"] = result
    assert run_gate("training_healthy", context).verdict == Verdict.FAIL
    section = result.report_section()
    assert isinstance(section, ReportSection) and section.key == "training_health"
    json.dumps(section.to_dict())  # plain JSON-able values
    assert len(section.table) == 4


def test_plot_has_the_four_panels(tmp_path):
    result = assess_training_log(write_jsonl(synthetic_log("kl_blowup"), tmp_path / "log.jsonl"))
    limits = {"kl": THRESHOLDS.training_max_kl, "entropy": THRESHOLDS.training_min_entropy}
    figure = plot_training_health(result.steps, result.series, result.window, str(result.verdict), limits)
    assert [a.get_title() for a in figure.axes] == [
        "reward (± group sd)",
        "KL to reference",
        "entropy (nats/token)",
        "within-group reward sd",
    ]
    kl_line = figure.axes[1].lines[0].get_ydata()
    assert np.allclose(kl_line, result.series["kl"]) and math.isclose(max(kl_line), max(result.series["kl"]))
    assert any(np.allclose(line.get_ydata(), THRESHOLDS.training_max_kl) for line in figure.axes[1].lines[1:])


def test_check_prefers_the_path_the_claim_loader_resolved(tmp_path):
    log = write_jsonl(synthetic_log(), tmp_path / "elsewhere.jsonl")
    context = _context(tmp_path, "ignored-when-resolved.jsonl")
    context.claim.training_log_path = (
        log  # honestci.audit.data.claims.load_claim resolves training_log like the data paths
    )
    assert training_health_check(context).log_path == str(log)
