"""``honestci pipeline``: training text leakage check → reward models → GRPO → generation → judging → audit.

The only road from a trained checkpoint to a number in a model card. Each stage writes into the
run folder (``output_dir``); the last one writes the model-card figures only when every required
gate passes, and otherwise refuses (exit 1) with the report explaining why.

- Leakage first, and fail closed: the training text (the task prompts, every human-rated answer
  the reward models train on, and any extra ``corpus``) is checked against the held-out eval
  answers (the opponent's answers that no human table references) by the audit's own leakage
  check (:func:`honestci.audit.checks.leakage.leakage_check`) and gate
  (:func:`honestci.audit.gate_registry.run_gate` ``"leakage"``). When that check cannot be imported or run,
  or its gate does not PASS, nothing is trained.
- The audit's claim requires the default gates plus ``leakage`` and ``training_healthy``, and names
  the GRPO log (``training_log``, copied beside the claim) so the audit itself judges training health.
- Calibration inside the run: the judging stage also judges every human-labelled pair (both orders,
  same backend and template), so ``judge_calibrated`` decides on this judge's own evidence; the
  judgments are kept in ``data/calibration_record.json`` bound to the judge, the template hash and
  the human data hash. ``judge.calibration_record`` reuses one, refused (exit 2) when stale.
- ``judge.backend: stub`` is a stand-in with no model (:mod:`honestci.judges.backends.stub`) for dry
  runs; the model card's figures then say so above them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from honestci.audit.data.claims import load_claim
from honestci.audit.errors import HonestCIError, InputError, Problem
from honestci.audit.policy import (
    DEFAULT_SEED,
    GateResult,
    Policy,
    Thresholds,
    Verdict,
    loosening,
    threshold_problem,
)
from honestci.training.config import build_config, load_config, refuse_keys, require
from honestci.training.task import resolve_prompt

CARD_START = "<!-- honestci:figures:start -->"
CARD_END = "<!-- honestci:figures:end -->"
PIPELINE_GATES = ("leakage", "training_healthy")
JUDGE_BACKENDS = ("transformers", "openai", "vllm", "stub")


class PipelineRefused(HonestCIError):
    """A gate did not pass: the pipeline stops, or writes no figures into the model card (exit 1)."""

    def __init__(self, message: str, gates: Sequence[GateResult] = ()):
        self.message = message
        self.gates = tuple(gates)
        super().__init__(message)


#: Keys of each stage's block that the pipeline sets itself (its inputs, folders and prompt): refused
#: there, so a block cannot point a stage at other data than the pipeline checked for leakage, nor
#: give one stage another chat than the others.
PIPELINE_OWNED_KEYS = {
    "reward_model": ("base_model", "output_dir", "vignettes", "responses", "human_pairs", "human_ratings", "prompt"),
    "grpo": ("model", "reward_model", "vignettes", "output_dir", "prompt"),
    "generation": ("system", "vignettes", "out", "pool", "prompt"),
}


@dataclass(frozen=True)
class PipelineJob:
    """Settings of ``honestci pipeline`` (see training/configs/pipeline_cpu_tiny.yaml)."""

    name: str = field(metadata={"help": "The claim's name in the audit and the model card."})
    output_dir: Path = field(metadata={"help": "Run folder: every stage writes inside it."})
    base_model: Path = field(
        metadata={"help": "Local folder of the base model the policy and reward models start from."}
    )
    vignettes: Path = field(metadata={"help": "Vignettes table (the task prompts and the eval vignettes)."})
    responses: Path = field(metadata={"help": "Responses table holding the human-rated answers and the opponent's."})
    human_pairs: Path | None = field(default=None, metadata={"help": "Human pairwise preferences (reward models)."})
    human_ratings: Path | None = field(default=None, metadata={"help": "Human ratings (reward models)."})
    corpus: Path | None = field(
        default=None, metadata={"help": "Extra training text, checked for leakage before anything trains."}
    )
    policy: str = field(default="policy", metadata={"help": "System name of the trained policy's answers."})
    opponent: str = field(default="gpt-4-0314", metadata={"help": "System the policy is judged against."})
    bar: float = field(default=0.608, metadata={"help": "The win rate the claim must clear, in (0, 1)."})
    population: str = field(default="new_vignettes", metadata={"help": "new_vignettes or these_vignettes."})
    reward_model: dict = field(
        default_factory=dict, metadata={"help": "honestci train rm keys (inputs are the pipeline's)."}
    )
    grpo: dict = field(default_factory=dict, metadata={"help": "honestci train grpo keys (inputs are the pipeline's)."})
    generation: dict = field(
        default_factory=dict, metadata={"help": "honestci generate keys (inputs are the pipeline's)."}
    )
    judge: dict = field(
        default_factory=dict,
        metadata={"help": "The judge: backend (transformers, openai, vllm, stub) and its settings."},
    )
    bayes: bool = field(default=False, metadata={"help": "Fit the Bayesian model in the audit (minutes on CPU)."})
    seed: int = field(default=DEFAULT_SEED, metadata={"help": "Seed of every resampling step of the audit."})
    thresholds: dict = field(default_factory=dict, metadata={"help": "Stricter audit thresholds (may only tighten)."})
    required_gates: tuple[str, ...] | None = field(
        default=None, metadata={"help": "Gates to require besides the policy's and the pipeline's own."}
    )
    model_card: Path | None = field(
        default=None, metadata={"help": "Model card whose figures block is written when every gate passes."}
    )
    prompt: str | dict = field(
        default="honestci",
        metadata={"help": "The policy's chat for every stage: a preset (honestci, card) or {system, user_template}."},
    )

    def __post_init__(self):
        # A YAML null reaches the dataclass as None: the required paths must be given.
        unset = [name for name in ("output_dir", "base_model", "vignettes", "responses") if getattr(self, name) is None]
        require(not unset, "/".join(unset), "must be a path, not null", "give each required input its file or folder")
        require(0 < self.bar < 1, "bar", f"is {self.bar}; it must be in (0, 1)")
        require(self.policy != self.opponent, "policy", "must differ from opponent")
        require(
            self.human_pairs is not None or self.human_ratings is not None,
            "human_pairs/human_ratings",
            "are both missing: the reward models train on human judgements",
        )
        for block, owned in PIPELINE_OWNED_KEYS.items():
            taken = sorted(set(getattr(self, block)) & set(owned))
            require(
                not taken,
                ", ".join(f"{block}.{key}" for key in taken),
                "is set by the pipeline itself (its checked inputs, run folder and prompt)",
                "set the pipeline's top-level keys (base_model, vignettes, responses, prompt, ...) instead",
            )
        resolve_prompt(self.prompt)
        self._check_training_blocks()
        require(
            self.judge.get("backend") in JUDGE_BACKENDS,
            "judge.backend",
            f"is {self.judge.get('backend')!r}; use {', '.join(JUDGE_BACKENDS)}",
        )
        if self.judge["backend"] == "stub":
            from honestci.judges.backends.stub import STUB_RULES

            require(
                self.judge.get("rule") in STUB_RULES,
                "judge.rule",
                f"is {self.judge.get('rule')!r}; a stub judge needs one of {', '.join(STUB_RULES)}",
            )

    def _check_training_blocks(self) -> None:
        """Validate the reward_model and grpo blocks now (types, checks, trainer keys), not after the
        stages before them have run; the paths are stand-ins for the ones the pipeline sets."""
        from honestci.training.grpo import GRPOJob
        from honestci.training.reward_models import RewardModelJob

        stand_in = Path("pipeline-sets-this")
        rm_paths = {"human_pairs": self.human_pairs, "human_ratings": self.human_ratings}
        build_config(
            RewardModelJob,
            {**self.reward_model, **dict.fromkeys(("base_model", "output_dir", "vignettes", "responses"), stand_in)}
            | rm_paths
            | {"prompt": self.prompt},
            source="reward_model",
            block="reward_model",
        )
        build_config(
            GRPOJob,
            {**self.grpo, **dict.fromkeys(PIPELINE_OWNED_KEYS["grpo"], stand_in), "prompt": self.prompt},
            source="grpo",
            block="grpo",
        )


@dataclass(frozen=True)
class PipelineResult:
    """What the pipeline did: each stage's timing, the gates and whether figures were published."""

    output_dir: str
    stages: tuple[dict, ...]
    gates: tuple[GateResult, ...]
    required: tuple[str, ...]
    published: bool
    report: dict

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([g.as_row() | {"required": g.name in self.required} for g in self.gates])


