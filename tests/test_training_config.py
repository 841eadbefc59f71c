"""Training config integrity: no override steps around a job-level check, and a cut thinking trace has no answer.

Every bypass found is refused with exit 2 naming the key, through the real command line
(``honestci train grpo|rm CONFIG --set ...``, ``honestci pipeline CONFIG --set ...``): the configs are
validated when they are read, before any extra is needed or any model is loaded, so nothing trains.
The reward function's think handling runs with a recording ensemble (no torch).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from honestci.audit.cli import main
from honestci.audit.errors import InputError
from honestci.training.config import TrainingConfigError, field_help, load_config
from honestci.training.grpo import (
    GRPO_OWNED_TRAINER_KEYS,
    GRPO_TRAINER_KEYS,
    REWARD_LOG,
    GatedEnsembleReward,
    GRPOJob,
    check_reward_prompt,
    template_opens_think,
)
from honestci.training.pipeline import PIPELINE_OWNED_KEYS, load_pipeline_job
from honestci.training.reward_models import RM_OWNED_TRAINER_KEYS, RM_TRAINER_KEYS, RewardModelJob
from honestci.training.task import GATE_REASONS, PROMPT_PRESETS, check_completion, extract_answer, unfinished_think

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "training" / "configs"


def _refused(args: list[str], key: str, why: str = "") -> str:
    """Run the CLI; it must exit 2 naming ``key`` (and saying ``why``, when given) in its first line."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert re.search(rf"'{re.escape(key)}'", result.output), f"{key!r} not named in:\n{result.output}"
    first, config = result.output.strip().splitlines()[0], next(a for a in args if a.endswith(".yaml"))
    assert key in first and config in first and why in first, first
    return result.output


