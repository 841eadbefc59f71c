"""Reading YAML written by other people (claims, policies, job configs) without trusting it.

``yaml.SafeLoader`` only (no Python tags), a key given twice in one mapping is an error (plain YAML
keeps the last value silently), aliases may not expand a document past a size limit (the
"billion laughs" bomb), nesting is bounded, and every failure is a domain error that names the
file and line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, Strict, StringConstraints

from honestci.audit.errors import InputError, Problem

#: Deepest nesting of mappings and lists accepted (a claim or policy needs under ten).
MAX_DEPTH = 64
#: Most values a document may hold once its aliases are expanded (PyYAML shares an aliased value,
#: but whatever walks the result later, a validator or a JSON writer, expands it).
MAX_NODES = 100_000
#: Largest file read (a claim, policy or config is a few kilobytes).
MAX_BYTES = 4 * 1024 * 1024
#: Longest integer accepted, in characters as written (a seed or a count needs under twenty).
MAX_INT_CHARS = 100
#: Longest name a claim or policy may give (a claim, system, judge, family or seed): names are
#: printed in every report and message, so a longer one is refused, never echoed whole.
MAX_NAME_CHARS = 200
#: C0 and C1 control characters (NUL, newline, escape, ...): no name may hold one (a newline would
#: split a report line, an escape drive the terminal, and XML 1.0, the JUnit report, has no way to
#: write most of them).
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")


def _plain_name(value: str) -> str:
    if CONTROL_CHARACTERS.search(value):
        raise ValueError("holds a control character (NUL, newline, tab, escape, ...), which no name may")
    return value


#: A name in a claim or policy file: one line of 1 to :data:`MAX_NAME_CHARS` characters, no control
#: character. (Markdown is escaped where names are rendered, ``reports.markdown.md``.)
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_plain_name), Strict()]
#: A number in a claim or policy file: an integer or a float as YAML writes them; a string
#: (``!!str 0.608``, ``"0.608"``) or a boolean is refused, never coerced.
Number = Annotated[float, Strict()]
#: An integer in a claim or policy file; ``true`` or ``"3"`` is refused, never coerced.
Count = Annotated[int, Strict()]


class StrictSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys, deep nesting and alias bombs."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0  # of the node being composed

    def compose_node(self, parent, index):
        depth = self._depth + 1
        if depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
            )
        self._depth = depth
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth - 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges; explicit keys may override merged ones
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found a {type(key).__name__} as a key; keys are plain names",
                    key_node.start_mark,
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        # Python refuses to read a decimal integer of more than 4,300 digits (a ValueError), and one
        # in hex it reads fails later, wherever it is printed
        if len(str(node.value)) > MAX_INT_CHARS:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"an integer of {len(str(node.value)):,} characters is longer than the {MAX_INT_CHARS} any value "
                "here needs",
                node.start_mark,
            )
        return super().construct_yaml_int(node)


StrictSafeLoader.add_constructor("tag:yaml.org,2002:int", StrictSafeLoader.construct_yaml_int)


def read_yaml_mapping(
    path: str | Path, what: str, error: type[InputError] = InputError, *, empty_ok: bool = False
) -> dict:
    """The mapping a YAML file holds; ``what`` names the file in messages ("Claim file", ...).

    Raises
    ------
    InputError (or the subclass ``error``)
        When the file is missing, a folder, too large, not UTF-8, not YAML, an alias bomb, nested
        too deep, holds a key twice, or holds anything but a mapping (an empty file too, unless
        ``empty_ok``).
    """
    path = Path(path)
    try:
        path.stat()
    except FileNotFoundError:
        pass  # said below, with what to do
    except (OSError, ValueError) as exc:  # a NUL byte, an over-long name, a symlink loop
        raise error(
            f"{what} {str(path)!r} cannot be opened: {exc}.", fix=f"pass the path of a {what.lower()}"
        ) from None
    if path.is_dir():
        raise error(f"{path} is a directory, not a {what.lower()}.", fix=f"pass the path of a {what.lower()}")
    if not path.is_file():
        raise error(f"{what} {path} does not exist.", fix=f"pass the path of a {what.lower()}")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise error(f"{what} {path} is {size:,} bytes, more than {MAX_BYTES:,}.", fix=f"is this a {what.lower()}?")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8-sig"), Loader=StrictSafeLoader)
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start}).", fix="save it as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise error(
            f"{what} {path} is not valid YAML.",
            [Problem(str(path), line, None, str(getattr(exc, "problem", exc)))],
            fix="fix the YAML at the line shown",
        ) from None
    except RecursionError:
        raise error(f"{what} {path} nests too deeply to read.", fix="flatten it") from None
    if _expanded_size(raw, {}) > MAX_NODES:
        raise error(
            f"{what} {path} expands to more than {MAX_NODES:,} values through its aliases (an alias bomb).",
            fix="write the values out; a claim or policy needs a few dozen",
        )
    if raw is None and empty_ok:
        return {}
    if raw is None:
        raise error(f"{what} {path} is empty.", fix="see the docs for its keys")
    if not isinstance(raw, dict):
        raise error(
            f"{what} {path} must hold a YAML mapping (key: value pairs), not {type(raw).__name__}.",
            fix="see the docs for its keys",
        )
    return raw


def _expanded_size(value, sizes: dict[int, int]) -> int:
    """How many values ``value`` holds with every shared (aliased) part counted where it is used;
    memoised on identity, so a bomb is measured without being expanded."""
    if not isinstance(value, (dict, list)):
        return 1
    key = id(value)
    if key not in sizes:
        sizes[key] = MAX_NODES + 1  # a self-referencing alias counts as too large
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        sizes[key] = 1 + sum(_expanded_size(child, sizes) for child in children)
    return sizes[key]


def problems_from_validation(path: Path, error, unknown_key: str = "unknown key") -> list[Problem]:
    """One :class:`Problem` per error of a pydantic ``ValidationError``, naming the field."""
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or None
        message = unknown_key if item["type"] == "extra_forbidden" else item["msg"]
        problems.append(Problem(str(path), None, field, message))
    return problems