def _stage(stages: list, name: str, started: float, **extra) -> None:
    stages.append({"stage": name, "seconds": round(time.perf_counter() - started, 2), **extra})


def _write_jsonl(frame: pd.DataFrame, path: Path) -> Path:
    from honestci.judges.tables import write_table

    records = [
        {k: (None if (isinstance(v, float) and v != v) else v) for k, v in row.items()}
        for row in frame.to_dict(orient="records")
    ]
    return write_table(records, path, list(frame.columns))


def _load(path: Path, table: str) -> pd.DataFrame:
    from honestci.audit.data.io import load_table

    return load_table(path, table).frame


def _load_optional(path: Path | None, table: str) -> pd.DataFrame | None:
    return None if path is None else _load(path, table)


def prepare_data(job: PipelineJob, data_dir: Path) -> dict[str, Path]:
    """Copy the inputs into the run folder; write the training text (``corpus``) and the held-out
    eval answers (the opponent's answers no human table references)."""
    prompt = resolve_prompt(job.prompt)
    data_dir.mkdir(parents=True, exist_ok=True)
    vignettes = _load(job.vignettes, "vignettes")
    responses = _load(job.responses, "responses")
    pairs, ratings, extra = (
        _load_optional(job.human_pairs, "human_pairs"),
        _load_optional(job.human_ratings, "human_ratings"),
        _load_optional(job.corpus, "corpus"),
    )
    rated = set()
    if pairs is not None:
        rated |= set(pairs["response_a"]) | set(pairs["response_b"])
    if ratings is not None:
        rated |= set(ratings["response_id"])
    opponent = responses[responses["system"] == job.opponent]
    heldout = opponent[~opponent["response_id"].isin(rated)]
    if heldout.empty:
        raise InputError(
            f"No held-out answers of the opponent {job.opponent!r}: every one is in a human table (training text).",
            fix="give opponent answers that the reward models do not train on",
        )
    if job.policy in set(responses["system"]):
        raise InputError(
            f"The responses table already has answers of the policy {job.policy!r}.",
            fix="name the policy anew: the pipeline generates its answers",
        )
    texts = dict(zip(responses["response_id"], responses["text"]))
    corpus = [
        {"doc_id": f"prompt-{v}", "text": prompt.user(t), "source": "task prompt"}
        for v, t in zip(vignettes["vignette_id"], vignettes["text"])
    ]
    corpus += [
        {"doc_id": f"rated-{r}", "text": texts[r], "source": "reward-model training answer"} for r in sorted(rated)
    ]
    if extra is not None:
        corpus += [
            {"doc_id": f"extra-{d}", "text": t, "source": s if isinstance(s, str) else "corpus"}
            for d, t, s in zip(extra["doc_id"], extra["text"], extra.get("source", [None] * len(extra)))
        ]
    paths = {
        "vignettes": _write_jsonl(vignettes, data_dir / "vignettes.jsonl"),
        "corpus": _write_jsonl(pd.DataFrame(corpus, columns=["doc_id", "text", "source"]), data_dir / "corpus.jsonl"),
        "eval_answers": _write_jsonl(heldout, data_dir / "eval_answers.jsonl"),
        "source_responses": _write_jsonl(responses, data_dir / "source_responses.jsonl"),
    }
    for name, frame in (("human_pairs", pairs), ("human_ratings", ratings)):
        if frame is not None:
            paths[name] = _write_jsonl(frame, data_dir / f"{name}.jsonl")
    return paths


