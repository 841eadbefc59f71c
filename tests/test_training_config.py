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
    REWARD_LOG,
    GatedEnsembleReward,
    GRPOJob,
    check_reward_prompt,
    template_opens_think,
)
from honestci.training.pipeline import PIPELINE_OWNED_KEYS, load_pipeline_job
from honestci.training.reward_models import RM_OWNED_TRAINER_KEYS, RewardModelJob
from honestci.training.task import GATE_REASONS, PROMPT_PRESETS, check_completion, extract_answer, unfinished_think

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "training" / "configs"


def _refused(args: list[str], key: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert re.search(rf"'{re.escape(key)}'", result.output), f"{key!r} not named in:\n{result.output}"


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
    ],
)
def test_pipeline_refuses_bypasses_in_its_stage_blocks_before_any_stage_runs(override, key, tmp_path):
    args = ["pipeline", str(CONFIGS / "pipeline_cpu_tiny.yaml"), "--set", f"output_dir={tmp_path / 'run'}"]
    _refused([*args, "--set", override], key)
    assert not (tmp_path / "run").exists()


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
        ["trainer.warmup_ratio=0.1", "bf16=null", "ensemble_lambda=null", "learning_rate=1", "beta=0.1"],
    )
    assert job.trainer == {"warmup_ratio": 0.1} and job.bf16 is None and job.learning_rate == 1 and job.beta == 0.1
    assert job.thinking  # the card's policy is a thinking model
    assert job.chat_prompt.name == "card"  # the card's recipe, in the card's own words
    rm = load_config(RewardModelJob, CONFIGS / "rm_ensemble.yaml", ["trainer.weight_decay=0.01", "seeds=[3, 4]"])
    assert rm.trainer == {"weight_decay": 0.01} and rm.seeds == (3, 4) and rm.chat_prompt.name == "card"
    assert load_pipeline_job(CONFIGS / "pipeline_cpu_tiny.yaml", ["grpo.trainer.warmup_ratio=0.1"])[0].grpo["trainer"]


def test_owned_trainer_keys_are_real_trl_keys_and_not_job_fields():
    """A refused key that TRL does not have would be dead weight; one that is a field is refused anyway."""
    trl = pytest.importorskip("trl")
    for owned, schema, config in (
        (GRPO_OWNED_TRAINER_KEYS, GRPOJob, trl.GRPOConfig),
        (RM_OWNED_TRAINER_KEYS, RewardModelJob, trl.RewardConfig),
    ):
        assert set(owned) <= set(config.__dataclass_fields__)
        assert not set(owned) & {f.name for f in dataclasses.fields(schema)}


def test_every_field_has_help_and_is_documented_with_the_refused_keys():
    doc = (ROOT / "docs" / "training-config.md").read_text(encoding="utf-8")
    for schema in (GRPOJob, RewardModelJob):
        for name, text in field_help(schema).items():
            assert text, f"{schema.__name__}.{name} has no help text"
            assert f"| `{name}` |" in doc, f"{schema.__name__}.{name} is not in docs/training-config.md"
    for key in [*GRPO_OWNED_TRAINER_KEYS, *RM_OWNED_TRAINER_KEYS]:
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
