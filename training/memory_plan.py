"""GPU memory plan of a GRPO job: what the policy, its reference, the reward ensemble, vLLM and the
activations take on each training GPU, under full fine-tuning, ZeRO-2, ZeRO-2 with CPU offload and LoRA.

Pure arithmetic on the model's dimensions (its ``config.json``, or a named preset with published
dimensions) and the job's settings; nothing is loaded. ``honestci train grpo CONFIG --dry-run`` prints it.

Accounting per parameter Ψ of the policy (mixed-precision Adam; Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", §3.1: 2Ψ bf16 weights + 2Ψ bf16 gradients +
12Ψ fp32 master weights, momentum and variance = 16Ψ bytes):

- ``full FT (DDP)``: 16Ψ on every GPU.
- ``full FT + ZeRO-2`` over N training GPUs: 2Ψ + (2 + 12)Ψ / N (gradients and optimizer states
  sharded; on one GPU this is the same 16Ψ).
- ``full FT + ZeRO-2 + CPU offload``: 2Ψ on the GPU; (2 + 12)Ψ / N in host memory per GPU
  (ZeRO-Offload, Ren et al. 2021: gradients, fp32 master weights and Adam states on the CPU).
- ``LoRA r``: the frozen base in bf16 (2Ψ) + 16 bytes per adapter parameter; adapter parameters
  P_L = r · L · Σ (d_in + d_out) over the attention (q, k, v, o) and MLP (gate, up, down)
  projections (Hu et al. 2021, target_modules="all-linear").

Reference model (β > 0 always here): TRL's ``GRPOTrainer`` builds a frozen copy of the policy in the
policy's dtype (bf16: 2Ψ); with a PEFT (LoRA) policy it builds none and uses the base with the
adapter disabled (trl/trainer/grpo_trainer.py, "If PEFT is used, the reference model is not needed").

Reward ensemble: K members × Ψ_rm × bytes per weight (2 for bf16; a member saved in fp32 loads as
fp32, 4 bytes: transformers loads a checkpoint in its saved dtype).

vLLM in colocate mode reserves ``vllm_gpu_memory_utilization`` × the GPU's memory on every training GPU;
inside it needs its bf16 weights (2Ψ) and the KV cache of one generation batch:
2 (K and V) · L · n_kv_heads · head_dim · 2 bytes · B_gen · (prompt + completion tokens), with
B_gen = per_device_train_batch_size × gradient_accumulation_steps. In server mode vLLM has its own GPU.

Activations with gradient checkpointing (TRL's default), per micro-batch of b sequences of s tokens
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 1 with
flash attention, so no s² term): the checkpointed layer inputs 2·b·s·h·L bytes, plus one layer's
activations recomputed during the backward pass 34·b·s·h, plus the fp32 logits for the token
log-probabilities 4·b·s·V. An estimate: allocator fragmentation and CUDA context (~1–2 GiB) come on top.

Validated against: the parameter count from config.json equals ``sum(p.numel())`` of the tiny
model built from it, and the Qwen3-4B preset gives the published 4.0B (3.6B non-embedding);
tests/test_training_memory_plan.py checks each term against a hand computation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from honestci.audit.errors import InputError

GIB = 1024**3
#: Bytes per parameter of mixed-precision Adam (ZeRO paper §3.1): bf16 weights, bf16 gradients,
#: fp32 master weights + momentum + variance.
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12


@dataclass(frozen=True)
class ModelDims:
    """What the plan needs of a decoder-only transformer, and where the numbers came from."""

    params: float
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    source: str


def params_from_config(config: dict) -> int:
    """Parameters of a Llama/Qwen-style decoder (``config.json``): embeddings (+ an untied LM head),
    per layer the q/k/v/o and gate/up/down projections (+ q/k/v biases for Qwen2, and o's with
    ``attention_bias``), RMSNorms
    (two per layer, Qwen3's q/k norms) and the final norm."""
    h, L, V = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    hd = config.get("head_dim") or h // heads
    inter = config["intermediate_size"]
    attention = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if config.get("model_type") == "qwen2":
        attention += heads * hd + 2 * kv * hd  # Qwen2 always biases q, k and v
    elif config.get("attention_bias"):
        attention += heads * hd + 2 * kv * hd + h  # Llama/Qwen3 attention_bias: q, k, v and o
    qk_norm = 2 * hd if config.get("model_type") == "qwen3" else 0
    layer = attention + 3 * h * inter + 2 * h + qk_norm
    embeddings = V * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return embeddings + L * layer + h


def dims_from_config(config: dict, source: str) -> ModelDims:
    heads = config["num_attention_heads"]
    return ModelDims(
        params=float(params_from_config(config)),
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        vocab_size=config["vocab_size"],
        num_attention_heads=heads,
        num_kv_heads=config.get("num_key_value_heads", heads),
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        intermediate_size=config["intermediate_size"],
        source=source,
    )


#: Published configs (config.json on the Hugging Face Hub) of the models the card uses.
PRESET_CONFIGS = {
    # Qwen/Qwen3-4B-Thinking-2507 config.json (same dims as Qwen3-4B): 4.0B parameters, 3.6B non-embedding.
    "qwen3-4b": {
        "model_type": "qwen3",
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "vocab_size": 151936,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 9728,
        "tie_word_embeddings": True,
    },
    # Qwen/Qwen2.5-0.5B-Instruct config.json: 0.49B parameters (the GPU check's small real model).
    "qwen2.5-0.5b": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "vocab_size": 151936,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "tie_word_embeddings": True,
    },
}

