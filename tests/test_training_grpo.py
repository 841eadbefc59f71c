"""GRPO: a few optimizer steps of TRL's GRPOTrainer on a tiny model move the weights, and every reward
comes from the gated ensemble (ensemble reward for gated answers, the penalty for the rest)."""

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("trl")

from training_support import changed_tensors, tiny_base, untrained_ensemble

from honestci.audit.checks.training_health import assess_training_log
from honestci.audit.policy import Verdict
from honestci.training.config import TrainingConfigError, load_config
from honestci.training.grpo import REWARD_LOG, GatedEnsembleReward, GRPOJob, grpo_config, train_grpo
from honestci.training.reward_models import RewardEnsemble
from honestci.training.task import HONESTCI_PROMPT

pytestmark = pytest.mark.training

VIGNETTES = "fixtures/study/vignettes.jsonl"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_base(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def ensemble_dir(base, tmp_path_factory):
    return untrained_ensemble(base, tmp_path_factory.mktemp("ensemble"))


def _job(base, ensemble_dir, out, **kw):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return GRPOJob(
        **{
            "model": base,
            "reward_model": ensemble_dir,
            "vignettes": root / VIGNETTES,
            "output_dir": out,
            "learning_rate": 1e-3,
            "num_generations": 4,
            "per_device_train_batch_size": 4,
            "max_steps": 3,
            "max_completion_length": 16,
            "device": "cpu",
            "trainer": {"save_strategy": "no"},
            **kw,
        }
    )


def test_gated_reward_penalises_empty_and_long_answers_and_scores_the_rest(ensemble_dir):
    ensemble = RewardEnsemble(ensemble_dir)
    reward = GatedEnsembleReward(ensemble, max_sentences=2, penalty=-3.0)
    completions = [
        [{"role": "assistant", "content": text}]
        for text in (
            "<think>Hurt, but maybe not meant.</think>\n\nMaybe your friend was swamped. You matter to them.",
            "<think>still thinking and never closes",
            "One. Two. Three sentences is too many.",
            "",
            "Perhaps they were nervous about their own standing",
        )
    ]
    scenario = ["A friend forgot my birthday."] * 5
    rewards = reward(prompts=[None] * 5, completions=completions, scenario=scenario)
    batch = reward.history[-1]
    assert batch.gate_reasons == ("ok", "unfinished_think", "too_long", "empty", "ok")
    direct = ensemble.score(
        [scenario[0]] * 2,
        ["Maybe your friend was swamped. You matter to them.", "Perhaps they were nervous about their own standing"],
    )
    np.testing.assert_allclose([rewards[0], rewards[4]], direct.reward)
    assert rewards[1:4] == [-3.0, -3.0, -3.0]
    # mean - 0.5 sd of two different heads: strictly below their mean
    assert np.all(direct.reward < direct.mean) and np.all(direct.std > 0)
    assert ensemble.calls == 4  # only gated answers reach the reward models (2 here, 2 in the direct call)


def test_grpo_steps_move_the_policy_and_every_reward_comes_from_the_gated_ensemble(base, ensemble_dir, tmp_path):
    job = _job(base, ensemble_dir, tmp_path / "policy")
    ensemble = RewardEnsemble(ensemble_dir)
    reward = GatedEnsembleReward(ensemble, max_sentences=2, penalty=-3.0, log_path=tmp_path / "policy" / REWARD_LOG)
    (tmp_path / "policy").mkdir()
    lines: list[str] = []
    run = train_grpo(job, lines.append, reward_function=reward)
    assert run.steps == 3
    changed, compared = changed_tensors(base / "model.safetensors", tmp_path / "policy" / "model.safetensors")
    assert compared > 0 and changed > 0
    assert any(row.get("grad_norm", 0) > 0 for row in run.log_history)
    # 3 steps x 4 completions, each scored by the gate, gated ones by the ensemble.
    assert len(reward.history) == 3 and run.n_completions_scored == 12
    for batch in reward.history:
        for reason, from_ensemble, value in zip(batch.gate_reasons, batch.ensemble_reward, batch.rewards):
            assert (value == -3.0 and from_ensemble is None) if reason != "ok" else value == from_ensemble
    assert ensemble.calls == sum(r == "ok" for b in reward.history for r in b.gate_reasons)
    # TRL's logged mean reward per step is the mean of what the gated ensemble returned.
    logged = [row["reward"] for row in run.log_history if "reward" in row]
    np.testing.assert_allclose(logged, [np.mean(b.rewards) for b in reward.history], rtol=1e-5)
    log_rows = [json.loads(line) for line in open(run.training_log)]
    assert {"reward", "reward_std", "kl", "entropy"} <= set(log_rows[0])
    health = assess_training_log(run.training_log)
    assert health.verdict == Verdict.INCONCLUSIVE  # three steps cannot show a trend
    assert len((tmp_path / "policy" / REWARD_LOG).read_text().splitlines()) == 3
    # progress in a log (honestci.training.progress): step k/N with rate, ETA and what was logged
    steps = [line for line in lines if line.startswith("GRPO ")]
    assert steps[0] == "GRPO 0/3 steps (0%)" and steps[-1].startswith("GRPO done: 3/3 steps in ")
    for k, line in enumerate(steps[1:-1], start=1):
        assert line.startswith(f"GRPO {k}/3 steps (") and " steps/s ETA " in line
        assert f" reward={logged[k - 1]:.3g} " in line and " kl=" in line and " loss=" in line


def test_beta_zero_is_refused_with_the_reason(base, ensemble_dir, tmp_path):
    with pytest.raises(TrainingConfigError, match="beta = 0 the policy drifts"):
        _job(base, ensemble_dir, tmp_path, beta=0.0)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_generations": 1}, "num_generations"),
        ({"per_device_train_batch_size": 6}, "not a multiple"),
        ({"vllm_mode": "remote"}, "vllm_mode"),
        ({"use_vllm": True, "gpus": 1, "vllm_mode": "server"}, "Duplicate GPU"),
        ({"gpus": 0}, "gpus"),
        ({"vllm_gpu_memory_utilization": 1.0}, "vllm_gpu_memory_utilization"),
        ({"temperature": 0}, "temperature"),
        ({"learning_rate": -1}, "learning_rate"),
    ],
)
def test_config_validation_names_the_field(base, ensemble_dir, tmp_path, change, message):
    with pytest.raises(TrainingConfigError, match=message):
        _job(base, ensemble_dir, tmp_path, **change)


