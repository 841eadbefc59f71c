"""Training progress for people and logs: a TRL/transformers callback on the progress meter.

At every logging step of the trainer (``logging_steps``) it writes ``step k/N`` with rate, ETA and
the health signals the trainer just logged (loss; for GRPO the mean reward, its spread and the KL
to the reference policy), through :mod:`honestci.audit.progress`: a live bar on a terminal, one
line per logging step in a log. Only the main process reports (one line, not one per GPU).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from honestci.audit.progress import Meter, ProgressLike, as_progress

#: Logged keys shown, in this order, under their short names (TRL's GRPO and reward trainers).
SHOWN_KEYS = (
    ("loss", "loss"),
    ("reward", "reward"),
    ("reward_std", "reward_sd"),
    ("kl", "kl"),
    ("accuracy", "accuracy"),
    ("learning_rate", "lr"),
)


class TrainingProgress(TrainerCallback):
    """Meters the optimiser steps of one ``trainer.train()`` under ``label``."""

    def __init__(self, progress: ProgressLike, label: str) -> None:
        self._progress = as_progress(progress)
        self._label = label
        self._meter: Meter | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._meter = self._progress.meter(state.max_steps, self._label, "steps", done=state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if self._meter is None or not logs:
            return
        fields = {short: float(logs[key]) for key, short in SHOWN_KEYS if isinstance(logs.get(key), (int, float))}
        if fields:  # a training log row (the final summary row carries train_loss instead)
            self._meter.update(state.global_step, force=True, **fields)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._meter is not None:
            self._meter.update(state.global_step)
            self._meter.close()
            self._meter = None