#: Usable memory (GiB) of a named GPU as the driver reports it (the H200's 141 GB HBM3e shows ~139 GiB).
GPU_MEMORY_GIB = {"H200": 139.0, "H100": 79.2, "A100-80GB": 79.2}


def model_dims(model: Path | None, preset: str | None = None, params: float | None = None) -> ModelDims:
    """Dims of a local model folder's ``config.json``, else of a preset; ``params`` overrides the count."""
    if model is not None and (Path(model) / "config.json").is_file():
        path = Path(model) / "config.json"
        dims = dims_from_config(json.loads(path.read_text(encoding="utf-8")), f"{path}")
    elif preset is not None:
        if preset not in PRESET_CONFIGS:
            raise InputError(f"Unknown model preset {preset!r}.", fix=f"use one of {sorted(PRESET_CONFIGS)}")
        dims = dims_from_config(PRESET_CONFIGS[preset], f"preset {preset} (published config.json)")
    else:
        raise InputError(
            f"No config.json in {model}: the plan needs the model's dimensions.",
            fix=f"give --model-preset (one of {sorted(PRESET_CONFIGS)}) or point model at a local folder",
        )
    if params is not None:
        dims = ModelDims(
            **{**dims.__dict__, "params": float(params), "source": f"{dims.source}; params {params:g} given"}
        )
    return dims


def lora_params(dims: ModelDims, rank: int) -> int:
    """Adapter parameters of LoRA rank ``rank`` on every attention and MLP projection (all-linear)."""
    h, hd, inter = dims.hidden_size, dims.head_dim, dims.intermediate_size
    q, kv = dims.num_attention_heads * hd, dims.num_kv_heads * hd
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + inter) + (inter + h)
    return rank * dims.num_layers * per_layer


