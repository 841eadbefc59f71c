"""GRPO on the reappraisal task with TRL's ``GRPOTrainer``, rewarded by the gated ensemble.

The reward of a completion is the reward-model ensemble's R = mean − λ·sd (standardised member
scores; :mod:`honestci.training.reward_models`) of its answer — the text after ``</think>`` — when the
answer passes the format gate (non-empty, at most two sentences; :func:`honestci.training.task.format_gate`),
and the constant ``format_penalty`` (in the members' standard-deviation units, default −3) when it
does not, so length cannot buy reward. GRPO standardises rewards within each prompt's group of
``num_generations`` completions (Shao et al. 2024, DeepSeekMath), with a KL penalty β toward the
reference policy.

Defaults are the seed project's recipe (lr 8e-6, β 0.04, 12 generations, 500 steps, bf16);
``training/configs/grpo_cpu_tiny.yaml`` holds the CPU overrides the tests use. Rollouts can come
from a vLLM server (TRL's ``use_vllm=True, vllm_mode="server"``; start it with ``trl vllm-serve``
in the GPU environment); this module never imports vLLM itself.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from honestci.audit.errors import InputError, require_extra
from honestci.training.config import TRAIN_MODULES, TrainingConfigError, require, to_plain
from honestci.training.task import extract_answer, format_gate, messages_for

TRAINING_LOG = "training_log.jsonl"
REWARD_LOG = "rewards.jsonl"


@dataclass(frozen=True)
class GRPOJob:
    """Settings of ``honestci train grpo`` (YAML keys of the same names; see training/configs/)."""

    model: Path
    reward_model: Path
    vignettes: Path
    output_dir: Path
    learning_rate: float = 8e-6
    beta: float = 0.04
    num_generations: int = 12
    max_steps: int = 500
    bf16: bool | None = None
    per_device_train_batch_size: int = 12
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 1024
    temperature: float = 1.0
    seed: int = 0
    ensemble_lambda: float | None = None
    max_sentences: int = 2
    format_penalty: float = -3.0
    device: str = "auto"
    use_vllm: bool = False
    vllm_mode: str = "server"
    vllm_server_base_url: str | None = None
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    logging_steps: int = 1
    save_steps: int = 100
    trainer: dict = field(default_factory=dict)

    def __post_init__(self):
        require(
            self.beta > 0,
            "beta",
            f"is {self.beta}; it must be > 0",
            "keep the KL penalty on (the recipe uses 0.04): with beta = 0 the policy drifts freely from "
            "the reference, collapses and learns to hack the reward model",
        )
        require(self.learning_rate > 0, "learning_rate", f"is {self.learning_rate}; it must be > 0")
        require(
            self.num_generations >= 2,
            "num_generations",
            f"is {self.num_generations}; it must be >= 2",
            "GRPO's advantage is relative to the group: one completion per prompt gives no signal",
        )
        require(self.max_steps >= 1, "max_steps", f"is {self.max_steps}; it must be >= 1")
        require(self.max_completion_length >= 1, "max_completion_length", "must be >= 1")
        require(
            self.temperature > 0,
            "temperature",
            f"is {self.temperature}; it must be > 0",
            "greedy rollouts make every completion in a group identical (zero reward spread)",
        )
        require(self.max_sentences >= 1, "max_sentences", "must be >= 1")
        require(self.ensemble_lambda is None or self.ensemble_lambda >= 0, "ensemble_lambda", "must be >= 0")
        generation_batch = self.per_device_train_batch_size * self.gradient_accumulation_steps
        require(
            generation_batch % self.num_generations == 0,
            "per_device_train_batch_size",
            f"x gradient_accumulation_steps = {generation_batch} is not a multiple of num_generations "
            f"({self.num_generations})",
            "every prompt needs its whole group of completions in one generation batch",
        )
        require(self.device in ("auto", "cpu", "cuda"), "device", f"is {self.device!r}; use auto, cpu or cuda")
        require(
            self.vllm_mode == "server",
            "vllm_mode",
            f"is {self.vllm_mode!r}; only 'server' is supported",
            "vLLM pins its own CUDA torch, so it runs as a separate server (trl vllm-serve), never in-process",
        )
        if not isinstance(self.trainer, dict):
            raise TrainingConfigError("Invalid training config: trainer must be a mapping of GRPOConfig keys.")


@dataclass(frozen=True)
class RewardBatch:
    """What the reward function saw and gave for one batch of completions."""

    answers: tuple[str, ...]
    gate_reasons: tuple[str, ...]
    ensemble_reward: tuple[float | None, ...]  # None where the gate failed (the ensemble was not asked)
    rewards: tuple[float, ...]


class GatedEnsembleReward:
    """TRL reward function: ensemble reward for gated answers, ``penalty`` for the rest.

    Called by ``GRPOTrainer`` with ``prompts``, ``completions`` (conversational: a list with one
    assistant message each) and the dataset's extra columns (``scenario``). ``history`` keeps every
    :class:`RewardBatch` (and, with ``log_path``, each batch's summary is appended as JSON Lines).
    """

    __name__ = "gated_ensemble"

    def __init__(self, ensemble, *, max_sentences: int = 2, penalty: float = -3.0, log_path: Path | None = None):
        self.ensemble = ensemble
        self.max_sentences = max_sentences
        self.penalty = float(penalty)
        self.log_path = log_path
        self.history: list[RewardBatch] = []

    @staticmethod
    def _text(completion) -> str:
        if isinstance(completion, str):
            return completion
        return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")

    def __call__(self, prompts, completions, scenario=None, **_) -> list[float | None]:
        """One reward per completion (TRL's reward-function type allows None; this one always gives a float)."""
        if scenario is None:
            raise InputError(
                "The GRPO dataset has no 'scenario' column for the reward model.",
                fix="build the dataset with honestci.training.grpo.prompt_dataset",
            )
        answers = [extract_answer(self._text(c)) for c in completions]
        gates = [format_gate(a, self.max_sentences) for a in answers]
        passing = [i for i, g in enumerate(gates) if g.passed]
        ensemble: list[float | None] = [None] * len(answers)
        if passing:
            scores = self.ensemble.score([scenario[i] for i in passing], [answers[i] for i in passing]).reward
            for i, value in zip(passing, scores):
                ensemble[i] = float(value)
        rewards = [e if e is not None else self.penalty for e in ensemble]
        batch = RewardBatch(tuple(answers), tuple(g.reason for g in gates), tuple(ensemble), tuple(rewards))
        self.history.append(batch)
        if self.log_path is not None:
            counts = {reason: batch.gate_reasons.count(reason) for reason in ("ok", "empty", "too_long")}
            gated = [e for e in ensemble if e is not None]
            with open(self.log_path, "a", encoding="utf-8") as out:
                out.write(
                    json.dumps(
                        {
                            "batch": len(self.history),
                            "n": len(answers),
                            **counts,
                            "ensemble_mean": float(np.mean(gated)) if gated else None,
                            "reward_mean": float(np.mean(rewards)),
                        }
                    )
                    + "\n"
                )
        return list[float | None](rewards)


def prompt_dataset(vignettes_path: Path):
    """A ``datasets.Dataset`` of conversational prompts (system + user) with a ``scenario`` column."""
    from datasets import Dataset

    from honestci.audit.data.io import load_table

    frame = load_table(vignettes_path, "vignettes").frame
    return Dataset.from_list(
        [
            {"prompt": messages_for(text), "scenario": text, "vignette_id": vid}
            for vid, text in zip(frame["vignette_id"], frame["text"])
        ]
    )


def grpo_config(job: GRPOJob, device: str):
    """TRL ``GRPOConfig`` from the job, with the CPU overrides applied when ``device`` is cpu."""
    from trl import GRPOConfig

    bf16 = (device == "cuda") if job.bf16 is None else job.bf16
    if device == "cpu":
        require(not bf16, "bf16", "is true on CPU", "set bf16: false (or run on a GPU)")
        require(not job.use_vllm, "use_vllm", "is true on CPU", "vLLM rollouts need the GPU environment")
    unknown = sorted(set(job.trainer) - set(GRPOConfig.__dataclass_fields__))
    if unknown:
        raise TrainingConfigError(
            f"Invalid training config: unknown trainer key(s) {unknown} for GRPOConfig.",
            fix="see the fields of trl.GRPOConfig",
        )
    args = dict(
        output_dir=str(job.output_dir),
        learning_rate=job.learning_rate,
        beta=job.beta,
        num_generations=job.num_generations,
        max_steps=job.max_steps,
        bf16=bf16,
        per_device_train_batch_size=job.per_device_train_batch_size,
        gradient_accumulation_steps=job.gradient_accumulation_steps,
        max_completion_length=job.max_completion_length,
        temperature=job.temperature,
        seed=job.seed,
        logging_steps=job.logging_steps,
        save_steps=job.save_steps,
        report_to=[],
        use_cpu=device == "cpu",
        disable_tqdm=True,
        log_completions=False,
    )
    if device == "cpu":
        args["activation_checkpointing"] = False  # TRL's default is on; on CPU it only costs time
    if job.use_vllm:
        args.update(
            use_vllm=True,
            vllm_mode="server",
            vllm_server_host=job.vllm_server_host,
            vllm_server_port=job.vllm_server_port,
        )
        if job.vllm_server_base_url:
            args["vllm_server_base_url"] = job.vllm_server_base_url
    return GRPOConfig(**{**args, **job.trainer})


@dataclass(frozen=True)
class GRPORun:
    """The result of ``honestci train grpo``: where the policy and its logs are, and the timings."""

    output_dir: str
    steps: int
    seconds: float
    seconds_per_step: float
    training_log: str
    n_completions_scored: int
    n_gated_out: int
    log_history: tuple[dict, ...]

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in self.__dict__.items() if k != "log_history"}])

    def __str__(self) -> str:
        return (
            f"GRPO policy in {self.output_dir}: {self.steps} steps in {self.seconds:.1f} s "
            f"({self.seconds_per_step:.2f} s/step); {self.n_completions_scored} completions scored, "
            f"{self.n_gated_out} failed the format gate; log {self.training_log}"
        )