def test_cpu_refuses_bf16_and_vllm_and_unknown_trainer_keys(base, ensemble_dir, tmp_path):
    with pytest.raises(TrainingConfigError, match="bf16"):
        grpo_config(_job(base, ensemble_dir, tmp_path, bf16=True), "cpu")
    with pytest.raises(TrainingConfigError, match="use_vllm"):
        grpo_config(_job(base, ensemble_dir, tmp_path, use_vllm=True), "cpu")
    with pytest.raises(TrainingConfigError, match="warmup_ratoi"):
        grpo_config(_job(base, ensemble_dir, tmp_path, trainer={"warmup_ratoi": 0.1}), "cpu")


def test_defaults_are_the_model_card_recipe_and_vllm_mode_follows_the_gpus(base, ensemble_dir, tmp_path):
    job = GRPOJob(model=base, reward_model=ensemble_dir, vignettes=tmp_path, output_dir=tmp_path)
    assert (job.learning_rate, job.beta, job.num_generations, job.max_steps) == (8e-6, 0.04, 12, 500)

    def config_for(gpus_seen, **kw):
        job = GRPOJob(
            model=base, reward_model=ensemble_dir, vignettes=tmp_path, output_dir=tmp_path, use_vllm=True, **kw
        )
        return grpo_config(dataclasses.replace(job, bf16=False), "cuda", gpus=gpus_seen)

    one = config_for(1, vllm_gpu_memory_utilization=0.25)  # auto on one GPU: vLLM inside the trainer
    assert (one.use_vllm, one.vllm_mode, one.vllm_gpu_memory_utilization) == (True, "colocate", 0.25)
    config = config_for(4, vllm_server_port=8123)  # auto on four: one serves, three train
    assert (config.vllm_mode, config.vllm_server_port) == ("server", 8123)
    assert config_for(None, gpus=4).vllm_mode == "server"  # the job's gpus wins over the count
    with pytest.raises(TrainingConfigError, match="Duplicate GPU"):
        config_for(1, vllm_mode="server")  # the count at run time is checked too
    assert config_for(1, vllm_mode="server", vllm_server_elsewhere=True).vllm_mode == "server"
    assert config.learning_rate == 8e-6 and config.beta == 0.04 and config.num_generations == 12


def test_yaml_configs_load_with_overrides():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "training" / "configs"
    recipe = load_config(GRPOJob, root / "grpo.yaml")
    assert (recipe.learning_rate, recipe.beta, recipe.num_generations, recipe.max_steps, recipe.bf16) == (
        8e-6,
        0.04,
        12,
        500,
        True,
    )
    assert recipe.model == (root / "../../models/policy-base")
    tiny = load_config(GRPOJob, root / "grpo_cpu_tiny.yaml", ["beta=0.1", "trainer.warmup_steps=0.5"])
    assert tiny.beta == 0.1 and tiny.trainer == {"save_strategy": "no", "warmup_steps": 0.5}
    with pytest.raises(TrainingConfigError, match="beta"):
        load_config(GRPOJob, root / "grpo.yaml", ["beta=0"])
    with pytest.raises(TrainingConfigError, match="unknown key"):
        load_config(GRPOJob, root / "grpo.yaml", ["betta=0.1"])


def test_prompts_follow_the_protocol():
    assert "two sentences" in HONESTCI_PROMPT.system and '"you"' in HONESTCI_PROMPT.system
    assert "{scenario}" in HONESTCI_PROMPT.user_template and "two sentences" in HONESTCI_PROMPT.user_template
