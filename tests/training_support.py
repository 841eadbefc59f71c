"""Shared pieces of the training tests: a tiny study subset, a tiny base model, an untrained ensemble.

Built once per test session under pytest's base temp folder (whichever test asks first).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "study"


def tiny_study(folder: Path, pairs_per_vignette: int = 4) -> dict[str, Path]:
    """The fixture's vignettes and responses, with the first ``pairs_per_vignette`` human pairs per
    vignette (all their raters) and the ratings of those pairs' answers."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = pd.read_json(FIXTURE / "human_pairs.jsonl", lines=True, dtype=False)
    pairs["key"] = pairs["response_a"] + "|" + pairs["response_b"]
    keep = pairs.groupby("vignette_id")["key"].apply(lambda k: list(dict.fromkeys(k))[:pairs_per_vignette])
    pairs = pairs[pairs["key"].isin([k for keys in keep for k in keys])].drop(columns="key")
    ratings = pd.read_json(FIXTURE / "human_ratings.jsonl", lines=True, dtype=False)
    ratings = ratings[ratings["response_id"].isin(set(pairs["response_a"]) | set(pairs["response_b"]))]
    paths = {
        "vignettes": FIXTURE / "vignettes.jsonl",
        "responses": FIXTURE / "responses.jsonl",
        "human_pairs": folder / "human_pairs.jsonl",
        "human_ratings": folder / "human_ratings.jsonl",
    }
    pairs.to_json(paths["human_pairs"], orient="records", lines=True)
    ratings.to_json(paths["human_ratings"], orient="records", lines=True)
    return paths


def tiny_base(base_temp: Path) -> Path:
    """A tiny Qwen3 causal LM with a tokenizer trained on the fixture texts (built once)."""
    from honestci.training.tiny import build_tiny_causal_lm, fixture_texts

    folder = base_temp / "tiny-base"
    if not (folder / "model.safetensors").is_file():
        build_tiny_causal_lm(folder, fixture_texts())
    return folder


def untrained_ensemble(
    base: Path, folder: Path, seeds=(0, 1), ensemble_lambda: float = 0.5, prompt: str = "honestci"
) -> Path:
    """K sequence-classification heads on the tiny base, initialised with different seeds (not trained),
    saved as an ensemble folder; the standardisation is the identity (mean 0, sd 1); ``prompt`` (a
    preset) is recorded as the chat they score."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from honestci.training.task import PROMPT_PRESETS

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    members = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, local_files_only=True)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(folder / f"member-seed{seed}", safe_serialization=True)
        tokenizer.save_pretrained(folder / f"member-seed{seed}")
        members.append({"seed": seed, "path": f"member-seed{seed}", "mean": 0.0, "std": 1.0})
    (folder / "ensemble.json").write_text(
        json.dumps(
            {
                "kind": "untrained",
                "ensemble_lambda": ensemble_lambda,
                "max_length": 256,
                "prompt": PROMPT_PRESETS[prompt].record(),
                "members": members,
            }
        )
    )
    return folder


def changed_tensors(before: Path, after: Path) -> tuple[int, int]:
    """(tensors that differ, tensors compared) between two safetensors files, over shared names."""
    from safetensors.torch import load_file

    a, b = load_file(before), load_file(after)
    shared = sorted(set(a) & set(b))
    return sum(not a[k].equal(b[k]) for k in shared), len(shared)