@pytest.mark.parametrize(
    ("override", "key"),
    [
        # trainer: keys that shadow the job's own checked keys (beta, G, the vLLM mode, precision, ...)
        ("trainer.beta=0", "trainer.beta"),
        ("trainer.num_generations=1", "trainer.num_generations"),
        ("trainer.vllm_mode=colocate", "trainer.vllm_mode"),
        ("trainer.use_vllm=false", "trainer.use_vllm"),
        ("trainer.temperature=0", "trainer.temperature"),
        ("trainer.max_completion_length=100000", "trainer.max_completion_length"),
        ("trainer.bf16=false", "trainer.bf16"),
        # trainer: keys that would undo a check without shadowing a field
        ("trainer.fp16=true", "trainer.fp16"),
        ("trainer.sync_ref_model=true", "trainer.sync_ref_model"),
        ("trainer.ref_model_mixup_alpha=1.0", "trainer.ref_model_mixup_alpha"),
        ("trainer.reward_weights=[0.0]", "trainer.reward_weights"),
        ("trainer.use_cpu=true", "trainer.use_cpu"),
        # type coercions that passed the checks: true > 0, "false" is truthy, inf > 0
        ("beta=true", "beta"),
        ("beta=.inf", "beta"),
        ("beta=null", "beta"),
        ("beta='0.04'", "beta"),
        ('use_vllm="false"', "use_vllm"),
        ("num_generations=2.5", "num_generations"),
        ("trainer=[1]", "trainer"),
        # the reward definition: a failed format must not earn more than an average answer
        ("format_penalty=0", "format_penalty"),
        ("format_penalty=0.5", "format_penalty"),
        ("beta=0", "beta"),
        # issue 32: beta at the policy floor (MIN_KL_BETA), the job's sampling and batch, reward scaling
        ("beta=1e-9", "beta"),
        ("beta=0.009", "beta"),
        ("trainer.generation_kwargs={max_new_tokens: 100000}", "trainer.generation_kwargs"),
        ("trainer.generation_kwargs={do_sample: false}", "trainer.generation_kwargs"),
        ("trainer.generation_kwargs={temperature: 0.0}", "trainer.generation_kwargs"),
        ("trainer.chat_template_kwargs={enable_thinking: false}", "trainer.chat_template_kwargs"),
        ("trainer.generation_batch_size=7", "trainer.generation_batch_size"),
        ("trainer.steps_per_generation=3", "trainer.steps_per_generation"),
        ("trainer.scale_rewards=false", "trainer.scale_rewards"),
        ("trainer.epsilon=10", "trainer.epsilon"),
        ("trainer.top_k=1", "trainer.top_k"),
        # issue 32: the trainer block is an allowlist; the rest of the sampling, the objective and the
        # keys that would undo the truncation penalty, the health log or a seed study are refused by name
        ("trainer.top_p=0.5", "trainer.top_p"),
        ("trainer.min_p=0.5", "trainer.min_p"),
        ("trainer.repetition_penalty=2.0", "trainer.repetition_penalty"),
        ("trainer.epsilon_high=10", "trainer.epsilon_high"),
        ("trainer.loss_type=dr_grpo", "trainer.loss_type"),
        ("trainer.num_iterations=4", "trainer.num_iterations"),
        ("trainer.mask_truncated_completions=true", "trainer.mask_truncated_completions"),
        ("trainer.logging_strategy=epoch", "trainer.logging_strategy"),
        ("trainer.data_seed=7", "trainer.data_seed"),
        ("trainer.output_dir=/tmp/elsewhere", "trainer.output_dir"),
        ("trainer.save_steps=1", "trainer.save_steps"),
        ("trainer.gradient_accumulation_steps=5", "trainer.gradient_accumulation_steps"),
        ("trainer.num_train_epochs=3", "trainer.num_train_epochs"),
        ("trainer.vllm_structured_outputs_regex='a+'", "trainer.vllm_structured_outputs_regex"),
        ("trainer.no_such_key=1", "trainer.no_such_key"),
        ("trainer.vllm_max_model_length=1024", "trainer.vllm_max_model_length"),  # the recipe's completions: 1024
        # the prompt: an unknown preset, an empty system prompt
        ("prompt=cards", "prompt"),
        ("prompt={system: '', user_template: '{scenario}'}", "prompt.system"),
    ],
)
def test_train_grpo_refuses_every_bypass_naming_the_key(override, key):
    _refused(["train", "grpo", str(CONFIGS / "grpo.yaml"), "--set", override], key)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.seed=1", "trainer.seed"),  # one trainer seed for every member: repeated members
        ("trainer.output_dir=/tmp/elsewhere", "trainer.output_dir"),
        ("trainer.learning_rate=0", "trainer.learning_rate"),
        # issue 32: the trainer block is an allowlist
        ("trainer.data_seed=1", "trainer.data_seed"),  # one data order for every member
        ("trainer.center_rewards_coefficient=0.5", "trainer.center_rewards_coefficient"),
        ("trainer.save_steps=1", "trainer.save_steps"),
        ("trainer.disable_dropout=false", "trainer.disable_dropout"),
        ("trainer.no_such_key=1", "trainer.no_such_key"),
        ("seeds=[0, true]", "seeds"),
        ("ensemble_lambda=.nan", "ensemble_lambda"),
        ("prompt={system: s, user_template: 'Scenario: {scenario} for {name}'}", "prompt.user_template"),
        ("prompt={system: s, user_template: 'no scenario field'}", "prompt.user_template"),
    ],
)
def test_train_rm_refuses_every_bypass_naming_the_key(override, key):
    _refused(["train", "rm", str(CONFIGS / "rm_ensemble.yaml"), "--set", override], key)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("grpo.trainer.beta=0", "grpo.trainer.beta"),
        ("grpo.beta=0", "grpo.beta"),
        ("grpo.model=/elsewhere", "grpo.model"),
        ("reward_model.trainer.seed=3", "reward_model.trainer.seed"),
        ("reward_model.vignettes=/elsewhere.jsonl", "reward_model.vignettes"),
        ("generation.out=/tmp/x.jsonl", "generation.out"),
        # one prompt for every stage: the pipeline's own
        ("grpo.prompt=card", "grpo.prompt"),
        ("reward_model.prompt=card", "reward_model.prompt"),
        ("generation.prompt=card", "generation.prompt"),
        ("prompt=cards", "prompt"),
        # issue 32: the β floor, the format penalty and the trainer allowlist inside the grpo block
        ("grpo.beta=0.009", "grpo.beta"),
        ("grpo.format_penalty=0", "grpo.format_penalty"),
        ("grpo.trainer.generation_kwargs={max_new_tokens: 64}", "grpo.trainer.generation_kwargs"),
        ("grpo.trainer.no_such_key=1", "grpo.trainer.no_such_key"),
        ("reward_model.trainer.data_seed=1", "reward_model.trainer.data_seed"),
        # issue 32: a loosening threshold, refused when the config is read (no data prepared)
        ("thresholds.min_clusters=2", "thresholds.min_clusters"),
        ("thresholds.confidence_level=0.5", "thresholds.confidence_level"),
        ("thresholds.training_max_kl=1000.0", "thresholds.training_max_kl"),
        ("thresholds.leakage_near_duplicate_jaccard=1.01", "thresholds.leakage_near_duplicate_jaccard"),
        ("thresholds.default_population=these_vignettes", "thresholds.default_population"),
        ("thresholds.no_such_threshold=1", "thresholds.no_such_threshold"),
        ("thresholds.min_clusters=true", "thresholds.min_clusters"),
    ],
)
def test_pipeline_refuses_bypasses_in_its_stage_blocks_before_any_stage_runs(override, key, tmp_path):
    args = ["pipeline", str(CONFIGS / "pipeline_cpu_tiny.yaml"), "--set", f"output_dir={tmp_path / 'run'}"]
    _refused([*args, "--set", override], key)
    assert not (tmp_path / "run").exists()


