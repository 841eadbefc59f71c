"""Versioned pairwise judging templates; the SHA-256 of the template text goes with every verdict.

A template is a system message and a user message with three slots: ``{scenario}``,
``{response_a}`` (shown first, position A) and ``{response_b}`` (shown second, position B). The
answer format follows MT-Bench's pairwise prompt (Zheng et al. 2023, "Judging LLM-as-a-Judge"):
``[[A]]``, ``[[B]]`` or ``[[C]]`` for a tie, after a short explanation. Changing one character of
a template changes its hash, so verdicts from different prompts are never mixed unknowingly.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from honestci.audit.errors import InputError, Problem

SLOTS = ("{scenario}", "{response_a}", "{response_b}")
_SLOT_PATTERN = re.compile("|".join(re.escape(slot) for slot in SLOTS))


@dataclass(frozen=True)
class PairwiseTemplate:
    """A pairwise judging prompt.

    Attributes
    ----------
    name, version
        Human-readable identity (``reappraisal-effectiveness``, ``1``).
    system, user
        Message texts; ``user`` contains each of ``{scenario}``, ``{response_a}``, ``{response_b}``
        exactly once.
    """

    name: str
    version: str
    system: str
    user: str

    def __post_init__(self) -> None:
        missing = [slot for slot in SLOTS if self.user.count(slot) != 1]
        if missing:
            raise InputError(
                f"Template {self.name!r}: each slot must appear exactly once in the user message.",
                [Problem(self.name, None, "user", f"slot {slot} missing or repeated") for slot in missing],
                fix="write {scenario}, {response_a} and {response_b} once each",
            )

    @property
    def sha256(self) -> str:
        """SHA-256 (hex) of the template text: system and user messages joined by a NUL byte."""
        return hashlib.sha256((self.system + "\x00" + self.user).encode("utf-8")).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.name}@v{self.version}"

    def render(self, scenario: str, response_a: str, response_b: str) -> list[dict]:
        """Chat messages for one ordered comparison (A shown first).

        Slots are filled by plain replacement (not ``str.format``), so braces inside the texts
        are safe.
        """
        pieces = {"{scenario}": scenario, "{response_a}": response_a, "{response_b}": response_b}
        # One pass: text inside a response that looks like a slot is never expanded.
        content = _SLOT_PATTERN.sub(lambda match: pieces[match.group(0)], self.user)
        messages = [{"role": "user", "content": content}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        return messages


REAPPRAISAL_V1 = PairwiseTemplate(
    name="reappraisal-effectiveness",
    version="1",
    system=(
        "You are an expert in emotion regulation and cognitive reappraisal. You compare two "
        "reappraisals written for a person in a distressing scenario and judge which one would more "
        "effectively reduce that person's negative emotion. Judge effectiveness for the person, not "
        "length, style or the order in which the reappraisals are shown."
    ),
    user=(
        "[Scenario]\n{scenario}\n\n"
        "[Reappraisal A]\n{response_a}\n[End of Reappraisal A]\n\n"
        "[Reappraisal B]\n{response_b}\n[End of Reappraisal B]\n\n"
        "Which reappraisal would more effectively reduce the negative emotion of the person in the "
        "scenario? Explain your reasoning briefly, then output your final verdict strictly in this "
        'format: "[[A]]" if Reappraisal A is more effective, "[[B]]" if Reappraisal B is more '
        'effective, or "[[C]]" for a tie.'
    ),
)

GENERAL_V1 = PairwiseTemplate(
    name="general-helpfulness",
    version="1",
    system=(
        "Please act as an impartial judge and evaluate the quality of the responses provided by two AI "
        "assistants to the user question displayed below. Choose the assistant that follows the user's "
        "instructions and answers the user's question better. Avoid any position biases and ensure that "
        "the order in which the responses were presented does not influence your decision. Do not let "
        "the length of the responses influence your evaluation."
    ),
    user=(
        "[User Question]\n{scenario}\n\n"
        "[The Start of Assistant A's Answer]\n{response_a}\n[The End of Assistant A's Answer]\n\n"
        "[The Start of Assistant B's Answer]\n{response_b}\n[The End of Assistant B's Answer]\n\n"
        "After a short explanation, output your final verdict by strictly following this format: "
        '"[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.'
    ),
)

TEMPLATES: dict[str, PairwiseTemplate] = {t.label: t for t in (REAPPRAISAL_V1, GENERAL_V1)}
DEFAULT_TEMPLATE = REAPPRAISAL_V1.label


def get_template(name_or_path: str | Path = DEFAULT_TEMPLATE) -> PairwiseTemplate:
    """A built-in template by label (``reappraisal-effectiveness@v1``) or one from a YAML file.

    The YAML file has keys ``name``, ``version``, ``system`` (may be empty) and ``user``.
    """
    key = str(name_or_path)
    if key in TEMPLATES:
        return TEMPLATES[key]
    path = Path(key)
    if not path.is_file():
        raise InputError(
            f"Unknown judging template {key!r}.",
            fix=f"use one of {sorted(TEMPLATES)} or a YAML file with name, version, system, user",
        )
    import yaml

    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems = []
    if not isinstance(spec, dict):
        spec = {}
        problems.append(Problem(str(path), None, None, "not a mapping", "write keys name, version, system, user"))
    for field in ("name", "version", "user"):
        if not isinstance(spec.get(field), (str, int, float)) or str(spec.get(field)) == "":
            problems.append(Problem(str(path), None, field, "missing", f"give the template a {field}"))
    if problems:
        raise InputError(f"{path}: not a judging template.", problems)
    return PairwiseTemplate(
        name=str(spec["name"]),
        version=str(spec["version"]),
        system=str(spec.get("system") or ""),
        user=str(spec["user"]),
    )