def leakage_preflight(job: PipelineJob, paths: dict[str, Path], claim_path: Path, policy: Policy) -> GateResult:
    """Run the ``leakage`` check and gate on the training text against the held-out eval answers.

    Fails closed: raises :class:`PipelineRefused` when :mod:`honestci.audit.checks.leakage` cannot be
    imported, when its check cannot run on the pre-training data, or when its gate does not PASS.
    """
    # First: the gates (and the audit) import the leakage check too.
    try:
        from honestci.audit.checks.leakage import leakage_check
    except ModuleNotFoundError as exc:
        if exc.name != "honestci.audit.checks.leakage":
            raise
        raise PipelineRefused(
            "Refused: the leakage check (honestci.audit.checks.leakage) is not installed, so the training "
            "text cannot be checked against the held-out eval answers; nothing was trained."
        ) from None
    from honestci.audit.checks.context import AuditContext
    from honestci.audit.data.claims import Claim, ClaimSpec, tightened
    from honestci.audit.data.io import Study, load_table
    from honestci.audit.data.validation import LoadedTable
    from honestci.audit.gate_registry import run_gate

    data = {
        "vignettes": "vignettes.jsonl",
        "responses": "eval_answers.jsonl",
        "judgments": "judgments.jsonl",
        "corpus": "corpus.jsonl",
    }
    spec = ClaimSpec.model_validate(
        {
            "version": 1,
            "name": f"{job.name} (pre-training leakage check)",
            "policy": job.policy,
            "opponent": job.opponent,
            "bar": job.bar,
            "population": job.population,
            "data": data,
            "thresholds": job.thresholds,
        }
    )
    # The job's thresholds are the claim's: they may only tighten the built-in policy.
    claim = Claim(
        spec, claim_path, {k: claim_path.parent / v for k, v in data.items()}, tightened(policy, spec, claim_path)
    )
    # Nothing is judged before training: an empty judgments table (the loaders refuse empty files).
    empty_judgments = LoadedTable(
        "judgments",
        "<not judged yet>",
        "",
        pd.DataFrame(columns=["judge", "vignette_id", "response_first", "response_second", "verdict"]),
        np.zeros(0, int),
    )
    study = Study(
        vignettes=load_table(paths["vignettes"], "vignettes"),
        responses=load_table(paths["eval_answers"], "responses"),
        judgments=empty_judgments,
        corpus=load_table(paths["corpus"], "corpus"),
    )
    context = AuditContext(claim, study, None, None, claim.policy.gate_method(job.population), None, None, ())
    try:
        context.checks["leakage"] = leakage_check(context)
    except (AttributeError, TypeError) as exc:
        raise PipelineRefused(
            f"Refused: the leakage check could not run before training ({type(exc).__name__}: "
            f"{exc}); nothing was trained."
        ) from None
    gate = run_gate("leakage", context)
    if gate.verdict != Verdict.PASS:
        raise PipelineRefused(f"Refused before training: leakage gate {gate.verdict}: {gate.message}", [gate])
    return gate