def test_a_loosening_threshold_in_the_pipeline_file_is_refused_before_any_data_is_prepared(tmp_path):
    """The file's own ``thresholds:`` block, not only ``--set``; the message names the file and the key."""
    text = (CONFIGS / "pipeline_cpu_tiny.yaml").read_text(encoding="utf-8").replace("../../", f"{ROOT}/")
    config = tmp_path / "pipeline.yaml"
    config.write_text(text + "thresholds: {min_clusters: 5, training_min_steps: 1}\n", encoding="utf-8")
    output = _refused(
        ["pipeline", str(config), "--set", f"output_dir={tmp_path / 'run'}"], "thresholds.training_min_steps"
    )
    assert "loosens the policy's 10" in output and "min_clusters" not in output  # an equal value is no loosening
    assert not (tmp_path / "run").exists()


def test_pipeline_thresholds_are_judged_by_the_auditors_policy():
    """What loosens is read against --policy: the fixture policy's Jaccard 1.01 may be restated, not exceeded."""
    from honestci.audit.data.policy_file import load_policy

    fixture_policy = load_policy(CONFIGS / "policy_tiny_fixture.yaml")
    same = ["thresholds.leakage_near_duplicate_jaccard=1.01", "thresholds.min_clusters=6"]
    job, _ = load_pipeline_job(CONFIGS / "pipeline_cpu_tiny.yaml", same, fixture_policy)
    assert job.thresholds == {"leakage_near_duplicate_jaccard": 1.01, "min_clusters": 6}
    with pytest.raises(TrainingConfigError, match="thresholds.leakage_near_duplicate_jaccard"):
        load_pipeline_job(CONFIGS / "pipeline_cpu_tiny.yaml", same)  # the built-in policy's is stricter
    with pytest.raises(TrainingConfigError, match="thresholds.leakage_near_duplicate_jaccard"):
        load_pipeline_job(
            CONFIGS / "pipeline_cpu_tiny.yaml", ["thresholds.leakage_near_duplicate_jaccard=1.5"], fixture_policy
        )


def _ensemble_folder(folder: Path, prompt: dict | None) -> Path:
    """An ensemble.json recording ``prompt`` (no member weights: the prompt is checked before any load)."""
    folder.mkdir(parents=True)
    manifest = {"kind": "bradley_terry", "ensemble_lambda": 0.5, "members": [{"path": "member-seed0"}]}
    (folder / "ensemble.json").write_text(json.dumps(manifest | ({"prompt": prompt} if prompt else {})))
    return folder


@pytest.mark.parametrize("route", ["dry run", "training"])
def test_grpo_refuses_a_reward_model_trained_under_another_prompt(route, tmp_path):
    if route == "training":
        pytest.importorskip("trl")
    rm = _ensemble_folder(tmp_path / "rm", PROMPT_PRESETS["honestci"].record())
    (tmp_path / "base").mkdir()
    sets = [f"model={tmp_path / 'base'}", f"reward_model={rm}", f"output_dir={tmp_path / 'out'}", "prompt=card"]
    args = ["train", "grpo", str(CONFIGS / ("grpo.yaml" if route == "dry run" else "grpo_cpu_tiny.yaml"))]
    args += [a for s in sets for a in ("--set", s)]
    args += ["--dry-run", "--gpus", "1", "--model-preset", "qwen3-4b"] if route == "dry run" else []
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "'prompt'" in result.output, result.output
    honestci, card = PROMPT_PRESETS["honestci"].sha256[:12], PROMPT_PRESETS["card"].sha256[:12]
    assert f"'card' (sha256 {card}" in result.output and f"'honestci' (sha256 {honestci}" in result.output
    assert not (tmp_path / "out").exists()
    # The same prompt passes the check; an ensemble that records none is refused, not guessed.
    assert check_reward_prompt(load_config(GRPOJob, CONFIGS / "grpo_cpu_tiny.yaml", [f"reward_model={rm}"])).name == (
        "honestci"
    )
    old = _ensemble_folder(tmp_path / "old-rm", None)
    with pytest.raises(InputError, match="records no prompt"):
        check_reward_prompt(load_config(GRPOJob, CONFIGS / "grpo_cpu_tiny.yaml", [f"reward_model={old}"]))


