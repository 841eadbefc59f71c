"""Write capitals_*.json: real inspect_ai JSON logs of two scripted ``mockllm/model`` runs.

Run in a separate venv with inspect_ai (0.3.285 wrote the committed logs; honestci does not depend
on it): ``python make_logs.py``, then rename ``logs_a/*.json`` → ``capitals_paris-or-tokyo.json`` and
``logs_b/*.json`` → ``capitals_lima.json``.
"""

import tiktoken
from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.scorer import match


class _Whitespace:
    """tiktoken downloads its encoding at first use (no network here); this stands in. It only
    feeds inspect_ai's token counting, not the outputs or the scores."""

    name = "whitespace"

    def encode(self, text, *args, **kwargs):
        return list(range(len(text.split())))


tiktoken.get_encoding = lambda *a, **k: _Whitespace()
tiktoken.encoding_for_model = lambda *a, **k: _Whitespace()


@task
def capitals():
    return Task(
        dataset=[
            Sample(id="fr", input="What is the capital of France? Answer with one word.", target="Paris"),
            Sample(id="jp", input="What is the capital of Japan? Answer with one word.", target="Tokyo"),
            Sample(id="pe", input="What is the capital of Peru? Answer with one word.", target="Lima"),
        ],
        scorer=match(location="any"),
        epochs=2,
    )


def mock(answer: str):
    """inspect_ai's mock provider, answering ``answer`` to all 3 samples x 2 epochs."""
    outputs = [ModelOutput.from_content(model="mockllm/model", content=answer)] * 6
    return get_model("mockllm/model", custom_outputs=outputs, memoize=False)


if __name__ == "__main__":
    for answer, tag in (("Paris or Tokyo", "a"), ("Lima", "b")):
        eval(capitals(), model=mock(answer), log_format="json", log_dir=f"logs_{tag}", display="none")
