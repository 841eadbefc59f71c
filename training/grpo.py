"""GRPO on the reappraisal task with TRL's ``GRPOTrainer``, rewarded by the gated ensemble.

The reward of a completion is the reward-model ensemble's R = mean − λ·sd (standardised member
scores; :mod:`honestci.training.reward_models`) of its answer — the text after ``</think>`` — when the
answer passes the format gate (non-empty, at most two sentences; :func:`honestci.training.task.format_gate`),
and the constant ``format_penalty`` (in the members' standard-deviation units, default −3) when it
does not, so length cannot buy reward. A thinking model's trace cut at ``max_completion_length``
before ``</think>`` has no answer and fails the gate (reason ``unfinished_think``, counted in the
reward log and the run's summary): the text of an unfinished trace is never scored. GRPO standardises rewards within each prompt's group of
``num_generations`` completions (Shao et al. 2024, DeepSeekMath), with a KL penalty β toward the
reference policy. The policy's chat is the job's ``prompt`` (:mod:`honestci.training.task`), which
must be the one the reward model was trained under (:func:`check_reward_prompt`); its record is
written to ``prompt.json`` beside the policy.

Defaults are the seed project's recipe (lr 8e-6, β 0.04, 12 generations, 500 steps, bf16);
``training/configs/grpo_cpu_tiny.yaml`` holds the CPU overrides the tests use. Rollouts can come
from vLLM (TRL's ``use_vllm=True``): ``vllm_mode: colocate`` runs vLLM inside the trainer on the same
GPU (one-GPU machines), ``server`` asks a separate ``trl vllm-serve`` on its own GPU (two or more);
``auto`` picks by the GPU count (:func:`vllm_mode_for`). This module never imports vLLM itself
(TRL does, in the GPU environment: requirements-gpu.txt).
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
from honestci.audit.policy import MIN_KL_BETA
from honestci.training.config import (
    TRAIN_MODULES,
    TRAINER_KEY_GROUPS,
    TrainingConfigError,
    check_trainer_block,
    refuse,
    require,
    to_plain,
    trainer_allowlist,
)
from honestci.training.task import (
    DEFAULT_PROMPT,
    GATE_REASONS,
    THINK_CLOSE,
    THINK_OPEN,
    Prompt,
    check_completion,
    messages_for,
    prompt_from_record,
    resolve_prompt,
)

TRAINING_LOG = "training_log.jsonl"
REWARD_LOG = "rewards.jsonl"
#: The policy's prompt record (name, sha256, system, user_template) in the output folder.
PROMPT_FILE = "prompt.json"


_SAMPLING = "sampling is the job's (max_completion_length, temperature): {} would reshape the rollouts' spread"
_KL_REFERENCE = "moves the KL reference toward the policy, which undoes beta > 0"
_REWARD = "changes the reward definition (the gated ensemble is the only reward, standardised within each group)"
_GENERATION_BATCH = (
    "the generation batch is per_device_train_batch_size x gradient_accumulation_steps, checked against num_generations"
)
_OBJECTIVE = "the policy-gradient objective is the recipe's; {} changes what one step optimises"

#: GRPOConfig keys the job sets itself or that would undo a job-level check, refused in ``trainer:``
#: with these reasons (the job's own fields are refused there too, and every key not on
#: :data:`GRPO_TRAINER_KEYS`: :func:`honestci.training.config.check_trainer_block`).
GRPO_OWNED_TRAINER_KEYS = {
    "fp16": "precision is the job's bf16 key (checked against the device)",
    "use_cpu": "the device is the job's device key",
    "report_to": "set by honestci (no experiment trackers)",
    "disable_tqdm": "set by honestci (progress goes through its own reporter)",
    "log_completions": "set by honestci",
    "logging_strategy": "the training_healthy gate reads a log line every logging_steps steps",
    "data_seed": "the job's seed orders the data too: a fixed data_seed would hold the order still across "
    "the seeds of a seed-robustness study",
    "sync_ref_model": _KL_REFERENCE,
    "ref_model_mixup_alpha": _KL_REFERENCE,
    "ref_model_sync_steps": _KL_REFERENCE,
    "reward_weights": _REWARD,
    "multi_objective_aggregation": _REWARD,
    "scale_rewards": _REWARD,
    "generation_kwargs": _SAMPLING.format("generation kwargs (max_new_tokens, do_sample, temperature)"),
    "top_k": _SAMPLING.format("top_k"),
    "top_p": _SAMPLING.format("top_p"),
    "min_p": _SAMPLING.format("min_p"),
    "repetition_penalty": _SAMPLING.format("repetition_penalty"),
    "chat_template_kwargs": "the chat is the job's prompt key, checked against the reward model's",
    "generation_batch_size": _GENERATION_BATCH,
    "steps_per_generation": _GENERATION_BATCH,
    "mask_truncated_completions": "a completion cut at max_completion_length earns format_penalty; masking "
    "it out of the loss would take that penalty away",
    "epsilon": "the clipping range is the recipe's; a wide one undoes the trust region beta keeps",
    "epsilon_high": "the clipping range is the recipe's; a wide one undoes the trust region beta keeps",
    "loss_type": _OBJECTIVE.format("another loss"),
    "num_iterations": _OBJECTIVE.format("reusing each generation for several steps"),
}


#: TRL's vLLM modes, and ``auto`` (:func:`vllm_mode_for`).
VLLM_MODES = ("auto", "colocate", "server")


def vllm_mode_for(mode: str, gpus: int) -> str:
    """The vLLM mode a job runs with on ``gpus`` GPUs: ``auto`` is colocate on one GPU, server on more
    (one GPU serves, the rest train); an explicit mode is kept."""
    if mode != "auto":
        return mode
    return "colocate" if gpus == 1 else "server"


def check_vllm_mode(mode: str, gpus: int, *, server_elsewhere: bool = False) -> str:
    """The resolved mode (:func:`vllm_mode_for`), refusing a vLLM server on a one-GPU plan unless the
    job says the server runs elsewhere: a server on the trainer's GPU makes NCCL's weight sync fail
    ("Duplicate GPU detected")."""
    resolved = vllm_mode_for(mode, gpus)
    require(
        not (resolved == "server" and gpus == 1 and not server_elsewhere),
        "vllm_mode",
        "is 'server' on a one-GPU plan (gpus: 1): the server would share the trainer's GPU, which NCCL's "
        "weight sync refuses (Duplicate GPU detected)",
        "use vllm_mode: colocate (or auto) on one GPU, or set vllm_server_elsewhere: true when the server "
        "runs on another GPU or machine",
    )
    return resolved


@dataclass(frozen=True)
class GRPOJob:
    """Settings of ``honestci train grpo`` (YAML keys of the same names; see training/configs/)."""

    model: Path = field(
        metadata={"help": "Local folder of the policy's base model (safetensors; nothing is downloaded)."}
    )
    reward_model: Path = field(metadata={"help": "Folder of the reward-model ensemble written by honestci train rm."})
    vignettes: Path = field(metadata={"help": "Vignettes table whose scenarios are the GRPO prompts."})
    output_dir: Path = field(metadata={"help": "Where the policy, trainer_state.json and the logs are written."})
    learning_rate: float = field(default=8e-6, metadata={"help": "Optimizer learning rate (> 0; the recipe's 8e-6)."})
    beta: float = field(
        default=0.04,
        metadata={"help": "KL penalty toward the reference policy; must be >= MIN_KL_BETA, 0.01 (the recipe's 0.04)."},
    )
    num_generations: int = field(
        default=12, metadata={"help": "G, completions per prompt (>= 2: the advantage is relative to the group)."}
    )
    max_steps: int = field(default=500, metadata={"help": "Optimizer steps (>= 1)."})
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 weights and compute; null = on for cuda, off for cpu (refused on cpu)."}
    )
    per_device_train_batch_size: int = field(
        default=12, metadata={"help": "Completions per device per step; x accumulation % G must be 0."}
    )
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Gradient accumulation steps."})
    max_completion_length: int = field(
        default=1024,
        metadata={"help": "Most tokens per completion, think trace included (a trace cut here has no answer)."},
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the rollouts (> 0)."})
    seed: int = field(default=0, metadata={"help": "Trainer seed (weights init, data order, sampling)."})
    ensemble_lambda: float | None = field(
        default=None, metadata={"help": "λ in R = mean − λ·sd; null = the ensemble's own (>= 0)."}
    )
    max_sentences: int = field(
        default=2, metadata={"help": "Format gate: answers longer than this many sentences get format_penalty."}
    )
    format_penalty: float = field(
        default=-3.0,
        metadata={"help": "Reward of an answer that fails the format gate, in the members' sd units (< 0)."},
    )
    thinking: bool = field(
        default=False,
        metadata={
            "help": "The policy writes a <think> trace before its answer: a completion without </think> (a trace cut "
            "at max_completion_length) has no answer and fails the format gate. Forced on when the chat "
            "template opens <think> itself."
        },
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda."})
    use_vllm: bool = field(
        default=False, metadata={"help": "Rollouts from vLLM (TRL's use_vllm) instead of transformers' generate."}
    )
    vllm_mode: str = field(
        default="auto",
        metadata={
            "help": "TRL's vLLM mode: 'colocate' (vLLM inside the trainer, sharing its GPU), 'server' (a separate "
            "trl vllm-serve on its own GPU), or 'auto' (colocate on one GPU, server on two or more)."
        },
    )
    gpus: int | None = field(
        default=None,
        metadata={"help": "GPUs on the machine (training plus a vLLM server's); null = counted at run time."},
    )
    vllm_gpu_memory_utilization: float = field(
        default=0.3,
        metadata={"help": "Share of each GPU's memory vLLM reserves in colocate mode (weights + KV cache), in (0, 1)."},
    )
    vllm_server_elsewhere: bool = field(
        default=False,
        metadata={
            "help": "Server mode on a one-GPU plan: the server runs on another GPU or machine (never the "
            "trainer's GPU: NCCL refuses a duplicate GPU)."
        },
    )
    vllm_server_base_url: str | None = field(
        default=None, metadata={"help": "URL of the vLLM server (overrides host and port)."}
    )
    vllm_server_host: str = field(default="127.0.0.1", metadata={"help": "Host of the vLLM server."})
    vllm_server_port: int = field(default=8000, metadata={"help": "Port of the vLLM server."})
    logging_steps: int = field(
        default=1, metadata={"help": "Log every this many steps (the health gate reads the log)."}
    )
    save_steps: int = field(default=100, metadata={"help": "Checkpoint every this many steps."})
    prompt: str | dict = field(
        default="honestci",
        metadata={
            "help": "The policy's chat: a preset (honestci, card) or {system, user_template} with one {scenario}; "
            "must be the reward model's (its ensemble.json), else refused."
        },
    )
    trainer: dict = field(
        default_factory=dict,
        metadata={
            "help": "Further trl.GRPOConfig keys from an allowlist (optimiser, schedule, checkpoints, memory and "
            "speed: GRPO_TRAINER_KEYS); every other key is refused by name."
        },
    )

    def __post_init__(self):
        require(
            self.beta >= MIN_KL_BETA,
            "beta",
            f"is {self.beta}; it must be >= {MIN_KL_BETA} (audit/policy.py MIN_KL_BETA)",
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
        require(
            self.format_penalty < 0,
            "format_penalty",
            f"is {self.format_penalty}; it must be < 0",
            "an answer that fails the format gate must earn less than an average answer (the members' "
            "standardised mean is 0), or length and empty answers buy reward",
        )
        require(self.per_device_train_batch_size >= 1, "per_device_train_batch_size", "must be >= 1")
        require(self.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", "must be >= 1")
        require(self.logging_steps >= 1 and self.save_steps >= 1, "logging_steps/save_steps", "must be >= 1")
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
            self.vllm_mode in VLLM_MODES,
            "vllm_mode",
            f"is {self.vllm_mode!r}; use one of {list(VLLM_MODES)}",
        )
        require(self.gpus is None or self.gpus >= 1, "gpus", f"is {self.gpus}; it must be >= 1 (or null)")
        require(
            0 < self.vllm_gpu_memory_utilization < 1,
            "vllm_gpu_memory_utilization",
            f"is {self.vllm_gpu_memory_utilization}; it must be in (0, 1)",
            "the trainer needs the rest of the GPU",
        )
        if self.use_vllm and self.gpus is not None:
            check_vllm_mode(self.vllm_mode, self.gpus, server_elsewhere=self.vllm_server_elsewhere)
        resolve_prompt(self.prompt)
        check_trainer_block(self.trainer, type(self), GRPO_TRAINER_KEYS, GRPO_OWNED_TRAINER_KEYS)
        window = self.trainer.get("vllm_max_model_length")
        require(
            window is None or (isinstance(window, int) and window > self.max_completion_length),
            "trainer.vllm_max_model_length",
            f"is {window!r}; it must be a whole number above max_completion_length ({self.max_completion_length})",
            "a context window that cannot hold the prompt and a whole completion cuts the rollouts short",
        )

    @property
    def chat_prompt(self) -> Prompt:
        """The :class:`~honestci.training.task.Prompt` of the ``prompt`` key."""
        return resolve_prompt(self.prompt)


#: The ``trainer:`` keys a GRPO job takes (key -> its group and why; everything else is refused by
#: name): the shared optimiser, schedule, checkpoint and memory groups less the job's own keys, and
#: the vLLM server's wait and sleep mode (where rollouts run, not what they are).
GRPO_TRAINER_KEYS = trainer_allowlist(
    GRPOJob,
    GRPO_OWNED_TRAINER_KEYS,
    TRAINER_KEY_GROUPS
    | {
        "vLLM": (
            ("vllm_server_timeout", "vllm_enable_sleep_mode", "vllm_max_model_length"),
            "how the vLLM engine waits, sleeps and sizes its cache (a context window must exceed "
            "max_completion_length, checked)",
        )
    },
)


def check_reward_prompt(job: GRPOJob) -> Prompt:
    """Refuse GRPO against a reward model trained under another prompt; return the job's prompt.

    The members score an answer inside the chat they were trained on (``ensemble.json``'s
    ``prompt``); rollouts from another chat would be rewarded by scores meant for other chats. An
    ensemble that records no prompt is refused (:func:`~honestci.training.task.prompt_from_record`).
    Raises :class:`~honestci.training.config.TrainingConfigError` naming ``prompt`` (exit 2).
    """
    from honestci.training.reward_models import ENSEMBLE_FILE

    manifest_path = Path(job.reward_model) / ENSEMBLE_FILE
    if not manifest_path.is_file():
        raise InputError(
            f"{job.reward_model} has no {ENSEMBLE_FILE}: not a reward-model ensemble folder.",
            fix="train one with `honestci train rm CONFIG`",
        )
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    trained, wanted = prompt_from_record(manifest.get("prompt"), str(manifest_path)), job.chat_prompt
    require(
        trained.sha256 == wanted.sha256,
        "prompt",
        f"is {wanted.describe()} but the reward model in {job.reward_model} was trained under "
        f"{trained.describe()}: its scores are for other chats",
        f"set prompt to the reward model's ({trained.name}), or retrain the reward models with this prompt",
    )
    return wanted


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

    def __init__(
        self,
        ensemble,
        *,
        max_sentences: int = 2,
        penalty: float = -3.0,
        thinking: bool = False,
        log_path: Path | None = None,
    ):
        self.ensemble = ensemble
        self.max_sentences = max_sentences
        self.thinking = thinking
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
        checked = [check_completion(self._text(c), self.max_sentences, thinking=self.thinking) for c in completions]
        answers = [answer for answer, _ in checked]
        gates = [gate for _, gate in checked]
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
            counts = {reason: batch.gate_reasons.count(reason) for reason in GATE_REASONS}
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


def template_opens_think(tokenizer, prompt: Prompt = DEFAULT_PROMPT) -> bool:
    """Whether the tokenizer's chat template ends the generation prompt inside ``<think>`` (as
    Qwen3 thinking models' do): then completions carry only the trace's close tag."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    rendered = tokenizer.apply_chat_template(messages_for("x", prompt), add_generation_prompt=True, tokenize=False)
    return THINK_OPEN in rendered.rsplit(THINK_CLOSE, 1)[-1]


