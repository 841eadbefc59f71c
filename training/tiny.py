"""Tiny causal LMs built from a config, with a byte-level BPE tokenizer trained here (nothing downloaded).

Tests and CPU dry runs of the judges and the training jobs share this one builder: a Qwen3-architecture
model (hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 16, tied embeddings) and a tokenizer trained
with ``tokenizers`` on the texts given, wrapped in ``PreTrainedTokenizerFast`` with eos and pad tokens
and a ChatML chat template. A random model never emits EOS on its own, so generation stops at
``max_new_tokens``: tests assert on parameters and rewards, not on the (near-zero) logged loss.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

#: ChatML, as Qwen models use; ``add_generation_prompt`` opens the assistant turn.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<pad>", "<think>", "</think>")

#: Varied filler so the BPE vocabulary is not tiny even when the caller's texts are few.
_FILLER = (
    "You are helping someone see a hard moment in a kinder light. Maybe your friend was overwhelmed.",
    "Perhaps your coworker did not realise how much the idea meant to you; you can raise it calmly.",
    "It is possible that your partner cancelled because of stress at work, not because of you.",
    "Final verdict: [[A]] [[B]] [[C]] Response A is better. Response B is clearer. It is a tie.",
    "SCENARIO: a neighbour ignored a greeting; a sibling forgot a promise; a teacher criticised a draft.",
    "0123456789 .,;:!?'\"()[]{}<>-_/\\ The quick brown fox jumps over the lazy dog.",
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts`` (+ filler), with ChatML."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(list(texts) * 5 + list(_FILLER) * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<pad>", bos_token=None)
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_config(tokenizer, *, hidden_size: int = 64, num_hidden_layers: int = 2):
    """A ``Qwen3Config`` sized for CPU tests, with the tokenizer's vocabulary and special ids."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_causal_lm(
    folder: str | Path, texts: Iterable[str] = (), *, seed: int = 0, vocab_size: int = 512
) -> Path:
    """Save a randomly initialised tiny causal LM and its tokenizer into ``folder`` (safetensors).

    Parameters
    ----------
    folder
        Created if missing; ends up loadable with ``from_pretrained(folder, local_files_only=True)``.
    texts
        Text the tokenizer is trained on (prompts and answers of the task at hand).
    seed
        Seed of the weight initialisation (torch's global state is forked, not changed).
    """
    import torch
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    config = tiny_config(tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def fixture_texts() -> list[str]:
    """Texts of the embedded fixture study (scenarios, answers, training corpus) for the tokenizer."""
    import json

    from honestci.training.task import HONESTCI_PROMPT

    study = Path(__file__).resolve().parents[1] / "fixtures" / "study"
    texts = [HONESTCI_PROMPT.system, HONESTCI_PROMPT.user_template]  # the default prompt (as before presets)
    for name in ("vignettes.jsonl", "responses.jsonl", "corpus.jsonl"):
        path = study / name
        if path.is_file():
            texts += [
                json.loads(line).get("text") or "" for line in path.read_text(encoding="utf-8").splitlines()[:400]
            ]
    return texts


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit(
            "usage: python -m honestci.training.tiny FOLDER  (a tiny Qwen3 model + tokenizer trained on the fixture texts)"
        )
    print(build_tiny_causal_lm(sys.argv[1], fixture_texts()))
