"""Training health: is the GRPO run that produced a checkpoint one whose numbers can be trusted?

Reads the trainer's log (TRL ``log_history``: a ``trainer_state.json``, a JSON list, or JSON Lines
with one logged step per line) and judges four signs of a healthy policy-gradient run, each
against a threshold in :class:`honestci.audit.policy.Thresholds` (first vs last window of ``w`` logged
steps, ``w = ceil(training_window_fraction · n)``):

- reward rising: mean(reward, last window) − mean(reward, first window) > ``training_min_reward_gain``;
- KL bounded: the largest rolling ``w``-step mean of ``kl`` ≤ ``training_max_kl`` (a blow-up
  means the policy left the reference, the usual road to reward hacking);
- entropy alive: last/first window mean ``entropy`` ≥ ``training_min_entropy_ratio`` and the last
  window ≥ ``training_min_entropy`` nats (a collapsed policy says one thing);
- reward spread alive: last/first window mean ``reward_std`` ≥ ``training_min_reward_std_ratio``
  and mean ``frac_reward_zero_std`` ≤ ``training_max_frac_zero_std`` (GRPO's advantage is
  reward minus the group mean: identical rewards in a group carry no signal).

A missing series makes its criterion INCONCLUSIVE; a non-finite value (the run diverged) FAILs it.
The gate ``training_healthy`` (:func:`honestci.audit.gates.gate_training_healthy`) is the worst
criterion. The check runs when the claim names a training log (``training_log: PATH``, relative
to the claim file) and returns None otherwise; :func:`honestci.reports.plots.plot_training_health`
draws the series.

Reference: the health signals TRL logs for GRPO (``reward``, ``reward_std``,
``frac_reward_zero_std``, ``kl``, ``entropy``; TRL documentation, "GRPO Trainer: logged metrics").
Validated against: synthetic healthy and collapsed logs with known answers
(tests/test_training_health.py), and a real TRL GRPOTrainer log (tests/test_training_grpo.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.errors import InputError
from honestci.audit.policy import THRESHOLDS, Thresholds, Verdict, worst

SERIES = ("reward", "reward_std", "kl", "entropy", "frac_reward_zero_std")


@dataclass(frozen=True)
class HealthCriterion:
    """One sign of health: its verdict, the measured value and the threshold it was held to."""

    name: str
    verdict: Verdict
    value: float | None
    threshold: str
    message: str


@dataclass(frozen=True)
class TrainingHealth:
    """The health of one training run, judged from its log."""

    log_path: str
    n_steps: int
    window: int
    steps: tuple[float, ...]
    series: dict  # name -> tuple of floats (NaN where a step did not log it); absent if never logged
    criteria: tuple[HealthCriterion, ...]

    @property
    def verdict(self) -> Verdict:
        return worst(c.verdict for c in self.criteria)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "criterion": c.name,
                    "verdict": str(c.verdict),
                    "value": c.value,
                    "threshold": c.threshold,
                    "message": c.message,
                }
                for c in self.criteria
            ]
        )

    def __str__(self) -> str:
        return (
            f"training health of {self.log_path} ({self.n_steps} steps): {self.verdict}\n"
            + self.to_frame().to_string(index=False)
        )

    def report_section(self) -> ReportSection:
        lines = (
            f"training log {self.log_path}: {self.n_steps} logged steps, windows of {self.window}",
            *(f"{c.name}: {c.verdict} — {c.message}" for c in self.criteria),
        )
        table = tuple(
            {"criterion": c.name, "verdict": str(c.verdict), "value": c.value, "threshold": c.threshold}
            for c in self.criteria
        )
        return ReportSection("training_health", "Training health", lines, table)


def read_training_log(path: str | Path) -> list[dict]:
    """The logged rows of a trainer log: ``trainer_state.json``, a JSON list, or JSON Lines."""
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"Training log {path} does not exist.",
            fix="point training_log at the trainer's trainer_state.json or training_log.jsonl",
        )
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("log_history"), list):
        rows = data["log_history"]
    elif isinstance(data, list):
        rows = data
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"Training log {path}, line {number}: not JSON ({exc.msg}).",
                    fix="give TRL's trainer_state.json or one JSON object per line",
                ) from None
    if not all(isinstance(row, dict) for row in rows):
        raise InputError(f"Training log {path}: every entry must be a JSON object.")
    return rows


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def assess_training_log(path: str | Path, thresholds: Thresholds = THRESHOLDS) -> TrainingHealth:
    """Judge a training run from its log (see the module docstring for every criterion)."""
    rows = [r for r in read_training_log(path) if "reward" in r]
    steps = tuple(_float(r.get("step", i + 1)) for i, r in enumerate(rows))
    series = {name: np.array([_float(r.get(name)) for r in rows]) for name in SERIES if any(name in r for r in rows)}
    n = len(rows)
    window = max(1, math.ceil(thresholds.training_window_fraction * n))
    criteria: tuple[HealthCriterion, ...]
    if n < thresholds.training_min_steps:
        criteria = (
            HealthCriterion(
                "logged steps",
                Verdict.INCONCLUSIVE,
                float(n),
                f">= {thresholds.training_min_steps}",
                f"only {n} logged step(s) with a reward; at least {thresholds.training_min_steps} "
                "are needed to judge a trend (log every step: logging_steps: 1)",
            ),
        )
    else:
        criteria = (
            _reward_trend(series, window, thresholds),
            _kl_bounded(series, window, thresholds),
            _entropy_alive(series, window, thresholds),
            _reward_spread(series, window, thresholds),
        )
    return TrainingHealth(str(path), n, window, steps, {k: tuple(map(float, v)) for k, v in series.items()}, criteria)


def _missing(name: str, what: str) -> HealthCriterion:
    return HealthCriterion(name, Verdict.INCONCLUSIVE, None, "", f"the log has no {what}")


def _diverged(name: str, what: str) -> HealthCriterion:
    return HealthCriterion(name, Verdict.FAIL, None, "", f"{what} has non-finite values: the run diverged")


def _windows(values: np.ndarray, window: int) -> tuple[float, float]:
    return float(values[:window].mean()), float(values[-window:].mean())


def _reward_trend(series, window, t: Thresholds) -> HealthCriterion:
    values = series["reward"]
    if not np.all(np.isfinite(values)):
        return _diverged("reward rising", "reward")
    first, last = _windows(values, window)
    gain = last - first
    verdict = Verdict.PASS if gain > t.training_min_reward_gain else Verdict.FAIL
    word = "rose" if gain > 0 else "did not rise"
    return HealthCriterion(
        "reward rising",
        verdict,
        gain,
        f"> {t.training_min_reward_gain:g}",
        f"reward {word}: {first:.3f} -> {last:.3f} (gain {gain:+.3f})",
    )


def _kl_bounded(series, window, t: Thresholds) -> HealthCriterion:
    if "kl" not in series:
        return _missing("KL bounded", "kl (TRL logs it only with beta > 0: a beta = 0 run has no KL anchor)")
    values = series["kl"]
    if not np.all(np.isfinite(values)):
        return _diverged("KL bounded", "kl")
    rolling = np.convolve(values, np.ones(window) / window, mode="valid")
    peak = float(rolling.max())
    verdict = Verdict.PASS if peak <= t.training_max_kl else Verdict.FAIL
    return HealthCriterion(
        "KL bounded",
        verdict,
        peak,
        f"<= {t.training_max_kl:g}",
        f"peak {window}-step mean KL {peak:.3g} ({'within' if verdict == Verdict.PASS else 'above'} "
        f"{t.training_max_kl:g})",
    )


def _entropy_alive(series, window, t: Thresholds) -> HealthCriterion:
    if "entropy" not in series:
        return _missing("entropy alive", "entropy")
    values = series["entropy"]
    if not np.all(np.isfinite(values)):
        return _diverged("entropy alive", "entropy")
    first, last = _windows(values, window)
    ratio = last / first if first > 0 else math.nan
    alive = last >= t.training_min_entropy and (math.isfinite(ratio) and ratio >= t.training_min_entropy_ratio)
    return HealthCriterion(
        "entropy alive",
        Verdict.PASS if alive else Verdict.FAIL,
        ratio,
        f"ratio >= {t.training_min_entropy_ratio:g} and last >= {t.training_min_entropy:g}",
        f"entropy {first:.3g} -> {last:.3g} nats/token (ratio {ratio:.2f})" + ("" if alive else ": collapsed"),
    )


def _reward_spread(series, window, t: Thresholds) -> HealthCriterion:
    if "reward_std" not in series:
        return _missing("reward spread alive", "reward_std")
    values = series["reward_std"]
    if not np.all(np.isfinite(values)):
        return _diverged("reward spread alive", "reward_std")
    first, last = _windows(values, window)
    ratio = last / first if first > 0 else math.nan
    alive = math.isfinite(ratio) and ratio >= t.training_min_reward_std_ratio
    message = f"within-group reward sd {first:.3g} -> {last:.3g} (ratio {ratio:.2f})"
    if "frac_reward_zero_std" in series and np.all(np.isfinite(series["frac_reward_zero_std"])):
        zero = float(series["frac_reward_zero_std"][-window:].mean())
        message += f"; groups with no spread {zero:.0%}"
        alive = alive and zero <= t.training_max_frac_zero_std
    return HealthCriterion(
        "reward spread alive",
        Verdict.PASS if alive else Verdict.FAIL,
        ratio,
        f"ratio >= {t.training_min_reward_std_ratio:g}, zero-sd groups <= {t.training_max_frac_zero_std:.0%}",
        message + ("" if alive else ": collapsed"),
    )


def training_log_path(context: AuditContext) -> Path | None:
    """The claim's ``training_log`` as :func:`honestci.audit.data.claims.load_claim` resolved it (relative to the
    claim file), or None when the claim names none. Read defensively (getattr), so a context built
    without the key simply has no training log."""
    resolved = getattr(context.claim, "training_log_path", None)
    if resolved is not None:
        return Path(resolved)
    value = getattr(context.claim.spec, "training_log", None)
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else Path(context.claim.path).parent / path


def training_health_check(context: AuditContext) -> TrainingHealth | None:
    """The health of the run behind the claim, from its ``training_log`` (None when it names none)."""
    path = training_log_path(context)
    return None if path is None else assess_training_log(path, context.claim.thresholds)
