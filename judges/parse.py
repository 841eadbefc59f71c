"""Turn a judge's free-text reply into a position verdict (A, B or tie), or ``invalid``.

The parser reads what real judges write: ``[[A]]`` (MT-Bench format), a bare ``A``/``B``,
``Response 1``, ``Output (a)`` (AlpacaEval's older prompts), JSON such as ``{"winner": "A"}``,
``Final verdict: B`` and a verdict stated after reasoning (``... Overall, Response B is more
effective.``). It never guesses: a reply with no verdict, or with conflicting final verdicts
(``[[A]]`` and ``[[B]]``, ``Final answer: A`` and ``Final answer: B``) is ``invalid``, and the run
counts and shows every invalid verdict.

Evidence is read in two tiers. Strong evidence (bracketed tokens, JSON verdict fields, labelled
statements such as ``Final verdict: B``, a reply or a first/last line that is only a label) must
agree; it decides. Only when there is none are weak statements (``Response A is better``, ``I
would choose B``) used: they decide when they all agree, or when the statements that carry a
conclusion marker (*overall*, *therefore*, *in conclusion*, ...) agree.

Reasoning traces in ``<think>...</think>`` are removed first; an unclosed ``<think>`` means the
reply ended while still reasoning, so nothing after it is read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

A, B, TIE = "A", "B", "tie"
POSITION_TO_VERDICT = {A: "first", B: "second", TIE: "tie", None: "invalid"}

_LABEL_WORDS = r"(?:response|output|assistant|reappraisal|option|candidate|answer|model|system|text)"
_FLAGS = re.IGNORECASE

# A whole clause that is only a label: "Response 1", "output (a)", "the second one", "tie", "[[C]]".
_LABEL_FORMS = [
    (re.compile(rf"(?:the\s+)?(?:{_LABEL_WORDS}\s*)?\(?([ab])\)?", _FLAGS), None),
    (re.compile(rf"(?:the\s+)?(?:{_LABEL_WORDS}\s*)?(?:#|no\.?\s*)?\(?([12])\)?", _FLAGS), None),
    (re.compile(rf"(?:the\s+)?(first|second)(?:\s+(?:one|{_LABEL_WORDS}))?", _FLAGS), None),
    (re.compile(r"(?:it\s*(?:'s|is)\s+)?(?:a\s+)?(tie|draw|c|equal|equally (?:good|effective|helpful))", _FLAGS), TIE),
    (re.compile(r"\[\[([abc])\]\]", _FLAGS), None),
]
_TOKEN_TO_POSITION = {"a": A, "1": A, "first": A, "b": B, "2": B, "second": B, "c": TIE}

_MARKUP = re.compile(r"[*_`\"'“”‘’]+")
_TRAILING = re.compile(
    r"\s*(?:[.!:;,]\s*.*|\s+(?:because|since|as|due|for|which|with|—|-)\b.*|\s+(?:is|was|would be|wins|seems)\b.*)$",
    _FLAGS | re.DOTALL,
)


def _label(clause: str) -> str | None:
    """The position a short clause names, or None when it is not just a label."""
    text = _MARKUP.sub("", clause).strip()
    for candidate in (text, _TRAILING.sub("", text).strip()):
        candidate = candidate.strip(" .!:;,")
        for pattern, fixed in _LABEL_FORMS:
            match = pattern.fullmatch(candidate)
            if match:
                return fixed or _TOKEN_TO_POSITION.get(match.group(1).lower(), TIE)
    return None


_THINK_BLOCK = re.compile(r"<think>.*?</think>", _FLAGS | re.DOTALL)
_THINK_OPEN = re.compile(r"<think>.*", _FLAGS | re.DOTALL)

# [[A]] but not the echoed instruction '"[[A]]" if assistant A is better'.
_BRACKETS = re.compile(r"\[\[\s*(a|b|c|tie)\s*\]\](?![\"']?\s*(?:if|for)\b)", _FLAGS)
_FIRST_LINE_TOKEN = re.compile(r"\(?[abc12]\)?|tie|\[\[[abc]\]\]", _FLAGS)
_JSON_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)
_JSON_KEYS = {
    "winner",
    "verdict",
    "preference",
    "preferred",
    "better",
    "better_response",
    "choice",
    "answer",
    "final_answer",
    "final_verdict",
    "result",
    "decision",
    "best",
    "selected",
    "more_effective",
}
_LABELLED = re.compile(
    r"(?:final\s+|my\s+|overall\s+)?(?:verdict|answer|choice|decision|winner|judg(?:e)?ment|preference)"
    r"\s*(?:is\s*:?|:|=|-|–)\s*(?P<clause>[^\n.;,]{1,60})",
    _FLAGS,
)

_SUBJECT = (
    rf"(?:the\s+)?(?:{_LABEL_WORDS}\s*\(?[ab12]\)?|(?:first|second)\s+(?:one|{_LABEL_WORDS})"
    r"|(?-i:\(?[AB]\)?))"
)
_COMPARATIVE = (
    r"(?:better|more\s+effective|superior|preferable|preferred|stronger|the\s+winner|more\s+helpful"
    r"|more\s+likely\s+to\s+(?:reduce|help|work)|the\s+(?:better|stronger|more\s+effective)\s+(?:one|choice|option))"
)
_WEAK = [
    re.compile(
        rf"(?P<subj>{_SUBJECT})\s+(?:is|was|would\s+be|seems|appears|remains)\s+(?:\w+\s+){{0,2}}?{_COMPARATIVE}",
        _FLAGS,
    ),
    re.compile(rf"(?P<subj>{_SUBJECT})\s+wins\b", _FLAGS),
    re.compile(
        r"(?:better|more\s+effective|preferred|preferable|superior|stronger|winning|best)\s+"
        r"(?:response|output|reappraisal|option|one|choice|answer)?\s*(?:here\s+)?(?:is|would\s+be|:)\s*"
        r"(?P<clause>[^\n.;,]{1,40})",
        _FLAGS,
    ),
    re.compile(
        r"\b(?:i\s+(?:would\s+)?)?(?:choose|pick|prefer|select|go\s+with|recommend)\s+(?P<clause>[^\n.;,]{1,40})",
        _FLAGS,
    ),
]
_WEAK_TIE = re.compile(
    r"(?:it\s*(?:'s|is)|this\s+is|that\s+is|result\s+is)\s+a\s+(?:tie|draw)\b"
    r"|\b(?:both|the\s+two)\s+(?:\w+\s+){0,2}?(?:are|were)\s+equally\s+(?:good|effective|helpful|strong)",
    _FLAGS,
)
_CONCLUSION = re.compile(
    r"\b(?:overall|therefore|thus|in\s+conclusion|hence|so|ultimately|in\s+summary|finally"
    r"|all\s+things\s+considered|in\s+the\s+end|on\s+balance)\b",
    _FLAGS,
)


@dataclass(frozen=True)
class ParsedVerdict:
    """A parsed reply: ``position`` is ``"A"``, ``"B"``, ``"tie"`` or None (invalid); ``rule`` says why."""

    position: str | None
    rule: str

    @property
    def verdict(self) -> str:
        """The judgments-table verdict for this reply, position A being the first response."""
        return POSITION_TO_VERDICT[self.position]


def _strong_evidence(text: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def add(rule: str, position: str | None) -> None:
        if position is not None:
            found.setdefault(rule, set()).add(position)

    for match in _BRACKETS.finditer(text):
        token = match.group(1).lower()
        add("brackets", TIE if token in ("c", "tie") else _TOKEN_TO_POSITION[token])
    for match in _JSON_OBJECT.finditer(text):
        try:
            obj = json.loads(match.group(0))
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(obj, dict):
            for key, value in obj.items():
                if (
                    str(key).lower().replace(" ", "_") in _JSON_KEYS
                    and isinstance(value, (str, int))
                    and not isinstance(value, bool)
                ):
                    add("json", _label(str(value)))
    for match in _LABELLED.finditer(text):
        add("labelled", _label(match.group("clause")))
    lines = [line for line in text.splitlines() if line.strip()]
    if lines:
        add("bare", _bare(lines[-1]))
        # A first line counts only as a bare token ("B" then an explanation), never as a
        # heading such as "Response A:" that starts a review of A.
        if _FIRST_LINE_TOKEN.fullmatch(_MARKUP.sub("", lines[0]).strip().rstrip(".")):
            add("bare", _bare(lines[0]))
    return found


def _bare(line: str) -> str | None:
    """A line that is nothing but a label (no explanation, not a heading)."""
    stripped = line.strip()
    if stripped.startswith("#") or stripped.rstrip("*_ ").endswith(":"):
        return None
    text = _MARKUP.sub("", stripped).strip().strip(" .!")
    for pattern, fixed in _LABEL_FORMS:
        match = pattern.fullmatch(text)
        if match:
            return fixed or _TOKEN_TO_POSITION.get(match.group(1).lower(), TIE)
    return None


def _weak_evidence(text: str) -> list[tuple[str, bool]]:
    """(position, has a conclusion marker in its sentence) for each weak statement."""
    statements = []
    for pattern in _WEAK:
        for match in pattern.finditer(text):
            group = "subj" if "subj" in pattern.groupindex else "clause"
            position = _label(match.group(group))
            if position is not None:
                statements.append((match.start(), position))
    statements += [(m.start(), TIE) for m in _WEAK_TIE.finditer(text)]
    out = []
    for start, position in sorted(statements):
        sentence_start = max(text.rfind(sep, 0, start) for sep in (".", "!", "?", "\n")) + 1
        out.append((position, bool(_CONCLUSION.search(text[sentence_start : start + 1]))))
    return out


def parse_verdict(reply: str | None) -> ParsedVerdict:
    """Parse one judge reply.

    Returns
    -------
    ParsedVerdict
        ``position`` A (first response better), B (second better), ``tie``, or None with the
        reason in ``rule`` (``empty``, ``no verdict found``, ``conflicting ...``).

    Validated against hand-labelled real-looking judge outputs in ``tests/test_judges_parse.py``
    (MT-Bench, AlpacaEval, PandaLM, JSON and reasoning-model styles).
    """
    if reply is None or not reply.strip():
        return ParsedVerdict(None, "empty reply")
    text = _THINK_OPEN.sub("", _THINK_BLOCK.sub("", reply))
    if not text.strip():
        return ParsedVerdict(None, "reply is only reasoning (<think> block, unfinished or with nothing after it)")
    strong = _strong_evidence(text)
    positions = set().union(*strong.values()) if strong else set()
    if len(positions) == 1:
        return ParsedVerdict(positions.pop(), "+".join(sorted(strong)))
    if len(positions) > 1:
        return ParsedVerdict(None, f"conflicting verdicts {sorted(positions)} ({'+'.join(sorted(strong))})")
    weak = _weak_evidence(text)
    if not weak:
        return ParsedVerdict(None, "no verdict found")
    stated = {position for position, _ in weak}
    if len(stated) == 1:
        return ParsedVerdict(stated.pop(), "statement")
    concluded = {position for position, marked in weak if marked}
    if len(concluded) == 1:
        return ParsedVerdict(concluded.pop(), "concluding statement")
    return ParsedVerdict(None, f"conflicting statements {sorted(stated)}")
