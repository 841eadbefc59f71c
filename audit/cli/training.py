"""``honestci train rm|grpo``, ``honestci generate`` and ``honestci pipeline`` as click commands.

Exported for ``audit/cli.py`` to register: ``train_group`` (as ``train``), ``generate_command``
(as ``generate``) and ``pipeline_command`` (as ``pipeline``). Heavy imports (torch, transformers,
TRL) happen inside the commands. Exit codes: 0 done (pipeline: figures published), 1 the pipeline
was refused by a gate, 2 bad input or config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from honestci.audit.cli.support import BAYES_MODULES, fail_cleanly, policy_option, seed_option
from honestci.audit.errors import require_extra
from honestci.audit.progress import Progress

EXIT_REFUSED = 1
_SET = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config key (repeatable; dotted keys reach the trainer block, "
    "e.g. --set trainer.warmup_steps=0.1). VALUE is parsed as YAML.",
)


#: Steps as "… message" lines, counted work (training steps, the leakage preflight, judging) as a
#: live bar on a terminal or lines with rate and ETA in a log (honestci.audit.progress).
_progress = Progress()


@click.group("train", context_settings={"help_option_names": ["-h", "--help"]})
def train_group() -> None:
    """Train reward models or a GRPO policy from a YAML config (see training/configs/)."""


@train_group.command("rm")
@click.argument("config", type=click.Path(path_type=Path))
@_SET
@fail_cleanly
def train_rm_command(config: Path, overrides: tuple[str, ...]) -> None:
    """Train the reward-model ensemble of CONFIG and report its held-out accuracy (CR2 by vignette)."""
    from honestci.training.config import load_config
    from honestci.training.reward_models import RewardModelJob, train_reward_models

    run = train_reward_models(load_config(RewardModelJob, config, overrides), _progress)
    click.echo(str(run))


@train_group.command("grpo")
@click.argument("config", type=click.Path(path_type=Path))
@_SET
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the config and print the GPU memory plan (nothing is loaded or trained).",
)
@click.option(
    "--gpus", type=click.IntRange(1), help="Dry run: GPUs on the machine (default: the config's gpus, else 1)."
)
@click.option("--gpu-name", default="H200", show_default=True, help="Dry run: the GPU (sets the memory if known).")
@click.option(
    "--gpu-memory-gib", type=click.FloatRange(min=0, min_open=True), help="Dry run: usable memory per GPU (GiB)."
)
@click.option(
    "--model-preset",
    help="Dry run: published dims of the policy when its folder is not here (qwen3-4b, qwen2.5-0.5b).",
)
@click.option("--model-params", type=float, help="Dry run: the policy's parameter count (overrides the dims' count).")
@click.option("--reward-params", type=float, help="Dry run: parameters per reward member (default: the policy's).")
@click.option(
    "--reward-members", type=click.IntRange(1), help="Dry run: reward members K (default: ensemble.json's, else 3)."
)
@click.option("--reward-dtype", type=click.Choice(["bf16", "fp32"]), default="bf16", show_default=True, help="Dry run.")
@click.option("--lora-rank", type=click.IntRange(1), default=16, show_default=True, help="Dry run: LoRA rank r.")
@click.option("--prompt-tokens", type=click.IntRange(1), default=256, show_default=True, help="Dry run: prompt length.")
@click.option(
    "--launch-dir",
    type=click.Path(path_type=Path),
    help="Dry run: write accelerate.yaml + deepspeed_zero2.json for this machine into this folder.",
)
@fail_cleanly
def train_grpo_command(config: Path, overrides: tuple[str, ...], dry_run: bool, **plan_options) -> None:
    """Run GRPO as CONFIG says, rewarded by the gated reward-model ensemble; then judge its health.

    With --dry-run: check CONFIG, print the memory plan per training GPU (docs/gpu.md) and, with
    --launch-dir, write the accelerate/DeepSpeed launch configs for the machine."""
    from honestci.training.config import load_config
    from honestci.training.grpo import GRPOJob

    job = load_config(GRPOJob, config, overrides)
    if dry_run:
        _dry_run(job, **plan_options)
        return
    from honestci.audit.checks.training_health import assess_training_log
    from honestci.training.grpo import train_grpo

    run = train_grpo(job, _progress)
    click.echo(str(run))
    click.echo(str(assess_training_log(run.training_log)))


def _dry_run(
    job,
    *,
    gpus: int | None,
    gpu_name: str,
    gpu_memory_gib: float | None,
    model_preset: str | None,
    model_params: float | None,
    reward_params: float | None,
    reward_members: int | None,
    reward_dtype: str,
    lora_rank: int,
    prompt_tokens: int,
    launch_dir: Path | None,
) -> None:
    """Print the memory plan of ``job`` on the asked machine; write its launch configs."""
    import json

    from honestci.audit.errors import InputError
    from honestci.training.grpo import check_vllm_mode
    from honestci.training.launch import write_launch_configs
    from honestci.training.memory_plan import GPU_MEMORY_GIB, model_dims, plan_memory

    gpus = gpus or job.gpus or 1
    memory = gpu_memory_gib or GPU_MEMORY_GIB.get(gpu_name)
    if memory is None:
        raise InputError(
            f"No known memory for GPU {gpu_name!r}.", fix=f"give --gpu-memory-gib (known: {sorted(GPU_MEMORY_GIB)})"
        )
    mode = check_vllm_mode(job.vllm_mode, gpus, server_elsewhere=job.vllm_server_elsewhere)
    policy = model_dims(job.model, model_preset, model_params)
    manifest_path = Path(job.reward_model) / "ensemble.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else None
    if manifest is not None:
        from honestci.training.grpo import check_reward_prompt

        check_reward_prompt(job)  # a reward model trained under another prompt is refused before the plan
    members = reward_members or (len(manifest["members"]) if manifest else 3)
    if reward_params is None and manifest:
        first = Path(job.reward_model) / manifest["members"][0]["path"]
        reward_params = model_dims(first).params
        click.echo(f"reward members: {members} x {first / 'config.json'}")
    elif reward_params is None:
        reward_params = policy.params
        click.echo(f"reward members: {members} x the policy's size (assumed; the card's reward model is a 4B)")
    plan = plan_memory(
        policy,
        gpu_memory_gib=memory,
        gpus=gpus,
        gpu_name=gpu_name,
        vllm_mode=mode,
        use_vllm=job.use_vllm,
        vllm_gpu_memory_utilization=job.vllm_gpu_memory_utilization,
        reward_params=reward_params,
        reward_members=members,
        reward_bytes=2 if reward_dtype == "bf16" else 4,
        per_device_train_batch_size=job.per_device_train_batch_size,
        gradient_accumulation_steps=job.gradient_accumulation_steps,
        prompt_tokens=prompt_tokens,
        max_completion_length=job.max_completion_length,
        lora_rank=lora_rank,
    )
    click.echo(str(plan))
    if launch_dir is not None:
        accelerate, deepspeed = write_launch_configs(
            launch_dir, plan.training_gpus, offload=plan.recommended == "ZeRO-2+offload"
        )
        click.echo(f"launch configs: {accelerate} ({plan.training_gpus} process(es)), {deepspeed}")


@click.command("generate")
@click.option("--system", required=True, help="System name written in the responses table.")
@click.option("--vignettes", type=click.Path(path_type=Path), required=True, help="Vignettes table.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Responses table to write.")
@click.option(
    "--backend",
    type=click.Choice(["transformers", "openai", "vllm"]),
    default="transformers",
    show_default=True,
    help="vllm = an OpenAI-compatible vLLM server.",
)
@click.option("--model-path", type=click.Path(path_type=Path), help="Local model folder (transformers).")
@click.option("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", help="Model name the server expects.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option(
    "--samples",
    "samples_per_vignette",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="Answers per vignette.",
)
@click.option("--run", "run_tag", default="run-1", show_default=True, help="Evaluation run tag.")
@click.option("--pool", type=click.Choice(["heldout", "selection"]), default="heldout", show_default=True)
@seed_option
@click.option("--temperature", type=click.FloatRange(min=0), default=0.7, show_default=True)
@click.option("--top-p", type=click.FloatRange(0, 1), default=1.0, show_default=True)
@click.option("--max-tokens", type=click.IntRange(1), default=2048, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option(
    "--thinking",
    is_flag=True,
    help="The model writes a <think> trace first: output without </think> (cut at --max-tokens) has no answer.",
)
@click.option(
    "--prompt",
    default="honestci",
    show_default=True,
    help="The policy's chat: a preset (honestci, card) or a YAML file with system and user_template (one {scenario}).",
)
@fail_cleanly
def generate_command(
    system,
    vignettes,
    out,
    backend,
    model_path,
    base_url,
    model,
    api_key_env,
    concurrency,
    samples_per_vignette,
    run_tag,
    pool,
    seed,
    temperature,
    top_p,
    max_tokens,
    device,
    thinking,
    prompt,
) -> None:
    """Generate fresh answers per vignette into a responses table (tagged run and pool).

    Each answer's seed derives from --seed, the system, the run tag and the pool: a rerun
    reproduces its answers, and two pools or runs never share a sample.
    """
    from honestci.training.config import read_yaml_mapping
    from honestci.training.generate import GenerationJob, generate_responses
    from honestci.training.task import PROMPT_PRESETS

    if prompt not in PROMPT_PRESETS and Path(prompt).is_file():
        prompt = read_yaml_mapping(prompt)
    job = GenerationJob(
        system=system,
        vignettes=vignettes,
        out=out,
        backend="openai" if backend == "vllm" else backend,
        model_path=model_path,
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        concurrency=concurrency,
        samples_per_vignette=samples_per_vignette,
        run=run_tag,
        pool=pool,
        seed=seed,
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        device=device,
        thinking=thinking,
        prompt=prompt,
    )
    click.echo(str(generate_responses(job, _progress)))


@click.command("pipeline")
@click.argument("config", type=click.Path(path_type=Path))
@_SET
@policy_option
@fail_cleanly
def pipeline_command(config: Path, overrides: tuple[str, ...], policy_file: Path | None) -> None:
    """Leakage check -> reward models -> GRPO -> generation -> judging -> audit; figures go into the
    model card only when every required gate passes (exit 1 otherwise)."""
    from honestci.audit.data.policy_file import load_policy
    from honestci.training.config import TRAIN_MODULES
    from honestci.training.pipeline import PipelineRefused, load_pipeline_job, run_pipeline

    # Every extra the config needs, and its thresholds against the policy, checked before the first
    # stage writes into its output folder.
    policy = load_policy(policy_file)
    job, _ = load_pipeline_job(config, overrides, policy)
    require_extra("train", *TRAIN_MODULES, needed_by="the pipeline (reward models, GRPO, generation)")
    if job.judge["backend"] in ("openai", "vllm"):
        require_extra("judges", "httpx", needed_by="the pipeline's HTTP judge")
    if job.bayes:
        require_extra("bayes", *BAYES_MODULES, needed_by="the Bayesian model", instead="set bayes: false")
    try:
        result = run_pipeline(config, overrides, progress=_progress, policy=policy)
    except PipelineRefused as refused:
        click.secho(refused.message, fg="red", err=True)
        sys.exit(EXIT_REFUSED)
    for stage in result.stages:
        click.echo(f"  {stage['stage']:<14} {stage['seconds']:>8.1f} s")
    for gate in result.gates:
        click.echo(f"  gate {gate.name:<26} {gate.verdict!s:<13} {gate.message}")
    click.echo(f"report: {result.report.get('md')}")
    click.secho(
        "figures published" if result.published else "all required gates passed (no model card configured)", fg="green"
    )


if __name__ == "__main__":

    @click.group()
    def _main() -> None:
        """Stand-alone entry point of the training commands."""

    _main.add_command(train_group)
    _main.add_command(generate_command)
    _main.add_command(pipeline_command)
    _main()
