"""Write the inspect_ai logs in this folder: real logs of scripted ``mockllm`` runs.

Run in a separate venv with inspect_ai (0.3.285 wrote the committed logs; honestci does not depend
on it): ``python make_logs.py`` (from this folder). It writes

- ``capitals_paris-or-tokyo.json`` / ``capitals_lima.json`` and the same runs as ``.eval`` (the
  zipped default format, zstd members): two models answering "Paris or Tokyo" and "Lima" to three
  capital questions, ``match(location="any")`` scoring C/I, 2 epochs;
- ``graded_paris-or-tokyo.eval`` / ``graded_lima.eval``: the same two models graded by
  ``model_graded_qa(partial_credit=True)`` with a ``grader`` model role (``mockllm/grader``,
  scripted: C for the exact answer, P when the answer contains it, I otherwise);
- ``pairwise.eval``: a pairwise judge. ``mockllm/policy`` answers 24 sums; the ``grader`` role
  (``mockllm/grader``) compares its answer with the ``baseline-v1`` answer stored in the sample's
  metadata, in both presentation orders (two scorers, ``pairwise`` with the policy shown first and
  ``pairwise1`` with it second). Each score's value is ``A``/``B``/``tie`` and its metadata names the
  systems shown (``model_a``, ``model_b``), their texts and the judge.

Scripted rules (no randomness): the policy is wrong when (a + b) % 4 == 0; the baseline is wrong
when a is odd; the grader prefers the one correct answer, says ``tie`` when both are wrong and
``A`` when both are right (a judge that favours the first position).
"""

import re
import shutil
from pathlib import Path

import tiktoken
from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.scorer import Score, Target, match, model_graded_qa, scorer
from inspect_ai.solver import TaskState

HERE = Path(__file__).parent


class _Whitespace:
    """tiktoken downloads its encoding at first use (no network here); this stands in. It only
    feeds inspect_ai's token counting, not the outputs or the scores."""

    name = "whitespace"

    def encode(self, text, *args, **kwargs):
        return list(range(len(text.split())))


tiktoken.get_encoding = lambda *a, **k: _Whitespace()
tiktoken.encoding_for_model = lambda *a, **k: _Whitespace()

CAPITALS = [
    Sample(id="fr", input="What is the capital of France? Answer with one word.", target="Paris"),
    Sample(id="jp", input="What is the capital of Japan? Answer with one word.", target="Tokyo"),
    Sample(id="pe", input="What is the capital of Peru? Answer with one word.", target="Lima"),
]


@task
def capitals():
    return Task(dataset=CAPITALS, scorer=match(location="any"), epochs=2)


@task
def capitals_graded():
    return Task(dataset=CAPITALS, scorer=model_graded_qa(partial_credit=True, model_role="grader"))


def _text(messages) -> str:
    return "\n".join(m.text for m in messages)


def mock(name: str, answer):
    """inspect_ai's mock provider ``mockllm/NAME``: ``answer(prompt text)`` is its reply."""

    def reply(messages, tools, tool_choice, config):
        return ModelOutput.from_content(model=f"mockllm/{name}", content=answer(_text(messages)))

    return get_model(f"mockllm/{name}", custom_outputs=reply, memoize=False)


def grade(prompt: str) -> str:
    """The graded run's grader: C for the exact answer, P when it contains it, I otherwise."""
    answer = re.search(r"\[Submission\]: (.*)", prompt).group(1).strip()
    target = re.search(r"\[Criterion\]: (.*)", prompt).group(1).strip()
    return "GRADE: C" if answer == target else "GRADE: P" if target in answer else "GRADE: I"


# ---------------------------------------------------------------------------------------- pairwise
SUMS = [(3 + i, 5 + 2 * i) for i in range(24)]


def sums_dataset():
    return [
        Sample(
            id=f"q{i + 1:02d}",
            input=f"What is {a} + {b}? Answer with the number.",
            target=str(a + b),
            metadata={"baseline_model": "baseline-v1", "baseline_response": str(a + b + (a % 2))},
        )
        for i, (a, b) in enumerate(SUMS)
    ]


def policy_answer(prompt: str) -> str:
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", prompt).groups())
    return str(a + b + ((a + b) % 4 == 0))


def judge_pair(prompt: str) -> str:
    """The pairwise grader: the one correct answer wins; both right → A (first); both wrong → tie."""
    target = re.search(r"Correct answer: (\d+)", prompt).group(1)
    a = re.search(r"Response A: (\S+)", prompt).group(1) == target
    b = re.search(r"Response B: (\S+)", prompt).group(1) == target
    return "[[A]]" if a else "[[B]]" if b else "[[tie]]"


@scorer(metrics=[])
def pairwise(policy_first: bool = True):
    """Ask the grader role which of the policy's answer and the baseline's is better, the policy
    shown first (``policy_first``) or second; value A/B/tie, the systems shown in the metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        policy = (str(state.model), state.output.completion)
        baseline = (state.metadata["baseline_model"], state.metadata["baseline_response"])
        (model_a, response_a), (model_b, response_b) = (policy, baseline) if policy_first else (baseline, policy)
        grader = get_model(role="grader")
        prompt = (
            f"Question: {state.input_text}\nCorrect answer: {target.text}\n"
            f"Response A: {response_a}\nResponse B: {response_b}\nWhich is better? [[A]], [[B]] or [[tie]]."
        )
        reply = (await grader.generate(prompt)).completion
        verdict = re.search(r"\[\[(A|B|tie)\]\]", reply)
        return Score(
            value=verdict.group(1) if verdict else None,
            answer=reply,
            metadata={
                "model_a": model_a,
                "model_b": model_b,
                "response_a": response_a,
                "response_b": response_b,
                "judge": str(grader),
            },
        )

    return score


@task
def pairwise_sums():
    return Task(dataset=sums_dataset(), scorer=[pairwise(policy_first=True), pairwise(policy_first=False)])


def _run(the_task, model, fmt: str, name: str, **kwargs) -> None:
    """Run, then move the single log written into this folder as ``name``."""
    tmp = HERE / "_logs"
    shutil.rmtree(tmp, ignore_errors=True)
    eval(the_task, model=model, log_format=fmt, log_dir=str(tmp), display="none", **kwargs)
    (log,) = tmp.iterdir()
    log.rename(HERE / name)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    for answer, tag in (("Paris or Tokyo", "paris-or-tokyo"), ("Lima", "lima")):
        for fmt in ("json", "eval"):
            _run(capitals(), mock("model", lambda _p, a=answer: a), fmt, f"capitals_{tag}.{fmt}")
        _run(
            capitals_graded(),
            mock(tag, lambda _p, a=answer: a),
            "eval",
            f"graded_{tag}.eval",
            model_roles={"grader": mock("grader", grade)},
        )
    _run(
        pairwise_sums(),
        mock("policy", policy_answer),
        "eval",
        "pairwise.eval",
        model_roles={"grader": mock("grader", judge_pair)},
    )