def _contests(policy_rows: pd.DataFrame, eval_answers: pd.DataFrame):
    """Each policy answer against one held-out opponent answer of its vignette (round robin)."""
    from honestci.judges.schedule import Contest

    contests = []
    for vid, group in policy_rows.groupby("vignette_id", sort=True):
        opponents = sorted(eval_answers.loc[eval_answers["vignette_id"] == vid, "response_id"])
        if not opponents:
            raise InputError(
                f"Vignette {vid!r} has no held-out opponent answer to compare with.",
                fix="give the opponent an answer for every vignette",
            )
        for i, rid in enumerate(sorted(group["response_id"])):
            contests.append(Contest(vid, rid, opponents[i % len(opponents)]))
    return contests


def _calibration_contests(pairs: pd.DataFrame | None) -> list:
    """One contest per human-labelled unordered pair, so the judge is calibrated on the pairs humans
    labelled, with the same backend and template as the policy's contests (both orders each)."""
    from honestci.judges.schedule import Contest

    if pairs is None:
        return []
    seen: dict[tuple[str, str, str], None] = {}
    for vid, a, b in zip(pairs["vignette_id"], pairs["response_a"], pairs["response_b"]):
        seen.setdefault((str(vid), *sorted((str(a), str(b)))), None)  # type: ignore[arg-type]
    return [Contest(vid, a, b) for vid, a, b in seen]


CALIBRATION_RECORD_VERSION = 1


def _calibration_bindings(judge_name: str, template_sha256: str, paths: dict[str, Path], texts) -> dict[str, str]:
    """What a calibration record is bound to: the judge, the template, and the human data with the
    texts it labels (a change in any of them makes earlier calibration judgments stale)."""
    import hashlib

    from honestci.audit.data.io import load_table
    from honestci.judges.cache import canonical_json

    human = {k: load_table(paths[k], k).sha256 for k in ("human_pairs", "human_ratings") if k in paths}
    ids: set[str] = set()
    if "human_pairs" in paths:
        pairs = _load(paths["human_pairs"], "human_pairs")
        ids |= set(pairs["response_a"]) | set(pairs["response_b"])
    labelled = {rid: [texts.response_vignette[rid], texts.responses[rid]] for rid in sorted(ids)}
    scenarios = {vid: texts.vignettes[vid] for vid in sorted({v for v, _ in labelled.values()})}
    data = canonical_json({"human": human, "responses": labelled, "vignettes": scenarios})
    return {
        "judge": judge_name,
        "template_sha256": template_sha256,
        "human_data_sha256": hashlib.sha256(data.encode()).hexdigest(),
    }


def write_calibration_record(path: Path, bindings: dict[str, str], judgments: pd.DataFrame) -> Path:
    """The calibration judgments with what they are bound to (JSON), for ``judge.calibration_record``."""
    from honestci.reports.writing import atomic_write_text

    rows = json.loads(judgments.to_json(orient="records"))
    record = {"version": CALIBRATION_RECORD_VERSION, **bindings, "judgments": rows}
    return atomic_write_text(path, json.dumps(record, indent=1))