def test_allowed_overrides_still_load():
    job = load_config(
        GRPOJob,
        CONFIGS / "grpo.yaml",
        ["trainer.warmup_steps=0.1", "bf16=null", "ensemble_lambda=null", "learning_rate=1", "beta=0.1"],
    )
    assert job.trainer == {"warmup_steps": 0.1} and job.bf16 is None and job.learning_rate == 1 and job.beta == 0.1
    assert job.thinking  # the card's policy is a thinking model
    assert job.chat_prompt.name == "card"  # the card's recipe, in the card's own words
    rm = load_config(RewardModelJob, CONFIGS / "rm_ensemble.yaml", ["trainer.weight_decay=0.01", "seeds=[3, 4]"])
    assert rm.trainer == {"weight_decay": 0.01} and rm.seeds == (3, 4) and rm.chat_prompt.name == "card"
    assert load_pipeline_job(CONFIGS / "pipeline_cpu_tiny.yaml", ["grpo.trainer.warmup_steps=0.1"])[0].grpo["trainer"]


def test_owned_trainer_keys_are_real_trl_keys_and_not_job_fields():
    """A refused key that TRL does not have would be dead weight; one that is a field is refused anyway."""
    trl = pytest.importorskip("trl")
    for owned, schema, config in (
        (GRPO_OWNED_TRAINER_KEYS, GRPOJob, trl.GRPOConfig),
        (RM_OWNED_TRAINER_KEYS, RewardModelJob, trl.RewardConfig),
    ):
        assert set(owned) <= set(config.__dataclass_fields__)
        assert not set(owned) & {f.name for f in dataclasses.fields(schema)}


def test_the_trainer_allowlists_are_real_keys_the_job_neither_sets_nor_owns():
    """Every allowed key is one TRL's config takes (the reward models': both the Bradley-Terry and the
    regression head's), none is a job field or a key the job owns, and the sampling, reward and KL keys
    issue 32 found are not on it."""
    trl = pytest.importorskip("trl")
    transformers = pytest.importorskip("transformers")
    for allowed, owned, schema, configs in (
        (GRPO_TRAINER_KEYS, GRPO_OWNED_TRAINER_KEYS, GRPOJob, (trl.GRPOConfig,)),
        (RM_TRAINER_KEYS, RM_OWNED_TRAINER_KEYS, RewardModelJob, (trl.RewardConfig, transformers.TrainingArguments)),
    ):
        for config in configs:
            assert set(allowed) <= set(config.__dataclass_fields__), set(allowed) - set(config.__dataclass_fields__)
        assert not set(allowed) & ({f.name for f in dataclasses.fields(schema)} | set(owned))
        assert all(allowed.values())  # each key says why it is allowed
    shaping = {"generation_kwargs", "top_k", "top_p", "temperature", "scale_rewards", "epsilon", "beta", "seed"}
    assert not shaping & (set(GRPO_TRAINER_KEYS) | set(RM_TRAINER_KEYS))


@pytest.mark.parametrize("key", sorted(GRPO_TRAINER_KEYS))
def test_every_allowed_grpo_trainer_key_loads(key):
    value = 4096 if key == "vllm_max_model_length" else 1  # a context window must exceed the completions
    assert key in load_config(GRPOJob, CONFIGS / "grpo.yaml", [f"trainer.{key}={value}"]).trainer


@pytest.mark.parametrize("key", sorted(RM_TRAINER_KEYS))
def test_every_allowed_rm_trainer_key_loads(key):
    assert key in load_config(RewardModelJob, CONFIGS / "rm_ensemble.yaml", [f"trainer.{key}=1"]).trainer


def test_every_field_has_help_and_is_documented_with_the_refused_keys():
    doc = (ROOT / "docs" / "training-config.md").read_text(encoding="utf-8")
    for schema in (GRPOJob, RewardModelJob):
        for name, text in field_help(schema).items():
            assert text, f"{schema.__name__}.{name} has no help text"
            assert f"| `{name}` |" in doc, f"{schema.__name__}.{name} is not in docs/training-config.md"
    for key in [*GRPO_OWNED_TRAINER_KEYS, *RM_OWNED_TRAINER_KEYS, *GRPO_TRAINER_KEYS, *RM_TRAINER_KEYS]:
        assert f"`trainer.{key}`" in doc, key
    for block, keys in PIPELINE_OWNED_KEYS.items():
        for key in keys:
            assert f"`{block}.{key}`" in doc, (block, key)


