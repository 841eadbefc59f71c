"""Generation for evaluation: fresh seeds, a tagged run and pool, written as a responses table.

Each (vignette, sample) gets its own seed, spawned (``numpy.random.SeedSequence``) from one base
seed together with the system, run tag and pool, so two pools or runs generated with the same base
seed (the command line's default) never share a sample seed. The base seed is fresh entropy unless
given (the command line always gives one) and is recorded (in the result and, per sample, in the
``seed`` column), so an evaluation never reuses the samples a checkpoint was selected or trained on
by accident and can still be re-run exactly. Rows follow ``docs/data-formats.md`` (responses):
``text`` is the answer after ``</think>``, ``raw`` the whole output, ``run`` and ``pool`` tag the
evaluation.

Backends: a local transformers model (CPU or GPU), or an OpenAI-compatible server (vLLM's
``vllm serve``), through the judges' HTTP client (:mod:`honestci.judges.backends.openai_http`: bounded
concurrency, retries with backoff). A generation that fails after every retry stops the run with
the failures listed: it is never written as an empty answer (an empty answer is a real output).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from honestci.audit.errors import InputError, Problem, require_extra
from honestci.training.config import refuse, require
from honestci.training.task import Prompt, extract_answer, messages_for, resolve_prompt, unfinished_think

if TYPE_CHECKING:
    from honestci.judges.backends.base import Completion

#: (scenario, sample seed) of each answer to generate, and its (vignette id, response id).
Plan = Sequence[tuple[str, int]]
Keys = Sequence[tuple[str, str]]

RESPONSE_TABLE_COLUMNS = ("response_id", "vignette_id", "system", "text", "raw", "run", "pool", "seed", "sample_idx")
#: "vllm" is "openai" by its usual name: vLLM serves the OpenAI-compatible API the HTTP client speaks.
BACKENDS = ("transformers", "openai", "vllm")
POOLS = ("heldout", "selection")


@dataclass(frozen=True)
class GenerationJob:
    """Settings of ``honestci generate``."""

    system: str = field(metadata={"help": "Name of the system the answers are recorded under (responses' system)."})
    vignettes: Path = field(metadata={"help": "Vignettes table whose scenarios are answered."})
    out: Path = field(metadata={"help": "Responses table to write (JSONL)."})
    backend: str = field(
        default="transformers", metadata={"help": "transformers (a local folder) or openai/vllm (a server)."}
    )
    model_path: Path | None = field(default=None, metadata={"help": "Local model folder (transformers backend)."})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible server URL (openai/vllm)."})
    model: str | None = field(default=None, metadata={"help": "Model name the server serves (openai/vllm)."})
    api_key_env: str = field(
        default="OPENAI_API_KEY", metadata={"help": "Environment variable holding the server's API key."}
    )
    concurrency: int = field(default=8, metadata={"help": "Requests in flight to the server."})
    max_retries: int = field(default=5, metadata={"help": "Retries of a failed request (with backoff)."})
    backoff_base_s: float = field(default=0.5, metadata={"help": "First retry delay in seconds (doubles each retry)."})
    samples_per_vignette: int = field(default=20, metadata={"help": "Answers drawn per vignette."})
    run: str = field(default="run-1", metadata={"help": "Run label recorded with every answer."})
    pool: str = field(default="heldout", metadata={"help": "Pool recorded with every answer (selection/heldout)."})
    seed: int | None = field(
        default=None, metadata={"help": "Base seed of the sampling; null = a fresh one, recorded in the run."}
    )
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature (> 0)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]."})
    max_tokens: int = field(default=2048, metadata={"help": "Most new tokens per answer, think trace included."})
    device: str = field(default="auto", metadata={"help": "cpu, cuda or auto (transformers backend)."})
    thinking: bool = field(
        default=False,
        metadata={
            "help": "A thinking model (its trace may open in the prompt): output without </think> has no answer."
        },
    )
    prompt: str | dict = field(
        default="honestci",
        metadata={
            "help": "The policy's chat: a preset (honestci, card) or {system, user_template} with one {scenario}."
        },
    )

    def __post_init__(self):
        require(
            self.backend in BACKENDS,
            "backend",
            f"is {self.backend!r}; use one of {list(BACKENDS)}",
            "openai (or vllm) = any OpenAI-compatible server, e.g. vLLM's",
        )
        require(self.pool in POOLS, "pool", f"is {self.pool!r}; use one of {list(POOLS)}")
        require(self.samples_per_vignette >= 1, "samples_per_vignette", "must be >= 1")
        require(self.temperature >= 0, "temperature", "must be >= 0")
        require(self.max_tokens >= 1, "max_tokens", "must be >= 1")
        require(bool(self.system.strip()) and bool(self.run.strip()), "system/run", "must be non-empty")
        resolve_prompt(self.prompt)
        if self.backend == "transformers":
            self.local_model_path()
        else:
            self.server()

    @property
    def chat_prompt(self) -> Prompt:
        """The :class:`~honestci.training.task.Prompt` of the ``prompt`` key."""
        return resolve_prompt(self.prompt)

    def local_model_path(self) -> Path:
        """The transformers backend's model folder (:class:`TrainingConfigError` when missing)."""
        if self.model_path is None:
            refuse("model_path", "is missing for the transformers backend", "pass --model-path FOLDER")
        return self.model_path

    def server(self) -> tuple[str, str]:
        """The openai backend's (base URL, model name) (:class:`TrainingConfigError` unless both are given)."""
        if not self.base_url or not self.model:
            refuse(
                "base_url/model",
                "are needed for the openai backend",
                "e.g. --base-url http://127.0.0.1:8000/v1 --model NAME",
            )
        return self.base_url, self.model