def load_calibration_record(path: Path, bindings: dict[str, str]) -> pd.DataFrame:
    """The calibration judgments of an earlier run, refused (InputError, exit 2) when stale: when the
    judge, the template or the human data (with the texts it labels) differ from this run's."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(
            f"judge.calibration_record {path}: cannot read it ({exc}).", fix="give a record a run wrote"
        ) from None
    if not isinstance(record, dict) or record.get("version") != CALIBRATION_RECORD_VERSION:
        raise InputError(
            f"judge.calibration_record {path}: not a version-{CALIBRATION_RECORD_VERSION} calibration record.",
            fix="give the data/calibration_record.json an earlier pipeline run wrote",
        )
    stale = [f"{k} is {record.get(k)!r} there, {v!r} here" for k, v in bindings.items() if record.get(k) != v]
    if stale:
        raise InputError(
            f"judge.calibration_record {path} is stale: " + "; ".join(stale) + ".",
            fix="calibrate again: drop judge.calibration_record so the run judges the human-labelled pairs",
        )
    return pd.DataFrame(record["judgments"])


def _judge_name(judge: dict, seed: int, base: Path) -> str:
    """The name the configured judge's backend writes into its judgments, without loading a model."""
    if judge["backend"] == "stub":
        from honestci.judges.run import Texts

        return _judge_backend(judge, seed, base, Texts({}, {}, {})).judge_name
    if judge["backend"] == "transformers":
        return str(judge.get("name") or Path(judge["model_path"]).name)
    return str(judge["model"])


def _judge_backend(judge: dict, seed: int, base: Path, texts):
    backend = judge["backend"]
    if backend == "stub":
        from honestci.judges.backends.stub import StubBackend

        return StubBackend(
            judge["rule"],
            texts.responses,
            _nested_path(judge.get("recorded"), base),
            judge.get("recorded_judge"),
            agreement=float(judge.get("agreement", 1.0)),
            seed=seed,
        )
    if backend == "transformers":
        from honestci.judges.backends.transformers_local import TransformersBackend

        return TransformersBackend(
            judge["model_path"], device=judge.get("device", "cpu"), judge_name=judge.get("name"), seed=seed
        )
    from honestci.judges.backends.openai_http import OpenAICompatibleBackend

    return OpenAICompatibleBackend(
        judge["base_url"],
        judge["model"],
        api_key_env=judge.get("api_key_env", "OPENAI_API_KEY"),
        concurrency=int(judge.get("concurrency", 8)),
        seed=seed,
    )


def write_claim(job: PipelineJob, data_dir: Path, tables: dict[str, str], training_log: Path, policy: Policy) -> Path:
    """The audit's claim (YAML) in ``data_dir``, naming a copy of the training log beside it."""
    import yaml

    # The claim adds the job's and the pipeline's own gates to the policy's (a claim may only add
    # gates); with `bayes: false` the audit does not ask for the sampler's gate.
    required = list(dict.fromkeys([*policy.required_gates, *(job.required_gates or ()), *PIPELINE_GATES]))
    shutil.copyfile(training_log, data_dir / "training_log.jsonl")
    claim = {
        "version": 1,
        "name": job.name,
        "policy": job.policy,
        "opponent": job.opponent,
        "judge": None,
        "metric": "winrate",
        "bar": job.bar,
        "population": job.population,
        "data": tables,
        "training_log": "training_log.jsonl",
        "required_gates": required,
        "thresholds": dict(job.thresholds),
    }
    path = data_dir / "claim.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False), encoding="utf-8")
    return path