def train_grpo(
    job: GRPOJob,
    progress: Callable[[str], None] = lambda _: None,
    *,
    reward_function: GatedEnsembleReward | None = None,
) -> GRPORun:
    """Run GRPO as configured; save the policy (safetensors), ``trainer_state.json`` and the
    trainer's log history as JSON Lines (``training_log.jsonl``, read by :mod:`honestci.audit.checks.training_health`)."""
    require_extra("train", *TRAIN_MODULES, needed_by="GRPO training")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from honestci.training.progress import TrainingProgress
    from honestci.training.reward_models import RewardEnsemble, resolve_device

    device = resolve_device(job.device)
    for label, path in (("model", job.model), ("reward_model", job.reward_model)):
        if not Path(path).is_dir():
            raise InputError(f"{label} {path} is not a folder.", fix=f"point {label} at a local folder")
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / REWARD_LOG).unlink(missing_ok=True)
    args = grpo_config(job, device)
    progress("loading the reward-model ensemble")
    if reward_function is None:
        # Under accelerate each process scores on its own GPU.
        reward_device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if device == "cuda" else device
        ensemble = RewardEnsemble(job.reward_model, device=reward_device, ensemble_lambda=job.ensemble_lambda)
        main_process = os.environ.get("RANK", "0") == "0"  # one reward log, not one per accelerate process
        reward_function = GatedEnsembleReward(
            ensemble,
            max_sentences=job.max_sentences,
            penalty=job.format_penalty,
            log_path=out / REWARD_LOG if main_process else None,
        )
    tokenizer = AutoTokenizer.from_pretrained(job.model, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(job.model, local_files_only=True)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_function],
        args=args,
        train_dataset=prompt_dataset(job.vignettes),
        processing_class=tokenizer,
    )
    progress(f"GRPO: {job.max_steps} steps on {device}")
    trainer.add_callback(TrainingProgress(progress, "GRPO"))
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    trainer.save_model(str(out))  # safetensors; every process must call it under DeepSpeed
    log_path = out / TRAINING_LOG
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(out)
        trainer.state.save_to_json(str(out / "trainer_state.json"))
        with open(log_path, "w", encoding="utf-8") as handle:
            for row in trainer.state.log_history:
                handle.write(json.dumps(row) + "\n")
        (out / "grpo_job.json").write_text(json.dumps(to_plain(job), indent=1), encoding="utf-8")
    steps = int(trainer.state.global_step)
    scored = sum(len(b.answers) for b in reward_function.history)
    gated_out = sum(r != "ok" for b in reward_function.history for r in b.gate_reasons)
    return GRPORun(
        str(out),
        steps,
        seconds,
        seconds / max(steps, 1),
        str(log_path),
        scored,
        gated_out,
        tuple(trainer.state.log_history),
    )
