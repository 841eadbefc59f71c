"""Accelerate + DeepSpeed ZeRO-2 launch configs written for the machine at hand.

``honestci train grpo CONFIG --dry-run --launch-dir DIR`` writes ``DIR/deepspeed_zero2.json`` and
``DIR/accelerate.yaml`` whose ``num_processes`` is the number of training GPUs (all of them in vLLM
colocate mode, all but the server's in server mode) and whose DeepSpeed path is absolute, so
``accelerate launch --config_file DIR/accelerate.yaml -m honestci train grpo CONFIG`` runs from any
folder. With ``offload`` the optimizer states (and the fp32 master weights) go to CPU memory
(DeepSpeed's ``offload_optimizer``, ZeRO-Offload: Ren et al. 2021).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ACCELERATE_FILE = "accelerate.yaml"
DEEPSPEED_FILE = "deepspeed_zero2.json"


def deepspeed_zero2(offload: bool) -> dict:
    """DeepSpeed ZeRO-2 settings ("auto" values are filled in by the HF integration from the trainer)."""
    zero: dict = {
        "stage": 2,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_scatter": True,
        "reduce_bucket_size": "auto",
        "allgather_bucket_size": 5e8,
    }
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
    }


def write_launch_configs(folder: str | Path, training_gpus: int, *, offload: bool) -> tuple[Path, Path]:
    """Write the accelerate config (``num_processes`` = ``training_gpus``, absolute DeepSpeed path) and
    the ZeRO-2 JSON into ``folder``; returns (accelerate.yaml, deepspeed_zero2.json)."""
    if training_gpus < 1:
        raise ValueError(f"training_gpus is {training_gpus}; it must be >= 1")
    folder = Path(folder).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    ds_path = folder / DEEPSPEED_FILE
    ds_path.write_text(json.dumps(deepspeed_zero2(offload), indent=2) + "\n", encoding="utf-8")
    accelerate = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "DEEPSPEED",
        "deepspeed_config": {"deepspeed_config_file": str(ds_path), "zero3_init_flag": False},
        "machine_rank": 0,
        "main_training_function": "main",
        "num_machines": 1,
        "num_processes": training_gpus,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    acc_path = folder / ACCELERATE_FILE
    header = (
        f"# Written by honestci train grpo --dry-run: {training_gpus} training process(es), ZeRO-2"
        f"{' + CPU offload' if offload else ''}.\n"
        f"# accelerate launch --config_file {acc_path} -m honestci train grpo CONFIG\n"
    )
    acc_path.write_text(header + yaml.safe_dump(accelerate, sort_keys=False), encoding="utf-8")
    return acc_path, ds_path