def test_a_trainer_block_that_is_not_a_mapping_is_refused():
    with pytest.raises(TrainingConfigError, match="trainer"):
        load_config(GRPOJob, CONFIGS / "grpo.yaml", ["trainer=null"])


# --- think handling ---------------------------------------------------------------------------

TRUNCATED = "<think>The friend forgot the birthday, which hurts, but maybe they"  # cut at the token limit
TRUNCATED_PROMPT_OPENED = "The friend forgot the birthday, which hurts, but maybe they"  # template opened <think>
FINISHED = "<think>Hurt; kinder reading: busy week.</think>\n\nMaybe they had a hard week. You matter to them."


@pytest.mark.parametrize(
    ("output", "thinking", "unfinished", "answer"),
    [
        (TRUNCATED, False, True, ""),
        (TRUNCATED, True, True, ""),
        (TRUNCATED_PROMPT_OPENED, True, True, ""),
        (TRUNCATED_PROMPT_OPENED, False, False, TRUNCATED_PROMPT_OPENED),  # a non-thinking model's answer
        ("trace opened in the prompt</think> Maybe they were busy.", True, False, "Maybe they were busy."),
        (FINISHED, True, False, "Maybe they had a hard week. You matter to them."),
        ("<think>a</think>Maybe. <think>second trace never closed", True, True, ""),
    ],
)
def test_a_trace_cut_before_think_close_has_no_answer(output, thinking, unfinished, answer):
    assert unfinished_think(output, thinking=thinking) is unfinished
    assert extract_answer(output, thinking=thinking) == answer
    got, gate = check_completion(output, 2, thinking=thinking)
    assert got == answer
    assert (gate.reason == "unfinished_think") is unfinished and (not gate.passed if unfinished else True)


@dataclasses.dataclass
class _RecordingEnsemble:
    """Scores every answer 1.0 and records what it was asked (a truncated trace must never reach it)."""

    asked: list = dataclasses.field(default_factory=list)

    def score(self, scenarios, answers):
        self.asked.extend(answers)
        return type("Scores", (), {"reward": [1.0] * len(answers)})()


def test_reward_function_penalises_and_counts_truncated_traces(tmp_path):
    ensemble = _RecordingEnsemble()
    reward = GatedEnsembleReward(ensemble, penalty=-3.0, thinking=True, log_path=tmp_path / REWARD_LOG)
    completions = [[{"role": "assistant", "content": c}] for c in (TRUNCATED_PROMPT_OPENED, TRUNCATED, FINISHED)]
    rewards = reward(prompts=[None] * 3, completions=completions, scenario=["s"] * 3)
    assert rewards == [-3.0, -3.0, 1.0]
    assert ensemble.asked == ["Maybe they had a hard week. You matter to them."]
    assert reward.history[0].gate_reasons == ("unfinished_think", "unfinished_think", "ok")
    logged = json.loads((tmp_path / REWARD_LOG).read_text(encoding="utf-8"))
    assert {reason: logged[reason] for reason in GATE_REASONS} == {
        "ok": 1,
        "empty": 0,
        "too_long": 0,
        "unfinished_think": 2,
    }


class _Template:
    """A tokenizer's chat template as ``template_opens_think`` sees it (the rendered generation prompt)."""

    def __init__(self, ending: str):
        self.chat_template = "stand-in"
        self.ending = ending

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "<|im_start|>user\n" + messages[-1]["content"] + "<|im_end|>\n<|im_start|>assistant\n" + self.ending


@pytest.mark.parametrize(
    ("ending", "opens"),
    [
        ("<think>\n", True),  # Qwen3 thinking models: the trace opens in the prompt
        ("", False),  # Qwen3 hybrid, thinking on: the model writes <think> itself
        ("<think>\n\n</think>\n\n", False),  # thinking switched off: an empty, closed trace
    ],
)
def test_a_template_that_opens_think_forces_thinking(ending, opens):
    assert template_opens_think(_Template(ending)) is opens


def test_the_seed_projects_beta_passes_the_policy_floor():
    from honestci.audit.policy import MIN_KL_BETA

    assert MIN_KL_BETA <= 0.04 == load_config(GRPOJob, CONFIGS / "grpo.yaml").beta
