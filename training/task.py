"""The reappraisal task as the policy sees it: prompts, the answer after ``</think>``, the format gate.

The protocol follows the seed project's recipe (its model card): the policy is told to address the
person in the scenario in the second person, in two sentences at most, and to output only the
reinterpretation; a thinking model's reasoning trace ``<think>…</think>`` is not part of the
answer. The chat (system prompt + user turn) is a :class:`Prompt`: a named preset of
:data:`PROMPT_PRESETS` (``honestci``, honestci's own wording and the default; ``card``, the seed
card's wording verbatim) or a custom one from a config's ``prompt:`` key (:func:`resolve_prompt`).
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from typing import Any

from honestci.training.config import refuse, require


@dataclass(frozen=True)
class Prompt:
    """The policy's chat for a scenario: a system prompt and a user template with one ``{scenario}``."""

    system: str
    user_template: str
    name: str = "custom"

    @property
    def sha256(self) -> str:
        """SHA-256 of ``system``, a NUL byte and ``user_template`` (names the chats, not the preset)."""
        return hashlib.sha256((self.system + "\x00" + self.user_template).encode("utf-8")).hexdigest()

    def user(self, scenario: str) -> str:
        """The user turn for ``scenario``."""
        return self.user_template.format(scenario=scenario)

    def record(self) -> dict[str, str]:
        """What a run writes about its prompt (read back by :func:`prompt_from_record`)."""
        return {"name": self.name, "sha256": self.sha256, "system": self.system, "user_template": self.user_template}

    def describe(self) -> str:
        """``'card' (sha256 1a2b3c4d5e6f…)``, for messages that compare two prompts."""
        return f"{self.name!r} (sha256 {self.sha256[:12]}…)"


#: honestci's own wording of the seed project's protocol (the default).
HONESTCI_PROMPT = Prompt(
    system=(
        "Someone is upset about a short interpersonal scenario. Give them another, more charitable way of "
        "reading what happened, so that the negative feeling loses some of its hold. Talk to them directly "
        'as "you", keep it to two sentences or fewer, and write only that reinterpretation: no list of '
        "emotions, no preamble."
    ),
    user_template=(
        "Scenario:\n{scenario}\n\n"
        'In two sentences or fewer, and speaking to the person as "you", offer a reinterpretation of this '
        "scenario."
    ),
    name="honestci",
)
#: The seed model card's prompt, verbatim ("## Prompting": its system prompt block and user turn).
CARD_PROMPT = Prompt(
    system=(
        "You are helping someone reduce a negative emotion they feel in a short interpersonal scenario by\n"
        "offering an alternative interpretation of the situation (a 'reappraisal' / 'rethinking'). Direct\n"
        "your response at the person in the scenario in second person. Limit your response to two sentences\n"
        "maximum. Do not list emotions; output only the reappraisal text."
    ),
    user_template=(
        "SCENARIO:\n{scenario}\n\nWrite a reappraisal of this scenario in two sentences maximum, addressing "
        "the person in second person."
    ),
    name="card",
)
PROMPT_PRESETS: dict[str, Prompt] = {p.name: p for p in (HONESTCI_PROMPT, CARD_PROMPT)}
DEFAULT_PROMPT = HONESTCI_PROMPT
#: A config's ``prompt:`` value: a preset name or a mapping with ``system`` and ``user_template``.
PromptSpec = str | dict

THINK_CLOSE = "</think>"
THINK_OPEN = "<think>"
#: A sentence ends at ., ! or ? (runs such as "?!" or "..." count once) followed by space or the end.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


def _template_problem(template: str) -> str:
    """Why ``template`` is not a user template with exactly one bare ``{scenario}`` field ("" when it is)."""
    try:
        fields = [(f, conv, spec) for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        return f"is not a format string ({exc}; write a literal brace as {{{{ or }}}})"
    others = sorted({f for f, _, _ in fields if f != "scenario"})
    if others:
        return f"has format field(s) {others} besides {{scenario}}"
    if len(fields) != 1:
        return f"has {len(fields)} {{scenario}} fields; it needs exactly one"
    if fields[0][1] or fields[0][2]:
        return "formats {scenario} with a conversion or spec; write a bare {scenario}"
    return ""


def resolve_prompt(spec: Any, field: str = "prompt") -> Prompt:
    """The :class:`Prompt` a config's ``prompt:`` value names.

    ``spec`` is a preset name of :data:`PROMPT_PRESETS` or a mapping ``{system, user_template}``
    (optionally ``name``, which may not be a preset's). Raises
    :class:`~honestci.training.config.TrainingConfigError` naming ``field`` (exit 2) for an unknown
    preset, an empty system prompt, or a template without exactly one bare ``{scenario}`` field or
    with other format fields.
    """
    if isinstance(spec, str):
        if spec not in PROMPT_PRESETS:
            refuse(
                field,
                f"is {spec!r}, not a preset",
                f"use one of {sorted(PROMPT_PRESETS)} or a mapping "
                "{system: ..., user_template: '...{scenario}...'}",
            )
        return PROMPT_PRESETS[spec]
    if not isinstance(spec, dict):
        refuse(field, f"is {spec!r}", "give a preset name or a mapping {system: ..., user_template: ...}")
    unknown = sorted(set(spec) - {"system", "user_template", "name"})
    require(not unknown, field, f"has unknown key(s) {unknown}", "a custom prompt has system and user_template")
    system, template, name = spec.get("system"), spec.get("user_template"), spec.get("name", "custom")
    if not isinstance(system, str) or not system.strip():
        refuse(f"{field}.system", f"is {system!r}; it must be a non-empty string", "write the system prompt")
    if not isinstance(template, str):
        refuse(f"{field}.user_template", f"is {template!r}; it must be a string", "e.g. 'Scenario:\\n{scenario}'")
    problem = _template_problem(template)
    require(not problem, f"{field}.user_template", problem, "put exactly one {scenario} where the scenario goes")
    if not isinstance(name, str) or not name.strip() or name in PROMPT_PRESETS:
        refuse(
            f"{field}.name", f"is {name!r}", f"name a custom prompt anything but a preset ({sorted(PROMPT_PRESETS)})"
        )
    return Prompt(system, template, name)


def prompt_from_record(record: Any, where: str) -> Prompt:
    """The :class:`Prompt` a run recorded (:meth:`Prompt.record`), its hash checked against its text.

    Raises :class:`~honestci.audit.errors.InputError` (exit 2) when ``record`` is missing or does not
    hash to its recorded ``sha256`` (``where`` names the file).
    """
    from honestci.audit.errors import InputError

    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) for k in ("name", "sha256", "system", "user_template")
    ):
        raise InputError(
            f"{where} records no prompt (name, sha256, system, user_template): the chats its models were trained "
            "on are unknown.",
            fix="retrain with honestci train rm, which records the prompt (honestci does not guess it)",
        )
    prompt = Prompt(record["system"], record["user_template"], record["name"])
    if prompt.sha256 != record["sha256"]:
        raise InputError(
            f"{where}: the recorded prompt {record['name']!r} does not hash to its recorded sha256.",
            fix="the record was edited; retrain with honestci train rm",
        )
    return prompt


def messages_for(scenario: str, prompt: Prompt = DEFAULT_PROMPT) -> list[dict]:
    """The chat the policy is given for one scenario (``prompt``'s system prompt + user turn)."""
    return [
        {"role": "system", "content": prompt.system},
        {"role": "user", "content": prompt.user(scenario)},
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