def publish_figures(
    verdict: dict,
    gates: Sequence[GateResult],
    required: Sequence[str],
    model_card: Path,
    stub_judge: str | None = None,
) -> Path:
    """Write the model-card figures (between honestci markers) only when every required gate passes.

    ``stub_judge`` (the stub's own description) heads the figures with a warning that the judge was a
    stub, so a dry run's card cannot pass for a real evaluation. Raises :class:`PipelineRefused`
    (the card is left untouched) when a required gate did not pass.
    """
    from honestci.reports.markdown import model_card_section
    from honestci.reports.writing import atomic_write_text

    required_names = set(required)
    blocking = [g for g in gates if g.name in required_names and g.verdict != Verdict.PASS]
    missing = sorted(required_names - {g.name for g in gates})
    if blocking or missing:
        reasons = [f"{g.name} {g.verdict}: {g.message}" for g in blocking] + [f"{m}: not run" for m in missing]
        raise PipelineRefused(
            "Refused: no figures were written into the model card because required gate(s) "
            "did not pass:\n  - " + "\n  - ".join(reasons),
            blocking,
        )
    warning = (
        ""
        if stub_judge is None
        else f"**Dry run: the judge was {stub_judge}. These figures test the pipeline; they say nothing "
        "about the policy.**\n\n"
    )
    block = f"{CARD_START}\n{warning}{model_card_section(verdict)}\n{CARD_END}"
    text = model_card.read_text(encoding="utf-8") if model_card.is_file() else ""
    if CARD_START in text and CARD_END in text:
        head, rest = text.split(CARD_START, 1)
        text = head + block + rest.split(CARD_END, 1)[1]
    else:
        text = text + ("\n\n" if text and not text.endswith("\n\n") else "") + block + "\n"
    return atomic_write_text(model_card, text)


def load_pipeline_job(
    path: str | Path, overrides: Sequence[str] = (), policy: Policy | None = None
) -> tuple[PipelineJob, Path]:
    """The job of the config ``path`` with ``overrides``, and the folder its relative paths start from.

    Its ``thresholds`` (from the file or ``--set thresholds.X=...``) are the claim's, judged by
    ``policy`` (the built-in one when None): a threshold that is unknown, of the wrong type, or moved
    the lax way (:func:`honestci.audit.policy.loosening`) is refused now, before any data is prepared.
    Raises :class:`~honestci.training.config.TrainingConfigError` naming ``thresholds.X`` (exit 2).
    """
    job = load_config(PipelineJob, path, overrides)
    thresholds = (policy or Policy()).thresholds
    problems = [
        Problem(str(path), None, f"thresholds.{name}", reason)
        for name, value in job.thresholds.items()
        if (
            reason := (
                f"{name} is not a threshold (audit/policy.py Thresholds)"
                if name not in Thresholds.__dataclass_fields__
                else threshold_problem(name, value) or loosening(thresholds, name, value)
            )
        )
        is not None
    ]
    if problems:
        refuse_keys(
            problems,
            "a pipeline's thresholds may only tighten the policy's; an auditor may loosen one in a policy file "
            "(--policy)",
            path,
        )
    return job, Path(path).resolve().parent


def _nested_path(value, base: Path) -> Path | None:
    if value is None:
        return None
    value = Path(str(value)).expanduser()
    return value if value.is_absolute() else base / value


def run_pipeline(
    config_path: str | Path,
    overrides: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _: None,
    policy: Policy | None = None,
) -> PipelineResult:
    """Run every stage; raise :class:`PipelineRefused` when a gate blocks (the report is still written).

    ``policy`` is the auditor's (the built-in one when None): the job's ``thresholds`` are the
    claim's, and may only tighten it.
    """
    policy = policy or Policy()
    job, base = load_pipeline_job(config_path, overrides, policy)
    out = Path(job.output_dir)
    data_dir = out / "data"
    stages: list[dict] = []
    started = time.perf_counter()
    paths = prepare_data(job, data_dir)
    claim_path = data_dir / "claim.yaml"
    progress("checking the training text for leakage of held-out eval answers")
    leakage_gate = leakage_preflight(job, paths, claim_path, policy)
    _stage(stages, "leakage check", started, verdict=str(leakage_gate.verdict))

    # Imported only now: the audit imports the leakage check, whose absence the preflight refuses.
    from honestci.judges.prompts import DEFAULT_TEMPLATE, get_template
    from honestci.judges.run import load_texts

    # The judge's calibration record (if given) is checked now, before anything is trained: a stale
    # one stops the run (exit 2). Every response a human labelled is in the source responses.
    judge = {**job.judge}
    if judge.get("model_path"):
        judge["model_path"] = _nested_path(judge["model_path"], base)
    template = get_template(judge.get("template") or DEFAULT_TEMPLATE)
    bindings = _calibration_bindings(
        _judge_name(judge, job.seed, base),
        template.sha256,
        paths,
        load_texts(paths["vignettes"], paths["source_responses"]),
    )
    record_path = _nested_path(judge.get("calibration_record"), base)
    recorded = None if record_path is None else load_calibration_record(record_path, bindings)

    _reward_model_stage(job, paths, out, f"{config_path}", stages, progress)
    grpo_run = _grpo_stage(job, paths, out, f"{config_path}", stages, progress)
    policy_rows, responses_path = _generation_stage(job, paths, out, f"{config_path}", stages, progress)
    backend, judge_note = _judging_stage(
        job,
        base,
        judge,
        template,
        paths,
        responses_path,
        policy_rows,
        calibration=(bindings, recorded, record_path),
        stages=stages,
        progress=progress,
    )
    return _audit_and_publish(job, out, paths, grpo_run, policy, stages, backend, judge_note, progress)