def _count(n: float) -> str:
    """4.02B, 494M, 107k."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}" if unit != "B" else f"{n / scale:.2f}B"
    return f"{n:.0f}"


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory (GiB) of each strategy, the totals against the GPU, and the recommendation.

    ``table`` is the canonical table: one row per (component, strategy) in GiB, with the formula."""

    gpu_name: str
    gpu_memory_gib: float
    gpus: int
    training_gpus: int
    vllm_mode: str
    policy: ModelDims
    reward_params: float
    reward_members: int
    table: pd.DataFrame
    totals: dict[str, float]
    host_gib: dict[str, float]
    vllm_needed_gib: float
    recommendation: str

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    def fits(self, strategy: str) -> bool:
        return self.totals[strategy] <= self.gpu_memory_gib

    @property
    def recommended(self) -> str | None:
        """The first strategy that fits (the recommendation's), or None."""
        return next((s for s in self.totals if self.fits(s)), None)

    def __str__(self) -> str:
        strategies = list(self.totals)
        pivot = self.table.pivot(index="component", columns="strategy", values="gib")
        pivot = pivot.loc[list(dict.fromkeys(self.table["component"])), strategies]
        width = max(len(s) for s in strategies) + 2
        lines = [
            f"Memory plan: {self.gpus} x {self.gpu_name} ({self.gpu_memory_gib:g} GiB each), "
            f"{self.training_gpus} training GPU(s), vLLM {self.vllm_mode}",
            f"policy {_count(self.policy.params)} params ({self.policy.source}); reward ensemble "
            f"{self.reward_members} x {_count(self.reward_params)}",
            "GiB per training GPU".ljust(34) + "".join(s.rjust(width) for s in strategies),
        ]
        for component, row in pivot.iterrows():
            lines.append(str(component).ljust(34) + "".join(f"{row[s]:{width}.1f}" for s in strategies))
        lines.append("total".ljust(34) + "".join(f"{self.totals[s]:{width}.1f}" for s in strategies))
        lines.append("fits".ljust(34) + "".join(("yes" if self.fits(s) else "NO").rjust(width) for s in strategies))
        lines.append(
            "host memory per GPU (offload)".ljust(34) + "".join(f"{self.host_gib[s]:{width}.1f}" for s in strategies)
        )
        if self.vllm_mode == "colocate":
            lines.append(
                f"vLLM needs {self.vllm_needed_gib:.1f} GiB (weights + KV cache) of its reserved share "
                f"(vllm_gpu_memory_utilization >= {self.vllm_needed_gib / self.gpu_memory_gib:.2f})"
            )
        lines.append("formulas (bytes; P = policy params, docs/gpu.md):")
        lines.extend(f"  {c}: {f}" for c, f in self.formulas().items())
        lines.append(f"recommendation: {self.recommendation}")
        return "\n".join(lines)

    def formulas(self) -> dict[str, str]:
        rows = self.table.drop_duplicates("component")
        return dict(zip(rows["component"], rows["formula"]))


