"""The reappraisal task as the policy sees it: prompts, the answer after ``</think>``, the format gate.

The protocol follows the seed project's recipe (its model card): the policy is told to address the
person in the scenario in the second person, in two sentences at most, and to output only the
reinterpretation; a thinking model's reasoning trace ``<think>…</think>`` is not part of the
answer. The wording below is honestci's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SYSTEM_PROMPT = (
    "Someone is upset about a short interpersonal scenario. Give them another, more charitable way of "
    "reading what happened, so that the negative feeling loses some of its hold. Talk to them directly "
    'as "you", keep it to two sentences or fewer, and write only that reinterpretation: no list of '
    "emotions, no preamble."
)
USER_TEMPLATE = (
    "Scenario:\n{scenario}\n\n"
    'In two sentences or fewer, and speaking to the person as "you", offer a reinterpretation of this scenario.'
)
THINK_CLOSE = "</think>"
THINK_OPEN = "<think>"
#: A sentence ends at ., ! or ? (runs such as "?!" or "..." count once) followed by space or the end.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


def messages_for(scenario: str) -> list[dict]:
    """The chat the policy is given for one scenario (system prompt + user turn)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_TEMPLATE.format(scenario=scenario)},
    ]


def unfinished_think(output: str, *, thinking: bool = False) -> bool:
    """Whether ``output`` is a reasoning trace cut before its end (no answer).

    True when a ``<think>`` opens after the last ``</think>`` (or with none), and, for a thinking
    model (``thinking=True``: its trace may open in the prompt, so the completion shows no
    ``<think>``), whenever ``</think>`` is missing: the model ran out of tokens while thinking.
    """
    tail = output.rsplit(THINK_CLOSE, 1)[1] if THINK_CLOSE in output else output
    return THINK_OPEN in tail or (thinking and THINK_CLOSE not in output)


def extract_answer(output: str, *, thinking: bool = False) -> str:
    """The answer in a generation: the text after the last ``</think>``, stripped.

    A trace that never closes has no answer (empty string; :func:`unfinished_think`). Output of a
    non-thinking model without any think tags is the answer as is.
    """
    if unfinished_think(output, thinking=thinking):
        return ""
    return output.rsplit(THINK_CLOSE, 1)[-1].strip()


def count_sentences(text: str) -> int:
    """Sentences in ``text``: terminal punctuation runs followed by space or the end, plus a trailing
    fragment without terminal punctuation. Abbreviations such as "e.g." count as ends (errs long)."""
    text = text.strip()
    if not text:
        return 0
    ends = list(_SENTENCE_END.finditer(text))
    trailing = text[ends[-1].end() :].strip() if ends else text
    return len(ends) + (1 if trailing else 0)


@dataclass(frozen=True)
class FormatCheck:
    """The format gate's decision on one answer."""

    passed: bool
    reason: str  # one of GATE_REASONS
    n_sentences: int


#: The format gate's reasons: passed, no sentence, too many sentences, a trace cut before </think>.
GATE_REASONS = ("ok", "empty", "too_long", "unfinished_think")


def format_gate(answer: str, max_sentences: int = 2) -> FormatCheck:
    """Pass an answer that is non-empty and at most ``max_sentences`` sentences long.

    The gate keeps the policy from buying reward with length (the seed project's recipe
    penalises empty answers and answers longer than two sentences).
    """
    n = count_sentences(answer)
    if n == 0:
        return FormatCheck(False, "empty", 0)
    if n > max_sentences:
        return FormatCheck(False, "too_long", n)
    return FormatCheck(True, "ok", n)


def check_completion(output: str, max_sentences: int = 2, *, thinking: bool = False) -> tuple[str, FormatCheck]:
    """The answer of a completion and the format gate's decision on it.

    A trace cut before ``</think>`` (:func:`unfinished_think`) fails with reason
    ``"unfinished_think"`` and an empty answer: the text of an unfinished trace is never scored.
    """
    if unfinished_think(output, thinking=thinking):
        return "", FormatCheck(False, "unfinished_think", 0)
    answer = extract_answer(output)
    return answer, format_gate(answer, max_sentences)