@dataclass(frozen=True)
class GenerationRun:
    """What a generation run wrote."""

    out: str
    system: str
    run: str
    pool: str
    base_seed: int
    n_rows: int
    n_empty_answers: int  # includes the unfinished traces
    n_unfinished_think: int  # traces cut at max_tokens before </think> (their text is empty)
    seconds: float
    prompt_name: str
    prompt_sha256: str

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([self.__dict__])

    def __str__(self) -> str:
        return (
            f"{self.n_rows} responses of {self.system} (run {self.run}, pool {self.pool}, base seed "
            f"{self.base_seed}) -> {self.out}; {self.n_empty_answers} empty answer(s) "
            f"({self.n_unfinished_think} unfinished <think> trace(s)); {self.seconds:.1f} s"
        )


def sample_seeds(base_seed: int, n: int, *tags: str) -> list[int]:
    """``n`` independent 31-bit seeds from ``base_seed`` and ``tags`` (SeedSequence spawning).

    The tags (system, run, pool) enter the entropy, so a held-out pool generated with the same base
    seed as the selection pool is still a fresh draw.
    """
    entropy = [base_seed, int.from_bytes(hashlib.sha256("\0".join(tags).encode()).digest())]
    return [int(child.generate_state(1, dtype=np.uint32)[0] >> 1) for child in np.random.SeedSequence(entropy).spawn(n)]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def _generate_transformers(job: GenerationJob, plan: Plan) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding

    from honestci.training.reward_models import resolve_device

    device = resolve_device(job.device)
    model_path = job.local_model_path()
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    # PreTrainedModel.to is wrapped by functools.wraps, which the stubs type as unbound (self not filled in).
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True).to(device).eval()  # type: ignore[arg-type]
    outputs = []
    for scenario, seed in plan:
        encoded = tokenizer.apply_chat_template(
            messages_for(scenario, job.chat_prompt), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        if not isinstance(encoded, BatchEncoding):
            raise InputError(
                f"{model_path}: the tokenizer's chat template gave {type(encoded).__name__}, not token ids.",
                fix="save a tokenizer whose apply_chat_template returns token ids (transformers' own)",
            )
        options = {
            "max_new_tokens": job.max_tokens,
            "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        }
        if job.temperature > 0:
            options.update(do_sample=True, temperature=job.temperature, top_p=job.top_p)
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.random.fork_rng(devices=[device] if device.startswith("cuda") else []), torch.inference_mode():
            torch.manual_seed(seed)
            ids = model.generate(
                input_ids=encoded["input_ids"].to(device),
                attention_mask=encoded["attention_mask"].to(device),
                **options,
            )
        # Keep the think tags (they are special tokens): the answer is what follows </think>.
        new = ids[0, encoded["input_ids"].shape[1] :]
        text = tokenizer.decode(new, skip_special_tokens=False)
        if not isinstance(text, str):  # one sequence decodes to one string
            raise InputError(f"{model_path}: the tokenizer decoded one answer into {len(text)} strings.")
        outputs.append(text.replace(tokenizer.eos_token or "\0", "").replace(tokenizer.pad_token or "\0", ""))
    return outputs


def _generate_http(job: GenerationJob, plan: Plan, keys: Keys) -> list[str]:
    from honestci.judges.backends.base import JudgeRequest
    from honestci.judges.backends.openai_http import OpenAICompatibleBackend

    base_url, model = job.server()
    backend = OpenAICompatibleBackend(
        base_url,
        model,
        api_key_env=job.api_key_env,
        concurrency=job.concurrency,
        max_retries=job.max_retries,
        backoff_base_s=job.backoff_base_s,
    )

    async def run_all() -> list[Completion]:
        try:
            requests = [
                JudgeRequest(
                    vid,
                    rid,
                    "",
                    tuple(messages_for(scenario, job.chat_prompt)),
                    {"temperature": job.temperature, "top_p": job.top_p, "max_tokens": job.max_tokens, "seed": seed},
                )
                for (scenario, seed), (vid, rid) in zip(plan, keys)
            ]
            return await asyncio.gather(*(backend.complete(r) for r in requests))
        finally:
            await backend.aclose()

    texts: list[str] = []
    failed: list[Problem] = []
    for c, (_, rid) in zip(asyncio.run(run_all()), keys):
        if c.text is None:
            failed.append(Problem(base_url, None, rid, c.error or "no reply"))
        else:
            texts.append(c.text)
    if failed:
        raise InputError(
            f"{len(failed)} generation(s) got no usable reply from {base_url}.",
            failed,
            fix="check the server and run the same command again (nothing was written)",
        )
    return texts


def generate_responses(job: GenerationJob, progress: Callable[[str], None] = lambda _: None) -> GenerationRun:
    """Generate ``samples_per_vignette`` answers per vignette and write the responses table ``job.out``."""
    import time

    from honestci.audit.data.io import load_table
    from honestci.judges.tables import write_table

    if job.backend == "transformers":  # the HTTP backend checks its own extra
        require_extra(
            "train",
            "torch",
            "transformers",
            needed_by="local generation (backend transformers)",
            instead="generate over HTTP",
        )
    vignettes = load_table(job.vignettes, "vignettes").frame
    # Fresh entropy as numpy's SeedSequence() draws it (secrets.randbits), kept to 63 bits.
    base_seed = secrets.randbits(63) if job.seed is None else int(job.seed)
    seeds = iter(sample_seeds(base_seed, len(vignettes) * job.samples_per_vignette, job.system, job.run, job.pool))
    plan: list[tuple[str, int]] = []
    keys: list[tuple[str, str]] = []
    meta: list[tuple[str, int, int]] = []
    for vid, scenario in zip(vignettes["vignette_id"], vignettes["text"]):
        for sample in range(job.samples_per_vignette):
            seed = next(seeds)
            plan.append((scenario, seed))
            keys.append((vid, f"{_slug(job.system)}-{_slug(job.run)}-{_slug(vid)}-{sample:03d}"))
            meta.append((vid, sample, seed))
    progress(f"generating {len(plan)} answers of {job.system} with {job.backend}")
    started = time.perf_counter()
    outputs = _generate_transformers(job, plan) if job.backend == "transformers" else _generate_http(job, plan, keys)
    rows = [
        {
            "response_id": rid,
            "vignette_id": vid,
            "system": job.system,
            "text": extract_answer(raw, thinking=job.thinking),
            "raw": raw,
            "run": job.run,
            "pool": job.pool,
            "seed": seed,
            "sample_idx": sample,
        }
        for (vid, rid), (_, sample, seed), raw in zip(keys, meta, outputs)
    ]
    write_table(rows, job.out, RESPONSE_TABLE_COLUMNS)
    return GenerationRun(
        str(job.out),
        job.system,
        job.run,
        job.pool,
        base_seed,
        len(rows),
        sum(not r["text"] for r in rows),
        sum(unfinished_think(raw, thinking=job.thinking) for raw in outputs),
        time.perf_counter() - started,
        job.chat_prompt.name,
        job.chat_prompt.sha256,
    )
