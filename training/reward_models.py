"""Reward models from human ratings: Bradley–Terry pairs, a regression head, and the seed ensemble.

Three recipes, each trained K times with different seeds and combined as an ensemble:

- ``bradley_terry``: TRL's ``RewardTrainer`` on human preference pairs (each rater's non-tie
  label is one comparison), loss −log σ(r(chosen) − r(rejected)) (Bradley & Terry 1952;
  Ouyang et al. 2022).
- ``regression``: a linear head on the backbone regressing the per-response mean human rating of
  each ``rating_columns`` dimension (standardised), MSE loss over every (answer, dimension) entry,
  with ``transformers.Trainer``; a member's score is the mean of its d outputs. The fixture's
  ratings have one dimension (``score``); tests/test_training_rm.py also trains three.
- the ensemble: member k's output s_k(x) is standardised on the training responses,
  z_k = (s_k − m_k)/sd_k, and the reward is R(x) = mean_k z_k − λ · sd_k z_k (population sd over
  the K members; λ = 0.5 by default), which discounts answers the members disagree on
  (uncertainty-penalised ensembles: Coste et al. 2024, "Reward model ensembles help mitigate
  overoptimization").

Held-out accuracy: a share ``heldout_fraction`` of the human pairs, drawn within each vignette, is
kept out of training together with every rating of their responses; on them the accuracy is the
share of pairs whose majority-preferred response the ensemble scores higher, with a CR2 interval
clustered by vignette (:func:`honestci.audit.stats.frequentist.winrate.winrate_ci`, method ``cr2``) beside the optimistic iid
Wilson one.

Weights are written with safetensors only and loaded with ``use_safetensors=True`` from local
folders (no pickle, nothing downloaded).

Validated against: the CR2 interval is :mod:`honestci.audit.stats.frequentist.cluster_robust` (pinned to R clubSandwich in
tests/test_cluster_robust.py); the training loop is TRL's own. tests/test_training_rm.py checks
that training moves the weights and that the ensemble formula matches a direct computation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from honestci.audit.errors import InputError, require_extra
from honestci.training.config import (
    TRAIN_MODULES,
    TRAINER_KEY_GROUPS,
    TrainingConfigError,
    check_trainer_block,
    require,
    to_plain,
    trainer_allowlist,
)
from honestci.training.task import Prompt, messages_for, prompt_from_record, resolve_prompt

KINDS = ("bradley_terry", "regression")
ENSEMBLE_FILE = "ensemble.json"


#: TRL/transformers config keys the job sets itself or that would undo a job-level check, refused in
#: ``trainer:`` with these reasons (the job's own fields are refused there too, and every key not on
#: :data:`RM_TRAINER_KEYS`).
RM_OWNED_TRAINER_KEYS = {
    "seed": "each member's seed comes from seeds (distinct by check); one trainer seed would repeat members",
    "data_seed": "each member's data order comes from its seed; one data_seed would repeat it in every member",
    "center_rewards_coefficient": "changes the reward models' loss (the recipe's Bradley-Terry loss)",
    "save_strategy": "set by honestci (the members are saved as safetensors at the end)",
    "fp16": "precision is the job's bf16 key (checked against the device)",
    "use_cpu": "the device is the job's device key",
    "report_to": "set by honestci (no experiment trackers)",
    "disable_tqdm": "set by honestci (progress goes through its own reporter)",
    "remove_unused_columns": "set by honestci for the regression head's data",
}


@dataclass(frozen=True)
class RewardModelJob:
    """Settings of ``honestci train rm`` (YAML keys of the same names; see training/configs/)."""

    base_model: Path = field(metadata={"help": "Local folder of the backbone (safetensors; nothing is downloaded)."})
    output_dir: Path = field(metadata={"help": "Where the members and ensemble.json are written."})
    vignettes: Path = field(metadata={"help": "Vignettes table (the scenarios)."})
    responses: Path = field(metadata={"help": "Responses table (the rated answers)."})
    human_pairs: Path | None = field(
        default=None, metadata={"help": "Human preference pairs (needed by bradley_terry)."}
    )
    human_ratings: Path | None = field(default=None, metadata={"help": "Human ratings (needed by regression)."})
    kind: str = field(default="bradley_terry", metadata={"help": "bradley_terry (pairs) or regression (ratings)."})
    seeds: tuple[int, ...] = field(
        default=(0, 1, 2), metadata={"help": "One member per seed; distinct (the recipe's three)."}
    )
    ensemble_lambda: float = field(
        default=0.5, metadata={"help": "λ in R = mean − λ·sd over the members (>= 0; the recipe's 0.5)."}
    )
    heldout_fraction: float = field(
        default=0.25, metadata={"help": "Share of pairs per vignette held out for accuracy, in (0, 1)."}
    )
    split_seed: int = field(default=0, metadata={"help": "Seed of the held-out split."})
    rating_columns: tuple[str, ...] = field(
        default=("score",), metadata={"help": "Rating dimensions the regression head predicts."}
    )
    learning_rate: float = field(default=1e-5, metadata={"help": "Optimizer learning rate (> 0)."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Epochs (used when max_steps is -1)."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps per member; -1 = use num_train_epochs."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Examples per device per step (>= 1)."})
    max_length: int = field(default=1024, metadata={"help": "Most tokens per scored conversation."})
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda."})
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16; null = on for cuda, off for cpu (refused on cpu)."}
    )
    logging_steps: int = field(default=1, metadata={"help": "Log every this many steps."})
    prompt: str | dict = field(
        default="honestci",
        metadata={
            "help": "The chat the answers are scored in: a preset (honestci, card) or {system, user_template} "
            "with one {scenario}; recorded in ensemble.json, and GRPO must use the same."
        },
    )
    trainer: dict = field(
        default_factory=dict,
        metadata={
            "help": "Further trl.RewardConfig / TrainingArguments keys from an allowlist (optimiser, schedule, "
            "batching, memory and speed: RM_TRAINER_KEYS); every other key is refused by name."
        },
    )

    def __post_init__(self):
        require(self.kind in KINDS, "kind", f"is {self.kind!r}; use one of {list(KINDS)}")
        require(len(self.seeds) >= 1, "seeds", "is empty", "give at least one seed (three for the ensemble recipe)")
        require(
            len(set(self.seeds)) == len(self.seeds),
            "seeds",
            f"repeats a seed {list(self.seeds)}",
            "give distinct seeds: repeated members add no information",
        )
        require(
            self.ensemble_lambda >= 0,
            "ensemble_lambda",
            f"is {self.ensemble_lambda}; it must be >= 0",
            "0 uses the plain mean; the recipe's default is 0.5",
        )
        require(
            0 < self.heldout_fraction < 1,
            "heldout_fraction",
            f"is {self.heldout_fraction}; it must be in (0, 1)",
            "hold out some pairs (0.25 by default) to measure accuracy",
        )
        require(self.learning_rate > 0, "learning_rate", f"is {self.learning_rate}; it must be > 0")
        require(self.max_steps == -1 or self.max_steps >= 1, "max_steps", "must be -1 (use epochs) or >= 1")
        require(self.per_device_train_batch_size >= 1, "per_device_train_batch_size", "must be >= 1")
        require(self.num_train_epochs > 0, "num_train_epochs", "must be > 0")
        require(self.max_length >= 1 and self.logging_steps >= 1, "max_length/logging_steps", "must be >= 1")
        require(self.device in ("auto", "cpu", "cuda"), "device", f"is {self.device!r}; use auto, cpu or cuda")
        require(len(self.rating_columns) >= 1, "rating_columns", "is empty")
        if self.kind == "bradley_terry":
            require(
                self.human_pairs is not None,
                "human_pairs",
                "is missing: the Bradley-Terry model trains on pairs",
                "give a human_pairs table, or use kind: regression with human_ratings",
            )
        else:
            require(
                self.human_ratings is not None,
                "human_ratings",
                "is missing: the regression head trains on ratings",
                "give a human_ratings table",
            )
        resolve_prompt(self.prompt)
        check_trainer_block(self.trainer, type(self), RM_TRAINER_KEYS, RM_OWNED_TRAINER_KEYS)

    @property
    def chat_prompt(self) -> Prompt:
        """The :class:`~honestci.training.task.Prompt` of the ``prompt`` key."""
        return resolve_prompt(self.prompt)


#: The ``trainer:`` keys a reward-model job takes (key -> its group and why; everything else is
#: refused by name): the shared groups less the job's own keys (its seeds, fields) and the checkpoint
#: group (the members are saved once, at the end).
RM_TRAINER_KEYS = trainer_allowlist(
    RewardModelJob, RM_OWNED_TRAINER_KEYS, {k: v for k, v in TRAINER_KEY_GROUPS.items() if k != "checkpoints"}
)


# --- data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewardData:
    """Training and held-out examples built from the human tables (pandas frames).

    ``pairs_train``: scenario, chosen, rejected, vignette_id (one row per rater's non-tie label).
    ``ratings_train``: scenario, answer, vignette_id and one column per rating dimension (rater mean).
    ``pairs_heldout``: scenario, preferred, other, vignette_id (one row per pair with a majority).
    """

    pairs_train: pd.DataFrame
    ratings_train: pd.DataFrame
    pairs_heldout: pd.DataFrame
    train_responses: pd.DataFrame
    n_heldout_ties: int
    n_repeats_of_heldout: int  # training examples left out because their text equals a held-out answer
    split_seed: int


def _load(path: Path, table: str) -> pd.DataFrame:
    from honestci.audit.data.io import load_table

    return load_table(path, table).frame


def build_reward_data(job: RewardModelJob) -> RewardData:
    """Split the human pairs (within each vignette) and collect the training examples."""
    vignettes = _load(job.vignettes, "vignettes")
    responses = _load(job.responses, "responses")
    scenario = dict(zip(vignettes["vignette_id"], vignettes["text"]))
    text = dict(zip(responses["response_id"], responses["text"]))
    vignette_of = dict(zip(responses["response_id"], responses["vignette_id"]))
    pairs = _load(job.human_pairs, "human_pairs") if job.human_pairs else None
    ratings = _load(job.human_ratings, "human_ratings") if job.human_ratings else None
    for frame, name in ((pairs, "human_pairs"), (ratings, "human_ratings")):
        if frame is not None and frame.empty:
            raise InputError(f"The {name} table is empty.", fix=f"give a {name} table with rows")

    rng = np.random.default_rng(job.split_seed)
    heldout_responses: set[str] = set()
    heldout_rows, n_ties = [], 0
    if pairs is not None:
        keys = pairs.assign(key=[tuple(sorted(p)) for p in zip(pairs["response_a"], pairs["response_b"])])
        for vignette, group in keys.groupby("vignette_id", sort=True):
            unique = sorted(set(group["key"]))
            n_out = int(round(job.heldout_fraction * len(unique)))
            chosen = [unique[i] for i in rng.permutation(len(unique))[:n_out]]
            for key in chosen:
                heldout_responses.update(key)
                votes = group[group["key"] == key]
                a_wins = int(
                    (
                        ((votes["label"] == "a") & (votes["response_a"] == key[0]))
                        | ((votes["label"] == "b") & (votes["response_b"] == key[0]))
                    ).sum()
                )
                b_wins = int((votes["label"] != "tie").sum()) - a_wins
                if a_wins == b_wins:
                    n_ties += 1
                    continue
                preferred, other = (key[0], key[1]) if a_wins > b_wins else (key[1], key[0])
                heldout_rows.append(
                    {
                        "vignette_id": vignette,
                        "scenario": scenario[vignette],
                        "preferred": text[preferred],
                        "other": text[other],
                        "preferred_id": preferred,
                        "other_id": other,
                    }
                )
        train_pairs = pairs[
            ~(pairs["response_a"].isin(heldout_responses) | pairs["response_b"].isin(heldout_responses))
        ]
        train_pairs = train_pairs[train_pairs["label"] != "tie"]
        won_a = train_pairs["label"] == "a"
        pairs_train = pd.DataFrame(
            {
                "vignette_id": train_pairs["vignette_id"].to_numpy(),
                "scenario": [scenario[v] for v in train_pairs["vignette_id"]],
                "chosen": [
                    text[a] if w else text[b]
                    for a, b, w in zip(train_pairs["response_a"], train_pairs["response_b"], won_a)
                ],
                "rejected": [
                    text[b] if w else text[a]
                    for a, b, w in zip(train_pairs["response_a"], train_pairs["response_b"], won_a)
                ],
            }
        )
    else:
        pairs_train = pd.DataFrame(columns=["vignette_id", "scenario", "chosen", "rejected"])

    if ratings is not None:
        missing = [c for c in job.rating_columns if c not in ratings.columns]
        if missing:
            raise InputError(
                f"The human_ratings table has no column(s) {missing}.",
                fix=f"set rating_columns to columns of the table ({list(ratings.columns)})",
            )
        kept = ratings[~ratings["response_id"].isin(heldout_responses)]
        means = kept.groupby("response_id", sort=True)[list(job.rating_columns)].mean()
        ratings_train = pd.DataFrame(
            {
                "response_id": means.index,
                "vignette_id": [vignette_of[r] for r in means.index],
                "scenario": [scenario[vignette_of[r]] for r in means.index],
                "answer": [text[r] for r in means.index],
            }
        )
        for column in job.rating_columns:
            ratings_train[column] = means[column].to_numpy(float)
    else:
        ratings_train = pd.DataFrame(columns=["response_id", "vignette_id", "scenario", "answer", *job.rating_columns])

    # The same text can answer under several ids: drop training examples that repeat a held-out answer.
    heldout_texts = {text[r] for r in heldout_responses}
    repeats = pairs_train["chosen"].isin(heldout_texts) | pairs_train["rejected"].isin(heldout_texts)
    rating_repeats = ratings_train["answer"].isin(heldout_texts)
    n_repeats = int(repeats.sum() + rating_repeats.sum())
    pairs_train, ratings_train = pairs_train[~repeats], ratings_train[~rating_repeats]
    if job.kind == "bradley_terry" and pairs_train.empty:
        raise InputError(
            "No training pairs are left after holding pairs out and dropping ties.",
            fix="give more human pairs or lower heldout_fraction",
        )
    if job.kind == "regression" and ratings_train.empty:
        raise InputError(
            "No rated responses are left for training after the held-out split.",
            fix="give more ratings or lower heldout_fraction",
        )
    # Responses the members are standardised on: every training answer (pairs and ratings).
    answers = pd.concat(
        [
            pairs_train[["vignette_id", "scenario", "chosen"]].rename(columns={"chosen": "answer"}),
            pairs_train[["vignette_id", "scenario", "rejected"]].rename(columns={"rejected": "answer"}),
            ratings_train[["vignette_id", "scenario", "answer"]],
        ],
        ignore_index=True,
    ).drop_duplicates()
    return RewardData(
        pairs_train.reset_index(drop=True),
        ratings_train.reset_index(drop=True),
        pd.DataFrame(
            heldout_rows, columns=["vignette_id", "scenario", "preferred", "other", "preferred_id", "other_id"]
        ),
        answers.reset_index(drop=True),
        n_ties,
        n_repeats,
        job.split_seed,
    )


# --- scoring ----------------------------------------------------------------------------------


def encode(tokenizer, scenario: str, answer: str, max_length: int | None = None, *, prompt: Prompt) -> list[int]:
    """Token ids of the chat (``prompt``'s system, user with the scenario, assistant answer) a reward
    model scores.

    The same rendering TRL's RewardTrainer uses for conversational pairs (``apply_chat_template``).
    """
    ids = tokenizer.apply_chat_template(
        messages_for(scenario, prompt) + [{"role": "assistant", "content": answer}], tokenize=True, return_dict=True
    )["input_ids"]
    return list(ids[-max_length:]) if max_length else list(ids)


def raw_scores(
    model,
    tokenizer,
    scenarios,
    answers,
    *,
    batch_size: int = 16,
    max_length: int | None = None,
    prompt: Prompt,
) -> np.ndarray:
    """The model's head outputs (n x d) for each (scenario, answer) in ``prompt``'s chat, in inference mode."""
    import torch

    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(answers), batch_size):
            ids = [
                encode(tokenizer, s, a, max_length, prompt=prompt)
                for s, a in zip(scenarios[start : start + batch_size], answers[start : start + batch_size])
            ]
            width = max(len(x) for x in ids)
            input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
            mask = torch.zeros((len(ids), width), dtype=torch.long)
            for i, x in enumerate(ids):  # right padding: the sequence-classification head reads the last real token
                input_ids[i, : len(x)] = torch.tensor(x)
                mask[i, : len(x)] = 1
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
            out.append(logits.float().cpu().numpy())
    return np.concatenate(out, axis=0) if out else np.zeros((0, 1))


@dataclass(frozen=True)
class EnsembleScores:
    """Scores of n answers by K members: standardised member scores and the ensemble reward."""

    member_z: np.ndarray  # n x K
    mean: np.ndarray
    std: np.ndarray
    reward: np.ndarray
    ensemble_lambda: float

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.member_z, columns=[f"member_{k}" for k in range(self.member_z.shape[1])])
        return frame.assign(mean=self.mean, std=self.std, reward=self.reward)


def ensemble_reward(member_z: np.ndarray, ensemble_lambda: float) -> EnsembleScores:
    """R = mean_k z_k − λ · sd_k z_k (population sd; 0 for a single member)."""
    member_z = np.asarray(member_z, float)
    mean = member_z.mean(axis=1)
    std = member_z.std(axis=1)
    return EnsembleScores(member_z, mean, std, mean - ensemble_lambda * std, float(ensemble_lambda))


class RewardEnsemble:
    """K trained reward models loaded from an ensemble folder (``ensemble.json`` + member folders).

    A member with a d-dimension regression head (``rating_columns``) scores an answer by the mean of
    its d outputs, standardised with the member's training mean and sd (``ensemble.json``); the K
    standardised scores then combine as R = mean − λ·sd (:func:`ensemble_reward`).
    ``score(scenarios, answers)`` gives :class:`EnsembleScores`; ``calls`` counts how many answers
    were scored (for tests and logs).
    """

    def __init__(self, folder: str | Path, *, device: str = "cpu", ensemble_lambda: float | None = None):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = Path(folder)
        manifest_path = folder / ENSEMBLE_FILE
        if not manifest_path.is_file():
            raise InputError(
                f"{folder} has no {ENSEMBLE_FILE}: not a reward-model ensemble folder.",
                fix="train one with `honestci train rm CONFIG`",
            )
        self.manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        self.prompt = prompt_from_record(self.manifest.get("prompt"), str(manifest_path))
        self.ensemble_lambda = float(self.manifest["ensemble_lambda"] if ensemble_lambda is None else ensemble_lambda)
        self.members = []
        for member in self.manifest["members"]:
            path = folder / member["path"]
            if not (path / "model.safetensors").is_file() and not any(path.glob("model-*.safetensors")):
                raise InputError(
                    f"{path}: no safetensors weights.",
                    fix="honestci loads safetensors only (never pickled weights); re-save the member",
                )
            model = (
                AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True, use_safetensors=True)
                .to(device)
                .eval()
            )
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.members.append((model, tokenizer, float(member["mean"]), float(member["std"])))
        self.max_length = self.manifest.get("max_length")
        self.calls = 0

    def score(self, scenarios, answers) -> EnsembleScores:
        columns = []
        for model, tokenizer, mean, std in self.members:
            raw = raw_scores(
                model, tokenizer, list(scenarios), list(answers), max_length=self.max_length, prompt=self.prompt
            )
            columns.append((raw.mean(axis=1) - mean) / std)
        self.calls += len(answers)
        return ensemble_reward(np.column_stack(columns), self.ensemble_lambda)


# --- held-out accuracy ------------------------------------------------------------------------


@dataclass(frozen=True)
class RMAccuracy:
    """Held-out accuracy against human majority preferences, with a vignette-clustered CR2 interval."""

    name: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    iid_low: float | None
    iid_high: float | None
    n_pairs: int
    n_clusters: int
    n_ties_excluded: int
    level: float
    note: str

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([self.__dict__])

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)


def heldout_accuracy(
    name: str, preferred_reward, other_reward, vignettes, *, n_ties_excluded: int = 0, level: float = 0.95
) -> RMAccuracy:
    """Share of held-out pairs whose human-preferred answer scores higher (equal scores count ½).

    Interval: CR2 with Satterthwaite df, clustered by vignette (:func:`honestci.audit.stats.frequentist.winrate.winrate_ci`);
    INCONCLUSIVE (no interval) with fewer vignettes than ``THRESHOLDS.min_clusters``.
    """
    from honestci.audit.stats.frequentist import iid
    from honestci.audit.stats.frequentist.winrate import winrate_ci

    preferred_reward, other_reward = np.asarray(preferred_reward, float), np.asarray(other_reward, float)
    correct = np.where(preferred_reward > other_reward, 1.0, np.where(preferred_reward == other_reward, 0.5, 0.0))
    clusters = np.asarray(vignettes)
    if correct.size == 0:
        return RMAccuracy(name, None, None, None, None, None, 0, 0, n_ties_excluded, level, "no held-out pairs")
    n_clusters = int(np.unique(clusters).size)
    wilson = iid.proportion_ci(float(correct.sum()), int(correct.size), method="wilson", level=level)
    # winrate_ci never raises for too few vignettes or no variance: it reports INCONCLUSIVE (no bounds).
    cr2 = winrate_ci(correct, clusters, method="cr2", level=level)

    def clip(v):
        return None if v is None else min(1.0, max(0.0, float(v)))  # an accuracy lives in [0, 1]

    low, high, note = clip(cr2.ci_low), clip(cr2.ci_high), cr2.note or "CR2, clustered by vignette"
    return RMAccuracy(
        name,
        float(correct.mean()),
        low,
        high,
        float(wilson[0]),
        float(wilson[1]),
        int(correct.size),
        n_clusters,
        n_ties_excluded,
        level,
        note,
    )


# --- training ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberRun:
    """One trained member: where it is, how long it took and what its trainer logged."""

    seed: int
    path: str
    steps: int
    seconds: float
    seconds_per_step: float
    mean: float
    std: float
    n_too_long: int  # training examples longer than max_length, left out (counted, never silent)
    log_history: tuple[dict, ...]


@dataclass(frozen=True)
class RewardModelRun:
    """The result of ``honestci train rm``: the ensemble folder, its members and held-out accuracy."""

    output_dir: str
    kind: str
    members: tuple[MemberRun, ...]
    accuracy: tuple[RMAccuracy, ...]
    n_train_pairs: int
    n_train_rated: int
    n_heldout_pairs: int

    def to_frame(self) -> pd.DataFrame:
        return pd.concat([a.to_frame() for a in self.accuracy], ignore_index=True)

    def __str__(self) -> str:
        lines = [
            f"reward-model ensemble ({self.kind}, K = {len(self.members)}) in {self.output_dir}",
            f"training pairs {self.n_train_pairs}, rated responses {self.n_train_rated}, "
            f"held-out pairs {self.n_heldout_pairs}",
        ]
        lines += [
            f"  member seed {m.seed}: {m.steps} steps, {m.seconds_per_step:.2f} s/step"
            + (f", {m.n_too_long} example(s) over max_length left out" if m.n_too_long else "")
            for m in self.members
        ]
        frame = self.to_frame()[
            ["name", "estimate", "ci_low", "ci_high", "iid_low", "iid_high", "n_pairs", "n_clusters"]
        ]
        return "\n".join(lines) + "\n" + frame.to_string(index=False, float_format=lambda v: f"{v:.3f}")


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is visible, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _common_trainer_args(job, device: str, seed: int, out: Path) -> dict:
    bf16 = (device == "cuda") if job.bf16 is None else job.bf16
    if bf16 and device == "cpu":
        raise TrainingConfigError(
            "Invalid training config: bf16 is true on CPU.", fix="set bf16: false (or device: cuda)"
        )
    args = dict(
        output_dir=str(out),
        seed=seed,
        learning_rate=job.learning_rate,
        num_train_epochs=job.num_train_epochs,
        max_steps=job.max_steps,
        per_device_train_batch_size=job.per_device_train_batch_size,
        logging_steps=job.logging_steps,
        save_strategy="no",
        report_to=[],
        bf16=bf16,
        use_cpu=device == "cpu",
        disable_tqdm=True,
    )
    if device == "cpu":
        args["activation_checkpointing"] = False  # TRL turns it on by default; on CPU it only costs time
    return {**args, **job.trainer}


def _check_trainer_keys(config_class, keys, what: str) -> None:
    known = set(config_class.__dataclass_fields__)
    unknown = sorted(set(keys) - known)
    if unknown:
        raise TrainingConfigError(
            f"Invalid training config: unknown trainer key(s) {unknown} for {what}.",
            fix=f"see the fields of {config_class.__module__}.{config_class.__name__}",
        )


def _train_bradley_terry(job, data: RewardData, seed: int, out: Path, device: str):
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed
    from trl import RewardConfig, RewardTrainer

    _check_trainer_keys(RewardConfig, job.trainer, "RewardConfig")
    rows = [
        {
            "prompt": messages_for(s, job.chat_prompt),
            "chosen": [{"role": "assistant", "content": c}],
            "rejected": [{"role": "assistant", "content": r}],
        }
        for s, c, r in zip(data.pairs_train["scenario"], data.pairs_train["chosen"], data.pairs_train["rejected"])
    ]
    args = RewardConfig(**_common_trainer_args(job, device, seed, out), max_length=job.max_length)
    set_seed(seed)  # the score head is initialised at load time
    model = AutoModelForSequenceClassification.from_pretrained(job.base_model, num_labels=1, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(job.base_model, local_files_only=True)
    trainer = RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    kept = trainer.train_dataset  # the pairs RewardTrainer kept (it drops those over max_length)
    if not isinstance(kept, Dataset):
        raise InputError(
            f"TRL's RewardTrainer turned the training pairs into a {type(kept).__name__}, not a datasets.Dataset: "
            "the pairs over max_length cannot be counted.",
            fix="install the versions in constraints.txt (pip install -c constraints.txt 'honestci[train]')",
        )
    return trainer, model, tokenizer, len(rows) - len(kept)


def _train_regression(job, data: RewardData, seed: int, out: Path, device: str):
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    _check_trainer_keys(TrainingArguments, job.trainer, "TrainingArguments")
    columns = list(job.rating_columns)
    targets = data.ratings_train[columns].to_numpy(float)
    centre, scale = targets.mean(axis=0), targets.std(axis=0)
    scale[scale == 0] = 1.0  # a constant dimension carries no signal; keep it finite
    tokenizer = AutoTokenizer.from_pretrained(job.base_model, local_files_only=True)
    rows = [
        {"input_ids": encode(tokenizer, s, a, prompt=job.chat_prompt), "labels": list((t - centre) / scale)}
        for s, a, t in zip(data.ratings_train["scenario"], data.ratings_train["answer"], targets)
    ]
    kept = [row for row in rows if len(row["input_ids"]) <= job.max_length]  # as RewardTrainer filters pairs
    set_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        job.base_model, num_labels=len(columns), problem_type="regression", local_files_only=True
    )
    model.config.pad_token_id = tokenizer.pad_token_id
    args = TrainingArguments(**_common_trainer_args(job, device, seed, out), remove_unused_columns=False)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(kept),
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    return trainer, model, tokenizer, len(rows) - len(kept)


def train_reward_models(job: RewardModelJob, progress: Callable[[str], None] = lambda _: None) -> RewardModelRun:
    """Train the K members of ``job``, save them (safetensors) with ``ensemble.json``, and measure
    held-out accuracy of each member and of the ensemble."""
    require_extra("train", *TRAIN_MODULES, needed_by="training reward models")
    from honestci.training.progress import TrainingProgress

    device = resolve_device(job.device)
    if not (Path(job.base_model) / "config.json").is_file():
        raise InputError(
            f"{job.base_model}: no config.json, not a local model folder.",
            fix="point base_model at a folder saved with save_pretrained (nothing is downloaded)",
        )
    data = build_reward_data(job)
    out = Path(job.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    members, heldout_z = [], []
    heldout = data.pairs_heldout
    for seed in job.seeds:
        progress(f"training reward model member seed {seed} ({job.kind})")
        member_dir = out / f"member-seed{seed}"
        build = _train_bradley_terry if job.kind == "bradley_terry" else _train_regression
        trainer, model, tokenizer, n_too_long = build(job, data, seed, member_dir / "trainer", device)
        if n_too_long:
            n_examples = len(data.pairs_train) if job.kind == "bradley_terry" else len(data.ratings_train)
            if n_too_long == n_examples:
                raise InputError(
                    f"Every training example is longer than max_length = {job.max_length} tokens.",
                    fix="raise max_length",
                )
            progress(f"{n_too_long} of {n_examples} training examples are longer than max_length and were left out")
        trainer.add_callback(TrainingProgress(progress, f"reward model seed {seed}"))
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        model.save_pretrained(member_dir, safe_serialization=True)
        tokenizer.save_pretrained(member_dir)
        train_raw = raw_scores(
            model,
            tokenizer,
            list(data.train_responses["scenario"]),
            list(data.train_responses["answer"]),
            max_length=job.max_length,
            prompt=job.chat_prompt,
        ).mean(axis=1)
        mean, std = float(train_raw.mean()), float(train_raw.std())
        std = std if std > 0 else 1.0
        z = []
        for column in ("preferred", "other"):
            raw = raw_scores(
                model,
                tokenizer,
                list(heldout["scenario"]),
                list(heldout[column]),
                max_length=job.max_length,
                prompt=job.chat_prompt,
            ).mean(axis=1)
            z.append((raw - mean) / std)
        heldout_z.append(z)
        steps = int(trainer.state.global_step)
        members.append(
            MemberRun(
                seed,
                member_dir.name,
                steps,
                seconds,
                seconds / max(steps, 1),
                mean,
                std,
                n_too_long,
                tuple(trainer.state.log_history),
            )
        )
    accuracy = [
        heldout_accuracy(
            f"member seed {m.seed}", z[0], z[1], heldout["vignette_id"], n_ties_excluded=data.n_heldout_ties
        )
        for m, z in zip(members, heldout_z)
    ]
    preferred = ensemble_reward(np.column_stack([z[0] for z in heldout_z]), job.ensemble_lambda).reward
    other = ensemble_reward(np.column_stack([z[1] for z in heldout_z]), job.ensemble_lambda).reward
    accuracy.append(
        heldout_accuracy(
            f"ensemble (mean - {job.ensemble_lambda:g} sd)",
            preferred,
            other,
            heldout["vignette_id"],
            n_ties_excluded=data.n_heldout_ties,
        )
    )
    run = RewardModelRun(
        str(out),
        job.kind,
        tuple(members),
        tuple(accuracy),
        len(data.pairs_train),
        len(data.ratings_train),
        len(heldout),
    )
    manifest = {
        "kind": job.kind,
        "ensemble_lambda": job.ensemble_lambda,
        "max_length": job.max_length,
        "rating_columns": list(job.rating_columns),
        "split_seed": job.split_seed,
        "prompt": job.chat_prompt.record(),
        "members": [
            {"seed": m.seed, "path": m.path, "mean": m.mean, "std": m.std, "steps": m.steps, "n_too_long": m.n_too_long}
            for m in members
        ],
        "heldout_accuracy": [a.__dict__ for a in accuracy],
        "job": to_plain(job),
    }
    (out / ENSEMBLE_FILE).write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")
    heldout.to_json(out / "heldout_pairs.jsonl", orient="records", lines=True, force_ascii=False)
    return run