def prompt_dataset(vignettes_path: Path, prompt: Prompt = DEFAULT_PROMPT):
    """A ``datasets.Dataset`` of conversational prompts (``prompt``'s system + user) with a ``scenario`` column."""
    from datasets import Dataset

    from honestci.audit.data.io import load_table

    frame = load_table(vignettes_path, "vignettes").frame
    return Dataset.from_list(
        [
            {"prompt": messages_for(text, prompt), "scenario": text, "vignette_id": vid}
            for vid, text in zip(frame["vignette_id"], frame["text"])
        ]
    )


def grpo_config(job: GRPOJob, device: str, gpus: int | None = None):
    """TRL ``GRPOConfig`` from the job, with the CPU overrides applied when ``device`` is cpu.

    ``gpus`` is the machine's GPU count for the vLLM mode (:func:`check_vllm_mode`): the job's
    ``gpus`` when set, else this argument (``train_grpo`` counts the visible GPUs), else 1.
    """
    from trl import GRPOConfig

    gpus = job.gpus or gpus

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
        # TRL's default is on; on CPU it only costs time (a memory setting: the trainer block may set it)
        args["activation_checkpointing"] = False
    if job.use_vllm:
        mode = check_vllm_mode(job.vllm_mode, gpus or 1, server_elsewhere=job.vllm_server_elsewhere)
        args.update(use_vllm=True, vllm_mode=mode)
        if mode == "colocate":
            args["vllm_gpu_memory_utilization"] = job.vllm_gpu_memory_utilization
        else:
            args.update(vllm_server_host=job.vllm_server_host, vllm_server_port=job.vllm_server_port)
            if job.vllm_server_base_url:
                args["vllm_server_base_url"] = job.vllm_server_base_url
    return GRPOConfig(**{**args, **job.trainer})


