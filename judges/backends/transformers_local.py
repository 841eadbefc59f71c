"""Judge with a local Hugging Face transformers model (CPU or GPU), one request at a time.

The model and tokenizer load from a local folder only (``local_files_only=True``): nothing is
downloaded at judging time. The chat template of the tokenizer renders the messages. Greedy
decoding at temperature 0; with temperature > 0 each request samples from its own seeded torch
generator state (forked, so torch's global random state is left untouched).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from honestci.audit.errors import require_extra
from honestci.judges.backends.base import BackendFatalError, Completion, JudgeRequest


class TransformersBackend:
    """Generate judge replies with ``AutoModelForCausalLM`` from ``model_path``.

    Parameters
    ----------
    model_path
        Folder with ``config.json``, the weights and the tokenizer (with a chat template).
    device
        ``cpu``, ``cuda``, ``cuda:1`` ...
    judge_name
        The ``judge`` column of the output (default: the folder name).
    seed
        Base seed of sampling when temperature > 0 (combined with the ordered pair's ids).
    """

    concurrency = 1

    def __init__(self, model_path: str | Path, *, device: str = "cpu", judge_name: str | None = None, seed: int = 0):
        require_extra(
            "train", "torch", "transformers", needed_by="the transformers judge backend", instead="judge over HTTP"
        )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise BackendFatalError(
                f"{path}: no config.json — not a local transformers model folder.",
                fix="pass --model-path pointing at a saved model (save_pretrained)",
            )
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if self.tokenizer.chat_template is None:
            raise BackendFatalError(
                f"{path}: the tokenizer has no chat template.", fix="save a tokenizer with a chat_template"
            )
        # PreTrainedModel.to is wrapped by functools.wraps, which the stubs type as unbound (self not filled in).
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device).eval()  # type: ignore[arg-type]
        self.path = path
        self.device = device
        self.judge_name = judge_name or path.name
        self.seed = seed

    def generate(self, request: JudgeRequest) -> str:
        """The decoded reply (new tokens only, special tokens removed)."""
        from transformers import BatchEncoding

        torch = self._torch
        sampling = request.sampling
        encoded = self.tokenizer.apply_chat_template(
            list(request.messages), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        if not isinstance(encoded, BatchEncoding):
            raise BackendFatalError(
                f"{self.path}: the tokenizer's chat template gave {type(encoded).__name__}, not token ids.",
                fix="save a tokenizer whose apply_chat_template returns token ids (transformers' own)",
            )
        input_ids = encoded["input_ids"].to(self.device)
        attention_mask = encoded["attention_mask"].to(self.device)
        temperature = float(sampling.get("temperature", 0.0))
        options = {
            "max_new_tokens": int(sampling.get("max_tokens", 512)),
            "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        }
        if temperature > 0:
            options.update(do_sample=True, temperature=temperature, top_p=float(sampling.get("top_p", 1.0)))
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        pair_seed = int(
            hashlib.sha256(f"{self.seed}|{request.response_first}|{request.response_second}".encode()).hexdigest()[:8],
            16,
        )
        devices = [self.device] if str(self.device).startswith("cuda") else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(pair_seed)
            output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **options)
        text = self.tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True)
        if not isinstance(text, str):  # one sequence decodes to one string
            raise BackendFatalError(f"{self.path}: the tokenizer decoded one reply into {len(text)} strings.")
        return text

    async def complete(self, request: JudgeRequest) -> Completion:
        try:
            text = await asyncio.to_thread(self.generate, request)
        except (RuntimeError, ValueError) as exc:  # e.g. prompt longer than the model's context
            return Completion(None, 1, f"generation failed: {type(exc).__name__}: {str(exc)[:200]}")
        return Completion(text, 1)

    async def aclose(self) -> None:
        return None