def _reward_model_stage(job: PipelineJob, paths: dict, out: Path, config: str, stages: list, progress) -> None:
    """Train the reward-model ensemble on the source responses and the human labels."""
    from honestci.training.reward_models import RewardModelJob, train_reward_models

    started = time.perf_counter()
    rm_job = build_config(
        RewardModelJob,
        {
            **job.reward_model,
            "base_model": job.base_model,
            "output_dir": out / "reward_model",
            "vignettes": paths["vignettes"],
            "responses": paths["source_responses"],
            "human_pairs": paths.get("human_pairs"),
            "human_ratings": paths.get("human_ratings"),
            "prompt": job.prompt,
        },
        source=f"{config}: reward_model",
    )
    rm_run = train_reward_models(rm_job, progress)
    _stage(
        stages,
        "reward models",
        started,
        members=len(rm_run.members),
        seconds_per_step=[round(m.seconds_per_step, 3) for m in rm_run.members],
        heldout_accuracy=rm_run.accuracy[-1].__dict__,
    )


def _grpo_stage(job: PipelineJob, paths: dict, out: Path, config: str, stages: list, progress):
    """Train the policy by GRPO against the reward models; its run (the training log among it)."""
    from honestci.training.grpo import GRPOJob, train_grpo

    started = time.perf_counter()
    grpo_values = {
        **job.grpo,
        "model": job.base_model,
        "reward_model": out / "reward_model",
        "vignettes": paths["vignettes"],
        "output_dir": out / "policy",
        "prompt": job.prompt,
    }
    grpo_run = train_grpo(build_config(GRPOJob, grpo_values, source=f"{config}: grpo"), progress)
    _stage(
        stages,
        "GRPO",
        started,
        steps=grpo_run.steps,
        seconds_per_step=round(grpo_run.seconds_per_step, 3),
        gated_out=grpo_run.n_gated_out,
        prompt=grpo_run.prompt_name,
        prompt_sha256=grpo_run.prompt_sha256,
        unfinished_think=grpo_run.n_unfinished_think,
    )
    return grpo_run


def _generation_stage(
    job: PipelineJob, paths: dict, out: Path, config: str, stages: list, progress
) -> tuple[pd.DataFrame, Path]:
    """The trained policy's answers to the held-out vignettes, and the responses table with them."""
    from honestci.training.generate import GenerationJob, generate_responses

    started = time.perf_counter()
    data_dir = out / "data"
    generation = {
        "backend": "transformers",
        **job.generation,
        "system": job.policy,
        "vignettes": paths["vignettes"],
        "out": data_dir / "policy_responses.jsonl",
        "pool": "heldout",
        "prompt": job.prompt,
    }
    if generation["backend"] == "transformers":
        generation.setdefault("model_path", out / "policy")
    gen_run = generate_responses(build_config(GenerationJob, generation, source=f"{config}: generation"), progress)
    policy_rows = _load(Path(gen_run.out), "responses")
    source = _load(paths["source_responses"], "responses")
    responses_path = _write_jsonl(pd.concat([source, policy_rows], ignore_index=True), data_dir / "responses.jsonl")
    _stage(
        stages,
        "generation",
        started,
        n=gen_run.n_rows,
        base_seed=gen_run.base_seed,
        empty=gen_run.n_empty_answers,
        unfinished_think=gen_run.n_unfinished_think,
    )
    return policy_rows, responses_path