def _visible_gpus() -> int:
    """GPUs of the machine as this process sees them: accelerate's WORLD_SIZE training processes (plus
    none for a server it cannot see), else torch's visible device count."""
    import torch

    return max(int(os.environ.get("WORLD_SIZE", "0")), torch.cuda.device_count(), 1)


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
    n_unfinished_think: int  # of n_gated_out: traces cut before </think> (no answer)
    log_history: tuple[dict, ...]
    prompt_name: str
    prompt_sha256: str

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in self.__dict__.items() if k != "log_history"}])

    def __str__(self) -> str:
        return (
            f"GRPO policy in {self.output_dir}: {self.steps} steps in {self.seconds:.1f} s "
            f"({self.seconds_per_step:.2f} s/step); {self.n_completions_scored} completions scored, "
            f"{self.n_gated_out} failed the format gate ({self.n_unfinished_think} unfinished <think> "
            f"traces); log {self.training_log}"
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
    prompt = check_reward_prompt(job)
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / REWARD_LOG).unlink(missing_ok=True)
    args = grpo_config(job, device, gpus=_visible_gpus() if device == "cuda" else None)
    tokenizer = AutoTokenizer.from_pretrained(job.model, local_files_only=True)
    thinking = job.thinking or template_opens_think(tokenizer, prompt)
    if thinking and THINK_CLOSE in tokenizer.all_special_tokens:
        refuse(
            "thinking",
            f"is on but {THINK_CLOSE} is a special token of {job.model}'s tokenizer",
            "TRL decodes completions without special tokens, so no trace would ever close; use a tokenizer "
            f"whose {THINK_CLOSE} is an ordinary added token (as Qwen3's is)",
        )
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
            thinking=thinking,
            log_path=out / REWARD_LOG if main_process else None,
        )
    model = AutoModelForCausalLM.from_pretrained(job.model, local_files_only=True)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_function],
        args=args,
        train_dataset=prompt_dataset(job.vignettes, prompt),
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
        (out / PROMPT_FILE).write_text(json.dumps(prompt.record(), indent=1), encoding="utf-8")
    steps = int(trainer.state.global_step)
    scored = sum(len(b.answers) for b in reward_function.history)
    gated_out = sum(r != "ok" for b in reward_function.history for r in b.gate_reasons)
    unfinished = sum(r == "unfinished_think" for b in reward_function.history for r in b.gate_reasons)
    return GRPORun(
        str(out),
        steps,
        seconds,
        seconds / max(steps, 1),
        str(log_path),
        scored,
        gated_out,
        unfinished,
        tuple(trainer.state.log_history),
        prompt.name,
        prompt.sha256,
    )