def plan_memory(
    policy: ModelDims,
    *,
    gpu_memory_gib: float,
    gpus: int = 1,
    gpu_name: str = "GPU",
    vllm_mode: str = "colocate",
    use_vllm: bool = True,
    vllm_gpu_memory_utilization: float = 0.3,
    reward_params: float,
    reward_members: int,
    reward_bytes: int = 2,
    per_device_train_batch_size: int = 12,
    gradient_accumulation_steps: int = 1,
    prompt_tokens: int = 256,
    max_completion_length: int = 1024,
    lora_rank: int = 16,
) -> MemoryPlan:
    """The per-GPU memory of a GRPO job under four strategies (formulas in the module docstring).

    ``vllm_mode`` is the resolved mode (colocate or server; :func:`honestci.training.grpo.vllm_mode_for`):
    in server mode one of the ``gpus`` serves and the rest train. The recommendation is the first
    strategy, in the order full FT, ZeRO-2, ZeRO-2 + offload, LoRA, whose total fits ``gpu_memory_gib``.
    """
    if gpus < 1 or (use_vllm and vllm_mode == "server" and gpus < 2):
        raise InputError(
            f"{gpus} GPU(s) with vLLM in {vllm_mode} mode leave no GPU to train on.",
            fix="plan colocate mode on one GPU, server mode on two or more",
        )
    n = gpus - 1 if use_vllm and vllm_mode == "server" else gpus
    psi, gib = policy.params, float(GIB)
    lora = lora_params(policy, lora_rank)
    strategies = {
        "full FT": (WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES) * psi,
        "ZeRO-2": WEIGHT_BYTES * psi + (GRAD_BYTES + OPTIMIZER_BYTES) * psi / n,
        "ZeRO-2+offload": WEIGHT_BYTES * psi,
        f"LoRA r={lora_rank}": WEIGHT_BYTES * psi + (WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES) * lora,
    }
    host = {s: 0.0 for s in strategies}
    host["ZeRO-2+offload"] = (GRAD_BYTES + OPTIMIZER_BYTES) * psi / n / gib
    reference = {s: (0.0 if s.startswith("LoRA") else WEIGHT_BYTES * psi) for s in strategies}
    rewards = reward_members * reward_params * reward_bytes
    b, s = per_device_train_batch_size, prompt_tokens + max_completion_length
    h, L, V = policy.hidden_size, policy.num_layers, policy.vocab_size
    activations = 2 * b * s * h * L + 34 * b * s * h + 4 * b * s * V
    kv_per_token = 2 * L * policy.num_kv_heads * policy.head_dim * 2
    generation_batch = per_device_train_batch_size * gradient_accumulation_steps
    vllm_needed = WEIGHT_BYTES * psi + kv_per_token * generation_batch * s
    colocated = use_vllm and vllm_mode == "colocate"
    vllm_share = max(vllm_gpu_memory_utilization * gpu_memory_gib * gib, vllm_needed) if colocated else 0.0
    components: list[tuple[str, dict[str, float], str]] = [
        (
            "policy weights+grads+Adam",
            strategies,
            f"full 16P; ZeRO-2 2P+14P/N (N={n}); offload 2P (+14P/N host); LoRA 2P+16*{lora:.3g} adapter",
        ),
        ("reference model", reference, "2P bf16 copy (TRL); none with LoRA (adapter disabled)"),
        (
            "reward ensemble",
            {k: rewards for k in strategies},
            f"K*P_rm*{reward_bytes} = {reward_members}*{reward_params:.3g}*{reward_bytes}",
        ),
        (
            "vLLM (colocate share)",
            {k: vllm_share for k in strategies},
            f"max(util*GPU, 2P + KV 2*L*kv*hd*2*B_gen*s), B_gen={generation_batch}, s={s}"
            if colocated
            else "own GPU (server mode)"
            if use_vllm
            else "no vLLM",
        ),
        (
            "activations (checkpointed)",
            {k: activations for k in strategies},
            f"2bshL + 34bsh + 4bsV, b={b}, s={s}",
        ),
    ]
    rows = [
        {"component": name, "strategy": strategy, "gib": values[strategy] / gib, "formula": formula}
        for name, values, formula in components
        for strategy in strategies
    ]
    table = pd.DataFrame(rows)
    totals = {k: float(v) for k, v in table.groupby("strategy", sort=False)["gib"].sum().items()}
    fitting = [k for k, v in totals.items() if v <= gpu_memory_gib]
    if not fitting:
        recommendation = (
            f"nothing fits {gpu_memory_gib:g} GiB: the smallest is {min(totals, key=totals.__getitem__)} "
            f"at {min(totals.values()):.1f} GiB; lower per_device_train_batch_size or max_completion_length, "
            "save the reward members in bf16, or add GPUs"
        )
    else:
        best = fitting[0]
        recommendation = f"fits: {best} ({totals[best]:.1f} of {gpu_memory_gib:g} GiB)"
        if best.startswith("LoRA"):
            recommendation = f"use {best} ({totals[best]:.1f} of {gpu_memory_gib:g} GiB); LoRA needs peft (not wired into train grpo yet)"
        elif best == "ZeRO-2+offload":
            recommendation += f"; host memory {host[best]:.1f} GiB per GPU for the offloaded states"
    return MemoryPlan(
        gpu_name,
        gpu_memory_gib,
        gpus,
        n,
        vllm_mode if use_vllm else "off",
        policy,
        reward_params,
        reward_members,
        table,
        totals,
        host,
        vllm_needed / gib,
        recommendation,
    )
