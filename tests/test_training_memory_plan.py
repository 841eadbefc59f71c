"""The GRPO memory plan: the parameter count against torch's, each term against a hand computation,
the card's configuration on one H200 through the CLI, and the generated launch configs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from honestci.audit.cli import main
from honestci.audit.errors import InputError
from honestci.training.launch import write_launch_configs
from honestci.training.memory_plan import (
    GIB,
    PRESET_CONFIGS,
    ModelDims,
    dims_from_config,
    lora_params,
    params_from_config,
    plan_memory,
)

ROOT = Path(__file__).resolve().parents[1]
CARD_CONFIG = ROOT / "training" / "configs" / "grpo.yaml"


@pytest.mark.parametrize(
    "config_class, extra",
    [
        ("Qwen3Config", {"tie_word_embeddings": True}),
        ("Qwen2Config", {"tie_word_embeddings": False}),  # biases on q/k/v, an untied LM head
        ("Qwen3Config", {"tie_word_embeddings": False, "attention_bias": True}),
        ("LlamaConfig", {"tie_word_embeddings": True, "attention_bias": True}),
    ],
)
def test_parameter_count_matches_torch(config_class, extra):
    transformers = pytest.importorskip("transformers")
    dims = dict(
        hidden_size=64,
        num_hidden_layers=2,
        vocab_size=500,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        **extra,
    )
    config = getattr(transformers, config_class)(**dims)
    model = transformers.AutoModelForCausalLM.from_config(config)
    assert params_from_config(config.to_dict()) == sum(p.numel() for p in model.parameters())


def test_presets_give_the_published_sizes():
    # Qwen3-4B model card: 4.0B parameters, 3.6B non-embedding; Qwen2.5-0.5B: 0.49B, 0.36B non-embedding.
    qwen3 = dims_from_config(PRESET_CONFIGS["qwen3-4b"], "preset")
    assert round(qwen3.params / 1e9, 1) == 4.0
    assert round((qwen3.params - qwen3.vocab_size * qwen3.hidden_size) / 1e9, 1) == 3.6
    qwen05 = dims_from_config(PRESET_CONFIGS["qwen2.5-0.5b"], "preset")
    assert round(qwen05.params / 1e9, 2) == 0.49
    assert round((qwen05.params - qwen05.vocab_size * qwen05.hidden_size) / 1e9, 2) == 0.36


SMALL = ModelDims(1e6, 64, 2, 1000, 4, 2, 16, 128, "hand")


def _small_plan(**kw):
    args = dict(
        gpu_memory_gib=0.01,
        gpus=2,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        reward_params=5e5,
        reward_members=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        prompt_tokens=10,
        max_completion_length=20,
        lora_rank=4,
    )
    return plan_memory(SMALL, **{**args, **kw})


def test_each_term_matches_a_hand_computation():
    plan = _small_plan()
    gib = plan.table.set_index(["component", "strategy"])["gib"] * GIB
    # LoRA r=4 on L=2 layers: q (64+64) + k,v 2*(64+32) + o (64+64) + gate,up 2*(64+128) + down (128+64) = 1024.
    assert lora_params(SMALL, 4) == 4 * 2 * 1024 == 8192
    policy = {"full FT": 16e6, "ZeRO-2": 2e6 + 14e6 / 2, "ZeRO-2+offload": 2e6, "LoRA r=4": 2e6 + 16 * 8192}
    for strategy, expected in policy.items():
        assert gib["policy weights+grads+Adam", strategy] == pytest.approx(expected)
        assert gib["reference model", strategy] == pytest.approx(0 if strategy.startswith("LoRA") else 2e6)
        assert gib["reward ensemble", strategy] == pytest.approx(3 * 5e5 * 2)
        # b=2, s=30, h=64, L=2, V=1000: 2bshL + 34bsh + 4bsV
        assert gib["activations (checkpointed)", strategy] == pytest.approx(15360 + 130560 + 240000)
        # reserved 0.3 x 0.01 GiB exceeds the need 2P + KV (2*2*2*16*2 = 256 B/token x 2 seqs x 30 tokens)
        assert gib["vLLM (colocate share)", strategy] == pytest.approx(0.3 * 0.01 * GIB)
    assert plan.vllm_needed_gib * GIB == pytest.approx(2e6 + 256 * 60)
    assert plan.host_gib["ZeRO-2+offload"] * GIB == pytest.approx(14e6 / 2)
    rest = 2e6 + 3e6 + 0.3 * 0.01 * GIB + 385920
    assert plan.totals["ZeRO-2+offload"] * GIB == pytest.approx(2e6 + rest)
    # 0.01 GiB = 10.74 MB: only the offload (10.61 MB) and LoRA (8.74 MB) fit; the first that fits is offload.
    assert [s for s in plan.totals if plan.fits(s)] == ["ZeRO-2+offload", "LoRA r=4"]
    assert plan.recommended == "ZeRO-2+offload" and plan.recommendation.startswith("fits: ZeRO-2+offload")


def test_server_mode_trains_on_the_other_gpus_and_needs_two():
    plan = _small_plan(gpus=3, vllm_mode="server")
    assert plan.training_gpus == 2
    assert set(plan.table.loc[plan.table["component"] == "vLLM (colocate share)", "gib"]) == {0.0}
    with pytest.raises(InputError, match="no GPU to train on"):
        _small_plan(gpus=1, vllm_mode="server")


def test_nothing_fits_says_so():
    plan = _small_plan(gpu_memory_gib=0.001)
    assert plan.recommended is None and plan.recommendation.startswith("nothing fits")


def test_launch_configs_have_the_process_count_and_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    accelerate, deepspeed = write_launch_configs("launch", 3, offload=True)
    settings = yaml.safe_load(accelerate.read_text())
    assert settings["num_processes"] == 3
    path = Path(settings["deepspeed_config"]["deepspeed_config_file"])
    assert path.is_absolute() and path == deepspeed and path.is_file()
    zero = json.loads(deepspeed.read_text())["zero_optimization"]
    assert zero["stage"] == 2 and zero["offload_optimizer"]["device"] == "cpu"
    _, plain = write_launch_configs(tmp_path / "plain", 1, offload=False)
    assert "offload_optimizer" not in json.loads(plain.read_text())["zero_optimization"]


def _totals(output: str) -> dict[str, float]:
    header = next(line for line in output.splitlines() if line.startswith("GiB per training GPU"))
    strategies = re.split(r"\s{2,}", header.removeprefix("GiB per training GPU").strip())
    total = next(line for line in output.splitlines() if line.startswith("total "))
    return dict(zip(strategies, map(float, total.split()[1:])))


def test_dry_run_prints_the_card_plan_on_one_h200(tmp_path):
    args = ["train", "grpo", str(CARD_CONFIG), "--dry-run", "--gpus", "1", "--gpu-name", "H200"]
    result = CliRunner().invoke(main, [*args, "--model-preset", "qwen3-4b", "--launch-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Memory plan: 1 x H200 (139 GiB each), 1 training GPU(s), vLLM colocate" in result.output
    assert "policy 4.02B params" in result.output and "reward ensemble 3 x 4.02B" in result.output
    totals = _totals(result.output)
    # The recommendation is the first strategy whose printed total fits 139 GiB.
    recommended = next(s for s, total in totals.items() if total <= 139)
    assert all(total > 139 for s, total in totals.items() if s in ("full FT", "ZeRO-2"))
    assert f"recommendation: fits: {recommended} ({totals[recommended]:.1f} of 139 GiB)" in result.output
    assert recommended == "ZeRO-2+offload"
    settings = yaml.safe_load((tmp_path / "accelerate.yaml").read_text())
    assert settings["num_processes"] == 1
    zero = json.loads((tmp_path / "deepspeed_zero2.json").read_text())["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu"


def test_dry_run_on_four_gpus_plans_a_server_and_three_trainers(tmp_path):
    args = ["train", "grpo", str(CARD_CONFIG), "--dry-run", "--gpus", "4", "--model-preset", "qwen3-4b"]
    result = CliRunner().invoke(main, [*args, "--launch-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "4 x H200 (139 GiB each), 3 training GPU(s), vLLM server" in result.output
    assert yaml.safe_load((tmp_path / "accelerate.yaml").read_text())["num_processes"] == 3


def test_dry_run_refuses_a_server_on_one_gpu_and_unknown_dims():
    base = ["train", "grpo", str(CARD_CONFIG), "--dry-run", "--gpus", "1"]
    result = CliRunner().invoke(main, [*base, "--model-preset", "qwen3-4b", "--set", "vllm_mode=server"])
    assert result.exit_code == 2 and "Duplicate GPU" in result.output
    result = CliRunner().invoke(main, base)
    assert result.exit_code == 2 and "--model-preset" in result.output