def _judging_stage(
    job: PipelineJob,
    base,
    judge: dict,
    template,
    paths: dict,
    responses_path: Path,
    policy_rows,
    *,
    calibration,
    stages,
    progress,
):
    """Judge the policy's answers against the eval answers (and, without a calibration record, the
    human-labelled pairs); ``calibration`` is (bindings, the recorded judgments or None, the record's
    path or None). The backend and its note."""
    from honestci.judges.run import load_texts, run_judging

    bindings, recorded, record_path = calibration
    data_dir = Path(job.output_dir) / "data"
    started = time.perf_counter()
    texts = load_texts(paths["vignettes"], responses_path)
    backend = _judge_backend(judge, job.seed, base, texts)
    calibration = (
        [] if recorded is not None else _calibration_contests(_load_optional(paths.get("human_pairs"), "human_pairs"))
    )
    contests = _contests(policy_rows, _load(paths["eval_answers"], "responses"))
    judgments_path = data_dir / "judgments.jsonl"
    summary = run_judging(
        contests + calibration,
        texts,
        backend,
        template,
        judgments_path,
        seed=job.seed,
        sampling={"temperature": float(judge.get("temperature", 0.0)), "max_tokens": int(judge.get("max_tokens", 512))},
        progress=progress,
    )
    judged = _load(judgments_path, "judgments")
    policy_ids = set(policy_rows["response_id"])
    is_calibration = ~(judged["response_first"].isin(policy_ids) | judged["response_second"].isin(policy_ids))
    if recorded is not None:
        judged = pd.concat([judged, recorded], ignore_index=True)
        _write_jsonl(judged, judgments_path)
    else:
        write_calibration_record(data_dir / "calibration_record.json", bindings, judged[is_calibration])
    judge_note = getattr(backend, "describe", lambda: None)()
    _stage(
        stages,
        "judging",
        started,
        judge=backend.judge_name,
        judgments=summary.n_jobs,
        invalid=summary.n_invalid,
        calibration_judgments=int(is_calibration.sum()) if recorded is None else len(recorded),
        calibration_from=str(record_path) if record_path is not None else "judged in this run",
        **({"stub": judge_note} if judge_note else {}),
    )

    return backend, judge_note


def _audit_and_publish(
    job: PipelineJob, out: Path, paths: dict, grpo_run, policy: Policy, stages: list, backend, judge_note, progress
) -> PipelineResult:
    """Audit the claim the run makes, write the report and the training-health plot beside it, then
    publish the model card or refuse (:class:`PipelineRefused`); ``pipeline.json`` is written either way."""
    from honestci.audit.checks.training_health import assess_training_log
    from honestci.audit.pipeline import run_audit
    from honestci.audit.report_model import Report, json_safe
    from honestci.reports.plots import training_health_svg
    from honestci.reports.render import write_report

    data_dir = out / "data"
    started = time.perf_counter()
    tables = {
        "vignettes": "vignettes.jsonl",
        "responses": "responses.jsonl",
        "judgments": "judgments.jsonl",
        "corpus": "corpus.jsonl",
    } | {k: f"{k}.jsonl" for k in ("human_pairs", "human_ratings") if k in paths}
    claim_path = write_claim(job, data_dir, tables, Path(grpo_run.training_log), policy)
    result = run_audit(claim_path, policy=policy, bayes=job.bayes, seed=job.seed, progress=progress)
    gates = list(result.gates)
    report_dir = out / "report"
    verdict = json_safe(result.to_dict())
    written = write_report(Report.from_dict(verdict), report_dir)
    # The same assessment the audit's check made, kept for the plot beside the report.
    thresholds = load_claim(claim_path, policy=policy).thresholds
    health = assess_training_log(data_dir / "training_log.jsonl", thresholds)
    svg = training_health_svg(
        health.steps,
        health.series,
        health.window,
        str(health.verdict),
        {"kl": thresholds.training_max_kl, "entropy": thresholds.training_min_entropy},
    )
    (report_dir / "training_health.svg").write_text(svg, encoding="utf-8")
    _stage(stages, "audit", started, verdict=str(result.verdict), report=str(written["md"]))

    published = False
    summary_path = out / "pipeline.json"
    try:
        if job.model_card is not None:
            publish_figures(verdict, gates, result.required_gates, job.model_card, judge_note)
            published = True
        else:
            blocking = [g for g in gates if g.name in result.required_gates and g.verdict != Verdict.PASS]
            if blocking:
                raise PipelineRefused(
                    "Refused: required gate(s) did not pass:\n  - "
                    + "\n  - ".join(f"{g.name} {g.verdict}: {g.message}" for g in blocking),
                    blocking,
                )
    finally:
        record = {
            "name": job.name,
            "stages": stages,
            "published": published,
            "judge": backend.judge_name,
            "gates": [g.as_row() | {"required": g.name in result.required_gates} for g in gates],
            "report": {k: str(v) for k, v in written.items()},
        }
        summary_path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    return PipelineResult(
        str(out),
        tuple(stages),
        tuple(gates),
        tuple(result.required_gates),
        published,
        {k: str(v) for k, v in written.items()},
    )
